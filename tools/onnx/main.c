/*
 * onnx-run — ONNX's backend node tests (Debian's libonnx-testdata: a
 * directory per case with model.onnx and test_data_set_N/{input,output}_K.pb)
 * run on the GPU through glesc's public graph API. Each node maps through
 * the op table of map.c; a case is unsupported when any of its ops (or an
 * attribute, type or shape a mapping needs) is not mapped, else it runs and
 * every output must match output_K.pb within the tolerance below. Prints a
 * line per case and a per-op table; exits 1 when a case of mapped ops
 * fails, 0 otherwise (77 with --skip-missing when no directory exists).
 */
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <glesc.h>

#include "map.h"
#include "reader.h"

/* |got - want| <= ATOL + RTOL·|want| per element; NaN only matches NaN,
 * an infinity only itself. f32 results use ONNX's own backend-test rtol
 * (1e-3) with atol 1e-5 (ONNX uses 1e-7; glesc's GLSL exp/log/sin are
 * accurate to a few ulp, not correctly rounded, which matters near zero);
 * f16 and bf16 results allow one rounding step of the type. Integers
 * (ArgMax, Shape) must match exactly. */
#define RTOL_F32 1e-3
#define ATOL_F32 1e-5
#define RTOL_F16 2e-3
#define ATOL_F16 1e-3
#define RTOL_BF16 1.6e-2
#define ATOL_BF16 1e-2

enum { PASS, FAIL, UNSUPPORTED };
static const char *const result_name[] = {"PASS", "FAIL", "UNSUPPORTED"};

typedef struct op_stats {
    char op[64];
    bool mapped;
    int cases, passed, failed, unsupported;
} op_stats;

static op_stats *stats;
static int n_stats;

static op_stats *stats_for(const char *op)
{
    for (int i = 0; i < n_stats; i++)
        if (!strcmp(stats[i].op, op))
            return &stats[i];
    op_stats *s = realloc(stats, (size_t)(n_stats + 1) * sizeof *stats);
    if (!s) {
        fprintf(stderr, "onnx-run: out of memory\n");
        exit(2);
    }
    stats = s;
    s = &stats[n_stats++];
    memset(s, 0, sizeof *s);
    snprintf(s->op, sizeof s->op, "%s", op);
    s->mapped = onnx_map_find(op) != NULL;
    return s;
}

/* ---- one graph build ---- */

typedef struct build {
    onnx_value *vals;
    int n_vals, cap_vals;
    onnx_tensor **hosts; /* host tensors owned by the build */
    int n_hosts;
} build;

static onnx_value *val_add(build *b, const char *name)
{
    if (b->n_vals == b->cap_vals) {
        int cap = b->cap_vals ? 2 * b->cap_vals : 64;
        onnx_value *v = realloc(b->vals, (size_t)cap * sizeof *v);
        if (!v)
            return NULL;
        b->vals = v;
        b->cap_vals = cap;
    }
    onnx_value *v = &b->vals[b->n_vals++];
    memset(v, 0, sizeof *v);
    v->name = name;
    return v;
}

/* The latest value of that name (a later definition shadows). */
static int val_find(const build *b, const char *name)
{
    for (int i = b->n_vals - 1; i >= 0; i--)
        if (!strcmp(b->vals[i].name, name))
            return i;
    return -1;
}

static onnx_tensor *host_new(void *user)
{
    build *b = user;
    onnx_tensor **h = realloc(b->hosts, (size_t)(b->n_hosts + 1) * sizeof *h);
    if (!h)
        return NULL;
    b->hosts = h;
    onnx_tensor *t = calloc(1, sizeof *t);
    if (t)
        b->hosts[b->n_hosts++] = t;
    return t;
}

static void build_free(build *b)
{
    for (int i = 0; i < b->n_hosts; i++) {
        onnx_tensor_free(b->hosts[i]);
        free(b->hosts[i]);
    }
    free(b->hosts);
    free(b->vals);
}

static void value_from_host(onnx_value *v, const onnx_tensor *h)
{
    v->type = h->type;
    v->rank = h->rank;
    memcpy(v->dims, h->dims, sizeof v->dims);
    v->host = h;
}

static double element(const onnx_tensor *t, int64_t i)
{
    switch (t->type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
        return ((const float *)t->data)[i];
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
        return ((const int32_t *)t->data)[i];
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
        return (double)((const int64_t *)t->data)[i];
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
        return ((const uint8_t *)t->data)[i];
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: {
        uint32_t bits = (uint32_t)((const uint16_t *)t->data)[i] << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: {
        uint16_t h = ((const uint16_t *)t->data)[i];
        int e = (h >> 10) & 31, mant = h & 1023;
        double v = e == 0    ? ldexp(mant, -24)
                   : e == 31 ? (mant ? NAN : INFINITY)
                             : ldexp(mant + 1024, e - 25);
        return h & 0x8000 ? -v : v;
    }
    default:
        return NAN;
    }
}

static bool is_int(int32_t type)
{
    return type == ONNX__TENSOR_PROTO__DATA_TYPE__INT32 ||
           type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ||
           type == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
}

/* Compares got (n values) with want; worst tolerance ratio in *worst_ratio,
 * its absolute error in *worst_abs and index in *worst_i. */
static bool compare(const double *got, const onnx_tensor *want, double *worst_ratio,
                    double *worst_abs, int64_t *worst_i)
{
    double rtol = RTOL_F32, atol = ATOL_F32;
    if (want->type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16)
        rtol = RTOL_F16, atol = ATOL_F16;
    if (want->type == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16)
        rtol = RTOL_BF16, atol = ATOL_BF16;
    if (is_int(want->type))
        rtol = 0, atol = 0;
    bool ok = true;
    for (int64_t i = 0; i < want->n; i++) {
        double w = element(want, i), g = got[i], ratio, d;
        if (isnan(w) || isnan(g) || isinf(w) || isinf(g)) {
            bool same = (isnan(w) && isnan(g)) || w == g;
            ratio = same ? 0 : INFINITY;
            d = same ? 0 : INFINITY;
        } else {
            d = fabs(g - w);
            double lim = atol + rtol * fabs(w);
            ratio = lim > 0 ? d / lim : (d > 0 ? INFINITY : 0);
        }
        if (ratio > 1)
            ok = false;
        if (ratio > *worst_ratio || (i == 0 && *worst_i < 0)) {
            *worst_ratio = ratio;
            *worst_abs = d;
            *worst_i = i;
        }
    }
    return ok;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static glesc_context *ctx;

static glesc_context *context(char *msg, size_t len)
{
    if (!ctx && glesc_context_create(NULL, &ctx) != GLESC_OK) {
        snprintf(msg, len, "glesc_context_create: %s", glesc_last_errmsg());
        ctx = NULL;
    }
    return ctx;
}

/* One test_data_set of a model while it runs: the model, where its files
 * are, the values built so far, the tensors read and the graph; res and msg
 * are the result and its message. */
typedef struct set_run {
    const Onnx__ModelProto *model;
    const Onnx__GraphProto *gp;
    const char *dir, *set;
    build b;
    onnx_tensor *inits, *ins, *outs;
    glesc_tensor **compute;
    glesc_graph *g;
    int res;
    char *msg;
    size_t len;
} set_run;

/* Out of memory: the message and FAIL; -1. */
static int set_oom(set_run *r)
{
    snprintf(r->msg, r->len, "out of memory");
    r->res = FAIL;
    return -1;
}

/* Reads the tensor at path into t; -1 with the result (FAIL or
 * UNSUPPORTED) and the reader's message. */
static int set_read_tensor(set_run *r, onnx_tensor *t, const char *path)
{
    char err[1024];
    onnx_read_status s_ = onnx_tensor_read(path, t, err, sizeof err);
    if (s_ != ONNX_READ_OK) {
        r->res = s_ == ONNX_READ_UNSUPPORTED ? UNSUPPORTED : FAIL;
        snprintf(r->msg, r->len, "%s", err);
        return -1;
    }
    return 0;
}

/* The expected outputs, read first: an output type glesc cannot produce
 * makes the case unsupported before any GPU work. */
static int set_read_expected(set_run *r)
{
    char path[4096];
    for (size_t k = 0; k < r->gp->n_output; k++) {
        snprintf(path, sizeof path, "%s/%s/output_%zu.pb", r->dir, r->set, k);
        if (set_read_tensor(r, &r->outs[k], path))
            return -1;
    }
    return 0;
}

/* The initializers, decoded from the model, as host values. */
static int set_add_initializers(set_run *r)
{
    const Onnx__GraphProto *gp = r->gp;
    char err[1024];
    for (size_t i = 0; i < gp->n_initializer; i++) {
        char what[512];
        snprintf(what, sizeof what, "%s/model.onnx: initializer %s", r->dir,
                 gp->initializer[i]->name);
        onnx_read_status s =
            onnx_tensor_decode(gp->initializer[i], what, &r->inits[i], err, sizeof err);
        if (s != ONNX_READ_OK) {
            r->res = s == ONNX_READ_UNSUPPORTED ? UNSUPPORTED : FAIL;
            snprintf(r->msg, r->len, "%s", err);
            return -1;
        }
        onnx_value *v = val_add(&r->b, gp->initializer[i]->name);
        if (!v)
            return set_oom(r);
        value_from_host(v, &r->inits[i]);
    }
    return 0;
}

/* Graph inputs that are not initializers take input_K.pb in order. */
static int set_add_inputs(set_run *r)
{
    const Onnx__GraphProto *gp = r->gp;
    char path[4096];
    int k = 0;
    for (size_t i = 0; i < gp->n_input; i++) {
        if (val_find(&r->b, gp->input[i]->name) >= 0)
            continue;
        snprintf(path, sizeof path, "%s/%s/input_%d.pb", r->dir, r->set, k);
        if (!file_exists(path)) {
            snprintf(r->msg, r->len, "%.900s: missing (graph input %s)", path, gp->input[i]->name);
            return -1;
        }
        if (set_read_tensor(r, &r->ins[k], path))
            return -1;
        onnx_value *v = val_add(&r->b, gp->input[i]->name);
        if (!v)
            return set_oom(r);
        value_from_host(v, &r->ins[k]);
        k++;
    }
    return 0;
}

/* Node i through its mapping: its inputs found, its outputs added. */
static int set_map_node(set_run *r, size_t i)
{
    const Onnx__NodeProto *nd = r->gp->node[i];
    char why[1024];
    onnx_value *in[16], outv[8];
    if (nd->n_input > 16 || nd->n_output > 8) {
        r->res = UNSUPPORTED;
        snprintf(r->msg, r->len, "%s: %zu inputs, %zu outputs", nd->op_type, nd->n_input,
                 nd->n_output);
        return -1;
    }
    for (size_t j = 0; j < nd->n_input; j++) {
        in[j] = NULL;
        if (!nd->input[j][0])
            continue;
        int vi = val_find(&r->b, nd->input[j]);
        if (vi < 0) {
            snprintf(r->msg, r->len, "node %zu (%s): input %s is not defined", i, nd->op_type,
                     nd->input[j]);
            return -1;
        }
        in[j] = &r->b.vals[vi];
    }
    memset(outv, 0, sizeof outv);
    for (size_t j = 0; j < nd->n_output; j++)
        outv[j].name = nd->output[j];
    onnx_map_ctx m = {.g = r->g,
                      .node = nd,
                      .opset = onnx_model_opset(r->model),
                      .in = in,
                      .n_in = (int)nd->n_input,
                      .out = outv,
                      .n_out = (int)nd->n_output,
                      .new_host = host_new,
                      .user = &r->b,
                      .why = why,
                      .why_len = sizeof why};
    onnx_map_status s = onnx_map_node(onnx_map_find(nd->op_type), &m);
    if (s != ONNX_MAP_OK) {
        r->res = s == ONNX_MAP_UNSUPPORTED ? UNSUPPORTED : FAIL;
        snprintf(r->msg, r->len, "%s: %s", nd->op_type, why);
        return -1;
    }
    /* in[] points into b.vals: add the outputs after the mapping ran */
    for (size_t j = 0; j < nd->n_output; j++) {
        if (!nd->output[j][0])
            continue;
        onnx_value *v = val_add(&r->b, nd->output[j]);
        if (!v)
            return set_oom(r);
        *v = outv[j];
    }
    return 0;
}

/* The graph outputs: checked against the expected ones, GPU tensors (in
 * gt[]) computed, host values left as they are. */
static int set_compute_outputs(set_run *r, glesc_tensor *gt[64])
{
    const Onnx__GraphProto *gp = r->gp;
    char why[1024];
    if (gp->n_output > 64) {
        r->res = UNSUPPORTED;
        snprintf(r->msg, r->len, "%zu graph outputs", gp->n_output);
        return -1;
    }
    int n_compute = 0;
    for (size_t o = 0; o < gp->n_output; o++) {
        int vi = val_find(&r->b, gp->output[o]->name);
        if (vi < 0) {
            snprintf(r->msg, r->len, "graph output %s is not defined", gp->output[o]->name);
            return -1;
        }
        onnx_value *v = &r->b.vals[vi];
        const onnx_tensor *want = &r->outs[o];
        bool shape_ok = v->rank == want->rank;
        for (int d = 0; shape_ok && d < v->rank; d++)
            shape_ok = v->dims[d] == want->dims[d];
        if (!shape_ok || is_int(v->type) != is_int(want->type)) {
            snprintf(r->msg, r->len, "output %s: %s rank %d, expected %s rank %d (or dims differ)",
                     v->name, onnx_type_name(v->type), v->rank, onnx_type_name(want->type),
                     want->rank);
            return -1;
        }
        if (v->host && !v->t)
            continue;
        onnx_map_ctx m = {.g = r->g, .why = why, .why_len = sizeof why};
        onnx_map_status s = onnx_value_gpu(&m, v, &gt[o]);
        if (s != ONNX_MAP_OK) {
            r->res = s == ONNX_MAP_UNSUPPORTED ? UNSUPPORTED : FAIL;
            snprintf(r->msg, r->len, "output %s: %s", v->name, why);
            return -1;
        }
        /* ONNX computes FLOAT16 results in f16: round glesc's f32 so */
        if (want->type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 &&
            glesc_tensor_dtype(gt[o]) == GLESC_DTYPE_F32 &&
            !(gt[o] = glesc_cast(r->g, gt[o], GLESC_DTYPE_F16))) {
            snprintf(r->msg, r->len, "glesc_cast: %s", glesc_context_errmsg(ctx));
            return -1;
        }
        if (glesc_tensor_op(gt[o]) != GLESC_OP_NONE)
            r->compute[n_compute++] = gt[o];
    }
    if (n_compute && glesc_graph_compute(r->g, r->compute, n_compute) != GLESC_OK) {
        snprintf(r->msg, r->len, "glesc_graph_compute: %s", glesc_context_errmsg(ctx));
        return -1;
    }
    return 0;
}

/* The outputs against the expected ones: PASS or FAIL in r->res, the worst
 * error in *worst and where it is in the message. */
static int set_compare_outputs(set_run *r, glesc_tensor *const gt[64], double *worst)
{
    const Onnx__GraphProto *gp = r->gp;
    double *got[64] = {0};
    r->res = PASS;
    double worst_ratio = 0;
    for (size_t o = 0; o < gp->n_output; o++) {
        const onnx_tensor *want = &r->outs[o];
        int vi = val_find(&r->b, gp->output[o]->name);
        onnx_value *v = &r->b.vals[vi];
        got[o] = malloc((size_t)(want->n ? want->n : 1) * sizeof(double));
        if (!got[o])
            return set_oom(r);
        if (!gt[o]) {
            for (int64_t i = 0; i < want->n; i++)
                got[o][i] = element(v->host, i);
        } else {
            float *f = malloc((size_t)(want->n ? want->n : 1) * sizeof *f);
            if (!f)
                return set_oom(r);
            if (glesc_tensor_read_f32(gt[o], f, (size_t)want->n) != GLESC_OK) {
                snprintf(r->msg, r->len, "glesc_tensor_read_f32(%s): %s", v->name,
                         glesc_context_errmsg(ctx));
                free(f);
                r->res = FAIL;
                break;
            }
            for (int64_t i = 0; i < want->n; i++)
                got[o][i] = f[i];
            free(f);
        }
        double ratio = 0, abs_err = 0;
        int64_t at = -1;
        bool ok = compare(got[o], want, &ratio, &abs_err, &at);
        if (ratio >= worst_ratio) {
            worst_ratio = ratio;
            *worst = abs_err;
            if (at >= 0)
                snprintf(r->msg, r->len, "worst |d| %.3g at %s[%" PRId64 "] (got %.9g, want %.9g)",
                         abs_err, v->name, at, got[o][at], element(want, at));
        }
        if (!ok)
            r->res = FAIL;
    }
    for (size_t o = 0; o < gp->n_output; o++)
        free(got[o]);
    return 0;
}

/* Runs one test_data_set of a model: result and a message. */
static int run_set(const Onnx__ModelProto *model, const char *dir, const char *set, double *worst,
                   char *msg, size_t len)
{
    const Onnx__GraphProto *gp = model->graph;
    set_run r = {
        .model = model, .gp = gp, .dir = dir, .set = set, .res = FAIL, .msg = msg, .len = len};
    r.inits = calloc(gp->n_initializer + 1, sizeof *r.inits);
    r.ins = calloc(gp->n_input + 1, sizeof *r.ins);
    r.outs = calloc(gp->n_output + 1, sizeof *r.outs);
    r.compute = calloc(gp->n_output + 1, sizeof *r.compute);
    glesc_tensor *gt[64] = {0};
    if (!r.inits || !r.ins || !r.outs || !r.compute) {
        snprintf(msg, len, "out of memory");
        goto done;
    }
    if (set_read_expected(&r) || !context(msg, len))
        goto done;
    r.g = glesc_graph_create(ctx);
    if (!r.g) {
        snprintf(msg, len, "glesc_graph_create: %s", glesc_context_errmsg(ctx));
        goto done;
    }
    if (set_add_initializers(&r) || set_add_inputs(&r))
        goto done;
    for (size_t i = 0; i < gp->n_node; i++)
        if (set_map_node(&r, i))
            goto done;
    if (set_compute_outputs(&r, gt))
        goto done;
    set_compare_outputs(&r, gt, worst);
done:
    glesc_graph_destroy(r.g);
    build_free(&r.b);
    for (size_t i = 0; r.inits && i < gp->n_initializer; i++)
        onnx_tensor_free(&r.inits[i]);
    for (size_t i = 0; r.ins && i < gp->n_input; i++)
        onnx_tensor_free(&r.ins[i]);
    for (size_t i = 0; r.outs && i < gp->n_output; i++)
        onnx_tensor_free(&r.outs[i]);
    free(r.inits);
    free(r.ins);
    free(r.outs);
    free(r.compute);
    return r.res;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entries of dir whose names start with prefix (sorted), NULL-ended. */
static char **list_dir(const char *dir, const char *prefix, int *n)
{
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char **names = NULL;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strncmp(e->d_name, prefix, strlen(prefix)))
            continue;
        if (*n + 1 >= cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, (size_t)cap * sizeof *nn);
            if (!nn)
                break;
            names = nn;
        }
        if (!(names[*n] = strdup(e->d_name)))
            break;
        (*n)++;
    }
    closedir(d);
    if (names)
        qsort(names, (size_t)*n, sizeof *names, by_name);
    return names;
}

static void free_list(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* One case directory: its result, counted under every op it holds (an
 * unsupported case only under the op that made it so). */
static int run_case(const char *dir, const char *name, bool verbose)
{
    char path[4096], msg[1200] = "", err[1024];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    Onnx__ModelProto *model = onnx_model_read(path, err, sizeof err);
    const char *ops[256];
    int n_ops = 0, res = PASS;
    const char *blame = NULL;
    double worst = 0;
    if (!model) {
        res = FAIL;
        snprintf(msg, sizeof msg, "%s", err);
        goto report;
    }
    for (size_t i = 0; i < model->graph->n_node; i++) {
        const char *op = model->graph->node[i]->op_type;
        bool seen = false;
        for (int j = 0; j < n_ops; j++)
            seen |= !strcmp(ops[j], op);
        if (!seen && n_ops < 256)
            ops[n_ops++] = op;
        if (!blame && !onnx_map_find(op)) {
            blame = op;
            res = UNSUPPORTED;
            snprintf(msg, sizeof msg, "op %s is not mapped", op);
        }
    }
    if (res == PASS) {
        int n_sets;
        char **sets = list_dir(dir, "test_data_set_", &n_sets);
        if (!n_sets) {
            res = FAIL;
            snprintf(msg, sizeof msg, "%s: no test_data_set_N directory", dir);
        }
        for (int s = 0; s < n_sets && res == PASS; s++) {
            double w = 0;
            res = run_set(model, dir, sets[s], &w, msg, sizeof msg);
            if (w > worst)
                worst = w;
        }
        free_list(sets, n_sets);
        if (res == UNSUPPORTED) /* blame the op the message starts with */
            for (int j = 0; j < n_ops; j++)
                if (!strncmp(msg, ops[j], strlen(ops[j])) && msg[strlen(ops[j])] == ':')
                    blame = ops[j];
    }
report:
    if (verbose || res != PASS)
        printf("%-11s %s: %s\n", result_name[res], name, msg);
    for (int j = 0; j < n_ops; j++) {
        if (res == UNSUPPORTED && blame && strcmp(blame, ops[j]))
            continue;
        op_stats *st = stats_for(ops[j]);
        st->cases++;
        *(res == PASS ? &st->passed : res == FAIL ? &st->failed : &st->unsupported) += 1;
    }
    onnx_model_free(model);
    return res;
}

static int by_op(const void *a, const void *b)
{
    return strcmp(((const op_stats *)a)->op, ((const op_stats *)b)->op);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: onnx-run [--filter TEXT] [--summary] [--verbose] [--skip-missing] DIR...\n"
               "  DIR: a case (holding model.onnx) or a directory of cases, e.g.\n"
               "       /usr/share/libonnx-testdata/data/node\n"
               "  --filter TEXT   only cases whose name contains TEXT\n"
               "  --summary       the per-op table as markdown\n"
               "  --verbose       a line for every case (default: failed and unsupported)\n"
               "  --skip-missing  exit 77 (skipped) when no DIR exists\n");
}

int main(int argc, char **argv)
{
    const char *filter = NULL;
    bool summary = false, verbose = false, skip_missing = false;
    const char *dirs[64];
    int n_dirs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--filter") && i + 1 < argc)
            filter = argv[++i];
        else if (!strcmp(argv[i], "--summary"))
            summary = true;
        else if (!strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v"))
            verbose = true;
        else if (!strcmp(argv[i], "--skip-missing"))
            skip_missing = true;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' || n_dirs == 64) {
            usage(stderr);
            return 2;
        } else
            dirs[n_dirs++] = argv[i];
    }
    if (!n_dirs) {
        usage(stderr);
        return 2;
    }
    int counts[3] = {0}, found = 0;
    for (int d = 0; d < n_dirs; d++) {
        char path[4096];
        if (!file_exists(dirs[d])) {
            fprintf(stderr, "onnx-run: %s does not exist\n", dirs[d]);
            continue;
        }
        found++;
        snprintf(path, sizeof path, "%s/model.onnx", dirs[d]);
        if (file_exists(path)) {
            const char *base = strrchr(dirs[d], '/');
            counts[run_case(dirs[d], base ? base + 1 : dirs[d], verbose)]++;
            continue;
        }
        int n;
        char **names = list_dir(dirs[d], "", &n);
        for (int i = 0; i < n; i++) {
            snprintf(path, sizeof path, "%s/%s/model.onnx", dirs[d], names[i]);
            if ((filter && !strstr(names[i], filter)) || !file_exists(path))
                continue;
            snprintf(path, sizeof path, "%s/%s", dirs[d], names[i]);
            counts[run_case(path, names[i], verbose)]++;
        }
        free_list(names, n);
    }
    if (!found) {
        if (skip_missing) {
            printf("SKIP: no test directory (install Debian's libonnx-testdata)\n");
            return 77;
        }
        return 2;
    }
    qsort(stats, (size_t)n_stats, sizeof *stats, by_op);
    if (summary) {
        printf("\n| op | mapped | cases | passed | failed | unsupported |\n"
               "|---|---|---:|---:|---:|---:|\n");
        for (int i = 0; i < n_stats; i++)
            if (stats[i].cases)
                printf("| %s | %s | %d | %d | %d | %d |\n", stats[i].op,
                       stats[i].mapped ? "yes" : "no", stats[i].cases, stats[i].passed,
                       stats[i].failed, stats[i].unsupported);
    } else {
        printf("\n%-24s %6s %6s %6s %6s %6s\n", "op", "mapped", "cases", "passed", "failed",
               "unsup");
        for (int i = 0; i < n_stats; i++)
            if (stats[i].mapped && stats[i].cases)
                printf("%-24s %6s %6d %6d %6d %6d\n", stats[i].op, "yes", stats[i].cases,
                       stats[i].passed, stats[i].failed, stats[i].unsupported);
        int unmapped = 0;
        for (int i = 0; i < n_stats; i++)
            unmapped += !stats[i].mapped;
        printf("(%d ops seen are not mapped; --summary lists them)\n", unmapped);
    }
    printf("\n%d cases: %d passed, %d failed, %d unsupported (tolerance f32 %g + %g|want|, "
           "f16 %g + %g|want|, bf16 %g + %g|want|, integers exact)\n",
           counts[PASS] + counts[FAIL] + counts[UNSUPPORTED], counts[PASS], counts[FAIL],
           counts[UNSUPPORTED], ATOL_F32, RTOL_F32, ATOL_F16, RTOL_F16, ATOL_BF16, RTOL_BF16);
    free(stats);
    glesc_context_destroy(ctx);
    return counts[FAIL] ? 1 : 0;
}
