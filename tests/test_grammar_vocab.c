/*
 * test_grammar_vocab.c — grammar sampling over real vocabularies of
 * ../shared (skipped where it is absent): llama's SentencePiece (32,000
 * pieces with byte fallback) and GPT-2's byte-level BPE (50,257 tokens,
 * many of them partial UTF-8), where tokens carry several characters and
 * split characters. Random logits under many seeds must always give JSON
 * that parses and holds the schema's required keys with their types.
 */
#include <criterion/criterion.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "glesc_llm.h"
#include "test_util.h"

static const char *schema =
    "{\"type\": \"object\", \"properties\": {"
    " \"title\": {\"type\": \"string\", \"maxLength\": 24},"
    " \"year\": {\"type\": \"integer\"},"
    " \"genres\": {\"type\": \"array\", \"items\": {\"enum\": [\"drama\", \"comédie\", \"冒険\"]},"
    "  \"maxItems\": 3},"
    " \"rating\": {\"type\": [\"number\", \"null\"]}},"
    " \"required\": [\"title\", \"year\", \"genres\"]}";

static void vocab_json(const char *rel)
{
    TEST_REQUIRE_SHARED(path, rel);
    glesc_gguf *f;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_tokenizer *tok;
    cr_assert_eq(glesc_tokenizer_load(f, &tok), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_gguf_close(f);
    int32_t V = glesc_tokenizer_n_vocab(tok);
    float *l = malloc((size_t)V * sizeof *l);
    glesc_decoder *dec;
    cr_assert_eq(glesc_decoder_create(tok, 0, &dec), GLESC_OK);
    for (uint32_t seed = 1; seed <= 12; seed++) {
        glesc_sampler *s;
        glesc_sampler_params sp;
        glesc_sampler_params_init(&sp);
        sp.seed = seed;
        sp.temperature = 1.5f;
        cr_assert_eq(glesc_sampler_create(&sp, V, &s), GLESC_OK);
        cr_assert_eq(glesc_sampler_add_json_schema(s, tok, schema), GLESC_OK, "%s",
                     glesc_last_errmsg());
        char text[8192];
        size_t len = 0;
        bool ended = false;
        uint32_t x = seed * 2654435761u;
        glesc_decoder_reset(dec);
        for (int i = 0; i < 600 && !ended; i++) {
            for (int32_t t = 0; t < V; t++) {
                x = x * 1664525u + 1013904223u;
                l[t] = (float)(x >> 8) / (float)(1u << 24) * 12.0f - 6.0f;
            }
            int32_t id = glesc_sampler_sample(s, l);
            glesc_sampler_accept(s, id);
            if ((ended = glesc_tokenizer_is_eog(tok, id)))
                break;
            const char *piece;
            size_t n;
            cr_assert_eq(glesc_decoder_feed(dec, id, &piece, &n), GLESC_OK);
            cr_assert(len + n < sizeof text);
            memcpy(text + len, piece, n);
            len += n;
        }
        text[len] = 0;
        cr_expect(ended, "%s seed %u: no end in 600 tokens: %s", rel, seed, text);
        json_object *v = json_tokener_parse(text), *y;
        cr_expect(v, "%s seed %u: not JSON: %s", rel, seed, text);
        cr_expect(v && json_object_object_get_ex(v, "year", &y) &&
                      json_object_is_type(y, json_type_int) &&
                      json_object_object_get_ex(v, "title", &y) &&
                      json_object_is_type(y, json_type_string) &&
                      json_object_object_get_ex(v, "genres", &y) &&
                      json_object_is_type(y, json_type_array),
                  "%s seed %u: not valid: %s", rel, seed, text);
        json_object_put(v);
        glesc_sampler_destroy(s);
    }
    glesc_decoder_destroy(dec);
    free(l);
    glesc_tokenizer_destroy(tok);
    free(path);
}

Test(grammar_vocab, llama_spm_32k)
{
    vocab_json("models/vocab/ggml-vocab-llama-spm.gguf");
}

Test(grammar_vocab, gpt2_bpe_50k)
{
    vocab_json("models/vocab/ggml-vocab-gpt-2.gguf");
}
