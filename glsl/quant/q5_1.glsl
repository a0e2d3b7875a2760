// q5_1, grouped: field 0 qs[16], field 1 qh (one word a block), field 2
// f16 d | f16 m (one word); value = d * q + m.
#define QK 32u
#define QU 1u
#define QMINS
vec4 dq4(qblock b, uint j) {
    uint w = QW(b.f2 + b.i);
    uint hb = QW(b.f1 + b.i) >> (4u * j);
    vec4 hi = vec4((uvec4(hb) >> uvec4(0u, 1u, 2u, 3u)) & 1u) * 16.0;
    return (nib4(QW(b.f0 + 4u * b.i + (j & 3u)), (j >> 2) * 4u) + hi) * f16lo(w) + f16hi(w);
}
uvec2 unit_x(uint u) {
    return uvec2(0u, 16u);
}
void unit(qblock b, uint u, out vec4 q[8], out vec4 ab) {
    uvec4 w = QW4((b.f0 >> 2u) + b.i);
    uint h = QW(b.f1 + b.i);
    vec2 dm = unpackHalf2x16(QW(b.f2 + b.i));
    uvec4 lo = uvec4(qh_spread(h, 0u), qh_spread(h, 1u), qh_spread(h, 2u), qh_spread(h, 3u));
    uvec4 hi = uvec4(qh_spread(h, 4u), qh_spread(h, 5u), qh_spread(h, 6u), qh_spread(h, 7u));
    QBITS8(q, w, lo, hi, 0.0);
    ab = vec4(dm.x, dm.y, dm.x, dm.y);
}
// The unit split in two (see common.glsl): the quants' uvec4, the uvec4
// holding qh, then the one holding d | m.
void unit_raw(qblock b, uint u, out uvec4 r[4]) {
    r[0] = QW4((b.f0 >> 2u) + b.i);
    r[1] = QW4((b.f1 + b.i) >> 2u);
    r[2] = QW4((b.f2 + b.i) >> 2u);
    r[3] = uvec4(0u);
}
void unit_dec(uvec4 r[4], qblock b, uint u, out vec4 q[8], out vec4 ab) {
    uvec4 w = r[0];
    uint h = qw_pick(r[1], b.f1 + b.i);
    vec2 dm = unpackHalf2x16(qw_pick(r[2], b.f2 + b.i));
    uvec4 lo = uvec4(qh_spread(h, 0u), qh_spread(h, 1u), qh_spread(h, 2u), qh_spread(h, 3u));
    uvec4 hi = uvec4(qh_spread(h, 4u), qh_spread(h, 5u), qh_spread(h, 6u), qh_spread(h, 7u));
    QBITS8(q, w, lo, hi, 0.0);
    ab = vec4(dm.x, dm.y, dm.x, dm.y);
}
void unit_dec_half(uvec4 r[4], qblock b, uint u, uint h, out vec4 q[4], out vec2 ab) {
    uint qh = qw_pick(r[1], b.f1 + b.i);
    vec2 dm = unpackHalf2x16(qw_pick(r[2], b.f2 + b.i));
    uint k = 4u * h;
    uvec4 m4 = uvec4(qh_spread(qh, k), qh_spread(qh, k + 1u), qh_spread(qh, k + 2u), qh_spread(qh, k + 3u));
    QBITS4H(q, r[0], h, m4, 0.0);
    ab = dm;
}
#ifdef GEMV_LEAN // the quarter units serve only those GEMVs
// The GEMV's quarter units (see common.glsl): vec4 j of run h, its quants
// only (the nibbles of word j with their fifth bits, qh's bits 16h + 4j
// ..), and the run's scale and offset (d | m, the block's).
vec4 unit_q4(qblock b, uint u, uint h, uint j) {
    uint m = qh_spread(QW(b.f1 + b.i), 4u * h + j);
    uint q = ((QW(b.f0 + 4u * b.i + j) >> (4u * h)) & 0x0f0f0f0fu) | m;
    return vec4((uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu);
}
vec2 unit_ab(qblock b, uint u, uint h) {
    return unpackHalf2x16(QW(b.f2 + b.i));
}
#endif
