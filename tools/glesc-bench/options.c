/*
 * options.c — glesc-bench's flags (see main.c for what it measures): the
 * weight types of --types, the shapes of --shapes (NxK, and with --gemm the
 * prefill's fused forms) and the rest of the command line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "glesc-bench/glesc-bench.h"

const glesc_dtype all_types[] = {
    GLESC_DTYPE_F32,  GLESC_DTYPE_F16,    GLESC_DTYPE_BF16,   GLESC_DTYPE_Q4_0,
    GLESC_DTYPE_Q4_1, GLESC_DTYPE_Q5_0,   GLESC_DTYPE_Q5_1,   GLESC_DTYPE_Q8_0,
    GLESC_DTYPE_Q2_K, GLESC_DTYPE_Q3_K,   GLESC_DTYPE_Q4_K,   GLESC_DTYPE_Q5_K,
    GLESC_DTYPE_Q6_K, GLESC_DTYPE_IQ4_NL, GLESC_DTYPE_IQ4_XS, GLESC_DTYPE_MXFP4,
};
_Static_assert(sizeof all_types / sizeof all_types[0] == N_TYPES, "N_TYPES counts all_types");

/* --types: a comma-separated list of names of all_types into sel[]; -1
 * after a message naming the first one that is not such a name. */
static int parse_types(const char *arg, bool sel[N_TYPES])
{
    for (const char *s = arg;;) {
        size_t n = strcspn(s, ",");
        size_t k = 0;
        while (k < N_TYPES && (strlen(glesc_dtype_name(all_types[k])) != n ||
                               strncmp(s, glesc_dtype_name(all_types[k]), n)))
            k++;
        if (k == N_TYPES) {
            fprintf(stderr, "glesc-bench: --types: '%.*s' is not one of", (int)n, s);
            for (size_t j = 0; j < N_TYPES; j++)
                fprintf(stderr, "%s %s", j ? "," : "", glesc_dtype_name(all_types[j]));
            fputc('\n', stderr);
            return -1;
        }
        sel[k] = true;
        if (!s[n])
            return 0;
        s += n + 1;
    }
}

/* A shape of --shapes: NxK, or with --gemm the forms of the prefill's
 * fused matmuls: N1+N2+...xK a grouped matmul (q/k/v: up to 4 weights of
 * one activation), N*2xK the gate/up pair silu(Wg h)·(Wu h) of N rows
 * each, a leading n: of h = rms_norm(x)·w (folded into a GEMV; a GEMM's
 * norm is a kernel of its own, timed with it), and a trailing
 * r: plus a residual, W x + r (the residual add the output projections
 * take as their epilogue). Parses the shape at s (up to a comma) into n[]
 * (its weights' rows, *nn of them), *K, *pair, *norm and *res; false if it
 * is none of these. */
bool parse_shape(const char *s, int n[MAX_MEMB], int *nn, int *K, bool *pair, bool *norm, bool *res)
{
    size_t len = strcspn(s, ",");
    *norm = s[0] == 'n';
    int used = *norm;
    *nn = 0;
    *pair = false;
    for (;;) {
        int v = 0, u = 0;
        if (*nn == MAX_MEMB || sscanf(s + used, "%d%n", &v, &u) != 1 || v <= 0)
            return false;
        n[(*nn)++] = v;
        used += u;
        if (s[used] == '+' && !*pair) {
            used++;
            continue;
        }
        if (s[used] == '*' && *nn == 1 && s[used + 1] == '2') {
            *pair = true;
            used += 2;
        }
        break;
    }
    int u = 0;
    if (sscanf(s + used, "x%d%n", K, &u) != 1 || *K <= 0)
        return false;
    used += u;
    *res = s[used] == 'r';
    return (size_t)(used + *res) == len;
}

/* --shapes: NxK,... with positive sizes (and the fused forms of
 * parse_shape with --gemm), K a multiple of every selected type's block; -1
 * after a message naming the first bad one. */
int check_shapes(const char *arg, const bool sel[N_TYPES], bool fused)
{
    for (const char *s = arg;;) {
        int N[MAX_MEMB], nn = 0, K = 0;
        bool pair, norm, res;
        size_t n = strcspn(s, ",");
        bool ok = parse_shape(s, N, &nn, &K, &pair, &norm, &res) &&
                  (fused || (nn == 1 && !pair && !norm && !res));
        for (size_t k = 0; ok && k < N_TYPES; k++)
            if (sel[k] && K % quant_gpu_block_elems(all_types[k])) {
                fprintf(stderr,
                        "glesc-bench: --shapes: K of '%.*s' is not a multiple of %s's "
                        "block of %d\n",
                        (int)n, s, glesc_dtype_name(all_types[k]),
                        quant_gpu_block_elems(all_types[k]));
                return -1;
            }
        if (!ok) {
            fprintf(stderr, "glesc-bench: --shapes: '%.*s' is not NxK with positive sizes%s\n",
                    (int)n, s, fused ? " (nor N+N+...xK, N*2xK, nNxK, NxKr...)" : "");
            return -1;
        }
        if (!s[n])
            return 0;
        s += n + 1;
    }
}

/* The command line into *o (the defaults: 20 iterations, every type, the
 * shapes 4096x4096 and 11008x4096, TinyLlama's heads for --attn, the GPU
 * warmed for 100 ms); 0, or 2 after a message. */
int parse_args(int argc, char **argv, options *o)
{
    *o = (options){
        .iters = 20, .warm_ms = 100, .heads = {32, 4, 64}, .shapes_arg = "4096x4096,11008x4096"};
    for (size_t k = 0; k < N_TYPES; k++)
        o->types[k] = true;
    for (int i = 1; i < argc; i++) {
        long v;
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            if (tool_parse_long("glesc-bench", "--iters", argv[++i], 1, 1000000, &v))
                return 2;
            o->iters = (int)v;
        } else if (!strcmp(argv[i], "--types") && i + 1 < argc) {
            memset(o->types, 0, sizeof o->types);
            if (parse_types(argv[++i], o->types))
                return 2;
        } else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) {
            o->shapes_arg = argv[++i];
        } else if (!strcmp(argv[i], "--warm-ms") && i + 1 < argc) {
            if (tool_parse_long("glesc-bench", "--warm-ms", argv[++i], 0, 10000, &v))
                return 2;
            o->warm_ms = (int)v;
        } else if (!strcmp(argv[i], "--copy-mib") && i + 1 < argc) {
            if (tool_parse_long("glesc-bench", "--copy-mib", argv[++i], 1, 1 << 20, &v))
                return 2;
            o->copy_mib = (uint64_t)v;
        } else if (!strcmp(argv[i], "--gemm") && i + 1 < argc) {
            if (tool_parse_long("glesc-bench", "--gemm", argv[++i], 1, 1 << 16, &v))
                return 2;
            o->gemm_m = (int)v;
        } else if (!strcmp(argv[i], "--attn") && i + 1 < argc) {
            char list[256];
            snprintf(list, sizeof list, "%s", argv[++i]);
            for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
                 t = strtok_r(NULL, ",", &save)) {
                if (o->n_attn == 8 || tool_parse_long("glesc-bench", "--attn", t, 1, 1 << 16, &v))
                    return 2;
                o->attn_n[o->n_attn++] = (int)v;
            }
            if (!o->n_attn)
                return 2;
        } else if (!strcmp(argv[i], "--attn-heads") && i + 1 < argc) {
            if (sscanf(argv[++i], "%d/%d/%d", &o->heads[0], &o->heads[1], &o->heads[2]) != 3 ||
                o->heads[0] < 1 || o->heads[1] < 1 || o->heads[0] % o->heads[1] ||
                o->heads[2] < 1 || o->heads[2] > 256) {
                fprintf(stderr,
                        "glesc-bench: --attn-heads: H/HKV/D, H a multiple of HKV, D at "
                        "most 256: '%s'\n",
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--portable")) {
            o->portable = true;
        } else {
            fprintf(stderr, "usage: glesc-bench [--iters N] [--types q4_0,...] "
                            "[--shapes NxK,...] [--copy-mib N] [--warm-ms N] [--gemm M] "
                            "[--attn N,...] [--attn-heads H/HKV/D] [--portable]\n");
            return 2;
        }
    }
    return 0;
}
