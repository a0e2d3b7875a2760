/*
 * attention.c — fused attention: softmax(q·kᵀ·scale + mask) · v in one
 * kernel, with grouped-query heads (head h reads kv head h / (n_head /
 * n_head_kv)), optionally a sliding window (a query sees its last n_swa
 * positions: its key loop starts there) and soft-capped scores
 * (cap·tanh(s/cap) before the mask), Gemma's local layers and Gemma 2's
 * attention. Two kernels, both real GLSL files with their graph-specific
 * parts generated here as hooks (q with its prologue, keys, values, the
 * mask, the store with its epilogue: gen_hooks): one query row at a time
 * (decode: glsl/graph/attn_decode.glsl, gen_decode) and blocks of queries
 * (prefill: glsl/graph/attn_prefill.glsl, gen_prefill); which one is a
 * structure question (is n_q 1?), so part of the plan. Each file's header
 * lists the defines, uniforms, shared arrays and hooks declared here.
 *
 * Decode: one workgroup per (query, group of HG query heads sharing a kv
 * head, split of the keys). The HG heads of a workgroup read each key and
 * value once for all of them (GQA). Keys are walked in tiles of T staged in
 * shared memory (coalesced), with the online softmax per head; each
 * invocation accumulates output dimensions d = lid + e·WG for all HG heads
 * in registers (the file's loops over them written out by the
 * preprocessor). HG, T, the head sizes and the accumulators per invocation
 * are compile-time constants. A variant (regs, off by default: see
 * decode_env) loads a tile's keys and values into registers by unrolled
 * loads with no branch between them (attn_kmem, attn_vmem: all of a
 * tile's loads in flight), the first tile's while q is staged and each
 * next tile's while the current one is finished; a key or value this
 * dispatch writes (a fused KV-cache write) is given its new value from the
 * registers' raw read when stored into shared memory (attn_knew,
 * attn_vnew).
 *
 * The keys are split over nsplit workgroups (flash-decoding: a decode step
 * has one query and few kv heads, so without the split a few workgroups
 * would walk the whole cache). With nsplit > 1 each workgroup leaves its
 * (m, l, unnormalized output) in the scratch buffer and counts itself in
 * with an atomic; the last workgroup of a (query, head group) combines them
 * (ATTN_CU splits a round, each invocation's loads of the round in flight
 * together), stores the result (its epilogue included) and puts the
 * counter back to zero. nsplit and the keys per split are uniforms chosen
 * per compute from the sizes; HG, T, the head sizes and the register
 * choice are the op's variant (kernels_attention_variant), so part of the
 * plan's structure.
 *
 * Prefill: a workgroup takes a block of queries of HG heads (R rows) against
 * key and value tiles in shared memory, register-blocked scores and outputs,
 * the online softmax per row, tiles above the causal diagonal never loaded
 * (see the GLSL file); its sizes come from the caps and the head sizes
 * (prefill_config), keys are split over workgroups as in decode when the
 * blocks alone would not fill the device.
 *
 * q is staged once per workgroup through its hook (kb_expr), so an
 * elementwise prologue on it (rope, through the permute that makes q's
 * layout) costs nothing extra. Keys and values are read through hooks too,
 * so a fused KV-cache write (set_rows of new rows into the cache this
 * kernel reads, fuse.c) is computed here: in decode the new rows are
 * written by a loop over all invocations of the dispatch, and wherever the
 * kernel reads a new row it computes it from the source (rope(k) included)
 * instead of reading the cache (kb_row_writes_begin), so no workgroup reads
 * what another writes; prefill writes them in a dispatch of its own first.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

/* Decode workgroups have at least this many invocations (the device
 * class's, attn.wg, devclass.c): attn_decode.glsl's loops are written out
 * for the registers that leaves an invocation. */
#define ATTN_WG_MIN 64
#define ATTN_MAX_D 512
#define ATTN_QS 1024 /* floats of staged queries: HG·D */
#define ATTN_KS 2112 /* floats of a key tile: T·(D + 1) (padded rows: no bank conflicts) */
#define ATTN_HG_MAX 8
#define ATTN_T_MAX 64
#define ATTN_SPLIT_TILES 1 /* key tiles per split at least */
#define ATTN_COMBINE 512   /* (split, head) pairs the combine stages in ks */
#define ATTN_CU 4          /* splits a round of the combine reads at most */
_Static_assert(3 * ATTN_COMBINE <= ATTN_KS, "the combine's m, l and weights fit ks");
/* floats of the decode's shared arrays but the accumulators (os) */
#define ATTN_SHARED (ATTN_QS + ATTN_KS + ATTN_HG_MAX * ATTN_T_MAX + 3 * ATTN_HG_MAX + 1)

/* Prefill (gen_prefill): the largest configuration, shrunk by the caps */
#define ATTN_PF_HG 8         /* query heads per workgroup (of one kv head) */
#define ATTN_PF_R 64         /* rows (query, head) per workgroup */
#define ATTN_PF_BK 64        /* keys per tile */
#define ATTN_PF_BK_MIN 32    /* shorter tiles only where no block of rows fits with these */
#define ATTN_PF_SHARED 49152 /* bytes of shared memory at most */

typedef struct attn_shape {
    int hg;        /* query heads per workgroup (divides gqa) */
    int t;         /* keys per tile */
    int dpt;       /* output dimensions per invocation */
    bool v_shared; /* the value tile is staged in ks too (d_v <= d + 1) */
    bool regs;     /* tiles through registers (see decode_env) */
} attn_shape;

/* GLESC_ATTN_DECODE="target=256,tiles=1,t=16,regs=1,from=1024": a tuning aid
 * overriding the workgroups a decode step's key split aims at, the key
 * tiles a split takes at least (uniforms), the most keys per tile and
 * whether tiles go through registers at every depth (regs=1) or never
 * (regs=0) (the kernel's variant, so part of the plan's structure), else
 * from `from` keys on (by default the class's decode_regs_from): on the H200
 * the registers' tiles make a step at depth 2048 6-16% faster and a short
 * cache's Q8_0 step 5% slower; on llvmpipe they slow the decode (a tile
 * held in registers across barriers; figures in docs/performance.md,
 * *Decode at depth*). The tests turn them on. NULL: not asked. */
static void decode_env(int64_t *target, int64_t *min_tiles, int *t, int *regs, int *from)
{
    static const char *const keys[] = {"target", "tiles", "t", "regs", "from"};
    int v[] = {0, 0, 0, -1, 0};
    kernels_env_ints("GLESC_ATTN_DECODE", keys, v, 5, 0);
    if (v[3] >= 0 && regs)
        *regs = v[3] != 0;
    if (v[4] > 0 && from)
        *from = v[4];
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
    int from = kernels_class_of(a->ctx)->attn.decode_regs_from, regs = -1;
    decode_env(NULL, NULL, &s.t, &regs, &from);
    s.regs = regs >= 0 ? regs != 0 : from > 0 && k->ne[1] >= from;
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

/* Does attention a take the prefill kernel? More queries than the device
 * class's decode_max_q (1, or a few where the decode's program serves short
 * prompts too: one program less to compile), or a batch's kernels asked
 * for (graph_batch_kernels). */
static bool is_prefill(const glesc_tensor *a)
{
    return a->batch_kernel ||
           a->src[0]->ne[1] > CORE_MAX(1, kernels_class_of(a->ctx)->attn.decode_max_q);
}

int64_t kernels_attention_regs_from(glesc_context *ctx)
{
    int from = kernels_class_of(ctx)->attn.decode_regs_from, regs = -1;
    decode_env(NULL, NULL, NULL, &regs, &from);
    return regs < 0 ? from : 0;
}

uint32_t kernels_attention_variant(const glesc_tensor *t)
{
    if (is_prefill(t)) /* prefill: its config follows from these and the caps */
        return 1u << 31 | (uint32_t)prefill_hg(t) | (uint32_t)t->src[0]->ne[0] << 4 |
               (uint32_t)t->src[2]->ne[0] << 14;
    /* heads, tile, head sizes (compile-time: the tile loads unrolled); the
     * accumulators per invocation follow from the head sizes and the
     * workgroup size, fixed per context */
    attn_shape s = shape_of(t, ATTN_WG_MIN);
    _Static_assert(ATTN_HG_MAX <= 8 && ATTN_T_MAX <= 64 && ATTN_MAX_D <= 512,
                   "the decode variant's fields fit their bits");
    return (uint32_t)(s.hg - 1) | (uint32_t)(s.t - 1) << 3 | (uint32_t)s.v_shared << 9 |
           (uint32_t)(t->src[0]->ne[0] - 1) << 10 | (uint32_t)(t->src[2]->ne[0] - 1) << 19 |
           (uint32_t)s.regs << 28;
}

/* ---- The hooks of both GLSL files ---- */

/* A load hook of the GLSL file: the function sig returns src at the
 * coordinates c (its arguments), times the uniform at_scale where scaled.
 * rw_else: elements outside the rows a fused KV-cache write writes take
 * this value instead of the memory's (b->rw_else); whether such rows are
 * computed from the write's source or read as they are is
 * b->rw_read_memory's. */
static void load_hook(kb *b, const char *sig, const glesc_tensor *src, const char *const c[4],
                      bool scaled, const char *rw_else)
{
    char x[16];
    if (b->k)
        emit_kernel_function_begin(b->k, sig);
    b->rw_else = rw_else;
    kb_expr(b, src, c, x);
    b->rw_else = NULL;
    kb_line(b, "return %s%s;", x, scaled ? " * at_scale" : "");
    if (b->k)
        emit_kernel_function_end(b->k);
}

static const char *const hook_ck[4] = {"d", "j", "hk", "0u"}; /* a key's or value's element */

/* The hooks both files declare: attn_q (q with its prologue, scaled),
 * attn_k and attn_v (where asked), attn_mask (where the op has one) and
 * attn_store (the store with its epilogue). */
static void gen_hooks(kb *b, bool with_k, bool with_v)
{
    const glesc_tensor *a = b->gk->anchor;
    static const char *const cq[4] = {"d", "qi", "h", "0u"}, *const cm[4] = {"j", "qi", "h", "0u"};
    load_hook(b, "float attn_q(uint d, uint qi, uint h)", a->src[0], cq, true, NULL);
    if (with_k)
        load_hook(b, "float attn_k(uint d, uint j, uint hk)", a->src[1], hook_ck, false, NULL);
    if (with_v)
        load_hook(b, "float attn_v(uint d, uint j, uint hk)", a->src[2], hook_ck, false, NULL);
    if (a->src[3])
        load_hook(b, "float attn_mask(uint j, uint qi, uint h)", a->src[3], cm, false, NULL);
    if (b->k)
        emit_kernel_function_begin(b->k, "void attn_store(uint d, uint h, uint qi, float y)");
    const char *co[4] = {"d", "h", "qi", "0u"};
    kb_store_out(b, co, "y", NULL);
    if (b->k)
        emit_kernel_function_end(b->k);
}

/* ---- Decode: glsl/graph/attn_decode.glsl ---- */

/* The file's register loops are written out for these counts at most */
_Static_assert(ATTN_HG_MAX <= 8 && (ATTN_MAX_D + ATTN_WG_MIN - 1) / ATTN_WG_MIN <= 8 &&
                   (ATTN_KS + ATTN_WG_MIN - 1) / ATTN_WG_MIN <= 64 && ATTN_CU <= 4,
               "attn_decode.glsl's AD_EACH_* cover the heads, dimensions and tile registers");

/* The defines both attention files take from the op: ATTN_CAUSAL,
 * ATTN_MASK, ATTN_SWA (a sliding window), ATTN_SOFTCAP. */
static void mask_defines(emit_kernel *k, const glesc_tensor *a)
{
    if (a->ip[0] != 0)
        emit_kernel_define(k, "ATTN_CAUSAL", "1");
    if (a->src[3])
        emit_kernel_define(k, "ATTN_MASK", "1");
    if (a->ip[1] > 0)
        emit_kernel_define(k, "ATTN_SWA", "1");
    if (a->ip[2] != 0)
        emit_kernel_define(k, "ATTN_SOFTCAP", "1");
}

static glesc_status gen_decode(kb *b)
{
    const glesc_tensor *a = b->gk->anchor;
    const glesc_tensor *q = a->src[0], *k = a->src[1], *v = a->src[2], *mask = a->src[3];
    bool causal = a->ip[0] != 0, softcap = a->ip[2] != 0;
    int n_swa = a->ip[1];
    /* the class's (one choice per context, as the GEMV's), a power of two
     * within the caps */
    int wg =
        CORE_MAX(ATTN_WG_MIN, kernels_pow2_floor(CORE_MIN(kernels_class_of(b->ctx)->attn.wg,
                                                          b->ctx->caps.max_compute_invocations)));
    attn_shape sh = shape_of(a, wg);
    int64_t n_q = q->ne[1], n_head = q->ne[2], n_kv = k->ne[1], d = q->ne[0], dv = v->ne[0];
    int64_t n_groups = n_head / sh.hg;
    /* the class's registers (devclass.c's Mali row): fewer splits a round
     * of the combine (each one's loads and addresses in flight), the hooks
     * written for registers (kb's lean) and the KV-cache writes after the
     * attention (their loop's values and the attention's never live
     * together; the order does not matter: no invocation reads a row the
     * dispatch writes from memory); V3D's row: integer divisions by
     * uniforms in the fused KV-cache writes' lookups and views only where
     * the structure needs them (kb's few_div) */
    int cu = kernels_class_of(b->ctx)->attn.decode_cu;
    cu = cu > 0 && cu < ATTN_CU ? cu : ATTN_CU;
    /* the combine's outputs an invocation (the file's AD_CO) in passes of
     * the class's decode_co (Mali's: a pass's loads and sums in flight,
     * not all of them); the output accumulators in shared memory between
     * key tiles (ATTN_OS) where an invocation has more than the class's
     * decode_acc and they fit: in registers only while a tile's values
     * are added */
    const kernels_class *cls = kernels_class_of(b->ctx);
    int co = (int)((sh.hg * dv + wg - 1) / wg);
    int cc = cls->attn.decode_co > 0 ? CORE_MIN(co, cls->attn.decode_co) : co;
    int os = cls->attn.decode_acc > 0 && sh.hg * sh.dpt > cls->attn.decode_acc &&
                     4 * (ATTN_SHARED + sh.hg * dv) <= b->ctx->caps.max_compute_shared_memory
                 ? (int)(sh.hg * dv)
                 : 0;
    /* the per-head loops over a tile's keys bounded by the uniform at_t
     * where the class's compiler would write them out (decode_roll) */
    bool roll = sh.t <= cls->attn.decode_roll;
    bool lean = kernels_class_of(b->ctx)->attn.decode_lean;
    b->lean = lean;
    b->few_div = kernels_class_of(b->ctx)->attn.decode_few_div;
    /* registers per invocation of a key (value) tile; values through
     * registers only where their tile is staged in ks */
    int kpl = sh.regs ? (int)((sh.t * d + wg - 1) / wg) : 0;
    int vpl = sh.regs && sh.v_shared ? (int)((sh.t * dv + wg - 1) / wg) : 0;
    if (b->k) {
        emit_kernel_local_size(b->k, wg, 1, 1);
        emit_kernel_shared(b->k, "float", "qs", ATTN_QS);
        emit_kernel_shared(b->k, "float", "ks", ATTN_KS);
        emit_kernel_shared(b->k, "float", "ps", ATTN_HG_MAX * ATTN_T_MAX);
        emit_kernel_shared(b->k, "float", "mh", ATTN_HG_MAX);
        emit_kernel_shared(b->k, "float", "lh", ATTN_HG_MAX);
        emit_kernel_shared(b->k, "float", "ch", ATTN_HG_MAX);
        emit_kernel_shared(b->k, "uint", "last_wg", 1);
        if (os) {
            emit_kernel_shared(b->k, "float", "os", os);
            emit_kernel_define(b->k, "ATTN_OS", "1");
        }
        emit_kernel_snippet(b->k, "graph/reduce");
        emit_kernel_snippet(b->k, "graph/eltwise");
        static const char *const names[] = {
            "HG", "T", "D", "DV", "DPT", "ATTN_COUNTERS", "ATTN_COMBINE", "ATTN_CU", "ATTN_CC"};
        const int vals[] = {sh.hg,        sh.t, (int)d, (int)dv, sh.dpt, KB_SCRATCH_COUNTERS,
                            ATTN_COMBINE, cu,   cc};
        _Static_assert(sizeof vals / sizeof vals[0] == sizeof names / sizeof names[0],
                       "a value per define");
        for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
            emit_kernel_define(b->k, names[i], "%du", vals[i]);
        if (sh.v_shared)
            emit_kernel_define(b->k, "ATTN_V_SHARED", "1");
        if (roll)
            emit_kernel_define(b->k, "ATTN_ROLL", "1");
        if (kpl) {
            emit_kernel_define(b->k, "ATTN_REGS", "1");
            emit_kernel_define(b->k, "KPL", "%du", kpl);
        }
        if (vpl) {
            emit_kernel_define(b->k, "ATTN_VREGS", "1");
            emit_kernel_define(b->k, "VPL", "%du", vpl);
        }
        mask_defines(b->k, a);
        emit_kernel_comment(b->k,
                            "attention, decode (glsl/graph/attn_decode.glsl): a workgroup per "
                            "(query, %d heads of one kv head, split of the keys), key tiles of "
                            "%d%s%s%s%s%s",
                            sh.hg, sh.t, kpl ? " through registers" : "",
                            softcap ? ", soft-capped scores" : "", mask ? ", additive mask" : "",
                            causal ? ", causal" : "", n_swa > 0 ? ", sliding window" : "");
    }
    /* A sliding window hides the keys before the first query's window:
     * the splits cover only [k0, n_kv) */
    int64_t k0 = n_swa > 0 ? CORE_MAX(0, n_kv - n_q + 1 - (int64_t)n_swa) : 0;
    /* keys per split: enough workgroups to fill the device, whole tiles */
    int64_t target = kernels_class_of(b->ctx)->attn.target;
    int64_t min_tiles = ATTN_SPLIT_TILES;
    decode_env(&target, &min_tiles, NULL, NULL, NULL);
    int64_t tiles = (n_kv - k0 + sh.t - 1) / sh.t;
    int64_t nsplit = (target + n_q * n_groups - 1) / (n_q * n_groups);
    nsplit = CORE_MIN(nsplit, CORE_MIN(tiles / min_tiles, ATTN_COMBINE / sh.hg));
    if (nsplit < 2 || n_q * n_groups > KB_SCRATCH_COUNTERS) /* a counter per (query, group) */
        nsplit = 1;
    int64_t per = ((tiles + nsplit - 1) / nsplit) * sh.t;
    nsplit = CORE_MAX(1, (n_kv - k0 + per - 1) / per);
    if (nsplit > 65535)
        return kb_fail(b, GLESC_ERROR_LIMIT, "attention: %lld key splits", (long long)nsplit);
    /* Fused KV-cache writes: the new rows are written by a loop over all
     * invocations of the dispatch, and wherever a key or value is read a
     * new row's comes from the source (attn_k, attn_v, attn_knew,
     * attn_vnew), so no workgroup reads what another writes */
    kb_row_writes_begin(b);
    int sc = kb_scratch(b, nsplit == 1 ? 0
                                       : 4 * (uint64_t)KB_SCRATCH_COUNTERS +
                                             4 * (uint64_t)(n_q * n_groups) * (uint64_t)nsplit *
                                                 (uint64_t)sh.hg * (uint64_t)(dv + 2));
    if (b->k) {
        emit_kernel_define(b->k, "ATTN_SCR", "t%d", sc);
        if (kpl && b->n_rw)
            emit_kernel_define(b->k, "ATTN_FRESH", "1");
    }
    kb_param_u(b, "at_nkv", (uint64_t)n_kv);
    kb_param_u(b, "at_gqa", (uint64_t)(n_head / k->ne[2]));
    kb_param_u(b, "at_S", (uint64_t)per);
    kb_param_u(b, "at_nsplit", (uint64_t)nsplit);
    kb_param_f(b, "at_scale", a->fp[0]);
    if (softcap)
        kb_param_f(b, "at_cap", a->fp[1]);
    if (causal || n_swa > 0)
        kb_param_i(b, "at_coff", n_kv - n_q);
    if (n_swa > 0) {
        kb_param_u(b, "at_k0", (uint64_t)k0);
        kb_param_i(b, "at_swa", n_swa);
    }
    if (roll)
        kb_param_u(b, "at_t", (uint64_t)sh.t);
    if (b->k)
        emit_kernel_snippet(b->k, "graph/attn_decode");
    /* the hooks; with registers the tiles' loads read the memory as it is
     * (attn_kmem, attn_vmem) and rows the dispatch writes get their new
     * values when stored into shared memory (attn_knew, attn_vnew) */
    gen_hooks(b, !kpl, !vpl);
    if (kpl) {
        b->rw_read_memory = true;
        load_hook(b, "float attn_kmem(uint d, uint j, uint hk)", k, hook_ck, false, NULL);
        if (vpl)
            load_hook(b, "float attn_vmem(uint d, uint j, uint hk)", v, hook_ck, false, NULL);
        b->rw_read_memory = false;
        if (b->n_rw) {
            load_hook(b, "float attn_knew(uint d, uint j, uint hk, float mem)", k, hook_ck, false,
                      "mem");
            if (vpl)
                load_hook(b, "float attn_vnew(uint d, uint j, uint hk, float mem)", v, hook_ck,
                          false, "mem");
        }
    }
    if (lean)
        kb_line(b, "attn_decode();");
    kb_row_writes_store(
        b,
        "((gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + "
        "gl_WorkGroupID.x) * WG_SIZE + gl_LocalInvocationIndex",
        "WG_SIZE * gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z");
    if (!lean)
        kb_line(b, "attn_decode();");
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
    int out;                /* output vec4 an invocation at most (0: no cap) */
    int bytes;              /* shared memory */
    bool sg;                /* the rows' maxima and sums by subgroup shuffles, not rr */
} pf_cfg;

static int pow2_ceil(int v)
{
    int p = 1;
    while (p < v)
        p *= 2;
    return p;
}

/* Shared memory of R rows and tiles of BK keys for a workgroup of wg with
 * skg asked for: qs, kvs, ps, ms/ls/al, at_last, and rr (the rows' partial
 * maxima and sums where no subgroup shuffles them: R·SKG floats, SKG at
 * most skg or wg / R; counted either way) (attn_prefill.glsl's arrays). */
static int pf_bytes(int r, int bk, int d4, int kvp, int wg, int skg)
{
    return 16 * r * d4 + 16 * bk * kvp + 4 * r * (bk + 1) + 12 * r + 4 +
           4 * CORE_MAX(r * CORE_MAX(skg, 1), wg);
}

/* GLESC_ATTN="wg=128,r=64,bk=32,skg=8,target=512,out=2": a tuning aid
 * overriding the fields it names (read on every generation, so a process
 * sees one value: plans and programs stay consistent). */
static void pf_env(pf_cfg *c)
{
    static const char *const keys[] = {"wg", "r", "bk", "skg", "target", "out"};
    int v[] = {c->wg, c->r, c->bk, c->skg, c->target, c->out};
    kernels_env_ints("GLESC_ATTN", keys, v, 6, INT_MIN);
    c->wg = v[0];
    c->r = v[1];
    c->bk = v[2];
    c->skg = v[3];
    c->target = v[4];
    c->out = v[5];
}

/* The most rows, at most r_max, with tiles of ATTN_PF_BK_MIN keys or more
 * that fit the shared memory, else with shorter tiles, and the shape of
 * the invocations' work for them (r = 0 where not even one row fits). c:
 * the head sizes and the workgroup, tile and key-group sizes asked for. */
static pf_cfg pf_fit(pf_cfg c, const glesc_caps *caps, int hg, int r_max)
{
    int limit = CORE_MIN(caps->max_compute_shared_memory, ATTN_PF_SHARED), r = 0, bk = 0;
    for (int pass = 0; pass < 2 && !r; pass++)
        for (int ri = r_max; ri >= 1 && !r; ri /= 2)
            for (int bi = c.bk; bi >= (pass ? 1 : CORE_MIN(c.bk, ATTN_PF_BK_MIN)) && !r; bi /= 2)
                if (pf_bytes(ri, bi, c.d4, c.kvp, c.wg, c.skg) <= limit) {
                    r = ri;
                    bk = bi;
                }
    c.r = r;
    c.bk = bk;
    if (!r)
        return c;
    c.bytes = pf_bytes(r, bk, c.d4, c.kvp, c.wg, c.skg);
    c.wg = CORE_MIN(c.wg, r * bk); /* every invocation has a score */
    c.hg = CORE_MIN(hg, r);
    c.bq = r / c.hg;
    /* eight invocations (a quarter warp's vec4 loads) across keys where the
     * tile has them: each reads its own key row, the row's q is broadcast */
    c.skg =
        CORE_MIN(CORE_MAX(CORE_MIN(bk, kernels_pow2_floor(CORE_MAX(1, c.skg))), c.wg / r), c.wg);
    c.tk = bk / c.skg;
    c.srg = c.wg / c.skg;
    c.tr = r / c.srg;
    c.odg = CORE_MIN(CORE_MAX(CORE_MIN(8, pow2_ceil(c.dv4)), c.wg / r), c.wg);
    c.td4 = (c.dv4 + c.odg - 1) / c.odg;
    c.org = c.wg / c.odg;
    c.tro = r / c.org;
    return c;
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
    const kernels_class *cls = kernels_class_of(ctx);
    c.wg = cls->attn.pf_wg;
    c.r = cls->attn.pf_r > 0 ? cls->attn.pf_r : ATTN_PF_R;
    c.skg = 8;
    c.bk = cls->attn.pf_bk > 0 ? cls->attn.pf_bk : ATTN_PF_BK;
    c.target = cls->attn.pf_target;
    c.out = cls->attn.pf_out;
    pf_env(&c);
    c.wg = kernels_pow2_floor(CORE_MAX(
        1, CORE_MIN(c.wg, CORE_MIN(caps->max_compute_invocations, caps->max_workgroup_size[0]))));
    /* at most an invocation per row (the softmax's) */
    c.r = kernels_pow2_floor(CORE_MAX(1, CORE_MIN(c.r, CORE_MIN(ATTN_PF_R, c.wg))));
    c.bk = kernels_pow2_floor(CORE_MAX(1, CORE_MIN(c.bk, ATTN_PF_BK)));
    c.target = CORE_MAX(1, c.target);
    /* the class's cap on an invocation's output vec4 (TRO x TD4, live
     * across every key tile): fewer rows while that lowers them */
    pf_cfg best = pf_fit(c, caps, prefill_hg(a), c.r);
    for (int r = best.r / 2; c.out > 0 && best.r && best.tro * best.td4 > c.out && r >= 1; r /= 2) {
        pf_cfg t = pf_fit(c, caps, prefill_hg(a), r);
        if (!t.r || t.tro * t.td4 >= best.tro * best.td4)
            break;
        best = t;
    }
    c = best;
    /* the SKG invocations of a row: consecutive lanes of one subgroup */
    c.sg = caps->has_subgroup && (caps->subgroup_features & GLESC_SUBGROUP_SHUFFLE) &&
           caps->subgroup_size >= c.skg && caps->subgroup_size % c.skg == 0 &&
           c.wg % caps->subgroup_size == 0;
    return c;
}

static glesc_status gen_prefill(kb *b)
{
    const glesc_tensor *a = b->gk->anchor;
    const glesc_tensor *q = a->src[0], *k = a->src[1], *v = a->src[2], *mask = a->src[3];
    bool causal = a->ip[0] != 0, softcap = a->ip[2] != 0;
    int n_swa = a->ip[1];
    pf_cfg c = prefill_config(b->ctx, a);
    /* the class's (devclass.c's V3D row): the scores' loop over q's and
     * k's vec4s bounded by a uniform, which no compiler writes out (a
     * short head's eight or fewer were: their loads all in flight) */
    bool roll = kernels_class_of(b->ctx)->attn.pf_roll;
    if (!c.r)
        return kb_fail(b, GLESC_ERROR_LIMIT,
                       "attention: head sizes %lld/%lld need %d bytes of shared memory for one "
                       "row, the device has %d",
                       (long long)q->ne[0], (long long)v->ne[0], pf_bytes(1, 1, c.d4, c.kvp, 1, 1),
                       b->ctx->caps.max_compute_shared_memory);
    int64_t n_q = q->ne[1], n_head = q->ne[2], n_kv = k->ne[1], dv = v->ne[0];
    int64_t nqb = (n_q + c.bq - 1) / c.bq, n_groups = n_head / c.hg, blocks = nqb * n_groups;
    /* where fewer rows left an invocation more output vec4 than the
     * class's pf_out (V3D's heads of 256: 4 at any rows of 16-key tiles),
     * narrower steps: q staged an element at a time, a tile's values added
     * one output vec4 at a time over keys bounded by the uniform at_bk
     * (attn_prefill.glsl's ATTN_NARROW; the head a whole number of vec4) */
    bool narrow = c.out > 0 && c.tro * c.td4 > c.out && (int64_t)c.d4 * 4 == q->ne[0];
    if (b->k) {
        emit_kernel_local_size(b->k, c.wg, 1, 1);
        emit_kernel_shared(b->k, "vec4", "qs", c.r * c.d4);
        emit_kernel_shared(b->k, "vec4", "kvs", c.bk * c.kvp);
        emit_kernel_shared(b->k, "float", "ps", c.r * (c.bk + 1));
        emit_kernel_shared(b->k, "float", "ms", c.r);
        emit_kernel_shared(b->k, "float", "ls", c.r);
        emit_kernel_shared(b->k, "float", "al", c.r);
        emit_kernel_shared(b->k, "uint", "at_last", 1);
        if (c.sg) {
            emit_kernel_extension(b->k, "GL_KHR_shader_subgroup_basic");
            emit_kernel_extension(b->k, "GL_KHR_shader_subgroup_shuffle");
            emit_kernel_define(b->k, "ATTN_SG", "1");
        } else
            emit_kernel_shared(b->k, "float", "rr", c.r * c.skg);
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
        if (roll)
            emit_kernel_define(b->k, "ATTN_ROLL", "1");
        if (narrow)
            emit_kernel_define(b->k, "ATTN_NARROW", "1");
        emit_kernel_define(b->k, "ATTN_COUNTERS", "%du", KB_SCRATCH_COUNTERS);
        mask_defines(b->k, a);
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
    if (roll)
        kb_param_u(b, "at_d4", (uint64_t)c.d4);
    if (narrow)
        kb_param_u(b, "at_bk", (uint64_t)c.bk);
    if (n_swa > 0)
        kb_param_i(b, "at_swa", n_swa);
    if (softcap)
        kb_param_f(b, "at_cap", a->fp[1]);
    if (b->k)
        emit_kernel_snippet(b->k, "graph/attn_prefill");
    /* the hooks (keys and values read from the cache: the writes went first) */
    gen_hooks(b, true, true);
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
    return is_prefill(b->gk->anchor) ? gen_prefill(b) : gen_decode(b);
}
