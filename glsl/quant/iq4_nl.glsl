// iq4_nl, repacked like q4_0: word 0 = f16 d | pad, words 1..4 = qs[16];
// value = d * kvalues_iq4nl[nibble].
#define QK 32u
#define QWORDS 5u
const float IQ4NL_T[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                                    1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
vec4 dq4(uint b, uint j) {
    float d = f16lo(QW[b]);
    uvec4 q = uvec4(nib4(QW[b + 1u + (j & 3u)], (j >> 2) * 4u));
    return d * vec4(IQ4NL_T[q.x], IQ4NL_T[q.y], IQ4NL_T[q.z], IQ4NL_T[q.w]);
}
