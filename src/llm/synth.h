/*
 * synth.h — synthetic llama models written with the GGUF writer: random
 * weights, the real architecture and tensor layout, and a small SentencePiece
 * vocabulary laid out like stories260K's (<unk>, <s>, </s>, 256 byte-fallback
 * tokens, then word pieces). gguf-run's demo loads one; tests break one on
 * purpose (a missing tensor, a wrong shape, an unknown architecture) and
 * check the runtime against a CPU forward pass on each architecture: qwen2
 * files get q/k/v biases, qwen3 files per-head q/k norms.
 */
#ifndef GLESC_LLM_SYNTH_H
#define GLESC_LLM_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "glesc_gguf.h"

typedef struct llm_synth_params {
    const char *arch; /* general.architecture ("llama") */
    int n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
    glesc_dtype weight_type; /* f32, f16 or bf16 (norms are always f32) */
    uint64_t seed;
    const char *chat_template; /* tokenizer.chat_template, or NULL */
    int head_dim;              /* attention.key_length; 0: n_embd / n_head (not written) */
    float rope_base;           /* rope.freq_base; 0: 10000 */
    float rope_linear;         /* > 0: rope.scaling.type linear with this factor */
    bool tied_output;          /* no output.weight (the head reuses token_embd) */
    bool rope_freqs;           /* rope_freqs.weight (Llama 3 style factors 1..8) */
    /* Testing: leave out this tensor / give it one row too many. */
    const char *skip_tensor;
    const char *bad_shape_tensor;
} llm_synth_params;

/* The demo's model: n_embd 256, 4 layers, 8 heads (4 KV heads), n_ff 704,
 * context 512, f16 weights, seed 1. */
void llm_synth_params_default(llm_synth_params *p);

/* Writes the model to path. Errors in glesc_last_errmsg(). */
glesc_status llm_synth_write(const llm_synth_params *p, const char *path);

#endif
