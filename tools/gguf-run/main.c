/*
 * main.c — gguf-run's modes: --tokenize (no GPU), the demo (a synthetic
 * model written with tools/common/synth.h when no -m is given), one prompt,
 * or a chat; the setup they share: context, model, session, sampler; and
 * Ctrl-C in a chat, which stops the reply (as llama-cli's does) rather than
 * the process.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/args.h"
#include "common/file.h"
#include "common/synth.h"
#include "glesc_gguf.h"
#include "gguf-run/gguf-run.h"

/* ---- Ctrl-C in a chat ----
 * While a reply is generated, SIGINT only sets sigint_stop, which the token
 * callback (generate.c) checks after each token; the chat then goes back to
 * the prompt. At the
 * prompt, or when a second Ctrl-C comes before the reply has stopped, the
 * default action ends the process as Ctrl-C always does. */
static volatile sig_atomic_t sigint_stop, sigint_in_reply;

static void on_sigint(int sig)
{
    if (!sigint_in_reply || sigint_stop) {
        signal(sig, SIG_DFL);
        raise(sig); /* delivered when the handler returns */
        return;
    }
    sigint_stop = 1;
}

void chat_sigint_reply(bool in_reply)
{
    sigint_in_reply = in_reply;
    if (!in_reply)
        sigint_stop = 0;
}

static void chat_sigint_install(run *r)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESTART; /* the GPU's system calls go on undisturbed */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    r->stop_flag = &sigint_stop;
}

static bool progress(void *user, uint64_t done, uint64_t total)
{
    (void)user;
    fprintf(stderr, "\rgguf-run: loading %3d%%", total ? (int)(done * 100 / total) : 100);
    if (done >= total)
        fprintf(stderr, "\r%*s\r", 24, "");
    return false; /* never cancels */
}

/* Writes the demo model (tools/common/synth.h) to a new file in $TMPDIR. */
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
    glesc_status st = synth_write(&p, path);
    if (st != GLESC_OK) {
        fprintf(stderr, "gguf-run: demo: writing %s: %s\n", path, synth_errmsg());
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
    if (o->platform && !tool_parse_platform(o->platform, &co.platform)) {
        fprintf(stderr, "gguf-run: --platform: '%s' is not auto, gbm, device, surfaceless\n",
                o->platform);
        return 2;
    }
    if (o->platform) /* the library takes auto as "not given": --platform auto wins too */
        unsetenv("GLESC_PLATFORM");
    co.device = o->device;
    co.cache_dir = o->cache_dir;
    if (o->limits && glesc_context_options_limits(&co, o->limits) != GLESC_OK) {
        fprintf(stderr, "gguf-run: --limits: %s\n", glesc_last_errmsg());
        return 2;
    }
    if (glesc_context_create(&co, &r->ctx) != GLESC_OK) {
        fprintf(stderr, "gguf-run: no GPU context: %s\n", glesc_last_errmsg());
        return 1;
    }
    glesc_model_options mo;
    glesc_model_options_init(&mo);
    if (isatty(2) && !o->json) {
        mo.progress = progress;
        glesc_context_set_compile_callback(r->ctx, out_compile_progress, NULL);
    }
    struct timespec t_model;
    clock_gettime(CLOCK_MONOTONIC, &t_model);
    if (glesc_model_load(r->ctx, path, &mo, &r->model) != GLESC_OK) {
        if (mo.progress)
            fprintf(stderr, "\n");
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        return 1;
    }
    double model_ms = ms_since(&t_model);
    uint64_t rss = tool_rss_bytes();
    r->tok = glesc_model_tokenizer(r->model);
    glesc_model_info mi;
    glesc_model_get_info(r->model, &mi);
    r->n_vocab_model = mi.n_vocab;
    r->n_vocab_tok = glesc_tokenizer_n_vocab(r->tok);
    glesc_session_options so = {
        .n_ctx = (int32_t)o->n_ctx, .kv_type = o->kv_type, .kv_type_v = o->kv_type_v};
    if (glesc_session_create(r->model, &so, &r->sess) != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        return 1;
    }
    int rc = sampling_create(r);
    if (rc)
        return rc;
    r->logits = malloc((size_t)r->n_vocab_model * sizeof *r->logits);
    if (!r->logits) {
        fprintf(stderr, "gguf-run: out of memory\n");
        return 1;
    }
    r->load_ms = ms_since(&t0);
    if (o->verbose) {
        const glesc_caps *c = glesc_context_caps(r->ctx);
        glesc_dtype kt = GLESC_DTYPE_F16, vt = GLESC_DTYPE_F16;
        glesc_session_kv_types(r->sess, &kt, &vt);
        char kvt[32];
        snprintf(kvt, sizeof kvt, kt == vt ? "%s" : "%s/%s", glesc_dtype_name(kt),
                 glesc_dtype_name(vt));
        fprintf(stderr,
                "gguf-run: %s (%s): %s, %lld layers, n_embd %lld, heads %lld/%lld, vocab %lld, "
                "%s weights, %.1f MiB; context %d, KV %s\n"
                "gguf-run: GPU: %s (%s, %s platform%s); seed %llu\n",
                mi.name, path, mi.arch, (long long)mi.n_layer, (long long)mi.n_embd,
                (long long)mi.n_head, (long long)mi.n_head_kv, (long long)mi.n_vocab,
                glesc_dtype_name(mi.weight_type), (double)mi.weight_bytes / 1048576.0,
                (int)glesc_session_n_ctx(r->sess), kvt, c->renderer, c->version,
                glesc_platform_name(c->platform),
                c->software ? ", software renderer: runs on the CPU" : "",
                (unsigned long long)o->sp.seed);
        glesc_memory_stats ms;
        glesc_context_memory(r->ctx, &ms);
        uint64_t kv = glesc_session_kv_bytes(r->sess);
        fprintf(stderr,
                "gguf-run: weights loaded in %.0f ms (%.2f GB/s of GPU bytes); GPU memory: "
                "weights %.1f MiB, KV cache %.1f MiB; host RSS after the load %.1f MiB\n",
                model_ms, (double)mi.gpu_bytes / (model_ms > 0 ? model_ms : 1) * 1e-6,
                (double)mi.gpu_bytes / 1048576.0, (double)kv / 1048576.0, (double)rss / 1048576.0);
        glesc_context_memory_reset_peak(r->ctx);
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
    free(r->verbose.data);
    if (r->logits_out)
        fclose(r->logits_out);
}

/* --tokenize: the prompt's ids on stdout; no GPU, so vocab-only files work. */
static int tokenize_only(const options *o, const char *text, size_t len)
{
    if (!o->model || !text) {
        fprintf(stderr, "gguf-run: --tokenize needs -m FILE and one of -p TEXT and -f FILE\n");
        return 2;
    }
    int rc = 1;
    glesc_gguf *f = NULL;
    glesc_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    unsigned flags = (o->no_bos ? 0 : GLESC_TOKENIZE_ADD_SPECIAL) |
                     (o->parse_special ? GLESC_TOKENIZE_PARSE_SPECIAL : 0);
    if (glesc_gguf_open(o->model, &f) != GLESC_OK)
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
    else if (glesc_tokenizer_load(f, &tok) != GLESC_OK) {
        /* The file once: the GGUF getters' messages start with it. */
        const char *msg = glesc_last_errmsg();
        bool named = strncmp(msg, o->model, strlen(o->model)) == 0;
        fprintf(stderr, "gguf-run: %s%s%s\n", named ? "" : o->model, named ? "" : ": ", msg);
    } else if (glesc_tokenize_alloc(tok, text, len, flags, &ids, &n) != GLESC_OK)
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
    else {
        rc = 0;
        for (size_t i = 0; i < n && !rc; i++)
            rc = out_printf("%s%d", i ? " " : "", ids[i]) ? 0 : 1;
        rc = rc || !out_printf("\n") ? 1 : 0;
    }
    glesc_tokens_free(ids);
    glesc_tokenizer_destroy(tok);
    glesc_gguf_close(f);
    return rc;
}

/* The prompt text into *text (malloc'd; NULL for --prompt-ids or a chat
 * without -p) and *len, escapes processed with -e; 0, or 1 after a
 * message. */
static int read_prompt(const options *o, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    if (o->prompt_file) {
        *text = tool_read_file(o->prompt_file, PROMPT_FILE_MAX, len);
        if (!*text && errno == EFBIG) {
            fprintf(stderr,
                    "gguf-run: -f %s: the file has more than %zu bytes (16 MiB), the limit for a "
                    "prompt\n",
                    o->prompt_file, PROMPT_FILE_MAX);
            return 1;
        }
        if (!*text) {
            fprintf(stderr, "gguf-run: cannot read %s: %s\n", o->prompt_file, strerror(errno));
            return 1;
        }
    } else if (o->prompt) {
        *len = strlen(o->prompt);
        *text = malloc(*len + 1);
        if (!*text)
            return 1;
        memcpy(*text, o->prompt, *len + 1);
    }
    if (*text && o->escape)
        *len = process_escapes(*text, *len);
    return 0;
}

/* No -m: the demo's synthetic model written to demo_path, its prompt (when
 * none is given) and its defaults (64 tokens, greedy unless seeded); 0, or
 * 1 after a message. */
static int demo_setup(options *o, char *demo_path, size_t size, char **text, size_t *len)
{
    if (demo_model_path(demo_path, size) != 0)
        return 1;
    fprintf(stderr,
            "gguf-run: no -m given: demo on a synthetic llama model with RANDOM weights "
            "(real architecture, byte-level vocabulary; its text is gibberish), written to "
            "%s\n",
            demo_path);
    if (!*text && !o->prompt_ids && !o->chat) {
        static const char demo_prompt[] = "Once upon a time";
        *text = malloc(sizeof demo_prompt);
        if (!*text)
            return 1;
        memcpy(*text, demo_prompt, sizeof demo_prompt);
        *len = sizeof demo_prompt - 1;
    }
    if (o->n_predict < 0)
        o->n_predict = 64;
    if (!o->seed_given)
        o->sp.temperature = 0; /* reproducible demo output */
    return 0;
}

/* --precompile: every program of the session compiled, and what it took;
 * the exit status. */
static int precompile(run *r)
{
    struct timespec t_pc;
    clock_gettime(CLOCK_MONOTONIC, &t_pc);
    glesc_stats before, after;
    glesc_context_stats(r->ctx, &before);
    if (glesc_session_precompile(r->sess) != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        return 1;
    }
    glesc_context_stats(r->ctx, &after);
    fprintf(stderr,
            "gguf-run: precompiled in %.0f ms: %llu programs compiled, %llu from the cache "
            "(%s)\n",
            ms_since(&t_pc),
            (unsigned long long)(after.programs_compiled - before.programs_compiled),
            (unsigned long long)(after.program_disk_hits - before.program_disk_hits),
            glesc_context_cache_dir(r->ctx) ? glesc_context_cache_dir(r->ctx) : "no disk cache");
    return 0;
}

/* The prompt's token ids (--prompt-ids, or the text tokenized) into *ids
 * (malloc'd) and *n, checked against the vocabulary; 0, or the exit status
 * after a message (*ids then NULL). */
static int prompt_tokens(const run *r, const char *text, size_t len, int32_t **ids, size_t *n)
{
    const options *o = r->o;
    *ids = NULL;
    *n = 0;
    if (o->prompt_ids) {
        if (!(*ids = parse_ids(o->prompt_ids, n)))
            return 2;
    } else {
        unsigned flags = (o->no_bos ? 0 : GLESC_TOKENIZE_ADD_SPECIAL) |
                         (o->parse_special ? GLESC_TOKENIZE_PARSE_SPECIAL : 0);
        int32_t *tids = NULL;
        if (glesc_tokenize_alloc(r->tok, text ? text : "", len, flags, &tids, n) != GLESC_OK) {
            fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
            return 1;
        }
        *ids = malloc((*n ? *n : 1) * sizeof **ids);
        if (*ids && *n)
            memcpy(*ids, tids, *n * sizeof **ids);
        glesc_tokens_free(tids);
        if (!*ids)
            return 1;
    }
    if (*n == 0) {
        fprintf(stderr, "gguf-run: the prompt is empty (and no BOS is added): nothing to "
                        "evaluate; give -p TEXT\n");
        free(*ids);
        *ids = NULL;
        return 2;
    }
    for (size_t i = 0; i < *n; i++)
        if ((*ids)[i] >= r->n_vocab_tok) {
            fprintf(stderr, "gguf-run: prompt token %zu: id %d is outside the vocabulary (0..%d)\n",
                    i, (int)(*ids)[i], (int)r->n_vocab_tok - 1);
            free(*ids);
            *ids = NULL;
            return 1;
        }
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    int prc = options_parse(argc, argv, &o);
    if (prc >= 0)
        return prc;

    char *text;
    size_t len;
    if (read_prompt(&o, &text, &len))
        return 1;
    if (o.tokenize) {
        int rc = tokenize_only(&o, text, len);
        free(text);
        return out_finish(rc);
    }

    run r = {0};
    r.o = &o;
    r.hold_verbose = isatty(1) && isatty(2);
    char demo_path[4096] = "";
    const char *path = o.model;
    int rc;
    if (!path) {
        if (demo_setup(&o, demo_path, sizeof demo_path, &text, &len)) {
            free(text);
            return 1;
        }
        path = demo_path;
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
    if (o.precompile) {
        rc = precompile(&r);
        goto done;
    }
    if (o.chat) {
        r.prompt_text = text;
        r.prompt_len = len;
        chat_sigint_install(&r);
        rc = chat_loop(&r);
        goto done;
    }
    int32_t *ids;
    size_t n;
    rc = prompt_tokens(&r, text, len, &ids, &n);
    if (rc)
        goto done;
    rc = run_once(&r, ids, n);
    free(ids);
done:
    if (r.logits_out && fclose(r.logits_out) != 0) {
        fprintf(stderr, "gguf-run: --logits-out: %s\n", strerror(errno));
        rc = rc ? rc : 1;
    }
    r.logits_out = NULL;
    close_run(&r);
    free(text);
    free(o.grammar_text);
    free(o.bias);
    if (demo_path[0])
        unlink(demo_path);
    return out_finish(rc);
}