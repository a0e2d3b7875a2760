// Arg max helpers: candidates are (value, index) pairs with the index as a
// float (exact below 2^24); AM_NONE is the index of "no candidate yet"
// (with the value -inf it loses to every real one). am_better(v, i, w, j):
// (v, i) beats (w, j) when v is a NaN and w is not (a NaN wins, so a row
// holding one is recognised: its result is -1), else when v is larger, or
// equal with a smaller index (numpy's first maximum). Order-free: any
// reduction tree gives the same winner. NaNs are found from the bits, which
// no compiler's fast math assumes away.
const float AM_NONE = 3.0e38;

bool am_nan(float v) {
    return (floatBitsToUint(v) & 0x7fffffffu) > 0x7f800000u;
}

bool am_better(float v, float i, float w, float j) {
    if (am_nan(v) || am_nan(w)) {
        return am_nan(v) && (!am_nan(w) || i < j);
    }
    return v > w || (v == w && i < j);
}

// The result of a winner: its index, or -1 for a NaN.
float am_result(float v, float i) {
    return am_nan(v) ? -1.0 : i;
}

// Workgroup arg max over one candidate per invocation; every invocation
// gets the winner in (v, i). Stages candidates through AM_V(k) and AM_I(k)
// (float lvalues in shared memory, k < WG_SIZE: the includer defines them;
// by default over `shared float am_v[WG_SIZE], am_i[WG_SIZE];`). Needs
// common/reduce (RED_BARRIER). WG_SIZE a power of two.
#ifndef AM_V
#define AM_V(k) am_v[k]
#define AM_I(k) am_i[k]
#endif
void wg_argmax(inout float v, inout float i) {
    uint lid = gl_LocalInvocationIndex;
    RED_BARRIER(); // earlier readers of the staging memory are done
    AM_V(lid) = v;
    AM_I(lid) = i;
    RED_BARRIER();
    for (uint s = WG_SIZE / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            float ov = AM_V(lid + s);
            float oi = AM_I(lid + s);
            if (am_better(ov, oi, AM_V(lid), AM_I(lid))) {
                AM_V(lid) = ov;
                AM_I(lid) = oi;
            }
        }
        RED_BARRIER();
    }
    v = AM_V(0u);
    i = AM_I(0u);
    RED_BARRIER();
}

#ifdef AM_SCRATCH
// Across the workgroups of one or more dispatches (an arg max folded into
// an anchor's epilogue: src/kernels/matmul.c): every workgroup reduces its
// invocations' candidates, leaves the winner in slot am_g0 + (its index in
// the dispatch) of the scratch buffer AM_SCRATCH(k) (uint words after
// AM_BASE), and counts itself in on counter word 0; the last of am_total
// workgroups combines all slots, puts the counter back to zero and returns
// true, every invocation with the winner in (v, i). Uniforms am_g0,
// am_total; AM_LAST, a float lvalue in shared memory (the includer's: a word
// of another array is enough) for the "last one" flag. Dispatches of one kernel that share the scratch are separated
// by barriers (they all write it), so the last workgroup sees every slot.
bool argmax_across(inout float v, inout float i) {
    uint lid = gl_LocalInvocationIndex;
    wg_argmax(v, i);
#ifdef GEMV_LEAN
    // the GEMV's g0 as a whole (gemv.glsl: a compiler then keeps that one
    // value, not its parts, across the GEMV's loops)
    uint slot = am_g0 + (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x);
#else
    uint slot = am_g0 + gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
#endif
    if (lid == 0u) {
        AM_SCRATCH(AM_BASE + 2u * slot) = floatBitsToUint(v);
        AM_SCRATCH(AM_BASE + 2u * slot + 1u) = floatBitsToUint(i);
    }
    memoryBarrierBuffer();
    barrier();
    if (lid == 0u) {
        AM_LAST = atomicAdd(AM_SCRATCH(0u), 1u) == am_total - 1u ? 1.0 : 0.0;
    }
    RED_BARRIER();
    if (AM_LAST == 0.0) {
        return false;
    }
    memoryBarrierBuffer();
    v = uintBitsToFloat(0xff800000u); // -inf
    i = AM_NONE;
    for (uint k = lid; k < am_total; k += WG_SIZE) {
        float ov = uintBitsToFloat(AM_SCRATCH(AM_BASE + 2u * k));
        float oi = uintBitsToFloat(AM_SCRATCH(AM_BASE + 2u * k + 1u));
        if (am_better(ov, oi, v, i)) {
            v = ov;
            i = oi;
        }
    }
    wg_argmax(v, i);
    if (lid == 0u) {
        AM_SCRATCH(0u) = 0u; // ready for the next dispatch
    }
    return true;
}
#endif
