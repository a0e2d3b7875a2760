// Workgroup reductions over one value per invocation; every invocation gets
// the result. Needs `shared float red_scratch[WG_SIZE];` and WG_SIZE a power
// of two. With GLESC_SUBGROUP_ARITH defined (GL_KHR_shader_subgroup_arithmetic
// present), subgroups reduce first and only one value per subgroup goes
// through shared memory.
//
// Every barrier() comes with memoryBarrierShared(): GLSL ES 3.10 leaves the
// visibility of shared writes across barrier() to the memory qualifiers, and
// Mesa's llvmpipe (22.3) returns stale values when two reductions run back
// to back in one kernel without it (layer norm's mean, then variance).
#define RED_BARRIER() memoryBarrierShared(); barrier()

#ifdef GLESC_SUBGROUP_ARITH
#define RED_IMPL(NAME, OP, SUBGROUP_OP)                                                   \
float NAME(float v) {                                                                     \
    v = SUBGROUP_OP(v);                                                                   \
    if (subgroupElect()) red_scratch[gl_SubgroupID] = v;                                  \
    RED_BARRIER();                                                                        \
    float r = red_scratch[0];                                                             \
    for (uint i = 1u; i < gl_NumSubgroups; i++) r = OP(r, red_scratch[i]);               \
    RED_BARRIER();                                                                        \
    return r;                                                                             \
}
#else
#define RED_IMPL(NAME, OP, SUBGROUP_OP)                                                   \
float NAME(float v) {                                                                     \
    uint lid = gl_LocalInvocationIndex;                                                   \
    red_scratch[lid] = v;                                                                 \
    RED_BARRIER();                                                                        \
    for (uint s = WG_SIZE / 2u; s > 0u; s >>= 1u) {                                       \
        if (lid < s) red_scratch[lid] = OP(red_scratch[lid], red_scratch[lid + s]);       \
        RED_BARRIER();                                                                    \
    }                                                                                     \
    float r = red_scratch[0];                                                             \
    RED_BARRIER();                                                                        \
    return r;                                                                             \
}
#endif

float red_add_(float a, float b) { return a + b; }
RED_IMPL(wg_reduce_sum, red_add_, subgroupAdd)
RED_IMPL(wg_reduce_max, max, subgroupMax)
RED_IMPL(wg_reduce_min, min, subgroupMin)
