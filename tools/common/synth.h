/*
 * synth.h — synthetic llama-family models written with the public GGUF
 * writer: random weights, the real architecture and tensor layout. gguf-run's
 * demo loads one; tests break one on purpose (a missing tensor, a wrong
 * shape, an unknown architecture) and check the runtime against a CPU
 * forward pass on each architecture: qwen2 files get q/k/v biases, qwen3
 * files per-head q/k norms, gemma2 and gemma3 post-norms (gemma3 q/k norms
 * too), phi3 a fused attn_qkv and a gate|up ffn_up. gguf-synth writes benchmark models of real
 * shapes (presets such as tinyllama-1.1b) with llama-quantize's choice of
 * type per tensor for a file type (Q4_K_M's q6_k tensors included), so
 * llama.cpp loads the same file.
 *
 * The vocabulary is a small SentencePiece one laid out like stories260K's
 * (<unk>, <s>, </s>, 256 byte-fallback tokens, then word pieces), padded
 * with placeholder pieces to n_vocab, or the tokenizer of another GGUF file.
 *
 * The same parameters and seed always write the same bytes, whatever the
 * number of threads: every value comes from one xorshift64 stream in file
 * order, and a thread starts its share of a tensor by jumping the stream
 * ahead (xorshift is linear over GF(2), so a jump is a matrix power).
 * Tensors are generated and quantized on all cores while the file is
 * written, one at a time, so a 7B model never sits whole in memory.
 */
#ifndef GLESC_TOOLS_SYNTH_H
#define GLESC_TOOLS_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "glesc_gguf.h"

/* llama.cpp's file types (general.file_type) that synth writes as
 * llama-quantize would: 1-D tensors f32; output.weight (token_embd when the
 * head is tied) q6_k for the quantized types other than Q8_0; Q4_K_M and
 * Q5_K_M put q6_k in attn_v and ffn_down of the layers llama.cpp's
 * use_more_bits picks (the first and last eighth, every third between); a
 * row length the chosen block does not divide falls back as llama.cpp's
 * (q4_k → q5_0, q5_k → q5_1, q6_k → q8_0, then f16). */
typedef enum synth_ftype {
    SYNTH_FTYPE_NONE = 0, /* every matrix in weight_type; no general.file_type (the demo) */
    SYNTH_FTYPE_F32,
    SYNTH_FTYPE_F16,
    SYNTH_FTYPE_BF16,
    SYNTH_FTYPE_Q4_0,
    SYNTH_FTYPE_Q4_1,
    SYNTH_FTYPE_Q5_0,
    SYNTH_FTYPE_Q5_1,
    SYNTH_FTYPE_Q8_0,
    SYNTH_FTYPE_Q4_K_M,
    SYNTH_FTYPE_Q5_K_M,
    SYNTH_FTYPE_Q6_K,
    SYNTH_FTYPE_COUNT_ /* not a file type */
} synth_ftype;

/* "Q4_K_M", ...; NULL for NONE and values out of range. Static string. */
const char *synth_ftype_name(synth_ftype f);
/* The file type called name (case does not matter); SYNTH_FTYPE_NONE when
 * there is none. */
synth_ftype synth_ftype_find(const char *name);
/* llama.cpp's LLAMA_FTYPE_* value (general.file_type) of f; -1 for NONE. */
int synth_ftype_llama_id(synth_ftype f);

/* rope_freqs.weight (Llama 3's per-rotation frequency factors). */
typedef enum synth_rope_freqs {
    SYNTH_ROPE_FREQS_NONE = 0,
    SYNTH_ROPE_FREQS_RAMP = 1,   /* factors rising evenly from 1 to 8 (tests) */
    SYNTH_ROPE_FREQS_LLAMA3 = 2, /* Llama 3.1/3.2's: factor 32, low 1, high 4, context 8192 */
} synth_rope_freqs;

typedef struct synth_params {
    /* general.architecture: "llama", "qwen2", "qwen3", "gemma2", "gemma3",
     * "phi3" (the tensors and keys of each), or any name (llama's) */
    const char *arch;
    const char *name; /* general.name; NULL: "glesc synthetic demo (random weights)" */
    int n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
    /* The matrices' type (token_embd, attention, feed-forward, output) when
     * ftype is NONE: any type glesc_quantize has a quantizer for, whose
     * block divides the rows (n_embd, n_ff, n_head * head_dim). Norms,
     * biases and rope factors are always f32. */
    glesc_dtype weight_type;
    /* Not NONE: the types per tensor as llama-quantize chooses them for this
     * file type (weight_type is not used), and the keys a llama.cpp file of
     * that type carries: general.file_type, general.quantization_version,
     * ARCH.vocab_size and ARCH.rope.dimension_count. */
    synth_ftype ftype;
    uint64_t seed;
    const char *chat_template; /* tokenizer.chat_template, or NULL */
    int head_dim;              /* attention.key_length; 0: n_embd / n_head (not written) */
    int n_rot;                 /* rope.dimension_count (partial rotary); 0: head_dim */
    float rope_base;           /* rope.freq_base; 0: 10000 */
    float rope_linear;         /* > 0: rope.scaling.type linear with this factor */
    float rms_eps;             /* attention.layer_norm_rms_epsilon; 0: 1e-5 */
    bool tied_output;          /* no output.weight (the head reuses token_embd) */
    synth_rope_freqs rope_freqs;
    float rope_yarn;        /* > 0: rope.scaling.type yarn with this factor */
    int n_ctx_orig;         /* > 0: rope.scaling.original_context_length */
    float rope_attn_factor; /* > 0: rope.scaling.attn_factor */
    /* phi3: rope_factors_long.weight (rising from 1 to 8) and
     * rope_factors_short.weight (from 1 to 1.5), LongRoPE's pair */
    bool longrope;
    int n_swa; /* > 0: attention.sliding_window (gemma2, gemma3) */
    /* > 0: attn_logit_softcapping and final_logit_softcapping (gemma2) */
    float attn_softcap, final_softcap;
    /* Tokens: 0 is the small demo vocabulary as it is; more pads it with
     * placeholder pieces "[PAD<i>]" (type unused) to n_vocab; at least 260. */
    int n_vocab;
    /* Not NULL: every tokenizer.* key is copied from this GGUF file instead
     * (its token count is the model's n_vocab; n_vocab and chat_template are
     * not used). */
    const char *vocab_path;
    int n_threads; /* threads generating and quantizing; 0: one per core */
    /* Testing: leave out this tensor / give it one row too many (NULL: none). */
    const char *skip_tensor;
    const char *bad_shape_tensor;
} synth_params;

/* The demo's model: llama, n_embd 256, 4 layers, 8 heads (4 KV heads),
 * n_ff 704, context 512, f16 weights, seed 1; everything else off. */
void synth_params_default(synth_params *p);

/* The named real shapes, on top of synth_params_default (f16 matrices,
 * ftype NONE, seed 1; the placeholder vocabulary of the model's size):
 * "tinyllama-1.1b", "llama-7b", "qwen2.5-0.5b", "llama3.2-1b" (see
 * synth.c's table). Returns false, leaving p alone, for another name. */
bool synth_params_preset(synth_params *p, const char *name);
/* The i-th preset's name, NULL past the last. Static string. */
const char *synth_preset_name(int i);

/* The type synth writes tensor `name` in (a row of ne0 elements; layer -1
 * outside the blocks; vector: a 1-D tensor): weight_type or the file type's
 * choice as described at synth_ftype. */
glesc_dtype synth_tensor_type(const synth_params *p, const char *name, int layer, int64_t ne0,
                              bool vector);

/* Writes the model p describes to path (through path.tmp, as the writer
 * does). Weights are drawn like the reference models' (token_embd ~ N(0, 1),
 * each matrix ~ N(0, 1/fan_in), norms 1 + 0.1·N(0, 1), biases 0.1·N(0, 1))
 * from xorshift64 seeded by p->seed. Returns GLESC_OK or the failing status;
 * synth_errmsg() then says why. */
glesc_status synth_write(const synth_params *p, const char *path);

/* Why the last synth_write failed (a glesc call's message with what synth
 * was doing, or synth's own); "" before any failure. Static buffer: not
 * thread-safe across concurrent synth_write calls. */
const char *synth_errmsg(void);

#endif
