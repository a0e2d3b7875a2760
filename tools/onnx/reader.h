/*
 * reader.h — ONNX files for onnx-run: model.onnx (a ModelProto) and the
 * test cases' tensors (TensorProto .pb files) read with the C code protoc-c
 * generates from onnx.proto, and a TensorProto's contents decoded into a
 * plain host array. Every failure names the file (or the tensor) and the
 * field at fault.
 */
#ifndef ONNX_READER_H
#define ONNX_READER_H

#include <stddef.h>
#include <stdint.h>

#include "onnx.pb-c.h"

#define ONNX_MAX_RANK 8

/* Results of the reader: UNSUPPORTED is a well-formed tensor of a type (or
 * storage) this reader does not decode; MALFORMED is a file or tensor that
 * breaks onnx.proto's rules (bad dims, data of the wrong length). */
typedef enum onnx_read_status {
    ONNX_READ_OK = 0,
    ONNX_READ_UNSUPPORTED = 1,
    ONNX_READ_MALFORMED = 2,
} onnx_read_status;

/* A decoded tensor in ONNX's order (dims[0] slowest). data holds n elements
 * of the element type: FLOAT as float; FLOAT16 and BFLOAT16 as their 16 bits
 * (uint16_t); INT32 as int32_t; INT64 as int64_t; BOOL as uint8_t (0 or 1). */
typedef struct onnx_tensor {
    int32_t type; /* ONNX__TENSOR_PROTO__DATA_TYPE__* */
    int rank;
    int64_t dims[ONNX_MAX_RANK];
    int64_t n;
    void *data;
} onnx_tensor;

/* "FLOAT", "INT64", ...; "UNDEFINED" for an unknown code. */
const char *onnx_type_name(int32_t type);
/* Bytes per element of a type the reader decodes; 0 for any other. */
size_t onnx_type_size(int32_t type);

/* Decodes tp into *out (out->data malloc'd; free with onnx_tensor_free).
 * what names the tensor in messages (a file name, "initializer W"); err
 * (errlen bytes) receives the message on failure. */
onnx_read_status onnx_tensor_decode(const Onnx__TensorProto *tp, const char *what, onnx_tensor *out,
                                    char *err, size_t errlen);
/* Decodes a serialized TensorProto (bytes in memory). */
onnx_read_status onnx_tensor_parse(const uint8_t *bytes, size_t len, const char *what,
                                   onnx_tensor *out, char *err, size_t errlen);
/* Reads and decodes a TensorProto file (input_0.pb, output_0.pb). */
onnx_read_status onnx_tensor_read(const char *path, onnx_tensor *out, char *err, size_t errlen);
void onnx_tensor_free(onnx_tensor *t);

/* Parses a serialized ModelProto and checks what onnx-run relies on: a
 * graph, and every node, value info and attribute with a name. NULL on
 * failure with the message in err. Free with onnx_model_free. */
Onnx__ModelProto *onnx_model_parse(const uint8_t *bytes, size_t len, const char *what, char *err,
                                   size_t errlen);
/* Reads and parses a model file. */
Onnx__ModelProto *onnx_model_read(const char *path, char *err, size_t errlen);
void onnx_model_free(Onnx__ModelProto *m);

/* The model's opset version for the default domain ("" or "ai.onnx"); 0
 * when the model imports none. */
int64_t onnx_model_opset(const Onnx__ModelProto *m);

#endif
