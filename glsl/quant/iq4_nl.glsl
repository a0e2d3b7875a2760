// iq4_nl: field 0 f16 d (a word, padded), field 1 qs[16] (nibbles as
// q4_0); value = d * kvalues_iq4nl[nibble].
#define QK 32u
vec4 dq4(qblock b, uint j) {
    float d = f16lo(QW(b.f0));
    uvec4 q = uvec4(nib4(QW(b.f1 + (j & 3u)), (j >> 2) * 4u));
    return d * sbyte4_of(IQ4NL_PACKED, q);
}
