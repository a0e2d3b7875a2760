// bf16: two elements per word, low half first; blocks of 4 elements for
// the dq4 interface (b.f0: the block's first word). punit: the 32 elements
// of a GEMV unit from the uvec4 at index w4 on.
#define QK 4u
#define QWORDS 2u
vec4 dq4(qblock b, uint j) {
    uint w0 = QW(b.f0), w1 = QW(b.f0 + 1u);
    return uintBitsToFloat(uvec4(w0 << 16, w0 & 0xffff0000u, w1 << 16, w1 & 0xffff0000u));
}
// The eight elements of a uvec4 of words into q[o], q[o + 1].
#define BF16_Q2(q, o, src)                                                     \
    q[o] = uintBitsToFloat(                                                    \
        uvec4(src.x << 16, src.x & 0xffff0000u, src.y << 16, src.y & 0xffff0000u)); \
    q[o + 1u] = uintBitsToFloat(                                               \
        uvec4(src.z << 16, src.z & 0xffff0000u, src.w << 16, src.w & 0xffff0000u));
void punit(uint w4, out vec4 q[8]) {
    for (uint i = 0u; i < 4u; i++) {
        uvec4 v = QW4(w4 + i);
        BF16_Q2(q, 2u * i, v)
    }
}
// phalf: a half unit (16 elements, from the uvec4 at w4) into q[0..3], for
// a GEMM invocation that stages only half of a row's unit.
void phalf(uint w4, out vec4 q[4]) {
    for (uint i = 0u; i < 2u; i++) {
        uvec4 v = QW4(w4 + i);
        BF16_Q2(q, 2u * i, v)
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
        BF16_Q2(q, 2u * i, r[i])
    }
}
#ifdef GEMV_LEAN // the quarter units serve only those GEMVs
// The GEMV's quarter units (see common.glsl): vec4 4h + j of the unit at
// uvec4 w4, two words (a word a load where the binding is a uint array:
// the gate/up pair of bf16 GEMVs fitted 32 registers on Mali-G610 only so);
// the scale is 1 (wload.c's NAME_wuab).
vec4 pq4(uint w4, uint h, uint j) {
    uint o = 4u * w4 + 8u * h + 2u * j;
    uvec2 p = uvec2(QW(o), QW(o + 1u));
    return uintBitsToFloat(uvec4(p.x << 16, p.x & 0xffff0000u, p.y << 16, p.y & 0xffff0000u));
}
#endif
