/*
 * matmul.c — W [k, n, b2w, b3w] × X [k, m, b2, b3] → [n, m, b2, b3] (ggml's
 * convention: both operands run along k in dimension 0).
 *
 * Two kernels, chosen by the op's variant (m against the graph's
 * gemv_max_m): GEMV (glsl/graph/gemv.glsl, one copy of
 * glsl/graph/gemv_units.glsl per matmul of the kernel), the decode's
 * matrix-vector product for every column m ≤ gemv_max_m at once, each
 * weight row read once: teams of invocations (a subgroup each where the
 * device has subgroup arithmetic) share rows, every lane takes 32-element
 * units of the row whose scales it decodes once (wload.c: uvec4 loads where
 * the type's layout allows), x is loaded once per workgroup into shared
 * memory (in slices where K is long) and read by all its rows; GEMM
 * (gemm.c, glsl/graph/gemm.glsl), the prefill's: output tiles through
 * shared memory with register blocking.
 *
 * The weight is read through its type's loader (wload.c): f32, f16, bf16
 * and the ggml block types alike, in the 32-element units of the type's
 * decoder (uvec4 loads where the variant's bit 17 says the layout allows).
 * X is read through the generated hooks gemv_x / gemm_x (kb_expr: any
 * strides, f16, broadcast batches, a fused prologue). The result goes
 * through kb_store_out (the hooks gemv_store / gemm_store): bias,
 * activation and residual epilogues come for free, and with a partner (a
 * second matmul of the same X, e.g. gate and up) both dot products run in
 * the one kernel and the epilogue sees both values (silu(g)·u). A folded
 * rms_norm (reduction prologue, kb_row_norm) sums the squares of its input
 * where x is loaded and scales the results before the epilogue.
 *
 * A grouped matmul (fuse.c: q, k and v of one activation) is one kernel
 * whose workgroups pick their matmul by row range: blocks of rows from
 * s<i>_g0 on belong to sibling i, each with its own weight (any type: its
 * own loader), row count and stored result with its epilogue; the
 * activation's prologue and x in shared memory are shared.
 *
 * A weight larger than the storage-block limit is split in row chunks
 * (tensor.c); the kernel then runs once per chunk, binding that chunk and
 * producing its rows n_base .. n_base + n_count (a group: dispatch d binds
 * chunk d of every member that has one).
 *
 * An arg max over the rows of one column folded in (fuse.c: gk->reduce,
 * greedy sampling in the output head): the GEMV's store hook keeps each
 * invocation's best row instead of storing it, the workgroup reduces
 * them, and the last workgroup of all the kernel's dispatches (counted in
 * the scratch buffer, as the attention's splits are) combines the
 * workgroups' winners and stores the index (glsl/graph/argmax.glsl).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul.h"

static glesc_status check_chunks(kb *b, const glesc_tensor *w)
{
    if (w->owner->st.n_chunks > 1 && (w->owner != w || w->ne[2] * w->ne[3] != 1))
        return kb_fail(b, GLESC_ERROR_UNSUPPORTED,
                       "matmul: a weight split into chunks must be a whole 2-D tensor, not a "
                       "view or batched");
    return GLESC_OK;
}

/* Can the GEMV read matmul mm's weight through the fast units (a uvec4
 * binding)? Not when the activation shares the weight's memory (it is
 * read as words). One of the bits of the op's variant (codegen.c), so the
 * plan hash covers it. */
bool kernels_matmul_units(const glesc_tensor *mm)
{
    return kernels_wload_units(mm->src[0]) && mm->src[0]->owner != mm->src[1]->owner;
}

/* Does the GEMV read w a vec4 at a time where its class's quad says so
 * (GEMV_QUAD)? Through the snippet's unit_q4 with the fast units, through
 * dq4 for a block type without them (wload.c). */
static bool gemv_quad(const glesc_tensor *w, bool units)
{
    return units ? kernels_wload_uquad(w) : graph_dtype_quant(w->dtype);
}

/* A weight's binding (a uvec4 array where units) and its loader fn: the
 * 32-element units both kernels read. */
static int weight_loader(kb *b, const glesc_tensor *w, const char *fn, bool units, unsigned extra)
{
    /* the quarter units read a word at a time: a uint binding (QW one load),
     * but f32's, a uvec4 each (QW4 one load: fewer instructions, and 32
     * registers on Mali all the same; f16's and bf16's pair took more) */
    if (units && (extra & KERNELS_WLOAD_UQUAD) && kernels_wload_uquad(w) &&
        w->dtype != GLESC_DTYPE_F32)
        extra |= KERNELS_WLOAD_WORDS;
    int wb = units && !(extra & KERNELS_WLOAD_WORDS) ? kb_binding_uvec4(b, w->owner, 0)
                                                     : kb_binding(b, w->owner, 0, false);
    char buf[16];
    snprintf(buf, sizeof buf, "t%d", wb);
    unsigned generic = KERNELS_WLOAD_UHALF | (gemv_quad(w, false) ? KERNELS_WLOAD_UQUAD : 0u);
    kernels_wload_emit(b, w, fn, buf,
                       KERNELS_WLOAD_UNIT | (units ? KERNELS_WLOAD_UVEC4 | extra : extra & generic),
                       "K");
    return wb;
}

void kernels_mm_common(kb *b, mm_ctx *mc)
{
    const glesc_tensor *w = mc->w, *x = mc->x, *a = mc->a;
    check_chunks(b, w);
    mc->n_chunks = CORE_MAX(1, w->owner->st.n_chunks);
    mc->chunk_rows = mc->n_chunks > 1 ? w->owner->st.chunk_rows : w->ne[1];
    /* every matmul's variant carries this bit, so the plan hash covers it */
    mc->units = kernels_matmul_units(a) && (!mc->p || kernels_matmul_units(mc->p));
    mc->wb = weight_loader(b, w, "load_w", mc->units, mc->wload_extra);
    if (mc->p) {
        const glesc_tensor *w2 = mc->p->src[0];
        check_chunks(b, w2);
        if (CORE_MAX(1, w2->owner->st.n_chunks) != mc->n_chunks)
            kb_fail(b, GLESC_ERROR_UNSUPPORTED, "matmul pair: weights chunked differently");
        mc->wb2 = weight_loader(b, w2, "load_u", mc->units, mc->wload_extra);
    }
    kb_param_u(b, "K", (uint64_t)w->ne[0]);
    kb_param_u(b, "M", (uint64_t)x->ne[1]);
    kb_param_u(b, "xb2", (uint64_t)x->ne[2]);
    kb_param_u(b, "r2", (uint64_t)(x->ne[2] / w->ne[2]));
    kb_param_u(b, "r3", (uint64_t)(x->ne[3] / w->ne[3]));
    kb_param_u(b, "w_off", mc->n_chunks > 1 ? 0 : w->offs);
    kb_param_u(b, "w_nb1", (uint64_t)w->nb[1]);
    kb_param_u(b, "w_nb2", w->ne[2] == 1 ? 0 : (uint64_t)w->nb[2]);
    kb_param_u(b, "w_nb3", w->ne[3] == 1 ? 0 : (uint64_t)w->nb[3]);
    if (mc->p) {
        const glesc_tensor *w2 = mc->p->src[0];
        kb_param_u(b, "w2_off", mc->n_chunks > 1 ? 0 : w2->offs);
        kb_param_u(b, "w2_nb1", (uint64_t)w2->nb[1]);
        kb_param_u(b, "w2_nb2", w2->ne[2] == 1 ? 0 : (uint64_t)w2->nb[2]);
        kb_param_u(b, "w2_nb3", w2->ne[3] == 1 ? 0 : (uint64_t)w2->nb[3]);
    }
    mc->p_base = kb_param_u(b, "n_base", 0);
    mc->p_count = kb_param_u(b, "n_count", (uint64_t)CORE_MIN(mc->chunk_rows, a->ne[0]));
    for (int i = 0; i < mc->n_sib; i++) {
        mm_sib *sb = &mc->sib[i];
        check_chunks(b, sb->w);
        sb->n_chunks = CORE_MAX(1, sb->w->owner->st.n_chunks);
        sb->chunk_rows = sb->n_chunks > 1 ? sb->w->owner->st.chunk_rows : sb->w->ne[1];
        char fn[32], name[32];
        snprintf(fn, sizeof fn, "load_s%d", i + 1);
        sb->units = kernels_matmul_units(sb->a);
        sb->wb = weight_loader(b, sb->w, fn, sb->units, mc->wload_extra);
        snprintf(name, sizeof name, "s%d_off", i + 1);
        kb_param_u(b, name, sb->n_chunks > 1 ? 0 : sb->w->offs);
        snprintf(name, sizeof name, "s%d_nb1", i + 1);
        kb_param_u(b, name, (uint64_t)sb->w->nb[1]);
        snprintf(name, sizeof name, "s%d_base", i + 1);
        sb->p_base = kb_param_u(b, name, 0);
        snprintf(name, sizeof name, "s%d_count", i + 1);
        sb->p_count = kb_param_u(b, name, (uint64_t)CORE_MIN(sb->chunk_rows, sb->a->ne[0]));
        snprintf(name, sizeof name, "s%d_g0", i + 1);
        sb->p_g0 = kb_param_u(b, name, 0);
    }
}

void kernels_mm_member_open(kb *b, const mm_ctx *mc, int j)
{
    if (!mc->n_sib)
        return;
    if (j == 0)
        kb_line(b, "if (sel == 0u) {");
    else
        kb_line(b, "} else if (sel == %du) {", j);
}

void kernels_mm_member_close(kb *b, const mm_ctx *mc)
{
    if (mc->n_sib)
        kb_line(b, "}");
}

const char *kernels_mm_loader(int j, char buf[16])
{
    if (j == 0)
        snprintf(buf, 16, "load_w");
    else
        snprintf(buf, 16, "load_s%d", j % 10);
    return buf;
}

void kernels_mm_member_store(kb *b, int j, const char *const co[4], const char *value,
                             const char *partner)
{
    if (j == 0)
        kb_store_out(b, co, value, partner);
    else
        kb_store_sib(b, j - 1, co, value);
}

void kernels_mm_x_hook(kb *b, const mm_ctx *mc, const glesc_tensor *nrm, const char *kind)
{
    if (b->k) {
        char sig[96];
        snprintf(sig, sizeof sig, "float %s_x(uint k, uint c, uint b2, uint b3, inout float sq)",
                 kind);
        emit_kernel_function_begin(b->k, sig);
    }
    char xv[16];
    const char *cx[4] = {"k", "c", "b2", "b3"};
    kb_expr(b, mc->x, cx, xv);
    if (nrm) {
        if (b->norm_evals != 1)
            kb_fail(b, GLESC_ERROR_STATE, "matmul: the folded norm's input is read %d times",
                    b->norm_evals);
        kb_line(b, "sq += %s * %s;", b->norm_in, b->norm_in);
    }
    kb_line(b, "return %s;", xv);
    if (b->k)
        emit_kernel_function_end(b->k);
}

void kernels_mm_norm_scale_hook(kb *b, const glesc_tensor *nrm, const char *kind)
{
    if (!nrm)
        return;
    if (b->k) {
        char sig[64];
        snprintf(sig, sizeof sig, "float %s_norm_scale(float sq)", kind);
        emit_kernel_function_begin(b->k, sig);
    }
    kb_row_norm_scale(b, nrm, "rs", "sq", "K");
    kb_line(b, "return rs;");
    if (b->k)
        emit_kernel_function_end(b->k);
}

void kernels_mm_member_stores(kb *b, const mm_ctx *mc, bool dual)
{
    const char *co[4] = {"n", "c", "b2", "b3"};
    for (int j = 0; j <= mc->n_sib; j++) {
        kernels_mm_member_open(b, mc, j);
        kernels_mm_member_store(b, j, co, "dot", dual ? "dot2" : NULL);
    }
    kernels_mm_member_close(b, mc);
}

/* One dispatch per weight chunk (a group: dispatch c computes chunk c of
 * every member that has one, each member's blocks of rows after the
 * previous member's). rows_per_wg: output rows per block; max_groups: the
 * most workgroups of a dispatch (0: one per block; the GEMV's workgroups
 * loop over the blocks and read their count from mc->p_blocks); spread:
 * the workgroups spread over x and y (the device caps x at 65535; the GEMM
 * keeps y for its column tiles); m_groups: workgroups along y per block
 * (the GEMM's column tiles); batches: along z, times mc->split's parts. */
void kernels_mm_dispatch(kb *b, const mm_ctx *mc, int64_t rows_per_wg, uint64_t max_groups,
                         bool spread, int64_t m_groups, int64_t batches)
{
    int n_disp = mc->n_chunks;
    for (int i = 0; i < mc->n_sib; i++)
        n_disp = CORE_MAX(n_disp, mc->sib[i].n_chunks);
    for (int c = 0; c < n_disp; c++) {
        int64_t base = (int64_t)c * mc->chunk_rows;
        int64_t count = c < mc->n_chunks ? CORE_MIN(mc->chunk_rows, mc->a->ne[0] - base) : 0;
        kb_param_set_u(b, mc->p_base, (uint64_t)base);
        kb_param_set_u(b, mc->p_count, (uint64_t)count);
        kb_binding_set_chunk(b, mc->wb, CORE_MIN(c, mc->n_chunks - 1));
        if (mc->p)
            kb_binding_set_chunk(b, mc->wb2, c);
        int64_t wgs = (count + rows_per_wg - 1) / rows_per_wg;
        for (int i = 0; i < mc->n_sib; i++) {
            const mm_sib *sb = &mc->sib[i];
            int64_t sbase = (int64_t)c * sb->chunk_rows;
            int64_t scount = c < sb->n_chunks ? CORE_MIN(sb->chunk_rows, sb->a->ne[0] - sbase) : 0;
            kb_param_set_u(b, sb->p_base, (uint64_t)sbase);
            kb_param_set_u(b, sb->p_count, (uint64_t)scount);
            kb_param_set_u(b, sb->p_g0, (uint64_t)wgs);
            kb_binding_set_chunk(b, sb->wb, CORE_MIN(c, sb->n_chunks - 1));
            wgs += (scount + rows_per_wg - 1) / rows_per_wg;
        }
        if (max_groups) {
            kb_param_set_u(b, mc->p_blocks, (uint64_t)wgs);
            wgs = CORE_MIN(wgs, (int64_t)max_groups);
        }
        uint64_t x = (uint64_t)wgs, y = 1;
        while (spread && x > 65535) {
            y *= 2;
            x = ((uint64_t)wgs + y - 1) / y;
        }
        int64_t parts = mc->split ? mc->split(b, mc, (int64_t)(x * y) * m_groups * batches) : 1;
        kb_dispatch_groups(b, (uint32_t)x, (uint32_t)(y * (uint64_t)m_groups),
                           (uint32_t)(batches * parts));
    }
}

/* ---- GEMV ---- */

/* The GEMV's shape: invocations per workgroup, per row team, rows per
 * team, units in flight per lane, x elements per slice and column, and
 * whether teams reduce with subgroupAdd. */
typedef struct gemv_cfg {
    int wg, team, ks, nr, unroll, xs;
    int fill;   /* vec4 of x an invocation loads at once into shared memory */
    int red;    /* vec4 of shared memory for the partial sums */
    int groups; /* workgroups a dispatch has at most (0: one per block of rows) */
    bool subgroup;
    bool raw;  /* pipelined units (gemv_units.glsl; opt-in, see gemv_config) */
    bool half; /* units a run at a time (gemv_units.glsl's GEMV_HALF) */
    bool quad; /* and a vec4 at a time where the loaders allow (GEMV_QUAD) */
} gemv_cfg;

#define GEMV_SHARED_MAX (48 * 1024) /* bytes of shared memory a GEMV may use */
#define GEMV_XS_MAX 4096            /* x elements per column and slice, at most */

/* GLESC_GEMV="wg=256,team=32,nr=2,unroll=2,xs=4096,subgroup=0,raw=0,fill=4,half=0,quad=0": a tuning
 * aid overriding the fields it names (read on every generation, so a
 * process sees one value: plans and programs stay consistent). */
static void gemv_env(gemv_cfg *c)
{
    static const char *const keys[] = {"wg", "team",     "groups", "ks",   "nr",   "unroll",
                                       "xs", "subgroup", "raw",    "fill", "half", "quad"};
    int v[] = {c->wg, c->team,     c->groups, c->ks,   c->nr,   c->unroll,
               c->xs, c->subgroup, c->raw,    c->fill, c->half, c->quad};
    kernels_env_ints("GLESC_GEMV", keys, v, 12, INT_MIN);
    c->wg = v[0];
    c->team = v[1];
    c->groups = v[2];
    c->ks = v[3];
    c->nr = v[4];
    c->unroll = v[5];
    c->xs = v[6];
    c->subgroup = c->subgroup && v[7];
    c->raw = v[8] != 0;
    c->fill = v[9];
    c->half = v[10] != 0;
    c->quad = v[11] != 0;
}

/* The columns a pass of the GEMV of m columns (gemv.glsl's MCOLS): 1 for
 * decode, else the device class's, at most gemv_max_m; every m from 2 to
 * gemv_max_m runs the same program, in passes where m is larger. */
static int gemv_cols(const glesc_context *ctx, int m, int gemv_max_m)
{
    return m == 1 ? 1 : CORE_MAX(1, CORE_MIN(kernels_class_of(ctx)->gemv.cols, gemv_max_m));
}

/* Depends on the device (caps and class), the weight type, the columns a
 * pass, the pair and a folded norm (the plan hash covers the last four; a
 * plan cache belongs to one context). */
static gemv_cfg gemv_config(const glesc_context *ctx, glesc_dtype t, int m, bool dual, bool norm)
{
    const glesc_caps *caps = &ctx->caps;
    const kernels_class *kc = kernels_class_of(ctx);
    gemv_cfg c;
    /* the class's workgroup (256 invocations keep a large GPU busy: the
     * decode needs many loads in flight; llvmpipe's barriers and coroutines
     * make small workgroups faster there), within the caps. GLES
     * guarantees 128. */
    c.wg = kernels_pow2_floor(CORE_MIN(
        kc->gemv.wg, CORE_MIN(caps->max_compute_invocations, caps->max_workgroup_size[0])));
    c.subgroup = caps->has_subgroup && (caps->subgroup_features & GLESC_SUBGROUP_ARITHMETIC) &&
                 caps->subgroup_size >= 4 && caps->subgroup_size <= c.wg &&
                 c.wg % caps->subgroup_size == 0;
    c.team = c.subgroup ? caps->subgroup_size : CORE_MIN(kc->gemv.team, c.wg);
    c.ks = 1;
    c.groups = kc->gemv.groups;
    c.nr = m == 1 ? kc->gemv.nr1 : kc->gemv.nrm;
    /* units in flight: the class's where a unit is decoded from few bytes;
     * the plain types' units are 64 or 128 bytes already (on an H200 one
     * unit ran 5-8% faster there, two 2-4% faster for q4_0, q8_0) */
    c.unroll = graph_dtype_quant(t) ? kc->gemv.unroll_q : 1;
    c.fill = kc->gemv.fill;
    c.xs = CORE_MIN(kc->gemv.xs, GEMV_XS_MAX);
    /* the next unit's words loaded while this one is decoded (where the
     * loaders split their units): opt-in (raw=1). It speeds up a lone
     * large GEMV of the legacy block types, but a whole decode step is
     * slower with it (its K = 2048 GEMVs already have two units a lane in
     * flight), also where only lanes of more units take it. On llvmpipe
     * nothing waits on memory. */
    c.raw = false;
    c.half = kc->gemv.half;
    c.quad = kc->gemv.quad;
    gemv_env(&c);
    c.raw = c.raw && !c.half; /* the half units are not pipelined */
    c.quad = c.quad && c.half;
    c.wg = kernels_pow2_floor(CORE_MAX(1, CORE_MIN(c.wg, caps->max_compute_invocations)));
    c.subgroup = c.subgroup && c.team == caps->subgroup_size && c.wg % c.team == 0;
    c.team = CORE_MAX(1, CORE_MIN(c.team, c.wg));
    if (c.wg % c.team)
        c.team = kernels_pow2_floor(c.team);
    c.nr = CORE_MAX(1, CORE_MIN(c.nr, 8));
    c.ks = kernels_pow2_floor(CORE_MAX(1, CORE_MIN(c.ks, c.wg / c.team)));
    c.unroll = c.unroll >= 8 ? 8 : c.unroll >= 4 ? 4 : c.unroll >= 2 ? 2 : 1; /* the units' steps */
    c.fill = CORE_MAX(1, CORE_MIN(c.fill, 8));
    c.groups = CORE_MAX(0, c.groups);
    /* Shared memory: the partial sums, then x slices of what is left for
     * every column, in whole 256-element blocks (and 1/9 spare, gemv.glsl's
     * padding). Where not even one block fits (16 KiB, many columns, the
     * pair), fewer rows a team, then smaller workgroups, until it does. */
    int limit = CORE_MIN(caps->max_compute_shared_memory, GEMV_SHARED_MAX);
    for (;;) {
        int nacc4 = (c.nr * m + 3) / 4;
        c.red = c.subgroup ? (c.ks > 1 ? (c.wg / c.team * c.nr * m * (dual ? 2 : 1) + 3) / 4 : 0)
                           : nacc4 * c.wg * (dual ? 2 : 1);
        int budget = limit - 16 * c.red - (norm ? 4 * c.wg : 0); /* wg_reduce_sum's scratch */
        int xs = CORE_MIN(c.xs, budget * 8 / 9 / (4 * m)) / 256 * 256;
        if (xs >= 256 || (c.nr == 1 && c.wg <= c.team)) {
            c.xs = CORE_MAX(256, xs); /* gen_gemv reports a device that is too small */
            return c;
        }
        if (c.nr > 1) {
            c.nr /= 2;
        } else {
            c.wg /= 2;
            c.ks = CORE_MAX(1, CORE_MIN(c.ks, c.wg / c.team));
        }
    }
}

/* A copy of glsl/graph/gemv_units.glsl per matmul of the kernel (member j
 * reads its weight through loader load_w or load_s<j>), its names defined
 * around it. */
static void gemv_units_copies(kb *b, const mm_ctx *mc, bool raw, bool half, bool quad)
{
    static const char *const names[] = {
        "GEMV_UNITS", "GEMV_STEPS", "GEMV_STEP", "GEMV_UX",   "GEMV_UDOT", "GEMV_LOAD", "GEMV_DEC",
        "GEMV_RAW",   "W_WAT",      "W_WUNIT",   "W_WUNIT_X", "W_MINS",    "W_WRAW",    "W_WDEC",
        "U_WUNIT",    "U_WRAW",     "U_WDEC",    "W_WUHALF",  "U_WUHALF",  "GEMV_QUAD", "W_WUQ",
        "W_WUAB",     "U_WUQ",      "U_WUAB",    "GEMV_PLAIN"};
    const char *text = emit_snippet_text("graph/gemv_units");
    for (int j = 0; text && j <= mc->n_sib; j++) {
        char fn[16], name[24];
        kernels_mm_loader(j, fn);
        sbuf s;
        sbuf_init(&s);
        sbuf_appendf(
            &s,
            "#define GEMV_UNITS gemv_units_%d\n#define GEMV_STEPS gemv_steps_%d\n"
            "#define GEMV_STEP gemv_step_%d\n"
            "#define GEMV_UX gemv_ux_%d\n#define GEMV_UDOT gemv_udot_%d\n"
            "#define W_WAT %s_wat\n#define W_WUNIT %s_wunit\n#define W_WUNIT_X %s_wunit_x\n"
            "#ifdef %s_MINS\n#define W_MINS 1\n#endif\n",
            j, j, j, j, j, fn, fn, fn, fn);
        if (j == 0 && mc->p)
            sbuf_append(&s, "#define U_WUNIT load_u_wunit\n");
        if (half) {
            sbuf_appendf(&s, "#define W_WUHALF %s_wuhalf\n", fn);
            if (j == 0 && mc->p)
                sbuf_append(&s, "#define U_WUHALF load_u_wuhalf\n");
        }
        /* the pipelined units where this member's loaders split theirs */
        const glesc_tensor *w = j ? mc->sib[j - 1].w : mc->w;
        bool units = j ? mc->sib[j - 1].units : mc->units;
        if (raw && units && kernels_wload_raw(w) &&
            (j || !mc->p || kernels_wload_raw(mc->p->src[0]))) {
            sbuf_appendf(&s,
                         "#define GEMV_RAW 1\n#define GEMV_LOAD gemv_load_%d\n"
                         "#define GEMV_DEC gemv_dec_%d\n#define W_WRAW %s_wraw\n"
                         "#define W_WDEC %s_wdec\n",
                         j, j, fn, fn);
            if (j == 0 && mc->p)
                sbuf_append(&s, "#define U_WRAW load_u_wraw\n#define U_WDEC load_u_wdec\n");
        }
        /* the quarter units where this member's loaders (and the pair's) have them */
        if (half && quad && gemv_quad(w, units) &&
            (j || !mc->p || gemv_quad(mc->p->src[0], units))) {
            sbuf_appendf(&s, "#define GEMV_QUAD 1\n#define W_WUQ %s_wuq\n#define W_WUAB %s_wuab\n",
                         fn, fn);
            if (j == 0 && mc->p)
                sbuf_append(&s, "#define U_WUQ load_u_wuq\n#define U_WUAB load_u_wuab\n");
            /* plain weights (and pair): runs of scale 1, summed straight into acc */
            if (!graph_dtype_quant(w->dtype) &&
                (j || !mc->p || !graph_dtype_quant(mc->p->src[0]->dtype)))
                sbuf_append(&s, "#define GEMV_PLAIN 1\n");
        }
        sbuf_append(&s, text);
        for (size_t i = 0; i < CORE_ARRAY_LEN(names); i++)
            sbuf_appendf(&s, "#undef %s\n", names[i]);
        snprintf(name, sizeof name, "gemv_units_%d", j);
        if (sbuf_str(&s))
            emit_kernel_helper(b->k, name, sbuf_str(&s));
        else
            kb_fail(b, GLESC_ERROR_OUT_OF_MEMORY, "GEMV units");
        sbuf_free(&s);
    }
    if (!text)
        kb_fail(b, GLESC_ERROR_STATE, "no GLSL snippet graph/gemv_units");
}

/* A folded arg max (fuse.c: gk->reduce, over the rows of one column): the
 * store hook keeps each invocation's best (value, row) instead of storing,
 * and after gemv_main the workgroups combine theirs, the last one storing
 * the result through the reduction's epilogue (glsl/graph/argmax.glsl).
 * Candidates are staged in xs, free once the rows are done, where it holds
 * one per invocation; else in arrays of their own (own_stage). */
static void gemv_argmax_decl(kb *b, mm_ctx *mc, int wg, bool own_stage, bool norm, bool lean)
{
    int sc = kb_scratch(b, 0); /* its size comes with the dispatches */
    mc->p_am_g0 = kb_param_u(b, "am_g0", 0);
    mc->p_am_total = kb_param_u(b, "am_total", 0);
    if (!b->k)
        return;
    if (!norm) { /* wg_argmax's barriers (common/reduce) */
        emit_kernel_shared(b->k, "float", "red_scratch", wg);
        emit_kernel_snippet(b->k, "common/reduce");
    }
    /* the "last workgroup" flag in wg_reduce_sum's scratch, free by then */
    emit_kernel_define(b->k, "AM_LAST", "red_scratch[0]");
    if (own_stage) {
        emit_kernel_shared(b->k, "float", "am_v", wg);
        emit_kernel_shared(b->k, "float", "am_i", wg);
    } else {
        emit_kernel_define(b->k, "AM_V(k)", "xs[k].x");
        emit_kernel_define(b->k, "AM_I(k)", "xs[k].y");
    }
    emit_kernel_define(b->k, "AM_SCRATCH(k)", "t%d[k]", sc);
    emit_kernel_define(b->k, "AM_BASE", "%du", KB_SCRATCH_COUNTERS);
    emit_kernel_snippet(b->k, "graph/reduce"); /* NEG_INF */
    emit_kernel_snippet(b->k, "graph/argmax");
    if (lean) {
        /* GEMV_LEAN: in shared memory, a slot an invocation (main sets it
         * before gemv_main), not two registers held across the GEMV's loops */
        emit_kernel_shared(b->k, "vec2", "am_best", wg);
        emit_kernel_helper(b->k, "gemv_argmax",
                           "// this invocation's best row so far (its own slot)\n"
                           "#define red_bv am_best[gl_LocalInvocationIndex].x\n"
                           "#define red_bi am_best[gl_LocalInvocationIndex].y\n");
    } else {
        emit_kernel_helper(b->k, "gemv_argmax",
                           "// this invocation's best row so far\nfloat red_bv = NEG_INF;\n"
                           "float red_bi = AM_NONE;\n");
    }
    emit_kernel_comment(b->k, "arg max of the rows folded in (a last-workgroup combine)");
}

/* The store hook's part: row n's value (after the epilogue up to the arg
 * max's source) competes with the invocation's best. */
static void gemv_argmax_store(kb *b, const char *const co[4])
{
    char v[16];
    kb_reduce_input(b, co, "dot", NULL, v);
    kb_line(b, "if (am_better(%s, float(n), red_bv, red_bi)) {", v);
    kb_line(b, "red_bv = %s;", v);
    kb_line(b, "red_bi = float(n);");
    kb_line(b, "}");
}

/* After the dispatches are recorded (bind mode): number the workgroups of
 * all of them (am_g0, each dispatch's first), their count (am_total) and
 * the scratch: a slot per workgroup after the counters. */
static void gemv_argmax_number(kb *b, const mm_ctx *mc)
{
    uint64_t total = 0, done = 0;
    for (int d = 0; d < b->n_disp; d++)
        total += (uint64_t)b->disp[d].groups[0] * b->disp[d].groups[1] * b->disp[d].groups[2];
    for (int d = 0; d < b->n_disp; d++) {
        kb_dispatch *ds = &b->disp[d];
        ds->param[mc->p_am_g0] = GL_PARAM_U(done);
        ds->param[mc->p_am_total] = GL_PARAM_U(total);
        ds->scratch_bytes = 4 * ((uint64_t)KB_SCRATCH_COUNTERS + 2 * total);
        done += (uint64_t)ds->groups[0] * ds->groups[1] * ds->groups[2];
    }
}

/* main's part after gemv_main: the combine and the store of the result. */
static void gemv_argmax_finish(kb *b)
{
    kb_line(b, "float am_bv = red_bv;");
    kb_line(b, "float am_bi = red_bi;");
    kb_line(b, "if (argmax_across(am_bv, am_bi) && gl_LocalInvocationIndex == 0u) {");
    kb_line(b, "float am_r = am_result(am_bv, am_bi);");
    const char *c0[4] = {"0u", "0u", "0u", "0u"};
    kb_store_reduced(b, c0, "am_r");
    kb_line(b, "}");
}

static glesc_status gen_gemv(kb *b, mm_ctx *mc, int gemv_max_m)
{
    bool dual = mc->p != NULL;
    /* the columns a pass; x's own (a uniform) may be more */
    int m = gemv_cols(b->ctx, (int)mc->x->ne[1], gemv_max_m);
    /* a folded rms_norm (reduction prologue): the squares of each column's
     * input summed where x is loaded, the scale applied before the store */
    const glesc_tensor *nrm = kb_row_norm(b, mc->x);
    const glesc_tensor *red = b->gk->reduce;
    if (red && (mc->x->ne[1] != 1 || dual || mc->n_sib || mc->x->ne[2] * mc->x->ne[3] != 1))
        return kb_fail(b, GLESC_ERROR_STATE,
                       "matmul: an arg max folds only into the product of one column");
    /* a folded arg max needs common/reduce's scratch as a folded norm does */
    gemv_cfg c = gemv_config(b->ctx, mc->w->dtype, m, dual, nrm != NULL || red != NULL);
    /* x's slices and the partial sums (vec4), a folded norm's scratch */
    int xs_vec4 = m * (c.xs / 4 + c.xs / 32); /* gemv.glsl's XS4P a column */
    int bytes = 16 * (xs_vec4 + c.red) + (nrm || red ? 4 * c.wg : 0);
    bool own_stage = red && xs_vec4 < c.wg;
    bytes += own_stage ? 8 * c.wg : 0;
    bytes += red && c.quad ? 8 * c.wg : 0; /* GEMV_LEAN's am_best */
    if (bytes > b->ctx->caps.max_compute_shared_memory)
        return kb_fail(b, GLESC_ERROR_LIMIT,
                       "GEMV: %d bytes of shared memory needed, the device has %d (m = %d)", bytes,
                       b->ctx->caps.max_compute_shared_memory, m);
    if (b->k) {
        emit_kernel_local_size(b->k, c.wg, 1, 1);
        if (c.subgroup) {
            emit_kernel_extension(b->k, "GL_KHR_shader_subgroup_basic");
            emit_kernel_extension(b->k, "GL_KHR_shader_subgroup_arithmetic");
            emit_kernel_define(b->k, "GEMV_SUBGROUP", "1");
            if (nrm)
                emit_kernel_define(b->k, "GLESC_SUBGROUP_ARITH", "1"); /* common/reduce */
        }
        emit_kernel_snippet(b->k, "graph/eltwise");
        emit_kernel_define(b->k, "TEAM", "%du", c.team);
        emit_kernel_define(b->k, "KSPLIT", "%du", c.ks);
        emit_kernel_define(b->k, "NR", "%du", c.nr);
        emit_kernel_define(b->k, "MCOLS", "%du", m);
        /* passes over the columns where there may be more than MCOLS: the
         * GEMV of more columns, and every GEMV of a class that takes a
         * column a pass (so that its decode program serves short prompts) */
        if (mc->x->ne[1] > 1 || kernels_class_of(b->ctx)->gemv.cols == 1)
            emit_kernel_define(b->k, "GEMV_PASSES", "1");
        emit_kernel_define(b->k, "XS", "%du", c.xs);
        emit_kernel_define(b->k, "UNROLL", "%du", c.unroll);
        emit_kernel_define(b->k, "FILL", "%du", c.fill);
        emit_kernel_define(b->k, "NMEMB", "%du", 1 + mc->n_sib);
        if (dual)
            emit_kernel_define(b->k, "PAIR", "1");
        if (c.half)
            emit_kernel_define(b->k, "GEMV_HALF", "1");
        if (c.quad)
            emit_kernel_define(b->k, "GEMV_LEAN", "1");
        emit_kernel_shared(b->k, "vec4", "xs", xs_vec4);
        if (c.red)
            emit_kernel_shared(b->k, "vec4", "xr", c.red);
        if (nrm) {
            emit_kernel_define(b->k, "GEMV_NORM", "1");
            emit_kernel_shared(b->k, "float", "red_scratch", c.wg);
            emit_kernel_snippet(b->k, "common/reduce");
        }
        emit_kernel_comment(b->k,
                            "GEMV (glsl/graph/gemv.glsl): %d rows per workgroup of %d, teams of "
                            "%d, %d per row, %s reduction, x in slices of %d, %d units in flight",
                            c.wg / c.team / c.ks * c.nr, c.wg, c.team, c.ks,
                            c.subgroup ? "subgroup" : "shared", c.xs, c.unroll);
        if (c.raw)
            emit_kernel_comment(b->k, "units pipelined where the loaders split them (GEMV_RAW, "
                                      "K over two units a lane)");
        if (mc->n_sib)
            emit_kernel_comment(b->k,
                                "grouped: %d matmuls of one activation, blocks of rows pick "
                                "theirs by range",
                                1 + mc->n_sib);
    }
    mc->wload_extra = (c.raw ? KERNELS_WLOAD_RAW : 0u) | (c.half ? KERNELS_WLOAD_UHALF : 0u) |
                      (c.quad ? KERNELS_WLOAD_UQUAD : 0u);
    kernels_mm_common(b, mc);
    mc->p_blocks = kb_param_u(b, "n_blocks", 0);
    if (c.half)
        kb_param_u(b, "gemv_two", 2); /* a uniform: the runs' loops stay loops */
    if (red)
        gemv_argmax_decl(b, mc, c.wg, own_stage, nrm != NULL, c.quad);
    if (b->k) {
        emit_kernel_snippet(b->k, "graph/gemv");
        gemv_units_copies(b, mc, c.raw, c.half, c.quad);
    }
    /* the hooks gemv.glsl calls: x with its prologue (and a folded norm's
     * squares), the stores with their epilogues, the norm's scale */
    kernels_mm_x_hook(b, mc, nrm, "gemv");
    if (b->k)
        emit_kernel_function_begin(b->k, "void gemv_store(uint sel, uint n, uint c, uint b2, "
                                         "uint b3, float dot, float dot2)");
    if (red)
        gemv_argmax_store(b, (const char *[4]){"n", "c", "b2", "b3"});
    else
        kernels_mm_member_stores(b, mc, dual);
    if (b->k)
        emit_kernel_function_end(b->k);
    kernels_mm_norm_scale_hook(b, nrm, "gemv");
    if (red && c.quad) /* a loop: its address is not the store hook's (CSE would hold that) */
        kb_line(b, "for (uint i = gl_LocalInvocationIndex; i < WG_SIZE; i += WG_SIZE) "
                   "am_best[i] = vec2(NEG_INF, AM_NONE);");
    kb_line(b, "gemv_main();");
    if (red)
        gemv_argmax_finish(b);
    /* At most c.groups workgroups, each taking several blocks, where x fits
     * in one slice (loaded once for them all); where it does not (K > XS:
     * the portable 16 KiB at K = 4096), a workgroup per block, which still
     * reads n_blocks: every block loads x again anyway, and the blocks in
     * one workgroup's loop only wait on each other (docs/performance.md:
     * the 7B shape's portable decode). A size, so a dispatch's choice, not
     * the program's. */
    bool cap = c.groups && mc->w->ne[0] <= c.xs;
    kernels_mm_dispatch(b, mc, c.wg / c.team / c.ks * c.nr,
                        cap ? (uint64_t)c.groups : (uint64_t)INT64_MAX, true, 1,
                        mc->x->ne[2] * mc->x->ne[3]);
    if (red)
        gemv_argmax_number(b, mc);
    return b->st;
}

glesc_status kernels_gen_matmul(kb *b)
{
    mm_ctx mc = {0};
    mc.p_am_g0 = mc.p_am_total = -1;
    mc.a = b->gk->anchor;
    mc.p = b->gk->partner;
    mc.w = mc.a->src[0];
    mc.x = mc.a->src[1];
    mc.n_sib = b->gk->n_sib;
    for (int i = 0; i < mc.n_sib; i++) {
        mc.sib[i].a = b->gk->sib[i];
        mc.sib[i].w = b->gk->sib[i]->src[0];
    }
    if (mc.x->ne[2] * mc.x->ne[3] > 65535)
        return kb_fail(b, GLESC_ERROR_LIMIT, "matmul: %lld batches exceed 65535",
                       (long long)(mc.x->ne[2] * mc.x->ne[3]));
    /* the op's variant (codegen.c), which the plan hash covers, asks the
     * same */
    int mmax = b->opts ? b->opts->gemv_max_m : 0;
    if (kernels_matmul_gemv(mc.a, mmax))
        return gen_gemv(b, &mc, kernels_gemv_max_m(mmax));
    return kernels_gen_gemm(b, &mc);
}

int kernels_gemv_max_m(int gemv_max_m)
{
    return gemv_max_m ? gemv_max_m : GRAPH_GEMV_MAX_M;
}

bool kernels_matmul_gemv(const glesc_tensor *mm, int gemv_max_m)
{
    return !mm->batch_kernel && mm->src[1]->ne[1] <= kernels_gemv_max_m(gemv_max_m);
}

/* The types whose gate/up pair compiled within 32 registers on Mali-G610
 * and G52 with the quarter units (2 threads; the device matrix, decode,
 * docs/devices.md): one word a vec4 of quants and one scale a block, and
 * the plain types (their quarter units of scale 1 summed straight into
 * the accumulators, gemv_units.glsl's GEMV_PLAIN). The other block types'
 * (a second word for the high bits, offsets, K-quant scales) took 36-46,
 * 1 thread, where their GEMVs alone take at most 32. */
bool kernels_gemv_pair_lean(const glesc_tensor *w)
{
    return w->dtype == GLESC_DTYPE_Q4_0 || w->dtype == GLESC_DTYPE_Q8_0 ||
           !graph_dtype_quant(w->dtype);
}
