/*
 * matmul.c — W [k, n, b2w, b3w] × X [k, m, b2, b3] → [n, m, b2, b3] (ggml's
 * convention: both operands run along k in dimension 0).
 *
 * Two kernels, chosen by the op's variant (m against the graph's
 * gemv_max_m): GEMV, a workgroup per 4 output rows that splits k across its
 * invocations and produces every column m ≤ gemv_max_m at once (each weight
 * row is read exactly once: the decode case; one tree reduction for all 4·m
 * sums keeps barriers few, which is what llvmpipe pays for; specialized per
 * m so every accumulator is a register); GEMM, 64×64 output
 * tiles through shared memory, 16 k at a time, 4×4 outputs per invocation.
 *
 * The weight is read through its type's loader (wload.c): f32, f16, bf16
 * and the ggml block types alike, four consecutive k at a time (load_w4,
 * one dq4 of a quantized block) whenever the weight allows it (ne0 % 4 ==
 * 0, word-aligned rows: the variant's bit 16), else element by element.
 * The GEMV's workgroup is 256 invocations on GPUs, 64 on llvmpipe, fewer
 * where many columns' sums must fit the reduction's shared array. X is read with kb_expr (any
 * strides, f16, broadcast batches). The result goes through kb_store_out:
 * bias, activation and residual epilogues come for free, and with a partner
 * (a second matmul of the same X, e.g. gate and up) both dot products run
 * in the one kernel and the epilogue sees both values (silu(g)·u).
 *
 * A grouped matmul (fuse.c: q, k and v of one activation) is one kernel
 * whose workgroups pick their matmul by row range: workgroups from s<i>_g0
 * on compute sibling i, each with its own weight (any type: its own
 * loader), row count and stored result with its epilogue. The k loop and
 * the weight loads are emitted once per member under `if (sel == i)`; the
 * activation's prologue, the reduction and the accumulators are shared.
 *
 * A weight larger than the storage-block limit is split in row chunks
 * (tensor.c); the kernel then runs once per chunk, binding that chunk and
 * producing its rows n_base .. n_base + n_count (a group: dispatch d binds
 * chunk d of every member that has one).
 */
#include <stdio.h>

#include "kernels/kernels.h"

/* GEMV invocations per workgroup, at most: 256 keeps a GPU busy (on an
 * H200, 4096 rows of q4_0 or f16 ran 1.3-1.9x faster than with 64: the
 * decode needs many invocations in flight to hide its dependent loads);
 * llvmpipe's barriers and coroutines make small workgroups faster there
 * (ctx->cpu_device; a plan cache belongs to one context, so its plans see
 * one choice). */
#define GEMV_WG_MAX 256
#define GEMV_WG_MAX_CPU 64
#define GEMV_ROWS 4        /* output rows per GEMV workgroup (ROWS * m <= the workgroup) */
#define GEMV_PART_MAX 4096 /* floats of the reduction's shared array (16 KiB) */
#define TILE 64            /* output rows and columns per GEMM workgroup */
#define TK 16              /* k per shared-memory step */

/* A grouped matmul's other members (uniforms s<i>_..., loader load_s<i>). */
typedef struct mm_sib {
    const glesc_tensor *a, *w;
    int wb;                    /* binding of its weight */
    int p_base, p_count, p_g0; /* param indices: first row, rows, first workgroup */
    int64_t chunk_rows;
    int n_chunks;
} mm_sib;

typedef struct mm_ctx {
    const glesc_tensor *a, *p, *w, *x; /* anchor, partner, weights, activation */
    int wb, wb2;                       /* bindings of W and the partner's W */
    int p_base, p_count;               /* param indices of n_base, n_count */
    bool vec4;                         /* weights read 4 elements at a time (load_w4) */
    int64_t chunk_rows;
    int n_chunks;
    mm_sib sib[GRAPH_MAX_SIB];
    int n_sib;
} mm_ctx;

static glesc_status check_chunks(kb *b, const glesc_tensor *w)
{
    if (w->owner->st.n_chunks > 1 && (w->owner != w || w->ne[2] * w->ne[3] != 1))
        return kb_fail(b, GLESC_ERROR_UNSUPPORTED,
                       "matmul: a weight split into chunks must be a whole 2-D tensor, not a "
                       "view or batched");
    return GLESC_OK;
}

/* Bindings, loaders and the uniforms both kernels share. */
static void common(kb *b, mm_ctx *mc)
{
    const glesc_tensor *w = mc->w, *x = mc->x, *a = mc->a;
    check_chunks(b, w);
    mc->n_chunks = CORE_MAX(1, w->owner->st.n_chunks);
    mc->chunk_rows = mc->n_chunks > 1 ? w->owner->st.chunk_rows : w->ne[1];
    /* every matmul's variant carries this bit, so the plan hash covers it */
    mc->vec4 = kernels_wload_vec4(w) && (!mc->p || kernels_wload_vec4(mc->p->src[0]));
    for (int i = 0; i < mc->n_sib; i++)
        mc->vec4 = mc->vec4 && kernels_wload_vec4(mc->sib[i].w);
    mc->wb = kb_binding(b, w->owner, 0, false);
    char buf[16];
    snprintf(buf, sizeof buf, "t%d", mc->wb);
    kernels_wload_emit(b, w->dtype, "load_w", buf, mc->vec4);
    if (mc->p) {
        const glesc_tensor *w2 = mc->p->src[0];
        check_chunks(b, w2);
        if (CORE_MAX(1, w2->owner->st.n_chunks) != mc->n_chunks)
            kb_fail(b, GLESC_ERROR_UNSUPPORTED, "matmul pair: weights chunked differently");
        mc->wb2 = kb_binding(b, w2->owner, 0, false);
        snprintf(buf, sizeof buf, "t%d", mc->wb2);
        kernels_wload_emit(b, w2->dtype, "load_u", buf, mc->vec4);
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
        sb->wb = kb_binding(b, sb->w->owner, 0, false);
        char fn[32], name[32];
        snprintf(buf, sizeof buf, "t%d", sb->wb);
        snprintf(fn, sizeof fn, "load_s%d", i + 1);
        kernels_wload_emit(b, sb->w->dtype, fn, buf, mc->vec4);
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

/* A group: which member workgroup g computes (sel), its index among that
 * member's workgroups (gl), its rows (cnt) and first row (nbase). */
static void group_select(kb *b, const mm_ctx *mc, const char *g)
{
    kb_line(b, "uint sel = 0u;");
    kb_line(b, "uint gl = %s;", g);
    kb_line(b, "uint cnt = n_count;");
    kb_line(b, "uint nbase = n_base;");
    for (int i = 1; i <= mc->n_sib; i++) {
        kb_line(b, "if (%s >= s%d_g0) {", g, i);
        kb_line(b, "sel = %du;", i);
        kb_line(b, "gl = %s - s%d_g0;", g, i);
        kb_line(b, "cnt = s%d_count;", i);
        kb_line(b, "nbase = s%d_base;", i);
        kb_line(b, "}");
    }
}

/* Opens member j's branch of a group ("if (sel == 0u) {", "} else if ..."). */
static void member_open(kb *b, const mm_ctx *mc, int j)
{
    if (!mc->n_sib)
        return;
    if (j == 0)
        kb_line(b, "if (sel == 0u) {");
    else
        kb_line(b, "} else if (sel == %du) {", j);
}

static void member_close(kb *b, const mm_ctx *mc)
{
    if (mc->n_sib)
        kb_line(b, "}");
}

/* Member j's loader name ("load_w" / "load_s1"). */
static const char *loader(int j, char buf[16])
{
    if (j == 0)
        snprintf(buf, 16, "load_w");
    else
        snprintf(buf, 16, "load_s%d", j % 10);
    return buf;
}

/* Stores value at (n, m) into member j's result (with its epilogue). */
static void member_store(kb *b, int j, const char *const co[4], const char *value,
                         const char *partner)
{
    if (j == 0)
        kb_store_out(b, co, value, partner);
    else
        kb_store_sib(b, j - 1, co, value);
}

/* Row byte offsets of W (and W2) for local row `nl` of batch (b2, b3). */
static void row_bytes(kb *b, const mm_ctx *mc, const char *var, const char *nl)
{
    kb_line(b, "uint %s = w_off + %s * w_nb1 + (b2 / r2) * w_nb2 + (b3 / r3) * w_nb3;", var, nl);
    if (mc->p)
        kb_line(b, "uint %s_2 = w2_off + %s * w2_nb1 + (b2 / r2) * w2_nb2 + (b3 / r3) * w2_nb3;",
                var, nl);
}

/* Row byte offset of member j's weight row nl (a group: unbatched). */
static void member_row_bytes(kb *b, int j, const char *var, const char *nl)
{
    if (j == 0)
        kb_line(b, "uint %s = w_off + %s * w_nb1;", var, nl);
    else
        kb_line(b, "uint %s = s%d_off + %s * s%d_nb1;", var, j, nl, j);
}

/* One dispatch per weight chunk (a group: dispatch c computes chunk c of
 * every member that has one, each member's workgroups after the previous
 * member's). rows_per_wg: output rows per workgroup. */
static void dispatch_chunks(kb *b, const mm_ctx *mc, uint32_t (*groups)(int64_t wgs, uint32_t g[2]),
                            int64_t rows_per_wg, int64_t m_groups, int64_t batches)
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
        uint32_t g[2];
        groups(wgs, g);
        kb_dispatch_groups(b, g[0], g[1] * (uint32_t)m_groups, (uint32_t)batches);
    }
}

/* Reduction prologue: adds the square of the norm's input, just loaded by
 * kb_expr for column m, to that column's sum sq<m>. */
static void norm_square(kb *b, const glesc_tensor *nrm, int m)
{
    if (!nrm)
        return;
    if (b->norm_evals != 1)
        kb_fail(b, GLESC_ERROR_STATE,
                "matmul: the folded norm's input is read %d times per "
                "element",
                b->norm_evals);
    kb_line(b, "sq%d += %s * %s;", m, b->norm_in, b->norm_in);
}

static uint32_t gemv_groups(int64_t n_wg, uint32_t g[2])
{
    uint64_t wgs = (uint64_t)n_wg;
    uint64_t x = wgs, y = 1;
    while (x > 65535) {
        y *= 2;
        x = (wgs + y - 1) / y;
    }
    g[0] = (uint32_t)x;
    g[1] = (uint32_t)y;
    return 0;
}

/* Member j's k loop: its weight rows wr0..wr3 (and the partner's), then
 * the dot products of ROWS rows with every column of x into a<r>_<m>
 * (p<r>_<m>), and a folded norm's squares into sq<m>. */
static void gemv_loop(kb *b, const mm_ctx *mc, int j, const glesc_tensor *nrm, const char *nrows)
{
    bool dual = mc->p != NULL;
    int m_n = (int)mc->x->ne[1];
    char fn[16];
    loader(j, fn);
    for (int r = 0; r < GEMV_ROWS; r++) {
        /* rows past the end repeat the last one (their sums are not stored) */
        if (j == 0)
            kb_line(b,
                    "uint wr%d = w_off + (nl0 + min(%du, %s - 1u)) * w_nb1 + (b2 / r2) * w_nb2 + "
                    "(b3 / r3) * w_nb3;",
                    r, r, nrows);
        else
            kb_line(b, "uint wr%d = s%d_off + (nl0 + min(%du, %s - 1u)) * s%d_nb1;", r, j, r, nrows,
                    j);
        if (dual)
            kb_line(b,
                    "uint wq%d = w2_off + (nl0 + min(%du, %s - 1u)) * w2_nb1 + (b2 / r2) * "
                    "w2_nb2 + (b3 / r3) * w2_nb3;",
                    r, r, nrows);
    }
    if (mc->vec4) {
        /* 4 consecutive k per step: one dq4 decodes them together (the
         * scalar loader would decode a quantized group once per element) */
        kb_line(b, "for (uint k4 = lid; k4 < (K >> 2u); k4 += WG_SIZE) {");
        for (int q = 0; q < 4; q++)
            kb_line(b, "uint k_%d = 4u * k4 + %du;", q, q);
        for (int m = 0; m < m_n; m++) {
            char mc_[16], xv[4][16], kc[4][8];
            snprintf(mc_, sizeof mc_, "%du", m);
            for (int q = 0; q < 4; q++) {
                snprintf(kc[q], sizeof kc[q], "k_%d", q);
                const char *cx[4] = {kc[q], mc_, "b2", "b3"};
                kb_expr(b, mc->x, cx, xv[q]);
                norm_square(b, nrm, m);
            }
            kb_line(b, "vec4 x%d = vec4(%s, %s, %s, %s);", m, xv[0], xv[1], xv[2], xv[3]);
        }
        for (int r = 0; r < GEMV_ROWS; r++) {
            kb_line(b, "vec4 w%d = %s4(wr%d, k4);", r, fn, r);
            if (dual)
                kb_line(b, "vec4 u%d = load_u4(wq%d, k4);", r, r);
        }
        for (int r = 0; r < GEMV_ROWS; r++)
            for (int m = 0; m < m_n; m++) {
                kb_line(b, "a%d_%d += dot(w%d, x%d);", r, m, r, m);
                if (dual)
                    kb_line(b, "p%d_%d += dot(u%d, x%d);", r, m, r, m);
            }
        kb_line(b, "}");
    } else {
        kb_line(b, "for (uint k = lid; k < K; k += WG_SIZE) {");
        for (int m = 0; m < m_n; m++) {
            char mc_[16], xv[16];
            snprintf(mc_, sizeof mc_, "%du", m);
            const char *cx[4] = {"k", mc_, "b2", "b3"};
            kb_expr(b, mc->x, cx, xv);
            norm_square(b, nrm, m);
            kb_line(b, "float x%d = %s;", m, xv);
        }
        for (int r = 0; r < GEMV_ROWS; r++) {
            kb_line(b, "float w%d = %s(wr%d, k);", r, fn, r);
            if (dual)
                kb_line(b, "float u%d = load_u(wq%d, k);", r, r);
        }
        for (int r = 0; r < GEMV_ROWS; r++)
            for (int m = 0; m < m_n; m++) {
                kb_line(b, "a%d_%d += w%d * x%d;", r, m, r, m);
                if (dual)
                    kb_line(b, "p%d_%d += u%d * x%d;", r, m, r, m);
            }
        kb_line(b, "}");
    }
}

static glesc_status gen_gemv(kb *b, mm_ctx *mc)
{
    bool dual = mc->p != NULL;
    /* Specialized for the exact m (the op's variant, so the plan hash covers
     * it): every accumulator is a scalar with a constant name, which keeps it
     * in registers (an array indexed by a runtime m goes to scratch memory;
     * on llvmpipe that made this kernel 5x slower). */
    int m_n = (int)mc->x->ne[1];
    /* a folded rms_norm (reduction prologue): the squares of each column's
     * input are one more sum per column, reduced with the dot products */
    const glesc_tensor *nrm = kb_row_norm(b, mc->x);
    int ndot = GEMV_ROWS * m_n * (dual ? 2 : 1);
    int nacc = ndot + (nrm ? m_n : 0);
    /* the largest workgroup whose sums fit the shared array (m and the pair
     * are in the plan hash, so is this) */
    int wg = b->ctx->cpu_device ? GEMV_WG_MAX_CPU : GEMV_WG_MAX;
    while (wg > 32 && wg * nacc > GEMV_PART_MAX)
        wg /= 2;
    if (b->k) {
        emit_kernel_local_size(b->k, wg, 1, 1);
        emit_kernel_snippet(b->k, "graph/eltwise");
        emit_kernel_define(b->k, "ROWS", "%du", GEMV_ROWS);
        emit_kernel_define(b->k, "MCOLS", "%du", m_n);
        emit_kernel_define(b->k, "NACC", "%du", nacc);
        emit_kernel_shared(b->k, "float", "part", nacc * wg);
        emit_kernel_comment(b->k, "GEMV: ROWS output rows per workgroup, all MCOLS columns; k "
                                  "split across invocations, one tree reduction for all sums");
        if (mc->n_sib)
            emit_kernel_comment(b->k,
                                "grouped: %d matmuls of one activation, workgroups pick "
                                "theirs by row range",
                                1 + mc->n_sib);
    }
    common(b, mc);
    kb_line(b, "uint g = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;");
    /* a group's workgroup computes member sel's rows: cnt of them from nbase */
    const char *cnt = mc->n_sib ? "cnt" : "n_count", *nbase = mc->n_sib ? "nbase" : "n_base";
    if (mc->n_sib)
        group_select(b, mc, "g");
    kb_line(b, "uint nl0 = %s * ROWS; // first local row (within the chunk)",
            mc->n_sib ? "gl" : "g");
    kb_line(b, "if (nl0 >= %s) {", cnt);
    kb_line(b, "return;");
    kb_line(b, "}");
    kb_line(b, "uint b2 = gl_WorkGroupID.z %% xb2;");
    kb_line(b, "uint b3 = gl_WorkGroupID.z / xb2;");
    kb_line(b, "uint lid = gl_LocalInvocationIndex;");
    kb_line(b, "uint nrows = min(ROWS, %s - nl0);", cnt);
    for (int r = 0; r < GEMV_ROWS; r++)
        for (int m = 0; m < m_n; m++) {
            kb_line(b, "float a%d_%d = 0.0;", r, m);
            if (dual)
                kb_line(b, "float p%d_%d = 0.0;", r, m);
        }
    for (int m = 0; nrm && m < m_n; m++)
        kb_line(b, "float sq%d = 0.0;", m);
    for (int j = 0; j <= mc->n_sib; j++) {
        member_open(b, mc, j);
        gemv_loop(b, mc, j, nrm, "nrows");
    }
    member_close(b, mc);
    /* all NACC sums reduce together: log2(WG) barrier steps per workgroup;
     * slot (r·MCOLS + m), then the partner's after ROWS·MCOLS */
    for (int r = 0; r < GEMV_ROWS; r++)
        for (int m = 0; m < m_n; m++) {
            kb_line(b, "part[%du * WG_SIZE + lid] = a%d_%d;", r * m_n + m, r, m);
            if (dual)
                kb_line(b, "part[%du * WG_SIZE + lid] = p%d_%d;", (GEMV_ROWS + r) * m_n + m, r, m);
        }
    for (int m = 0; nrm && m < m_n; m++)
        kb_line(b, "part[%du * WG_SIZE + lid] = sq%d;", ndot + m, m);
    kb_line(b, "memoryBarrierShared();");
    kb_line(b, "barrier();");
    kb_line(b, "for (uint s = WG_SIZE / 2u; s > 0u; s >>= 1u) {");
    kb_line(b, "if (lid < s) {");
    kb_line(b, "for (uint i = 0u; i < NACC; i++) {");
    kb_line(b, "part[i * WG_SIZE + lid] += part[i * WG_SIZE + lid + s];");
    kb_line(b, "}");
    kb_line(b, "}");
    kb_line(b, "memoryBarrierShared();");
    kb_line(b, "barrier();");
    kb_line(b, "}");
    kb_line(b, "// invocation lid stores (row lid / MCOLS, column lid %% MCOLS)");
    kb_line(b, "uint r = lid / MCOLS;");
    kb_line(b, "uint m = lid %% MCOLS;");
    kb_line(b, "if (r < nrows) {");
    kb_line(b, "uint n = %s + nl0 + r;", nbase);
    kb_line(b, "float dot = part[(r * MCOLS + m) * WG_SIZE];");
    if (dual)
        kb_line(b, "float dot2 = part[((ROWS + r) * MCOLS + m) * WG_SIZE];");
    if (nrm) {
        /* W·(x∘g·s) = s·(W·(x∘g)): the norm's scale of column m */
        kb_line(b, "float sq = part[(%du + m) * WG_SIZE];", ndot);
        kb_row_norm_scale(b, nrm, "rs", "sq", "K");
        kb_line(b, "dot *= rs;");
        if (dual)
            kb_line(b, "dot2 *= rs;");
    }
    const char *co[4] = {"n", "m", "b2", "b3"};
    for (int j = 0; j <= mc->n_sib; j++) {
        member_open(b, mc, j);
        member_store(b, j, co, "dot", dual ? "dot2" : NULL);
    }
    member_close(b, mc);
    kb_line(b, "}");
    dispatch_chunks(b, mc, gemv_groups, GEMV_ROWS, 1, mc->x->ne[2] * mc->x->ne[3]);
    return b->st;
}

static uint32_t gemm_groups(int64_t n_wg, uint32_t g[2])
{
    g[0] = (uint32_t)n_wg;
    g[1] = 1;
    return 0;
}

static glesc_status gen_gemm(kb *b, mm_ctx *mc)
{
    bool dual = mc->p != NULL;
    const glesc_tensor *nrm = kb_row_norm(b, mc->x);
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
    common(b, mc);
    kb_line(b, "uint tx = gl_LocalInvocationID.x;");
    kb_line(b, "uint ty = gl_LocalInvocationID.y;");
    kb_line(b, "uint lid = gl_LocalInvocationIndex;");
    if (mc->n_sib) {
        group_select(b, mc, "gl_WorkGroupID.x");
        kb_line(b, "uint n0 = gl * TILE; // local to the member's chunk");
    } else {
        kb_line(b, "uint n0 = gl_WorkGroupID.x * TILE; // local to the chunk");
    }
    const char *cnt = mc->n_sib ? "cnt" : "n_count", *nbase = mc->n_sib ? "nbase" : "n_base";
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
    if (nrm)
        kb_line(b, "vec4 sqv = vec4(0.0); // a folded norm's squares of columns ty + 16·jj");
    kb_line(b, "for (uint k0 = 0u; k0 < K; k0 += TK) {");
    if (mc->vec4) {
        /* W: 4 consecutive k per invocation (K % 4 == 0: a group is all in
         * or all out) */
        kb_line(b, "for (uint i = lid; i < TILE * TK / 4u; i += WG_SIZE) {");
        kb_line(b, "uint kq = 4u * (i %% (TK / 4u));");
        kb_line(b, "uint r = i / (TK / 4u);");
        kb_line(b, "uint k = k0 + kq;");
        kb_line(b, "uint nl = n0 + r;");
        kb_line(b, "bool inw = nl < %s && k < K;", cnt);
        if (mc->n_sib) {
            kb_line(b, "vec4 wv = vec4(0.0);");
            kb_line(b, "if (inw) {");
            for (int j = 0; j <= mc->n_sib; j++) {
                member_open(b, mc, j);
                member_row_bytes(b, j, "wr", "nl");
                kb_line(b, "wv = %s4(wr, k >> 2u);", loader(j, (char[16]){0}));
            }
            member_close(b, mc);
            kb_line(b, "}");
        } else {
            row_bytes(b, mc, "wr", "nl");
            kb_line(b, "vec4 wv = inw ? load_w4(wr, k >> 2u) : vec4(0.0);");
        }
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
    if (nrm) {
        /* iteration jj loads column ty + 16·jj (i = lid + jj·WG_SIZE, TK = 16 =
         * the x extent of the workgroup): the columns this invocation stores */
        kb_line(b, "for (uint jj = 0u; jj < TILE * TK / WG_SIZE; jj++) {");
        kb_line(b, "uint i = lid + jj * WG_SIZE;");
    } else {
        kb_line(b, "for (uint i = lid; i < TILE * TK; i += WG_SIZE) {");
    }
    kb_line(b, "uint kk = i %% TK;");
    kb_line(b, "uint r = i / TK;");
    kb_line(b, "uint k = k0 + kk;");
    if (!mc->vec4) {
        kb_line(b, "uint nl = n0 + r;");
        kb_line(b, "bool inw = nl < %s && k < K;", cnt);
        if (mc->n_sib) {
            kb_line(b, "float wv = 0.0;");
            kb_line(b, "if (inw) {");
            for (int j = 0; j <= mc->n_sib; j++) {
                member_open(b, mc, j);
                member_row_bytes(b, j, "wr", "nl");
                kb_line(b, "wv = %s(wr, k);", loader(j, (char[16]){0}));
            }
            member_close(b, mc);
            kb_line(b, "}");
            kb_line(b, "ws[kk * TILE + r] = wv;");
        } else {
            row_bytes(b, mc, "wr", "nl");
            kb_line(b, "ws[kk * TILE + r] = inw ? load_w(wr, k) : 0.0;");
        }
        if (dual)
            kb_line(b, "ws2[kk * TILE + r] = inw ? load_u(wr_2, k) : 0.0;");
    }
    kb_line(b, "uint m = m0 + r;");
    kb_line(b, "float xv = 0.0;");
    kb_line(b, "if (m < M && k < K) {");
    const char *cx[4] = {"k", "m", "b2", "b3"};
    char xv[16];
    kb_expr(b, mc->x, cx, xv);
    if (nrm) {
        if (b->norm_evals != 1)
            kb_fail(b, GLESC_ERROR_STATE, "matmul: the folded norm's input is read %d times",
                    b->norm_evals);
        kb_line(b, "sqv[jj] += %s * %s;", b->norm_in, b->norm_in);
    }
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
    if (nrm) {
        /* the 16 invocations of a row ty hold partial sums of the same
         * columns: add them up through xs (free after the last barrier) */
        kb_line(b, "for (uint jj = 0u; jj < 4u; jj++) {");
        kb_line(b, "xs[(ty + 16u * jj) * 16u + tx] = sqv[jj];");
        kb_line(b, "}");
        kb_line(b, "memoryBarrierShared();");
        kb_line(b, "barrier();");
        for (int j = 0; j < 4; j++) {
            kb_line(b, "float sq%d = 0.0;", j);
            kb_line(b, "for (uint t = 0u; t < 16u; t++) {");
            kb_line(b, "sq%d += xs[(ty + %du) * 16u + t];", j, 16 * j);
            kb_line(b, "}");
            char rs[8], sq[8];
            snprintf(rs, sizeof rs, "rs%d", j);
            snprintf(sq, sizeof sq, "sq%d", j);
            kb_row_norm_scale(b, nrm, rs, sq, "K");
        }
    }
    /* stores: one block per accumulator, each with the fused epilogue */
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            kb_line(b, "if (n0 + tx + %du < %s && m0 + ty + %du < M) {", 16 * i, cnt, 16 * j);
            kb_line(b, "uint n = %s + n0 + tx + %du;", nbase, 16 * i);
            kb_line(b, "uint m = m0 + ty + %du;", 16 * j);
            char av[16], pv[16];
            snprintf(av, sizeof av, "a%d%d", i, j);
            snprintf(pv, sizeof pv, "p%d%d", i, j);
            if (nrm) { /* W·(x∘g·s) = s·(W·(x∘g)) */
                kb_line(b, "float sa = a%d%d * rs%d;", i, j, j);
                snprintf(av, sizeof av, "sa");
                if (dual) {
                    kb_line(b, "float sp = p%d%d * rs%d;", i, j, j);
                    snprintf(pv, sizeof pv, "sp");
                }
            }
            const char *co[4] = {"n", "m", "b2", "b3"};
            for (int q = 0; q <= mc->n_sib; q++) {
                member_open(b, mc, q);
                member_store(b, q, co, av, dual ? pv : NULL);
            }
            member_close(b, mc);
            kb_line(b, "}");
        }
    dispatch_chunks(b, mc, gemm_groups, TILE, (mc->x->ne[1] + TILE - 1) / TILE,
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
    mc.n_sib = b->gk->n_sib;
    for (int i = 0; i < mc.n_sib; i++) {
        mc.sib[i].a = b->gk->sib[i];
        mc.sib[i].w = b->gk->sib[i]->src[0];
    }
    if (mc.x->ne[2] * mc.x->ne[3] > 65535)
        return kb_fail(b, GLESC_ERROR_LIMIT, "matmul: %lld batches exceed 65535",
                       (long long)(mc.x->ne[2] * mc.x->ne[3]));
    /* the same test as the op's variant (codegen.c), which the plan hash covers */
    int mmax = b->opts && b->opts->gemv_max_m ? b->opts->gemv_max_m : 8;
    if (mc.x->ne[1] <= mmax)
        return gen_gemv(b, &mc);
    return gen_gemm(b, &mc);
}
