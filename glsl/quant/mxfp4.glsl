// mxfp4: field 0 the E8M0 exponent e (a word, padded), field 1 qs[16];
// value = kvalues_mxfp4[nibble] * 2^(e - 128).
#define QK 32u
vec4 dq4(qblock b, uint j) {
    float d = ldexp(1.0, int(QW(b.f0) & 0xffu) - 128);
    uvec4 q = uvec4(nib4(QW(b.f1 + (j & 3u)), (j >> 2) * 4u));
    return sbyte4_of(MXFP4_PACKED, q) * d;
}
