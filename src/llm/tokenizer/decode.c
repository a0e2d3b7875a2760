/*
 * decode.c — token ids back to text: the piece of one token,
 * detokenization of a sequence (llama.cpp's token_to_piece and detokenize,
 * with its leading-space and clean_spaces rules) and the streaming decoder,
 * which holds back the bytes of an incomplete UTF-8 character.
 */
#include <string.h>

#include "llm/tokenizer/tokenizer.h"

/* ---- Pieces and detokenization ---- */

static bool piece_rendered(const glesc_tokenizer *t, int32_t id, unsigned flags)
{
    return (flags & GLESC_DETOKENIZE_SPECIAL) ||
           !(t->info[id].attr & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL));
}

GLESC_API glesc_status glesc_token_to_piece(const glesc_tokenizer *t, int32_t id, unsigned flags,
                                            const char **piece, size_t *len)
{
    core_err_reset(NULL);
    *piece = "";
    *len = 0;
    if (id < 0 || (uint32_t)id >= t->n_tokens)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "token id %d is out of range (vocabulary of %u)", id, t->n_tokens);
    if (!piece_rendered(t, id, flags))
        return GLESC_OK;
    *len = t->piece_off[id + 1] - t->piece_off[id];
    if (*len)
        *piece = t->pieces + t->piece_off[id];
    return GLESC_OK;
}

/* The leading-space rule shared by detokenize and the decoder: with
 * add_space_prefix, the first piece of a sequence loses one leading space,
 * the space that tokenizing added. A BOS that renders as nothing is skipped
 * over; one rendered as "<s>" counts as the first piece (llama.cpp then
 * keeps the space: "<s> Hello"). */
typedef struct lead_state {
    bool active; /* still looking for the first text piece */
} lead_state;

static void piece_for_stream(const glesc_tokenizer *t, int32_t id, unsigned flags, lead_state *ls,
                             const char **s, size_t *n)
{
    glesc_token_to_piece(t, id, flags, s, n);
    if (!ls->active)
        return;
    if (id == t->bos && t->bos >= 0 && *n == 0)
        return; /* an unrendered BOS keeps the rule armed for the next piece */
    ls->active = false;
    if (*n && (*s)[0] == ' ') {
        (*s)++;
        (*n)--;
    }
}

/* llama.cpp's clean_spaces passes: " ?" " !" " ." " ," lose their space,
 * " ' " becomes "'", and " 's" " 'm" " 're" " 've" lose their space. */
static size_t clean_spaces(char *text, size_t total)
{
    if (total == 0)
        return 0;
    size_t n = 1;
    for (size_t i = 1; i < total; i++) {
        char x = text[i];
        if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
            n--;
        text[n++] = x;
    }
    total = n;
    n = 1;
    for (size_t i = 1; i < total; i++) {
        char x = text[i];
        if (x == '\'' && i + 1 < total && text[i - 1] == ' ' && text[i + 1] == ' ') {
            n--;
            text[++i] = '\0';
        }
        text[n++] = x;
    }
    total = n;
    n = 1;
    for (size_t i = 1; i < total; i++) {
        char x = text[i];
        if (text[i - 1] == ' ' && x == '\'' && i + 1 < total) {
            char x1 = text[i + 1];
            if (x1 == 's' || x1 == 'm')
                n--;
            else if (i + 2 < total) {
                char x2 = text[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e'))
                    n--;
            }
        }
        text[n++] = x;
    }
    return n;
}

GLESC_API glesc_status glesc_detokenize(const glesc_tokenizer *t, const int32_t *ids, size_t n,
                                        unsigned flags, char **text_out, size_t *len_out)
{
    core_err_reset(NULL);
    *text_out = NULL;
    *len_out = 0;
    if (!ids && n)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_detokenize: ids is NULL");
    sbuf b;
    sbuf_init(&b);
    lead_state ls = {t->add_space_prefix && !(flags & GLESC_DETOKENIZE_KEEP_LEADING_SPACE)};
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= t->n_tokens) {
            sbuf_free(&b);
            return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                "detokenize: id %d at position %zu is out of range (vocabulary "
                                "of %u)",
                                ids[i], i, t->n_tokens);
        }
        const char *s;
        size_t k;
        piece_for_stream(t, ids[i], flags, &ls, &s, &k);
        sbuf_appendn(&b, s, k);
    }
    size_t len = b.len;
    sbuf_appendc(&b, '\0'); /* makes sure there is a buffer, even for "" */
    if (b.oom) {
        sbuf_free(&b);
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "detokenize: out of memory");
    }
    if (t->clean_spaces && !(flags & GLESC_DETOKENIZE_NO_CLEANUP))
        len = clean_spaces(b.data, len);
    b.data[len] = '\0';
    *len_out = len;
    *text_out = b.data; /* ownership passes to the caller */
    return GLESC_OK;
}

GLESC_API void glesc_text_free(char *text)
{
    core_free(text);
}

/* ---- Streaming decoder ---- */

struct glesc_decoder {
    const glesc_tokenizer *tok;
    unsigned flags;
    lead_state lead;
    sbuf buf;  /* held bytes + the new piece */
    char *out; /* what the last call returned */
    size_t out_cap;
};

GLESC_API glesc_status glesc_decoder_create(const glesc_tokenizer *t, unsigned flags,
                                            glesc_decoder **out)
{
    core_err_reset(NULL);
    *out = NULL;
    if (!t)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "decoder: NULL tokenizer");
    glesc_decoder *d = core_calloc(1, sizeof *d);
    if (!d)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "decoder: out of memory");
    d->tok = t;
    d->flags = flags;
    sbuf_init(&d->buf);
    glesc_decoder_reset(d);
    *out = d;
    return GLESC_OK;
}

GLESC_API void glesc_decoder_destroy(glesc_decoder *d)
{
    if (!d)
        return;
    sbuf_free(&d->buf);
    core_free(d->out);
    core_free(d);
}

GLESC_API void glesc_decoder_reset(glesc_decoder *d)
{
    sbuf_reset(&d->buf);
    d->lead.active = d->tok->add_space_prefix && !(d->flags & GLESC_DETOKENIZE_KEEP_LEADING_SPACE);
}

/* How many bytes at the end of s[0..n) are the start of an incomplete but so
 * far valid UTF-8 sequence (0 when the end is complete or can never be). */
static size_t utf8_incomplete_tail(const unsigned char *s, size_t n)
{
    size_t back = 0;
    while (back < 3 && back < n && (s[n - 1 - back] & 0xc0) == 0x80)
        back++;
    if (back == n)
        return 0;
    unsigned char lead = s[n - 1 - back];
    size_t need;
    if (lead >= 0xc2 && lead <= 0xdf)
        need = 2;
    else if (lead >= 0xe0 && lead <= 0xef)
        need = 3;
    else if (lead >= 0xf0 && lead <= 0xf4)
        need = 4;
    else
        return 0;
    if (back + 1 >= need)
        return 0; /* complete (or over-long run of continuations: pass it on) */
    if (back >= 1) {
        /* The second byte's range for E0/ED/F0/F4 (overlongs, surrogates). */
        unsigned char c1 = s[n - back];
        if ((lead == 0xe0 && c1 < 0xa0) || (lead == 0xed && c1 > 0x9f) ||
            (lead == 0xf0 && c1 < 0x90) || (lead == 0xf4 && c1 > 0x8f))
            return 0;
    }
    return back + 1;
}

static glesc_status decoder_emit(glesc_decoder *d, size_t n, const char **text, size_t *len)
{
    if (n > d->out_cap) {
        char *o = core_realloc(d->out, n);
        if (!o)
            return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "decoder: out of memory");
        d->out = o;
        d->out_cap = n;
    }
    if (n)
        memcpy(d->out, d->buf.data, n);
    size_t rest = d->buf.len - n;
    if (n)
        memmove(d->buf.data, d->buf.data + n, rest);
    d->buf.len = rest;
    *text = n ? d->out : "";
    *len = n;
    return GLESC_OK;
}

GLESC_API glesc_status glesc_decoder_feed(glesc_decoder *d, int32_t id, const char **text,
                                          size_t *len)
{
    core_err_reset(NULL);
    *text = "";
    *len = 0;
    const glesc_tokenizer *t = d->tok;
    if (id < 0 || (uint32_t)id >= t->n_tokens)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "decoder: id %d is out of range (vocabulary of %u)", id, t->n_tokens);
    const char *s;
    size_t k;
    piece_for_stream(t, id, d->flags, &d->lead, &s, &k);
    sbuf_appendn(&d->buf, s, k);
    if (d->buf.oom)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "decoder: out of memory");
    size_t hold = utf8_incomplete_tail((const unsigned char *)d->buf.data, d->buf.len);
    return decoder_emit(d, d->buf.len - hold, text, len);
}

GLESC_API glesc_status glesc_decoder_flush(glesc_decoder *d, const char **text, size_t *len)
{
    core_err_reset(NULL);
    *text = "";
    *len = 0;
    return decoder_emit(d, d->buf.len, text, len);
}
