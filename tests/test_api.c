/*
 * test_api.c — the embedder's API that needs no GPU: the version macros
 * against the library, the log callback and level, option defaults given as
 * NULL, the thread's message after a success, and glesc-bench's checks of
 * its arguments.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "glesc_llm.h"
#include "test_util.h"

Test(api, version_macros_match_the_library)
{
    char v[64];
    snprintf(v, sizeof v, "%d.%d.%d", GLESC_VERSION_MAJOR, GLESC_VERSION_MINOR,
             GLESC_VERSION_PATCH);
    cr_assert_str_eq(glesc_version(), v);
    cr_assert_str_eq(GLESC_VERSION_STRING, v);
    cr_assert_eq(GLESC_VERSION_NUMBER,
                 GLESC_VERSION_MAJOR * 10000 + GLESC_VERSION_MINOR * 100 + GLESC_VERSION_PATCH);
    int major = 0, minor = 0, patch = 0;
    cr_assert_eq(sscanf(glesc_version(), "%d.%d.%d", &major, &minor, &patch), 3);
    cr_assert_eq(major * 10000 + minor * 100 + patch, GLESC_VERSION_NUMBER);
}

/* The status list is append-only: the values callers may have stored. */
Test(api, status_values_are_stable)
{
    cr_assert_eq(GLESC_ERROR_STATE, -14);
    cr_assert_eq(GLESC_ERROR_CANCELLED, -15);
    cr_assert_eq(GLESC_ERROR_CONTEXT_LOST, -16);
    cr_assert_str_eq(glesc_status_name(GLESC_ERROR_CANCELLED), "GLESC_ERROR_CANCELLED");
    cr_assert_str_eq(glesc_status_str(GLESC_ERROR_CONTEXT_LOST),
                     "the GPU context was lost (device reset)");
}

typedef struct log_sink {
    pthread_mutex_t lock;
    int n, inside, overlap;
    glesc_log_level last_level;
    char last[256];
} log_sink;

static void sink(void *user, glesc_log_level level, const char *msg)
{
    log_sink *s = user;
    /* The library calls the callback one message at a time. */
    if (__atomic_add_fetch(&s->inside, 1, __ATOMIC_SEQ_CST) > 1)
        __atomic_add_fetch(&s->overlap, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&s->lock);
    s->n++;
    s->last_level = level;
    snprintf(s->last, sizeof s->last, "%s", msg);
    pthread_mutex_unlock(&s->lock);
    __atomic_sub_fetch(&s->inside, 1, __ATOMIC_SEQ_CST);
}

static void *log_many(void *arg)
{
    (void)arg;
    for (int i = 0; i < 500; i++)
        core_log(CORE_LOG_WARN, "message %d", i);
    return NULL;
}

Test(api, log_callback_takes_every_message_one_at_a_time)
{
    unsetenv("GLESC_LOG");
    log_sink s = {.lock = PTHREAD_MUTEX_INITIALIZER};
    glesc_set_log_callback(sink, &s);
    core_log(CORE_LOG_WARN, "cache %s is not writable", "/x");
    cr_assert_eq(s.n, 1);
    cr_assert_eq(s.last_level, GLESC_LOG_WARN);
    cr_assert_str_eq(s.last, "cache /x is not writable");
    core_log(CORE_LOG_INFO, "not at the default level");
    cr_assert_eq(s.n, 1);
    /* A long message arrives whole. */
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    core_log(CORE_LOG_ERROR, "%s", big);
    cr_assert_eq(s.n, 2);
    cr_assert_eq(strlen(s.last), sizeof s.last - 1);

    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, log_many, NULL), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(s.n, 2 + 4 * 500);
    cr_assert_eq(s.overlap, 0);

    glesc_set_log_callback(NULL, NULL); /* back to stderr */
    core_log(CORE_LOG_WARN, "to stderr");
    cr_assert_eq(s.n, 2 + 4 * 500);
}

Test(api, log_level_explicit_beats_the_environment)
{
    log_sink s = {.lock = PTHREAD_MUTEX_INITIALIZER};
    glesc_set_log_callback(sink, &s);
    setenv("GLESC_LOG", "error", 1);
    core_log(CORE_LOG_WARN, "hidden by GLESC_LOG=error");
    cr_assert_eq(s.n, 0);
    glesc_set_log_level(GLESC_LOG_DEBUG);
    core_log(CORE_LOG_DEBUG, "shown");
    cr_assert_eq(s.n, 1);
    cr_assert_eq(s.last_level, GLESC_LOG_DEBUG);
    glesc_set_log_level((glesc_log_level)-1); /* back to GLESC_LOG */
    core_log(CORE_LOG_INFO, "hidden again");
    cr_assert_eq(s.n, 1);
    unsetenv("GLESC_LOG");
    glesc_set_log_callback(NULL, NULL);
}

/* Issue 10, defect 12: glesc_sampler_create(NULL, ...) crashed; NULL options
 * are the defaults everywhere else. */
Test(api, sampler_null_params_are_the_defaults)
{
    glesc_sampler *a = NULL, *b = NULL;
    cr_assert_eq(glesc_sampler_create(NULL, 16, &a), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_sampler_params p;
    glesc_sampler_params_init(&p);
    cr_assert_eq(glesc_sampler_create(&p, 16, &b), GLESC_OK);
    float logits[16];
    for (int i = 0; i < 16; i++)
        logits[i] = (float)((i * 7) % 16) / 4.0f;
    for (int i = 0; i < 20; i++)
        cr_assert_eq(glesc_sampler_sample(a, logits), glesc_sampler_sample(b, logits));
    glesc_sampler_destroy(a);
    glesc_sampler_destroy(b);
    cr_assert_eq(glesc_sampler_create(NULL, 16, NULL), GLESC_ERROR_INVALID_ARGUMENT);
}

/* Runs glesc-bench with args; its exit status, stderr in err. */
static int bench(const char *args, char *err, size_t n)
{
    const char *exe = test_tool("GLESC_BENCH");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1 >/dev/null", exe, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t len = fread(err, 1, n - 1, p);
    err[len] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Issue 10, defect 12: --types bogus printed an empty table with exit 0,
 * --iters abc printed "inf%". */
Test(api, bench_refuses_bad_arguments)
{
    char err[2048];
    cr_assert_eq(bench("--types bogus", err, sizeof err), 2, "%s", err);
    cr_assert(strstr(err, "'bogus' is not one of f32"), "%s", err);
    cr_assert_eq(bench("--types q4_0,,q8_0", err, sizeof err), 2, "%s", err);
    cr_assert_eq(bench("--iters abc", err, sizeof err), 2, "%s", err);
    cr_assert(strstr(err, "--iters: 'abc'"), "%s", err);
    cr_assert_eq(bench("--iters 0", err, sizeof err), 2, "%s", err);
    cr_assert_eq(bench("--copy-mib -4", err, sizeof err), 2, "%s", err);
    cr_assert_eq(bench("--warm-ms -1", err, sizeof err), 2, "%s", err);
    cr_assert(strstr(err, "--warm-ms"), "%s", err);
    cr_assert_eq(bench("--gemm 0", err, sizeof err), 2, "%s", err);
    cr_assert(strstr(err, "--gemm"), "%s", err);
    cr_assert_eq(bench("--shapes 64x", err, sizeof err), 2, "%s", err);
    cr_assert(strstr(err, "'64x'"), "%s", err);
    cr_assert_eq(bench("--types q4_0 --shapes 64x48", err, sizeof err), 2, "%s", err);
    cr_assert(strstr(err, "q4_0's block of 32"), "%s", err);
    cr_assert_eq(bench("--attn 0", err, sizeof err), 2, "%s", err);
    cr_assert(strstr(err, "--attn"), "%s", err);
    cr_assert_eq(bench("--attn 64,x", err, sizeof err), 2, "%s", err);
    cr_assert_eq(bench("--attn 64 --attn-heads 32/5/64", err, sizeof err), 2, "%s", err);
    cr_assert(strstr(err, "H/HKV/D"), "%s", err);
}

/* --gemm's shapes: plain, with a residual add (r), grouped with a norm (a
 * GEMM's norm is a kernel of its own, timed with it), the gate/up pair
 * with a norm: a row each. */
Test(api, bench_times_gemm_forms)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "'%s' --gemm 16 --types q4_0 --shapes 64x64,64x64r,n64+32x64,n32*2x64 --iters 1 "
             "--warm-ms 0",
             test_tool("GLESC_BENCH"));
    test_run_result r = test_run(cmd, NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    const char *shapes[] = {" 64x64 ", " 64x64r ", " n64+32x64 ", " n32*2x64 "};
    for (size_t i = 0; i < CORE_ARRAY_LEN(shapes); i++)
        cr_expect(strstr(r.out, shapes[i]), "no row for%s:\n%s", shapes[i], r.out);
    test_run_free(&r);
    char err[2048];
    cr_assert_eq(bench("--gemm 16 --shapes 64x64rr", err, sizeof err), 2, "%s", err);
    cr_assert(strstr(err, "'64x64rr'"), "%s", err);
    cr_assert_eq(bench("--shapes 64x64r", err, sizeof err), 2, "%s", err);
}

/* --attn: a row per key/value type and length, the kernel named, the
 * FLOP rate the one its time gives. */
Test(api, bench_times_prefill_attention)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' --attn 20,33 --attn-heads 4/2/16 --iters 1 --warm-ms 0",
             test_tool("GLESC_BENCH"));
    test_run_result r = test_run(cmd, NULL);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    int rows = 0;
    for (const char *l = r.out; (l = strstr(l, "\nf")) != NULL; l++) {
        char kv[8], heads[16];
        long n;
        double us, gflops;
        if (sscanf(l + 1, "%7s %ld %15s x 16 %lf %lf", kv, &n, heads, &us, &gflops) == 5 &&
            strstr(l, "attention, prefill")) {
            /* 4·d·heads per visible pair, n(n + 1)/2 pairs a head (the
             * table's one decimal) */
            double want = 4.0 * 16 * 4 * ((double)n * (double)(n + 1) / 2) / (us * 1e3);
            cr_expect(us > 0 && fabs(gflops - want) <= 0.051 + 0.02 * want, "%.80s (want %.3f)",
                      l + 1, want);
            cr_expect_str_eq(heads, "4/2");
            rows++;
        }
    }
    cr_expect_eq(rows, 4, "f32 and f16 at 20 and 33:\n%s", r.out);
    test_run_free(&r);
}

/* Issue 10, defect 12: glesc_last_errmsg() kept the message of a failure
 * after later calls succeeded; every call that returns a status resets it. */
Test(api, a_success_clears_the_threads_message)
{
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    cr_assert_not_null(w);
    cr_assert_eq(glesc_gguf_writer_set_alignment(w, 3), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(glesc_last_errmsg(), "alignment"), "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_gguf_writer_set_alignment(w, 64), GLESC_OK);
    cr_assert_str_eq(glesc_last_errmsg(), "");
    glesc_gguf_writer_destroy(w);

    glesc_sampler *s = NULL;
    glesc_sampler_params p;
    glesc_sampler_params_init(&p);
    cr_assert_eq(glesc_sampler_create(&p, 0, &s), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_str_neq(glesc_last_errmsg(), "");
    cr_assert_eq(glesc_sampler_create(&p, 8, &s), GLESC_OK);
    cr_assert_str_eq(glesc_last_errmsg(), "");
    glesc_sampler_destroy(s);

    char path[] = "/tmp/glesc-api-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    w = glesc_gguf_writer_create();
    cr_assert_eq(glesc_gguf_writer_set_u32(w, "general.alignment", 32), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_write(w, path), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_gguf_writer_destroy(w);
    glesc_gguf *f = NULL;
    cr_assert_neq(glesc_gguf_open("/nonexistent/x.gguf", &f), GLESC_OK);
    cr_assert(strstr(glesc_last_errmsg(), "/nonexistent/x.gguf"), "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_str_eq(glesc_last_errmsg(), "");
    uint32_t a = 0;
    cr_assert_neq(glesc_gguf_get_u32(f, "no.such.key", &a), GLESC_OK);
    cr_assert_str_neq(glesc_last_errmsg(), "");
    cr_assert_eq(glesc_gguf_get_u32(f, "general.alignment", &a), GLESC_OK);
    cr_assert_str_eq(glesc_last_errmsg(), "");
    cr_assert_eq(a, 32);
    glesc_gguf_close(f);
    remove(path);

    float x[32] = {0};
    unsigned char q[64];
    cr_assert_eq(glesc_quantize(GLESC_DTYPE_Q8_0, x, 1, 30, q, sizeof q),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_str_neq(glesc_last_errmsg(), "");
    cr_assert_eq(glesc_quantize(GLESC_DTYPE_Q8_0, x, 1, 32, q, sizeof q), GLESC_OK);
    cr_assert_str_eq(glesc_last_errmsg(), "");

    glesc_context_options o;
    glesc_context_options_init(&o);
    cr_assert_eq(glesc_context_options_limits(&o, "nosuchgpu"), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_str_neq(glesc_last_errmsg(), "");
    cr_assert_eq(glesc_context_options_limits(&o, "mali"), GLESC_OK);
    cr_assert_str_eq(glesc_last_errmsg(), "");
}

Test(api, limits_descriptions_set_the_testing_caps)
{
    glesc_context_options o;
    glesc_context_options_init(&o);
    cr_assert_eq(glesc_context_options_limits(&o, "mali"), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(o.max_compute_storage_blocks, 8);
    cr_assert_eq(o.max_compute_invocations, 256);
    cr_assert_eq(o.max_compute_shared_memory, 32768);
    cr_assert_eq(o.max_storage_block_size, 128u << 20);
    cr_assert(o.no_subgroups);
    /* later items win; sizes take K, M, G */
    cr_assert_eq(glesc_context_options_limits(&o, "adreno,blocks=12,shared=16K,ssbo=64M"), GLESC_OK,
                 "%s", glesc_last_errmsg());
    cr_assert_eq(o.max_compute_storage_blocks, 12);
    cr_assert_eq(o.max_compute_invocations, 1024);
    cr_assert_eq(o.max_compute_shared_memory, 16384);
    cr_assert_eq(o.max_storage_block_size, 64u << 20);
    /* portable keeps the storage blocks as they were */
    cr_assert_eq(glesc_context_options_limits(&o, "portable"), GLESC_OK);
    cr_assert_eq(o.max_compute_storage_blocks, 12);
    cr_assert_eq(o.max_compute_invocations, 128);

    /* a bad item is named, and nothing changes */
    glesc_context_options before = o;
    static const struct {
        const char *spec, *msg;
    } bad[] = {
        {"mail", "'mail' is no device class"},
        {"blocks=0", "blocks=0 is not a positive number"},
        {"blocks=-3", "blocks=-3 is not a positive number"},
        {"shared=12Q", "shared=12Q is not a positive number"},
        {"subgroups=1", "subgroups=1 is not 0"},
        {"colour=red", "no field 'colour'"},
        {"mali,,v3d", "an empty or overlong item at offset 5"},
        {"", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        glesc_status st = glesc_context_options_limits(&o, bad[i].spec);
        if (!bad[i].msg) {
            cr_assert_eq(st, GLESC_OK, "an empty description changes nothing");
            continue;
        }
        cr_assert_eq(st, GLESC_ERROR_INVALID_ARGUMENT, "%s", bad[i].spec);
        cr_assert(strstr(glesc_last_errmsg(), bad[i].msg), "%s: %s", bad[i].spec,
                  glesc_last_errmsg());
        cr_assert_eq(memcmp(&o, &before, sizeof o), 0, "%s changed the options", bad[i].spec);
    }
}
