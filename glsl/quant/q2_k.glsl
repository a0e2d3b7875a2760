// q2_k (84 bytes, 21 words, as in the file): scales[16] (words 0..3; low
// nibble scale, high nibble min, per 16 elements), qs[64] (words 4..19),
// f16 d | f16 dmin (word 20). Element e = 128h + 32r + l: bits 2r of
// qs[32h + l].
#define QK 256u
#define QMINS
// The quants of elements 128h + 32r + 4l4 .. +3, without their scale.
vec4 q2_quants(qblock b, uint h, uint r, uint l4) {
    uint q = (QW(b.f0 + 4u + 8u * h + l4) >> (2u * r)) & 0x03030303u;
    return vec4((uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu);
}
// dq4's quants without their scale (the GEMV's quarter units, see
// common.glsl), and the scale and offset of the run of 16 elements s.
vec4 dq4_q(qblock b, uint j) {
    return q2_quants(b, j >> 5, (j >> 3) & 3u, j & 7u);
}
vec2 dq4_ab(qblock b, uint s) {
    uint sc = qbyte(b.f0, s);
    vec2 dm = unpackHalf2x16(QW(b.f0 + 20u));
    return vec2(dm.x * float(sc & 0xfu), -dm.y * float(sc >> 4));
}
vec4 dq4(qblock b, uint j) {
    vec2 ab = dq4_ab(b, j >> 2);
    return ab.x * dq4_q(b, j) + ab.y;
}
// The run of 16 elements s: its quants and its scale and offset (a run of
// common.glsl's unit, for src/kernels/wload.c's units of a type without
// them; the words' places computed once a run, not from each vec4's index).
void dq4_run(qblock b, uint s, out vec4 q[4], out vec2 ab) {
    for (uint i = 0u; i < 4u; i++) {
        q[i] = q2_quants(b, s >> 3, (s >> 1) & 3u, 4u * (s & 1u) + i);
    }
    ab = dq4_ab(b, s);
}
