/*
 * eltwise.c — elementwise kernels and the expressions of the elementwise
 * rows. A pure elementwise kernel is one invocation per element of its out
 * node: flat index → coordinates → kb_expr(out) (which walks every fused
 * source) → store. The expressions here are also what other kernels inline
 * as prologues and epilogues.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"

#define ELTWISE_WG 256 /* where the device allows it (kb_workgroup) */

glesc_status kernels_gen_eltwise(kb *b)
{
    const int wg = kb_workgroup(b, ELTWISE_WG);
    const glesc_tensor *out = b->gk->out;
    if (b->k) {
        emit_kernel_local_size(b->k, wg, 1, 1);
        emit_kernel_snippet(b->k, "graph/eltwise");
    }
    uint64_t n = (uint64_t)graph_nelements(out);
    kb_param_u(b, "n", n);
    kb_line(b, "uint gid = %s * WG_SIZE + gl_LocalInvocationID.x;", KB_GROUP_INDEX);
    kb_line(b, "if (gid >= n) {");
    kb_line(b, "return;");
    kb_line(b, "}");
    kb_coords_from_flat(b, "gid", out, "ne", "c");
    static const char *const c[4] = {"c0", "c1", "c2", "c3"};
    kb_store_out(b, c, NULL, NULL);
    kb_dispatch_1d(b, (n + wg - 1) / wg);
    return b->st;
}

/* Float uniform for t's param i. */
static void fparam_name(kb *b, const glesc_tensor *t, int i, char name[16])
{
    snprintf(name, 16, "p%d", b->n_fparam++);
    kb_param_f(b, name, t->fp[i]);
}

void kernels_expr_template(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out)
{
    const char *tpl = kernels_op(t->op)->glsl;
    char vals[GRAPH_MAX_SRC][16] = {{0}};
    char pnames[GRAPH_MAX_FP][16] = {{0}};
    bool have_v[GRAPH_MAX_SRC] = {0}, have_p[GRAPH_MAX_FP] = {0};
    /* Sources and params are set up in template order, the same in both modes. */
    for (const char *p = tpl; *p; p++) {
        if (p[0] == '$' && p[1] == 'p' && p[2] >= '0' && p[2] <= '3') {
            int i = p[2] - '0';
            if (!have_p[i]) {
                fparam_name(b, t, i, pnames[i]);
                have_p[i] = true;
            }
            sbuf_append(out, pnames[i]);
            p += 2;
        } else if (p[0] == '$' && p[1] >= '0' && p[1] <= '3') {
            int i = p[1] - '0';
            if (!have_v[i]) {
                kb_expr(b, t->src[i], c, vals[i]);
                have_v[i] = true;
            }
            sbuf_append(out, vals[i]);
            p += 1;
        } else {
            sbuf_appendc(out, *p);
        }
    }
}

void kernels_expr_cast(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out)
{
    char v[16];
    kb_expr(b, t->src[0], c, v);
    /* Round as a store of the target type would, so a fused cast gives the
     * same values as a materialized one. */
    switch (t->dtype) {
    case GLESC_DTYPE_F16:
        sbuf_appendf(out, "unpackHalf2x16(packHalf2x16(vec2(%s, 0.0))).x", v);
        break;
    case GLESC_DTYPE_BF16:
        sbuf_appendf(out,
                     "uintBitsToFloat(((floatBitsToUint(%s) + 0x7fffu + "
                     "((floatBitsToUint(%s) >> 16) & 1u)) >> 16) << 16)",
                     v, v);
        break;
    case GLESC_DTYPE_I32:
        sbuf_appendf(out, "trunc(%s)", v);
        break;
    default:
        sbuf_append(out, v);
    }
}

void kernels_expr_concat(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out)
{
    int dim = t->ip[0];
    char na[16], ka[16], kb_[16], va[16], vb[16];
    snprintf(na, sizeof na, "cat%d", b->n_fparam++);
    kb_param_u(b, na, (uint64_t)t->src[0]->ne[dim]);
    kb_var(b, ka);
    kb_var(b, kb_);
    /* Both sides are read at valid coordinates; the select picks one. */
    kb_line(b, "uint %s = min(%s, %s - 1u);", ka, c[dim], na);
    kb_line(b, "uint %s = %s >= %s ? %s - %s : 0u;", kb_, c[dim], na, c[dim], na);
    const char *ca[4] = {c[0], c[1], c[2], c[3]}, *cb[4] = {c[0], c[1], c[2], c[3]};
    ca[dim] = ka;
    cb[dim] = kb_;
    kb_expr(b, t->src[0], ca, va);
    kb_expr(b, t->src[1], cb, vb);
    sbuf_appendf(out, "(%s < %s ? %s : %s)", c[dim], na, va, vb);
}

void kernels_expr_rope(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out)
{
    bool neox = t->ip[1] == GLESC_ROPE_NEOX, yarn = t->ip[2] != 0;
    char nd[16], base[16], scale[16], ms[16], pair[16], idx[16], th[16], pos[16], x[16], xp[16];
    int id = b->n_fparam++;
    snprintf(nd, sizeof nd, "rope%d_nd", id);
    snprintf(base, sizeof base, "rope%d_base", id);
    snprintf(scale, sizeof scale, "rope%d_scale", id);
    snprintf(ms, sizeof ms, "rope%d_ms", id);
    kb_param_u(b, nd, (uint64_t)t->ip[0]);
    kb_param_f(b, base, t->fp[0]);
    kb_param_f(b, scale, t->fp[1]);
    /* the magnitude of a rotated pair: attn_factor, and YaRN's
     * 1 + 0.1·ln(1 / freq_scale) on top (ggml's rope_yarn) */
    kb_param_f(b, ms, yarn ? (float)(t->fp[3] * (1.0 + 0.1 * log(1.0 / t->fp[1]))) : t->fp[3]);
    kb_var(b, pair);
    kb_var(b, idx);
    kb_var(b, th);
    /* The partner element of the rotation, and the rotation's index i in
     * theta = pos · scale · base^(-2i/n_dims). */
    if (neox) {
        kb_line(b, "uint %s = %s >= %s ? %s : (%s < %s / 2u ? %s + %s / 2u : %s - %s / 2u);", pair,
                c[0], nd, c[0], c[0], nd, c[0], nd, c[0], nd);
        if (b->lean) /* no remainder by a uniform; past n_dims (no rotation) any index */
            kb_line(b, "uint %s = %s < %s / 2u ? %s : %s - %s / 2u;", idx, c[0], nd, c[0], c[0],
                    nd);
        else
            kb_line(b, "uint %s = %s %% (%s / 2u);", idx, c[0], nd);
    } else {
        kb_line(b, "uint %s = %s >= %s ? %s : (%s ^ 1u);", pair, c[0], nd, c[0], c[0]);
        kb_line(b, "uint %s = %s / 2u;", idx, c[0]);
    }
    const char *pc[4] = {c[2], "0u", "0u", "0u"};
    kb_load_int(b, t->src[1], pc, pos);
    kb_line(b, "float %s = float(%s) * pow(%s, -2.0 * float(%s) / float(%s));", th, pos, base, idx,
            nd);
    if (t->n_src > 2 && t->src[2]) { /* frequency factors: one per rotation */
        char ff[16], fi[64];
        /* lean: an element past n_dims has an index past the factors */
        snprintf(fi, sizeof fi, "min(%s, %s / 2u - 1u)", idx, nd);
        const char *fc[4] = {b->lean && neox ? fi : idx, "0u", "0u", "0u"};
        kb_expr(b, t->src[2], fc, ff);
        kb_line(b, "%s /= %s;", th, ff);
    }
    if (yarn) {
        /* YaRN: interpolated (θ·scale) below the correction dimensions,
         * extrapolated (θ) above, a linear ramp between (ggml's
         * rope_yarn_ramp), weighted by ext_factor */
        char lo[16], hi[16], ext[16], mix[16];
        snprintf(lo, sizeof lo, "rope%d_lo", id);
        snprintf(hi, sizeof hi, "rope%d_hi", id);
        snprintf(ext, sizeof ext, "rope%d_ext", id);
        kb_param_f(b, lo, (float)t->ip[3]);
        kb_param_f(b, hi, (float)t->ip[4]);
        kb_param_f(b, ext, t->fp[2]);
        kb_var(b, mix);
        kb_line(b,
                "float %s = (1.0 - clamp((float(%s) - %s) / max(0.001, %s - %s), 0.0, 1.0)) * %s;",
                mix, idx, lo, hi, lo, ext);
        kb_line(b, "%s = %s * %s * (1.0 - %s) + %s * %s;", th, th, scale, mix, th, mix);
    } else {
        kb_line(b, "%s *= %s;", th, scale);
    }
    kb_expr(b, t->src[0], c, x);
    const char *cp[4] = {pair, c[1], c[2], c[3]};
    kb_expr(b, t->src[0], cp, xp);
    sbuf_appendf(out, "(%s >= %s ? %s : (", c[0], nd, x);
    if (neox)
        sbuf_appendf(out, "%s < %s / 2u", c[0], nd);
    else
        sbuf_appendf(out, "(%s & 1u) == 0u", c[0]);
    sbuf_appendf(out,
                 " ? (%s * cos(%s) - %s * sin(%s)) * %s : (%s * sin(%s) + %s * cos(%s)) * %s))", x,
                 th, xp, th, ms, xp, th, x, th, ms);
}
