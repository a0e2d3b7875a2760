/*
 * test_graph_util.c — see test_graph_util.h.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "graph/graph.h"
#include "test_graph_util.h"

static float frand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / (float)(1u << 24);
}

void tg_write(glesc_tensor *t, const float *v)
{
    glesc_status st = glesc_tensor_write_f32(t, v, (size_t)glesc_tensor_nelements(t));
    cr_assert_eq(st, GLESC_OK, "write: %s", glesc_last_errmsg());
}

void tg_fill(glesc_tensor *t, uint32_t seed, float lo, float hi)
{
    int64_t n = glesc_tensor_nelements(t);
    float *v = malloc((size_t)n * sizeof *v);
    uint32_t s = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < n; i++) {
        float r = lo + (hi - lo) * frand(&s);
        v[i] = glesc_tensor_dtype(t) == GLESC_DTYPE_I32 ? floorf(r) : r;
    }
    glesc_status st = glesc_tensor_write_f32(t, v, (size_t)n);
    cr_assert_eq(st, GLESC_OK, "fill: %s", glesc_context_errmsg(t->ctx));
    free(v);
}

glesc_tensor *tg_input(glesc_graph *g, glesc_dtype dt, int ndim, const int64_t *shape,
                       uint32_t seed, float lo, float hi)
{
    glesc_tensor *t = glesc_tensor_new(g, dt, ndim, shape);
    cr_assert_not_null(t, "tensor_new: %s", glesc_context_errmsg(glesc_graph_context(g)));
    tg_fill(t, seed, lo, hi);
    return t;
}

double tg_nmse(const float *a, const float *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (isnan(num))
        return INFINITY;
    if (den == 0)
        return num == 0 ? 0 : INFINITY;
    return num / den;
}

float *tg_read(glesc_tensor *t)
{
    int64_t n = glesc_tensor_nelements(t);
    float *v = malloc((size_t)n * sizeof *v + 1);
    glesc_status st = glesc_tensor_read_f32(t, v, (size_t)n);
    cr_assert_eq(st, GLESC_OK, "read: %s", glesc_context_errmsg(t->ctx));
    return v;
}

double tg_check(glesc_graph *g, glesc_tensor *const *outs, int n, double tol, const char *what)
{
    glesc_context *ctx = glesc_graph_context(g);
    float *ref[16];
    cr_assert_leq(n, 16);
    glesc_status st = graph_cpu_eval(g, outs, n, ref);
    cr_assert_eq(st, GLESC_OK, "%s: cpu eval: %s", what, glesc_context_errmsg(ctx));
    st = glesc_graph_compute(g, outs, n);
    cr_assert_eq(st, GLESC_OK, "%s: compute: %s: %s", what, glesc_status_name(st),
                 glesc_context_errmsg(ctx));
    double worst = 0;
    for (int i = 0; i < n; i++) {
        float *got = tg_read(outs[i]);
        int64_t ne = glesc_tensor_nelements(outs[i]);
        double e = tg_nmse(got, ref[i], ne);
        if (e > tol) {
            for (int64_t j = 0; j < ne && j < 8; j++)
                cr_log_error("%s out %d [%lld]: got %g want %g", what, i, (long long)j, got[j],
                             ref[i][j]);
        }
        cr_assert_leq(e, tol, "%s: output %d (%lld elements): NMSE %.3g above %.3g", what, i,
                      (long long)ne, e, tol);
        if (e > worst)
            worst = e;
        free(got);
        free(ref[i]);
    }
    return worst;
}

void tg_fusion(glesc_graph *g, int on)
{
    glesc_graph_options o = {0};
    o.fusion = on;
    cr_assert_eq(glesc_graph_set_options(g, &o), GLESC_OK);
}
