// q4_1: word 0 = f16 d | f16 m, words 1..4 = qs[16] (nibbles as q4_0).
#define QK 32u
#define QWORDS 5u
vec4 dq4(uint b, uint j) {
    uint w = QW[b];
    return nib4(QW[b + 1u + (j & 3u)], (j >> 2) * 4u) * f16lo(w) + f16hi(w);
}
