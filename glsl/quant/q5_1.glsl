// q5_1: word 0 = f16 d | f16 m, word 1 = qh, words 2..5 = qs[16].
#define QK 32u
#define QWORDS 6u
vec4 dq4(uint b, uint j) {
    uint w = QW[b];
    uint hb = QW[b + 1u] >> (4u * j);
    vec4 hi = vec4((uvec4(hb) >> uvec4(0u, 1u, 2u, 3u)) & 1u) * 16.0;
    return (nib4(QW[b + 2u + (j & 3u)], (j >> 2) * 4u) + hi) * f16lo(w) + f16hi(w);
}
