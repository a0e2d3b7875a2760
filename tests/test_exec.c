/*
 * test_exec.c — the executor primitive end to end: emitted saxpy and a
 * two-pass workgroup reduction against CPU references on sizes around the
 * workgroup size and above a million; barriers only between dependent
 * dispatches; GPU timers.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emit/emit.h"
#include "gl/gl.h"
#include "test_util.h"

static const uint32_t sizes[] = {1, 255, 256, 257, 1000003};

static float frand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

TEST_GPU_SUITE(exec);

static gl_buffer *upload(const void *data, uint64_t bytes)
{
    gl_buffer *b;
    cr_assert_eq(gl_pool_acquire(ctx, bytes, GL_USAGE_ACTIVATIONS, &b), GLESC_OK, "%s",
                 glesc_context_errmsg(ctx));
    cr_assert_eq(gl_buffer_upload(ctx, b, 0, data, bytes), GLESC_OK, "%s",
                 glesc_context_errmsg(ctx));
    return b;
}

/* The program of GLSL text src (freed here); fails the test with the
 * context's message. */
static const gl_program *program(char *src)
{
    const gl_program *prog;
    cr_assert_eq(gl_program_get(ctx, src, &prog), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    core_free(src);
    return prog;
}

Test(exec, saxpy_matches_cpu)
{
    const gl_program *prog = program(test_saxpy_glsl(256));
    for (size_t t = 0; t < CORE_ARRAY_LEN(sizes); t++) {
        uint32_t n = sizes[t], seed = n;
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *out = malloc(n * sizeof *y);
        for (uint32_t i = 0; i < n; i++) {
            x[i] = frand(&seed);
            y[i] = frand(&seed);
        }
        gl_buffer *bx = upload(x, n * 4ull), *by = upload(y, n * 4ull);
        gl_binding b[2] = {{bx, 0, 0, false}, {by, 0, 0, true}};
        gl_param p[2] = {GL_PARAM_U(n), GL_PARAM_F(0.75f)};
        uint32_t groups[3] = {(n + 255) / 256, 1, 1};
        cr_assert_eq(gl_dispatch(ctx, prog, b, 2, p, 2, groups), GLESC_OK, "%s",
                     glesc_context_errmsg(ctx));
        cr_assert_eq(gl_buffer_download(ctx, by, 0, out, n * 4ull), GLESC_OK, "%s",
                     glesc_context_errmsg(ctx));
        double worst = 0;
        for (uint32_t i = 0; i < n; i++)
            worst = fmax(worst, fabs((double)out[i] - (0.75 * x[i] + y[i])));
        cr_log_info("saxpy n=%u: worst abs error %.3g", n, worst);
        cr_assert_leq(worst, 1e-6, "saxpy n=%u worst error %g", n, worst);
        gl_pool_release(ctx, bx);
        gl_pool_release(ctx, by);
        free(x);
        free(y);
        free(out);
    }
}

/* Pass 1: each workgroup sums a strided slice into partial[group]; pass 2:
 * one workgroup sums the partials. */
static char *reduce_glsl(void)
{
    emit_kernel *k = emit_kernel_create("sum_reduce");
    emit_kernel_comment(k, "out[group] = sum of x over the group's grid-stride slice");
    emit_kernel_local_size(k, 256, 1, 1);
    emit_kernel_binding(k, EMIT_FLOAT, EMIT_READONLY, "x");
    emit_kernel_binding(k, EMIT_FLOAT, EMIT_WRITEONLY, "partial");
    emit_kernel_param(k, EMIT_PARAM_UINT, "n");
    emit_kernel_shared(k, "float", "red_scratch", 256);
    emit_kernel_snippet(k, "common/reduce");
    emit_kernel_line(k, "float acc = 0.0;");
    emit_kernel_line(k, "uint stride = gl_NumWorkGroups.x * WG_SIZE;");
    emit_kernel_line(k, "for (uint i = gl_GlobalInvocationID.x; i < n; i += stride) {");
    emit_kernel_line(k, "acc += x[i];");
    emit_kernel_line(k, "}");
    emit_kernel_line(k, "float total = wg_reduce_sum(acc);");
    emit_kernel_line(k, "if (gl_LocalInvocationIndex == 0u) {");
    emit_kernel_line(k, "partial[gl_WorkGroupID.x] = total;");
    emit_kernel_line(k, "}");
    core_err err = {0};
    char *s = emit_kernel_glsl(k, &err);
    cr_assert_not_null(s, "%s", core_err_msg(&err));
    emit_kernel_destroy(k);
    return s;
}

Test(exec, reduction_matches_cpu)
{
    const gl_program *prog = program(reduce_glsl());
    for (size_t t = 0; t < CORE_ARRAY_LEN(sizes); t++) {
        uint32_t n = sizes[t], seed = 7 + n;
        float *x = malloc(n * sizeof *x);
        double ref = 0, mag = 0;
        for (uint32_t i = 0; i < n; i++) {
            x[i] = frand(&seed);
            ref += x[i];
            mag += fabs(x[i]);
        }
        uint32_t groups1 = CORE_MIN((n + 255) / 256, 64u);
        gl_buffer *bx = upload(x, n * 4ull), *bp, *bo;
        cr_assert_eq(gl_pool_acquire(ctx, groups1 * 4ull, GL_USAGE_ACTIVATIONS, &bp), GLESC_OK);
        cr_assert_eq(gl_pool_acquire(ctx, 4, GL_USAGE_READBACK, &bo), GLESC_OK);
        gl_binding b1[2] = {{bx, 0, 0, false}, {bp, 0, 0, true}};
        gl_binding b2[2] = {{bp, 0, 0, false}, {bo, 0, 0, true}};
        gl_param p1 = GL_PARAM_U(n), p2 = GL_PARAM_U(groups1);
        glesc_stats before, after;
        cr_assert_eq(gl_dispatch(ctx, prog, b1, 2, &p1, 1, (uint32_t[3]){groups1, 1, 1}), GLESC_OK);
        glesc_context_stats(ctx, &before);
        cr_assert_eq(gl_dispatch(ctx, prog, b2, 2, &p2, 1, (uint32_t[3]){1, 1, 1}), GLESC_OK);
        glesc_context_stats(ctx, &after);
        cr_assert_eq(after.barriers - before.barriers, 1,
                     "pass 2 reads pass 1's output: exactly one barrier");
        float got;
        cr_assert_eq(gl_buffer_download(ctx, bo, 0, &got, 4), GLESC_OK, "%s",
                     glesc_context_errmsg(ctx));
        double err = fabs(got - ref), tol = 1e-6 * mag + 1e-6;
        cr_log_info("sum n=%u: got %.7g want %.7g, error %.3g (tolerance %.3g)", n, got, ref, err,
                    tol);
        cr_assert_leq(err, tol, "sum n=%u: got %g want %g", n, got, ref);
        gl_pool_release(ctx, bx);
        gl_pool_release(ctx, bp);
        gl_pool_release(ctx, bo);
        free(x);
    }
}

Test(exec, no_barrier_between_independent_dispatches)
{
    const gl_program *prog = program(test_saxpy_glsl(64));
    float data[64] = {0};
    gl_buffer *x = upload(data, sizeof data), *y1 = upload(data, sizeof data),
              *y2 = upload(data, sizeof data);
    gl_param p[2] = {GL_PARAM_U(64), GL_PARAM_F(1)};
    uint32_t g[3] = {1, 1, 1};
    glesc_stats s0, s1;
    glesc_context_stats(ctx, &s0);
    /* Two dispatches that share only a read-only input: no barrier. */
    cr_assert_eq(
        gl_dispatch(ctx, prog, (gl_binding[2]){{x, 0, 0, false}, {y1, 0, 0, true}}, 2, p, 2, g),
        GLESC_OK);
    cr_assert_eq(
        gl_dispatch(ctx, prog, (gl_binding[2]){{x, 0, 0, false}, {y2, 0, 0, true}}, 2, p, 2, g),
        GLESC_OK);
    glesc_context_stats(ctx, &s1);
    cr_assert_eq(s1.barriers - s0.barriers, 0);
    cr_assert_eq(s1.dispatches - s0.dispatches, 2);
    /* Writing x after both read it (write after read): one barrier. */
    cr_assert_eq(
        gl_dispatch(ctx, prog, (gl_binding[2]){{y1, 0, 0, false}, {x, 0, 0, true}}, 2, p, 2, g),
        GLESC_OK);
    glesc_context_stats(ctx, &s0);
    cr_assert_eq(s0.barriers - s1.barriers, 1);
    gl_pool_release(ctx, x);
    gl_pool_release(ctx, y1);
    gl_pool_release(ctx, y2);
}

/* Parameters go through a ring of uniform blocks: many dispatches, each with
 * its own value, must each see theirs, also after the ring wraps around. */
Test(exec, parameter_ring_wraps)
{
    const gl_program *prog = program(test_saxpy_glsl(64));
    float x[64], zero[64] = {0}, y[64];
    for (int i = 0; i < 64; i++)
        x[i] = (float)(i % 5);
    gl_buffer *bx = upload(x, sizeof x), *by = upload(zero, sizeof zero);
    /* more blocks than the 64 KiB ring holds at the device's alignment */
    int n = (int)((64u << 10) / gl_param_block_stride(ctx, 2)) + 100;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        float a = (float)(i % 3);
        sum += a;
        gl_param p[2] = {GL_PARAM_U(64), GL_PARAM_F(a)};
        cr_assert_eq(gl_dispatch(ctx, prog, (gl_binding[2]){{bx, 0, 0, false}, {by, 0, 0, true}}, 2,
                                 p, 2, (uint32_t[3]){1, 1, 1}),
                     GLESC_OK, "%s", glesc_context_errmsg(ctx));
    }
    cr_assert_eq(gl_buffer_download(ctx, by, 0, y, sizeof y), GLESC_OK);
    for (int i = 0; i < 64; i++)
        cr_assert_eq(y[i], (float)(sum * x[i]), "element %d after %d dispatches: %g, not %g", i, n,
                     y[i], sum * x[i]);
    cr_log_info("%d dispatches through the parameter ring", n);
    gl_pool_release(ctx, bx);
    gl_pool_release(ctx, by);
}

/* Blocks written once into a buffer of blocks and dispatched from many
 * times, interleaved with the ring; and the executor's binding cache: a
 * deleted buffer's name may come back for a new one, which must then be
 * bound although the cache saw "the same" name before. */
Test(exec, param_blocks_and_bind_cache)
{
    const gl_program *prog = program(test_saxpy_glsl(64));
    float x[64], zero[64] = {0}, y[64];
    for (int i = 0; i < 64; i++)
        x[i] = (float)(i % 7);
    uint64_t stride = gl_param_block_stride(ctx, 2), size = gl_param_block_size(2);
    GLuint blocks;
    cr_assert_eq(gl_param_buffer_create(ctx, 2 * stride, &blocks), GLESC_OK);
    unsigned char data[2 * 1024] = {0};
    cr_assert_leq(2 * stride, sizeof data);
    gl_param_block_pack((gl_param[2]){GL_PARAM_U(64), GL_PARAM_F(2)}, 2, data);
    gl_param_block_pack((gl_param[2]){GL_PARAM_U(64), GL_PARAM_F(3)}, 2, data + stride);
    cr_assert_eq(gl_param_buffer_write(ctx, blocks, 0, data, 2 * stride), GLESC_OK);
    uint32_t g[3] = {1, 1, 1};
    for (int round = 0; round < 3; round++) {
        gl_buffer *bx = upload(x, sizeof x), *by = upload(zero, sizeof zero);
        GLuint by_name = by->id;
        gl_binding b[2] = {{bx, 0, 0, false}, {by, 0, 0, true}};
        /* y = 2x, + 3x, + 1x (ring), + 2x again: 8x */
        cr_assert_eq(gl_dispatch_block(ctx, prog, b, 2, blocks, 0, size, g), GLESC_OK);
        cr_assert_eq(gl_dispatch_block(ctx, prog, b, 2, blocks, stride, size, g), GLESC_OK);
        cr_assert_eq(
            gl_dispatch(ctx, prog, b, 2, (gl_param[2]){GL_PARAM_U(64), GL_PARAM_F(1)}, 2, g),
            GLESC_OK);
        cr_assert_eq(gl_dispatch_block(ctx, prog, b, 2, blocks, 0, size, g), GLESC_OK);
        cr_assert_eq(gl_buffer_download(ctx, by, 0, y, sizeof y), GLESC_OK);
        for (int i = 0; i < 64; i++)
            cr_assert_eq(y[i], 8 * x[i], "round %d, element %d: %g", round, i, y[i]);
        /* delete both buffers (GL unbinds them); the next round's may get
         * the same names */
        gl_pool_release(ctx, bx);
        gl_pool_release(ctx, by);
        gl_pool_trim(ctx, 0);
        for (int i = 0; i < GL_BOUND_SSBOS; i++)
            cr_assert_neq(ctx->bound.ssbo[i].buf, by_name,
                          "the cache still holds a deleted buffer");
        cr_log_info("round %d: output buffer name %u", round, by_name);
    }
    gl_param_buffer_destroy(ctx, blocks);
}

Test(exec, bad_binding_offset_and_range)
{
    const gl_program *prog = program(test_saxpy_glsl(64));
    float data[64] = {0};
    gl_buffer *x = upload(data, sizeof data);
    gl_param p[2] = {GL_PARAM_U(64), GL_PARAM_F(1)};
    uint32_t g[3] = {1, 1, 1};
    gl_binding bad_off[2] = {{x, 4, 16, false}, {x, 0, 0, true}};
    int align = glesc_context_caps(ctx)->storage_buffer_offset_alignment;
    if (align > 4) {
        cr_assert_eq(gl_dispatch(ctx, prog, bad_off, 2, p, 2, g), GLESC_ERROR_INVALID_ARGUMENT);
        cr_assert(strstr(glesc_context_errmsg(ctx), "alignment"), "%s", glesc_context_errmsg(ctx));
    }
    gl_binding bad_range[2] = {{x, 0, 1 << 20, false}, {x, 0, 0, true}};
    cr_assert_eq(gl_dispatch(ctx, prog, bad_range, 2, p, 2, g), GLESC_ERROR_INVALID_ARGUMENT);
    float big[128];
    cr_assert_eq(gl_buffer_download(ctx, x, 0, big, 1 << 20), GLESC_ERROR_INVALID_ARGUMENT);
    gl_pool_release(ctx, x);
}

Test(exec, timer_measures)
{
    const gl_program *prog = program(test_saxpy_glsl(256));
    uint32_t n = 1 << 20;
    float *x = calloc(n, 4);
    gl_buffer *bx = upload(x, n * 4ull), *by = upload(x, n * 4ull);
    gl_timer t;
    cr_assert_eq(gl_timer_begin(ctx, &t), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    gl_param p[2] = {GL_PARAM_U(n), GL_PARAM_F(2)};
    cr_assert_eq(gl_dispatch(ctx, prog, (gl_binding[2]){{bx, 0, 0, false}, {by, 0, 0, true}}, 2, p,
                             2, (uint32_t[3]){n / 256, 1, 1}),
                 GLESC_OK);
    cr_assert_eq(gl_timer_end(ctx, &t), GLESC_OK);
    uint64_t ns = 0;
    glesc_status st = gl_timer_result(ctx, &t, &ns);
    cr_assert(st == GLESC_OK || st == GLESC_ERROR_GL, "%s", glesc_context_errmsg(ctx));
    if (st == GLESC_OK)
        cr_assert_gt(ns, 0, "a 1M-element saxpy took 0 ns (%s timer)", t.gpu ? "GPU" : "CPU");
    cr_log_info("saxpy 1M: %llu ns (%s timer)", (unsigned long long)ns, t.gpu ? "GPU" : "CPU");
    gl_timer_release(ctx, &t);
    gl_pool_release(ctx, bx);
    gl_pool_release(ctx, by);
    free(x);
}
