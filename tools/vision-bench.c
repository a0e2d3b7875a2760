/*
 * vision-bench — times a MobileNet-v2-style network built with the public
 * C API: a 3x3 stride-2 stem, the 17 inverted residual blocks of
 * MobileNet v2 (1x1 expand conv + batch norm + ReLU6, 3x3 depthwise conv +
 * batch norm + ReLU6, 1x1 project conv + batch norm, a residual add where
 * the shapes match), a 1x1 conv to 1280 channels, a global mean and the
 * 1000-way classifier, on random weights. Prints milliseconds per
 * inference, GFLOP/s (2 per multiply-add of the convolutions and the
 * classifier) and dispatches, with fusion on (batch norms folded into the
 * convolutions, the rest in their epilogues) and off.
 *
 *   vision-bench [-s SIZE] [-b BATCH] [-r REPS] [-w WARMUP] [--fusion on|off|both]
 *                [--profile] [--layers]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/args.h"
#include "common/rng.h"
#include "glesc.h"

typedef struct net {
    glesc_context *ctx;
    glesc_graph *g;
    glesc_tensor **weights;
    int n_weights, cap_weights;
    uint64_t rng;
    double flops;
    int convs;
    /* per convolution, in build order: its kind (0 stem or dense, 1
     * pointwise, 2 depthwise) and FLOPs, for --profile */
    int kind[64];
    double kflops[64];
    char desc[64][48]; /* "1x1 56x56 24->144" */
} net;

static glesc_tensor *weight(net *n, int ndim, const int64_t *shape, float lo, float hi)
{
    glesc_tensor *t = glesc_weight_new(n->ctx, GLESC_DTYPE_F32, ndim, shape);
    if (!t)
        return NULL;
    int64_t count = 1;
    for (int d = 0; d < ndim; d++)
        count *= shape[d];
    float *v = malloc((size_t)count * sizeof *v);
    if (!v) {
        glesc_weight_free(t);
        return NULL;
    }
    for (int64_t i = 0; i < count; i++)
        v[i] = lo + (hi - lo) * (float)tool_rng_uniform(&n->rng);
    glesc_status st = glesc_tensor_write_f32(t, v, (size_t)count);
    free(v);
    if (st != GLESC_OK) {
        glesc_weight_free(t);
        return NULL;
    }
    if (n->n_weights == n->cap_weights) {
        n->cap_weights = n->cap_weights ? 2 * n->cap_weights : 64;
        n->weights = realloc(n->weights, (size_t)n->cap_weights * sizeof *n->weights);
        if (!n->weights)
            return NULL;
    }
    n->weights[n->n_weights++] = t;
    return t;
}

/* conv (no bias) + batch norm, then ReLU6 when relu6. He-like weight
 * range so activations keep their scale through 50 layers. */
static glesc_tensor *conv_bn(net *n, glesc_tensor *x, int64_t cout, int k, int stride, int group,
                             bool relu6)
{
    if (!x)
        return NULL;
    int64_t cin = glesc_tensor_dim(x, 2);
    float r = 1.7f / sqrtf((float)(cin / group * k * k));
    glesc_tensor *w = weight(n, 4, (int64_t[]){k, k, cin / group, cout}, -r, r);
    glesc_tensor *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = weight(n, 1, &cout,
                      i == 0   ? 0.8f
                      : i == 3 ? 0.5f
                               : -0.1f,
                      i == 0   ? 1.2f
                      : i == 3 ? 1.5f
                               : 0.1f);
    if (!w || !p[0] || !p[1] || !p[2] || !p[3])
        return NULL;
    glesc_conv_params cp;
    glesc_conv_params_init(&cp);
    cp.strides[0] = cp.strides[1] = stride;
    for (int i = 0; i < 4; i++)
        cp.pads[i] = k / 2;
    cp.group = group;
    glesc_tensor *y = glesc_conv2d(n->g, x, w, NULL, &cp);
    if (!y)
        return NULL;
    double f = 2.0 * (double)glesc_tensor_nelements(y) * (double)(cin / group * k * k);
    n->flops += f;
    if (n->convs < 64) {
        n->kind[n->convs] = group > 1 ? 2 : k == 1 ? 1 : 0;
        snprintf(n->desc[n->convs], sizeof n->desc[0], "%dx%d/%d %lldx%lld %lld->%lld", k, k,
                 stride, (long long)glesc_tensor_dim(x, 0), (long long)glesc_tensor_dim(x, 1),
                 (long long)cin, (long long)cout);
        n->kflops[n->convs] = f;
    }
    n->convs++;
    y = glesc_batch_norm(n->g, y, p[0], p[1], p[2], p[3], 1e-5f);
    return relu6 ? glesc_clamp(n->g, y, 0.0f, 6.0f) : y;
}

static glesc_tensor *build(net *n, glesc_tensor *x)
{
    static const int cfg[][4] = {/* expansion t, channels c, repeats n, stride s */
                                 {1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                 {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
    glesc_tensor *y = conv_bn(n, x, 32, 3, 2, 1, true);
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++)
        for (int r = 0; r < cfg[i][2] && y; r++) {
            int stride = r == 0 ? cfg[i][3] : 1;
            int64_t cin = glesc_tensor_dim(y, 2), hidden = cin * cfg[i][0];
            glesc_tensor *h = cfg[i][0] == 1 ? y : conv_bn(n, y, hidden, 1, 1, 1, true);
            h = conv_bn(n, h, hidden, 3, stride, (int)hidden, true);
            h = conv_bn(n, h, cfg[i][1], 1, 1, 1, false);
            y = stride == 1 && cin == cfg[i][1] && h ? glesc_add(n->g, h, y) : h;
        }
    y = conv_bn(n, y, 1280, 1, 1, 1, true);
    if (!y)
        return NULL;
    /* global average pool: [7, 7, 1280, B] → [49, 1280·B], mean along 0 */
    int64_t hw = glesc_tensor_dim(y, 0) * glesc_tensor_dim(y, 1), ch = glesc_tensor_dim(y, 2),
            batch = glesc_tensor_dim(y, 3);
    y = glesc_reshape(n->g, y, 2, (int64_t[]){hw, ch * batch});
    y = glesc_reduce(n->g, GLESC_OP_MEAN, y, 0);
    y = glesc_reshape(n->g, y, 2, (int64_t[]){ch, batch});
    float r = 1.0f / sqrtf((float)ch);
    glesc_tensor *fc = weight(n, 2, (int64_t[]){ch, 1000}, -r, r);
    if (!y || !fc)
        return NULL;
    n->flops += 2.0 * (double)ch * 1000.0 * (double)batch;
    return glesc_matmul(n->g, fc, y);
}

#define CORE_MAX_(a, b) ((a) > (b) ? (a) : (b))

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Builds and times the network with fusion on (1) or off (-1). */
/* With fusion on every convolution is one kernel, in build order: GPU time
 * per kind of convolution (timer queries, one more compute). */
static int profile(net *n, glesc_tensor *y, bool layers)
{
    glesc_graph_options o;
    glesc_graph_options_init(&o);
    o.fusion = 1;
    o.timing = true;
    if (glesc_graph_set_options(n->g, &o) != GLESC_OK || glesc_graph_compute(n->g, &y, 1) ||
        glesc_graph_compute(n->g, &y, 1))
        return 1;
    glesc_compute_stats s;
    glesc_graph_stats(n->g, &s);
    static const char *const names[3] = {"dense 3x3 (stem)", "pointwise 1x1", "depthwise 3x3"};
    double ns[4] = {0}, fl[3] = {0};
    int cnt[4] = {0};
    for (int i = 0; i < s.n_kernel_times; i++) {
        int k = i < n->convs && i < 64 ? n->kind[i] : 3;
        if (layers)
            printf("  %2d %-28s %-24s %8.1f us %8.1f GFLOP/s\n", i, s.kernel_times[i].name,
                   k < 3 ? n->desc[i] : "", s.kernel_times[i].gpu_ns / 1e3,
                   k < 3 && s.kernel_times[i].gpu_ns ? n->kflops[i] / s.kernel_times[i].gpu_ns
                                                     : 0.0);
        ns[k] += (double)s.kernel_times[i].gpu_ns;
        cnt[k]++;
        if (k < 3)
            fl[k] += n->kflops[i];
    }
    double total = ns[0] + ns[1] + ns[2] + ns[3];
    printf("profile (GPU time of one fused inference, %d kernels, %.3f ms):\n", s.n_kernel_times,
           total / 1e6);
    for (int k = 0; k < 4; k++)
        if (cnt[k])
            printf("  %-18s %3d kernels %8.3f ms (%4.1f%%)  %8.1f GFLOP/s\n",
                   k < 3 ? names[k] : "pool + classifier", cnt[k], ns[k] / 1e6,
                   100.0 * ns[k] / total, k < 3 && ns[k] > 0 ? fl[k] / ns[k] : 0.0);
    return 0;
}

static int run(glesc_context *ctx, int fusion, long size, long batch, long reps, long warmup,
               float *logits_out, int prof)
{
    net n = {.ctx = ctx, .rng = 0x9e3779b97f4a7c15ull};
    n.g = glesc_graph_create(ctx);
    glesc_graph_options o;
    glesc_graph_options_init(&o);
    o.fusion = fusion;
    if (!n.g || glesc_graph_set_options(n.g, &o) != GLESC_OK) {
        fprintf(stderr, "vision-bench: graph: %s\n", glesc_context_errmsg(ctx));
        return 1;
    }
    int64_t in_shape[4] = {size, size, 3, batch};
    glesc_tensor *x = glesc_tensor_new(n.g, GLESC_DTYPE_F32, 4, in_shape);
    double t0 = now_ms();
    glesc_tensor *y = x ? build(&n, x) : NULL;
    double build_ms = now_ms() - t0;
    int rc = 1;
    size_t nin = (size_t)(size * size * 3 * batch), nout = (size_t)(1000 * batch);
    float *in = malloc(nin * sizeof *in), *out = malloc(nout * sizeof *out);
    double *ms = malloc((size_t)reps * sizeof *ms);
    if (!y || !in || !out || !ms) {
        fprintf(stderr, "vision-bench: building the network: %s\n", glesc_context_errmsg(ctx));
        goto done;
    }
    for (size_t i = 0; i < nin; i++)
        in[i] = (float)tool_rng_uniform(&n.rng) * 2.0f - 1.0f;
    if (glesc_tensor_write_f32(x, in, nin) != GLESC_OK)
        goto fail;
    double first = 0;
    for (long i = 0; i < warmup + reps; i++) {
        double a = now_ms();
        if (glesc_graph_compute(n.g, &y, 1) != GLESC_OK ||
            glesc_tensor_read_f32(y, out, nout) != GLESC_OK)
            goto fail;
        double d = now_ms() - a;
        if (i == 0)
            first = d;
        if (i >= warmup)
            ms[i - warmup] = d;
    }
    qsort(ms, (size_t)reps, sizeof *ms, cmp_double);
    double med = ms[reps / 2];
    glesc_compute_stats s;
    glesc_graph_stats(n.g, &s);
    printf("fusion %-3s  %4ldx%-4ld batch %ld  %2d convs  %5.2f GFLOP  %8.2f ms/inference "
           "(min %.2f)  %8.1f GFLOP/s  %3d nodes %3d kernels %3d dispatches  (build %.0f ms, "
           "first compute %.0f ms)\n",
           fusion > 0 ? "on" : "off", size, size, batch, n.convs, n.flops / 1e9, med, ms[0],
           n.flops / (med * 1e6), s.nodes, s.kernels, s.dispatches, build_ms, first);
    if (logits_out)
        memcpy(logits_out, out, 1000 * sizeof *out);
    if (prof && fusion > 0 && profile(&n, y, prof > 1) != 0)
        goto fail;
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "vision-bench: compute: %s\n", glesc_context_errmsg(ctx));
done:
    free(in);
    free(out);
    free(ms);
    glesc_graph_destroy(n.g);
    for (int i = 0; i < n.n_weights; i++)
        glesc_weight_free(n.weights[i]);
    free(n.weights);
    return rc;
}

static void usage(void)
{
    fprintf(stderr, "usage: vision-bench [-s SIZE] [-b BATCH] [-r REPS] [-w WARMUP] "
                    "[--fusion on|off|both] [--profile] [--layers]\n"
                    "  A MobileNet-v2-style network (random weights) at SIZE x SIZE (224),\n"
                    "  timed REPS times (10, median) after WARMUP runs (2); --profile: GPU time\n"
                    "  per kind of convolution (fusion on); --layers: and per kernel.\n");
}

int main(int argc, char **argv)
{
    long size = 224, batch = 1, reps = 10, warmup = 2;
    const char *fusion = "both";
    int prof = 0; /* 1: per kind, 2: per kernel too */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else if (!strcmp(a, "--profile") || !strcmp(a, "--layers")) {
            prof = CORE_MAX_(prof, a[2] == 'l' ? 2 : 1);
            continue;
        } else if (!v) {
            bad = 1;
        } else if (!strcmp(a, "-s")) {
            bad = tool_parse_long("vision-bench", a, v, 32, 4096, &size);
        } else if (!strcmp(a, "-b")) {
            bad = tool_parse_long("vision-bench", a, v, 1, 256, &batch);
        } else if (!strcmp(a, "-r")) {
            bad = tool_parse_long("vision-bench", a, v, 1, 100000, &reps);
        } else if (!strcmp(a, "-w")) {
            bad = tool_parse_long("vision-bench", a, v, 0, 100000, &warmup);
        } else if (!strcmp(a, "--fusion") &&
                   (!strcmp(v, "on") || !strcmp(v, "off") || !strcmp(v, "both"))) {
            fusion = v;
        } else {
            bad = 1;
        }
        if (bad) {
            usage();
            return 2;
        }
        i++;
    }
    glesc_context *ctx;
    if (glesc_context_create(NULL, &ctx) != GLESC_OK) {
        fprintf(stderr, "vision-bench: %s\n", glesc_last_errmsg());
        return 1;
    }
    const glesc_caps *caps = glesc_context_caps(ctx);
    printf("vision-bench: MobileNet-v2-style network on %s (%s)\n", caps->renderer, caps->version);
    float on[1000], off[1000];
    int rc = 0;
    bool both = !strcmp(fusion, "both");
    if (both || !strcmp(fusion, "on"))
        rc |= run(ctx, 1, size, batch, reps, warmup, on, prof);
    if (both || !strcmp(fusion, "off"))
        rc |= run(ctx, -1, size, batch, reps, warmup, off, false);
    if (both && !rc) {
        double worst = 0, mag = 0;
        for (int i = 0; i < 1000; i++) {
            double d = on[i] - off[i];
            worst = d * d > worst * worst ? (d < 0 ? -d : d) : worst;
            mag = on[i] * on[i] > mag * mag ? (on[i] < 0 ? -on[i] : on[i]) : mag;
        }
        printf("fusion on vs off: worst logit difference %.3g (largest logit %.3g)\n", worst, mag);
    }
    glesc_context_destroy(ctx);
    return rc;
}
