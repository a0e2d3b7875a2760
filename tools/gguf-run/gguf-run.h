/*
 * gguf-run.h — what the files of gguf-run share. gguf-run runs a GGUF
 * language model on the GPU through the public API only: the prompt is
 * evaluated in one batch, then tokens are sampled one at a time and streamed
 * to stdout. Flags follow llama.cpp's llama-cli where it has them.
 *
 * The files, by job: options.c (usage, flags, prompt escapes and id lists),
 * main.c (the modes: --tokenize, the demo model, one prompt or a chat; the
 * context, model, session and sampler), generate.c (evaluating the prompt,
 * and the callbacks through which glesc_generate and glesc_chat_send stream
 * the text), chat.c (the multi-turn conversation on stdin over glesc_chat),
 * output.c (the --json object and the summary line), sampling.c (the
 * sampler's chain and grammar from the flags), prompt_cache.c
 * (--prompt-cache: the session's state saved after the prompt and loaded
 * by the next run whose prompt starts the same). Sampling, the
 * streaming detokenizer, end-of-generation handling and the chat's cache
 * reuse are the library's (glesc_llm.h).
 *
 * Output: the text on stdout (or one JSON object with --json), every write
 * checked (a failed one ends the run: "writing output: REASON", exit 1);
 * progress (only on a terminal), warnings and the one-line summary of a
 * successful run on stderr. Exit status 0 on success, 1 when the model, the
 * GPU or the output fails, 2 for bad usage.
 *
 * Inputs are bounded: a prompt file (-f) to PROMPT_FILE_MAX bytes, a chat
 * message on stdin to CHAT_MESSAGE_MAX, so an endless source fails with the
 * limit named instead of growing until the process is killed.
 */
#ifndef GLESC_TOOLS_GGUF_RUN_H
#define GLESC_TOOLS_GGUF_RUN_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>

#include "glesc.h"
#include "glesc_llm.h"

#define PROMPT_FILE_MAX ((size_t)16 << 20)
#define CHAT_MESSAGE_MAX ((size_t)1 << 20)

typedef struct options {
    const char *model, *prompt, *prompt_file, *prompt_ids, *system, *chat_template;
    const char *logits_out, *platform, *device, *cache_dir, *limits;
    const char *prompt_cache; /* --prompt-cache FILE */
    int escape, no_bos, parse_special, no_display_prompt, tokenize, ignore_eos, chat, json,
        precompile, prompt_cache_ro;
    int verbose;
    long n_predict, n_ctx;
    glesc_dtype kv_type;
    glesc_sampler_params sp;
    int seed_given;
    float typical;          /* --typical (1: off) */
    glesc_logit_bias *bias; /* --logit-bias, malloc'ed */
    size_t n_bias;
    const char *grammar, *grammar_file, *json_schema, *json_schema_file;
    char *grammar_text; /* the GBNF to constrain sampling with (malloc'ed), or NULL */
} options;

/* A growable byte or id buffer (aborting on out-of-memory would hide the
 * text produced so far, so failures are reported by the caller). */
typedef struct buf {
    char *data;
    size_t len, cap;
    int oom;
} buf;

/* The state of one run: what main.c set up and what generation gathered. */
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
    /* The stdout decoder of a run that echoes its prompt (continuing from
     * it), or NULL: stdout then gets the library's pieces. */
    glesc_decoder *out_dec;
    /* When set and non-zero, the token callback stops the reply after the
     * token it was given (a chat's SIGINT handler's flag, see main.c). */
    const volatile sig_atomic_t *stop_flag;
    int failed;        /* a callback failed (message printed): stop, exit 1 */
    int reply_phase;   /* 0 before the first token of a reply, 1 during it, 2 after it */
    bool hold_verbose; /* stdout and stderr are one terminal: -v lines wait */
    buf verbose;       /* per-token -v lines held until the stream ends */
    buf generated;     /* int32 ids */
    buf text;          /* generated text (for --json) */
    double prompt_ms, decode_ms, load_ms;
    size_t prompt_tokens, decode_tokens; /* evaluated */
    size_t cached_tokens;                /* the prompt's, from --prompt-cache */
    double cache_ms;                     /* loading them (in prompt_ms too) */
    int dispatches_per_token;
    const char *stop;        /* why generation ended */
    const char *prompt_text; /* -p / -f text (the first chat message) */
    size_t prompt_len;
} run;

/* ---- options.c ---- */
/* Parses argv into *o (sampling defaults, -1 for -n, a clock seed unless
 * --seed). Returns -1 to go on, or the exit status (0 after --help, 2 for
 * bad usage, its message printed). */
int options_parse(int argc, char **argv, options *o);
/* llama.cpp's process_escapes, in place; returns the new length. */
size_t process_escapes(char *s, size_t n);
/* "1,403, 407" → ids (malloc'ed); NULL (message printed) on a bad list. */
int32_t *parse_ids(const char *s, size_t *n_out);

/* ---- sampling.c ---- */
/* --logit-bias TOKEN(+|-)BIAS appended to o->bias; 0, or 2 after a message. */
int sampling_parse_bias(options *o, const char *v);
/* The grammar options into o->grammar_text (schemas converted, grammars
 * checked); -1 to go on, 2 after a message. */
int sampling_prepare(options *o);
/* r->smp from the options (the chain and the grammar); 0, or the exit
 * status after a message. */
int sampling_create(run *r);

/* ---- generate.c ---- */
void buf_add(buf *b, const void *p, size_t n);
double ms_since(const struct timespec *t0);
/* Evaluates ids (the last row into r->logits). 0, or -1 (message printed). */
int eval_prompt(run *r, const int32_t *ids, size_t n);
/* Generation parameters from the options, with the callbacks that stream
 * the text to stdout and gather ids, rows and statistics into r. */
void gen_params(run *r, glesc_generate_params *p);
/* Adds a generate or chat call's counts and times to r's. */
void add_result(run *r, const glesc_generate_result *res);
/* One prompt, one continuation: the exit status. */
int run_once(run *r, const int32_t *ids, size_t n);

/* ---- prompt_cache.c ---- */
/* Loads --prompt-cache's file, if there is one, and keeps the positions
 * whose tokens start ids[0..n) (at least the last token is evaluated
 * again unless the state holds its logits row): the count of ids whose
 * positions the session now holds, accepted into the sampler. A state
 * that does not load is a warning, and the whole prompt is evaluated. */
size_t prompt_cache_load(run *r, const int32_t *ids, size_t n);
/* Saves the session's state with ids[0..n) to --prompt-cache's file
 * (unless --prompt-cache-ro). 0, or -1 (message printed). */
int prompt_cache_save(run *r, const int32_t *ids, size_t n);
/* A chat's system message through --prompt-cache's file: reused when the
 * file holds its tokens, else evaluated and saved (glesc_chat_prefill).
 * 0, or 1 (message printed). */
int prompt_cache_chat(run *r, glesc_chat *chat);

/* ---- chat.c ---- */
/* Multi-turn chat on stdin: the exit status. */
int chat_loop(run *r);

/* ---- main.c: Ctrl-C in a chat ---- */
/* Whether Ctrl-C now stops the reply being generated (true; *r->stop_flag
 * is then set) or ends gguf-run (false: at the prompt, or a second Ctrl-C
 * before the reply stopped). Leaving a reply clears the flag. */
void chat_sigint_reply(bool in_reply);

/* ---- output.c ---- */
/* stdout, every write checked: false once any write failed (the reason is
 * kept for out_finish; nothing more is written). */
bool out_write(const void *p, size_t n);
/* The context's compile callback on a terminal (stderr): "compiling kernels
 * 7/17" while a cold run compiles, erased when done; never over a line of
 * generated text on the same terminal. */
void out_compile_progress(void *user, int done, int total, const char *kernel);
bool out_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool out_flush(void);
/* Flushes and closes stdout: rc, or 1 after "gguf-run: writing output:
 * REASON" on stderr when a write failed. */
int out_finish(int rc);
/* A -v line of the stream (per token): printed at once, or held in
 * r->verbose until verbose_flush when stdout and stderr are one terminal,
 * so it does not break the streamed text. */
void verbose_line(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void verbose_flush(run *r);
void summary(const run *r);
/* The --json object, written whole: false when writing failed. */
bool print_json(const run *r, const int32_t *prompt_ids, size_t n_prompt);

#endif
