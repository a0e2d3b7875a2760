/*
 * chat.c — gguf-run's multi-turn chat on stdin over the library's chat
 * session (glesc_chat): messages formatted with the model's (or the named)
 * chat template, the KV cache kept between turns so each turn evaluates only
 * the text the template adds, the conversation started over (the system
 * message kept) when the context is full. What is left here is reading the
 * messages and the terminal's words.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf-run/gguf-run.h"

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
            glesc_chat_reset(chat);
            fprintf(stderr, "gguf-run: the conversation starts over\n");
        } else if (len > 0) {
            glesc_generate_params p;
            gen_params(r, &p);
            glesc_generate_result res;
            r->text.len = 0;
            glesc_status st = glesc_chat_send(chat, msg, &p, &res);
            add_result(r, &res);
            if (r->failed) {
                rc = 1;
                break;
            }
            if (st == GLESC_ERROR_LIMIT && r->reply_phase == 0) { /* the message was dropped */
                fprintf(stderr, "gguf-run: %s\n", glesc_last_errmsg());
            } else {
                if (r->reply_phase == 2 && !o->json) /* the reply is over */
                    printf("\n");
                fflush(stdout);
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
    summary(r);
    return rc;
}
