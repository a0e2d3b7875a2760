/*
 * synth.c — see synth.h. Only the public API: the GGUF writer, and
 * glesc_quantize for the matrices' type. Tensors are generated in file
 * order from one random stream, so a given seed always writes the same file.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "common/synth.h"
#include "glesc_llm.h"

void synth_params_default(synth_params *p)
{
    memset(p, 0, sizeof *p);
    p->arch = "llama";
    p->n_embd = 256;
    p->n_layer = 4;
    p->n_head = 8;
    p->n_head_kv = 4;
    p->n_ff = 704;
    p->n_ctx = 512;
    p->weight_type = GLESC_DTYPE_F16;
    p->seed = 1;
}

/* Words whose pieces (with every prefix, so SentencePiece's bigram merges
 * can reach them) make up the vocabulary after the bytes. */
static const char *const words[] = {
    "the",  "and",  "was",  "she",   "he",    "to",    "a",    "it",   "in",     "of",    "her",
    "his",  "day",  "big",  "saw",   "one",   "they",  "said", "with", "play",   "happy", "little",
    "once", "upon", "time", "there", "girl",  "boy",   "dog",  "cat",  "sun",    "tree",  "friend",
    "park", "ball", "fun",  "mom",   "named", "loved", "very", "went", "wanted", "help",
};

typedef struct vocab {
    char **text;
    float *score;
    int32_t *type;
    size_t n, cap;
} vocab;

static bool vocab_has(const vocab *v, const char *s)
{
    for (size_t i = 0; i < v->n; i++)
        if (!strcmp(v->text[i], s))
            return true;
    return false;
}

static bool vocab_add(vocab *v, const char *s, float score, int type)
{
    if (vocab_has(v, s))
        return true;
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 512;
        char **t = realloc(v->text, cap * sizeof *t);
        if (t)
            v->text = t;
        float *sc = realloc(v->score, cap * sizeof *sc);
        if (sc)
            v->score = sc;
        int32_t *ty = realloc(v->type, cap * sizeof *ty);
        if (ty)
            v->type = ty;
        if (!t || !sc || !ty)
            return false;
        v->cap = cap;
    }
    char *c = strdup(s);
    if (!c)
        return false;
    v->text[v->n] = c;
    v->score[v->n] = score;
    v->type[v->n] = type;
    v->n++;
    return true;
}

static void vocab_free(vocab *v)
{
    for (size_t i = 0; i < v->n; i++)
        free(v->text[i]);
    free(v->text);
    free(v->score);
    free(v->type);
}

static bool build_vocab(vocab *v)
{
    bool ok = vocab_add(v, "<unk>", 0, GLESC_TOKEN_TYPE_UNKNOWN) &&
              vocab_add(v, "<s>", 0, GLESC_TOKEN_TYPE_CONTROL) &&
              vocab_add(v, "</s>", 0, GLESC_TOKEN_TYPE_CONTROL);
    for (int b = 0; b < 256 && ok; b++) {
        char t[8];
        snprintf(t, sizeof t, "<0x%02X>", b);
        ok = vocab_add(v, t, 0, GLESC_TOKEN_TYPE_BYTE);
    }
    /* single characters: "▁" (U+2581), letters, punctuation */
    float score = -1.0f;
    ok = ok && vocab_add(v, "\xe2\x96\x81", score, GLESC_TOKEN_TYPE_NORMAL);
    for (const char *c = "etaoinshrdlucmfwypvbgkjqxz.,!?'"; *c && ok; c++) {
        char t[2] = {*c, 0};
        ok = vocab_add(v, t, score -= 0.01f, GLESC_TOKEN_TYPE_NORMAL);
    }
    for (size_t w = 0; w < sizeof words / sizeof words[0] && ok; w++) {
        char t[64] = "\xe2\x96\x81";
        size_t len = strlen(words[w]);
        for (size_t k = 1; k <= len && ok; k++) {
            memcpy(t + 3, words[w], k);
            t[3 + k] = 0;
            ok = vocab_add(v, t, score -= 0.01f, GLESC_TOKEN_TYPE_NORMAL);
        }
    }
    return ok;
}

glesc_status synth_write(const synth_params *p, const char *path)
{
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    vocab v = {0};
    void **bufs = NULL;
    size_t n_bufs = 0;
    glesc_status st = GLESC_ERROR_OUT_OF_MEMORY;
    if (!w || !build_vocab(&v))
        goto fail;
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", p->arch, suffix), key)
    glesc_gguf_writer_set_str(w, "general.architecture", p->arch);
    glesc_gguf_writer_set_str(w, "general.name", "glesc synthetic demo (random weights)");
    glesc_gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)p->n_ctx);
    glesc_gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)p->n_embd);
    glesc_gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)p->n_layer);
    glesc_gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)p->n_ff);
    glesc_gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)p->n_head);
    glesc_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)p->n_head_kv);
    glesc_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    glesc_gguf_writer_set_f32(w, KEY("rope.freq_base"), p->rope_base > 0 ? p->rope_base : 1e4f);
    if (p->head_dim > 0) {
        glesc_gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)p->head_dim);
        glesc_gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)p->head_dim);
    }
    if (p->rope_linear > 0) {
        glesc_gguf_writer_set_str(w, KEY("rope.scaling.type"), "linear");
        glesc_gguf_writer_set_f32(w, KEY("rope.scaling.factor"), p->rope_linear);
    }
#undef KEY
    glesc_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    glesc_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.text, v.n);
    glesc_gguf_writer_set_arr(w, "tokenizer.ggml.scores", GLESC_GGUF_FLOAT32, v.score, v.n);
    glesc_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GLESC_GGUF_INT32, v.type, v.n);
    glesc_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    glesc_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    glesc_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (p->chat_template)
        glesc_gguf_writer_set_str(w, "tokenizer.chat_template", p->chat_template);

    int64_t e = p->n_embd, hd = p->head_dim > 0 ? p->head_dim : p->n_embd / p->n_head;
    bool qwen2 = !strcmp(p->arch, "qwen2"), qwen3 = !strcmp(p->arch, "qwen3");
    int64_t q = p->n_head * hd, kv = p->n_head_kv * hd, nv = (int64_t)v.n;
    struct spec {
        char name[64];
        int64_t ne0, ne1; /* ne1 = 0: a vector */
        int kind;         /* 0 embedding, 1 matrix, 2 norm, 3 bias, 4 rope factors */
    };
    size_t n_specs = 4 + 14 * (size_t)p->n_layer;
    struct spec *specs = calloc(n_specs, sizeof *specs);
    bufs = calloc(n_specs, sizeof *bufs);
    if (!specs || !bufs) {
        free(specs);
        goto fail;
    }
    size_t k = 0;
#define SPEC(nm, a, b, kd)                                                                         \
    do {                                                                                           \
        snprintf(specs[k].name, sizeof specs[k].name, "%s", nm);                                   \
        specs[k].ne0 = a;                                                                          \
        specs[k].ne1 = b;                                                                          \
        specs[k].kind = kd;                                                                        \
        k++;                                                                                       \
    } while (0)
    SPEC("token_embd.weight", e, nv, 0);
    for (int l = 0; l < p->n_layer; l++) {
        char nm[64];
        snprintf(nm, sizeof nm, "blk.%d.attn_norm.weight", l);
        SPEC(nm, e, 0, 2);
        snprintf(nm, sizeof nm, "blk.%d.attn_q.weight", l);
        SPEC(nm, e, q, 1);
        snprintf(nm, sizeof nm, "blk.%d.attn_k.weight", l);
        SPEC(nm, e, kv, 1);
        snprintf(nm, sizeof nm, "blk.%d.attn_v.weight", l);
        SPEC(nm, e, kv, 1);
        if (qwen2) {
            snprintf(nm, sizeof nm, "blk.%d.attn_q.bias", l);
            SPEC(nm, q, 0, 3);
            snprintf(nm, sizeof nm, "blk.%d.attn_k.bias", l);
            SPEC(nm, kv, 0, 3);
            snprintf(nm, sizeof nm, "blk.%d.attn_v.bias", l);
            SPEC(nm, kv, 0, 3);
        }
        if (qwen3) {
            snprintf(nm, sizeof nm, "blk.%d.attn_q_norm.weight", l);
            SPEC(nm, hd, 0, 2);
            snprintf(nm, sizeof nm, "blk.%d.attn_k_norm.weight", l);
            SPEC(nm, hd, 0, 2);
        }
        snprintf(nm, sizeof nm, "blk.%d.attn_output.weight", l);
        SPEC(nm, q, e, 1);
        snprintf(nm, sizeof nm, "blk.%d.ffn_norm.weight", l);
        SPEC(nm, e, 0, 2);
        snprintf(nm, sizeof nm, "blk.%d.ffn_gate.weight", l);
        SPEC(nm, e, p->n_ff, 1);
        snprintf(nm, sizeof nm, "blk.%d.ffn_up.weight", l);
        SPEC(nm, e, p->n_ff, 1);
        snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight", l);
        SPEC(nm, p->n_ff, e, 1);
    }
    SPEC("output_norm.weight", e, 0, 2);
    if (!p->tied_output)
        SPEC("output.weight", e, nv, 1);
    if (p->rope_freqs)
        SPEC("rope_freqs.weight", hd / 2, 0, 4);
#undef SPEC
    uint64_t rng = p->seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
    st = GLESC_OK;
    for (size_t i = 0; i < k && st == GLESC_OK; i++) {
        struct spec *s = &specs[i];
        if (p->skip_tensor && !strcmp(p->skip_tensor, s->name))
            continue;
        int64_t rows = s->ne1 ? s->ne1 : 1;
        if (p->bad_shape_tensor && !strcmp(p->bad_shape_tensor, s->name))
            rows++;
        int64_t n = s->ne0 * rows;
        float *f = calloc((size_t)n, sizeof *f);
        glesc_dtype t = s->kind >= 2 ? GLESC_DTYPE_F32 : p->weight_type;
        uint64_t bytes = glesc_dtype_row_bytes(t, s->ne0) * (uint64_t)rows;
        void *data = malloc(bytes ? (size_t)bytes : 1);
        if (!f || !data) {
            free(f);
            free(data);
            st = GLESC_ERROR_OUT_OF_MEMORY;
            break;
        }
        float sd = s->kind == 1 ? (float)(1.0 / sqrt((double)s->ne0)) : 1.0f;
        for (int64_t j = 0; j < n; j++)
            f[j] = s->kind == 4   ? 1.0f + 7.0f * (float)j / (float)(n > 2 ? n - 1 : 1)
                   : s->kind == 2 ? 1.0f + 0.1f * tool_rng_normal(&rng)
                   : s->kind == 3 ? 0.1f * tool_rng_normal(&rng)
                                  : sd * tool_rng_normal(&rng);
        /* The output rows of the byte tokens (ids 3..258) are damped, so a
         * demo's text is mostly word pieces rather than stray bytes. */
        if (!strcmp(s->name, "output.weight"))
            for (int64_t j = 3 * s->ne0; j < 259 * s->ne0 && j < n; j++)
                f[j] *= 0.1f;
        st = glesc_quantize(t, f, rows, s->ne0, data, (size_t)bytes);
        free(f);
        bufs[n_bufs++] = data;
        if (st == GLESC_OK)
            st = glesc_gguf_writer_add_tensor(w, s->name, t, s->ne1 ? 2 : 1,
                                              (int64_t[]){s->ne0, rows}, data, bytes);
    }
    free(specs);
    if (st == GLESC_OK)
        st = glesc_gguf_writer_write(w, path);
fail:
    for (size_t i = 0; i < n_bufs; i++)
        free(bufs[i]);
    free(bufs);
    vocab_free(&v);
    glesc_gguf_writer_destroy(w);
    return st;
}
