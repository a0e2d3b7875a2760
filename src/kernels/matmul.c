/*
 * matmul.c — W [k, n, b2w, b3w] × X [k, m, b2, b3] → [n, m, b2, b3] (ggml's
 * convention: both operands run along k in dimension 0).
 *
 * Two kernels, chosen by the op's variant (m against the graph's
 * gemv_max_m): GEMV (glsl/graph/gemv.glsl), the decode's matrix-vector
 * product for every column m ≤ gemv_max_m at once, each weight row read
 * once: teams of invocations (a subgroup each where the device has
 * subgroup arithmetic) share rows, every lane takes 32-element units of
 * the row whose scales it decodes once (wload.c: uvec4 loads where the
 * type's layout allows), x is loaded once per workgroup into shared memory
 * (in slices where K is long) and read by all its rows; GEMM, 64×64 output
 * tiles through shared memory, 16 k at a time, 4×4 outputs per invocation.
 *
 * The weight is read through its type's loader (wload.c): f32, f16, bf16
 * and the ggml block types alike; the GEMM four consecutive k at a time
 * (load_w4, one dq4 of a quantized block) whenever the weight allows it
 * (ne0 % 4 == 0, word-aligned rows: the variant's bit 16), else element by
 * element. X is read with kb_expr (any strides, f16, broadcast batches; the
 * GEMV through its generated hook gemv_x). The result goes through
 * kb_store_out (the GEMV's hook gemv_store): bias, activation and residual
 * epilogues come for free, and with a partner (a second matmul of the same
 * X, e.g. gate and up) both dot products run in the one kernel and the
 * epilogue sees both values (silu(g)·u).
 *
 * A weight larger than the storage-block limit is split in row chunks
 * (tensor.c); the kernel then runs once per chunk, binding that chunk and
 * producing its rows n_base .. n_base + n_count.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#define TILE 64 /* output rows and columns per GEMM workgroup */
#define TK 16   /* k per shared-memory step */

typedef struct mm_ctx {
    const glesc_tensor *a, *p, *w, *x; /* anchor, partner, weights, activation */
    int wb, wb2;                       /* bindings of W and the partner's W */
    int p_base, p_count;               /* param indices of n_base, n_count */
    bool vec4;                         /* weights read 4 elements at a time (load_w4) */
    bool units;                        /* GEMV: the fast units, bindings as uvec4 */
    int64_t chunk_rows;
    int n_chunks;
} mm_ctx;

static glesc_status check_chunks(kb *b, const glesc_tensor *w)
{
    if (w->owner->st.n_chunks > 1 && (w->owner != w || w->ne[2] * w->ne[3] != 1))
        return kb_fail(b, GLESC_ERROR_UNSUPPORTED,
                       "matmul: a weight split into chunks must be a whole 2-D tensor, not a "
                       "view or batched");
    return GLESC_OK;
}

/* Can the GEMV read w through the fast units (a uvec4 binding)? Not when
 * the activation shares w's memory (it is read as words). One of the bits
 * of the op's variant (codegen.c), so the plan hash covers it. */
bool kernels_matmul_units(const glesc_tensor *mm)
{
    return kernels_wload_units(mm->src[0]) && mm->src[0]->owner != mm->src[1]->owner;
}

/* Bindings, loaders and the uniforms both kernels share; gemv: the loaders
 * are the GEMV's units. */
static void common(kb *b, mm_ctx *mc, bool gemv)
{
    const glesc_tensor *w = mc->w, *x = mc->x, *a = mc->a;
    check_chunks(b, w);
    mc->n_chunks = CORE_MAX(1, w->owner->st.n_chunks);
    mc->chunk_rows = mc->n_chunks > 1 ? w->owner->st.chunk_rows : w->ne[1];
    /* both matmuls' variants carry these bits, so the plan hash covers them */
    mc->vec4 = kernels_wload_vec4(w) && (!mc->p || kernels_wload_vec4(mc->p->src[0]));
    mc->units = gemv && kernels_matmul_units(mc->a) && (!mc->p || kernels_matmul_units(mc->p));
    unsigned what =
        gemv ? KERNELS_WLOAD_UNIT : KERNELS_WLOAD_ELEM | (mc->vec4 ? KERNELS_WLOAD_VEC4 : 0u);
    mc->wb = mc->units ? kb_binding_uvec4(b, w->owner, 0) : kb_binding(b, w->owner, 0, false);
    char buf[16];
    snprintf(buf, sizeof buf, "t%d", mc->wb);
    kernels_wload_emit(b, w, "load_w", buf, what, "K");
    if (mc->p) {
        const glesc_tensor *w2 = mc->p->src[0];
        check_chunks(b, w2);
        if (CORE_MAX(1, w2->owner->st.n_chunks) != mc->n_chunks)
            kb_fail(b, GLESC_ERROR_UNSUPPORTED, "matmul pair: weights chunked differently");
        mc->wb2 =
            mc->units ? kb_binding_uvec4(b, w2->owner, 0) : kb_binding(b, w2->owner, 0, false);
        snprintf(buf, sizeof buf, "t%d", mc->wb2);
        kernels_wload_emit(b, w2, "load_u", buf, what, "K");
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
}

/* Row byte offsets of W (and W2) for local row `nl` of batch (b2, b3). */
static void row_bytes(kb *b, const mm_ctx *mc, const char *var, const char *nl)
{
    kb_line(b, "uint %s = w_off + %s * w_nb1 + (b2 / r2) * w_nb2 + (b3 / r3) * w_nb3;", var, nl);
    if (mc->p)
        kb_line(b, "uint %s_2 = w2_off + %s * w2_nb1 + (b2 / r2) * w2_nb2 + (b3 / r3) * w2_nb3;",
                var, nl);
}

/* One dispatch per weight chunk: ceil(rows / rows_per_group) workgroups
 * of rows (at most max_groups when that is not 0: the GEMV's workgroups
 * then loop over the blocks of rows), spread over x and y when spread (the
 * device caps x at 65535; the GEMM keeps y for its column tiles), m_groups
 * column groups, batches. */
static void dispatch_chunks(kb *b, const mm_ctx *mc, int64_t rows_per_group, uint64_t max_groups,
                            bool spread, int64_t m_groups, int64_t batches)
{
    int64_t n = mc->a->ne[0];
    for (int c = 0; c < mc->n_chunks; c++) {
        int64_t base = (int64_t)c * mc->chunk_rows;
        int64_t count = CORE_MIN(mc->chunk_rows, n - base);
        kb_param_set_u(b, mc->p_base, (uint64_t)base);
        kb_param_set_u(b, mc->p_count, (uint64_t)count);
        kb_binding_set_chunk(b, mc->wb, c);
        if (mc->p)
            kb_binding_set_chunk(b, mc->wb2, c);
        uint64_t wgs = ((uint64_t)count + (uint64_t)rows_per_group - 1) / (uint64_t)rows_per_group;
        if (max_groups && wgs > max_groups)
            wgs = max_groups;
        uint64_t x = wgs, y = 1;
        while (spread && x > 65535) {
            y *= 2;
            x = (wgs + y - 1) / y;
        }
        kb_dispatch_groups(b, (uint32_t)x, (uint32_t)(y * (uint64_t)m_groups), (uint32_t)batches);
    }
}

/* ---- GEMV ---- */

/* The GEMV's shape: invocations per workgroup, per row team, rows per
 * team, units in flight per lane, x elements per slice and column, and
 * whether teams reduce with subgroupAdd. */
typedef struct gemv_cfg {
    int wg, team, ks, nr, unroll, xs;
    int red;    /* vec4 of shared memory for the partial sums */
    int groups; /* workgroups a dispatch has at most (0: one per block of rows) */
    bool subgroup;
} gemv_cfg;

#define GEMV_SHARED_MAX (48 * 1024) /* bytes of shared memory a GEMV may use */
#define GEMV_XS_MAX 4096            /* x elements per column and slice, at most */
/* Workgroups of a GEMV dispatch, at most: beyond, each takes several blocks
 * of rows and loads x once for them (when one slice holds it). Enough to
 * fill a big GPU several times over; small ones keep every core busy. */
#define GEMV_GROUPS 256

static int pow2_floor(int v)
{
    int p = 1;
    while (p * 2 <= v)
        p *= 2;
    return p;
}

/* GLESC_GEMV="wg=256,team=32,nr=2,unroll=2,xs=4096,subgroup=0": a tuning
 * aid overriding the fields it names (read on every generation, so a
 * process sees one value: plans and programs stay consistent). */
static void gemv_env(gemv_cfg *c)
{
    const char *e = getenv("GLESC_GEMV");
    for (const char *p = e; p && *p;) {
        char key[16];
        int v, n = 0;
        if (sscanf(p, "%15[a-z]=%d%n", key, &v, &n) != 2 || n <= 0)
            return;
        if (!strcmp(key, "wg"))
            c->wg = v;
        else if (!strcmp(key, "team"))
            c->team = v;
        else if (!strcmp(key, "groups"))
            c->groups = v;
        else if (!strcmp(key, "ks"))
            c->ks = v;
        else if (!strcmp(key, "nr"))
            c->nr = v;
        else if (!strcmp(key, "unroll"))
            c->unroll = v;
        else if (!strcmp(key, "xs"))
            c->xs = v;
        else if (!strcmp(key, "subgroup"))
            c->subgroup = c->subgroup && v;
        p += n;
        p += *p == ',';
    }
}

/* Depends on the device (caps), the weight type, m and the pair (the plan
 * hash covers the last three; a plan cache belongs to one context). */
static gemv_cfg gemv_config(const glesc_context *ctx, glesc_dtype t, int m, bool dual)
{
    const glesc_caps *caps = &ctx->caps;
    gemv_cfg c;
    /* 256 invocations keep a GPU busy (the decode needs many loads in
     * flight); llvmpipe's barriers and coroutines make small workgroups
     * faster there. GLES guarantees 128. */
    c.wg = pow2_floor(CORE_MIN(ctx->cpu_device ? 64 : 256, CORE_MIN(caps->max_compute_invocations,
                                                                    caps->max_workgroup_size[0])));
    c.subgroup = caps->has_subgroup && (caps->subgroup_features & GLESC_SUBGROUP_ARITHMETIC) &&
                 caps->subgroup_size >= 4 && caps->subgroup_size <= c.wg &&
                 c.wg % caps->subgroup_size == 0;
    /* llvmpipe runs a workgroup's invocations as SIMD loops on one thread
     * and pays per workgroup: 64 rows of short teams there (the demo's
     * 256-wide GEMVs ran 2.5x faster than with 8 rows of teams of 16) */
    c.team = c.subgroup ? caps->subgroup_size : CORE_MIN(ctx->cpu_device ? 4 : 32, c.wg);
    c.ks = 1;
    c.groups = GEMV_GROUPS;
    c.nr = ctx->cpu_device ? (m == 1 ? 4 : 2) : m == 1 ? 2 : 1;
    /* two units of each row in flight where a unit is decoded from few
     * bytes; the plain types' units are 64 or 128 bytes already (on an
     * H200 one unit ran 5-8% faster there, two 2-4% faster for q4_0, q8_0) */
    c.unroll = graph_dtype_quant(t) ? 2 : 1;
    c.xs = GEMV_XS_MAX;
    gemv_env(&c);
    c.wg = pow2_floor(CORE_MAX(1, CORE_MIN(c.wg, caps->max_compute_invocations)));
    c.subgroup = c.subgroup && c.team == caps->subgroup_size && c.wg % c.team == 0;
    c.team = CORE_MAX(1, CORE_MIN(c.team, c.wg));
    if (c.wg % c.team)
        c.team = pow2_floor(c.team);
    c.nr = CORE_MAX(1, CORE_MIN(c.nr, 8));
    c.ks = pow2_floor(CORE_MAX(1, CORE_MIN(c.ks, c.wg / c.team)));
    c.unroll = c.unroll >= 4 ? 4 : c.unroll >= 2 ? 2 : 1; /* gemv.glsl's steps */
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
        int budget = limit - 16 * c.red;
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

static glesc_status gen_gemv(kb *b, mm_ctx *mc)
{
    bool dual = mc->p != NULL;
    int m = (int)mc->x->ne[1];
    gemv_cfg c = gemv_config(b->ctx, mc->w->dtype, m, dual);
    /* xs holds the slices, then (without subgroups) the partial sums: a vec4
     * of 4 sums per invocation and group of 4 */
    /* x's slices and the partial sums (vec4) */
    int red = c.red;
    int xs_vec4 = m * (c.xs / 4 + c.xs / 32); /* gemv.glsl's XS4P a column */
    if ((xs_vec4 + red) * 16 > b->ctx->caps.max_compute_shared_memory)
        return kb_fail(b, GLESC_ERROR_LIMIT,
                       "GEMV: %d bytes of shared memory needed, the device has %d (m = %d)",
                       (xs_vec4 + red) * 16, b->ctx->caps.max_compute_shared_memory, m);
    if (b->k) {
        emit_kernel_local_size(b->k, c.wg, 1, 1);
        if (c.subgroup) {
            emit_kernel_extension(b->k, "GL_KHR_shader_subgroup_basic");
            emit_kernel_extension(b->k, "GL_KHR_shader_subgroup_arithmetic");
            emit_kernel_define(b->k, "GEMV_SUBGROUP", "1");
        }
        emit_kernel_snippet(b->k, "graph/eltwise");
        emit_kernel_define(b->k, "TEAM", "%du", c.team);
        emit_kernel_define(b->k, "KSPLIT", "%du", c.ks);
        emit_kernel_define(b->k, "NR", "%du", c.nr);
        emit_kernel_define(b->k, "MCOLS", "%du", m);
        emit_kernel_define(b->k, "XS", "%du", c.xs);
        emit_kernel_define(b->k, "UNROLL", "%du", c.unroll);
        if (dual)
            emit_kernel_define(b->k, "PAIR", "1");
        emit_kernel_shared(b->k, "vec4", "xs", xs_vec4);
        if (red)
            emit_kernel_shared(b->k, "vec4", "xr", red);
        emit_kernel_comment(b->k,
                            "GEMV (glsl/graph/gemv.glsl): %d rows per workgroup of %d, teams of "
                            "%d, %d per row, %s reduction, x in slices of %d, %d units in flight",
                            c.wg / c.team / c.ks * c.nr, c.wg, c.team, c.ks,
                            c.subgroup ? "subgroup" : "shared", c.xs, c.unroll);
    }
    common(b, mc, true);
    if (b->k)
        emit_kernel_snippet(b->k, "graph/gemv");
    /* the hooks gemv.glsl calls: x with its prologue, the store with the
     * epilogue */
    if (b->k)
        emit_kernel_function_begin(b->k, "float gemv_x(uint k, uint c, uint b2, uint b3)");
    char xv[16];
    const char *cx[4] = {"k", "c", "b2", "b3"};
    kb_expr(b, mc->x, cx, xv);
    kb_line(b, "return %s;", xv);
    if (b->k) {
        emit_kernel_function_end(b->k);
        emit_kernel_function_begin(
            b->k, "void gemv_store(uint n, uint c, uint b2, uint b3, float dot, float dot2)");
    }
    const char *co[4] = {"n", "c", "b2", "b3"};
    kb_store_out(b, co, "dot", dual ? "dot2" : NULL);
    if (b->k)
        emit_kernel_function_end(b->k);
    kb_line(b, "gemv_main();");
    dispatch_chunks(b, mc, c.wg / c.team / c.ks * c.nr, (uint64_t)c.groups, true, 1,
                    mc->x->ne[2] * mc->x->ne[3]);
    return b->st;
}

static glesc_status gen_gemm(kb *b, mm_ctx *mc)
{
    bool dual = mc->p != NULL;
    if (b->k) {
        emit_kernel_local_size(b->k, 16, 16, 1);
        emit_kernel_snippet(b->k, "graph/eltwise");
        emit_kernel_define(b->k, "TILE", "%du", TILE);
        emit_kernel_define(b->k, "TK", "%du", TK);
        emit_kernel_shared(b->k, "float", "ws", TILE * TK);
        emit_kernel_shared(b->k, "float", "xs", TILE * TK);
        if (dual)
            emit_kernel_shared(b->k, "float", "ws2", TILE * TK);
        emit_kernel_comment(b->k, "GEMM: 64x64 output tiles, k in steps of 16 through shared "
                                  "memory, 4x4 outputs per invocation");
    }
    common(b, mc, false);
    kb_line(b, "uint tx = gl_LocalInvocationID.x;");
    kb_line(b, "uint ty = gl_LocalInvocationID.y;");
    kb_line(b, "uint lid = gl_LocalInvocationIndex;");
    kb_line(b, "uint n0 = gl_WorkGroupID.x * TILE; // local to the chunk");
    kb_line(b, "uint m0 = gl_WorkGroupID.y * TILE;");
    kb_line(b, "uint b2 = gl_WorkGroupID.z %% xb2;");
    kb_line(b, "uint b3 = gl_WorkGroupID.z / xb2;");
    /* 4x4 accumulators as scalars (constant names stay in registers) */
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            kb_line(b, "float a%d%d = 0.0;", i, j);
            if (dual)
                kb_line(b, "float p%d%d = 0.0;", i, j);
        }
    kb_line(b, "for (uint k0 = 0u; k0 < K; k0 += TK) {");
    if (mc->vec4) {
        /* W: 4 consecutive k per invocation (K % 4 == 0: a group is all in
         * or all out) */
        kb_line(b, "for (uint i = lid; i < TILE * TK / 4u; i += WG_SIZE) {");
        kb_line(b, "uint kq = 4u * (i %% (TK / 4u));");
        kb_line(b, "uint r = i / (TK / 4u);");
        kb_line(b, "uint k = k0 + kq;");
        kb_line(b, "uint nl = n0 + r;");
        kb_line(b, "bool inw = nl < n_count && k < K;");
        row_bytes(b, mc, "wr", "nl");
        kb_line(b, "vec4 wv = inw ? load_w4(wr, k >> 2u) : vec4(0.0);");
        for (int j = 0; j < 4; j++)
            kb_line(b, "ws[(kq + %du) * TILE + r] = wv[%d];", j, j);
        if (dual) {
            kb_line(b, "vec4 uv = inw ? load_u4(wr_2, k >> 2u) : vec4(0.0);");
            for (int j = 0; j < 4; j++)
                kb_line(b, "ws2[(kq + %du) * TILE + r] = uv[%d];", j, j);
        }
        kb_line(b, "}");
    }
    /* consecutive invocations read consecutive k of a row: contiguous loads */
    kb_line(b, "for (uint i = lid; i < TILE * TK; i += WG_SIZE) {");
    kb_line(b, "uint kk = i %% TK;");
    kb_line(b, "uint r = i / TK;");
    kb_line(b, "uint k = k0 + kk;");
    if (!mc->vec4) {
        kb_line(b, "uint nl = n0 + r;");
        kb_line(b, "bool inw = nl < n_count && k < K;");
        row_bytes(b, mc, "wr", "nl");
        kb_line(b, "ws[kk * TILE + r] = inw ? load_w(wr, k) : 0.0;");
        if (dual)
            kb_line(b, "ws2[kk * TILE + r] = inw ? load_u(wr_2, k) : 0.0;");
    }
    kb_line(b, "uint m = m0 + r;");
    kb_line(b, "float xv = 0.0;");
    kb_line(b, "if (m < M && k < K) {");
    const char *cx[4] = {"k", "m", "b2", "b3"};
    char xv[16];
    kb_expr(b, mc->x, cx, xv);
    kb_line(b, "xv = %s;", xv);
    kb_line(b, "}");
    kb_line(b, "xs[kk * TILE + r] = xv;");
    kb_line(b, "}");
    kb_line(b, "memoryBarrierShared();");
    kb_line(b, "barrier();");
    kb_line(b, "for (uint kk = 0u; kk < TK; kk++) {");
    for (int i = 0; i < 4; i++) {
        kb_line(b, "float w%d = ws[kk * TILE + tx + %du];", i, 16 * i);
        if (dual)
            kb_line(b, "float u%d = ws2[kk * TILE + tx + %du];", i, 16 * i);
    }
    for (int j = 0; j < 4; j++)
        kb_line(b, "float x%d = xs[kk * TILE + ty + %du];", j, 16 * j);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            kb_line(b, "a%d%d += w%d * x%d;", i, j, i, j);
            if (dual)
                kb_line(b, "p%d%d += u%d * x%d;", i, j, i, j);
        }
    kb_line(b, "}");
    kb_line(b, "memoryBarrierShared();");
    kb_line(b, "barrier();");
    kb_line(b, "}");
    /* stores: one block per accumulator, each with the fused epilogue */
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            kb_line(b, "if (n0 + tx + %du < n_count && m0 + ty + %du < M) {", 16 * i, 16 * j);
            kb_line(b, "uint n = n_base + n0 + tx + %du;", 16 * i);
            kb_line(b, "uint m = m0 + ty + %du;", 16 * j);
            char av[16], pv[16];
            snprintf(av, sizeof av, "a%d%d", i, j);
            snprintf(pv, sizeof pv, "p%d%d", i, j);
            const char *co[4] = {"n", "m", "b2", "b3"};
            kb_store_out(b, co, av, dual ? pv : NULL);
            kb_line(b, "}");
        }
    dispatch_chunks(b, mc, TILE, 0, false, (mc->x->ne[1] + TILE - 1) / TILE,
                    mc->x->ne[2] * mc->x->ne[3]);
    return b->st;
}

glesc_status kernels_gen_matmul(kb *b)
{
    mm_ctx mc = {0};
    mc.a = b->gk->anchor;
    mc.p = b->gk->partner;
    mc.w = mc.a->src[0];
    mc.x = mc.a->src[1];
    if (mc.x->ne[2] * mc.x->ne[3] > 65535)
        return kb_fail(b, GLESC_ERROR_LIMIT, "matmul: %lld batches exceed 65535",
                       (long long)(mc.x->ne[2] * mc.x->ne[3]));
    /* the same test as the op's variant (codegen.c), which the plan hash covers */
    int mmax = b->opts && b->opts->gemv_max_m ? b->opts->gemv_max_m : 8;
    if (mc.x->ne[1] <= mmax)
        return gen_gemv(b, &mc);
    return gen_gemm(b, &mc);
}
