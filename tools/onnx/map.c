/*
 * map.c — the ONNX op table of onnx-run: each row maps one ONNX op onto
 * glesc's public graph API (the mappings are in map_*.c, see map_ops.h),
 * exactly or not at all. A mapping checks every
 * attribute, type and shape it relies on and answers UNSUPPORTED (with the
 * reason) for anything glesc cannot express as ONNX defines it; it never
 * approximates. Layout conventions are in map.h.
 */
#include <string.h>

#include "map_ops.h"

/* ---- the table ---- */

#define REDUCE_ATTRS "axes,keepdims,noop_with_empty_axes"
static const onnx_map_entry table[] = {
    {"Abs", unary, .attrs = "", .gop = GLESC_OP_ABS},
    {"Add", binary, .attrs = "", .gop = GLESC_OP_ADD},
    {"ArgMax", map_argmax, .attrs = "axis,keepdims,select_last_index"},
    {"AveragePool", pool,
     .attrs = "auto_pad,ceil_mode,count_include_pad,kernel_shape,pads,strides,dilations",
     .pool = GLESC_POOL_AVG},
    {"BatchNormalization", map_batch_norm,
     .attrs = "epsilon,is_test,momentum,spatial,training_mode"},
    {"Cast", map_cast, .attrs = "to"},
    {"CastLike", map_castlike, .attrs = ""},
    {"Clip", map_clip, .attrs = "min,max"},
    {"Concat", map_concat, .attrs = "axis"},
    {"Constant", map_constant, .attrs = "value,value_float,value_floats,value_int,value_ints"},
    {"Conv", map_conv, .attrs = "auto_pad,dilations,group,kernel_shape,pads,strides"},
    {"ConvTranspose", map_conv_transpose,
     .attrs = "auto_pad,dilations,group,kernel_shape,output_padding,output_shape,pads,strides"},
    {"Cos", unary, .attrs = "", .gop = GLESC_OP_COS},
    {"Div", binary, .attrs = "", .gop = GLESC_OP_DIV},
    {"Elu", act, .attrs = "alpha", .gop = GLESC_OP_ELU},
    {"Exp", unary, .attrs = "", .gop = GLESC_OP_EXP},
    {"Flatten", map_flatten, .attrs = "axis"},
    {"Gather", map_gather, .attrs = "axis"},
    {"Gemm", map_gemm, .attrs = "alpha,beta,broadcast,transA,transB"},
    {"GlobalAveragePool", global_pool, .attrs = "", .pool = GLESC_POOL_AVG},
    {"GlobalMaxPool", global_pool, .attrs = "", .pool = GLESC_POOL_MAX},
    {"HardSigmoid", act, .attrs = "alpha,beta", .gop = GLESC_OP_HARD_SIGMOID},
    {"HardSwish", act, .attrs = "", .gop = GLESC_OP_HARD_SWISH},
    {"Identity", map_identity, .attrs = ""},
    {"LayerNormalization", map_layer_norm, .attrs = "axis,epsilon,stash_type"},
    {"LeakyRelu", act, .attrs = "alpha", .gop = GLESC_OP_LEAKY_RELU},
    {"Log", unary, .attrs = "", .gop = GLESC_OP_LOG},
    {"LogSoftmax", softmax, .attrs = "axis", .gop = GLESC_OP_LOG_SOFTMAX},
    {"MatMul", map_matmul, .attrs = ""},
    {"Max", binary, .attrs = "", .gop = GLESC_OP_MAX, .variadic = true},
    {"MaxPool", pool,
     .attrs = "auto_pad,ceil_mode,dilations,kernel_shape,pads,storage_order,strides",
     .pool = GLESC_POOL_MAX},
    {"Mean", map_mean, .attrs = "", .gop = GLESC_OP_ADD, .variadic = true},
    {"Min", binary, .attrs = "", .gop = GLESC_OP_MIN, .variadic = true},
    {"Mul", binary, .attrs = "", .gop = GLESC_OP_MUL},
    {"Neg", unary, .attrs = "", .gop = GLESC_OP_NEG},
    {"Pad", map_pad, .attrs = "mode,pads,value"},
    {"Pow", binary, .attrs = "", .gop = GLESC_OP_POW},
    {"Reciprocal", map_reciprocal, .attrs = ""},
    {"ReduceL1", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM, .pre = GLESC_OP_ABS},
    {"ReduceL2", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM, .pre = GLESC_OP_SQR,
     .post = GLESC_OP_SQRT},
    {"ReduceLogSum", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM, .post = GLESC_OP_LOG},
    {"ReduceLogSumExp", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM, .pre = GLESC_OP_EXP,
     .post = GLESC_OP_LOG},
    {"ReduceMax", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_REDUCE_MAX},
    {"ReduceMean", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_MEAN},
    {"ReduceMin", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_REDUCE_MIN},
    {"ReduceSum", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM},
    {"ReduceSumSquare", reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM, .pre = GLESC_OP_SQR},
    {"Relu", unary, .attrs = "", .gop = GLESC_OP_RELU},
    {"Reshape", map_reshape, .attrs = "allowzero"},
    {"Shape", map_shape, .attrs = "start,end"},
    {"Sigmoid", unary, .attrs = "", .gop = GLESC_OP_SIGMOID},
    {"Sin", unary, .attrs = "", .gop = GLESC_OP_SIN},
    {"Slice", map_slice, .attrs = "axes,ends,starts"},
    {"Softmax", softmax, .attrs = "axis", .gop = GLESC_OP_SOFTMAX},
    {"Softplus", unary, .attrs = "", .gop = GLESC_OP_SOFTPLUS},
    {"Sqrt", unary, .attrs = "", .gop = GLESC_OP_SQRT},
    {"Squeeze", map_squeeze, .attrs = "axes"},
    {"Sub", binary, .attrs = "", .gop = GLESC_OP_SUB},
    {"Sum", binary, .attrs = "", .gop = GLESC_OP_ADD, .variadic = true},
    {"Tanh", unary, .attrs = "", .gop = GLESC_OP_TANH},
    {"Transpose", map_transpose, .attrs = "perm"},
    {"Unsqueeze", map_unsqueeze, .attrs = "axes"},
};

const onnx_map_entry *onnx_map_find(const char *op)
{
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (!strcmp(table[i].op, op))
            return &table[i];
    return NULL;
}

/* name is one of the comma-separated names of list. */
static bool listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n))
            return true;
        p += len + (e ? 1 : 0);
    }
    return false;
}

onnx_map_status onnx_map_node(const onnx_map_entry *e, onnx_map_ctx *m)
{
    const char *d = m->node->domain;
    if (d && d[0] && strcmp(d, "ai.onnx"))
        return UNSUP("%s of domain %s", m->node->op_type, d);
    for (size_t i = 0; i < m->node->n_attribute; i++) {
        const Onnx__AttributeProto *a = m->node->attribute[i];
        if (!listed(e->attrs, a->name))
            return UNSUP("%s attribute %s is not mapped", e->op, a->name);
        if (a->ref_attr_name && a->ref_attr_name[0])
            return UNSUP("%s attribute %s refers to a function attribute", e->op, a->name);
    }
    for (int k = 0; k < m->n_out; k++) {
        m->out[k].t = NULL;
        m->out[k].host = NULL;
    }
    m->row = e;
    return e->fn(m);
}
