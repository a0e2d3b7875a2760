// bf16: two elements per word, low half first; blocks of 4 elements.
#define QK 4u
#define QWORDS 2u
vec4 dq4(uint b, uint j) {
    uint w0 = QW[b], w1 = QW[b + 1u];
    return uintBitsToFloat(uvec4(w0 << 16, w0 & 0xffff0000u, w1 << 16, w1 & 0xffff0000u));
}
