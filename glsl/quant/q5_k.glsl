// q5_k (176 bytes, 44 words, as in the file): as q4_k with qh[32] (words
// 4..11) before qs[128] (words 12..43); bit 2c (low half of chunk c) or
// 2c + 1 (high half) of qh[l] is the fifth bit. GEMV units as q4_k's: unit
// 2c + h reads qs[32c + 16h ..] and qh[16h ..].
#define QK 256u
#define QU 8u
#define QMINS
vec4 dq4(qblock b, uint j) {
    uint s = j >> 3;
    uvec2 sm = scale_min_k4(b.f0, s);
    uint w = QW(b.f0);
    float d1 = f16lo(w) * float(sm.x), m1 = f16hi(w) * float(sm.y);
    uint c = j >> 4, l4 = j & 7u;
    uint hw = QW(b.f0 + 4u + l4) >> s; // bit s = 2c + (high half)
    vec4 hi = vec4((uvec4(hw) >> uvec4(0u, 8u, 16u, 24u)) & 1u) * 16.0;
    return d1 * (nib4(QW(b.f0 + 12u + 8u * c + l4), (s & 1u) * 4u) + hi) - m1;
}
uvec2 unit_x(uint u) {
    uint o = 64u * (u >> 1) + 16u * (u & 1u);
    return uvec2(o, o + 32u);
}
void unit(qblock b, uint u, out vec4 q[8], out vec4 ab) {
    uint c = u >> 1;
    uvec4 h = QW4(b.f0 >> 2u);
    uvec4 qh = QW4((b.f0 >> 2u) + 1u + (u & 1u));
    uvec4 w = QW4((b.f0 >> 2u) + 3u + u);
    vec2 dm = unpackHalf2x16(h.x);
    vec4 sm = scale_min_k4_pair(h, c);
    // the fifth bits of sub-block 2c at bit 4 of each byte, of 2c + 1 at bit 5
    uvec4 hb = (qh >> (2u * c)) << 4u;
    uvec4 lo = hb & 0x10101010u, hi = (hb >> 1u) & 0x10101010u;
    QBITS8(q, w, lo, hi, 0.0);
    ab = vec4(dm.x * sm.x, -dm.y * sm.z, dm.x * sm.y, -dm.y * sm.w);
}
// The unit split in two (see common.glsl): the block's head (d, dmin,
// scales), the unit's qh, then its quants.
void unit_raw(qblock b, uint u, out uvec4 r[4]) {
    r[0] = QW4(b.f0 >> 2u);
    r[1] = QW4((b.f0 >> 2u) + 1u + (u & 1u));
    r[2] = QW4((b.f0 >> 2u) + 3u + u);
    r[3] = uvec4(0u);
}
void unit_dec(uvec4 r[4], qblock b, uint u, out vec4 q[8], out vec4 ab) {
    uint c = u >> 1;
    uvec4 w = r[2];
    vec2 dm = unpackHalf2x16(r[0].x);
    vec4 sm = scale_min_k4_pair(r[0], c);
    uvec4 hb = (r[1] >> (2u * c)) << 4u;
    uvec4 lo = hb & 0x10101010u, hi = (hb >> 1u) & 0x10101010u;
    QBITS8(q, w, lo, hi, 0.0);
    ab = vec4(dm.x * sm.x, -dm.y * sm.z, dm.x * sm.y, -dm.y * sm.w);
}
void unit_dec_half(uvec4 r[4], qblock b, uint u, uint h, out vec4 q[4], out vec2 ab) {
    uint c = u >> 1;
    vec2 dm = unpackHalf2x16(r[0].x);
    vec4 sm = scale_min_k4_pair(r[0], c);
    uvec4 m4 = ((r[1] >> (2u * c + h)) << 4u) & 0x10101010u;
    QBITS4H(q, r[2], h, m4, 0.0);
    ab = h == 0u ? vec2(dm.x * sm.x, -dm.y * sm.z) : vec2(dm.x * sm.y, -dm.y * sm.w);
}
#ifdef GEMV_LEAN // the quarter units serve only those GEMVs
// The GEMV's quarter units (see common.glsl): vec4 j of run h, its quants
// only (word j of the unit's qs uvec4, low nibbles for run 0, high for 1,
// with the fifth bits, bit 2c + h of word j of its qh uvec4), and the
// run's scale and offset (sub-block 2c + h of chunk c = u / 2), as q4_k's.
vec4 unit_q4(qblock b, uint u, uint h, uint j) {
    uint qh = QW(b.f0 + 4u + 4u * (u & 1u) + j);
    uint m = ((qh >> (2u * (u >> 1) + h)) << 4u) & 0x10101010u;
    uint q = ((QW(b.f0 + 12u + 4u * u + j) >> (4u * h)) & 0x0f0f0f0fu) | m;
    return vec4((uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu);
}
vec2 unit_ab(qblock b, uint u, uint h) {
    return k4_unit_ab(b, u, h);
}
#endif
