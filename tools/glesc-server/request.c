/*
 * request.c — a request body (any bytes) to a checked srv_request, or a 400
 * naming the field. A pure function of the bytes and the limits, with no
 * model or thread involved, so libFuzzer drives it directly
 * (tests/fuzz/fuzz_server_request.c) and the unit test checks each refusal.
 *
 * JSON is read by json-c in strict mode with UTF-8 validation and a nesting
 * limit; fields OpenAI defines that glesc does not do (n > 1, tools,
 * logprobs) are refused by name rather than ignored, unknown fields are
 * ignored as OpenAI's clients send many.
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glesc-server/glesc-server.h"

#define JSON_DEPTH 64

void srv_error_set(srv_error *e, int status, const char *type, const char *param, const char *fmt,
                   ...)
{
    e->status = status;
    e->type = type;
    e->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

static int bad(srv_error *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bad(srv_error *e, const char *param, const char *fmt, ...)
{
    e->status = 400;
    e->type = "invalid_request_error";
    e->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* A copy of a JSON string's bytes; NULL (error set) for a NUL inside or out
 * of memory. */
static char *dup_string(json_object *v, const char *param, srv_error *e)
{
    int len = json_object_get_string_len(v);
    const char *s = json_object_get_string(v);
    if (len < 0 || !s) {
        bad(e, param, "'%s' is not a string", param);
        return NULL;
    }
    if (memchr(s, 0, (size_t)len)) {
        bad(e, param, "'%s' holds a NUL character", param);
        return NULL;
    }
    char *c = malloc((size_t)len + 1);
    if (!c) {
        srv_error_set(e, 500, "server_error", NULL, "out of memory");
        return NULL;
    }
    memcpy(c, s, (size_t)len);
    c[len] = 0;
    return c;
}

/* A number field into *out within [lo, hi]; absent or null leaves it. */
static int get_number(json_object *o, const char *key, double lo, double hi, float *out,
                      srv_error *e)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !v)
        return 0;
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        return bad(e, key, "'%s' must be a number", key);
    double d = json_object_get_double(v);
    if (!isfinite(d) || d < lo || d > hi)
        return bad(e, key, "'%s' is %g; it must be between %g and %g", key, d, lo, hi);
    *out = (float)d;
    return 0;
}

/* An integer field into *out within [lo, hi]; absent or null: *given false. */
static int get_int(json_object *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   bool *given, srv_error *e)
{
    json_object *v;
    *given = false;
    if (!json_object_object_get_ex(o, key, &v) || !v)
        return 0;
    if (!json_object_is_type(v, json_type_int))
        return bad(e, key, "'%s' must be an integer", key);
    int64_t i = json_object_get_int64(v); /* saturates: beyond int64 is out of range too */
    if (i < lo || i > hi)
        return bad(e, key, "'%s' is out of range %lld..%lld", key, (long long)lo, (long long)hi);
    *out = i;
    *given = true;
    return 0;
}

static int get_bool(json_object *o, const char *key, bool *out, srv_error *e)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !v)
        return 0;
    if (!json_object_is_type(v, json_type_boolean))
        return bad(e, key, "'%s' must be true or false", key);
    *out = json_object_get_boolean(v);
    return 0;
}

/* The content of a message: a string, or an array of {"type":"text",
 * "text":...} parts (joined). */
static char *message_content(json_object *c, srv_error *e)
{
    if (!c || json_object_is_type(c, json_type_null))
        return strdup("");
    if (json_object_is_type(c, json_type_string))
        return dup_string(c, "messages", e);
    if (!json_object_is_type(c, json_type_array)) {
        bad(e, "messages", "a message's 'content' must be a string or an array of text parts");
        return NULL;
    }
    srv_buf b = {0};
    size_t n = json_object_array_length(c);
    for (size_t i = 0; i < n; i++) {
        json_object *part = json_object_array_get_idx(c, i), *t, *text;
        if (!json_object_is_type(part, json_type_object) ||
            !json_object_object_get_ex(part, "type", &t) ||
            !json_object_is_type(t, json_type_string) ||
            strcmp(json_object_get_string(t), "text") != 0 ||
            !json_object_object_get_ex(part, "text", &text) ||
            !json_object_is_type(text, json_type_string)) {
            buf_free(&b);
            bad(e, "messages",
                "content part %zu is not {\"type\": \"text\", \"text\": ...} "
                "(only text is supported)",
                i);
            return NULL;
        }
        const char *s = json_object_get_string(text);
        size_t len = (size_t)json_object_get_string_len(text);
        if (memchr(s, 0, len)) {
            buf_free(&b);
            bad(e, "messages", "content part %zu holds a NUL character", i);
            return NULL;
        }
        buf_add(&b, s, len);
    }
    buf_add(&b, "", 1);
    if (b.oom) {
        buf_free(&b);
        srv_error_set(e, 500, "server_error", NULL, "out of memory");
        return NULL;
    }
    return b.data;
}

static int parse_messages(json_object *root, const srv_limits *lim, srv_request *r, srv_error *e)
{
    json_object *m;
    if (!json_object_object_get_ex(root, "messages", &m) ||
        !json_object_is_type(m, json_type_array))
        return bad(e, "messages", "'messages' must be an array of messages");
    size_t n = json_object_array_length(m);
    if (n == 0)
        return bad(e, "messages", "'messages' is empty");
    if (n > (size_t)lim->max_messages)
        return bad(e, "messages", "%zu messages; this server takes at most %d (--max-messages)", n,
                   lim->max_messages);
    r->msgs = calloc(n, sizeof *r->msgs);
    if (!r->msgs) {
        srv_error_set(e, 500, "server_error", NULL, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_object *msg = json_object_array_get_idx(m, i), *role, *content;
        if (!json_object_is_type(msg, json_type_object))
            return bad(e, "messages", "message %zu is not an object", i);
        if (!json_object_object_get_ex(msg, "role", &role) ||
            !json_object_is_type(role, json_type_string))
            return bad(e, "messages", "message %zu has no 'role'", i);
        const char *rs = json_object_get_string(role);
        if (!strcmp(rs, "developer")) /* OpenAI's newer name for the system message */
            rs = "system";
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant"))
            return bad(e, "messages",
                       "message %zu: role '%.40s' is not supported (system, user, assistant)", i,
                       rs);
        json_object_object_get_ex(msg, "content", &content);
        char *text = message_content(content, e);
        if (!text)
            return -1;
        r->msgs[r->n_msgs].content = text;
        r->msgs[r->n_msgs].role = strdup(rs);
        r->n_msgs++;
        if (!r->msgs[r->n_msgs - 1].role) {
            srv_error_set(e, 500, "server_error", NULL, "out of memory");
            return -1;
        }
    }
    return 0;
}

/* prompt: a string, an array of one string, or an array of token ids. */
static int parse_prompt(json_object *root, const srv_limits *lim, srv_request *r, srv_error *e)
{
    json_object *p;
    if (!json_object_object_get_ex(root, "prompt", &p) || !p)
        return bad(e, "prompt", "'prompt' is missing");
    if (json_object_is_type(p, json_type_string)) {
        r->prompt = dup_string(p, "prompt", e);
        return r->prompt ? 0 : -1;
    }
    if (!json_object_is_type(p, json_type_array) || json_object_array_length(p) == 0)
        return bad(e, "prompt", "'prompt' must be a string or an array of token ids");
    size_t n = json_object_array_length(p);
    json_object *first = json_object_array_get_idx(p, 0);
    if (json_object_is_type(first, json_type_string)) {
        if (n != 1)
            return bad(e, "prompt", "one prompt per request (an array of %zu strings)", n);
        r->prompt = dup_string(first, "prompt", e);
        return r->prompt ? 0 : -1;
    }
    r->prompt_ids = malloc(n * sizeof *r->prompt_ids);
    if (!r->prompt_ids) {
        srv_error_set(e, 500, "server_error", NULL, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_object *v = json_object_array_get_idx(p, i);
        int64_t id = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : -1;
        if (id < 0 || id > INT32_MAX || (lim->n_vocab > 0 && id >= lim->n_vocab))
            return bad(e, "prompt", "prompt element %zu is not a token id of this model", i);
        r->prompt_ids[i] = (int32_t)id;
    }
    r->n_prompt_ids = n;
    return 0;
}

static int parse_stop(json_object *root, srv_request *r, srv_error *e)
{
    json_object *s;
    if (!json_object_object_get_ex(root, "stop", &s) || !s)
        return 0;
    size_t n = 1;
    bool arr = json_object_is_type(s, json_type_array);
    if (arr)
        n = json_object_array_length(s);
    if (n > SRV_MAX_STOP)
        return bad(e, "stop", "'stop' has %zu strings; at most %d", n, SRV_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_object *v = arr ? json_object_array_get_idx(s, i) : s;
        if (!json_object_is_type(v, json_type_string))
            return bad(e, "stop", "'stop' must be a string or an array of strings");
        int len = json_object_get_string_len(v);
        if (len == 0)
            continue;
        if (len > SRV_MAX_STOP_LEN)
            return bad(e, "stop", "a stop string is %d bytes; at most %d", len, SRV_MAX_STOP_LEN);
        char *c = dup_string(v, "stop", e);
        if (!c)
            return -1;
        r->stop[r->n_stop++] = c;
    }
    return 0;
}

static int parse_bias(json_object *root, const srv_limits *lim, srv_request *r, srv_error *e)
{
    json_object *b;
    if (!json_object_object_get_ex(root, "logit_bias", &b) || !b)
        return 0;
    if (!json_object_is_type(b, json_type_object))
        return bad(e, "logit_bias", "'logit_bias' must be an object of token id: bias");
    size_t n = (size_t)json_object_object_length(b);
    if (n > SRV_MAX_BIAS)
        return bad(e, "logit_bias", "'logit_bias' has %zu entries; at most %d", n, SRV_MAX_BIAS);
    r->bias = calloc(n ? n : 1, sizeof *r->bias);
    if (!r->bias) {
        srv_error_set(e, 500, "server_error", NULL, "out of memory");
        return -1;
    }
    json_object_object_foreach(b, key, val)
    {
        char *end;
        errno = 0;
        long id = strtol(key, &end, 10);
        if (!*key || *end || errno || id < 0 || id > INT32_MAX ||
            (lim->n_vocab > 0 && id >= lim->n_vocab))
            return bad(e, "logit_bias", "logit_bias key '%.32s' is not a token id of this model",
                       key);
        if (!json_object_is_type(val, json_type_double) && !json_object_is_type(val, json_type_int))
            return bad(e, "logit_bias", "logit_bias of token %ld must be a number", id);
        double d = json_object_get_double(val);
        if (!isfinite(d) || d < -100 || d > 100)
            return bad(e, "logit_bias", "logit_bias of token %ld must be in -100..100", id);
        r->bias[r->n_bias++] = (srv_bias){(int32_t)id, (float)d};
    }
    return 0;
}

static int parse_format(json_object *root, srv_request *r, srv_error *e)
{
    json_object *f, *t;
    if (!json_object_object_get_ex(root, "response_format", &f) || !f)
        return 0;
    if (!json_object_is_type(f, json_type_object) || !json_object_object_get_ex(f, "type", &t) ||
        !json_object_is_type(t, json_type_string))
        return bad(e, "response_format", "'response_format' must be {\"type\": ...}");
    const char *ts = json_object_get_string(t);
    if (!strcmp(ts, "text"))
        return 0;
    if (!strcmp(ts, "json_object")) {
        r->format = SRV_FORMAT_JSON_OBJECT;
        return 0;
    }
    if (strcmp(ts, "json_schema"))
        return bad(e, "response_format",
                   "response_format type '%.40s' is not text, "
                   "json_object or json_schema",
                   ts);
    json_object *js, *schema;
    if (!json_object_object_get_ex(f, "json_schema", &js) ||
        !json_object_is_type(js, json_type_object) ||
        !json_object_object_get_ex(js, "schema", &schema) ||
        !json_object_is_type(schema, json_type_object))
        return bad(e, "response_format",
                   "json_schema needs {\"json_schema\": {\"schema\": {...}}}");
    const char *text = json_object_to_json_string_ext(schema, JSON_C_TO_STRING_PLAIN);
    r->schema = text ? strdup(text) : NULL;
    if (!r->schema) {
        srv_error_set(e, 500, "server_error", NULL, "out of memory");
        return -1;
    }
    r->format = SRV_FORMAT_JSON_SCHEMA;
    return 0;
}

/* Fields glesc does not do, refused by name (silently ignoring them would
 * give an answer that is not what was asked). */
static int refuse_unsupported(json_object *root, srv_error *e)
{
    json_object *v;
    int64_t n;
    bool given;
    if (get_int(root, "n", 1, 1, &n, &given, e))
        return bad(e, "n", "'n' must be 1: one choice per request");
    static const char *const unsupported[] = {"tools", "functions", "tool_choice", "suffix",
                                              "best_of"};
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++)
        if (json_object_object_get_ex(root, unsupported[i], &v) && v &&
            !json_object_is_type(v, json_type_null))
            return bad(e, unsupported[i], "'%s' is not supported by glesc-server", unsupported[i]);
    if (json_object_object_get_ex(root, "logprobs", &v) && v &&
        !(json_object_is_type(v, json_type_boolean) && !json_object_get_boolean(v)))
        return bad(e, "logprobs", "'logprobs' is not supported by glesc-server");
    return 0;
}

static int parse_sampling(json_object *root, const srv_limits *lim, srv_request *r, srv_error *e)
{
    glesc_sampler_params_init(&r->sp);
    int64_t v;
    bool given;
    if (get_number(root, "temperature", 0, 2, &r->sp.temperature, e) ||
        get_number(root, "top_p", 0, 1, &r->sp.top_p, e) ||
        get_number(root, "min_p", 0, 1, &r->sp.min_p, e) ||
        get_number(root, "repeat_penalty", 0, 10, &r->sp.repeat_penalty, e))
        return -1;
    if (r->sp.min_p >= 1)
        return bad(e, "min_p", "'min_p' must be below 1");
    if (get_int(root, "top_k", 0, 1 << 20, &v, &given, e))
        return -1;
    if (given)
        r->sp.top_k = (int32_t)v;
    if (get_int(root, "seed", INT64_MIN, INT64_MAX, &v, &given, e))
        return -1;
    if (given)
        r->sp.seed = (uint64_t)v;
    r->seed_given = given;
    r->max_tokens = -1;
    for (int k = 0; k < 2; k++) { /* max_completion_tokens is OpenAI's newer name */
        const char *key = k ? "max_completion_tokens" : "max_tokens";
        if (get_int(root, key, 0, INT32_MAX, &v, &given, e))
            return -1;
        if (!given)
            continue;
        if (v > lim->max_tokens)
            return bad(e, key, "'%s' is %lld; this server allows at most %d (--max-tokens)", key,
                       (long long)v, (int)lim->max_tokens);
        r->max_tokens = (int32_t)v;
    }
    return 0;
}

static int parse_root(json_object *root, srv_kind kind, const srv_limits *lim, srv_request *r,
                      srv_error *e)
{
    if (!json_object_is_type(root, json_type_object))
        return bad(e, NULL, "the body must be a JSON object");
    json_object *v;
    if (json_object_object_get_ex(root, "model", &v) && v) {
        if (!json_object_is_type(v, json_type_string))
            return bad(e, "model", "'model' must be a string");
        if (!(r->model = dup_string(v, "model", e)))
            return -1;
    }
    if (refuse_unsupported(root, e) || parse_sampling(root, lim, r, e) ||
        get_bool(root, "stream", &r->stream, e) || parse_stop(root, r, e) ||
        parse_bias(root, lim, r, e) || parse_format(root, r, e))
        return -1;
    if (json_object_object_get_ex(root, "stream_options", &v) && v &&
        !json_object_is_type(v, json_type_null)) {
        if (!json_object_is_type(v, json_type_object))
            return bad(e, "stream_options", "'stream_options' must be an object");
        if (get_bool(v, "include_usage", &r->include_usage, e))
            return -1;
    }
    return kind == SRV_CHAT ? parse_messages(root, lim, r, e) : parse_prompt(root, lim, r, e);
}

int request_parse(const char *body, size_t len, srv_kind kind, const srv_limits *lim,
                  srv_request *out, srv_error *err)
{
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->kind = kind;
    if (len > INT32_MAX)
        return bad(err, NULL, "the body is too large");
    json_tokener *tk = json_tokener_new_ex(JSON_DEPTH);
    if (!tk) {
        srv_error_set(err, 500, "server_error", NULL, "out of memory");
        return -1;
    }
    json_tokener_set_flags(tk, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *root = json_tokener_parse_ex(tk, body ? body : "", (int)len);
    enum json_tokener_error je = json_tokener_get_error(tk);
    size_t end = json_tokener_get_parse_end(tk);
    int rc;
    if (!root || je != json_tokener_success) {
        rc = bad(err, NULL, "the body is not valid JSON: %s at byte %zu",
                 je == json_tokener_continue ? "unexpected end" : json_tokener_error_desc(je), end);
    } else {
        while (end < len && strchr(" \t\r\n", body[end]) && body[end])
            end++;
        rc = end < len ? bad(err, NULL,
                             "the body is not valid JSON: data after the object at "
                             "byte %zu",
                             end)
                       : parse_root(root, kind, lim, out, err);
    }
    json_object_put(root);
    json_tokener_free(tk);
    if (rc) {
        request_free(out);
        out->kind = kind;
    }
    return rc;
}

void request_free(srv_request *r)
{
    if (!r)
        return;
    free(r->model);
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->bias);
    for (size_t i = 0; i < r->n_msgs; i++) {
        free((char *)r->msgs[i].role);
        free((char *)r->msgs[i].content);
    }
    free(r->msgs);
    free(r->prompt);
    free(r->prompt_ids);
    free(r->schema);
    memset(r, 0, sizeof *r);
}
