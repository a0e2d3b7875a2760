// What tools/lab's Q4_0 kernels (gemv_q4.glsl, step_q4.glsl) share, put
// between a variant's defines and the kernel by lab_kernel_source: WG
// invocations a workgroup (256 unless defined), subgroups or, with NOSG,
// a shared-memory stand-in for subgroupAdd, NVIDIA's optionNV(unroll all)
// with UNROLLNV, and glesc's nib_lo4m decode of a word's eight nibbles
// (AND/OR, one MAD an element), minus 8.
#ifndef WG
#define WG 256
#endif
#ifndef NOSG
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#ifdef UNROLLNV
#pragma optionNV(unroll all)
#endif
precision highp float;
precision highp int;
layout(local_size_x = WG) in;
#ifdef NOSG
shared float red[WG];
float subgroupAdd(float v)
{
    uint lid = gl_LocalInvocationID.x;
    barrier();
    red[lid] = v;
    memoryBarrierShared();
    barrier();
    for (uint h = 16u; h > 0u; h >>= 1u) {
        if (lid % 32u < h)
            red[lid] += red[lid + h];
        memoryBarrierShared();
        barrier();
    }
    return red[lid - lid % 32u];
}
#endif

// The low (lo4) and high (hi4) nibbles of the four bytes of w, minus 8.
vec4 lo4(uint w)
{
    uint h = w >> 12u;
    vec4 f = uintBitsToFloat(uvec4(w & 0xfu, w & 0xf00u, w & 0xf0000u, h & 0xf000u) | 0x4b000000u);
    return f * vec4(1.0, 1.0 / 256.0, 1.0 / 65536.0, 1.0 / 4096.0) +
           vec4(-8388616.0, -32776.0, -136.0, -2056.0);
}
vec4 hi4(uint w)
{
    uint h = w >> 12u;
    vec4 f = uintBitsToFloat(uvec4(w & 0xf0u, w & 0xf000u, h & 0xf00u, h & 0xf0000u) | 0x4b000000u);
    return f * vec4(1.0 / 16.0, 1.0 / 4096.0, 1.0 / 256.0, 1.0 / 65536.0) +
           vec4(-524296.0, -2056.0, -32776.0, -136.0);
}
