/*
 * model.c — see model.h. Key names and defaults are llama.cpp's (llama-arch
 * / llama-model), so any GGUF it loads for these architectures loads here.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "llm/model.h"
#include "quant/quant.h"

typedef struct arch_info {
    const char *name;
    bool rope_neox, qkv_bias, qk_norm;
    bool post_norms; /* post_attention_norm and post_ffw_norm */
    bool gelu;       /* GeGLU feed-forward */
    bool embd_scale; /* embeddings × √n_embd */
    bool fused;      /* attn_qkv (when the file has it) and ffn_up = gate|up */
    int swa_pattern; /* local layers: l % p < p - 1 (llama.cpp's set_swa_pattern) */
} arch_info;

/* One row per architecture: adding one is a row here (plus, for what the
 * row cannot say, its keys below) and its branches in forward.c. */
static const arch_info archs[LLM_ARCH_COUNT_] = {
    [LLM_ARCH_LLAMA] = {.name = "llama"},
    [LLM_ARCH_QWEN2] = {.name = "qwen2", .rope_neox = true, .qkv_bias = true},
    [LLM_ARCH_QWEN3] = {.name = "qwen3", .rope_neox = true, .qk_norm = true},
    [LLM_ARCH_GEMMA2] = {.name = "gemma2",
                         .rope_neox = true,
                         .post_norms = true,
                         .gelu = true,
                         .embd_scale = true,
                         .swa_pattern = 2},
    [LLM_ARCH_GEMMA3] = {.name = "gemma3",
                         .rope_neox = true,
                         .qk_norm = true,
                         .post_norms = true,
                         .gelu = true,
                         .embd_scale = true,
                         .swa_pattern = 6},
    [LLM_ARCH_PHI3] = {.name = "phi3", .rope_neox = true, .fused = true},
};
_Static_assert(CORE_ARRAY_LEN(archs) == LLM_ARCH_COUNT_, "one row per architecture");

bool llm_layer_is_swa(const llm_hparams *hp, int64_t l)
{
    return hp->swa_pattern > 0 && l % hp->swa_pattern < hp->swa_pattern - 1;
}

float llm_layer_rope_base(const llm_hparams *hp, int64_t l)
{
    return llm_layer_is_swa(hp, l) ? hp->rope_freq_base_swa : hp->rope_freq_base;
}

float llm_layer_rope_scale(const llm_hparams *hp, int64_t l)
{
    return llm_layer_is_swa(hp, l) ? hp->rope_freq_scale_swa : hp->rope_freq_scale;
}

int llm_arch_find(const char *name)
{
    for (int i = 0; i < LLM_ARCH_COUNT_; i++)
        if (!strcmp(archs[i].name, name))
            return i;
    return -1;
}

/* Reads {arch}.suffix as an integer; def < 0 means required. */
static glesc_status get_int(const glesc_gguf *f, const char *name, const llm_hparams *hp,
                            const char *suffix, int64_t def, int64_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", hp->arch_name, suffix);
    glesc_status st = glesc_gguf_get_i64(f, key, out);
    if (st == GLESC_ERROR_NOT_FOUND && def >= 0) {
        *out = def;
        return GLESC_OK;
    }
    if (st == GLESC_ERROR_NOT_FOUND)
        return core_err_set(NULL, st, "%s: %s: missing (the model needs it)", name, key);
    return st; /* the getter's message names the file and key */
}

static glesc_status get_float(const glesc_gguf *f, const char *name, const llm_hparams *hp,
                              const char *suffix, float def, float *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", hp->arch_name, suffix);
    glesc_status st = glesc_gguf_get_f32(f, key, out);
    if (st == GLESC_ERROR_NOT_FOUND) {
        *out = def;
        return GLESC_OK;
    }
    if (st != GLESC_OK)
        return st; /* the getter's message names the file and key */
    if (!isfinite(*out))
        return core_err_set(NULL, GLESC_ERROR_FORMAT, "%s: %s is %g, not a finite number", name,
                            key, (double)*out);
    return GLESC_OK;
}

/* Rope scaling as llama.cpp reads it: the type defaults to linear, the
 * factor (rope.scaling.factor, or the older rope.scale_linear) gives the
 * frequency scale whatever the type (none ignores it), YaRN adds its ramp
 * over original_context_length; attn_factor multiplies the rotated pairs
 * (LongRoPE). */
static glesc_status load_rope_scaling(const glesc_gguf *f, const char *name, llm_hparams *hp)
{
    glesc_status st;
    char key[128];
    const char *s;
    size_t n;
    float factor = 0.0f;
    hp->rope_scaling = LLM_ROPE_SCALING_LINEAR;
    snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch_name);
    if (glesc_gguf_get_str(f, key, &s, &n) == GLESC_OK) {
        if (n == 4 && !memcmp(s, "none", 4))
            hp->rope_scaling = LLM_ROPE_SCALING_NONE;
        else if (n == 4 && !memcmp(s, "yarn", 4))
            hp->rope_scaling = LLM_ROPE_SCALING_YARN;
        else if (n == 6 && !memcmp(s, "llama3", 6))
            hp->rope_scaling = LLM_ROPE_SCALING_LLAMA3;
        else if (!(n == 6 && !memcmp(s, "linear", 6)) && !(n == 8 && !memcmp(s, "longrope", 8)))
            return core_err_set(NULL, GLESC_ERROR_UNSUPPORTED,
                                "%s: %s '%.*s' is not supported (none, linear, yarn, longrope, "
                                "llama3)",
                                name, key, (int)n, s);
    }
    if ((st = get_float(f, name, hp, "rope.scaling.factor", 0.0f, &factor)))
        return st;
    if (factor == 0.0f && (st = get_float(f, name, hp, "rope.scale_linear", 0.0f, &factor)))
        return st;
    if (factor < 0.0f)
        return core_err_set(NULL, GLESC_ERROR_FORMAT,
                            "%s: %s.rope.scaling.factor %g must be positive", name, hp->arch_name,
                            (double)factor);
    hp->rope_freq_scale =
        factor == 0.0f || hp->rope_scaling == LLM_ROPE_SCALING_NONE ? 1.0f : 1.0f / factor;
    /* a file with no scaling keys is the plain rope */
    if (factor == 0.0f && hp->rope_scaling == LLM_ROPE_SCALING_LINEAR)
        hp->rope_scaling = LLM_ROPE_SCALING_NONE;
    if ((st = get_float(f, name, hp, "rope.scaling.attn_factor", 1.0f, &hp->rope_attn_factor)) ||
        (st = get_int(f, name, hp, "rope.scaling.original_context_length", hp->n_ctx_train,
                      &hp->n_ctx_orig)))
        return st;
    if (hp->n_ctx_orig <= 0 || hp->n_ctx_orig > INT32_MAX)
        return core_err_set(NULL, GLESC_ERROR_FORMAT,
                            "%s: %s.rope.scaling.original_context_length %lld is out of range",
                            name, hp->arch_name, (long long)hp->n_ctx_orig);
    hp->yarn_ext_factor = hp->rope_scaling == LLM_ROPE_SCALING_YARN ? 1.0f : 0.0f;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    if (hp->rope_scaling == LLM_ROPE_SCALING_YARN && !(hp->rope_freq_base > 1.0f))
        return core_err_set(NULL, GLESC_ERROR_FORMAT,
                            "%s: YaRN scaling needs %s.rope.freq_base above 1 (%g)", name,
                            hp->arch_name, (double)hp->rope_freq_base);
    /* llama3-style frequency factors come as a tensor. */
    if (glesc_gguf_find_tensor(f, "rope_freqs.weight") >= 0)
        hp->rope_scaling = LLM_ROPE_SCALING_LLAMA3;
    return GLESC_OK;
}

/* What llama.cpp fixes per architecture or reads with its own defaults:
 * local layers, soft-capping, the attention and embedding scales. */
static glesc_status load_arch_keys(const glesc_gguf *f, const char *name, llm_hparams *hp)
{
    glesc_status st;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->embd_scale = archs[hp->arch].embd_scale ? sqrtf((float)hp->n_embd) : 1.0f;
    hp->rope_freq_base_swa = hp->rope_freq_base;
    hp->rope_freq_scale_swa = hp->rope_freq_scale;
    switch (hp->arch) {
    case LLM_ARCH_GEMMA2:
        if ((st = get_int(f, name, hp, "attention.sliding_window", 4096, &hp->n_swa)) ||
            (st = get_float(f, name, hp, "attn_logit_softcapping", 50.0f, &hp->attn_softcap)) ||
            (st = get_float(f, name, hp, "final_logit_softcapping", 30.0f, &hp->final_softcap)))
            return st;
        hp->swa_pattern = archs[hp->arch].swa_pattern;
        if (hp->n_layer == 46) /* 27B: gemma_pytorch's query_pre_attn_scalar */
            hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
        break;
    case LLM_ARCH_GEMMA3:
        if ((st = get_int(f, name, hp, "attention.sliding_window", 0, &hp->n_swa)) ||
            (st = get_float(f, name, hp, "final_logit_softcapping", 0.0f, &hp->final_softcap)))
            return st;
        if (hp->n_swa > 0) { /* local layers rotate with Gemma's base, unscaled */
            hp->swa_pattern = archs[hp->arch].swa_pattern;
            hp->rope_freq_base_swa = 10000.0f;
            hp->rope_freq_scale_swa = 1.0f;
        }
        if (hp->n_layer == 62) /* 27B */
            hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
        break;
    default: /* phi3's attention.sliding_window is ignored, as llama.cpp does */
        break;
    }
    if (hp->n_swa < 0 || hp->n_swa > (1 << 30))
        return core_err_set(NULL, GLESC_ERROR_FORMAT,
                            "%s: %s.attention.sliding_window %lld is out of range", name,
                            hp->arch_name, (long long)hp->n_swa);
    if (hp->attn_softcap < 0 || hp->final_softcap < 0)
        return core_err_set(NULL, GLESC_ERROR_FORMAT,
                            "%s: %s soft-capping %g / %g must not be negative", name, hp->arch_name,
                            (double)hp->attn_softcap, (double)hp->final_softcap);
    return GLESC_OK;
}

glesc_status llm_hparams_load(const glesc_gguf *f, const char *name, llm_hparams *hp)
{
    memset(hp, 0, sizeof *hp);
    const char *s;
    size_t n;
    glesc_status st = glesc_gguf_get_str(f, "general.architecture", &s, &n);
    if (st == GLESC_ERROR_NOT_FOUND)
        return core_err_set(NULL, st, "%s: general.architecture: missing: not a model file", name);
    if (st != GLESC_OK)
        return st; /* the getter's message names the file and key */
    snprintf(hp->arch_name, sizeof hp->arch_name, "%.*s", (int)CORE_MIN(n, 31), s);
    int a = n < sizeof hp->arch_name ? llm_arch_find(hp->arch_name) : -1;
    if (a < 0) {
        sbuf known;
        sbuf_init(&known);
        for (int i = 0; i < LLM_ARCH_COUNT_; i++)
            sbuf_appendf(&known, "%s%s", i ? ", " : "", archs[i].name);
        st = core_err_set(NULL, GLESC_ERROR_UNSUPPORTED,
                          "%s: architecture '%.*s' is not supported (supported: %s)", name, (int)n,
                          s, sbuf_str(&known) ? sbuf_str(&known) : "?");
        sbuf_free(&known);
        return st;
    }
    hp->arch = (llm_arch)a;
    hp->rope_neox = archs[a].rope_neox;
    hp->qkv_bias = archs[a].qkv_bias;
    hp->qk_norm = archs[a].qk_norm;
    hp->post_norms = archs[a].post_norms;
    hp->gelu = archs[a].gelu;
    hp->fused_up = archs[a].fused;
    hp->fused_qkv = archs[a].fused && glesc_gguf_find_tensor(f, "blk.0.attn_qkv.weight") >= 0;

    if ((st = get_int(f, name, hp, "embedding_length", -1, &hp->n_embd)) ||
        (st = get_int(f, name, hp, "block_count", -1, &hp->n_layer)) ||
        (st = get_int(f, name, hp, "feed_forward_length", -1, &hp->n_ff)) ||
        (st = get_int(f, name, hp, "attention.head_count", -1, &hp->n_head)) ||
        (st = get_int(f, name, hp, "context_length", 2048, &hp->n_ctx_train)))
        return st;
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_ff <= 0 || hp->n_head <= 0 ||
        hp->n_embd > (1 << 20) || hp->n_layer > 4096 || hp->n_head > 4096)
        return core_err_set(NULL, GLESC_ERROR_FORMAT,
                            "%s: implausible sizes: n_embd %lld, n_layer %lld, n_ff %lld, "
                            "n_head %lld",
                            name, (long long)hp->n_embd, (long long)hp->n_layer,
                            (long long)hp->n_ff, (long long)hp->n_head);
    if ((st = get_int(f, name, hp, "attention.head_count_kv", hp->n_head, &hp->n_head_kv)) ||
        (st = get_int(f, name, hp, "attention.key_length", hp->n_embd / hp->n_head,
                      &hp->head_dim)) ||
        (st = get_int(f, name, hp, "rope.dimension_count", hp->head_dim, &hp->n_rot)) ||
        (st = get_float(f, name, hp, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->rms_eps)) ||
        (st = get_float(f, name, hp, "rope.freq_base", 10000.0f, &hp->rope_freq_base)))
        return st;
    if (hp->rms_eps < 0)
        return core_err_set(NULL, GLESC_ERROR_FORMAT,
                            "%s: %s.attention.layer_norm_rms_epsilon %g is negative", name,
                            hp->arch_name, (double)hp->rms_eps);
    if (!(hp->rope_freq_base > 0))
        return core_err_set(NULL, GLESC_ERROR_FORMAT, "%s: %s.rope.freq_base %g is not positive",
                            name, hp->arch_name, (double)hp->rope_freq_base);
    if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv)
        return core_err_set(NULL, GLESC_ERROR_FORMAT,
                            "%s: %s.attention.head_count %lld is not a multiple of head_count_kv "
                            "%lld",
                            name, hp->arch_name, (long long)hp->n_head, (long long)hp->n_head_kv);
    if (hp->head_dim <= 0 || hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return core_err_set(NULL, GLESC_ERROR_FORMAT,
                            "%s: rope.dimension_count %lld must be even and at most the head "
                            "size %lld",
                            name, (long long)hp->n_rot, (long long)hp->head_dim);
    int64_t vlen;
    if ((st = get_int(f, name, hp, "attention.value_length", hp->head_dim, &vlen)))
        return st;
    if (vlen != hp->head_dim)
        return core_err_set(NULL, GLESC_ERROR_UNSUPPORTED,
                            "%s: value_length %lld differs from key_length %lld", name,
                            (long long)vlen, (long long)hp->head_dim);

    if ((st = load_rope_scaling(f, name, hp)) || (st = load_arch_keys(f, name, hp)))
        return st;

    int64_t ti = glesc_gguf_find_tensor(f, "token_embd.weight");
    if (ti < 0)
        return core_err_set(NULL, GLESC_ERROR_NOT_FOUND,
                            "%s: tensor 'token_embd.weight' is missing", name);
    glesc_gguf_tensor_info t;
    glesc_gguf_tensor(f, ti, &t);
    hp->n_vocab = t.ne[1];
    hp->tied_output = glesc_gguf_find_tensor(f, "output.weight") < 0;
    return GLESC_OK;
}

static void req(llm_tensor_req *r, int *n, const char *name, int n_dims, int64_t ne0, int64_t ne1,
                bool optional, const char *what)
{
    llm_tensor_req *q = &r[(*n)++];
    snprintf(q->name, sizeof q->name, "%s", name);
    q->n_dims = n_dims;
    q->ne[0] = ne0;
    q->ne[1] = ne1;
    q->optional = optional;
    q->what = what;
}

llm_tensor_req *llm_tensor_reqs(const llm_hparams *hp, int *n)
{
    int per_layer = 11 + (hp->qkv_bias ? 3 : 0) + (hp->qk_norm ? 2 : 0);
    llm_tensor_req *r = core_calloc((size_t)(6 + per_layer * hp->n_layer), sizeof *r);
    if (!r)
        return NULL;
    int64_t e = hp->n_embd, q = hp->n_head * hp->head_dim, kv = hp->n_head_kv * hp->head_dim;
    *n = 0;
    req(r, n, "token_embd.weight", 2, e, hp->n_vocab, false, "n_embd x n_vocab");
    req(r, n, "output_norm.weight", 1, e, 1, false, "n_embd");
    req(r, n, "output.weight", 2, e, hp->n_vocab, true, "n_embd x n_vocab");
    req(r, n, "rope_freqs.weight", 1, hp->n_rot / 2, 1, true, "rope dims / 2");
    if (hp->arch == LLM_ARCH_PHI3) { /* LongRoPE, chosen by the context length */
        req(r, n, "rope_factors_long.weight", 1, hp->n_rot / 2, 1, true, "rope dims / 2");
        req(r, n, "rope_factors_short.weight", 1, hp->n_rot / 2, 1, true, "rope dims / 2");
    }
    for (int64_t l = 0; l < hp->n_layer; l++) {
        char nm[64];
#define LAYER_(suffix, nd, a, b, what)                                                             \
    snprintf(nm, sizeof nm, "blk.%lld." suffix, (long long)l);                                     \
    req(r, n, nm, nd, a, b, false, what)
        LAYER_("attn_norm.weight", 1, e, 1, "n_embd");
        if (hp->fused_qkv) {
            LAYER_("attn_qkv.weight", 2, e, q + 2 * kv, "n_embd x (n_head + 2*n_head_kv)*head_dim");
        } else {
            LAYER_("attn_q.weight", 2, e, q, "n_embd x n_head*head_dim");
            LAYER_("attn_k.weight", 2, e, kv, "n_embd x n_head_kv*head_dim");
            LAYER_("attn_v.weight", 2, e, kv, "n_embd x n_head_kv*head_dim");
        }
        LAYER_("attn_output.weight", 2, q, e, "n_head*head_dim x n_embd");
        LAYER_("ffn_norm.weight", 1, e, 1, "n_embd");
        if (hp->fused_up) {
            LAYER_("ffn_up.weight", 2, e, 2 * hp->n_ff, "n_embd x 2*n_ff (gate, then up)");
        } else {
            LAYER_("ffn_gate.weight", 2, e, hp->n_ff, "n_embd x n_ff");
            LAYER_("ffn_up.weight", 2, e, hp->n_ff, "n_embd x n_ff");
        }
        LAYER_("ffn_down.weight", 2, hp->n_ff, e, "n_ff x n_embd");
        if (hp->qkv_bias) {
            LAYER_("attn_q.bias", 1, q, 1, "n_head*head_dim");
            LAYER_("attn_k.bias", 1, kv, 1, "n_head_kv*head_dim");
            LAYER_("attn_v.bias", 1, kv, 1, "n_head_kv*head_dim");
        }
        if (hp->qk_norm) {
            LAYER_("attn_q_norm.weight", 1, hp->head_dim, 1, "head_dim");
            LAYER_("attn_k_norm.weight", 1, hp->head_dim, 1, "head_dim");
        }
        if (hp->post_norms) {
            LAYER_("post_attention_norm.weight", 1, e, 1, "n_embd");
            LAYER_("post_ffw_norm.weight", 1, e, 1, "n_embd");
        }
#undef LAYER_
    }
    return r;
}

/* token_embd.weight sets n_vocab (its rows), which output.weight must
 * match. When the two disagree, the vocabulary's token count says which one
 * is wrong, so the message blames the right tensor. */
static glesc_status check_vocab_rows(const glesc_gguf *f, const char *name, const llm_hparams *hp)
{
    int64_t oi = glesc_gguf_find_tensor(f, "output.weight");
    if (oi < 0)
        return GLESC_OK;
    glesc_gguf_tensor_info o;
    glesc_gguf_tensor(f, oi, &o);
    if (o.ne[1] == hp->n_vocab)
        return GLESC_OK;
    int64_t ki = glesc_gguf_find_key(f, "tokenizer.ggml.tokens");
    uint64_t n_tokens = ki >= 0 ? glesc_gguf_arr_n(f, ki) : 0;
    if (n_tokens != (uint64_t)o.ne[1])
        return GLESC_OK; /* output.weight is the odd one: the shape check names it */
    glesc_gguf_tensor_info t;
    glesc_gguf_tensor(f, glesc_gguf_find_tensor(f, "token_embd.weight"), &t);
    return core_err_set(NULL, GLESC_ERROR_SHAPE,
                        "%s: tensor 'token_embd.weight' has shape [%lld, %lld, %lld, %lld], "
                        "expected [%lld, %lld] (n_embd x n_vocab: the vocabulary has %llu tokens "
                        "and output.weight %lld rows)",
                        name, (long long)t.ne[0], (long long)t.ne[1], (long long)t.ne[2],
                        (long long)t.ne[3], (long long)hp->n_embd, (long long)o.ne[1],
                        (unsigned long long)n_tokens, (long long)o.ne[1]);
}

glesc_status llm_tensors_check(const glesc_gguf *f, const char *name, const llm_hparams *hp)
{
    glesc_status vst = check_vocab_rows(f, name, hp);
    if (vst != GLESC_OK)
        return vst;
    int n;
    llm_tensor_req *r = llm_tensor_reqs(hp, &n);
    if (!r)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "%s: tensor list", name);
    glesc_status st = GLESC_OK;
    for (int i = 0; i < n && st == GLESC_OK; i++) {
        int64_t ti = glesc_gguf_find_tensor(f, r[i].name);
        if (ti < 0) {
            if (!r[i].optional)
                st = core_err_set(NULL, GLESC_ERROR_NOT_FOUND,
                                  "%s: tensor '%s' is missing (%s model, %lld layers)", name,
                                  r[i].name, hp->arch_name, (long long)hp->n_layer);
            continue;
        }
        glesc_gguf_tensor_info t;
        glesc_gguf_tensor(f, ti, &t);
        bool ok = t.ne[0] == r[i].ne[0] && t.ne[1] == r[i].ne[1] && t.ne[2] == 1 && t.ne[3] == 1;
        if (!ok)
            st = core_err_set(NULL, GLESC_ERROR_SHAPE,
                              "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected "
                              "[%lld, %lld] (%s)",
                              name, r[i].name, (long long)t.ne[0], (long long)t.ne[1],
                              (long long)t.ne[2], (long long)t.ne[3], (long long)r[i].ne[0],
                              (long long)r[i].ne[1], r[i].what);
        else if (!quant_gpu_snippet(t.type))
            st = core_err_set(NULL, GLESC_ERROR_UNSUPPORTED,
                              "%s: tensor '%s' has type %s, which glesc cannot compute with yet",
                              name, r[i].name, glesc_dtype_name(t.type));
    }
    core_free(r);
    return st;
}
