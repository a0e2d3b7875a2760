/*
 * gemm.c — the matmul kernel for many columns (prefill: m > gemv_max_m),
 * glsl/graph/gemm.glsl with one copy of glsl/graph/gemm_loop.glsl per
 * matmul of the kernel, and the hooks generated here from the graph: x with
 * its fused prologue (gemm_x, a folded norm's squares), the stores with
 * their epilogues (gemm_store), the folded norm's scale, and each weight's
 * unit reader (gemm_wunit_<j>: its row's bytes, then the loader's
 * 32-element unit, wload.c, the decoder the GEMV uses).
 *
 * A workgroup computes a tile of BN weight rows (the gate/up pair: BN/2
 * rows of each weight, for the same outputs) by BM columns, TN × TM
 * outputs per invocation, walking K one 32-element unit per step: the
 * unit's weights are decoded into shared memory as floats beside the same
 * elements of x (eight invocations reading a column's 32, coalesced), read
 * back as vec4 (rows padded, or swizzled where shared memory is short: no
 * bank conflicts either way), and the next step's loads are
 * in flight while a step is multiplied (gemm.glsl says how; not where the
 * class says registers are too few: no_prefetch); the
 * accumulators are only indexed by constants (loops written out by the
 * preprocessor), so they stay in registers. The shape comes from the
 * device class where it names one (devclass.c: llvmpipe's 64 × 64 of 8 × 8,
 * the small GPUs' 64 × 16 of 4 × 2), else from the caps (gemm_config):
 * 128 × 128 tiles of 8 × 8 per invocation where 256 invocations and 32 KiB
 * of shared memory exist, 128 × 64 of 8 × 4 when the matmul has at most 64
 * columns (the variant's bit 18) or is a grouped q/k/v (see gemm_config),
 * 64 × 64 of 8 × 4 on the portable 128 invocations and 16 KiB, smaller ones
 * below that.
 *
 * When a dispatch's tiles leave the device's compute units idle for part of
 * its last wave, K is split (gemm_split: the uniforms ksplit, kper, kdp,
 * chosen per dispatch from the sizes): each part leaves its sums in the
 * kernel scratch buffer (kb_scratch) and the last part of a tile adds them
 * and stores; with more tiles than the device runs at once only the last
 * wave's tiles are split, the whole waves' (kdp) taken whole. The code is
 * the same with or without the split, so the plan does not depend on the
 * sizes.
 *
 * Another op may bring its own operands (mc->prov, a gemm_provider: the
 * convolution's implicit im2col, conv.c): its generators then declare the
 * weight's units and the uniforms and write the hooks; the tile, the loop,
 * the split and the dispatch are this file's.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul.h"

/* The tile: staged weight rows (the pair's: both weights'), columns, and
 * per invocation; the workgroups the device runs at once (gemm_split);
 * loop: a step's eight groups of four k as a loop, not written out; pad:
 * staged rows of 9 vec4 (gemm.glsl's GEMM_PAD), not swizzled rows of 8;
 * half: plain weights and the generic units (types without a unit
 * decoder) read by half units where two invocations stage a row; late: the next step's weights
 * loaded before a step's multiply-adds and decoded after them (gemm_loop.glsl's late decode), where
 * the loader splits its units; pre: the next step's loads in flight during a step's multiply-adds
 * (0: a step loads, stages and multiplies in turn, nothing of the next step live during the
 * arithmetic); xf: with pre 0, a step's x fetched before its weights are decoded (gemm_loop.glsl's
 * GEMM_X_FIRST). */
typedef struct gemm_cfg {
    int bn, bm, tn, tm;
    int slots;
    int loop;
    int pad;
    int half;
    int late;
    int pre;
    int xf;
} gemm_cfg;

#define GEMM_SPLIT_UNITS 8 /* units of 32 k each part of a split K takes at least */
#define GEMM_SPLIT_MAX 16
#define GEMM_PART_COST 0.05 /* a part's partial sums, against a whole tile's time */

/* The rounds (1, 2 or 4) in which gemm.glsl's results leave through its
 * shared memory (8·(bn + bm) vec4: an invocation's rows of a round, four
 * columns a vec4, or two of tm = 2 in one); 0: none fits. */
static int out_rounds(const gemm_cfg *c, bool dual)
{
    int wg = (c->bn / c->tn) * (c->bm / c->tm), tnr = dual ? c->tn / 2 : c->tn;
    for (int r = 1; r <= 4; r *= 2)
        if (tnr % r == 0 &&
            (c->tm + 3) / 4 * (tnr / r) * (dual ? 2 : 1) * wg <= 8 * (c->bn + c->bm))
            return r;
    return 0;
}

/* Does c fit the device and gemm.glsl (an invocation stages half or all of
 * a weight row's unit, an eighth to all of a column's; 4 or 8 rows, 2, 4
 * or 8 columns, its accumulator loops written out, 8·k invocations along
 * each side, its shared-memory swizzle the same for all its rows and
 * columns; its columns leave as vec4)? Two rows cannot fit: 8·k
 * invocations a column side make 4·k of them stage a weight row, so the
 * small register tile is 4 rows by 2 columns (64 × 16 of 4 × 2: 128
 * invocations, two a row, one vec4 of x each, as the 64 × 32 of 4 × 4
 * stage theirs). */
static bool cfg_fits(const glesc_caps *caps, const gemm_cfg *c, bool dual)
{
    if (c->bn < 1 || c->bm < 1 || (c->tn != 4 && c->tn != 8) ||
        (c->tm != 2 && c->tm != 4 && c->tm != 8) || c->bn % (8 * c->tn) || c->bm % (8 * c->tm) ||
        c->bn > 1024 || c->bm > 1024)
        return false;
    int wg = (c->bn / c->tn) * (c->bm / c->tm);
    return wg <= caps->max_compute_invocations && wg <= caps->max_workgroup_size[0] &&
           wg % c->bn == 0 && wg / c->bn <= 2 && wg % c->bm == 0 && 8 % (wg / c->bm) == 0 &&
           out_rounds(c, dual) &&
           (c->pad ? 144 : 128) * (c->bn + c->bm) <= caps->max_compute_shared_memory;
}

/* GLESC_GEMM="bn=128,bm=64,tn=8,tm=4,slots=128,loop=0,pad=1,half=1,late=1,pre=1,xf=0":
 * a tuning aid overriding the fields it names (read on every generation,
 * like GLESC_GEMV). */
static void gemm_env(gemm_cfg *c)
{
    static const char *const keys[] = {"bn",  "bm",   "tn",   "tm",  "slots", "loop",
                                       "pad", "half", "late", "pre", "xf"};
    int v[] = {c->bn,  c->bm,   c->tn,   c->tm,  c->slots, c->loop,
               c->pad, c->half, c->late, c->pre, c->xf};
    kernels_env_ints("GLESC_GEMM", keys, v, 11, INT_MIN);
    c->bn = v[0];
    c->bm = v[1];
    c->tn = v[2];
    c->tm = v[3];
    c->slots = v[4];
    c->loop = v[5] != 0;
    c->pad = v[6] != 0;
    c->half = v[7] != 0;
    c->late = v[8] != 0;
    c->pre = v[9] != 0;
    c->xf = v[10] != 0;
}

/* The first shape of the list that fits the device; depends on the caps,
 * the variant's small-m bit, the group and the pair (a plan cache belongs
 * to one context; the plan hash covers the rest). few: up to
 * KERNELS_GEMM_SMALL_M columns. narrow: the 128 × 64
 * tiles first, for few columns, and for a grouped q/k/v, whose copies of
 * the K loop (one per member) cost the 128 × 128 tiles' 64 accumulators
 * dearly (H200, TinyLlama's q/k/v with a folded norm, 2048 + 256 + 256
 * rows by 2048 by 512 columns: 540 us in 128 × 128 tiles, 337 us in
 * 128 × 64; one weight of 2560 rows: 302 us and 328 us). */
static glesc_status gemm_config(kb *b, bool few, bool narrow, bool dual, gemm_cfg *out)
{
    const glesc_context *ctx = b->ctx;
    static const gemm_cfg gpu[] = {
        {.bn = 128, .bm = 128, .tn = 8, .tm = 8}, /* 256 invocations, 32 KiB */
        {.bn = 64, .bm = 64, .tn = 8, .tm = 4},   /* the portable 128 invocations and 16 KiB */
        {.bn = 64, .bm = 32, .tn = 4, .tm = 4},   /* 128 invocations, 12 KiB */
        {.bn = 32, .bm = 32, .tn = 4, .tm = 4},   /* 64 invocations, 8 KiB */
    };
    static const gemm_cfg gpu_narrow[] = {{.bn = 128, .bm = 64, .tn = 8, .tm = 4}};
    /* the device class's tile where it names one and it fits (llvmpipe's,
     * the small GPUs'), else the largest of the lists the caps allow */
    const kernels_class *kc = kernels_class_of(ctx);
    const gemm_cfg own = {
        .bn = kc->gemm.bn, .bm = kc->gemm.bm, .tn = kc->gemm.tn, .tm = kc->gemm.tm};
    gemm_cfg c = {0};
    bool found = own.bn && cfg_fits(&ctx->caps, &own, dual) && (c = own, true);
    if (narrow)
        for (size_t i = 0; !found && i < CORE_ARRAY_LEN(gpu_narrow); i++)
            found = cfg_fits(&ctx->caps, &gpu_narrow[i], dual) && (c = gpu_narrow[i], true);
    for (size_t i = 0; !found && i < CORE_ARRAY_LEN(gpu); i++)
        found = cfg_fits(&ctx->caps, &gpu[i], dual) && (c = gpu[i], true);
    if (!found)
        return kb_fail(b, GLESC_ERROR_LIMIT,
                       "GEMM: no tile fits %d invocations and %d bytes of shared memory",
                       ctx->caps.max_compute_invocations, ctx->caps.max_compute_shared_memory);
    c.slots = kc->gemm.slots;
    /* as a loop where the class says (LLVM, llvmpipe's, takes seconds over
     * the written-out step and x fetch; NVIDIA's, a second for the
     * narrow q/k/v: few columns, the program a first token waits for) */
    c.loop = kc->gemm.loop || (few && kc->gemm.loop_narrow);
    c.half = 1;
    /* the late decode everywhere (H200: q4_k 4096 x 4096 x 512 48.0% ->
     * 51.5% of the FMA peak; llvmpipe's loops: the demo's pp64 the same) */
    c.late = 1;
    /* the next step's loads in flight during a step's arithmetic, but
     * where the class says its registers are too few for them */
    c.pre = !kc->gemm.no_prefetch;
    /* without it, x fetched before the weights' decode where the class
     * says (Mali's: fewer registers there, devclass.c) */
    c.xf = kc->gemm.x_first;
    /* padded rows where the class says and they fit (not in the portable
     * 16 KiB: the swizzle there): on the H200 padding is a little faster
     * for every type; on llvmpipe the swizzle is. */
    c.pad = kc->gemm.pad;
    c.pad = c.pad && cfg_fits(&ctx->caps, &c, dual);
    gemm_env(&c);
    /* a tile named by GLESC_GEMM takes the swizzle where its padded rows
     * would not fit */
    gemm_cfg unpadded = c;
    unpadded.pad = 0;
    if (c.pad && !cfg_fits(&ctx->caps, &c, dual) && cfg_fits(&ctx->caps, &unpadded, dual))
        c = unpadded;
    if (!cfg_fits(&ctx->caps, &c, dual))
        return kb_fail(b, GLESC_ERROR_INVALID_ARGUMENT,
                       "GLESC_GEMM=%s: a tile of %d x %d with %d x %d per invocation does not fit "
                       "gemm.glsl or this device",
                       getenv("GLESC_GEMM"), c.bn, c.bm, c.tn, c.tm);
    *out = c;
    return GLESC_OK;
}

/* K, the columns, the batches of mc's GEMM. */
static int64_t gemm_k(const mm_ctx *mc)
{
    return mc->prov ? mc->prov->k : mc->w->ne[0];
}

static int64_t gemm_m(const mm_ctx *mc)
{
    return mc->prov ? mc->prov->m : mc->x->ne[1];
}

static int64_t gemm_batches(const mm_ctx *mc)
{
    return mc->prov ? mc->prov->batches : mc->x->ne[2] * mc->x->ne[3];
}

/* mc->split: the parts K is cut into for a dispatch of `tiles` workgroups,
 * their uniforms and the scratch they take. The device runs about
 * split_slots workgroups at once, so p parts take ceil(tiles·p / slots)
 * waves of 1/p of K each; or (one batch, more tiles than slots) the whole
 * waves' tiles are taken whole (kdp of them) and only the last wave's r
 * tiles are split, ceil(r·p / slots) waves of 1/p after the whole ones
 * (TinyLlama's gate/up pair on the H200, 352 tiles: 256 whole and 96 in
 * four parts instead of three waves of whole tiles). The choice of the
 * fewest waves (each part GEMM_PART_COST dearer for its partial sums; the
 * fewest parts on a tie), parts of at least GEMM_SPLIT_UNITS units, a
 * scratch counter per split tile, the parts' sums within one storage block. A
 * dispatch of many tiles, or on a device that runs one workgroup at a
 * time, is not split. */
static int64_t gemm_split(kb *b, const mm_ctx *mc, int64_t tiles)
{
    int64_t nu = (gemm_k(mc) + 31) / 32, slots = CORE_MAX(1, mc->split_slots), parts = 1;
    int64_t pmax = CORE_MIN(nu / GEMM_SPLIT_UNITS, (int64_t)GEMM_SPLIT_MAX);
    uint64_t limit = b->ctx->caps.max_storage_block_size / 4;
    if (tiles > KB_SCRATCH_COUNTERS)
        pmax = 1;
    /* the hybrid's whole tiles: whole waves of a one-batch dispatch */
    int64_t whole = gemm_batches(mc) == 1 ? tiles / slots * slots : 0, kdp = 0;
    if (whole == tiles)
        whole = 0;
    double best = (double)((tiles + slots - 1) / slots);
    for (int64_t p = 2; p <= pmax; p++) {
        double part = 1.0 + GEMM_PART_COST * (double)(p - 1);
        /* every tile split, then (whole > 0) the last wave's only; the
         * parts' sums within one storage block */
        for (int hybrid = 0; hybrid <= (whole > 0); hybrid++) {
            int64_t w = hybrid ? whole : 0;
            if ((uint64_t)KB_SCRATCH_COUNTERS +
                    (uint64_t)((tiles - w) * p) * (uint64_t)mc->split_words >
                limit)
                continue;
            double cost = (double)(w / slots) +
                          (double)(((tiles - w) * p + slots - 1) / slots) / (double)p * part;
            if (cost < best * (1.0 - 1e-9)) {
                best = cost;
                parts = p;
                kdp = w;
            }
        }
    }
    int64_t kper = (nu + parts - 1) / parts;
    parts = (nu + kper - 1) / kper; /* none empty */
    if (parts == 1)
        kdp = 0;
    kb_param_set_u(b, mc->p_ksplit, (uint64_t)parts);
    kb_param_set_u(b, mc->p_kper, (uint64_t)kper);
    kb_param_set_u(b, mc->p_kdp, (uint64_t)kdp);
    /* the split tiles' parts only (the whole ones first, not in it) */
    kb_scratch(b, parts == 1 ? 0
                             : 4 * ((uint64_t)KB_SCRATCH_COUNTERS +
                                    (uint64_t)((tiles - kdp) * parts) * (uint64_t)mc->split_words));
    return parts;
}

/* Are member j's weights (with the pair's) read by units and do their
 * loaders have what `has` asks: half units (kernels_wload_half), split
 * units (kernels_wload_raw, the late decode), their halves
 * (kernels_wload_dec_half)? */
static bool member_has(const mm_ctx *mc, int j, bool (*has)(const glesc_tensor *))
{
    if (mc->prov)
        return false;
    if (j)
        return mc->sib[j - 1].units && has(mc->sib[j - 1].w);
    return mc->units && has(mc->w) && (!mc->p || has(mc->p->src[0]));
}

/* Is member j's weight (with the pair's) read by the generic units (a
 * type without a unit decoder of its own, e.g. q2_k, q3_k, or plain rows
 * of an odd length; kernels_wload_units)? */
static bool member_generic(const mm_ctx *mc, int j)
{
    return !mc->prov && !(j ? mc->sib[j - 1].units : mc->units);
}

/* How member j's weights are read: by half units (plain types, two
 * invocations a row; W_GHALF: the generic units' run h, kernels_wload_emit's
 * NAME_wuhalf, for the same two), split units (late decode; W_RAW_HALF:
 * each of a row's two invocations decodes its run only) or whole units. */
enum { W_UNIT, W_HALF, W_RAW, W_RAW_HALF, W_GHALF };
static int member_read(const mm_ctx *mc, int j, bool half, bool late)
{
    if (half && member_has(mc, j, kernels_wload_half))
        return W_HALF;
    if (half && member_generic(mc, j))
        return W_GHALF;
    if (!late || !member_has(mc, j, kernels_wload_raw))
        return W_UNIT;
    return half && member_has(mc, j, kernels_wload_dec_half) ? W_RAW_HALF : W_RAW;
}

/* A copy of glsl/graph/gemm_loop.glsl per matmul of the kernel (member j
 * reads its weight through loader load_w or load_s<j>), its names defined
 * around it. */
static void gemm_loop_copies(kb *b, const mm_ctx *mc, bool half, bool late)
{
    static const char *const names[] = {
        "GEMM_LOOP",     "GEMM_WAT",       "GEMM_UX",      "GEMM_WUNIT",  "GEMM_WUNIT2",
        "GEMM_WHALF",    "GEMM_WHALF2",    "GEMM_FETCH_X", "GEMM_PART_W", "GEMM_STAGE",
        "GEMM_STEP",     "GEMM_WROW",      "GEMM_FX_E",    "GEMM_FX_S",   "GEMM_FX_K",
        "GEMM_FX_KMASK", "GEMM_HALF_UNIT", "GEMM_WU",      "GEMM_W1",     "GEMM_W2",
        "GEMM_WRAW",     "GEMM_WRAW2",     "GEMM_WDEC",    "GEMM_WDEC2",  "GEMM_LATE",
        "GEMM_WLOAD",    "GEMM_WFINISH",   "GEMM_FX_PX",   "GEMM_WDECH",  "GEMM_WDECH2",
        "GEMM_WFIN",     "GEMM_EITHER"};
    const char *text = emit_snippet_text("graph/gemm_loop");
    if (!text) {
        kb_fail(b, GLESC_ERROR_STATE, "no GLSL snippet graph/gemm_loop");
        return;
    }
    for (int j = 0; j <= mc->n_sib; j++) {
        char fn[16], name[24];
        kernels_mm_loader(j, fn);
        sbuf s;
        sbuf_init(&s);
        sbuf_appendf(&s,
                     "#define GEMM_LOOP gemm_loop_%d\n#define GEMM_WAT %s_wat\n"
                     "#define GEMM_UX %s_wunit_x\n#define GEMM_WUNIT gemm_wunit_%d\n"
                     "#define GEMM_FETCH_X gemm_fetch_x_%d\n#define GEMM_PART_W gemm_part_w_%d\n"
                     "#define GEMM_STAGE gemm_stage_%d\n#define GEMM_STEP gemm_step_%d\n",
                     j, fn, fn, j, j, j, j, j);
        if (j == 0 && mc->p)
            sbuf_append(&s, "#define GEMM_WUNIT2 gemm_wunit_p\n");
        int rd = member_read(mc, j, half, late);
        if (rd == W_HALF || rd == W_GHALF) {
            sbuf_appendf(&s, "#define GEMM_WHALF gemm_whalf_%d\n", j);
            if (j == 0 && mc->p)
                sbuf_append(&s, "#define GEMM_WHALF2 gemm_whalf_p\n");
        } else if (rd == W_RAW || rd == W_RAW_HALF) {
            sbuf_appendf(&s, "#define GEMM_WRAW gemm_wraw_%d\n#define GEMM_WDEC gemm_wdec_%d\n", j,
                         j);
            if (j == 0 && mc->p)
                sbuf_append(&s, "#define GEMM_WRAW2 gemm_wraw_p\n#define GEMM_WDEC2 gemm_wdec_p\n");
            if (rd == W_RAW_HALF) {
                sbuf_appendf(&s, "#define GEMM_WDECH gemm_wdech_%d\n", j);
                if (j == 0 && mc->p)
                    sbuf_append(&s, "#define GEMM_WDECH2 gemm_wdech_p\n");
            }
        }
        sbuf_append(&s, text);
        for (size_t i = 0; i < CORE_ARRAY_LEN(names); i++)
            sbuf_appendf(&s, "#undef %s\n", names[i]);
        snprintf(name, sizeof name, "gemm_loop_%d", j);
        if (sbuf_str(&s))
            emit_kernel_helper(b->k, name, sbuf_str(&s));
        else
            kb_fail(b, GLESC_ERROR_OUT_OF_MEMORY, "GEMM loop");
        sbuf_free(&s);
    }
}

/* The first byte of local row nl of member j's weight (second: the
 * pair's), a GLSL expression in e (a group is unbatched); returns e. */
static const char *row_byte(int j, bool second, char e[80])
{
    if (second)
        snprintf(e, 80, "w2_off + nl * w2_nb1 + (b2 / r2) * w2_nb2 + (b3 / r3) * w2_nb3");
    else if (j == 0)
        snprintf(e, 80, "w_off + nl * w_nb1 + (b2 / r2) * w_nb2 + (b3 / r3) * w_nb3");
    else
        snprintf(e, 80, "s%d_off + nl * s%d_nb1", j, j);
    return e;
}

/* The hooks reading unit u of local row nl of member j's weight (second:
 * the pair's), the row's first byte, then the loader's: W_UNIT the whole
 * unit (gemm_wunit), W_HALF only half h of it, its 16 elements into
 * q[0..3] (gemm_whalf: kernels_wload_half's plain weights; W_GHALF the
 * same from the generic units' run h, its scale and offset applied: a
 * whole unit would be decoded to keep half of it), W_RAW its words
 * (gemm_wraw) and their decode (gemm_wdec), W_RAW_HALF those and the
 * decode of run h only (gemm_wdech). */
static void wunit_hook(kb *b, int j, bool second, int rd)
{
    if (!b->k)
        return;
    char sig[128], fn[16], id[16] = "p", rb[80];
    if (!second)
        snprintf(id, sizeof id, "%d", j);
    const char *ld = second ? "load_u" : kernels_mm_loader(j, fn);
    if (rd == W_HALF || rd == W_GHALF) {
        snprintf(sig, sizeof sig,
                 "void gemm_whalf_%s(uint nl, uint b2, uint b3, uint u, uint h, out vec4 q[4])",
                 id);
        emit_kernel_function_begin(b->k, sig);
        if (rd == W_HALF)
            kb_line(b, "%s_whalf(%s, u, h, q);", ld, row_byte(j, second, rb));
        else {
            kb_line(b, "vec2 ab;");
            kb_line(b, "%s_wuhalf(%s, %s_wat(u), u, h, q, ab);", ld, row_byte(j, second, rb), ld);
            kb_line(b, "for (uint i = 0u; i < 4u; i++) {");
            kb_line(b, "q[i] = q[i] * ab.x + ab.y;");
            kb_line(b, "}");
        }
    } else if (rd == W_RAW || rd == W_RAW_HALF) {
        snprintf(sig, sizeof sig,
                 "void gemm_wraw_%s(uint nl, uint b2, uint b3, uvec4 at, uint u, out uvec4 r[4])",
                 id);
        emit_kernel_function_begin(b->k, sig);
        kb_line(b, "%s_wraw(%s, at, u, r);", ld, row_byte(j, second, rb));
        emit_kernel_function_end(b->k);
        if (rd == W_RAW_HALF) {
            snprintf(sig, sizeof sig,
                     "void gemm_wdech_%s(uvec4 r[4], uvec4 at, uint u, uint h, out vec4 q[4], "
                     "out vec2 ab)",
                     id);
            emit_kernel_function_begin(b->k, sig);
            kb_line(b, "%s_wdech(r, at, u, h, q, ab);", ld);
            emit_kernel_function_end(b->k);
        }
        snprintf(sig, sizeof sig,
                 "void gemm_wdec_%s(uvec4 r[4], uvec4 at, uint u, out vec4 q[8], out vec4 ab)", id);
        emit_kernel_function_begin(b->k, sig);
        kb_line(b, "%s_wdec(r, at, u, q, ab);", ld);
    } else {
        snprintf(sig, sizeof sig,
                 "void gemm_wunit_%s(uint nl, uint b2, uint b3, uvec4 at, uint u, out vec4 q[8], "
                 "out vec4 ab)",
                 id);
        emit_kernel_function_begin(b->k, sig);
        kb_line(b, "%s_wunit(%s, at, u, q, ab);", ld, row_byte(j, second, rb));
    }
    emit_kernel_function_end(b->k);
}

/* A provider's GEMM: one dispatch (one weight chunk), the split as a
 * matmul's. */
static glesc_status gemm_dispatch_provided(kb *b, mm_ctx *mc, const gemm_cfg *c)
{
    const gemm_provider *pv = mc->prov;
    kb_line(b, "gemm_main();");
    int64_t groups = (pv->rows + c->bn - 1) / c->bn, mg = (pv->m + c->bm - 1) / c->bm;
    mc->split_slots = pv->batches * GEMM_SPLIT_MAX > 65535 ? 1 : c->slots;
    mc->split_words = (int64_t)c->bn * c->bm + c->bm;
    const glesc_caps *caps = &b->ctx->caps;
    if (groups > caps->max_workgroup_count[0] || mg > caps->max_workgroup_count[1])
        return kb_fail(b, GLESC_ERROR_LIMIT,
                       "GEMM: %lld x %lld tiles exceed the device's %d x %d workgroups",
                       (long long)groups, (long long)mg, caps->max_workgroup_count[0],
                       caps->max_workgroup_count[1]);
    int64_t parts = gemm_split(b, mc, groups * mg * pv->batches);
    kb_dispatch_groups(b, (uint32_t)groups, (uint32_t)mg, (uint32_t)(pv->batches * parts));
    return b->st;
}

glesc_status kernels_gen_gemm(kb *b, mm_ctx *mc)
{
    bool dual = mc->p != NULL;
    if (b->gk->reduce) /* fuse.c folds it only into one column: a GEMV */
        return kb_fail(b, GLESC_ERROR_STATE, "matmul: a GEMM takes no folded arg max");
    int64_t m = gemm_m(mc);
    /* a folded rms_norm (reduction prologue): the squares of each column's
     * input summed where x is loaded, the scale applied before the store */
    const glesc_tensor *nrm = mc->prov ? NULL : kb_row_norm(b, mc->x);
    gemm_cfg c = {0};
    bool few = m <= KERNELS_GEMM_SMALL_M;
    if (gemm_config(b, few, few || mc->n_sib > 0, dual, &c) != GLESC_OK)
        return b->st;
    int nx = c.bn / c.tn, ny = c.bm / c.tm;
    /* two invocations stage a weight row: each reads only its half of a
     * plain weight's unit (the block types decode whole units; H200, f16
     * 4096 x 4096 x 512: 47.8% -> 49.7% of the FMA peak), and of a type
     * without a unit decoder (q2_k's and q3_k's prefill GEMMs: G610 3:38-8:58
     * -> 0:0, V3D 4.2 11:24-31:27 -> 0:0, 7.1 18:33-30:31 -> 0:0-7:10,
     * 12-36% fewer instructions on every small GPU; docs/devices.md) */
    bool half = c.half && nx * ny / c.bn == 2;
    bool late = c.late;
    if (b->k) {
        emit_kernel_local_size(b->k, nx * ny, 1, 1);
        emit_kernel_snippet(b->k, "graph/eltwise");
        emit_kernel_define(b->k, "BN", "%du", c.bn);
        emit_kernel_define(b->k, "BM", "%du", c.bm);
        emit_kernel_define(b->k, "TN", "%du", c.tn);
        emit_kernel_define(b->k, "TM", "%du", c.tm);
        emit_kernel_define(b->k, "NX", "%du", nx);
        emit_kernel_define(b->k, "NY", "%du", ny);
        emit_kernel_define(b->k, "NMEMB", "%du", 1 + mc->n_sib);
        if (dual)
            emit_kernel_define(b->k, "PAIR", "1");
        if (nrm)
            emit_kernel_define(b->k, "GEMM_NORM", "1");
        if (c.loop)
            emit_kernel_define(b->k, "GEMM_KQ_LOOP", "1");
        if (c.pad)
            emit_kernel_define(b->k, "GEMM_PAD", "1");
        if (!c.pre)
            emit_kernel_define(b->k, "GEMM_NO_PREFETCH", "1");
        if (!c.pre && c.xf)
            emit_kernel_define(b->k, "GEMM_X_FIRST", "1");
        emit_kernel_define(b->k, "TNV", "%d", c.tn);
        emit_kernel_define(b->k, "TMV", "%d", c.tm);
        emit_kernel_define(b->k, "XQV", "%d", 8 / (nx * ny / c.bm));
        emit_kernel_define(b->k, "GEMM_ROUNDS", "%du", out_rounds(&c, dual));
        emit_kernel_shared(b->k, "vec4", "gs", (c.pad ? 9 : 8) * (c.bn + c.bm));
        emit_kernel_comment(b->k,
                            "GEMM (glsl/graph/gemm.glsl): tiles of %d weight rows%s by %d "
                            "columns, %d x %d per invocation, K one 32-element unit a step%s, "
                            "split where tiles are few, steps and x fetch %s",
                            c.bn, dual ? " (both of the pair)" : "", c.bm, c.tn, c.tm,
                            c.pre  ? ""
                            : c.xf ? " (no prefetch, x first)"
                                   : " (no prefetch)",
                            c.loop ? "as loops" : "written out");
        if (mc->n_sib)
            emit_kernel_comment(b->k,
                                "grouped: %d matmuls of one activation, blocks of rows pick "
                                "theirs by range",
                                1 + mc->n_sib);
    }
    if (mc->prov)
        mc->prov->common(b, mc, mc->prov->arg);
    else {
        /* the generic units' halves only where a member reads them (the
         * fast units' loaders would carry them unused) */
        bool ghalf = half && !kernels_matmul_units(mc->a);
        ghalf = ghalf || (half && mc->p && !kernels_matmul_units(mc->p));
        for (int i = 0; i < mc->n_sib; i++)
            ghalf = ghalf || (half && !kernels_matmul_units(mc->sib[i].a));
        mc->wload_extra = (half ? KERNELS_WLOAD_HALF : 0u) | (late ? KERNELS_WLOAD_RAW : 0u) |
                          (late && half ? KERNELS_WLOAD_DEC_HALF : 0u) |
                          (ghalf ? KERNELS_WLOAD_UHALF : 0u);
        kernels_mm_common(b, mc);
    }
    int64_t nu = (gemm_k(mc) + 31) / 32;
    mc->p_ksplit = kb_param_u(b, "ksplit", 1);
    mc->p_kper = kb_param_u(b, "kper", (uint64_t)nu);
    mc->p_kdp = kb_param_u(b, "kdp", 0);
    int sc = kb_scratch(b, 0);
    /* every weight read by units (of 32 elements of a row, kernels_wload_units):
     * K a multiple of 32, so x needs no mask along k */
    bool kfull = !mc->prov && mc->units;
    for (int i = 0; kfull && i < mc->n_sib; i++)
        kfull = mc->sib[i].units;
    if (b->k) {
        emit_kernel_define(b->k, "GEMM_SCRATCH", "t%d", sc);
        if (kfull)
            emit_kernel_define(b->k, "GEMM_KFULL", "1");
        emit_kernel_snippet(b->k, "graph/gemm");
        gemm_loop_copies(b, mc, half, late);
    }
    /* the hooks gemm.glsl calls: x with its prologue (and a folded norm's
     * squares), the stores with their epilogues, the norm's scale, the
     * weights' units */
    if (mc->prov) {
        mc->prov->hooks(b, mc, mc->prov->arg);
        return gemm_dispatch_provided(b, mc, &c);
    }
    kernels_mm_x_hook(b, mc, nrm, "gemm");
    if (b->k)
        emit_kernel_function_begin(b->k, "void gemm_store(uint sel, uint n, uint c, uint b2, "
                                         "uint b3, float dot, float dot2)");
    kernels_mm_member_stores(b, mc, dual);
    if (b->k)
        emit_kernel_function_end(b->k);
    kernels_mm_norm_scale_hook(b, nrm, "gemm");
    /* the weight readers each member's loop calls (gemm.glsl declares
     * every gemm_wunit_<j>; one no loop calls stays without a body) */
    for (int j = 0; j <= mc->n_sib; j++)
        for (int second = 0; second <= (dual && j == 0); second++)
            wunit_hook(b, j, second, member_read(mc, j, half, late));
    kb_line(b, "gemm_main();");
    int64_t batches = gemm_batches(mc);
    mc->split = gemm_split;
    mc->split_slots = c.slots;
    mc->split_words = (int64_t)c.bn * c.bm + c.bm;
    if (batches * GEMM_SPLIT_MAX > 65535)
        mc->split_slots = 1; /* z holds batches × parts: no split */
    kernels_mm_dispatch(b, mc, dual ? c.bn / 2 : c.bn, 0, false, (m + c.bm - 1) / c.bm, batches);
    return b->st;
}
