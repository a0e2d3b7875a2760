/*
 * runtime.h — the model and session structs shared by the loader
 * (model_load.c), sessions (session.c, greedy.c) and the per-step graph
 * builder (forward.c).
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
    glesc_tensor *wqkv;            /* [n_embd, (n_head + 2*n_head_kv)*head_dim] (phi3) or NULL */
    glesc_tensor *bq;              /* [n_head*head_dim] (qwen2) or NULL */
    glesc_tensor *bk, *bv;         /* [n_head_kv*head_dim] (qwen2) or NULL */
    glesc_tensor *q_norm, *k_norm; /* [head_dim] (qwen3) or NULL */
    glesc_tensor *wo;              /* [n_head*head_dim, n_embd] */
    glesc_tensor *ffn_norm;        /* [n_embd] */
    glesc_tensor *w_gate, *w_up;   /* [n_embd, n_ff]; phi3: no gate, up [n_embd, 2*n_ff] */
    glesc_tensor *w_down;          /* [n_ff, n_embd] */
    glesc_tensor *post_attn_norm;  /* [n_embd] (gemma) or NULL */
    glesc_tensor *post_ffn_norm;   /* [n_embd] (gemma) or NULL */
} llm_layer;

struct glesc_model {
    glesc_context *ctx;
    llm_hparams hp;
    glesc_tokenizer *tok;
    glesc_tensor *tok_embd;    /* [n_embd, n_vocab] */
    glesc_tensor *output_norm; /* [n_embd] */
    glesc_tensor *output;      /* [n_embd, n_vocab]; NULL when tied to tok_embd */
    glesc_tensor *rope_freqs;  /* [n_rot / 2] Llama 3 frequency factors, or NULL */
    glesc_tensor *rope_long;   /* [n_rot / 2] LongRoPE factors beyond n_ctx_orig (phi3), or NULL */
    glesc_tensor *rope_short;  /* [n_rot / 2] LongRoPE factors up to n_ctx_orig, or NULL */
    llm_layer *layers;         /* n_layer */
    char *name, *chat_template;
    glesc_dtype weight_type;
    uint64_t weight_bytes;
    uint64_t gpu_bytes; /* pool bytes the weights took */
    int n_tensors;
    core_hash128 hash; /* llm_model_hash of the file: what a saved state names */
};

struct glesc_session {
    glesc_model *m;
    glesc_graph *g;
    glesc_tensor **k_cache, **v_cache; /* per layer [n_head_kv*head_dim, n_ctx] */
    glesc_dtype k_type, v_type;        /* f32, f16, q8_0 or q4_0 (llm_kv_types) */
    int32_t n_ctx, n_past, n_batch;
    glesc_eval_stats last;
    uint64_t total_dispatches;
    uint64_t kv_bytes; /* pool bytes the KV cache took */
    float *logits;     /* [n_vocab]: the last evaluated position's row */
    bool has_logits;   /* logits holds that row */
    /* Pipelined greedy decoding (glesc_session_eval_greedy), made on first
     * use: two i32 [1] tensors taken in turn, one step's arg max written
     * into the one the next step's embedding lookup reads; each step's
     * result is also copied into a readback (the pending ones, oldest
     * first from pend_head), read by glesc_session_greedy_id. */
    glesc_tensor *next_id[2];
    /* the positions of greedy steps: the one at position p reads pos[p % 2],
     * written by the host while the step at p - 1 may still run, and last
     * read by the step at p - 2, whose token was read (so it is done): no
     * host write into memory that work in flight reads */
    glesc_tensor *pos[2];
    int next_slot; /* the slot the next greedy eval reads */
    bool chain;    /* the last eval was greedy: its arg max is in next_id[next_slot] */
    struct {
        glesc_readback *rb;
        int32_t pos, token; /* the eval's position and input (-1: the GPU's) */
        bool done;          /* waited for already: its token is in value, or failed (st) */
        int32_t value;
        glesc_status st;
    } pend[2];
    int pend_head, n_pend;
    /* The token the last eval's arg max chose, once read (the session's
     * last eval was greedy and nothing waits unread); -1: unknown. A
     * greedy generation continues from it where no logits row is kept. */
    int32_t greedy_next;
    /* The inputs of glesc_session_eval's batches (token ids, positions):
     * two pairs of i32 [n] tensors taken in turn. A batch's inputs are
     * written while the batch before it may still run, into the pair the
     * batch before that read; the host first waits for that batch alone
     * (in_rb: a copy of its ids queued behind it, fenced) unless a later
     * wait covered it. So batches chain on the GPU without a full wait and
     * no host write lands under a running kernel. */
    glesc_tensor *in_ids[2], *in_pos[2];
    glesc_readback *in_rb[2];
    bool in_fenced[2];         /* in_rb[i] holds a copy not waited for yet */
    int in_slot;               /* the pair the next batch takes */
    int32_t *in_scratch;       /* [n_batch]: where the fences' copies land */
    glesc_readback *logits_rb; /* the last row of a batch whose logits are read */
    /* The graph of the next decode step (one token at position pre_pos,
     * reading pair pre_slot, logits of its row), recorded on g while the
     * step before runs on the GPU; NULL when none. Any other use of g
     * drops it. */
    glesc_tensor *pre_y;
    int32_t pre_pos;
    int pre_slot;
    /* The decode step's programs compile in the background (started after
     * a prompt that compiled its own, eval_chunk): until they are done, a
     * one-token step runs on the prompt's (llm_forward). */
    bool bg_decode;
    /* the cache length from which the decode attention takes its other
     * variant (kernels_attention_regs_from), its programs to start compiling
     * once the decode step's own are done; 0: none to start */
    int32_t deep_from;
    /* One-token steps that take the prompt's programs whatever the
     * background compiles (a test's: tests/test_runtime.c) */
    int batch_steps;
};

/* Copies the context's last message into the thread's (where glesc_llm.h
 * promises it) with a prefix; returns st. */
static inline glesc_status llm_ctx_fail(glesc_context *ctx, glesc_status st, const char *what)
{
    return core_err_set(NULL, st, "%s: %s", what, glesc_context_errmsg(ctx));
}

/* The bytes of ctx's live pool buffers: what a load or a session's KV
 * cache took is the growth (nothing else runs on the context meanwhile). */
static inline uint64_t llm_pool_live_bytes(glesc_context *ctx)
{
    glesc_stats st;
    glesc_context_stats(ctx, &st);
    return st.pool_live_bytes;
}

/* ---- session.c ---- */
/* The KV cache's key and value types that options o ask for on a model of
 * hp (the defaults resolved); fails naming who, the type and the rule (a
 * block type needs head sizes that are multiples of 32). */
glesc_status llm_kv_types(const glesc_session_options *o, const llm_hparams *hp, const char *who,
                          glesc_dtype *k, glesc_dtype *v);
/* Bytes a row of a cache of type t takes in a saved state and in views
 * (the file's: ggml's row size) for the model of hp. */
size_t llm_kv_row_bytes(const llm_hparams *hp, glesc_dtype t);
/* Counts the compute just submitted on s->g (n tokens) in s->last and the
 * session's total of dispatches. */
void llm_session_count(glesc_session *s, int32_t n);
/* After a decode step: where the decode step's own programs are done and a
 * deeper cache's attention takes another variant (deep_from), starts
 * compiling that variant's programs in the background. */
void llm_deep_programs(glesc_session *s);

/* ---- forward.c: the step graph ---- */
/* Records the graph of one step on s->g: ids (i32 [n]) at positions pos
 * (i32 [n], n_past..n_past+n-1) to logits [n_vocab, all ? n : 1]. NULL on
 * a builder error (message in the context). */
glesc_tensor *llm_forward(glesc_session *s, glesc_tensor *ids, glesc_tensor *pos, int32_t n,
                          bool all_logits);

/* Rope of x [head_dim, heads, n] at positions pos (i32 [n]) on g as layer l
 * rotates its queries and keys: the layer's base and scale, the session's
 * frequency factors (Llama 3's, or LongRoPE's by the context length), YaRN.
 * distance: a rotation by a position difference (the context shift's),
 * of magnitude 1, since the cached keys carry their magnitude already. */
glesc_tensor *llm_rope(const glesc_session *s, glesc_graph *g, glesc_tensor *x, glesc_tensor *pos,
                       int64_t l, bool distance);

/* ---- greedy.c ---- */
/* Waits for the greedy evals whose tokens were not read (their tokens are
 * dropped) and ends the chain: before anything that writes to the GPU from
 * the host or moves positions (eval, truncate, shift), so no host write
 * lands in memory that work in flight still reads. */
void llm_greedy_settle(glesc_session *s);
/* The greedy steps' token and position slots and readbacks, made on first
 * use (an error in the thread's message). */
glesc_status llm_greedy_setup(glesc_session *s);

/* ---- generate.c: the loop glesc_generate and glesc_chat share ---- */
/* The caller's parameters p (NULL: glesc_generate_params_init's) in *dst, as
 * far as its struct_size reaches; an error (naming fn) when that is too
 * small. */
glesc_status llm_generate_params_in(glesc_generate_params *dst, const glesc_generate_params *p,
                                    const char *fn);
/* Reports ev to p's event callback, if any. */
void llm_gen_event(const glesc_generate_params *p, const glesc_gen_event *ev);
/* Evaluates input ids[0..n) (n ≥ 1, known to fit) into s->logits, records
 * them in smp, reports a PROMPT_EVAL event and counts them in res. An eval
 * failure's message is prefixed "evaluating the prompt". */
glesc_status llm_eval_input(glesc_session *s, glesc_sampler *smp, const int32_t *ids, size_t n,
                            const glesc_generate_params *p, glesc_generate_result *res);
/* Samples from s->logits on (see glesc_generate; eval_last as its
 * parameter), adding to res. */
glesc_status llm_generate_tokens(glesc_session *s, glesc_sampler *smp,
                                 const glesc_generate_params *p, bool eval_last,
                                 glesc_generate_result *res);

/* ---- sampler.c ---- */
/* Does smp pick the arg max of the logits as given (temperature <= 0 or
 * top-k 1, no repetition penalty)? Then a GPU arg max picks its tokens. */
bool llm_sampler_is_greedy(const glesc_sampler *smp);
/* A token smp would have picked was picked elsewhere (on the GPU): its
 * random stream advances as glesc_sampler_sample's would have. */
void llm_sampler_skip(glesc_sampler *smp);
/* The state a saved session carries (state.c): the accepted tokens, the
 * i-th oldest of n_history (0 <= i < n_history), and the random stream;
 * restore sets the stream and forgets the tokens (accept them again). */
int32_t llm_sampler_n_history(const glesc_sampler *smp);
int32_t llm_sampler_history_at(const glesc_sampler *smp, int32_t i);
const core_rng *llm_sampler_rng(const glesc_sampler *smp);
void llm_sampler_restore(glesc_sampler *smp, const core_rng *rng);
/* The grammar stage's part of that state (sampler_grammar.c): the tokens
 * it accepted since its start, which rebuild its state when replayed.
 * replays: would toks[0..n) be accepted from the start (true without a
 * grammar)? replay: restart the grammar and accept them. restart: back to
 * the start rule, the rest of the sampler kept (a chat's new reply). */
/* Records a token for the penalty only (the history restored). */
void llm_sampler_record(glesc_sampler *smp, int32_t token);
bool llm_sampler_has_grammar(const glesc_sampler *smp);
size_t llm_sampler_grammar_n(const glesc_sampler *smp);
const int32_t *llm_sampler_grammar_tokens(const glesc_sampler *smp);
bool llm_sampler_grammar_replays(glesc_sampler *smp, const int32_t *toks, size_t n);
void llm_sampler_grammar_replay(glesc_sampler *smp, const int32_t *toks, size_t n);
void llm_sampler_grammar_restart(glesc_sampler *smp);

/* ---- state.c ---- */
/* The hash that ties a saved state to the model of f (metadata, tensor
 * table, samples of each tensor's bytes); path names f in messages. */
glesc_status llm_model_hash(const glesc_gguf *f, const char *path, core_hash128 *out);

/* ---- estimate.c ---- */
/* An upper bound of the heap bytes glesc_tokenizer_load(f) keeps. */
uint64_t llm_tokenizer_host_bytes(const glesc_gguf *f);

/* ---- fd_map.c: a range of an open descriptor, mapped or read ---- */
typedef struct llm_fd_map {
    const void *data; /* the range's first byte */
    uint64_t size;
    void *base; /* the mapping (from a page boundary), or NULL */
    size_t base_size;
    void *heap; /* the bytes read with pread, or NULL */
} llm_fd_map;

/* Maps (or reads) size bytes at offset of fd (size 0: up to the end of a
 * regular file); name in messages. */
glesc_status llm_fd_map_open(int fd, uint64_t offset, uint64_t size, const char *name,
                             llm_fd_map *out);
void llm_fd_map_close(llm_fd_map *map);

#endif
