/*
 * test_graph_util.h — helpers of the graph and op tests: seeded random
 * inputs, the normalized mean squared error (ggml's test-backend-ops
 * measure: sum((a-b)^2) / sum(b^2)), and the GPU-vs-CPU-reference check.
 */
#ifndef GLESC_TEST_GRAPH_UTIL_H
#define GLESC_TEST_GRAPH_UTIL_H

#include <stdint.h>

#include "glesc.h"

/* Uniform values in [lo, hi) from seed (i32 tensors: integers in [lo, hi)). */
void tg_fill(glesc_tensor *t, uint32_t seed, float lo, float hi);
/* Writes floats into t (converted to its type). */
void tg_write(glesc_tensor *t, const float *v);
/* A new graph input, filled as tg_fill. */
glesc_tensor *tg_input(glesc_graph *g, glesc_dtype dt, int ndim, const int64_t *shape,
                       uint32_t seed, float lo, float hi);
double tg_nmse(const float *a, const float *ref, int64_t n);
/* Computes outs on the GPU and with the CPU references, compares each by
 * NMSE against tol (fails the test above it), logs what and the worst
 * error, and returns the worst NMSE. */
double tg_check(glesc_graph *g, glesc_tensor *const *outs, int n, double tol, const char *what);
/* Reads t as floats (malloc'ed). */
float *tg_read(glesc_tensor *t);
/* Fusion forced on (1) or off (-1) for g. */
void tg_fusion(glesc_graph *g, int on);

#endif
