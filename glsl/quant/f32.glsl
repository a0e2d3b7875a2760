// f32: one element per word; "blocks" of 4 elements for the dq4 interface
// (b.f0: the block's first word). punit: the 32 elements of a GEMV unit
// from the uvec4 at index w4 on.
#define QK 4u
#define QWORDS 4u
vec4 dq4(qblock b, uint j) {
    return uintBitsToFloat(uvec4(QW(b.f0), QW(b.f0 + 1u), QW(b.f0 + 2u), QW(b.f0 + 3u)));
}
void punit(uint w4, out vec4 q[8]) {
    for (uint i = 0u; i < 8u; i++) {
        q[i] = uintBitsToFloat(QW4(w4 + i));
    }
}
// phalf: a half unit (16 elements, from the uvec4 at w4) into q[0..3], for
// a GEMM invocation that stages only half of a row's unit.
void phalf(uint w4, out vec4 q[4]) {
    for (uint i = 0u; i < 4u; i++) {
        q[i] = uintBitsToFloat(QW4(w4 + i));
    }
}
#ifdef GEMV_LEAN // the quarter units serve only those GEMVs
// The GEMV's quarter units (see common.glsl): vec4 4h + j of the unit at
// uvec4 w4, one uvec4 (a single load where the binding is a uvec4 array,
// which f32's is); the scale is 1 (wload.c's NAME_wuab).
vec4 pq4(uint w4, uint h, uint j) {
    return uintBitsToFloat(QW4(w4 + 4u * h + j));
}
#endif
