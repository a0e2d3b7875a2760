/*
 * map.h — ONNX nodes onto glesc's public graph API: the one table of ONNX op
 * name → mapping function (map.c) and the values the mappings pass along.
 *
 * Layout: ONNX dims run slowest first, glesc's shape[0] is fastest, so an
 * ONNX tensor of rank r (1..4) is a glesc tensor of ndim r with shape[i] =
 * dims[r-1-i], and ONNX axis a is glesc axis r-1-a; a scalar (rank 0) is
 * glesc shape [1]. Numpy broadcasting aligns trailing ONNX dims, which are
 * glesc's leading ones, so glesc_binary's broadcasting is ONNX's.
 */
#ifndef ONNX_MAP_H
#define ONNX_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <glesc.h>

#include "reader.h"

/* A named ONNX value while a graph is built: its ONNX type and dims, the
 * glesc tensor that holds it (NULL until a mapping needs it on the GPU)
 * and, for graph inputs, initializers and constants, its host contents. */
typedef struct onnx_value {
    const char *name; /* the model's string */
    int32_t type;     /* ONNX element type (ONNX semantics, whatever t's type) */
    int rank;
    int64_t dims[ONNX_MAX_RANK];
    glesc_tensor *t;
    const onnx_tensor *host; /* not owned */
} onnx_value;

typedef enum onnx_map_status {
    ONNX_MAP_OK = 0,
    ONNX_MAP_UNSUPPORTED, /* why says which op, attribute, type or shape */
    ONNX_MAP_ERROR,       /* glesc refused a node the mapping accepted: why has its message */
} onnx_map_status;

/* What a mapping function sees: the node, its table row, its inputs (in[i]
 * NULL for an absent optional input) and the outputs to fill (name set;
 * type, rank, dims and t filled by the mapping). */
typedef struct onnx_map_ctx {
    glesc_graph *g;
    const Onnx__NodeProto *node;
    const struct onnx_map_entry *row; /* set by onnx_map_node */
    int64_t opset;
    onnx_value *const *in;
    int n_in;
    onnx_value *out;
    int n_out;
    /* host tensors the mapping creates (Constant, Shape) live until the
     * graph is done: the runner frees them */
    onnx_tensor *(*new_host)(void *user);
    void *user;
    char *why;
    size_t why_len;
} onnx_map_ctx;

typedef onnx_map_status (*onnx_map_fn)(onnx_map_ctx *m);

/* The table's row for op (default domain), or NULL when glesc has no
 * mapping for it. attrs lists the attributes the mapping reads
 * (comma-separated): any other attribute on a node makes it unsupported.
 * The other fields are what the generic mappings take from their row: the
 * glesc op (elementwise, activation, reduction, softmax), whether a binary
 * op folds over any number of inputs (Max, Min, Sum, Mean), a reduction's
 * elementwise ops before and after (ReduceL2: SQR, then SQRT) and the
 * pooling type. */
typedef struct onnx_map_entry {
    const char *op;
    onnx_map_fn fn;
    const char *attrs;
    glesc_op gop, pre, post;
    bool variadic;
    glesc_pool_type pool;
} onnx_map_entry;
const onnx_map_entry *onnx_map_find(const char *op);

/* Checks the node's domain and attributes against its entry, then runs the
 * mapping. */
onnx_map_status onnx_map_node(const onnx_map_entry *e, onnx_map_ctx *m);

/* v on the GPU: its tensor, made from its host contents (FLOAT, FLOAT16,
 * BFLOAT16) on first use. UNSUPPORTED for other types and shapes glesc cannot
 * hold (rank above 4, a zero-sized dimension). */
onnx_map_status onnx_value_gpu(onnx_map_ctx *m, onnx_value *v, glesc_tensor **out);

#endif
