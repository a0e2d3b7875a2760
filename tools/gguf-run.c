/*
 * gguf-run.c — runs a GGUF language model on the GPU through glesc: the
 * prompt is evaluated in one batch, then tokens are sampled one at a time
 * and streamed to stdout. Flags follow llama.cpp's llama-cli where it has
 * them. --tokenize needs no GPU (it works on vocab-only files). Without -m,
 * a built-in demo writes a small random-weight llama model, loads it through
 * the same path and reports throughput.
 *
 * Output: the text on stdout (or one JSON object with --json); progress
 * (only on a terminal), warnings and the one-line summary on stderr. Exit
 * status 0 on success, 1 when the model or the GPU fails, 2 for bad usage.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "glesc.h"
#include "glesc_gguf.h"
#include "glesc_llm.h"
#include "common/synth.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: gguf-run [-m FILE] [options]\n"
                 "\n"
                 "Runs a GGUF language model (llama, qwen2, qwen3 architectures; f32, f16, bf16\n"
                 "or quantized weights) on the GPU through OpenGL ES compute. Without -m: a\n"
                 "demo on a random-weight model written on the fly.\n"
                 "\n"
                 "Model and prompt:\n"
                 "  -m, --model FILE       GGUF model\n"
                 "  -p, --prompt TEXT      the prompt, verbatim\n"
                 "  -f, --file FILE        read the prompt from FILE, byte for byte\n"
                 "  -e, --escape           process \\n \\t \\r \\\\ \\\" \\' \\xNN in the prompt\n"
                 "  --prompt-ids LIST      the prompt as token ids, e.g. 1,403,407 (no BOS added)\n"
                 "  --no-bos               do not add BOS/EOS where the vocabulary asks for them\n"
                 "  --parse-special        turn control tokens written in the prompt into ids\n"
                 "  --no-display-prompt    do not echo the prompt before the generated text\n"
                 "  --tokenize             print the prompt's token ids and exit (no GPU needed)\n"
                 "\n"
                 "Generation:\n"
                 "  -n, --n-predict N      tokens to generate (-1: until EOS or the context is\n"
                 "                         full, the default; 0: only evaluate the prompt)\n"
                 "  -c, --ctx-size N       context length (0: the model's, at most 4096)\n"
                 "  --temp T               temperature (0.8; 0 = greedy)\n"
                 "  --top-k N              top-k (40; 0 = off)\n"
                 "  --top-p P              top-p (0.95; 1 = off)\n"
                 "  --min-p P              min-p (0.05; 0 = off)\n"
                 "  --repeat-penalty F     repetition penalty (1.0 = off)\n"
                 "  --repeat-last-n N      tokens the penalty looks back at (64)\n"
                 "  -s, --seed N           random seed (default: from the clock)\n"
                 "  --ignore-eos           keep generating after an end-of-generation token\n"
                 "  --kv-type f32|f16      KV cache type (f32)\n"
                 "\n"
                 "Chat:\n"
                 "  -i, --interactive, --chat\n"
                 "                         multi-turn chat on stdin with the model's template\n"
                 "                         (-p/-f: the first message; -n: tokens per reply)\n"
                 "  --system TEXT          system message for the chat\n"
                 "  --chat-template NAME   llama.cpp's names: chatml, llama2, llama2-sys, llama3,\n"
                 "                         mistral-v1, mistral-v3, mistral-v7, gemma, phi3,\n"
                 "                         zephyr, vicuna, deepseek2, ... (default: detected from\n"
                 "                         the model's tokenizer.chat_template, else chatml)\n"
                 "\n"
                 "Output:\n"
                 "  --json                 one JSON object on stdout: prompt_ids, generated_ids\n"
                 "                         (with the end-of-generation id that stopped it),\n"
                 "                         text (the continuation), stop, timings\n"
                 "  --logits-out FILE      raw little-endian float32 logits, n_vocab per row:\n"
                 "                         every prompt position, then each generated token's\n"
                 "                         row (the one it was sampled from)\n"
                 "  -v, --verbose          model, device and per-step details on stderr\n"
                 "\n"
                 "GPU:\n"
                 "  --platform NAME        auto, gbm, device, surfaceless (or GLESC_PLATFORM)\n"
                 "  --device DEV           render node path or EGL device index (or GLESC_DEVICE)\n"
                 "  --cache-dir DIR        program binary cache (\"off\" disables)\n"
                 "  -h, --help             this text\n");
}

typedef struct options {
    const char *model, *prompt, *prompt_file, *prompt_ids, *system, *chat_template;
    const char *logits_out, *platform, *device, *cache_dir;
    int escape, no_bos, parse_special, no_display_prompt, tokenize, ignore_eos, chat, json;
    int verbose;
    long n_predict, n_ctx;
    glesc_dtype kv_type;
    glesc_sampler_params sp;
    int seed_given;
} options;

/* ---- small helpers ---- */

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) {
            fclose(f);
            return NULL;
        }
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb)
            free(buf);
        buf = nb;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* llama.cpp's process_escapes, in place: \n \r \t \' \" \\ \xNN; any other
 * escape stays as written. Returns the new length. */
static size_t process_escapes(char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            s[o++] = s[i];
            continue;
        }
        char c = s[++i];
        switch (c) {
        case 'n':
            s[o++] = '\n';
            break;
        case 'r':
            s[o++] = '\r';
            break;
        case 't':
            s[o++] = '\t';
            break;
        case '\'':
            s[o++] = '\'';
            break;
        case '"':
            s[o++] = '"';
            break;
        case '\\':
            s[o++] = '\\';
            break;
        case 'x': {
            const char *hexd = "0123456789abcdefABCDEF";
            if (i + 2 < n && s[i + 1] && s[i + 2] && strchr(hexd, s[i + 1]) &&
                strchr(hexd, s[i + 2])) {
                char hex[3] = {s[i + 1], s[i + 2], 0};
                s[o++] = (char)strtol(hex, NULL, 16);
                i += 2;
            } else { /* not a valid \xNN: kept as written */
                s[o++] = '\\';
                s[o++] = c;
            }
            break;
        }
        default:
            s[o++] = '\\';
            s[o++] = c;
        }
    }
    return o;
}

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "gguf-run: %s: '%s' is not an integer in %ld..%ld\n", flag, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_float(const char *flag, const char *v, float *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x)) {
        fprintf(stderr, "gguf-run: %s: '%s' is not a number\n", flag, v);
        return -1;
    }
    *out = (float)x;
    return 0;
}

/* "1,403, 407" → ids; NULL (message printed) on a bad list. */
static int32_t *parse_ids(const char *s, size_t *n_out)
{
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    const char *p = s;
    while (ids) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "gguf-run: --prompt-ids: bad id at '%s'\n", p);
            free(ids);
            return NULL;
        }
        if (n == cap) {
            int32_t *ni = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!ni)
                free(ids);
            ids = ni;
            if (!ids)
                break;
        }
        ids[n++] = (int32_t)v;
        p = end;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == ',')
            p++;
        else if (*p) {
            fprintf(stderr, "gguf-run: --prompt-ids: expected ',' at '%s'\n", p);
            free(ids);
            return NULL;
        }
    }
    if (ids && n == 0) {
        fprintf(stderr, "gguf-run: --prompt-ids: no ids\n");
        free(ids);
        return NULL;
    }
    *n_out = n;
    return ids;
}

static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Appends s[0..n) to a JSON string: quotes, backslashes and control
 * characters escaped, invalid UTF-8 replaced by U+FFFD, so the output is
 * always valid JSON in UTF-8. */
static void json_string(FILE *o, const char *s, size_t n)
{
    fputc('"', o);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            fprintf(o, "\\%c", c);
            i++;
        } else if (c == '\n') {
            fputs("\\n", o);
            i++;
        } else if (c == '\r') {
            fputs("\\r", o);
            i++;
        } else if (c == '\t') {
            fputs("\\t", o);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(o, "\\u%04x", c);
            i++;
        } else if (c < 0x80) {
            fputc(c, o);
            i++;
        } else {
            /* a well-formed UTF-8 sequence (no overlongs, surrogates or
             * values past U+10FFFF) passes through */
            size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
            bool ok = len > 0 && c <= 0xf4 && i + len <= n;
            uint32_t cp = ok ? c & (0x7f >> len) : 0;
            for (size_t k = 1; ok && k < len; k++) {
                unsigned char cc = (unsigned char)s[i + k];
                ok = (cc & 0xc0) == 0x80;
                cp = cp << 6 | (cc & 0x3f);
            }
            ok = ok && !(len == 3 && cp < 0x800) &&
                 !(len == 4 && (cp < 0x10000 || cp > 0x10ffff)) && !(cp >= 0xd800 && cp <= 0xdfff);
            if (ok) {
                fwrite(s + i, 1, len, o);
                i += len;
            } else {
                fputs("\\ufffd", o);
                i++;
            }
        }
    }
    fputc('"', o);
}

static void json_ids(FILE *o, const int32_t *ids, size_t n)
{
    fputc('[', o);
    for (size_t i = 0; i < n; i++)
        fprintf(o, "%s%d", i ? ", " : "", ids[i]);
    fputc(']', o);
}

/* A growable byte or id buffer (aborting on out-of-memory would hide the
 * text produced so far, so failures are reported by the caller). */
typedef struct buf {
    char *data;
    size_t len, cap;
    int oom;
} buf;

static void buf_add(buf *b, const void *p, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        char *nd = realloc(b->data, cap);
        if (!nd) {
            b->oom = 1;
            return;
        }
        b->data = nd;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

/* ---- the run ---- */

typedef struct run {
    const options *o;
    glesc_context *ctx;
    glesc_model *model;
    glesc_session *sess;
    glesc_sampler *smp;
    const glesc_tokenizer *tok;
    int32_t n_vocab_tok;   /* sampler's vocabulary (the tokenizer's) */
    int64_t n_vocab_model; /* logits row length */
    float *logits;         /* one row */
    FILE *logits_out;
    buf generated; /* int32 ids */
    buf text;      /* generated text (for --json) */
    double prompt_ms, decode_ms, load_ms;
    size_t prompt_tokens, decode_tokens; /* evaluated */
    int dispatches_per_token;
    const char *stop;        /* why generation ended */
    const char *prompt_text; /* -p / -f text (the first chat message) */
    size_t prompt_len;
} run;

static void progress(void *user, uint64_t done, uint64_t total)
{
    (void)user;
    fprintf(stderr, "\rgguf-run: loading %3d%%", total ? (int)(done * 100 / total) : 100);
    if (done >= total)
        fprintf(stderr, "\r%*s\r", 24, "");
}

static int write_rows(run *r, const float *rows, size_t n_rows)
{
    if (!r->logits_out)
        return 0;
    if (fwrite(rows, sizeof(float), n_rows * (size_t)r->n_vocab_model, r->logits_out) !=
        n_rows * (size_t)r->n_vocab_model) {
        fprintf(stderr, "gguf-run: --logits-out: write failed: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

/* Feeds id to the text decoder (the continuation, for --json's text) and to
 * the output decoder (stdout; NULL: stdout gets the text decoder's bytes). */
static void emit(run *r, glesc_decoder *out_dec, glesc_decoder *text_dec, int32_t id, bool flush)
{
    const char *piece;
    size_t len;
    glesc_status st = flush ? glesc_decoder_flush(text_dec, &piece, &len)
                            : glesc_decoder_feed(text_dec, id, &piece, &len);
    if (st == GLESC_OK && len) {
        buf_add(&r->text, piece, len);
        if (!out_dec && !r->o->json)
            fwrite(piece, 1, len, stdout);
    }
    if (out_dec) {
        st = flush ? glesc_decoder_flush(out_dec, &piece, &len)
                   : glesc_decoder_feed(out_dec, id, &piece, &len);
        if (st == GLESC_OK && len && !r->o->json)
            fwrite(piece, 1, len, stdout);
    }
    if (!r->o->json)
        fflush(stdout);
}

/* Evaluates ids and leaves the last row in r->logits; with --logits-out
 * writes every row. */
static int eval_prompt(run *r, const int32_t *ids, size_t n)
{
    int32_t free_pos = glesc_session_n_ctx(r->sess) - glesc_session_n_past(r->sess);
    if (n > (size_t)free_pos) {
        fprintf(stderr,
                "gguf-run: the prompt has %zu tokens but the context has room for %d more "
                "(of %d): use a larger -c or a shorter prompt\n",
                n, (int)free_pos, (int)glesc_session_n_ctx(r->sess));
        return -1;
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    float *all = NULL;
    if (r->logits_out) {
        all = malloc(n * (size_t)r->n_vocab_model * sizeof *all);
        if (!all) {
            fprintf(stderr, "gguf-run: out of memory for %zu rows of logits\n", n);
            return -1;
        }
    }
    glesc_status st =
        glesc_session_eval(r->sess, ids, n, all ? GLESC_EVAL_ALL_LOGITS : 0, all ? all : r->logits);
    if (st != GLESC_OK) {
        fprintf(stderr, "gguf-run: evaluating the prompt: %s\n", glesc_last_errmsg());
        free(all);
        return -1;
    }
    r->prompt_ms += ms_since(&t0);
    r->prompt_tokens += n;
    int rc = 0;
    if (all) {
        memcpy(r->logits, all + (n - 1) * (size_t)r->n_vocab_model,
               (size_t)r->n_vocab_model * sizeof *all);
        rc = write_rows(r, all, n);
        free(all);
    }
    if (r->o->verbose) {
        glesc_eval_stats es;
        glesc_session_last_stats(r->sess, &es);
        fprintf(stderr, "gguf-run: prompt: %zu tokens, %d kernels, %d dispatches per batch\n", n,
                es.kernels, es.dispatches);
    }
    for (size_t i = 0; i < n; i++)
        glesc_sampler_accept(r->smp, ids[i]);
    return rc;
}

/* Samples up to n_predict tokens (< 0: until EOG or a full context) from
 * r->logits on, streaming them (see emit). Returns 0, or -1 on failure.
 * Every sampled token but an end-of-generation one is evaluated, so the
 * session holds it and r->logits has the next row; the n_predict-th one
 * only with eval_last (a chat continues after it). */
static int generate(run *r, glesc_decoder *out_dec, glesc_decoder *text_dec, long n_predict,
                    bool eval_last)
{
    const options *o = r->o;
    r->stop = "length";
    for (long i = 0; n_predict < 0 || i < n_predict; i++) {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int32_t id = glesc_sampler_sample(r->smp, r->logits);
        glesc_sampler_accept(r->smp, id);
        if (write_rows(r, r->logits, 1))
            return -1;
        buf_add(&r->generated, &id, sizeof id);
        if (r->generated.oom) {
            fprintf(stderr, "gguf-run: out of memory\n");
            return -1;
        }
        bool eog = glesc_tokenizer_is_eog(r->tok, id);
        if (eog && !o->ignore_eos) {
            r->stop = "eos";
            r->decode_ms += ms_since(&t0);
            break;
        }
        emit(r, out_dec, text_dec, id, false);
        bool last = n_predict >= 0 && i + 1 == n_predict;
        if (last && !eval_last) { /* nothing will be sampled from its row */
            r->decode_ms += ms_since(&t0);
            break;
        }
        if (glesc_session_n_past(r->sess) >= glesc_session_n_ctx(r->sess)) {
            r->stop = "context";
            if (!o->json)
                fprintf(stderr, "\ngguf-run: the context (%d tokens) is full\n",
                        (int)glesc_session_n_ctx(r->sess));
            r->decode_ms += ms_since(&t0);
            break;
        }
        glesc_status st = glesc_session_eval(r->sess, &id, 1, 0, r->logits);
        if (st != GLESC_OK) {
            fprintf(stderr, "\ngguf-run: decoding: %s\n", glesc_last_errmsg());
            return -1;
        }
        r->decode_ms += ms_since(&t0);
        r->decode_tokens++;
        glesc_eval_stats es;
        glesc_session_last_stats(r->sess, &es);
        r->dispatches_per_token = es.dispatches;
        if (o->verbose > 1)
            fprintf(stderr, "[%d: %s plan, %d dispatches, %.2f ms]", (int)id,
                    es.plan_reused ? "reused" : "new", es.dispatches, (double)es.ns / 1e6);
        if (last)
            break;
    }
    emit(r, out_dec, text_dec, 0, true);
    return 0;
}

static void summary(const run *r)
{
    fprintf(stderr,
            "gguf-run: load %.0f ms | prompt %zu tok, %.1f tok/s | decode %zu tok, %.1f tok/s | "
            "%d dispatches/token | %s\n",
            r->load_ms, r->prompt_tokens,
            r->prompt_ms > 0 ? (double)r->prompt_tokens * 1e3 / r->prompt_ms : 0.0,
            r->decode_tokens,
            r->decode_ms > 0 ? (double)r->decode_tokens * 1e3 / r->decode_ms : 0.0,
            r->dispatches_per_token, glesc_context_caps(r->ctx)->renderer);
}

static void print_json(const run *r, const int32_t *prompt_ids, size_t n_prompt)
{
    FILE *o = stdout;
    fputs("{\"prompt_ids\": ", o);
    json_ids(o, prompt_ids, n_prompt);
    fputs(", \"generated_ids\": ", o);
    json_ids(o, (const int32_t *)(const void *)r->generated.data,
             r->generated.len / sizeof(int32_t));
    fputs(", \"text\": ", o);
    json_string(o, r->text.data ? r->text.data : "", r->text.len);
    fprintf(o, ", \"stop\": \"%s\"", r->stop ? r->stop : "none");
    fprintf(o,
            ", \"timings\": {\"load_ms\": %.3f, \"prompt_tokens\": %zu, \"prompt_ms\": %.3f, "
            "\"prompt_tok_per_s\": %.3f, \"decode_tokens\": %zu, \"decode_ms\": %.3f, "
            "\"decode_tok_per_s\": %.3f, \"dispatches_per_token\": %d}}\n",
            r->load_ms, r->prompt_tokens, r->prompt_ms,
            r->prompt_ms > 0 ? (double)r->prompt_tokens * 1e3 / r->prompt_ms : 0.0,
            r->decode_tokens, r->decode_ms,
            r->decode_ms > 0 ? (double)r->decode_tokens * 1e3 / r->decode_ms : 0.0,
            r->dispatches_per_token);
}

static int chat_loop(run *r);

/* Writes the demo model (llm/synth.h) to a new file in $TMPDIR. */
static int demo_model_path(char *path, size_t cap)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    int n = snprintf(path, cap, "%s/glesc-demo-XXXXXX", dir);
    int fd = n > 0 && (size_t)n < cap ? mkstemp(path) : -1;
    if (fd < 0) {
        fprintf(stderr, "gguf-run: demo: cannot create a file in %s: %s\n", dir, strerror(errno));
        path[0] = 0;
        return -1;
    }
    close(fd);
    synth_params p;
    synth_params_default(&p);
    if (synth_write(&p, path) != GLESC_OK) {
        fprintf(stderr, "gguf-run: demo: writing %s: %s\n", path, glesc_last_errmsg());
        unlink(path);
        path[0] = 0;
        return -1;
    }
    return 0;
}

/* Creates the context and loads the model (with progress on a terminal). */
static int open_model(run *r, const char *path)
{
    const options *o = r->o;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    glesc_context_options co = {0};
    if (o->platform) {
        static const struct {
            const char *name;
            glesc_platform p;
        } plats[] = {{"auto", GLESC_PLATFORM_AUTO},
                     {"gbm", GLESC_PLATFORM_GBM},
                     {"device", GLESC_PLATFORM_DEVICE},
                     {"surfaceless", GLESC_PLATFORM_SURFACELESS}};
        size_t k = 0;
        while (k < sizeof plats / sizeof plats[0] && strcmp(plats[k].name, o->platform))
            k++;
        if (k == sizeof plats / sizeof plats[0]) {
            fprintf(stderr, "gguf-run: --platform: '%s' is not auto, gbm, device, surfaceless\n",
                    o->platform);
            return 2;
        }
        co.platform = plats[k].p;
    }
    co.device = o->device;
    co.cache_dir = o->cache_dir;
    if (glesc_context_create(&co, &r->ctx) != GLESC_OK) {
        fprintf(stderr, "gguf-run: no GPU context: %s\n", glesc_last_errmsg());
        return 1;
    }
    glesc_model_options mo = {0};
    if (isatty(2) && !o->json)
        mo.progress = progress;
    if (glesc_model_load(r->ctx, path, &mo, &r->model) != GLESC_OK) {
        if (mo.progress)
            fprintf(stderr, "\n");
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        return 1;
    }
    r->tok = glesc_model_tokenizer(r->model);
    glesc_model_info mi;
    glesc_model_get_info(r->model, &mi);
    r->n_vocab_model = mi.n_vocab;
    r->n_vocab_tok = glesc_tokenizer_n_vocab(r->tok);
    glesc_session_options so = {.n_ctx = (int32_t)o->n_ctx, .kv_type = o->kv_type};
    if (glesc_session_create(r->model, &so, &r->sess) != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        return 1;
    }
    glesc_sampler_params sp = o->sp;
    if (glesc_sampler_create(&sp, r->n_vocab_tok, &r->smp) != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        return 2;
    }
    r->logits = malloc((size_t)r->n_vocab_model * sizeof *r->logits);
    if (!r->logits) {
        fprintf(stderr, "gguf-run: out of memory\n");
        return 1;
    }
    r->load_ms = ms_since(&t0);
    if (o->verbose) {
        const glesc_caps *c = glesc_context_caps(r->ctx);
        fprintf(stderr,
                "gguf-run: %s (%s): %s, %lld layers, n_embd %lld, heads %lld/%lld, vocab %lld, "
                "%s weights, %.1f MiB; context %d, KV %s\n"
                "gguf-run: GPU: %s (%s, %s platform); seed %llu\n",
                mi.name, path, mi.arch, (long long)mi.n_layer, (long long)mi.n_embd,
                (long long)mi.n_head, (long long)mi.n_head_kv, (long long)mi.n_vocab,
                glesc_dtype_name(mi.weight_type), (double)mi.weight_bytes / 1048576.0,
                (int)glesc_session_n_ctx(r->sess), glesc_dtype_name(o->kv_type), c->renderer,
                c->version, glesc_platform_name(c->platform), (unsigned long long)sp.seed);
    }
    return 0;
}

static void close_run(run *r)
{
    glesc_sampler_destroy(r->smp);
    glesc_session_destroy(r->sess);
    glesc_model_destroy(r->model);
    glesc_context_destroy(r->ctx);
    free(r->logits);
    free(r->generated.data);
    free(r->text.data);
    if (r->logits_out)
        fclose(r->logits_out);
}

/* One prompt, one continuation. */
static int run_once(run *r, const int32_t *ids, size_t n)
{
    const options *o = r->o;
    glesc_decoder *out_dec = NULL, *text_dec = NULL;
    bool echo = !o->json && !o->no_display_prompt;
    /* The echo and the continuation on stdout go through one decoder, so
     * the space between them comes out as the model sees it; the text of
     * --json is the continuation alone, with its leading space. */
    if ((echo && glesc_decoder_create(r->tok, 0, &out_dec) != GLESC_OK) ||
        glesc_decoder_create(r->tok, GLESC_DETOKENIZE_KEEP_LEADING_SPACE, &text_dec) != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        glesc_decoder_destroy(out_dec);
        return 1;
    }
    for (size_t i = 0; echo && i < n; i++) {
        const char *piece;
        size_t len;
        if (glesc_decoder_feed(out_dec, ids[i], &piece, &len) == GLESC_OK && len)
            fwrite(piece, 1, len, stdout);
    }
    if (echo)
        fflush(stdout);
    int rc = eval_prompt(r, ids, n) ? 1 : 0;
    if (!rc && o->n_predict != 0)
        rc = generate(r, out_dec, text_dec, o->n_predict, false) ? 1 : 0;
    glesc_decoder_destroy(out_dec);
    glesc_decoder_destroy(text_dec);
    if (!o->json) {
        printf("\n");
        fflush(stdout);
    }
    if (o->json && !rc)
        print_json(r, ids, n);
    summary(r);
    return rc;
}

/* ---- chat ---- */

typedef struct chat {
    glesc_chat_message *msgs; /* roles are static strings; contents malloc'ed */
    size_t n, cap;
} chat;

static int chat_push(chat *c, const char *role, const char *content, size_t len)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        glesc_chat_message *m = realloc(c->msgs, cap * sizeof *m);
        if (!m)
            return -1;
        c->msgs = m;
        c->cap = cap;
    }
    char *s = malloc(len + 1);
    if (!s)
        return -1;
    memcpy(s, content, len);
    s[len] = 0;
    c->msgs[c->n].role = role;
    c->msgs[c->n].content = s;
    c->n++;
    return 0;
}

/* Keeps the first keep messages. */
static void chat_truncate(chat *c, size_t keep)
{
    while (c->n > keep)
        free((char *)c->msgs[--c->n].content);
}

/* One line from stdin ("\" at the end continues it on the next line);
 * NULL at the end of input. */
static char *read_message(size_t *len)
{
    buf b = {0};
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    bool tty = isatty(0);
    if (tty) {
        fputs("\n> ", stdout);
        fflush(stdout);
    }
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        if (n > 0 && line[n - 1] == '\n')
            n--;
        if (n > 0 && line[n - 1] == '\\') {
            buf_add(&b, line, (size_t)n - 1);
            buf_add(&b, "\n", 1);
            continue;
        }
        buf_add(&b, line, (size_t)n);
        break;
    }
    free(line);
    if ((n < 0 && b.len == 0) || b.oom) {
        free(b.data);
        return NULL;
    }
    buf_add(&b, "", 1);
    if (b.oom) {
        free(b.data);
        return NULL;
    }
    *len = b.len - 1;
    return b.data;
}

/* Tokenizes text (special tokens parsed; BOS when the session is empty) and
 * evaluates it. 1 when it does not fit the free context, -1 on failure. */
static int chat_eval_text(run *r, const char *text, size_t len)
{
    unsigned flags = GLESC_TOKENIZE_PARSE_SPECIAL;
    if (glesc_session_n_past(r->sess) == 0 && !r->o->no_bos)
        flags |= GLESC_TOKENIZE_ADD_SPECIAL;
    int32_t *ids = NULL;
    size_t n = 0;
    if (glesc_tokenize_alloc(r->tok, text, len, flags, &ids, &n) != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        return -1;
    }
    int rc = 0;
    if (n > (size_t)(glesc_session_n_ctx(r->sess) - glesc_session_n_past(r->sess)))
        rc = 1;
    else if (n > 0)
        rc = eval_prompt(r, ids, n);
    glesc_tokens_free(ids);
    return rc;
}

/* The template's text of the conversation c (with the assistant's start). */
static char *chat_text(glesc_chat_template t, const chat *c, bool add_ass)
{
    char *s = NULL;
    if (glesc_chat_format(t, c->msgs, c->n, add_ass, &s) != GLESC_OK)
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
    return s;
}

/* Multi-turn chat on stdin. The KV cache keeps the conversation: each turn
 * evaluates only the text the template adds (the user's message and the
 * assistant's start), then the reply is generated; after it the template's
 * end-of-turn text is evaluated, so the cache holds exactly the text the
 * next turn's formatting starts with. When the context is full, the
 * conversation starts over (the system message kept). */
static int chat_loop(run *r)
{
    const options *o = r->o;
    glesc_model_info mi;
    glesc_model_get_info(r->model, &mi);
    glesc_chat_template t;
    if (o->chat_template) {
        t = glesc_chat_template_detect(o->chat_template);
        if (t == GLESC_CHAT_NONE) {
            fprintf(stderr, "gguf-run: --chat-template: '%s' is not a known template; one of:",
                    o->chat_template);
            for (int i = 1; i < GLESC_CHAT_COUNT_; i++)
                fprintf(stderr, " %s", glesc_chat_template_name((glesc_chat_template)i));
            fprintf(stderr, "\n");
            return 2;
        }
    } else {
        t = glesc_chat_template_detect(mi.chat_template);
        if (t == GLESC_CHAT_NONE) {
            fprintf(stderr, "gguf-run: %s; using chatml (choose one with --chat-template)\n",
                    mi.chat_template ? "the model's chat template is not one glesc recognizes"
                                     : "the model has no chat template");
            t = GLESC_CHAT_CHATML;
        }
    }
    if (isatty(0))
        fprintf(stderr,
                "gguf-run: chat (%s template). Enter a message; end a line with \\ to continue "
                "it; /reset starts over; Ctrl-D ends.\n",
                glesc_chat_template_name(t));
    else if (o->verbose)
        fprintf(stderr, "gguf-run: chat template %s\n", glesc_chat_template_name(t));

    chat c = {0};
    glesc_decoder *dec = NULL;
    char *before = NULL, *after = NULL, *msg = NULL;
    size_t evaluated = 0; /* bytes of the conversation's text in the cache */
    size_t keep = 0;      /* messages kept when starting over */
    int rc = 0;
    if (glesc_decoder_create(r->tok, GLESC_DETOKENIZE_KEEP_LEADING_SPACE, &dec) != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        return 1;
    }
    if (o->system) {
        if (chat_push(&c, "system", o->system, strlen(o->system))) {
            rc = 1;
            goto done;
        }
        keep = 1;
    }
    bool pending = r->prompt_text != NULL; /* -p: the first message */
    for (;;) {
        size_t len = 0;
        if (pending) {
            msg = malloc(r->prompt_len + 1);
            if (msg) {
                memcpy(msg, r->prompt_text, r->prompt_len);
                msg[r->prompt_len] = 0;
                len = r->prompt_len;
                if (!o->json)
                    printf("> %s\n", msg);
            }
            pending = false;
        } else {
            msg = read_message(&len);
        }
        if (!msg)
            break;
        if (!strcmp(msg, "/reset")) {
            chat_truncate(&c, keep);
            glesc_session_truncate(r->sess, 0);
            glesc_sampler_reset(r->smp);
            evaluated = 0;
            fprintf(stderr, "gguf-run: the conversation starts over\n");
            free(msg);
            msg = NULL;
            continue;
        }
        if (len == 0) {
            free(msg);
            msg = NULL;
            continue;
        }
        if (chat_push(&c, "user", msg, len)) {
            rc = 1;
            goto done;
        }
        free(msg);
        msg = NULL;
        for (int attempt = 0;; attempt++) {
            free(before);
            if (!(before = chat_text(t, &c, true))) {
                rc = 1;
                goto done;
            }
            int e = chat_eval_text(r, before + evaluated, strlen(before) - evaluated);
            if (e < 0) {
                rc = 1;
                goto done;
            }
            if (e == 0)
                break;
            if (attempt > 0 || glesc_session_n_past(r->sess) == 0) {
                fprintf(stderr, "gguf-run: the message does not fit the context (%d tokens)\n",
                        (int)glesc_session_n_ctx(r->sess));
                chat_truncate(&c, c.n - 1);
                goto next;
            }
            /* the context is full: start over with the system message */
            fprintf(stderr,
                    "gguf-run: the context (%d tokens) is full: the conversation starts "
                    "over\n",
                    (int)glesc_session_n_ctx(r->sess));
            glesc_chat_message last = c.msgs[c.n - 1];
            c.n--; /* keep the user's message */
            chat_truncate(&c, keep);
            c.msgs[c.n++] = last;
            glesc_session_truncate(r->sess, 0);
            evaluated = 0;
        }
        glesc_decoder_reset(dec);
        r->text.len = 0;
        size_t gen_before = r->generated.len;
        if (generate(r, NULL, dec, o->n_predict, true)) {
            rc = 1;
            goto done;
        }
        if (!o->json)
            printf("\n");
        fflush(stdout);
        if (chat_push(&c, "assistant", r->text.data ? r->text.data : "", r->text.len)) {
            rc = 1;
            goto done;
        }
        /* Evaluate what the template puts after the reply (its end of turn),
         * found by the reply's text; where the template rewrote the reply
         * (trimmed it), the sampled end-of-generation token stands in for
         * it, as in llama.cpp. */
        free(after);
        if (!(after = chat_text(t, &c, false))) {
            rc = 1;
            goto done;
        }
        size_t lb = strlen(before), la = strlen(after);
        const char *reply = c.msgs[c.n - 1].content;
        size_t lr = strlen(reply);
        const char *tail = NULL;
        if (la >= lb && !memcmp(after, before, lb)) {
            const char *rest = after + lb;
            size_t skip = 0;
            while (skip < lr && strchr(" \t\n\r", reply[skip]))
                skip++;
            if (la - lb >= lr && !memcmp(rest, reply, lr))
                tail = rest + lr;
            else if (la - lb >= lr - skip && !memcmp(rest, reply + skip, lr - skip))
                tail = rest + lr - skip;
        }
        int e = 0;
        if (tail) {
            e = chat_eval_text(r, tail, strlen(tail));
        } else if (r->generated.len > gen_before) {
            int32_t last_id;
            memcpy(&last_id, r->generated.data + r->generated.len - sizeof last_id, sizeof last_id);
            if (glesc_tokenizer_is_eog(r->tok, last_id))
                e = glesc_session_n_past(r->sess) < glesc_session_n_ctx(r->sess)
                        ? eval_prompt(r, &last_id, 1)
                        : 1;
        }
        if (e < 0) {
            rc = 1;
            goto done;
        }
        if (e > 0) { /* no room for the end of the turn: start over next time */
            chat_truncate(&c, keep);
            glesc_session_truncate(r->sess, 0);
            evaluated = 0;
            fprintf(stderr,
                    "gguf-run: the context (%d tokens) is full: the conversation starts "
                    "over\n",
                    (int)glesc_session_n_ctx(r->sess));
            continue;
        }
        evaluated = la;
    next:;
    }
done:
    free(msg);
    free(before);
    free(after);
    chat_truncate(&c, 0);
    free(c.msgs);
    glesc_decoder_destroy(dec);
    summary(r);
    return rc;
}

int main(int argc, char **argv)
{
    options o = {0};
    o.n_predict = -1;
    glesc_sampler_params_default(&o.sp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
#define NEEDS_VALUE()                                                                              \
    do {                                                                                           \
        if (!v)                                                                                    \
            goto missing;                                                                          \
        i++;                                                                                       \
    } while (0)
#define IS(s) (!strcmp(a, s))
        if (IS("-h") || IS("--help")) {
            usage(stdout);
            return 0;
        } else if (IS("-m") || IS("--model")) {
            NEEDS_VALUE();
            o.model = v;
        } else if (IS("-p") || IS("--prompt")) {
            NEEDS_VALUE();
            o.prompt = v;
        } else if (IS("-f") || IS("--file")) {
            NEEDS_VALUE();
            o.prompt_file = v;
        } else if (IS("--prompt-ids")) {
            NEEDS_VALUE();
            o.prompt_ids = v;
        } else if (IS("-e") || IS("--escape")) {
            o.escape = 1;
        } else if (IS("--tokenize")) {
            o.tokenize = 1;
        } else if (IS("--no-bos")) {
            o.no_bos = 1;
        } else if (IS("--parse-special")) {
            o.parse_special = 1;
        } else if (IS("--no-display-prompt")) {
            o.no_display_prompt = 1;
        } else if (IS("-n") || IS("--n-predict")) {
            NEEDS_VALUE();
            if (parse_long(a, v, -1, INT32_MAX, &o.n_predict))
                return 2;
        } else if (IS("-c") || IS("--ctx-size")) {
            NEEDS_VALUE();
            if (parse_long(a, v, 0, INT32_MAX, &o.n_ctx))
                return 2;
        } else if (IS("--temp")) {
            NEEDS_VALUE();
            if (parse_float(a, v, &o.sp.temperature))
                return 2;
        } else if (IS("--top-k")) {
            NEEDS_VALUE();
            if (parse_long(a, v, 0, INT32_MAX, &x))
                return 2;
            o.sp.top_k = (int32_t)x;
        } else if (IS("--top-p")) {
            NEEDS_VALUE();
            if (parse_float(a, v, &o.sp.top_p))
                return 2;
        } else if (IS("--min-p")) {
            NEEDS_VALUE();
            if (parse_float(a, v, &o.sp.min_p))
                return 2;
        } else if (IS("--repeat-penalty")) {
            NEEDS_VALUE();
            if (parse_float(a, v, &o.sp.repeat_penalty))
                return 2;
        } else if (IS("--repeat-last-n")) {
            NEEDS_VALUE();
            if (parse_long(a, v, 0, 1 << 20, &x))
                return 2;
            o.sp.repeat_last_n = (int32_t)x;
        } else if (IS("-s") || IS("--seed")) {
            NEEDS_VALUE();
            char *end;
            errno = 0;
            unsigned long long sv = strtoull(v, &end, 10);
            if (errno || end == v || *end || *v == '-') {
                fprintf(stderr, "gguf-run: %s: '%s' is not a non-negative integer\n", a, v);
                return 2;
            }
            o.sp.seed = sv;
            o.seed_given = 1;
        } else if (IS("--ignore-eos")) {
            o.ignore_eos = 1;
        } else if (IS("-i") || IS("--interactive") || IS("--chat") || IS("-cnv") ||
                   IS("--conversation")) {
            o.chat = 1;
        } else if (IS("--system") || IS("-sys")) {
            NEEDS_VALUE();
            o.system = v;
        } else if (IS("--chat-template")) {
            NEEDS_VALUE();
            o.chat_template = v;
        } else if (IS("--kv-type") || IS("-ctk")) {
            NEEDS_VALUE();
            if (!strcmp(v, "f32"))
                o.kv_type = GLESC_DTYPE_F32;
            else if (!strcmp(v, "f16"))
                o.kv_type = GLESC_DTYPE_F16;
            else {
                fprintf(stderr, "gguf-run: --kv-type: '%s' is not f32 or f16\n", v);
                return 2;
            }
        } else if (IS("--json")) {
            o.json = 1;
        } else if (IS("--logits-out")) {
            NEEDS_VALUE();
            o.logits_out = v;
        } else if (IS("--platform")) {
            NEEDS_VALUE();
            o.platform = v;
        } else if (IS("--device")) {
            NEEDS_VALUE();
            o.device = v;
        } else if (IS("--cache-dir")) {
            NEEDS_VALUE();
            o.cache_dir = v;
        } else if (IS("-v") || IS("--verbose")) {
            o.verbose++;
        } else {
            fprintf(stderr, "gguf-run: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        continue;
    missing:
        fprintf(stderr, "gguf-run: %s needs a value (see --help)\n", a);
        return 2;
#undef NEEDS_VALUE
#undef IS
    }
    if (!o.seed_given) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        o.sp.seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    if ((o.prompt != NULL) + (o.prompt_file != NULL) + (o.prompt_ids != NULL) > 1) {
        fprintf(stderr, "gguf-run: give at most one of -p, -f and --prompt-ids\n");
        return 2;
    }
    if (o.chat && (o.json || o.logits_out || o.prompt_ids)) {
        fprintf(stderr, "gguf-run: --chat does not combine with --json, --logits-out or "
                        "--prompt-ids\n");
        return 2;
    }

    /* The prompt text (not needed for --prompt-ids or a chat without -p). */
    char *text = NULL;
    size_t len = 0;
    if (o.prompt_file) {
        text = read_file(o.prompt_file, &len);
        if (!text) {
            fprintf(stderr, "gguf-run: cannot read %s: %s\n", o.prompt_file, strerror(errno));
            return 1;
        }
    } else if (o.prompt) {
        len = strlen(o.prompt);
        text = malloc(len + 1);
        if (!text)
            return 1;
        memcpy(text, o.prompt, len + 1);
    }
    if (text && o.escape)
        len = process_escapes(text, len);

    if (o.tokenize) {
        if (!o.model || !text) {
            fprintf(stderr, "gguf-run: --tokenize needs -m FILE and one of -p TEXT and -f FILE\n");
            free(text);
            return 2;
        }
        int rc = 1;
        glesc_gguf *f = NULL;
        glesc_tokenizer *tok = NULL;
        int32_t *ids = NULL;
        size_t n = 0;
        unsigned flags = (o.no_bos ? 0 : GLESC_TOKENIZE_ADD_SPECIAL) |
                         (o.parse_special ? GLESC_TOKENIZE_PARSE_SPECIAL : 0);
        if (glesc_gguf_open(o.model, &f) != GLESC_OK)
            fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        else if (glesc_tokenizer_load(f, &tok) != GLESC_OK)
            fprintf(stderr, "gguf-run: %s: %s\n", o.model, glesc_last_errmsg());
        else if (glesc_tokenize_alloc(tok, text, len, flags, &ids, &n) != GLESC_OK)
            fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        else {
            for (size_t i = 0; i < n; i++)
                printf("%s%d", i ? " " : "", ids[i]);
            printf("\n");
            rc = fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
        }
        glesc_tokens_free(ids);
        glesc_tokenizer_destroy(tok);
        glesc_gguf_close(f);
        free(text);
        return rc;
    }

    run r = {0};
    r.o = &o;
    char demo_path[4096] = "";
    const char *path = o.model;
    int rc;
    if (!path) {
        if ((rc = demo_model_path(demo_path, sizeof demo_path)) != 0) {
            free(text);
            return 1;
        }
        fprintf(stderr,
                "gguf-run: no -m given: demo on a synthetic llama model with RANDOM weights "
                "(real architecture, byte-level vocabulary; its text is gibberish), written to "
                "%s\n",
                demo_path);
        path = demo_path;
        if (!text && !o.prompt_ids && !o.chat) {
            static const char demo_prompt[] = "Once upon a time";
            text = malloc(sizeof demo_prompt);
            if (!text)
                return 1;
            memcpy(text, demo_prompt, sizeof demo_prompt);
            len = sizeof demo_prompt - 1;
        }
        if (o.n_predict < 0)
            o.n_predict = 64;
        if (!o.seed_given)
            o.sp.temperature = 0; /* reproducible demo output */
    }
    if (o.logits_out && !(r.logits_out = fopen(o.logits_out, "wb"))) {
        fprintf(stderr, "gguf-run: --logits-out: cannot create %s: %s\n", o.logits_out,
                strerror(errno));
        free(text);
        return 1;
    }
    rc = open_model(&r, path);
    if (rc)
        goto done;
    if (o.chat) {
        r.prompt_text = text;
        r.prompt_len = len;
        rc = chat_loop(&r);
        goto done;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (o.prompt_ids) {
        if (!(ids = parse_ids(o.prompt_ids, &n))) {
            rc = 2;
            goto done;
        }
    } else {
        unsigned flags = (o.no_bos ? 0 : GLESC_TOKENIZE_ADD_SPECIAL) |
                         (o.parse_special ? GLESC_TOKENIZE_PARSE_SPECIAL : 0);
        int32_t *tids = NULL;
        if (glesc_tokenize_alloc(r.tok, text ? text : "", len, flags, &tids, &n) != GLESC_OK) {
            fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
            rc = 1;
            goto done;
        }
        ids = malloc((n ? n : 1) * sizeof *ids);
        if (ids && n)
            memcpy(ids, tids, n * sizeof *ids);
        glesc_tokens_free(tids);
        if (!ids) {
            rc = 1;
            goto done;
        }
    }
    if (n == 0) {
        fprintf(stderr, "gguf-run: the prompt is empty (and no BOS is added): nothing to "
                        "evaluate; give -p TEXT\n");
        free(ids);
        rc = 2;
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= r.n_vocab_tok) {
            fprintf(stderr, "gguf-run: prompt token %zu: id %d is outside the vocabulary (0..%d)\n",
                    i, (int)ids[i], (int)r.n_vocab_tok - 1);
            free(ids);
            rc = 1;
            goto done;
        }
    rc = run_once(&r, ids, n);
    free(ids);
done:
    if (r.logits_out && fflush(r.logits_out) != 0) {
        fprintf(stderr, "gguf-run: --logits-out: %s\n", strerror(errno));
        rc = rc ? rc : 1;
    }
    close_run(&r);
    free(text);
    if (demo_path[0])
        unlink(demo_path);
    return rc;
}
