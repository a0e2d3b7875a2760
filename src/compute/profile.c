/*
 * profile.c — the device profile: thresholds measured on the device rather
 * than guessed, once per context, before the compute that first needs them.
 * Today one: up to how many activation columns m the matrix-vector kernel
 * (weights read once, every column at once) beats the tiled matrix-matrix
 * kernel. It depends on the GPU's bandwidth-to-compute ratio: on a big GPU
 * the GEMV stays ahead longer than on a small one.
 *
 * Where the value comes from, in order: GLESC_GEMV_MAX_M (1..8); else the
 * device class's where it has one (llvmpipe: src/kernels/devclass.c); else
 * the context's disk cache, under a key naming glesc's version, the GL vendor,
 * renderer and version (the driver's), the device class (whose kernels were
 * timed) and the profile's format, so another glesc, driver, GPU or class
 * never reads this one's figures; else measured now and
 * stored there (written atomically by core/disk_cache.c). An entry that
 * does not parse is ignored and measured again.
 *
 * The measurement runs the real matmul kernels directly: a private graph of
 * its own tensors, the GLSL from kernels_gen, programs from the program
 * cache, dispatches through gl_dispatch, timed around gl_finish. It never
 * goes through glesc_graph_compute, so the caller's plan cache, trace,
 * statistics and error message are left as they were, and its buffers
 * (about 0.6-0.9 MiB at its peak) are deleted when it is done.
 * glesc_session_create takes the profile for a session whose prompts may
 * need it, so that no eval's time or memory includes the measurement. A
 * failed measurement is logged as a warning with its reason, and the
 * context then uses GEMV up to PROFILE_FALLBACK_GEMV_MAX_M (the value used
 * when nothing is measured); the next context tries again.
 */
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"
#include "glesc_config.h"

#define PROFILE_FORMAT 1u /* of the disk entry's key and blob */
#define PROFILE_FALLBACK_GEMV_MAX_M 8
#define PROFILE_K 512 /* the measured weight: f16 [K, N] */
#define PROFILE_N 512
#define PROFILE_REPS 3 /* timed runs after a warm-up; the best counts */
#define PROFILE_TIMEOUT_NS (10ull * 1000000000ull)

/* ---- measurement ---- */

/* Seconds of the matmul kernel W × X for X [K, m] under gemv_max_m (so
 * GEMV when m <= gemv_max_m, else GEMM): best of PROFILE_REPS runs after a
 * warm-up, each waited for with gl_finish. */
static glesc_status time_matmul(glesc_context *ctx, glesc_tensor *w, int m, int gemv_max_m,
                                double *sec)
{
    glesc_status st = GLESC_OK;
    glesc_graph_options opts = {.gemv_max_m = gemv_max_m, .fusion = -1};
    int max_bind = compute_max_bindings(ctx);
    graph_order_t ord = {0};
    kernels_kernel *gks = NULL;
    char *glsl = NULL;
    kb b;
    kb_init(&b, ctx, NULL, NULL, max_bind);
    float *xs = core_calloc((size_t)PROFILE_K * (size_t)m, sizeof *xs);
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = g ? glesc_tensor_new(g, GLESC_DTYPE_F32, 2, (int64_t[]){PROFILE_K, m}) : NULL;
    glesc_tensor *y = x ? glesc_matmul(g, w, x) : NULL;
    if (!xs) {
        st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    if (!y) { /* a builder's message is set */
        st = ctx->err.status ? ctx->err.status : GLESC_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    if ((st = glesc_tensor_write_f32(x, xs, (size_t)PROFILE_K * (size_t)m)) != GLESC_OK ||
        (st = graph_order(g, &y, 1, &ord)) != GLESC_OK)
        goto done;
    int nk = 0;
    if (!(gks = core_calloc((size_t)ord.n, sizeof *gks))) {
        st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    kernels_fuse(ord.nodes, ord.n, 0, max_bind, NULL, gks, &nk);
    if (nk != 1) {
        st = core_err_set(&ctx->err, GLESC_ERROR_STATE, "a matmul planned as %d kernels", nk);
        goto done;
    }
    const gl_program *prog;
    if ((st = compute_kernel_glsl(ctx, &gks[0], "matmul", max_bind, &opts, &glsl, NULL)) !=
            GLESC_OK ||
        (st = gl_program_get(ctx, glsl, &prog)) != GLESC_OK ||
        (st = graph_storage_alloc(y, GL_USAGE_ACTIVATIONS, false)) != GLESC_OK ||
        (st = compute_kernel_bind(ctx, &gks[0], max_bind, &opts, &b)) != GLESC_OK)
        goto done;
    *sec = -1;
    for (int rep = 0; rep <= PROFILE_REPS && st == GLESC_OK; rep++) {
        if ((st = gl_finish(ctx, PROFILE_TIMEOUT_NS)) != GLESC_OK)
            break;
        uint64_t t0 = core_time_ns();
        for (int d = 0; d < b.n_disp && st == GLESC_OK; d++) {
            kb_dispatch *kd = &b.disp[d];
            if (kd->scratch_bind >= 0) /* the GEMM's split K: the context's scratch */
                st = compute_scratch(ctx, kd->scratch_bytes, &kd->bind[kd->scratch_bind].buf);
            if (st == GLESC_OK)
                st = gl_dispatch(ctx, prog, kd->bind, kd->n_bind, kd->param, kd->n_param,
                                 kd->groups);
        }
        if (st == GLESC_OK)
            st = gl_finish(ctx, PROFILE_TIMEOUT_NS);
        double s = (double)(core_time_ns() - t0) * 1e-9;
        if (st == GLESC_OK && rep > 0 && (*sec < 0 || s < *sec))
            *sec = s;
    }
done:
    if (st != GLESC_OK)
        core_err_prefix(&ctx->err, "%s m = %d", m <= gemv_max_m ? "GEMV" : "GEMM", m);
    kb_free(&b);
    core_free(glsl);
    core_free(gks);
    graph_order_free(&ord);
    glesc_graph_destroy(g);
    core_free(xs);
    return st;
}

glesc_status compute_profile_measure(glesc_context *ctx, compute_profile *out)
{
    glesc_status st = GLESC_OK;
    /* What the measurement takes goes back to the driver when it is done:
     * its weight (deleted on release), its activations and a kernel
     * scratch it grew (dropped from the pool's cache), so that the context
     * holds nothing for it afterwards. */
    compute_state *cs = compute_state_get(ctx);
    gl_buffer *scratch0 = cs ? cs->scratch : NULL;
    uint64_t tick = gl_pool_tick(ctx);
    int64_t shape[2] = {PROFILE_K, PROFILE_N};
    size_t n = (size_t)PROFILE_K * PROFILE_N;
    uint16_t *wd = core_calloc(n, sizeof *wd); /* zeros: the time does not depend on values */
    glesc_tensor *w = glesc_weight_new(ctx, GLESC_DTYPE_F16, 2, shape);
    if (!wd || !cs) {
        st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    if (!w) { /* glesc_weight_new's message is set */
        st = ctx->err.status ? ctx->err.status : GLESC_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    if ((st = glesc_tensor_write(w, wd, n * sizeof *wd)) != GLESC_OK)
        goto done;
    /* The largest m of 2, 4, 8 up to which the GEMV wins on this weight. */
    static const int ms[] = {2, 4, 8};
    int best = 1;
    for (size_t i = 0; i < CORE_ARRAY_LEN(ms); i++) {
        double t_gemv, t_gemm;
        if ((st = time_matmul(ctx, w, ms[i], 8, &t_gemv)) != GLESC_OK ||
            (st = time_matmul(ctx, w, ms[i], 1, &t_gemm)) != GLESC_OK)
            goto done;
        if (t_gemv > t_gemm)
            break;
        best = ms[i];
    }
    *out = (compute_profile){.gemv_max_m = best, .source = COMPUTE_PROFILE_MEASURED};
done:
    if (st != GLESC_OK)
        core_err_prefix(&ctx->err, "device profile (%s): timing a %dx%d f16 matmul",
                        ctx->caps.renderer ? ctx->caps.renderer : "?", PROFILE_K, PROFILE_N);
    glesc_weight_free(w);
    core_free(wd);
    if (cs && cs->scratch != scratch0) {
        gl_pool_release(ctx, cs->scratch);
        cs->scratch = NULL;
    }
    gl_pool_drop_since(ctx, tick);
    return st;
}

/* ---- the disk entry ---- */

char *compute_profile_key(const glesc_context *ctx, size_t *len)
{
    sbuf b;
    sbuf_init(&b);
    const char *parts[] = {"glesc-profile",    GLESC_VERSION,     ctx->caps.vendor,
                           ctx->caps.renderer, ctx->caps.version, ctx->caps.device_class};
    for (size_t i = 0; i < CORE_ARRAY_LEN(parts); i++) {
        sbuf_append(&b, parts[i] ? parts[i] : "");
        sbuf_appendc(&b, '\0');
    }
    sbuf_appendf(&b, "profile v%u", PROFILE_FORMAT);
    *len = b.len;
    return sbuf_take(&b);
}

/* The blob is text, one "name value" line per measured value:
 * "gemv_max_m 8\n". The key carries the format version. */
#define BLOB_MAX 64

/* The stored profile, when there is one that parses. */
static bool load(glesc_context *ctx, const void *key, size_t key_len, compute_profile *out)
{
    void *blob = NULL;
    size_t len = 0;
    if (!core_disk_cache_get(ctx->disk_cache, key, key_len, &blob, &len))
        return false;
    char text[BLOB_MAX + 1];
    int m = 0, used = 0;
    bool ok = len <= BLOB_MAX;
    if (ok) {
        memcpy(text, blob, len);
        text[len] = '\0';
        ok = strlen(text) == len && sscanf(text, "gemv_max_m %d\n%n", &m, &used) == 1 &&
             (size_t)used == len && m >= 1 && m <= 8;
    }
    if (ok)
        *out = (compute_profile){.gemv_max_m = m, .source = COMPUTE_PROFILE_LOADED};
    else
        core_log(CORE_LOG_INFO,
                 "device profile in %s: an entry of %zu bytes that is no format-%u profile: "
                 "ignored, measuring again",
                 core_disk_cache_dir(ctx->disk_cache), len, PROFILE_FORMAT);
    core_free(blob);
    return ok;
}

static void store(glesc_context *ctx, const void *key, size_t key_len, const compute_profile *p)
{
    char text[BLOB_MAX];
    int n = snprintf(text, sizeof text, "gemv_max_m %d\n", p->gemv_max_m);
    core_disk_cache_put(ctx->disk_cache, key, key_len, text, (size_t)n); /* logs its failures */
}

/* ---- the context's profile ---- */

/* GLESC_GEMV_MAX_M as 1..8, or 0 when unset (or not 1..8: warned). */
static int env_gemv_max_m(void)
{
    long v = 0;
    core_env_long("GLESC_GEMV_MAX_M", 1, 8, &v);
    return (int)v;
}

static compute_profile find(glesc_context *ctx)
{
    compute_profile p = {.gemv_max_m = env_gemv_max_m(), .source = COMPUTE_PROFILE_ENV};
    if (p.gemv_max_m)
        return p;
    p = (compute_profile){.gemv_max_m = kernels_class_of(ctx)->gemv_max_m,
                          .source = COMPUTE_PROFILE_CLASS};
    if (p.gemv_max_m >= 1 && p.gemv_max_m <= GRAPH_GEMV_MAX_M)
        return p;
    size_t key_len = 0;
    char *key = ctx->disk_cache ? compute_profile_key(ctx, &key_len) : NULL;
    if (key && load(ctx, key, key_len, &p)) {
        core_free(key);
        return p;
    }
    uint64_t t0 = core_time_ns();
    /* The measurement's messages must not replace the caller's. */
    core_err saved = {0};
    core_err_copy(&saved, &ctx->err);
    core_err_clear(&ctx->err);
    glesc_status st = compute_profile_measure(ctx, &p);
    if (st == GLESC_OK) {
        core_log(CORE_LOG_INFO,
                 "device profile of %s measured in %.1f ms: GEMV beats GEMM up to m = %d",
                 ctx->caps.renderer, (double)(core_time_ns() - t0) / 1e6, p.gemv_max_m);
        if (key)
            store(ctx, key, key_len, &p);
    } else {
        core_log(CORE_LOG_WARN,
                 "%s (%s); this context uses GEMV up to m = %d instead of a measured threshold",
                 core_err_msg(&ctx->err), glesc_status_name(st), PROFILE_FALLBACK_GEMV_MAX_M);
        p = (compute_profile){.gemv_max_m = PROFILE_FALLBACK_GEMV_MAX_M,
                              .source = COMPUTE_PROFILE_FALLBACK};
    }
    core_err_copy(&ctx->err, &saved);
    core_err_clear(&saved);
    core_free(key);
    return p;
}

const compute_profile *compute_profile_get(glesc_context *ctx)
{
    compute_state *cs = compute_state_get(ctx);
    if (!cs) {
        core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "compute state");
        return NULL;
    }
    if (!cs->profiled) {
        cs->profile = find(ctx);
        cs->profiled = true;
    }
    return &cs->profile;
}
