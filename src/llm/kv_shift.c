/*
 * kv_shift.c — context shift: dropping a range of cached positions and moving
 * the later ones down, as llama.cpp's context shift does (llama-cli when the
 * context fills; llama_memory_seq_rm + seq_add).
 *
 * The cache holds keys already rotated by their positions. Moving the keys
 * of positions [keep + discard, n_past) to [keep, n_past - discard) rotates
 * them once more by -discard: RoPE turns each pair by an angle linear in the
 * position (pos · freq_scale · base^(-2i/n_dims) / factor_i), so the two
 * rotations compose into the rotation of the new position, up to rounding.
 * Values move unchanged. What the moved positions computed from the dropped
 * ones (their keys and values above the first layer attended to them) stays:
 * an approximation every context shift makes.
 *
 * One graph with fusion off: per layer, the moved keys rotated and the moved
 * values copied into fresh tensors, then written back with set_rows. A
 * quantized cache's rows are decoded on the way (rope and cont read blocks)
 * and quantized again by set_rows, as llama.cpp shifts a quantized K
 * (dequantize, rotate, quantize); values that only move come back as the
 * same blocks, since a block's decoded values quantize to themselves (the
 * largest magnitude gives the same scale, every value its quant). With
 * fusion the copy and the write could become one kernel reading the rows it
 * overwrites; kernel by kernel the executor puts a barrier between the two.
 */
#include "llm/runtime.h"

/* Rows [first, first + n) of a cache [row_elems, n_ctx] of type t, as
 * [row_elems, n] or, with head_dim > 0, [head_dim, row_elems / head_dim, n]. */
static glesc_tensor *rows_view(glesc_graph *g, glesc_tensor *c, glesc_dtype t, int64_t row_elems,
                               int64_t head_dim, int64_t first, int64_t n)
{
    size_t row = glesc_dtype_row_bytes(t, row_elems); /* the file's bytes (forward.c) */
    size_t off = (size_t)first * row;
    if (head_dim > 0)
        return glesc_view(g, c, 3, (int64_t[]){head_dim, row_elems / head_dim, n},
                          (size_t[]){0, glesc_dtype_row_bytes(t, head_dim), row}, off);
    return glesc_view(g, c, 2, (int64_t[]){row_elems, n}, (size_t[]){0, row}, off);
}

static glesc_tensor *i32_input(glesc_graph *g, const int32_t *v, int32_t n)
{
    glesc_tensor *t = glesc_tensor_new(g, GLESC_DTYPE_I32, 1, (int64_t[]){n});
    if (t && glesc_tensor_write(t, v, (size_t)n * sizeof *v) != GLESC_OK)
        return NULL;
    return t;
}

static glesc_status shift_cache(glesc_session *s, int32_t keep, int32_t discard)
{
    const glesc_model *m = s->m;
    const llm_hparams *hp = &m->hp;
    glesc_context *ctx = m->ctx;
    const int32_t n_move = s->n_past - keep - discard;
    const int64_t d = hp->head_dim, kv_dim = hp->n_head_kv * d;
    int32_t *idx = core_malloc((size_t)n_move * 2 * sizeof *idx);
    glesc_tensor **outs = core_calloc((size_t)hp->n_layer * 2, sizeof *outs);
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_status st = GLESC_ERROR_OUT_OF_MEMORY;
    if (!idx || !outs || !g)
        goto done;
    glesc_graph_options go;
    glesc_graph_options_init(&go);
    go.fusion = -1;
    if ((st = glesc_graph_set_options(g, &go)) != GLESC_OK)
        goto done;
    for (int32_t i = 0; i < n_move; i++) {
        idx[i] = -discard;          /* the rotation each moved key takes */
        idx[n_move + i] = keep + i; /* where it goes */
    }
    glesc_tensor *delta = i32_input(g, idx, n_move);
    glesc_tensor *dst = i32_input(g, idx + n_move, n_move);
    st = GLESC_ERROR_INVALID_ARGUMENT;
    if (!delta || !dst)
        goto done;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        /* The same rotation as forward.c's keys (its parameters per layer:
         * base, scale, factors, YaRN), of magnitude 1. */
        glesc_tensor *k = rows_view(g, s->k_cache[l], s->k_type, kv_dim, d, keep + discard, n_move);
        k = llm_rope(s, g, k, delta, l, true);
        k = glesc_reshape(g, k, 2, (int64_t[]){kv_dim, n_move});
        glesc_tensor *v = glesc_cont(
            g, rows_view(g, s->v_cache[l], s->v_type, kv_dim, 0, keep + discard, n_move));
        outs[2 * l] = glesc_set_rows(g, s->k_cache[l], k, dst);
        outs[2 * l + 1] = glesc_set_rows(g, s->v_cache[l], v, dst);
        if (!outs[2 * l] || !outs[2 * l + 1])
            goto done;
    }
    st = glesc_graph_compute(g, outs, (int)hp->n_layer * 2);
done:
    if (st != GLESC_OK)
        core_err_set(NULL, st, "glesc_session_shift: %s",
                     !g || !idx || !outs ? "out of memory" : glesc_context_errmsg(ctx));
    glesc_graph_destroy(g);
    core_free(outs);
    core_free(idx);
    return st;
}

GLESC_API glesc_status glesc_session_shift(glesc_session *s, int32_t keep, int32_t discard)
{
    core_err_reset(NULL);
    if (!s || keep < 0 || discard < 0 || keep > s->n_past || discard > s->n_past - keep)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_session_shift: keep %d and discard %d do not fit the %d "
                            "evaluated positions (0 <= keep, 0 <= discard, keep + discard <= %d)",
                            (int)keep, (int)discard, s ? (int)s->n_past : 0,
                            s ? (int)s->n_past : 0);
    if (discard == 0)
        return GLESC_OK;
    llm_greedy_settle(s); /* greedy results not read yet are dropped (greedy.c) */
    if (s->n_past - keep - discard > 0) {
        glesc_status st = shift_cache(s, keep, discard);
        if (st != GLESC_OK)
            return st;
    }
    s->n_past -= discard;
    s->has_logits = false;
    return GLESC_OK;
}
