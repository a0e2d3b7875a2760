/*
 * test_gemm.c — the prefill's GEMM (src/kernels/gemm.c,
 * glsl/graph/gemm.glsl) against the CPU: every weight type, sizes that are
 * no multiple of any tile (N, M, and K for the plain types, whose last unit
 * is partial), every tile shape of gemm_config (forced with GLESC_GEMM on a
 * fresh context each, and the portable context's own), split K (forced
 * through the knob's slots; the parts a dispatch gets are checked), the
 * fused prologue and epilogues (a folded rms_norm, bias, activation and
 * residual, the gate/up pair, a grouped q/k/v of mixed types and row
 * counts, batched weights) with and without the split, weights split
 * into row chunks, and the multiply-add roofline GEMMs are set against.
 *
 * Plain products: the worst |got - Σ w·x| / Σ|w·x| over the outputs (the
 * scale of the rounding a float dot product picks up), below 1e-5, the
 * tolerance of test_quant_graph.c; fused graphs: NMSE against the CPU
 * evaluator below 1e-10. The worst error is logged per case; a non-finite
 * result is an infinite error.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"
#include "graph/graph.h"
#include "quant/quant.h"
#include "test_graph_util.h"
#include "test_util.h"

#define F32 GLESC_DTYPE_F32
#define F16 GLESC_DTYPE_F16
#define TOL 1e-5
#define NMSE_TOL 1e-10

static glesc_context *ctx;

/* Norms folded into the GEMMs (not by default: GLESC_FUSE_GEMM_NORM), so
 * the fused cases check the GEMM's folded norm. */
static void setup(void)
{
    unsetenv("GLESC_GEMM");
    setenv("GLESC_FUSE_GEMM_NORM", "1", 1);
    ctx = test_context(NULL);
}

static void teardown(void)
{
    glesc_context_destroy(ctx);
    unsetenv("GLESC_GEMM");
    unsetenv("GLESC_FUSE_GEMM_NORM");
}

TestSuite(gemm, .init = setup, .fini = teardown);

static const glesc_dtype all_types[] = {
    GLESC_DTYPE_F32,    GLESC_DTYPE_F16,   GLESC_DTYPE_BF16, GLESC_DTYPE_Q4_0, GLESC_DTYPE_Q4_1,
    GLESC_DTYPE_Q5_0,   GLESC_DTYPE_Q5_1,  GLESC_DTYPE_Q8_0, GLESC_DTYPE_Q8_1, GLESC_DTYPE_Q2_K,
    GLESC_DTYPE_Q3_K,   GLESC_DTYPE_Q4_K,  GLESC_DTYPE_Q5_K, GLESC_DTYPE_Q6_K, GLESC_DTYPE_IQ4_NL,
    GLESC_DTYPE_IQ4_XS, GLESC_DTYPE_MXFP4,
};

/* The tile shapes of gemm_config's lists (llvmpipe's own is the default
 * there; on a GPU the default is the first). */
static const char *const tiles[] = {
    "bn=128,bm=128,tn=8,tm=8",      /* 256 invocations, 32 KiB */
    "bn=128,bm=64,tn=8,tm=4",       /* at most 64 columns */
    "bn=64,bm=64,tn=8,tm=4",        /* the portable 128 invocations, 16 KiB */
    "bn=64,bm=32,tn=4,tm=4",        /* 128 invocations, 12 KiB */
    "bn=32,bm=32,tn=4,tm=4",        /* 64 invocations, 8 KiB */
    "bn=64,bm=64,tn=8,tm=8",        /* llvmpipe's */
    "bn=64,bm=64,tn=8,tm=4,pad=1",  /* padded rows instead of the swizzle */
    "bn=64,bm=64,tn=8,tm=4,half=0", /* plain weights' whole units */
    "bn=64,bm=64,tn=8,tm=4,late=0", /* each step's weights decoded as soon as loaded */
    "bn=64,bm=16,tn=4,tm=2",        /* two columns an invocation, one vec4 of x each */
    "bn=32,bm=16,tn=4,tm=2",        /* the same in 64 invocations */
    "bn=128,bm=32,tn=8,tm=2",       /* 256 invocations, two output rounds */
    "bn=64,bm=16,tn=4,tm=2,pre=0",  /* no loads in flight during a step */
    "bn=64,bm=32,tn=4,tm=4,pre=0,late=0",
    /* no loads in flight, x fetched before the weights' decode (Mali's) */
    "bn=64,bm=16,tn=4,tm=2,pre=0,xf=1",
};

/* A fresh context whose GEMMs take the tile (and split slots) of knob
 * (NULL: the device's own); programs and plans are per context, and the
 * knob is read when a kernel is generated. */
static glesc_context *context_with(const char *knob, const glesc_context_options *o)
{
    if (knob)
        setenv("GLESC_GEMM", knob, 1);
    else
        unsetenv("GLESC_GEMM");
    glesc_context *c = NULL;
    glesc_context_options opts = o ? *o : (glesc_context_options){0};
    opts.cache_dir = "off";
    cr_assert_eq(glesc_context_create(&opts, &c), GLESC_OK, "%s", glesc_last_errmsg());
    return c;
}

static float frand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* A K x N weight of type t on context c, random (varied block scales), and
 * its CPU dequantization (free it). */
static glesc_tensor *make_weight(glesc_context *c, glesc_dtype t, int64_t k, int64_t n,
                                 uint32_t seed, float **deq)
{
    int64_t ne = k * n;
    float *src = malloc((size_t)ne * sizeof *src);
    for (int64_t i = 0; i < ne; i++)
        src[i] = frand(&seed) * (1.0f + (float)((i / 32) % 5));
    size_t fb = (size_t)glesc_dtype_row_bytes(t, k) * (size_t)n;
    void *file = malloc(fb);
    *deq = malloc((size_t)ne * sizeof **deq);
    cr_assert_eq(quant_quantize(t, src, file, ne), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(quant_dequantize(t, file, *deq, ne), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_tensor *w = glesc_weight_new(c, t, 2, (int64_t[]){k, n});
    cr_assert_not_null(w, "%s", glesc_context_errmsg(c));
    cr_assert_eq(glesc_tensor_write(w, file, fb), GLESC_OK, "%s", glesc_context_errmsg(c));
    free(src);
    free(file);
    return w;
}

/* Worst |got - Σ w·x| / Σ|w·x| over the [n, m] result of W [k, n] × X [k, m];
 * infinite where a result is not finite (a NaN compares false, so it must
 * not slip past the maximum). */
static double worst_error(const float *deq, const float *x, const float *got, int64_t k, int64_t n,
                          int64_t m)
{
    double worst = 0;
    for (int64_t j = 0; j < m; j++)
        for (int64_t i = 0; i < n; i++) {
            double s = 0, a = 0;
            for (int64_t l = 0; l < k; l++) {
                double p = (double)deq[i * k + l] * (double)x[j * k + l];
                s += p;
                a += fabs(p);
            }
            double e = fabs((double)got[j * n + i] - s) / (a > 0 ? a : 1);
            if (!isfinite(got[j * n + i]))
                e = INFINITY;
            worst = e > worst ? e : worst;
        }
    return worst;
}

/* W [k, n] of type t × X [k, m] on context c, checked against the CPU: a
 * GEMM whose header names `tile` (NULL: any). Returns the worst error. */
static double product(glesc_context *c, glesc_dtype t, int64_t k, int64_t n, int64_t m,
                      const char *tile)
{
    float *deq;
    glesc_tensor *w = make_weight(c, t, k, n, (uint32_t)(k * 7 + n * 3 + m), &deq);
    glesc_graph *g = glesc_graph_create(c);
    glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){k, m}, (uint32_t)m, -1, 1);
    glesc_tensor *y = glesc_matmul(g, w, x);
    cr_assert_not_null(y, "%s", glesc_context_errmsg(c));
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(c));
    const char *glsl = glesc_graph_last_glsl(g);
    cr_assert(glsl && strstr(glsl, "// GEMM (glsl/graph/gemm.glsl)"), "%s m = %lld ran no GEMM",
              glesc_dtype_name(t), (long long)m);
    if (tile)
        cr_assert(strstr(glsl, tile), "%s: not the tile '%s'", glesc_dtype_name(t), tile);
    float *xv = tg_read(x), *got = tg_read(y);
    double e = worst_error(deq, xv, got, k, n, m);
    cr_log_info("%-7s W [%lld, %lld] x X [%lld, %lld]: worst error %.3g of sum|w*x|",
                glesc_dtype_name(t), (long long)k, (long long)n, (long long)k, (long long)m, e);
    cr_expect(e < TOL, "%s: W [%lld, %lld], m = %lld: error %.3g above %g", glesc_dtype_name(t),
              (long long)k, (long long)n, (long long)m, e, TOL);
    free(xv);
    free(got);
    free(deq);
    glesc_graph_destroy(g);
    glesc_weight_free(w);
    return e;
}

/* K of two or three units of type t's blocks; the plain types' is no
 * multiple of 32 (a partial last unit, read through the element loader). */
static int64_t k_of(glesc_dtype t, int units)
{
    int qk = quant_gpu_block_elems(t);
    if (qk < 32)
        return 32 * units + 12;
    return qk >= 32 * units ? qk : 32 * units;
}

Test(gemm, every_type_odd_sizes)
{
    double worst = 0;
    for (size_t i = 0; i < CORE_ARRAY_LEN(all_types); i++) {
        glesc_dtype t = all_types[i];
        double e = product(ctx, all_types[i], k_of(t, 3), 130, 77, NULL);
        e = fmax(e, product(ctx, all_types[i], k_of(t, 2), 67, 9, NULL));
        worst = fmax(worst, e);
    }
    cr_log_info("every type, the device's tile: worst %.3g", worst);
}

/* The written-out step and x fetch (loop=0: the GPUs' form; llvmpipe's
 * own is the loops, which its LLVM compiles in less time) on a small tile:
 * a plain type whose K is no multiple of 32 (x masked along k) and two
 * block types (whole units, GEMM_KFULL); K of 16 units split in parts
 * (slots forced), of 2 units one part. */
Test(gemm, written_out_steps)
{
    static const glesc_dtype types[] = {GLESC_DTYPE_F16, GLESC_DTYPE_Q4_0, GLESC_DTYPE_Q4_K};
    glesc_context *c = context_with("bn=32,bm=32,tn=4,tm=4,loop=0,slots=1000000", NULL);
    for (size_t i = 0; i < CORE_ARRAY_LEN(types); i++) {
        product(c, types[i], k_of(types[i], 16), 37, 41, "steps and x fetch written out");
        product(c, types[i], k_of(types[i], 2), 5, 9, "steps and x fetch written out");
    }
    glesc_context_destroy(c);
}

/* The late decode (the default): the block types' words loaded before a
 * step's multiply-adds, decoded after them (gemm_wraw_0, gemm_wdec_0), K
 * of 16 units in two parts and of 2 in one; every_tile_shape's late=0
 * tile checks the decode at once. */
Test(gemm, late_decode)
{
    static const glesc_dtype types[] = {GLESC_DTYPE_Q4_0, GLESC_DTYPE_Q4_K, GLESC_DTYPE_Q6_K,
                                        GLESC_DTYPE_Q8_0};
    glesc_context *c = context_with("slots=1000000", NULL);
    for (size_t i = 0; i < CORE_ARRAY_LEN(types); i++) {
        product(c, types[i], k_of(types[i], 16), 67, 41, "gemm_wdec_0(");
        product(c, types[i], k_of(types[i], 2), 5, 9, "gemm_wdec_0(");
    }
    glesc_context_destroy(c);
    /* two invocations a row: each decodes only its run where the type
     * decodes by halves (q4_0, q4_k, q8_0: gemm_wdech_0) */
    c = context_with("bn=64,bm=64,tn=8,tm=4,slots=1000000", NULL);
    for (size_t i = 0; i < CORE_ARRAY_LEN(types); i++) {
        const char *want = types[i] == GLESC_DTYPE_Q6_K ? "gemm_wdec_0(" : "gemm_wdech_0(";
        product(c, types[i], k_of(types[i], 16), 67, 41, want);
        product(c, types[i], k_of(types[i], 2), 5, 9, want);
    }
    glesc_context_destroy(c);
    unsetenv("GLESC_GEMM");
}

/* Every tile shape, each on a fresh context with split K forced: the
 * plain and most used block types, rows and columns no multiple of any
 * tile, K of 16 units and more (two parts) and of 2 (one part); the plain
 * types also with K of whole units (their fast units, read by halves
 * where two invocations stage a row). */
Test(gemm, every_tile_shape)
{
    static const glesc_dtype types[] = {GLESC_DTYPE_F16, GLESC_DTYPE_Q4_K, GLESC_DTYPE_F32,
                                        GLESC_DTYPE_Q4_0, GLESC_DTYPE_Q6_K};
    for (size_t s = 0; s < CORE_ARRAY_LEN(tiles); s++) {
        char knob[96];
        snprintf(knob, sizeof knob, "%s,slots=1000000", tiles[s]);
        glesc_context *c = context_with(knob, NULL);
        int bn, bm, tn, tm;
        cr_assert_eq(sscanf(tiles[s], "bn=%d,bm=%d,tn=%d,tm=%d", &bn, &bm, &tn, &tm), 4);
        char want[96];
        snprintf(want, sizeof want, "tiles of %d weight rows by %d columns, %d x %d", bn, bm, tn,
                 tm);
        cr_log_info("GLESC_GEMM=%s", tiles[s]);
        /* the 256-invocation tiles take long to compile on llvmpipe: two
         * types there (a plain one and a k-quant) */
        size_t nt = bn * bm >= 128 * 64 ? 2 : CORE_ARRAY_LEN(types);
        for (size_t i = 0; i < nt; i++) {
            product(c, types[i], k_of(types[i], 16), 2 * bn + 3, bm + 5, want);
            product(c, types[i], k_of(types[i], 2), 5, 9, want); /* one partial tile */
            /* plain rows of whole units */
            if (quant_gpu_block_elems(types[i]) < 32)
                product(c, types[i], 32 * 16, 2 * bn + 3, bm + 5, want);
        }
        glesc_context_destroy(c);
    }
    unsetenv("GLESC_GEMM");
}

/* What GLES guarantees: no subgroups, 128 invocations, 16 KiB of shared
 * memory; every type takes the 64 x 64 tile there. */
Test(gemm, portable_context_every_type)
{
    glesc_context_options o = {
        .no_subgroups = true, .max_compute_invocations = 128, .max_compute_shared_memory = 16384};
    glesc_context *c = context_with(NULL, &o);
    for (size_t i = 0; i < CORE_ARRAY_LEN(all_types); i++) {
        glesc_dtype t = all_types[i];
        const char *want = glesc_context_caps(c)->software
                               ? NULL /* llvmpipe's own tile fits too */
                               : "tiles of 64 weight rows by 64 columns, 8 x 4";
        product(c, t, k_of(t, 3), 70, 100, want);
    }
    glesc_context_destroy(c);
}

/* Does the dispatch's uniforms hold the n values of seq in a row? */
static bool has_uniforms(const kb_dispatch *d, const uint32_t *seq, int n)
{
    for (int i = 0; i + n <= d->n_param; i++) {
        int j = 0;
        while (j < n && d->param[i + j].type == GL_PARAM_UINT && d->param[i + j].v.u == seq[j])
            j++;
        if (j == n)
            return true;
    }
    return false;
}

/* The parts of K each dispatch of matmul y's kernel is cut into (its z
 * groups over the batches), from the bound kernel as the executor gets it
 * (nothing is computed); with seq, its uniforms must hold seq's n values in
 * a row (ksplit, kper, kdp); with scratch, the scratch bytes it asks for. */
static int64_t parts_of_seq(glesc_graph *g, glesc_tensor *y, int64_t batches, const uint32_t *seq,
                            int n, uint64_t *scratch)
{
    glesc_context *c = glesc_graph_context(g);
    graph_order_t ord = {0};
    cr_assert_eq(graph_order(g, &y, 1, &ord), GLESC_OK);
    for (int i = 0; i < ord.n; i++) /* memory to bind (contents unused) */
        if (ord.nodes[i]->owner == ord.nodes[i] && !ord.nodes[i]->st.n_chunks)
            cr_assert_eq(graph_storage_alloc(ord.nodes[i], GL_USAGE_ACTIVATIONS, false), GLESC_OK);
    kernels_kernel *gks = calloc((size_t)ord.n, sizeof *gks);
    int nk = 0, max_bind = compute_max_bindings(c);
    kernels_fuse(ord.nodes, ord.n, true, max_bind, NULL, gks, &nk);
    glesc_graph_options o = {.gemv_max_m = 8};
    int64_t parts = -1;
    for (int i = 0; i < nk; i++) {
        if (!gks[i].anchor || gks[i].anchor->op != GLESC_OP_MATMUL)
            continue;
        kb b;
        cr_assert_eq(compute_kernel_bind(c, &gks[i], max_bind, &o, &b), GLESC_OK, "%s",
                     glesc_context_errmsg(c));
        cr_assert_geq(b.n_disp, 1);
        parts = b.disp[0].groups[2] / batches;
        cr_assert_eq(b.disp[0].groups[2] % batches, 0);
        cr_assert(parts == 1 || b.disp[0].scratch_bytes > 0, "split without scratch");
        if (scratch)
            *scratch = b.disp[0].scratch_bytes;
        if (seq)
            cr_expect(has_uniforms(&b.disp[0], seq, n),
                      "the uniforms ksplit, kper, kdp are not %u, %u, %u", seq[0],
                      n > 1 ? seq[1] : 0, n > 2 ? seq[2] : 0);
        kb_free(&b);
    }
    free(gks);
    graph_order_free(&ord);
    return parts;
}

static int64_t parts_of(glesc_graph *g, glesc_tensor *y, int64_t batches)
{
    return parts_of_seq(g, y, batches, NULL, 0, NULL);
}

/* Split K: a dispatch of few tiles (against the slots, here forced high)
 * cuts K into parts of at least 8 units, at most 16 parts, none empty. */
Test(gemm, split_k_parts_follow_the_sizes)
{
    glesc_context *c = context_with("bn=64,bm=64,tn=8,tm=4,slots=1000000", NULL);
    static const struct {
        int64_t k, n, m, parts;
    } cases[] = {
        {256, 64, 64, 1},   /* 8 units: too few to split */
        {512, 64, 64, 2},   /* 16 units: two parts of 8 */
        {1024, 64, 64, 4},  /* 32 units */
        {8192, 64, 64, 16}, /* 256 units: at most 16 parts */
        {1000, 130, 20, 4}, /* 32 units, the last partial: 4 parts of 8 */
    };
    for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++) {
        glesc_graph *g = glesc_graph_create(c);
        glesc_tensor *w = tg_input(g, F32, 2, (int64_t[]){cases[i].k, cases[i].n}, 1, -1, 1);
        glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){cases[i].k, cases[i].m}, 2, -1, 1);
        glesc_tensor *y = glesc_matmul(g, w, x);
        tg_check(g, &y, 1, NMSE_TOL, "split K"); /* and y has memory to bind */
        int64_t p = parts_of(g, y, 1);
        cr_log_info("K %lld, %lld x %lld outputs: %lld parts", (long long)cases[i].k,
                    (long long)cases[i].n, (long long)cases[i].m, (long long)p);
        cr_expect_eq(p, cases[i].parts, "K %lld: %lld parts, want %lld", (long long)cases[i].k,
                     (long long)p, (long long)cases[i].parts);
        glesc_graph_destroy(g);
    }
    glesc_context_destroy(c);
    unsetenv("GLESC_GEMM");
    /* the device's own slots: a product of many tiles is not split */
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *w = tg_input(g, F32, 2, (int64_t[]){512, 8192}, 1, -1, 1);
    glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){512, 512}, 2, -1, 1);
    cr_expect_eq(parts_of(g, glesc_matmul(g, w, x), 1), 1);
    glesc_graph_destroy(g);
}

/* With 128 workgroups at once (a large GPU), TinyLlama's prefill shapes:
 * the parts that take the fewest waves of the 128 x 128 tiles. */
Test(gemm, split_k_fills_the_last_wave)
{
    glesc_context *c = context_with("bn=128,bm=128,tn=8,tm=8,slots=128", NULL);
    static const struct {
        int64_t k, n, parts;
    } cases[] = {
        {2048, 2560, 3}, /* q, k, v: 80 tiles; 240 take 2 waves, 320 3 */
        {2048, 2048, 2}, /* 64 tiles: 128 in one wave */
        {5632, 2048, 2}, /* the same with a longer K */
        {2048, 4096, 1}, /* 128 tiles: one wave already */
        {2048, 8192, 1}, /* 256 tiles */
        /* the gate/up pair's rows, 352 tiles: 256 whole in two waves, the
         * last 96 in four parts (a third wave of quarters) */
        {2048, 11264, 4},
    };
    for (size_t i = 0; i < CORE_ARRAY_LEN(cases); i++) {
        glesc_graph *g = glesc_graph_create(c);
        glesc_tensor *w =
            glesc_tensor_new(g, F32, 2, (int64_t[]){cases[i].k, cases[i].n}); /* not read */
        glesc_tensor *x = glesc_tensor_new(g, F32, 2, (int64_t[]){cases[i].k, 512});
        int64_t p = parts_of(g, glesc_matmul(g, w, x), 1);
        cr_log_info("K %lld, N %lld, M 512: %lld parts", (long long)cases[i].k,
                    (long long)cases[i].n, (long long)p);
        cr_expect_eq(p, cases[i].parts, "N %lld: %lld parts, want %lld", (long long)cases[i].n,
                     (long long)p, (long long)cases[i].parts);
        glesc_graph_destroy(g);
    }
    glesc_context_destroy(c);
    unsetenv("GLESC_GEMM");
}

/* The whole waves' tiles taken whole, the last wave's split: 8 tiles of
 * 64 x 64 with 6 workgroups at once and K of 64 units, so 6 tiles whole
 * (part 0 takes all of K, the other parts return) and 2 in three parts
 * (1 + 1/3 waves; K in three parts everywhere: 4/3 waves, each part
 * dearer), equal to the CPU for a plain and two block types. */
Test(gemm, split_only_the_last_wave)
{
    static const glesc_dtype types[] = {GLESC_DTYPE_F16, GLESC_DTYPE_Q4_0, GLESC_DTYPE_Q4_K};
    glesc_context *c = context_with("bn=64,bm=64,tn=8,tm=8,slots=6", NULL);
    glesc_graph *g = glesc_graph_create(c);
    glesc_tensor *w = glesc_tensor_new(g, F32, 2, (int64_t[]){2048, 200}); /* not read */
    glesc_tensor *x = glesc_tensor_new(g, F32, 2, (int64_t[]){2048, 70});
    /* 3 parts of 22 units; 6 tiles whole; scratch: the counters and the 2
     * split tiles' 3 parts of 64 x 64 sums and 64 squares */
    uint64_t scratch = 0;
    cr_expect_eq(
        parts_of_seq(g, glesc_matmul(g, w, x), 1, (const uint32_t[]){3, 22, 6}, 3, &scratch), 3);
    cr_expect_eq(scratch, 4 * (KB_SCRATCH_COUNTERS + 2 * 3 * (64 * 64 + 64)),
                 "scratch of %llu bytes", (unsigned long long)scratch);
    glesc_graph_destroy(g);
    for (size_t i = 0; i < CORE_ARRAY_LEN(types); i++)
        product(c, types[i], 2048, 200, 70, "tiles of 64 weight rows by 64 columns, 8 x 8");
    glesc_context_destroy(c);
    unsetenv("GLESC_GEMM");
}

/* ---- fused prologue and epilogues, with and without the split ---- */

typedef glesc_tensor *(*build_fn)(glesc_graph *g, glesc_tensor **extra, int *n_extra);

static int64_t mm_m;
static glesc_tensor *weights[8]; /* a case's, freed after its graph */
static int n_weights;

static glesc_tensor *qweight(glesc_graph *g, glesc_dtype t, int ndim, const int64_t *shape,
                             uint32_t seed)
{
    glesc_tensor *w = glesc_weight_new(glesc_graph_context(g), t, ndim, shape);
    cr_assert_not_null(w, "%s", glesc_context_errmsg(glesc_graph_context(g)));
    tg_fill(w, seed, -1, 1); /* quantized by glesc_tensor_write_f32 */
    cr_assert_lt(n_weights, (int)CORE_ARRAY_LEN(weights));
    weights[n_weights++] = w;
    return w;
}

static void free_weights(void)
{
    while (n_weights)
        glesc_weight_free(weights[--n_weights]);
}

/* residual + gelu(W·x + bias): the epilogue */
static glesc_tensor *bias_gelu_res(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *w = qweight(g, GLESC_DTYPE_Q4_0, 2, (int64_t[]){544, 140}, 1);
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){544, mm_m}, 2, -1, 1);
    glesc_tensor *bias = tg_input(g, F32, 1, (int64_t[]){140}, 3, -1, 1);
    glesc_tensor *res = tg_input(g, F32, 2, (int64_t[]){140, mm_m}, 4, -1, 1);
    return glesc_add(g, res, glesc_gelu(g, glesc_add(g, glesc_matmul(g, w, a), bias)));
}

/* silu(Wg·h)·(Wu·h), h = rms_norm(x + r)·w: the pair with a folded norm and
 * its residual prologue */
static glesc_tensor *norm_gate_up(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){512, mm_m}, 5, -1, 1);
    glesc_tensor *r = tg_input(g, F32, 2, (int64_t[]){512, mm_m}, 6, -1, 1);
    glesc_tensor *nw = tg_input(g, F32, 1, (int64_t[]){512}, 7, 0.5f, 1.5f);
    glesc_tensor *wg = qweight(g, GLESC_DTYPE_Q4_K, 2, (int64_t[]){512, 100}, 8);
    glesc_tensor *wu = qweight(g, GLESC_DTYPE_Q4_K, 2, (int64_t[]){512, 100}, 9);
    glesc_tensor *h = glesc_mul(g, glesc_rms_norm(g, glesc_add(g, a, r), 1e-5f), nw);
    return glesc_mul(g, glesc_silu(g, glesc_matmul(g, wg, h)), glesc_matmul(g, wu, h));
}

/* silu(Wg·x)·(Wu·x) of f16 weights: the pair of plain weights (read by
 * half units where two invocations stage a row) */
static glesc_tensor *gate_up_f16(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){256, mm_m}, 18, -1, 1);
    glesc_tensor *wg = qweight(g, GLESC_DTYPE_F16, 2, (int64_t[]){256, 90}, 19);
    glesc_tensor *wu = qweight(g, GLESC_DTYPE_F16, 2, (int64_t[]){256, 90}, 20);
    return glesc_mul(g, glesc_silu(g, glesc_matmul(g, wg, a)), glesc_matmul(g, wu, a));
}

/* q, k, v of rms_norm(x)·w: a grouped matmul of mixed types, row counts and
 * epilogues (Q4_K_M's mix: q6_k v) */
static glesc_tensor *norm_qkv(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *a = tg_input(g, F32, 2, (int64_t[]){512, mm_m}, 10, -1, 1);
    glesc_tensor *nw = tg_input(g, F32, 1, (int64_t[]){512}, 11, 0.5f, 1.5f);
    glesc_tensor *h = glesc_mul(g, glesc_rms_norm(g, a, 1e-5f), nw);
    glesc_tensor *wq = qweight(g, GLESC_DTYPE_Q4_K, 2, (int64_t[]){512, 160}, 12);
    glesc_tensor *wk = qweight(g, GLESC_DTYPE_F16, 2, (int64_t[]){512, 40}, 13);
    glesc_tensor *wv = qweight(g, GLESC_DTYPE_Q6_K, 2, (int64_t[]){512, 72}, 14);
    glesc_tensor *bq = tg_input(g, F32, 1, (int64_t[]){160}, 15, -1, 1);
    x[0] = glesc_matmul(g, wk, h);
    x[1] = glesc_silu(g, glesc_matmul(g, wv, h));
    *n = 2;
    return glesc_add(g, glesc_matmul(g, wq, h), bq);
}

/* 3-D weights broadcast over X's batches (W batch b / 2) */
static glesc_tensor *batched(glesc_graph *g, glesc_tensor **x, int *n)
{
    glesc_tensor *w = qweight(g, GLESC_DTYPE_Q8_0, 3, (int64_t[]){512, 70, 2}, 16);
    glesc_tensor *a = tg_input(g, F32, 3, (int64_t[]){512, mm_m, 4}, 17, -1, 1);
    return glesc_matmul(g, w, a);
}

/* The graph with fusion on and off on context c: both equal the CPU
 * evaluator; fused, the matmuls are one kernel. */
static void fused_case(glesc_context *c, const char *what, build_fn build)
{
    for (int pass = 0; pass < 2; pass++) {
        glesc_graph *g = glesc_graph_create(c);
        tg_fusion(g, pass ? 1 : -1);
        glesc_tensor *outs[3];
        int n_extra = 0;
        outs[0] = build(g, outs + 1, &n_extra);
        cr_assert_not_null(outs[0], "%s: %s", what, glesc_context_errmsg(c));
        char label[160];
        snprintf(label, sizeof label, "%s, m = %lld, fusion %s", what, (long long)mm_m,
                 pass ? "on" : "off");
        double e = tg_check(g, outs, 1 + n_extra, NMSE_TOL, label);
        glesc_compute_stats s;
        glesc_graph_stats(g, &s);
        cr_log_info("%s: %d kernels, NMSE %.3g", label, s.kernels, e);
        if (pass)
            cr_expect_eq(s.kernels, 1, "%s: %d kernels", label, s.kernels);
        glesc_graph_destroy(g);
        free_weights();
    }
}

static void fused_cases(glesc_context *c)
{
    static const int64_t ms[] = {9, 70, 200};
    for (size_t i = 0; i < CORE_ARRAY_LEN(ms); i++) {
        mm_m = ms[i];
        fused_case(c, "res + gelu(W x + b)", bias_gelu_res);
        fused_case(c, "silu(Wg h) (Wu h), h = rms_norm(x + r) w", norm_gate_up);
        fused_case(c, "silu(Wg x) (Wu x), f16", gate_up_f16);
        fused_case(c, "q, k, v of rms_norm(x) w", norm_qkv);
        fused_case(c, "batched W", batched);
    }
}

Test(gemm, fused_prologue_and_epilogues)
{
    fused_cases(ctx);
}

/* The same on a tile whose rows two invocations stage (the GPUs' shapes:
 * plain weights by half units, the pair's and the group's too) with the
 * padded rows, split forced. */
Test(gemm, fused_two_stagers_a_row)
{
    glesc_context *c = context_with("bn=64,bm=64,tn=8,tm=4,pad=1,slots=1000000", NULL);
    fused_cases(c);
    glesc_context_destroy(c);
    unsetenv("GLESC_GEMM");
}

/* The same on the 4 x 2 register tile (64 x 16: two accumulators a
 * column, the results leaving two columns a vec4), split forced. */
Test(gemm, fused_four_by_two)
{
    glesc_context *c = context_with("bn=64,bm=16,tn=4,tm=2,slots=1000000", NULL);
    fused_cases(c);
    glesc_context_destroy(c);
    unsetenv("GLESC_GEMM");
}

Test(gemm, fused_with_split_k)
{
    /* the split forced (the slots far above any tile count) on the
     * device's tile */
    glesc_context *c = context_with("slots=1000000", NULL);
    fused_cases(c);
    glesc_context_destroy(c);
    unsetenv("GLESC_GEMM");
}

/* Weights split into row chunks (a 64 KiB storage-block limit): one
 * dispatch per chunk of a grouped q/v, K split in each (small tiles, so the
 * parts' sums fit a 64 KiB block too). */
Test(gemm, row_chunks_with_split_k)
{
    glesc_context_options o = {.max_storage_block_size = 64 << 10};
    glesc_context *c = context_with("bn=32,bm=32,tn=4,tm=4,slots=1000000", &o);
    glesc_graph *g = glesc_graph_create(c);
    /* q4_k rows of 576 bytes: 113 per chunk, 3 chunks; q6_k 2 */
    glesc_tensor *wq = qweight(g, GLESC_DTYPE_Q4_K, 2, (int64_t[]){1024, 300}, 20);
    glesc_tensor *wv = qweight(g, GLESC_DTYPE_Q6_K, 2, (int64_t[]){1024, 150}, 21);
    glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){1024, 12}, 22, -1, 1);
    glesc_tensor *outs[2] = {glesc_matmul(g, wq, x), glesc_matmul(g, wv, x)};
    double e = tg_check(g, outs, 2, NMSE_TOL, "row chunks");
    glesc_compute_stats s;
    glesc_graph_stats(g, &s);
    int64_t parts = parts_of(g, outs[0], 1);
    cr_log_info("chunks %d and %d: %d dispatches, K in %lld parts, NMSE %.3g", wq->st.n_chunks,
                wv->st.n_chunks, s.dispatches, (long long)parts, e);
    cr_expect_eq(wq->st.n_chunks, 3);
    cr_expect_eq(wv->st.n_chunks, 2);
    cr_expect_eq(s.kernels, 1);
    cr_expect_eq(s.dispatches, 3);
    cr_expect_gt(parts, 1, "no split K");
    glesc_graph_destroy(g);
    free_weights();
    glesc_context_destroy(c);
    unsetenv("GLESC_GEMM");
}

/* A tile the device or gemm.glsl cannot hold is a clear error. */
Test(gemm, a_tile_that_does_not_fit_is_refused)
{
    glesc_context *c =
        context_with("bn=64,bm=64,tn=4,tm=4", NULL); /* 256 invocations for 64 rows */
    glesc_graph *g = glesc_graph_create(c);
    glesc_tensor *w = tg_input(g, F32, 2, (int64_t[]){64, 64}, 1, -1, 1);
    glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){64, 64}, 2, -1, 1);
    glesc_tensor *y = glesc_matmul(g, w, x);
    cr_assert_neq(glesc_graph_compute(g, &y, 1), GLESC_OK);
    cr_log_info("%s", glesc_context_errmsg(c));
    cr_expect(strstr(glesc_context_errmsg(c), "GLESC_GEMM=bn=64,bm=64,tn=4,tm=4"), "%s",
              glesc_context_errmsg(c));
    glesc_graph_destroy(g);
    glesc_context_destroy(c);
    unsetenv("GLESC_GEMM");
}

/* The multiply-add peak the GEMM is set against (glesc-bench --gemm):
 * positive for the chain counts glesc-bench takes; a bad chain count, or
 * f16 chains without a float16_t extension (llvmpipe has none), refused. */
Test(gemm, fma_roofline_chains_and_f16)
{
    for (int chains = 8; chains <= 32; chains *= 2) {
        double gflops = 0;
        cr_assert_eq(compute_roofline_fma(ctx, 1, chains, false, &gflops), GLESC_OK, "%s",
                     glesc_context_errmsg(ctx));
        cr_log_info("fp32, %d vec4 chains: %.1f GFLOP/s", chains, gflops);
        cr_expect_gt(gflops, 0);
    }
    double gflops = 1;
    cr_expect_neq(compute_roofline_fma(ctx, 1, 0, false, &gflops), GLESC_OK);
    cr_expect_eq(gflops, 0);
    glesc_status st = compute_roofline_fma(ctx, 1, 8, true, &gflops);
    if (!ctx->f16_ext) {
        cr_log_info("no float16_t extension: %s", glesc_context_errmsg(ctx));
        cr_expect_neq(st, GLESC_OK);
        cr_expect(strstr(glesc_context_errmsg(ctx), "f16 without a float16 extension"), "%s",
                  glesc_context_errmsg(ctx));
    } else {
        cr_expect_eq(st, GLESC_OK, "%s", glesc_context_errmsg(ctx));
        cr_log_info("f16 through %s, 8 f16vec4 chains: %.1f GFLOP/s", ctx->f16_ext, gflops);
        cr_expect_gt(gflops, 0);
    }
}

/* A grouped q/k/v of many columns takes the 128 x 64 tiles where they fit
 * (a GPU of 256 invocations and 32 KiB: gemm_config's narrow list), a
 * single weight of as many columns the 128 x 128 ones; llvmpipe keeps its
 * own tile for both, and runs the grouped kernel in the narrow tile when
 * forced. */
Test(gemm, grouped_takes_the_narrow_tiles)
{
    bool gpu = !glesc_context_caps(ctx)->software &&
               glesc_context_caps(ctx)->max_compute_invocations >= 256 &&
               glesc_context_caps(ctx)->max_compute_shared_memory >= 32768;
    mm_m = 200;
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *outs[3];
    int n = 0;
    outs[0] = norm_qkv(g, outs + 1, &n);
    tg_check(g, outs, 1 + n, NMSE_TOL, "grouped q/k/v, m = 200");
    const char *glsl = glesc_graph_last_glsl(g);
    cr_assert(glsl && strstr(glsl, "grouped: 3 matmuls"), "not one grouped GEMM");
    const char *want = gpu ? "by 64 columns, 8 x 4" : "by 64 columns, 8 x 8";
    cr_log_info("%s: the tile '%s'", gpu ? "a GPU" : "llvmpipe", want);
    cr_expect(strstr(glsl, want), "the grouped GEMM has not the tile '%s'", want);
    glesc_graph_destroy(g);
    free_weights();
    /* the narrow tile forced (llvmpipe): the grouped kernel in it, with
     * and without the split, equals the CPU */
    static const char *const knobs[] = {"bn=128,bm=64,tn=8,tm=4",
                                        "bn=128,bm=64,tn=8,tm=4,slots=1000000"};
    for (size_t i = 0; i < CORE_ARRAY_LEN(knobs); i++) {
        glesc_context *c = context_with(knobs[i], NULL);
        g = glesc_graph_create(c);
        n = 0;
        outs[0] = norm_qkv(g, outs + 1, &n);
        double e = tg_check(g, outs, 1 + n, NMSE_TOL, knobs[i]);
        cr_log_info("grouped q/k/v, GLESC_GEMM=%s: NMSE %.3g", knobs[i], e);
        cr_expect(strstr(glesc_graph_last_glsl(g), "by 64 columns, 8 x 4"), "not the tile");
        glesc_graph_destroy(g);
        free_weights();
        glesc_context_destroy(c);
    }
    unsetenv("GLESC_GEMM");
    g = glesc_graph_create(ctx);
    glesc_tensor *w = tg_input(g, F32, 2, (int64_t[]){512, 300}, 1, -1, 1);
    glesc_tensor *x = tg_input(g, F32, 2, (int64_t[]){512, 200}, 2, -1, 1);
    glesc_tensor *y = glesc_matmul(g, w, x);
    tg_check(g, &y, 1, NMSE_TOL, "one weight, m = 200");
    want = gpu ? "by 128 columns, 8 x 8" : "by 64 columns, 8 x 8";
    cr_expect(strstr(glesc_graph_last_glsl(g), want), "the GEMM has not the tile '%s'", want);
    glesc_graph_destroy(g);
}
