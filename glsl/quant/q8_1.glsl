// q8_1: f16 d | f16 s (word 0), 32 signed bytes (words 1..8); value = d * q.
#define QK 32u
vec4 dq4(qblock b, uint j) {
    return int8x4(QW(b.f0 + 1u + j)) * f16lo(QW(b.f0));
}
