/*
 * test_tokenizer.c — the SentencePiece and BPE tokenizers against llama.cpp's
 * test vectors (../shared/models/vocab/X.gguf.inp / .out: tokenize without
 * BOS and without parsing special tokens), the models' expected prompts and
 * generations (../shared/reference/expected/NAME.json), round trips through
 * detokenize and the streaming decoder, hostile input (random and invalid
 * UTF-8, 100,000 repeated characters, empty text), several threads on one
 * tokenizer, error messages, and tools/gguf-run --tokenize.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "glesc_gguf.h"
#include "glesc_llm.h"
#include "llm/tokenizer/tokenizer.h"
#include "test_gguf_edit.h"
#include "test_util.h"

/* ---- helpers ---- */

static glesc_tokenizer *load_tok(const char *path)
{
    glesc_gguf *f = NULL;
    glesc_status st = glesc_gguf_open(path, &f);
    cr_assert_eq(st, GLESC_OK, "open %s: %s", path, glesc_last_errmsg());
    glesc_tokenizer *t = NULL;
    st = glesc_tokenizer_load(f, &t);
    cr_assert_eq(st, GLESC_OK, "tokenizer of %s: %s", path, glesc_last_errmsg());
    glesc_gguf_close(f);
    return t;
}

/* Loads ../shared/rel or skips the test. */
#define LOAD_OR_SKIP(var, rel)                                                                     \
    glesc_tokenizer *var;                                                                          \
    do {                                                                                           \
        TEST_REQUIRE_SHARED(path_, rel);                                                           \
        var = load_tok(path_);                                                                     \
        free(path_);                                                                               \
    } while (0)

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

static bool valid_utf8(const char *s, size_t n);

/* Detokenizes through the streaming decoder, one id at a time. With
 * check_chunks, every chunk the decoder hands out must be valid UTF-8 by
 * itself (true whenever the whole text is). */
static char *stream_decode_checked(const glesc_tokenizer *t, const int32_t *ids, size_t n,
                                   unsigned flags, bool check_chunks, size_t *len)
{
    glesc_decoder *d = NULL;
    cr_assert_eq(glesc_decoder_create(t, flags, &d), GLESC_OK);
    sbuf b;
    sbuf_init(&b);
    for (size_t i = 0; i < n; i++) {
        const char *s;
        size_t k;
        cr_assert_eq(glesc_decoder_feed(d, ids[i], &s, &k), GLESC_OK);
        if (check_chunks)
            cr_expect(valid_utf8(s, k), "decoder handed out a partial character at id %zu", i);
        sbuf_appendn(&b, s, k);
    }
    const char *s;
    size_t k;
    cr_assert_eq(glesc_decoder_flush(d, &s, &k), GLESC_OK);
    sbuf_appendn(&b, s, k);
    glesc_decoder_destroy(d);
    *len = b.len;
    sbuf_appendc(&b, '\0');
    return sbuf_take(&b);
}

static char *stream_decode(const glesc_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                           size_t *len)
{
    return stream_decode_checked(t, ids, n, flags, false, len);
}

static void ids_to_str(const int32_t *ids, size_t n, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && o + 16 < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%d", i ? " " : "", ids[i]);
    if (o + 16 >= cap)
        snprintf(buf + o, cap - o, " ...");
}

/* Printable form of a test string (escapes control bytes). */
static void show(const char *s, size_t n, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            o += (size_t)snprintf(buf + o, cap - o, "\\n");
        else if (c == '\t')
            o += (size_t)snprintf(buf + o, cap - o, "\\t");
        else if (c < 0x20)
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    buf[o] = '\0';
}

/* llama.cpp's test-tokenizer-0 on one vocabulary: every string of X.gguf.inp
 * tokenized (no BOS, no special parsing) must give X.gguf.out's line, and
 * detokenize must give the string back. */
static void run_vectors(const char *vocab)
{
    char rel[256], rel_inp[300], rel_out[300];
    snprintf(rel, sizeof rel, "models/vocab/ggml-vocab-%s.gguf", vocab);
    snprintf(rel_inp, sizeof rel_inp, "%s.inp", rel);
    snprintf(rel_out, sizeof rel_out, "%s.out", rel);
    TEST_REQUIRE_SHARED(inp_path, rel_inp);
    TEST_REQUIRE_SHARED(out_path, rel_out);
    char *gguf_path = test_shared_path(rel);
    if (!gguf_path) {
        free(inp_path);
        free(out_path);
        cr_skip_test("%s: test vectors present but ../shared/%s is not: skipping", vocab, rel);
    }
    glesc_tokenizer *t = load_tok(gguf_path);
    size_t inp_len, out_len;
    char *inp = test_read_file(inp_path, &inp_len);
    char *out = test_read_file(out_path, &out_len);
    cr_assert(inp && out);

    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof sep - 1;
    int total = 0, passed = 0, rt_passed = 0, failures = 0;
    char report[8192];
    size_t rep = 0;
    report[0] = '\0';
    size_t pos = 0;
    char *line = out;
    while (pos < inp_len) {
        const char *s = inp + pos;
        const char *next = NULL;
        for (size_t k = pos; k + sep_len <= inp_len; k++)
            if (memcmp(inp + k, sep, sep_len) == 0) {
                next = inp + k;
                break;
            }
        size_t n = next ? (size_t)(next - s) : inp_len - pos;
        pos = next ? (size_t)(next - inp) + sep_len : inp_len;

        /* Expected ids: one line of out. */
        cr_assert(line < out + out_len, "%s: .out has too few lines", vocab);
        char *eol = strchr(line, '\n');
        if (eol)
            *eol = '\0';
        int32_t want[1024];
        size_t n_want = 0;
        for (char *p = line; *p;) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) {
                p++;
                continue;
            }
            cr_assert_lt(n_want, CORE_ARRAY_LEN(want));
            want[n_want++] = (int32_t)v;
            p = end;
        }
        line = eol ? eol + 1 : line + strlen(line);

        size_t n_got;
        int32_t *got = tokenize(t, s, n, 0, &n_got);
        bool ok = n_got == n_want && (n_got == 0 || memcmp(got, want, n_got * sizeof *got) == 0);
        total++;
        passed += ok;
        size_t dl;
        char *back = detokenize(t, got, n_got, GLESC_DETOKENIZE_NO_CLEANUP, &dl);
        size_t sl;
        char *streamed = stream_decode(t, got, n_got, 0, &sl);
        bool rt = dl == n && memcmp(back, s, n) == 0 && sl == dl && memcmp(streamed, back, dl) == 0;
        rt_passed += rt;
        if ((!ok || !rt) && failures < 4 && rep < sizeof report - 1024) {
            char a[256], b[512], c[512], d[256];
            show(s, n, a, sizeof a);
            ids_to_str(want, n_want, b, sizeof b);
            ids_to_str(got, n_got, c, sizeof c);
            show(back, dl, d, sizeof d);
            rep += (size_t)snprintf(report + rep, sizeof report - rep,
                                    "\n  input '%s'\n    expected [%s]\n    got      [%s]\n"
                                    "    detokenized '%s'",
                                    a, b, c, d);
            failures++;
        }
        free(back);
        free(streamed);
        glesc_tokens_free(got);
    }
    printf("tokenizer vectors %-16s (%s, pre %s): tokenize %d/%d, round trip %d/%d\n", vocab,
           glesc_tokenizer_get_kind(t) == GLESC_TOKENIZER_SPM ? "SPM" : "BPE",
           glesc_tokenizer_pre_name(t), passed, total, rt_passed, total);
    fflush(stdout);
    cr_expect_gt(total, 40, "%s: only %d test strings", vocab, total);
    cr_expect_eq(passed, total, "%s: %d/%d strings tokenize as expected; first mismatches:%s",
                 vocab, passed, total, report);
    cr_expect_eq(rt_passed, total, "%s: %d/%d strings survive detokenize; first failures:%s", vocab,
                 rt_passed, total, report);
    free(inp);
    free(out);
    free(inp_path);
    free(out_path);
    free(gguf_path);
    glesc_tokenizer_destroy(t);
}

TestSuite(tokenizer);

Test(tokenizer, vectors_llama_spm)
{
    run_vectors("llama-spm");
}

Test(tokenizer, vectors_phi_3)
{
    run_vectors("phi-3");
}

Test(tokenizer, vectors_gpt_2)
{
    run_vectors("gpt-2");
}

Test(tokenizer, vectors_deepseek_coder)
{
    run_vectors("deepseek-coder");
}

Test(tokenizer, vectors_deepseek_llm)
{
    run_vectors("deepseek-llm");
}

Test(tokenizer, vectors_llama_bpe)
{
    run_vectors("llama-bpe");
}

Test(tokenizer, vectors_qwen2)
{
    run_vectors("qwen2");
}

/* ---- The models' expected prompts and generations ---- */

/* Position just after `"key":` (spaces allowed) and then the opening
 * character open, at or after p; NULL when absent. */
static const char *json_find(const char *p, const char *key, char open)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    while ((p = strstr(p, pat))) {
        const char *s = p + strlen(pat);
        while (*s == ' ')
            s++;
        if (*s == ':') {
            s++;
            while (*s == ' ')
                s++;
            if (*s == open)
                return s + 1;
        }
        p += strlen(pat);
    }
    return NULL;
}

/* Parses the number list after `"key": [` at or after *p; returns count. */
static size_t json_ids(const char **p, const char *key, int32_t *ids, size_t cap)
{
    const char *s = json_find(*p, key, '[');
    cr_assert(s, "no %s", key);
    size_t n = 0;
    while (*s && *s != ']') {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) {
            s++;
            continue;
        }
        cr_assert_lt(n, cap);
        ids[n++] = (int32_t)v;
        s = end;
    }
    *p = s;
    return n;
}

static void put_utf8(sbuf *b, uint32_t cp)
{
    char o[4];
    size_t n;
    if (cp < 0x80) {
        o[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        o[0] = (char)(0xf0 | (cp >> 18));
        o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    sbuf_appendn(b, o, n);
}

/* The JSON string after `"key": "` at or after *p, unescaped (caller frees). */
static char *json_str(const char **p, const char *key)
{
    const char *s = json_find(*p, key, '"');
    cr_assert(s, "no %s", key);
    sbuf b;
    sbuf_init(&b);
    while (*s && *s != '"') {
        if (*s != '\\') {
            sbuf_appendc(&b, *s++);
            continue;
        }
        s++;
        char c = *s++;
        switch (c) {
        case 'n':
            sbuf_appendc(&b, '\n');
            break;
        case 't':
            sbuf_appendc(&b, '\t');
            break;
        case 'r':
            sbuf_appendc(&b, '\r');
            break;
        case 'b':
            sbuf_appendc(&b, '\b');
            break;
        case 'f':
            sbuf_appendc(&b, '\f');
            break;
        case 'u': {
            uint32_t cp = (uint32_t)strtoul((char[5]){s[0], s[1], s[2], s[3], 0}, NULL, 16);
            s += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && s[0] == '\\' && s[1] == 'u') {
                uint32_t lo = (uint32_t)strtoul((char[5]){s[2], s[3], s[4], s[5], 0}, NULL, 16);
                s += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            put_utf8(&b, cp);
            break;
        }
        default:
            sbuf_appendc(&b, c);
        }
    }
    *p = s;
    sbuf_appendc(&b, '\0');
    return sbuf_take(&b);
}

/* For each prompt of reference/expected/<name>.json: tokenizing the prompt
 * with BOS gives prompt_ids; decoding generated_ids as a continuation gives
 * generated_text (when check_text). */
static void run_expected(const char *model_rel, const char *json_rel, bool check_text)
{
    TEST_REQUIRE_SHARED(json_path, json_rel);
    LOAD_OR_SKIP(t, model_rel);
    size_t jl;
    char *json = test_read_file(json_path, &jl);
    cr_assert(json);
    const char *p = json_find(json, "prompts", '[');
    cr_assert(p);
    int n_prompts = 0;
    while (json_find(p, "prompt", '"')) {
        char *prompt = json_str(&p, "prompt");
        int32_t want[256], gen[1024];
        size_t n_want = json_ids(&p, "prompt_ids", want, CORE_ARRAY_LEN(want));
        size_t n_gen = json_ids(&p, "generated_ids", gen, CORE_ARRAY_LEN(gen));
        char *text = json_str(&p, "generated_text");
        size_t n_got;
        int32_t *got = tokenize(t, prompt, strlen(prompt), GLESC_TOKENIZE_ADD_SPECIAL, &n_got);
        char a[512], b[512];
        ids_to_str(want, n_want, a, sizeof a);
        ids_to_str(got, n_got, b, sizeof b);
        cr_expect(n_got == n_want && memcmp(got, want, n_got * sizeof *got) == 0,
                  "%s: '%s' → [%s], expected [%s]", model_rel, prompt, b, a);
        size_t dl;
        char *dec = stream_decode(t, gen, n_gen, GLESC_DETOKENIZE_KEEP_LEADING_SPACE, &dl);
        if (check_text)
            cr_expect_str_eq(dec, text, "%s: generated ids decode to '%s', expected '%s'",
                             model_rel, dec, text);
        /* And the prompt ids decode back to the prompt. */
        size_t pl;
        char *back = detokenize(t, want, n_want, 0, &pl);
        cr_expect_str_eq(back, prompt, "%s: prompt ids decode to '%s'", model_rel, back);
        printf("tokenizer expected %-28s '%s' → [%s] %s\n", model_rel, prompt, b,
               n_got == n_want && memcmp(got, want, n_got * sizeof *got) == 0 ? "ok" : "MISMATCH");
        free(back);
        free(dec);
        free(text);
        free(prompt);
        glesc_tokens_free(got);
        n_prompts++;
    }
    fflush(stdout);
    cr_expect_gt(n_prompts, 0);
    free(json);
    free(json_path);
    glesc_tokenizer_destroy(t);
}

Test(tokenizer, expected_stories260k)
{
    run_expected("models/stories260K.gguf", "reference/expected/stories260K.json", true);
}

Test(tokenizer, expected_tinystories_656k)
{
    run_expected("models/TinyStories-656K-Q8_0.gguf",
                 "reference/expected/TinyStories-656K-Q8_0.json", true);
}

Test(tokenizer, expected_llama2_tiny)
{
    /* Random weights: the generated text is noise, partly not UTF-8. */
    run_expected("models/llama-2-tiny-random.gguf", "reference/expected/llama-2-tiny-random.json",
                 false);
}

/* ---- Special tokens, flags, buffers ---- */

Test(tokenizer, special_ids_and_flags)
{
    LOAD_OR_SKIP(t, "models/vocab/ggml-vocab-llama-spm.gguf");
    cr_expect_eq(glesc_tokenizer_n_vocab(t), 32000);
    cr_expect_eq(glesc_tokenizer_bos(t), 1);
    cr_expect_eq(glesc_tokenizer_eos(t), 2);
    cr_expect_eq(glesc_tokenizer_unk(t), 0);
    cr_expect_eq(glesc_tokenizer_nl(t), 13); /* <0x0A> */
    cr_expect(glesc_tokenizer_adds_bos(t));
    cr_expect(!glesc_tokenizer_adds_eos(t));
    cr_expect(glesc_tokenizer_is_eog(t, 2));
    cr_expect(!glesc_tokenizer_is_eog(t, 1));
    cr_expect(!glesc_tokenizer_is_eog(t, -5));
    cr_expect_eq(glesc_tokenizer_token_type(t, 1), GLESC_TOKEN_TYPE_CONTROL);
    cr_expect_eq(glesc_tokenizer_token_type(t, 3), GLESC_TOKEN_TYPE_BYTE);
    cr_expect_eq(glesc_tokenizer_find(t, "<s>", 3), 1);

    /* Empty text: nothing, or BOS alone with add_special. */
    size_t n;
    int32_t *ids = tokenize(t, NULL, 0, 0, &n);
    cr_expect_eq(n, 0);
    cr_expect_null(ids);
    ids = tokenize(t, "", 0, GLESC_TOKENIZE_ADD_SPECIAL, &n);
    cr_expect(n == 1 && ids[0] == 1);
    glesc_tokens_free(ids);

    /* Control tokens in the text: ids with parse_special, text without. */
    const char *s = "<s>Hi</s>";
    ids = tokenize(t, s, strlen(s), GLESC_TOKENIZE_PARSE_SPECIAL, &n);
    cr_expect(n >= 3 && ids[0] == 1 && ids[n - 1] == 2, "parse_special: %zu ids", n);
    glesc_tokens_free(ids);
    ids = tokenize(t, s, strlen(s), 0, &n);
    for (size_t i = 0; i < n; i++)
        cr_expect(ids[i] != 1 && ids[i] != 2, "special id without parse_special");
    glesc_tokens_free(ids);

    /* Caller buffer: too small → LIMIT with the count needed. */
    int32_t buf[2];
    glesc_status st = glesc_tokenize(t, "Hello world again", 17, GLESC_TOKENIZE_ADD_SPECIAL, buf,
                                     CORE_ARRAY_LEN(buf), &n);
    cr_expect_eq(st, GLESC_ERROR_LIMIT);
    cr_expect_gt(n, 2);
    int32_t big[64];
    cr_expect_eq(
        glesc_tokenize(t, "Hello world again", 17, GLESC_TOKENIZE_ADD_SPECIAL, big, 64, &n),
        GLESC_OK);
    cr_expect_eq(big[0], 1);

    /* Pieces: BOS renders only with the special flag; ▁ is a space. */
    const char *piece;
    size_t pl;
    cr_expect_eq(glesc_token_to_piece(t, 1, 0, &piece, &pl), GLESC_OK);
    cr_expect_eq(pl, 0);
    cr_expect_eq(glesc_token_to_piece(t, 1, GLESC_DETOKENIZE_SPECIAL, &piece, &pl), GLESC_OK);
    cr_expect(pl == 3 && memcmp(piece, "<s>", 3) == 0);
    int32_t hello = glesc_tokenizer_find(t, "\xe2\x96\x81Hello", 8);
    cr_assert_geq(hello, 0);
    cr_expect_eq(glesc_token_to_piece(t, hello, 0, &piece, &pl), GLESC_OK);
    cr_expect(pl == 6 && memcmp(piece, " Hello", 6) == 0);
    cr_expect_eq(glesc_token_to_piece(t, 32000, 0, &piece, &pl), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect(strstr(glesc_last_errmsg(), "32000") != NULL);

    /* Leading space: removed after BOS, kept with the flag. */
    int32_t seq[] = {1, hello};
    char *txt = detokenize(t, seq, 2, 0, &pl);
    cr_expect_str_eq(txt, "Hello");
    free(txt);
    txt = detokenize(t, seq, 2, GLESC_DETOKENIZE_KEEP_LEADING_SPACE, &pl);
    cr_expect_str_eq(txt, " Hello");
    free(txt);
    txt = detokenize(t, seq, 2, GLESC_DETOKENIZE_SPECIAL, &pl);
    cr_expect_str_eq(txt, "<s> Hello");
    free(txt);
    glesc_tokenizer_destroy(t);
}

Test(tokenizer, bpe_special_and_cleanup)
{
    LOAD_OR_SKIP(t, "models/vocab/ggml-vocab-gpt-2.gguf");
    cr_expect_eq(glesc_tokenizer_bos(t), 50256);
    cr_expect_eq(glesc_tokenizer_eos(t), 50256);
    cr_expect_eq(glesc_tokenizer_eot(t), 50256);
    cr_expect_eq(glesc_tokenizer_unk(t), -1);
    cr_expect(!glesc_tokenizer_adds_bos(t));
    cr_expect_eq(glesc_tokenizer_nl(t), 198);
    const char *s = "Hi<|endoftext|>there";
    size_t n;
    int32_t *ids = tokenize(t, s, strlen(s), GLESC_TOKENIZE_PARSE_SPECIAL, &n);
    bool found = false;
    for (size_t i = 0; i < n; i++)
        found |= ids[i] == 50256;
    cr_expect(found, "<|endoftext|> not parsed");
    glesc_tokens_free(ids);
    ids = tokenize(t, s, strlen(s), 0, &n);
    for (size_t i = 0; i < n; i++)
        cr_expect_neq(ids[i], 50256);
    /* Round trip without special rendering, special text included as text. */
    size_t dl;
    char *back = detokenize(t, ids, n, 0, &dl);
    cr_expect_str_eq(back, s);
    free(back);
    glesc_tokens_free(ids);
    /* gpt-2 cleans " ," and " 's" in whole-sequence detokenize. */
    s = "a , b 's";
    ids = tokenize(t, s, strlen(s), 0, &n);
    back = detokenize(t, ids, n, 0, &dl);
    cr_expect_str_eq(back, "a, b's");
    free(back);
    back = detokenize(t, ids, n, GLESC_DETOKENIZE_NO_CLEANUP, &dl);
    cr_expect_str_eq(back, s);
    free(back);
    glesc_tokens_free(ids);
    glesc_tokenizer_destroy(t);
}

/* User-defined tokens split the text even without parse_special, unless
 * llama.cpp made them control (FIM texts): deepseek-coder has both kinds. */
Test(tokenizer, user_defined_tokens)
{
    LOAD_OR_SKIP(t, "models/vocab/ggml-vocab-deepseek-coder.gguf");
    const char *fim = "<\xef\xbd\x9c"
                      "fim\xe2\x96\x81"
                      "begin\xef\xbd\x9c>";
    int32_t fim_id = glesc_tokenizer_find(t, fim, strlen(fim));
    int32_t o_id = glesc_tokenizer_find(t, "\xc3\xb5", 2); /* õ, user-defined */
    cr_assert(fim_id == 32016 && o_id == 32000, "%d %d", fim_id, o_id);
    char text[128];
    snprintf(text, sizeof text,
             "a%sb\xc3\xb5"
             "c",
             fim);
    size_t n;
    int32_t *ids = tokenize(t, text, strlen(text), 0, &n);
    bool has_fim = false, has_o = false;
    for (size_t i = 0; i < n; i++) {
        has_fim |= ids[i] == fim_id;
        has_o |= ids[i] == o_id;
    }
    cr_expect(!has_fim && has_o, "plain: fim %d, õ %d", has_fim, has_o);
    glesc_tokens_free(ids);
    ids = tokenize(t, text, strlen(text), GLESC_TOKENIZE_PARSE_SPECIAL, &n);
    has_fim = has_o = false;
    for (size_t i = 0; i < n; i++) {
        has_fim |= ids[i] == fim_id;
        has_o |= ids[i] == o_id;
    }
    cr_expect(has_fim && has_o, "parse_special: fim %d, õ %d", has_fim, has_o);
    glesc_tokens_free(ids);
    glesc_tokenizer_destroy(t);
}

/* phi-3's vocabulary: its chat markers (<|assistant|>, <|end|>, ...) are
 * CONTROL and match only when special tokens are parsed; its one token
 * stored as USER_DEFINED, </s> (id 2), is an end-of-generation text that
 * llama.cpp's vocabulary loader turns into a control token ("control-looking
 * token ... its type will be overridden"), so it does not match in plain
 * text either and ends generation. (The plain-text rule for user-defined
 * tokens: user_defined_tokens above.) */
static bool has_id(const glesc_tokenizer *t, const char *text, unsigned flags, int32_t id)
{
    size_t n;
    int32_t *ids = tokenize(t, text, strlen(text), flags, &n);
    bool found = false;
    for (size_t i = 0; i < n; i++)
        found |= ids[i] == id;
    glesc_tokens_free(ids);
    return found;
}

Test(tokenizer, phi3_special_tokens)
{
    LOAD_OR_SKIP(t, "models/vocab/ggml-vocab-phi-3.gguf");
    int n_special = 0;
    for (int32_t id = 0; id < glesc_tokenizer_n_vocab(t); id++) {
        glesc_token_type ty = glesc_tokenizer_token_type(t, id);
        if (ty != GLESC_TOKEN_TYPE_USER_DEFINED && ty != GLESC_TOKEN_TYPE_CONTROL)
            continue;
        size_t len;
        const char *piece = glesc_tokenizer_token_text(t, id, &len);
        char text[96];
        snprintf(text, sizeof text, "Hi%.*sthere", (int)len, piece);
        cr_expect(!has_id(t, text, 0, id), "token %d %.*s matched in plain text", (int)id, (int)len,
                  piece);
        cr_expect(has_id(t, text, GLESC_TOKENIZE_PARSE_SPECIAL, id),
                  "token %d %.*s not matched with parse_special", (int)id, (int)len, piece);
        n_special++;
    }
    cr_expect_eq(n_special, 14, "13 control tokens and </s>");
    int32_t end = glesc_tokenizer_find(t, "</s>", 4);
    cr_assert_eq(end, 2);
    cr_expect_eq(glesc_tokenizer_token_type(t, end), GLESC_TOKEN_TYPE_USER_DEFINED, "as stored");
    cr_expect(glesc_tokenizer_is_eog(t, end));
    cr_expect(glesc_tokenizer_is_eog(t, glesc_tokenizer_find(t, "<|end|>", 7)));
    glesc_tokenizer_destroy(t);
}

/* tokenizer.ggml.add_bos_token and add_space_prefix as the file says
 * (Gemma's GGUFs: BOS, no space prefix; Qwen's: no BOS): stories260K's
 * SentencePiece vocabulary with each key rewritten. */
static glesc_tokenizer *edited_vocab(const char *key, bool value, char **path_out)
{
    char *src = test_shared_path("models/stories260K.gguf");
    if (!src)
        return NULL;
    char *dir = test_tmpdir();
    size_t size;
    void *bytes = test_read_file(src, &size);
    cr_assert(bytes, "reading %s", src);
    char *path = malloc(strlen(dir) + 16);
    sprintf(path, "%s/v.gguf", dir);
    FILE *f = fopen(path, "wb");
    cr_assert(f && fwrite(bytes, 1, size, f) == size && !fclose(f), "writing %s", path);
    uint8_t v = value;
    test_gguf_rewrite(path,
                      &(test_gguf_edit){.key = key, .key_type = GLESC_GGUF_BOOL, .key_value = &v});
    glesc_tokenizer *t = load_tok(path);
    free(bytes);
    free(src);
    free(dir);
    *path_out = path;
    return t;
}

static void edited_vocab_free(glesc_tokenizer *t, char *path)
{
    glesc_tokenizer_destroy(t);
    unlink(path);
    *strrchr(path, '/') = 0;
    rmdir(path);
    free(path);
}

Test(tokenizer, add_bos_and_space_prefix_keys_are_honoured)
{
    TEST_REQUIRE_SHARED(plain_path, "models/stories260K.gguf");
    glesc_tokenizer *plain = load_tok(plain_path);
    free(plain_path);
    const char *text = "Hello world";
    size_t n0, n1;
    int32_t *a = tokenize(plain, text, strlen(text), GLESC_TOKENIZE_ADD_SPECIAL, &n0);
    cr_assert(glesc_tokenizer_adds_bos(plain) && n0 > 1 && a[0] == glesc_tokenizer_bos(plain));

    char *path;
    glesc_tokenizer *t = edited_vocab("tokenizer.ggml.add_bos_token", false, &path);
    cr_expect(!glesc_tokenizer_adds_bos(t));
    int32_t *b = tokenize(t, text, strlen(text), GLESC_TOKENIZE_ADD_SPECIAL, &n1);
    cr_expect_eq(n1, n0 - 1, "no BOS: %zu tokens, %zu with it", n1, n0);
    cr_expect(n1 > 0 && b[0] != glesc_tokenizer_bos(t));
    glesc_tokens_free(b);
    edited_vocab_free(t, path);

    /* Without the space prefix the first word is not "▁Hello": the
     * SentencePiece pieces differ from the default's, and decoding keeps
     * the text as it was (no leading space to strip). */
    t = edited_vocab("tokenizer.ggml.add_space_prefix", false, &path);
    b = tokenize(t, text, strlen(text), 0, &n1);
    size_t np;
    int32_t *c = tokenize(plain, text, strlen(text), 0, &np);
    bool same = n1 == np && !memcmp(b, c, n1 * sizeof *b);
    cr_expect(!same, "add_space_prefix false tokenized as the default");
    size_t len;
    const char *first = glesc_tokenizer_token_text(t, b[0], &len);
    cr_expect(len < 3 || memcmp(first, "\xe2\x96\x81", 3), "the first piece starts with U+2581");
    char *back = detokenize(t, b, n1, 0, &len);
    cr_expect_str_eq(back, text);
    free(back);
    glesc_tokens_free(b);
    glesc_tokens_free(c);
    glesc_tokens_free(a);
    edited_vocab_free(t, path);
    glesc_tokenizer_destroy(plain);
}

/* ---- Streaming decoder ---- */

Test(tokenizer, decoder_holds_partial_utf8)
{
    LOAD_OR_SKIP(t, "models/stories260K.gguf");
    /* stories260K has few multi-byte pieces: these characters become byte
     * tokens, fed one by one. */
    const char *s = "\xc3\xa9\xf0\x9f\xa6\x99!"; /* é🦙! */
    size_t n;
    int32_t *ids = tokenize(t, s, strlen(s), 0, &n);
    glesc_decoder *d;
    cr_assert_eq(glesc_decoder_create(t, 0, &d), GLESC_OK);
    sbuf b;
    sbuf_init(&b);
    int emits = 0;
    for (size_t i = 0; i < n; i++) {
        const char *o;
        size_t k;
        cr_assert_eq(glesc_decoder_feed(d, ids[i], &o, &k), GLESC_OK);
        if (k) {
            emits++;
            /* Whatever comes out is complete UTF-8. */
            cr_expect(!((unsigned char)o[k - 1] >= 0xc0), "emitted a lead byte last");
        }
        sbuf_appendn(&b, o, k);
    }
    const char *o;
    size_t k;
    glesc_decoder_flush(d, &o, &k);
    cr_expect_eq(k, 0);
    sbuf_appendc(&b, '\0');
    cr_expect_str_eq(b.data, s);
    cr_expect_leq(emits, 4);
    /* An id out of range leaves the decoder as it was. */
    cr_expect_eq(glesc_decoder_feed(d, 99999, &o, &k), GLESC_ERROR_INVALID_ARGUMENT);
    /* A lone lead byte at the end comes out on flush. */
    glesc_decoder_reset(d);
    int32_t lead = glesc_tokenizer_find(t, "<0xE2>", 6);
    cr_assert_geq(lead, 0);
    glesc_decoder_feed(d, lead, &o, &k);
    cr_expect_eq(k, 0);
    glesc_decoder_flush(d, &o, &k);
    cr_expect(k == 1 && (unsigned char)o[0] == 0xe2);
    glesc_decoder_destroy(d);
    glesc_decoder_destroy(NULL);
    sbuf_free(&b);
    glesc_tokens_free(ids);
    glesc_tokenizer_destroy(t);
}

/* ---- Hostile input ---- */

/* Random text: ASCII, multi-byte characters, and (when raw) any bytes. */
static size_t random_text(core_rng *rng, char *buf, size_t cap, bool raw)
{
    static const char *const pieces[] = {" ",
                                         "  ",
                                         "\n",
                                         "\t",
                                         "a",
                                         "Z",
                                         "9",
                                         "'s",
                                         ".",
                                         "é",
                                         "ß",
                                         "Ж",
                                         "中",
                                         "文",
                                         "🦙",
                                         "😀",
                                         "\xe2\x80\x8d",
                                         "\xc2\xa0",
                                         "\xe3\x80\x80",
                                         "<s>",
                                         "</s>",
                                         "<|endoftext|>",
                                         "the",
                                         " the",
                                         "1234",
                                         "!!",
                                         "\r\n",
                                         "ſ",
                                         "Ω"};
    size_t n = core_rng_next(rng) % 40, o = 0;
    for (size_t i = 0; i < n; i++) {
        if (raw && core_rng_next(rng) % 4 == 0) {
            if (o + 1 < cap)
                buf[o++] = (char)(core_rng_next(rng) & 0xff);
            continue;
        }
        const char *p = pieces[core_rng_next(rng) % CORE_ARRAY_LEN(pieces)];
        size_t k = strlen(p);
        if (o + k < cap) {
            memcpy(buf + o, p, k);
            o += k;
        }
    }
    return o;
}

static bool valid_utf8(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        size_t k = c < 0x80                 ? 1
                   : c >= 0xc2 && c <= 0xdf ? 2
                   : c >= 0xe0 && c <= 0xef ? 3
                   : c >= 0xf0 && c <= 0xf4 ? 4
                                            : 0;
        if (!k || i + k > n)
            return false;
        for (size_t j = 1; j < k; j++)
            if ((u[i + j] & 0xc0) != 0x80)
                return false;
        if ((c == 0xe0 && u[i + 1] < 0xa0) || (c == 0xed && u[i + 1] > 0x9f) ||
            (c == 0xf0 && u[i + 1] < 0x90) || (c == 0xf4 && u[i + 1] > 0x8f))
            return false;
        i += k;
    }
    return true;
}

static void fuzz_vocab(const char *rel, bool bytes_round_trip)
{
    LOAD_OR_SKIP(t, rel);
    core_rng rng;
    core_rng_seed(&rng, 0x9e3779b97f4a7c15ull);
    char buf[512];
    int round_trips = 0, checked = 0;
    for (int iter = 0; iter < 400; iter++) {
        bool raw = iter % 2 == 1;
        size_t n = random_text(&rng, buf, sizeof buf, raw);
        unsigned flags = iter % 3 == 0 ? GLESC_TOKENIZE_ADD_SPECIAL : 0;
        if (iter % 5 == 0)
            flags |= GLESC_TOKENIZE_PARSE_SPECIAL;
        size_t n_ids;
        int32_t *ids = tokenize(t, buf, n, flags, &n_ids);
        for (size_t i = 0; i < n_ids; i++)
            cr_assert(ids[i] >= 0 && ids[i] < glesc_tokenizer_n_vocab(t));
        if (t->spm_split) {
            /* Word-by-word SentencePiece must equal merging the whole text. */
            t->spm_split = false;
            size_t n2;
            int32_t *ids2 = tokenize(t, buf, n, flags, &n2);
            t->spm_split = true;
            cr_expect(n2 == n_ids && (n2 == 0 || memcmp(ids, ids2, n2 * sizeof *ids) == 0),
                      "%s: word splitting changed the result", rel);
            glesc_tokens_free(ids2);
        }
        size_t dl, sl;
        char *back = detokenize(t, ids, n_ids, GLESC_DETOKENIZE_NO_CLEANUP, &dl);
        char *streamed = stream_decode_checked(t, ids, n_ids, 0, valid_utf8(buf, n), &sl);
        cr_expect(sl == dl && memcmp(back, streamed, dl) == 0,
                  "%s: streaming and whole detokenize differ", rel);
        /* Plain text (no special parsing) must come back exactly where the
         * vocabulary can represent every byte. */
        if (!(flags & GLESC_TOKENIZE_PARSE_SPECIAL) && (bytes_round_trip || valid_utf8(buf, n))) {
            checked++;
            bool same = dl == n && memcmp(back, buf, n) == 0;
            round_trips += same;
            char a[1024], b[1024];
            show(buf, n, a, sizeof a);
            show(back, dl, b, sizeof b);
            cr_expect(same, "%s: '%s' came back as '%s'", rel, a, b);
        }
        free(back);
        free(streamed);
        glesc_tokens_free(ids);
    }
    printf("tokenizer fuzz %-40s round trips %d/%d\n", rel, round_trips, checked);
    fflush(stdout);
    glesc_tokenizer_destroy(t);
}

Test(tokenizer, fuzz_spm)
{
    fuzz_vocab("models/vocab/ggml-vocab-llama-spm.gguf", false);
}

Test(tokenizer, fuzz_spm_small)
{
    fuzz_vocab("models/stories260K.gguf", false);
}

Test(tokenizer, fuzz_gpt2)
{
    fuzz_vocab("models/vocab/ggml-vocab-gpt-2.gguf", false);
}

Test(tokenizer, fuzz_deepseek_llm)
{
    fuzz_vocab("models/vocab/ggml-vocab-deepseek-llm.gguf", false);
}

Test(tokenizer, no_byte_tokens_gives_unk)
{
    LOAD_OR_SKIP(t, "models/TinyStories-656K-Q8_0.gguf");
    const char *s = "a \xe4\xb8\xad dog"; /* 中 is in no token and there are no byte tokens */
    size_t n;
    int32_t *ids = tokenize(t, s, strlen(s), 0, &n);
    int unks = 0;
    for (size_t i = 0; i < n; i++)
        unks += ids[i] == glesc_tokenizer_unk(t);
    cr_expect_eq(unks, 1, "expected one <unk> for one unknown character, got %d", unks);
    glesc_tokens_free(ids);
    glesc_tokenizer_destroy(t);
}

/* 100,000 identical characters must not take quadratic time. */
static void long_inputs(const char *rel)
{
    LOAD_OR_SKIP(t, rel);
    const size_t n = 100000;
    char *buf = malloc(n);
    const char chars[] = {' ', 'a', '\n', '3'};
    for (size_t c = 0; c < sizeof chars; c++) {
        memset(buf, chars[c], n);
        uint64_t t0 = core_time_ns();
        size_t n_ids;
        int32_t *ids = tokenize(t, buf, n, 0, &n_ids);
        double ms = (double)(core_time_ns() - t0) / 1e6;
        size_t dl;
        char *back = detokenize(t, ids, n_ids, GLESC_DETOKENIZE_NO_CLEANUP, &dl);
        cr_expect(dl == n && memcmp(back, buf, n) == 0, "%s: 100k x '%c' does not round-trip", rel,
                  chars[c]);
        printf("tokenizer long %-40s 100k x 0x%02x: %zu ids in %.1f ms\n", rel, chars[c], n_ids,
               ms);
        /* Generous bound (sanitizers, shared cores); quadratic takes minutes. */
        cr_expect_lt(ms, 5000.0, "%s: 100k x 0x%02x took %.0f ms", rel, chars[c], ms);
        free(back);
        glesc_tokens_free(ids);
    }
    fflush(stdout);
    free(buf);
    glesc_tokenizer_destroy(t);
}

Test(tokenizer, long_spm)
{
    long_inputs("models/vocab/ggml-vocab-llama-spm.gguf");
}

Test(tokenizer, long_gpt2)
{
    long_inputs("models/vocab/ggml-vocab-gpt-2.gguf");
}

Test(tokenizer, long_deepseek_llm)
{
    long_inputs("models/vocab/ggml-vocab-deepseek-llm.gguf");
}

Test(tokenizer, long_deepseek_coder)
{
    long_inputs("models/vocab/ggml-vocab-deepseek-coder.gguf");
}

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

Test(tokenizer, out_of_memory_is_clean)
{
    TEST_REQUIRE_SHARED(path, "models/stories260K.gguf");
    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK);
    free(path);
    int failures = 0;
    for (long k = 0; k < 100000; k++) {
        glesc_tokenizer *t = NULL;
        core_alloc_fail_after(k);
        glesc_status st = glesc_tokenizer_load(f, &t);
        int32_t *ids = NULL;
        size_t n = 0;
        glesc_status st2 = GLESC_OK;
        if (st == GLESC_OK)
            st2 = glesc_tokenize_alloc(t, "Once upon a time", 16, GLESC_TOKENIZE_ADD_SPECIAL, &ids,
                                       &n);
        core_alloc_fail_after(-1);
        if (st == GLESC_OK) {
            glesc_tokens_free(ids);
            glesc_tokenizer_destroy(t);
            if (st2 == GLESC_OK)
                break;
            cr_expect_eq(st2, GLESC_ERROR_OUT_OF_MEMORY);
        } else {
            cr_expect_null(t);
            cr_expect_eq(st, GLESC_ERROR_OUT_OF_MEMORY, "step %ld: %s", k, glesc_last_errmsg());
        }
        failures++;
    }
    cr_expect_gt(failures, 5);
    glesc_gguf_close(f);
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

/* ---- tools/gguf-run --tokenize ---- */

/* Runs cmd: its exit status, and its stdout in out. */
static int run_capture(const char *cmd, char *out, size_t cap)
{
    test_run_result r = test_run(cmd, NULL);
    snprintf(out, cap, "%s", r.out);
    test_run_free(&r);
    return r.status;
}

Test(tokenizer, gguf_run_tokenize)
{
    TEST_REQUIRE_SHARED(model, "models/stories260K.gguf");
    const char *build = getenv("GLESC_BUILD_ROOT");
    if (!build)
        cr_skip_test("GLESC_BUILD_ROOT is not set (run through meson test)");
    char cmd[4096], out[4096];
    snprintf(cmd, sizeof cmd, "'%s/tools/gguf-run' -m '%s' --tokenize -p 'Once upon a time'", build,
             model);
    cr_expect_eq(run_capture(cmd, out, sizeof out), 0);
    cr_expect_str_eq(out, "1 403 407 261 378\n");
    snprintf(cmd, sizeof cmd,
             "'%s/tools/gguf-run' -m '%s' --tokenize --no-bos -p 'Once upon a time'", build, model);
    cr_expect_eq(run_capture(cmd, out, sizeof out), 0);
    cr_expect_str_eq(out, "403 407 261 378\n");
    /* -f reads the bytes exactly (a trailing newline included). */
    char tmp[] = "/tmp/glesc-tok-XXXXXX";
    int fd = mkstemp(tmp);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "Once upon a time\n", 17), 17);
    close(fd);
    snprintf(cmd, sizeof cmd, "'%s/tools/gguf-run' -m '%s' --tokenize -f '%s'", build, model, tmp);
    cr_expect_eq(run_capture(cmd, out, sizeof out), 0);
    cr_expect_str_eq(out, "1 403 407 261 378 13\n");
    unlink(tmp);
    /* An unknown flag is a usage error; a bad file is reported. */
    snprintf(cmd, sizeof cmd, "'%s/tools/gguf-run' -m '%s' --no-such-flag -p hi 2>&1", build,
             model);
    cr_expect_eq(run_capture(cmd, out, sizeof out), 2);
    cr_expect(strstr(out, "unknown option") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "'%s/tools/gguf-run' -m /nonexistent.gguf --tokenize -p hi 2>&1",
             build);
    cr_expect_eq(run_capture(cmd, out, sizeof out), 1);
    cr_expect(strstr(out, "nonexistent") != NULL, "%s", out);
    free(model);
}

/* ---- Several threads on one tokenizer ---- */

typedef struct thread_job {
    const glesc_tokenizer *t;
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n;
    glesc_status st;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    for (int r = 0; r < 5 && j->st == GLESC_OK; r++) {
        glesc_tokens_free(j->ids);
        j->ids = NULL;
        j->st =
            glesc_tokenize_alloc(j->t, j->text, j->len, GLESC_TOKENIZE_ADD_SPECIAL, &j->ids, &j->n);
    }
    return NULL;
}

static void concurrent(const char *rel)
{
    LOAD_OR_SKIP(t, rel);
    sbuf b;
    sbuf_init(&b);
    for (int i = 0; i < 300; i++)
        sbuf_appendf(&b, "Line %d: The quick brown fox, it's said, jumps over 🦊 lazy dogs.\n",
                     i);
    size_t n_ref;
    int32_t *ref = tokenize(t, b.data, b.len, GLESC_TOKENIZE_ADD_SPECIAL, &n_ref);
    thread_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){t, b.data, b.len, NULL, 0, GLESC_OK};
        cr_assert_eq(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(jobs[i].st, GLESC_OK);
        cr_expect(jobs[i].n == n_ref && memcmp(jobs[i].ids, ref, n_ref * sizeof *ref) == 0,
                  "%s: thread %d got a different result", rel, i);
        glesc_tokens_free(jobs[i].ids);
    }
    glesc_tokens_free(ref);
    sbuf_free(&b);
    glesc_tokenizer_destroy(t);
}

Test(tokenizer, threads_spm)
{
    concurrent("models/vocab/ggml-vocab-llama-spm.gguf");
}

Test(tokenizer, threads_bpe)
{
    concurrent("models/vocab/ggml-vocab-deepseek-llm.gguf");
}

/* ---- Loader errors name the key and entry (files made with the writer) ---- */

typedef struct bad_vocab {
    const char *model;         /* NULL: no tokenizer.ggml.model */
    const char *const *tokens; /* NULL-terminated; NULL: no tokens key */
    const char *const *merges; /* NULL-terminated; NULL: none */
    bool float_types;          /* token_type stored as float32 */
    int n_scores;              /* 0: none */
    const char *want;          /* expected in the message */
} bad_vocab;

static glesc_status load_written(const bad_vocab *b)
{
    char path[] = "/tmp/glesc-tokvocab-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    cr_assert(w);
    if (b->model)
        cr_assert_eq(glesc_gguf_writer_set_str(w, "tokenizer.ggml.model", b->model), GLESC_OK);
    uint64_t n = 0;
    if (b->tokens) {
        while (b->tokens[n])
            n++;
        cr_assert_eq(glesc_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens",
                                                   (const char *const *)b->tokens, n),
                     GLESC_OK);
    }
    if (b->merges) {
        uint64_t m = 0;
        while (b->merges[m])
            m++;
        cr_assert_eq(glesc_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges",
                                                   (const char *const *)b->merges, m),
                     GLESC_OK);
    }
    if (b->float_types) {
        float types[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        cr_assert_eq(
            glesc_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GLESC_GGUF_FLOAT32, types, n),
            GLESC_OK);
    }
    if (b->n_scores) {
        float scores[8] = {0};
        cr_assert_eq(glesc_gguf_writer_set_arr(w, "tokenizer.ggml.scores", GLESC_GGUF_FLOAT32,
                                               scores, (uint64_t)b->n_scores),
                     GLESC_OK);
    }
    cr_assert_eq(glesc_gguf_writer_write(w, path), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_gguf_writer_destroy(w);
    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_tokenizer *t = NULL;
    glesc_status st = glesc_tokenizer_load(f, &t);
    if (st == GLESC_OK)
        glesc_tokenizer_destroy(t);
    else
        cr_expect_null(t);
    glesc_gguf_close(f);
    unlink(path);
    return st;
}

Test(tokenizer, loader_errors_name_the_key)
{
    static const char *const abc[] = {"a", "b", "ab", NULL};
    static const char *const dup[] = {"a", "b", "a", NULL};
    static const char *const merges_bad[] = {"a b", "ab", NULL};
    static const char *const merges_ok[] = {"a b", NULL};
    const bad_vocab cases[] = {
        {NULL, abc, NULL, false, 0, "tokenizer.ggml.model: missing"},
        {"bert", abc, NULL, false, 0, "tokenizer.ggml.model: 'bert' is not supported"},
        {"llama", NULL, NULL, false, 0, "tokenizer.ggml.tokens: missing"},
        {"llama", dup, NULL, false, 0, "tokenizer.ggml.tokens entry 2: duplicate of entry 0"},
        {"llama", abc, NULL, true, 0, "tokenizer.ggml.token_type: expected an array of int32"},
        {"llama", abc, NULL, false, 2, "tokenizer.ggml.scores: 2 entries for 3 tokens"},
        {"gpt2", abc, NULL, false, 0, "tokenizer.ggml.merges: missing"},
        {"gpt2", abc, merges_bad, false, 0, "tokenizer.ggml.merges entry 1: no space"},
    };
    for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++) {
        glesc_status st = load_written(&cases[i]);
        cr_expect_neq(st, GLESC_OK, "case %zu loaded", i);
        printf("tokenizer loader error: %s\n", glesc_last_errmsg());
        cr_expect(strstr(glesc_last_errmsg(), cases[i].want) != NULL,
                  "case %zu: message '%s' lacks '%s'", i, glesc_last_errmsg(), cases[i].want);
    }
    /* A well-formed toy BPE vocabulary loads: no BOS id is needed when BOS
     * is not added (gpt-2's default of 11 lies outside these 3 tokens). */
    const bad_vocab good = {"gpt2", abc, merges_ok, false, 0, ""};
    cr_expect_eq(load_written(&good), GLESC_OK, "%s", glesc_last_errmsg());
}
