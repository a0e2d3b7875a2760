/*
 * ref.c — CPU references of every op (see ref.h). Plain loops in double
 * precision; speed does not matter, obviousness does.
 */
#include <math.h>
#include <string.h>

#include "graph/ref.h"
#include "quant/quant.h"

#define GELU_C 0.7978845608028654 /* sqrt(2/pi) */

double ref_neg(double x, const float *p)
{
    return -x;
}
double ref_abs(double x, const float *p)
{
    return fabs(x);
}
double ref_sqr(double x, const float *p)
{
    return x * x;
}
double ref_sqrt(double x, const float *p)
{
    return sqrt(x);
}
double ref_rsqrt(double x, const float *p)
{
    return 1.0 / sqrt(x);
}
double ref_exp(double x, const float *p)
{
    return exp(x);
}
double ref_log(double x, const float *p)
{
    return log(x);
}
double ref_sin(double x, const float *p)
{
    return sin(x);
}
double ref_cos(double x, const float *p)
{
    return cos(x);
}
double ref_tanh(double x, const float *p)
{
    return tanh(x);
}
double ref_sigmoid(double x, const float *p)
{
    return 1.0 / (1.0 + exp(-x));
}
double ref_relu(double x, const float *p)
{
    return x > 0 ? x : 0;
}
double ref_gelu(double x, const float *p)
{
    return 0.5 * x * (1.0 + tanh(GELU_C * (x + 0.044715 * x * x * x)));
}
double ref_gelu_erf(double x, const float *p)
{
    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}
double ref_silu(double x, const float *p)
{
    return x / (1.0 + exp(-x));
}
double ref_softplus(double x, const float *p)
{
    return x > 30 ? x : log1p(exp(x));
}
double ref_step(double x, const float *p)
{
    return x > 0 ? 1 : 0;
}
double ref_scale(double x, const float *p)
{
    return x * p[0] + p[1];
}
double ref_clamp(double x, const float *p)
{
    return x < p[0] ? p[0] : x > p[1] ? p[1] : x;
}
double ref_ident(double x, const float *p)
{
    return x;
}
double ref_add(double a, double b)
{
    return a + b;
}
double ref_sub(double a, double b)
{
    return a - b;
}
double ref_mul(double a, double b)
{
    return a * b;
}
double ref_div(double a, double b)
{
    return a / b;
}
double ref_max(double a, double b)
{
    return a > b ? a : b;
}
double ref_min(double a, double b)
{
    return a < b ? a : b;
}
double ref_pow(double a, double b)
{
    return pow(a, b);
}

/* Contiguous strides (in elements) of a shape. */
static void strides(const int64_t ne[4], int64_t s[4])
{
    s[0] = 1;
    for (int d = 1; d < 4; d++)
        s[d] = s[d - 1] * ne[d - 1];
}

/* Index of coordinate c in a contiguous tensor of shape ne, broadcasting
 * size-1 dimensions. */
static int64_t bidx(const int64_t ne[4], const int64_t c[4])
{
    int64_t s[4];
    strides(ne, s);
    int64_t i = 0;
    for (int d = 0; d < 4; d++)
        i += (ne[d] == 1 ? 0 : c[d]) * s[d];
    return i;
}

#define FOR4(ne, c)                                                                                \
    for (c[3] = 0; c[3] < (ne)[3]; c[3]++)                                                         \
        for (c[2] = 0; c[2] < (ne)[2]; c[2]++)                                                     \
            for (c[1] = 0; c[1] < (ne)[1]; c[1]++)                                                 \
                for (c[0] = 0; c[0] < (ne)[0]; c[0]++)

void ref_unary(const glesc_tensor *t, float *dst, const float *const *src)
{
    double (*f)(double, const float *) = graph_op(t->op)->f1;
    int64_t n = graph_nelements(t);
    for (int64_t i = 0; i < n; i++)
        dst[i] = (float)f(src[0][i], t->fp);
}

void ref_binary(const glesc_tensor *t, float *dst, const float *const *src)
{
    double (*f)(double, double) = graph_op(t->op)->f2;
    const glesc_tensor *a = t->src[0], *b = t->src[1];
    int64_t c[4], i = 0;
    FOR4(t->ne, c) dst[i++] = (float)f(src[0][bidx(a->ne, c)], src[1][bidx(b->ne, c)]);
}

void ref_reduce(const glesc_tensor *t, float *dst, const float *const *src)
{
    const glesc_tensor *x = t->src[0];
    int ax = t->ip[0];
    int64_t c[4], i = 0;
    FOR4(t->ne, c)
    {
        double acc = t->op == GLESC_OP_SUM || t->op == GLESC_OP_MEAN ? 0 : src[0][bidx(x->ne, c)];
        int64_t arg = 0;
        bool nan = false;
        int64_t cc[4] = {c[0], c[1], c[2], c[3]};
        for (int64_t j = 0; j < x->ne[ax]; j++) {
            cc[ax] = j;
            double v = src[0][bidx(x->ne, cc)];
            switch (t->op) {
            case GLESC_OP_SUM:
            case GLESC_OP_MEAN:
                acc += v;
                break;
            case GLESC_OP_REDUCE_MAX:
                acc = v > acc ? v : acc;
                break;
            case GLESC_OP_REDUCE_MIN:
                acc = v < acc ? v : acc;
                break;
            default: /* argmax: the first maximum; a row with a NaN gives -1 */
                nan |= isnan(v);
                if (v > acc) {
                    acc = v;
                    arg = j;
                }
                break;
            }
        }
        if (t->op == GLESC_OP_MEAN)
            acc /= (double)x->ne[ax];
        dst[i++] = t->op == GLESC_OP_ARGMAX ? (nan ? -1.0f : (float)arg) : (float)acc;
    }
}

void ref_softmax(const glesc_tensor *t, float *dst, const float *const *src)
{
    const glesc_tensor *mask = t->src[1];
    int64_t ne0 = t->ne[0], ne1 = t->ne[1];
    double scale = t->fp[0];
    bool causal = t->ip[0] != 0;
    int64_t c[4] = {0};
    double *v = core_malloc((size_t)ne0 * sizeof *v);
    if (!v)
        return;
    for (c[3] = 0; c[3] < t->ne[3]; c[3]++)
        for (c[2] = 0; c[2] < t->ne[2]; c[2]++)
            for (c[1] = 0; c[1] < ne1; c[1]++) {
                int64_t row = ((c[3] * t->ne[2] + c[2]) * ne1 + c[1]) * ne0;
                double mx = -INFINITY, sum = 0;
                for (c[0] = 0; c[0] < ne0; c[0]++) {
                    double x = src[0][row + c[0]] * scale;
                    if (mask)
                        x += src[1][bidx(mask->ne, c)];
                    if (causal && c[0] > c[1] + (ne0 - ne1))
                        x = -INFINITY;
                    v[c[0]] = x;
                    mx = x > mx ? x : mx;
                }
                for (int64_t j = 0; j < ne0; j++) {
                    v[j] = mx == -INFINITY ? 0 : exp(v[j] - mx);
                    sum += v[j];
                }
                for (int64_t j = 0; j < ne0; j++)
                    dst[row + j] = sum > 0 ? (float)(v[j] / sum) : 0.0f;
            }
    core_free(v);
}

void ref_rms_norm(const glesc_tensor *t, float *dst, const float *const *src)
{
    int64_t ne0 = t->ne[0], rows = graph_nelements(t) / ne0;
    for (int64_t r = 0; r < rows; r++) {
        const float *x = src[0] + r * ne0;
        double ss = 0;
        for (int64_t j = 0; j < ne0; j++)
            ss += (double)x[j] * x[j];
        double s = 1.0 / sqrt(ss / (double)ne0 + t->fp[0]);
        for (int64_t j = 0; j < ne0; j++)
            dst[r * ne0 + j] = (float)(x[j] * s);
    }
}

void ref_layer_norm(const glesc_tensor *t, float *dst, const float *const *src)
{
    int64_t ne0 = t->ne[0], rows = graph_nelements(t) / ne0;
    for (int64_t r = 0; r < rows; r++) {
        const float *x = src[0] + r * ne0;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < ne0; j++)
            mean += x[j];
        mean /= (double)ne0;
        for (int64_t j = 0; j < ne0; j++)
            var += (x[j] - mean) * (x[j] - mean);
        double s = 1.0 / sqrt(var / (double)ne0 + t->fp[0]);
        for (int64_t j = 0; j < ne0; j++)
            dst[r * ne0 + j] = (float)((x[j] - mean) * s);
    }
}

void ref_matmul(const glesc_tensor *t, float *dst, const float *const *src)
{
    const glesc_tensor *w = t->src[0], *x = t->src[1];
    int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
    int64_t r2 = x->ne[2] / w->ne[2], r3 = x->ne[3] / w->ne[3];
    for (int64_t b3 = 0; b3 < x->ne[3]; b3++)
        for (int64_t b2 = 0; b2 < x->ne[2]; b2++) {
            const float *wb = src[0] + ((b3 / r3) * w->ne[2] + b2 / r2) * K * N;
            const float *xb = src[1] + (b3 * x->ne[2] + b2) * K * M;
            float *ob = dst + (b3 * x->ne[2] + b2) * N * M;
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                    double acc = 0;
                    for (int64_t k = 0; k < K; k++)
                        acc += (double)wb[n * K + k] * xb[m * K + k];
                    ob[m * N + n] = (float)acc;
                }
        }
}

void ref_get_rows(const glesc_tensor *t, float *dst, const float *const *src)
{
    const glesc_tensor *a = t->src[0], *b = t->src[1];
    int64_t c[4], i = 0;
    FOR4(t->ne, c)
    {
        int64_t bc[4] = {c[1], c[2], c[3], 0};
        int64_t row = (int64_t)src[1][bidx(b->ne, bc)];
        int64_t ac[4] = {c[0], row, c[2], c[3]};
        dst[i++] = row >= 0 && row < a->ne[1] ? src[0][bidx(a->ne, ac)] : 0.0f;
    }
}

void ref_set_rows(const glesc_tensor *t, float *dst, const float *const *src)
{
    const glesc_tensor *s = t->src[1], *ix = t->src[2];
    memcpy(dst, src[0], (size_t)graph_nelements(t) * sizeof *dst);
    int64_t c[4];
    FOR4(s->ne, c)
    {
        int64_t ic[4] = {c[1], c[2], c[3], 0};
        int64_t row = (int64_t)src[2][bidx(ix->ne, ic)];
        if (row < 0 || row >= t->ne[1])
            continue;
        int64_t dc[4] = {c[0], row, c[2], c[3]};
        dst[bidx(t->ne, dc)] = src[1][bidx(s->ne, c)];
    }
    if (!graph_kv_quant(t->dtype))
        return;
    /* a block type's rows as its GPU quantizer stores them: ggml's
     * quantize_row_*_ref, read back (set_rows of such a type is 2-D) */
    uint8_t blocks[34 * 32];
    for (int64_t r = 0; r < ix->ne[0]; r++) {
        int64_t row = (int64_t)src[2][r];
        if (row < 0 || row >= t->ne[1])
            continue;
        float *x = dst + row * t->ne[0];
        for (int64_t c0 = 0; c0 < t->ne[0]; c0 += 1024) {
            int64_t n = CORE_MIN(1024, t->ne[0] - c0);
            quant_quantize(t->dtype, x + c0, blocks, n);
            quant_dequantize(t->dtype, blocks, x + c0, n);
        }
    }
}

void ref_concat(const glesc_tensor *t, float *dst, const float *const *src)
{
    const glesc_tensor *a = t->src[0], *b = t->src[1];
    int dim = t->ip[0];
    int64_t c[4], i = 0;
    FOR4(t->ne, c)
    {
        if (c[dim] < a->ne[dim]) {
            dst[i++] = src[0][bidx(a->ne, c)];
        } else {
            int64_t cb[4] = {c[0], c[1], c[2], c[3]};
            cb[dim] -= a->ne[dim];
            dst[i++] = src[1][bidx(b->ne, cb)];
        }
    }
}

void ref_cpy(const glesc_tensor *t, float *dst, const float *const *src)
{
    memcpy(dst, src[0], (size_t)graph_nelements(t) * sizeof *dst);
}

void ref_rope(const glesc_tensor *t, float *dst, const float *const *src)
{
    int n_dims = t->ip[0];
    bool neox = t->ip[1] == GLESC_ROPE_NEOX, yarn = t->ip[2] != 0;
    double base = t->fp[0], fscale = t->fp[1], ext = t->fp[2], mscale = t->fp[3];
    double lo_dim = t->ip[3], hi_dim = t->ip[4];
    if (yarn) /* ggml's rope_yarn: the magnitude of the interpolation */
        mscale *= 1.0 + 0.1 * log(1.0 / fscale);
    int64_t c[4], i = 0;
    FOR4(t->ne, c)
    {
        const float *x = src[0] + i - c[0]; /* the row */
        double pos = src[1][c[2]];
        int64_t j = c[0];
        if (j >= n_dims) {
            dst[i++] = x[j];
            continue;
        }
        int64_t half = n_dims / 2, pair, lo, hi;
        if (neox) {
            pair = j % half;
            lo = pair;
            hi = pair + half;
        } else {
            pair = j / 2;
            lo = 2 * pair;
            hi = lo + 1;
        }
        double theta = pos * pow(base, -2.0 * (double)pair / n_dims);
        if (t->n_src > 2 && src[2])
            theta /= src[2][pair];
        if (yarn) { /* a ramp from extrapolation to interpolation */
            double y = ((double)pair - lo_dim) / fmax(0.001, hi_dim - lo_dim);
            double mix = (1.0 - fmin(1.0, fmax(0.0, y))) * ext;
            theta = theta * fscale * (1.0 - mix) + theta * mix;
        } else {
            theta *= fscale;
        }
        double cs = cos(theta) * mscale, sn = sin(theta) * mscale;
        dst[i++] = (float)(j == lo ? x[lo] * cs - x[hi] * sn : x[lo] * sn + x[hi] * cs);
    }
}

void ref_attention(const glesc_tensor *t, float *dst, const float *const *src)
{
    const glesc_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2], *mask = t->src[3];
    int64_t D = q->ne[0], Tq = q->ne[1], H = q->ne[2], Tk = k->ne[1], Hkv = k->ne[2];
    int64_t Dv = v->ne[0];
    double scale = t->fp[0], cap = t->ip[2] ? t->fp[1] : 0.0;
    bool causal = t->ip[0] != 0;
    int64_t n_swa = t->ip[1];
    double *s = core_malloc((size_t)Tk * sizeof *s);
    if (!s)
        return;
    for (int64_t h = 0; h < H; h++) {
        int64_t hk = h / (H / Hkv);
        for (int64_t i = 0; i < Tq; i++) {
            const float *qr = src[0] + (h * Tq + i) * D;
            double mx = -INFINITY;
            for (int64_t j = 0; j < Tk; j++) {
                const float *kr = src[1] + (hk * Tk + j) * D;
                double acc = 0;
                for (int64_t d = 0; d < D; d++)
                    acc += (double)qr[d] * kr[d];
                acc *= scale;
                if (cap > 0)
                    acc = cap * tanh(acc / cap);
                if (mask) {
                    int64_t mc[4] = {j, i, h, 0};
                    acc += src[3][bidx(mask->ne, mc)];
                }
                if (causal && j > i + (Tk - Tq))
                    acc = -INFINITY;
                if (n_swa > 0 && i + (Tk - Tq) - j >= n_swa)
                    acc = -INFINITY;
                s[j] = acc;
                mx = acc > mx ? acc : mx;
            }
            double sum = 0;
            for (int64_t j = 0; j < Tk; j++) {
                s[j] = mx == -INFINITY ? 0 : exp(s[j] - mx);
                sum += s[j];
            }
            float *o = dst + (i * H + h) * Dv;
            for (int64_t d = 0; d < Dv; d++) {
                double acc = 0;
                for (int64_t j = 0; j < Tk; j++)
                    acc += s[j] * src[2][(hk * Tk + j) * Dv + d];
                o[d] = sum > 0 ? (float)(acc / sum) : 0.0f;
            }
        }
    }
    core_free(s);
}

/* ONNX Conv over x [W, H, C_in, N] and w [kW, kH, C_in / group, C_out]
 * (or their 1-D forms: graph_conv_dims), zeros outside the input. */
void ref_conv(const glesc_tensor *t, float *dst, const float *const *src)
{
    graph_conv_dims d;
    graph_conv_dims_of(t, &d);
    const float *xv = src[0], *wv = src[1], *bv = t->src[2] ? src[2] : NULL;
    int64_t cog = d.co / d.group;
    for (int64_t n = 0; n < d.n; n++)
        for (int64_t co = 0; co < d.co; co++) {
            int64_t ci0 = co / cog * d.cg;
            for (int64_t oy = 0; oy < d.oh; oy++)
                for (int64_t ox = 0; ox < d.ow; ox++) {
                    double acc = bv ? bv[co] : 0.0;
                    for (int64_t ci = 0; ci < d.cg; ci++)
                        for (int64_t ky = 0; ky < d.kh; ky++) {
                            int64_t iy = oy * d.sh - d.ph + ky * d.dh;
                            if (iy < 0 || iy >= d.h)
                                continue;
                            for (int64_t kx = 0; kx < d.kw; kx++) {
                                int64_t ix = ox * d.sw - d.pw + kx * d.dw;
                                if (ix < 0 || ix >= d.w)
                                    continue;
                                acc += (double)xv[((n * d.c + ci0 + ci) * d.h + iy) * d.w + ix] *
                                       wv[((co * d.cg + ci) * d.kh + ky) * d.kw + kx];
                            }
                        }
                    dst[((n * d.co + co) * d.oh + oy) * d.ow + ox] = (float)acc;
                }
        }
}

/* ONNX BatchNormalization (inference): channel = dimension 2. */
void ref_batch_norm(const glesc_tensor *t, float *dst, const float *const *src)
{
    int64_t plane = t->ne[0] * t->ne[1], C = t->ne[2], N = t->ne[3];
    double eps = t->fp[0];
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            double s = src[1][c] / sqrt((double)src[4][c] + eps);
            for (int64_t i = 0; i < plane; i++) {
                int64_t j = (n * C + c) * plane + i;
                dst[j] = (float)(((double)src[0][j] - src[3][c]) * s + src[2][c]);
            }
        }
}
