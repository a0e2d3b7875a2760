// GEMV: y[n, c] = sum_k W[k, n] * x[k, c] for the MCOLS columns c of x
// (m <= 8: decode), each weight row read once. src/kernels/matmul.c
// declares around this file:
//   defines   TEAM (invocations per row team), KSPLIT (teams sharing rows,
//             each taking every KSPLIT-th run of TEAM units), NR (rows per
//             team), MCOLS,
//             XS (elements of x per column and slice, a multiple of 256),
//             UNROLL (units a lane has in flight), PAIR (a second weight of
//             the same x: gate/up), GEMV_SUBGROUP (reduce with subgroupAdd;
//             teams are then the subgroups), load_w_MINS (runs have offsets)
//   uniforms  K, n_count (rows of this dispatch: a weight chunk's), n_base,
//             xb2, r2, r3, w_off, w_nb1, w_nb2, w_nb3 (bytes; w2_* of the pair)
//   shared    vec4 xs[]: MCOLS slices of x (XS4P vec4 each); vec4 xr[]: the
//             partial sums (without subgroups, or with KSPLIT > 1)
//   loaders   load_w_wat(u), load_w_wunit(row_byte, at, u, q, ab),
//             load_w_wunit_x(u) (and load_u_wunit of the pair): 32-element
//             units of a row, see glsl/quant/common.glsl and wload.c
//   hooks     gemv_x and gemv_store, generated after this file: the
//             activation with its fused prologue, the store with its
//             epilogue (bias, activation, residual, gating of the pair).
//
// A workgroup computes ROWS = (WG_SIZE / TEAM / KSPLIT) * NR consecutive
// rows: row group g (KSPLIT teams) the rows g*NR .. g*NR + NR-1, team part
// p's lanes the row's units p*TEAM + lane, + TEAM*KSPLIT, ... Every unit decodes its scales once and applies them after
// the dot product of its two runs of 16 elements. x is loaded once per
// workgroup (in slices of XS elements when K is longer) into shared
// memory, where every row of the workgroup reads it. A team's partial sums
// meet in subgroupAdd, or, without subgroups, in shared memory: one
// barrier, then one invocation per sum adds its team's TEAM values.
float gemv_x(uint k, uint c, uint b2, uint b3);
void gemv_store(uint n, uint c, uint b2, uint b3, float dot, float dot2);

#define NTEAM (WG_SIZE / TEAM)
#define NGROUP (NTEAM / KSPLIT)
#define ROWS (NGROUP * NR)
#define NACC (NR * MCOLS)
#define NACC4 ((NACC + 3u) / 4u)
#define XS4 (XS / 4u)
// x is kept with a spare vec4 after every 8 (one per 32 elements): lanes
// read the units of consecutive 32-element runs, 144 bytes apart, which
// spreads them over the banks (128 bytes apart, every lane of a quarter
// warp would wait on the same four banks)
#define XS4P (XS4 + XS4 / 8u)

#define FILL 4u

#define XV(o, c) xs[(c) * XS4P + (o) + ((o) >> 3u)]

// The x of a unit (its two runs at vec4 offsets xo in the slice of column
// c) and, for types whose runs have an offset, the runs' sums.
void gemv_unit_x(uvec2 xo, uint c, out vec4 x[8], out vec2 xsum) {
    for (uint i = 0u; i < 4u; i++) {
        x[i] = XV(xo.x + i, c);
        x[4u + i] = XV(xo.y + i, c);
    }
#ifdef load_w_MINS
    xsum = vec2(dot(x[0] + x[1] + x[2] + x[3], vec4(1.0)), dot(x[4] + x[5] + x[6] + x[7], vec4(1.0)));
#else
    xsum = vec2(0.0);
#endif
}

// The dot product of a unit's 32 weights with its x, scales applied after
// the sums of each run.
float gemv_unit_dot(vec4 q[8], vec4 ab, vec4 x[8], vec2 xsum) {
    float s0 = dot(q[0], x[0]) + dot(q[1], x[1]) + dot(q[2], x[2]) + dot(q[3], x[3]);
    float s1 = dot(q[4], x[4]) + dot(q[5], x[5]) + dot(q[6], x[6]) + dot(q[7], x[7]);
#ifdef load_w_MINS
    return ab.x * s0 + ab.y * xsum.x + ab.z * s1 + ab.w * xsum.y;
#else
    return ab.x * s0 + ab.z * s1;
#endif
}

// One unit u of each of the team's rows into acc (u past the slice's end
// u1: its last unit again, weighed 0).
#ifdef PAIR
#define GEMV_ROWS uint rb[NR], uint rb2[NR]
#define GEMV_ACC inout float acc[NACC4 * 4u], inout float acc2[NACC4 * 4u]
#define GEMV_ROWS_ARGS rb, rb2, acc, acc2
#else
#define GEMV_ROWS uint rb[NR]
#define GEMV_ACC inout float acc[NACC4 * 4u]
#define GEMV_ROWS_ARGS rb, acc
#endif
void gemv_step(uint u, uint u1, uint k0, GEMV_ROWS, GEMV_ACC) {
    float live = u < u1 ? 1.0 : 0.0;
    u = min(u, u1 - 1u);
    uvec2 xo = (load_w_wunit_x(u) - k0) / 4u;
    uvec4 at = load_w_wat(u); // the same in every row (and the pair's)
#if MCOLS == 1
    vec4 x[8];
    vec2 xsum;
    gemv_unit_x(xo, 0u, x, xsum);
#endif
    for (uint r = 0u; r < NR; r++) {
        vec4 q[8];
        vec4 ab;
        load_w_wunit(rb[r], at, u, q, ab);
#ifdef PAIR
        vec4 q2[8];
        vec4 ab2;
        load_u_wunit(rb2[r], at, u, q2, ab2);
#endif
        for (uint c = 0u; c < MCOLS; c++) {
#if MCOLS > 1
            vec4 x[8];
            vec2 xsum;
            gemv_unit_x(xo, c, x, xsum);
#endif
            acc[r * MCOLS + c] += live * gemv_unit_dot(q, ab, x, xsum);
#ifdef PAIR
            acc2[r * MCOLS + c] += live * gemv_unit_dot(q2, ab2, x, xsum);
#endif
        }
    }
}

void gemv_main() {
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
    uint rg = team / KSPLIT; // the team's row group
    uint kp = team % KSPLIT; // and its part of the units
    // Workgroups take the blocks of ROWS rows g, g + nwg, ... (the dispatch
    // may be smaller than the blocks); when one slice holds x, it is loaded
    // once and serves them all. g is uniform over the workgroup, so every
    // barrier below is reached by all of it or by none.
    uint g0 = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    uint nwg = gl_NumWorkGroups.x * gl_NumWorkGroups.y;
    for (uint g = g0; g * ROWS < n_count; g += nwg) {
    uint nl0 = g * ROWS; // first local row (within the chunk)
    // the team's rows; rows past the end repeat the last one (not stored)
    uint rb[NR];
#ifdef PAIR
    uint rb2[NR];
#endif
    for (uint r = 0u; r < NR; r++) {
        uint nl = min(nl0 + rg * NR + r, n_count - 1u);
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
        if (g == g0 || K > XS) { // x is not in xs yet
        if (k0 > 0u || g != g0) {
            memoryBarrierShared();
            barrier(); // every lane is done with the last slice
        }
        // the slice's whole units (zeros past K); FILL vec4 an invocation
        // in flight at once
        uint kn4 = (min(XS, K - k0) + 31u) / 32u * 8u;
        for (uint c = 0u; c < MCOLS; c++) {
            for (uint i0 = lid; i0 < kn4; i0 += WG_SIZE * FILL) {
                vec4 v[FILL];
                for (uint f = 0u; f < FILL; f++) {
                    uint k = k0 + 4u * (i0 + f * WG_SIZE);
                    if (k + 3u < K) {
                        v[f] = vec4(gemv_x(k, c, b2, b3), gemv_x(k + 1u, c, b2, b3),
                                    gemv_x(k + 2u, c, b2, b3), gemv_x(k + 3u, c, b2, b3));
                    } else {
                        v[f] = vec4(k < K ? gemv_x(k, c, b2, b3) : 0.0,
                                    k + 1u < K ? gemv_x(k + 1u, c, b2, b3) : 0.0,
                                    k + 2u < K ? gemv_x(k + 2u, c, b2, b3) : 0.0, 0.0);
                    }
                }
                for (uint f = 0u; f < FILL; f++) {
                    if (i0 + f * WG_SIZE < kn4) {
                        uint o = i0 + f * WG_SIZE;
                        xs[c * XS4P + o + (o >> 3u)] = v[f];
                    }
                }
            }
        }
        memoryBarrierShared();
        barrier();
        }
        uint u0 = k0 / 32u;
        uint u1 = min(nu, (k0 + XS) / 32u);
        // UNROLL units a lane, one after another in the code (no loop a
        // compiler may keep rolled), so their loads are in flight together
        for (uint ub = u0 + kp * TEAM + lane; ub < u1; ub += TEAM * KSPLIT * UNROLL) {
            gemv_step(ub, u1, k0, GEMV_ROWS_ARGS);
#if UNROLL > 1
            gemv_step(ub + TEAM * KSPLIT, u1, k0, GEMV_ROWS_ARGS);
#endif
#if UNROLL > 2
            gemv_step(ub + 2u * TEAM * KSPLIT, u1, k0, GEMV_ROWS_ARGS);
            gemv_step(ub + 3u * TEAM * KSPLIT, u1, k0, GEMV_ROWS_ARGS);
#endif
        }
    }
#if defined(GEMV_SUBGROUP) && KSPLIT == 1
    for (uint i = 0u; i < NACC; i++) {
        float s = subgroupAdd(acc[i]);
#ifdef PAIR
        float s2 = subgroupAdd(acc2[i]);
#else
        float s2 = 0.0;
#endif
        uint nl = nl0 + rg * NR + i / MCOLS;
        if (lane == i % TEAM && nl < n_count) {
            gemv_store(n_base + nl, i % MCOLS, b2, b3, s, s2);
        }
    }
#elif defined(GEMV_SUBGROUP)
    // each team's sums, then the KSPLIT teams of a row group add theirs
    float s[NACC4 * 4u];
#ifdef PAIR
    float s2[NACC4 * 4u];
#endif
    for (uint i = 0u; i < NACC; i++) {
        s[i] = subgroupAdd(acc[i]);
#ifdef PAIR
        s2[i] = subgroupAdd(acc2[i]);
#endif
    }
    memoryBarrierShared();
    barrier(); // the last block's sums are read
    for (uint i = 0u; i < NACC; i++) {
        uint f = (rg * NACC + i) * KSPLIT + kp;
        if (lane == i % TEAM) {
            xr[f >> 2u][f & 3u] = s[i];
#ifdef PAIR
            f += NTEAM * NACC;
            xr[f >> 2u][f & 3u] = s2[i];
#endif
        }
    }
    memoryBarrierShared();
    barrier();
    for (uint j = lid; j < NGROUP * NACC; j += WG_SIZE) {
        uint gi = j / NACC, i = j % NACC;
        float t = 0.0, t2 = 0.0;
        for (uint p = 0u; p < KSPLIT; p++) {
            uint f = j * KSPLIT + p;
            t += xr[f >> 2u][f & 3u];
#ifdef PAIR
            f += NTEAM * NACC;
            t2 += xr[f >> 2u][f & 3u];
#endif
        }
        uint nl = nl0 + gi * NR + i / MCOLS;
        if (nl < n_count) {
            gemv_store(n_base + nl, i % MCOLS, b2, b3, t, t2);
        }
    }
#else
    memoryBarrierShared();
    barrier(); // the last block's sums are read
    for (uint i = 0u; i < NACC4; i++) {
        xr[i * WG_SIZE + lid] = vec4(acc[4u * i], acc[4u * i + 1u], acc[4u * i + 2u], acc[4u * i + 3u]);
#ifdef PAIR
        xr[(NACC4 + i) * WG_SIZE + lid] =
            vec4(acc2[4u * i], acc2[4u * i + 1u], acc2[4u * i + 2u], acc2[4u * i + 3u]);
#endif
    }
    memoryBarrierShared();
    barrier();
    for (uint j = lid; j < NGROUP * NACC; j += WG_SIZE) { // one invocation a sum
        uint gi = j / NACC, i = j % NACC;
        float s = 0.0, s2 = 0.0;
        for (uint l = 0u; l < TEAM * KSPLIT; l++) {
            s += xr[(i / 4u) * WG_SIZE + gi * TEAM * KSPLIT + l][i & 3u];
#ifdef PAIR
            s2 += xr[(NACC4 + i / 4u) * WG_SIZE + gi * TEAM * KSPLIT + l][i & 3u];
#endif
        }
        uint nl = nl0 + gi * NR + i / MCOLS;
        if (nl < n_count) {
            gemv_store(n_base + nl, i % MCOLS, b2, b3, s, s2);
        }
    }
#endif
    }
}
