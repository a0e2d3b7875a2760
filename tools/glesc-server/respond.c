/*
 * respond.c — OpenAI's JSON objects: the chat completion and the text
 * completion (whole, or as server-sent chunks ending with "data: [DONE]"),
 * the usage counts, the model list and the error object. Text goes through
 * tools/common's one JSON string escaper, so an answer is valid JSON (and
 * UTF-8) whatever bytes the model produced.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "glesc-server/glesc-server.h"

static void jstr(FILE *f, const char *s)
{
    tool_json_string(f, s, strlen(s));
}

/* A memory stream; its text ends up in *buf. */
static FILE *mem_open(char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    return open_memstream(buf, len);
}

static char *mem_close(FILE *f, char **buf, size_t *len)
{
    if (!f)
        return NULL;
    bool err = ferror(f);
    if (fclose(f) || err) {
        free(*buf);
        *buf = NULL;
    }
    return *buf;
}

static const char *object_name(const srv_job *j, bool chunk)
{
    if (j->req.kind == SRV_CHAT)
        return chunk ? "chat.completion.chunk" : "chat.completion";
    return "text_completion";
}

/* The fields every answer and chunk starts with. */
static void head(FILE *f, const srv *s, const srv_job *j, bool chunk)
{
    fprintf(f, "{\"id\":");
    jstr(f, j->id);
    fprintf(f, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object_name(j, chunk), j->created);
    jstr(f, j->req.model ? j->req.model : s->model_name);
    fprintf(f, ",\"system_fingerprint\":\"glesc-%s\"", GLESC_VERSION_STRING);
}

static void usage(FILE *f, const srv_job *j)
{
    fprintf(f,
            "\"usage\":{\"prompt_tokens\":%zu,\"completion_tokens\":%d,\"total_tokens\":%zu,"
            "\"prompt_tokens_details\":{\"cached_tokens\":%zu}}",
            j->n_prompt, (int)j->n_generated, j->n_prompt + (size_t)j->n_generated, j->n_cached);
}

static void finish_reason(FILE *f, const char *finish)
{
    if (finish)
        fprintf(f, "\"%s\"", finish);
    else
        fputs("null", f);
}

char *respond_answer(const srv *s, const srv_job *j, size_t *len)
{
    char *buf;
    FILE *f = mem_open(&buf, len);
    if (!f)
        return NULL;
    head(f, s, j, false);
    fputs(",\"choices\":[{\"index\":0,", f);
    if (j->req.kind == SRV_CHAT) {
        fputs("\"message\":{\"role\":\"assistant\",\"content\":", f);
        tool_json_string(f, j->text.data ? j->text.data : "", j->text.len);
        fputs("},", f);
    } else {
        fputs("\"text\":", f);
        tool_json_string(f, j->text.data ? j->text.data : "", j->text.len);
        fputs(",", f);
    }
    fputs("\"logprobs\":null,\"finish_reason\":", f);
    finish_reason(f, j->finish);
    fputs("}],", f);
    usage(f, j);
    fputs("}\n", f);
    return mem_close(f, &buf, len);
}

/* One event: "data: " + the JSON the writer made + a blank line. */
static void event_add(srv_buf *out, char *json, size_t n)
{
    if (!json) {
        out->oom = true;
        return;
    }
    buf_add(out, "data: ", 6);
    buf_add(out, json, n);
    buf_add(out, "\n\n", 2);
    free(json);
}

/* A stream chunk's JSON in memory, its head (id, object, created, model)
 * written; NULL (out marked) when memory ran out. chunk_close adds it to
 * out as an event. */
static FILE *chunk_open(const srv *s, const srv_job *j, char **buf, size_t *len, srv_buf *out)
{
    FILE *f = mem_open(buf, len);
    if (!f) {
        out->oom = true;
        return NULL;
    }
    head(f, s, j, true);
    return f;
}

static void chunk_close(FILE *f, char **buf, size_t *len, srv_buf *out)
{
    char *json = mem_close(f, buf, len); /* before len is read */
    event_add(out, json, *len);
}

/* A chunk whose choice holds delta (chat: the delta object's inside) or
 * text (completion), and finish. */
static void chunk(const srv *s, const srv_job *j, const char *role, const char *t, size_t n,
                  const char *finish, srv_buf *out)
{
    char *buf;
    size_t len;
    FILE *f = chunk_open(s, j, &buf, &len, out);
    if (!f)
        return;
    fputs(",\"choices\":[{\"index\":0,", f);
    if (j->req.kind == SRV_CHAT) {
        fputs("\"delta\":{", f);
        if (role)
            fprintf(f, "\"role\":\"%s\"%s", role, t ? "," : "");
        if (t) {
            fputs("\"content\":", f);
            tool_json_string(f, t, n);
        }
        fputs("},", f);
    } else {
        fputs("\"text\":", f);
        tool_json_string(f, t ? t : "", t ? n : 0);
        fputs(",", f);
    }
    fputs("\"logprobs\":null,\"finish_reason\":", f);
    finish_reason(f, finish);
    fputs("}]}", f);
    chunk_close(f, &buf, &len, out);
}

void respond_chunk_first(const srv *s, const srv_job *j, srv_buf *out)
{
    if (j->req.kind == SRV_CHAT)
        chunk(s, j, "assistant", "", 0, NULL, out);
}

void respond_chunk_text(const srv *s, const srv_job *j, const char *t, size_t n, srv_buf *out)
{
    chunk(s, j, NULL, t, n, NULL, out);
}

void respond_chunk_end(const srv *s, const srv_job *j, srv_buf *out)
{
    if (j->err.status) {
        size_t len;
        char *e = respond_error(&j->err, &len);
        if (e && len && e[len - 1] == '\n')
            len--;
        event_add(out, e, len);
    } else {
        chunk(s, j, NULL, NULL, 0, j->finish, out);
        if (j->req.include_usage) { /* OpenAI's: one more chunk, no choices, the usage */
            char *buf;
            size_t len;
            FILE *f = chunk_open(s, j, &buf, &len, out);
            if (!f)
                return;
            fputs(",\"choices\":[],", f);
            usage(f, j);
            fputs("}", f);
            chunk_close(f, &buf, &len, out);
        }
    }
    buf_add(out, "data: [DONE]\n\n", 14);
}

char *respond_error(const srv_error *e, size_t *len)
{
    char *buf;
    FILE *f = mem_open(&buf, len);
    if (!f)
        return NULL;
    fputs("{\"error\":{\"message\":", f);
    jstr(f, e->message);
    fprintf(f, ",\"type\":\"%s\",\"param\":", e->type ? e->type : "server_error");
    if (e->param)
        jstr(f, e->param);
    else
        fputs("null", f);
    fprintf(f, ",\"code\":%d}}\n", e->status);
    return mem_close(f, &buf, len);
}

char *respond_models(const srv *s, size_t *len)
{
    char *buf;
    FILE *f = mem_open(&buf, len);
    if (!f)
        return NULL;
    fputs("{\"object\":\"list\",\"data\":[{\"id\":", f);
    jstr(f, s->model_name);
    fprintf(
        f,
        ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"glesc\","
        "\"meta\":{\"n_vocab\":%d,\"n_ctx_slot\":%d,\"slots\":%d,\"chat_template\":\"%s\"}}]}\n",
        s->created, (int)s->n_vocab_tok, (int)s->slot_ctx, s->n_slots,
        glesc_chat_template_name(s->chat_template));
    return mem_close(f, &buf, len);
}
