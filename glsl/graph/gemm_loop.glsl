// One matmul's walk over K (glsl/graph/gemm.glsl): src/kernels/gemm.c adds
// a copy of this file per matmul of the kernel (a grouped q/k/v has up to
// four, each weight of its own type), with these names defined around it:
//   GEMM_LOOP                 this copy's function
//   GEMM_WAT, GEMM_UX         its loader's unit location and x offsets
//                             (wload.c: NAME_wat, NAME_wunit_x)
//   GEMM_WUNIT                the hook reading unit u of local row nl
//                             (its row's bytes, then NAME_wunit)
//   GEMM_WUNIT2               the same for the pair's second weight (PAIR)
//   GEMM_WRAW, GEMM_WDEC      (where the loader splits its units) the
//                             hooks loading unit u's words and decoding
//                             them: the late decode, below; GEMM_WRAW2,
//                             GEMM_WDEC2 the pair's; GEMM_WDECH (and
//                             GEMM_WDECH2) the decode of one run, where
//                             two invocations stage a row
//   GEMM_WHALF, GEMM_WHALF2   (plain weights, two invocations a row) the
//                             hooks reading half a unit, below
//   GEMM_FETCH_X, GEMM_PART_W, GEMM_STAGE, GEMM_STEP  this copy's helpers
// A copy per matmul keeps the member choice out of the loop: the next
// step's loads and the current step's arithmetic are one block of code.
// Each copy has its own helpers too, so none is called from more places
// than in a kernel of one matmul (a compiler may keep a function called
// from many places out of line, and its arrays in memory).


// The invocation's x of a step: its slot s holds quad (s * WG_SIZE + lid) %
// 8 of local column (s * WG_SIZE + lid) / 8, so eight consecutive
// invocations read one column's 32 elements (a warp's load touches 4
// columns' lines, not 32: H200, f16 and q4_0 4096x4096x512, 33-35% of the
// FMA peak with a column per invocation, 40-42% by quads); slot s's
// squares go to sq[s]. The unit's two runs of 16 start at xo.x and xo.y of the row.
// live false (the prefetch past the last step, never staged): no squares.
// Past M: the last column's x (loads clamped inside), no squares; those
// columns' sums are never stored. Past K (not GEMM_KFULL): zeros. Both by a
// mask, not a select (a compiler may make a select a branch that waits for
// its load); x itself is masked only past K, so with GEMM_KFULL nothing
// waits for its loads before the step's multiply-adds but the store into
// shared memory at the next step (with the late decode below, a few per
// cent of the H200's prefill).
// Written out by the preprocessor, without && or ?:: NVIDIA's program
// binary had a branch
// per element for the mask, which splits the code its scheduler could
// interleave (a step's loads, its multiply-adds while they are in
// flight), and a loop over the elements kept rolled indexes px with a
// variable (a chain of branches per element). H200, 4096x4096x512: f16
// 44.0% -> 47.1%, q4_0 47.5% -> 49.8%, q4_k 45.9% -> 50.4% of the FMA
// peak.
#ifdef GEMM_KFULL
#define GEMM_FX_K(k) (k)
#define GEMM_FX_KMASK(k) 0xffffffffu
#else
#define GEMM_FX_K(k) min(k, K - 1u)
#define GEMM_FX_KMASK(k) (0u - uint(k < K))
#endif
#ifdef GEMM_KFULL
#define GEMM_FX_PX(v, m) (v)
#else
#define GEMM_FX_PX(v, m) uintBitsToFloat(floatBitsToUint(v) & (m))
#endif
#define GEMM_FX_E(e, s)                                                        \
    {                                                                          \
        uint k = k0 + e;                                                       \
        uint m = mc & GEMM_FX_KMASK(k);                                        \
        float t = 0.0;                                                         \
        float v = gemm_x(GEMM_FX_K(k), cc, b2, b3, t);                         \
        px[s][e] = GEMM_FX_PX(v, m);                                           \
        sq[s] += uintBitsToFloat(floatBitsToUint(t) & m);                      \
    }
#define GEMM_FX_S(s, a)                                                        \
    {                                                                          \
        uint g = s * WG_SIZE + lid;                                            \
        uint c = m0 + g / 8u;                                                  \
        uint l = (g % 8u) * 4u;                                                \
        uint k0 = xo.x + (l >> 4u) * (xo.y - 16u - xo.x) + l; /* the run's start, no select */ \
        uint mc = 0u - (uint(live) & uint(c < M));                             \
        uint cc = min(c, M - 1u);                                              \
        GEMM_L2_4(GEMM_FX_E, s)                                                \
    }
void GEMM_FETCH_X(uvec2 xo, bool live, uint m0, uint b2, uint b3, out vec4 px[XQ4],
                  inout float sq[XQ4]) {
    uint lid = gl_LocalInvocationIndex;
#ifdef GEMM_KQ_LOOP
    // a loop for compilers that take long over the written-out form (the
    // prologue's code XQ4 * 4 times: llvmpipe compiled a model's GEMMs in
    // 1.6x the time)
    for (uint i = 0u; i < XQ4 * 4u; i++) {
        uint s = i / 4u, g = s * WG_SIZE + lid;
        uint c = m0 + g / 8u;
        uint l = (g % 8u) * 4u + i % 4u;
        uint k = xo.x + (l >> 4u) * (xo.y - 16u - xo.x) + l;
        uint m = (0u - (uint(live) & uint(c < M))) & GEMM_FX_KMASK(k);
        float t = 0.0;
        float v = gemm_x(GEMM_FX_K(k), min(c, M - 1u), b2, b3, t);
        px[s][i % 4u] = GEMM_FX_PX(v, m);
        sq[s] += uintBitsToFloat(floatBitsToUint(t) & m);
    }
#else
    GEMM_EACH_S1(GEMM_FX_S, 0u)
#endif
}

// Plain weights (f32, f16, bf16) staged by two invocations a row (gemm.c
// defines GEMM_WHALF, the hook gemm_whalf_j, only then): each reads and
// converts only its half of the unit's words, straight into pw (no
// scales), not the whole unit to keep half of it (the block types' halves
// share their words: q4_0's two runs are a byte's two nibbles). So do the
// types without a unit decoder (q2_k, q3_k, the iq4 types, plain rows of
// an odd length: the loader's generic units, element by element), their
// scales applied in the hook: their whole unit decoded to keep half of it
// spilled on Mali and V3D (docs/devices.md).
#ifdef GEMM_WHALF
#define GEMM_HALF_UNIT 1
void GEMM_WHALF(uint nl, uint b2, uint b3, uint u, uint h, out vec4 q[4]);
#ifdef GEMM_WHALF2
void GEMM_WHALF2(uint nl, uint b2, uint b3, uint u, uint h, out vec4 q[4]);
#endif
#endif

// Weights of a step: the invocation's part of its row's unit (q, ab: the
// loader's 32 quants and their runs' scales), as floats.
void GEMM_PART_W(vec4 q[8], vec4 ab, out vec4 pw[WQ4]) {
#if WPART == 1
    for (uint i = 0u; i < 8u; i++) {
        pw[i] = i < 4u ? q[i] * ab.x + ab.y : q[i] * ab.z + ab.w;
    }
#else
    bool second = gl_LocalInvocationIndex >= BN; // the unit's second run
    vec2 s = second ? ab.zw : ab.xy;
    for (uint i = 0u; i < 4u; i++) {
        pw[i] = (second ? q[4u + i] : q[i]) * s.x + s.y;
    }
#endif
}

// Stages the prefetched step into shared memory (vec4 q of a row holds its
// elements 4q .. 4q+3 of the unit).
void GEMM_STAGE(vec4 pw[WQ4], vec4 px[XQ4]) {
    uint lid = gl_LocalInvocationIndex;
    uint wr = lid % BN, wq = (lid / BN) * WQ4;
    for (uint i = 0u; i < WQ4; i++) {
        WS(SWZ(wr, wq + i)) = pw[i];
    }
    for (uint i = 0u; i < XQ4; i++) {
        uint g = i * WG_SIZE + lid;
        XS(SWZ(g / 8u, g % 8u)) = px[i];
    }
}

// The staged step's products, written out eight times (no loop a compiler
// might keep rolled: the whole step is one block of straight-line code the
// next step's loads can be scheduled into); with GEMM_KQ_LOOP a loop, for
// compilers that take seconds over that block (llvmpipe's LLVM).
void GEMM_STEP(uint tx, uint ty, inout float acc[NACC]) {
#ifdef GEMM_KQ_LOOP
    for (uint q = 0u; q < 8u; q++) {
        GEMM_KQ(q)
    }
#else
    GEMM_KQ(0u)
    GEMM_KQ(1u)
    GEMM_KQ(2u)
    GEMM_KQ(3u)
    GEMM_KQ(4u)
    GEMM_KQ(5u)
    GEMM_KQ(6u)
    GEMM_KQ(7u)
#endif
}

// The invocation's staged row's unit u: the weight's, or with PAIR the
// gate's or the up's (second: the tile's second half of rows), through a
// branch (the same for whole warps where BNR is a multiple of their size:
// 64 on the GPU tiles), so each invocation reads and decodes one weight,
// not both and a select (3% of the H200's pp512): GEMM_EITHER(A, B), B
// for the pair's second weight, else A. GEMM_WROW(u) leaves the step's
// weights in pw: whole units decoded (GEMM_PART_W) or halves read
// (GEMM_HALF_UNIT).
#ifdef PAIR
#define GEMM_EITHER(A, B)                                                      \
    if (second) {                                                              \
        B                                                                      \
    } else {                                                                   \
        A                                                                      \
    }
#else
#define GEMM_EITHER(A, B) A
#endif
#ifdef GEMM_HALF_UNIT
#define GEMM_WU(F, u) F(nl, b2, b3, u, lid / BN, pw);
#define GEMM_W1 GEMM_WHALF
#define GEMM_W2 GEMM_WHALF2
#else
#define GEMM_WU(F, u)                                                          \
    {                                                                          \
        uvec4 at = GEMM_WAT(u);                                                \
        F(nl, b2, b3, at, u, q, ab);                                           \
        GEMM_PART_W(q, ab, pw);                                                \
    }
#define GEMM_W1 GEMM_WUNIT
#define GEMM_W2 GEMM_WUNIT2
#endif
#define GEMM_WROW(u) GEMM_EITHER(GEMM_WU(GEMM_W1, u), GEMM_WU(GEMM_W2, u))

// Late decode (gemm.c defines GEMM_WRAW and GEMM_WDEC, the loader's unit
// in two steps, where it has them and the GEMM's `late` is on): the next
// step's words are loaded before the step's multiply-adds and decoded
// after them, so no decode waits for its loads ahead of the arithmetic
// (NVIDIA's compiler keeps a decode where the source puts it). H200,
// 4096x4096x512 q4_k 48.0% -> 51.5% of the FMA peak, TinyLlama's shapes
// 2-4% faster (with x unmasked, above).
#ifdef GEMM_WRAW
#define GEMM_LATE 1
void GEMM_WRAW(uint nl, uint b2, uint b3, uvec4 at, uint u, out uvec4 r[4]);
void GEMM_WDEC(uvec4 r[4], uvec4 at, uint u, out vec4 q[8], out vec4 ab);
// With GEMM_WDECH (two invocations a row, the loader decodes by halves):
// each decodes only its run (h = lid / BN), its scale and offset applied.
#ifdef GEMM_WDECH
void GEMM_WDECH(uvec4 r[4], uvec4 at, uint u, uint h, out vec4 q[4], out vec2 ab);
#ifdef PAIR
void GEMM_WDECH2(uvec4 r[4], uvec4 at, uint u, uint h, out vec4 q[4], out vec2 ab);
#endif
#define GEMM_WFIN(F, u)                                                        \
    {                                                                          \
        vec4 qh[4];                                                            \
        vec2 hb;                                                               \
        F(rw, at, u, lid / BN, qh, hb);                                        \
        for (uint i = 0u; i < 4u; i++) {                                       \
            pw[i] = qh[i] * hb.x + hb.y;                                       \
        }                                                                      \
    }
#endif
#ifdef PAIR
void GEMM_WRAW2(uint nl, uint b2, uint b3, uvec4 at, uint u, out uvec4 r[4]);
void GEMM_WDEC2(uvec4 r[4], uvec4 at, uint u, out vec4 q[8], out vec4 ab);
#endif
#define GEMM_WLOAD(u)                                                          \
    at = GEMM_WAT(u);                                                          \
    GEMM_EITHER(GEMM_WRAW(nl, b2, b3, at, u, rw);, GEMM_WRAW2(nl, b2, b3, at, u, rw);)
#ifdef GEMM_WDECH
#define GEMM_WFINISH(u) GEMM_EITHER(GEMM_WFIN(GEMM_WDECH, u), GEMM_WFIN(GEMM_WDECH2, u))
#else
#define GEMM_WFINISH(u)                                                        \
    GEMM_EITHER(GEMM_WDEC(rw, at, u, q, ab);, GEMM_WDEC2(rw, at, u, q, ab);)   \
    GEMM_PART_W(q, ab, pw);
#endif
#endif

// Units u0 .. u1-1 of the tile's rows nl0 .. (cnt: the member's rows; rows
// past it repeat the last one, not stored) into acc.
void GEMM_LOOP(uint nl0, uint cnt, uint m0, uint b2, uint b3, uint u0, uint u1,
               inout float acc[NACC], inout float sq[XQ4]) {
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
#ifdef GEMM_LATE
    uvec4 rw[4];
    uvec4 at;
#endif
#ifdef GEMM_NO_PREFETCH
    // each step loads, stages and multiplies in turn: nothing of the next
    // step is live during the multiply-adds (registers for the small
    // GPUs, whose compilers otherwise spill; docs/devices.md). With
    // GEMM_X_FIRST x is fetched first: its vec4s live through the
    // weights' decode, not the decoded weights (four vec4) through x's
    // fetch and its prologue (Mali's row: G610's GEMMs of a Q6_K weight
    // and phi3's down with its silu(gate) * up, 1:9-6:33 -> 0:0)
    for (uint u = u0; u < u1; u++) {
#ifdef GEMM_X_FIRST
        GEMM_FETCH_X(GEMM_UX(u), true, m0, b2, b3, px, sq);
#endif
#ifdef GEMM_LATE
        GEMM_WLOAD(u)
        GEMM_WFINISH(u)
#else
        GEMM_WROW(u)
#endif
#ifndef GEMM_X_FIRST
        GEMM_FETCH_X(GEMM_UX(u), true, m0, b2, b3, px, sq);
#endif
        memoryBarrierShared();
        barrier(); // every invocation is done with the last step
        GEMM_STAGE(pw, px);
        memoryBarrierShared();
        barrier();
        GEMM_STEP(tx, ty, acc);
    }
#else
#ifdef GEMM_LATE
    GEMM_WLOAD(u0)
    GEMM_WFINISH(u0)
#else
    GEMM_WROW(u0)
#endif
    GEMM_FETCH_X(GEMM_UX(u0), true, m0, b2, b3, px, sq);
    for (uint u = u0; u < u1; u++) {
        memoryBarrierShared();
        barrier(); // every invocation is done with the last step
        GEMM_STAGE(pw, px);
        memoryBarrierShared();
        barrier();
        // the next step (past the last: the last one again, not staged)
        bool live = u + 1u < u1;
        uint un = min(u + 1u, u1 - 1u);
#ifdef GEMM_LATE
        GEMM_WLOAD(un)
        GEMM_FETCH_X(GEMM_UX(un), live, m0, b2, b3, px, sq);
        GEMM_STEP(tx, ty, acc);
        GEMM_WFINISH(un)
#else
        GEMM_WROW(un)
        GEMM_FETCH_X(GEMM_UX(un), live, m0, b2, b3, px, sq);
        GEMM_STEP(tx, ty, acc);
#endif
    }
#endif
}
