// q4_0, repacked: word 0 = f16 d | pad, words 1..4 = qs[16].
// Byte i holds element i (low nibble) and element i + 16 (high nibble).
#define QK 32u
#define QWORDS 5u
vec4 dq4(uint b, uint j) {
    float d = f16lo(QW[b]);
    return (nib4(QW[b + 1u + (j & 3u)], (j >> 2) * 4u) - 8.0) * d;
}
