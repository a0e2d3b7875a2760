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
 * A weight larger than the storage-block limit is split in row chunks
 * (tensor.c); the kernel then runs once per chunk, binding that chunk and
 * producing its rows n_base .. n_base + n_count.
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

typedef struct mm_ctx {
    const glesc_tensor *a, *p, *w, *x; /* anchor, partner, weights, activation */
    int wb, wb2;                       /* bindings of W and the partner's W */
    int p_base, p_count;               /* param indices of n_base, n_count */
    bool vec4;                         /* weights read 4 elements at a time (load_w4) */
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

/* Bindings, loaders and the uniforms both kernels share. */
static void common(kb *b, mm_ctx *mc)
{
    const glesc_tensor *w = mc->w, *x = mc->x, *a = mc->a;
    check_chunks(b, w);
    mc->n_chunks = CORE_MAX(1, w->owner->st.n_chunks);
    mc->chunk_rows = mc->n_chunks > 1 ? w->owner->st.chunk_rows : w->ne[1];
    /* both matmuls' variants carry this bit, so the plan hash covers it */
    mc->vec4 = kernels_wload_vec4(w) && (!mc->p || kernels_wload_vec4(mc->p->src[0]));
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
}

/* Row byte offsets of W (and W2) for local row `nl` of batch (b2, b3). */
static void row_bytes(kb *b, const mm_ctx *mc, const char *var, const char *nl)
{
    kb_line(b, "uint %s = w_off + %s * w_nb1 + (b2 / r2) * w_nb2 + (b3 / r3) * w_nb3;", var, nl);
    if (mc->p)
        kb_line(b, "uint %s_2 = w2_off + %s * w2_nb1 + (b2 / r2) * w2_nb2 + (b3 / r3) * w2_nb3;",
                var, nl);
}

/* One dispatch per weight chunk. */
static void dispatch_chunks(kb *b, const mm_ctx *mc,
                            uint32_t (*groups)(int64_t rows, uint32_t g[2]), int64_t m_groups,
                            int64_t batches)
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
        uint32_t g[2];
        groups(count, g);
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

static uint32_t gemv_groups(int64_t rows, uint32_t g[2])
{
    uint64_t wgs = ((uint64_t)rows + GEMV_ROWS - 1) / GEMV_ROWS;
    uint64_t x = wgs, y = 1;
    while (x > 65535) {
        y *= 2;
        x = (wgs + y - 1) / y;
    }
    g[0] = (uint32_t)x;
    g[1] = (uint32_t)y;
    return 0;
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
    }
    common(b, mc);
    kb_line(b, "uint g = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;");
    kb_line(b, "uint nl0 = g * ROWS; // first local row (within the chunk)");
    kb_line(b, "if (nl0 >= n_count) {");
    kb_line(b, "return;");
    kb_line(b, "}");
    kb_line(b, "uint b2 = gl_WorkGroupID.z %% xb2;");
    kb_line(b, "uint b3 = gl_WorkGroupID.z / xb2;");
    kb_line(b, "uint lid = gl_LocalInvocationIndex;");
    kb_line(b, "uint nrows = min(ROWS, n_count - nl0);");
    for (int r = 0; r < GEMV_ROWS; r++) {
        /* rows past the end repeat the last one (their sums are not stored) */
        kb_line(b,
                "uint wr%d = w_off + (nl0 + min(%du, nrows - 1u)) * w_nb1 + (b2 / r2) * w_nb2 + "
                "(b3 / r3) * w_nb3;",
                r, r);
        if (dual)
            kb_line(b,
                    "uint wq%d = w2_off + (nl0 + min(%du, nrows - 1u)) * w2_nb1 + (b2 / r2) * "
                    "w2_nb2 + (b3 / r3) * w2_nb3;",
                    r, r);
    }
    for (int r = 0; r < GEMV_ROWS; r++)
        for (int m = 0; m < m_n; m++) {
            kb_line(b, "float a%d_%d = 0.0;", r, m);
            if (dual)
                kb_line(b, "float p%d_%d = 0.0;", r, m);
        }
    for (int m = 0; nrm && m < m_n; m++)
        kb_line(b, "float sq%d = 0.0;", m);
    if (mc->vec4) {
        /* 4 consecutive k per step: one dq4 decodes them together (the
         * scalar loader would decode a quantized group once per element) */
        kb_line(b, "for (uint k4 = lid; k4 < (K >> 2u); k4 += WG_SIZE) {");
        for (int j = 0; j < 4; j++)
            kb_line(b, "uint k_%d = 4u * k4 + %du;", j, j);
        for (int m = 0; m < m_n; m++) {
            char mc_[16], xv[4][16], kc[4][8];
            snprintf(mc_, sizeof mc_, "%du", m);
            for (int j = 0; j < 4; j++) {
                snprintf(kc[j], sizeof kc[j], "k_%d", j);
                const char *cx[4] = {kc[j], mc_, "b2", "b3"};
                kb_expr(b, mc->x, cx, xv[j]);
                norm_square(b, nrm, m);
            }
            kb_line(b, "vec4 x%d = vec4(%s, %s, %s, %s);", m, xv[0], xv[1], xv[2], xv[3]);
        }
        for (int r = 0; r < GEMV_ROWS; r++) {
            kb_line(b, "vec4 w%d = load_w4(wr%d, k4);", r, r);
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
            kb_line(b, "float w%d = load_w(wr%d, k);", r, r);
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
    kb_line(b, "uint n = n_base + nl0 + r;");
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
    kb_store_out(b, co, "dot", dual ? "dot2" : NULL);
    kb_line(b, "}");
    dispatch_chunks(b, mc, gemv_groups, 1, mc->x->ne[2] * mc->x->ne[3]);
    return b->st;
}

static uint32_t gemm_groups(int64_t rows, uint32_t g[2])
{
    g[0] = (uint32_t)((rows + TILE - 1) / TILE);
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
            kb_line(b, "if (n0 + tx + %du < n_count && m0 + ty + %du < M) {", 16 * i, 16 * j);
            kb_line(b, "uint n = n_base + n0 + tx + %du;", 16 * i);
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
            kb_store_out(b, co, av, dual ? pv : NULL);
            kb_line(b, "}");
        }
    dispatch_chunks(b, mc, gemm_groups, (mc->x->ne[1] + TILE - 1) / TILE,
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
