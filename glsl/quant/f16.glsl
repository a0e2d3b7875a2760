// f16: two elements per word, low half first; blocks of 4 elements for the
// dq4 interface (b.f0: the block's first word). punit: the 32 elements of
// a GEMV unit from the uvec4 at index w4 on.
#define QK 4u
#define QWORDS 2u
vec4 dq4(qblock b, uint j) {
    return vec4(unpackHalf2x16(QW(b.f0)), unpackHalf2x16(QW(b.f0 + 1u)));
}
// The eight elements of a uvec4 of words into q[o], q[o + 1].
#define F16_Q2(q, o, src)                                                      \
    q[o] = vec4(unpackHalf2x16(src.x), unpackHalf2x16(src.y));                 \
    q[o + 1u] = vec4(unpackHalf2x16(src.z), unpackHalf2x16(src.w));
void punit(uint w4, out vec4 q[8]) {
    for (uint i = 0u; i < 4u; i++) {
        uvec4 v = QW4(w4 + i);
        F16_Q2(q, 2u * i, v)
    }
}
// phalf: a half unit (16 elements, from the uvec4 at w4) into q[0..3], for
// a GEMM invocation that stages only half of a row's unit.
void phalf(uint w4, out vec4 q[4]) {
    for (uint i = 0u; i < 2u; i++) {
        uvec4 v = QW4(w4 + i);
        F16_Q2(q, 2u * i, v)
    }
}
// punit split in two for the GEMV (see common.glsl): praw loads the four
// uvec4, pdec unpacks them.
void praw(uint w4, out uvec4 r[4]) {
    for (uint i = 0u; i < 4u; i++) {
        r[i] = QW4(w4 + i);
    }
}
void pdec(uvec4 r[4], out vec4 q[8]) {
    for (uint i = 0u; i < 4u; i++) {
        F16_Q2(q, 2u * i, r[i])
    }
}
#ifdef GEMV_LEAN // the quarter units serve only those GEMVs
// The GEMV's quarter units (see common.glsl): vec4 4h + j of the unit at
// uvec4 w4, two words (a word a load where the binding is a uint array:
// the gate/up pair of f16 GEMVs fitted 32 registers on Mali-G610 only so);
// the scale is 1 (wload.c's NAME_wuab).
vec4 pq4(uint w4, uint h, uint j) {
    uint o = 4u * w4 + 8u * h + 2u * j;
    uvec2 p = uvec2(QW(o), QW(o + 1u));
    return vec4(unpackHalf2x16(p.x), unpackHalf2x16(p.y));
}
#endif
