// q6_k, grouped: field 0 the block's ql[128] (words 0..31), qh[64] (words
// 32..47), int8 scales[16] (words 48..51): 52 words a block; field 1 d
// (f16). Element e = 128h + 32r + l: low nibble of ql[64h + 32(r & 1) + l]
// (r < 2) or its high nibble, top two bits at bit 2r of qh[32h + l];
// value = d * scale[e / 16] * (q - 32). GEMV unit u = 4h + 2r1 + j: the 16
// bytes ql[64h + 32r1 + 16j ..] (low nibbles: r = r1, high: r = r1 + 2)
// with qh[32h + 16j ..].
#define QK 256u
#define QU 8u
vec4 dq4(qblock b, uint j) {
    uint base = b.f0 + 52u * b.i;
    uint h = j >> 5, r = (j >> 3) & 3u, l4 = j & 7u;
    vec4 lo = nib4(QW(base + 16u * h + 8u * (r & 1u) + l4), (r >> 1) * 4u);
    vec4 hi = crumb4(QW(base + 32u + 8u * h + l4), 2u * r);
    int sc = int(qbyte(base, 192u + (j >> 2)) << 24) >> 24;
    return qhalf(b.f1, b.i) * float(sc) * (lo + hi * 16.0 - 32.0);
}
uvec2 unit_x(uint u) {
    uint o = 128u * (u >> 2) + 32u * ((u >> 1) & 1u) + 16u * (u & 1u);
    return uvec2(o, o + 64u);
}
void unit(qblock b, uint u, out vec4 q[8], out vec4 ab) {
    uint base4 = (b.f0 >> 2u) + 13u * b.i; // 52 words = 13 uvec4 a block
    uint h = u >> 2, r1 = (u >> 1) & 1u, j = u & 1u;
    uvec4 ql = QW4(base4 + 4u * h + 2u * r1 + j);
    uvec4 qh = QW4(base4 + 8u + 2u * h + j);
    uvec4 sw = QW4(base4 + 12u);
    // scales of the two runs: elements (128h + 32r1 + 16j) / 16 and + 4
    uint si = 8u * h + 2u * r1 + j;
    uint s0 = (si & 8u) != 0u ? ((si & 4u) != 0u ? sw.w : sw.z) : ((si & 4u) != 0u ? sw.y : sw.x);
    uint s1 = (si & 8u) != 0u ? sw.w : sw.y;
    float d = qhalf(b.f1, b.i);
    float sc0 = float(int(s0 << (24u - 8u * (si & 3u))) >> 24);
    float sc1 = float(int(s1 << (24u - 8u * (si & 3u))) >> 24);
    // six bits per byte: the nibble and the two top bits at bits 4, 5
    uvec4 lo = (qh << (4u - 2u * r1)) & 0x30303030u;
    uvec4 hi = (qh >> (2u * r1)) & 0x30303030u;
    QBITS8(q, ql, lo, hi, 32.0);
    ab = vec4(d * sc0, 0.0, d * sc1, 0.0);
}
// The unit split in two for the GEMV (see common.glsl): ql, qh, the
// scales, then the uvec4 holding d.
void unit_raw(qblock b, uint u, out uvec4 r[4]) {
    uint base4 = (b.f0 >> 2u) + 13u * b.i;
    uint h = u >> 2, r1 = (u >> 1) & 1u, j = u & 1u;
    r[0] = QW4(base4 + 4u * h + 2u * r1 + j);
    r[1] = QW4(base4 + 8u + 2u * h + j);
    r[2] = QW4(base4 + 12u);
    r[3] = QW4((b.f1 + (b.i >> 1u)) >> 2u);
}
void unit_dec(uvec4 r[4], qblock b, uint u, out vec4 q[8], out vec4 ab) {
    uint h = u >> 2, r1 = (u >> 1) & 1u, j = u & 1u;
    uvec4 ql = r[0], qh = r[1], sw = r[2];
    uint si = 8u * h + 2u * r1 + j;
    uint s0 = (si & 8u) != 0u ? ((si & 4u) != 0u ? sw.w : sw.z) : ((si & 4u) != 0u ? sw.y : sw.x);
    uint s1 = (si & 8u) != 0u ? sw.w : sw.y;
    vec2 dd = unpackHalf2x16(qw_pick(r[3], b.f1 + (b.i >> 1u)));
    float d = (b.i & 1u) == 0u ? dd.x : dd.y;
    float sc0 = float(int(s0 << (24u - 8u * (si & 3u))) >> 24);
    float sc1 = float(int(s1 << (24u - 8u * (si & 3u))) >> 24);
    uvec4 lo = (qh << (4u - 2u * r1)) & 0x30303030u;
    uvec4 hi = (qh >> (2u * r1)) & 0x30303030u;
    QBITS8(q, ql, lo, hi, 32.0);
    ab = vec4(d * sc0, 0.0, d * sc1, 0.0);
}
void unit_dec_half(uvec4 r[4], qblock b, uint u, uint h, out vec4 q[4], out vec2 ab) {
    uint hh = u >> 2, r1 = (u >> 1) & 1u, j = u & 1u;
    uvec4 sw = r[2];
    uint si = 8u * hh + 2u * r1 + j + 4u * h; // the run's scale
    uint sv = (si & 8u) != 0u ? ((si & 4u) != 0u ? sw.w : sw.z) : ((si & 4u) != 0u ? sw.y : sw.x);
    vec2 dd = unpackHalf2x16(qw_pick(r[3], b.f1 + (b.i >> 1u)));
    float d = (b.i & 1u) == 0u ? dd.x : dd.y;
    float sc = float(int(sv << (24u - 8u * (si & 3u))) >> 24);
    // the two top bits of the run's quants at bits 4, 5 (QBITS8's lo, hi)
    uvec4 m4 = h == 0u ? (r[1] << (4u - 2u * r1)) & 0x30303030u : (r[1] >> (2u * r1)) & 0x30303030u;
    QBITS4H(q, r[0], h, m4, 32.0);
    ab = vec2(d * sc, 0.0);
}
#ifdef GEMV_LEAN // the quarter units serve only those GEMVs
// The GEMV's quarter units (see common.glsl): vec4 j of run h, its quants
// only (word j of ql's uvec4, low or high nibbles, with the two top bits
// from word j of qh's), and the run's scale and offset.
vec4 unit_q4(qblock b, uint u, uint h, uint j) {
    uint base = b.f0 + 52u * b.i;
    uint hh = u >> 2, r1 = (u >> 1) & 1u, jj = u & 1u;
    uint ql = QW(base + 16u * hh + 8u * r1 + 4u * jj + j);
    uint qh = QW(base + 32u + 8u * hh + 4u * jj + j);
    uint m = ((qh >> (2u * r1 + 4u * h)) & 0x03030303u) << 4u; // the top bits at bits 4, 5
    uint q = ((ql >> (4u * h)) & 0x0f0f0f0fu) | m;
    return vec4((uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu) - 32.0;
}
vec2 unit_ab(qblock b, uint u, uint h) {
    uint hh = u >> 2, r1 = (u >> 1) & 1u, jj = u & 1u;
    uint si = 8u * hh + 2u * r1 + jj + 4u * h; // the run's scale
    uint sv = QW(b.f0 + 52u * b.i + 48u + (si >> 2));
    float sc = float(int(sv << (24u - 8u * (si & 3u))) >> 24);
    return vec2(qhalf(b.f1, b.i) * sc, 0.0);
}
#endif
