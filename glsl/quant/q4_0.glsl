// q4_0, grouped (src/quant/gpu.c): field 0 qs[16] (f0: 4 words a block),
// field 1 d (f16, f1). Byte l holds element l (low nibble) and element
// l + 16 (high nibble); value = d * (nibble - 8).
#define QK 32u
#define QU 1u
vec4 dq4(qblock b, uint j) {
    float d = qhalf(b.f1, b.i);
    return (nib4(QW(b.f0 + 4u * b.i + (j & 3u)), (j >> 2) * 4u) - 8.0) * d;
}
uvec2 unit_x(uint u) {
    return uvec2(0u, 16u);
}
void unit(qblock b, uint u, out vec4 q[8], out vec4 ab) {
    uvec4 w = QW4((b.f0 >> 2u) + b.i);
    float d = qhalf(b.f1, b.i);
    QNIB8(q, w, 8.0);
    ab = vec4(d, 0.0, d, 0.0);
}
// The unit split in two for the GEMV (unit_raw: its words, loaded; unit_dec:
// the same values as unit from them; common.glsl says how): the quants'
// uvec4, then the uvec4 holding d.
void unit_raw(qblock b, uint u, out uvec4 r[4]) {
    r[0] = QW4((b.f0 >> 2u) + b.i);
    r[1] = QW4((b.f1 + (b.i >> 1u)) >> 2u);
    r[2] = uvec4(0u);
    r[3] = uvec4(0u);
}
void unit_dec(uvec4 r[4], qblock b, uint u, out vec4 q[8], out vec4 ab) {
    vec2 dd = unpackHalf2x16(qw_pick(r[1], b.f1 + (b.i >> 1u)));
    float d = (b.i & 1u) == 0u ? dd.x : dd.y;
    QNIB8(q, r[0], 8.0);
    ab = vec4(d, 0.0, d, 0.0);
}
void unit_dec_half(uvec4 r[4], qblock b, uint u, uint h, out vec4 q[4], out vec2 ab) {
    vec2 dd = unpackHalf2x16(qw_pick(r[1], b.f1 + (b.i >> 1u)));
    float d = (b.i & 1u) == 0u ? dd.x : dd.y;
    QNIB4H(q, r[0], h, 8.0);
    ab = vec2(d, 0.0);
}
#ifdef GEMV_LEAN // the quarter units serve only those GEMVs
// The GEMV's quarter units (see common.glsl): vec4 j of run h, its quants
// only, and the run's scale and offset.
vec4 unit_q4(qblock b, uint u, uint h, uint j) {
    uint q = (QW(b.f0 + 4u * b.i + j) >> (4u * h)) & 0x0f0f0f0fu;
    return vec4((uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu) - 8.0;
}
vec2 unit_ab(qblock b, uint u, uint h) {
    return vec2(qhalf(b.f1, b.i), 0.0);
}
#endif
