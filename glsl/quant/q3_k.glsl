// q3_k, 112 bytes (the file's 110 and 2 of padding): hmask[32] (words
// 0..7), qs[64] (words 8..23), scales[12] (words 24..26: 16 six-bit signed
// scales), f16 d | pad (word 27). Element e = 128h + 32r + l: low 2 bits at
// bit 2r of qs[32h + l], third bit at bit 4h + r of hmask[l]; value =
// d * scale * (q - (third bit ? 0 : 4)).
#define QK 256u
// The quants of elements 128h + 32r + 4l4 .. +3, without their scale (the
// third bit or'ed in at bit 2: q + 4m = q | 4m).
vec4 q3_quants(qblock b, uint h, uint r, uint l4) {
    uint q = (QW(b.f0 + 8u + 8u * h + l4) >> (2u * r)) & 0x03030303u;
    uint m = ((QW(b.f0 + l4) >> (4u * h + r)) & 0x01010101u) << 2u;
    return vec4((uvec4(q | m) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu) - 4.0;
}
// dq4's quants without their scale (the GEMV's quarter units, see
// common.glsl), and the scale of the run of 16 elements s: its low 4 bits
// in the low (s < 8) or high nibble of scales[s % 8], its high 2 bits at
// bit 2(s / 4) of scales[8 + s % 4], each shifted out of its whole word (a
// select between two bytes held more registers: V3D's GEMM spilled).
vec4 dq4_q(qblock b, uint j) {
    return q3_quants(b, j >> 5, (j >> 3) & 3u, j & 7u);
}
vec2 dq4_ab(qblock b, uint s) {
    uint lo = QW(b.f0 + 24u + ((s & 7u) >> 2u)) >> (8u * (s & 3u) + 4u * (s >> 3u));
    uint hi = QW(b.f0 + 26u) >> (8u * (s & 3u) + 2u * (s >> 2u));
    return vec2(f16lo(QW(b.f0 + 27u)) * float(int((lo & 0xfu) | ((hi & 3u) << 4u)) - 32), 0.0);
}
vec4 dq4(qblock b, uint j) {
    return dq4_ab(b, j >> 2).x * dq4_q(b, j);
}
// The run of 16 elements s: its quants and its scale (a run of
// common.glsl's unit, for src/kernels/wload.c's units of a type without
// them; the words' places computed once a run, not from each vec4's index).
void dq4_run(qblock b, uint s, out vec4 q[4], out vec2 ab) {
    for (uint i = 0u; i < 4u; i++) {
        q[i] = q3_quants(b, s >> 3, (s >> 1) & 3u, 4u * (s & 1u) + i);
    }
    ab = dq4_ab(b, s);
}
