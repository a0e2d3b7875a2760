// q6_k, repacked to 212 bytes: ql[128] (words 0..31), qh[64] (words
// 32..47), int8 scales[16] (words 48..51), f16 d | pad (word 52). Element
// e = 128h + 32r + l: low nibble of ql[64h + 32(r & 1) + l] (r < 2) or its
// high nibble, top two bits at bit 2r of qh[32h + l]; value =
// d * scale[e / 16] * (q - 32).
#define QK 256u
#define QWORDS 53u
vec4 dq4(uint b, uint j) {
    uint h = j >> 5, r = (j >> 3) & 3u, l4 = j & 7u;
    vec4 lo = nib4(QW[b + 16u * h + 8u * (r & 1u) + l4], (r >> 1) * 4u);
    vec4 hi = crumb4(QW[b + 32u + 8u * h + l4], 2u * r);
    int sc = int(qbyte(b, 192u + (j >> 2)) << 24) >> 24;
    return f16lo(QW[b + 52u]) * float(sc) * (lo + hi * 16.0 - 32.0);
}
