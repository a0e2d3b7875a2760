/*
 * test_program_cache.c — compile errors carry the log and source; a second
 * context loads every program from disk with 0 compiles; truncated and
 * bit-flipped entries are detected and replaced; an entry copied over another
 * program's name is refused and the right program runs; links planted at an
 * entry's name or the old predictable temporary name are not followed; a FIFO
 * there does not hang; an unusable cache directory costs nothing but compiles
 * and one warning naming it; an explicit cache_dir beats GLESC_CACHE_DIR;
 * batches compile, concurrently where the driver has
 * GL_KHR_parallel_shader_compile and one at a time with
 * GLESC_NO_PARALLEL_COMPILE=1, with the same programs, counts and errors;
 * a refused entry is recompiled with a warning. A model's cold start writes
 * a binary for every program its plans build (full batches, the remainder
 * batch, decode steps) and a warm start, also with prompts of other
 * lengths, compiles nothing and computes the same logits.
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

#include "common/synth.h"
#include "emit/emit.h"
#include "gl/gl.h"
#include "glesc_llm.h"
#include "test_synth_util.h"
#include "test_util.h"

/* stderr into a file between capture_begin and capture_end, which returns
 * what was written (free() it). */
static int captured_fd = -1;
static char captured_path[4300];

static void capture_begin(const char *dir)
{
    snprintf(captured_path, sizeof captured_path, "%s/stderr.txt", dir);
    fflush(stderr);
    captured_fd = dup(2);
    int fd = open(captured_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(captured_fd >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
}

static char *capture_end(void)
{
    fflush(stderr);
    dup2(captured_fd, 2);
    close(captured_fd);
    captured_fd = -1;
    size_t n;
    char *log = test_read_file(captured_path, &n);
    cr_assert_not_null(log);
    unlink(captured_path);
    return log;
}

/* The warning a batch gives for entries it refused, exactly once in log. */
static void expect_one_refusal_warning(const char *log, const char *dir)
{
    const char *w = strstr(log, "damaged, foreign or refused by the driver");
    cr_expect(w && strstr(log, "warning") && strstr(log, dir), "no warning naming %s in:\n%s", dir,
              log);
    if (w)
        cr_expect_null(strstr(w + 1, "damaged, foreign or refused"), "two warnings:\n%s", log);
}

static char *variant(int i)
{
    return test_saxpy_glsl(32 << (i % 4)); /* 4 distinct programs */
}

/* A context with its program cache in dir; skips the test where the driver
 * has no program binaries to store. */
static glesc_context *disk_context(const char *dir)
{
    glesc_context *ctx = test_context(dir);
    if (glesc_context_caps(ctx)->num_program_binary_formats == 0)
        cr_skip_test("the driver offers no program binary formats");
    return ctx;
}

/* A fresh context on dir getting src, whose entry is bad: refused with one
 * warning (why: what its refusal shows), compiled and written anew. The
 * context is returned; destroy it. */
static glesc_context *refused_and_rewritten(const char *dir, const char *src, const gl_program **p,
                                            const char *why)
{
    glesc_context *ctx = test_context(dir);
    unsetenv("GLESC_LOG");
    capture_begin(dir);
    glesc_status st = gl_program_get(ctx, src, p);
    char *log = capture_end();
    cr_assert_eq(st, GLESC_OK, "%s", glesc_context_errmsg(ctx));
    expect_one_refusal_warning(log, dir);
    free(log);
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.program_disk_rejects, 1, "%s", why);
    cr_assert_eq(s.programs_compiled, 1);
    cr_assert_eq(s.program_disk_writes, 1, "the entry was not written anew");
    return ctx;
}

/* A fresh context on dir getting src: loaded from its entry, not compiled.
 * The context is returned; destroy it. */
static glesc_context *from_disk(const char *dir, const char *src, const gl_program **p)
{
    glesc_context *ctx = test_context(dir);
    cr_assert_eq(gl_program_get(ctx, src, p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.program_disk_hits, 1);
    cr_assert_eq(s.programs_compiled, 0);
    return ctx;
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

    glesc_context *ctx = disk_context(dir);
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
    glesc_context *ctx = disk_context(dir);
    cr_assert_eq(gl_program_get(ctx, src, &p), GLESC_OK);
    char *path = gl_program_cache_entry_path(ctx, src);
    glesc_context_destroy(ctx);

    damage(path, truncate_it);
    ctx = refused_and_rewritten(dir, src, &p, "damaged entry not detected");
    glesc_context_destroy(ctx);
    ctx = from_disk(dir, src, &p); /* the replacement is good */
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
    test_axpy_emit(k, 64, op);
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
    glesc_context *ctx = disk_context(dir);
    cr_assert_eq(gl_program_get(ctx, plus, &p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    cr_assert_eq(gl_program_get(ctx, minus, &p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    char *plus_path = gl_program_cache_entry_path(ctx, plus);
    char *minus_path = gl_program_cache_entry_path(ctx, minus);
    glesc_context_destroy(ctx);
    copy_file(minus_path, plus_path);

    ctx = refused_and_rewritten(dir, plus, &p, "the foreign entry was not refused");
    check_axpy(ctx, p, +1);
    cr_assert_eq(gl_program_get(ctx, minus, &p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    check_axpy(ctx, p, -1);
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.program_disk_hits, 1, "the other entry is still good");
    glesc_context_destroy(ctx);

    ctx = from_disk(dir, plus, &p); /* the replacement is plus's own */
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
    glesc_context *ctx = disk_context(dir);
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
    glesc_context *ctx = disk_context(dir);
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

/* What the compile callback saw: each call's done/total, in order. */
typedef struct compile_log {
    int n, done[16], total[16];
    bool named; /* every call after the first named a kernel */
} compile_log;

static void log_compile(void *user, int done, int total, const char *kernel)
{
    compile_log *l = user;
    if (l->n < 16) {
        l->done[l->n] = done;
        l->total[l->n] = total;
    }
    l->named &= done == 0 ? kernel == NULL : kernel != NULL;
    l->n++;
}

typedef enum batch_mode { MODE_PARALLEL, MODE_SEQUENTIAL, MODE_THREADS } batch_mode;

/* One batch in each mode: distinct programs and a duplicate; a compile
 * error in the middle of a batch. MODE_PARALLEL: GL_KHR_parallel_shader_compile's
 * path on the GL thread alone (skipped where the driver lacks it);
 * MODE_SEQUENTIAL: GLESC_NO_PARALLEL_COMPILE=1, one thread; MODE_THREADS:
 * four compile threads (GLESC_COMPILE_THREADS=4) on helper contexts. */
static void batch_in_mode(batch_mode mode)
{
    bool parallel = mode == MODE_PARALLEL;
    if (mode == MODE_SEQUENTIAL)
        setenv("GLESC_NO_PARALLEL_COMPILE", "1", 1);
    else
        unsetenv("GLESC_NO_PARALLEL_COMPILE");
    setenv("GLESC_COMPILE_THREADS", mode == MODE_THREADS ? "4" : "1", 1);
    glesc_context *ctx = test_context(NULL);
    bool has = glesc_context_caps(ctx)->has_parallel_compile;
    unsetenv("GLESC_NO_PARALLEL_COMPILE");
    unsetenv("GLESC_COMPILE_THREADS");
    if (parallel && !has) {
        glesc_context_destroy(ctx);
        cr_skip_test("the driver has no GL_KHR_parallel_shader_compile");
    }
    if (mode != MODE_THREADS)
        cr_assert_eq(gl_program_cache_parallel(ctx), parallel);
    char *plus = axpy_glsl("+"), *minus = axpy_glsl("-"), *v0 = variant(0), *v1 = variant(1);
    const char *src[5] = {plus, minus, v0, v1, plus};
    const gl_program *p[5];
    compile_log cl = {.named = true};
    glesc_context_set_compile_callback(ctx, log_compile, &cl);
    cr_assert_eq(gl_program_get_batch(ctx, src, 5, p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    /* the callback: 0 of 4 before the first compile, then 1..4 of 4 */
    cr_expect_eq(cl.n, 5, "%d calls", cl.n);
    for (int i = 0; i < cl.n && i < 5; i++) {
        cr_expect_eq(cl.done[i], i);
        cr_expect_eq(cl.total[i], 4);
    }
    cr_expect(cl.named);
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    cr_expect_eq(s.programs_compiled, 4, "the duplicate compiled once");
    cr_expect_eq(s.program_memory_hits, 0);
    static const char *const names[] = {"parallel", "sequential", "threads"};
    cr_expect_eq(gl_program_cache_max_in_flight(ctx), mode == MODE_SEQUENTIAL ? 1 : 4,
                 "%s: %d compiles at once", names[mode], gl_program_cache_max_in_flight(ctx));
    cr_expect_eq(p[4], p[0]);
    cl.n = 0;
    const gl_program *again[5];
    cr_assert_eq(gl_program_get_batch(ctx, src, 5, again), GLESC_OK);
    cr_expect_eq(cl.n, 0, "memory hits compile nothing and report nothing");
    glesc_context_set_compile_callback(ctx, NULL, NULL);
    check_axpy(ctx, p[0], +1);
    check_axpy(ctx, p[1], -1);
    cr_expect_eq(p[3]->local_size[0], 64);

    /* a batch that fails names the bad source; the context goes on */
    const char *bad = "#version 310 es\nlayout(local_size_x = 1) in;\nvoid main() {\n"
                      "    undefined_thing = 1;\n}\n";
    char *v2 = variant(2), *v3 = variant(3);
    const char *mixed[3] = {v2, bad, v3};
    cr_assert_eq(gl_program_get_batch(ctx, mixed, 3, p), GLESC_ERROR_COMPILE);
    cr_expect(strstr(glesc_context_errmsg(ctx), "undefined_thing"), "%s",
              glesc_context_errmsg(ctx));
    const char *good[2] = {v2, v3};
    cr_assert_eq(gl_program_get_batch(ctx, good, 2, p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    cr_expect_eq(p[0]->local_size[0], 128);
    cr_expect_eq(p[1]->local_size[0], 256);
    glesc_context_destroy(ctx);
    core_free(plus);
    core_free(minus);
    core_free(v0);
    core_free(v1);
    core_free(v2);
    core_free(v3);
}

Test(program_cache, parallel_batch)
{
    batch_in_mode(MODE_PARALLEL);
}

Test(program_cache, sequential_batch)
{
    batch_in_mode(MODE_SEQUENTIAL);
}

Test(program_cache, threaded_batch)
{
    batch_in_mode(MODE_THREADS);
}

/* Background compiles (one compile thread with
 * GL_KHR_parallel_shader_compile: NVIDIA's driver, llvmpipe with
 * GLESC_COMPILE_THREADS=1): glesc_context_finish_compiles waits for what
 * gl_program_start_batch started and records it; a later batch compiles
 * nothing; a source that fails is reported by name, and the next call
 * has nothing left to wait for. */
Test(program_cache, finish_compiles_waits_for_background_compiles)
{
    cr_expect_eq(glesc_context_finish_compiles(NULL), GLESC_ERROR_INVALID_ARGUMENT);
    setenv("GLESC_COMPILE_THREADS", "1", 1);
    glesc_context *ctx = test_context(NULL);
    unsetenv("GLESC_COMPILE_THREADS");
    if (!gl_program_cache_background(ctx)) {
        glesc_context_destroy(ctx);
        cr_skip_test("the driver does not compile in the background");
    }
    cr_assert_eq(glesc_context_finish_compiles(ctx), GLESC_OK, "nothing to wait for");
    char *v[3] = {variant(0), variant(1), variant(2)};
    cr_assert_eq(gl_program_start_batch(ctx, (const char *const *)v, 3), GLESC_OK, "%s",
                 glesc_context_errmsg(ctx));
    cr_assert_eq(glesc_context_finish_compiles(ctx), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    cr_expect(gl_program_cache_background_done(ctx));
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    cr_expect_eq(s.programs_compiled, 3, "%llu compiled", (unsigned long long)s.programs_compiled);
    const gl_program *p[3];
    cr_assert_eq(gl_program_get_batch(ctx, (const char *const *)v, 3, p), GLESC_OK);
    glesc_context_stats(ctx, &s);
    cr_expect_eq(s.programs_compiled, 3, "the batch found them in memory");
    cr_expect_eq(p[0]->local_size[0], 32);

    const char *bad = "#version 310 es\n// glesc kernel: broken_on_purpose\n"
                      "layout(local_size_x = 1) in;\nvoid main() {\n    undefined_thing = 1;\n}\n";
    cr_assert_eq(gl_program_start_batch(ctx, &bad, 1), GLESC_OK);
    cr_expect_eq(glesc_context_finish_compiles(ctx), GLESC_ERROR_COMPILE);
    cr_expect(strstr(glesc_context_errmsg(ctx), "undefined_thing"), "%s",
              glesc_context_errmsg(ctx));
    cr_expect_eq(glesc_context_finish_compiles(ctx), GLESC_OK, "nothing left");
    glesc_context_destroy(ctx);
    for (int i = 0; i < 3; i++)
        core_free(v[i]);
}

/* ---- a model's programs ---- */

#define N_VOCAB_MAX 4096

static char *write_model(const char *dir)
{
    synth_params sp;
    test_tiny_params(&sp, 2, 128);
    sp.n_ff = 128;
    sp.weight_type = GLESC_DTYPE_Q4_0;
    return test_synth_write(&sp, dir, "m.gguf");
}

/* Whether run_model's last context compiled in the background (NVIDIA's
 * driver: a cold prompt then also compiles the greedy step's programs). */
static bool run_background;

/* A fresh context on cache_dir: a prompt of n_prompt tokens in batches of
 * 16, then three decode steps; the last step's logits into logits (n_vocab
 * floats, may be NULL) and the context's counters into *s. Returns n_vocab. */
static int run_model(const char *model, const char *cache_dir, int n_prompt, float *logits,
                     glesc_stats *s)
{
    glesc_context *ctx = test_context(cache_dir);
    run_background = gl_program_cache_background(ctx);
    glesc_model *m;
    cr_assert_eq(glesc_model_load(ctx, model, NULL, &m), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    cr_assert_leq(mi.n_vocab, N_VOCAB_MAX);
    glesc_session *ss;
    glesc_session_options so = {.n_ctx = 96, .n_batch = 16};
    cr_assert_eq(glesc_session_create(m, &so, &ss), GLESC_OK, "%s", glesc_last_errmsg());
    int32_t ids[64];
    for (int i = 0; i < n_prompt; i++)
        ids[i] = (int32_t)((i * 37 + 11) % mi.n_vocab);
    cr_assert_eq(glesc_session_eval(ss, ids, (size_t)n_prompt, 0, NULL), GLESC_OK, "%s",
                 glesc_context_errmsg(ctx));
    for (int i = 0; i < 3; i++)
        cr_assert_eq(glesc_session_eval(ss, &ids[i], 1, 0, i == 2 ? logits : NULL), GLESC_OK, "%s",
                     glesc_context_errmsg(ctx));
    glesc_context_stats(ctx, s);
    glesc_session_destroy(ss);
    glesc_model_destroy(m);
    glesc_context_destroy(ctx);
    return (int)mi.n_vocab;
}

static int count_entries(const char *dir)
{
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c '\\.entry$'", dir);
    test_run_result r = test_run(cmd, NULL);
    int n = atoi(r.out);
    test_run_free(&r);
    return n;
}

static void expect_same_logits(const float *a, const float *b, int n, const char *what)
{
    float worst = 0;
    for (int i = 0; i < n; i++)
        worst = fmaxf(worst, fabsf(a[i] - b[i]));
    cr_log_info("%s: worst logit difference %g", what, (double)worst);
    /* the same programs on the same inputs: equal up to what a
     * deterministic GPU gives (0 on llvmpipe). On 2026-11-23 the H200 gave
     * different logits in fresh contexts with the disk cache off as well
     * (up to 0.8 of |logits| <= 3): a failure here may be that, not the
     * cache; compare two runs with GLESC_CACHE_DIR=off. */
    cr_expect_leq(worst, 1e-4f, "%s: logits differ by %g", what, (double)worst);
}

/* With GLESC_GEMV_MAX_M=8 (no device profile: its own programs and entry
 * would not be needed again on a warm start) a 37-token prompt in batches
 * of 16 is two GEMM batches and a remainder of 5 that the GEMV specialized
 * for m = 5 takes; decode steps are m = 1. */
Test(program_cache, warm_model_start_compiles_nothing, .timeout = 300)
{
    char *dir = test_tmpdir();
    char cache[4300];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    char *model = write_model(dir);
    float *cold = malloc(N_VOCAB_MAX * sizeof *cold), *warm = malloc(N_VOCAB_MAX * sizeof *warm);
    glesc_context *probe = test_context(cache);
    bool binaries = glesc_context_caps(probe)->num_program_binary_formats > 0;
    glesc_context_destroy(probe);
    if (!binaries)
        cr_skip_test("the driver offers no program binary formats");

    setenv("GLESC_GEMV_MAX_M", "8", 1);
    glesc_stats s;
    int n_vocab = run_model(model, cache, 37, cold, &s);
    cr_log_info("cold: %llu programs compiled, %llu written",
                (unsigned long long)s.programs_compiled, (unsigned long long)s.program_disk_writes);
    uint64_t compiled = s.programs_compiled;
    cr_assert_gt(compiled, 0);
    cr_expect_eq(s.program_disk_writes, compiled, "a binary for every program compiled");
    cr_expect_eq(count_entries(cache), (int)compiled, "an entry file for every program");

    /* warm: the same prompt, every program from the disk */
    run_model(model, cache, 37, warm, &s);
    cr_expect_eq(s.programs_compiled, 0, "a warm start compiled %llu programs",
                 (unsigned long long)s.programs_compiled);
    if (run_background) /* the greedy step's programs are left on disk */
        cr_expect(s.program_disk_hits > 0 && s.program_disk_hits <= compiled, "%llu disk hits",
                  (unsigned long long)s.program_disk_hits);
    else
        cr_expect_eq(s.program_disk_hits, compiled);
    cr_expect_eq(s.program_disk_rejects, 0);
    expect_same_logits(cold, warm, n_vocab, "warm start");

    /* warm, other lengths: batches of 16 and 11, of 16 and 9 (GEMM, not
     * specialized on the token count), the m = 5 remainder again */
    const int lengths[] = {27, 25, 21};
    for (size_t i = 0; i < CORE_ARRAY_LEN(lengths); i++) {
        run_model(model, cache, lengths[i], NULL, &s);
        cr_expect_eq(s.programs_compiled, 0, "a %d-token prompt compiled %llu programs", lengths[i],
                     (unsigned long long)s.programs_compiled);
    }

    /* every entry damaged: compiled again, one warning, the same logits */
    char cmd[4500];
    snprintf(cmd, sizeof cmd, "ls '%s'/*.entry", cache);
    test_run_result r = test_run(cmd, NULL);
    int damaged = 0;
    for (char *save = NULL, *line = strtok_r(r.out, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save), damaged++)
        damage(line, false);
    test_run_free(&r);
    cr_assert_eq(damaged, (int)compiled);
    unsetenv("GLESC_LOG");
    capture_begin(dir);
    run_model(model, cache, 37, warm, &s);
    char *log = capture_end();
    cr_expect_eq(s.programs_compiled, compiled);
    cr_expect_eq(s.program_disk_rejects, compiled);
    cr_expect_eq(s.program_disk_writes, compiled);
    cr_expect(strstr(log, "damaged, foreign or refused by the driver") && strstr(log, cache),
              "no warning naming %s:\n%s", cache, log);
    free(log);
    expect_same_logits(cold, warm, n_vocab, "after recompiling");

    /* with the device profile measured on the cold start (the remainder
     * batch of 5 asks for it): the warm start reads it from the cache */
    unsetenv("GLESC_GEMV_MAX_M");
    char cache2[4300];
    snprintf(cache2, sizeof cache2, "%s/cache2", dir);
    run_model(model, cache2, 37, NULL, &s);
    cr_assert_gt(s.programs_compiled, 0);
    run_model(model, cache2, 37, NULL, &s);
    cr_expect_eq(s.programs_compiled, 0, "a warm start with a profile compiled %llu programs",
                 (unsigned long long)s.programs_compiled);
    setenv("GLESC_GEMV_MAX_M", "8", 1);

    free(cold);
    free(warm);
    free(model);
    test_rmtree(dir);
}
