// q5_0, repacked: word 0 = f16 d | pad, word 1 = qh (bit e: fifth bit of
// element e), words 2..5 = qs[16] (nibbles as q4_0).
#define QK 32u
#define QWORDS 6u
vec4 dq4(uint b, uint j) {
    float d = f16lo(QW[b]);
    uint hb = QW[b + 1u] >> (4u * j);
    vec4 hi = vec4((uvec4(hb) >> uvec4(0u, 1u, 2u, 3u)) & 1u) * 16.0;
    return (nib4(QW[b + 2u + (j & 3u)], (j >> 2) * 4u) + hi - 16.0) * d;
}
