// iq4_xs (136 bytes, as in the file): word 0 = f16 d | u16 scales_h, word
// 1 = scales_l[4], words 2..33 = qs[128]; sub-block ib (32 elements) has the
// 6-bit scale ls = (scales_l[ib/2] >> 4*(ib%2)) & 15 | ((scales_h >> 2*ib)
// & 3) << 4, value = d * (ls - 32) * kvalues_iq4nl[nibble].
#define QK 256u
vec4 dq4(qblock b, uint j) {
    uint w0 = QW(b.f0);
    uint ib = j >> 3, k = j & 7u;
    uint ls = ((QW(b.f0 + 1u) >> (8u * (ib >> 1) + 4u * (ib & 1u))) & 0xfu) |
              (((w0 >> (16u + 2u * ib)) & 3u) << 4);
    float dl = f16lo(w0) * float(int(ls) - 32);
    uvec4 q = uvec4(nib4(QW(b.f0 + 2u + 4u * ib + (k & 3u)), (k >> 2) * 4u));
    return dl * sbyte4_of(IQ4NL_PACKED, q);
}
