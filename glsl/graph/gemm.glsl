// GEMM: y[n, c] = sum_k W[k, n] * x[k, c] for many columns c (prefill),
// one output tile of BN weight rows by BM columns per workgroup.
// src/kernels/gemm.c declares around this file:
//   defines   BN (rows of weights a tile stages: with PAIR half of them are
//             the second weight's, for the same outputs), BM (columns),
//             TN, TM (rows and columns an invocation accumulates: TN 4 or
//             8, TM 2, 4 or 8), NX = BN / TN
//             and NY = BM / TM (NX * NY = WG_SIZE, WG_SIZE >= BN and BM),
//             NMEMB (matmuls of the kernel: 1, or a grouped q/k/v's up to
//             4), PAIR (a second weight of the same x: gate/up), GEMM_NORM
//             (a folded rms_norm: x's squares summed where x is loaded),
//             GEMM_SCRATCH (the scratch binding, split K), GEMM_KFULL
//             (every weight's rows are whole units: K a multiple of 32,
//             no k of a step past it), GEMM_KQ_LOOP
//             (a step's arithmetic and x's fetch as loops, not written out:
//             gemm_loop.glsl's GEMM_STEP and GEMM_FETCH_X), GEMM_PAD
//             (staged rows padded to 9 vec4 instead of swizzled, see
//             below), GEMM_COLS_FIRST (consecutive invocations store consecutive
//             columns, not rows: a result whose columns run fastest in
//             memory, the convolution's pixels), GEMM_NO_PREFETCH (no
//             loads of the next step in flight during a step's
//             multiply-adds: gemm_loop.glsl), GEMM_X_FIRST (with it: a
//             step's x fetched before its weights are decoded), TNV, TMV
//             and XQV (TN,
//             TM and XQ4 as plain numbers, for #if)
//   uniforms  K, M, n_count and n_base (the rows of this dispatch: a weight
//             chunk's), xb2, ksplit (parts of K, each its own workgroup),
//             kper (units of 32 elements a part takes), kdp (tiles of a
//             batch taken whole by part 0, see Split K), and per sibling j
//             s<j>_base, s<j>_count, s<j>_g0 (its first block of rows)
//             GEMM_ROUNDS (the results leave in that many rounds, see
//             gemm_main)
//   shared    vec4 gs[RSTR * (BN + BM)]: the step's weights (WS) and x
//             (XS), then the results on their way out
//   after it  a copy of glsl/graph/gemm_loop.glsl per matmul (gemm_loop_j),
//             and the hooks generated from the graph, the weight readers
//             each member's loop calls (gemm.c's member_read; the pair's
//             with _p for _j): gemm_wunit_j (unit u of a row of matmul j's
//             weight: the loader's 32 quants and their scales, see
//             glsl/quant/common.glsl), or gemm_whalf_j (half h of a plain
//             weight's unit), or gemm_wraw_j and gemm_wdec_j (the unit's
//             words and their decode: the late decode) and gemm_wdech_j
//             (the decode of run h only), see gemm_loop.glsl; gemm_x (the
//             activation with its fused prologue; adds a folded norm's
//             squares into sq), gemm_store (matmul sel's store with its
//             epilogue: bias, activation, residual, the pair's gating),
//             gemm_norm_scale (the folded norm's scale of a column's sum of
//             squares). The prototypes below declare every gemm_wunit_j;
//             only the ones a loop calls are defined.
//
// K is walked one unit (32 elements: a quantized type's decoder unit, whose
// two runs of 16 may lie apart in the row, e.g. q4_k's) per step. The step's
// weights are decoded straight into shared memory as floats and its x is
// staged beside them, both as vec4 of four consecutive elements of a row
// (or column): WS(SWZ(r, q)) holds elements 4q .. 4q+3 of staged row r. A
// row takes RSTR vec4: with GEMM_PAD 9 (its 8 and one of padding), else 8
// with the vec4 index swizzled (q ^ (r & 7)); either way the eight
// invocations of a quarter warp that read eight consecutive rows hit eight
// different groups of banks, and the ones that store consecutive rows do
// too: no bank conflicts. The padding takes 1/8 more shared memory (gemm.c
// uses it where that fits) and saves the swizzle's integer operations
// before each group of loads (H200, 4096x4096x512: f16 49.7% -> 52.1% of
// the FMA peak). Each invocation then takes rows tx + NX*i and
// columns ty + NY*j: per four k, TN + TM vec4 loads from shared memory feed
// 4*TN*TM multiply-adds. While a step is multiplied, the next unit's
// weights (decoded) and x are already loaded into registers: one staging
// area, two barriers per step, the global loads of step u+1 in flight
// during the arithmetic of step u.
//
// Split K: with ksplit > 1 the workgroups of one tile take kper units each
// and leave their partial sums (and a folded norm's partial squares) in the
// scratch buffer, counting themselves in with an atomic; the last of a tile
// adds the parts in order (the result does not depend on which is last),
// stores through the epilogue and puts the counter back to zero. The first
// kdp tiles (g + x blocks * y < kdp: whole waves of them, gemm.c) are not
// split: their part 0 takes all of K and their other parts return at once,
// so only the last wave's tiles are split to fill the device.
float gemm_x(uint k, uint c, uint b2, uint b3, inout float sq);
void gemm_store(uint sel, uint n, uint c, uint b2, uint b3, float dot, float dot2);
#ifdef GEMM_NORM
float gemm_norm_scale(float sq);
#endif

#define NACC (TN * TM)
#ifdef PAIR
#define BNR (BN / 2u) // rows of outputs a tile has
#define TNR (TN / 2u) // and an invocation
#else
#define BNR BN
#define TNR TN
#endif
#define WPART (WG_SIZE / BN) // invocations staging a weight row: 1 or 2
#define WQ4 (8u / WPART)     // vec4 of weights each stages per step
#define XPART (WG_SIZE / BM) // invocations staging a column of x
#define XQ4 (8u / XPART)     // vec4 of x each stages per step
#ifdef GEMM_PAD
#define RSTR 9u // vec4 a staged row takes: its 8 and one of padding
#define SWZ(r, q) ((r) * 9u + (q))
#else
#define RSTR 8u
#define SWZ(r, q) ((r) * 8u + ((q) ^ ((r) & 7u)))
#endif
#define WS(i) gs[i]
#define XS(i) gs[RSTR * BN + (i)]
#define SCRATCH_COUNTERS 1024u
// A folded norm's squares: an invocation sums them per x slot it stages
// (gemm_loop.glsl's GEMM_FETCH_X); gathered in shared memory (slot s of
// invocation lid at s * WG_SIZE + lid), column c's eight sums lie at
// gs[8c .. 8c+7].

void gemm_wunit_0(uint nl, uint b2, uint b3, uvec4 at, uint u, out vec4 q[8], out vec4 ab);
#if NMEMB > 1
void gemm_wunit_1(uint nl, uint b2, uint b3, uvec4 at, uint u, out vec4 q[8], out vec4 ab);
#endif
#if NMEMB > 2
void gemm_wunit_2(uint nl, uint b2, uint b3, uvec4 at, uint u, out vec4 q[8], out vec4 ab);
#endif
#if NMEMB > 3
void gemm_wunit_3(uint nl, uint b2, uint b3, uvec4 at, uint u, out vec4 q[8], out vec4 ab);
#endif
#ifdef PAIR
void gemm_wunit_p(uint nl, uint b2, uint b3, uvec4 at, uint u, out vec4 q[8], out vec4 ab);
#endif

void gemm_loop_0(uint nl0, uint cnt, uint m0, uint b2, uint b3, uint u0, uint u1,
                 inout float acc[NACC], inout float sq[XQ4]);
#if NMEMB > 1
void gemm_loop_1(uint nl0, uint cnt, uint m0, uint b2, uint b3, uint u0, uint u1,
                 inout float acc[NACC], inout float sq[XQ4]);
#endif
#if NMEMB > 2
void gemm_loop_2(uint nl0, uint cnt, uint m0, uint b2, uint b3, uint u0, uint u1,
                 inout float acc[NACC], inout float sq[XQ4]);
#endif
#if NMEMB > 3
void gemm_loop_3(uint nl0, uint cnt, uint m0, uint b2, uint b3, uint u0, uint u1,
                 inout float acc[NACC], inout float sq[XQ4]);
#endif

// Loops over the accumulators, written out by the preprocessor: a compiler
// that keeps such a loop rolled indexes acc with a variable and keeps the
// whole array in memory (NVIDIA's did with the step's loop over columns:
// `TEMP lmem0[256]` in its program binary, a load and a store per four
// multiply-adds). GEMM_EACH_<X><L>(F, a) expands to F(0u, a) F(1u, a) ..
// over X: I the invocation's rows (TN: 4 or 8), J its columns (TM: 2, 4
// or 8), G its groups of four columns (TM / 4, one of TM 2); L, the
// level: a level-1
// loop's F may use level-2 loops (a macro does not expand inside its own
// expansion); S the x slots an invocation stages (XQ4: 1 to 8).
#define GEMM_L1_4(F, a) F(0u, a) F(1u, a) F(2u, a) F(3u, a)
#define GEMM_L1_8(F, a) GEMM_L1_4(F, a) F(4u, a) F(5u, a) F(6u, a) F(7u, a)
#define GEMM_L2_1(F, a) F(0u, a)
#define GEMM_L2_2(F, a) F(0u, a) F(1u, a)
#define GEMM_L2_4(F, a) F(0u, a) F(1u, a) F(2u, a) F(3u, a)
#define GEMM_L2_8(F, a) GEMM_L2_4(F, a) F(4u, a) F(5u, a) F(6u, a) F(7u, a)
#if XQV == 8
#define GEMM_EACH_S1 GEMM_L1_8
#elif XQV == 4
#define GEMM_EACH_S1 GEMM_L1_4
#elif XQV == 2
#define GEMM_EACH_S1(F, a) F(0u, a) F(1u, a)
#else
#define GEMM_EACH_S1(F, a) F(0u, a)
#endif
#if TNV == 8
#define GEMM_EACH_I1 GEMM_L1_8
#define GEMM_EACH_I2 GEMM_L2_8
#else
#define GEMM_EACH_I1 GEMM_L1_4
#define GEMM_EACH_I2 GEMM_L2_4
#endif
#if TMV == 8
#define GEMM_EACH_J1 GEMM_L1_8
#define GEMM_EACH_J2 GEMM_L2_8
#define GEMM_EACH_G2 GEMM_L2_2
#elif TMV == 4
#define GEMM_EACH_J1 GEMM_L1_4
#define GEMM_EACH_J2 GEMM_L2_4
#define GEMM_EACH_G2 GEMM_L2_1
#else
#define GEMM_EACH_J1(F, a) F(0u, a) F(1u, a)
#define GEMM_EACH_J2 GEMM_L2_2
#define GEMM_EACH_G2 GEMM_L2_1
#endif

// Four k (kq) of the staged step: rows tx + NX*i by columns ty + NY*j.
// Each product is four multiply-adds into the accumulator (never a dot
// product added afterwards: that would be five operations). NX and NY are
// multiples of 8 (gemm.c), so row tx + NX*i has tx's swizzle: its vec4 kq
// lies at wb + 8*NX*i (and x's at xb + 8*NY*j, xb counted from gs[0]), a
// constant offset from one address per kq (NVIDIA's program binary showed
// five integer operations before each shared-memory load when the swizzle
// was computed per row, and two additions of constants for each x when its
// offset in gs was added after the column's).
#define GEMM_KQ_W(i, a) w[i] = WS(wb + RSTR * NX * i);
#define GEMM_KQ_FMA(i, j)                                                      \
    {                                                                          \
        float s = acc[i * TM + j];                                             \
        s += w[i].x * x.x;                                                     \
        s += w[i].y * x.y;                                                     \
        s += w[i].z * x.z;                                                     \
        s += w[i].w * x.w;                                                     \
        acc[i * TM + j] = s;                                                   \
    }
#define GEMM_KQ_X(j, a)                                                        \
    {                                                                          \
        vec4 x = gs[xb + RSTR * NY * j];                                       \
        GEMM_EACH_I2(GEMM_KQ_FMA, j)                                           \
    }
#if TMV == 2
// Two columns: their x held, the rows' weights taken one at a time (two
// vec4 and one live, not four and one: Mali's and V3D's register files
// hold an invocation's whole step).
#define GEMM_KQ_XH(j, a) x[j] = gs[xb + RSTR * NY * j];
#define GEMM_KQ_FMA2(j, i)                                                     \
    {                                                                          \
        float s = acc[i * TM + j];                                             \
        s += w.x * x[j].x;                                                     \
        s += w.y * x[j].y;                                                     \
        s += w.z * x[j].z;                                                     \
        s += w.w * x[j].w;                                                     \
        acc[i * TM + j] = s;                                                   \
    }
#define GEMM_KQ_WR(i, a)                                                       \
    {                                                                          \
        vec4 w = WS(wb + RSTR * NX * i);                                       \
        GEMM_EACH_J2(GEMM_KQ_FMA2, i)                                          \
    }
#define GEMM_KQ(q)                                                             \
    {                                                                          \
        uint kq = (q);                                                         \
        uint wb = SWZ(tx, kq), xb = RSTR * BN + SWZ(ty, kq);                   \
        vec4 x[TM];                                                            \
        GEMM_EACH_J1(GEMM_KQ_XH, 0u)                                           \
        GEMM_EACH_I1(GEMM_KQ_WR, 0u)                                           \
    }
#else
#define GEMM_KQ(q)                                                             \
    {                                                                          \
        uint kq = (q);                                                         \
        uint wb = SWZ(tx, kq), xb = RSTR * BN + SWZ(ty, kq);                   \
        vec4 w[TN];                                                            \
        GEMM_EACH_I1(GEMM_KQ_W, 0u)                                            \
        GEMM_EACH_J1(GEMM_KQ_X, 0u)                                            \
    }
#endif

// The results leave through shared memory in GEMM_ROUNDS rounds (1, 2 or
// 4), round r the rows of a contiguous block of BNR / GEMM_ROUNDS: the
// invocation's rows tx + NX*i of RI consecutive i, staged as vec4 of its
// four columns ty + NY*(4g .. 4g+3) (TM 2: its two, then zeros), then
// stored by consecutive invocations
// at consecutive rows (one copy of the epilogue's code, coalesced stores).
// Row i's round is i % TNR / RI, its staged row (i / TNR) * RI + i % RI.
#define RI (TNR / GEMM_ROUNDS)
#ifdef PAIR
#define RS (2u * RI) // staged rows: the round's, then the second weight's
#else
#define RS RI
#endif
void gemm_out(uint r, uint tx, uint ty, uint sel, uint nl0, uint cnt, uint nbase, uint m0,
              uint b2, uint b3, float acc[NACC]) {
    uint lid = gl_LocalInvocationIndex;
    memoryBarrierShared();
    barrier(); // shared memory is free again
#if TMV == 2
#define GEMM_OUT_V(g, i) vec4(acc[i * TM], acc[i * TM + 1u], 0.0, 0.0)
#else
#define GEMM_OUT_V(g, i)                                                       \
    vec4(acc[i * TM + 4u * g], acc[i * TM + 4u * g + 1u],                      \
         acc[i * TM + 4u * g + 2u], acc[i * TM + 4u * g + 3u])
#endif
#define GEMM_OUT_G(g, i)                                                       \
    if (i % TNR / RI == r) {                                                   \
        gs[((g * RS + (i / TNR) * RI + i % RI) * NY + ty) * NX + tx] =         \
            GEMM_OUT_V(g, i);                                                  \
    }
#define GEMM_OUT_ROW(i, a) GEMM_EACH_G2(GEMM_OUT_G, i)
    GEMM_EACH_I1(GEMM_OUT_ROW, 0u)
    memoryBarrierShared();
    barrier();
    uint rows = BNR / GEMM_ROUNDS;
    for (uint e = lid; e < rows * BM; e += WG_SIZE) {
#ifdef GEMM_COLS_FIRST
        uint nr = e / BM, cl = e % BM; // consecutive invocations: consecutive columns
#else
        uint nr = e % rows, cl = e / rows; // row within the round, column
#endif
        uint nl = nl0 + r * rows + nr;
        uint c = m0 + cl;
        if (nl < cnt && c < M) {
            uint j = cl / NY;
            uint s = ((j / 4u) * RS + nr / NX) * NY * NX + (cl % NY) * NX + nr % NX;
            float d = gs[s][j % 4u];
#ifdef PAIR
            float d2 = gs[s + RI * NY * NX][j % 4u];
#else
            float d2 = 0.0;
#endif
            gemm_store(sel, nbase + nl, c, b2, b3, d, d2);
        }
    }
}

void gemm_main() {
    uint lid = gl_LocalInvocationIndex;
    uint tx = lid % NX, ty = lid / NX;
    uint zb = gl_WorkGroupID.z / ksplit; // batch
    uint part = gl_WorkGroupID.z % ksplit;
    uint b2 = zb % xb2, b3 = zb / xb2;
    uint g = gl_WorkGroupID.x;
    uint parts = ksplit; // this tile's
    if (g + gl_NumWorkGroups.x * gl_WorkGroupID.y < kdp) {
        // one of the whole tiles of the split's full waves: part 0 takes
        // all of K, the other parts have nothing to do
        if (part != 0u) {
            return;
        }
        parts = 1u;
    }
    // a group: the matmul (sel) block g belongs to, its rows
    uint sel = 0u, gl = g, cnt = n_count, nbase = n_base;
#if NMEMB > 1
    if (g >= s1_g0) {
        sel = 1u; gl = g - s1_g0; cnt = s1_count; nbase = s1_base;
    }
#endif
#if NMEMB > 2
    if (g >= s2_g0) {
        sel = 2u; gl = g - s2_g0; cnt = s2_count; nbase = s2_base;
    }
#endif
#if NMEMB > 3
    if (g >= s3_g0) {
        sel = 3u; gl = g - s3_g0; cnt = s3_count; nbase = s3_base;
    }
#endif
    uint nl0 = gl * BNR; // first local row (within the chunk)
    uint m0 = gl_WorkGroupID.y * BM;
    uint nu = (K + 31u) / 32u;
    uint u0 = part * kper, u1 = parts == 1u ? nu : min(nu, u0 + kper);
    float acc[NACC];
#define GEMM_ZERO(j, i) acc[i * TM + j] = 0.0;
#define GEMM_ZERO_ROW(i, a) GEMM_EACH_J2(GEMM_ZERO, i)
    GEMM_EACH_I1(GEMM_ZERO_ROW, 0u)
    float sq[XQ4]; // a folded norm: squares of this invocation's x
    for (uint s = 0u; s < XQ4; s++) {
        sq[s] = 0.0;
    }
#if NMEMB > 3
    if (sel == 3u) {
        gemm_loop_3(nl0, cnt, m0, b2, b3, u0, u1, acc, sq);
    } else
#endif
#if NMEMB > 2
    if (sel == 2u) {
        gemm_loop_2(nl0, cnt, m0, b2, b3, u0, u1, acc, sq);
    } else
#endif
#if NMEMB > 1
    if (sel == 1u) {
        gemm_loop_1(nl0, cnt, m0, b2, b3, u0, u1, acc, sq);
    } else
#endif
    {
        gemm_loop_0(nl0, cnt, m0, b2, b3, u0, u1, acc, sq);
    }
    // every column's squares: its eight stagers' sums, through shared memory
    memoryBarrierShared();
    barrier();
#ifdef GEMM_NORM
    for (uint s = 0u; s < XQ4; s++) {
        gs[s * WG_SIZE + lid] = vec4(sq[s]);
    }
    memoryBarrierShared();
    barrier();
#endif
    float csq[TM]; // the squares of the invocation's columns ty + NY*j
#ifdef GEMM_NORM
#define GEMM_CSQ(j, a)                                                         \
    csq[j] = 0.0;                                                              \
    for (uint p = 0u; p < 8u; p++) {                                           \
        csq[j] += gs[(ty + NY * j) * 8u + p].x;                                \
    }
#else
#define GEMM_CSQ(j, a) csq[j] = 0.0;
#endif
    GEMM_EACH_J1(GEMM_CSQ, 0u)
    bool store = true;
    if (parts > 1u) {
        // this part's sums into the scratch buffer, then the last part of
        // the tile adds them all
        // the split tiles' index: past the whole ones (kdp > 0: one batch)
        uint tile = g + gl_NumWorkGroups.x * (gl_WorkGroupID.y + gl_NumWorkGroups.y * zb) - kdp;
        uint tw = BN * BM + BM; // words of a part
        uint pb0 = SCRATCH_COUNTERS + tile * ksplit * tw;
        uint pb = pb0 + part * tw;
#define GEMM_PUT(j, i)                                                         \
    GEMM_SCRATCH[pb + (ty + NY * j) * BN + tx + NX * i] = floatBitsToUint(acc[i * TM + j]);
#define GEMM_PUT_ROW(i, a) GEMM_EACH_J2(GEMM_PUT, i)
        GEMM_EACH_I1(GEMM_PUT_ROW, 0u)
#ifdef GEMM_NORM
        if (lid < BM) {
            float s = 0.0;
            for (uint p = 0u; p < 8u; p++) {
                s += gs[lid * 8u + p].x;
            }
            GEMM_SCRATCH[pb + BN * BM + lid] = floatBitsToUint(s);
        }
#endif
        memoryBarrierBuffer();
        memoryBarrierShared();
        barrier();
        if (lid == 0u) {
            bool last = atomicAdd(GEMM_SCRATCH[tile], 1u) == parts - 1u;
            gs[0] = vec4(last ? 1.0 : 0.0);
        }
        memoryBarrierShared();
        barrier();
        store = gs[0].x == 1.0;
        if (store) { // every part is in: add them up
            memoryBarrierBuffer();
            GEMM_EACH_I1(GEMM_ZERO_ROW, 0u)
#define GEMM_CSQ0(j, a) csq[j] = 0.0;
            GEMM_EACH_J1(GEMM_CSQ0, 0u)
#define GEMM_ADD(j, i)                                                         \
    acc[i * TM + j] += uintBitsToFloat(GEMM_SCRATCH[qb + (ty + NY * j) * BN + tx + NX * i]);
#define GEMM_ADD_ROW(i, a) GEMM_EACH_J2(GEMM_ADD, i)
#define GEMM_ADD_CSQ(j, a) csq[j] += uintBitsToFloat(GEMM_SCRATCH[qb + BN * BM + ty + NY * j]);
            for (uint p = 0u; p < parts; p++) {
                uint qb = pb0 + p * tw;
                GEMM_EACH_I1(GEMM_ADD_ROW, 0u)
#ifdef GEMM_NORM
                GEMM_EACH_J1(GEMM_ADD_CSQ, 0u)
#endif
            }
            if (lid == 0u) {
                GEMM_SCRATCH[tile] = 0u; // ready for the next dispatch
            }
        }
    }
    if (!store) {
        return; // uniform: another part of the tile stores it
    }
#ifdef GEMM_NORM
    // W (x g s) = s (W (x g))
#define GEMM_SCALE(i, j) acc[i * TM + j] *= rs;
#define GEMM_SCALE_COL(j, a)                                                   \
    {                                                                          \
        float rs = gemm_norm_scale(csq[j]);                                    \
        GEMM_EACH_I2(GEMM_SCALE, j)                                            \
    }
    GEMM_EACH_J1(GEMM_SCALE_COL, 0u)
#endif
    gemm_out(0u, tx, ty, sel, nl0, cnt, nbase, m0, b2, b3, acc);
#if GEMM_ROUNDS > 1
    gemm_out(1u, tx, ty, sel, nl0, cnt, nbase, m0, b2, b3, acc);
#endif
#if GEMM_ROUNDS > 2
    gemm_out(2u, tx, ty, sel, nl0, cnt, nbase, m0, b2, b3, acc);
    gemm_out(3u, tx, ty, sel, nl0, cnt, nbase, m0, b2, b3, acc);
#endif
}
