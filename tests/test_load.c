/*
 * test_load.c — the ways a model is loaded (glesc_llm.h): from a path, an
 * open glesc_gguf, memory (freed right after the load) and a descriptor
 * range (with an offset, up to the end, through pread where a mapping is
 * refused) all give the same model; bad ranges fail with a message; a
 * progress callback cancels a load with GLESC_ERROR_CANCELLED and nothing
 * stays allocated (the GPU pool's live bytes return to where they were; the
 * ASan build checks the heap); and glesc_model_estimate predicts what a load
 * and a session take: the weights' and the KV cache's GPU bytes exactly,
 * the activations and the host heap as upper bounds. Every weight type a
 * model can hold loads exactly: each tensor's GPU buffers are the CPU
 * repack of the file's bytes and read back as them (norm vectors stored as
 * f16, bf16 or q8_0 as their f32 values), through each upload path and split
 * into row chunks; a model large enough for the upload's worker threads
 * reports progress in order to the end and fails cleanly when its file is
 * cut under it; the GPU memory accounts (glesc_context_memory) are the
 * tensors' own bytes.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/synth.h"
#include "glesc_llm.h"
#include "graph/graph.h"
#include "llm/runtime.h"
#include "quant/quant.h"
#include "test_synth_util.h"
#include "compute/compute.h"
#include "test_util.h"

/* ---- A counting allocator: live heap bytes of glesc ---- */
static size_t heap_live;

static void *counting_alloc(void *user, void *ptr, size_t size)
{
    (void)user;
    size_t *h = ptr ? (size_t *)ptr - 2 : NULL;
    if (size == 0) {
        if (h) {
            heap_live -= h[0];
            free(h);
        }
        return NULL;
    }
    size_t old = h ? h[0] : 0;
    size_t *n = realloc(h, size + 2 * sizeof(size_t));
    if (!n)
        return NULL;
    heap_live += size - old;
    n[0] = size;
    return n + 2;
}

static glesc_context *ctx;
static char *dir;

static void setup(void)
{
    dir = test_tmpdir();
}

static void teardown(void)
{
    glesc_context_destroy(ctx);
    ctx = NULL;
    rmdir(dir);
    free(dir);
    glesc_set_allocator(NULL, NULL);
}

TestSuite(load, .init = setup, .fini = teardown);

/* A small synthetic model of weight type t at dir/name. */
static char *write_model(const char *name, glesc_dtype t, void (*tweak)(synth_params *))
{
    synth_params p;
    test_tiny_params(&p, 2, 256);
    p.n_ff = 128;
    p.weight_type = t;
    if (tweak)
        tweak(&p);
    return test_synth_write(&p, dir, name);
}

/* The last row of logits for a fixed prompt (malloc'ed, n_vocab floats). */
static float *logits_of(glesc_model *m, int64_t *n_vocab)
{
    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    glesc_session *s;
    cr_assert_eq(glesc_session_create(m, NULL, &s), GLESC_OK, "%s", glesc_last_errmsg());
    float *row = malloc((size_t)mi.n_vocab * sizeof *row);
    int32_t ids[] = {1, 300, 301, 302, 7};
    cr_assert_eq(glesc_session_eval(s, ids, 5, 0, row), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_session_destroy(s);
    *n_vocab = mi.n_vocab;
    return row;
}

static void expect_same_model(glesc_model *m, const glesc_model_info *ref, const float *ref_row,
                              const char *how)
{
    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    cr_expect_eq(mi.n_tensors, ref->n_tensors, "%s", how);
    cr_expect_eq(mi.weight_bytes, ref->weight_bytes, "%s", how);
    cr_expect_eq(mi.gpu_bytes, ref->gpu_bytes, "%s", how);
    cr_expect_eq(mi.n_layer, ref->n_layer, "%s", how);
    int64_t n;
    float *row = logits_of(m, &n);
    cr_expect_eq(memcmp(row, ref_row, (size_t)n * sizeof *row), 0, "%s: logits differ", how);
    free(row);
}

static void *read_all(const char *path, size_t *size)
{
    void *d = test_read_file(path, size);
    cr_assert_not_null(d, "cannot read %s", path);
    return d;
}

Test(load, every_source_gives_the_same_model)
{
    ctx = test_context(NULL);
    char *path = write_model("m.gguf", GLESC_DTYPE_Q8_0, NULL);
    glesc_model *ref;
    cr_assert_eq(glesc_model_load(ctx, path, NULL, &ref), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_model_info ri;
    glesc_model_get_info(ref, &ri);
    cr_expect_gt(ri.gpu_bytes, 0);
    int64_t n_vocab;
    float *ref_row = logits_of(ref, &n_vocab);

    /* An open reader, closed right after the load. */
    glesc_gguf *f;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK);
    glesc_model *m;
    cr_assert_eq(glesc_model_load_gguf(ctx, f, "handle", NULL, &m), GLESC_OK, "%s",
                 glesc_last_errmsg());
    glesc_gguf_close(f);
    expect_same_model(m, &ri, ref_row, "glesc_gguf");
    glesc_model_destroy(m);

    /* Memory, overwritten and freed as soon as the load returns. */
    size_t size;
    char *bytes = read_all(path, &size);
    cr_assert_eq(glesc_model_load_memory(ctx, bytes, size, NULL, NULL, &m), GLESC_OK, "%s",
                 glesc_last_errmsg());
    memset(bytes, 0xA5, size);
    free(bytes);
    expect_same_model(m, &ri, ref_row, "memory");
    glesc_model_destroy(m);

    /* A descriptor: the whole file (size 0), then the model inside a larger
     * file at an offset that is no page boundary, as an Android asset. */
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(glesc_model_load_fd(ctx, fd, 0, 0, NULL, NULL, &m), GLESC_OK, "%s",
                 glesc_last_errmsg());
    cr_expect_eq(lseek(fd, 0, SEEK_CUR), 0, "the descriptor's offset moved");
    close(fd);
    expect_same_model(m, &ri, ref_row, "fd");
    glesc_model_destroy(m);

    bytes = read_all(path, &size);
    char *pack = malloc(strlen(dir) + 16);
    sprintf(pack, "%s/pack.bin", dir);
    FILE *pf = fopen(pack, "wb");
    static const char junk[12345] = {1};
    fwrite(junk, 1, sizeof junk, pf);
    fwrite(bytes, 1, size, pf);
    fwrite(junk, 1, 777, pf);
    fclose(pf);
    free(bytes);
    fd = open(pack, O_RDONLY);
    cr_assert_eq(glesc_model_load_fd(ctx, fd, sizeof junk, size, "pack.bin:model", NULL, &m),
                 GLESC_OK, "%s", glesc_last_errmsg());
    expect_same_model(m, &ri, ref_row, "fd at an offset");
    glesc_model_destroy(m);

    /* The range must lie inside the file; its size is needed where the
     * descriptor has no end (a pipe), and a pipe is read, never waited on
     * past its data. */
    cr_expect_eq(glesc_model_load_fd(ctx, fd, sizeof junk, size + 1000, "pack", NULL, &m),
                 GLESC_ERROR_IO);
    cr_expect(strstr(glesc_last_errmsg(), "go past the end of the file"), "%s",
              glesc_last_errmsg());
    cr_expect_null(m);
    cr_expect_eq(glesc_model_load_fd(ctx, fd, 1 << 30, 0, NULL, NULL, &m), GLESC_ERROR_FORMAT);
    cr_expect(strstr(glesc_last_errmsg(), "fd "), "%s", glesc_last_errmsg());
    close(fd);
    cr_expect_eq(glesc_model_load_fd(ctx, -1, 0, 0, NULL, NULL, &m), GLESC_ERROR_INVALID_ARGUMENT);
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    cr_expect_eq(glesc_model_load_fd(ctx, pfd[0], 0, 0, "pipe", NULL, &m),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect(strstr(glesc_last_errmsg(), "give the size"), "%s", glesc_last_errmsg());
    cr_expect_eq(write(pfd[1], "GGUF", 4), 4);
    close(pfd[1]);
    glesc_status st = glesc_model_load_fd(ctx, pfd[0], 0, 4096, "pipe", NULL, &m);
    cr_expect_neq(st, GLESC_OK);
    cr_expect(strstr(glesc_last_errmsg(), "pipe: "), "%s", glesc_last_errmsg());
    close(pfd[0]);

    glesc_model_destroy(ref);
    free(ref_row);
    unlink(pack);
    unlink(path);
    free(pack);
    free(path);
}

/* ---- Progress and cancellation ---- */
typedef struct progress_log {
    int calls, cancel_at;
    uint64_t last_done, total;
    bool monotonic;
} progress_log;

static bool on_progress(void *user, uint64_t done, uint64_t total)
{
    progress_log *l = user;
    l->calls++;
    if (done < l->last_done || done > total)
        l->monotonic = false;
    l->last_done = done;
    l->total = total;
    return l->calls == l->cancel_at;
}

Test(load, progress_callback_reports_and_cancels)
{
    glesc_set_allocator(counting_alloc, NULL); /* before any object exists */
    ctx = test_context(NULL);
    char *path = write_model("p.gguf", GLESC_DTYPE_F16, NULL);
    glesc_model_options mo;
    glesc_model_options_init(&mo);
    progress_log l = {0, 0, 0, 0, true};
    mo.progress = on_progress;
    mo.progress_user = &l;
    glesc_model *m;
    cr_assert_eq(glesc_model_load(ctx, path, &mo, &m), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    cr_expect_eq(l.calls, mi.n_tensors + 1, "one call at the start, then one per tensor");
    cr_expect(l.monotonic);
    cr_expect_eq(l.last_done, l.total, "the last call reports everything");
    int calls = l.calls;
    glesc_model_destroy(m);

    glesc_stats before, after;
    glesc_context_stats(ctx, &before);
    size_t heap0 = heap_live;
    for (int at = 1; at <= calls; at += calls / 3) {
        l = (progress_log){0, at, 0, 0, true};
        m = (glesc_model *)&l;
        cr_assert_eq(glesc_model_load(ctx, path, &mo, &m), GLESC_ERROR_CANCELLED,
                     "cancelled at call %d", at);
        cr_expect_null(m);
        cr_expect_eq(l.calls, at, "no call after the cancelling one");
        cr_expect(strstr(glesc_last_errmsg(), "cancelled"), "%s", glesc_last_errmsg());
        cr_expect(strstr(glesc_last_errmsg(), path), "%s", glesc_last_errmsg());
        glesc_context_stats(ctx, &after);
        cr_expect_eq(after.pool_live_bytes, before.pool_live_bytes,
                     "cancelled at call %d: %llu GPU bytes still live", at,
                     (unsigned long long)(after.pool_live_bytes - before.pool_live_bytes));
        cr_expect_eq(heap_live, heap0, "cancelled at call %d: %zd heap bytes still live", at,
                     (ssize_t)(heap_live - heap0));
    }
    cr_expect_str_eq(glesc_status_name(GLESC_ERROR_CANCELLED), "GLESC_ERROR_CANCELLED");
    unlink(path);
    free(path);
}

/* ---- The estimate ---- */
static void tweak_tied_qwen2(synth_params *p)
{
    p->arch = "qwen2";
    p->tied_output = true;
    p->n_embd = 256; /* whole q6_k blocks */
    p->n_ff = 256;
}

static void tweak_qwen3_wide(synth_params *p)
{
    p->arch = "qwen3";
    p->head_dim = 32;
    p->rope_freqs = true;
}

typedef struct estimate_case {
    glesc_dtype type;
    void (*tweak)(synth_params *);
    uint64_t storage_limit; /* 0: the driver's */
    int32_t n_ctx, n_batch;
    glesc_dtype kv_type;
} estimate_case;

static void check_estimate(const estimate_case *c)
{
    /* The allocator must be in place before any object exists. */
    glesc_set_allocator(counting_alloc, NULL);
    glesc_context_options co = {0};
    co.cache_dir = "off";
    co.max_storage_block_size = c->storage_limit;
    cr_assert_eq(glesc_context_create(&co, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    char name[64];
    snprintf(name, sizeof name, "e-%s.gguf", glesc_dtype_name(c->type));
    char *path = write_model(name, c->type, c->tweak);
    glesc_session_options so = {
        .n_ctx = c->n_ctx, .n_batch = c->n_batch, .kv_type = TEST_KV(c->kv_type)};

    glesc_gguf *f;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK);
    glesc_model_memory est;
    cr_assert_eq(glesc_model_estimate(ctx, f, &so, &est), GLESC_OK, "%s", glesc_last_errmsg());
    cr_expect_eq(est.gpu_bytes, est.weight_bytes + est.kv_bytes + est.scratch_bytes);

    size_t heap0 = heap_live;
    glesc_model *m;
    cr_assert_eq(glesc_model_load_gguf(ctx, f, path, NULL, &m), GLESC_OK, "%s",
                 glesc_last_errmsg());
    glesc_gguf_close(f);
    glesc_session *s;
    cr_assert_eq(glesc_session_create(m, &so, &s), GLESC_OK, "%s", glesc_last_errmsg());
    size_t heap = heap_live - heap0;

    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    cr_expect_eq(est.weight_bytes, mi.gpu_bytes, "%s: weights: estimate %llu, load %llu",
                 glesc_dtype_name(c->type), (unsigned long long)est.weight_bytes,
                 (unsigned long long)mi.gpu_bytes);
    cr_expect_eq(est.kv_bytes, glesc_session_kv_bytes(s), "%s: KV: estimate %llu, session %llu",
                 glesc_dtype_name(c->type), (unsigned long long)est.kv_bytes,
                 (unsigned long long)glesc_session_kv_bytes(s));

    /* One step of n_batch tokens with every row read back: the most a step
     * holds at once. */
    int32_t n = c->n_batch ? c->n_batch : 512;
    if (n > glesc_session_n_ctx(s))
        n = glesc_session_n_ctx(s);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int32_t i = 0; i < n; i++)
        ids[i] = 3 + i % 200;
    float *rows = malloc((size_t)n * (size_t)mi.n_vocab * sizeof *rows);
    glesc_stats before, after;
    glesc_context_memory_reset_peak(ctx); /* the step's own peak */
    glesc_context_stats(ctx, &before);
    cr_assert_eq(glesc_session_eval(s, ids, (size_t)n, GLESC_EVAL_ALL_LOGITS, rows), GLESC_OK, "%s",
                 glesc_last_errmsg());
    glesc_context_stats(ctx, &after);
    uint64_t scratch = after.pool_peak_bytes - before.pool_live_bytes;
    cr_expect_leq(scratch, est.scratch_bytes, "%s: activations: %llu above the estimate %llu",
                  glesc_dtype_name(c->type), (unsigned long long)scratch,
                  (unsigned long long)est.scratch_bytes);
    cr_expect_leq(est.scratch_bytes, 4 * scratch, "%s: activations: estimate %llu, used %llu",
                  glesc_dtype_name(c->type), (unsigned long long)est.scratch_bytes,
                  (unsigned long long)scratch);
    cr_expect_leq(heap, est.host_bytes, "%s: host: %zu above the estimate %llu",
                  glesc_dtype_name(c->type), heap, (unsigned long long)est.host_bytes);
    cr_expect_leq(est.host_bytes, 4 * heap + (1u << 20), "%s: host: estimate %llu, used %zu",
                  glesc_dtype_name(c->type), (unsigned long long)est.host_bytes, heap);
    cr_log_info("%s: weights %llu, KV %llu, scratch %llu (used %llu), host %llu (used %zu)",
                glesc_dtype_name(c->type), (unsigned long long)est.weight_bytes,
                (unsigned long long)est.kv_bytes, (unsigned long long)est.scratch_bytes,
                (unsigned long long)scratch, (unsigned long long)est.host_bytes, heap);
    free(ids);
    free(rows);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    glesc_context_destroy(ctx);
    ctx = NULL;
    cr_expect_eq(heap_live, 0, "%zu heap bytes still live after destroying everything", heap_live);
    unlink(path);
    free(path);
}

Test(load, estimate_f32)
{
    check_estimate(&(estimate_case){GLESC_DTYPE_F32, NULL, 0, 0, 0, GLESC_DTYPE_F32});
}

Test(load, estimate_q4_0_repacked_f16_cache)
{
    check_estimate(&(estimate_case){GLESC_DTYPE_Q4_0, NULL, 0, 128, 64, GLESC_DTYPE_F16});
}

Test(load, estimate_q6_k_tied_qwen2)
{
    check_estimate(&(estimate_case){GLESC_DTYPE_Q6_K, tweak_tied_qwen2, 0, 200, 7, 0});
}

Test(load, estimate_holds_where_the_device_profile_is_measured)
{
    /* A class without a threshold of its own and no GLESC_GEMV_MAX_M (the
     * suites set it), as on a real GPU's first run: the session measures
     * the device profile, and the step the estimate bounds does not. */
    unsetenv("GLESC_GEMV_MAX_M");
    setenv("GLESC_DEVICE_CLASS", "default", 1);
    check_estimate(&(estimate_case){GLESC_DTYPE_Q6_K, tweak_tied_qwen2, 0, 200, 7, 0});
}

Test(load, estimate_split_weights)
{
    /* 4 KiB storage blocks: token_embd and the feed-forward matrices are
     * split into chunks (a layer's f16 cache of 32 positions just fits). */
    check_estimate(
        &(estimate_case){GLESC_DTYPE_F16, tweak_qwen3_wide, 4096, 32, 1, GLESC_DTYPE_F16});
}

Test(load, estimate_fails_like_a_load)
{
    synth_params p;
    synth_params_default(&p);
    p.n_layer = 1;
    p.skip_tensor = "blk.0.ffn_up.weight";
    char *path = malloc(strlen(dir) + 16);
    sprintf(path, "%s/bad.gguf", dir);
    cr_assert_eq(synth_write(&p, path), GLESC_OK);
    glesc_gguf *f;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK);
    glesc_model_memory est;
    cr_expect_eq(glesc_model_estimate(NULL, f, NULL, &est), GLESC_ERROR_NOT_FOUND);
    cr_expect(strstr(glesc_last_errmsg(), "blk.0.ffn_up.weight"), "%s", glesc_last_errmsg());
    cr_expect_eq(est.gpu_bytes, 0);
    glesc_session_options so = {.kv_type = GLESC_DTYPE_BF16};
    glesc_gguf_close(f);
    p.skip_tensor = NULL;
    cr_assert_eq(synth_write(&p, path), GLESC_OK);
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK);
    cr_expect_eq(glesc_model_estimate(NULL, f, &so, &est), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_eq(glesc_model_estimate(NULL, f, NULL, &est), GLESC_OK, "%s", glesc_last_errmsg());
    cr_expect_gt(est.weight_bytes, 0);
    glesc_gguf_close(f);
    unlink(path);
    free(path);
}

/* The tokenizer's share of the host estimate, on the real vocabularies
 * (SentencePiece and byte-level BPE, up to 100k tokens). */
Test(load, estimate_tokenizer_heap_on_real_vocabularies)
{
    static const char *const files[] = {
        "models/vocab/ggml-vocab-llama-spm.gguf", "models/vocab/ggml-vocab-phi-3.gguf",
        "models/vocab/ggml-vocab-gpt-2.gguf",     "models/vocab/ggml-vocab-deepseek-llm.gguf",
        "models/vocab/ggml-vocab-falcon.gguf",    "models/stories260K.gguf",
    };
    glesc_set_allocator(counting_alloc, NULL);
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        TEST_REQUIRE_SHARED(path, files[i]);
        glesc_gguf *f;
        cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
        size_t heap0 = heap_live;
        glesc_tokenizer *tok;
        cr_assert_eq(glesc_tokenizer_load(f, &tok), GLESC_OK, "%s", glesc_last_errmsg());
        size_t used = heap_live - heap0;
        uint64_t est = llm_tokenizer_host_bytes(f);
        cr_log_info("%s: tokenizer heap %zu, estimate %llu", files[i], used,
                    (unsigned long long)est);
        cr_expect_geq(est, used, "%s: the tokenizer keeps %zu bytes, above the estimate %llu",
                      files[i], used, (unsigned long long)est);
        cr_expect_leq(est, 5 * used / 2, "%s: estimate %llu for %zu bytes", files[i],
                      (unsigned long long)est, used);
        glesc_tokenizer_destroy(tok);
        glesc_gguf_close(f);
        free(path);
    }
}

/* glesc_weight_gpu_bytes is what glesc_weight_new takes from the pool. */
Test(load, weight_gpu_bytes_is_what_a_weight_takes)
{
    glesc_context_options co = {0};
    co.cache_dir = "off";
    co.max_storage_block_size = 1 << 16;
    cr_assert_eq(glesc_context_create(&co, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    static const struct {
        glesc_dtype t;
        int64_t ne0, ne1;
    } cases[] = {{GLESC_DTYPE_F32, 7, 1},       {GLESC_DTYPE_F16, 4096, 3},
                 {GLESC_DTYPE_Q4_0, 256, 1000}, {GLESC_DTYPE_Q6_K, 512, 200},
                 {GLESC_DTYPE_BF16, 100, 1000}, {GLESC_DTYPE_Q8_0, 64, 5000}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int64_t shape[2] = {cases[i].ne0, cases[i].ne1};
        uint64_t predicted = glesc_weight_gpu_bytes(ctx, cases[i].t, 2, shape);
        glesc_stats before, after;
        glesc_context_stats(ctx, &before);
        glesc_tensor *w = glesc_weight_new(ctx, cases[i].t, 2, shape);
        cr_assert_not_null(w, "%s", glesc_context_errmsg(ctx));
        glesc_context_stats(ctx, &after);
        cr_expect_eq(predicted, after.pool_live_bytes - before.pool_live_bytes,
                     "%s [%lld, %lld]: predicted %llu, took %llu", glesc_dtype_name(cases[i].t),
                     (long long)shape[0], (long long)shape[1], (unsigned long long)predicted,
                     (unsigned long long)(after.pool_live_bytes - before.pool_live_bytes));
        glesc_weight_free(w);
    }
    /* Refused shapes and types give 0; without a context nothing is split. */
    cr_expect_eq(glesc_weight_gpu_bytes(ctx, GLESC_DTYPE_Q4_0, 2, (int64_t[]){33, 2}), 0);
    cr_expect_eq(glesc_weight_gpu_bytes(ctx, GLESC_DTYPE_IQ2_XXS, 2, (int64_t[]){256, 2}), 0);
    cr_expect_eq(glesc_weight_gpu_bytes(ctx, GLESC_DTYPE_F32, 0, NULL), 0);
    cr_expect_eq(glesc_weight_gpu_bytes(ctx, GLESC_DTYPE_F32, 1, (int64_t[]){1 << 15}), 0,
                 "a row beyond the limit cannot be split");
    cr_expect_eq(glesc_weight_gpu_bytes(NULL, GLESC_DTYPE_F32, 1, (int64_t[]){1 << 15}), 1 << 17);
}

/* ---- Every weight type, byte for byte ---- */

/* The model's tensors (NULL entries for absent ones), n of them. */
static glesc_tensor **model_tensors(const glesc_model *m, int *n)
{
    int per = 17, cap = 6 + per * (int)m->hp.n_layer, k = 0;
    glesc_tensor **ts = calloc((size_t)cap, sizeof *ts);
    ts[k++] = m->tok_embd;
    ts[k++] = m->output_norm;
    ts[k++] = m->output;
    ts[k++] = m->rope_freqs;
    ts[k++] = m->rope_long;
    ts[k++] = m->rope_short;
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        const llm_layer *L = &m->layers[l];
        glesc_tensor *lt[] = {L->attn_norm,    L->wq,     L->wk,     L->wv,
                              L->wqkv,         L->bq,     L->bk,     L->bv,
                              L->q_norm,       L->k_norm, L->wo,     L->ffn_norm,
                              L->w_gate,       L->w_up,   L->w_down, L->post_attn_norm,
                              L->post_ffn_norm};
        for (int i = 0; i < per; i++)
            ts[k++] = lt[i];
    }
    *n = k;
    return ts;
}

/* Every tensor of m against the file: the GPU image is the CPU repack of
 * the file's bytes (vectors: their f32 values), and reads back as them. */
static void expect_exact(const glesc_model *m, const char *path, const char *how)
{
    glesc_gguf *f;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK);
    int n;
    glesc_tensor **ts = model_tensors(m, &n);
    int checked = 0;
    for (int k = 0; k < n; k++) {
        glesc_tensor *t = ts[k];
        if (!t)
            continue;
        int64_t i = glesc_gguf_find_tensor(f, t->name);
        cr_assert_geq(i, 0, "%s", t->name);
        glesc_gguf_tensor_info ti;
        glesc_gguf_tensor(f, i, &ti);
        uint8_t *file = malloc((size_t)ti.size);
        cr_assert_eq(glesc_gguf_tensor_read(f, i, 0, file, ti.size), GLESC_OK);
        size_t host = (size_t)graph_host_nbytes(t);
        uint8_t *want = malloc(host), *back = malloc(host);
        if (t->dtype == ti.type) {
            cr_assert_eq(host, ti.size);
            memcpy(want, file, host);
        } else { /* a vector, uploaded as f32 */
            cr_assert_eq(t->dtype, GLESC_DTYPE_F32, "%s", t->name);
            cr_assert_eq(quant_dequantize(ti.type, file, (float *)(void *)want, ti.ne[0]),
                         GLESC_OK);
        }
        /* the GPU image */
        uint64_t rows = (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        uint64_t gpu = graph_nbytes(t);
        uint8_t *img = calloc(1, (size_t)gpu + 4), *got = calloc(1, (size_t)gpu + 4);
        if (graph_dtype_quant(t->dtype))
            cr_assert_eq(
                quant_gpu_repack(t->dtype, want, t->ne[0], (int64_t)rows, (uint32_t *)(void *)img),
                GLESC_OK);
        else
            memcpy(img, want, host);
        cr_assert_eq(graph_storage_read(t, 0, got, gpu), GLESC_OK);
        cr_expect_eq(memcmp(got, img, (size_t)gpu), 0, "%s: %s (%s, %d chunks): GPU bytes differ",
                     how, t->name, glesc_dtype_name(t->dtype), t->st.n_chunks);
        cr_assert_eq(glesc_tensor_read(t, back, host), GLESC_OK);
        cr_expect_eq(memcmp(back, want, host), 0, "%s: %s reads back differently", how, t->name);
        free(file);
        free(want);
        free(back);
        free(img);
        free(got);
        checked++;
    }
    cr_expect_eq(checked, m->n_tensors, "%s", how);
    free(ts);
    glesc_gguf_close(f);
}

static void tweak_k_shape(synth_params *p)
{
    p->n_embd = 256; /* whole blocks of 256 for the k-quants and iq4_xs */
    p->n_ff = 512;
    p->n_head = 4;
    p->n_head_kv = 2;
}

/* Rewrites path with these norm vectors stored as f16, bf16 and q8_0. */
static void norms_in_other_types(const char *path)
{
    static const struct {
        const char *name;
        glesc_dtype t;
    } conv[] = {{"output_norm.weight", GLESC_DTYPE_F16},
                {"blk.0.attn_norm.weight", GLESC_DTYPE_BF16},
                {"blk.1.ffn_norm.weight", GLESC_DTYPE_Q8_0}};
    glesc_gguf *f;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK);
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    for (int64_t i = 0; i < glesc_gguf_n_kv(f); i++) {
        const void *v;
        uint64_t n;
        cr_assert_eq(glesc_gguf_kv_raw(f, i, &v, &n), GLESC_OK);
        cr_assert_eq(
            glesc_gguf_writer_set_encoded(w, glesc_gguf_key(f, i), glesc_gguf_kv_type(f, i), v, n),
            GLESC_OK);
    }
    void *made[3] = {NULL};
    for (int64_t i = 0; i < glesc_gguf_n_tensors(f); i++) {
        glesc_gguf_tensor_info t;
        glesc_gguf_tensor(f, i, &t);
        glesc_dtype type = t.type;
        const void *data = t.data;
        uint64_t size = t.size;
        for (int c = 0; c < 3; c++) {
            if (strcmp(t.name, conv[c].name))
                continue;
            type = conv[c].t;
            size = glesc_dtype_row_bytes(type, t.ne[0]);
            made[c] = malloc((size_t)size);
            cr_assert_eq(glesc_quantize(type, t.data, 1, t.ne[0], made[c], (size_t)size), GLESC_OK,
                         "%s", glesc_last_errmsg());
            data = made[c];
        }
        cr_assert_eq(glesc_gguf_writer_add_tensor(w, t.name, type, t.n_dims, t.ne, data, size),
                     GLESC_OK);
    }
    cr_assert_eq(glesc_gguf_writer_write(w, path), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_gguf_writer_destroy(w);
    for (int c = 0; c < 3; c++)
        free(made[c]);
    glesc_gguf_close(f);
}

Test(load, every_weight_type_is_on_the_gpu_exactly)
{
    static const glesc_dtype types[] = {
        GLESC_DTYPE_F32,  GLESC_DTYPE_F16,    GLESC_DTYPE_BF16,   GLESC_DTYPE_Q4_0,
        GLESC_DTYPE_Q4_1, GLESC_DTYPE_Q5_0,   GLESC_DTYPE_Q5_1,   GLESC_DTYPE_Q8_0,
        GLESC_DTYPE_Q2_K, GLESC_DTYPE_Q3_K,   GLESC_DTYPE_Q4_K,   GLESC_DTYPE_Q5_K,
        GLESC_DTYPE_Q6_K, GLESC_DTYPE_IQ4_NL, GLESC_DTYPE_IQ4_XS, GLESC_DTYPE_MXFP4,
    };
    static const char *const paths[] = {"map", "staging", "subdata"};
    /* 64 KiB storage blocks: token_embd and the feed-forward matrices are
     * split into row chunks */
    glesc_context_options co = {.cache_dir = "off", .max_storage_block_size = 1 << 16};
    cr_assert_eq(glesc_context_create(&co, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        char name[64];
        snprintf(name, sizeof name, "t-%s.gguf", glesc_dtype_name(types[i]));
        char *path = write_model(name, types[i], tweak_k_shape);
        if (i == 0)
            norms_in_other_types(path);
        const char *up = paths[i % 3];
        setenv("GLESC_UPLOAD", up, 1);
        glesc_model *m;
        cr_assert_eq(glesc_model_load(ctx, path, NULL, &m), GLESC_OK, "%s", glesc_last_errmsg());
        char how[96];
        snprintf(how, sizeof how, "%s weights, upload path %s", glesc_dtype_name(types[i]), up);
        expect_exact(m, path, how);
        glesc_model_destroy(m);
        unlink(path);
        free(path);
    }
    unsetenv("GLESC_UPLOAD");
}

/* ---- A model the upload's workers load ---- */

/* 32000 tokens of f32 embeddings: 8 MiB, so the weights are written by the
 * worker threads. */
static void tweak_big_vocab(synth_params *p)
{
    p->n_vocab = 32000;
    p->weight_type = GLESC_DTYPE_F32;
}

static bool cut_file(void *user, uint64_t done, uint64_t total)
{
    progress_log *l = user;
    (void)total;
    if (l->calls++ == 0) {
        cr_assert_eq(done, 0, "the first call comes before any byte is read");
        const char *path = (const char *)(uintptr_t)l->last_done;
        struct stat sb;
        cr_assert_eq(stat(path, &sb), 0);
        cr_assert_eq(truncate(path, sb.st_size / 2), 0);
    }
    return false;
}

Test(load, a_large_model_reports_progress_and_survives_a_cut_file)
{
    ctx = test_context(NULL);
    char *path = write_model("big.gguf", GLESC_DTYPE_F32, tweak_big_vocab);
    for (int p = 0; p < 3; p++) {
        static const char *const paths[] = {"map", "staging", "subdata"};
        setenv("GLESC_UPLOAD", paths[p], 1);
        glesc_model_options mo;
        glesc_model_options_init(&mo);
        progress_log l = {0, 0, 0, 0, true};
        bool first_zero = true;
        mo.progress = on_progress;
        mo.progress_user = &l;
        glesc_model *m;
        cr_assert_eq(glesc_model_load(ctx, path, &mo, &m), GLESC_OK, "%s", glesc_last_errmsg());
        glesc_model_info mi;
        glesc_model_get_info(m, &mi);
        cr_expect_eq(l.calls, mi.n_tensors + 1, "%s", paths[p]);
        cr_expect(l.monotonic && first_zero, "%s", paths[p]);
        cr_expect_eq(l.last_done, l.total, "%s: the last call reports everything", paths[p]);
        expect_exact(m, path, paths[p]);
        glesc_model_destroy(m);
    }
    unsetenv("GLESC_UPLOAD");
    /* the file cut in half before its weights are read: an error naming it,
     * nothing left on the GPU */
    glesc_stats before, after;
    glesc_context_stats(ctx, &before);
    glesc_model_options mo;
    glesc_model_options_init(&mo);
    progress_log l = {0, 0, (uint64_t)(uintptr_t)path, 0, true};
    mo.progress = cut_file;
    mo.progress_user = &l;
    glesc_model *m = (glesc_model *)1;
    cr_assert_eq(glesc_model_load(ctx, path, &mo, &m), GLESC_ERROR_IO, "%s", glesc_last_errmsg());
    cr_expect_null(m);
    cr_expect(strstr(glesc_last_errmsg(), path) && strstr(glesc_last_errmsg(), "truncated"), "%s",
              glesc_last_errmsg());
    cr_expect_eq(l.calls, 1, "no progress after the failure");
    glesc_context_stats(ctx, &after);
    cr_expect_eq(after.pool_live_bytes, before.pool_live_bytes);
    unlink(path);
    free(path);
}

/* ---- The memory accounts ---- */

Test(load, memory_accounts_are_the_tensors_bytes)
{
    ctx = test_context(NULL);
    char *path = write_model("mem.gguf", GLESC_DTYPE_Q4_K, tweak_k_shape);
    glesc_memory_stats m0, m1, m2, m3;
    glesc_context_memory(ctx, &m0);
    glesc_model *m;
    cr_assert_eq(glesc_model_load(ctx, path, NULL, &m), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_context_memory(ctx, &m1);
    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    /* the weights: every tensor's own GPU bytes, nothing else */
    int n;
    glesc_tensor **ts = model_tensors(m, &n);
    uint64_t sum = 0, sum_predicted = 0;
    for (int k = 0; k < n; k++) {
        if (!ts[k])
            continue;
        for (int c = 0; c < ts[k]->st.n_chunks; c++)
            sum += ts[k]->st.chunks[c]->size;
        sum_predicted += glesc_weight_gpu_bytes(ctx, ts[k]->dtype, ts[k]->ndim, ts[k]->ne);
    }
    free(ts);
    cr_expect_gt(mi.gpu_bytes, 0);
    cr_expect_eq(m1.persistent_bytes - m0.persistent_bytes, mi.gpu_bytes);
    cr_expect_eq(sum, mi.gpu_bytes, "buffers %llu, model %llu", (unsigned long long)sum,
                 (unsigned long long)mi.gpu_bytes);
    cr_expect_eq(sum_predicted, mi.gpu_bytes);
    cr_expect_eq(m1.activation_bytes, m0.activation_bytes, "the load holds no activations");
    /* a session adds its cache; a step its activations, given back after */
    glesc_session *s;
    cr_assert_eq(glesc_session_create(m, &(glesc_session_options){.n_ctx = 64}, &s), GLESC_OK);
    glesc_context_memory(ctx, &m2);
    cr_expect_eq(m2.persistent_bytes - m1.persistent_bytes, glesc_session_kv_bytes(s));
    glesc_context_memory_reset_peak(ctx);
    int32_t ids[16];
    for (int i = 0; i < 16; i++)
        ids[i] = 5 + i;
    cr_assert_eq(glesc_session_eval(s, ids, 16, 0, NULL), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_context_memory(ctx, &m3);
    cr_expect_gt(m3.max_activation_requested_bytes, 0);
    /* persistent: the session's input pair (token ids and positions of
     * the batch, session.c) is all an eval adds */
    uint64_t inputs = 2 * glesc_weight_gpu_bytes(ctx, GLESC_DTYPE_I32, 1, (int64_t[]){16});
    if (compute_background_compiles(ctx)) /* and the other pair, for the decode step's
                                             compiles started after it (session.c) */
        cr_expect_gt(m3.peak_persistent_bytes, m2.persistent_bytes + inputs);
    else
        cr_expect_eq(m3.peak_persistent_bytes, m2.persistent_bytes + inputs);
    cr_expect_eq(m3.peak_total_bytes,
                 m3.peak_persistent_bytes + m3.peak_activation_bytes + m3.peak_cached_bytes);
    cr_expect_geq(m3.peak_total_bytes,
                  m3.peak_persistent_bytes + m3.max_activation_requested_bytes);
    cr_expect_eq(m3.total_bytes, m3.persistent_bytes + m3.activation_bytes + m3.cached_bytes);
    cr_expect_leq(m3.activation_requested_bytes, m3.activation_bytes);
    cr_log_info("weights %llu, KV %llu, activations at most %llu, peak %llu",
                (unsigned long long)mi.gpu_bytes, (unsigned long long)glesc_session_kv_bytes(s),
                (unsigned long long)m3.max_activation_requested_bytes,
                (unsigned long long)m3.peak_total_bytes);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    glesc_context_memory(ctx, &m3);
    cr_expect_eq(m3.persistent_bytes, m0.persistent_bytes, "model and cache freed");
    unlink(path);
    free(path);
}
