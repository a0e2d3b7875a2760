/*
 * test_profile.c — the device profile (src/compute/profile.c): the GEMV/GEMM
 * threshold is measured once per context, by the profile's own dispatches
 * (the caller's plan cache and error message are left alone), stored in the
 * disk cache and loaded by the next context on the same renderer without a
 * measurement; a foreign or damaged entry is ignored and measured again;
 * GLESC_GEMV_MAX_M overrides it, and a device class with a threshold of
 * its own (llvmpipe's) needs no measurement; a failed measurement says why
 * (an error with a message, and a logged warning with the fallback); the
 * measurement's buffers are deleted when it is done.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compute/compute.h"
#include "test_util.h"

static void setup(void)
{
    unsetenv("GLESC_GEMV_MAX_M"); /* the suites set it; these tests measure */
    /* a class with no threshold of its own (llvmpipe's is fixed) */
    setenv("GLESC_DEVICE_CLASS", "default", 1);
    setenv("GLESC_LOG", "warn", 1);
}

TestSuite(profile, .init = setup);

static const compute_profile *profile_of(glesc_context *ctx)
{
    const compute_profile *p = compute_profile_get(ctx);
    cr_assert_not_null(p, "%s", glesc_context_errmsg(ctx));
    cr_assert(p->gemv_max_m >= 1 && p->gemv_max_m <= 8, "threshold %d", p->gemv_max_m);
    return p;
}

/* A graph whose matmul has 4 activation columns: its kernel depends on the
 * threshold, so glesc_graph_compute takes the profile on entry. */
static void compute_matmul_m4(glesc_context *ctx)
{
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *w = glesc_tensor_new(g, GLESC_DTYPE_F32, 2, (int64_t[]){64, 32});
    glesc_tensor *x = glesc_tensor_new(g, GLESC_DTYPE_F32, 2, (int64_t[]){64, 4});
    float v[64 * 32] = {0};
    cr_assert_eq(glesc_tensor_write_f32(w, v, 64 * 32), GLESC_OK);
    cr_assert_eq(glesc_tensor_write_f32(x, v, 64 * 4), GLESC_OK);
    glesc_tensor *y = glesc_matmul(g, w, x);
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    glesc_graph_destroy(g);
}

Test(profile, measured_once_per_context_and_outside_the_compute)
{
    char *dir = test_tmpdir();
    glesc_context *ctx = test_context(dir);
    /* A message the caller has not read yet; the compute below clears it on
     * entry (it returns a status), and the measurement inside it must leave
     * no message of its own. */
    glesc_graph *bad = glesc_graph_create(ctx);
    glesc_tensor *a = glesc_tensor_new(bad, GLESC_DTYPE_F32, 1, (int64_t[]){4});
    glesc_tensor *b = glesc_tensor_new(bad, GLESC_DTYPE_F32, 1, (int64_t[]){5});
    cr_assert_null(glesc_add(bad, a, b));
    char *msg = strdup(glesc_context_errmsg(ctx));
    cr_assert(strstr(msg, "glesc_add"), "%s", msg);

    uint64_t t0 = core_time_ns();
    compute_matmul_m4(ctx);
    const compute_profile *p = profile_of(ctx);
    cr_log_info("GEMV beats GEMM up to m = %d on %s (first compute with the measurement: "
                "%.1f ms)",
                p->gemv_max_m, glesc_context_caps(ctx)->renderer,
                (double)(core_time_ns() - t0) / 1e6);
    cr_assert_eq(p->source, COMPUTE_PROFILE_MEASURED);
    /* The measurement ran its own dispatches: the plan cache holds the
     * caller's one plan, and the successful compute left no message. */
    cr_assert_eq(compute_state_get(ctx)->n_plans, 1, "plans: %d", compute_state_get(ctx)->n_plans);
    cr_assert_str_eq(glesc_context_errmsg(ctx), "");
    int m = p->gemv_max_m;
    compute_matmul_m4(ctx);
    cr_assert_eq(profile_of(ctx), p);
    cr_assert_eq(p->source, COMPUTE_PROFILE_MEASURED, "measured once");
    cr_assert_eq(p->gemv_max_m, m);

    /* A second context on the same renderer loads it: no measurement. */
    glesc_context *other = test_context(dir);
    t0 = core_time_ns();
    const compute_profile *q = profile_of(other);
    cr_log_info("second context: profile %s in %.2f ms",
                q->source == COMPUTE_PROFILE_LOADED ? "loaded" : "NOT loaded",
                (double)(core_time_ns() - t0) / 1e6);
    cr_assert_eq(q->source, COMPUTE_PROFILE_LOADED);
    cr_assert_eq(q->gemv_max_m, m);
    glesc_context_destroy(other);

    /* GLESC_GEMV_MAX_M overrides the stored value. */
    setenv("GLESC_GEMV_MAX_M", "3", 1);
    other = test_context(dir);
    q = profile_of(other);
    cr_assert_eq(q->source, COMPUTE_PROFILE_ENV);
    cr_assert_eq(q->gemv_max_m, 3);
    glesc_context_destroy(other);

    free(msg);
    glesc_graph_destroy(bad);
    glesc_context_destroy(ctx);
    free(dir);
}

Test(profile, the_measurement_leaves_no_buffer_behind)
{
    char *dir = test_tmpdir(); /* an empty cache: measured */
    glesc_context *ctx = test_context(dir);
    glesc_memory_stats before, after;
    glesc_context_memory_reset_peak(ctx);
    glesc_context_memory(ctx, &before);
    cr_assert_eq(profile_of(ctx)->source, COMPUTE_PROFILE_MEASURED);
    glesc_context_memory(ctx, &after);
    cr_log_info("held before %llu, after %llu, at the measurement's peak %llu bytes",
                (unsigned long long)before.total_bytes, (unsigned long long)after.total_bytes,
                (unsigned long long)after.peak_total_bytes);
    cr_assert_gt(after.peak_total_bytes, before.total_bytes, "the measurement took no memory?");
    cr_assert_eq(after.total_bytes, before.total_bytes, "held or cached after it: %llu bytes",
                 (unsigned long long)(after.total_bytes - before.total_bytes));
    glesc_context_destroy(ctx);
    free(dir);
}

/* Stores blob under the profile's key of ctx's device. */
static void plant(glesc_context *ctx, const void *blob, size_t len)
{
    size_t key_len;
    char *key = compute_profile_key(ctx, &key_len);
    cr_assert_not_null(key);
    cr_assert_not_null(ctx->disk_cache);
    cr_assert(core_disk_cache_put(ctx->disk_cache, key, key_len, blob, len));
    core_free(key);
}

Test(profile, foreign_or_damaged_entries_are_measured_again)
{
    char *dir = test_tmpdir();
    glesc_context *ctx = test_context(dir);
    /* Blobs that are not a profile of this format: binary, another value's
     * name, a threshold out of range or not a number, trailing text. */
#define BLOB(s)                                                                                    \
    {                                                                                              \
        s, sizeof s - 1                                                                            \
    }
    static const struct {
        const char *blob;
        size_t len;
    } bad[] = {
        BLOB("\x01\x00\x00\x00\x04\x00\x00\x00"),
        BLOB("gemv_max_k 4\n"),
        BLOB("gemv_max_m 42\n"),
        BLOB("gemv_max_m x\n"),
        BLOB("gemv_max_m 4\nmore"),
    };
    for (size_t i = 0; i < CORE_ARRAY_LEN(bad); i++) {
        plant(ctx, bad[i].blob, bad[i].len);
        glesc_context *c = test_context(dir);
        const compute_profile *p = profile_of(c);
        cr_assert_eq(p->source, COMPUTE_PROFILE_MEASURED, "bad entry %zu was used", i);
        glesc_context_destroy(c);
        /* the measurement replaced it */
        c = test_context(dir);
        cr_assert_eq(profile_of(c)->source, COMPUTE_PROFILE_LOADED, "entry %zu", i);
        glesc_context_destroy(c);
    }

    /* A valid profile of another glesc and device, copied over this one's
     * entry file: its stored key differs, so it is not this one's. */
    size_t key_len;
    char *key = compute_profile_key(ctx, &key_len);
    char *path = core_disk_cache_entry_path(ctx->disk_cache, key, key_len);
    static const char valid[] = "gemv_max_m 2\n";
    static const char foreign[] =
        "glesc-profile\0000.0.0\0other vendor\0other GPU\0other GL\0profile v1";
    cr_assert(
        core_disk_cache_put(ctx->disk_cache, foreign, sizeof foreign - 1, valid, sizeof valid));
    char *fpath = core_disk_cache_entry_path(ctx->disk_cache, foreign, sizeof foreign - 1);
    cr_assert_eq(rename(fpath, path), 0, "%s -> %s", fpath, path);
    glesc_context *c = test_context(dir);
    cr_assert_eq(profile_of(c)->source, COMPUTE_PROFILE_MEASURED);
    glesc_context_destroy(c);
    core_free(fpath);

    /* A damaged file (bytes flipped on disk) is refused by the disk cache. */
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0, "%s", path);
    struct stat sb;
    cr_assert_eq(fstat(fd, &sb), 0);
    uint8_t byte;
    cr_assert_eq(pread(fd, &byte, 1, sb.st_size - 1), 1);
    byte ^= 0xff;
    cr_assert_eq(pwrite(fd, &byte, 1, sb.st_size - 1), 1);
    close(fd);
    c = test_context(dir);
    cr_assert_eq(profile_of(c)->source, COMPUTE_PROFILE_MEASURED);
    glesc_context_destroy(c);

    core_free(path);
    core_free(key);
    glesc_context_destroy(ctx);
    free(dir);
}

/* stderr into a file while the profile is taken; the text. free() it. */
static char *stderr_of_profile(glesc_context *ctx, const compute_profile **p, long fail_after)
{
    char *dir = test_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/stderr.txt", dir);
    fflush(stderr);
    int saved = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    core_alloc_fail_after(fail_after);
    *p = compute_profile_get(ctx);
    core_alloc_fail_after(-1);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    size_t n;
    char *text = test_read_file(path, &n);
    cr_assert_not_null(text);
    text = realloc(text, n + 1);
    text[n] = '\0';
    unlink(path);
    rmdir(dir);
    free(dir);
    return text;
}

Test(profile, a_failed_measurement_says_why)
{
    glesc_context *ctx = test_context(NULL);
    /* The error: status and a message naming the profile and the cause. */
    compute_profile p;
    core_alloc_fail_after(0);
    glesc_status st = compute_profile_measure(ctx, &p);
    core_alloc_fail_after(-1);
    cr_assert_eq(st, GLESC_ERROR_OUT_OF_MEMORY);
    cr_assert(strstr(glesc_context_errmsg(ctx), "device profile") &&
                  strstr(glesc_context_errmsg(ctx), "out of memory"),
              "%s", glesc_context_errmsg(ctx));

    /* Failures deeper in (graph, GLSL, programs, buffers): always a message. */
    for (long n = 1; n <= 1000; n *= 10) {
        core_alloc_fail_after(n);
        st = compute_profile_measure(ctx, &p);
        core_alloc_fail_after(-1);
        cr_log_info("allocation %ld fails: %s", n,
                    st == GLESC_OK ? "measured anyway" : glesc_context_errmsg(ctx));
        if (st != GLESC_OK)
            cr_assert(strstr(glesc_context_errmsg(ctx), "device profile"), "%s",
                      glesc_context_errmsg(ctx));
    }

    /* Through compute_profile_get: a logged fallback, not silence. */
    cr_assert_not_null(compute_state_get(ctx));
    const compute_profile *fp;
    char *log = stderr_of_profile(ctx, &fp, 0);
    cr_log_info("logged: %s", log);
    cr_assert_not_null(fp);
    cr_assert_eq(fp->source, COMPUTE_PROFILE_FALLBACK);
    cr_assert_eq(fp->gemv_max_m, 8);
    cr_assert(strstr(log, "glesc: warning: device profile") && strstr(log, "out of memory") &&
                  strstr(log, "GEMV up to m = 8"),
              "log: %s", log);
    free(log);
    /* The context still computes. */
    compute_matmul_m4(ctx);
    glesc_context_destroy(ctx);
}

Test(profile, a_class_with_its_own_threshold_measures_nothing)
{
    /* llvmpipe's class (kernels/devclass.c) says 8: nothing measured, no
     * entry written */
    setenv("GLESC_DEVICE_CLASS", "llvmpipe", 1);
    char *dir = test_tmpdir();
    glesc_context *ctx = test_context(dir);
    cr_assert_str_eq(glesc_context_caps(ctx)->device_class, "llvmpipe");
    const compute_profile *p = profile_of(ctx);
    cr_assert_eq(p->source, COMPUTE_PROFILE_CLASS);
    cr_assert_eq(p->gemv_max_m, 8);
    glesc_stats st;
    glesc_context_stats(ctx, &st);
    cr_assert_eq(st.programs_compiled, 0, "%llu programs compiled",
                 (unsigned long long)st.programs_compiled);
    glesc_context_destroy(ctx);
    test_rmtree(dir);
}
