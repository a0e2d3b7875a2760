/*
 * runtime.h — the model and session structs shared by the loader
 * (runtime.c) and the per-step graph builder (forward.c).
 */
#ifndef GLESC_LLM_RUNTIME_H
#define GLESC_LLM_RUNTIME_H

#include "core/core.h"
#include "glesc_llm.h"
#include "llm/model.h"

/* One decoder block's weights: persistent tensors of the model's context.
 * Matrices keep the file's type; vectors are f32. Shapes in ggml order. */
typedef struct llm_layer {
    glesc_tensor *attn_norm;       /* [n_embd] */
    glesc_tensor *wq;              /* [n_embd, n_head*head_dim] */
    glesc_tensor *wk, *wv;         /* [n_embd, n_head_kv*head_dim] */
    glesc_tensor *bq;              /* [n_head*head_dim] (qwen2) or NULL */
    glesc_tensor *bk, *bv;         /* [n_head_kv*head_dim] (qwen2) or NULL */
    glesc_tensor *q_norm, *k_norm; /* [head_dim] (qwen3) or NULL */
    glesc_tensor *wo;              /* [n_head*head_dim, n_embd] */
    glesc_tensor *ffn_norm;        /* [n_embd] */
    glesc_tensor *w_gate, *w_up;   /* [n_embd, n_ff] */
    glesc_tensor *w_down;          /* [n_ff, n_embd] */
} llm_layer;

struct glesc_model {
    glesc_context *ctx;
    llm_hparams hp;
    glesc_tokenizer *tok;
    glesc_tensor *tok_embd;    /* [n_embd, n_vocab] */
    glesc_tensor *output_norm; /* [n_embd] */
    glesc_tensor *output;      /* [n_embd, n_vocab]; NULL when tied to tok_embd */
    glesc_tensor *rope_freqs;  /* [n_rot / 2] Llama 3 frequency factors, or NULL */
    llm_layer *layers;         /* n_layer */
    char *name, *chat_template;
    glesc_dtype weight_type;
    uint64_t weight_bytes;
    int n_tensors;
};

struct glesc_session {
    glesc_model *m;
    glesc_graph *g;
    glesc_tensor **k_cache, **v_cache; /* per layer [n_head_kv*head_dim, n_ctx] kv_type */
    glesc_dtype kv_type;
    int32_t n_ctx, n_past, n_batch;
    glesc_eval_stats last;
    uint64_t total_dispatches;
};

/* Records the graph of one step on s->g: ids (i32 [n]) at positions pos
 * (i32 [n], n_past..n_past+n-1) to logits [n_vocab, all ? n : 1]. NULL on
 * a builder error (message in the context). */
glesc_tensor *llm_forward(glesc_session *s, glesc_tensor *ids, glesc_tensor *pos, int32_t n,
                          bool all_logits);

#endif
