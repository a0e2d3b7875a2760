/*
 * codegen.c — the code generation half of the op table: per glesc_op, how
 * its kernel code is made. Elementwise ops give a GLSL expression template
 * ("$0"/"$1" the sources' values, "$p0".. the float params) or an
 * expression writer (ops that read their sources at other coordinates or
 * round: cast, rope, concat); anchors give their kernel generator, where
 * the code depends on shapes a variant (a structure-hash input), and what
 * the generator can absorb: its fusion capabilities, which the fusion pass
 * (fuse.c) reads.
 *
 * The semantic half (name, arity, kind, shape rule, CPU reference, in
 * place, remaps, gather) is graph's table (src/graph/ops.c); this one reads
 * the IR and is kept complete by its own _Static_assert.
 */
#include "kernels/kernels.h"

/* ---- variants: shape-dependent code choices ---- */

/* 1: the GEMV of one column (decode); 2: the GEMV of 2 .. gemv_max_m (one
 * program, the columns a uniform: matmul.c's gemv_cols); 0: GEMM. Bit 17:
 * the fast units (kernels_matmul_units); bit 18: a GEMM of few columns
 * (narrower tiles, gemm.c) */
static uint32_t variant_matmul(const glesc_tensor *t, const glesc_graph_options *o)
{
    int64_t m = t->src[1]->ne[1];
    bool gemv = kernels_matmul_gemv(t, o->gemv_max_m);
    return (gemv ? (m == 1 ? 1u : 2u) : 0u) | (kernels_matmul_units(t) ? 1u << 17 : 0u) |
           (!gemv && m <= KERNELS_GEMM_SMALL_M ? 1u << 18 : 0u);
}

static uint32_t variant_conv(const glesc_tensor *t, const glesc_graph_options *o)
{
    return kernels_conv_variant(t);
}

static uint32_t variant_attention(const glesc_tensor *t, const glesc_graph_options *o)
{
    return kernels_attention_variant(t); /* heads per workgroup, tile, accumulators */
}

/* ---- the table ---- */

#define EXPR(g)                                                                                    \
    {                                                                                              \
        .glsl = g, .expr = kernels_expr_template                                                   \
    }

/* Anchors of the common shapes: a row reduction and the like take an
 * elementwise prologue on their source and an epilogue on their result. */
#define ROWS(g)                                                                                    \
    {                                                                                              \
        .gen = g, .prologue = 1, .epilogue = true                                                  \
    }

/* Views and leaves have no code (their rows stay empty); tests/test_ops.c
 * checks every elementwise op has an expression and every anchor a
 * generator, and that only anchors have fusion capabilities. The array's
 * length is the highest op named + 1. */
static const kernels_codegen rows[] = {
    [GLESC_OP_NEG] = EXPR("(-$0)"),
    [GLESC_OP_ABS] = EXPR("abs($0)"),
    [GLESC_OP_SQR] = EXPR("($0 * $0)"),
    [GLESC_OP_SQRT] = EXPR("sqrt($0)"),
    [GLESC_OP_RSQRT] = EXPR("inversesqrt($0)"),
    [GLESC_OP_EXP] = EXPR("exp($0)"),
    [GLESC_OP_LOG] = EXPR("log($0)"),
    [GLESC_OP_SIN] = EXPR("sin($0)"),
    [GLESC_OP_COS] = EXPR("cos($0)"),
    [GLESC_OP_TANH] = EXPR("op_tanh($0)"),
    [GLESC_OP_SIGMOID] = EXPR("op_sigmoid($0)"),
    [GLESC_OP_RELU] = EXPR("max($0, 0.0)"),
    [GLESC_OP_GELU] = EXPR("op_gelu($0)"),
    [GLESC_OP_GELU_ERF] = EXPR("op_gelu_erf($0)"),
    [GLESC_OP_SILU] = EXPR("op_silu($0)"),
    [GLESC_OP_SOFTPLUS] = EXPR("op_softplus($0)"),
    [GLESC_OP_STEP] = EXPR("op_step($0)"),
    [GLESC_OP_SCALE] = EXPR("($0 * $p0 + $p1)"),
    [GLESC_OP_CLAMP] = EXPR("clamp($0, $p0, $p1)"),
    [GLESC_OP_CAST] = {.expr = kernels_expr_cast},
    [GLESC_OP_CONT] = EXPR("$0"),
    [GLESC_OP_ADD] = EXPR("($0 + $1)"),
    [GLESC_OP_SUB] = EXPR("($0 - $1)"),
    [GLESC_OP_MUL] = EXPR("($0 * $1)"),
    [GLESC_OP_DIV] = EXPR("($0 / $1)"),
    [GLESC_OP_MAX] = EXPR("max($0, $1)"),
    [GLESC_OP_MIN] = EXPR("min($0, $1)"),
    [GLESC_OP_POW] = EXPR("op_pow($0, $1)"),
    [GLESC_OP_SUM] = ROWS(kernels_gen_reduce),
    [GLESC_OP_MEAN] = ROWS(kernels_gen_reduce),
    [GLESC_OP_REDUCE_MAX] = ROWS(kernels_gen_reduce),
    [GLESC_OP_REDUCE_MIN] = ROWS(kernels_gen_reduce),
    [GLESC_OP_ARGMAX] = {.gen = kernels_gen_reduce,
                         .prologue = 1,
                         .epilogue = true,
                         .reduce_epilogue = true},
    [GLESC_OP_SOFTMAX] = ROWS(kernels_gen_softmax),
    [GLESC_OP_RMS_NORM] = {.gen = kernels_gen_norm,
                           .prologue = 1,
                           .epilogue = true,
                           .row_scale = true},
    [GLESC_OP_LAYER_NORM] = ROWS(kernels_gen_norm),
    [GLESC_OP_MATMUL] = {.gen = kernels_gen_matmul,
                         .variant = variant_matmul,
                         .prologue = 1u << 1, /* the activation */
                         .epilogue = true,
                         .norm_prologue = 1u << 1,
                         .norm_deferred = true,
                         .takes_reduce = true},
    [GLESC_OP_GET_ROWS] = {.gen = kernels_gen_get_rows, .epilogue = true},
    [GLESC_OP_SET_ROWS] = {.gen = kernels_gen_set_rows, .prologue = 1u << 1},
    [GLESC_OP_CONCAT] = {.expr = kernels_expr_concat},
    /* the value; the kernel stores it into the destination's memory */
    [GLESC_OP_CPY] = EXPR("$0"),
    [GLESC_OP_ROPE] = {.expr = kernels_expr_rope},
    [GLESC_OP_ATTENTION] = {.gen = kernels_gen_attention,
                            .variant = variant_attention,
                            .prologue = 1,
                            .row_write_prologue = 1u << 1 | 1u << 2, /* k, v: new cache rows */
                            /* per-head q/k norms, computed inline */
                            .norm_prologue = 1u | 1u << 1 | 1u << 2,
                            .extra_bindings = 1},
    [GLESC_OP_CONV] = {.gen = kernels_gen_conv, .variant = variant_conv, .epilogue = true},
    [GLESC_OP_BATCH_NORM] = {.expr = kernels_expr_batch_norm},
    /* vision: pooling and shape */
    [GLESC_OP_LEAKY_RELU] = EXPR("($0 >= 0.0 ? $0 : $0 * $p0)"),
    [GLESC_OP_ELU] = EXPR("($0 >= 0.0 ? $0 : $p0 * (exp($0) - 1.0))"),
    [GLESC_OP_HARD_SIGMOID] = EXPR("clamp($0 * $p0 + $p1, 0.0, 1.0)"),
    [GLESC_OP_HARD_SWISH] = EXPR("($0 * clamp($0 / 6.0 + 0.5, 0.0, 1.0))"),
    [GLESC_OP_PAD] = {.expr = kernels_expr_pad},
    [GLESC_OP_SLICE] = {.expr = kernels_expr_slice},
    [GLESC_OP_GATHER] = {.expr = kernels_expr_gather_axis},
    [GLESC_OP_LOG_SOFTMAX] = ROWS(kernels_gen_log_softmax),
    [GLESC_OP_POOL] = ROWS(kernels_gen_pool),
    [GLESC_OP_CONV_TRANSPOSE] = ROWS(kernels_gen_conv_transpose),
};
_Static_assert(CORE_ARRAY_LEN(rows) == GLESC_OP_COUNT_, "one codegen row per glesc_op");

const kernels_codegen *kernels_op(glesc_op op)
{
    return &rows[op];
}

glesc_status kernels_gen(kb *b)
{
    if (!b->gk->anchor)
        return kernels_gen_eltwise(b);
    glesc_status (*gen)(kb *) = rows[b->gk->anchor->op].gen;
    if (!gen)
        return kb_fail(b, GLESC_ERROR_STATE, "no kernel generator for %s",
                       glesc_op_name(b->gk->anchor->op));
    return gen(b);
}

uint32_t kernels_variant(const glesc_tensor *t, const glesc_graph_options *o)
{
    return rows[t->op].variant ? rows[t->op].variant(t, o) : 0;
}
