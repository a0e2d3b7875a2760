// q8_0, grouped: field 0 qs[32] (signed bytes, 8 words a block), field 1 d
// (f16); value = d * q.
#define QK 32u
#define QU 1u
vec4 dq4(qblock b, uint j) {
    return int8x4(QW(b.f0 + 8u * b.i + j)) * qhalf(b.f1, b.i);
}
uvec2 unit_x(uint u) {
    return uvec2(0u, 16u);
}
void unit(qblock b, uint u, out vec4 q[8], out vec4 ab) {
    uvec4 w0 = QW4((b.f0 >> 2u) + 2u * b.i), w1 = QW4((b.f0 >> 2u) + 2u * b.i + 1u);
    float d = qhalf(b.f1, b.i);
    q[0] = sbytes4(w0.x);
    q[1] = sbytes4(w0.y);
    q[2] = sbytes4(w0.z);
    q[3] = sbytes4(w0.w);
    q[4] = sbytes4(w1.x);
    q[5] = sbytes4(w1.y);
    q[6] = sbytes4(w1.z);
    q[7] = sbytes4(w1.w);
    ab = vec4(d, 0.0, d, 0.0);
}
// The unit split in two for the GEMV (see common.glsl): the quants' two
// uvec4, then the uvec4 holding d.
void unit_raw(qblock b, uint u, out uvec4 r[4]) {
    r[0] = QW4((b.f0 >> 2u) + 2u * b.i);
    r[1] = QW4((b.f0 >> 2u) + 2u * b.i + 1u);
    r[2] = QW4((b.f1 + (b.i >> 1u)) >> 2u);
    r[3] = uvec4(0u);
}
void unit_dec(uvec4 r[4], qblock b, uint u, out vec4 q[8], out vec4 ab) {
    vec2 dd = unpackHalf2x16(qw_pick(r[2], b.f1 + (b.i >> 1u)));
    float d = (b.i & 1u) == 0u ? dd.x : dd.y;
    q[0] = sbytes4(r[0].x);
    q[1] = sbytes4(r[0].y);
    q[2] = sbytes4(r[0].z);
    q[3] = sbytes4(r[0].w);
    q[4] = sbytes4(r[1].x);
    q[5] = sbytes4(r[1].y);
    q[6] = sbytes4(r[1].z);
    q[7] = sbytes4(r[1].w);
    ab = vec4(d, 0.0, d, 0.0);
}
void unit_dec_half(uvec4 r[4], qblock b, uint u, uint h, out vec4 q[4], out vec2 ab) {
    vec2 dd = unpackHalf2x16(qw_pick(r[2], b.f1 + (b.i >> 1u)));
    float d = (b.i & 1u) == 0u ? dd.x : dd.y;
    uvec4 s = h == 0u ? r[0] : r[1];
    q[0] = sbytes4(s.x);
    q[1] = sbytes4(s.y);
    q[2] = sbytes4(s.z);
    q[3] = sbytes4(s.w);
    ab = vec2(d, 0.0);
}
#ifdef GEMV_LEAN // the quarter units serve only those GEMVs
// The GEMV's quarter units (see common.glsl): vec4 j of run h, its quants
// only, and the run's scale and offset.
vec4 unit_q4(qblock b, uint u, uint h, uint j) {
    return int8x4(QW(b.f0 + 8u * b.i + 4u * h + j));
}
vec2 unit_ab(qblock b, uint u, uint h) {
    return vec2(qhalf(b.f1, b.i), 0.0);
}
#endif
