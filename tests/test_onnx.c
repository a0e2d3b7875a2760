/*
 * test_onnx.c — tools/onnx: the TensorProto reader on handcrafted protobuf
 * bytes (good tensors, bad dims, truncated data, types it does not decode:
 * each with a clear message), the model reader on every truncation and on
 * corrupted bytes of a model (no crash, under ASan too), and onnx-run
 * (path in $GLESC_ONNX_RUN) on a handmade case: it passes, fails when the
 * expected output is wrong, and survives truncated and corrupted model
 * files.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "reader.h"
#include "test_util.h"

static onnx_read_status parse(const uint8_t *b, size_t n, onnx_tensor *t, char *err)
{
    return onnx_tensor_parse(b, n, "t.pb", t, err, 512);
}

Test(onnx_reader, raw_and_typed_fields)
{
    /* dims [2, 3], FLOAT, raw_data of 6 floats */
    uint8_t raw[8 + 24] = {0x08, 0x02, 0x08, 0x03, 0x10, 0x01, 0x4a, 0x18};
    const float v[6] = {1, -2, 3.5f, 0, 1e-3f, -7};
    memcpy(raw + 8, v, sizeof v);
    onnx_tensor t;
    char err[512] = "";
    cr_assert_eq(parse(raw, sizeof raw, &t, err), ONNX_READ_OK, "%s", err);
    cr_assert_eq(t.type, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    cr_assert_eq(t.rank, 2);
    cr_assert_eq(t.dims[0], 2);
    cr_assert_eq(t.dims[1], 3);
    cr_assert_eq(t.n, 6);
    cr_assert_arr_eq(t.data, v, sizeof v);
    onnx_tensor_free(&t);

    /* dims [2], FLOAT, packed float_data */
    uint8_t fd[] = {0x08, 0x02, 0x10, 0x01, 0x22, 0x08, 0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0};
    cr_assert_eq(parse(fd, sizeof fd, &t, err), ONNX_READ_OK, "%s", err);
    cr_assert_eq(((float *)t.data)[0], 1.0f);
    cr_assert_eq(((float *)t.data)[1], -2.0f);
    onnx_tensor_free(&t);

    /* dims [2], INT64, packed int64_data {5, 127} */
    uint8_t i64[] = {0x08, 0x02, 0x10, 0x07, 0x3a, 0x02, 0x05, 0x7f};
    cr_assert_eq(parse(i64, sizeof i64, &t, err), ONNX_READ_OK, "%s", err);
    cr_assert_eq(((int64_t *)t.data)[0], 5);
    cr_assert_eq(((int64_t *)t.data)[1], 127);
    onnx_tensor_free(&t);

    /* dims [0], FLOAT, empty raw_data: no elements */
    uint8_t empty[] = {0x08, 0x00, 0x10, 0x01, 0x4a, 0x00};
    cr_assert_eq(parse(empty, sizeof empty, &t, err), ONNX_READ_OK, "%s", err);
    cr_assert_eq(t.n, 0);
    cr_assert_eq(t.rank, 1);
    onnx_tensor_free(&t);

    /* a scalar (no dims) FLOAT16 in int32_data: 0x3c00 = 1.0 */
    uint8_t f16[] = {0x10, 0x0a, 0x2a, 0x03, 0x80, 0xf8, 0x00};
    cr_assert_eq(parse(f16, sizeof f16, &t, err), ONNX_READ_OK, "%s", err);
    cr_assert_eq(t.rank, 0);
    cr_assert_eq(t.n, 1);
    cr_assert_eq(((uint16_t *)t.data)[0], 0x3c00);
    onnx_tensor_free(&t);
}

/* Each malformed or undecodable tensor gives its status and a message
 * naming the file and the field. */
static void expect_error(const uint8_t *b, size_t n, onnx_read_status want, const char *needle)
{
    onnx_tensor t;
    char err[512] = "";
    onnx_read_status s = parse(b, n, &t, err);
    cr_expect_eq(s, want, "status %d, want %d (%s)", s, want, err);
    cr_expect(strstr(err, "t.pb") && strstr(err, needle), "message \"%s\" lacks \"%s\"", err,
              needle);
    cr_expect_null(t.data);
}

Test(onnx_reader, bad_tensors_are_named)
{
    uint8_t neg[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x10, 0x01};
    expect_error(neg, sizeof neg, ONNX_READ_MALFORMED, "dims[0] = -1 is negative");
    uint8_t huge[] = {0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x08,
                      0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x10, 0x01};
    expect_error(huge, sizeof huge, ONNX_READ_MALFORMED, "2^40");
    uint8_t short_raw[8 + 20] = {0x08, 0x02, 0x08, 0x03, 0x10, 0x01, 0x4a, 0x14};
    expect_error(short_raw, sizeof short_raw, ONNX_READ_MALFORMED,
                 "raw_data holds 20 bytes, 6 FLOAT elements need 24");
    uint8_t few[] = {0x08, 0x03, 0x10, 0x01, 0x22, 0x08, 0, 0, 0, 0, 0, 0, 0, 0};
    expect_error(few, sizeof few, ONNX_READ_MALFORMED, "float_data holds 2 values, dims need 3");
    uint8_t notype[] = {0x08, 0x01};
    expect_error(notype, sizeof notype, ONNX_READ_MALFORMED, "no data_type");
    uint8_t dbl[] = {0x08, 0x01, 0x10, 0x0b, 0x4a, 0x08, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f};
    expect_error(dbl, sizeof dbl, ONNX_READ_UNSUPPORTED, "data_type DOUBLE (11) is not decoded");
    uint8_t big16[] = {0x08, 0x01, 0x10, 0x0a, 0x2a, 0x03, 0x80, 0x80, 0x04};
    expect_error(big16, sizeof big16, ONNX_READ_MALFORMED,
                 "int32_data[0] = 65536 is not a FLOAT16");
    uint8_t badbool[] = {0x08, 0x01, 0x10, 0x09, 0x4a, 0x01, 0x02};
    expect_error(badbool, sizeof badbool, ONNX_READ_MALFORMED, "raw_data[0] = 2 is not a BOOL");
    /* a length-delimited field cut short: protobuf decoding fails */
    uint8_t cut[8 + 10] = {0x08, 0x02, 0x08, 0x03, 0x10, 0x01, 0x4a, 0x18};
    expect_error(cut, sizeof cut, ONNX_READ_MALFORMED, "not a valid TensorProto");
}

Test(onnx_reader, missing_file_is_named)
{
    onnx_tensor t;
    char err[512] = "";
    cr_assert_eq(onnx_tensor_read("/nonexistent/input_0.pb", &t, err, sizeof err),
                 ONNX_READ_MALFORMED);
    cr_assert(strstr(err, "/nonexistent/input_0.pb"), "%s", err);
    cr_assert_null(onnx_model_read("/nonexistent/model.onnx", err, sizeof err));
    cr_assert(strstr(err, "/nonexistent/model.onnx"), "%s", err);
}

/* A one-node model: y = op(x), x and y FLOAT [2, 3], opset 13. */
static uint8_t *model_bytes(const char *op, size_t *len)
{
    Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    opset.domain = "";
    opset.has_version = 1;
    opset.version = 13;
    Onnx__OperatorSetIdProto *opsets[] = {&opset};
    char *in_names[] = {"x"}, *out_names[] = {"y"};
    Onnx__NodeProto node = ONNX__NODE_PROTO__INIT;
    node.n_input = 1;
    node.input = in_names;
    node.n_output = 1;
    node.output = out_names;
    node.op_type = (char *)op;
    Onnx__NodeProto *nodes[] = {&node};
    Onnx__TensorShapeProto__Dimension d0 = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT,
                                      d1 = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
    d0.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    d0.dim_value = 2;
    d1.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    d1.dim_value = 3;
    Onnx__TensorShapeProto__Dimension *dims[] = {&d0, &d1};
    Onnx__TensorShapeProto shape = ONNX__TENSOR_SHAPE_PROTO__INIT;
    shape.n_dim = 2;
    shape.dim = dims;
    Onnx__TypeProto__Tensor tt = ONNX__TYPE_PROTO__TENSOR__INIT;
    tt.has_elem_type = 1;
    tt.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tt.shape = &shape;
    Onnx__TypeProto type = ONNX__TYPE_PROTO__INIT;
    type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    type.tensor_type = &tt;
    Onnx__ValueInfoProto vx = ONNX__VALUE_INFO_PROTO__INIT, vy = ONNX__VALUE_INFO_PROTO__INIT;
    vx.name = "x";
    vx.type = &type;
    vy.name = "y";
    vy.type = &type;
    Onnx__ValueInfoProto *ins[] = {&vx}, *outs[] = {&vy};
    Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
    graph.name = "g";
    graph.n_node = 1;
    graph.node = nodes;
    graph.n_input = 1;
    graph.input = ins;
    graph.n_output = 1;
    graph.output = outs;
    Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
    model.has_ir_version = 1;
    model.ir_version = 7;
    model.n_opset_import = 1;
    model.opset_import = opsets;
    model.graph = &graph;
    *len = onnx__model_proto__get_packed_size(&model);
    uint8_t *b = malloc(*len);
    cr_assert_not_null(b);
    onnx__model_proto__pack(&model, b);
    return b;
}

/* A FLOAT [2, 3] tensor as a serialized TensorProto (raw_data). */
static uint8_t *tensor_bytes(const float v[6], size_t *len)
{
    int64_t dims[] = {2, 3};
    Onnx__TensorProto t = ONNX__TENSOR_PROTO__INIT;
    t.n_dims = 2;
    t.dims = dims;
    t.has_data_type = 1;
    t.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t.has_raw_data = 1;
    t.raw_data.len = 6 * sizeof(float);
    t.raw_data.data = (uint8_t *)v;
    *len = onnx__tensor_proto__get_packed_size(&t);
    uint8_t *b = malloc(*len);
    cr_assert_not_null(b);
    onnx__tensor_proto__pack(&t, b);
    return b;
}

Test(onnx_reader, truncated_and_corrupted_models_do_not_crash)
{
    size_t len;
    uint8_t *b = model_bytes("Relu", &len);
    char err[512];
    Onnx__ModelProto *m = onnx_model_parse(b, len, "model.onnx", err, sizeof err);
    cr_assert_not_null(m, "%s", err);
    cr_assert_eq(onnx_model_opset(m), 13);
    cr_assert_str_eq(m->graph->node[0]->op_type, "Relu");
    onnx_model_free(m);
    int rejected = 0;
    for (size_t cut = 0; cut < len; cut++) {
        err[0] = 0;
        m = onnx_model_parse(b, cut, "model.onnx", err, sizeof err);
        if (!m) {
            rejected++;
            cr_expect(strstr(err, "model.onnx"), "cut at %zu: message \"%s\"", cut, err);
        }
        onnx_model_free(m);
    }
    cr_expect_gt(rejected, (int)len / 2, "only %d of %zu truncations rejected", rejected, len);
    uint8_t *c = malloc(len);
    cr_assert_not_null(c);
    const uint8_t flips[] = {0x00, 0xff, 0x80, 0x7f, 0x01};
    for (size_t i = 0; i < len; i++) {
        for (size_t f = 0; f < sizeof flips; f++) {
            memcpy(c, b, len);
            c[i] = flips[f];
            onnx_model_free(onnx_model_parse(c, len, "model.onnx", err, sizeof err));
        }
    }
    free(c);
    free(b);
}

static void write_file(const char *path, const uint8_t *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s", path);
    cr_assert_eq(fwrite(b, 1, len, f), len);
    fclose(f);
}

/* A case directory dir/name: model (len bytes), input x, expected y. */
static char *make_case(const char *dir, const char *name, const uint8_t *model, size_t len,
                       const float x[6], const float y[6])
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cr_assert_eq(mkdir(path, 0755), 0);
    char *cdir = strdup(path);
    snprintf(path, sizeof path, "%s/model.onnx", cdir);
    write_file(path, model, len);
    snprintf(path, sizeof path, "%s/test_data_set_0", cdir);
    cr_assert_eq(mkdir(path, 0755), 0);
    size_t n;
    uint8_t *t = tensor_bytes(x, &n);
    snprintf(path, sizeof path, "%s/test_data_set_0/input_0.pb", cdir);
    write_file(path, t, n);
    free(t);
    t = tensor_bytes(y, &n);
    snprintf(path, sizeof path, "%s/test_data_set_0/output_0.pb", cdir);
    write_file(path, t, n);
    free(t);
    return cdir;
}

static test_run_result onnx_run(const char *args)
{
    const char *exe = test_tool("GLESC_ONNX_RUN");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s", exe, args);
    return test_run(cmd, NULL);
}

Test(onnx_run, passes_fails_and_survives_corrupt_models, .timeout = 300)
{
    const float x[6] = {-1, 2, -3, 4, 0, -0.5f}, y[6] = {0, 2, 0, 4, 0, 0};
    const float wrong[6] = {0, 2, 0, 4, 0, 1};
    size_t len;
    uint8_t *model = model_bytes("Relu", &len);
    char *dir = test_tmpdir();
    char *good = make_case(dir, "relu_good", model, len, x, y);
    test_run_result r = onnx_run(good);
    cr_expect_eq(r.status, 0, "%s%s", r.out, r.err);
    cr_expect(strstr(r.out, "1 cases: 1 passed, 0 failed, 0 unsupported"), "%s", r.out);
    test_run_free(&r);

    char *bad = make_case(dir, "relu_wrong", model, len, x, wrong);
    r = onnx_run(bad);
    cr_expect_eq(r.status, 1, "a wrong expected output must fail: %s%s", r.out, r.err);
    cr_expect(strstr(r.out, "FAIL") && strstr(r.out, "worst |d| 1 at y[5]"), "%s", r.out);
    test_run_free(&r);

    /* an op outside the table: unsupported, exit 0 */
    size_t ulen;
    uint8_t *um = model_bytes("Erf", &ulen);
    char *unsup = make_case(dir, "erf", um, ulen, x, y);
    r = onnx_run(unsup);
    cr_expect_eq(r.status, 0, "%s%s", r.out, r.err);
    cr_expect(strstr(r.out, "op Erf is not mapped"), "%s", r.out);
    test_run_free(&r);

    /* truncated and corrupted model files: a clean result, never a crash */
    char *corrupt = NULL;
    for (size_t cut = 1; cut < len; cut += len / 6 + 1) {
        char name[64];
        snprintf(name, sizeof name, "cut_%03zu", cut);
        free(make_case(dir, name, model, cut, x, y));
    }
    uint8_t *c = malloc(len);
    cr_assert_not_null(c);
    for (size_t i = 0; i < len; i += len / 8 + 1) {
        memcpy(c, model, len);
        c[i] ^= 0xff;
        char name[64];
        snprintf(name, sizeof name, "flip_%03zu", i);
        free(make_case(dir, name, c, len, x, y));
    }
    free(c);
    char args[4200];
    snprintf(args, sizeof args, "--filter _ '%s'", dir);
    r = onnx_run(args);
    cr_expect(r.status == 0 || r.status == 1, "exit %d: %s%s", r.status, r.out, r.err);
    cr_expect(strstr(r.out, "not a valid ModelProto"), "%s", r.out);
    test_run_free(&r);
    free(corrupt);
    free(good);
    free(bad);
    free(unsup);
    free(um);
    free(model);
    free(dir);
}
