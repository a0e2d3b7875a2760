/*
 * synth.c — see synth.h. Only the public API: the GGUF writer (tensors
 * produced by its callback while the file is written, one at a time) and
 * glesc_quantize for the matrices' types.
 *
 * Tensor i's values are draws number S_i, S_i + 1, ... of one normal stream
 * (two xorshift64 steps per value), S_i counting the values of the tensors
 * before it in file order, as a single loop over the file would draw them.
 * A tensor is cut into chunks of whole rows; each thread takes chunks in
 * turn, jumps a copy of the seed's state to its chunk's first step, draws
 * the values and quantizes those rows into the writer's buffer.
 */
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/rng.h"
#include "common/synth.h"
#include "glesc_llm.h"

static char errbuf[1024];

static glesc_status fail(glesc_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    return st;
}

const char *synth_errmsg(void)
{
    return errbuf;
}

/* ---- File types ---- */

static const struct {
    const char *name;
    int llama_id;     /* LLAMA_FTYPE_* (llama.h) */
    glesc_dtype type; /* llama_ftype_get_default_type */
} ftypes[SYNTH_FTYPE_COUNT_] = {
    [SYNTH_FTYPE_NONE] = {NULL, -1, GLESC_DTYPE_F32},
    [SYNTH_FTYPE_F32] = {"F32", 0, GLESC_DTYPE_F32},
    [SYNTH_FTYPE_F16] = {"F16", 1, GLESC_DTYPE_F16},
    [SYNTH_FTYPE_BF16] = {"BF16", 32, GLESC_DTYPE_BF16},
    [SYNTH_FTYPE_Q4_0] = {"Q4_0", 2, GLESC_DTYPE_Q4_0},
    [SYNTH_FTYPE_Q4_1] = {"Q4_1", 3, GLESC_DTYPE_Q4_1},
    [SYNTH_FTYPE_Q5_0] = {"Q5_0", 8, GLESC_DTYPE_Q5_0},
    [SYNTH_FTYPE_Q5_1] = {"Q5_1", 9, GLESC_DTYPE_Q5_1},
    [SYNTH_FTYPE_Q8_0] = {"Q8_0", 7, GLESC_DTYPE_Q8_0},
    [SYNTH_FTYPE_Q4_K_M] = {"Q4_K_M", 15, GLESC_DTYPE_Q4_K},
    [SYNTH_FTYPE_Q5_K_M] = {"Q5_K_M", 17, GLESC_DTYPE_Q5_K},
    [SYNTH_FTYPE_Q6_K] = {"Q6_K", 18, GLESC_DTYPE_Q6_K},
};

const char *synth_ftype_name(synth_ftype f)
{
    return f > SYNTH_FTYPE_NONE && f < SYNTH_FTYPE_COUNT_ ? ftypes[f].name : NULL;
}

synth_ftype synth_ftype_find(const char *name)
{
    for (int f = SYNTH_FTYPE_NONE + 1; name && f < SYNTH_FTYPE_COUNT_; f++)
        if (!strcasecmp(name, ftypes[f].name))
            return (synth_ftype)f;
    return SYNTH_FTYPE_NONE;
}

int synth_ftype_llama_id(synth_ftype f)
{
    return f > SYNTH_FTYPE_NONE && f < SYNTH_FTYPE_COUNT_ ? ftypes[f].llama_id : -1;
}

/* llama-quant.cpp's use_more_bits: the layers whose attn_v and ffn_down
 * Q4_K_M and Q5_K_M keep in q6_k. */
static bool use_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* llama-quant.cpp's tensor_type_fallback, for a row the block does not divide. */
static glesc_dtype fallback(glesc_dtype t, int64_t ne0)
{
    if (ne0 % glesc_dtype_block_size(t) == 0)
        return t;
    glesc_dtype r = t == GLESC_DTYPE_Q4_K                            ? GLESC_DTYPE_Q5_0
                    : t == GLESC_DTYPE_Q5_K                          ? GLESC_DTYPE_Q5_1
                    : t == GLESC_DTYPE_Q6_K                          ? GLESC_DTYPE_Q8_0
                    : t == GLESC_DTYPE_Q2_K || t == GLESC_DTYPE_Q3_K ? GLESC_DTYPE_Q4_0
                                                                     : GLESC_DTYPE_F16;
    return ne0 % glesc_dtype_block_size(r) == 0 ? r : GLESC_DTYPE_F16;
}

glesc_dtype synth_tensor_type(const synth_params *p, const char *name, int layer, int64_t ne0,
                              bool vector)
{
    if (vector)
        return GLESC_DTYPE_F32;
    if (p->ftype <= SYNTH_FTYPE_NONE || p->ftype >= SYNTH_FTYPE_COUNT_)
        return p->weight_type;
    glesc_dtype t = ftypes[p->ftype].type;
    if (glesc_dtype_block_size(t) == 1) /* f32, f16, bf16: every matrix */
        return t;
    bool embd = !strcmp(name, "token_embd.weight");
    if (!strcmp(name, "output.weight") || (embd && p->tied_output)) {
        if (ne0 % glesc_dtype_block_size(t))
            t = GLESC_DTYPE_Q8_0;
        else if (t != GLESC_DTYPE_Q8_0)
            t = GLESC_DTYPE_Q6_K;
    } else if (!embd && (strstr(name, "attn_v.weight") || strstr(name, "ffn_down"))) {
        if ((p->ftype == SYNTH_FTYPE_Q4_K_M || p->ftype == SYNTH_FTYPE_Q5_K_M) &&
            use_more_bits(layer, p->n_layer))
            t = GLESC_DTYPE_Q6_K;
    } else if (strstr(name, "attn_qkv.weight")) { /* llama-quantize: one step up */
        if (p->ftype == SYNTH_FTYPE_Q4_K_M)
            t = GLESC_DTYPE_Q5_K;
        else if (p->ftype == SYNTH_FTYPE_Q5_K_M)
            t = GLESC_DTYPE_Q6_K;
    }
    return fallback(t, ne0);
}

/* ---- Parameters ---- */

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

/* The shapes of the released models' config.json files. */
static const struct preset {
    const char *name, *arch, *title;
    int n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    float rope_base, rms_eps;
    bool tied;
    synth_rope_freqs rope_freqs;
    int head_dim, n_swa, n_ctx_orig; /* 0: n_embd / n_head, none, the context */
    bool longrope;
    float rope_attn_factor;
} presets[] = {
    {"tinyllama-1.1b", "llama", "TinyLlama-1.1B", 2048, 22, 32, 4, 5632, 32000, 2048, 1e4f, 1e-5f,
     false, SYNTH_ROPE_FREQS_NONE, 0, 0, 0, false, 0},
    {"llama-7b", "llama", "Llama-2-7B", 4096, 32, 32, 32, 11008, 32000, 4096, 1e4f, 1e-5f, false,
     SYNTH_ROPE_FREQS_NONE, 0, 0, 0, false, 0},
    {"qwen2.5-0.5b", "qwen2", "Qwen2.5-0.5B", 896, 24, 14, 2, 4864, 151936, 32768, 1e6f, 1e-6f,
     true, SYNTH_ROPE_FREQS_NONE, 0, 0, 0, false, 0},
    {"llama3.2-1b", "llama", "Llama-3.2-1B", 2048, 16, 32, 8, 8192, 128256, 131072, 5e5f, 1e-5f,
     true, SYNTH_ROPE_FREQS_LLAMA3, 0, 0, 0, false, 0},
    /* Gemma 2 2B: window 4096 on every other layer, llama.cpp's default
     * soft-caps (50, 30) */
    {"gemma2-2b", "gemma2", "Gemma-2-2B", 2304, 26, 8, 4, 9216, 256000, 8192, 1e4f, 1e-6f, true,
     SYNTH_ROPE_FREQS_NONE, 256, 4096, 0, false, 0},
    /* Gemma 3 1B: window 512 on five layers of six */
    {"gemma3-1b", "gemma3", "Gemma-3-1B", 1152, 26, 4, 1, 6912, 262144, 32768, 1e6f, 1e-6f, true,
     SYNTH_ROPE_FREQS_NONE, 256, 512, 0, false, 0},
    /* Phi-3.5-mini: LongRoPE over 4096 original positions, magnitude
     * sqrt(1 + ln(32) / ln(4096)) */
    {"phi3.5-mini", "phi3", "Phi-3.5-mini", 3072, 32, 32, 32, 8192, 32064, 131072, 1e4f, 1e-5f,
     false, SYNTH_ROPE_FREQS_NONE, 0, 0, 4096, true, 1.1902381f},
};

bool synth_params_preset(synth_params *p, const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const struct preset *s = &presets[i];
        if (strcmp(name, s->name))
            continue;
        static char titles[sizeof presets / sizeof presets[0]][96];
        snprintf(titles[i], sizeof titles[i], "glesc synthetic %s shape (random weights)",
                 s->title);
        synth_params_default(p);
        p->arch = s->arch;
        p->name = titles[i];
        p->n_embd = s->n_embd;
        p->n_layer = s->n_layer;
        p->n_head = s->n_head;
        p->n_head_kv = s->n_head_kv;
        p->n_ff = s->n_ff;
        p->n_vocab = s->n_vocab;
        p->n_ctx = s->n_ctx;
        p->rope_base = s->rope_base;
        p->rms_eps = s->rms_eps;
        p->tied_output = s->tied;
        p->rope_freqs = s->rope_freqs;
        p->head_dim = s->head_dim;
        p->n_swa = s->n_swa;
        p->n_ctx_orig = s->n_ctx_orig;
        p->longrope = s->longrope;
        p->rope_attn_factor = s->rope_attn_factor;
        return true;
    }
    return false;
}

const char *synth_preset_name(int i)
{
    return i >= 0 && (size_t)i < sizeof presets / sizeof presets[0] ? presets[i].name : NULL;
}

/* ---- Vocabulary ---- */

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

static bool vocab_reserve(vocab *v, size_t cap)
{
    if (cap <= v->cap)
        return true;
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
    return true;
}

/* Appends s (unique: the caller knows it is new). */
static bool vocab_push(vocab *v, const char *s, float score, int type)
{
    if (v->n == v->cap && !vocab_reserve(v, v->cap ? v->cap * 2 : 512))
        return false;
    char *c = strdup(s);
    if (!c)
        return false;
    v->text[v->n] = c;
    v->score[v->n] = score;
    v->type[v->n] = type;
    v->n++;
    return true;
}

static bool vocab_add(vocab *v, const char *s, float score, int type)
{
    return vocab_has(v, s) || vocab_push(v, s, score, type);
}

static void vocab_free(vocab *v)
{
    for (size_t i = 0; i < v->n; i++)
        free(v->text[i]);
    free(v->text);
    free(v->score);
    free(v->type);
}

/* The demo vocabulary, then (n_vocab > its size) placeholders up to
 * n_vocab, or (n_vocab smaller) its first n_vocab pieces: every prefix of a
 * word comes before the word, so the cut keeps the merges reachable. */
static bool build_vocab(vocab *v, size_t n_vocab)
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
    if (!ok || !n_vocab)
        return ok;
    while (v->n > n_vocab)
        free(v->text[--v->n]);
    ok = vocab_reserve(v, n_vocab);
    for (size_t i = v->n; i < n_vocab && ok; i++) {
        char t[32];
        snprintf(t, sizeof t, "[PAD%zu]", i);
        ok = vocab_push(v, t, -1000.0f, GLESC_TOKEN_TYPE_UNUSED);
    }
    return ok;
}

/* Copies every tokenizer.* key of the GGUF at path into w; *n_vocab gets
 * its token count. */
static glesc_status copy_tokenizer(glesc_gguf_writer *w, const char *path, int64_t *n_vocab)
{
    glesc_gguf *f;
    glesc_status st = glesc_gguf_open(path, &f);
    if (st != GLESC_OK)
        return fail(st, "vocabulary: %s", glesc_last_errmsg());
    int64_t tok = glesc_gguf_find_key(f, "tokenizer.ggml.tokens");
    if (tok < 0 || glesc_gguf_kv_type(f, tok) != GLESC_GGUF_ARRAY ||
        glesc_gguf_arr_type(f, tok) != GLESC_GGUF_STRING || glesc_gguf_arr_n(f, tok) < 1) {
        glesc_gguf_close(f);
        return fail(GLESC_ERROR_FORMAT,
                    "vocabulary %s: no tokenizer.ggml.tokens (an array of strings)", path);
    }
    *n_vocab = (int64_t)glesc_gguf_arr_n(f, tok);
    for (int64_t i = 0; i < glesc_gguf_n_kv(f) && st == GLESC_OK; i++) {
        const char *key = glesc_gguf_key(f, i);
        const void *data;
        uint64_t size;
        if (strncmp(key, "tokenizer.", 10))
            continue;
        st = glesc_gguf_kv_raw(f, i, &data, &size);
        if (st == GLESC_OK)
            st = glesc_gguf_writer_set_encoded(w, key, glesc_gguf_kv_type(f, i), data, size);
        if (st != GLESC_OK)
            fail(st, "vocabulary %s: key %s: %s", path, key, glesc_last_errmsg());
    }
    glesc_gguf_close(f);
    return st;
}

/* ---- The random stream, with jumps ---- */

/* jump[k] holds the columns of M^(2^k), M the 64×64 matrix over GF(2) of
 * one xorshift64 step: state after n steps = product of jump[k] over the
 * bits k of n, applied to the state. */
typedef struct rng_jump {
    uint64_t m[64][64];
} rng_jump;

static uint64_t gf2_apply(const uint64_t *cols, uint64_t x)
{
    uint64_t y = 0;
    for (int j = 0; x; j++, x >>= 1)
        if (x & 1)
            y ^= cols[j];
    return y;
}

static void rng_jump_init(rng_jump *J)
{
    for (int j = 0; j < 64; j++) {
        uint64_t s = 1ull << j;
        J->m[0][j] = tool_rng_next(&s); /* the step is linear: M·e_j */
    }
    for (int k = 1; k < 64; k++)
        for (int j = 0; j < 64; j++)
            J->m[k][j] = gf2_apply(J->m[k - 1], J->m[k - 1][j]);
}

static uint64_t rng_jump_ahead(const rng_jump *J, uint64_t s, uint64_t steps)
{
    for (int k = 0; steps; k++, steps >>= 1)
        if (steps & 1)
            s = gf2_apply(J->m[k], s);
    return s;
}

/* ---- Tensors ---- */

enum kind { K_EMBD, K_MATRIX, K_NORM, K_BIAS, K_ROPE };

typedef struct spec {
    char name[64];
    int64_t ne0, ne1; /* ne1 = 0: a vector */
    enum kind kind;
    int layer; /* -1 outside the blocks */
    int64_t rows;
    glesc_dtype type;
    uint64_t row_bytes;
    uint64_t step0; /* stream position of the first value */
} spec;

/* Appends the tensor called `what` (in block `layer` when ≥ 0). */
static void spec_add(spec *specs, size_t *k, int layer, const char *what, int64_t ne0, int64_t ne1,
                     enum kind kind)
{
    spec *s = &specs[(*k)++];
    if (layer >= 0)
        snprintf(s->name, sizeof s->name, "blk.%d.%s", layer, what);
    else
        snprintf(s->name, sizeof s->name, "%s", what);
    s->ne0 = ne0;
    s->ne1 = ne1;
    s->kind = kind;
    s->layer = layer;
}

typedef struct job {
    const synth_params *p;
    const spec *s;
    const rng_jump *J;
    uint64_t state0;
    uint8_t *dst;
    int64_t rows_per_chunk, n_chunks;
    atomic_llong next;
    atomic_bool stop; /* a thread failed: the others end too */
    pthread_mutex_t lock;
    glesc_status st; /* the first failure (under lock) */
} job;

/* Llama 3.1's rope factors (convert_hf_to_gguf's LlamaModel): wavelengths
 * shorter than 8192/4 keep their frequency, longer than 8192/1 slow down by
 * 32, between them a smooth blend; the file stores 1/scale per rotation. */
static float llama3_factor(int64_t i, int64_t n_rot_half, float base)
{
    const double factor = 32, low = 1, high = 4, old_ctx = 8192;
    double freq = pow((double)base, -(double)(2 * i) / (double)(2 * n_rot_half));
    double wavelen = 2 * M_PI / freq;
    if (wavelen < old_ctx / high)
        return 1.0f;
    if (wavelen > old_ctx / low)
        return (float)factor;
    double smooth = (old_ctx / wavelen - low) / (high - low);
    return (float)(1.0 / ((1 - smooth) / factor + smooth));
}

static glesc_status fill_rows(job *jb, int64_t r0, int64_t r1, float *f)
{
    const spec *s = jb->s;
    const synth_params *p = jb->p;
    int64_t j0 = r0 * s->ne0, n = (r1 - r0) * s->ne0, total = s->rows * s->ne0;
    uint64_t rng = rng_jump_ahead(jb->J, jb->state0, s->step0 + 2 * (uint64_t)j0);
    float sd = s->kind == K_MATRIX ? (float)(1.0 / sqrt((double)s->ne0)) : 1.0f;
    bool damp = !strcmp(s->name, "output.weight");
    for (int64_t i = 0; i < n; i++) {
        int64_t j = j0 + i;
        float x;
        if (s->kind == K_ROPE)
            x = p->rope_freqs == SYNTH_ROPE_FREQS_LLAMA3 && !strcmp(s->name, "rope_freqs.weight")
                    ? llama3_factor(j, total, p->rope_base > 0 ? p->rope_base : 1e4f)
                    : 1.0f + (strstr(s->name, "short") ? 0.5f : 7.0f) * (float)j /
                                 (float)(total > 2 ? total - 1 : 1);
        else if (s->kind == K_NORM)
            x = 1.0f + 0.1f * tool_rng_normal(&rng);
        else if (s->kind == K_BIAS)
            x = 0.1f * tool_rng_normal(&rng);
        else
            x = sd * tool_rng_normal(&rng);
        /* The output rows of the byte tokens (ids 3..258) are damped, so a
         * demo's text is mostly word pieces rather than stray bytes. */
        if (damp && j >= 3 * s->ne0 && j < 259 * s->ne0)
            x *= 0.1f;
        f[i] = x;
    }
    glesc_status st = glesc_quantize(s->type, f, r1 - r0, s->ne0, jb->dst + r0 * s->row_bytes,
                                     (size_t)((r1 - r0) * s->row_bytes));
    if (st != GLESC_OK) {
        pthread_mutex_lock(&jb->lock);
        if (jb->st == GLESC_OK) {
            jb->st = st;
            fail(st, "tensor '%s' (%s), rows %lld..%lld: %s", s->name, glesc_dtype_name(s->type),
                 (long long)r0, (long long)r1 - 1, glesc_last_errmsg());
        }
        pthread_mutex_unlock(&jb->lock);
        atomic_store(&jb->stop, true);
    }
    return st;
}

static void *worker(void *arg)
{
    job *jb = arg;
    float *f = malloc((size_t)(jb->rows_per_chunk * jb->s->ne0) * sizeof *f);
    if (!f) {
        pthread_mutex_lock(&jb->lock);
        if (jb->st == GLESC_OK)
            jb->st = fail(GLESC_ERROR_OUT_OF_MEMORY, "tensor '%s': out of memory", jb->s->name);
        pthread_mutex_unlock(&jb->lock);
        atomic_store(&jb->stop, true);
        return NULL;
    }
    for (;;) {
        long long c = atomic_fetch_add(&jb->next, 1);
        if (c >= jb->n_chunks || atomic_load(&jb->stop))
            break;
        int64_t r0 = c * jb->rows_per_chunk;
        int64_t r1 = r0 + jb->rows_per_chunk < jb->s->rows ? r0 + jb->rows_per_chunk : jb->s->rows;
        if (fill_rows(jb, r0, r1, f) != GLESC_OK)
            break;
    }
    free(f);
    return NULL;
}

typedef struct writer_state {
    const synth_params *p;
    spec *specs;
    size_t n_specs, next;
    rng_jump J;
    uint64_t state0;
    int n_threads;
} writer_state;

/* The writer's callback: tensor after tensor in file order. */
static glesc_status fill_tensor(void *user, const char *name, void *dst, uint64_t size)
{
    writer_state *ws = user;
    while (ws->next < ws->n_specs && strcmp(ws->specs[ws->next].name, name))
        ws->next++;
    if (ws->next == ws->n_specs) /* the writer calls back only for added tensors */
        return fail(GLESC_ERROR_STATE, "tensor '%s': not one of synth's", name);
    const spec *s = &ws->specs[ws->next++];
    (void)size;
    job jb = {.p = ws->p, .s = s, .J = &ws->J, .state0 = ws->state0, .dst = dst};
    /* chunks of about 2^18 values: small enough to share a tensor among
     * many threads, large enough that a jump (≤ 64 matrix applications)
     * costs nothing */
    jb.rows_per_chunk = s->ne0 >= (1 << 18) ? 1 : (1 << 18) / s->ne0;
    jb.n_chunks = (s->rows + jb.rows_per_chunk - 1) / jb.rows_per_chunk;
    atomic_init(&jb.next, 0);
    atomic_init(&jb.stop, false);
    pthread_mutex_init(&jb.lock, NULL);
    int n = ws->n_threads < jb.n_chunks ? ws->n_threads : (int)jb.n_chunks;
    pthread_t *th = n > 1 ? calloc((size_t)n - 1, sizeof *th) : NULL;
    int started = 0;
    for (int i = 0; th && i < n - 1; i++, started++)
        if (pthread_create(&th[i], NULL, worker, &jb))
            break;
    worker(&jb);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    pthread_mutex_destroy(&jb.lock);
    return jb.st;
}

/* KEY("x"): the architecture's key "ARCH.x" (in key, a local buffer). */
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", p->arch, suffix), key)

/* The general keys and the hyperparameters, in the file's key order. */
static void set_hparams(glesc_gguf_writer *w, const synth_params *p, bool llama_cpp)
{
    char key[128];
    glesc_gguf_writer_set_str(w, "general.architecture", p->arch);
    glesc_gguf_writer_set_str(w, "general.name",
                              p->name ? p->name : "glesc synthetic demo (random weights)");
    if (llama_cpp) {
        glesc_gguf_writer_set_u32(w, "general.file_type", (uint32_t)ftypes[p->ftype].llama_id);
        glesc_gguf_writer_set_u32(w, "general.quantization_version", 2);
    }
    glesc_gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)p->n_ctx);
    glesc_gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)p->n_embd);
    glesc_gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)p->n_layer);
    glesc_gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)p->n_ff);
    glesc_gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)p->n_head);
    glesc_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)p->n_head_kv);
    glesc_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"),
                              p->rms_eps > 0 ? p->rms_eps : 1e-5f);
    glesc_gguf_writer_set_f32(w, KEY("rope.freq_base"), p->rope_base > 0 ? p->rope_base : 1e4f);
    if (p->head_dim > 0) {
        glesc_gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)p->head_dim);
        glesc_gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)p->head_dim);
    }
    if (p->rope_linear > 0) {
        glesc_gguf_writer_set_str(w, KEY("rope.scaling.type"), "linear");
        glesc_gguf_writer_set_f32(w, KEY("rope.scaling.factor"), p->rope_linear);
    } else if (p->rope_yarn > 0) {
        glesc_gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn");
        glesc_gguf_writer_set_f32(w, KEY("rope.scaling.factor"), p->rope_yarn);
    }
    if (p->n_ctx_orig > 0)
        glesc_gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"),
                                  (uint32_t)p->n_ctx_orig);
    if (p->rope_attn_factor > 0)
        glesc_gguf_writer_set_f32(w, KEY("rope.scaling.attn_factor"), p->rope_attn_factor);
    if (p->n_swa > 0)
        glesc_gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)p->n_swa);
    if (p->attn_softcap > 0)
        glesc_gguf_writer_set_f32(w, KEY("attn_logit_softcapping"), p->attn_softcap);
    if (p->final_softcap > 0)
        glesc_gguf_writer_set_f32(w, KEY("final_logit_softcapping"), p->final_softcap);
}

/* The tokenizer: copied from p->vocab_path (*nv its size) or the
 * placeholder vocabulary v. */
static glesc_status set_tokenizer(glesc_gguf_writer *w, const synth_params *p, const vocab *v,
                                  int64_t *nv)
{
    if (p->vocab_path) {
        glesc_status st = copy_tokenizer(w, p->vocab_path, nv);
        if (st != GLESC_OK)
            return st;
    } else {
        glesc_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
        glesc_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->text,
                                      v->n);
        glesc_gguf_writer_set_arr(w, "tokenizer.ggml.scores", GLESC_GGUF_FLOAT32, v->score, v->n);
        glesc_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GLESC_GGUF_INT32, v->type, v->n);
        glesc_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
        glesc_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
        glesc_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        if (p->chat_template)
            glesc_gguf_writer_set_str(w, "tokenizer.chat_template", p->chat_template);
    }
    return GLESC_OK;
}

/* The keys after the tokenizer: the rotary dimensions and the vocabulary
 * size (llama.cpp's files carry both). */
static void set_rope_vocab(glesc_gguf_writer *w, const synth_params *p, bool llama_cpp, int64_t hd,
                           int64_t nv)
{
    char key[128];
    if (llama_cpp || p->n_rot > 0)
        glesc_gguf_writer_set_u32(w, KEY("rope.dimension_count"),
                                  (uint32_t)(p->n_rot > 0 ? p->n_rot : hd));
    if (llama_cpp)
        glesc_gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)nv);
}
#undef KEY

/* The tensors of the model in file order into specs; their number. */
static size_t specs_plan(spec *specs, const synth_params *p, int64_t nv, int64_t hd)
{
    int64_t e = p->n_embd;
    bool qwen2 = !strcmp(p->arch, "qwen2"), gemma3 = !strcmp(p->arch, "gemma3");
    bool qk_norm = !strcmp(p->arch, "qwen3") || gemma3;
    bool post_norms = !strcmp(p->arch, "gemma2") || gemma3, phi3 = !strcmp(p->arch, "phi3");
    int64_t q = p->n_head * hd, kv = p->n_head_kv * hd;
    int64_t n_rot = p->n_rot > 0 ? p->n_rot : hd;
    size_t k = 0;
    spec_add(specs, &k, -1, "token_embd.weight", e, nv, K_EMBD);
    for (int l = 0; l < p->n_layer; l++) {
        spec_add(specs, &k, l, "attn_norm.weight", e, 0, K_NORM);
        if (phi3) { /* q, k and v rows of one matrix, as llama.cpp's converter writes phi3 */
            spec_add(specs, &k, l, "attn_qkv.weight", e, q + 2 * kv, K_MATRIX);
        } else {
            spec_add(specs, &k, l, "attn_q.weight", e, q, K_MATRIX);
            spec_add(specs, &k, l, "attn_k.weight", e, kv, K_MATRIX);
            spec_add(specs, &k, l, "attn_v.weight", e, kv, K_MATRIX);
        }
        if (qwen2) {
            spec_add(specs, &k, l, "attn_q.bias", q, 0, K_BIAS);
            spec_add(specs, &k, l, "attn_k.bias", kv, 0, K_BIAS);
            spec_add(specs, &k, l, "attn_v.bias", kv, 0, K_BIAS);
        }
        if (qk_norm) {
            spec_add(specs, &k, l, "attn_q_norm.weight", hd, 0, K_NORM);
            spec_add(specs, &k, l, "attn_k_norm.weight", hd, 0, K_NORM);
        }
        spec_add(specs, &k, l, "attn_output.weight", q, e, K_MATRIX);
        if (post_norms)
            spec_add(specs, &k, l, "post_attention_norm.weight", e, 0, K_NORM);
        spec_add(specs, &k, l, "ffn_norm.weight", e, 0, K_NORM);
        if (phi3) { /* gate then up rows */
            spec_add(specs, &k, l, "ffn_up.weight", e, 2 * (int64_t)p->n_ff, K_MATRIX);
        } else {
            spec_add(specs, &k, l, "ffn_gate.weight", e, p->n_ff, K_MATRIX);
            spec_add(specs, &k, l, "ffn_up.weight", e, p->n_ff, K_MATRIX);
        }
        spec_add(specs, &k, l, "ffn_down.weight", p->n_ff, e, K_MATRIX);
        if (post_norms)
            spec_add(specs, &k, l, "post_ffw_norm.weight", e, 0, K_NORM);
    }
    spec_add(specs, &k, -1, "output_norm.weight", e, 0, K_NORM);
    if (!p->tied_output)
        spec_add(specs, &k, -1, "output.weight", e, nv, K_MATRIX);
    if (p->rope_freqs)
        spec_add(specs, &k, -1, "rope_freqs.weight", n_rot / 2, 0, K_ROPE);
    if (p->longrope) {
        spec_add(specs, &k, -1, "rope_factors_long.weight", n_rot / 2, 0, K_ROPE);
        spec_add(specs, &k, -1, "rope_factors_short.weight", n_rot / 2, 0, K_ROPE);
    }
    return k;
}

/* The k tensors of ws->specs added to w: their types, sizes and stream
 * positions. */
static glesc_status tensors_add(glesc_gguf_writer *w, const synth_params *p, writer_state *ws,
                                size_t k)
{
    /* Types, sizes and stream positions; then the tensors, in file order. */
    uint64_t step = 0;
    glesc_status st = GLESC_OK;
    for (size_t i = 0; i < k && st == GLESC_OK; i++) {
        spec *s = &ws->specs[i];
        if (p->skip_tensor && !strcmp(p->skip_tensor, s->name))
            continue;
        s->rows = s->ne1 ? s->ne1 : 1;
        if (p->bad_shape_tensor && !strcmp(p->bad_shape_tensor, s->name))
            s->rows++;
        s->type = synth_tensor_type(p, s->name, s->layer, s->ne0, s->ne1 == 0);
        s->row_bytes = glesc_dtype_row_bytes(s->type, s->ne0);
        if (!s->row_bytes) {
            st =
                fail(GLESC_ERROR_INVALID_ARGUMENT,
                     "tensor '%s': rows of %lld elements are not whole %s blocks of %d", s->name,
                     (long long)s->ne0, glesc_dtype_name(s->type), glesc_dtype_block_size(s->type));
            break;
        }
        s->step0 = step;
        if (s->kind != K_ROPE)
            step += 2 * (uint64_t)(s->ne0 * s->rows);
        st = glesc_gguf_writer_add_tensor_fn(w, s->name, s->type, s->ne1 ? 2 : 1,
                                             (int64_t[]){s->ne0, s->rows},
                                             s->row_bytes * (uint64_t)s->rows, fill_tensor, ws);
        if (st != GLESC_OK)
            fail(st, "%s", glesc_last_errmsg());
    }
    return st;
}

glesc_status synth_write(const synth_params *p, const char *path)
{
    errbuf[0] = 0;
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    vocab v = {0};
    writer_state *ws = calloc(1, sizeof *ws);
    glesc_status st = GLESC_ERROR_OUT_OF_MEMORY;
    if (!w || !ws) {
        fail(st, "out of memory");
        goto done;
    }
    if (!p->vocab_path && p->n_vocab && p->n_vocab < 260) {
        st = fail(GLESC_ERROR_INVALID_ARGUMENT,
                  "n_vocab %d: the placeholder vocabulary needs at least 260 tokens (<unk>, <s>, "
                  "</s>, 256 bytes, \xe2\x96\x81)",
                  p->n_vocab);
        goto done;
    }
    if (!p->vocab_path && !build_vocab(&v, (size_t)p->n_vocab)) {
        fail(st, "out of memory (vocabulary)");
        goto done;
    }
    bool llama_cpp = p->ftype > SYNTH_FTYPE_NONE && p->ftype < SYNTH_FTYPE_COUNT_;
    int64_t hd = p->head_dim > 0 ? p->head_dim : p->n_embd / p->n_head;
    set_hparams(w, p, llama_cpp);
    int64_t nv = (int64_t)v.n;
    if ((st = set_tokenizer(w, p, &v, &nv)) != GLESC_OK)
        goto done;
    set_rope_vocab(w, p, llama_cpp, hd, nv);

    ws->specs = calloc(6 + 16 * (size_t)p->n_layer, sizeof *ws->specs);
    if (!ws->specs) {
        st = fail(GLESC_ERROR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    size_t k = specs_plan(ws->specs, p, nv, hd);
    st = tensors_add(w, p, ws, k);
    if (st != GLESC_OK)
        goto done;
    ws->p = p;
    ws->n_specs = k;
    rng_jump_init(&ws->J);
    ws->state0 = p->seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    ws->n_threads = p->n_threads > 0 ? p->n_threads : cores > 0 ? (int)cores : 1;
    errbuf[0] = 0; /* the callback's failure, if any, says why */
    st = glesc_gguf_writer_write(w, path);
    if (st != GLESC_OK && !errbuf[0])
        fail(st, "%s", glesc_last_errmsg());
done:
    if (ws)
        free(ws->specs);
    free(ws);
    vocab_free(&v);
    glesc_gguf_writer_destroy(w);
    return st;
}
