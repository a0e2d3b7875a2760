/*
 * glesc-server.h — what the files of glesc-server share. glesc-server is an
 * OpenAI-compatible HTTP server (llama-server's flags where they apply), a
 * client of the public API only.
 *
 * Threads. libmicrohttpd runs one thread per connection: it reads and
 * checks the request (request.c: JSON body -> srv_request, a pure function
 * that the fuzzer calls), formats the chat and tokenizes it (the tokenizer
 * is safe to share), turns response_format into a grammar, and submits a
 * job to the bounded queue. ONE GPU worker
 * thread (worker.c) owns the glesc context, the model and the N slots (one
 * session each, all of one model): it gives queued jobs to idle slots (the
 * slot whose cached tokens share the longest prefix with the job's prompt,
 * so a chat's next turn evaluates only what is new), then runs one step
 * per busy slot in turn (a prompt chunk or one decode step, sampled by the
 * job's own sampler chain; greedy slots' steps queued on the GPU together;
 * slot.c) and
 * appends each slot's new text to its own job, so one request never sees
 * another's tokens. The connection thread waits for its job's text (a
 * stream's chunks, or the whole answer) and checks its socket while it
 * waits: a client that goes away sets the job's cancel flag, which the
 * worker reads before each step and the context's abort callback before
 * each kernel, so the slot stops at once.
 *
 * The files, by job: main.c (start, SIGTERM, stop), options.c (flags),
 * request.c (parsing and checking requests), buf.c (a byte buffer, the
 * clock), http.c (routing, keys,
 * bodies, waiting for jobs), respond.c (OpenAI's JSON objects and
 * server-sent events), worker.c (the GPU thread, queue and scheduling),
 * slot.c (one slot's prompt, sampler chain, stop strings, greedy steps),
 * metrics.c (counters and Prometheus text). loadtest.py is the load test.
 */
#ifndef GLESC_TOOLS_SERVER_H
#define GLESC_TOOLS_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "glesc.h"
#include "glesc_llm.h"

/* ---- request.c: a request body as a checked struct ---- */

typedef enum srv_kind {
    SRV_CHAT = 1,   /* POST /v1/chat/completions */
    SRV_COMPLETION, /* POST /v1/completions */
} srv_kind;

typedef enum srv_format {
    SRV_FORMAT_TEXT = 0,
    SRV_FORMAT_JSON_OBJECT,
    SRV_FORMAT_JSON_SCHEMA,
} srv_format;

#define SRV_MAX_STOP 4 /* OpenAI's limit of stop strings */
#define SRV_MAX_STOP_LEN 256
#define SRV_MAX_BIAS 1024 /* logit_bias entries */

/* What request_parse checks a body against. */
typedef struct srv_limits {
    int max_messages;   /* messages of a chat */
    int32_t max_tokens; /* most max_tokens a request may ask for */
    int32_t n_vocab;    /* logit_bias ids below this; 0: not checked */
} srv_limits;

typedef struct srv_bias {
    int32_t id;
    float bias; /* added to the logit; -100 or less bans the token */
} srv_bias;

/* A checked request. Strings are NUL-terminated, hold no NUL and are owned
 * by the struct (request_free). */
typedef struct srv_request {
    srv_kind kind;
    char *model;        /* as the client named it, or NULL */
    bool stream;        /* server-sent events */
    bool include_usage; /* stream_options.include_usage */
    int32_t max_tokens; /* -1: not given (until end of generation or context) */
    glesc_sampler_params sp;
    bool seed_given;
    char *stop[SRV_MAX_STOP];
    size_t n_stop;
    srv_bias *bias;
    size_t n_bias;
    /* chat */
    glesc_chat_message *msgs; /* role and content strings owned */
    size_t n_msgs;
    /* completion: text, or token ids */
    char *prompt;
    int32_t *prompt_ids;
    size_t n_prompt_ids;
    srv_format format;
    char *schema; /* json_schema's schema as JSON text */
} srv_request;

/* An error to send: HTTP status and OpenAI's error object. */
typedef struct srv_error {
    int status;
    const char *type;  /* "invalid_request_error", ...; static */
    const char *param; /* the field, or NULL; static */
    char message[320];
} srv_error;

void srv_error_set(srv_error *e, int status, const char *type, const char *param, const char *fmt,
                   ...) __attribute__((format(printf, 5, 6)));

/* Parses body[0..len) (any bytes) as a request of kind into *out with lim.
 * 0: *out filled (request_free it); -1: *err filled (status 400 and the
 * field), *out holds nothing. Never reads outside body; never aborts. */
int request_parse(const char *body, size_t len, srv_kind kind, const srv_limits *lim,
                  srv_request *out, srv_error *err);
void request_free(srv_request *r);

/* ---- options.c ---- */

typedef struct srv_options {
    const char *model, *alias, *host, *api_key, *chat_template;
    const char *platform, *device, *cache_dir, *limits;
    long port;
    long n_ctx;        /* -c: all slots together (each gets n_ctx / n_parallel); 0: model's */
    long n_parallel;   /* -np */
    long n_batch;      /* -b */
    long queue;        /* --queue: jobs waiting for a slot */
    long timeout;      /* --timeout: seconds a connection may stay idle */
    long max_conns;    /* --max-connections */
    long max_body;     /* --max-body */
    long max_messages; /* --max-messages */
    long max_tokens;   /* --max-tokens; 0: the slot's context */
    glesc_dtype kv_type, kv_type_v; /* as glesc_session_options' (0: the default) */
    int verbose;
} srv_options;

/* argv into *o. -1: go on; otherwise the exit status (0 after --help, 2
 * for bad usage, message printed). */
int options_parse(int argc, char **argv, srv_options *o);

/* ---- a job: one request's generation, shared by its connection and the
 * worker (reference counted) ---- */

typedef struct srv_buf {
    char *data;
    size_t len, cap;
    bool oom;
} srv_buf;

void buf_add(srv_buf *b, const void *p, size_t n);
void buf_free(srv_buf *b);

typedef struct srv_job {
    srv_request req;
    int32_t *prompt; /* tokens (glesc_tokens_free) */
    size_t n_prompt;
    int32_t max_tokens; /* resolved: at most the slot's free context */
    char *gbnf;         /* response_format's grammar (glesc_text_free), or NULL */
    char id[48];
    long long created;
    uint64_t t_submit_ns;
    atomic_bool cancelled; /* the client went away, or shutdown */
    atomic_int refs;
    /* Under mu; cv is signalled when text arrives or the job ends. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_buf text; /* generated text not yet taken by a stream (all of it otherwise) */
    bool done;
    const char *finish; /* "stop", "length"; NULL on error */
    srv_error err;      /* status != 0: failed */
    size_t n_cached;    /* prompt tokens the slot held already */
    int32_t n_generated;
    uint64_t t_first_ns, t_done_ns;
} srv_job;

srv_job *job_new(void);
void job_unref(srv_job *j);
/* Worker: text for the client (under the job's lock). */
void job_push_text(srv_job *j, const char *s, size_t n);
/* Worker: the end (finish NULL and err set: failed). */
void job_finish(srv_job *j, const char *finish, const srv_error *err);

/* ---- metrics.c ---- */

#define SRV_N_STATUS 9

typedef struct srv_metrics {
    atomic_ullong requests[SRV_N_STATUS]; /* by status code, see metrics.c */
    atomic_ullong prompt_tokens, cached_tokens, generated_tokens, cancelled, rejected_busy;
    atomic_ullong prompt_ns, decode_ns; /* worker time on prompts and decode steps */
    atomic_int queue_depth, slots_busy;
    /* GPU memory, as the worker last read it */
    atomic_ullong gpu_total, gpu_persistent, gpu_activation, gpu_cached, gpu_kv;
} srv_metrics;

/* Counts a response of status. */
void metrics_count(srv_metrics *m, int status);
/* Prometheus text exposition (malloc'ed; NULL on out of memory). */
char *metrics_text(srv_metrics *m, int n_slots, size_t *len);

/* ---- worker.c ---- */

typedef enum srv_state {
    SRV_LOADING = 0,
    SRV_READY,
    SRV_FAILED,
} srv_state;

typedef struct srv_slot srv_slot;

typedef struct srv {
    srv_options opt;
    srv_metrics metrics;
    atomic_int state;
    char load_error[512];
    /* Known once READY (read-only after): */
    const glesc_tokenizer *tok;
    glesc_chat_template chat_template;
    int32_t n_vocab_tok;
    int64_t n_vocab_model;
    int32_t slot_ctx;
    char model_name[256];
    long long created;
    /* The queue and the slots, under mu; cv wakes the worker. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job **queue; /* a ring of q_cap (--queue + slots) */
    int q_head, q_len, q_cap;
    int n_jobs;    /* queued and in slots */
    bool stopping; /* SIGTERM: take no new jobs, finish the running ones */
    bool stop_now; /* a second SIGTERM or the grace time: cancel everything */
    pthread_t thread;
    atomic_bool exited;
    pthread_cond_t ready_cv; /* state left LOADING */
    /* Worker-thread only: */
    glesc_context *ctx;
    glesc_model *model;
    srv_slot *slots;
    int n_slots;
    srv_job *evaluating; /* the job whose eval is running (abort callback) */
} srv;

/* Starts the worker (it loads the model; srv->state says when it is done). 0 or -1. */
int worker_start(srv *s);
/* Hands a job to the queue (a reference is taken). 0; or -1 with *err
 * (503: the queue is full, the model is loading, or the server stops). */
int worker_submit(srv *s, srv_job *j, srv_error *err);
/* Stops taking jobs; with now, cancels the running ones too. */
void worker_stop(srv *s, bool now);
/* Waits for the worker to end (after worker_stop). */
void worker_join(srv *s);

/* ---- slot.c: one slot's work (worker thread only) ---- */

struct srv_slot {
    int index;
    glesc_session *sess;
    int32_t *cache; /* the tokens at the session's positions */
    size_t n_cache;
    float *logits; /* one row, n_vocab_model */
    glesc_sampler *smp;
    glesc_decoder *dec;
    srv_job *job;         /* NULL: idle */
    size_t n_prompt_done; /* prompt tokens in the cache */
    int32_t pending;      /* sampled, not yet evaluated; -1: none */
    bool greedy_queued;   /* a greedy step is queued, its token not read */
    srv_buf gen;          /* the text generated (stop strings are searched in it) */
    size_t sent;          /* bytes of gen handed to the job */
    uint64_t last_used;
};

/* Creates slot i's session and buffers. 0, or -1 (message in s->load_error). */
int slot_init(srv *s, srv_slot *sl, int i);
void slot_free(srv_slot *sl);
/* Tokens of sl's cache that start prompt[0..n). */
size_t slot_prefix(const srv_slot *sl, const int32_t *prompt, size_t n);
/* Gives j to idle slot sl (the worker's reference moves to the slot). */
void slot_assign(srv *s, srv_slot *sl, srv_job *j);
/* One step of sl's job: a prompt chunk, or one token. Ends the job (and
 * frees the slot) when it is done, failed or cancelled. */
void slot_step(srv *s, srv_slot *sl);

/* Whether sl's next step can be a greedy step on the GPU (a greedy job
 * in its decode phase). */
bool slot_greedy_ready(const srv_slot *sl);
/* Queues that step (no wait); ends the job on failure. */
void slot_greedy_submit(srv *s, srv_slot *sl);
/* Reads the queued step's token and hands it on, as slot_step does. */
void slot_greedy_collect(srv *s, srv_slot *sl);

/* ---- respond.c: OpenAI's objects ---- */

/* A whole answer (non-streamed), malloc'ed JSON. */
char *respond_answer(const srv *s, const srv_job *j, size_t *len);
/* Stream chunks: the first (role), a text delta, the end (finish reason,
 * then usage when asked, then [DONE]), or an error event then [DONE].
 * Appended to out as "data: ...\n\n" events. */
void respond_chunk_first(const srv *s, const srv_job *j, srv_buf *out);
void respond_chunk_text(const srv *s, const srv_job *j, const char *t, size_t n, srv_buf *out);
void respond_chunk_end(const srv *s, const srv_job *j, srv_buf *out);
/* OpenAI's error object, malloc'ed JSON. */
char *respond_error(const srv_error *e, size_t *len);
/* GET /v1/models */
char *respond_models(const srv *s, size_t *len);

/* ---- http.c ---- */

/* Starts the HTTP daemon on opt's host and port: 0, or -1 (message printed). */
int http_start(srv *s);
/* Stops accepting connections (the running ones go on). */
void http_quiesce(srv *s);
/* Waits for the connections to end and stops the daemon. */
void http_stop(srv *s);

uint64_t now_ns(void);

#endif
