/*
 * http.c — the HTTP side over libmicrohttpd, one thread per connection
 * (MHD_USE_THREAD_PER_CONNECTION): routing, the API key, bounded bodies,
 * and turning a checked request into a job (the chat template applied and
 * the prompt tokenized here, off the GPU thread: the tokenizer is safe to
 * share). The connection's thread then waits for its job: for a stream,
 * inside MHD's content callback, which hands each piece of new text on as
 * a chunk; otherwise in the request handler until the answer is whole.
 * While it waits it looks at its socket every 50 ms: a client that closed
 * the connection cancels the job (the slot stops before its next kernel).
 * MHD's connection timeout (--timeout) ends idle, slow or half-open
 * clients; the connection limit bounds the threads.
 */
#define _GNU_SOURCE /* POLLRDHUP */
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "glesc-server/glesc-server.h"

#define WAIT_NS 50000000L

typedef enum route {
    ROUTE_NONE = 0,
    ROUTE_HEALTH,
    ROUTE_MODELS,
    ROUTE_METRICS,
    ROUTE_CHAT,
    ROUTE_COMPLETION,
} route;

/* One request on a connection. */
typedef struct conn {
    srv *s;
    route r;
    srv_buf body;
    bool too_large;
    size_t dropped; /* bytes of a body over the limit */
    srv_job *job;   /* a reference, once submitted */
} conn;

/* A streamed answer: MHD's content callback reads from it. */
typedef struct stream {
    srv *s;
    struct MHD_Connection *mc;
    srv_job *job; /* a reference */
    srv_buf out;  /* events formatted, not yet handed to MHD */
    size_t off;
    bool first, ended;
} stream;

static struct MHD_Daemon *daemon_;
static atomic_int requests_open; /* requests between their first call and completion */

/* ---- responses ---- */

static enum MHD_Result send_bytes(conn *c, struct MHD_Connection *mc, int status, char *body,
                                  size_t len, const char *type)
{
    if (!body) {
        static char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                            "\"param\":null,\"code\":500}}\n";
        status = 500;
        struct MHD_Response *r =
            MHD_create_response_from_buffer(sizeof oom - 1, oom, MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(r, "Content-Type", "application/json");
        enum MHD_Result rc = MHD_queue_response(mc, 500, r);
        MHD_destroy_response(r);
        metrics_count(&c->s->metrics, status);
        return rc;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    if (status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result rc = MHD_queue_response(mc, (unsigned)status, r);
    MHD_destroy_response(r);
    metrics_count(&c->s->metrics, status);
    return rc;
}

static enum MHD_Result send_error(conn *c, struct MHD_Connection *mc, const srv_error *e)
{
    size_t len;
    char *body = respond_error(e, &len);
    return send_bytes(c, mc, e->status, body, len, "application/json");
}

static enum MHD_Result fail(conn *c, struct MHD_Connection *mc, int status, const char *type,
                            const char *fmt, const char *arg)
{
    srv_error e;
    srv_error_set(&e, status, type, NULL, fmt, arg);
    return send_error(c, mc, &e);
}

/* ---- waiting for a job, with an eye on the client ---- */

/* Whether the client closed its side (or the connection broke). */
static bool client_gone(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return false;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL))
        return true;
    char ch;
    return (p.revents & POLLIN) && recv(ci->connect_fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Waits (under j->mu) for text (want_text) or the job's end; false when the client
 * went away first (the job is then cancelled). */
static bool job_wait(srv_job *j, struct MHD_Connection *mc, bool want_text)
{
    while (!j->done && !(want_text && j->text.len)) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += WAIT_NS;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&j->cv, &j->mu, &t);
        if (!j->done && !(want_text && j->text.len) && client_gone(mc)) {
            atomic_store(&j->cancelled, true);
            return false;
        }
    }
    return true;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream *st = cls;
    srv_job *j = st->job;
    for (;;) {
        if (st->out.oom)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (st->off < st->out.len) {
            size_t n = st->out.len - st->off < max ? st->out.len - st->off : max;
            memcpy(buf, st->out.data + st->off, n);
            st->off += n;
            if (st->off == st->out.len)
                st->off = st->out.len = 0;
            return (ssize_t)n;
        }
        if (st->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (!st->first) {
            st->first = true;
            respond_chunk_first(st->s, j, &st->out);
            continue;
        }
        pthread_mutex_lock(&j->mu);
        if (!job_wait(j, st->mc, true)) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        srv_buf text = j->text; /* take what is there; the worker starts a new buffer */
        memset(&j->text, 0, sizeof j->text);
        bool done = j->done && !text.len;
        pthread_mutex_unlock(&j->mu);
        if (text.len)
            respond_chunk_text(st->s, j, text.data, text.len, &st->out);
        buf_free(&text);
        if (done) {
            respond_chunk_end(st->s, j, &st->out);
            st->ended = true;
        }
    }
}

static void stream_free(void *cls)
{
    stream *st = cls;
    if (!st->ended) /* the response went away before the end: nobody listens */
        atomic_store(&st->job->cancelled, true);
    job_unref(st->job);
    buf_free(&st->out);
    free(st);
}

static enum MHD_Result start_stream(conn *c, struct MHD_Connection *mc)
{
    stream *st = calloc(1, sizeof *st);
    if (!st)
        return send_bytes(c, mc, 500, NULL, 0, NULL);
    st->s = c->s;
    st->mc = mc;
    st->job = c->job;
    atomic_fetch_add(&c->job->refs, 1);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
    if (!r) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result rc = MHD_queue_response(mc, 200, r);
    MHD_destroy_response(r);
    metrics_count(&c->s->metrics, 200);
    return rc;
}

/* ---- a completion request ---- */

/* The job's prompt tokens from its request. 0, or -1 with *e. */
static int job_tokens(srv *s, srv_job *j, srv_error *e)
{
    const srv_request *r = &j->req;
    if (r->prompt_ids) {
        j->prompt = malloc(r->n_prompt_ids * sizeof *j->prompt);
        if (!j->prompt) {
            srv_error_set(e, 500, "server_error", NULL, "out of memory");
            return -1;
        }
        memcpy(j->prompt, r->prompt_ids, r->n_prompt_ids * sizeof *j->prompt);
        j->n_prompt = r->n_prompt_ids;
        return 0;
    }
    char *text = r->prompt;
    if (r->kind == SRV_CHAT &&
        glesc_chat_format(s->chat_template, r->msgs, r->n_msgs, true, &text) != GLESC_OK) {
        srv_error_set(e, 400, "invalid_request_error", "messages", "%s", glesc_last_errmsg());
        return -1;
    }
    glesc_status st = glesc_tokenize_alloc(
        s->tok, text, strlen(text), GLESC_TOKENIZE_ADD_SPECIAL | GLESC_TOKENIZE_PARSE_SPECIAL,
        &j->prompt, &j->n_prompt);
    if (text != r->prompt)
        glesc_text_free(text);
    if (st != GLESC_OK) {
        srv_error_set(e, 500, "server_error", NULL, "tokenizing: %s", glesc_last_errmsg());
        return -1;
    }
    return 0;
}

/* Checks what only the model can say: the prompt's length, the tokens to
 * generate; turns response_format's schema into a grammar (an unsupported
 * keyword is a 400 naming it). 0, or -1 with *e. */
static int job_check(srv *s, srv_job *j, srv_error *e)
{
    if (j->req.format != SRV_FORMAT_TEXT) { /* JSON through the grammar sampler */
        const char *schema =
            j->req.format == SRV_FORMAT_JSON_SCHEMA ? j->req.schema : "{\"type\":\"object\"}";
        if (glesc_json_schema_to_grammar(schema, strlen(schema), &j->gbnf) != GLESC_OK) {
            srv_error_set(e, 400, "invalid_request_error", "response_format", "response_format: %s",
                          glesc_last_errmsg());
            return -1;
        }
    }
    if (j->n_prompt == 0) {
        srv_error_set(e, 400, "invalid_request_error", "prompt", "the prompt is empty");
        return -1;
    }
    if (j->n_prompt >= (size_t)s->slot_ctx) {
        srv_error_set(e, 400, "invalid_request_error",
                      j->req.kind == SRV_CHAT ? "messages" : "prompt",
                      "the prompt is %zu tokens; a slot holds %d (-c / -np), so at most %d",
                      j->n_prompt, (int)s->slot_ctx, (int)s->slot_ctx - 1);
        return -1;
    }
    int32_t room = s->slot_ctx - (int32_t)j->n_prompt;
    int32_t cap = s->opt.max_tokens ? (int32_t)s->opt.max_tokens : s->slot_ctx;
    j->max_tokens = j->req.max_tokens >= 0 ? j->req.max_tokens : cap;
    if (j->max_tokens > room)
        j->max_tokens = room; /* the context fills first: finish_reason "length" */
    return 0;
}

static enum MHD_Result handle_completion(conn *c, struct MHD_Connection *mc)
{
    srv *s = c->s;
    srv_error e = {0};
    if (atomic_load(&s->state) != SRV_READY)
        return fail(c, mc, 503, "unavailable_error", "%s", "Loading model");
    srv_limits lim = {
        .max_messages = (int)s->opt.max_messages,
        .max_tokens = s->opt.max_tokens ? (int32_t)s->opt.max_tokens : s->slot_ctx,
        .n_vocab = s->n_vocab_tok,
    };
    srv_job *j = job_new();
    if (!j)
        return send_bytes(c, mc, 500, NULL, 0, NULL);
    c->job = j;
    if (request_parse(c->body.data, c->body.len, c->r == ROUTE_CHAT ? SRV_CHAT : SRV_COMPLETION,
                      &lim, &j->req, &e) ||
        job_tokens(s, j, &e) || job_check(s, j, &e))
        return send_error(c, mc, &e);
    static atomic_ullong counter;
    snprintf(j->id, sizeof j->id, "%s-%llx%04llx", c->r == ROUTE_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)time(NULL), (unsigned long long)atomic_fetch_add(&counter, 1));
    j->created = (long long)time(NULL);
    j->t_submit_ns = now_ns();
    if (worker_submit(s, j, &e))
        return send_error(c, mc, &e);
    if (j->req.stream)
        return start_stream(c, mc);
    pthread_mutex_lock(&j->mu);
    bool here = job_wait(j, mc, false);
    pthread_mutex_unlock(&j->mu);
    if (!here)
        return MHD_NO; /* the client is gone: close */
    if (j->err.status)
        return send_error(c, mc, &j->err);
    size_t len;
    char *body = respond_answer(s, j, &len);
    return send_bytes(c, mc, 200, body, len, "application/json");
}

/* ---- routing ---- */

static route route_of(const char *url, const char **method_needed)
{
    static const struct {
        const char *path, *method;
        route r;
    } routes[] = {
        {"/health", "GET", ROUTE_HEALTH},           {"/v1/health", "GET", ROUTE_HEALTH},
        {"/v1/models", "GET", ROUTE_MODELS},        {"/models", "GET", ROUTE_MODELS},
        {"/metrics", "GET", ROUTE_METRICS},         {"/v1/chat/completions", "POST", ROUTE_CHAT},
        {"/chat/completions", "POST", ROUTE_CHAT},  {"/v1/completions", "POST", ROUTE_COMPLETION},
        {"/completions", "POST", ROUTE_COMPLETION},
    };
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (!strcmp(url, routes[i].path)) {
            *method_needed = routes[i].method;
            return routes[i].r;
        }
    return ROUTE_NONE;
}

/* Constant-time comparison of the Authorization header with the key. */
static bool key_ok(const srv *s, struct MHD_Connection *mc)
{
    if (!s->opt.api_key)
        return true;
    const char *h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7))
        return false;
    h += 7;
    size_t n = strlen(s->opt.api_key), m = strlen(h);
    unsigned char d = n != m;
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(s->opt.api_key[i] ^ (i < m ? h[i] : 0));
    return d == 0;
}

static enum MHD_Result handle_get(conn *c, struct MHD_Connection *mc)
{
    srv *s = c->s;
    size_t len = 0;
    char *body;
    int state = atomic_load(&s->state);
    if (c->r == ROUTE_METRICS) {
        body = metrics_text(&s->metrics, (int)s->opt.n_parallel, &len);
        return send_bytes(c, mc, 200, body, len, "text/plain; version=0.0.4");
    }
    if (state == SRV_LOADING)
        return fail(c, mc, 503, "unavailable_error", "%s", "Loading model");
    if (state == SRV_FAILED)
        return fail(c, mc, 500, "server_error", "the model failed to load: %s", s->load_error);
    if (c->r == ROUTE_HEALTH) {
        body = strdup("{\"status\":\"ok\"}\n");
        len = body ? strlen(body) : 0;
    } else {
        body = respond_models(s, &len);
    }
    return send_bytes(c, mc, 200, body, len, "application/json");
}

/* The first call of a request: its headers. Refusals that need no body. */
static enum MHD_Result on_headers(conn *c, struct MHD_Connection *mc, const char *url,
                                  const char *method)
{
    const char *needed = NULL;
    c->r = route_of(url, &needed);
    if (c->r == ROUTE_NONE)
        return fail(c, mc, 404, "not_found_error", "no endpoint %.200s", url);
    if (strcmp(method, needed))
        return fail(c, mc, 405, "invalid_request_error", "this endpoint takes %s", needed);
    if (c->r != ROUTE_HEALTH && !key_ok(c->s, mc))
        return fail(c, mc, 401, "authentication_error", "%s", "Invalid API Key");
    if (c->r == ROUTE_HEALTH || c->r == ROUTE_MODELS || c->r == ROUTE_METRICS)
        return handle_get(c, mc);
    const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > (unsigned long long)c->s->opt.max_body) {
        srv_error e;
        srv_error_set(&e, 413, "invalid_request_error", NULL,
                      "the body is %s bytes; this server takes at most %ld (--max-body)", cl,
                      c->s->opt.max_body);
        return send_error(c, mc, &e);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    conn *c = *con_cls;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c)
            return MHD_NO;
        c->s = cls;
        *con_cls = c;
        atomic_fetch_add(&requests_open, 1);
        return on_headers(c, mc, url, method);
    }
    if (*upload_size) {
        /* A body without Content-Length (chunked) over the limit: MHD takes
         * no answer before the body's end, so the rest is read and dropped
         * (up to 16 times the limit; beyond, the connection is closed). */
        if (c->body.len + *upload_size > (size_t)c->s->opt.max_body)
            c->too_large = true;
        if (c->too_large) {
            c->dropped += *upload_size;
            *upload_size = 0;
            return c->dropped <= 16 * (size_t)c->s->opt.max_body ? MHD_YES : MHD_NO;
        }
        buf_add(&c->body, upload, *upload_size);
        *upload_size = 0;
        return c->body.oom ? MHD_NO : MHD_YES;
    }
    if (c->too_large) {
        srv_error e;
        srv_error_set(&e, 413, "invalid_request_error", NULL,
                      "the body is over %ld bytes, this server's limit (--max-body)",
                      c->s->opt.max_body);
        return send_error(c, mc, &e);
    }
    return handle_completion(c, mc);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)mc;
    conn *c = *con_cls;
    if (!c)
        return;
    if (c->job) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
            atomic_store(&c->job->cancelled, true);
        job_unref(c->job);
    }
    buf_free(&c->body);
    free(c);
    *con_cls = NULL;
    atomic_fetch_sub(&requests_open, 1);
}

int http_start(srv *s)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%ld", s->opt.port);
    int g = getaddrinfo(s->opt.host, port, &hints, &ai);
    if (g) {
        fprintf(stderr, "glesc-server: --host %s: %s\n", s->opt.host, gai_strerror(g));
        return -1;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                     MHD_USE_POLL;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    daemon_ = MHD_start_daemon(
        flags, (uint16_t)s->opt.port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->opt.timeout, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)s->opt.max_conns, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!daemon_) {
        fprintf(stderr,
                "glesc-server: cannot listen on %s port %ld (in use, or not an address "
                "of this machine)\n",
                s->opt.host, s->opt.port);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "glesc-server: listening on http://%s:%u\n", s->opt.host,
            di ? (unsigned)di->port : (unsigned)s->opt.port);
    return 0;
}

void http_quiesce(srv *s)
{
    (void)s;
    MHD_socket fd = MHD_quiesce_daemon(daemon_);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

void http_stop(srv *s)
{
    (void)s;
    /* Let answers already made reach their clients (a stream's last
     * chunks) before MHD closes every connection: up to 5 s. */
    for (int i = 0; i < 100 && atomic_load(&requests_open) > 0; i++)
        nanosleep(&(struct timespec){0, 50000000L}, NULL);
    MHD_stop_daemon(daemon_);
    daemon_ = NULL;
}
