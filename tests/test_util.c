/*
 * test_util.c — see test_util.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

char *test_shared_path(const char *rel)
{
    const char *dir = getenv("GLESC_SHARED_DIR");
    const char *root = getenv("GLESC_SOURCE_ROOT");
    char buf[4096];
    if (dir && *dir)
        snprintf(buf, sizeof buf, "%s/%s", dir, rel);
    else
        snprintf(buf, sizeof buf, "%s/../shared/%s", root && *root ? root : ".", rel);
    if (access(buf, R_OK) != 0)
        return NULL;
    return strdup(buf);
}

void *test_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *data = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            char *p = realloc(data, cap + 1);
            if (!p) {
                free(data);
                fclose(f);
                return NULL;
            }
            data = p;
        }
        size_t n = fread(data + len, 1, cap - len, f);
        if (n == 0)
            break;
        len += n;
    }
    fclose(f);
    data[len] = '\0';
    *size = len;
    return data;
}

#include <criterion/criterion.h>
#include <sys/wait.h>

const char *test_tool(const char *env)
{
    const char *exe = getenv(env);
    cr_assert(exe && *exe, "%s is not set (run through meson test)", env);
    return exe;
}

test_run_result test_run(const char *cmd, const char *input)
{
    char *dir = test_tmpdir();
    size_t cap = strlen(dir) + 16;
    char *in_path = malloc(cap), *out_path = malloc(cap), *err_path = malloc(cap);
    cr_assert(in_path && out_path && err_path);
    snprintf(in_path, cap, "%s/in", dir);
    snprintf(out_path, cap, "%s/out", dir);
    snprintf(err_path, cap, "%s/err", dir);
    FILE *f = fopen(in_path, "w");
    cr_assert_not_null(f, "cannot write %s", in_path);
    if (input)
        fputs(input, f);
    fclose(f);
    /* A subshell, so that redirections inside cmd (2>&1) still apply. */
    size_t len = strlen(cmd) + 3 * cap + 32;
    char *line = malloc(len);
    cr_assert_not_null(line);
    snprintf(line, len, "( %s ) <'%s' >'%s' 2>'%s'", cmd, in_path, out_path, err_path);
    int st = system(line);
    cr_assert(st != -1, "cannot run %s", line);
    test_run_result r = {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), NULL, NULL};
    size_t n;
    r.out = test_read_file(out_path, &n);
    r.err = test_read_file(err_path, &n);
    cr_assert(r.out && r.err, "no output files from %s", line);
    unlink(in_path);
    unlink(out_path);
    unlink(err_path);
    rmdir(dir);
    free(line);
    free(in_path);
    free(out_path);
    free(err_path);
    free(dir);
    return r;
}

void test_run_free(test_run_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

static glesc_context *context_of(glesc_context_options *o, const char *cache_dir)
{
    unsetenv("GLESC_CACHE_DIR"); /* the test decides where programs go */
    o->cache_dir = cache_dir ? cache_dir : "off";
    glesc_context *ctx = NULL;
    glesc_status st = glesc_context_create(o, &ctx);
    cr_assert_eq(st, GLESC_OK, "no GLES 3.1 context: %s: %s", glesc_status_name(st),
                 glesc_last_errmsg());
    return ctx;
}

glesc_context *test_context(const char *cache_dir)
{
    glesc_context_options o = {0};
    return context_of(&o, cache_dir);
}

glesc_context *test_portable_context(void)
{
    glesc_context_options o = {
        .no_subgroups = true, .max_compute_invocations = 128, .max_compute_shared_memory = 16384};
    return context_of(&o, NULL);
}

char *test_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/glesc-test-XXXXXX", base && *base ? base : "/tmp");
    cr_assert_not_null(mkdtemp(buf), "mkdtemp failed");
    return strdup(buf);
}

void test_rmtree(char *dir)
{
    size_t n = strlen(dir) + 16;
    char *cmd = malloc(n);
    cr_assert_not_null(cmd);
    snprintf(cmd, n, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0, "%s failed", cmd);
    free(cmd);
    free(dir);
}

#include "emit/emit.h"

void test_axpy_emit(emit_kernel *k, int local_size, const char *op)
{
    emit_kernel_local_size(k, local_size, 1, 1);
    emit_kernel_binding(k, EMIT_FLOAT, EMIT_READONLY | EMIT_RESTRICT, "x");
    emit_kernel_binding(k, EMIT_FLOAT, EMIT_RESTRICT, "y");
    emit_kernel_param(k, EMIT_PARAM_UINT, "n");
    emit_kernel_param(k, EMIT_PARAM_FLOAT, "a");
    emit_kernel_line(k, "uint i = gl_GlobalInvocationID.x;");
    emit_kernel_line(k, "if (i < n) {");
    emit_kernel_line(k, "y[i] = a * x[i] %s y[i];", op);
    emit_kernel_line(k, "}");
}

char *test_saxpy_glsl(int local_size)
{
    emit_kernel *k = emit_kernel_create("saxpy");
    cr_assert_not_null(k);
    emit_kernel_comment(k, "y[i] = a * x[i] + y[i]");
    test_axpy_emit(k, local_size, "+");
    core_err err = {0};
    char *glsl = emit_kernel_glsl(k, &err);
    cr_assert_not_null(glsl, "%s", core_err_msg(&err));
    emit_kernel_destroy(k);
    return glsl;
}
