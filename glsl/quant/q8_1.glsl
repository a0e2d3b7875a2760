// q8_1: word 0 = f16 d | f16 s, words 1..8 = 32 signed bytes.
#define QK 32u
#define QWORDS 9u
vec4 dq4(uint b, uint j) {
    return int8x4(QW[b + 1u + j]) * f16lo(QW[b]);
}
