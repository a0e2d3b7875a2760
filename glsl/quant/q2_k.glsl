// q2_k (84 bytes, 21 words, as in the file): scales[16] (words 0..3; low
// nibble scale, high nibble min, per 16 elements), qs[64] (words 4..19),
// f16 d | f16 dmin (word 20). Element e = 128h + 32r + l: bits 2r of
// qs[32h + l].
#define QK 256u
vec4 dq4(qblock b, uint j) {
    uint h = j >> 5, r = (j >> 3) & 3u;
    uint sc = qbyte(b.f0, j >> 2);
    uint w = QW(b.f0 + 20u);
    float dl = f16lo(w) * float(sc & 0xfu), ml = f16hi(w) * float(sc >> 4);
    return dl * crumb4(QW(b.f0 + 4u + 8u * h + (j & 7u)), 2u * r) - ml;
}
#ifdef GEMV_LEAN // the GEMV's quarter units (see common.glsl) serve only those GEMVs
#define QMINS
// dq4's quants without their scale, and the scale and offset of the run of
// 16 elements s.
vec4 dq4_q(qblock b, uint j) {
    uint q = (QW(b.f0 + 4u + 8u * (j >> 5) + (j & 7u)) >> (2u * ((j >> 3) & 3u))) & 0x03030303u;
    return vec4((uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu);
}
vec2 dq4_ab(qblock b, uint s) {
    uint sc = qbyte(b.f0, s);
    vec2 dm = unpackHalf2x16(QW(b.f0 + 20u));
    return vec2(dm.x * float(sc & 0xfu), -dm.y * float(sc >> 4));
}
#endif
