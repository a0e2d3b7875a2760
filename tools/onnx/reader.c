/*
 * reader.c — model.onnx and .pb tensors read through protoc-c's generated
 * code (onnx.pb-c.c), and TensorProto contents decoded to host arrays with
 * every length and type checked; see reader.h.
 */
#include "reader.h"

#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

const char *onnx_type_name(int32_t type)
{
    static const char *const names[] = {
        "UNDEFINED", "FLOAT",  "UINT8",     "INT8",       "UINT16",   "INT16",
        "INT32",     "INT64",  "STRING",    "BOOL",       "FLOAT16",  "DOUBLE",
        "UINT32",    "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16",
    };
    if (type < 0 || (size_t)type >= sizeof names / sizeof *names)
        return "UNDEFINED";
    return names[type];
}

size_t onnx_type_size(int32_t type)
{
    switch (type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
        return 4;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
        return 2;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
        return 8;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
        return 1;
    default:
        return 0;
    }
}

/* Reads a whole file into a malloc'd buffer. */
static uint8_t *read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        uint8_t *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    bool bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        fail(err, errlen, "%s: %s", path, buf ? "read error" : "out of memory");
        return NULL;
    }
    *len = n;
    return buf;
}

onnx_read_status onnx_tensor_decode(const Onnx__TensorProto *tp, const char *what, onnx_tensor *out,
                                    char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!tp->has_data_type) {
        fail(err, errlen, "%s: TensorProto has no data_type", what);
        return ONNX_READ_MALFORMED;
    }
    int32_t type = tp->data_type;
    size_t es = onnx_type_size(type);
    if (!es) {
        fail(err, errlen,
             "%s: data_type %s (%" PRId32 ") is not decoded (FLOAT, FLOAT16, "
             "BFLOAT16, INT32, INT64, BOOL are)",
             what, onnx_type_name(type), type);
        return ONNX_READ_UNSUPPORTED;
    }
    if (tp->n_dims > ONNX_MAX_RANK) {
        fail(err, errlen, "%s: dims has %zu entries (at most %d are decoded)", what, tp->n_dims,
             ONNX_MAX_RANK);
        return ONNX_READ_UNSUPPORTED;
    }
    if (tp->segment) {
        fail(err, errlen, "%s: segmented tensors (field segment) are not decoded", what);
        return ONNX_READ_UNSUPPORTED;
    }
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        fail(err, errlen, "%s: external data (data_location EXTERNAL) is not read", what);
        return ONNX_READ_UNSUPPORTED;
    }
    int64_t n = 1;
    for (size_t i = 0; i < tp->n_dims; i++) {
        int64_t d = tp->dims[i];
        if (d < 0) {
            fail(err, errlen, "%s: dims[%zu] = %" PRId64 " is negative", what, i, d);
            return ONNX_READ_MALFORMED;
        }
        if (d && n > ((int64_t)1 << 40) / d) {
            fail(err, errlen, "%s: dims give more than 2^40 elements", what);
            return ONNX_READ_MALFORMED;
        }
        n *= d;
        out->dims[i] = d;
    }
    size_t bytes = (size_t)n * es;
    const char *field;
    size_t have; /* values (raw_data: bytes) the field holds */
    if (tp->has_raw_data &&
        (tp->raw_data.len || (!tp->n_float_data && !tp->n_int32_data && !tp->n_int64_data))) {
        field = "raw_data";
        have = tp->raw_data.len;
        if (have != bytes) {
            fail(err, errlen, "%s: raw_data holds %zu bytes, %" PRId64 " %s elements need %zu",
                 what, have, n, onnx_type_name(type), bytes);
            return ONNX_READ_MALFORMED;
        }
    } else {
        switch (type) {
        case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
            field = "float_data";
            have = tp->n_float_data;
            break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
            field = "int64_data";
            have = tp->n_int64_data;
            break;
        default:
            field = "int32_data";
            have = tp->n_int32_data;
            break;
        }
        if (have != (size_t)n) {
            fail(err, errlen, "%s: %s holds %zu values, dims need %" PRId64, what, field, have, n);
            return ONNX_READ_MALFORMED;
        }
    }
    out->type = type;
    out->rank = (int)tp->n_dims;
    out->n = n;
    out->data = malloc(bytes ? bytes : 1);
    if (!out->data) {
        fail(err, errlen, "%s: out of memory for %zu bytes", what, bytes);
        return ONNX_READ_MALFORMED;
    }
    if (!strcmp(field, "raw_data")) {
        /* raw_data is little-endian, as every host glesc runs on. */
        if (bytes)
            memcpy(out->data, tp->raw_data.data, bytes);
        if (type == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL) {
            for (int64_t i = 0; i < n; i++) {
                if (((uint8_t *)out->data)[i] > 1) {
                    fail(err, errlen, "%s: raw_data[%" PRId64 "] = %u is not a BOOL", what, i,
                         ((uint8_t *)out->data)[i]);
                    onnx_tensor_free(out);
                    return ONNX_READ_MALFORMED;
                }
            }
        }
        return ONNX_READ_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        switch (type) {
        case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
            ((float *)out->data)[i] = tp->float_data[i];
            break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
            ((int64_t *)out->data)[i] = tp->int64_data[i];
            break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
            ((int32_t *)out->data)[i] = tp->int32_data[i];
            break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
        case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
        case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: {
            int32_t v = tp->int32_data[i];
            int32_t max = type == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL ? 1 : 0xffff;
            if (v < 0 || v > max) {
                fail(err, errlen, "%s: int32_data[%" PRId64 "] = %" PRId32 " is not a %s", what, i,
                     v, onnx_type_name(type));
                onnx_tensor_free(out);
                return ONNX_READ_MALFORMED;
            }
            if (type == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL)
                ((uint8_t *)out->data)[i] = (uint8_t)v;
            else
                ((uint16_t *)out->data)[i] = (uint16_t)v;
            break;
        }
        default:
            break;
        }
    }
    return ONNX_READ_OK;
}

onnx_read_status onnx_tensor_parse(const uint8_t *bytes, size_t len, const char *what,
                                   onnx_tensor *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, len, bytes);
    if (!tp) {
        fail(err, errlen, "%s: not a valid TensorProto (protobuf decoding failed on %zu bytes)",
             what, len);
        return ONNX_READ_MALFORMED;
    }
    onnx_read_status s = onnx_tensor_decode(tp, what, out, err, errlen);
    onnx__tensor_proto__free_unpacked(tp, NULL);
    return s;
}

onnx_read_status onnx_tensor_read(const char *path, onnx_tensor *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    size_t len;
    uint8_t *bytes = read_file(path, &len, err, errlen);
    if (!bytes)
        return ONNX_READ_MALFORMED;
    onnx_read_status s = onnx_tensor_parse(bytes, len, path, out, err, errlen);
    free(bytes);
    return s;
}

void onnx_tensor_free(onnx_tensor *t)
{
    free(t->data);
    t->data = NULL;
}

static bool value_infos_named(Onnx__ValueInfoProto *const *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!v[i]->name || !v[i]->name[0])
            return false;
    return true;
}

Onnx__ModelProto *onnx_model_parse(const uint8_t *bytes, size_t len, const char *what, char *err,
                                   size_t errlen)
{
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, bytes);
    if (!m) {
        fail(err, errlen, "%s: not a valid ModelProto (protobuf decoding failed on %zu bytes)",
             what, len);
        return NULL;
    }
    const Onnx__GraphProto *g = m->graph;
    const char *bad = NULL;
    if (!g)
        bad = "field graph is missing";
    else if (!value_infos_named(g->input, g->n_input))
        bad = "a graph.input has no name";
    else if (!value_infos_named(g->output, g->n_output))
        bad = "a graph.output has no name";
    for (size_t i = 0; !bad && i < g->n_initializer; i++)
        if (!g->initializer[i]->name || !g->initializer[i]->name[0])
            bad = "a graph.initializer has no name";
    for (size_t i = 0; !bad && i < g->n_node; i++) {
        const Onnx__NodeProto *nd = g->node[i];
        if (!nd->op_type || !nd->op_type[0])
            bad = "a node has no op_type";
        for (size_t k = 0; !bad && k < nd->n_attribute; k++)
            if (!nd->attribute[k]->name || !nd->attribute[k]->name[0])
                bad = "a node attribute has no name";
    }
    for (size_t i = 0; !bad && i < m->n_opset_import; i++)
        if (!m->opset_import[i]->has_version)
            bad = "an opset_import has no version";
    if (bad) {
        fail(err, errlen, "%s: %s", what, bad);
        onnx__model_proto__free_unpacked(m, NULL);
        return NULL;
    }
    return m;
}

Onnx__ModelProto *onnx_model_read(const char *path, char *err, size_t errlen)
{
    size_t len;
    uint8_t *bytes = read_file(path, &len, err, errlen);
    if (!bytes)
        return NULL;
    Onnx__ModelProto *m = onnx_model_parse(bytes, len, path, err, errlen);
    free(bytes);
    return m;
}

void onnx_model_free(Onnx__ModelProto *m)
{
    if (m)
        onnx__model_proto__free_unpacked(m, NULL);
}

int64_t onnx_model_opset(const Onnx__ModelProto *m)
{
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const char *d = m->opset_import[i]->domain;
        if (!d || !d[0] || !strcmp(d, "ai.onnx"))
            return m->opset_import[i]->version;
    }
    return 0;
}
