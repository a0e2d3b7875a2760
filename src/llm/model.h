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
    LLM_ARCH_LLAMA, /* Llama 1/2/3, Mistral, TinyLlama */
    LLM_ARCH_QWEN2, /* + q/k/v biases */
    LLM_ARCH_QWEN3, /* + per-head q/k RMS norm */
    LLM_ARCH_COUNT_
} llm_arch;

typedef enum llm_rope_scaling {
    LLM_ROPE_SCALING_NONE,
    LLM_ROPE_SCALING_LINEAR, /* positions divided by the factor */
    LLM_ROPE_SCALING_LLAMA3, /* per-dimension frequency factors (rope_freqs.weight) */
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
    bool rope_neox;   /* NeoX layout (halves) rather than adjacent pairs */
    bool qkv_bias;    /* attn_{q,k,v}.bias present (qwen2) */
    bool qk_norm;     /* attn_{q,k}_norm.weight present (qwen3) */
    bool tied_output; /* no output.weight: the head reuses token_embd */
} llm_hparams;

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
