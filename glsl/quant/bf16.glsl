// bf16: two elements per word, low half first; blocks of 4 elements for
// the dq4 interface (b.f0: the block's first word). punit: the 32 elements
// of a GEMV unit from the uvec4 at index w4 on.
#define QK 4u
#define QWORDS 2u
vec4 dq4(qblock b, uint j) {
    uint w0 = QW(b.f0), w1 = QW(b.f0 + 1u);
    return uintBitsToFloat(uvec4(w0 << 16, w0 & 0xffff0000u, w1 << 16, w1 & 0xffff0000u));
}
void punit(uint w4, out vec4 q[8]) {
    for (uint i = 0u; i < 4u; i++) {
        uvec4 w = QW4(w4 + i);
        q[2u * i] = uintBitsToFloat(uvec4(w.x << 16, w.x & 0xffff0000u, w.y << 16, w.y & 0xffff0000u));
        q[2u * i + 1u] = uintBitsToFloat(uvec4(w.z << 16, w.z & 0xffff0000u, w.w << 16, w.w & 0xffff0000u));
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
        uvec4 w = r[i];
        q[2u * i] = uintBitsToFloat(uvec4(w.x << 16, w.x & 0xffff0000u, w.y << 16, w.y & 0xffff0000u));
        q[2u * i + 1u] = uintBitsToFloat(uvec4(w.z << 16, w.z & 0xffff0000u, w.w << 16, w.w & 0xffff0000u));
    }
}
