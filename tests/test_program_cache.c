/*
 * test_program_cache.c — compile errors carry the log and source; a second
 * context loads every program from disk with 0 compiles; truncated and
 * bit-flipped entries are detected and replaced; an entry copied over another
 * program's name is refused and the right program runs; links planted at an
 * entry's name or the old predictable temporary name are not followed; a FIFO
 * there does not hang; an unusable cache directory costs nothing but compiles
 * and one warning naming it; an explicit cache_dir beats GLESC_CACHE_DIR;
 * batches compile.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emit/emit.h"
#include "gl/gl.h"
#include "test_util.h"

static char *variant(int i)
{
    return test_saxpy_glsl(32 << (i % 4)); /* 4 distinct programs */
}

Test(program_cache, compile_error_has_log_and_source)
{
    glesc_context *ctx = test_context(NULL);
    const char *bad = "#version 310 es\nlayout(local_size_x = 1) in;\nvoid main() {\n"
                      "    undefined_thing = 1;\n}\n";
    const gl_program *p;
    cr_assert_eq(gl_program_get(ctx, bad, &p), GLESC_ERROR_COMPILE);
    const char *msg = glesc_context_errmsg(ctx);
    cr_assert(strstr(msg, "compute shader compilation failed"), "%s", msg);
    cr_assert(strstr(msg, "undefined_thing"), "%s", msg);
    cr_assert(strstr(msg, "   4 |"), "numbered source missing: %s", msg);
    glesc_context_destroy(ctx);
}

Test(program_cache, second_context_loads_from_disk)
{
    char *dir = test_tmpdir();
    char *src[4];
    for (int i = 0; i < 4; i++)
        src[i] = variant(i);
    const gl_program *p[4];
    glesc_stats s;

    glesc_context *ctx = test_context(dir);
    if (glesc_context_caps(ctx)->num_program_binary_formats == 0)
        cr_skip_test("the driver offers no program binary formats");
    cr_assert_eq(gl_program_get_batch(ctx, (const char *const *)src, 4, p), GLESC_OK, "%s",
                 glesc_context_errmsg(ctx));
    cr_assert_eq(gl_program_get(ctx, src[0], &p[0]), GLESC_OK);
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.programs_compiled, 4);
    cr_assert_eq(s.program_memory_hits, 1);
    cr_assert_eq(s.program_disk_writes, 4);
    cr_assert_eq(p[1]->local_size[0], 64);
    glesc_context_destroy(ctx);

    ctx = test_context(dir);
    cr_assert_eq(gl_program_get_batch(ctx, (const char *const *)src, 4, p), GLESC_OK, "%s",
                 glesc_context_errmsg(ctx));
    glesc_context_stats(ctx, &s);
    cr_log_info("second context: %llu compiles, %llu disk hits",
                (unsigned long long)s.programs_compiled, (unsigned long long)s.program_disk_hits);
    cr_assert_eq(s.programs_compiled, 0, "a second run must not compile");
    cr_assert_eq(s.program_disk_hits, 4);
    cr_assert_eq(p[2]->local_size[0], 128, "binary-loaded program keeps its local size");
    glesc_context_destroy(ctx);
    for (int i = 0; i < 4; i++)
        core_free(src[i]);
    free(dir);
}

static void damage(const char *path, bool truncate_it)
{
    size_t n;
    unsigned char *data = test_read_file(path, &n);
    cr_assert_not_null(data, "no cache entry at %s", path);
    FILE *f = fopen(path, "wb");
    if (truncate_it) {
        fwrite(data, 1, n / 2, f);
    } else {
        data[n - 5] ^= 0x10; /* one bit inside the blob */
        fwrite(data, 1, n, f);
    }
    fclose(f);
    free(data);
}

static void survive_damage(bool truncate_it)
{
    char *dir = test_tmpdir();
    char *src = variant(1);
    const gl_program *p;
    glesc_context *ctx = test_context(dir);
    if (glesc_context_caps(ctx)->num_program_binary_formats == 0)
        cr_skip_test("the driver offers no program binary formats");
    cr_assert_eq(gl_program_get(ctx, src, &p), GLESC_OK);
    char *path = gl_program_cache_entry_path(ctx, src);
    glesc_context_destroy(ctx);

    damage(path, truncate_it);
    ctx = test_context(dir);
    cr_assert_eq(gl_program_get(ctx, src, &p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.program_disk_rejects, 1, "damaged entry not detected");
    cr_assert_eq(s.programs_compiled, 1);
    cr_assert_eq(s.program_disk_writes, 1, "damaged entry not replaced");
    glesc_context_destroy(ctx);

    ctx = test_context(dir); /* the replacement is good */
    cr_assert_eq(gl_program_get(ctx, src, &p), GLESC_OK);
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.program_disk_hits, 1);
    cr_assert_eq(s.programs_compiled, 0);
    glesc_context_destroy(ctx);
    core_free(path);
    core_free(src);
    free(dir);
}

Test(program_cache, truncated_entry_replaced)
{
    survive_damage(true);
}

Test(program_cache, bit_flipped_entry_replaced)
{
    survive_damage(false);
}

/* y = a * x OP y over n floats: two programs with one interface and
 * different answers. core_free() the text. */
static char *axpy_glsl(const char *op)
{
    emit_kernel *k = emit_kernel_create("axpy");
    cr_assert_not_null(k);
    emit_kernel_local_size(k, 64, 1, 1);
    emit_kernel_binding(k, EMIT_FLOAT, EMIT_READONLY | EMIT_RESTRICT, "x");
    emit_kernel_binding(k, EMIT_FLOAT, EMIT_RESTRICT, "y");
    emit_kernel_param(k, EMIT_PARAM_UINT, "n");
    emit_kernel_param(k, EMIT_PARAM_FLOAT, "a");
    emit_kernel_line(k, "uint i = gl_GlobalInvocationID.x;");
    emit_kernel_line(k, "if (i < n) {");
    emit_kernel_line(k, "y[i] = a * x[i] %s y[i];", op);
    emit_kernel_line(k, "}");
    core_err err = {0};
    char *glsl = emit_kernel_glsl(k, &err);
    cr_assert_not_null(glsl, "%s", core_err_msg(&err));
    emit_kernel_destroy(k);
    return glsl;
}

/* Runs an axpy program on a small input; checks y = 0.5 x + y (sign +1) or
 * 0.5 x - y (sign -1). */
static void check_axpy(glesc_context *ctx, const gl_program *prog, int sign)
{
    enum { N = 100 };
    float x[N], y[N], out[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = 1000.0f - (float)i;
    }
    gl_buffer *bx, *by;
    cr_assert_eq(gl_pool_acquire(ctx, sizeof x, GL_USAGE_ACTIVATIONS, &bx), GLESC_OK);
    cr_assert_eq(gl_pool_acquire(ctx, sizeof y, GL_USAGE_ACTIVATIONS, &by), GLESC_OK);
    cr_assert_eq(gl_buffer_upload(ctx, bx, 0, x, sizeof x), GLESC_OK);
    cr_assert_eq(gl_buffer_upload(ctx, by, 0, y, sizeof y), GLESC_OK);
    gl_binding b[2] = {{bx, 0, 0, false}, {by, 0, 0, true}};
    gl_param p[2] = {GL_PARAM_U(N), GL_PARAM_F(0.5f)};
    uint32_t groups[3] = {(N + 63) / 64, 1, 1};
    cr_assert_eq(gl_dispatch(ctx, prog, b, 2, p, 2, groups), GLESC_OK, "%s",
                 glesc_context_errmsg(ctx));
    cr_assert_eq(gl_buffer_download(ctx, by, 0, out, sizeof out), GLESC_OK, "%s",
                 glesc_context_errmsg(ctx));
    for (int i = 0; i < N; i++)
        cr_assert_float_eq(out[i], 0.5f * x[i] + (float)sign * y[i], 1e-3f,
                           "y[%d] = %g: the wrong program ran", i, (double)out[i]);
    gl_pool_release(ctx, bx);
    gl_pool_release(ctx, by);
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    void *data = test_read_file(from, &n);
    cr_assert_not_null(data, "cannot read %s", from);
    FILE *f = fopen(to, "wb");
    cr_assert_not_null(f, "cannot write %s", to);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
    free(data);
}

/* Issue 10, defect 2: a valid entry under another program's name gave wrong
 * results. Now the stored key differs: refused, deleted, recompiled. */
Test(program_cache, entry_copied_over_another_name_is_recompiled)
{
    char *dir = test_tmpdir();
    char *plus = axpy_glsl("+"), *minus = axpy_glsl("-");
    const gl_program *p;
    glesc_context *ctx = test_context(dir);
    if (glesc_context_caps(ctx)->num_program_binary_formats == 0)
        cr_skip_test("the driver offers no program binary formats");
    cr_assert_eq(gl_program_get(ctx, plus, &p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    cr_assert_eq(gl_program_get(ctx, minus, &p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    char *plus_path = gl_program_cache_entry_path(ctx, plus);
    char *minus_path = gl_program_cache_entry_path(ctx, minus);
    glesc_context_destroy(ctx);
    copy_file(minus_path, plus_path);

    ctx = test_context(dir);
    cr_assert_eq(gl_program_get(ctx, plus, &p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.program_disk_rejects, 1, "the foreign entry was not refused");
    cr_assert_eq(s.programs_compiled, 1);
    cr_assert_eq(s.program_disk_writes, 1);
    check_axpy(ctx, p, +1);
    cr_assert_eq(gl_program_get(ctx, minus, &p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    check_axpy(ctx, p, -1);
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.program_disk_hits, 1, "the other entry is still good");
    glesc_context_destroy(ctx);

    ctx = test_context(dir); /* the replacement is plus's own */
    cr_assert_eq(gl_program_get(ctx, plus, &p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.program_disk_hits, 1);
    cr_assert_eq(s.programs_compiled, 0);
    check_axpy(ctx, p, +1);
    glesc_context_destroy(ctx);
    core_free(plus_path);
    core_free(minus_path);
    core_free(plus);
    core_free(minus);
    free(dir);
}

/* Issue 10, defect 3: links planted at an entry's name and at the old
 * predictable temporary name ("<entry>.tmp.<pid>") are never followed. */
Test(program_cache, planted_links_are_not_followed)
{
    char *dir = test_tmpdir();
    char target[4200], tmp[4400];
    snprintf(target, sizeof target, "%s/precious", dir);
    FILE *f = fopen(target, "w");
    fputs("precious", f);
    fclose(f);
    char *src = variant(2);
    const gl_program *p;
    glesc_context *ctx = test_context(dir);
    if (glesc_context_caps(ctx)->num_program_binary_formats == 0)
        cr_skip_test("the driver offers no program binary formats");
    char *path = gl_program_cache_entry_path(ctx, src);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    cr_assert_eq(symlink(target, path), 0);
    cr_assert_eq(symlink(target, tmp), 0);
    cr_assert_eq(gl_program_get(ctx, src, &p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.program_disk_writes, 1);
    glesc_context_destroy(ctx);
    size_t n;
    char *t = test_read_file(target, &n);
    cr_assert_str_eq(t, "precious", "a link's target was written");
    free(t);
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0);
    cr_assert(S_ISREG(st.st_mode), "the entry is still a link");

    ctx = test_context(dir); /* the entry written in the link's place is good */
    cr_assert_eq(gl_program_get(ctx, src, &p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.program_disk_hits, 1);
    glesc_context_destroy(ctx);
    core_free(path);
    core_free(src);
    free(dir);
}

/* Issue 10, defect 5: a FIFO at an entry's name blocked the open forever. */
Test(program_cache, fifo_entry_does_not_hang, .timeout = 60)
{
    char *dir = test_tmpdir();
    char *src = variant(3);
    const gl_program *p;
    glesc_context *ctx = test_context(dir);
    if (glesc_context_caps(ctx)->num_program_binary_formats == 0)
        cr_skip_test("the driver offers no program binary formats");
    char *path = gl_program_cache_entry_path(ctx, src);
    cr_assert_eq(mkfifo(path, 0600), 0);
    cr_assert_eq(gl_program_get(ctx, src, &p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.program_disk_rejects, 1);
    cr_assert_eq(s.programs_compiled, 1);
    cr_assert_eq(s.program_disk_writes, 1);
    glesc_context_destroy(ctx);
    core_free(path);
    core_free(src);
    free(dir);
}

/* A cache "directory" below a regular file can never be created or written
 * (this holds for root too, unlike chmod). Two contexts on it: compiles only,
 * and one warning at the default log level naming the directory and the
 * real reason (it used to say ENOENT, and only at GLESC_LOG=info). */
Test(program_cache, unwritable_dir_is_harmless)
{
    char *dir = test_tmpdir();
    char file[4200], cache[4300], logp[4300];
    snprintf(file, sizeof file, "%s/file", dir);
    FILE *f = fopen(file, "w");
    fclose(f);
    snprintf(cache, sizeof cache, "%s/cache", file);
    snprintf(logp, sizeof logp, "%s/stderr.txt", dir);
    unsetenv("GLESC_LOG");
    fflush(stderr);
    int saved = dup(2), fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    char *src = variant(0);
    glesc_stats s[2];
    glesc_status st[2];
    for (int i = 0; i < 2; i++) {
        glesc_context *ctx = test_context(cache);
        const gl_program *p;
        st[i] = gl_program_get(ctx, src, &p);
        glesc_context_stats(ctx, &s[i]);
        glesc_context_destroy(ctx);
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(st[i], GLESC_OK);
        cr_assert_eq(s[i].programs_compiled, 1);
        cr_assert_eq(s[i].program_disk_writes, 0);
    }
    size_t n;
    char *log = test_read_file(logp, &n);
    cr_assert_not_null(log);
    int warnings = 0;
    for (const char *q = log; (q = strstr(q, cache)); q += strlen(cache))
        warnings++;
    cr_assert_eq(warnings, 1, "one warning naming %s expected:\n%s", cache, log);
    cr_assert(strstr(log, "warning") && strstr(log, strerror(ENOTDIR)), "%s", log);
    free(log);
    core_free(src);
    free(dir);
}

/* Issue 10, defect 8: an explicit cache_dir beats GLESC_CACHE_DIR, which
 * beats the default. */
Test(program_cache, explicit_dir_beats_environment)
{
    char *explicit_dir = test_tmpdir(), *env_dir = test_tmpdir();
    setenv("GLESC_CACHE_DIR", env_dir, 1);
    glesc_context_options o = {0};
    o.cache_dir = explicit_dir;
    glesc_context *ctx = NULL;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_str_eq(glesc_context_cache_dir(ctx), explicit_dir);
    char *src = variant(1);
    char *path = gl_program_cache_entry_path(ctx, src);
    if (path)
        cr_assert_eq(strncmp(path, explicit_dir, strlen(explicit_dir)), 0, "%s", path);
    core_free(path);
    glesc_context_destroy(ctx);

    o.cache_dir = "off"; /* explicit off beats the environment too */
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_null(glesc_context_cache_dir(ctx));
    glesc_context_destroy(ctx);

    o.cache_dir = NULL;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_str_eq(glesc_context_cache_dir(ctx), env_dir);
    glesc_context_destroy(ctx);
    unsetenv("GLESC_CACHE_DIR");
    core_free(src);
    free(explicit_dir);
    free(env_dir);
}

Test(program_cache, off_means_no_files)
{
    glesc_context *ctx = test_context(NULL);
    cr_assert_null(glesc_context_cache_dir(ctx));
    char *src = variant(0);
    cr_assert_null(gl_program_cache_entry_path(ctx, src));
    const gl_program *p;
    cr_assert_eq(gl_program_get(ctx, src, &p), GLESC_OK);
    gl_program_cache_drop_memory(ctx);
    cr_assert_eq(gl_program_get(ctx, src, &p), GLESC_OK);
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.programs_compiled, 2);
    glesc_context_destroy(ctx);
    core_free(src);
}
