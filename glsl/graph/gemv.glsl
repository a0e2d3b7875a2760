// GEMV: y[n, c] = sum_k W[k, n] * x[k, c] for the MCOLS columns c of x
// (m <= 8: decode), each weight row read once. src/kernels/matmul.c
// declares around this file:
//   defines   TEAM (invocations per row team), NR (rows per team), MCOLS,
//             XS (elements of x per column and slice, a multiple of 256),
//             UNROLL (units a lane has in flight), PAIR (a second weight of
//             the same x: gate/up), GEMV_SUBGROUP (reduce with subgroupAdd;
//             teams are then the subgroups), load_w_MINS (runs have offsets)
//   uniforms  K, n_count (rows of this dispatch: a weight chunk's), n_base,
//             xb2, r2, r3, w_off, w_nb1, w_nb2, w_nb3 (bytes; w2_* of the pair)
//   shared    vec4 xs[]: MCOLS slices of x, then the fallback's reduction
//   loaders   load_w_wunit(row_byte, u, q, ab), load_w_wunit_x(u) (and
//             load_u_* of the pair): 32-element units of a row, see
//             glsl/quant/common.glsl
//   hooks     gemv_x and gemv_store, generated after this file: the
//             activation with its fused prologue, the store with its
//             epilogue (bias, activation, residual, gating of the pair).
//
// A workgroup computes ROWS = (WG_SIZE / TEAM) * NR consecutive rows: team
// t the rows t*NR .. t*NR + NR-1, its lanes the row's units lane,
// lane + TEAM, ... Every unit decodes its scales once and applies them after
// the dot product of its two runs of 16 elements. x is loaded once per
// workgroup (in slices of XS elements when K is longer) into shared
// memory, where every row of the workgroup reads it. A team's partial sums
// meet in subgroupAdd, or, without subgroups, in shared memory: one
// barrier, then one invocation per sum adds its team's TEAM values.
float gemv_x(uint k, uint c, uint b2, uint b3);
void gemv_store(uint n, uint c, uint b2, uint b3, float dot, float dot2);

#define NTEAM (WG_SIZE / TEAM)
#define ROWS (NTEAM * NR)
#define NACC (NR * MCOLS)
#define NACC4 ((NACC + 3u) / 4u)
#define XS4 (XS / 4u)

// The dot product of a unit's 32 weights with x at run offsets xo (in
// xs, vec4 units) of column c, scales applied.
float gemv_unit_dot(vec4 q[8], vec4 ab, uvec2 xo) {
    vec4 x0 = xs[xo.x], x1 = xs[xo.x + 1u], x2 = xs[xo.x + 2u], x3 = xs[xo.x + 3u];
    vec4 x4 = xs[xo.y], x5 = xs[xo.y + 1u], x6 = xs[xo.y + 2u], x7 = xs[xo.y + 3u];
    float s0 = dot(q[0], x0) + dot(q[1], x1) + dot(q[2], x2) + dot(q[3], x3);
    float s1 = dot(q[4], x4) + dot(q[5], x5) + dot(q[6], x6) + dot(q[7], x7);
#ifdef load_w_MINS
    float m0 = dot(x0 + x1 + x2 + x3, vec4(1.0));
    float m1 = dot(x4 + x5 + x6 + x7, vec4(1.0));
    return ab.x * s0 + ab.y * m0 + ab.z * s1 + ab.w * m1;
#else
    return ab.x * s0 + ab.z * s1;
#endif
}

void gemv_main() {
    uint g = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    uint nl0 = g * ROWS; // first local row (within the chunk)
    if (nl0 >= n_count) {
        return; // uniform over the workgroup: no barrier is skipped by part of it
    }
    uint b2 = gl_WorkGroupID.z % xb2;
    uint b3 = gl_WorkGroupID.z / xb2;
    uint lid = gl_LocalInvocationIndex;
#ifdef GEMV_SUBGROUP
    uint team = gl_SubgroupID;
    uint lane = gl_SubgroupInvocationID;
#else
    uint team = lid / TEAM;
    uint lane = lid % TEAM;
#endif
    // the team's rows; rows past the end repeat the last one (not stored)
    uint rb[NR];
#ifdef PAIR
    uint rb2[NR];
#endif
    for (uint r = 0u; r < NR; r++) {
        uint nl = min(nl0 + team * NR + r, n_count - 1u);
        rb[r] = w_off + nl * w_nb1 + (b2 / r2) * w_nb2 + (b3 / r3) * w_nb3;
#ifdef PAIR
        rb2[r] = w2_off + nl * w2_nb1 + (b2 / r2) * w2_nb2 + (b3 / r3) * w2_nb3;
#endif
    }
    float acc[NACC4 * 4u];
#ifdef PAIR
    float acc2[NACC4 * 4u];
#endif
    for (uint i = 0u; i < NACC4 * 4u; i++) {
        acc[i] = 0.0;
#ifdef PAIR
        acc2[i] = 0.0;
#endif
    }
    uint nu = (K + 31u) / 32u; // units of a row
    for (uint k0 = 0u; k0 < K; k0 += XS) {
        if (k0 > 0u) {
            memoryBarrierShared();
            barrier(); // every lane is done with the last slice
        }
        // the slice's whole units (zeros past K)
        uint kn4 = (min(XS, K - k0) + 31u) / 32u * 8u;
        for (uint c = 0u; c < MCOLS; c++) {
            for (uint i = lid; i < kn4; i += WG_SIZE) {
                uint k = k0 + 4u * i;
                xs[c * XS4 + i] = vec4(k < K ? gemv_x(k, c, b2, b3) : 0.0,
                                       k + 1u < K ? gemv_x(k + 1u, c, b2, b3) : 0.0,
                                       k + 2u < K ? gemv_x(k + 2u, c, b2, b3) : 0.0,
                                       k + 3u < K ? gemv_x(k + 3u, c, b2, b3) : 0.0);
            }
        }
        memoryBarrierShared();
        barrier();
        uint u0 = k0 / 32u;
        uint u1 = min(nu, (k0 + XS) / 32u);
        for (uint ub = u0 + lane; ub < u1; ub += TEAM * UNROLL) {
            for (uint j = 0u; j < UNROLL; j++) {
                // the unroll's units past the slice repeat its last one, weighed 0
                uint u = ub + j * TEAM;
                float live = u < u1 ? 1.0 : 0.0;
                u = min(u, u1 - 1u);
                uvec2 xo = (load_w_wunit_x(u) - k0) / 4u;
                for (uint r = 0u; r < NR; r++) {
                    vec4 q[8];
                    vec4 ab;
                    load_w_wunit(rb[r], u, q, ab);
#ifdef PAIR
                    vec4 q2[8];
                    vec4 ab2;
                    load_u_wunit(rb2[r], u, q2, ab2);
#endif
                    for (uint c = 0u; c < MCOLS; c++) {
                        acc[r * MCOLS + c] += live * gemv_unit_dot(q, ab, xo + c * XS4);
#ifdef PAIR
                        acc2[r * MCOLS + c] += live * gemv_unit_dot(q2, ab2, xo + c * XS4);
#endif
                    }
                }
            }
        }
    }
#ifdef GEMV_SUBGROUP
    for (uint i = 0u; i < NACC; i++) {
        float s = subgroupAdd(acc[i]);
#ifdef PAIR
        float s2 = subgroupAdd(acc2[i]);
#else
        float s2 = 0.0;
#endif
        uint nl = nl0 + team * NR + i / MCOLS;
        if (lane == i % TEAM && nl < n_count) {
            gemv_store(n_base + nl, i % MCOLS, b2, b3, s, s2);
        }
    }
#else
    memoryBarrierShared();
    barrier(); // the last slice is read: xs holds the partial sums now
    for (uint i = 0u; i < NACC4; i++) {
        xs[i * WG_SIZE + lid] = vec4(acc[4u * i], acc[4u * i + 1u], acc[4u * i + 2u], acc[4u * i + 3u]);
#ifdef PAIR
        xs[(NACC4 + i) * WG_SIZE + lid] =
            vec4(acc2[4u * i], acc2[4u * i + 1u], acc2[4u * i + 2u], acc2[4u * i + 3u]);
#endif
    }
    memoryBarrierShared();
    barrier();
    if (lid < NTEAM * NACC) {
        uint t = lid / NACC, i = lid % NACC;
        float s = 0.0, s2 = 0.0;
        for (uint l = 0u; l < TEAM; l++) {
            s += xs[(i / 4u) * WG_SIZE + t * TEAM + l][i & 3u];
#ifdef PAIR
            s2 += xs[(NACC4 + i / 4u) * WG_SIZE + t * TEAM + l][i & 3u];
#endif
        }
        uint nl = nl0 + t * NR + i / MCOLS;
        if (nl < n_count) {
            gemv_store(n_base + nl, i % MCOLS, b2, b3, s, s2);
        }
    }
#endif
}
