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
 * When text does not fit, the policy decides: shift the context (drop the
 * oldest turns after the kept messages from the cache and move the later
 * positions down, glesc_session_shift, as llama-cli does), start over with
 * the kept messages (the system message) and an empty cache, or fail and
 * leave the conversation as it was. For the shift the chat knows where each
 * message's tokens start in the cache (pos) and where the kept messages end
 * (keep_pos): a fresh cache evaluates the kept messages' formatted text on
 * its own first, where that text starts the conversation's; templates that
 * merge the system message into the first user turn (Gemma's) keep that
 * first turn as well. Dropping whole turns keeps the text invariant: the
 * formatted text of the remaining messages is what the cache then holds.
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
    /* (shift policy) pos[i]: the cache position where message i's text
     * starts (i ≥ keep, parallel to msgs); keep_pos: positions of the kept
     * messages (BOS included), -1 when they cannot be told apart. */
    int32_t *pos;
    int32_t keep_pos;
};

/* Appends a message; content becomes the chat's (freed on failure too). */
static glesc_status push(glesc_chat *c, const char *role, char *content)
{
    if (content && c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        glesc_chat_message *m = core_realloc(c->msgs, cap * sizeof *m);
        if (m)
            c->msgs = m;
        int32_t *pos = m ? core_realloc(c->pos, cap * sizeof *pos) : NULL;
        if (pos) {
            c->pos = pos;
            c->cap = cap;
        }
    }
    if (!content || c->n == c->cap) {
        core_free(content);
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "chat: %s message", role);
    }
    c->msgs[c->n].role = role;
    c->msgs[c->n].content = content;
    c->pos[c->n] = c->s->n_past;
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
    c->keep_pos = -1;
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
    glesc_chat_options o;
    glesc_chat_options_init(&o);
    glesc_status st =
        opts ? core_struct_read(NULL, &o, sizeof o, opts, "glesc_chat_create") : GLESC_OK;
    if (st != GLESC_OK)
        return st;
    if ((unsigned)o.chat_template >= GLESC_CHAT_COUNT_ ||
        (unsigned)o.context_policy > GLESC_CHAT_CONTEXT_SHIFT)
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
    c->keep_pos = -1;
    c->tmpl = o.chat_template;
    if (c->tmpl == GLESC_CHAT_NONE)
        c->tmpl = glesc_chat_template_detect(s->m->chat_template);
    if (c->tmpl == GLESC_CHAT_NONE)
        c->tmpl = GLESC_CHAT_CHATML;
    if (o.system) {
        st = push(c, "system", core_strdup(o.system));
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
    core_free(c->pos);
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
 * evaluates it when it fits the free context (*fits says whether; *need,
 * may be NULL, gets its token count). */
static glesc_status eval_text(glesc_chat *c, const char *text, size_t len,
                              const glesc_generate_params *p, glesc_generate_result *res,
                              bool *fits, size_t *need)
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
    if (need)
        *need = n;
    /* Without kept messages the kept positions are BOS, if any. */
    if (c->s->n_past == 0 && c->keep == 0)
        c->keep_pos =
            n > 0 && (flags & GLESC_TOKENIZE_ADD_SPECIAL) && ids[0] == glesc_tokenizer_bos(c->tok);
    if (*fits && n > 0)
        st = llm_eval_input(c->s, c->smp, ids, n, p, res);
    glesc_tokens_free(ids);
    return st;
}

/* (shift policy) On an empty cache, evaluates the kept messages' text on
 * its own when it starts the conversation's text (conv), so their positions
 * (keep_pos) are known; else keep_pos stays -1 (a full context then starts
 * over). */
static glesc_status eval_kept(glesc_chat *c, const char *conv, const glesc_generate_params *p,
                              glesc_generate_result *res)
{
    if (c->policy != GLESC_CHAT_CONTEXT_SHIFT || c->s->n_past != 0 || c->keep == 0)
        return GLESC_OK;
    char *kept = NULL;
    glesc_status st = glesc_chat_format(c->tmpl, c->msgs, c->keep, false, &kept);
    size_t len = kept ? strlen(kept) : 0;
    bool fits = false;
    if (st == GLESC_OK && len > 0 && !strncmp(conv, kept, len) &&
        (st = eval_text(c, kept, len, p, res, &fits, NULL)) == GLESC_OK && fits) {
        c->keep_pos = c->s->n_past;
        c->evaluated = len;
    }
    glesc_text_free(kept);
    return st;
}

GLESC_API glesc_status glesc_chat_prefill(glesc_chat *c, const int32_t *cached, size_t n_cached,
                                          int32_t **ids, size_t *n)
{
    core_err_reset(NULL);
    int32_t *kept_ids = NULL;
    size_t n_kept = 0;
    if (ids)
        *ids = NULL;
    if (n)
        *n = 0;
    if (!c || (n_cached && !cached))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_chat_prefill: NULL chat or cached tokens");
    if (c->n != c->keep || c->evaluated)
        return core_err_set(NULL, GLESC_ERROR_STATE,
                            "glesc_chat_prefill: the chat has started (call it before the first "
                            "send)");
    /* The kept text must start every conversation: checked with a user
     * message standing in for the first one. */
    char *kept = NULL, *conv = NULL;
    glesc_chat_message *m = core_calloc(c->keep + 1, sizeof *m);
    glesc_status st = m ? GLESC_OK : core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "chat");
    if (st == GLESC_OK && c->keep > 0) {
        memcpy(m, c->msgs, c->keep * sizeof *m);
        m[c->keep] = (glesc_chat_message){"user", "Hi"};
        st = glesc_chat_format(c->tmpl, c->msgs, c->keep, false, &kept);
        if (st == GLESC_OK)
            st = glesc_chat_format(c->tmpl, m, c->keep + 1, true, &conv);
    }
    size_t len = kept ? strlen(kept) : 0;
    unsigned flags = GLESC_TOKENIZE_PARSE_SPECIAL | (c->no_bos ? 0 : GLESC_TOKENIZE_ADD_SPECIAL);
    if (st == GLESC_OK && len > 0 && !strncmp(conv, kept, len))
        st = glesc_tokenize_alloc(c->tok, kept, len, flags, &kept_ids, &n_kept);
    bool same = st == GLESC_OK && n_kept > 0 && n_cached == n_kept &&
                c->s->n_past == (int32_t)n_kept &&
                !memcmp(cached, kept_ids, n_kept * sizeof *kept_ids);
    if (st == GLESC_OK && !same) {
        glesc_session_truncate(c->s, 0); /* (resets the message: before any failure) */
        if (n_kept > (size_t)c->s->n_ctx)
            st = core_err_set(NULL, GLESC_ERROR_LIMIT,
                              "the system message takes %zu tokens, the context holds %d", n_kept,
                              (int)c->s->n_ctx);
        else if (n_kept > 0) {
            glesc_generate_params p;
            glesc_generate_params_init(&p);
            glesc_generate_result res = {0};
            st = llm_eval_input(c->s, c->smp, kept_ids, n_kept, &p, &res);
        }
    } else if (same) {
        for (size_t i = 0; i < n_kept; i++) /* as their eval would have */
            glesc_sampler_accept_prompt(c->smp, kept_ids[i]);
    }
    if (st == GLESC_OK && n_kept > 0) {
        c->keep_pos = (int32_t)n_kept;
        c->evaluated = len;
    }
    if (st == GLESC_OK && ids) {
        *ids = kept_ids;
        kept_ids = NULL;
    }
    if (st == GLESC_OK && n)
        *n = n_kept;
    glesc_tokens_free(kept_ids);
    glesc_text_free(kept);
    glesc_text_free(conv);
    core_free(m);
    return st;
}

/* (shift policy) Makes room for need more tokens by dropping the oldest
 * whole turns after the kept messages: messages first..j-1 for the smallest
 * user message j ≤ end (end: the first message that must stay) that frees
 * half of the conversation's positions beyond the kept ones, as llama-cli
 * does, so the reply has room too, or failing that the smallest that lets
 * need fit. Where the template merged the kept messages into the first
 * turn (keep_pos -1), that turn is kept with them. *shifted says whether it
 * did; the caller's formatted text is then stale (evaluated is recomputed
 * for messages[0..n_eval)). */
static glesc_status shift_turns(glesc_chat *c, size_t end, size_t n_eval, size_t need,
                                const glesc_generate_params *p, bool *shifted)
{
    *shifted = false;
    glesc_session *s = c->s;
    if (c->policy != GLESC_CHAT_CONTEXT_SHIFT)
        return GLESC_OK;
    size_t first = c->keep;
    int32_t base = c->keep_pos;
    if (base < 0) { /* merged: the first turn (user, assistant) stays too */
        first = c->keep + 2;
        if (first >= c->n)
            return GLESC_OK;
        base = c->pos[first];
    }
    int32_t used = s->n_past - base;
    size_t pick = 0;
    for (size_t j = first + 1; j <= end && !pick; j++) {
        if (j < end && strcmp(c->msgs[j].role, "user"))
            continue;
        int32_t freed = c->pos[j] - base;
        bool room = need <= (size_t)(s->n_ctx - (s->n_past - freed));
        if (room && (2 * freed >= used || j == end))
            pick = j;
    }
    int32_t freed = pick ? c->pos[pick] - base : 0;
    if (freed <= 0)
        return GLESC_OK;
    glesc_status st = glesc_session_shift(s, base, freed);
    if (st != GLESC_OK)
        return st;
    size_t drop = pick - first;
    for (size_t i = first; i < pick; i++)
        core_free((char *)c->msgs[i].content);
    memmove(c->msgs + first, c->msgs + pick, (c->n - pick) * sizeof *c->msgs);
    memmove(c->pos + first, c->pos + pick, (c->n - pick) * sizeof *c->pos);
    c->n -= drop;
    n_eval -= drop;
    for (size_t i = first; i < c->n; i++)
        c->pos[i] -= freed;
    char *text = NULL;
    if (n_eval > 0 && (st = glesc_chat_format(c->tmpl, c->msgs, n_eval, false, &text)) != GLESC_OK)
        return st;
    c->evaluated = text ? strlen(text) : 0;
    glesc_text_free(text);
    *shifted = true;
    llm_gen_event(p, &(glesc_gen_event){.kind = GLESC_GEN_EVENT_CONTEXT_SHIFT,
                                        .n_tokens = (size_t)freed,
                                        .id = -1});
    return GLESC_OK;
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
    glesc_generate_params params;
    glesc_status st = llm_generate_params_in(&params, p, "glesc_chat_send");
    if (st != GLESC_OK)
        return st;
    p = &params;
    int n_ctx = (int)c->s->n_ctx;
    if (c->full)
        return core_err_set(NULL, GLESC_ERROR_LIMIT,
                            "the conversation fills the context (%d tokens): reset the chat",
                            n_ctx);
    char *before = NULL, *after = NULL;
    reply_state r = {p, {0}, -1};
    sbuf_init(&r.text);
    st = push(c, "user", core_strdup(content));
    if (st != GLESC_OK)
        return st;
    bool shifted = false;
    for (int attempt = 0;; attempt++) {
        core_free(before);
        bool fits;
        size_t need;
        if ((st = format(c, true, &before)) != GLESC_OK ||
            (st = eval_kept(c, before, p, res)) != GLESC_OK ||
            (st = eval_text(c, before + c->evaluated, strlen(before) - c->evaluated, p, res, &fits,
                            &need)) != GLESC_OK)
            goto fail;
        if (fits)
            break;
        /* Full: drop the oldest turns (once), else the policy below. */
        if (!shifted && (st = shift_turns(c, c->n - 1, c->n - 1, need, p, &shifted)) != GLESC_OK)
            goto fail;
        if (shifted) {
            attempt--;
            continue;
        }
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
    llm_sampler_grammar_restart(c->smp); /* a grammar shapes each reply from its start */
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
    int32_t eog =
        !tail && r.last_id >= 0 && glesc_tokenizer_is_eog(c->tok, r.last_id) ? r.last_id : -1;
    /* Where the end of the turn does not fit: drop older turns than this
     * one (shift policy) and try once more. */
    for (int k = 0; k < 2 && st == GLESC_OK; k++) {
        size_t need = 1;
        if (tail) {
            st = eval_text(c, tail, strlen(tail), p, res, &fits, &need);
        } else if (eog >= 0) {
            fits = c->s->n_past < c->s->n_ctx;
            if (fits)
                st = llm_eval_input(c->s, c->smp, &eog, 1, p, res);
        }
        bool done = false;
        if (st != GLESC_OK || fits || k ||
            (st = shift_turns(c, c->n - 2, c->n, need, p, &done)) != GLESC_OK || !done)
            break;
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
        char *now = NULL; /* the conversation's text again, where turns were dropped */
        if ((st = format(c, false, &now)) != GLESC_OK)
            goto fail;
        c->evaluated = strlen(now);
        glesc_text_free(now);
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
