/*
 * chat.c — gguf-run's multi-turn chat on stdin: messages formatted with the
 * model's (or the named) chat template, the KV cache kept between turns so
 * each turn evaluates only the text the template adds. Ctrl-C stops a reply
 * (main.c's handler sets the flag generate() checks per token).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf-run/gguf-run.h"

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

/* One message from stdin: a line ("\\" at its end continues it on the next
 * line), at most CHAT_MESSAGE_MAX bytes, into *msg (malloc'ed,
 * NUL-terminated). 1 for a message, 0 at the end of input, -1 (message
 * printed) when it is longer than the limit, out of memory or stdout fails. */
static int read_message(char **msg, size_t *len)
{
    buf b = {0};
    if (isatty(0) && (!out_write("\n> ", 3) || !out_flush()))
        return -1;
    int c = EOF;
    bool any = false;
    while ((c = getchar()) != EOF) {
        any = true;
        if (c == '\n' && b.len > 0 && b.data[b.len - 1] == '\\') {
            b.data[b.len - 1] = '\n'; /* continued */
            continue;
        }
        if (c == '\n')
            break;
        if (b.len == CHAT_MESSAGE_MAX) {
            fprintf(stderr,
                    "gguf-run: a chat message on stdin is longer than %zu bytes (1 MiB), the "
                    "limit\n",
                    CHAT_MESSAGE_MAX);
            free(b.data);
            return -1;
        }
        char ch = (char)c;
        buf_add(&b, &ch, 1);
    }
    if (!any) {
        free(b.data);
        return 0;
    }
    if (c == EOF && b.len > 0 && b.data[b.len - 1] == '\\')
        b.data[b.len - 1] = '\n'; /* continued, then the input ended */
    buf_add(&b, "", 1);
    if (b.oom) {
        fprintf(stderr, "gguf-run: out of memory for a chat message\n");
        free(b.data);
        return -1;
    }
    *msg = b.data;
    *len = b.len - 1;
    return 1;
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

/* A system message with which not even an empty message fits the context
 * would fail every turn: refused once. 0, or 1 (message printed). */
static int check_system(run *r, glesc_chat_template t)
{
    if (!r->o->system)
        return 0;
    glesc_chat_message m[2] = {{"system", r->o->system}, {"user", ""}};
    chat c = {m, 2, 2};
    char *text = chat_text(t, &c, true);
    if (!text)
        return 1;
    unsigned flags = GLESC_TOKENIZE_PARSE_SPECIAL | (r->o->no_bos ? 0 : GLESC_TOKENIZE_ADD_SPECIAL);
    int32_t *ids = NULL;
    size_t n = 0;
    glesc_status st = glesc_tokenize_alloc(r->tok, text, strlen(text), flags, &ids, &n);
    free(text);
    glesc_tokens_free(ids);
    if (st != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        return 1;
    }
    int32_t n_ctx = glesc_session_n_ctx(r->sess);
    if (n < (size_t)n_ctx)
        return 0;
    fprintf(stderr,
            "gguf-run: the system message takes %zu tokens with the template's text, and the "
            "context holds %d: no message fits after it; use a larger -c or a shorter --system\n",
            n, (int)n_ctx);
    return 1;
}

/* Multi-turn chat on stdin. The KV cache keeps the conversation: each turn
 * evaluates only the text the template adds (the user's message and the
 * assistant's start), then the reply is generated; after it the template's
 * end-of-turn text is evaluated, so the cache holds exactly the text the
 * next turn's formatting starts with. When the context is full, the
 * conversation starts over (the system message kept). */
int chat_loop(run *r)
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
    if (check_system(r, t))
        return 1;
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
            if (!msg) {
                rc = 1;
                goto done;
            }
            memcpy(msg, r->prompt_text, r->prompt_len);
            msg[r->prompt_len] = 0;
            len = r->prompt_len;
            if (!out_printf("> %s\n", msg)) {
                rc = 1;
                goto done;
            }
            pending = false;
        } else {
            int got = read_message(&msg, &len);
            if (got < 0) {
                rc = 1;
                goto done;
            }
            if (got == 0) {
                /* Ctrl-D: the summary goes below the prompt, not on its line */
                if (isatty(0) && !out_write("\n", 1))
                    rc = 1;
                break;
            }
        }
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
        chat_sigint_reply(true); /* Ctrl-C now stops the reply */
        int g = generate(r, NULL, dec, o->n_predict, true);
        chat_sigint_reply(false);
        if (g || !out_write("\n", 1) || !out_flush()) {
            rc = 1;
            goto done;
        }
        verbose_flush(r);
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
    verbose_flush(r);
    if (!rc)
        summary(r);
    return rc;
}
