// The roofline kernels: how fast a plain GLES compute shader moves memory on
// this device, the ceiling a GEMV's weight bandwidth is set against. Each
// invocation handles ROOF_UNROLL vec4s spaced a workgroup apart (coalesced
// loads, several in flight), no grid-stride loop; a workgroup covers
// WG_SIZE * ROOF_UNROLL vec4s from roof_group() * that. Needs the uniform
// `n4` (vec4 count) and the bindings named below; ROOF_READ defined selects
// the read-only kernel.

uint roof_group() {
    return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
}

#ifndef ROOF_READ
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
