// GEMV: y[n, c] = sum_k W[k, n] * x[k, c] for the M columns c of x (M a
// uniform: decode's 1, a short prompt's up to gemv_max_m), MCOLS of them
// at a time, each weight row read once a pass. src/kernels/matmul.c
// declares around this file:
//   defines   TEAM (invocations per row team), KSPLIT (teams sharing rows,
//             each taking every KSPLIT-th run of TEAM units), NR (rows per
//             team), MCOLS (columns a pass: 1 for decode, the device
//             class's at most for more), GEMV_PASSES (M is more than MCOLS
//             or may be: passes over the columns), XS (elements of x per column and slice, a
//             multiple of 256), UNROLL (units a lane has in flight where
//             they are not pipelined, gemv_units.glsl's GEMV_RAW), FILL
//             (vec4 of x an invocation loads at once into xs), NMEMB
//             (matmuls of the kernel: 1, or a grouped q/k/v's up to 4),
//             PAIR (a second weight of the same x: gate/up), GEMV_NORM (a
//             folded rms_norm: x's squares summed where x is loaded),
//             GEMV_SUBGROUP (reduce with subgroupAdd; teams are then the
//             subgroups)
//   uniforms  K, M, n_count and n_base (the rows of this dispatch: a weight
//             chunk's), n_blocks, xb2, r2, r3, w_off, w_nb1, w_nb2, w_nb3
//             (bytes; w2_* of the pair), and per sibling j s<j>_off,
//             s<j>_nb1, s<j>_base, s<j>_count, s<j>_g0 (its first block)
//   shared    vec4 xs[]: MCOLS slices of x (XS4P vec4 each); vec4 xr[]: the
//             partial sums (without subgroups, or with KSPLIT > 1)
//   loaders   per matmul (wload.c): 32-element units of a row, see
//             glsl/quant/common.glsl
//   after it  a copy of glsl/graph/gemv_units.glsl per matmul (gemv_units_j),
//             and the hooks generated from the graph: gemv_x (the
//             activation with its fused prologue; adds a folded norm's
//             squares into sq), gemv_store (matmul sel's store with its
//             epilogue: bias, activation, residual, the pair's gating),
//             gemv_norm_scale (the folded norm's scale of a column's sum).
//
// Rows come in blocks of ROWS = (WG_SIZE / TEAM / KSPLIT) * NR: row group g
// (KSPLIT teams) computes rows g*NR .. g*NR + NR-1, team part p's lanes the
// row's units p*TEAM + lane, + TEAM*KSPLIT, ... Every unit decodes its
// scales once and applies them after the dot product of its two runs of 16
// elements. x is loaded once per workgroup (in slices of XS elements when K
// is longer) into shared memory, where every row of the workgroup reads it.
// A team's partial sums meet in subgroupAdd, or, without subgroups, in
// shared memory: one barrier, then one invocation per sum adds its team's.
float gemv_x(uint k, uint c, uint b2, uint b3, inout float sq);
void gemv_store(uint sel, uint n, uint c, uint b2, uint b3, float dot, float dot2);
#ifdef GEMV_NORM
float gemv_norm_scale(float sq);
#endif

#define NTEAM (WG_SIZE / TEAM)
#define NGROUP (NTEAM / KSPLIT)
#define ROWS (NGROUP * NR)
#define NACC (NR * MCOLS)
#define NACC4 ((NACC + 3u) / 4u)
#define XS4 (XS / 4u)
#ifdef GEMV_PASSES
#define GEMV_LIVE(c) (c0 + (c) < M) // column c of this pass exists
#else
#define GEMV_LIVE(c) true
#endif
// x is kept with a spare vec4 after every 8 (one per 32 elements): lanes
// read the units of consecutive 32-element runs, 144 bytes apart, which
// spreads them over the banks (128 bytes apart, every lane of a quarter
// warp would wait on the same four banks)
#define XS4P (XS4 + XS4 / 8u)

#ifdef PAIR
#define GEMV_ROWS uint rb[NR], uint rb2[NR]
#define GEMV_ACC inout float acc[NACC4 * 4u], inout float acc2[NACC4 * 4u]
#define GEMV_RARGS rb, rb2
#define GEMV_AARGS acc, acc2
#define WSETS 2u // the words of a unit of both weights
#else
#define GEMV_ROWS uint rb[NR]
#define GEMV_ACC inout float acc[NACC4 * 4u]
#define GEMV_RARGS rb
#define GEMV_AARGS acc
#define WSETS 1u
#endif
#define GEMV_ROWS_ARGS GEMV_RARGS, GEMV_AARGS

void gemv_units_0(uint u0, uint u1, uint k0, uint first, GEMV_ROWS, GEMV_ACC);
#if NMEMB > 1
void gemv_units_1(uint u0, uint u1, uint k0, uint first, GEMV_ROWS, GEMV_ACC);
#endif
#if NMEMB > 2
void gemv_units_2(uint u0, uint u1, uint k0, uint first, GEMV_ROWS, GEMV_ACC);
#endif
#if NMEMB > 3
void gemv_units_3(uint u0, uint u1, uint k0, uint first, GEMV_ROWS, GEMV_ACC);
#endif

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
#ifdef GEMV_LEAN
    // GEMV_LEAN (Mali's classes: the fewest registers, for full occupancy):
    // what is cheap to compute again where it is used (from uniforms, lid,
    // g and sel) is not held across the loops; computed once before them,
    // a compiler would keep each copy's first (CSE) and hold it throughout
#define GEMV_FIRST ((lid / TEAM % KSPLIT) * TEAM + lid % TEAM)
#else
#define GEMV_FIRST (kp * TEAM + lane)
#endif
    float sq[MCOLS]; // a folded norm: this invocation's squares of each column
    float rs[MCOLS]; // and the columns' scales
#if defined(GEMV_LEAN) && defined(GEMV_NORM)
    float ss[MCOLS]; // the workgroup's sums of the squares (the scales from them)
#endif
    uint g0 = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
#ifdef GEMV_LEAN
#define GEMV_NWG (gl_NumWorkGroups.x * gl_NumWorkGroups.y)
#else
    uint nwg = gl_NumWorkGroups.x * gl_NumWorkGroups.y;
#define GEMV_NWG nwg
#endif
    // Passes over the columns, MCOLS at a time (columns c0 + c; past M, x
    // reads as zeros and nothing is stored): the program is the same for
    // every M the variant takes. Without GEMV_PASSES (decode's one column)
    // none: c0 is 0 and every column is live.
#ifdef GEMV_PASSES
    for (uint c0 = 0u; c0 < M; c0 += MCOLS) {
#else
    {
    const uint c0 = 0u;
#endif
    for (uint c = 0u; c < MCOLS; c++) {
        sq[c] = 0.0;
        rs[c] = 1.0;
#if defined(GEMV_LEAN) && defined(GEMV_NORM)
        ss[c] = 0.0;
#endif
    }
    // Workgroups take the blocks of ROWS rows g, g + nwg, ... (the dispatch
    // may be smaller than the blocks); when one slice holds x, it is loaded
    // once and serves them all. g is uniform over the workgroup, so every
    // barrier below is reached by all of it or by none.
    for (uint g = g0; g < n_blocks; g += GEMV_NWG) {
    bool fill = g == g0 || K > XS; // x is not in xs yet
    // a group: the matmul (sel) block g belongs to, its rows and weight
    uint sel = 0u, gl = g, cnt = n_count, nbase = n_base;
    uint roff = w_off + (b2 / r2) * w_nb2 + (b3 / r3) * w_nb3, rnb = w_nb1;
#if NMEMB > 1
    if (g >= s1_g0) {
        sel = 1u; gl = g - s1_g0; cnt = s1_count; nbase = s1_base; roff = s1_off; rnb = s1_nb1;
    }
#endif
#if NMEMB > 2
    if (g >= s2_g0) {
        sel = 2u; gl = g - s2_g0; cnt = s2_count; nbase = s2_base; roff = s2_off; rnb = s2_nb1;
    }
#endif
#if NMEMB > 3
    if (g >= s3_g0) {
        sel = 3u; gl = g - s3_g0; cnt = s3_count; nbase = s3_base; roff = s3_off; rnb = s3_nb1;
    }
#endif
    uint nl0 = gl * ROWS; // first local row (within the chunk)
    // the team's rows; rows past the end repeat the last one (not stored)
    uint rb[NR];
#ifdef PAIR
    uint rb2[NR];
#endif
    for (uint r = 0u; r < NR; r++) {
        uint nl = min(nl0 + rg * NR + r, cnt - 1u);
        rb[r] = roff + nl * rnb;
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
#ifndef GEMV_LEAN
    uint nu = (K + 31u) / 32u; // units of a row
#endif
    for (uint k0 = 0u; k0 < K; k0 += XS) {
#ifdef GEMV_LEAN
        uint nu = (K + 31u) / 32u;
#endif
        if (fill) {
        if (k0 > 0u || g != g0 || c0 > 0u) {
            memoryBarrierShared();
            barrier(); // every lane is done with the last slice
        }
        // the slice's whole units (zeros past K); FILL vec4 an invocation
        // in flight at once
        uint kn4 = (min(XS, K - k0) + 31u) / 32u * 8u;
#ifdef GEMV_LEAN
        // an element at a time, in a loop of a uniform count (2 * gemv_two):
        // one element's loads in flight, not a vec4's
        for (uint c = 0u; c < MCOLS; c++) {
            for (uint i0 = lid; i0 < kn4; i0 += WG_SIZE) {
                for (uint e = 0u; e < 2u * gemv_two; e++) {
                    uint k = k0 + 4u * i0 + e;
                    float xv = 0.0;
                    if (k < K && GEMV_LIVE(c)) {
                        xv = gemv_x(k, c0 + c, b2, b3, sq[c]);
                    }
                    xs[c * XS4P + i0 + (i0 >> 3u)][e] = xv;
                }
            }
        }
#else
        for (uint c = 0u; c < MCOLS; c++) {
            for (uint i0 = lid; i0 < kn4; i0 += WG_SIZE * FILL) {
                vec4 v[FILL];
                for (uint f = 0u; f < FILL; f++) {
                    // each element of x once (a folded norm counts its squares)
                    uint k = k0 + 4u * (i0 + f * WG_SIZE);
                    v[f] = vec4(0.0);
                    if (i0 + f * WG_SIZE < kn4 && GEMV_LIVE(c)) {
                        uint cc = c0 + c;
                        if (k + 3u < K) {
                            v[f] = vec4(gemv_x(k, cc, b2, b3, sq[c]),
                                        gemv_x(k + 1u, cc, b2, b3, sq[c]),
                                        gemv_x(k + 2u, cc, b2, b3, sq[c]),
                                        gemv_x(k + 3u, cc, b2, b3, sq[c]));
                        } else {
                            v[f].x = k < K ? gemv_x(k, cc, b2, b3, sq[c]) : 0.0;
                            v[f].y = k + 1u < K ? gemv_x(k + 1u, cc, b2, b3, sq[c]) : 0.0;
                            v[f].z = k + 2u < K ? gemv_x(k + 2u, cc, b2, b3, sq[c]) : 0.0;
                        }
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
#endif
        memoryBarrierShared();
        barrier();
#if defined(GEMV_LEAN) && defined(GEMV_NORM)
        // the slice's squares into the workgroup's sum now: one value held
        // across the units (the sum), not an invocation's squares and the
        // scale
        for (uint c = 0u; c < MCOLS; c++) {
            ss[c] = (k0 == 0u ? 0.0 : ss[c]) + wg_reduce_sum(sq[c]);
            sq[c] = 0.0;
        }
#endif
        }
        uint u0 = k0 / 32u;
        uint u1 = min(nu, (k0 + XS) / 32u);
        uint first = GEMV_FIRST;
#if NMEMB > 3
        if (sel == 3u) {
            gemv_units_3(u0, u1, k0, first, GEMV_ROWS_ARGS);
        } else
#endif
#if NMEMB > 2
        if (sel == 2u) {
            gemv_units_2(u0, u1, k0, first, GEMV_ROWS_ARGS);
        } else
#endif
#if NMEMB > 1
        if (sel == 1u) {
            gemv_units_1(u0, u1, k0, first, GEMV_ROWS_ARGS);
        } else
#endif
        {
            gemv_units_0(u0, u1, k0, first, GEMV_ROWS_ARGS);
        }
    }
#if defined(GEMV_LEAN) && NMEMB > 1
    // the group's count, base and first row again, from sel (selects, not
    // the comparisons of g above, which a compiler would keep instead)
    cnt = n_count;
    nbase = n_base;
    nl0 = g * ROWS;
    if (sel == 1u) {
        cnt = s1_count; nbase = s1_base; nl0 = (g - s1_g0) * ROWS;
    }
#if NMEMB > 2
    if (sel == 2u) {
        cnt = s2_count; nbase = s2_base; nl0 = (g - s2_g0) * ROWS;
    }
#endif
#if NMEMB > 3
    if (sel == 3u) {
        cnt = s3_count; nbase = s3_base; nl0 = (g - s3_g0) * ROWS;
    }
#endif
#endif
#if defined(GEMV_LEAN) && defined(GEMV_NORM)
    for (uint c = 0u; c < MCOLS; c++) {
        rs[c] = gemv_norm_scale(ss[c]);
    }
#elif defined(GEMV_NORM)
    if (fill) { // every element of x passed through this workgroup once: its squares
        for (uint c = 0u; c < MCOLS; c++) {
            rs[c] = gemv_norm_scale(wg_reduce_sum(sq[c]));
            sq[c] = 0.0;
        }
    }
#endif
#if defined(GEMV_SUBGROUP) && KSPLIT == 1
    for (uint i = 0u; i < NACC; i++) {
        float s = subgroupAdd(acc[i]);
#ifdef PAIR
        float s2 = subgroupAdd(acc2[i]);
#else
        float s2 = 0.0;
#endif
        uint nl = nl0 + rg * NR + i / MCOLS;
        if (lane == i % TEAM && nl < cnt && GEMV_LIVE(i % MCOLS)) {
            float r = rs[i % MCOLS];
            gemv_store(sel, nbase + nl, c0 + i % MCOLS, b2, b3, s * r, s2 * r);
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
        if (nl < cnt && GEMV_LIVE(i % MCOLS)) {
            float r = rs[i % MCOLS];
            gemv_store(sel, nbase + nl, c0 + i % MCOLS, b2, b3, t * r, t2 * r);
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
        if (nl < cnt && GEMV_LIVE(i % MCOLS)) {
            float r = rs[i % MCOLS];
            gemv_store(sel, nbase + nl, c0 + i % MCOLS, b2, b3, s * r, s2 * r);
        }
    }
#endif
    }
    }
}
