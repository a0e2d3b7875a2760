// Shared helpers of the dequantizing snippets. Quantized weights live in a
// `uint` storage buffer named by the macro QW, block after block, each block
// repacked at upload to a whole number of words (see src/quant/gpu.c). Every
// type's snippet defines QK (elements per block), QWORDS (words per block)
// and `vec4 dq4(uint b, uint j)`: elements 4j .. 4j+3 of the block whose
// first word is b.

// Byte k of the block at word b.
uint qbyte(uint b, uint k) {
    return (QW[b + (k >> 2u)] >> ((k & 3u) * 8u)) & 0xffu;
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
