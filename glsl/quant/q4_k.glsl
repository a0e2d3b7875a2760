// q4_k (144 bytes, 36 words, as in the file): f16 d | f16 dmin (word 0),
// scales[12] (words 1..3: eight 6-bit scale/min pairs), qs[128] (words
// 4..35). Element e of 64-element chunk c = e / 64: qs[32c + l] low nibble
// (e % 64 < 32) or high nibble; sub-block e / 32 picks the scale and min.
// GEMV unit u = 2c + h: the 16 bytes qs[32c + 16h ..], their low nibbles
// (sub-block 2c) and high nibbles (sub-block 2c + 1).
#define QK 256u
#define QU 8u
#define QMINS
vec4 dq4(qblock b, uint j) {
    uint s = j >> 3; // sub-block
    uvec2 sm = scale_min_k4(b.f0, s);
    uint w = QW(b.f0);
    float d1 = f16lo(w) * float(sm.x), m1 = f16hi(w) * float(sm.y);
    uint c = j >> 4;
    return d1 * nib4(QW(b.f0 + 4u + 8u * c + (j & 7u)), (s & 1u) * 4u) - m1;
}
uvec2 unit_x(uint u) {
    uint o = 64u * (u >> 1) + 16u * (u & 1u);
    return uvec2(o, o + 32u);
}
void unit(qblock b, uint u, out vec4 q[8], out vec4 ab) {
    uint c = u >> 1;
    uvec4 h = QW4(b.f0 >> 2u);
    uvec4 w = QW4((b.f0 >> 2u) + 1u + u);
    vec2 dm = unpackHalf2x16(h.x);
    vec4 sm = scale_min_k4_pair(h, c);
    QNIB8(q, w, 0.0);
    ab = vec4(dm.x * sm.x, -dm.y * sm.z, dm.x * sm.y, -dm.y * sm.w);
}
// The unit split in two for the GEMV (see common.glsl): the block's head
// (d, dmin, scales), then the unit's quants.
void unit_raw(qblock b, uint u, out uvec4 r[4]) {
    r[0] = QW4(b.f0 >> 2u);
    r[1] = QW4((b.f0 >> 2u) + 1u + u);
    r[2] = uvec4(0u);
    r[3] = uvec4(0u);
}
void unit_dec(uvec4 r[4], qblock b, uint u, out vec4 q[8], out vec4 ab) {
    vec2 dm = unpackHalf2x16(r[0].x);
    vec4 sm = scale_min_k4_pair(r[0], u >> 1);
    uvec4 w = r[1];
    QNIB8(q, w, 0.0);
    ab = vec4(dm.x * sm.x, -dm.y * sm.z, dm.x * sm.y, -dm.y * sm.w);
}
void unit_dec_half(uvec4 r[4], qblock b, uint u, uint h, out vec4 q[4], out vec2 ab) {
    vec2 dm = unpackHalf2x16(r[0].x);
    vec4 sm = scale_min_k4_pair(r[0], u >> 1);
    uvec4 w = r[1];
    QNIB4H(q, w, h, 0.0);
    ab = h == 0u ? vec2(dm.x * sm.x, -dm.y * sm.z) : vec2(dm.x * sm.y, -dm.y * sm.w);
}
#ifdef GEMV_LEAN // the quarter units serve only those GEMVs
// The GEMV's quarter units (see common.glsl): vec4 j of run h, its quants
// only (word j of the unit's uvec4, low nibbles for run 0, high for 1), and
// the run's scale and offset (sub-block 2c + h of chunk c = u / 2).
vec4 unit_q4(qblock b, uint u, uint h, uint j) {
    uint q = (QW(b.f0 + 4u + 4u * u + j) >> (4u * h)) & 0x0f0f0f0fu;
    return vec4((uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu);
}
vec2 unit_ab(qblock b, uint u, uint h) {
    return k4_unit_ab(b, u, h);
}
#endif
