// q4_1, grouped: field 0 qs[16] (nibbles as q4_0), field 1 f16 d | f16 m
// (one word a block); value = d * nibble + m.
#define QK 32u
#define QU 1u
#define QMINS
vec4 dq4(qblock b, uint j) {
    uint w = QW(b.f1 + b.i);
    return nib4(QW(b.f0 + 4u * b.i + (j & 3u)), (j >> 2) * 4u) * f16lo(w) + f16hi(w);
}
uvec2 unit_x(uint u) {
    return uvec2(0u, 16u);
}
void unit(qblock b, uint u, out vec4 q[8], out vec4 ab) {
    uvec4 w = QW4((b.f0 >> 2u) + b.i);
    vec2 dm = unpackHalf2x16(QW(b.f1 + b.i));
    QNIB8(q, w, 0.0);
    ab = vec4(dm.x, dm.y, dm.x, dm.y);
}
// The unit split in two (see common.glsl): the quants' uvec4, then the
// uvec4 holding d | m.
void unit_raw(qblock b, uint u, out uvec4 r[4]) {
    r[0] = QW4((b.f0 >> 2u) + b.i);
    r[1] = QW4((b.f1 + b.i) >> 2u);
    r[2] = uvec4(0u);
    r[3] = uvec4(0u);
}
void unit_dec(uvec4 r[4], qblock b, uint u, out vec4 q[8], out vec4 ab) {
    vec2 dm = unpackHalf2x16(qw_pick(r[1], b.f1 + b.i));
    QNIB8(q, r[0], 0.0);
    ab = vec4(dm.x, dm.y, dm.x, dm.y);
}
void unit_dec_half(uvec4 r[4], qblock b, uint u, uint h, out vec4 q[4], out vec2 ab) {
    vec2 dm = unpackHalf2x16(qw_pick(r[1], b.f1 + b.i));
    QNIB4H(q, r[0], h, 0.0);
    ab = dm;
}
#ifdef GEMV_LEAN // the quarter units serve only those GEMVs
// The GEMV's quarter units (see common.glsl): vec4 j of run h, its quants
// only, and the run's scale and offset (d | m, the block's).
vec4 unit_q4(qblock b, uint u, uint h, uint j) {
    uint q = (QW(b.f0 + 4u * b.i + j) >> (4u * h)) & 0x0f0f0f0fu;
    return vec4((uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu);
}
vec2 unit_ab(qblock b, uint u, uint h) {
    return unpackHalf2x16(QW(b.f1 + b.i));
}
#endif
