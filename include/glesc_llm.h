/*
 * glesc_llm.h — language-model layer: tokenizers built from GGUF metadata
 * (SentencePiece "llama" and byte-level BPE "gpt2"), detokenization that can
 * stream one id at a time.
 *
 * Conventions (see glesc.h): fallible calls return a glesc_status and leave a
 * message in glesc_last_errmsg(), the one error channel; destroy(NULL) is a
 * no-op; option structs have an inline _init and a struct_size. A tokenizer
 * is immutable once loaded: several threads may tokenize and detokenize with
 * one tokenizer at the same time. A decoder is used by one thread at a time.
 *
 * Behaviour follows llama.cpp's llama-vocab (tokenize with add_special /
 * parse_special, token_to_piece, detokenize), so ids match its test vectors.
 *
 * Also here: models and sessions (the runtime that evaluates a GGUF model on
 * the GPU), chat templates, generation with a per-token callback and chat
 * sessions.
 */
#ifndef GLESC_LLM_H
#define GLESC_LLM_H

#include "glesc.h"
#include "glesc_gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct glesc_tokenizer glesc_tokenizer;

/* What the tokenizer does, from tokenizer.ggml.model. */
typedef enum glesc_tokenizer_kind {
    GLESC_TOKENIZER_SPM = 1, /* "llama": SentencePiece, scores, byte fallback <0xNN> */
    GLESC_TOKENIZER_BPE = 2, /* "gpt2": byte-level BPE with merges and a pre-tokenizer */
} glesc_tokenizer_kind;

/* Token types as stored in tokenizer.ggml.token_type (append-only). */
typedef enum glesc_token_type {
    GLESC_TOKEN_TYPE_UNDEFINED = 0,
    GLESC_TOKEN_TYPE_NORMAL = 1,
    GLESC_TOKEN_TYPE_UNKNOWN = 2,
    GLESC_TOKEN_TYPE_CONTROL = 3,
    GLESC_TOKEN_TYPE_USER_DEFINED = 4,
    GLESC_TOKEN_TYPE_UNUSED = 5,
    GLESC_TOKEN_TYPE_BYTE = 6,
} glesc_token_type;

/* Builds a tokenizer from the tokenizer.ggml.* keys of f (a model or a
 * vocab-only file). Everything needed is copied: f may be closed afterwards.
 * On success *out owns the tokenizer (glesc_tokenizer_destroy). On failure
 * *out is NULL and glesc_last_errmsg() names the key and entry
 * ("tokenizer.ggml.merges entry 17: ..."). Missing optional keys take
 * llama.cpp's defaults (SPM: bos 1, eos 2, unk 0, add_bos true,
 * add_space_prefix true; BPE: bos = eos = 11, no unk, add_bos false). */
GLESC_API glesc_status glesc_tokenizer_load(const glesc_gguf *f, glesc_tokenizer **out);
GLESC_API void glesc_tokenizer_destroy(glesc_tokenizer *tok);

GLESC_API glesc_tokenizer_kind glesc_tokenizer_get_kind(const glesc_tokenizer *tok);
/* Name of the pre-tokenizer in use ("default", "gpt-2", "llama3", ...; "spm"
 * for SentencePiece). Static string. */
GLESC_API const char *glesc_tokenizer_pre_name(const glesc_tokenizer *tok);
GLESC_API int32_t glesc_tokenizer_n_vocab(const glesc_tokenizer *tok);

/* Special ids; -1 when the vocabulary has none. */
GLESC_API int32_t glesc_tokenizer_bos(const glesc_tokenizer *tok);
GLESC_API int32_t glesc_tokenizer_eos(const glesc_tokenizer *tok);
GLESC_API int32_t glesc_tokenizer_eot(const glesc_tokenizer *tok);
GLESC_API int32_t glesc_tokenizer_unk(const glesc_tokenizer *tok);
GLESC_API int32_t glesc_tokenizer_pad(const glesc_tokenizer *tok);
GLESC_API int32_t glesc_tokenizer_nl(const glesc_tokenizer *tok); /* newline token */
/* Whether the model's tokenize adds BOS / EOS with GLESC_TOKENIZE_ADD_SPECIAL
 * (tokenizer.ggml.add_bos_token / add_eos_token, or the default). */
GLESC_API bool glesc_tokenizer_adds_bos(const glesc_tokenizer *tok);
GLESC_API bool glesc_tokenizer_adds_eos(const glesc_tokenizer *tok);
/* True for ids that end generation (EOS, EOT, EOM and the end-of-turn tokens
 * llama.cpp recognises by text). False for ids out of range. */
GLESC_API bool glesc_tokenizer_is_eog(const glesc_tokenizer *tok, int32_t id);
/* Type of token id; GLESC_TOKEN_TYPE_UNDEFINED when out of range. */
GLESC_API glesc_token_type glesc_tokenizer_token_type(const glesc_tokenizer *tok, int32_t id);
/* The stored text of token id (e.g. "▁the", "Ġthe", "<0x0A>"), not
 * NUL-terminated; *len gets its length. Owned by tok. NULL when out of range. */
GLESC_API const char *glesc_tokenizer_token_text(const glesc_tokenizer *tok, int32_t id,
                                                 size_t *len);
/* Id of the token whose stored text is exactly text[0..len), or -1. */
GLESC_API int32_t glesc_tokenizer_find(const glesc_tokenizer *tok, const char *text, size_t len);

/* ---- Tokenize ---- */
enum {
    /* Add BOS / EOS where the vocabulary asks for them (llama.cpp's add_special). */
    GLESC_TOKENIZE_ADD_SPECIAL = 1u << 0,
    /* Recognise control tokens written in the text ("<|im_start|>", "<s>") and
     * emit their ids (for chat templates). Without it they are plain text.
     * User-defined tokens are always recognised, as in llama.cpp. */
    GLESC_TOKENIZE_PARSE_SPECIAL = 1u << 1,
};

/* Tokenizes text[0..len) (any bytes: invalid UTF-8 does not fail) into the
 * caller's buffer ids[0..cap). *n_out gets the number of ids. When cap is too
 * small, returns GLESC_ERROR_LIMIT and *n_out holds the number needed (call
 * again with a buffer that large; ids may be NULL when cap is 0). text may be
 * NULL when len is 0. */
GLESC_API glesc_status glesc_tokenize(const glesc_tokenizer *tok, const char *text, size_t len,
                                      unsigned flags, int32_t *ids, size_t cap, size_t *n_out);
/* The same into a new array: *ids_out is allocated through glesc's allocator
 * (free it with glesc_tokens_free) and is NULL when *n_out is 0. */
GLESC_API glesc_status glesc_tokenize_alloc(const glesc_tokenizer *tok, const char *text,
                                            size_t len, unsigned flags, int32_t **ids_out,
                                            size_t *n_out);
/* Frees an array from glesc_tokenize_alloc; NULL is a no-op. */
GLESC_API void glesc_tokens_free(int32_t *ids);

/* ---- Detokenize ---- */
enum {
    /* Render control and unknown tokens ("<s>", "<|im_end|>") as their text;
     * without it they render as nothing. User-defined tokens always render. */
    GLESC_DETOKENIZE_SPECIAL = 1u << 0,
    /* SentencePiece with add_space_prefix: keep the space that the first
     * piece of the sequence carries (after a BOS that renders as nothing).
     * Without this flag it is removed, so detokenize(tokenize(s)) == s. Use
     * it when decoding the continuation of earlier text. */
    GLESC_DETOKENIZE_KEEP_LEADING_SPACE = 1u << 1,
    /* Whole-sequence detokenize only: skip the clean-up of spaces before
     * punctuation that some BPE vocabularies ask for (llama.cpp's
     * clean_spaces, on for gpt-2). The streaming decoder never cleans. */
    GLESC_DETOKENIZE_NO_CLEANUP = 1u << 2,
};

/* The bytes token id stands for (its "piece"): "▁the" → " the", "Ġthe" →
 * " the", "<0x0A>" → "\n" (a single byte, possibly part of a UTF-8
 * sequence). Control/unknown tokens give "" unless flags has
 * GLESC_DETOKENIZE_SPECIAL. *piece points into tok (valid while tok lives),
 * not NUL-terminated. GLESC_ERROR_INVALID_ARGUMENT for an id out of range. */
GLESC_API glesc_status glesc_token_to_piece(const glesc_tokenizer *tok, int32_t id, unsigned flags,
                                            const char **piece, size_t *len);

/* Whole sequence to text (GLESC_DETOKENIZE_* flags). *text_out is allocated
 * through glesc's allocator, NUL-terminated (free it with glesc_text_free);
 * *len_out gets its length without the NUL. Bytes are returned as the pieces
 * give them: the result need not be valid UTF-8. */
GLESC_API glesc_status glesc_detokenize(const glesc_tokenizer *tok, const int32_t *ids, size_t n,
                                        unsigned flags, char **text_out, size_t *len_out);
GLESC_API void glesc_text_free(char *text);

/* A streaming decoder: feed ids one at a time, get back the bytes that now
 * form complete UTF-8 characters; a partial sequence (from byte-fallback
 * tokens or a BPE token that ends mid-character) is held back until the next
 * feed completes it. Bytes that can never become valid UTF-8 are passed
 * through as they are. tok must outlive the decoder. */
typedef struct glesc_decoder glesc_decoder;

GLESC_API glesc_status glesc_decoder_create(const glesc_tokenizer *tok, unsigned flags,
                                            glesc_decoder **out);
GLESC_API void glesc_decoder_destroy(glesc_decoder *dec);
/* Feeds one id. *text (owned by dec, valid until the next call on dec, not
 * NUL-terminated) and *len get the bytes ready now (possibly none).
 * GLESC_ERROR_INVALID_ARGUMENT for an id out of range (the decoder is
 * unchanged). */
GLESC_API glesc_status glesc_decoder_feed(glesc_decoder *dec, int32_t id, const char **text,
                                          size_t *len);
/* Returns the bytes still held back (an incomplete sequence at the end) and
 * empties the decoder's hold. */
GLESC_API glesc_status glesc_decoder_flush(glesc_decoder *dec, const char **text, size_t *len);
/* Starts a new sequence (drops held bytes; the leading-space rule applies again). */
GLESC_API void glesc_decoder_reset(glesc_decoder *dec);

/* ---- Sampling ----
 * A sampler turns one row of logits into a token id through a chain of
 * stages. glesc_sampler_create builds llama.cpp's default chain from
 * glesc_sampler_params: logit bias -> repetition penalty (over the last
 * repeat_last_n accepted tokens) -> top-k -> typical -> top-p -> min-p ->
 * temperature -> a draw from the softmax (each stage where it is on).
 * temperature <= 0 means greedy: the arg max after the bias and the
 * penalty, ties going to the lowest id. Draws are deterministic for a
 * given seed. glesc_sampler_chain_create and the glesc_sampler_add_* calls
 * compose any other chain (docs/sampling.md). */
/* A logit bias: bias added to token's logit (-INFINITY bans it). */
typedef struct glesc_logit_bias {
    int32_t token;
    float bias; /* added to the token's logit; -INFINITY bans it */
} glesc_logit_bias;
typedef struct glesc_sampler_params {
    /* sizeof(glesc_sampler_params) as the caller was compiled, set by
     * glesc_sampler_params_init(); 0 means this header's layout. */
    uint32_t struct_size;
    float temperature;     /* 0.8; <= 0: greedy */
    int32_t top_k;         /* 40; <= 0: off */
    float top_p;           /* 0.95; >= 1: off; 0: only the most likely token */
    float min_p;           /* 0.05; <= 0: off; below 1 */
    float repeat_penalty;  /* 1.0 (off); > 1 discourages repeats */
    int32_t repeat_last_n; /* 64; how many accepted tokens the penalty looks at */
    uint64_t seed;         /* the random stream */
    float typical_p;       /* 1.0 (off; 0 too); locally typical sampling, after top-k */
    /* n_logit_bias biases (copied), applied first (0: none) */
    const glesc_logit_bias *logit_bias;
    size_t n_logit_bias;
} glesc_sampler_params;

/* llama.cpp's defaults (the values in the comments above), seed 0, and
 * struct_size. */
static inline void glesc_sampler_params_init(glesc_sampler_params *p)
{
    for (size_t i = 0; i < sizeof *p; i++)
        ((unsigned char *)p)[i] = 0;
    p->struct_size = (uint32_t)sizeof *p;
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->typical_p = 1.0f;
}
/* Deprecated: the old name of glesc_sampler_params_init (the one option
 * initializer that was not called _init); kept so that older callers
 * build, and to be removed with the next soname. */
GLESC_DEPRECATED("use glesc_sampler_params_init")
static inline void glesc_sampler_params_default(glesc_sampler_params *p)
{
    glesc_sampler_params_init(p);
}

typedef struct glesc_sampler glesc_sampler;

/* A sampler for logits rows of n_vocab floats; p NULL: the defaults of
 * glesc_sampler_params_init. On failure *out is NULL and
 * glesc_last_errmsg() names the bad parameter. A grammar may be added to
 * it (glesc_sampler_add_grammar); other stages may not, since the chain
 * ends in its final pick: compose those with glesc_sampler_chain_create. */
GLESC_API glesc_status glesc_sampler_create(const glesc_sampler_params *p, int32_t n_vocab,
                                            glesc_sampler **out);
/* An empty chain for rows of n_vocab floats with random stream seed: add
 * stages in the order they should run. A chain without a final stage
 * (dist or greedy) ends in a draw. */
GLESC_API glesc_status glesc_sampler_chain_create(int32_t n_vocab, uint64_t seed,
                                                  glesc_sampler **out);

/* The stages. Each returns GLESC_ERROR_INVALID_ARGUMENT for a parameter
 * out of range (the message names it), GLESC_ERROR_STATE after a final
 * stage or for a second logit bias, penalty or grammar, and
 * GLESC_ERROR_LIMIT past 16 stages. */
/* Adds bias[i].bias to token bias[i].token's logit (copied). */
GLESC_API glesc_status glesc_sampler_add_logit_bias(glesc_sampler *s, const glesc_logit_bias *bias,
                                                    size_t n);
/* llama.cpp's repetition penalty over the last last_n accepted tokens:
 * a positive logit is divided by repeat_penalty, a negative multiplied. */
GLESC_API glesc_status glesc_sampler_add_penalty(glesc_sampler *s, float repeat_penalty,
                                                 int32_t last_n);
GLESC_API glesc_status glesc_sampler_add_top_k(glesc_sampler *s, int32_t k); /* k > 0 */
/* The most likely tokens until their probability reaches p (0..1). */
GLESC_API glesc_status glesc_sampler_add_top_p(glesc_sampler *s, float p);
/* Tokens at least p (0..1) times as likely as the most likely one. */
GLESC_API glesc_status glesc_sampler_add_min_p(glesc_sampler *s, float p);
/* Locally typical sampling (p in (0, 1]; 1 keeps everything). */
GLESC_API glesc_status glesc_sampler_add_typical(glesc_sampler *s, float p);
/* Divides the logits by t for the stages after it; t <= 0 keeps only the
 * most likely token. */
GLESC_API glesc_status glesc_sampler_add_temperature(glesc_sampler *s, float t);
/* Final stages: a draw from the softmax of what is left, or its arg max. */
GLESC_API glesc_status glesc_sampler_add_dist(glesc_sampler *s);
GLESC_API glesc_status glesc_sampler_add_greedy(glesc_sampler *s);
/* A GBNF grammar (llama.cpp's format; root: the start rule, NULL for
 * "root") that every sampled token must continue, so the generated text
 * always parses. It constrains the whole chain wherever it is added: the
 * chain's pick is checked, and when the grammar rejects it the chain runs
 * again without the rejected tokens. End-of-generation tokens are allowed
 * only where the grammar may end; when it allows no token (a dead end in
 * this vocabulary) the tokenizer's EOS is picked. What is needed of tok
 * (each token's text) is copied: tok may go before s. Parse errors name
 * the line and column (GLESC_ERROR_FORMAT); left recursion and undefined
 * rules are errors. Generation with a grammar never uses the pipelined GPU
 * greedy path. */
GLESC_API glesc_status glesc_sampler_add_grammar(glesc_sampler *s, const glesc_tokenizer *tok,
                                                 const char *gbnf, const char *root);
/* Checks GBNF text as glesc_sampler_add_grammar would, without a
 * tokenizer: GLESC_OK, or the error it would give (the line and column). */
GLESC_API glesc_status glesc_grammar_check(const char *gbnf, const char *root);
/* The grammar of a JSON schema (glesc_json_schema_to_grammar) as above. */
GLESC_API glesc_status glesc_sampler_add_json_schema(glesc_sampler *s, const glesc_tokenizer *tok,
                                                     const char *schema);
/* Converts a JSON schema (schema[0..len), a subset: object, properties,
 * required, additionalProperties false, array, items, minItems, maxItems,
 * string, minLength, maxLength, number, integer, boolean, null, enum,
 * const, anyOf, oneOf, $ref to #/definitions/... or #/$defs/...) to GBNF
 * text with start rule "root". *gbnf_out is NUL-terminated (free with
 * glesc_text_free). Other keywords give GLESC_ERROR_FORMAT naming the
 * keyword and its JSON path. */
GLESC_API glesc_status glesc_json_schema_to_grammar(const char *schema, size_t len,
                                                    char **gbnf_out);

GLESC_API void glesc_sampler_destroy(glesc_sampler *s);
/* Picks a token from logits (n_vocab floats; not modified). */
GLESC_API int32_t glesc_sampler_sample(glesc_sampler *s, const float *logits);
/* Records a generated token: for the penalty, and it advances the grammar
 * (a token the grammar refuses leaves the grammar as it was). */
GLESC_API void glesc_sampler_accept(glesc_sampler *s, int32_t token);
/* Records a prompt token: for the penalty only, the grammar does not see
 * it (glesc_generate and glesc_chat accept their prompts so). */
GLESC_API void glesc_sampler_accept_prompt(glesc_sampler *s, int32_t token);
/* Forgets the accepted tokens, restarts the random stream from the seed and
 * the grammar from its start rule. */
GLESC_API void glesc_sampler_reset(glesc_sampler *s);
/* Gives dst src's random stream and accepted tokens (the last of them that
 * dst's repeat_last_n keeps): dst then samples as src would, with its own
 * parameters. A grammar's state goes along: copied when both samplers have
 * the same grammar, else dst's grammar replays src's grammar tokens (and
 * restarts when they do not fit it). For a forked conversation
 * (glesc_session_copy). */
GLESC_API void glesc_sampler_copy(glesc_sampler *dst, const glesc_sampler *src);

/* ---- Models and sessions: running a GGUF language model on the GPU ----
 *
 * A model is the weights of a GGUF file uploaded as persistent tensors of a
 * context, its hyperparameters and its tokenizer. A session is one sequence
 * being evaluated: a KV cache on the GPU and the per-step graph. Tokens are
 * evaluated in order; a session remembers how many positions it holds
 * (n_past), so a chat turn evaluates only its new tokens.
 *
 * Each eval builds the step's graph again (cheap: only nodes are recorded)
 * and glesc_graph_compute finds the plan of the same structure in the plan
 * cache: positions and lengths are tensors and uniforms, never structure, so
 * from the second decode step on nothing is generated or compiled.
 *
 * Architectures: llama (Llama 1/2/3, Mistral, TinyLlama), qwen2 (q/k/v
 * biases), qwen3 (q/k RMS norm), gemma2 (GeGLU, post-norms, sliding window,
 * soft-capping), gemma3 (local and global layers, q/k norms), phi3 (fused
 * qkv and gate|up, partial rotary, LongRoPE). Weights: any type glesc_weight_new accepts
 * (f32, f16, bf16 and the ggml block types with a GPU layout); others are
 * refused at load with the tensor named.
 *
 * Errors: messages in glesc_last_errmsg(), as every call's (a failure inside
 * the context is named there with the step that met it). The context, the
 * model and its sessions are used from one thread at a time. */
typedef struct glesc_model glesc_model;
typedef struct glesc_session glesc_session;

/* Called during loading on the loading thread: once before the first
 * weight is read (done 0), then after each tensor is uploaded, in order:
 * bytes of the file's tensors the model uses uploaded so far of total (the
 * last call has done == total). Return true to cancel the load: it then
 * fails with GLESC_ERROR_CANCELLED and frees everything it made. (Every glesc
 * callback that can stop work stops it by returning true.) The weights are
 * read ahead of the upload, so a tensor may already be read when the call
 * before it comes. */
typedef bool (*glesc_progress_fn)(void *user, uint64_t done, uint64_t total);

/* Options of a model load; zero (NULL) means the default. */
typedef struct glesc_model_options {
    /* sizeof(glesc_model_options) as the caller was compiled, set by
     * glesc_model_options_init(); 0 means this header's layout. */
    uint32_t struct_size;
    glesc_progress_fn progress; /* may be NULL */
    void *progress_user;
} glesc_model_options;

/* Zeroes *opts (the defaults) and sets struct_size. */
static inline void glesc_model_options_init(glesc_model_options *opts)
{
    for (size_t i = 0; i < sizeof *opts; i++)
        ((unsigned char *)opts)[i] = 0;
    opts->struct_size = (uint32_t)sizeof *opts;
}

typedef struct glesc_model_info {
    const char *arch;          /* general.architecture ("llama"); owned by the model */
    const char *name;          /* general.name, else the file's base name; owned by the model */
    const char *chat_template; /* tokenizer.chat_template, or NULL; owned by the model */
    int64_t n_vocab, n_embd, n_layer, n_ff, n_head, n_head_kv, head_dim, n_ctx_train;
    glesc_dtype weight_type; /* type of the first layer's attn_q.weight */
    uint64_t weight_bytes;   /* bytes of every uploaded tensor */
    int n_tensors;           /* tensors uploaded */
    uint64_t gpu_bytes;      /* GPU memory the weights took (what glesc_model_estimate predicts) */
} glesc_model_info;

/* Opens path, checks the architecture, hyperparameters and every tensor's
 * name, shape and type, builds the tokenizer and uploads the weights to ctx
 * (matrices in their file type; norm vectors as f32). opts may be NULL. On
 * success *out owns the model (glesc_model_destroy, before ctx is
 * destroyed); the file is closed again. On failure *out is NULL and
 * glesc_last_errmsg() names the file and the key or tensor ("m.gguf: tensor
 * 'blk.0.attn_q.weight' is missing (llama model, 2 layers)"). */
GLESC_API glesc_status glesc_model_load(glesc_context *ctx, const char *path,
                                        const glesc_model_options *opts, glesc_model **out);
/* The same from a GGUF file the caller opened (glesc_gguf_open,
 * glesc_gguf_open_memory): f is only read during the call and may be closed
 * when it returns. name (may be NULL: "(gguf)") stands for the file in
 * messages and is the model's name when general.name is absent. */
GLESC_API glesc_status glesc_model_load_gguf(glesc_context *ctx, const glesc_gguf *f,
                                             const char *name, const glesc_model_options *opts,
                                             glesc_model **out);
/* The same from size bytes at data (a whole GGUF file), not copied: the
 * weights go from data to the GPU and the tokenizer copies what it needs, so
 * data must stay valid and unchanged during the call only and may be freed
 * or unmapped when it returns. name as for glesc_model_load_gguf (NULL:
 * "(memory)"). */
GLESC_API glesc_status glesc_model_load_memory(glesc_context *ctx, const void *data, size_t size,
                                               const char *name, const glesc_model_options *opts,
                                               glesc_model **out);
/* The same from the size bytes at offset of the open descriptor fd (a file,
 * an Android asset's descriptor with its start and length, a flash
 * partition): the range is mapped read-only (read with pread where it cannot
 * be mapped) during the call and unmapped before it returns. size 0: up to
 * the end of the file (only for regular files, whose size fstat knows). fd
 * stays open and its file offset is not moved; the caller closes it. name as
 * for glesc_model_load_gguf (NULL: "fd N at offset O"). */
GLESC_API glesc_status glesc_model_load_fd(glesc_context *ctx, int fd, uint64_t offset,
                                           uint64_t size, const char *name,
                                           const glesc_model_options *opts, glesc_model **out);
/* Frees the model's weights and tokenizer. Destroy its sessions first. NULL
 * is a no-op. */
GLESC_API void glesc_model_destroy(glesc_model *m);
/* The model's tokenizer (owned by the model, valid while it lives). */
GLESC_API const glesc_tokenizer *glesc_model_tokenizer(const glesc_model *m);
GLESC_API void glesc_model_get_info(const glesc_model *m, glesc_model_info *out);

/* glesc_session_options.kv_type and kv_type_v: the default (f16 for
 * kv_type, kv_type's for kv_type_v), and f32 (GLESC_DTYPE_F32 is 0, the
 * default's value). */
#define GLESC_KV_DEFAULT ((glesc_dtype)0)
#define GLESC_KV_F32 ((glesc_dtype)-1)

/* Options of a session; zero means the default. */
typedef struct glesc_session_options {
    /* sizeof(glesc_session_options) as the caller was compiled, set by
     * glesc_session_options_init(); 0 means this header's layout. */
    uint32_t struct_size;
    /* Positions the KV cache holds; 0: the model's training context, at most
     * 4096. */
    int32_t n_ctx;
    /* KV cache element types, as llama.cpp's -ctk/-ctv: kv_type for the
     * keys, and for the values too unless kv_type_v says otherwise.
     * GLESC_KV_DEFAULT (0): f16, llama.cpp's default, rounding as its f16
     * cache does. GLESC_DTYPE_F16; GLESC_DTYPE_Q8_0 (about half of f16's
     * memory) or GLESC_DTYPE_Q4_0 (about a quarter): blocks of 32 values
     * quantized as they are appended, as ggml's CPU quantizers round, and
     * read by the attention as they are stored (the model's head size must
     * be a multiple of 32, llama.cpp's rule); GLESC_KV_F32: f32 (since
     * GLESC_DTYPE_F32 is 0, the default's value, it cannot ask for f32).
     * Other types are GLESC_ERROR_INVALID_ARGUMENT. */
    glesc_dtype kv_type;
    /* The values' type where it differs from kv_type (the same names);
     * GLESC_KV_DEFAULT (0): kv_type's. */
    glesc_dtype kv_type_v;
    /* Most tokens one graph evaluates (longer inputs are split); 0: 512. */
    int32_t n_batch;
    /* Measure each kernel's GPU time (glesc_session_kernel_times); costs a
     * timer query per kernel, so leave it off where speed is measured. */
    bool timing;
} glesc_session_options;

/* Zeroes *opts (the defaults) and sets struct_size. */
static inline void glesc_session_options_init(glesc_session_options *opts)
{
    for (size_t i = 0; i < sizeof *opts; i++)
        ((unsigned char *)opts)[i] = 0;
    opts->struct_size = (uint32_t)sizeof *opts;
}

/* Memory a model and one session of it will take, before loading it. */
typedef struct glesc_model_memory {
    /* GPU: the weights as uploaded: block types repacked to whole 32-bit
     * words, norm vectors as f32, each buffer at its size (persistent
     * buffers take no size class) and split at the device's storage-block
     * limit. What glesc_model_info.gpu_bytes reports after the load. */
    uint64_t weight_bytes;
    /* GPU: one session's KV cache for the options' n_ctx and KV types. What
     * glesc_session_kv_bytes reports. */
    uint64_t kv_bytes;
    /* GPU: activations of one step of n_batch tokens (an upper bound; the
     * pool keeps such buffers for reuse between steps). */
    uint64_t scratch_bytes;
    uint64_t gpu_bytes; /* the three above */
    /* Host heap the model and one session keep (tokenizer, logits row,
     * tensor records; an upper bound). Not counted: the file's pages, mapped
     * only while loading, and what the driver keeps (on a software renderer
     * such as llvmpipe the GPU bytes are host memory too). */
    uint64_t host_bytes;
} glesc_model_memory;

/* Estimates from the metadata and tensor table of f (nothing is uploaded)
 * what loading it and creating one session with opts (NULL: defaults) would
 * take. ctx may be NULL; with a context, tensors beyond its storage-block
 * limit are split as a load on it would split them. Fails like a load for a
 * file that is not a model glesc runs (the message names the key or
 * tensor). */
GLESC_API glesc_status glesc_model_estimate(const glesc_context *ctx, const glesc_gguf *f,
                                            const glesc_session_options *opts,
                                            glesc_model_memory *out);

/* A session over m with an empty KV cache. opts may be NULL. The model must
 * outlive the session. Where its prompts may need the device profile (the
 * GEMV/GEMM threshold, for n_batch of 2 and more) and the context has none
 * yet, it is measured here, once a context: a few small matmuls,
 * milliseconds on a GPU, their buffers deleted after; none where the
 * device class, GLESC_GEMV_MAX_M or the disk cache gives it. */
GLESC_API glesc_status glesc_session_create(glesc_model *m, const glesc_session_options *opts,
                                            glesc_session **out);
GLESC_API void glesc_session_destroy(glesc_session *s);

enum {
    /* Return the logits of every evaluated position, not only the last. */
    GLESC_EVAL_ALL_LOGITS = 1u << 0,
};

/* Evaluates ids[0..n) at positions n_past .. n_past+n-1, appending their
 * keys and values to the KV cache, and writes logits (may be NULL): n_vocab
 * floats for the last position, or n × n_vocab (position by position) with
 * GLESC_EVAL_ALL_LOGITS. n ≥ 1. Errors: an id out of the vocabulary, or
 * n_past + n > n_ctx (GLESC_ERROR_LIMIT, nothing evaluated); a logit that
 * is NaN or infinite in the rows written (GLESC_ERROR_NUMERIC, naming the
 * position and token: a broken model); a GPU failure (the cache's contents
 * at these positions are then undefined). After any failure n_past is what
 * it was before the call. */
GLESC_API glesc_status glesc_session_eval(glesc_session *s, const int32_t *ids, size_t n,
                                          unsigned flags, float *logits);
/* The logits row (n_vocab floats) of the last position evaluated with
 * logits, owned by the session and valid until the next eval or truncate;
 * NULL when the last eval read no logits (logits NULL), failed, or the
 * cache was truncated since. glesc_generate samples its first token from
 * it. */
GLESC_API const float *glesc_session_logits(const glesc_session *s);
/* GPU bytes of the session's KV cache (see glesc_model_memory.kv_bytes). */
GLESC_API uint64_t glesc_session_kv_bytes(const glesc_session *s);
/* The element types of the session's cached keys and values as created
 * (GLESC_DTYPE_F32, _F16, _Q8_0 or _Q4_0; the defaults resolved). Either
 * pointer may be NULL; a NULL session leaves them unchanged. */
GLESC_API void glesc_session_kv_types(const glesc_session *s, glesc_dtype *k, glesc_dtype *v);
/* Positions evaluated so far, and the capacity. */
GLESC_API int32_t glesc_session_n_past(const glesc_session *s);
GLESC_API int32_t glesc_session_n_ctx(const glesc_session *s);
/* Forgets the positions from n on (0 ≤ n ≤ n_past): the next eval continues
 * at position n. The cache keeps its memory. */
GLESC_API glesc_status glesc_session_truncate(glesc_session *s, int32_t n);
/* Context shift (llama.cpp's, as llama-cli does when the context fills):
 * forgets positions [keep, keep + discard) and moves the later ones down by
 * discard, rotating their cached keys to the new positions; the next eval
 * continues at n_past - discard. What the moved positions took from the
 * forgotten ones (in layers above the first) stays: the model sees a
 * slightly different history than a fresh evaluation of the kept tokens.
 * Needs 0 ≤ keep, 0 ≤ discard, keep + discard ≤ n_past. */
GLESC_API glesc_status glesc_session_shift(glesc_session *s, int32_t keep, int32_t discard);

/* Pipelined greedy decoding. With a greedy sampler the next token is the
 * arg max of the logits, which the GPU computes itself (inside the output
 * head's kernel): glesc_session_eval_greedy evaluates one token and leaves
 * the arg max of its logits (ties to the lowest id) on the GPU, where the
 * next glesc_session_eval_greedy reads it as its input, so the host queues
 * step t+1 before it reads step t's token (glesc_session_greedy_id) and the
 * GPU does not wait for the host between steps. No logits are read back
 * (glesc_session_logits is NULL after a greedy eval). glesc_generate and
 * glesc_chat decode this way by themselves when their sampler is greedy
 * (see glesc_generate_params.logits). */
#define GLESC_GREEDY_PREVIOUS (-1)
/* Evaluates one token at position n_past: id, or with
 * GLESC_GREEDY_PREVIOUS the arg max of the previous greedy eval's logits,
 * still on the GPU (the previous eval must be a greedy one, with no
 * glesc_session_eval or truncate since: else GLESC_ERROR_STATE). Queues
 * the work and returns without waiting for it; its token is read with
 * glesc_session_greedy_id, in order. At most two may wait unread
 * (GLESC_ERROR_STATE for a third). A full context is GLESC_ERROR_LIMIT
 * (nothing evaluated). glesc_session_eval, and a glesc_session_truncate
 * that moves n_past, drop the tokens not read yet. The statistics
 * (glesc_session_last_stats) count the submission: ns is the host's time,
 * not the GPU's. */
GLESC_API glesc_status glesc_session_eval_greedy(glesc_session *s, int32_t id);

/* Compiles, ahead of use, every program the session's evaluations can
 * need: each batch length from 1 to its n_batch (GLESC_EVAL_ALL_LOGITS
 * aside: its output head compiles on first use), the first batch and later
 * ones, the greedy decode step, and the decode step at the cache length
 * where the device's attention changes variant; nothing is evaluated and the session's
 * state is unchanged. A cold compile takes seconds on a small GPU (and
 * under Mesa's llvmpipe): a product calls this at first boot, with the
 * context's program cache on disk (the default), and every later start
 * loads the programs from there. The context's compile callback
 * (glesc_context_set_compile_callback) reports the progress. */
GLESC_API glesc_status glesc_session_precompile(glesc_session *s);
/* The token the oldest unread greedy eval chose (the arg max of its
 * position's logits): waits for that eval only, later ones keep running.
 * GLESC_ERROR_STATE when none waits; GLESC_ERROR_NUMERIC when those logits
 * held a NaN (the message names the position; the positions stay
 * evaluated: truncate them). */
GLESC_API glesc_status glesc_session_greedy_id(glesc_session *s, int32_t *id);

typedef struct glesc_eval_stats {
    int32_t n_tokens;          /* tokens of the last eval (its last graph for split inputs) */
    int kernels;               /* kernels after fusion, per graph */
    int dispatches;            /* GPU dispatches, per graph */
    bool plan_reused;          /* the graph's plan came from the plan cache */
    int glsl_built;            /* kernels whose GLSL was generated (0 for a reused plan) */
    int programs_compiled;     /* programs compiled (0 for a reused plan) */
    uint64_t ns;               /* wall time of the whole eval, logits read back included */
    uint64_t total_dispatches; /* over the session's life */
    /* Where ns went, summed over the eval's graphs: building the step's
     * graph (inputs written, layers built), glesc_graph_compute (ordering,
     * plan lookup, recording or replaying the dispatches: host time, the GPU
     * works meanwhile), and reading the logits back (waiting for the GPU
     * included). */
    uint64_t build_ns, submit_ns, read_ns;
} glesc_eval_stats;

/* Statistics of the last glesc_session_eval. */
GLESC_API void glesc_session_last_stats(const glesc_session *s, glesc_eval_stats *out);
/* The kernels of the last glesc_session_eval's graph (its last graph when
 * the input was split), in dispatch order, with their GPU times: the count,
 * and *out (owned by the session, valid until its next eval). 0 and NULL
 * unless the session was created with timing. */
GLESC_API int glesc_session_kernel_times(const glesc_session *s, const glesc_kernel_time **out);

/* ---- Saved session state (a prompt cache) ----
 * A session's state: the tokens its cache holds (the caller's: the session
 * keeps no token ids), the KV cache's n_past filled positions in its stored
 * type, the last logits row when the session has one, and optionally a
 * sampler's random stream and penalty history. It is tied to the model by a
 * header (format version, glesc version, a hash of the model file's
 * metadata, tensor table and samples of each tensor's bytes, the
 * architecture, layers, KV heads, head size and KV type) and to itself by
 * checksums: a state of another model, another glesc version, another KV
 * type, or a truncated or corrupted one is refused with GLESC_ERROR_FORMAT
 * and a message naming the file (or "state buffer"), the field or byte
 * offset and the reason, before the session or the sampler is touched.
 * docs/api.md, "Saved state", has the layout. */

/* Bytes glesc_session_state_save writes for s with n_tokens tokens and,
 * when smp is not NULL, its sampler state; 0 when s is NULL. */
GLESC_API size_t glesc_session_state_size(const glesc_session *s, const glesc_sampler *smp,
                                          size_t n_tokens);
/* Writes s's state into dst (size bytes, at least
 * glesc_session_state_size's; *written, may be NULL, gets the count).
 * tokens[0..n_tokens) are the ids at the cache's positions: n_tokens must
 * equal glesc_session_n_past(s). smp (may be NULL) adds its random stream
 * and penalty history. Waits for the GPU work queued on s; the session is
 * unchanged. */
GLESC_API glesc_status glesc_session_state_save(glesc_session *s, const glesc_sampler *smp,
                                                const int32_t *tokens, size_t n_tokens, void *dst,
                                                size_t size, size_t *written);
/* As glesc_session_state_save, into the file path (written under a
 * temporary name in its directory and renamed over path, so a reader never
 * sees half a state). */
GLESC_API glesc_status glesc_session_state_save_file(glesc_session *s, const glesc_sampler *smp,
                                                     const int32_t *tokens, size_t n_tokens,
                                                     const char *path);
/* Loads a state (data[0..size), read during the call only) into s: the
 * cache's first n_past positions, n_past, the logits row when the state
 * has one (else glesc_session_logits is NULL: evaluate the last token
 * again, after truncating to n - 1, to sample from it), and, when smp is
 * not NULL and the state has a sampler's, smp's random stream and penalty
 * history (its parameters stay smp's own). The tokens go to
 * tokens_out[0..capacity) (capacity glesc_session_n_ctx(s) always
 * suffices; NULL: not returned) and their count to *n_tokens (may be
 * NULL). s may have another n_ctx than the
 * saving session as long as the state's positions fit (a LongRoPE model
 * (phi3) also needs the same side of its original context length, whose
 * factors the cached keys were rotated with). s's pending greedy tokens
 * are dropped. On any error s and smp are as they were, except an error of
 * the GPU while the cache is written, after which s is empty (n_past 0). */
GLESC_API glesc_status glesc_session_state_load(glesc_session *s, glesc_sampler *smp,
                                                const void *data, size_t size, int32_t *tokens_out,
                                                size_t capacity, size_t *n_tokens);
/* As glesc_session_state_load, from the file path (a regular file). */
GLESC_API glesc_status glesc_session_state_load_file(glesc_session *s, glesc_sampler *smp,
                                                     const char *path, int32_t *tokens_out,
                                                     size_t capacity, size_t *n_tokens);
/* Makes dst a copy of src (a fork: a conversation continued two ways after
 * a shared system prompt): src's cache positions, copied on the GPU, its
 * n_past and its logits row. Both sessions must be of one model and one KV
 * type, and src's positions must fit dst's n_ctx. dst's pending greedy
 * tokens are dropped; src is unchanged (work queued on it stays queued).
 * Sampler state is the sampler's: copy it with glesc_sampler_copy. */
GLESC_API glesc_status glesc_session_copy(glesc_session *dst, glesc_session *src);

/* ---- Chat templates ----
 * llama.cpp's built-in chat formats (llama-chat.cpp), chosen by name or
 * detected from a model's tokenizer.chat_template with llama.cpp's
 * heuristic (looking for markers such as "<|im_start|>" or "[INST]"; no
 * Jinja is evaluated). Append-only. */
typedef enum glesc_chat_template {
    GLESC_CHAT_NONE = 0,          /* not detected */
    GLESC_CHAT_CHATML,            /* <|im_start|>role\n...<|im_end|>\n */
    GLESC_CHAT_LLAMA2,            /* [INST] ... [/INST] (system as plain text) */
    GLESC_CHAT_LLAMA2_SYS,        /* [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] */
    GLESC_CHAT_LLAMA2_SYS_BOS,    /* as llama2-sys, <s> before later turns */
    GLESC_CHAT_LLAMA2_SYS_STRIP,  /* as llama2-sys, contents trimmed */
    GLESC_CHAT_MISTRAL_V1,        /* " [INST] ... [/INST]" */
    GLESC_CHAT_MISTRAL_V3,        /* "[INST] ...[/INST]" */
    GLESC_CHAT_MISTRAL_V3_TEKKEN, /* "[INST]...[/INST]" */
    GLESC_CHAT_MISTRAL_V7,        /* [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST] */
    GLESC_CHAT_MISTRAL_V7_TEKKEN, /* as v7 without the spaces */
    GLESC_CHAT_PHI3,              /* <|role|>\n...<|end|>\n */
    GLESC_CHAT_PHI4,              /* <|im_start|>role<|im_sep|>...<|im_end|> */
    GLESC_CHAT_FALCON3,           /* <|role|>\n...\n */
    GLESC_CHAT_ZEPHYR,            /* <|role|>\n...<|endoftext|>\n */
    GLESC_CHAT_MONARCH,           /* role\n...</s>\n with <s> between messages */
    GLESC_CHAT_GEMMA,             /* <start_of_turn>user\n...<end_of_turn>\n, "model" */
    GLESC_CHAT_ORION,             /* Human: ...\n\nAssistant: </s> */
    GLESC_CHAT_OPENCHAT,          /* GPT4 Correct User: ...<|end_of_turn|> */
    GLESC_CHAT_VICUNA,            /* USER: ...\nASSISTANT: ...</s>\n */
    GLESC_CHAT_VICUNA_ORCA,       /* as vicuna with SYSTEM: */
    GLESC_CHAT_DEEPSEEK,          /* ### Instruction:\n...\n### Response:\n */
    GLESC_CHAT_DEEPSEEK2,         /* User: ...\n\nAssistant: */
    GLESC_CHAT_DEEPSEEK3,         /* <｜User｜>...<｜Assistant｜> */
    GLESC_CHAT_COMMAND_R,         /* <|START_OF_TURN_TOKEN|><|USER_TOKEN|>... */
    GLESC_CHAT_LLAMA3,            /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    GLESC_CHAT_LLAMA4,            /* <|header_start|>role<|header_end|>\n\n...<|eot|> */
    GLESC_CHAT_GRANITE,           /* <|start_of_role|>role<|end_of_role|>...<|end_of_text|>\n */
    GLESC_CHAT_EXAONE3,           /* [|user|]...\n[|assistant|]...[|endofturn|]\n */
    GLESC_CHAT_MEGREZ,            /* <|role_start|>role<|role_end|>...<|turn_end|> */
    GLESC_CHAT_COUNT_             /* not a template */
} glesc_chat_template;

/* llama.cpp's name ("chatml", "llama2-sys", "mistral-v7", ...); NULL for a
 * value that is not a template. Static string. */
GLESC_API const char *glesc_chat_template_name(glesc_chat_template t);
/* The template called name, or GLESC_CHAT_NONE. */
GLESC_API glesc_chat_template glesc_chat_template_find(const char *name);
/* The template a Jinja chat template text uses: its name if the text is one,
 * else llama.cpp's marker heuristic; GLESC_CHAT_NONE when nothing matches or
 * text is NULL. */
GLESC_API glesc_chat_template glesc_chat_template_detect(const char *text);

typedef struct glesc_chat_message {
    const char *role; /* "system", "user" or "assistant" */
    const char *content;
} glesc_chat_message;

/* Formats msgs[0..n) with template t as llama.cpp's
 * llama_chat_apply_template does; with add_assistant, ends with the start
 * of the assistant's turn. *out (NUL-terminated, free with
 * glesc_text_free) is the text to tokenize with
 * GLESC_TOKENIZE_PARSE_SPECIAL (no BOS in it: add it when tokenizing the
 * first turn). For a chat: the text of the messages so far (add_assistant
 * false) is a prefix of the text with one more user message (add_assistant
 * true), so each turn evaluates only the difference. */
GLESC_API glesc_status glesc_chat_format(glesc_chat_template t, const glesc_chat_message *msgs,
                                         size_t n, bool add_assistant, char **out);

/* ---- Generation ----
 * glesc_generate samples tokens one at a time from a session and hands each
 * to a callback with its text, as gguf-run streams them; glesc_chat (below)
 * runs a conversation on top of it. Both report what they do through an
 * optional event callback, so a client can show progress, profile or
 * explain, and both are used from one thread at a time with their
 * session. */

/* Why generation ended. Stable values (append-only). */
typedef enum glesc_stop_reason {
    GLESC_STOP_NONE = 0, /* nothing was generated */
    GLESC_STOP_EOS,      /* an end-of-generation token was sampled */
    GLESC_STOP_LENGTH,   /* n_predict tokens were generated */
    GLESC_STOP_CONTEXT,  /* the session's context is full */
    GLESC_STOP_CALLBACK, /* the token callback returned true */
} glesc_stop_reason;

/* "none", "eos", "length", "context", "callback"; NULL for a value that is
 * not a reason. Static string. */
GLESC_API const char *glesc_stop_reason_name(glesc_stop_reason r);

/* Called for every sampled token: its id and piece[0..len), the bytes of
 * text that are complete now (a UTF-8 character split over tokens is held
 * back until it is whole, so len may be 0); piece is not NUL-terminated and
 * valid during the call only. Also called for an end-of-generation token
 * that ends generation (len 0, the return value ignored), and at the end,
 * with id -1, for bytes still held back (an incomplete character; only when
 * there are some; the return value ignored). During the call
 * glesc_session_logits() is the row the token was sampled from (with a
 * greedy sampler only when glesc_generate_params.logits asks for it, else
 * NULL from the second token on: the GPU picked it). Return true
 * to stop after this token: it is kept like the last of n_predict tokens
 * (evaluated only with eval_last; see glesc_chat_send for chats). */
typedef bool (*glesc_token_fn)(void *user, int32_t id, const char *piece, size_t len);

typedef enum glesc_gen_event_kind {
    /* Input text was evaluated: n_tokens ids (a prompt, a chat turn's text,
     * a chat's end-of-turn text); stats of that eval. */
    GLESC_GEN_EVENT_PROMPT_EVAL = 1,
    /* The generated token id was evaluated; stats of that eval. */
    GLESC_GEN_EVENT_TOKEN_EVAL,
    /* Generation ended for reason stop (before held-back bytes are handed
     * to the token callback and, in a chat, before the end of the turn). */
    GLESC_GEN_EVENT_STOP,
    /* Chat: the context is full, the conversation starts over with the
     * kept messages (the system message); the KV cache is emptied. */
    GLESC_GEN_EVENT_START_OVER,
    /* Chat: the context is full; the oldest turns after the kept messages
     * left the cache and the later positions moved down
     * (glesc_session_shift); n_tokens: positions dropped. */
    GLESC_GEN_EVENT_CONTEXT_SHIFT,
} glesc_gen_event_kind;

typedef struct glesc_gen_event {
    glesc_gen_event_kind kind;
    size_t n_tokens; /* PROMPT_EVAL: tokens evaluated; TOKEN_EVAL: 1; CONTEXT_SHIFT: dropped */
    int32_t id;      /* TOKEN_EVAL: the token; else -1 */
    const glesc_eval_stats *stats; /* *_EVAL: the eval's statistics; else NULL */
    glesc_stop_reason stop;        /* STOP: why */
} glesc_gen_event;

typedef void (*glesc_gen_event_fn)(void *user, const glesc_gen_event *ev);

typedef struct glesc_generate_params {
    /* sizeof(glesc_generate_params) as the caller was compiled, set by
     * glesc_generate_params_init(); 0 means this header's layout. */
    uint32_t struct_size;
    /* Most tokens to generate; < 0: until an end-of-generation token or a
     * full context; 0: none. */
    int32_t n_predict;
    /* Treat end-of-generation tokens as text and keep going. */
    bool ignore_eos;
    /* Evaluate the last token too (the one that reached n_predict or that
     * the callback stopped at), when the context has room, so the session
     * holds everything generated. Off: like gguf-run, nothing is computed
     * for a token no one samples from. (A chat always evaluates it.) */
    bool eval_last;
    /* GLESC_DETOKENIZE_* flags of the pieces (default
     * GLESC_DETOKENIZE_KEEP_LEADING_SPACE: the text continues the prompt). */
    unsigned detokenize_flags;
    glesc_token_fn on_token; /* may be NULL */
    void *token_user;
    glesc_gen_event_fn on_event; /* may be NULL */
    void *event_user;
    /* Read every generated token's logits back, so that during the token
     * callback glesc_session_logits() is the row it was sampled from. Off
     * (the default) and with a greedy sampler (temperature <= 0 or top-k 1,
     * no repetition penalty), the tokens after the first are picked on the
     * GPU and the steps pipelined (glesc_session_eval_greedy): the same
     * tokens, no logits read back, glesc_session_logits() NULL in the
     * callback from the second token on. Other samplers read the rows
     * either way. */
    bool logits;
} glesc_generate_params;

/* The defaults: n_predict -1, ignore_eos, eval_last and logits off,
 * GLESC_DETOKENIZE_KEEP_LEADING_SPACE, no callbacks; and struct_size. */
static inline void glesc_generate_params_init(glesc_generate_params *p)
{
    for (size_t i = 0; i < sizeof *p; i++)
        ((unsigned char *)p)[i] = 0;
    p->struct_size = (uint32_t)sizeof *p;
    p->n_predict = -1;
    p->detokenize_flags = GLESC_DETOKENIZE_KEEP_LEADING_SPACE;
}

typedef struct glesc_generate_result {
    glesc_stop_reason stop;
    int32_t n_generated;  /* tokens sampled (an end-of-generation token that stopped included) */
    size_t prompt_tokens; /* input tokens evaluated (prompt; chat: turn and end-of-turn text) */
    uint64_t prompt_ns;   /* time of those evals */
    size_t decode_tokens; /* generated tokens evaluated */
    uint64_t decode_ns;   /* time of the sampling loop (sampling, callbacks, evals) */
} glesc_generate_result;

/* Evaluates prompt[0..n_prompt) after what s holds (none when n_prompt is
 * 0: then the first token is sampled from glesc_session_logits(s), which
 * must not be NULL, or, after a pipelined greedy generation, is the token
 * the GPU chose for the last one) and records it in smp (the repetition penalty's
 * history), then samples tokens with smp, each recorded in smp, handed to
 * p->on_token and evaluated so the next can be sampled from its row. p may
 * be NULL (defaults, no callbacks); res (may be NULL) gets the outcome, also
 * on failure. Errors: the prompt does not fit the free context
 * (GLESC_ERROR_LIMIT, nothing evaluated), an eval fails (the message says
 * "evaluating the prompt: ..." or "decoding: ..."; the session's positions
 * are then undefined: truncate it). */
GLESC_API glesc_status glesc_generate(glesc_session *s, glesc_sampler *smp, const int32_t *prompt,
                                      size_t n_prompt, const glesc_generate_params *p,
                                      glesc_generate_result *res);

/* ---- Chat sessions ----
 * A conversation in a session's KV cache: each glesc_chat_send formats the
 * messages with the chat template, evaluates only the text beyond what the
 * cache holds (the new user message and the start of the assistant's turn),
 * generates the reply, then evaluates the template's end-of-turn text, so
 * the cache always holds the formatted conversation and the next turn
 * starts from it. Where the template rewrites a reply (trims it), the
 * sampled end-of-generation token stands for the end of the turn, as in
 * llama.cpp. */
typedef struct glesc_chat glesc_chat;

/* What glesc_chat_send does when the conversation no longer fits the
 * context. Stable values (append-only). */
typedef enum glesc_chat_context_policy {
    /* Start over: keep the system message, drop the other messages, empty
     * the cache, and carry on (a GLESC_GEN_EVENT_START_OVER event says so). */
    GLESC_CHAT_CONTEXT_START_OVER = 0,
    /* Fail with GLESC_ERROR_LIMIT and keep the conversation as it was;
     * glesc_chat_reset starts over. */
    GLESC_CHAT_CONTEXT_FAIL,
    /* Context shift, as llama-cli: keep the system message and drop the
     * oldest turns from the cache (glesc_session_shift; at least half of
     * the conversation's positions when that leaves the newest turns, so
     * the reply has room), moving the rest down without evaluating them
     * again (a GLESC_GEN_EVENT_CONTEXT_SHIFT event says so). A template
     * that merges the system message into the first user turn (Gemma's)
     * keeps that first turn too. Where dropping every older turn is not
     * enough, it starts over. glesc_chat_options_init's default and
     * gguf-run's behaviour. */
    GLESC_CHAT_CONTEXT_SHIFT,
} glesc_chat_context_policy;

typedef struct glesc_chat_options {
    /* sizeof(glesc_chat_options) as the caller was compiled, set by
     * glesc_chat_options_init(); 0 means this header's layout. */
    uint32_t struct_size;
    /* GLESC_CHAT_NONE (0): detected from the model's tokenizer.chat_template,
     * chatml when nothing matches. */
    glesc_chat_template chat_template;
    const char *system; /* system message (copied), or NULL */
    bool no_bos;        /* do not add BOS to the conversation's first token */
    glesc_chat_context_policy context_policy;
} glesc_chat_options;

/* The defaults: detected template, no system message, BOS where the
 * vocabulary wants one, a context shift when full (GLESC_CHAT_CONTEXT_SHIFT;
 * a zeroed struct starts over instead); and struct_size. glesc_chat_create
 * with NULL options takes these. */
static inline void glesc_chat_options_init(glesc_chat_options *opts)
{
    for (size_t i = 0; i < sizeof *opts; i++)
        ((unsigned char *)opts)[i] = 0;
    opts->struct_size = (uint32_t)sizeof *opts;
    opts->context_policy = GLESC_CHAT_CONTEXT_SHIFT;
}

/* A conversation in s, sampled with smp; opts may be NULL. The chat takes
 * the session over (it empties its cache now; use it only through the chat
 * until the chat is destroyed); s and smp must outlive the chat. On failure
 * *out is NULL (message in glesc_last_errmsg()). */
GLESC_API glesc_status glesc_chat_create(glesc_session *s, glesc_sampler *smp,
                                         const glesc_chat_options *opts, glesc_chat **out);
/* NULL is a no-op. The session keeps its cache. */
GLESC_API void glesc_chat_destroy(glesc_chat *c);
/* The template in use (after detection). */
GLESC_API glesc_chat_template glesc_chat_get_template(const glesc_chat *c);

/* Adds the user message content (NUL-terminated, copied) and generates the
 * assistant's reply with p (NULL: defaults; p->eval_last does not apply: a
 * chat evaluates every token of the reply that fits), streaming it to
 * p->on_token. The reply ends at an end-of-generation token, after
 * p->n_predict tokens, at a full context, or when on_token returns true;
 * in every case the reply so far is kept in the history and in the cache and
 * the end-of-turn text is evaluated after it, so stopping a reply from the
 * callback (a user's Ctrl-C) leaves a consistent conversation that the next
 * send continues. res (may be NULL) gets the outcome.
 * Errors: GLESC_ERROR_LIMIT when the message does not fit the context even
 * in a conversation that starts over, or (GLESC_CHAT_CONTEXT_FAIL) when the
 * conversation is full; the message is then not added and the chat is as
 * before (or started over, when that was tried). Any other failure (an eval,
 * out of memory) starts the conversation over (the system message kept, the
 * cache emptied; smp is left as it is), so the chat stays usable. */
GLESC_API glesc_status glesc_chat_send(glesc_chat *c, const char *content,
                                       const glesc_generate_params *p, glesc_generate_result *res);
/* Puts the kept messages (the system message) into the cache now, as the
 * first glesc_chat_send would (on their own, before any user message), so
 * that their state can be saved (glesc_session_state_save_file with these
 * tokens) and a later chat can start from it. cached[0..n_cached) are the
 * tokens the session's cache holds (those glesc_session_state_load
 * returned; n_cached must be its n_past): when they are the kept messages'
 * tokens nothing is evaluated, otherwise the cache is emptied and they are
 * evaluated. *ids and *n (either may be NULL) get those tokens
 * (glesc_tokens_free them); n is 0, and the cache empty, when there is
 * nothing to put in it alone (no system message, or a template that
 * merges it into the first user turn). Only before the first send
 * (GLESC_ERROR_STATE after). */
GLESC_API glesc_status glesc_chat_prefill(glesc_chat *c, const int32_t *cached, size_t n_cached,
                                          int32_t **ids, size_t *n);
/* Forgets the conversation but the system message: the history, the cache
 * (truncated to 0) and smp's history and random stream (glesc_sampler_reset). */
GLESC_API void glesc_chat_reset(glesc_chat *c);
/* The conversation so far, oldest first (the system message, then user and
 * assistant turns). Owned by c, valid until the next send or reset. */
GLESC_API const glesc_chat_message *glesc_chat_messages(const glesc_chat *c, size_t *n);

#ifdef __cplusplus
}
#endif
#endif /* GLESC_LLM_H */
