// q4_k (144 bytes, 36 words): f16 d | f16 dmin (word 0), scales[12] (words
// 1..3: eight 6-bit scale/min pairs), qs[128] (words 4..35). Element e of
// 64-element chunk c = e / 64: qs[32c + l] low nibble (e % 64 < 32) or high
// nibble; sub-block e / 32 picks the scale and min.
#define QK 256u
#define QWORDS 36u
vec4 dq4(uint b, uint j) {
    uint s = j >> 3; // sub-block
    uvec2 sm = scale_min_k4(b, s);
    uint w = QW[b];
    float d1 = f16lo(w) * float(sm.x), m1 = f16hi(w) * float(sm.y);
    uint c = j >> 4;
    return d1 * nib4(QW[b + 4u + 8u * c + (j & 7u)], (s & 1u) * 4u) - m1;
}
