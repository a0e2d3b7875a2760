/*
 * attention.c — fused attention: softmax(q·kᵀ·scale + mask) · v in one
 * kernel, for one query row (decode) or many (prefill), with grouped-query
 * heads (head h reads kv head h / (n_head / n_head_kv)), optionally a
 * sliding window (a query sees its last n_swa positions: its key loop
 * starts there) and soft-capped scores (cap·tanh(s/cap) before the mask),
 * Gemma's local layers and Gemma 2's attention.
 *
 * One workgroup per (query, group of HG query heads sharing a kv head,
 * split of the keys). The HG heads of a workgroup read each key and value
 * once for all of them (GQA). Keys are walked in tiles of T: the tile is
 * staged in shared memory with consecutive invocations loading consecutive
 * elements of a key row (coalesced), scores for HG·T (head, key) pairs come
 * from shared memory, the running state per head (max m, sum l) is kept in
 * shared memory and the output accumulators are rescaled by exp(m_old -
 * m_new) before the tile's weighted values are added: the online softmax,
 * numerically stable for any logits, never storing a score row. Each
 * invocation accumulates output dimensions d = lid + e·WG for all HG heads
 * (value elements loaded once, coalesced across invocations).
 *
 * The keys are split over nsplit workgroups (flash-decoding: a decode step
 * has one query and few kv heads, so without the split a few workgroups
 * would walk the whole cache). With nsplit > 1 each workgroup leaves its
 * (m, l, unnormalized output) in the scratch buffer and counts itself in
 * with an atomic; the last workgroup of a (query, head group) combines them
 * (every split's m and l staged in shared memory, per head the overall max
 * and the splits' weights, then the weighted sums with four loads in
 * flight), stores the result (its epilogue included) and puts the counter
 * back to zero. nsplit and the keys per split are uniforms chosen per compute
 * from the sizes; HG, T and the accumulators per invocation are the op's
 * variant (kernels_attention_variant), so part of the plan's structure.
 *
 * q is staged once per workgroup through kb_expr, so an elementwise
 * prologue on it (rope, through the permute that makes q's layout) costs
 * nothing extra. Keys and values are read through kb_expr too, so a fused
 * KV-cache write (set_rows of new rows into the cache this kernel reads,
 * fuse.c) is computed here: the new rows are written by a loop over all
 * invocations of the dispatch, and wherever this kernel reads a new row it
 * computes it from the source (rope(k) included) instead of reading the
 * cache (kb_row_writes_begin), so no workgroup reads what another writes.
 */
#include <stdio.h>

#include "kernels/kernels.h"

#define ATTN_WG 128    /* invocations per workgroup on GPUs */
#define ATTN_WG_CPU 64 /* on llvmpipe (ctx->cpu_device: one choice per context, as GEMV) */
#define ATTN_MAX_D 512
#define ATTN_QS 1024 /* floats of staged queries: HG·D */
#define ATTN_KS 2112 /* floats of a key tile: T·(D + 1) (padded rows: no bank conflicts) */
#define ATTN_HG_MAX 8
#define ATTN_T_MAX 64
#define ATTN_WG_TARGET_GPU 256 /* workgroups a decode step's split aims at */
#define ATTN_WG_TARGET_CPU 8
#define ATTN_SPLIT_TILES 1 /* key tiles per split at least */
#define ATTN_COMBINE 512   /* (split, head) pairs the combine stages in ks */
_Static_assert(3 * ATTN_COMBINE <= ATTN_KS, "the combine's m, l and weights fit ks");

typedef struct attn_shape {
    int hg;        /* query heads per workgroup (divides gqa) */
    int t;         /* keys per tile */
    int dpt;       /* output dimensions per invocation */
    bool v_shared; /* the value tile is staged in ks too (d_v <= d + 1) */
} attn_shape;

static attn_shape shape_of(const glesc_tensor *a, int wg)
{
    const glesc_tensor *q = a->src[0], *k = a->src[1], *v = a->src[2];
    int64_t d = q->ne[0], gqa = q->ne[2] / k->ne[2];
    attn_shape s = {1, ATTN_T_MAX, (int)((v->ne[0] + wg - 1) / wg), v->ne[0] <= d + 1};
    for (int h = ATTN_HG_MAX; h >= 1; h--)
        if (gqa % h == 0 && h * d <= ATTN_QS) {
            s.hg = h;
            break;
        }
    while (s.t > 1 && s.t * (d + 1) > ATTN_KS)
        s.t /= 2;
    return s;
}

uint32_t kernels_attention_variant(const glesc_tensor *t)
{
    /* the accumulators per invocation for the smaller workgroup: with the
     * workgroup size fixed per context they follow from it */
    attn_shape s = shape_of(t, ATTN_WG_CPU);
    return (uint32_t)s.hg | (uint32_t)s.t << 4 | (uint32_t)s.dpt << 12 | (uint32_t)s.v_shared << 20;
}

glesc_status kernels_gen_attention(kb *b)
{
    const glesc_tensor *a = b->gk->anchor;
    const glesc_tensor *q = a->src[0], *k = a->src[1], *v = a->src[2], *mask = a->src[3];
    bool causal = a->ip[0] != 0, softcap = a->ip[2] != 0;
    int n_swa = a->ip[1];
    int wg = b->ctx->cpu_device ? ATTN_WG_CPU : ATTN_WG;
    attn_shape sh = shape_of(a, wg);
    int64_t n_q = q->ne[1], n_head = q->ne[2], n_kv = k->ne[1], dv = v->ne[0];
    int64_t n_groups = n_head / sh.hg;
    if (b->k) {
        emit_kernel_local_size(b->k, wg, 1, 1);
        emit_kernel_shared(b->k, "float", "qs", ATTN_QS);
        emit_kernel_shared(b->k, "float", "ks", ATTN_KS);
        emit_kernel_shared(b->k, "float", "ps", ATTN_HG_MAX * ATTN_T_MAX);
        emit_kernel_shared(b->k, "float", "mh", ATTN_HG_MAX);
        emit_kernel_shared(b->k, "float", "lh", ATTN_HG_MAX);
        emit_kernel_shared(b->k, "float", "ch", ATTN_HG_MAX);
        emit_kernel_shared(b->k, "uint", "last_wg", 1);
        emit_kernel_snippet(b->k, "graph/reduce");
        emit_kernel_snippet(b->k, "graph/eltwise");
        emit_kernel_define(b->k, "HG", "%du", sh.hg);
        emit_kernel_define(b->k, "T", "%du", sh.t);
        emit_kernel_define(b->k, "BARRIER()", "memoryBarrierShared(); barrier()");
        emit_kernel_comment(b->k,
                            "attention: a workgroup per (query, HG heads of one kv head, split of "
                            "the keys), online softmax over key tiles of T%s%s%s%s",
                            softcap ? ", soft-capped scores" : "", mask ? ", additive mask" : "",
                            causal ? ", causal" : "", n_swa > 0 ? ", sliding window" : "");
    }
    /* A sliding window hides the keys before the first query's window:
     * the splits cover only [k0, n_kv) */
    int64_t k0 = n_swa > 0 ? CORE_MAX(0, n_kv - n_q + 1 - (int64_t)n_swa) : 0;
    /* keys per split: enough workgroups to fill the device, whole tiles */
    int64_t target = b->ctx->cpu_device ? ATTN_WG_TARGET_CPU : ATTN_WG_TARGET_GPU;
    int64_t tiles = (n_kv - k0 + sh.t - 1) / sh.t;
    int64_t nsplit = (target + n_q * n_groups - 1) / (n_q * n_groups);
    nsplit = CORE_MIN(nsplit, CORE_MIN(tiles / ATTN_SPLIT_TILES, ATTN_COMBINE / sh.hg));
    if (nsplit < 2 || n_q * n_groups > KB_SCRATCH_COUNTERS) /* a counter per (query, group) */
        nsplit = 1;
    int64_t per = ((tiles + nsplit - 1) / nsplit) * sh.t;
    nsplit = CORE_MAX(1, (n_kv - k0 + per - 1) / per);
    if (nsplit > 65535)
        return kb_fail(b, GLESC_ERROR_LIMIT, "attention: %lld key splits", (long long)nsplit);
    kb_row_writes_begin(b);
    int sc = kb_scratch(b, nsplit == 1 ? 0
                                       : 4 * (uint64_t)KB_SCRATCH_COUNTERS +
                                             4 * (uint64_t)(n_q * n_groups) * (uint64_t)nsplit *
                                                 (uint64_t)sh.hg * (uint64_t)(dv + 2));
    kb_param_u(b, "D", (uint64_t)q->ne[0]);
    kb_param_u(b, "Dv", (uint64_t)dv);
    kb_param_u(b, "Tk", (uint64_t)n_kv);
    kb_param_u(b, "gqa", (uint64_t)(n_head / k->ne[2]));
    kb_param_u(b, "S", (uint64_t)per);
    kb_param_u(b, "nsplit", (uint64_t)nsplit);
    kb_param_f(b, "scale", a->fp[0]);
    if (softcap)
        kb_param_f(b, "softcap", a->fp[1]);
    if (causal || n_swa > 0)
        kb_param_i(b, "causal_off", n_kv - n_q);
    if (n_swa > 0) {
        kb_param_u(b, "k0", (uint64_t)k0);
        kb_param_i(b, "n_swa", n_swa);
    }
    kb_line(b, "uint qi = gl_WorkGroupID.x; // query");
    kb_line(b, "uint hg = gl_WorkGroupID.y; // head group");
    kb_line(b, "uint sp = gl_WorkGroupID.z; // split of the keys");
    kb_line(b, "uint lid = gl_LocalInvocationIndex;");
    kb_line(b, "uint h0 = hg * HG;");
    kb_line(b, "uint hk = h0 / gqa;");
    kb_row_writes_store(
        b, "((sp * gl_NumWorkGroups.y + hg) * gl_NumWorkGroups.x + qi) * WG_SIZE + lid",
        "WG_SIZE * gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z");
    char x[16];
    /* queries of the HG heads, scaled */
    kb_line(b, "for (uint e = lid; e < HG * D; e += WG_SIZE) {");
    kb_line(b, "uint hh = e / D;");
    kb_line(b, "uint d = e - hh * D;");
    kb_line(b, "uint h = h0 + hh;");
    const char *cq[4] = {"d", "qi", "h", "0u"};
    kb_line(b, "qs[e] = %s * scale;", kb_expr(b, q, cq, x));
    kb_line(b, "}");
    kb_line(b, "if (lid < HG) {");
    kb_line(b, "mh[lid] = NEG_INF;");
    kb_line(b, "lh[lid] = 0.0;");
    kb_line(b, "}");
    for (int hh = 0; hh < sh.hg; hh++)
        for (int e = 0; e < sh.dpt; e++)
            kb_line(b, "float o%d_%d = 0.0;", hh, e);
    kb_line(b, "uint kb0 = %ssp * S;", n_swa > 0 ? "k0 + " : "");
    kb_line(b, "int ke = min(int(kb0 + S), int(Tk));");
    if (causal)
        kb_line(b, "ke = min(ke, int(qi) + causal_off + 1); // keys after the query are masked");
    if (n_swa > 0)
        kb_line(b, "kb0 = uint(max(int(kb0), int(qi) + causal_off - n_swa + 1)); // the window");
    kb_line(b, "BARRIER();");
    kb_line(b, "for (uint kt0 = kb0; int(kt0) < ke; kt0 += T) {");
    kb_line(b, "uint tn = min(T, uint(ke) - kt0);");
    /* the key tile, coalesced: consecutive invocations, consecutive d */
    kb_line(b, "for (uint e = lid; e < tn * D; e += WG_SIZE) {");
    kb_line(b, "uint t = e / D;");
    kb_line(b, "uint d = e - t * D;");
    kb_line(b, "uint j = kt0 + t;");
    const char *ck[4] = {"d", "j", "hk", "0u"};
    kb_line(b, "ks[t * (D + 1u) + d] = %s;", kb_expr(b, k, ck, x));
    kb_line(b, "}");
    kb_line(b, "BARRIER();");
    /* scores of (head, key) pairs */
    kb_line(b, "for (uint e = lid; e < HG * T; e += WG_SIZE) {");
    kb_line(b, "uint hh = e / T;");
    kb_line(b, "uint t = e - hh * T;");
    kb_line(b, "float s = NEG_INF;");
    kb_line(b, "if (t < tn) {");
    kb_line(b, "float dot = 0.0;");
    kb_line(b, "for (uint d = 0u; d < D; d++) {");
    kb_line(b, "dot += qs[hh * D + d] * ks[t * (D + 1u) + d];");
    kb_line(b, "}");
    if (softcap)
        kb_line(b, "dot = softcap * op_tanh(dot / softcap);");
    if (mask) {
        kb_line(b, "uint j = kt0 + t;");
        kb_line(b, "uint h = h0 + hh;");
        const char *cm[4] = {"j", "qi", "h", "0u"};
        kb_line(b, "dot += %s;", kb_expr(b, mask, cm, x));
    }
    kb_line(b, "s = dot;");
    kb_line(b, "}");
    kb_line(b, "ps[e] = s;");
    kb_line(b, "}");
    kb_line(b, "BARRIER();");
    if (sh.v_shared) {
        /* the value tile into ks (the scores are done with the keys),
         * coalesced like the keys */
        kb_line(b, "for (uint e = lid; e < tn * Dv; e += WG_SIZE) {");
        kb_line(b, "uint t = e / Dv;");
        kb_line(b, "uint d = e - t * Dv;");
        kb_line(b, "uint j = kt0 + t;");
        const char *cv[4] = {"d", "j", "hk", "0u"};
        kb_line(b, "ks[t * (D + 1u) + d] = %s;", kb_expr(b, v, cv, x));
        kb_line(b, "}");
    }
    /* per head: the new running maximum and the factor for what came before */
    kb_line(b, "if (lid < HG) {");
    kb_line(b, "float mx = NEG_INF;");
    kb_line(b, "for (uint t = 0u; t < tn; t++) {");
    kb_line(b, "mx = max(mx, ps[lid * T + t]);");
    kb_line(b, "}");
    kb_line(b, "float mo = mh[lid];");
    kb_line(b, "float mn = max(mo, mx);");
    kb_line(b, "ch[lid] = mo == NEG_INF ? 0.0 : exp(mo - mn);");
    kb_line(b, "mh[lid] = mn;");
    kb_line(b, "}");
    kb_line(b, "BARRIER();");
    kb_line(b, "for (uint e = lid; e < HG * T; e += WG_SIZE) {");
    kb_line(b, "float s = ps[e];");
    kb_line(b, "ps[e] = s == NEG_INF ? 0.0 : exp(s - mh[e / T]);");
    kb_line(b, "}");
    kb_line(b, "BARRIER();");
    kb_line(b, "if (lid < HG) {");
    kb_line(b, "float sum = 0.0;");
    kb_line(b, "for (uint t = 0u; t < tn; t++) {");
    kb_line(b, "sum += ps[lid * T + t];");
    kb_line(b, "}");
    kb_line(b, "lh[lid] = lh[lid] * ch[lid] + sum;");
    kb_line(b, "}");
    /* the tile's weighted values: each value element loaded once for all
     * HG heads */
    for (int e = 0; e < sh.dpt; e++) {
        kb_line(b, "{");
        kb_line(b, "uint d = lid + %du * WG_SIZE;", e);
        for (int hh = 0; hh < sh.hg; hh++)
            kb_line(b, "o%d_%d *= ch[%du];", hh, e, hh);
        kb_line(b, "if (d < Dv) {");
        kb_line(b, "for (uint t = 0u; t < tn; t++) {");
        if (sh.v_shared) {
            snprintf(x, sizeof x, "vt");
            kb_line(b, "float vt = ks[t * (D + 1u) + d];");
        } else {
            kb_line(b, "uint j = kt0 + t;");
            const char *cv[4] = {"d", "j", "hk", "0u"};
            kb_expr(b, v, cv, x);
        }
        for (int hh = 0; hh < sh.hg; hh++)
            kb_line(b, "o%d_%d += ps[%du * T + t] * %s;", hh, e, hh, x);
        kb_line(b, "}");
        kb_line(b, "}");
        kb_line(b, "}");
    }
    kb_line(b, "BARRIER(); // ks, ps and ch are rewritten by the next tile");
    kb_line(b, "}");
    const char *co[4] = {"d", "h", "qi", "0u"};
    kb_line(b, "if (nsplit == 1u) {");
    for (int e = 0; e < sh.dpt; e++)
        for (int hh = 0; hh < sh.hg; hh++) {
            kb_line(b, "{");
            kb_line(b, "uint d = lid + %du * WG_SIZE;", e);
            kb_line(b, "uint h = h0 + %du;", hh);
            kb_line(b, "if (d < Dv) {");
            kb_line(b, "float l = lh[%du];", hh);
            kb_line(b, "float y = l > 0.0 ? o%d_%d / l : 0.0; // no visible key: zeros", hh, e);
            kb_store_out(b, co, "y", NULL);
            kb_line(b, "}");
            kb_line(b, "}");
        }
    kb_line(b, "} else {");
    /* partial results: per (query, group, split, head) m, l and Dv sums */
    kb_line(b, "uint gi = qi * gl_NumWorkGroups.y + hg;");
    kb_line(b, "uint pb0 = %du + gi * nsplit * HG * (Dv + 2u); // after the counters",
            KB_SCRATCH_COUNTERS);
    kb_line(b, "uint pb = pb0 + sp * HG * (Dv + 2u);");
    for (int e = 0; e < sh.dpt; e++) {
        kb_line(b, "if (lid + %du * WG_SIZE < Dv) {", e);
        for (int hh = 0; hh < sh.hg; hh++)
            kb_line(
                b,
                "t%d[pb + %du * (Dv + 2u) + 2u + lid + %du * WG_SIZE] = floatBitsToUint(o%d_%d);",
                sc, hh, e, hh, e);
        kb_line(b, "}");
    }
    kb_line(b, "if (lid < HG) {");
    kb_line(b, "t%d[pb + lid * (Dv + 2u)] = floatBitsToUint(mh[lid]);", sc);
    kb_line(b, "t%d[pb + lid * (Dv + 2u) + 1u] = floatBitsToUint(lh[lid]);", sc);
    kb_line(b, "}");
    kb_line(b, "memoryBarrierBuffer();");
    kb_line(b, "barrier();");
    kb_line(b, "if (lid == 0u) {");
    kb_line(b, "last_wg[0] = atomicAdd(t%d[gi], 1u) == nsplit - 1u ? 1u : 0u;", sc);
    kb_line(b, "}");
    kb_line(b, "BARRIER();");
    kb_line(b, "if (last_wg[0] == 1u) { // every split is in: combine them");
    kb_line(b, "memoryBarrierBuffer();");
    /* each split's m and l per head into shared memory (ks is free now) */
    kb_line(b, "for (uint e = lid; e < nsplit * HG; e += WG_SIZE) {");
    kb_line(b, "uint qb = pb0 + e * (Dv + 2u);");
    kb_line(b, "ks[e] = uintBitsToFloat(t%d[qb]);", sc);
    kb_line(b, "ks[%du + e] = uintBitsToFloat(t%d[qb + 1u]);", ATTN_COMBINE, sc);
    kb_line(b, "}");
    kb_line(b, "BARRIER();");
    /* per head: the overall max, each split's weight e^(m − M), 1 / L */
    kb_line(b, "if (lid < HG) {");
    kb_line(b, "float M = NEG_INF;");
    kb_line(b, "for (uint q = 0u; q < nsplit; q++) {");
    kb_line(b, "M = max(M, ks[q * HG + lid]);");
    kb_line(b, "}");
    kb_line(b, "float L = 0.0;");
    kb_line(b, "for (uint q = 0u; q < nsplit; q++) {");
    kb_line(b, "float m = ks[q * HG + lid];");
    kb_line(b, "float f = m == NEG_INF ? 0.0 : exp(m - M);");
    kb_line(b, "ks[%du + q * HG + lid] = f;", 2 * ATTN_COMBINE);
    kb_line(b, "L += ks[%du + q * HG + lid] * f;", ATTN_COMBINE);
    kb_line(b, "}");
    kb_line(b, "mh[lid] = L > 0.0 ? 1.0 / L : 0.0; // no visible key: zeros");
    kb_line(b, "}");
    kb_line(b, "BARRIER();");
    /* outputs (head, d) spread over all invocations: per split one load
     * for each output an invocation owns, all in flight together */
    int opt = sh.hg * sh.dpt; /* at least ceil(HG·Dv / WG) */
    for (int o = 0; o < opt; o++) {
        kb_line(b, "uint oo%d = lid + %du * WG_SIZE;", o, o);
        kb_line(b, "uint oh%d = min(oo%d / Dv, HG - 1u);", o, o);
        kb_line(b, "uint od%d = oo%d - (oo%d / Dv) * Dv;", o, o, o);
        kb_line(b, "float oc%d = 0.0;", o);
    }
    kb_line(b, "for (uint q = 0u; q < nsplit; q++) {");
    kb_line(b, "uint qb = pb0 + q * HG * (Dv + 2u) + 2u;");
    for (int o = 0; o < opt; o++)
        kb_line(b,
                "oc%d += ks[%du + q * HG + oh%d] * uintBitsToFloat(t%d[qb + oh%d * (Dv + 2u) + "
                "od%d]);",
                o, 2 * ATTN_COMBINE, o, sc, o, o);
    kb_line(b, "}");
    for (int o = 0; o < opt; o++) {
        kb_line(b, "if (oo%d < HG * Dv) {", o);
        kb_line(b, "uint d = od%d;", o);
        kb_line(b, "uint h = h0 + oh%d;", o);
        kb_line(b, "float y = oc%d * mh[oh%d];", o, o);
        kb_store_out(b, co, "y", NULL);
        kb_line(b, "}");
    }
    kb_line(b, "if (lid == 0u) {");
    kb_line(b, "t%d[gi] = 0u; // ready for the next dispatch", sc);
    kb_line(b, "}");
    kb_line(b, "}");
    kb_line(b, "}");
    kb_dispatch_groups(b, (uint32_t)n_q, (uint32_t)n_groups, (uint32_t)nsplit);
    return b->st;
}
