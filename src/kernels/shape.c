/*
 * shape.c — the expressions of the vision shape ops that read their source
 * at other coordinates (remaps, like concat): pad (constant, reflect,
 * edge), slice with a negative step, and ONNX's gather along one
 * dimension. Each computes the source coordinates from its own, always
 * valid ones (clamped), and selects where the value comes from elsewhere
 * (the pad constant, 0 for an index out of range), so a pure elementwise
 * kernel fuses them with their neighbours.
 */
#include <stdio.h>

#include "kernels/kernels.h"

void kernels_expr_pad(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out)
{
    const glesc_tensor *x = t->src[0];
    int mode = t->ip[0], id = b->n_fparam++;
    char cs[4][16], in[16] = "", name[24], v[16];
    const char *cc[4];
    if (mode == GLESC_PAD_CONSTANT) {
        kb_var(b, in);
        kb_line(b, "bool %s = true;", in);
    }
    for (int d = 0; d < 4; d++) {
        cc[d] = c[d];
        if (!t->ip[1 + d] && !t->ip[5 + d])
            continue;
        char pb[24], pn[24], i[16];
        snprintf(pb, sizeof pb, "pad%d_b%d", id, d);
        snprintf(pn, sizeof pn, "pad%d_n%d", id, d);
        kb_param_i(b, pb, t->ip[1 + d]);
        kb_param_i(b, pn, x->ne[d]);
        kb_var(b, i);
        kb_line(b, "int %s = int(%s) - %s;", i, c[d], pb);
        if (mode == GLESC_PAD_CONSTANT) {
            kb_line(b, "%s = %s && %s >= 0 && %s < %s;", in, in, i, i, pn);
        } else if (mode == GLESC_PAD_REFLECT) {
            /* numpy's reflect: symmetric about 0, period 2(n - 1) */
            kb_line(b, "%s = %s > 1 ? abs(%s) %% (2 * %s - 2) : 0;", i, pn, i, pn);
            kb_line(b, "%s = %s < %s ? %s : 2 * %s - 2 - %s;", i, i, pn, i, pn, i);
        }
        kb_var(b, cs[d]);
        kb_line(b, "uint %s = uint(clamp(%s, 0, %s - 1));", cs[d], i, pn);
        cc[d] = cs[d];
    }
    kb_expr(b, x, cc, v);
    if (mode == GLESC_PAD_CONSTANT) {
        snprintf(name, sizeof name, "pad%d_v", id);
        kb_param_f(b, name, t->fp[0]);
        sbuf_appendf(out, "(%s ? %s : %s)", in, v, name);
    } else {
        sbuf_append(out, v);
    }
}

void kernels_expr_slice(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out)
{
    int id = b->n_fparam++;
    char cs[4][16], v[16];
    const char *cc[4];
    for (int d = 0; d < 4; d++) {
        cc[d] = c[d];
        if (t->ip[d] == 0 && t->ip[4 + d] == 1)
            continue;
        char f[24], s[24];
        snprintf(f, sizeof f, "sl%d_f%d", id, d);
        snprintf(s, sizeof s, "sl%d_s%d", id, d);
        kb_param_i(b, f, t->ip[d]);
        kb_param_i(b, s, t->ip[4 + d]);
        kb_var(b, cs[d]);
        kb_line(b, "uint %s = uint(%s + int(%s) * %s);", cs[d], f, c[d], s);
        cc[d] = cs[d];
    }
    sbuf_append(out, kb_expr(b, t->src[0], cc, v));
}

void kernels_expr_gather_axis(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out)
{
    const glesc_tensor *x = t->src[0], *ix = t->src[1];
    int axis = t->ip[0], q = ix->ndim, id = b->n_fparam++;
    const char *ci[4] = {"0u", "0u", "0u", "0u"}, *cx[4];
    for (int j = 0; j < q; j++)
        ci[j] = c[axis + j];
    char k[16], ok[16], cu[16], v[16], n[24];
    kb_var(b, k);
    if (kb_is_member(b, ix)) /* an index computed in this kernel: exact as a float */
        kb_line(b, "int %s = int(%s);", k, kb_expr(b, ix, ci, v));
    else
        kb_line(b, "int %s = %s;", k, kb_load_int(b, ix, ci, v));
    snprintf(n, sizeof n, "ga%d_n", id);
    kb_param_i(b, n, x->ne[axis]);
    kb_var(b, ok);
    kb_var(b, cu);
    kb_line(b, "%s = %s < 0 ? %s + %s : %s;", k, k, k, n, k);
    kb_line(b, "bool %s = %s >= 0 && %s < %s;", ok, k, k, n);
    kb_line(b, "uint %s = %s ? uint(%s) : 0u;", cu, ok, k);
    for (int d = 0; d < 4; d++)
        cx[d] = d < axis ? c[d] : d == axis ? cu : d + q - 1 < 4 ? c[d + q - 1] : "0u";
    kb_expr(b, x, cx, v);
    sbuf_appendf(out, "(%s ? %s : 0.0)", ok, v);
}
