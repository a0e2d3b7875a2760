/*
 * attention.c — fused attention: softmax(q·kᵀ·scale + mask) · v in one
 * kernel, with grouped-query heads (head h reads kv head h / (n_head /
 * n_head_kv)), optionally a sliding window (a query sees its last n_swa
 * positions: its key loop starts there) and soft-capped scores
 * (cap·tanh(s/cap) before the mask), Gemma's local layers and Gemma 2's
 * attention. Two kernels: one query row at a time (decode: gen_decode,
 * here), and blocks of queries (prefill: gen_prefill, the flash-style
 * glsl/graph/attn_prefill.glsl with hooks generated here); which one is a
 * structure question (is n_q 1?), so part of the plan.
 *
 * Decode: one workgroup per (query, group of HG query heads sharing a kv
 * head, split of the keys). The HG heads of a workgroup read each key and value
 * once for all of them (GQA). Keys are walked in tiles of T: the tile is
 * staged in shared memory with consecutive invocations loading consecutive
 * elements of a key row (coalesced), scores for HG·T (head, key) pairs come
 * from shared memory, the running state per head (max m, sum l) is kept in
 * shared memory and the output accumulators are rescaled by exp(m_old -
 * m_new) before the tile's weighted values are added: the online softmax,
 * numerically stable for any logits, never storing a score row. Each
 * invocation accumulates output dimensions d = lid + e·WG for all HG heads
 * (value elements loaded once, coalesced across invocations). The head
 * sizes are compile-time constants. A variant (regs, off by default: see
 * decode_env) loads a tile's keys and values into registers by unrolled
 * loads with no branch between them (all of a tile's loads in flight),
 * the first tile's while q is staged and each next tile's while the
 * current one is finished (its softmax and weighted values); a key or
 * value this dispatch writes (a fused KV-cache write) is given its new
 * value from the registers' raw read when stored into shared memory.
 *
 * The keys are split over nsplit workgroups (flash-decoding: a decode step
 * has one query and few kv heads, so without the split a few workgroups
 * would walk the whole cache). With nsplit > 1 each workgroup leaves its
 * (m, l, unnormalized output) in the scratch buffer and counts itself in
 * with an atomic; the last workgroup of a (query, head group) combines them
 * (every split's m and l staged in shared memory, per head the overall max
 * and the splits' weights, then the weighted sums: ATTN_CU splits a round,
 * each invocation's loads of the round in flight together), stores the
 * result (its epilogue included) and puts the counter back to zero. nsplit
 * and the keys per split are uniforms chosen per compute from the sizes;
 * HG, T, the head sizes and the accumulators per invocation are the op's
 * variant (kernels_attention_variant), so part of the plan's structure.
 *
 * Prefill: a workgroup takes a block of queries of HG heads (R rows) against
 * key and value tiles in shared memory, register-blocked scores and outputs,
 * the online softmax per row, tiles above the causal diagonal never loaded
 * (see the GLSL file); its sizes come from the caps and the head sizes
 * (prefill_config), keys are split over workgroups as in decode when the
 * blocks alone would not fill the device.
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
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
#define ATTN_CU 4          /* splits a round of the combine reads */
_Static_assert(3 * ATTN_COMBINE <= ATTN_KS, "the combine's m, l and weights fit ks");

/* Prefill (gen_prefill): the largest configuration, shrunk by the caps */
#define ATTN_PF_WG 256         /* invocations per workgroup on GPUs */
#define ATTN_PF_WG_CPU 128     /* on llvmpipe */
#define ATTN_PF_HG 8           /* query heads per workgroup (of one kv head) */
#define ATTN_PF_R 64           /* rows (query, head) per workgroup */
#define ATTN_PF_BK 64          /* keys per tile */
#define ATTN_PF_BK_MIN 32      /* shorter tiles only where no block of rows fits with these */
#define ATTN_PF_SHARED 49152   /* bytes of shared memory at most */
#define ATTN_PF_TARGET_GPU 512 /* workgroups the key split aims at */
#define ATTN_PF_TARGET_CPU 8

typedef struct attn_shape {
    int hg;        /* query heads per workgroup (divides gqa) */
    int t;         /* keys per tile */
    int dpt;       /* output dimensions per invocation */
    bool v_shared; /* the value tile is staged in ks too (d_v <= d + 1) */
    bool regs;     /* tiles through registers (see decode_env) */
} attn_shape;

/* GLESC_ATTN_DECODE="target=256,tiles=1,t=16,regs=1": a tuning aid
 * overriding the workgroups a decode step's key split aims at, the key
 * tiles a split takes at least (uniforms), the most keys per tile and
 * whether tiles go through registers (the kernel's variant, so part of the
 * plan's structure). regs is off by default: on the H200 (TinyLlama, one
 * run, tg128 / at depth 2048, t/s) it gave Q4_0 569-576 / 463 against
 * 551 / 407 without, but Q8_0 424-428 / 359-363 against 451 / 351-355 and
 * F16 435-437 / 375 against 451-466 / 366, and on llvmpipe the demo decode
 * 37 against 45 t/s (a tile held in registers across barriers). The tests
 * turn it on. NULL: not asked. */
static void decode_env(int64_t *target, int64_t *min_tiles, int *t, int *regs)
{
    static const char *const keys[] = {"target", "tiles", "t", "regs"};
    int v[] = {0, 0, 0, -1};
    kernels_env_ints("GLESC_ATTN_DECODE", keys, v, 4, 0);
    if (v[3] >= 0 && regs)
        *regs = v[3] != 0;
    if (v[0] && target)
        *target = v[0];
    if (v[1] && min_tiles)
        *min_tiles = v[1];
    if (v[2] && t && v[2] <= ATTN_T_MAX)
        *t = v[2];
}

static attn_shape shape_of(const glesc_tensor *a, int wg)
{
    const glesc_tensor *q = a->src[0], *k = a->src[1], *v = a->src[2];
    int64_t d = q->ne[0], gqa = q->ne[2] / k->ne[2];
    attn_shape s = {1, ATTN_T_MAX, (int)((v->ne[0] + wg - 1) / wg), v->ne[0] <= d + 1, false};
    int regs = s.regs;
    decode_env(NULL, NULL, &s.t, &regs);
    s.regs = regs;
    for (int h = ATTN_HG_MAX; h >= 1; h--)
        if (gqa % h == 0 && h * d <= ATTN_QS) {
            s.hg = h;
            break;
        }
    while (s.t > 1 && s.t * (d + 1) > ATTN_KS)
        s.t /= 2;
    return s;
}

/* Query heads a prefill workgroup takes: the largest power of two that
 * divides the GQA ratio, at most ATTN_PF_HG. */
static int prefill_hg(const glesc_tensor *a)
{
    int64_t gqa = a->src[0]->ne[2] / a->src[1]->ne[2];
    int hg = 1;
    while (hg < ATTN_PF_HG && gqa % (2 * hg) == 0)
        hg *= 2;
    return hg;
}

uint32_t kernels_attention_variant(const glesc_tensor *t)
{
    if (t->src[0]->ne[1] > 1) /* prefill: its config follows from these and the caps */
        return 1u << 31 | (uint32_t)prefill_hg(t) | (uint32_t)t->src[0]->ne[0] << 4 |
               (uint32_t)t->src[2]->ne[0] << 14;
    /* heads, tile, head sizes (compile-time: the tile loads unrolled); the
     * accumulators per invocation follow from the head sizes and the
     * workgroup size, fixed per context */
    attn_shape s = shape_of(t, ATTN_WG_CPU);
    _Static_assert(ATTN_HG_MAX <= 8 && ATTN_T_MAX <= 64 && ATTN_MAX_D <= 512,
                   "the decode variant's fields fit their bits");
    return (uint32_t)(s.hg - 1) | (uint32_t)(s.t - 1) << 3 | (uint32_t)s.v_shared << 9 |
           (uint32_t)(t->src[0]->ne[0] - 1) << 10 | (uint32_t)(t->src[2]->ne[0] - 1) << 19 |
           (uint32_t)s.regs << 28;
}

/* The decode kernel's loads of one key or value element (src: k or v)
 * as functions: attn_kmem / attn_vmem read the memory (a KV cache's row
 * this dispatch writes is read as it was: attn_knew / attn_vnew, emitted
 * where the dispatch writes rows, then give such an element its new value,
 * computed from the write's source, and pass any other through). */
static void decode_load_fn(kb *b, const glesc_tensor *src, const char *name, bool fresh)
{
    char sig[96], x[16];
    snprintf(sig, sizeof sig, "float %s(uint d, uint j, uint hk%s)", name,
             fresh ? ", float mem" : "");
    if (b->k)
        emit_kernel_function_begin(b->k, sig);
    b->rw_read_memory = !fresh;
    b->rw_else = fresh ? "mem" : NULL;
    const char *c[4] = {"d", "j", "hk", "0u"};
    kb_expr(b, src, c, x);
    b->rw_read_memory = false;
    b->rw_else = NULL;
    kb_line(b, "return %s;", x);
    if (b->k)
        emit_kernel_function_end(b->k);
}

/* Loads a tile of keys (and values, nv > 0) starting at key kt0 into the
 * registers kr0.. (vr0..): element e = lid + i·WG_SIZE of the tile, so
 * consecutive invocations read consecutive elements of a row (coalesced),
 * and the loads are unrolled with no branch between them: all in flight
 * together. Keys past the split's end read its last key (never stored). */
static void tile_loads(kb *b, const char *kt0, int nk, int nv)
{
    kb_line(b, "{");
    kb_line(b, "uint jm = uint(max(ke - 1, 0));");
    for (int i = 0; i < nk; i++)
        kb_line(b,
                "kr%d = attn_kmem((lid + %du * WG_SIZE) %% D, min(%s + (lid + %du * WG_SIZE) / D, "
                "jm), hk);",
                i, i, kt0, i);
    for (int i = 0; i < nv; i++)
        kb_line(
            b,
            "vr%d = attn_vmem((lid + %du * WG_SIZE) %% Dv, min(%s + (lid + %du * WG_SIZE) / Dv, "
            "jm), hk);",
            i, i, kt0, i);
    kb_line(b, "}");
}

/* Without registers (regs off): the tile of src loaded straight into ks by
 * a loop, coalesced (consecutive invocations, consecutive elements). */
static void tile_loop(kb *b, const glesc_tensor *src, const char *w)
{
    char x[16];
    kb_line(b, "for (uint e = lid; e < tn * %s; e += WG_SIZE) {", w);
    kb_line(b, "uint t = e / %s;", w);
    kb_line(b, "uint d = e - t * %s;", w);
    kb_line(b, "uint j = kt0 + t;");
    const char *c[4] = {"d", "j", "hk", "0u"};
    kb_line(b, "ks[t * (D + 1u) + d] = %s;", kb_expr(b, src, c, x));
    kb_line(b, "}");
}

/* Stores the registers NAME0.. of a tile of tn rows of width W into ks
 * (rows of D + 1), new rows of a fused KV-cache write given their values
 * first (fresh: attn_knew or attn_vnew, NULL where there are none). */
static void tile_store(kb *b, const char *name, const char *w, int n, const char *fresh)
{
    for (int i = 0; i < n; i++) {
        kb_line(b, "{");
        kb_line(b, "uint e = lid + %du * WG_SIZE;", i);
        kb_line(b, "uint t = e / %s;", w);
        kb_line(b, "if (t < tn) {");
        kb_line(b, "uint d = e - t * %s;", w);
        if (fresh)
            kb_line(b, "ks[t * (D + 1u) + d] = %s(d, kt0 + t, hk, %s%d);", fresh, name, i);
        else
            kb_line(b, "ks[t * (D + 1u) + d] = %s%d;", name, i);
        kb_line(b, "}");
        kb_line(b, "}");
    }
}

static glesc_status gen_decode(kb *b)
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
        emit_kernel_define(b->k, "D", "%du", (int)q->ne[0]);
        emit_kernel_define(b->k, "Dv", "%du", (int)dv);
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
    int64_t min_tiles = ATTN_SPLIT_TILES;
    decode_env(&target, &min_tiles, NULL, NULL);
    int64_t tiles = (n_kv - k0 + sh.t - 1) / sh.t;
    int64_t nsplit = (target + n_q * n_groups - 1) / (n_q * n_groups);
    nsplit = CORE_MIN(nsplit, CORE_MIN(tiles / min_tiles, ATTN_COMBINE / sh.hg));
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
    kb_line(b, "uint kb0 = %ssp * S;", n_swa > 0 ? "k0 + " : "");
    kb_line(b, "int ke = min(int(kb0 + S), int(Tk));");
    if (causal)
        kb_line(b, "ke = min(ke, int(qi) + causal_off + 1); // keys after the query are masked");
    if (n_swa > 0)
        kb_line(b, "kb0 = uint(max(int(kb0), int(qi) + causal_off - n_swa + 1)); // the window");
    /* the first tile's keys and values in flight while q is staged */
    int kpl = sh.regs ? (sh.t * (int)q->ne[0] + wg - 1) / wg : 0;
    int vpl = sh.regs && sh.v_shared ? (sh.t * (int)dv + wg - 1) / wg : 0;
    for (int i = 0; i < kpl; i++)
        kb_line(b, "float kr%d;", i);
    for (int i = 0; i < vpl; i++)
        kb_line(b, "float vr%d;", i);
    if (sh.regs) {
        decode_load_fn(b, k, "attn_kmem", false);
        if (vpl)
            decode_load_fn(b, v, "attn_vmem", false);
        if (b->n_rw) {
            decode_load_fn(b, k, "attn_knew", true);
            if (vpl)
                decode_load_fn(b, v, "attn_vnew", true);
        }
        tile_loads(b, "kb0", kpl, vpl);
    }
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
    kb_line(b, "BARRIER();");
    kb_line(b, "for (uint kt0 = kb0; int(kt0) < ke; kt0 += T) {");
    kb_line(b, "uint tn = min(T, uint(ke) - kt0);");
    /* the key tile from the registers, coalesced: consecutive invocations,
     * consecutive d */
    if (sh.regs)
        tile_store(b, "kr", "D", kpl, b->n_rw ? "attn_knew" : NULL);
    else
        tile_loop(b, k, "D");
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
    /* the value tile into ks (the scores are done with the keys), then the
     * next tile's loads in flight while this one is finished */
    if (vpl)
        tile_store(b, "vr", "Dv", vpl, b->n_rw ? "attn_vnew" : NULL);
    else if (sh.v_shared)
        tile_loop(b, v, "Dv");
    if (sh.regs) {
        kb_line(b, "if (int(kt0 + T) < ke) {");
        tile_loads(b, "kt0 + T", kpl, vpl);
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
    /* ATTN_CU splits a round, unrolled: their loads in flight together
     * (past the last split: its loads again, weight 0) */
    kb_line(b, "for (uint cq0 = 0u; cq0 < nsplit; cq0 += %du) {", ATTN_CU);
    for (int u = 0; u < ATTN_CU; u++) {
        kb_line(b, "uint cqs%d = min(cq0 + %du, nsplit - 1u);", u, u);
        kb_line(b, "uint cqb%d = pb0 + cqs%d * HG * (Dv + 2u) + 2u;", u, u);
    }
    for (int u = 0; u < ATTN_CU; u++)
        for (int o = 0; o < opt; o++)
            kb_line(b, "float cx%d_%d = uintBitsToFloat(t%d[cqb%d + oh%d * (Dv + 2u) + od%d]);", u,
                    o, sc, u, o, o);
    for (int u = 0; u < ATTN_CU; u++)
        for (int o = 0; o < opt; o++)
            kb_line(b,
                    "oc%d += (cq0 + %du < nsplit ? ks[%du + cqs%d * HG + oh%d] : 0.0) * cx%d_%d;",
                    o, u, 2 * ATTN_COMBINE, u, o, u, o);
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

/* ---- Prefill: glsl/graph/attn_prefill.glsl ---- */

/* The prefill kernel's shape (see the GLSL file for the names). */
typedef struct pf_cfg {
    int wg, hg, bq, r, bk;
    int skg, tk, srg, tr;   /* scores: invocations across keys x rows, each TK x TR */
    int odg, td4, org, tro; /* outputs: across value vec4s x rows, each TD4 x TRO */
    int d4, dv4, kp, kvp;   /* vec4 per q/k and v row, key row stride, kvs row */
    int target;             /* workgroups the key split aims at */
    int bytes;              /* shared memory */
} pf_cfg;

static int pow2_floor(int v)
{
    int p = 1;
    while (p * 2 <= v)
        p *= 2;
    return p;
}

static int pow2_ceil(int v)
{
    int p = 1;
    while (p < v)
        p *= 2;
    return p;
}

/* Shared memory of R rows and tiles of BK keys: qs, kvs, ps, ms/ls/al,
 * at_last (attn_prefill.glsl's arrays). */
static int pf_bytes(int r, int bk, int d4, int kvp)
{
    return 16 * r * d4 + 16 * bk * kvp + 4 * r * (bk + 1) + 12 * r + 4;
}

/* GLESC_ATTN="wg=128,r=64,bk=32,skg=8,target=512": a tuning aid overriding the
 * fields it names (read on every generation, so a process sees one value:
 * plans and programs stay consistent). */
static void pf_env(pf_cfg *c)
{
    static const char *const keys[] = {"wg", "r", "bk", "skg", "target"};
    int v[] = {c->wg, c->r, c->bk, c->skg, c->target};
    kernels_env_ints("GLESC_ATTN", keys, v, 5, INT_MIN);
    c->wg = v[0];
    c->r = v[1];
    c->bk = v[2];
    c->skg = v[3];
    c->target = v[4];
}

/* Depends on the caps, the head sizes and the GQA ratio's power of two
 * (the op's variant); r = 0 where not even one row fits. */
static pf_cfg prefill_config(const glesc_context *ctx, const glesc_tensor *a)
{
    const glesc_caps *caps = &ctx->caps;
    pf_cfg c = {0};
    c.d4 = (int)(a->src[0]->ne[0] + 3) / 4;
    c.dv4 = (int)(a->src[2]->ne[0] + 3) / 4;
    c.kp = c.d4 + 1;
    c.kvp = CORE_MAX(c.kp, c.dv4);
    c.wg = ctx->cpu_device ? ATTN_PF_WG_CPU : ATTN_PF_WG;
    c.r = ATTN_PF_R;
    c.skg = 8;
    c.bk = ATTN_PF_BK;
    c.target = ctx->cpu_device ? ATTN_PF_TARGET_CPU : ATTN_PF_TARGET_GPU;
    pf_env(&c);
    c.wg = pow2_floor(CORE_MAX(
        1, CORE_MIN(c.wg, CORE_MIN(caps->max_compute_invocations, caps->max_workgroup_size[0]))));
    /* at most an invocation per row (the softmax's) */
    c.r = pow2_floor(CORE_MAX(1, CORE_MIN(c.r, CORE_MIN(ATTN_PF_R, c.wg))));
    c.bk = pow2_floor(CORE_MAX(1, CORE_MIN(c.bk, ATTN_PF_BK)));
    c.target = CORE_MAX(1, c.target);
    /* the most rows with tiles of ATTN_PF_BK_MIN keys or more that fit,
     * else with shorter tiles */
    int limit = CORE_MIN(caps->max_compute_shared_memory, ATTN_PF_SHARED), r = 0, bk = 0;
    for (int pass = 0; pass < 2 && !r; pass++)
        for (int ri = c.r; ri >= 1 && !r; ri /= 2)
            for (int bi = c.bk; bi >= (pass ? 1 : CORE_MIN(c.bk, ATTN_PF_BK_MIN)) && !r; bi /= 2)
                if (pf_bytes(ri, bi, c.d4, c.kvp) <= limit) {
                    r = ri;
                    bk = bi;
                }
    c.r = r;
    c.bk = bk;
    if (!r)
        return c;
    c.bytes = pf_bytes(r, bk, c.d4, c.kvp);
    c.wg = CORE_MIN(c.wg, r * bk); /* every invocation has a score */
    c.hg = CORE_MIN(prefill_hg(a), r);
    c.bq = r / c.hg;
    /* eight invocations (a quarter warp's vec4 loads) across keys where the
     * tile has them: each reads its own key row, the row's q is broadcast */
    c.skg = CORE_MIN(CORE_MAX(CORE_MIN(bk, pow2_floor(CORE_MAX(1, c.skg))), c.wg / r), c.wg);
    c.tk = bk / c.skg;
    c.srg = c.wg / c.skg;
    c.tr = r / c.srg;
    c.odg = CORE_MIN(CORE_MAX(CORE_MIN(8, pow2_ceil(c.dv4)), c.wg / r), c.wg);
    c.td4 = (c.dv4 + c.odg - 1) / c.odg;
    c.org = c.wg / c.odg;
    c.tro = r / c.org;
    return c;
}

static glesc_status gen_prefill(kb *b)
{
    const glesc_tensor *a = b->gk->anchor;
    const glesc_tensor *q = a->src[0], *k = a->src[1], *v = a->src[2], *mask = a->src[3];
    bool causal = a->ip[0] != 0, softcap = a->ip[2] != 0;
    int n_swa = a->ip[1];
    pf_cfg c = prefill_config(b->ctx, a);
    if (!c.r)
        return kb_fail(b, GLESC_ERROR_LIMIT,
                       "attention: head sizes %lld/%lld need %d bytes of shared memory for one "
                       "row, the device has %d",
                       (long long)q->ne[0], (long long)v->ne[0], pf_bytes(1, 1, c.d4, c.kvp),
                       b->ctx->caps.max_compute_shared_memory);
    int64_t n_q = q->ne[1], n_head = q->ne[2], n_kv = k->ne[1], dv = v->ne[0];
    int64_t nqb = (n_q + c.bq - 1) / c.bq, n_groups = n_head / c.hg, blocks = nqb * n_groups;
    if (b->k) {
        emit_kernel_local_size(b->k, c.wg, 1, 1);
        emit_kernel_shared(b->k, "vec4", "qs", c.r * c.d4);
        emit_kernel_shared(b->k, "vec4", "kvs", c.bk * c.kvp);
        emit_kernel_shared(b->k, "float", "ps", c.r * (c.bk + 1));
        emit_kernel_shared(b->k, "float", "ms", c.r);
        emit_kernel_shared(b->k, "float", "ls", c.r);
        emit_kernel_shared(b->k, "float", "al", c.r);
        emit_kernel_shared(b->k, "uint", "at_last", 1);
        emit_kernel_snippet(b->k, "graph/reduce");
        emit_kernel_snippet(b->k, "graph/eltwise");
        static const char *const names[] = {"HG", "BQ",  "R",   "BK",  "D",  "DV",
                                            "D4", "DV4", "KP",  "SKG", "TK", "SRG",
                                            "TR", "ODG", "TD4", "ORG", "TRO"};
        const int vals[] = {c.hg,  c.bq, c.r,   c.bk, (int)q->ne[0], (int)dv, c.d4,  c.dv4, c.kp,
                            c.skg, c.tk, c.srg, c.tr, c.odg,         c.td4,   c.org, c.tro};
        _Static_assert(sizeof vals / sizeof vals[0] == sizeof names / sizeof names[0],
                       "a value per define");
        for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
            emit_kernel_define(b->k, names[i], "%du", vals[i]);
        emit_kernel_define(b->k, "BKP", "%du", c.bk + 1);
        emit_kernel_define(b->k, "ATTN_COUNTERS", "%du", KB_SCRATCH_COUNTERS);
        if (causal)
            emit_kernel_define(b->k, "ATTN_CAUSAL", "1");
        if (mask)
            emit_kernel_define(b->k, "ATTN_MASK", "1");
        if (n_swa > 0)
            emit_kernel_define(b->k, "ATTN_SWA", "1");
        if (softcap)
            emit_kernel_define(b->k, "ATTN_SOFTCAP", "1");
        emit_kernel_comment(b->k,
                            "attention, prefill (glsl/graph/attn_prefill.glsl): %d queries x %d "
                            "heads a workgroup of %d, key tiles of %d, %dx%d scores and %dx%d "
                            "output vec4 an invocation%s%s%s%s",
                            c.bq, c.hg, c.wg, c.bk, c.tr, c.tk, c.tro, c.td4,
                            softcap ? ", soft-capped scores" : "", mask ? ", additive mask" : "",
                            causal ? ", causal" : "", n_swa > 0 ? ", sliding window" : "");
    }
    /* keys per split: whole tiles, enough workgroups to fill the device; a
     * counter per block, the combine's weights fit a score row. A sliding
     * window hides the keys before the first query's window (a block's
     * range: its queries' windows together) */
    int64_t k0 = n_swa > 0 ? CORE_MAX(0, n_kv - n_q + 1 - (int64_t)n_swa) : 0;
    int64_t range = n_kv - k0;
    if (n_swa > 0 && causal)
        range = CORE_MIN(range, c.bq - 1 + (int64_t)n_swa);
    int64_t tiles = CORE_MAX(1, (range + c.bk - 1) / c.bk);
    int64_t nsplit = (c.target + blocks - 1) / blocks;
    nsplit = CORE_MIN(nsplit, CORE_MIN(tiles, (int64_t)c.bk + 1));
    if (nsplit < 2 || blocks > KB_SCRATCH_COUNTERS)
        nsplit = 1;
    int64_t per = ((tiles + nsplit - 1) / nsplit) * c.bk;
    nsplit = CORE_MAX(1, (range + per - 1) / per);
    if (nqb > 65535 || n_groups > 65535)
        return kb_fail(b, GLESC_ERROR_LIMIT, "attention: %lld query blocks of %lld head groups",
                       (long long)nqb, (long long)n_groups);
    /* Fused KV-cache writes (set_rows members) go first, in a dispatch of
     * their own; the attention's dispatch then reads the cache (the
     * executor's barrier between them): computing new keys from the source
     * (rope included) wherever they are read, as decode does, would repeat
     * it for every block of queries. */
    int phase = kb_param_u(b, "at_phase", 1);
    kb_line(b, "uint lid = gl_LocalInvocationIndex;");
    kb_line(b, "if (at_phase == 0u) { // the KV-cache writes");
    kb_row_writes_begin(b);
    kb_row_writes_store(
        b,
        "((gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + "
        "gl_WorkGroupID.x) * WG_SIZE + lid",
        "WG_SIZE * gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z");
    kb_line(b, "return;");
    kb_line(b, "}");
    b->rw_read_memory = true;
    int sc = kb_scratch(b, nsplit == 1 ? 0
                                       : 4 * (uint64_t)KB_SCRATCH_COUNTERS +
                                             4 * (uint64_t)blocks * (uint64_t)nsplit *
                                                 (uint64_t)c.r * (uint64_t)(dv + 2));
    if (b->k)
        emit_kernel_define(b->k, "ATTN_SCR", "t%d", sc);
    kb_param_u(b, "at_nq", (uint64_t)n_q);
    kb_param_u(b, "at_nkv", (uint64_t)n_kv);
    kb_param_u(b, "at_gqa", (uint64_t)(n_head / k->ne[2]));
    kb_param_i(b, "at_coff", n_kv - n_q);
    kb_param_u(b, "at_S", (uint64_t)per);
    kb_param_u(b, "at_nsplit", (uint64_t)nsplit);
    kb_param_f(b, "at_scale", a->fp[0]);
    if (n_swa > 0)
        kb_param_i(b, "at_swa", n_swa);
    if (softcap)
        kb_param_f(b, "at_cap", a->fp[1]);
    if (b->k)
        emit_kernel_snippet(b->k, "graph/attn_prefill");
    /* the hooks: q (scaled) with its prologue, keys, values, the mask, the
     * store with its epilogue */
    char x[16];
    static const struct {
        const char *sig;
        int src;
        const char *c[4];
    } loads[] = {
        {"float attn_q(uint d, uint qi, uint h)", 0, {"d", "qi", "h", "0u"}},
        {"float attn_k(uint d, uint j, uint hk)", 1, {"d", "j", "hk", "0u"}},
        {"float attn_v(uint d, uint j, uint hk)", 2, {"d", "j", "hk", "0u"}},
        {"float attn_mask(uint j, uint qi, uint h)", 3, {"j", "qi", "h", "0u"}},
    };
    for (size_t i = 0; i < sizeof loads / sizeof loads[0]; i++) {
        if (!a->src[loads[i].src])
            continue;
        if (b->k)
            emit_kernel_function_begin(b->k, loads[i].sig);
        kb_expr(b, a->src[loads[i].src], loads[i].c, x);
        kb_line(b, "return %s%s;", x, loads[i].src == 0 ? " * at_scale" : "");
        if (b->k)
            emit_kernel_function_end(b->k);
    }
    if (b->k)
        emit_kernel_function_begin(b->k, "void attn_store(uint d, uint h, uint qi, float y)");
    const char *co[4] = {"d", "h", "qi", "0u"};
    kb_store_out(b, co, "y", NULL);
    if (b->k)
        emit_kernel_function_end(b->k);
    kb_line(b, "attn_prefill();");
    if (b->n_rw) {
        int64_t rows = 0; /* elements of the largest source */
        for (int w = 0; w < b->n_rw; w++)
            rows = CORE_MAX(rows, b->rw[w].w->src[1]->ne[0] * b->rw[w].w->src[1]->ne[1]);
        kb_param_set_u(b, phase, 0);
        kb_dispatch_groups(b, (uint32_t)CORE_MIN((rows + c.wg - 1) / c.wg, 65535), 1, 1);
        kb_param_set_u(b, phase, 1);
    }
    kb_dispatch_groups(b, (uint32_t)nqb, (uint32_t)n_groups, (uint32_t)nsplit);
    return b->st;
}

glesc_status kernels_gen_attention(kb *b)
{
    return b->gk->anchor->src[0]->ne[1] > 1 ? gen_prefill(b) : gen_decode(b);
}
