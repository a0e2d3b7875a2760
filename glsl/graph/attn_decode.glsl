// Decode attention: softmax(q*k^T*scale + mask) * v for one query row of
// HG heads that share a kv head, against one split of the keys, with the
// online softmax over key tiles staged in shared memory (a running max and
// sum per head, never a score row); splits are combined by the last
// workgroup of a (query, head group) through the scratch buffer
// (flash-decoding). src/kernels/attention.c declares around this file:
//   defines   HG (query heads per workgroup: they read each key and value
//             once for all of them), T (keys per tile), D, DV (q/k and v
//             head sizes), DPT (output dimensions per invocation: d = lid +
//             e*WG_SIZE, e < DPT), ATTN_V_SHARED (the value tile is staged
//             in ks too: DV <= D + 1; else values are read per use),
//             ATTN_REGS (tiles go through registers, see below) with KPL
//             (key elements an invocation loads per tile), ATTN_VREGS with
//             VPL (the same for values), ATTN_FRESH (the dispatch writes
//             rows of the cache it reads: fresh values for them);
//             ATTN_CAUSAL, ATTN_MASK, ATTN_SWA (a sliding window),
//             ATTN_SOFTCAP (soft-capped scores); ATTN_SCR the scratch
//             binding (uint), ATTN_COUNTERS its counters, ATTN_COMBINE
//             (the (split, head) pairs the combine stages in ks), ATTN_CU
//             (splits a round of the combine reads), ATTN_CC (outputs a
//             pass of the combine takes an invocation), ATTN_OS (the
//             output accumulators in shared memory between tiles),
//             ATTN_ROLL (the per-head loops over a tile's keys bounded by
//             the uniform at_t = T, so the compiler keeps them loops)
//   uniforms  at_nkv (keys), at_gqa (query heads per kv head), at_S (keys
//             per split, whole tiles), at_nsplit (splits dispatched),
//             at_scale, at_coff (causal: key j is visible to the query
//             when j <= qi + at_coff), at_k0 and at_swa (a window: the
//             splits start at key at_k0, the query sees j > qi + at_coff -
//             at_swa), at_cap (scores become at_cap * tanh(s / at_cap)
//             before the mask), at_t (with ATTN_ROLL: T)
//   shared    float qs[>= HG*D] (the scaled queries), float ks[>= T*(D+1)]
//             (a key tile in rows of D + 1: no bank conflicts; then the
//             value tile; the combine's m, l and weights), float ps[>= HG*T]
//             (scores, then weights), float mh[HG], lh[HG], ch[HG] (running
//             max, sum, the tile's rescale factor), uint last_wg[1],
//             ATTN_OS: float os[HG*DV] (the accumulators)
//   hooks     generated from the graph: attn_q (q with its prologue, e.g.
//             rope and qwen3's norm, times the scale), attn_k, attn_v (keys
//             and values; rows a fused KV-cache write writes are computed
//             from its source), attn_kmem, attn_vmem (ATTN_REGS: the memory
//             as it is), attn_knew, attn_vnew (ATTN_FRESH: a row the
//             dispatch writes given its new value, any other one's `mem`
//             passed through), attn_mask, attn_store (with its epilogue).
//
// Workgroup (query x, head group y, split z). Per tile of T keys: the keys
// into ks (coalesced: consecutive invocations load consecutive elements of
// a key row), HG*T scores from shared memory, per head the new running max
// and the factor e^(m_old - m_new) for what came before, the weights, then
// the tile's weighted values: each invocation keeps HG*DPT accumulators
// (its output dimensions for every head; ATTN_OS: in shared memory between
// tiles, its own elements of os), each value element is loaded once for
// all HG heads. ATTN_REGS: a tile's keys and values are loaded
// into registers by unrolled loads with no branch between them (all in
// flight together), the first tile's while q is staged and each next
// tile's while the current one is finished, then stored into ks.
// With at_nsplit > 1 each workgroup leaves its per-head (m, l, unnormalized
// output) in the scratch buffer and counts itself in with an atomic; the
// last one combines them: every split's m and l into ks, per head the
// overall max M, the weights e^(m - M) and 1 / L, then the weighted sums of
// the outputs spread over all invocations, in passes of ATTN_CC outputs
// an invocation, ATTN_CU splits a round (an invocation's loads of a round
// all in flight), and puts the counter back to zero.
float attn_q(uint d, uint qi, uint h);
#ifdef ATTN_REGS
float attn_kmem(uint d, uint j, uint hk);
#ifdef ATTN_FRESH
float attn_knew(uint d, uint j, uint hk, float mem);
#endif
#else
float attn_k(uint d, uint j, uint hk);
#endif
#ifdef ATTN_VREGS
float attn_vmem(uint d, uint j, uint hk);
#ifdef ATTN_FRESH
float attn_vnew(uint d, uint j, uint hk, float mem);
#endif
#else
float attn_v(uint d, uint j, uint hk);
#endif
#ifdef ATTN_MASK
float attn_mask(uint j, uint qi, uint h);
#endif
void attn_store(uint d, uint h, uint qi, float y);

#define AD_BARRIER()                                                                              \
    memoryBarrierShared();                                                                        \
    barrier()
#define AD_ROW (DV + 2u) // a head's partial result: m, l, DV sums

// Loops over values kept in registers, written out by the preprocessor: a
// compiler that keeps such a loop rolled indexes the array with a variable
// and keeps it in memory (see gemm.glsl's GEMM_EACH_*). AD_A<n>(F, i, c, a)
// expands to F(i, a) F(i + 1u, a) .. F(i + n - 1u, a), each only where its
// index is below the count c (a constant: the compiler drops the others);
// AD_B<n> is the same for a loop inside an F of AD_A (a macro does not
// expand inside its own expansion). The arrays are sized for the largest
// counts, only constant indices below the counts are used.
#define AD_A1(F, i, c, a)                                                                         \
    if ((i) < (c)) {                                                                              \
        F(i, a)                                                                                   \
    }
#define AD_A2(F, i, c, a) AD_A1(F, i, c, a) AD_A1(F, (i) + 1u, c, a)
#define AD_A4(F, i, c, a) AD_A2(F, i, c, a) AD_A2(F, (i) + 2u, c, a)
#define AD_A8(F, i, c, a) AD_A4(F, i, c, a) AD_A4(F, (i) + 4u, c, a)
#define AD_A16(F, i, c, a) AD_A8(F, i, c, a) AD_A8(F, (i) + 8u, c, a)
#define AD_A32(F, i, c, a) AD_A16(F, i, c, a) AD_A16(F, (i) + 16u, c, a)
#define AD_A64(F, i, c, a) AD_A32(F, i, c, a) AD_A32(F, (i) + 32u, c, a)
#define AD_B1(F, i, c, a)                                                                         \
    if ((i) < (c)) {                                                                              \
        F(i, a)                                                                                   \
    }
#define AD_B2(F, i, c, a) AD_B1(F, i, c, a) AD_B1(F, (i) + 1u, c, a)
#define AD_B4(F, i, c, a) AD_B2(F, i, c, a) AD_B2(F, (i) + 2u, c, a)
#define AD_B8(F, i, c, a) AD_B4(F, i, c, a) AD_B4(F, (i) + 4u, c, a)
#define AD_B16(F, i, c, a) AD_B8(F, i, c, a) AD_B8(F, (i) + 8u, c, a)
#define AD_B32(F, i, c, a) AD_B16(F, i, c, a) AD_B16(F, (i) + 16u, c, a)
#define AD_B64(F, i, c, a) AD_B32(F, i, c, a) AD_B32(F, (i) + 32u, c, a)
// over: the heads (HG <= 8), an invocation's output dimensions (DPT <= 8),
// a tile's registers (KPL, VPL <= 64), the combine's outputs a pass
// (ATTN_CC <= 64) and its splits a round (ATTN_CU <= 4)
#define AD_EACH_H2(F, a) AD_B8(F, 0u, HG, a)
#define AD_EACH_E1(F, a) AD_A8(F, 0u, DPT, a)
#define AD_EACH_K1(F, a) AD_A64(F, 0u, KPL, a)
#define AD_EACH_V1(F, a) AD_A64(F, 0u, VPL, a)
#define AD_CO ((HG * DV + WG_SIZE - 1u) / WG_SIZE) // the combine's outputs an invocation
#define AD_EACH_O1(F, a) AD_A64(F, 0u, ATTN_CC, a)
#define AD_EACH_O2(F, a) AD_B64(F, 0u, ATTN_CC, a)
#define AD_EACH_U1(F, a) AD_A4(F, 0u, ATTN_CU, a)
#define AD_RMAX 64 // registers of a tile, outputs of the combine
#ifdef ATTN_OS
#define AD_O(h, e) os[(h) * DV + lid + (e) * WG_SIZE] // accumulator of head h, dimension e
#else
#define AD_O(h, e) o[(h) * 8u + (e)] // accumulator of head h, dimension e
#endif

// ATTN_REGS: the tile from key k0 on into kr (vr): element i*WG_SIZE + lid
// of the tile, keys past the split's end read its last key (never stored)
#define AD_KLOAD(i, k0)                                                                           \
    kr[i] = attn_kmem((lid + (i) * WG_SIZE) % D, min((k0) + (lid + (i) * WG_SIZE) / D, jm), hk);
#define AD_VLOAD(i, k0)                                                                           \
    vr[i] = attn_vmem((lid + (i) * WG_SIZE) % DV, min((k0) + (lid + (i) * WG_SIZE) / DV, jm), hk);
#ifdef ATTN_VREGS
#define AD_TILE_LOADS(k0)                                                                         \
    {                                                                                             \
        uint jm = uint(max(ke - 1, 0));                                                           \
        AD_EACH_K1(AD_KLOAD, k0)                                                                  \
        AD_EACH_V1(AD_VLOAD, k0)                                                                  \
    }
#else
#define AD_TILE_LOADS(k0)                                                                         \
    {                                                                                             \
        uint jm = uint(max(ke - 1, 0));                                                           \
        AD_EACH_K1(AD_KLOAD, k0)                                                                  \
    }
#endif
#ifdef ATTN_FRESH
#define AD_KNEW(d, j, x) attn_knew(d, j, hk, x)
#define AD_VNEW(d, j, x) attn_vnew(d, j, hk, x)
#else
#define AD_KNEW(d, j, x) (x)
#define AD_VNEW(d, j, x) (x)
#endif
// register i of a tile of rows of width W into ks (rows of D + 1)
#define AD_TILE_STORE(i, W, x, NEW)                                                               \
    {                                                                                             \
        uint e = lid + (i) * WG_SIZE;                                                             \
        uint t = e / (W);                                                                         \
        if (t < tn) {                                                                             \
            uint d = e - t * (W);                                                                 \
            ks[t * (D + 1u) + d] = NEW(d, kt0 + t, x);                                            \
        }                                                                                         \
    }
#define AD_KSTORE(i, a) AD_TILE_STORE(i, D, kr[i], AD_KNEW)
#define AD_VSTORE(i, a) AD_TILE_STORE(i, DV, vr[i], AD_VNEW)

// the accumulators: zero, rescaled and increased by the tile's weighted
// values (value element d of key t, once for all heads), stored
#define AD_ZERO(h, e) AD_O(h, e) = 0.0;
#define AD_ZEROS(e, a) AD_EACH_H2(AD_ZERO, e)
#define AD_RESCALE(h, e) AD_O(h, e) *= ch[h];
#define AD_ADD(h, e) AD_O(h, e) += ps[(h) * T + t] * vt;
#ifdef ATTN_V_SHARED
#define AD_VT(d) ks[t * (D + 1u) + (d)]
#else
#define AD_VT(d) attn_v(d, kt0 + t, hk)
#endif
// ATTN_OS: the accumulators stay in shared memory (os) between tiles, in
// registers (r) only while a tile's values are added, then rescaled and
// added to in one step
#ifdef ATTN_OS
#define AD_RZERO(h, e) r[h] = 0.0;
#define AD_RADD(h, e) r[h] += ps[(h) * T + t] * vt;
#define AD_RSTORE(h, e) AD_O(h, e) = AD_O(h, e) * ch[h] + r[h];
#define AD_ACC(e, a)                                                                              \
    {                                                                                             \
        uint d = lid + (e) * WG_SIZE;                                                             \
        if (d < DV) {                                                                             \
            float r[8];                                                                           \
            AD_EACH_H2(AD_RZERO, e)                                                               \
            for (uint t = 0u; t < tn; t++) {                                                      \
                float vt = AD_VT(d);                                                              \
                AD_EACH_H2(AD_RADD, e)                                                            \
            }                                                                                     \
            AD_EACH_H2(AD_RSTORE, e)                                                              \
        }                                                                                         \
    }
#else
#define AD_ACC(e, a)                                                                              \
    {                                                                                             \
        uint d = lid + (e) * WG_SIZE;                                                             \
        AD_EACH_H2(AD_RESCALE, e)                                                                 \
        if (d < DV) {                                                                             \
            for (uint t = 0u; t < tn; t++) {                                                      \
                float vt = AD_VT(d);                                                              \
                AD_EACH_H2(AD_ADD, e)                                                             \
            }                                                                                     \
        }                                                                                         \
    }
#endif
#define AD_FINAL(h, e)                                                                            \
    {                                                                                             \
        uint d = lid + (e) * WG_SIZE;                                                             \
        if (d < DV) {                                                                             \
            float l = lh[h];                                                                      \
            attn_store(d, h0 + (h), qi, l > 0.0 ? AD_O(h, e) / l : 0.0); /* no key: zeros */      \
        }                                                                                         \
    }
#define AD_FINALS(e, a) AD_EACH_H2(AD_FINAL, e)
#define AD_PUT(h, e)                                                                              \
    ATTN_SCR[pb + (h) * AD_ROW + 2u + lid + (e) * WG_SIZE] = floatBitsToUint(AD_O(h, e));
#define AD_PUTS(e, a)                                                                             \
    if (lid + (e) * WG_SIZE < DV) {                                                               \
        AD_EACH_H2(AD_PUT, e)                                                                     \
    }

// the combine: output o = c0 + i (pass c0, ATTN_CC outputs a pass) of an
// invocation is output AD_OO(o) of the group's HG * DV, head oh[i] and
// dimension od[i]; split cqs[u] = cq0 + u of a round (past the last: its
// loads again, weight 0) has its partial results from cqb[u] on. Computed
// once (per round) into registers: written as expressions in each load,
// NVIDIA's compiler gave the combine 30% more instructions and the
// attention at a depth of 2048 3% more time on the H200 (with early
// returns instead of the if/else around the splits' end). AD_CFULL: every
// output of every pass is one of the HG * DV (no clamp, no check);
// AD_CSIMPLE: and each one's dimension is the invocation's first's, od0,
// its head oh0 plus a multiple of the pass: both expressions of two
// registers, where the arrays would hold ATTN_CC each.
#define AD_OO(o) (lid + (o) * WG_SIZE)
#define AD_CFULL (HG * DV % WG_SIZE == 0u && AD_CO % ATTN_CC == 0u)
#define AD_CSIMPLE (AD_CFULL && WG_SIZE % DV == 0u)
#define AD_OH(i) (AD_CSIMPLE ? oh0 + (c0 + (i)) * (WG_SIZE / DV) : oh[i])
#define AD_OD(i) (AD_CSIMPLE ? od0 : od[i])
#define AD_CINIT(i, a)                                                                            \
    oh[i] = min(AD_OO(c0 + (i)) / DV, HG - 1u);                                                   \
    od[i] = AD_OO(c0 + (i)) - (AD_OO(c0 + (i)) / DV) * DV;                                        \
    oc[i] = 0.0;
#define AD_CROUND(u, a)                                                                           \
    cqs[u] = min(cq0 + (u), at_nsplit - 1u);                                                      \
    cqb[u] = pb0 + cqs[u] * HG * AD_ROW + 2u;
#define AD_CX(i, u) cx[(u) * uint(AD_RMAX) + (i)]
#define AD_CLOAD(i, u)                                                                            \
    AD_CX(i, u) = uintBitsToFloat(ATTN_SCR[cqb[u] + AD_OH(i) * AD_ROW + AD_OD(i)]);
#define AD_CLOADS(u, a) AD_EACH_O2(AD_CLOAD, u)
#define AD_CADD(i, u)                                                                             \
    oc[i] += (cq0 + (u) < at_nsplit ? ks[2u * ATTN_COMBINE + cqs[u] * HG + AD_OH(i)] : 0.0) *     \
             AD_CX(i, u);
#define AD_CADDS(u, a) AD_EACH_O2(AD_CADD, u)
#define AD_CSTORE(i, a)                                                                           \
    if (AD_CFULL || AD_OO(c0 + (i)) < HG * DV) {                                                  \
        attn_store(AD_OD(i), h0 + AD_OH(i), qi, oc[i] * mh[AD_OH(i)]);                            \
    }

void attn_decode() {
    uint qi = gl_WorkGroupID.x; // query
    uint hg = gl_WorkGroupID.y; // head group
    uint sp = gl_WorkGroupID.z; // split of the keys
    uint lid = gl_LocalInvocationIndex;
    uint h0 = hg * HG;
    uint hk = h0 / at_gqa;
    uint kb0 = sp * at_S;
#ifdef ATTN_SWA
    kb0 += at_k0;
#endif
    int ke = min(int(kb0 + at_S), int(at_nkv));
#ifdef ATTN_CAUSAL
    ke = min(ke, int(qi) + at_coff + 1); // keys after the query are masked
#endif
#ifdef ATTN_SWA
    kb0 = uint(max(int(kb0), int(qi) + at_coff - at_swa + 1)); // the window
#endif
#ifdef ATTN_REGS
    // the first tile's keys and values in flight while q is staged
    float kr[AD_RMAX];
#ifdef ATTN_VREGS
    float vr[AD_RMAX];
#endif
    AD_TILE_LOADS(kb0)
#endif
    // queries of the HG heads, scaled
    for (uint e = lid; e < HG * D; e += WG_SIZE) {
        uint hh = e / D;
        uint d = e - hh * D;
        qs[e] = attn_q(d, qi, h0 + hh);
    }
    if (lid < HG) {
        mh[lid] = NEG_INF;
        lh[lid] = 0.0;
    }
#ifdef ATTN_OS
    for (uint i = lid; i < HG * DV; i += WG_SIZE) { // others' too: the barrier below
        os[i] = 0.0;
    }
#else
    float o[64]; // AD_O(h, e): 8 heads by 8 dimensions at most
    AD_EACH_E1(AD_ZEROS, 0u)
#endif
    AD_BARRIER();
    for (uint kt0 = kb0; int(kt0) < ke; kt0 += T) {
        uint tn = min(T, uint(ke) - kt0);
#ifdef ATTN_ROLL
        uint tnr = min(at_t, uint(ke) - kt0); // tn, a bound the compiler does not know
#else
        uint tnr = tn;
#endif
        // the key tile, coalesced: consecutive invocations, consecutive d
#ifdef ATTN_REGS
        AD_EACH_K1(AD_KSTORE, 0u)
#else
        for (uint e = lid; e < tn * D; e += WG_SIZE) {
            uint t = e / D;
            uint d = e - t * D;
            ks[t * (D + 1u) + d] = attn_k(d, kt0 + t, hk);
        }
#endif
        AD_BARRIER();
        // scores of (head, key) pairs
        for (uint e = lid; e < HG * T; e += WG_SIZE) {
            uint hh = e / T;
            uint t = e - hh * T;
            float s = NEG_INF;
            if (t < tn) {
                float dot = 0.0;
                for (uint d = 0u; d < D; d++) {
                    dot += qs[hh * D + d] * ks[t * (D + 1u) + d];
                }
#ifdef ATTN_SOFTCAP
                dot = at_cap * op_tanh(dot / at_cap);
#endif
#ifdef ATTN_MASK
                dot += attn_mask(kt0 + t, qi, h0 + hh);
#endif
                s = dot;
            }
            ps[e] = s;
        }
        AD_BARRIER();
        // the value tile into ks (the scores are done with the keys), then
        // the next tile's loads in flight while this one is finished
#if defined(ATTN_VREGS)
        AD_EACH_V1(AD_VSTORE, 0u)
#elif defined(ATTN_V_SHARED)
        for (uint e = lid; e < tn * DV; e += WG_SIZE) {
            uint t = e / DV;
            uint d = e - t * DV;
            ks[t * (D + 1u) + d] = attn_v(d, kt0 + t, hk);
        }
#endif
#ifdef ATTN_REGS
        if (int(kt0 + T) < ke) {
            AD_TILE_LOADS(kt0 + T)
        }
#endif
        // per head: the new running maximum and the factor for what came
        // before
        if (lid < HG) {
            float mx = NEG_INF;
            for (uint t = 0u; t < tnr; t++) {
                mx = max(mx, ps[lid * T + t]);
            }
            float mo = mh[lid];
            float mn = max(mo, mx);
            ch[lid] = mo == NEG_INF ? 0.0 : exp(mo - mn);
            mh[lid] = mn;
        }
        AD_BARRIER();
        for (uint e = lid; e < HG * T; e += WG_SIZE) {
            float s = ps[e];
            ps[e] = s == NEG_INF ? 0.0 : exp(s - mh[e / T]);
        }
        AD_BARRIER();
        if (lid < HG) {
            float sum = 0.0;
            for (uint t = 0u; t < tnr; t++) {
                sum += ps[lid * T + t];
            }
            lh[lid] = lh[lid] * ch[lid] + sum;
        }
        // the tile's weighted values: each value element loaded once for
        // all HG heads
        AD_EACH_E1(AD_ACC, 0u)
        AD_BARRIER(); // ks, ps and ch are rewritten by the next tile
    }
    if (at_nsplit == 1u) {
        AD_EACH_E1(AD_FINALS, 0u)
    } else {
        // partial results: per (query, group, split, head) m, l and DV sums
        uint gi = qi * gl_NumWorkGroups.y + hg;
        uint pb0 = ATTN_COUNTERS + gi * at_nsplit * HG * AD_ROW;
        uint pb = pb0 + sp * HG * AD_ROW;
        AD_EACH_E1(AD_PUTS, 0u)
        if (lid < HG) {
            ATTN_SCR[pb + lid * AD_ROW] = floatBitsToUint(mh[lid]);
            ATTN_SCR[pb + lid * AD_ROW + 1u] = floatBitsToUint(lh[lid]);
        }
        memoryBarrierBuffer();
        barrier();
        if (lid == 0u) {
            last_wg[0] = atomicAdd(ATTN_SCR[gi], 1u) == at_nsplit - 1u ? 1u : 0u;
        }
        AD_BARRIER();
        if (last_wg[0] == 1u) {
            // every split is in: each one's m and l per head into ks (free now)
            memoryBarrierBuffer();
            for (uint e = lid; e < at_nsplit * HG; e += WG_SIZE) {
                uint qb = pb0 + e * AD_ROW;
                ks[e] = uintBitsToFloat(ATTN_SCR[qb]);
                ks[ATTN_COMBINE + e] = uintBitsToFloat(ATTN_SCR[qb + 1u]);
            }
            AD_BARRIER();
            // per head: the overall max, each split's weight e^(m - M), 1 / L
            if (lid < HG) {
                float M = NEG_INF;
                for (uint q = 0u; q < at_nsplit; q++) {
                    M = max(M, ks[q * HG + lid]);
                }
                float L = 0.0;
                for (uint q = 0u; q < at_nsplit; q++) {
                    float m = ks[q * HG + lid];
                    float f = m == NEG_INF ? 0.0 : exp(m - M);
                    ks[2u * ATTN_COMBINE + q * HG + lid] = f;
                    L += ks[ATTN_COMBINE + q * HG + lid] * f;
                }
                mh[lid] = L > 0.0 ? 1.0 / L : 0.0; // no visible key: zeros
            }
            AD_BARRIER();
            // outputs (head, d) spread over all invocations, AD_CO each, in
            // passes of ATTN_CC: per round ATTN_CU splits' loads of the
            // pass's outputs, all in flight together
            uint oh0 = lid / DV, od0 = lid - (lid / DV) * DV;
            for (uint c0 = 0u; c0 < AD_CO; c0 += ATTN_CC) {
                uint oh[AD_RMAX], od[AD_RMAX];
                float oc[AD_RMAX];
                AD_EACH_O1(AD_CINIT, 0u)
                for (uint cq0 = 0u; cq0 < at_nsplit; cq0 += ATTN_CU) {
                    uint cqs[4], cqb[4];
                    AD_EACH_U1(AD_CROUND, 0u)
                    float cx[4 * AD_RMAX];
                    AD_EACH_U1(AD_CLOADS, 0u)
                    AD_EACH_U1(AD_CADDS, 0u)
                }
                AD_EACH_O1(AD_CSTORE, 0u)
            }
            if (lid == 0u) {
                ATTN_SCR[gi] = 0u; // ready for the next dispatch
            }
        }
    }
}
