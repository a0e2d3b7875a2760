// q5_k (176 bytes, 44 words): as q4_k with qh[32] (words 4..11) before
// qs[128] (words 12..43); bit 2c (low half of chunk c) or 2c + 1 (high half)
// of qh[l] is the fifth bit.
#define QK 256u
#define QWORDS 44u
vec4 dq4(uint b, uint j) {
    uint s = j >> 3;
    uvec2 sm = scale_min_k4(b, s);
    uint w = QW[b];
    float d1 = f16lo(w) * float(sm.x), m1 = f16hi(w) * float(sm.y);
    uint c = j >> 4, l4 = j & 7u;
    uint hw = QW[b + 4u + l4] >> s; // bit s = 2c + (high half)
    vec4 hi = vec4((uvec4(hw) >> uvec4(0u, 8u, 16u, 24u)) & 1u) * 16.0;
    return d1 * (nib4(QW[b + 12u + 8u * c + l4], (s & 1u) * 4u) + hi) - m1;
}
