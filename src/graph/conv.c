/*
 * conv.c — the builders of the vision ops: glesc_conv2d, glesc_conv1d (the
 * same op in its 1-D form) and glesc_batch_norm, which
 * folds a batch normalization into the convolution before it when the
 * weights and the normalization's parameters are constants (persistent
 * tensors, read here once: see glesc.h). The folded node is an ordinary
 * convolution with new persistent weights that the graph holds; the
 * original convolution stays in the graph for any other consumer (it costs
 * nothing when nothing needs it); and the convolution's sizes
 * (graph_conv_dims_of), which its shape rule, reference and kernel share.
 */
#include <math.h>
#include <string.h>

#include "graph/graph.h"

/* The caller's params in this header's layout (fields it was not compiled
 * with are zero: their defaults). */
static glesc_conv_params conv_params(const glesc_conv_params *p)
{
    glesc_conv_params c;
    memset(&c, 0, sizeof c);
    if (p) {
        size_t n = p->struct_size && p->struct_size < sizeof c ? p->struct_size : sizeof c;
        memcpy(&c, p, n);
    }
    return c;
}

void graph_conv_dims_of(const glesc_tensor *t, graph_conv_dims *d)
{
    const glesc_tensor *x = t->src[0], *w = t->src[1];
    d->one_d = (t->ip[7] & GRAPH_CONV_1D) != 0;
    d->group = t->ip[7] & (GRAPH_CONV_1D - 1);
    d->sh = t->ip[0];
    d->sw = t->ip[1];
    d->ph = t->ip[2];
    d->pw = t->ip[3];
    d->dh = t->ip[6] & 0xffff;
    d->dw = t->ip[6] >> 16;
    int o = d->one_d ? 1 : 0; /* the 1-D form lacks dimension 1 */
    d->w = x->ne[0];
    d->h = d->one_d ? 1 : x->ne[1];
    d->c = x->ne[2 - o];
    d->n = x->ne[3 - o];
    d->kw = w->ne[0];
    d->kh = d->one_d ? 1 : w->ne[1];
    d->cg = w->ne[2 - o];
    d->co = w->ne[3 - o];
    d->ow = t->ne[0];
    d->oh = d->one_d ? 1 : t->ne[1];
}

static int or1(int v)
{
    return v ? v : 1;
}

/* A convolution node (1-D or 2-D) from the caller's params. */
static glesc_tensor *conv_node(glesc_graph *g, const char *fn, glesc_tensor *x, glesc_tensor *w,
                               glesc_tensor *b, const glesc_conv_params *p, bool one_d)
{
    int dh = or1(p->dilations[0]), dw = or1(p->dilations[1]), grp = or1(p->group);
    if (g && (dh < 1 || dw < 1 || dh > 0x7fff || dw > 0x7fff || grp < 1 || grp >= GRAPH_CONV_1D)) {
        core_err_set(&g->ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                     "%s: dilations %d, %d are not 1 .. 32767 or the group count %d is not 1 .. "
                     "2^24 - 1",
                     fn, dh, dw, grp);
        return NULL;
    }
    if (!x || !w)
        return NULL;
    glesc_tensor *s[3] = {x, w, b};
    int32_t ip[8] = {
        or1(p->strides[0]), or1(p->strides[1]), p->pads[0],    p->pads[1],
        p->pads[2],         p->pads[3],         dh | dw << 16, grp | (one_d ? GRAPH_CONV_1D : 0)};
    return graph_node(g, GLESC_OP_CONV, s, 3, ip, 8, NULL, 0);
}

GLESC_API glesc_tensor *glesc_conv2d(glesc_graph *g, glesc_tensor *x, glesc_tensor *w,
                                     glesc_tensor *b, const glesc_conv_params *params)
{
    glesc_conv_params p = conv_params(params);
    return conv_node(g, "glesc_conv2d", x, w, b, &p, false);
}

GLESC_API glesc_tensor *glesc_conv1d(glesc_graph *g, glesc_tensor *x, glesc_tensor *w,
                                     glesc_tensor *b, const glesc_conv_params *params)
{
    glesc_conv_params p = conv_params(params);
    if (g && (or1(p.strides[0]) != 1 || or1(p.dilations[0]) != 1 || p.pads[0] || p.pads[2])) {
        core_err_set(&g->ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                     "glesc_conv1d: the H entries of the params (stride %d, pads %d and %d, "
                     "dilation %d) must be 0 or their default: a 1-D convolution reads only W's",
                     p.strides[0], p.pads[0], p.pads[2], p.dilations[0]);
        return NULL;
    }
    return conv_node(g, "glesc_conv1d", x, w, b, &p, true);
}

/* Is t a constant for folding: a persistent tensor of a float type that no
 * node of g writes in place? */
static bool is_constant(const glesc_graph *g, const glesc_tensor *t)
{
    if (!t || !t->persistent || !graph_dtype_ok(t->dtype) || t->dtype == GLESC_DTYPE_I32)
        return false;
    for (const glesc_tensor *n = g->tensors; n; n = n->next)
        if (graph_op(n->op)->inplace && n->owner == t)
            return false;
    return true;
}

static bool fusion_on(const glesc_graph *g)
{
    return g->opts.fusion > 0 || (g->opts.fusion == 0 && !core_env_flag("GLESC_NO_FUSION"));
}

/* The folded convolution: conv's weight and bias times the normalization's
 * scale per output channel, as a new node of g. NULL with the message set
 * on failure. */
static glesc_tensor *fold(glesc_graph *g, glesc_tensor *conv, glesc_tensor *const prm[4], float eps)
{
    glesc_context *ctx = g->ctx;
    glesc_tensor *w = conv->src[1], *b = conv->src[2];
    graph_conv_dims d;
    graph_conv_dims_of(conv, &d);
    int64_t co = d.co, per = graph_nelements(w) / co;
    size_t nw = (size_t)graph_nelements(w);
    float *wv = core_malloc(nw * sizeof *wv), *pv = core_malloc(5 * (size_t)co * sizeof *pv);
    glesc_tensor *nwt = NULL, *nbt = NULL, *res = NULL;
    glesc_status st =
        wv && pv ? GLESC_OK
                 : core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "glesc_batch_norm: folding");
    if (st == GLESC_OK)
        st = graph_tensor_gather_f32(w, wv);
    for (int i = 0; i < 4 && st == GLESC_OK; i++)
        st = graph_tensor_gather_f32(prm[i], pv + (size_t)i * (size_t)co);
    float *bv = pv + 4 * (size_t)co; /* scale, bias, mean, var, then the conv's bias */
    if (st == GLESC_OK && b)
        st = graph_tensor_gather_f32(b, bv);
    else if (st == GLESC_OK)
        memset(bv, 0, (size_t)co * sizeof *bv);
    if (st == GLESC_OK) {
        for (int64_t c = 0; c < co; c++) {
            double s = pv[c] / sqrt((double)pv[3 * co + c] + eps);
            for (int64_t i = 0; i < per; i++)
                wv[c * per + i] = (float)(wv[c * per + i] * s);
            bv[c] = (float)(((double)bv[c] - pv[2 * co + c]) * s + pv[co + c]);
        }
        nwt = glesc_weight_new(ctx, GLESC_DTYPE_F32, w->ndim, w->ne);
        nbt = glesc_weight_new(ctx, GLESC_DTYPE_F32, 1, &co);
        st = nwt && nbt ? glesc_tensor_write_f32(nwt, wv, nw) : ctx->err.status;
        if (st == GLESC_OK)
            st = glesc_tensor_write_f32(nbt, bv, (size_t)co);
    }
    if (st == GLESC_OK) {
        glesc_tensor *s[3] = {conv->src[0], nwt, nbt};
        res = graph_node(g, GLESC_OP_CONV, s, 3, conv->ip, GRAPH_MAX_IP, NULL, 0);
    }
    /* the graph holds the new weights now (or nothing does) */
    glesc_weight_free(nwt);
    glesc_weight_free(nbt);
    core_free(wv);
    core_free(pv);
    if (!res)
        core_err_prefix(&ctx->err, "glesc_batch_norm: folding into the convolution");
    return res;
}

GLESC_API glesc_tensor *glesc_batch_norm(glesc_graph *g, glesc_tensor *x, glesc_tensor *scale,
                                         glesc_tensor *bias, glesc_tensor *mean, glesc_tensor *var,
                                         float eps)
{
    if (!g || !x || !scale || !bias || !mean || !var)
        return NULL;
    glesc_tensor *s[5] = {x, scale, bias, mean, var};
    glesc_tensor *bn = graph_node(g, GLESC_OP_BATCH_NORM, s, 5, NULL, 0, &eps, 1);
    /* a 1-D convolution's channel is its dimension 1, not the batch norm's */
    if (!bn || x->op != GLESC_OP_CONV || (x->ip[7] & GRAPH_CONV_1D) || !fusion_on(g))
        return bn;
    bool constant = is_constant(g, x->src[1]) && (!x->src[2] || is_constant(g, x->src[2]));
    for (int i = 1; i < 5; i++)
        constant &= is_constant(g, s[i]);
    if (!constant)
        return bn;
    /* the unfolded node checked the shapes; it is no longer needed */
    graph_drop_newest(g, bn);
    return fold(g, x, s + 1, eps);
}
