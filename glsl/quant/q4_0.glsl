// q4_0, grouped (src/quant/gpu.c): field 0 qs[16] (f0: 4 words a block),
// field 1 d (f16, f1). Byte l holds element l (low nibble) and element
// l + 16 (high nibble); value = d * (nibble - 8).
#define QK 32u
#define QU 1u
vec4 dq4(qblock b, uint j) {
    float d = qhalf(b.f1, b.i);
    return (nib4(QW(b.f0 + 4u * b.i + (j & 3u)), (j >> 2) * 4u) - 8.0) * d;
}
uvec2 unit_x(uint u) {
    return uvec2(0u, 16u);
}
void unit(qblock b, uint u, out vec4 q[8], out vec4 ab) {
    uvec4 w = QW4((b.f0 >> 2u) + b.i);
    float d = qhalf(b.f1, b.i);
    q[0] = nib_lo4m(w.x, 8.0);
    q[1] = nib_lo4m(w.y, 8.0);
    q[2] = nib_lo4m(w.z, 8.0);
    q[3] = nib_lo4m(w.w, 8.0);
    q[4] = nib_hi4m(w.x, 8.0);
    q[5] = nib_hi4m(w.y, 8.0);
    q[6] = nib_hi4m(w.z, 8.0);
    q[7] = nib_hi4m(w.w, 8.0);
    ab = vec4(d, 0.0, d, 0.0);
}
