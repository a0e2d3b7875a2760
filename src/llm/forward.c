/*
 * forward.c — one evaluation step of a llama-family decoder as a glesc
 * graph: the data flow of docs/design.md ("One decode step, as data").
 *
 * The graph's structure depends only on the model, on whether n is 1 (decode)
 * or how many tokens a prefill has (the GEMV of more columns up to
 * gemv_max_m, then the GEMM, narrow up to 64 columns, then wide), on
 * whether the cache holds one position or more, and on all_logits.
 * Positions are an i32 input, the cache length is the size of a view (a
 * uniform), so consecutive decode steps share one plan.
 *
 * x = embedding rows (× √n_embd: gemma). Per layer (fusion in brackets, see
 * docs/graph.md):
 *   h    = rms_norm(x) · attn_norm                        [one kernel]
 *   q, k, v = Wq·h (+bq), Wk·h (+bk), Wv·h (+bv)          [bias as epilogue]
 *            (phi3: views of one Wqkv·h)
 *   q, k = rms_norm(q|k per head) · q_norm|k_norm         (qwen3, gemma3)
 *   K[pos] = rope(k); V[pos] = v                          [rope fused into set_rows]
 *            (rope with the layer's base and scale, Llama 3's or LongRoPE's
 *            frequency factors, YaRN)
 *   a    = attention(rope(q), K[0..n_kv), V[0..n_kv))     [rope(q) as prologue]
 *            (a local layer's window, gemma2's soft-cap: op parameters)
 *   x    = Wo·a + x                                       [residual as epilogue]
 *            (gemma: rms_norm(Wo·a) · post_attn_norm + x, a norm kernel)
 *   h    = rms_norm(x) · ffn_norm
 *   x    = Wd·(act(Wg·h) · (Wu·h)) + x                    [gate/up pair, act·mul epilogue]
 *            (act silu, gelu for gemma; phi3: halves of one Wup·h, then
 *            silu·mul as the down projection's prologue; gemma's post-norm)
 * then logits = Wout · (rms_norm(x) · output_norm), soft-capped (gemma2).
 */
#include <math.h>

#include "compute/compute.h"
#include "llm/runtime.h"

/* x [d·heads, n] as [d, heads, n]: one row per head. */
static glesc_tensor *head_view(glesc_graph *g, glesc_tensor *x, int64_t d, int64_t heads, int32_t n)
{
    return glesc_reshape(g, x, 3, (int64_t[]){d, heads, n});
}

/* The first n_kv positions of a cache [d·hkv, n_ctx] as attention wants
 * them: [d, n_kv, hkv] (a strided view, no copy; strides in the file's
 * bytes of type t, as ggml counts a quantized cache's: whole blocks). */
static glesc_tensor *cache_view(glesc_graph *g, glesc_tensor *c, const llm_hparams *hp,
                                glesc_dtype t, int64_t n_kv)
{
    size_t row = llm_kv_row_bytes(hp, t), head = glesc_dtype_row_bytes(t, hp->head_dim);
    static const int perm[4] = {0, 2, 1, 3};
    glesc_tensor *v = glesc_view(g, c, 3, (int64_t[]){hp->head_dim, hp->n_head_kv, n_kv},
                                 (size_t[]){0, head, row}, 0);
    return glesc_permute(g, v, perm);
}

/* Column rows [off, off + rows) of a contiguous [ld, n] matrix as
 * [rows, n] (a strided view): phi3's q, k, v of one fused projection, its
 * gate and up halves. */
static glesc_tensor *rows_view(glesc_graph *g, glesc_tensor *x, int64_t ld, int64_t off,
                               int64_t rows, int32_t n)
{
    return glesc_view(g, x, 2, (int64_t[]){rows, n}, (size_t[]){0, (size_t)ld * 4},
                      (size_t)off * 4);
}

/* The rope frequency factors of a session: Llama 3's, or phi3's LongRoPE
 * pair chosen by the context length as llama.cpp chooses them (the long
 * factors once the context exceeds the original one). */
static glesc_tensor *rope_factors(const glesc_session *s)
{
    const glesc_model *m = s->m;
    if (m->rope_freqs)
        return m->rope_freqs;
    return s->n_ctx > m->hp.n_ctx_orig ? m->rope_long : m->rope_short;
}

glesc_tensor *llm_rope(const glesc_session *s, glesc_graph *g, glesc_tensor *x, glesc_tensor *pos,
                       int64_t l, bool distance)
{
    const llm_hparams *hp = &s->m->hp;
    float base = llm_layer_rope_base(hp, l), fscale = llm_layer_rope_scale(hp, l);
    /* YaRN scales the magnitude by 1 + 0.1·ln(1 / freq_scale) (ggml's
     * rope_yarn) on top of attn_factor: a rotation by a distance undoes
     * both (llama.cpp's K-shift re-applies them, growing the keys) */
    float mag = hp->rope_attn_factor;
    if (distance)
        mag = hp->yarn_ext_factor != 0.0f ? 1.0f / (1.0f + 0.1f * logf(1.0f / fscale)) : 1.0f;
    return glesc_rope_yarn(g, x, pos, rope_factors(s), (int)hp->n_rot,
                           hp->rope_neox ? GLESC_ROPE_NEOX : GLESC_ROPE_NORMAL, (int)hp->n_ctx_orig,
                           base, fscale, hp->yarn_ext_factor, mag, hp->yarn_beta_fast,
                           hp->yarn_beta_slow);
}

/* Whether a step of n tokens takes the prompt's programs: one token while
 * the decode step's programs still compile in the background (s->bg_decode;
 * those done are collected), or a test asks (s->batch_steps). */
static bool batch_kernels(glesc_session *s, int32_t n)
{
    if (s->bg_decode)
        s->bg_decode = !compute_background_done(s->m->ctx);
    bool batch = (s->bg_decode || s->batch_steps > 0) && n == 1;
    if (batch && s->batch_steps > 0)
        s->batch_steps--;
    return batch;
}

glesc_tensor *llm_forward(glesc_session *s, glesc_tensor *ids, glesc_tensor *pos, int32_t n,
                          bool all_logits)
{
    const glesc_model *m = s->m;
    const llm_hparams *hp = &m->hp;
    glesc_graph *g = s->g;
    bool batch = batch_kernels(s, n);
    const int64_t d = hp->head_dim, e = hp->n_embd;
    const int64_t q_dim = hp->n_head * d, kv_dim = hp->n_head_kv * d;
    const int64_t n_kv = (int64_t)s->n_past + n;
    const float eps = hp->rms_eps;
    static const int perm[4] = {0, 2, 1, 3};

    glesc_tensor *x = glesc_get_rows(g, m->tok_embd, ids); /* [e, n] */
    if (hp->embd_scale != 1.0f)
        x = glesc_scale(g, x, hp->embd_scale, 0.0f);
    for (int64_t l = 0; l < hp->n_layer && x; l++) {
        const llm_layer *L = &m->layers[l];
        glesc_tensor *h = glesc_mul(g, glesc_rms_norm(g, x, eps), L->attn_norm);
        glesc_tensor *q, *k, *v;
        if (L->wqkv) { /* one projection: q, k and v are windows of its rows */
            glesc_tensor *qkv = glesc_matmul(g, L->wqkv, h); /* [q_dim + 2·kv_dim, n] */
            size_t ld = (size_t)(q_dim + 2 * kv_dim) * 4, hd = (size_t)d * 4;
            q = glesc_view(g, qkv, 3, (int64_t[]){d, hp->n_head, n}, (size_t[]){0, hd, ld}, 0);
            k = glesc_view(g, qkv, 3, (int64_t[]){d, hp->n_head_kv, n}, (size_t[]){0, hd, ld},
                           (size_t)q_dim * 4);
            v = glesc_view(g, qkv, 2, (int64_t[]){kv_dim, n}, (size_t[]){0, ld},
                           (size_t)(q_dim + kv_dim) * 4);
        } else {
            q = glesc_matmul(g, L->wq, h); /* [q_dim, n] */
            k = glesc_matmul(g, L->wk, h); /* [kv_dim, n] */
            v = glesc_matmul(g, L->wv, h);
            if (L->bq) {
                q = glesc_add(g, q, L->bq);
                k = glesc_add(g, k, L->bk);
                v = glesc_add(g, v, L->bv);
            }
            q = head_view(g, q, d, hp->n_head, n); /* [d, n_head, n] */
            k = head_view(g, k, d, hp->n_head_kv, n);
        }
        if (L->q_norm) {
            q = glesc_mul(g, glesc_rms_norm(g, q, eps), L->q_norm);
            k = glesc_mul(g, glesc_rms_norm(g, k, eps), L->k_norm);
        }
        q = llm_rope(s, g, q, pos, l, false);
        k = llm_rope(s, g, k, pos, l, false);
        glesc_tensor *kc =
            glesc_set_rows(g, s->k_cache[l], glesc_reshape(g, k, 2, (int64_t[]){kv_dim, n}), pos);
        glesc_tensor *vc = glesc_set_rows(g, s->v_cache[l], v, pos);
        glesc_tensor *a = glesc_attention_ext(
            g, glesc_permute(g, q, perm), cache_view(g, kc, hp, s->k_type, n_kv),
            cache_view(g, vc, hp, s->v_type, n_kv), NULL, hp->attn_scale, true,
            llm_layer_is_swa(hp, l) ? (int)hp->n_swa : 0, hp->attn_softcap); /* [d, n_head, n] */
        a = glesc_reshape(g, a, 2, (int64_t[]){q_dim, n});
        glesc_tensor *y = glesc_matmul(g, L->wo, a);
        if (L->post_attn_norm) /* Gemma: the block's output is normed before the residual */
            y = glesc_mul(g, glesc_rms_norm(g, y, eps), L->post_attn_norm);
        x = glesc_add(g, y, x);
        h = glesc_mul(g, glesc_rms_norm(g, x, eps), L->ffn_norm);
        glesc_tensor *gate, *up;
        if (hp->fused_up) { /* gate and up are the halves of one projection */
            glesc_tensor *gu = glesc_matmul(g, L->w_up, h); /* [2·n_ff, n] */
            gate = rows_view(g, gu, 2 * hp->n_ff, 0, hp->n_ff, n);
            up = rows_view(g, gu, 2 * hp->n_ff, hp->n_ff, hp->n_ff, n);
        } else {
            gate = glesc_matmul(g, L->w_gate, h);
            up = glesc_matmul(g, L->w_up, h);
        }
        glesc_tensor *ff = glesc_mul(g, hp->gelu ? glesc_gelu(g, gate) : glesc_silu(g, gate), up);
        y = glesc_matmul(g, L->w_down, ff);
        if (L->post_ffn_norm)
            y = glesc_mul(g, glesc_rms_norm(g, y, eps), L->post_ffn_norm);
        x = glesc_add(g, y, x);
    }
    if (batch) /* the layers' (the head is a GEMV in a prompt too) */
        graph_batch_kernels(g);
    /* only the last position's row; in a step on the prompt's programs
     * too (the row itself), so that its head kernel is the prompt's: a
     * residual add the narrow GEMM leaves unfused (fuse_skip_narrow) would
     * otherwise join the head GEMV's prologue, a program of its own */
    if (x && !all_logits && (n > 1 || batch))
        x = glesc_view(g, x, 2, (int64_t[]){e, 1}, (size_t[]){0, (size_t)e * 4},
                       (size_t)(n - 1) * (size_t)e * 4);
    x = glesc_mul(g, glesc_rms_norm(g, x, eps), m->output_norm);
    glesc_tensor *logits = glesc_matmul(g, m->output ? m->output : m->tok_embd, x);
    if (hp->final_softcap > 0) /* Gemma 2: cap·tanh(logits / cap) */
        logits = glesc_scale(g, glesc_tanh(g, glesc_scale(g, logits, 1.0f / hp->final_softcap, 0)),
                             hp->final_softcap, 0);
    return logits;
}
