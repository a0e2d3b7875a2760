/*
 * test_util.h — helpers shared by the test suites: finding ../shared (models,
 * references), reading files, running the tools as subprocesses, GPU
 * contexts and the sample kernel.
 */
#ifndef GLESC_TEST_UTIL_H
#define GLESC_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>

/* Path of rel inside the shared folder (GLESC_SHARED_DIR, else
 * $GLESC_SOURCE_ROOT/../shared), or NULL when that file does not exist.
 * The returned string is malloc'ed; free() it. */
char *test_shared_path(const char *rel);

/* Declares `char *var` = the path of rel in the shared folder; skips the
 * current Criterion test with a clear message when it is absent. free(var). */
#define TEST_REQUIRE_SHARED(var, rel)                                                              \
    char *var = test_shared_path(rel);                                                             \
    if (!var)                                                                                      \
    cr_skip_test("../shared/%s is absent: skipping (tests that need the shared models and "        \
                 "references run where ../shared sits beside the checkout)",                       \
                 rel)

/* Reads a whole file; NULL on failure. *size gets its length. free() it. */
void *test_read_file(const char *path, size_t *size);

/* What a subprocess did: its exit status (128 + signal when killed) and
 * everything it wrote to stdout and stderr (NUL-terminated). */
typedef struct test_run_result {
    int status;
    char *out, *err;
} test_run_result;

/* The path of the tool meson test names in environment variable env (e.g.
 * GLESC_GGUF_RUN); fails the test when it is not set. */
const char *test_tool(const char *env);

/* Runs cmd (a shell command line) with stdin from input (NULL: empty) and
 * collects its output; fails the test when no shell can be started.
 * test_run_free() the result. */
test_run_result test_run(const char *cmd, const char *input);
void test_run_free(test_run_result *r);

#include "glesc.h"

/* A context on whatever platform `auto` picks (llvmpipe on CI), with its
 * program cache in cache_dir (NULL: disk cache off). Fails the test with the
 * library's message when no context can be made. */
glesc_context *test_context(const char *cache_dir);
/* The same within what GLES 3.1 guarantees, the portable path: no
 * subgroups, 128 invocations, 16 KiB of shared memory (disk cache off). */
glesc_context *test_portable_context(void);

/* A Criterion suite whose tests each get a fresh GPU context `ctx`
 * (test_context(NULL)), destroyed after the test. Needs
 * <criterion/criterion.h>. */
/* A KV cache type as glesc_session_options takes it: the tests name an f32
 * cache GLESC_DTYPE_F32, which the options read as the default (f16), so
 * it becomes GLESC_KV_F32 (glesc_llm.h). */
#define TEST_KV(t) ((t) == GLESC_DTYPE_F32 ? GLESC_KV_F32 : (t))

#define TEST_GPU_SUITE(name)                                                                       \
    static glesc_context *ctx;                                                                     \
    static void name##_setup(void)                                                                 \
    {                                                                                              \
        ctx = test_context(NULL);                                                                  \
    }                                                                                              \
    static void name##_teardown(void)                                                              \
    {                                                                                              \
        glesc_context_destroy(ctx);                                                                \
    }                                                                                              \
    TestSuite(name, .init = name##_setup, .fini = name##_teardown)

/* A fresh empty directory under $TMPDIR (or /tmp); free() the path. */
char *test_tmpdir(void);

/* Removes dir with everything in it (rm -rf; fails the test when that
 * fails) and frees the path. */
void test_rmtree(char *dir);

/* A Criterion suite whose tests each get a fresh empty directory `dir`
 * (test_tmpdir()), removed with its contents after the test. Needs
 * <criterion/criterion.h>. */
#define TEST_TMPDIR_SUITE(name)                                                                    \
    static char *dir;                                                                              \
    static void name##_setup(void)                                                                 \
    {                                                                                              \
        dir = test_tmpdir();                                                                       \
    }                                                                                              \
    static void name##_teardown(void)                                                              \
    {                                                                                              \
        test_rmtree(dir);                                                                          \
    }                                                                                              \
    TestSuite(name, .init = name##_setup, .fini = name##_teardown)

/* Both: a context `ctx` for the suite's tests and a fresh empty directory
 * `dir` for each, removed with its contents after it. */
#define TEST_GPU_TMPDIR_SUITE(name)                                                                \
    static glesc_context *ctx;                                                                     \
    static char *dir;                                                                              \
    static void name##_setup(void)                                                                 \
    {                                                                                              \
        ctx = test_context(NULL);                                                                  \
        dir = test_tmpdir();                                                                       \
    }                                                                                              \
    static void name##_teardown(void)                                                              \
    {                                                                                              \
        glesc_context_destroy(ctx);                                                                \
        test_rmtree(dir);                                                                          \
    }                                                                                              \
    TestSuite(name, .init = name##_setup, .fini = name##_teardown)

/* The sample kernel of the foundation tests: y = a*x + y over n floats,
 * bindings (x, y), params (n, a). core_free() the text. */
char *test_saxpy_glsl(int local_size);

/* The sample kernel's declarations and body into k, y = a*x OP y (op "+"
 * or "-"), without its comment: for the tests that build it themselves
 * (allocation failures, a second program of the same interface). */
typedef struct emit_kernel emit_kernel;
void test_axpy_emit(emit_kernel *k, int local_size, const char *op);

#endif
