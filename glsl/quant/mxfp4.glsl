// mxfp4, repacked: word 0 = E8M0 exponent e | pad, words 1..4 = qs[16];
// value = kvalues_mxfp4[nibble] * 2^(e - 128).
#define QK 32u
#define QWORDS 5u
vec4 dq4(uint b, uint j) {
    float d = ldexp(1.0, int(QW[b] & 0xffu) - 128);
    uvec4 q = uvec4(nib4(QW[b + 1u + (j & 3u)], (j >> 2) * 4u));
    return sbyte4_of(MXFP4_PACKED, q) * d;
}
