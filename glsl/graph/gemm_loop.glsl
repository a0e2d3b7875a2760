// One matmul's walk over K (glsl/graph/gemm.glsl): src/kernels/gemm.c adds
// a copy of this file per matmul of the kernel (a grouped q/k/v has up to
// four, each weight of its own type), with these names defined around it:
//   GEMM_LOOP                 this copy's function
//   GEMM_WAT, GEMM_UX         its loader's unit location and x offsets
//                             (wload.c: NAME_wat, NAME_wunit_x)
//   GEMM_WUNIT                the hook reading unit u of local row nl
//                             (its row's bytes, then NAME_wunit)
//   GEMM_WUNIT2               the same for the pair's second weight (PAIR)
// A copy per matmul keeps the member choice out of the loop: the next
// step's loads and the current step's arithmetic are one block of code.

// Units u0 .. u1-1 of the tile's rows nl0 .. (cnt: the member's rows; rows
// past it repeat the last one, not stored) into acc.
void GEMM_LOOP(uint nl0, uint cnt, uint m0, uint b2, uint b3, uint u0, uint u1,
               inout float acc[NACC], inout float sq) {
    uint lid = gl_LocalInvocationIndex;
    uint tx = lid % NX, ty = lid / NX;
    uint wr = lid % BN; // the staged row this invocation decodes
#ifdef PAIR
    bool second = wr >= BNR; // the second weight's row
    uint nl = min(nl0 + wr % BNR, cnt - 1u);
#else
    uint nl = min(nl0 + wr, cnt - 1u);
#endif
    vec4 pw[WQ4];
    vec4 px[XQ4];
    vec4 q[8];
    vec4 ab;
    {
        uvec4 at = GEMM_WAT(u0);
        GEMM_WUNIT(nl, b2, b3, at, u0, q, ab);
#ifdef PAIR
        vec4 q2[8];
        vec4 ab2;
        GEMM_WUNIT2(nl, b2, b3, at, u0, q2, ab2);
        for (uint i = 0u; i < 8u; i++) {
            q[i] = second ? q2[i] : q[i];
        }
        ab = second ? ab2 : ab;
#endif
        gemm_part_w(q, ab, pw);
        gemm_fetch_x(GEMM_UX(u0), true, m0, b2, b3, px, sq);
    }
    for (uint u = u0; u < u1; u++) {
        memoryBarrierShared();
        barrier(); // every invocation is done with the last step
        gemm_stage(pw, px);
        memoryBarrierShared();
        barrier();
        // the next step (past the last: the last one again, not staged)
        bool live = u + 1u < u1;
        uint un = min(u + 1u, u1 - 1u);
        uvec4 at = GEMM_WAT(un);
        GEMM_WUNIT(nl, b2, b3, at, un, q, ab);
#ifdef PAIR
        vec4 q2[8];
        vec4 ab2;
        GEMM_WUNIT2(nl, b2, b3, at, un, q2, ab2);
        for (uint i = 0u; i < 8u; i++) {
            q[i] = second ? q2[i] : q[i];
        }
        ab = second ? ab2 : ab;
#endif
        gemm_part_w(q, ab, pw);
        gemm_fetch_x(GEMM_UX(un), live, m0, b2, b3, px, sq);
        gemm_step(tx, ty, acc);
    }
}
