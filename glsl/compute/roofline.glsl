// The roofline kernels: how fast a plain GLES compute shader moves memory on
// this device, the ceiling a GEMV's weight bandwidth is set against. Each
// invocation handles ROOF_UNROLL vec4s spaced a workgroup apart (coalesced
// loads, several in flight), no grid-stride loop; a workgroup covers
// WG_SIZE * ROOF_UNROLL vec4s from roof_group() * that. Needs the uniform
// `n4` (vec4 count) and the bindings named below; ROOF_READ defined selects
// the read-only kernel, ROOF_FMA the arithmetic one.

uint roof_group() {
    return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
}

#if defined(ROOF_FMA)
// The multiply-add peak: ROOF_CHAINS independent vec4 chains a = a * m + c
// per invocation (fp32; with ROOF_F16 f16vec4, the float16_t arithmetic of
// the extension the generator enabled), n4 rounds of them, each round
// written out four times (4 * 4 * ROOF_CHAINS multiply-adds per invocation
// and round, little loop overhead), nothing read; the sum is stored only
// when it hits a value the uniforms never give, so nothing but the
// arithmetic costs (binding: float dst writeonly; uniforms n4, m, c: m just
// below 1 keeps the values finite).
#ifdef ROOF_F16
#define RVEC f16vec4
#else
#define RVEC vec4
#endif
void roofline_fma() {
    RVEC a[ROOF_CHAINS];
    RVEC m = RVEC(fma_m), c = RVEC(fma_c);
    for (uint j = 0u; j < ROOF_CHAINS; j++) {
        a[j] = RVEC(vec4(float(gl_LocalInvocationIndex + j) * 0.001, 0.25, 0.5, 0.75));
    }
    for (uint i = 0u; i < n4; i++) {
        for (uint r = 0u; r < 4u; r++) {
            for (uint j = 0u; j < ROOF_CHAINS; j++) {
                a[j] = a[j] * m + c;
            }
        }
    }
    vec4 s = vec4(0.0);
    for (uint j = 0u; j < ROOF_CHAINS; j++) {
        s += vec4(a[j]);
    }
    if (s.x + s.y + s.z + s.w == -1234.5) {
        dst[roof_group()] = s.x;
    }
}
#elif !defined(ROOF_READ)
// dst[i] = src[i] (bindings: vec4 src readonly, vec4 dst writeonly).
void roofline_copy() {
    uint base = roof_group() * WG_SIZE * ROOF_UNROLL + gl_LocalInvocationIndex;
    vec4 v[ROOF_UNROLL];
    for (uint u = 0u; u < ROOF_UNROLL; u++) {
        uint i = base + u * WG_SIZE;
        v[u] = i < n4 ? src[i] : vec4(0.0);
    }
    for (uint u = 0u; u < ROOF_UNROLL; u++) {
        uint i = base + u * WG_SIZE;
        if (i < n4) dst[i] = v[u];
    }
}
#else
// partial[group] = sum of the workgroup's vec4s (bindings: vec4 src
// readonly, float partial writeonly; needs common/reduce and
// `shared float red_scratch[WG_SIZE]`). Reads only: one float written per
// WG_SIZE * ROOF_UNROLL * 16 bytes read.
void roofline_read() {
    uint group = roof_group();
    uint base = group * WG_SIZE * ROOF_UNROLL + gl_LocalInvocationIndex;
    vec4 acc = vec4(0.0);
    for (uint u = 0u; u < ROOF_UNROLL; u++) {
        uint i = base + u * WG_SIZE;
        if (i < n4) acc += src[i];
    }
    float s = wg_reduce_sum(acc.x + acc.y + acc.z + acc.w);
    if (gl_LocalInvocationIndex == 0u) partial[group] = s;
}
#endif
