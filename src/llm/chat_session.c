/*
 * chat_session.c — glesc_chat: a multi-turn conversation kept in a
 * session's KV cache (the logic of gguf-run's chat, moved into the library).
 *
 * The invariant: the cache holds the first `evaluated` bytes of the
 * formatted conversation (glesc_chat_format of the messages so far). The
 * formatted text of the messages plus a new user message and the start of
 * the assistant's turn extends that text, so a turn tokenizes and evaluates
 * only the bytes beyond `evaluated`, generates the reply (its tokens go into
 * the cache as sampled), then evaluates what the template puts after the
 * reply (its end of turn). That tail is found by the reply's text in the
 * formatted conversation; where the template rewrote the reply (trimmed it)
 * and the text is not found, the sampled end-of-generation token stands in
 * for the end of the turn, as in llama.cpp's cli.
 *
 * When text does not fit, the policy decides: start over with the kept
 * messages (the system message) and an empty cache, or fail and leave the
 * conversation as it was.
 */
#include <string.h>

#include "llm/runtime.h"

struct glesc_chat {
    glesc_session *s;
    glesc_sampler *smp;
    const glesc_tokenizer *tok;
    glesc_chat_template tmpl;
    bool no_bos;
    glesc_chat_context_policy policy;
    glesc_chat_message *msgs; /* roles are static strings; contents are the chat's copies */
    size_t n, cap;
    size_t keep;      /* messages kept when starting over (the system message) */
    size_t evaluated; /* bytes of the formatted conversation in the cache */
    bool full;        /* (fail policy) the last end of turn did not fit */
};

/* Appends a message; content becomes the chat's (freed on failure too). */
static glesc_status push(glesc_chat *c, const char *role, char *content)
{
    if (content && c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        glesc_chat_message *m = core_realloc(c->msgs, cap * sizeof *m);
        if (m) {
            c->msgs = m;
            c->cap = cap;
        }
    }
    if (!content || c->n == c->cap) {
        core_free(content);
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "chat: %s message", role);
    }
    c->msgs[c->n].role = role;
    c->msgs[c->n].content = content;
    c->n++;
    return GLESC_OK;
}

/* Keeps the first keep messages. */
static void truncate_msgs(glesc_chat *c, size_t keep)
{
    while (c->n > keep)
        core_free((char *)c->msgs[--c->n].content);
}

/* The kept messages and an empty cache. */
static void start_over(glesc_chat *c)
{
    truncate_msgs(c, c->keep);
    glesc_session_truncate(c->s, 0);
    c->evaluated = 0;
    c->full = false;
}

GLESC_API void glesc_chat_options_init(glesc_chat_options *opts)
{
    if (opts)
        memset(opts, 0, sizeof *opts);
}

GLESC_API glesc_status glesc_chat_create(glesc_session *s, glesc_sampler *smp,
                                         const glesc_chat_options *opts, glesc_chat **out)
{
    core_err_reset(NULL);
    if (!out)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_chat_create: NULL out");
    *out = NULL;
    if (!s || !smp)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_chat_create: NULL session or sampler");
    glesc_chat_options o = {0};
    if (opts)
        o = *opts;
    if ((unsigned)o.chat_template >= GLESC_CHAT_COUNT_ ||
        (unsigned)o.context_policy > GLESC_CHAT_CONTEXT_FAIL)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_chat_create: template %d or context policy %d is not one of "
                            "the enum's values",
                            (int)o.chat_template, (int)o.context_policy);
    glesc_chat *c = core_calloc(1, sizeof *c);
    if (!c)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "chat");
    c->s = s;
    c->smp = smp;
    c->tok = s->m->tok;
    c->no_bos = o.no_bos;
    c->policy = o.context_policy;
    c->tmpl = o.chat_template;
    if (c->tmpl == GLESC_CHAT_NONE)
        c->tmpl = glesc_chat_template_detect(s->m->chat_template);
    if (c->tmpl == GLESC_CHAT_NONE)
        c->tmpl = GLESC_CHAT_CHATML;
    if (o.system) {
        glesc_status st = push(c, "system", core_strdup(o.system));
        if (st != GLESC_OK) {
            glesc_chat_destroy(c);
            return st;
        }
        c->keep = 1;
    }
    glesc_session_truncate(s, 0);
    *out = c;
    return GLESC_OK;
}

GLESC_API void glesc_chat_destroy(glesc_chat *c)
{
    if (!c)
        return;
    truncate_msgs(c, 0);
    core_free(c->msgs);
    core_free(c);
}

GLESC_API glesc_chat_template glesc_chat_get_template(const glesc_chat *c)
{
    return c ? c->tmpl : GLESC_CHAT_NONE;
}

GLESC_API const glesc_chat_message *glesc_chat_messages(const glesc_chat *c, size_t *n)
{
    if (n)
        *n = c ? c->n : 0;
    return c ? c->msgs : NULL;
}

GLESC_API void glesc_chat_reset(glesc_chat *c)
{
    if (!c)
        return;
    start_over(c);
    glesc_sampler_reset(c->smp);
}

/* Tokenizes text (special tokens parsed; BOS when the cache is empty) and
 * evaluates it when it fits the free context (*fits says whether). */
static glesc_status eval_text(glesc_chat *c, const char *text, size_t len,
                              const glesc_generate_params *p, glesc_generate_result *res,
                              bool *fits)
{
    unsigned flags = GLESC_TOKENIZE_PARSE_SPECIAL;
    if (c->s->n_past == 0 && !c->no_bos)
        flags |= GLESC_TOKENIZE_ADD_SPECIAL;
    int32_t *ids = NULL;
    size_t n = 0;
    glesc_status st = glesc_tokenize_alloc(c->tok, text, len, flags, &ids, &n);
    if (st != GLESC_OK)
        return st;
    *fits = n <= (size_t)(c->s->n_ctx - c->s->n_past);
    if (*fits && n > 0)
        st = llm_eval_input(c->s, c->smp, ids, n, p, res);
    glesc_tokens_free(ids);
    return st;
}

/* The template's text of the conversation (with the assistant's start). */
static glesc_status format(const glesc_chat *c, bool add_ass, char **out)
{
    *out = NULL;
    return glesc_chat_format(c->tmpl, c->msgs, c->n, add_ass, out);
}

/* Whether the kept messages and the last one (the new user message) with
 * the assistant's start fit an empty context. */
static glesc_status fits_alone(const glesc_chat *c, bool *fits)
{
    glesc_chat_message *m = core_calloc(c->keep + 1, sizeof *m);
    if (!m)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "chat");
    memcpy(m, c->msgs, c->keep * sizeof *m);
    m[c->keep] = c->msgs[c->n - 1];
    char *text = NULL;
    size_t n = 0;
    unsigned flags = GLESC_TOKENIZE_PARSE_SPECIAL | (c->no_bos ? 0 : GLESC_TOKENIZE_ADD_SPECIAL);
    glesc_status st = glesc_chat_format(c->tmpl, m, c->keep + 1, true, &text);
    if (st == GLESC_OK) {
        st = glesc_tokenize(c->tok, text, strlen(text), flags, NULL, 0, &n);
        if (st == GLESC_ERROR_LIMIT || st == GLESC_OK) /* LIMIT: n is the count */
            st = GLESC_OK;
    }
    *fits = n <= (size_t)c->s->n_ctx;
    glesc_text_free(text);
    core_free(m);
    return st;
}

/* What the chat's token callback collects around the caller's. */
typedef struct reply_state {
    const glesc_generate_params *p;
    sbuf text;
    int32_t last_id; /* the last sampled id, or -1 */
} reply_state;

static bool reply_token(void *user, int32_t id, const char *piece, size_t len)
{
    reply_state *r = user;
    sbuf_appendn(&r->text, piece, len);
    if (id >= 0)
        r->last_id = id;
    return r->p->on_token && r->p->on_token(r->p->token_user, id, piece, len);
}

/* Where the template's end of turn starts in after (the conversation with
 * the reply) given before (the conversation up to the reply), or NULL when
 * the reply is not found there (the template rewrote it). */
static const char *end_of_turn(const char *before, const char *after, const char *reply)
{
    size_t lb = strlen(before), la = strlen(after), lr = strlen(reply);
    if (la < lb || memcmp(after, before, lb))
        return NULL;
    const char *rest = after + lb;
    size_t skip = 0;
    while (skip < lr && strchr(" \t\n\r", reply[skip]))
        skip++;
    if (la - lb >= lr && !memcmp(rest, reply, lr))
        return rest + lr;
    if (la - lb >= lr - skip && !memcmp(rest, reply + skip, lr - skip))
        return rest + lr - skip;
    return NULL;
}

GLESC_API glesc_status glesc_chat_send(glesc_chat *c, const char *content,
                                       const glesc_generate_params *p, glesc_generate_result *res)
{
    core_err_reset(NULL);
    glesc_generate_result unused;
    if (!res)
        res = &unused;
    memset(res, 0, sizeof *res);
    if (!c || !content)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_chat_send: NULL chat or message");
    glesc_generate_params defaults;
    if (!p) {
        glesc_generate_params_init(&defaults);
        p = &defaults;
    }
    int n_ctx = (int)c->s->n_ctx;
    if (c->full)
        return core_err_set(NULL, GLESC_ERROR_LIMIT,
                            "the conversation fills the context (%d tokens): reset the chat",
                            n_ctx);
    char *before = NULL, *after = NULL;
    reply_state r = {p, {0}, -1};
    sbuf_init(&r.text);
    glesc_status st = push(c, "user", core_strdup(content));
    if (st != GLESC_OK)
        return st;
    for (int attempt = 0;; attempt++) {
        core_free(before);
        bool fits;
        if ((st = format(c, true, &before)) != GLESC_OK ||
            (st = eval_text(c, before + c->evaluated, strlen(before) - c->evaluated, p, res,
                            &fits)) != GLESC_OK)
            goto fail;
        if (fits)
            break;
        if (attempt > 0 || c->s->n_past == 0 || c->policy == GLESC_CHAT_CONTEXT_FAIL) {
            bool alone = attempt == 0 && c->s->n_past > 0;
            if (alone && (st = fits_alone(c, &alone)) != GLESC_OK)
                goto fail;
            truncate_msgs(c, c->n - 1);
            st = core_err_set(NULL, GLESC_ERROR_LIMIT,
                              alone ? "the conversation fills the context (%d tokens): reset the "
                                      "chat"
                                    : "the message does not fit the context (%d tokens)",
                              n_ctx);
            goto out;
        }
        /* The context is full: start over, keeping the user's message. */
        glesc_chat_message last = c->msgs[--c->n];
        start_over(c);
        c->msgs[c->n++] = last;
        llm_gen_event(p, &(glesc_gen_event){.kind = GLESC_GEN_EVENT_START_OVER, .id = -1});
    }

    glesc_generate_params q = *p;
    q.on_token = reply_token;
    q.token_user = &r;
    if ((st = llm_generate_tokens(c->s, c->smp, &q, true, res)) != GLESC_OK)
        goto fail;
    char *text = sbuf_take(&r.text);
    if ((st = push(c, "assistant", text)) != GLESC_OK)
        goto fail;

    /* The end of the turn: the template's text after the reply or, where
     * it rewrote the reply, the sampled end-of-generation token. */
    if ((st = format(c, false, &after)) != GLESC_OK)
        goto fail;
    const char *tail = end_of_turn(before, after, c->msgs[c->n - 1].content);
    bool fits = true;
    if (tail) {
        st = eval_text(c, tail, strlen(tail), p, res, &fits);
    } else if (r.last_id >= 0 && glesc_tokenizer_is_eog(c->tok, r.last_id)) {
        fits = c->s->n_past < c->s->n_ctx;
        if (fits)
            st = llm_eval_input(c->s, c->smp, &r.last_id, 1, p, res);
    }
    if (st != GLESC_OK)
        goto fail;
    if (!fits) { /* no room for the end of the turn */
        if (c->policy == GLESC_CHAT_CONTEXT_FAIL) {
            c->full = true;
        } else {
            start_over(c);
            llm_gen_event(p, &(glesc_gen_event){.kind = GLESC_GEN_EVENT_START_OVER, .id = -1});
        }
    } else {
        c->evaluated = strlen(after);
    }
    goto out;
fail:
    start_over(c);
out:
    sbuf_free(&r.text);
    glesc_text_free(before);
    glesc_text_free(after);
    return st;
}
