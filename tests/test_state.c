/*
 * test_state.c — saved session state (src/llm/state.c) on small synthetic
 * models: a state saved after a prompt and loaded into a fresh session (of
 * another context size) continues exactly as the uninterrupted session
 * (the next step's logits compared, worst difference printed), from memory
 * and from a file, for both cache types, with the sampler's random stream
 * and history; a copied session forks a conversation after a shared
 * prefix; and bad states are refused with a message naming the reason
 * (another model, KV type, version, magic, a context too small, truncated
 * at many offsets, flipped bytes anywhere), leaving the session as it was.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/synth.h"
#include "glesc_llm.h"
#include "test_synth_util.h"
#include "test_util.h"

TEST_GPU_TMPDIR_SUITE(state);

enum { N = 12, HEADER = 120 };
#define CORE_ARRAY_LEN_(a) (sizeof(a) / sizeof((a)[0]))

static glesc_model *model(uint64_t seed, const char *name)
{
    synth_params p;
    test_tiny_params(&p, 2, 64);
    p.seed = seed;
    char *path = test_synth_write(&p, dir, name);
    glesc_model *m;
    cr_assert_eq(glesc_model_load(ctx, path, NULL, &m), GLESC_OK, "%s", glesc_last_errmsg());
    free(path);
    return m;
}

static glesc_session *session(glesc_model *m, int n_ctx, glesc_dtype kv)
{
    glesc_session *s;
    cr_assert_eq(glesc_session_create(
                     m, &(glesc_session_options){.n_ctx = n_ctx, .kv_type = TEST_KV(kv)}, &s),
                 GLESC_OK, "%s", glesc_last_errmsg());
    return s;
}

static void ids_of(int32_t *ids, int n, int salt)
{
    for (int i = 0; i < n; i++)
        ids[i] = i == 0 ? 1 : 3 + (i * 37 + salt * 11) % 200;
}

static int64_t n_vocab(const glesc_model *m)
{
    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    return mi.n_vocab;
}

static double max_diff(const float *a, const float *b, int64_t n)
{
    double w = 0;
    for (int64_t i = 0; i < n; i++)
        w = fmax(w, fabs((double)a[i] - b[i]));
    return w;
}

/* The state of a session fed ids[0..N) with logits, in a malloc'ed buffer. */
static uint8_t *saved(glesc_session *s, const glesc_sampler *smp, const int32_t *ids, size_t *size)
{
    *size = glesc_session_state_size(s, smp, N);
    cr_assert_gt(*size, (size_t)HEADER);
    uint8_t *buf = malloc(*size);
    size_t written = 0;
    cr_assert_eq(glesc_session_state_save(s, smp, ids, N, buf, *size, &written), GLESC_OK, "%s",
                 glesc_last_errmsg());
    cr_assert_eq(written, *size);
    return buf;
}

static void round_trip(glesc_dtype kv, bool file)
{
    glesc_model *m = model(3, "a.gguf");
    int64_t V = n_vocab(m);
    int32_t ids[N + 1], got[64];
    ids_of(ids, N + 1, 0);
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
    float *row = malloc((size_t)V * sizeof *row);
    glesc_session *s = session(m, 40, kv);
    cr_assert_eq(glesc_session_eval(s, ids, N, 0, row), GLESC_OK, "%s", glesc_last_errmsg());
    size_t size, n = 0;
    uint8_t *buf = saved(s, NULL, ids, &size);
    char path[4200];
    snprintf(path, sizeof path, "%s/state.bin", dir);
    if (file)
        cr_assert_eq(glesc_session_state_save_file(s, NULL, ids, N, path), GLESC_OK, "%s",
                     glesc_last_errmsg());
    cr_assert_eq(glesc_session_eval(s, &ids[N], 1, 0, a), GLESC_OK, "%s", glesc_last_errmsg());

    /* a fresh session of another context size, with something in it */
    glesc_session *f = session(m, 24, kv);
    cr_assert_eq(glesc_session_eval(f, ids + 3, 5, 0, NULL), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_status st = file ? glesc_session_state_load_file(f, NULL, path, got, 64, &n)
                           : glesc_session_state_load(f, NULL, buf, size, got, 64, &n);
    cr_assert_eq(st, GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(n, (size_t)N);
    cr_assert_eq(memcmp(got, ids, sizeof(int32_t) * N), 0);
    cr_assert_eq(glesc_session_n_past(f), N);
    cr_assert(glesc_session_logits(f), "the logits row was saved with the state");
    cr_assert_eq(memcmp(glesc_session_logits(f), row, (size_t)V * sizeof *row), 0);
    cr_assert_eq(glesc_session_eval(f, &ids[N], 1, 0, b), GLESC_OK, "%s", glesc_last_errmsg());
    double w = max_diff(a, b, V);
    cr_log_info("%s state (%s, %zu bytes): next step's logits, loaded vs uninterrupted: max "
                "|diff| %.3g",
                file ? "file" : "memory", glesc_dtype_name(kv), size, w);
    cr_expect_leq(w, 1e-6, "%.3g", w);
    /* loaded into a session of the saver's context, it saves as the same bytes */
    glesc_session *g = session(m, 40, kv);
    cr_assert_eq(glesc_session_state_load(g, NULL, buf, size, NULL, 0, &n), GLESC_OK, "%s",
                 glesc_last_errmsg());
    size_t size2;
    uint8_t *buf2 = saved(g, NULL, ids, &size2);
    cr_assert_eq(size2, size);
    cr_expect_eq(memcmp(buf, buf2, size), 0, "a loaded state saves as the same bytes");
    free(buf2);
    glesc_session_destroy(g);
    glesc_session_destroy(f);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    free(buf);
    free(a);
    free(b);
    free(row);
}

Test(state, round_trip_memory_f32)
{
    round_trip(GLESC_DTYPE_F32, false);
}

Test(state, round_trip_file_f16)
{
    round_trip(GLESC_DTYPE_F16, true);
}

/* Without a logits row (the last eval read none) the caller evaluates the
 * last token again; the sampler's stream and history come along. */
Test(state, sampler_state_and_no_logits)
{
    glesc_model *m = model(3, "a.gguf");
    int64_t V = n_vocab(m);
    int32_t ids[N];
    ids_of(ids, N, 1);
    glesc_session *s = session(m, 32, GLESC_DTYPE_F32);
    cr_assert_eq(glesc_session_eval(s, ids, N, 0, NULL), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_sampler_params sp;
    glesc_sampler_params_init(&sp);
    sp.seed = 42;
    sp.repeat_penalty = 1.3f;
    sp.repeat_last_n = 8;
    glesc_sampler *a, *b;
    cr_assert_eq(glesc_sampler_create(&sp, (int32_t)V, &a), GLESC_OK);
    sp.seed = 7;
    cr_assert_eq(glesc_sampler_create(&sp, (int32_t)V, &b), GLESC_OK);
    float *l = malloc((size_t)V * sizeof *l);
    for (int64_t i = 0; i < V; i++)
        l[i] = (float)((i * 7919) % 97) / 10.0f;
    for (int i = 0; i < 11; i++) /* stream moved on, history wrapped */
        glesc_sampler_accept(a, glesc_sampler_sample(a, l));
    size_t size;
    uint8_t *buf = saved(s, a, ids, &size);
    cr_assert_eq(size, glesc_session_state_size(s, NULL, N) + 36 + 4 * 8);
    glesc_session *f = session(m, 32, GLESC_DTYPE_F32);
    size_t n;
    cr_assert_eq(glesc_session_state_load(f, b, buf, size, NULL, 0, &n), GLESC_OK, "%s",
                 glesc_last_errmsg());
    cr_assert_eq(n, (size_t)N);
    cr_assert_null(glesc_session_logits(f), "no row was saved");
    for (int i = 0; i < 20; i++) {
        int32_t x = glesc_sampler_sample(a, l), y = glesc_sampler_sample(b, l);
        cr_assert_eq(x, y, "draw %d: %d, restored sampler %d", i, x, y);
        glesc_sampler_accept(a, x);
        glesc_sampler_accept(b, y);
    }
    /* glesc_sampler_copy does the same in memory */
    glesc_sampler_reset(b);
    glesc_sampler_copy(b, a);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(glesc_sampler_sample(a, l), glesc_sampler_sample(b, l));
    /* the last token again gives the row */
    float *x = malloc((size_t)V * sizeof *x), *y = malloc((size_t)V * sizeof *y);
    cr_assert_eq(glesc_session_truncate(s, N - 1), GLESC_OK);
    cr_assert_eq(glesc_session_eval(s, &ids[N - 1], 1, 0, x), GLESC_OK);
    cr_assert_eq(glesc_session_truncate(f, N - 1), GLESC_OK);
    cr_assert_eq(glesc_session_eval(f, &ids[N - 1], 1, 0, y), GLESC_OK);
    cr_expect_leq(max_diff(x, y, V), 1e-6);
    free(x);
    free(y);
    free(l);
    free(buf);
    glesc_sampler_destroy(a);
    glesc_sampler_destroy(b);
    glesc_session_destroy(f);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
}

/* A system prompt evaluated once, copied into two sessions that continue
 * with different messages: each equals a fresh session fed the whole. */
Test(state, copy_forks_after_a_shared_prefix)
{
    glesc_model *m = model(3, "a.gguf");
    int64_t V = n_vocab(m);
    int32_t sys[N], u1[4] = {9, 10, 11, 12}, u2[3] = {40, 41, 42}, all[N + 4];
    ids_of(sys, N, 2);
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
    glesc_session *base = session(m, 32, GLESC_DTYPE_F16);
    cr_assert_eq(glesc_session_eval(base, sys, N, 0, NULL), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_session *f1 = session(m, 32, GLESC_DTYPE_F16), *f2 = session(m, 20, GLESC_DTYPE_F16);
    cr_assert_eq(glesc_session_eval(f2, u1, 4, 0, NULL), GLESC_OK); /* overwritten */
    cr_assert_eq(glesc_session_copy(f1, base), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_copy(f2, base), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_n_past(f2), N);
    const struct {
        glesc_session *s;
        const int32_t *u;
        int n;
    } forks[2] = {{f1, u1, 4}, {f2, u2, 3}};
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(glesc_session_eval(forks[k].s, forks[k].u, (size_t)forks[k].n, 0, a), GLESC_OK,
                     "%s", glesc_last_errmsg());
        memcpy(all, sys, sizeof sys);
        memcpy(all + N, forks[k].u, sizeof(int32_t) * (size_t)forks[k].n);
        glesc_session *fresh = session(m, 32, GLESC_DTYPE_F16);
        cr_assert_eq(glesc_session_eval(fresh, all, (size_t)(N + forks[k].n), 0, b), GLESC_OK);
        double w = max_diff(a, b, V);
        cr_log_info("fork %d: logits vs a fresh session of the whole: max |diff| %.3g", k, w);
        cr_expect_leq(w, 1e-3, "fork %d: %.3g", k, w);
        glesc_session_destroy(fresh);
    }
    /* the base is untouched: it goes on as a fresh session */
    cr_assert_eq(glesc_session_n_past(base), N);
    /* refusals */
    glesc_session *small = session(m, 8, GLESC_DTYPE_F16), *f32 = session(m, 32, GLESC_DTYPE_F32);
    cr_assert_eq(glesc_session_copy(small, base), GLESC_ERROR_LIMIT);
    cr_assert(strstr(glesc_last_errmsg(), "do not fit"), "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_copy(f32, base), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(glesc_last_errmsg(), "f32"), "%s", glesc_last_errmsg());
    glesc_model *other = model(5, "b.gguf");
    glesc_session *o = session(other, 32, GLESC_DTYPE_F16);
    cr_assert_eq(glesc_session_copy(o, base), GLESC_ERROR_INVALID_ARGUMENT);
    glesc_session_destroy(o);
    glesc_model_destroy(other);
    glesc_session_destroy(small);
    glesc_session_destroy(f32);
    glesc_session_destroy(f1);
    glesc_session_destroy(f2);
    glesc_session_destroy(base);
    glesc_model_destroy(m);
    free(a);
    free(b);
}

/* ---- Refusals ---- */

/* Loads (data, size) into s, which holds 5 positions with a logits row:
 * the load must fail with status want and a message containing each of
 * the words, and leave s as it was. */
static void refused(glesc_session *s, const void *data, size_t size, glesc_status want,
                    const char *what, const char *w1, const char *w2)
{
    int32_t got[64];
    size_t n = 99;
    glesc_status st = glesc_session_state_load(s, NULL, data, size, got, 64, &n);
    const char *msg = glesc_last_errmsg();
    cr_assert_eq(st, want, "%s: status %s (%s)", what, glesc_status_name(st), msg);
    cr_assert(strstr(msg, w1), "%s: '%s' lacks '%s'", what, msg, w1);
    cr_assert(!w2 || strstr(msg, w2), "%s: '%s' lacks '%s'", what, msg, w2);
    cr_assert_eq(glesc_session_n_past(s), 5, "%s: the session changed", what);
    cr_assert(glesc_session_logits(s), "%s: the session lost its row", what);
}

/* Sets a header field and the header's checksum again: a well-formed
 * state with one field changed. */
static void rewrite(uint8_t *buf, size_t off, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        buf[off + i] = (uint8_t)(v >> (8 * i));
    uint64_t h = XXH3_64bits(buf, 112);
    for (int i = 0; i < 8; i++)
        buf[112 + i] = (uint8_t)(h >> (8 * i));
}

static void resum_payload(uint8_t *buf, size_t size)
{
    uint64_t h = XXH3_64bits(buf + HEADER, size - HEADER);
    for (int i = 0; i < 8; i++)
        buf[104 + i] = (uint8_t)(h >> (8 * i));
    rewrite(buf, 80, buf[80]); /* the value type as it was: the header summed again */
}

Test(state, bad_states_are_refused_with_the_reason)
{
    glesc_model *m = model(3, "a.gguf");
    int32_t ids[N];
    ids_of(ids, N, 3);
    glesc_sampler *smp;
    cr_assert_eq(glesc_sampler_create(NULL, (int32_t)n_vocab(m), &smp), GLESC_OK);
    glesc_session *s = session(m, 32, GLESC_DTYPE_F32);
    cr_assert_eq(glesc_session_eval(s, ids, N, 0, NULL), GLESC_OK);
    float *row = malloc((size_t)n_vocab(m) * sizeof *row);
    cr_assert_eq(glesc_session_truncate(s, N - 1), GLESC_OK);
    cr_assert_eq(glesc_session_eval(s, &ids[N - 1], 1, 0, row), GLESC_OK);
    size_t size;
    uint8_t *good = saved(s, smp, ids, &size), *buf = malloc(size);

    /* the target: 5 positions and a row */
    glesc_session *t = session(m, 32, GLESC_DTYPE_F32);
    cr_assert_eq(glesc_session_eval(t, ids, 5, 0, row), GLESC_OK);

    /* another model of the same shape (another seed), another KV type */
    glesc_model *other = model(4, "b.gguf");
    glesc_session *o = session(other, 32, GLESC_DTYPE_F32);
    cr_assert_eq(glesc_session_eval(o, ids, 5, 0, row), GLESC_OK);
    refused(o, good, size, GLESC_ERROR_FORMAT, "other model", "another model", "offset 16");
    glesc_session *t16 = session(m, 32, GLESC_DTYPE_F16);
    cr_assert_eq(glesc_session_eval(t16, ids, 5, 0, row), GLESC_OK);
    refused(t16, good, size, GLESC_ERROR_FORMAT, "kv type", "KV cache types f32 for keys",
            "f16 and f16");
    glesc_session *t8 = session(m, 8, GLESC_DTYPE_F32);
    cr_assert_eq(glesc_session_eval(t8, ids, 5, 0, row), GLESC_OK);
    refused(t8, good, size, GLESC_ERROR_FORMAT, "n_ctx", "12 positions", "context of 8");

    /* truncated anywhere; trailing bytes */
    const size_t cuts[] = {0, 1, 7, 8, 60, HEADER - 1, HEADER, HEADER + 1, size / 2, size - 1};
    for (size_t i = 0; i < CORE_ARRAY_LEN_(cuts); i++) {
        char what[64];
        snprintf(what, sizeof what, "cut at %zu", cuts[i]);
        refused(t, good, cuts[i], GLESC_ERROR_FORMAT, what, "state buffer",
                cuts[i] == 0 ? "magic" : "truncated");
    }
    uint8_t *longer = malloc(size + 3);
    memcpy(longer, good, size);
    refused(t, longer, size + 3, GLESC_ERROR_FORMAT, "trailing", "trailing bytes", NULL);
    free(longer);

    /* a flipped bit anywhere: a header field or checksum, the tokens, the
     * logits, the sampler, the cache */
    for (size_t off = 0; off < size; off += off < HEADER ? 1 : 97) {
        memcpy(buf, good, size);
        buf[off] ^= 0x10;
        char what[64];
        snprintf(what, sizeof what, "flipped byte %zu", off);
        refused(t, buf, size, GLESC_ERROR_FORMAT, what, "state buffer",
                off < 8        ? "magic"
                : off < 12     ? "version"
                : off < HEADER ? "header"
                               : "payload");
    }

    /* well-formed headers saying the wrong thing: a field and the header's
     * checksum rewritten */
    memcpy(buf, good, size);
    memcpy(buf, "GGUF", 4);
    refused(t, buf, size, GLESC_ERROR_FORMAT, "magic", "not a glesc session state", NULL);
    static const struct {
        size_t off;
        uint32_t value;
        const char *what, *says;
    } fields[] = {
        {8, 99, "format version", "format version 99"},
        {12, 10203, "glesc version", "glesc 1.2.3"},
        {48, 3, "n_layer", "n_layer 3"},
        {96, 5, "payload size", "offset 96"},
        {84, 2, "flags", "flags 0x2 (offset 84)"},
        {80, 8, "value type", "q8_0 for values (offset 80)"},
    };
    for (size_t i = 0; i < CORE_ARRAY_LEN_(fields); i++) {
        memcpy(buf, good, size);
        rewrite(buf, fields[i].off, fields[i].value);
        refused(t, buf, size, GLESC_ERROR_FORMAT, fields[i].what, fields[i].says, NULL);
    }
    /* a token out of the vocabulary under a valid checksum */
    memcpy(buf, good, size);
    buf[HEADER + 4 * 3 + 3] = 0x7f;
    resum_payload(buf, size);
    refused(t, buf, size, GLESC_ERROR_FORMAT, "token", "token 3 (offset 132)", "vocabulary");

    /* too small a buffer for the tokens: LIMIT, nothing changed */
    int32_t few[4];
    size_t n;
    cr_assert_eq(glesc_session_state_load(t, NULL, good, size, few, 4, &n), GLESC_ERROR_LIMIT);
    cr_assert_eq(glesc_session_n_past(t), 5);

    /* files: missing, a directory, truncated */
    char path[4200];
    snprintf(path, sizeof path, "%s/missing.bin", dir);
    cr_assert_eq(glesc_session_state_load_file(t, NULL, path, NULL, 0, &n), GLESC_ERROR_IO);
    cr_assert(strstr(glesc_last_errmsg(), "missing.bin"), "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_session_state_load_file(t, NULL, dir, NULL, 0, &n), GLESC_ERROR_IO);
    cr_assert(strstr(glesc_last_errmsg(), "not a regular file"), "%s", glesc_last_errmsg());
    snprintf(path, sizeof path, "%s/cut.bin", dir);
    const size_t fcuts[] = {3, HEADER - 1, HEADER + 10, size - 1};
    for (size_t i = 0; i < CORE_ARRAY_LEN_(fcuts); i++) {
        FILE *fp = fopen(path, "wb");
        cr_assert(fp);
        cr_assert_eq(fwrite(good, 1, fcuts[i], fp), fcuts[i]);
        fclose(fp);
        cr_assert_eq(glesc_session_state_load_file(t, NULL, path, NULL, 0, &n), GLESC_ERROR_FORMAT);
        cr_assert(strstr(glesc_last_errmsg(), "cut.bin") &&
                      strstr(glesc_last_errmsg(), "truncated"),
                  "cut at %zu: %s", fcuts[i], glesc_last_errmsg());
        cr_assert_eq(glesc_session_n_past(t), 5);
    }
    /* and tokens that do not match the cache on save */
    cr_assert_eq(glesc_session_state_save(s, NULL, ids, N - 1, buf, size, NULL),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_session_state_save(s, NULL, ids, N, buf, 10, NULL), GLESC_ERROR_LIMIT);

    free(row);
    free(good);
    free(buf);
    glesc_sampler_destroy(smp);
    glesc_session_destroy(o);
    glesc_model_destroy(other);
    glesc_session_destroy(t16);
    glesc_session_destroy(t8);
    glesc_session_destroy(t);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
}

/* A grammar's state travels as the tokens it accepted: a loaded sampler
 * with the same grammar continues where the saved one was (the same
 * draws, only EOS once the grammar is complete); one with another grammar
 * that refuses them leaves the session and sampler as they were. */
Test(state, grammar_state_is_saved_and_replayed)
{
    glesc_model *m = model(3, "g.gguf");
    int64_t V = n_vocab(m);
    const glesc_tokenizer *tok = glesc_model_tokenizer(m);
    int32_t ids[N];
    ids_of(ids, N, 1);
    glesc_session *s = session(m, 32, GLESC_DTYPE_F32);
    cr_assert_eq(glesc_session_eval(s, ids, N, 0, NULL), GLESC_OK, "%s", glesc_last_errmsg());
    const char *gbnf = "root ::= [a-z]{3,6} \"!\"";
    glesc_sampler *a, *b, *other;
    cr_assert_eq(glesc_sampler_create(NULL, (int32_t)V, &a), GLESC_OK);
    cr_assert_eq(glesc_sampler_create(NULL, (int32_t)V, &b), GLESC_OK);
    cr_assert_eq(glesc_sampler_create(NULL, (int32_t)V, &other), GLESC_OK);
    cr_assert_eq(glesc_sampler_add_grammar(a, tok, gbnf, NULL), GLESC_OK, "%s",
                 glesc_last_errmsg());
    cr_assert_eq(glesc_sampler_add_grammar(b, tok, gbnf, NULL), GLESC_OK);
    cr_assert_eq(glesc_sampler_add_grammar(other, tok, "root ::= \"0\"", NULL), GLESC_OK);
    float *l = malloc((size_t)V * sizeof *l);
    for (int64_t i = 0; i < V; i++)
        l[i] = (float)((i * 7919) % 97) / 10.0f;
    for (int i = 0; i < 2; i++) /* two tokens into the grammar */
        glesc_sampler_accept(a, glesc_sampler_sample(a, l));
    size_t size;
    uint8_t *buf = saved(s, a, ids, &size);
    glesc_session *f = session(m, 32, GLESC_DTYPE_F32);
    cr_expect_eq(glesc_session_state_load(f, other, buf, size, NULL, 0, NULL), GLESC_ERROR_STATE);
    cr_expect(strstr(glesc_last_errmsg(), "grammar does not accept"), "%s", glesc_last_errmsg());
    cr_expect_eq(glesc_session_n_past(f), 0, "a refused state changes nothing");
    cr_assert_eq(glesc_session_state_load(f, b, buf, size, NULL, 0, NULL), GLESC_OK, "%s",
                 glesc_last_errmsg());
    int32_t eos = glesc_tokenizer_eos(tok);
    bool ended = false;
    for (int i = 0; i < 12 && !ended; i++) {
        int32_t x = glesc_sampler_sample(a, l), y = glesc_sampler_sample(b, l);
        cr_assert_eq(x, y, "draw %d: %d, restored sampler %d", i, x, y);
        glesc_sampler_accept(a, x);
        glesc_sampler_accept(b, y);
        ended = x == eos;
    }
    cr_expect(ended, "the grammar ends within 12 tokens");
    free(l);
    free(buf);
    glesc_sampler_destroy(a);
    glesc_sampler_destroy(b);
    glesc_sampler_destroy(other);
    glesc_session_destroy(f);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
}
