/*
 * ref_vops.c — CPU references of the vision ops that are not convolutions
 * (vops.c has their shape rules and parameters): the activations, pad,
 * slice, gather, log-softmax, pooling and transposed convolution. Plain
 * loops in double precision, written from ONNX's operator definitions.
 */
#include <math.h>
#include <stdlib.h>

#include "graph/ref.h"

double ref_leaky_relu(double x, const float *p)
{
    return x >= 0 ? x : p[0] * x;
}
double ref_elu(double x, const float *p)
{
    return x >= 0 ? x : p[0] * (exp(x) - 1.0);
}
double ref_hard_sigmoid(double x, const float *p)
{
    double y = p[0] * x + p[1];
    return y < 0 ? 0 : y > 1 ? 1 : y;
}
double ref_hard_swish(double x, const float *p)
{
    double y = x / 6.0 + 0.5;
    return x * (y < 0 ? 0 : y > 1 ? 1 : y);
}

/* Index of c in a contiguous tensor of shape ne. */
static int64_t at(const int64_t ne[4], const int64_t c[4])
{
    return c[0] + ne[0] * (c[1] + ne[1] * (c[2] + ne[2] * c[3]));
}

#define FOR4(ne, c)                                                                                \
    for (c[3] = 0; c[3] < (ne)[3]; c[3]++)                                                         \
        for (c[2] = 0; c[2] < (ne)[2]; c[2]++)                                                     \
            for (c[1] = 0; c[1] < (ne)[1]; c[1]++)                                                 \
                for (c[0] = 0; c[0] < (ne)[0]; c[0]++)

/* numpy.pad's source index of i for a dimension of n (reflect, edge), or -1
 * outside (constant). */
static int64_t pad_src(int mode, int64_t i, int64_t n)
{
    if (mode == GLESC_PAD_EDGE)
        return i < 0 ? 0 : i >= n ? n - 1 : i;
    if (mode == GLESC_PAD_REFLECT) {
        if (n == 1)
            return 0;
        int64_t period = 2 * (n - 1), m = llabs(i) % period;
        return m < n ? m : period - m;
    }
    return i >= 0 && i < n ? i : -1;
}

void ref_pad(const glesc_tensor *t, float *dst, const float *const *src)
{
    const glesc_tensor *x = t->src[0];
    int64_t c[4], i = 0;
    FOR4(t->ne, c)
    {
        int64_t s[4];
        bool inside = true;
        for (int d = 0; d < 4; d++) {
            s[d] = pad_src(t->ip[0], c[d] - t->ip[1 + d], x->ne[d]);
            inside &= s[d] >= 0;
        }
        dst[i++] = inside ? src[0][at(x->ne, s)] : t->fp[0];
    }
}

void ref_slice(const glesc_tensor *t, float *dst, const float *const *src)
{
    const glesc_tensor *x = t->src[0];
    int64_t c[4], i = 0;
    FOR4(t->ne, c)
    {
        int64_t s[4];
        for (int d = 0; d < 4; d++)
            s[d] = t->ip[d] + c[d] * t->ip[4 + d];
        dst[i++] = src[0][at(x->ne, s)];
    }
}

void ref_gather(const glesc_tensor *t, float *dst, const float *const *src)
{
    const glesc_tensor *x = t->src[0], *ix = t->src[1];
    int axis = t->ip[0], q = ix->ndim;
    int64_t c[4], i = 0;
    FOR4(t->ne, c)
    {
        int64_t ci[4] = {0, 0, 0, 0}, s[4] = {0, 0, 0, 0};
        for (int j = 0; j < q; j++)
            ci[j] = c[axis + j];
        int64_t k = (int64_t)src[1][at(ix->ne, ci)], n = x->ne[axis];
        k = k < 0 ? k + n : k;
        if (k < 0 || k >= n) {
            dst[i++] = 0.0f; /* out of range reads 0 (as the kernel) */
            continue;
        }
        for (int d = 0; d < 4; d++)
            s[d] = d < axis ? c[d] : d == axis ? k : d + q - 1 < 4 ? c[d + q - 1] : 0;
        dst[i++] = src[0][at(x->ne, s)];
    }
}

void ref_log_softmax(const glesc_tensor *t, float *dst, const float *const *src)
{
    int ax = t->ip[0];
    int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}, c[4];
    ne[ax] = 1;
    FOR4(ne, c)
    {
        int64_t cc[4] = {c[0], c[1], c[2], c[3]};
        double mx = -INFINITY, sum = 0;
        for (cc[ax] = 0; cc[ax] < t->ne[ax]; cc[ax]++)
            mx = fmax(mx, src[0][at(t->ne, cc)]);
        for (cc[ax] = 0; cc[ax] < t->ne[ax]; cc[ax]++)
            sum += exp(src[0][at(t->ne, cc)] - mx);
        double lse = mx + log(sum);
        for (cc[ax] = 0; cc[ax] < t->ne[ax]; cc[ax]++)
            dst[at(t->ne, cc)] = (float)(src[0][at(t->ne, cc)] - lse);
    }
}

void ref_pool(const glesc_tensor *t, float *dst, const float *const *src)
{
    const glesc_tensor *x = t->src[0];
    const int32_t *p = t->ip;
    bool avg = p[0] == GLESC_POOL_AVG, incl = p[12] != 0;
    int64_t c[4], i = 0;
    FOR4(t->ne, c)
    {
        double acc = avg ? 0 : -INFINITY;
        int64_t n_in = 0, n_pad = 0;
        for (int64_t kh = 0; kh < p[2]; kh++) {
            int64_t ih = c[1] * p[4] - p[8] + kh * p[6];
            for (int64_t kw = 0; kw < p[1]; kw++) {
                int64_t iw = c[0] * p[3] - p[7] + kw * p[5];
                /* positions of the padded input [-begin, n + end) count with
                 * count_include_pad; those past it (a ceil-mode window's
                 * overhang) never do */
                if (ih < x->ne[1] + p[10] && iw < x->ne[0] + p[9])
                    n_pad++;
                if (ih < 0 || ih >= x->ne[1] || iw < 0 || iw >= x->ne[0])
                    continue;
                double v = src[0][at(x->ne, (int64_t[4]){iw, ih, c[2], c[3]})];
                acc = avg ? acc + v : fmax(acc, v);
                n_in++;
            }
        }
        int64_t div = incl ? n_pad : n_in;
        dst[i++] = n_in == 0 ? 0.0f : (float)(avg ? acc / (double)div : acc);
    }
}

void ref_conv_transpose(const glesc_tensor *t, float *dst, const float *const *src)
{
    const glesc_tensor *x = t->src[0], *w = t->src[1];
    const int32_t *p = t->ip;
    int64_t cout_g = w->ne[2], cin_g = x->ne[2] / p[10];
    int64_t c[4], i = 0;
    FOR4(t->ne, c)
    {
        int64_t grp = c[2] / cout_g, col = c[2] % cout_g;
        double acc = t->n_src > 2 ? src[2][c[2]] : 0.0;
        for (int64_t ci = grp * cin_g; ci < (grp + 1) * cin_g; ci++)
            for (int64_t kh = 0; kh < w->ne[1]; kh++) {
                int64_t th = c[1] + p[5] - kh * p[3]; /* = ih · stride */
                if (th < 0 || th % p[1] || th / p[1] >= x->ne[1])
                    continue;
                for (int64_t kw = 0; kw < w->ne[0]; kw++) {
                    int64_t tw = c[0] + p[4] - kw * p[2];
                    if (tw < 0 || tw % p[0] || tw / p[0] >= x->ne[0])
                        continue;
                    acc += (double)src[0][at(x->ne, (int64_t[4]){tw / p[0], th / p[1], ci, c[3]})] *
                           src[1][at(w->ne, (int64_t[4]){kw, kh, col, ci})];
                }
            }
        dst[i++] = (float)acc;
    }
}
