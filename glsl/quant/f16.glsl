// f16: two elements per word, low half first; blocks of 4 elements.
#define QK 4u
#define QWORDS 2u
vec4 dq4(uint b, uint j) {
    return vec4(unpackHalf2x16(QW[b]), unpackHalf2x16(QW[b + 1u]));
}
