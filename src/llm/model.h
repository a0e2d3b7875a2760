/*
 * model.h — llama-family models from GGUF: the architecture table, the
 * hyperparameters read with llama.cpp's key names and defaults, and the
 * tensor list each architecture needs, validated name by name and shape by
 * shape before anything is uploaded.
 */
#ifndef GLESC_LLM_MODEL_H
#define GLESC_LLM_MODEL_H

#include "core/core.h"
#include "glesc_gguf.h"

typedef enum llm_arch {
    LLM_ARCH_LLAMA,  /* Llama 1/2/3, Mistral, TinyLlama */
    LLM_ARCH_QWEN2,  /* + q/k/v biases */
    LLM_ARCH_QWEN3,  /* + per-head q/k RMS norm */
    LLM_ARCH_GEMMA2, /* GeGLU, pre+post norms, ×√n_embd, soft-capping, local layers 0, 2, .. */
    LLM_ARCH_GEMMA3, /* GeGLU, pre+post norms, ×√n_embd, q/k norms, five local layers of six */
    LLM_ARCH_PHI3,   /* fused attn_qkv and gate|up, LongRoPE factors */
    LLM_ARCH_COUNT_
} llm_arch;

typedef enum llm_rope_scaling {
    LLM_ROPE_SCALING_NONE,
    LLM_ROPE_SCALING_LINEAR, /* positions divided by the factor */
    LLM_ROPE_SCALING_LLAMA3, /* per-dimension frequency factors (rope_freqs.weight) */
    LLM_ROPE_SCALING_YARN,   /* YaRN: interpolation ramped by dimension (Qwen 2.5 long context) */
} llm_rope_scaling;

typedef struct llm_hparams {
    llm_arch arch;
    char arch_name[32];    /* general.architecture */
    int64_t n_vocab;       /* rows of token_embd */
    int64_t n_ctx_train;   /* {arch}.context_length */
    int64_t n_embd;        /* {arch}.embedding_length */
    int64_t n_layer;       /* {arch}.block_count */
    int64_t n_ff;          /* {arch}.feed_forward_length */
    int64_t n_head;        /* {arch}.attention.head_count */
    int64_t n_head_kv;     /* {arch}.attention.head_count_kv (default n_head) */
    int64_t head_dim;      /* {arch}.attention.key_length (default n_embd / n_head) */
    int64_t n_rot;         /* {arch}.rope.dimension_count (default head_dim) */
    float rms_eps;         /* {arch}.attention.layer_norm_rms_epsilon (default 1e-5) */
    float rope_freq_base;  /* {arch}.rope.freq_base (default 10000) */
    float rope_freq_scale; /* 1 / {arch}.rope.scaling.factor for linear scaling, else 1 */
    llm_rope_scaling rope_scaling;
    float rope_attn_factor; /* {arch}.rope.scaling.attn_factor (1): rotated pairs' magnitude */
    int64_t n_ctx_orig;     /* {arch}.rope.scaling.original_context_length (n_ctx_train) */
    float yarn_ext_factor;  /* 1 with YaRN scaling, else 0 (llama.cpp's default) */
    float yarn_beta_fast, yarn_beta_slow; /* 32, 1 */
    /* Local (sliding-window) layers, fixed per architecture as llama.cpp
     * fixes them: layer l is local when swa_pattern > 0 and l % swa_pattern
     * < swa_pattern - 1; they see the last n_swa positions and rotate with
     * their own base and scale. */
    int64_t n_swa; /* {arch}.attention.sliding_window (gemma2: 4096 when absent) */
    int swa_pattern;
    float rope_freq_base_swa, rope_freq_scale_swa;
    float attn_scale;    /* the scores' scale: 1/√head_dim (Gemma 27B: 1/√(n_embd/n_head)) */
    float attn_softcap;  /* {arch}.attn_logit_softcapping (gemma2: 50 when absent), or 0 */
    float final_softcap; /* {arch}.final_logit_softcapping (gemma2: 30 when absent), or 0 */
    float embd_scale;    /* embeddings × √n_embd (gemma), else 1 */
    bool rope_neox;      /* NeoX layout (halves) rather than adjacent pairs */
    bool qkv_bias;       /* attn_{q,k,v}.bias present (qwen2) */
    bool qk_norm;        /* attn_{q,k}_norm.weight present (qwen3, gemma3) */
    bool post_norms;     /* post_attention_norm, post_ffw_norm after each block (gemma) */
    bool gelu;           /* GeGLU: gelu(gate)·up (tanh GELU), rather than SwiGLU */
    bool fused_qkv;      /* attn_qkv.weight: q, k, v rows of one matrix (phi3) */
    bool fused_up;       /* ffn_up.weight holds gate then up rows (2·n_ff; phi3), no ffn_gate */
    bool tied_output;    /* no output.weight: the head reuses token_embd */
} llm_hparams;

/* Is layer l a local (sliding-window) layer? */
bool llm_layer_is_swa(const llm_hparams *hp, int64_t l);
/* Layer l's rope base and scale (local layers have their own). */
float llm_layer_rope_base(const llm_hparams *hp, int64_t l);
float llm_layer_rope_scale(const llm_hparams *hp, int64_t l);

/* The architecture called name, or -1 (LLM_ARCH_COUNT_ entries). */
int llm_arch_find(const char *name);

/* Reads the hyperparameters of f (named name in messages) and checks them
 * against each other and the tensors (token_embd gives n_vocab). Errors name
 * the file and the key: "x.gguf: llama.block_count: missing". */
glesc_status llm_hparams_load(const glesc_gguf *f, const char *name, llm_hparams *hp);

/* One tensor the model needs. ne[] are the expected dims (ggml order). */
typedef struct llm_tensor_req {
    char name[64];
    int n_dims;
    int64_t ne[2];
    bool optional;
    const char *what; /* the shape in words, for messages */
} llm_tensor_req;

/* The tensors of hp's architecture (global ones first, then per layer).
 * *n gets the count; core_free the array. NULL on out of memory. */
llm_tensor_req *llm_tensor_reqs(const llm_hparams *hp, int *n);

/* Checks that every required tensor exists with its shape and a type the GPU
 * can read, and that no optional one has a wrong shape. Errors name the file
 * and tensor: "x.gguf: tensor 'blk.0.attn_q.weight' has shape [64, 32],
 * expected [64, 64] (n_embd x n_head*head_dim)". */
glesc_status llm_tensors_check(const glesc_gguf *f, const char *name, const llm_hparams *hp);

#endif
