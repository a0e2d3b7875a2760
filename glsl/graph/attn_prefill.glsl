// Prefill attention, flash style: softmax(q*k^T*scale + mask) * v for a
// block of queries against tiles of keys and values staged in shared
// memory, with the online softmax (a running max and sum per row), never
// storing a score row. src/kernels/attention.c declares around this file:
//   defines   HG (query heads of one kv head per workgroup: they share the
//             key and value tiles), BQ (queries per workgroup), R = BQ*HG
//             (rows: row r is query q0 + r / HG of head h0 + r % HG), BK
//             (keys per tile), BKP = BK + 1 (a score row's stride: no bank
//             conflicts when one invocation walks a row), D, DV (q/k and v
//             head sizes), D4, DV4 (their vec4 counts, zero-padded), KP =
//             D4 + 1 (a key row's vec4 stride), the score phase's split of the
//             workgroup: SKG invocations across keys (each TK keys sk +
//             j*SKG) times SRG across rows (each TR rows sr + i*SRG), and the
//             output phase's: ODG across value vec4s (each TD4: od + c*ODG)
//             times ORG across rows (each TRO rows og + i*ORG);
//             ATTN_CAUSAL, ATTN_MASK, ATTN_SWA (a sliding window),
//             ATTN_SOFTCAP (soft-capped scores); ATTN_SCR the scratch
//             binding (uint), ATTN_COUNTERS its counters; ATTN_SG (the
//             rows' maxima and sums by subgroup shuffles); ATTN_ROLL (the
//             scores' loop over D4 bounded by the uniform at_d4 = D4, so
//             the compiler keeps it a loop: V3D's, where a short head's
//             loop written out held all its loads in flight and spilled);
//             ATTN_NARROW (narrower steps where an invocation holds many
//             output vec4: q staged an element at a time, D a multiple
//             of 4; a tile's values added one output vec4 at a time, over
//             keys bounded by the uniform at_bk = BK)
//   uniforms  at_nq, at_nkv (queries, keys), at_gqa (query heads per kv
//             head), at_coff (causal: key j is visible to query i when
//             j <= i + at_coff), at_swa (the window: j > i + at_coff -
//             at_swa), at_cap (scores become at_cap * tanh(s / at_cap)
//             before the mask), at_S (keys per split, whole tiles),
//             at_nsplit (splits dispatched), at_d4 (with ATTN_ROLL: D4),
//             at_bk (with ATTN_NARROW: BK)
//   shared    vec4 qs[R*D4] (the scaled queries), vec4 kvs[BK*KVP] (the key
//             tile, then the value tile), float ps[R*BKP] (the tile's
//             weights), float ms[R], ls[R] (the rows' max and sum after the
//             last tile), al[R] (the tile's rescale factor), uint
//             at_last[1], float rr[R*SKG] (without ATTN_SG: the partial
//             maxima and sums of a row's SKG invocations)
//   hooks     generated from the graph: attn_q (q with its prologue, e.g.
//             rope and qwen3's norm, times the scale), attn_k, attn_v (keys
//             and values; rows a fused KV-cache write writes are computed
//             from its source), attn_mask, attn_store (with its epilogue).
//
// A workgroup takes BQ queries of HG heads and one split of the keys
// (workgroup z): tiles entirely above the causal diagonal are never loaded
// (the key range ends at the block's last query), nor those before a
// sliding window (it starts at the block's first query's window), the
// diagonal and the window's edge are masked per element. Per tile: keys
// in (coalesced: consecutive invocations load consecutive elements of a
// key row), a TRxTK block of scores per invocation from shared memory
// (vec4 dot products), the online softmax on them in registers (below),
// values in, then TROxTD4 vec4 output accumulators per invocation,
// rescaled by e^(m_old - m_new) and increased by the tile's weighted values.
// With more than one split a workgroup leaves its rows' (m, l, unnormalized
// output) in the scratch buffer and the last one of its block combines them
// (flash-decoding), so a short block of queries over a long cache still
// fills the device; blocks are dispatched longest key range first.
float attn_q(uint d, uint qi, uint h);
float attn_k(uint d, uint j, uint hk);
float attn_v(uint d, uint j, uint hk);
#ifdef ATTN_MASK
float attn_mask(uint j, uint qi, uint h);
#endif
void attn_store(uint d, uint h, uint qi, float y);

#define AT_BARRIER()                                                                              \
    memoryBarrierShared();                                                                        \
    barrier()

// The online softmax runs where the scores are, in registers: the SKG
// invocations that share a row (one sr, sk = 0 .. SKG-1) each hold TK of
// its keys; only the tile's row maximum crosses them (at_row_max), by
// shuffles within a subgroup (ATTN_SG: the SKG lanes of a row are
// consecutive lanes of one subgroup) or through shared memory (rr: SKG
// partial maxima per row, a barrier). Each invocation keeps the row's
// running max (equal in all SKG) and its own part of the row's sum,
// rescaled alike, so the sums cross the invocations once, after the last
// tile.
#ifdef ATTN_SG
#define AT_SLID (gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID)
void at_row_max(inout float v[TR], uint sr, uint sk) {
    for (uint i = 0u; i < TR; i++) {
        for (uint o = 1u; o < SKG; o <<= 1u) {
            v[i] = max(v[i], subgroupShuffleXor(v[i], o));
        }
    }
}
void at_row_sum(inout float v[TR], uint sr, uint sk) {
    for (uint i = 0u; i < TR; i++) {
        for (uint o = 1u; o < SKG; o <<= 1u) {
            v[i] += subgroupShuffleXor(v[i], o);
        }
    }
}
#else
#define AT_SLID gl_LocalInvocationIndex
void at_row_max(inout float v[TR], uint sr, uint sk) {
    for (uint i = 0u; i < TR; i++) {
        rr[(sr + i * SRG) * SKG + sk] = v[i];
    }
    AT_BARRIER();
    for (uint i = 0u; i < TR; i++) {
        for (uint o = 0u; o < SKG; o++) {
            v[i] = max(v[i], rr[(sr + i * SRG) * SKG + o]);
        }
    }
    AT_BARRIER(); // rr is free again
}
void at_row_sum(inout float v[TR], uint sr, uint sk) {
    for (uint i = 0u; i < TR; i++) {
        rr[(sr + i * SRG) * SKG + sk] = v[i];
    }
    AT_BARRIER();
    for (uint i = 0u; i < TR; i++) {
        float t = 0.0;
        for (uint o = 0u; o < SKG; o++) {
            t += rr[(sr + i * SRG) * SKG + o];
        }
        v[i] = t;
    }
    AT_BARRIER();
}
#endif
#define AT_ROW (DV + 2u) // a row's partial result: m, l, DV sums
#ifdef ATTN_ROLL
#define AT_D4 at_d4
#else
#define AT_D4 D4
#endif

void attn_prefill() {
    uint lid = gl_LocalInvocationIndex;
    uint qb = gl_NumWorkGroups.x - 1u - gl_WorkGroupID.x; // longest key ranges first
    uint h0 = gl_WorkGroupID.y * HG;
    uint hk = h0 / at_gqa;
    uint sp = gl_WorkGroupID.z;
    uint q0 = qb * BQ;
    int kend = int(at_nkv);
#ifdef ATTN_CAUSAL
    kend = min(kend, int(min(q0 + BQ, at_nq)) + at_coff); // the block's last query sees < kend
#endif
    int kbeg = 0;
#ifdef ATTN_SWA
    kbeg = max(0, int(q0) + at_coff - at_swa + 1); // the block's first query's window
#endif
    kend = max(kend, kbeg);
    // splits this block has (an empty key range still stores its zeros)
    uint nsp = max(1u, (uint(kend - kbeg) + at_S - 1u) / at_S);
    if (sp >= nsp) {
        return;
    }
    uint kb0 = uint(kbeg) + sp * at_S;
    uint ke = min(uint(kend), kb0 + at_S);
    // rows of queries that exist (the last block's are fewer): the others
    // are neither loaded nor computed
    uint nrows = min(R, (at_nq - q0) * HG);

#ifdef ATTN_NARROW
    for (uint e = lid; e < nrows * D; e += WG_SIZE) {
        uint r = e / D;
        uint d = e - r * D;
        qs[r * D4 + d / 4u][d % 4u] = attn_q(d, q0 + r / HG, h0 + r % HG);
    }
#else
    for (uint e = lid; e < nrows * D4; e += WG_SIZE) {
        uint r = e / D4;
        uint d = (e - r * D4) * 4u;
        uint qi = q0 + r / HG;
        uint h = h0 + r % HG;
        vec4 x = vec4(0.0, 0.0, 0.0, 0.0);
        x.x = attn_q(d, qi, h);
        if (d + 1u < D) {
            x.y = attn_q(d + 1u, qi, h);
        }
        if (d + 2u < D) {
            x.z = attn_q(d + 2u, qi, h);
        }
        if (d + 3u < D) {
            x.w = attn_q(d + 3u, qi, h);
        }
        qs[e] = x;
    }
#endif
    uint slid = AT_SLID;
    uint sk = slid % SKG;
    uint sr = slid / SKG;
    float mrow[TR]; // rows sr + i*SRG: the running max
    float lrow[TR]; // and this invocation's part of the running sum
    for (uint i = 0u; i < TR; i++) {
        mrow[i] = NEG_INF;
        lrow[i] = 0.0;
    }
    uint od = lid % ODG;
    uint og = lid / ODG;
    vec4 o[TRO * TD4];
    for (uint i = 0u; i < TRO * TD4; i++) {
        o[i] = vec4(0.0);
    }

    for (uint kt0 = kb0; kt0 < ke; kt0 += BK) {
        uint tn = min(BK, ke - kt0);
        AT_BARRIER(); // the last tile's readers are done with kvs and ps
        for (uint e = lid; e < tn * D4; e += WG_SIZE) {
            uint t = e / D4;
            uint d4 = e - t * D4;
            uint d = d4 * 4u;
            uint j = kt0 + t;
            vec4 x = vec4(0.0, 0.0, 0.0, 0.0);
            x.x = attn_k(d, j, hk);
            if (d + 1u < D) {
                x.y = attn_k(d + 1u, j, hk);
            }
            if (d + 2u < D) {
                x.z = attn_k(d + 2u, j, hk);
            }
            if (d + 3u < D) {
                x.w = attn_k(d + 3u, j, hk);
            }
            kvs[t * KP + d4] = x;
        }
        AT_BARRIER();

        // scores: rows sr + i*SRG, keys sk + j*SKG (an invocation with
        // neither a row nor a key in range skips them: its scores are never
        // read; the others stay unguarded, the rest of the block being
        // cheaper computed than tested)
        float s[TR * TK];
        for (uint i = 0u; i < TR * TK; i++) {
            s[i] = 0.0;
        }
        if (sr < nrows && sk < tn) {
            for (uint d4 = 0u; d4 < AT_D4; d4++) {
                vec4 qv[TR];
                for (uint i = 0u; i < TR; i++) {
                    qv[i] = qs[(sr + i * SRG) * D4 + d4];
                }
                for (uint j = 0u; j < TK; j++) {
                    vec4 kv = kvs[(sk + j * SKG) * KP + d4];
                    for (uint i = 0u; i < TR; i++) {
                        s[i * TK + j] += dot(qv[i], kv);
                    }
                }
            }
        }
        float mt[TR]; // the tile's row maxima
        for (uint i = 0u; i < TR; i++) {
            uint r = sr + i * SRG;
            uint qi = q0 + r / HG;
            mt[i] = NEG_INF;
            for (uint j = 0u; j < TK; j++) {
                uint t = sk + j * SKG;
                uint kj = kt0 + t;
                float v = s[i * TK + j];
                bool vis = t < tn;
#ifdef ATTN_CAUSAL
                vis = vis && int(kj) <= int(qi) + at_coff;
#endif
#ifdef ATTN_SWA
                vis = vis && int(kj) > int(qi) + at_coff - at_swa;
#endif
#ifdef ATTN_SOFTCAP
                v = at_cap * op_tanh(v / at_cap);
#endif
#ifdef ATTN_MASK
                if (vis && qi < at_nq) {
                    v += attn_mask(kj, qi, h0 + r % HG);
                }
#endif
                v = vis ? v : NEG_INF;
                s[i * TK + j] = v;
                mt[i] = max(mt[i], v);
            }
        }
        at_row_max(mt, sr, sk);
        // weights into ps (keys from tn on: masked, zero), each row's
        // rescale factor into al
        for (uint i = 0u; i < TR; i++) {
            uint r = sr + i * SRG;
            float mn = max(mrow[i], mt[i]);
            float a = mrow[i] == NEG_INF ? 0.0 : exp(mrow[i] - mn);
            float sum = 0.0;
            for (uint j = 0u; j < TK; j++) {
                float sv = s[i * TK + j];
                float p = sv == NEG_INF ? 0.0 : exp(sv - mn);
                ps[r * BKP + sk + j * SKG] = p;
                sum += p;
            }
            lrow[i] = lrow[i] * a + sum;
            mrow[i] = mn;
            if (sk == 0u) {
                al[r] = a;
            }
        }
        AT_BARRIER();

        // the value tile into kvs (the scores are done with the keys) ...
        for (uint e = lid; e < tn * DV4; e += WG_SIZE) {
            uint t = e / DV4;
            uint d4 = e - t * DV4;
            uint d = d4 * 4u;
            uint j = kt0 + t;
            vec4 x = vec4(0.0, 0.0, 0.0, 0.0);
            x.x = attn_v(d, j, hk);
            if (d + 1u < DV) {
                x.y = attn_v(d + 1u, j, hk);
            }
            if (d + 2u < DV) {
                x.z = attn_v(d + 2u, j, hk);
            }
            if (d + 3u < DV) {
                x.w = attn_v(d + 3u, j, hk);
            }
            kvs[t * DV4 + d4] = x;
        }
        AT_BARRIER();

        // outputs: rows og + i*ORG, value vec4s od + c*ODG
        for (uint i = 0u; i < TRO; i++) {
            float a = al[og + i * ORG];
            for (uint c = 0u; c < TD4; c++) {
                o[i * TD4 + c] *= a;
            }
        }
#ifdef ATTN_NARROW
        // one value vec4 live, not TD4 (each key's weights read TD4 times)
        uint tnb = min(at_bk, ke - kt0);
        for (uint c = 0u; c < TD4; c++) {
            uint vc = min(od + c * ODG, DV4 - 1u);
            for (uint t = 0u; t < tnb; t++) {
                vec4 vv = kvs[t * DV4 + vc];
                for (uint i = 0u; i < TRO; i++) {
                    o[i * TD4 + c] += ps[(og + i * ORG) * BKP + t] * vv;
                }
            }
        }
#else
        for (uint t = 0u; t < tn; t++) {
            vec4 vv[TD4];
            for (uint c = 0u; c < TD4; c++) {
                vv[c] = kvs[t * DV4 + min(od + c * ODG, DV4 - 1u)];
            }
            for (uint i = 0u; i < TRO; i++) {
                float p = ps[(og + i * ORG) * BKP + t];
                for (uint c = 0u; c < TD4; c++) {
                    o[i * TD4 + c] += p * vv[c];
                }
            }
        }
#endif
    }
    // the rows' max and sum (also where the block had no key) into ms, ls
    at_row_sum(lrow, sr, sk);
    if (sk == 0u) {
        for (uint i = 0u; i < TR; i++) {
            ms[sr + i * SRG] = mrow[i];
            ls[sr + i * SRG] = lrow[i];
        }
    }
    AT_BARRIER();

    if (nsp == 1u) {
        for (uint i = 0u; i < TRO; i++) {
            uint r = og + i * ORG;
            uint qi = q0 + r / HG;
            uint h = h0 + r % HG;
            float l = ls[r];
            float inv = l > 0.0 ? 1.0 / l : 0.0; // no visible key: zeros
            for (uint c = 0u; c < TD4; c++) {
                uint d = (od + c * ODG) * 4u;
                if (qi < at_nq && d < DV) {
                    vec4 y = o[i * TD4 + c] * inv;
                    attn_store(d, h, qi, y.x);
                    if (d + 1u < DV) {
                        attn_store(d + 1u, h, qi, y.y);
                    }
                    if (d + 2u < DV) {
                        attn_store(d + 2u, h, qi, y.z);
                    }
                    if (d + 3u < DV) {
                        attn_store(d + 3u, h, qi, y.w);
                    }
                }
            }
        }
        return;
    }

    // partial results per (block, head group, split, row): m, l, DV sums
    uint gi = qb * gl_NumWorkGroups.y + gl_WorkGroupID.y;
    uint pb0 = ATTN_COUNTERS + gi * at_nsplit * R * AT_ROW;
    uint pb = pb0 + sp * R * AT_ROW;
    for (uint i = 0u; i < TRO; i++) {
        uint r = og + i * ORG;
        for (uint c = 0u; c < TD4; c++) {
            uint d = (od + c * ODG) * 4u;
            vec4 y = o[i * TD4 + c];
            for (uint k = 0u; k < 4u; k++) {
                if (d + k < DV) {
                    ATTN_SCR[pb + r * AT_ROW + 2u + d + k] = floatBitsToUint(y[k]);
                }
            }
        }
    }
    if (lid < R) {
        ATTN_SCR[pb + lid * AT_ROW] = floatBitsToUint(ms[lid]);
        ATTN_SCR[pb + lid * AT_ROW + 1u] = floatBitsToUint(ls[lid]);
    }
    memoryBarrierBuffer();
    barrier();
    if (lid == 0u) {
        at_last[0] = atomicAdd(ATTN_SCR[gi], 1u) == nsp - 1u ? 1u : 0u;
    }
    AT_BARRIER();
    if (at_last[0] == 0u) {
        return;
    }
    // the last split of the block: per row the overall max M, each split's
    // weight e^(m - M) (into ps: at_nsplit <= BKP) and 1 / L
    memoryBarrierBuffer();
    if (lid < R) {
        float M = NEG_INF;
        for (uint q = 0u; q < nsp; q++) {
            M = max(M, uintBitsToFloat(ATTN_SCR[pb0 + (q * R + lid) * AT_ROW]));
        }
        float L = 0.0;
        for (uint q = 0u; q < nsp; q++) {
            uint qb_ = pb0 + (q * R + lid) * AT_ROW;
            float m = uintBitsToFloat(ATTN_SCR[qb_]);
            float f = m == NEG_INF ? 0.0 : exp(m - M);
            ps[lid * BKP + q] = f;
            L += uintBitsToFloat(ATTN_SCR[qb_ + 1u]) * f;
        }
        ls[lid] = L > 0.0 ? 1.0 / L : 0.0; // no visible key: zeros
    }
    AT_BARRIER();
    for (uint e = lid; e < R * DV; e += WG_SIZE) {
        uint r = e / DV;
        uint d = e - r * DV;
        uint qi = q0 + r / HG;
        float acc = 0.0;
        for (uint q = 0u; q < nsp; q++) {
            acc += ps[r * BKP + q] * uintBitsToFloat(ATTN_SCR[pb0 + (q * R + r) * AT_ROW + 2u + d]);
        }
        if (qi < at_nq) {
            attn_store(d, h0 + r % HG, qi, acc * ls[r]);
        }
    }
    if (lid == 0u) {
        ATTN_SCR[gi] = 0u; // ready for the next dispatch
    }
}
