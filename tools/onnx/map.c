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
    {"Abs", onnx_map_unary, .attrs = "", .gop = GLESC_OP_ABS},
    {"Add", onnx_map_binary, .attrs = "", .gop = GLESC_OP_ADD},
    {"ArgMax", onnx_map_argmax, .attrs = "axis,keepdims,select_last_index"},
    {"AveragePool", onnx_map_pool,
     .attrs = "auto_pad,ceil_mode,count_include_pad,kernel_shape,pads,strides,dilations",
     .pool = GLESC_POOL_AVG},
    {"BatchNormalization", onnx_map_batch_norm,
     .attrs = "epsilon,is_test,momentum,spatial,training_mode"},
    {"Cast", onnx_map_cast, .attrs = "to"},
    {"CastLike", onnx_map_castlike, .attrs = ""},
    {"Clip", onnx_map_clip, .attrs = "min,max"},
    {"Concat", onnx_map_concat, .attrs = "axis"},
    {"Constant", onnx_map_constant, .attrs = "value,value_float,value_floats,value_int,value_ints"},
    {"Conv", onnx_map_conv, .attrs = "auto_pad,dilations,group,kernel_shape,pads,strides"},
    {"ConvTranspose", onnx_map_conv_transpose,
     .attrs = "auto_pad,dilations,group,kernel_shape,output_padding,output_shape,pads,strides"},
    {"Cos", onnx_map_unary, .attrs = "", .gop = GLESC_OP_COS},
    {"Div", onnx_map_binary, .attrs = "", .gop = GLESC_OP_DIV},
    {"Elu", onnx_map_act, .attrs = "alpha", .gop = GLESC_OP_ELU},
    {"Exp", onnx_map_unary, .attrs = "", .gop = GLESC_OP_EXP},
    {"Flatten", onnx_map_flatten, .attrs = "axis"},
    {"Gather", onnx_map_gather, .attrs = "axis"},
    {"Gemm", onnx_map_gemm, .attrs = "alpha,beta,broadcast,transA,transB"},
    {"GlobalAveragePool", onnx_map_global_pool, .attrs = "", .pool = GLESC_POOL_AVG},
    {"GlobalMaxPool", onnx_map_global_pool, .attrs = "", .pool = GLESC_POOL_MAX},
    {"HardSigmoid", onnx_map_act, .attrs = "alpha,beta", .gop = GLESC_OP_HARD_SIGMOID},
    {"HardSwish", onnx_map_act, .attrs = "", .gop = GLESC_OP_HARD_SWISH},
    {"Identity", onnx_map_identity, .attrs = ""},
    {"LayerNormalization", onnx_map_layer_norm, .attrs = "axis,epsilon,stash_type"},
    {"LeakyRelu", onnx_map_act, .attrs = "alpha", .gop = GLESC_OP_LEAKY_RELU},
    {"Log", onnx_map_unary, .attrs = "", .gop = GLESC_OP_LOG},
    {"LogSoftmax", onnx_map_softmax, .attrs = "axis", .gop = GLESC_OP_LOG_SOFTMAX},
    {"MatMul", onnx_map_matmul, .attrs = ""},
    {"Max", onnx_map_binary, .attrs = "", .gop = GLESC_OP_MAX, .variadic = true},
    {"MaxPool", onnx_map_pool,
     .attrs = "auto_pad,ceil_mode,dilations,kernel_shape,pads,storage_order,strides",
     .pool = GLESC_POOL_MAX},
    {"Mean", onnx_map_mean, .attrs = "", .gop = GLESC_OP_ADD, .variadic = true},
    {"Min", onnx_map_binary, .attrs = "", .gop = GLESC_OP_MIN, .variadic = true},
    {"Mul", onnx_map_binary, .attrs = "", .gop = GLESC_OP_MUL},
    {"Neg", onnx_map_unary, .attrs = "", .gop = GLESC_OP_NEG},
    {"Pad", onnx_map_pad, .attrs = "mode,pads,value"},
    {"Pow", onnx_map_binary, .attrs = "", .gop = GLESC_OP_POW},
    {"Reciprocal", onnx_map_reciprocal, .attrs = ""},
    {"ReduceL1", onnx_map_reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM, .pre = GLESC_OP_ABS},
    {"ReduceL2", onnx_map_reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM, .pre = GLESC_OP_SQR,
     .post = GLESC_OP_SQRT},
    {"ReduceLogSum", onnx_map_reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM,
     .post = GLESC_OP_LOG},
    {"ReduceLogSumExp", onnx_map_reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM,
     .pre = GLESC_OP_EXP, .post = GLESC_OP_LOG},
    {"ReduceMax", onnx_map_reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_REDUCE_MAX},
    {"ReduceMean", onnx_map_reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_MEAN},
    {"ReduceMin", onnx_map_reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_REDUCE_MIN},
    {"ReduceSum", onnx_map_reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM},
    {"ReduceSumSquare", onnx_map_reduce, .attrs = REDUCE_ATTRS, .gop = GLESC_OP_SUM,
     .pre = GLESC_OP_SQR},
    {"Relu", onnx_map_unary, .attrs = "", .gop = GLESC_OP_RELU},
    {"Reshape", onnx_map_reshape, .attrs = "allowzero"},
    {"Shape", onnx_map_shape, .attrs = "start,end"},
    {"Sigmoid", onnx_map_unary, .attrs = "", .gop = GLESC_OP_SIGMOID},
    {"Sin", onnx_map_unary, .attrs = "", .gop = GLESC_OP_SIN},
    {"Slice", onnx_map_slice, .attrs = "axes,ends,starts"},
    {"Softmax", onnx_map_softmax, .attrs = "axis", .gop = GLESC_OP_SOFTMAX},
    {"Softplus", onnx_map_unary, .attrs = "", .gop = GLESC_OP_SOFTPLUS},
    {"Sqrt", onnx_map_unary, .attrs = "", .gop = GLESC_OP_SQRT},
    {"Squeeze", onnx_map_squeeze, .attrs = "axes"},
    {"Sub", onnx_map_binary, .attrs = "", .gop = GLESC_OP_SUB},
    {"Sum", onnx_map_binary, .attrs = "", .gop = GLESC_OP_ADD, .variadic = true},
    {"Tanh", onnx_map_unary, .attrs = "", .gop = GLESC_OP_TANH},
    {"Transpose", onnx_map_transpose, .attrs = "perm"},
    {"Unsqueeze", onnx_map_unsqueeze, .attrs = "axes"},
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
