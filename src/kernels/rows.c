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

glesc_status kernels_gen_set_rows(kb *b)
{
    const int wg = kb_workgroup(b, ROWS_WG);
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
