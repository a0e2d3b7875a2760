// q3_k, 112 bytes (the file's 110 and 2 of padding): hmask[32] (words
// 0..7), qs[64] (words 8..23), scales[12] (words 24..26: 16 six-bit signed
// scales), f16 d | pad (word 27). Element e = 128h + 32r + l: low 2 bits at
// bit 2r of qs[32h + l], third bit at bit 4h + r of hmask[l]; value =
// d * scale * (q - (third bit ? 0 : 4)).
#define QK 256u
vec4 dq4(qblock b, uint j) {
    uint h = j >> 5, r = (j >> 3) & 3u, l4 = j & 7u;
    uint s = j >> 2; // scale index: element / 16
    uint lo = s < 8u ? (qbyte(b.f0, 96u + s) & 0xfu) : (qbyte(b.f0, 88u + s) >> 4);
    uint hi = (qbyte(b.f0, 104u + (s & 3u)) >> (2u * (s >> 2))) & 3u;
    float dl = f16lo(QW(b.f0 + 27u)) * float(int(lo | (hi << 4)) - 32);
    vec4 q = crumb4(QW(b.f0 + 8u + 8u * h + l4), 2u * r);
    uint hm = QW(b.f0 + l4) >> (4u * h + r);
    vec4 m = vec4((uvec4(hm) >> uvec4(0u, 8u, 16u, 24u)) & 1u);
    return dl * (q - 4.0 + 4.0 * m);
}
#ifdef GEMV_LEAN // the GEMV's quarter units (see common.glsl) serve only those GEMVs
// dq4's quants without their scale (the third bit or'ed in at bit 2:
// q + 4m = q | 4m), and the scale of the run of 16 elements s.
vec4 dq4_q(qblock b, uint j) {
    uint h = j >> 5, r = (j >> 3) & 3u, l4 = j & 7u;
    uint q = (QW(b.f0 + 8u + 8u * h + l4) >> (2u * r)) & 0x03030303u;
    uint m = ((QW(b.f0 + l4) >> (4u * h + r)) & 0x01010101u) << 2u;
    return vec4((uvec4(q | m) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu) - 4.0;
}
vec2 dq4_ab(qblock b, uint s) {
    uint lo = s < 8u ? (qbyte(b.f0, 96u + s) & 0xfu) : (qbyte(b.f0, 88u + s) >> 4);
    uint hi = (qbyte(b.f0, 104u + (s & 3u)) >> (2u * (s >> 2))) & 3u;
    return vec2(f16lo(QW(b.f0 + 27u)) * float(int(lo | (hi << 4)) - 32), 0.0);
}
#endif
