// iq4_nl, repacked like q4_0: word 0 = f16 d | pad, words 1..4 = qs[16];
// value = d * kvalues_iq4nl[nibble].
#define QK 32u
#define QWORDS 5u
vec4 dq4(uint b, uint j) {
    float d = f16lo(QW[b]);
    uvec4 q = uvec4(nib4(QW[b + 1u + (j & 3u)], (j >> 2) * 4u));
    return d * sbyte4_of(IQ4NL_PACKED, q);
}
