// Shared helpers of the dequantizing snippets. Weights are read through two
// macros the includer defines over its binding: QW(i), 32-bit word i, and
// QW4(i), the uvec4 of words 4i .. 4i+3 (one 16-byte load where the binding
// is a uvec4 array). Blocks are repacked at upload (src/quant/gpu.c): in
// groups whose fields (quants, scales, ...) are stored array after array;
// qlocate(row, nb, blk), written from gpu.c's table after these helpers,
// says where block blk of a row starts in each field array. Every type's
// snippet defines QK (elements per block) and `vec4 dq4(qblock b, uint j)`:
// elements 4j .. 4j+3 of block b. The types with a fast GEMV path also
// define QU (32-element units per block), `uvec2 unit_x(uint u)` (the
// offsets in the block of unit u's two runs of 16 elements) and
// `void unit(qblock b, uint u, out vec4 q[8], out vec4 ab)`: the unit's
// quants as floats, q[0..3] the first run, q[4..7] the second, whose
// values are ab.x * q + ab.y and ab.z * q + ab.w (scales applied after the
// dot product, once per run). Some also split unit in two for the GEMV's
// pipelined units, which load the next unit's words before decoding these:
// `void unit_raw(qblock b, uint u, out uvec4 r[4])` only loads (whole
// uvec4, nothing computed from them) and `void unit_dec(uvec4 r[4], qblock
// b, uint u, out vec4 q[8], out vec4 ab)` gives unit's q and ab from them,
// its b the block's place counted from its row's start (rows start on 16
// bytes, so a word's place in its uvec4 is the same). The plain types'
// punit has the same pair, praw and pdec. Some also decode half a unit
// from the same words, for a GEMM invocation that stages only one of its
// runs: `void unit_dec_half(uvec4 r[4], qblock b, uint u, uint h, out vec4
// q[4], out vec2 ab)`, run h's quants and its scale and offset. Some
// also give a run a vec4 at a time, for the GEMV's quarter units (the
// fewest registers): `vec4 unit_q4(qblock b, uint u, uint h, uint j)`,
// q[4h + j] of unit's (its quants only, loading just the words it needs),
// and `vec2 unit_ab(qblock b, uint u, uint h)`, ab.xy (h = 0) or ab.zw,
// only in kernels with GEMV_LEAN (the only ones that call them: other
// kernels' text stays as it was). Block types without the fast path may
// split dq4 the same way: `vec4 dq4_q(qblock b, uint j)`, its quants
// without their scale, and `vec2 dq4_ab(qblock b, uint s)`, the scale and
// offset of the run of 16 elements s (the GEMV's quarter units), and give
// a run whole, `void dq4_run(qblock b, uint s, out vec4 q[4], out vec2
// ab)`, for src/kernels/wload.c's units of those types (QMINS defined
// where the runs have offsets).

// Word i & 3 of v, by selects (a dynamically indexed vector can become
// branches); QW uses it where the binding is a uvec4 array.
uint qw_pick(uvec4 v, uint i) {
    return (i & 2u) != 0u ? ((i & 1u) != 0u ? v.w : v.z) : ((i & 1u) != 0u ? v.y : v.x);
}

// The words where a block's field arrays start, and its index in its group.
struct qblock {
    uint f0;
    uint f1;
    uint f2;
    uint i;
};

// Byte k counted from word w.
uint qbyte(uint w, uint k) {
    return (QW(w + (k >> 2u)) >> ((k & 3u) * 8u)) & 0xffu;
}

// Half i of an array of f16 that starts at word w.
float qhalf(uint w, uint i) {
    vec2 v = unpackHalf2x16(QW(w + (i >> 1u)));
    return (i & 1u) == 0u ? v.x : v.y;
}

// The four nibbles at bit sh of the four bytes of w (sh = 0: low nibbles).
vec4 nib4(uint w, uint sh) {
    return vec4((uvec4(w) >> uvec4(sh, sh + 8u, sh + 16u, sh + 24u)) & 0xfu);
}

// The four 2-bit fields at bit sh of the four bytes of w.
vec4 crumb4(uint w, uint sh) {
    return vec4((uvec4(w) >> uvec4(sh, sh + 8u, sh + 16u, sh + 24u)) & 3u);
}

// The four signed bytes of w.
vec4 int8x4(uint w) {
    ivec4 v = ivec4(uvec4(w) << uvec4(24u, 16u, 8u, 0u)) >> 24;
    return vec4(v);
}

// f16 in the low / high half of word w.
float f16lo(uint w) { return unpackHalf2x16(w).x; }
float f16hi(uint w) { return unpackHalf2x16(w).y; }

// Exact small integers from bit fields without an integer-to-float
// conversion (a slow instruction on many GPUs; the GEMV's unit decoders
// run one per weight): a field of at most 23 - p bits at bit p, or'ed into
// the mantissa of 2^23, reads as 2^23 + v * 2^p, and a multiply-add (a
// power-of-two scale, then a subtraction whose exact result is small: exact
// with or without contraction into an fma) gives v - o.
// The 8-bit fields of the four bytes of w (each below 2^6 where the callers
// pack 5 or 6 bits), minus o.
vec4 bytes4m(uint w, float o) {
    uint h = w >> 16u;
    vec4 f = uintBitsToFloat(uvec4(w & 0xffu, w & 0xff00u, h & 0xffu, h & 0xff00u) | 0x4b000000u);
    return f * vec4(1.0, 1.0 / 256.0, 1.0, 1.0 / 256.0) + (vec4(-8388608.0, -32768.0, -8388608.0, -32768.0) - o);
}
// The low nibbles of the four bytes of w, minus o.
vec4 nib_lo4m(uint w, float o) {
    uint h = w >> 12u;
    vec4 f = uintBitsToFloat(uvec4(w & 0xfu, w & 0xf00u, w & 0xf0000u, h & 0xf000u) | 0x4b000000u);
    return f * vec4(1.0, 1.0 / 256.0, 1.0 / 65536.0, 1.0 / 4096.0) + (vec4(-8388608.0, -32768.0, -128.0, -2048.0) - o);
}
// The high nibbles of the four bytes of w, minus o.
vec4 nib_hi4m(uint w, float o) {
    uint h = w >> 12u;
    vec4 f = uintBitsToFloat(uvec4(w & 0xf0u, w & 0xf000u, h & 0xf00u, h & 0xf0000u) | 0x4b000000u);
    return f * vec4(1.0 / 16.0, 1.0 / 4096.0, 1.0 / 256.0, 1.0 / 65536.0) + (vec4(-524288.0, -2048.0, -32768.0, -128.0) - o);
}
// A unit's eight vec4 from its quants' uvec4 src (unit and unit_dec share
// them; macros, so the code is the same text as written out, with no
// function a compiler could keep out of line with its array in memory):
// QNIB8, byte l's low nibble in dst[l / 4] and its high nibble in
// dst[4 + l / 4], minus off; QBITS8, the same nibbles with more bits at
// bits 4.. of each byte, component i of lo4 for the low nibbles of word i
// and of hi4 for the high ones. (No parameter may be named x, y, z or w:
// the swizzles would take it.)
#define QNIB8(dst, src, off)                                                  \
    dst[0] = nib_lo4m(src.x, off);                                            \
    dst[1] = nib_lo4m(src.y, off);                                            \
    dst[2] = nib_lo4m(src.z, off);                                            \
    dst[3] = nib_lo4m(src.w, off);                                            \
    dst[4] = nib_hi4m(src.x, off);                                            \
    dst[5] = nib_hi4m(src.y, off);                                            \
    dst[6] = nib_hi4m(src.z, off);                                            \
    dst[7] = nib_hi4m(src.w, off)
// QNIB4H: the low (h = 0) or high (h = 1) nibbles of src's bytes (half h
// of QNIB8) into dst[0..3].
#define QNIB4H(dst, src, h, off)                                              \
    dst[0] = nib_lo4m(src.x >> (4u * h), off);                                \
    dst[1] = nib_lo4m(src.y >> (4u * h), off);                                \
    dst[2] = nib_lo4m(src.z >> (4u * h), off);                                \
    dst[3] = nib_lo4m(src.w >> (4u * h), off)
#define QBITS8(dst, src, lo4, hi4, off)                                       \
    dst[0] = bytes4m((src.x & 0x0f0f0f0fu) | lo4.x, off);                     \
    dst[1] = bytes4m((src.y & 0x0f0f0f0fu) | lo4.y, off);                     \
    dst[2] = bytes4m((src.z & 0x0f0f0f0fu) | lo4.z, off);                     \
    dst[3] = bytes4m((src.w & 0x0f0f0f0fu) | lo4.w, off);                     \
    dst[4] = bytes4m(((src.x >> 4u) & 0x0f0f0f0fu) | hi4.x, off);             \
    dst[5] = bytes4m(((src.y >> 4u) & 0x0f0f0f0fu) | hi4.y, off);             \
    dst[6] = bytes4m(((src.z >> 4u) & 0x0f0f0f0fu) | hi4.z, off);             \
    dst[7] = bytes4m(((src.w >> 4u) & 0x0f0f0f0fu) | hi4.w, off)
// QBITS4H: half h of QBITS8 into dst[0..3], m4 the more bits of that half
// (QBITS8's lo4 for h = 0, hi4 for h = 1).
#define QBITS4H(dst, src, h, m4, off)                                         \
    dst[0] = bytes4m(((src.x >> (4u * h)) & 0x0f0f0f0fu) | m4.x, off);        \
    dst[1] = bytes4m(((src.y >> (4u * h)) & 0x0f0f0f0fu) | m4.y, off);        \
    dst[2] = bytes4m(((src.z >> (4u * h)) & 0x0f0f0f0fu) | m4.z, off);        \
    dst[3] = bytes4m(((src.w >> (4u * h)) & 0x0f0f0f0fu) | m4.w, off)
// The four signed bytes of w (bias 128 by flipping the sign bits).
vec4 sbytes4(uint w) {
    return bytes4m(w ^ 0x80808080u, 128.0);
}
// Bits 4k .. 4k+3 of w spread to bit 4 of the four bytes (the fifth bits of
// q5_0/q5_1 for the elements of quant word k): x * 0x2040810 puts bit j of
// x at bit 8j + 4, and no two partial products overlap.
uint qh_spread(uint w, uint k) {
    return (((w >> (4u * k)) & 0xfu) * 0x2040810u) & 0x10101010u;
}

// The 6-bit scale (x) and min (y) of sub-block s (0..7) of a q4_k or q5_k
// block at word b, whose scales[12] are bytes 4..15: sub-blocks 0..3 keep
// theirs in the low 6 bits of scales[s] and scales[s + 4]; 4..7 in the
// nibbles of scales[s + 4] with the high 2 bits from the top of scales[s - 4]
// and scales[s] (ggml's get_scale_min_k4).
uvec2 scale_min_k4(uint b, uint s) {
    if (s < 4u) {
        return uvec2(qbyte(b, 4u + s) & 63u, qbyte(b, 8u + s) & 63u);
    }
    return uvec2((qbyte(b, 8u + s) & 0xfu) | ((qbyte(b, s) >> 6) << 4),
                 (qbyte(b, 8u + s) >> 4) | ((qbyte(b, 4u + s) >> 6) << 4));
}
// The same for the scales of sub-blocks 2c and 2c + 1 at once, from the
// block's first uvec4 h (d | dmin, scales[0..11]): scales in x, y, mins in
// z, w (as exact floats).
vec4 scale_min_k4_pair(uvec4 h, uint c) {
    uint sc = c < 2u ? h.y & 0x3f3f3f3fu : (h.w & 0x0f0f0f0fu) | ((h.y >> 2u) & 0x30303030u);
    uint mn = c < 2u ? h.z & 0x3f3f3f3fu : ((h.w >> 4u) & 0x0f0f0f0fu) | ((h.z >> 2u) & 0x30303030u);
    uint sh = (c & 1u) * 16u;
    return bytes4m(((sc >> sh) & 0xffffu) | ((mn >> sh) << 16u), 0.0);
}
#ifdef GEMV_LEAN
// The K-quants' (q4_k, q5_k) unit_ab: run h of unit u's scale and offset,
// sub-block 2c + h of chunk c = u / 2, from the block's first uvec4.
vec2 k4_unit_ab(qblock b, uint u, uint h) {
    uvec4 hd = QW4(b.f0 >> 2u);
    vec2 dm = unpackHalf2x16(hd.x);
    vec4 sm = scale_min_k4_pair(hd, u >> 1);
    return h == 0u ? vec2(dm.x * sm.x, -dm.y * sm.z) : vec2(dm.x * sm.y, -dm.y * sm.w);
}
#endif

// Code-book lookups without indexed constant arrays (which some compilers
// place in slow local memory): the 16 signed byte values live four to a word.
float sbyte_of(uvec4 packed_table, uint q) {
    uint w = (q & 8u) != 0u ? ((q & 4u) != 0u ? packed_table.w : packed_table.z)
                            : ((q & 4u) != 0u ? packed_table.y : packed_table.x);
    return float(int(w << (24u - 8u * (q & 3u))) >> 24);
}
vec4 sbyte4_of(uvec4 packed_table, uvec4 q) {
    return vec4(sbyte_of(packed_table, q.x), sbyte_of(packed_table, q.y),
                sbyte_of(packed_table, q.z), sbyte_of(packed_table, q.w));
}
// kvalues_iq4nl: -127 -104 -83 -65 | -49 -35 -22 -10 | 1 13 25 38 | 53 69 89 113
const uvec4 IQ4NL_PACKED = uvec4(0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u);
// kvalues_mxfp4 (E2M1 doubled): 0 1 2 3 | 4 6 8 12 | 0 -1 -2 -3 | -4 -6 -8 -12
const uvec4 MXFP4_PACKED = uvec4(0x03020100u, 0x0C080604u, 0xFDFEFF00u, 0xF4F8FAFCu);
