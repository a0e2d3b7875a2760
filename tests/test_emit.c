/*
 * test_emit.c — the kernel emitter: stable golden text for a sample kernel,
 * declarations deduplicated, misuse reported, allocation failure survived.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit/emit.h"
#include "test_util.h"

Test(emit, golden_saxpy)
{
    char *glsl = test_saxpy_glsl(256);
    char path[4096];
    const char *root = getenv("GLESC_SOURCE_ROOT");
    cr_assert_not_null(root, "GLESC_SOURCE_ROOT unset (run through meson test)");
    snprintf(path, sizeof path, "%s/tests/golden/saxpy.glsl", root);
    size_t n;
    char *golden = test_read_file(path, &n);
    cr_assert_not_null(golden, "cannot read %s", path);
    cr_assert_str_eq(glsl, golden, "emitted text changed; if intended, update %s with:\n%s", path,
                     glsl);
    free(golden);
    core_free(glsl);
}

Test(emit, helpers_once_and_snippets)
{
    emit_kernel *k = emit_kernel_create("reduce");
    emit_kernel_local_size(k, 128, 1, 1);
    emit_kernel_shared(k, "float", "red_scratch", 128);
    emit_kernel_snippet(k, "common/reduce");
    emit_kernel_snippet(k, "common/reduce");
    emit_kernel_helper(k, "sq", "float sq(float x) { return x * x; }");
    emit_kernel_helper(k, "sq", "float sq(float x) { return x * x; }");
    emit_kernel_define(k, "N", "%d", 1);
    emit_kernel_define(k, "N", "%d", 2);
    emit_kernel_line(k, "float s = wg_reduce_sum(sq(1.0));");
    char *glsl = emit_kernel_glsl(k, NULL);
    cr_assert_not_null(glsl);
    const char *first = strstr(glsl, "float sq(");
    cr_assert_not_null(first);
    cr_assert_null(strstr(first + 1, "float sq("), "helper added twice");
    const char *red = strstr(glsl, "RED_IMPL(wg_reduce_sum");
    cr_assert_not_null(red);
    cr_assert_null(strstr(red + 1, "RED_IMPL(wg_reduce_sum"), "snippet added twice");
    cr_assert_not_null(strstr(glsl, "#define N 2\n"));
    cr_assert_not_null(strstr(glsl, "#define WG_SIZE 128u\n"));
    cr_assert_not_null(strstr(glsl, "shared float red_scratch[128];"));
    core_free(glsl);
    emit_kernel_destroy(k);
}

Test(emit, misuse_is_reported)
{
    emit_kernel *k = emit_kernel_create("bad");
    emit_kernel_snippet(k, "no/such");
    core_err err = {0};
    cr_assert_null(emit_kernel_glsl(k, &err));
    cr_assert_eq(err.status, GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(core_err_msg(&err), "glsl/no/such.glsl"), "%s", core_err_msg(&err));
    emit_kernel_destroy(k);
    k = emit_kernel_create("dup");
    cr_assert_eq(emit_kernel_binding(k, EMIT_FLOAT, 0, "x"), 0);
    cr_assert_eq(emit_kernel_param(k, EMIT_PARAM_UINT, "x"), -1);
    cr_assert_null(emit_kernel_glsl(k, &err));
    cr_assert(strstr(core_err_msg(&err), "'x'"), "%s", core_err_msg(&err));
    core_err_clear(&err);
    emit_kernel_destroy(k);
}

/* Fail each allocation in turn: emission ends in NULL with an OOM error or
 * in the full text, never in a crash or a truncated shader. */
Test(emit, injected_allocation_failure)
{
    char *ref = test_saxpy_glsl(64);
    for (long fail = 0; fail < 200; fail++) {
        core_alloc_fail_after(fail);
        emit_kernel *k = emit_kernel_create("saxpy");
        if (k) {
            emit_kernel_comment(k, "y[i] = a * x[i] + y[i]");
            test_axpy_emit(k, 64, "+");
        }
        core_err err = {0};
        char *glsl = k ? emit_kernel_glsl(k, &err) : NULL;
        long made = core_alloc_fail_after(-1);
        if (glsl)
            cr_assert_str_eq(glsl, ref, "allocation %ld failed silently", fail);
        else if (k)
            cr_assert_eq(err.status, GLESC_ERROR_OUT_OF_MEMORY, "%s", core_err_msg(&err));
        core_free(glsl);
        emit_kernel_destroy(k);
        core_err_clear(&err);
        if (fail >= made)
            break; /* every allocation has been failed once */
    }
    core_free(ref);
}
