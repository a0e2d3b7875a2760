/*
 * test_load.c — the ways a model is loaded (glesc_llm.h): from a path, an
 * open glesc_gguf, memory (freed right after the load) and a descriptor
 * range (with an offset, up to the end, through pread where a mapping is
 * refused) all give the same model; bad ranges fail with a message; a
 * progress callback cancels a load with GLESC_ERROR_CANCELLED and nothing
 * stays allocated (the GPU pool's live bytes return to where they were; the
 * ASan build checks the heap); and glesc_model_estimate predicts what a load
 * and a session take: the weights' and the KV cache's GPU bytes exactly,
 * the activations and the host heap as upper bounds.
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
#include "llm/runtime.h"
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
    synth_params_default(&p);
    p.n_embd = 64;
    p.n_layer = 2;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_ff = 128;
    p.n_ctx = 256;
    p.weight_type = t;
    if (tweak)
        tweak(&p);
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(path, "%s/%s", dir, name);
    cr_assert_eq(synth_write(&p, path), GLESC_OK, "%s", synth_errmsg());
    return path;
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
    cr_expect_eq(l.calls, mi.n_tensors, "one call per tensor");
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
    glesc_session_options so = {.n_ctx = c->n_ctx, .n_batch = c->n_batch, .kv_type = c->kv_type};

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
    glesc_session_options so = {.kv_type = GLESC_DTYPE_Q8_0};
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
