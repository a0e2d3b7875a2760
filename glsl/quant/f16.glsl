// f16: two elements per word, low half first; blocks of 4 elements for the
// dq4 interface (b.f0: the block's first word). punit: the 32 elements of
// a GEMV unit from the uvec4 at index w4 on.
#define QK 4u
#define QWORDS 2u
vec4 dq4(qblock b, uint j) {
    return vec4(unpackHalf2x16(QW(b.f0)), unpackHalf2x16(QW(b.f0 + 1u)));
}
void punit(uint w4, out vec4 q[8]) {
    for (uint i = 0u; i < 4u; i++) {
        uvec4 w = QW4(w4 + i);
        q[2u * i] = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
        q[2u * i + 1u] = vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w));
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
        q[2u * i] = vec4(unpackHalf2x16(r[i].x), unpackHalf2x16(r[i].y));
        q[2u * i + 1u] = vec4(unpackHalf2x16(r[i].z), unpackHalf2x16(r[i].w));
    }
}
