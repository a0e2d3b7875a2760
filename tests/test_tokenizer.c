/*
 * test_tokenizer.c — the SentencePiece and BPE tokenizers, built through the
 * internal construction API: error messages that name the key and entry,
 * and every pre-tokenizer's regexes on a toy byte vocabulary.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "glesc_llm.h"
#include "llm/llm.h"
#include "test_util.h"

static int32_t *tokenize(const glesc_tokenizer *t, const char *s, size_t len, unsigned flags,
                         size_t *n)
{
    int32_t *ids = NULL;
    glesc_status st = glesc_tokenize_alloc(t, s, len, flags, &ids, n);
    cr_assert_eq(st, GLESC_OK, "tokenize: %s", glesc_last_errmsg());
    return ids;
}

static char *detokenize(const glesc_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                        size_t *len)
{
    char *s = NULL;
    glesc_status st = glesc_detokenize(t, ids, n, flags, &s, len);
    cr_assert_eq(st, GLESC_OK, "detokenize: %s", glesc_last_errmsg());
    return s;
}

TestSuite(tokenizer);

/* ---- Errors and allocation failure ---- */

Test(tokenizer, errors_name_the_key)
{
    glesc_tokenizer *t = NULL;
    cr_assert_eq(tok_create(GLESC_TOKENIZER_BPE, "no-such-pre", 11, 4, &t),
                 GLESC_ERROR_UNSUPPORTED);
    cr_expect(strstr(glesc_last_errmsg(), "tokenizer.ggml.pre") != NULL, "%s", glesc_last_errmsg());
    cr_assert_eq(tok_create(GLESC_TOKENIZER_BPE, "gpt-2", 5, 4, &t), GLESC_OK);
    const char *toks[] = {"a", "b", "ab", "a"};
    for (uint32_t i = 0; i < 3; i++)
        cr_assert_eq(tok_set_token(t, i, toks[i], strlen(toks[i]), 0.0f, 1), GLESC_OK);
    cr_expect_eq(tok_set_token(t, 3, "a", 1, 0.0f, 1), GLESC_ERROR_FORMAT);
    cr_expect(strstr(glesc_last_errmsg(), "tokenizer.ggml.tokens entry 3: duplicate") != NULL, "%s",
              glesc_last_errmsg());
    cr_expect_eq(tok_add_merge(t, 0, "a b", 3), GLESC_OK);
    cr_expect_eq(tok_add_merge(t, 17, "ab", 2), GLESC_ERROR_FORMAT);
    cr_expect(strstr(glesc_last_errmsg(), "tokenizer.ggml.merges entry 17:") != NULL, "%s",
              glesc_last_errmsg());
    glesc_tokenizer_destroy(t);
    glesc_tokenizer_destroy(NULL);
}

/* Every pre-tokenizer's regexes compile and split text without trouble, on
 * a toy vocabulary of gpt-2's 256 byte characters and one merge. */
Test(tokenizer, every_pre_tokenizer)
{
    static const char *const names[] = {
        "default",   "gpt-2",     "trillion",     "llama3",         "llama-bpe",   "dbrx",
        "qwen2",     "stablelm2", "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon",
        "starcoder", "command-r", "bloom",        "poro-chat",      "viking",      "tekken",
        "gpt-4o",    "smollm",    "olmo"};
    const char *text = "Hello, y'all! How're you 😁 ?我想在apple工作1314151天～\n\n  \t x "
                       "\xe3\x80\x80 Ὗώ \xff\xfe end   ";
    for (size_t i = 0; i < CORE_ARRAY_LEN(names); i++) {
        glesc_tokenizer *t = NULL;
        cr_assert_eq(tok_create(GLESC_TOKENIZER_BPE, names[i], strlen(names[i]), 256, &t), GLESC_OK,
                     "%s: %s", names[i], glesc_last_errmsg());
        for (uint32_t b = 0; b < 256; b++) {
            char c[2];
            size_t k = tok_byte_to_utf8((uint8_t)b, c);
            cr_assert_eq(tok_set_token(t, b, c, k, 0.0f, 1), GLESC_OK);
        }
        cr_assert_eq(tok_add_merge(t, 0, "H e", 3), GLESC_OK);
        cr_assert_eq(tok_finish(t, NULL, 0), GLESC_OK, "%s: %s", names[i], glesc_last_errmsg());
        size_t n;
        int32_t *ids = tokenize(t, text, strlen(text), 0, &n);
        size_t dl;
        char *back = detokenize(t, ids, n, 0, &dl);
        /* Invalid bytes become U+FFFD; everything else comes back. */
        cr_expect(strstr(back, "Hello, y'all!") == back && strstr(back, " end   ") != NULL,
                  "%s: '%s'", names[i], back);
        free(back);
        glesc_tokens_free(ids);
        glesc_tokenizer_destroy(t);
    }
}

