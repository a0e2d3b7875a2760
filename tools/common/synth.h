/*
 * synth.h — synthetic llama-family models written with the public GGUF
 * writer: random weights, the real architecture and tensor layout, and a
 * small SentencePiece vocabulary laid out like stories260K's (<unk>, <s>,
 * </s>, 256 byte-fallback tokens, then word pieces). gguf-run's demo loads
 * one; tests break one on purpose (a missing tensor, a wrong shape, an
 * unknown architecture) and check the runtime against a CPU forward pass on
 * each architecture: qwen2 files get q/k/v biases, qwen3 files per-head q/k
 * norms. The same parameters and seed always write the same bytes.
 */
#ifndef GLESC_TOOLS_SYNTH_H
#define GLESC_TOOLS_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "glesc_gguf.h"

typedef struct synth_params {
    const char *arch; /* general.architecture: "llama", "qwen2", "qwen3", or any name */
    int n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
    /* The matrices' type (token_embd, attention, feed-forward, output):
     * any type glesc_quantize has a quantizer for, whose block divides the
     * rows (n_embd, n_ff, n_head * head_dim). Norms, biases and rope
     * factors are always f32. */
    glesc_dtype weight_type;
    uint64_t seed;
    const char *chat_template; /* tokenizer.chat_template, or NULL */
    int head_dim;              /* attention.key_length; 0: n_embd / n_head (not written) */
    float rope_base;           /* rope.freq_base; 0: 10000 */
    float rope_linear;         /* > 0: rope.scaling.type linear with this factor */
    bool tied_output;          /* no output.weight (the head reuses token_embd) */
    bool rope_freqs;           /* rope_freqs.weight (Llama 3 style factors 1..8) */
    /* Testing: leave out this tensor / give it one row too many (NULL: none). */
    const char *skip_tensor;
    const char *bad_shape_tensor;
} synth_params;

/* The demo's model: llama, n_embd 256, 4 layers, 8 heads (4 KV heads),
 * n_ff 704, context 512, f16 weights, seed 1; everything else off. */
void synth_params_default(synth_params *p);

/* Writes the model p describes to path (through path.tmp, as the writer
 * does). Weights are drawn like the reference models' (token_embd ~ N(0, 1),
 * each matrix ~ N(0, 1/fan_in), norms 1 + 0.1·N(0, 1), biases 0.1·N(0, 1))
 * from xorshift64 seeded by p->seed. Returns GLESC_OK or the failing
 * status: when a glesc call failed (quantizing, writing the file),
 * glesc_last_errmsg() says why; GLESC_ERROR_OUT_OF_MEMORY with no glesc
 * call failing means synth's own allocation failed. */
glesc_status synth_write(const synth_params *p, const char *path);

#endif
