/*
 * chat.c — gguf-run's multi-turn chat on stdin over the library's chat
 * session (glesc_chat): messages formatted with the model's (or the named)
 * chat template, the KV cache kept between turns so each turn evaluates only
 * the text the template adds, the conversation started over (the system
 * message kept) when the context is full. What is left here is reading the
 * messages (each bounded), the terminal's words, and Ctrl-C, which stops a
 * reply (main.c's handler sets the flag the token callback checks).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf-run/gguf-run.h"

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

/* A system message with which not even an empty message fits the context
 * would fail every turn: refused once. 0, or 1 (message printed). */
static int check_system(run *r, glesc_chat_template t)
{
    if (!r->o->system)
        return 0;
    glesc_chat_message m[2] = {{"system", r->o->system}, {"user", ""}};
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    unsigned flags = GLESC_TOKENIZE_PARSE_SPECIAL | (r->o->no_bos ? 0 : GLESC_TOKENIZE_ADD_SPECIAL);
    glesc_status st = glesc_chat_format(t, m, 2, true, &text);
    if (st == GLESC_OK)
        st = glesc_tokenize_alloc(r->tok, text, strlen(text), flags, &ids, &n);
    glesc_text_free(text);
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

/* Multi-turn chat on stdin; the reply streams through generate.c's
 * callbacks. */
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

    glesc_chat_options co;
    glesc_chat_options_init(&co);
    co.chat_template = t;
    co.system = o->system;
    co.no_bos = o->no_bos;
    glesc_chat *chat = NULL;
    char *msg = NULL;
    int rc = 0;
    if (glesc_chat_create(r->sess, r->smp, &co, &chat) != GLESC_OK) {
        fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
        return 1;
    }
    if (o->prompt_cache && prompt_cache_chat(r, chat)) {
        glesc_chat_destroy(chat);
        return 1;
    }
    bool pending = r->prompt_text != NULL; /* -p: the first message */
    for (;;) {
        size_t len = 0;
        if (pending) {
            msg = malloc(r->prompt_len + 1);
            if (!msg) {
                fprintf(stderr, "gguf-run: out of memory\n");
                rc = 1;
                break;
            }
            memcpy(msg, r->prompt_text, r->prompt_len);
            msg[r->prompt_len] = 0;
            len = r->prompt_len;
            pending = false;
            if (!out_printf("> %s\n", msg)) {
                rc = 1;
                break;
            }
        } else {
            int got = read_message(&msg, &len);
            if (got < 0) {
                rc = 1;
                break;
            }
            if (got == 0) {
                /* Ctrl-D: the summary goes below the prompt, not on its line */
                if (isatty(0) && !out_write("\n", 1))
                    rc = 1;
                break;
            }
        }
        if (!strcmp(msg, "/reset")) {
            glesc_chat_reset(chat);
            fprintf(stderr, "gguf-run: the conversation starts over\n");
        } else if (len > 0) {
            glesc_generate_params p;
            gen_params(r, &p);
            glesc_generate_result res;
            r->text.len = 0;
            chat_sigint_reply(true); /* Ctrl-C now stops the reply */
            glesc_status st = glesc_chat_send(chat, msg, &p, &res);
            chat_sigint_reply(false);
            add_result(r, &res);
            if (r->failed) {
                rc = 1;
                break;
            }
            if (st == GLESC_ERROR_LIMIT && r->reply_phase == 0) { /* the message was dropped */
                fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
            } else {
                /* the reply is over */
                if ((r->reply_phase == 2 && !out_write("\n", 1)) || !out_flush()) {
                    rc = 1;
                    break;
                }
                verbose_flush(r);
                if (st != GLESC_OK) {
                    fprintf(stderr, "%sgguf-run: %s\n", r->reply_phase == 1 ? "\n" : "",
                            glesc_last_errmsg());
                    rc = 1;
                    break;
                }
            }
        }
        free(msg);
        msg = NULL;
    }
    free(msg);
    glesc_chat_destroy(chat);
    verbose_flush(r);
    if (!rc)
        summary(r);
    return rc;
}
