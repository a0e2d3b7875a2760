/*
 * rows.c — row gathers and scatters: get_rows (embedding lookup) and
 * set_rows (writing rows at indices, e.g. new keys and values into a KV
 * cache). Both are one invocation per element.
 *
 * get_rows reads its table through the weight loader of the table's type
 * (wload.c), so quantized embedding tables plug in like matmul weights, and
 * a table split into row chunks is read with one dispatch per chunk, each
 * writing the output rows whose index falls in its chunk.
 *
 * A get_rows the fusion pass leaves without a kernel (fuse.c,
 * inline_gathers: its table and indices are leaves, every reader computes
 * it) is an expression (kernels_expr_gather): the reading kernel loads the
 * index and the table's element through a loader of its own, so an
 * embedding lookup costs no dispatch.
 *
 * set_rows reads its source with kb_expr, so a fused prologue (rope) is
 * computed on the way into the cache; it stores through kb_store_out at the
 * indexed row of the destination's strides (f16 caches through atomics).
 * Into a quantized cache (q8_0, q4_0) it quantizes a pair of blocks an
 * invocation (gen_set_rows_quant), a layer's keys and values in one
 * dispatch where the fusion pass paired them.
 */
#include <stdio.h>

#include "kernels/kernels.h"

#define ROWS_WG 256 /* where the device allows it (kb_workgroup) */

glesc_status kernels_gen_get_rows(kb *b)
{
    const int wg = kb_workgroup(b, ROWS_WG);
    const glesc_tensor *a = b->gk->anchor, *tab = a->src[0], *idx = a->src[1];
    if (b->k) {
        emit_kernel_local_size(b->k, wg, 1, 1);
        emit_kernel_snippet(b->k, "graph/eltwise");
    }
    int n_chunks = CORE_MAX(1, tab->owner->st.n_chunks);
    if (n_chunks > 1 && (tab->owner != tab || tab->ne[2] * tab->ne[3] != 1))
        return kb_fail(b, GLESC_ERROR_UNSUPPORTED,
                       "get_rows: a table split into chunks must be a whole 2-D tensor");
    int64_t chunk_rows = n_chunks > 1 ? tab->owner->st.chunk_rows : tab->ne[1];
    int tb = kb_binding(b, tab->owner, 0, false);
    char buf[16];
    snprintf(buf, sizeof buf, "t%d", tb);
    kernels_wload_emit(b, tab, "load_w", buf, KERNELS_WLOAD_ELEM, "ne0");
    uint64_t n = (uint64_t)graph_nelements(a);
    kb_param_u(b, "n", n);
    kb_param_u(b, "R", (uint64_t)tab->ne[1]);
    kb_param_u(b, "a_off", n_chunks > 1 ? 0 : tab->offs);
    kb_param_u(b, "a_nb1", (uint64_t)tab->nb[1]);
    kb_param_u(b, "a_nb2", tab->ne[2] == 1 ? 0 : (uint64_t)tab->nb[2]);
    kb_param_u(b, "a_nb3", tab->ne[3] == 1 ? 0 : (uint64_t)tab->nb[3]);
    int p_base = kb_param_u(b, "r_base", 0);
    int p_count = kb_param_u(b, "r_count", (uint64_t)CORE_MIN(chunk_rows, tab->ne[1]));
    kb_line(b, "uint gid = %s * WG_SIZE + gl_LocalInvocationID.x;", KB_GROUP_INDEX);
    kb_line(b, "if (gid >= n) {");
    kb_line(b, "return;");
    kb_line(b, "}");
    kb_coords_from_flat(b, "gid", a, "ne", "c");
    const char *ci[4] = {"c1", "c2", "c3", "0u"};
    char row[16];
    kb_load_int(b, idx, ci, row);
    /* An index outside the table reads as 0, written by the first chunk's
     * dispatch only (every chunk's dispatch sees every output element). */
    kb_line(b, "bool mine = %s >= int(r_base) && %s < int(r_base + r_count);", row, row);
    kb_line(b, "bool outside = %s < 0 || %s >= int(R);", row, row);
    kb_line(b, "if (mine || (outside && r_base == 0u)) {");
    kb_line(b,
            "uint rb = a_off + (mine ? uint(%s) - r_base : 0u) * a_nb1 + c2 * a_nb2 + c3 * a_nb3;",
            row);
    kb_line(b, "float v = mine ? load_w(rb, c0) : 0.0;");
    const char *c[4] = {"c0", "c1", "c2", "c3"};
    kb_store_out(b, c, "v", NULL);
    kb_line(b, "}");
    uint64_t groups = (n + wg - 1) / wg;
    for (int ch = 0; ch < n_chunks; ch++) {
        int64_t base = (int64_t)ch * chunk_rows;
        kb_param_set_u(b, p_base, (uint64_t)base);
        kb_param_set_u(b, p_count, (uint64_t)CORE_MIN(chunk_rows, tab->ne[1] - base));
        kb_binding_set_chunk(b, tb, ch);
        kb_dispatch_1d(b, groups);
    }
    return b->st;
}

void kernels_expr_gather(kb *b, const glesc_tensor *t, const char *const c[4], char out[16])
{
    const glesc_tensor *tab = t->src[0], *idx = t->src[1];
    int g = 0;
    while (g < b->n_gather && b->gather[g] != t)
        g++;
    if (g == b->n_gather) { /* first read in this kernel: loader and uniforms */
        if (g == KB_MAX_GATHER) {
            kb_fail(b, GLESC_ERROR_LIMIT, "kernel computes more than %d gathers", KB_MAX_GATHER);
            snprintf(out, 16, "0.0");
            return;
        }
        if (tab->owner->st.n_chunks > 1)
            kb_fail(b, GLESC_ERROR_STATE, "an inline gather's table is split into chunks");
        b->gather[b->n_gather++] = t;
        int tb = kb_binding(b, tab->owner, 0, false);
        char fn[24], buf[24], pn[24];
        snprintf(fn, sizeof fn, "load_g%d", g);
        snprintf(buf, sizeof buf, "t%d", tb);
        snprintf(pn, sizeof pn, "g%d_ne0", g);
        kernels_wload_emit(b, tab, fn, buf, KERNELS_WLOAD_ELEM, pn);
        kb_param_u(b, pn, (uint64_t)tab->ne[0]);
        snprintf(pn, sizeof pn, "g%d_R", g);
        kb_param_u(b, pn, (uint64_t)tab->ne[1]);
        snprintf(pn, sizeof pn, "g%d_off", g);
        kb_param_u(b, pn, tab->offs);
        snprintf(pn, sizeof pn, "g%d_nb1", g);
        kb_param_u(b, pn, (uint64_t)tab->nb[1]);
        snprintf(pn, sizeof pn, "g%d_nb2", g);
        kb_param_u(b, pn, tab->ne[2] == 1 ? 0 : (uint64_t)tab->nb[2]);
        snprintf(pn, sizeof pn, "g%d_nb3", g);
        kb_param_u(b, pn, tab->ne[3] == 1 ? 0 : (uint64_t)tab->nb[3]);
    }
    const char *ci[4] = {c[1], c[2], c[3], "0u"};
    char row[16];
    kb_load_int(b, idx, ci, row);
    kb_var(b, out);
    /* ?: evaluates only the branch taken: no load outside the table */
    kb_line(b,
            "float %s = %s >= 0 && %s < int(g%d_R) ? load_g%d(g%d_off + uint(%s) * g%d_nb1 + %s * "
            "g%d_nb2 + %s * g%d_nb3, %s) : 0.0; // get_rows",
            out, row, row, g, g, g, row, g, c[2], g, c[3], g, c[0]);
}

/* Quantizes block k (0 or 1) of the pair in xs into the words at base +
 * i·qw of binding bi (quants) and its scale into dk, as ggml's
 * quantize_row_*_ref: q8_0 d = amax / 127, q = round-half-away(x / d);
 * q4_0 d = (the value of largest magnitude, the first such) / -8,
 * q = min(15, trunc(x / d + 8.5)). */
static void quantize_block(kb *b, glesc_dtype dt, int k, int bi, uint32_t qw)
{
    kb_line(b, "if (%du < nbk) {", k);
    kb_line(b, "uint o = %du;", 32 * k);
    kb_line(b, "float amax = 0.0;");
    kb_line(b, "float mx = 0.0;");
    kb_line(b, "for (uint j = 0u; j < 32u; j++) {");
    kb_line(b, "float v = xs[o + j];");
    kb_line(b, "if (amax < abs(v)) {");
    kb_line(b, "amax = abs(v);");
    kb_line(b, "mx = v;");
    kb_line(b, "}");
    kb_line(b, "}");
    kb_line(b, "float d = %s;", dt == GLESC_DTYPE_Q8_0 ? "amax / 127.0" : "mx / -8.0");
    kb_line(b, "float id = d != 0.0 ? 1.0 / d : 0.0;");
    kb_line(b, "uint i = (2u * p + %du) & 7u;", k);
    kb_line(b, "for (uint w = 0u; w < %uu; w++) {", qw);
    kb_line(b, "uint word = 0u;");
    kb_line(b, "for (uint y = 0u; y < 4u; y++) {");
    if (dt == GLESC_DTYPE_Q8_0) {
        kb_line(b, "float v = clamp(xs[o + 4u * w + y] * id, -127.0, 127.0);");
        kb_line(b, "int q = int(sign(v) * floor(abs(v) + 0.5));");
        kb_line(b, "word |= (uint(q) & 0xffu) << (8u * y);");
    } else {
        kb_line(b, "uint q0 = uint(clamp(int(xs[o + 4u * w + y] * id + 8.5), 0, 15));");
        kb_line(b, "uint q1 = uint(clamp(int(xs[o + 16u + 4u * w + y] * id + 8.5), 0, 15));");
        kb_line(b, "word |= (q0 | (q1 << 4u)) << (8u * y);");
    }
    kb_line(b, "}");
    kb_line(b, "t%d[base + i * %uu + w] = word;", bi, qw);
    kb_line(b, "}");
    kb_line(b, "d%d = d;", k);
    kb_line(b, "}");
}

/* The invocations of set_rows a: one per pair of blocks of each row. */
static uint64_t quant_invocations(const glesc_tensor *a)
{
    return (uint64_t)((a->src[0]->ne[0] / 32 + 1) / 2 * a->src[1]->ne[1]);
}

/* Part w of the kernel (set_rows a: the anchor, or its paired sibling):
 * invocation gid (counted from the part's first) writes its pair of
 * blocks. The source's 64 values are computed (a fused prologue included)
 * into registers, each block quantized as ggml's CPU reference does. */
static void quant_part(kb *b, const glesc_tensor *a, int w)
{
    const glesc_tensor *dst = a->src[0], *src = a->src[1], *idx = a->src[2];
    glesc_dtype dt = dst->dtype;
    uint32_t qw, gw;
    kernels_kvq_layout(dt, &qw, &gw);
    int64_t nblk = dst->ne[0] / 32;
    int bi = kb_binding(b, dst->owner, 0, true);
    char name[16];
    static const char *const fields[] = {"n", "R", "np", "nb", "rw"};
    const uint64_t vals[] = {quant_invocations(a), (uint64_t)dst->ne[1], (uint64_t)((nblk + 1) / 2),
                             (uint64_t)nblk, graph_row_bytes(dt, dst->ne[0]) / 4};
    for (int f = 0; f < 5; f++) {
        snprintf(name, sizeof name, "%s%d", fields[f], w);
        kb_param_u(b, name, vals[f]);
    }
    kb_line(b, "if (gid < n%d) { // %s rows into t%d", w, glesc_dtype_name(dt), bi);
    kb_line(b, "uint c1 = gid / np%d;", w);
    kb_line(b, "uint p = gid - c1 * np%d;", w);
    const char *ci[4] = {"c1", "0u", "0u", "0u"};
    char row[16];
    kb_load_int(b, idx, ci, row);
    kb_line(b, "if (%s >= 0 && %s < int(R%d)) { // rows outside the destination are dropped", row,
            row, w);
    kb_line(b, "uint nbk = min(2u, nb%d - 2u * p);", w);
    kb_line(b, "float xs[64];");
    kb_line(b, "for (uint j = 0u; j < 64u; j++) {");
    kb_line(b, "xs[j] = 0.0;");
    kb_line(b, "if (j < 32u * nbk) {");
    kb_line(b, "uint c0 = 64u * p + j;");
    const char *c[4] = {"c0", "c1", "0u", "0u"};
    char v[16];
    int memo = b->n_memo; /* values computed in the loop stay in it */
    b->depth++;
    kb_expr(b, src, c, v);
    b->depth--;
    b->n_memo = memo;
    kb_line(b, "xs[j] = %s;", v);
    kb_line(b, "}");
    kb_line(b, "}");
    kb_line(b, "uint g = p >> 2u;");
    kb_line(b, "uint cnt = min(8u, nb%d - g * 8u);", w);
    kb_line(b, "uint base = uint(%s) * rw%d + g * %uu;", row, w, gw);
    kb_line(b, "float d0 = 0.0;");
    kb_line(b, "float d1 = 0.0;");
    quantize_block(b, dt, 0, bi, qw);
    quantize_block(b, dt, 1, bi, qw);
    kb_line(b, "t%d[base + cnt * %uu + ((2u * p) & 7u) / 2u] = packHalf2x16(vec2(d0, d1));", bi,
            qw);
    kb_line(b, "}");
    kb_line(b, "return;");
    kb_line(b, "}");
    kb_line(b, "gid -= n%d;", w);
}

/* set_rows into a KV cache of a block type (q8_0, q4_0; graph_kv_quant),
 * with the layer's other cache write where the fusion pass paired them
 * (a sibling: keys and values in one dispatch): an invocation per pair of
 * blocks of a row, so the pair's two f16 scales, which share a word
 * (kernels_kvq_layout), have one writer. A cache then matches llama.cpp's
 * quantized cache up to the GPU's division and f16 rounding. */
static glesc_status gen_set_rows_quant(kb *b, int wg)
{
    const glesc_tensor *a = b->gk->anchor;
    uint64_t n = quant_invocations(a);
    for (int i = 0; i < b->gk->n_sib; i++)
        n += quant_invocations(b->gk->sib[i]);
    if (b->k) {
        emit_kernel_local_size(b->k, wg, 1, 1);
        emit_kernel_comment(b->k,
                            "set_rows into %d quantized KV cache%s: a pair of blocks an "
                            "invocation",
                            1 + b->gk->n_sib, b->gk->n_sib ? "s" : "");
    }
    kb_line(b, "uint gid = %s * WG_SIZE + gl_LocalInvocationID.x;", KB_GROUP_INDEX);
    quant_part(b, a, 0);
    for (int i = 0; i < b->gk->n_sib; i++)
        quant_part(b, b->gk->sib[i], i + 1);
    kb_dispatch_1d(b, (n + (uint64_t)wg - 1) / (uint64_t)wg);
    return b->st;
}

glesc_status kernels_gen_set_rows(kb *b)
{
    const int wg = kb_workgroup(b, ROWS_WG);
    if (graph_dtype_quant(b->gk->anchor->src[0]->dtype))
        return gen_set_rows_quant(b, wg);
    const glesc_tensor *a = b->gk->anchor, *src = a->src[1], *idx = a->src[2];
    if (b->k) {
        emit_kernel_local_size(b->k, wg, 1, 1);
        emit_kernel_snippet(b->k, "graph/eltwise");
    }
    uint64_t n = (uint64_t)graph_nelements(src);
    kb_param_u(b, "n", n);
    kb_param_u(b, "R", (uint64_t)a->ne[1]);
    kb_line(b, "uint gid = %s * WG_SIZE + gl_LocalInvocationID.x;", KB_GROUP_INDEX);
    kb_line(b, "if (gid >= n) {");
    kb_line(b, "return;");
    kb_line(b, "}");
    kb_coords_from_flat(b, "gid", src, "ne", "c");
    const char *ci[4] = {"c1", "c2", "c3", "0u"};
    char row[16];
    kb_load_int(b, idx, ci, row);
    kb_line(b, "if (%s >= 0 && %s < int(R)) { // rows outside the destination are dropped", row,
            row);
    const char *c[4] = {"c0", "c1", "c2", "c3"};
    char v[16];
    kb_expr(b, src, c, v);
    kb_line(b, "uint r = uint(%s);", row);
    const char *co[4] = {"c0", "r", "c2", "c3"};
    kb_store_out(b, co, v, NULL);
    kb_line(b, "}");
    kb_dispatch_1d(b, (n + wg - 1) / wg);
    return b->st;
}
