// One matmul's units (glsl/graph/gemv.glsl): src/kernels/matmul.c adds a
// copy of this file per matmul of the kernel (a grouped q/k/v has up to
// four, each weight of its own type), with these names defined around it:
//   GEMV_UNITS, GEMV_STEPS, GEMV_STEP, GEMV_UX, GEMV_UDOT (and, pipelined,
//   GEMV_LOAD, GEMV_DEC)                       this copy's functions
//   W_WAT, W_WUNIT, W_WUNIT_X                  its weight's loader (wload.c)
//   W_MINS                                     defined: the runs have offsets
//   U_WUNIT                                    the pair's loader (with PAIR)
//   GEMV_RAW, W_WRAW, W_WDEC, U_WRAW, U_WDEC   where the loaders split a unit
//                                              into its loads and its decode
//                                              (wload.c): the pipelined units
//   W_WUHALF, U_WUHALF                         with GEMV_HALF (the kernel's):
//                                              the loaders' runs, a unit's
//                                              half each (wload.c)
//   GEMV_QUAD, W_WUQ, W_WUAB, U_WUQ, U_WUAB    with GEMV_HALF, where the
//                                              loaders have them: a run's
//                                              vec4 of quants one at a time
//                                              and its scale (wload.c)
//   GEMV_PLAIN                                 with GEMV_QUAD, where the
//                                              weight (and the pair's) is
//                                              f32, f16 or bf16

// The x of a unit (its two runs at vec4 offsets xo in the slice of column
// c) and, for types whose runs have an offset, the runs' sums. A run starts
// on a multiple of 4 vec4, so its four share one padding (vec4 o of x lies at o + o / 8):
// one address a run, the rest constant offsets from it.
void GEMV_UX(uvec2 xo, uint c, out vec4 x[8], out vec2 xsum) {
    uvec2 a = c * XS4P + xo + (xo >> 3u);
    for (uint i = 0u; i < 4u; i++) {
        x[i] = xs[a.x + i];
        x[4u + i] = xs[a.y + i];
    }
#ifdef W_MINS
    xsum = vec2(dot(x[0] + x[1] + x[2] + x[3], vec4(1.0)), dot(x[4] + x[5] + x[6] + x[7], vec4(1.0)));
#else
    xsum = vec2(0.0);
#endif
}

// The dot product of a unit's 32 weights with its x, scales applied after
// the sums of each run.
float GEMV_UDOT(vec4 q[8], vec4 ab, vec4 x[8], vec2 xsum) {
    float s0 = dot(q[0], x[0]) + dot(q[1], x[1]) + dot(q[2], x[2]) + dot(q[3], x[3]);
    float s1 = dot(q[4], x[4]) + dot(q[5], x[5]) + dot(q[6], x[6]) + dot(q[7], x[7]);
#ifdef W_MINS
    return ab.x * s0 + ab.y * xsum.x + ab.z * s1 + ab.w * xsum.y;
#else
    return ab.x * s0 + ab.z * s1;
#endif
}

#if defined(GEMV_HALF) && defined(GEMV_QUAD)
// The quarter units' steps begin with their unit: with more than one unit
// a step, those past u1 repeat the last one with the weight live = 0
// (GEMV_STEPS gives only units below u1 where there is one). Defined once,
// not per copy of this file.
#ifndef GEMV_STEP_UNIT
#if UNROLL == 1
#define GEMV_STEP_UNIT const float live = 1.0;
#else
#define GEMV_STEP_UNIT                                                                            \
    float live = u < u1 ? 1.0 : 0.0;                                                              \
    u = min(u, u1 - 1u);
#endif
#endif
#endif

#if defined(GEMV_HALF) && defined(GEMV_QUAD) && defined(GEMV_PLAIN)
// The quarter units of plain weights (f32, f16, bf16: GEMV_PLAIN, where
// this copy's weight and the pair's are): their runs have a scale of 1 and
// no offset, so a unit's eight vec4 go in one loop of a uniform count (4 *
// gemv_two), each product straight into acc, with no run's sums held
// beside it (with them, Mali's gate/up pair of every plain type and f16's
// and bf16's q/k/v took more than the 32 registers of full occupancy:
// docs/devices.md). W_WUQ's vec4 4h + j: the plain loaders take j up to 7
// with h = 0.
void GEMV_STEP(uint u, uint u1, uint k0, GEMV_ROWS, GEMV_ACC) {
    GEMV_STEP_UNIT
    for (uint j = 0u; j < 4u * gemv_two; j++) {
        // the unit's place in x computed in the loop, as below; its two runs
        // are consecutive, in one group of 8 vec4 of x's padding
        uint xh = (W_WUNIT_X(u).x - k0) / 4u;
        uint xa = xh + (xh >> 3u) + j;
        for (uint r = 0u; r < NR; r++) {
            uvec4 at = W_WAT(u);
            // the first column's x read before the weights (Mali-G610
            // compiled bf16's pair within 32 registers only so)
            vec4 x0 = xs[xa];
            vec4 q;
            W_WUQ(rb[r], at, u, 0u, j, q);
            for (uint c = 0u; c < MCOLS; c++) {
                acc[r * MCOLS + c] += live * dot(q, c == 0u ? x0 : xs[c * XS4P + xa]);
            }
#ifdef PAIR
            U_WUQ(rb2[r], at, u, 0u, j, q);
            for (uint c = 0u; c < MCOLS; c++) {
                acc2[r * MCOLS + c] += live * dot(q, c == 0u ? x0 : xs[c * XS4P + xa]);
            }
#endif
        }
    }
}
#elif defined(GEMV_HALF) && defined(GEMV_QUAD)
// One unit u of each of the team's rows into acc, a vec4 (4 elements) at a
// time: each of a run's four vec4 of quants with its vec4 of x, in a loop
// of a uniform count (2 * gemv_two) that a compiler cannot write out, then
// the run's scale and offset; so only one vec4 of quants and one of x are
// live at once (GEMV_QUAD: Mali's classes, whose 32 registers at full
// occupancy did not hold a run's 16 quants and 16 x beside the kernel's
// addresses: docs/devices.md). The rows and columns are loops of constant
// counts inside it, which the compilers write out: a loop holding a loop
// stays a loop, and its accumulators would become an indexed array. Each
// vec4 loads its word again (a cached uvec4).
void GEMV_STEP(uint u, uint u1, uint k0, GEMV_ROWS, GEMV_ACC) {
    GEMV_STEP_UNIT
    for (uint h = 0u; h < gemv_two; h++) {
        float s[NACC], xsum[MCOLS];
#ifdef PAIR
        float s2[NACC];
#endif
        for (uint i = 0u; i < NACC; i++) {
            s[i] = 0.0;
#ifdef PAIR
            s2[i] = 0.0;
#endif
        }
        for (uint c = 0u; c < MCOLS; c++) {
            xsum[c] = 0.0;
        }
        for (uint j = 0u; j < 2u * gemv_two; j++) {
            // everything of the unit computed here, in the loop, also what
            // does not change in it: a value computed before the loop too
            // (the run's place in x, the unit's fields) would be merged into
            // that one and held across the loop
            uvec2 xo = (W_WUNIT_X(u) - k0) / 4u;
            uint xh = h == 0u ? xo.x : xo.y;
            uint xa = xh + (xh >> 3u);
#ifdef W_MINS
            for (uint c = 0u; c < MCOLS; c++) {
                xsum[c] += dot(xs[c * XS4P + xa + j], vec4(1.0));
            }
#endif
            for (uint r = 0u; r < NR; r++) {
                // where unit u lies (W_WAT) computed where it is used, not
                // held across the loops: registers, not instructions, are short
                uvec4 at = W_WAT(u);
                vec4 q;
                W_WUQ(rb[r], at, u, h, j, q);
                for (uint c = 0u; c < MCOLS; c++) {
                    s[r * MCOLS + c] += dot(q, xs[c * XS4P + xa + j]);
                }
#ifdef PAIR
                // the pair's quants after the weight's are used: one vec4 of
                // quants live at a time
                U_WUQ(rb2[r], at, u, h, j, q);
                for (uint c = 0u; c < MCOLS; c++) {
                    s2[r * MCOLS + c] += dot(q, xs[c * XS4P + xa + j]);
                }
#endif
            }
        }
        for (uint r = 0u; r < NR; r++) {
            uvec4 at = W_WAT(u);
            vec2 ab = W_WUAB(rb[r], at, u, h);
#ifdef PAIR
            vec2 ab2 = U_WUAB(rb2[r], at, u, h);
#endif
            for (uint c = 0u; c < MCOLS; c++) {
                acc[r * MCOLS + c] += live * (ab.x * s[r * MCOLS + c] + ab.y * xsum[c]);
#ifdef PAIR
                acc2[r * MCOLS + c] += live * (ab2.x * s2[r * MCOLS + c] + ab2.y * xsum[c]);
#endif
            }
        }
    }
}
#elif defined(GEMV_HALF)
// One unit u of each of the team's rows into acc, a run (16 elements) at a
// time: a run's quants and its x, then the next run's, in a loop of
// gemv_two iterations (a uniform, 2) that a compiler cannot write out, so
// that only a run's weights and x are live at once (GEMV_HALF: the small
// GPUs' class, whose register files hold a whole unit's only at the lowest
// occupancy, or not at all: docs/devices.md). The pair's run goes with
// the weight's (one weight at a time, in a loop of its own, spilled more
// on Mali-G610).
void GEMV_STEP(uint u, uint u1, uint k0, GEMV_ROWS, GEMV_ACC) {
    float live = u < u1 ? 1.0 : 0.0;
    u = min(u, u1 - 1u);
    uvec2 xo = (W_WUNIT_X(u) - k0) / 4u;
    uvec4 at = W_WAT(u); // the same in every row (and the pair's)
    for (uint h = 0u; h < gemv_two; h++) {
        uint xh = h == 0u ? xo.x : xo.y;
        for (uint r = 0u; r < NR; r++) {
            vec4 q[4];
            vec2 ab;
            W_WUHALF(rb[r], at, u, h, q, ab);
#ifdef PAIR
            vec4 q2[4];
            vec2 ab2;
            U_WUHALF(rb2[r], at, u, h, q2, ab2);
#endif
            for (uint c = 0u; c < MCOLS; c++) {
                uint a = c * XS4P + xh + (xh >> 3u);
                vec4 x0 = xs[a], x1 = xs[a + 1u], x2 = xs[a + 2u], x3 = xs[a + 3u];
#ifdef W_MINS
                float xsum = dot(x0 + x1 + x2 + x3, vec4(1.0));
#else
                float xsum = 0.0;
#endif
                float s = dot(q[0], x0) + dot(q[1], x1) + dot(q[2], x2) + dot(q[3], x3);
                acc[r * MCOLS + c] += live * (ab.x * s + ab.y * xsum);
#ifdef PAIR
                float s2 = dot(q2[0], x0) + dot(q2[1], x1) + dot(q2[2], x2) + dot(q2[3], x3);
                acc2[r * MCOLS + c] += live * (ab2.x * s2 + ab2.y * xsum);
#endif
            }
        }
    }
}
#else
// One unit u of each of the team's rows into acc (u past the slice's end
// u1: its last unit again, weighed 0).
void GEMV_STEP(uint u, uint u1, uint k0, GEMV_ROWS, GEMV_ACC) {
    float live = u < u1 ? 1.0 : 0.0;
    u = min(u, u1 - 1u);
    uvec2 xo = (W_WUNIT_X(u) - k0) / 4u;
    uvec4 at = W_WAT(u); // the same in every row (and the pair's)
#if MCOLS == 1
    vec4 x[8];
    vec2 xsum;
    GEMV_UX(xo, 0u, x, xsum);
#endif
    for (uint r = 0u; r < NR; r++) {
        vec4 q[8];
        vec4 ab;
        W_WUNIT(rb[r], at, u, q, ab);
#ifdef PAIR
        vec4 q2[8];
        vec4 ab2;
        U_WUNIT(rb2[r], at, u, q2, ab2);
#endif
        for (uint c = 0u; c < MCOLS; c++) {
#if MCOLS > 1
            vec4 x[8];
            vec2 xsum;
            GEMV_UX(xo, c, x, xsum);
#endif
            acc[r * MCOLS + c] += live * GEMV_UDOT(q, ab, x, xsum);
#ifdef PAIR
            acc2[r * MCOLS + c] += live * GEMV_UDOT(q2, ab2, x, xsum);
#endif
        }
    }
}

#endif

// The lane's units u0 + first, + TEAM*KSPLIT, ... below u1: UNROLL of
// them one after another in the code (no loop a compiler may keep rolled),
// so their loads are in flight together.
void GEMV_STEPS(uint u0, uint u1, uint k0, uint first, GEMV_ROWS, GEMV_ACC) {
    for (uint ub = u0 + first; ub < u1; ub += TEAM * KSPLIT * UNROLL) {
        GEMV_STEP(ub, u1, k0, GEMV_ROWS_ARGS);
#if UNROLL > 1
        GEMV_STEP(ub + TEAM * KSPLIT, u1, k0, GEMV_ROWS_ARGS);
#endif
#if UNROLL > 2
        GEMV_STEP(ub + 2u * TEAM * KSPLIT, u1, k0, GEMV_ROWS_ARGS);
        GEMV_STEP(ub + 3u * TEAM * KSPLIT, u1, k0, GEMV_ROWS_ARGS);
#endif
#if UNROLL > 4
        GEMV_STEP(ub + 4u * TEAM * KSPLIT, u1, k0, GEMV_ROWS_ARGS);
        GEMV_STEP(ub + 5u * TEAM * KSPLIT, u1, k0, GEMV_ROWS_ARGS);
        GEMV_STEP(ub + 6u * TEAM * KSPLIT, u1, k0, GEMV_ROWS_ARGS);
        GEMV_STEP(ub + 7u * TEAM * KSPLIT, u1, k0, GEMV_ROWS_ARGS);
#endif
    }
}

#ifdef GEMV_RAW
// The words of unit u (at: its place, W_WAT) of each of the team's rows (and
// the pair's): loads only.
void GEMV_LOAD(uint u, uvec4 at, GEMV_ROWS, out uvec4 w[NR * WSETS * 4u]) {
    for (uint r = 0u; r < NR; r++) {
        uvec4 t[4];
        W_WRAW(rb[r], at, u, t);
        for (uint i = 0u; i < 4u; i++) {
            w[4u * r + i] = t[i];
        }
#ifdef PAIR
        U_WRAW(rb2[r], at, u, t);
        for (uint i = 0u; i < 4u; i++) {
            w[4u * (NR + r) + i] = t[i];
        }
#endif
    }
}

// Unit u of each of the team's rows into acc, from its words w.
void GEMV_DEC(uint u, uvec4 at, uint k0, uvec4 w[NR * WSETS * 4u], GEMV_ACC) {
    uvec2 xo = (W_WUNIT_X(u) - k0) / 4u;
#if MCOLS == 1
    vec4 x[8];
    vec2 xsum;
    GEMV_UX(xo, 0u, x, xsum);
#endif
    for (uint r = 0u; r < NR; r++) {
        uvec4 t[4] = uvec4[4](w[4u * r], w[4u * r + 1u], w[4u * r + 2u], w[4u * r + 3u]);
        vec4 q[8];
        vec4 ab;
        W_WDEC(t, at, u, q, ab);
#ifdef PAIR
        t = uvec4[4](w[4u * (NR + r)], w[4u * (NR + r) + 1u], w[4u * (NR + r) + 2u],
                     w[4u * (NR + r) + 3u]);
        vec4 q2[8];
        vec4 ab2;
        U_WDEC(t, at, u, q2, ab2);
#endif
        for (uint c = 0u; c < MCOLS; c++) {
#if MCOLS > 1
            vec4 x[8];
            vec2 xsum;
            GEMV_UX(xo, c, x, xsum);
#endif
            acc[r * MCOLS + c] += GEMV_UDOT(q, ab, x, xsum);
#ifdef PAIR
            acc2[r * MCOLS + c] += GEMV_UDOT(q2, ab2, x, xsum);
#endif
        }
    }
}

// The lane's units u0 + first, + TEAM*KSPLIT, ... below u1, pipelined: the
// next unit's words are loaded before this one is decoded, so the loads of
// every warp are in flight while it computes (all a workgroup's warps start
// together; loading UNROLL units and then computing them, GEMV_STEPS,
// leaves the memory idle while they all compute). Where a lane has at most
// two units of a row (K <= 2048 with teams of 32), GEMV_STEPS already has
// them all in flight at once: they go there (u1 - u0 is uniform).
void GEMV_UNITS(uint u0, uint u1, uint k0, uint first, GEMV_ROWS, GEMV_ACC) {
    if (u1 - u0 <= 2u * TEAM * KSPLIT) {
        GEMV_STEPS(u0, u1, k0, first, GEMV_ROWS_ARGS);
        return;
    }
    uint u = u0 + first;
    if (u >= u1) {
        return;
    }
    uvec4 at = W_WAT(u);
    uvec4 w[NR * WSETS * 4u];
    GEMV_LOAD(u, at, GEMV_RARGS, w);
    for (; u < u1; u += TEAM * KSPLIT) {
        uvec4 cur[NR * WSETS * 4u] = w;
        uvec4 cat = at;
        uint un = u + TEAM * KSPLIT;
        if (un < u1) {
            at = W_WAT(un);
            GEMV_LOAD(un, at, GEMV_RARGS, w);
        }
        GEMV_DEC(u, cat, k0, cur, GEMV_AARGS);
    }
}
#else
void GEMV_UNITS(uint u0, uint u1, uint k0, uint first, GEMV_ROWS, GEMV_ACC) {
    GEMV_STEPS(u0, u1, k0, first, GEMV_ROWS_ARGS);
}
#endif
