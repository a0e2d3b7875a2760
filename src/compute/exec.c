/*
 * exec.c — glesc_graph_compute: the device profile on entry where the
 * graph depends on it (profile.c) → order → structure hash → cached plan or a
 * new one (fusion, lifetimes, GLSL for every kernel, one batch compile) →
 * run: each kernel dispatches what its plan recorded, or, where its sizes
 * changed, its generator in bind mode collects this compute's uniforms
 * first ("Replay" below); gl_dispatch places barriers from buffer epochs,
 * memory goes back to the pool after its last reader. Statistics,
 * per-kernel GPU times and the Chrome trace (GLESC_TRACE=file.json) are
 * gathered here. compute_prepare does the steps before the run ahead of
 * time (a decode step prepares the next one while the GPU works): the
 * next compute of the same graph and output runs what it prepared when
 * nothing changed in between.
 */
#include <stdio.h>
#include <string.h>

#include "compute/compute.h"

int compute_max_bindings(const glesc_context *ctx)
{
    return CORE_MIN(ctx->caps.max_compute_storage_blocks, KB_MAX_BIND);
}

/* A generator's kernel within the device's (or the testing caps') compute
 * limits: every generator sizes its workgroup and shared arrays from the
 * caps, and this holds them to it, so that no kernel reaches a driver that
 * must refuse it (Mali: 256 invocations, 32 KiB). */
static glesc_status check_footprint(glesc_context *ctx, const emit_kernel *k)
{
    const glesc_caps *c = &ctx->caps;
    int local[3];
    int64_t shared;
    emit_kernel_footprint(k, local, &shared);
    int64_t inv = (int64_t)local[0] * local[1] * local[2];
    for (int i = 0; i < 3; i++)
        if (local[i] > c->max_workgroup_size[i])
            return core_err_set(&ctx->err, GLESC_ERROR_LIMIT,
                                "workgroup size %d in dimension %d; the device allows %d", local[i],
                                i, c->max_workgroup_size[i]);
    if (inv > c->max_compute_invocations)
        return core_err_set(&ctx->err, GLESC_ERROR_LIMIT,
                            "workgroup of %lld invocations; the device allows %d", (long long)inv,
                            c->max_compute_invocations);
    if (shared > c->max_compute_shared_memory)
        return core_err_set(&ctx->err, GLESC_ERROR_LIMIT,
                            "%lld bytes of shared memory; the device allows %d", (long long)shared,
                            c->max_compute_shared_memory);
    return GLESC_OK;
}

glesc_status compute_kernel_glsl(glesc_context *ctx, const kernels_kernel *gk, const char *name,
                                 int max_bind, const glesc_graph_options *opts, char **out,
                                 int *n_bind)
{
    *out = NULL;
    if (n_bind)
        *n_bind = 0;
    emit_kernel *k = emit_kernel_create(name);
    if (!k)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "kernel %s", name);
    /* the kernel's name lists its ops; no sizes here: the text must not
     * depend on them (the program cache keys on it) */
    kb b;
    kb_init(&b, ctx, gk, k, max_bind);
    b.opts = opts;
    glesc_status st = kernels_gen(&b);
    if (n_bind)
        *n_bind = b.over_bind ? b.max_bind + 1 : b.n_bind;
    if (st == GLESC_OK)
        st = check_footprint(ctx, k);
    if (st == GLESC_OK) {
        *out = emit_kernel_glsl(k, &ctx->err);
        if (!*out)
            st = ctx->err.status ? ctx->err.status : GLESC_ERROR_OUT_OF_MEMORY;
    }
    if (st != GLESC_OK)
        core_err_prefix(&ctx->err, "kernel %s", name);
    kb_free(&b);
    emit_kernel_destroy(k);
    return st;
}

glesc_status compute_kernel_bind(glesc_context *ctx, const kernels_kernel *gk, int max_bind,
                                 const glesc_graph_options *opts, kb *b)
{
    kb_init(b, ctx, gk, NULL, max_bind);
    b->opts = opts;
    return kernels_gen(b);
}

glesc_status compute_scratch(glesc_context *ctx, uint64_t bytes, gl_buffer **out)
{
    *out = NULL;
    compute_state *cs = compute_state_get(ctx);
    if (!cs)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "kernel scratch");
    uint64_t need = CORE_MAX(bytes, 256); /* something to bind where it is not touched */
    if (!cs->scratch || cs->scratch->size < need) {
        gl_pool_release(ctx, cs->scratch);
        cs->scratch = NULL;
        glesc_status st = gl_pool_acquire(ctx, need, GL_USAGE_SCRATCH, &cs->scratch);
        if (st == GLESC_OK)
            st = gl_buffer_clear(ctx, cs->scratch, 0, cs->scratch->size);
        if (st != GLESC_OK) {
            gl_pool_release(ctx, cs->scratch);
            cs->scratch = NULL;
            core_err_prefix(&ctx->err, "kernel scratch of %llu bytes", (unsigned long long)need);
            return st;
        }
    }
    *out = cs->scratch;
    return GLESC_OK;
}

/* Generates the plan's kernels and gets their programs; start_only: only
 * starts compiling them (gl_program_start_batch), the plan left unbuilt. */
static glesc_status build_programs(glesc_context *ctx, compute_plan *p, const graph_order_t *ord,
                                   int max_bind, const glesc_graph_options *opts, bool start_only)
{
    int nk = p->n_kernels;
    glesc_status st = GLESC_OK;
    const char **srcs = core_calloc((size_t)nk + 1, sizeof *srcs);
    const gl_program **progs = core_calloc((size_t)nk + 1, sizeof *progs);
    if (!srcs || !progs) {
        st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "building kernels");
        goto done;
    }
    uint64_t t0 = core_time_ns();
    for (int k = 0; k < nk && st == GLESC_OK; k++) {
        kernels_kernel gk = compute_plan_kernel(p, ord, k);
        compute_kernel *pk = &p->kernels[k];
        if (!pk->glsl)
            st = compute_kernel_glsl(ctx, &gk, pk->name, max_bind, opts, &pk->glsl, NULL);
        srcs[k] = pk->glsl;
    }
    uint64_t t1 = core_time_ns();
    if (st == GLESC_OK && nk > 0 && start_only)
        st = gl_program_start_batch(ctx, srcs, nk);
    else if (st == GLESC_OK && nk > 0)
        st = gl_program_get_batch(ctx, srcs, nk, progs);
    core_log(CORE_LOG_DEBUG, "compute: %d kernels: their GLSL %.1f ms, their programs %.1f ms%s",
             nk, (double)(t1 - t0) / 1e6, (double)(core_time_ns() - t1) / 1e6,
             start_only ? " (started)" : "");
    if (st != GLESC_OK || start_only)
        goto done;
    sbuf all;
    sbuf_init(&all);
    for (int k = 0; k < nk; k++) {
        p->kernels[k].prog = progs[k];
        sbuf_appendf(&all, "%s%s", k ? "\n" : "", p->kernels[k].glsl);
    }
    core_free(p->all_glsl);
    p->all_glsl = sbuf_take(&all);
    p->built = true;
done:
    core_free(srcs);
    core_free(progs);
    return st;
}

/* GLESC_PLAN_VERIFY=1: regenerate a reused plan's GLSL and compare. A
 * difference means a generator branched on something the structure hash
 * does not cover. */
static glesc_status verify_plan(glesc_context *ctx, compute_plan *p, const graph_order_t *ord,
                                int max_bind, const glesc_graph_options *opts)
{
    for (int k = 0; k < p->n_kernels; k++) {
        kernels_kernel gk = compute_plan_kernel(p, ord, k);
        char *src;
        glesc_status st =
            compute_kernel_glsl(ctx, &gk, p->kernels[k].name, max_bind, opts, &src, NULL);
        if (st != GLESC_OK)
            return st;
        bool same = !strcmp(src, p->kernels[k].glsl);
        core_free(src);
        if (!same)
            return core_err_set(&ctx->err, GLESC_ERROR_STATE,
                                "plan cache: kernel %d (%s) generates different GLSL for the "
                                "same structure hash",
                                k, p->kernels[k].name);
    }
    return GLESC_OK;
}

static void trace_open(compute_state *s, uint64_t t0)
{
    if (s->trace_tried)
        return;
    s->trace_tried = true;
    const char *path = core_env("GLESC_TRACE");
    if (!path)
        return;
    s->trace = fopen(path, "w");
    if (!s->trace) {
        core_log(CORE_LOG_WARN, "GLESC_TRACE: cannot write %s", path);
        return;
    }
    s->trace_t0 = t0; /* timestamps count from the first compute */
    fputs("{\"traceEvents\":[\n", s->trace);
}

static void trace_event(compute_state *s, const char *name, int tid, uint64_t ts_ns,
                        uint64_t dur_ns, const char *args)
{
    fprintf(s->trace,
            "%s{\"name\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":%d%s%s}",
            s->trace_any ? ",\n" : "", name, (double)ts_ns / 1e3, (double)dur_ns / 1e3, tid,
            args ? ",\"args\":" : "", args ? args : "");
    s->trace_any = true;
}

static glesc_status keep_output(glesc_graph *g, glesc_tensor *o)
{
    for (int i = 0; i < g->n_kept; i++)
        if (g->kept[i] == o)
            return GLESC_OK;
    if (g->n_kept == g->cap_kept) {
        int cap = g->cap_kept ? 2 * g->cap_kept : 8;
        glesc_tensor **k = core_realloc(g->kept, (size_t)cap * sizeof *k);
        if (!k)
            return core_err_set(&g->ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "graph outputs");
        g->kept = k;
        g->cap_kept = cap;
    }
    g->kept[g->n_kept++] = o;
    return GLESC_OK;
}

static glesc_status check_outputs(glesc_graph *g, glesc_tensor *const *outs, int n)
{
    if (!outs || n < 1)
        return core_err_set(&g->ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_graph_compute: no outputs given");
    for (int i = 0; i < n; i++) {
        if (!outs[i])
            return core_err_set(&g->ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                                "glesc_graph_compute: output %d is NULL (a builder failed: %s)", i,
                                core_err_last_failure(&g->ctx->err));
        if ((outs[i]->g && outs[i]->g != g) || outs[i]->ctx != g->ctx)
            return core_err_set(&g->ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                                "glesc_graph_compute: output %d belongs to another graph", i);
    }
    return GLESC_OK;
}

static void count_consumers(const graph_order_t *ord, glesc_tensor *const *outs, int n)
{
    for (int i = 0; i < ord->n; i++) {
        ord->nodes[i]->n_consumers = 0;
        ord->nodes[i]->is_output = false;
    }
    for (int i = 0; i < ord->n; i++) {
        glesc_tensor *t = ord->nodes[i];
        for (int s = 0; s < t->n_src; s++) {
            glesc_tensor *x = t->src[s];
            bool dup = false;
            for (int q = 0; q < s; q++)
                dup |= t->src[q] == x;
            if (x && !dup)
                x->n_consumers++;
        }
    }
    for (int i = 0; i < n; i++)
        outs[i]->is_output = true;
}

/* Does the context's abort callback (glesc_context_set_abort_callback) ask
 * to stop? On an adopted context the callback is application code that may
 * bind its own GL state: the executor's bind cache forgets what it knew. */
static bool abort_requested(glesc_context *ctx)
{
    if (!ctx->abort_fn)
        return false;
    bool stop = ctx->abort_fn(ctx->abort_user);
    if (ctx->adopted)
        gl_bound_reset(ctx);
    return stop;
}

/* Does g hold a matmul whose kernel depends on the GEMV threshold? */
static bool needs_gemv_threshold(const glesc_graph *g)
{
    for (const glesc_tensor *t = g->tensors; t; t = t->next)
        if (t->op == GLESC_OP_MATMUL && t->src[1]->ne[1] >= 2 &&
            kernels_matmul_gemv(t, GRAPH_GEMV_MAX_M))
            return true;
    return false;
}

/* The fusions a graph with graph_narrow_skips leaves out of the narrow
 * GEMM (KERNELS_FUSE_SKIP_* bits: GLESC_FUSE_SKIP_NARROW, else the device
 * class's fuse_skip_narrow; 0: none). */
static unsigned narrow_skips(const glesc_context *ctx)
{
    const char *narrow = core_env("GLESC_FUSE_SKIP_NARROW");
    return narrow ? kernels_fuse_skips(narrow) : kernels_class_of(ctx)->fuse_skip_narrow;
}

/* Orders g for outs[0..n) and finds its plan, or makes and builds one:
 * what a compute does before its first dispatch. pp->ord is the caller's
 * to free, also on failure; pp->t0 is when the device profile (taken here
 * the first time a graph needs it) was done. */
static glesc_status prepare(glesc_graph *g, glesc_tensor *const *outs, int n, compute_prepared *pp,
                            bool start_only)
{
    glesc_context *ctx = g->ctx;
    memset(pp, 0, sizeof *pp);
    pp->opts = g->opts;
    if (!pp->opts.gemv_max_m) {
        /* Only a matmul with 2..8 activation columns depends on the GEMV
         * threshold: take the device profile then (measured the first time),
         * before anything of this compute happens. */
        pp->opts.gemv_max_m = GRAPH_GEMV_MAX_M;
        if (needs_gemv_threshold(g)) {
            const compute_profile *prof = compute_profile_get(ctx);
            if (!prof)
                return ctx->err.status;
            pp->opts.gemv_max_m = prof->gemv_max_m;
        }
    }
    pp->t0 = core_time_ns();
    glesc_status st = graph_order(g, outs, n, &pp->ord);
    if (st != GLESC_OK) {
        memset(&pp->ord, 0, sizeof pp->ord);
        return st;
    }
    count_consumers(&pp->ord, outs, n);
    const glesc_graph_options *opts = &pp->opts;
    /* GLESC_FUSE_SKIP (else the device class's): fusions left out for
     * GEMMs; GLESC_FUSE_GEMM_NORM: norms folded into GEMMs too (tuning,
     * docs/environment.md) */
    const char *skip = core_env("GLESC_FUSE_SKIP");
    unsigned skips = (skip ? kernels_fuse_skips(skip) : kernels_class_of(ctx)->fuse_skip) |
                     (g->narrow_skips ? KERNELS_FUSE_NARROW_SKIPS(narrow_skips(ctx)) : 0);
    unsigned fusion =
        opts->fusion > 0 || (opts->fusion == 0 && !core_env_flag("GLESC_NO_FUSION"))
            ? KERNELS_FUSE_ON | skips |
                  (core_env_flag("GLESC_FUSE_GEMM_NORM") ? KERNELS_FUSE_GEMM_NORM : 0) |
                  (kernels_class_of(ctx)->decode_pair_split ? KERNELS_FUSE_SPLIT_DECODE_PAIR : 0) |
                  KERNELS_FUSE_GEMV_MAX_M(opts->gemv_max_m)
            : 0;
    int max_bind = compute_max_bindings(ctx);
    core_hash128 key = compute_plan_key(&pp->ord, opts, fusion, max_bind);
    compute_plan *p = compute_plan_find(ctx, key);
    /* compute_plan_key only reads the options; variants read gemv_max_m */
    if (p) {
        compute_plan_apply(p, &pp->ord);
        pp->reused = p->built;
        if (p->built && core_env_flag("GLESC_PLAN_VERIFY"))
            st = verify_plan(ctx, p, &pp->ord, max_bind, opts);
    } else if (!(p = compute_plan_create(ctx, key, &pp->ord, fusion, max_bind, opts))) {
        return ctx->err.status;
    }
    pp->p = p;
    if (st == GLESC_OK && !p->built) {
        if (abort_requested(ctx))
            st = core_err_set(&ctx->err, GLESC_ERROR_CANCELLED,
                              "glesc_graph_compute: cancelled by the abort callback before "
                              "compiling the plan's %d kernels",
                              p->n_kernels);
        else {
            glesc_stats c0, c1;
            glesc_context_stats(ctx, &c0);
            st = build_programs(ctx, p, &pp->ord, max_bind, opts, start_only);
            glesc_context_stats(ctx, &c1);
            pp->compiled = (int)(c1.programs_compiled - c0.programs_compiled);
        }
        pp->glsl_built = p->n_kernels;
    }
    return st;
}

void compute_prepared_drop(compute_state *s)
{
    if (s->prep.valid)
        graph_order_free(&s->prep.ord);
    s->prep.valid = false;
}

glesc_status compute_prepare(glesc_graph *g, glesc_tensor *out)
{
    glesc_context *ctx = g->ctx;
    glesc_status st = check_outputs(g, &out, 1);
    if (st != GLESC_OK || (st = gl_context_bind(ctx, "compute_prepare")) != GLESC_OK)
        return st;
    compute_state *cs = compute_state_get(ctx);
    if (!cs)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "graph state");
    compute_prepared_drop(cs);
    compute_prepared pp;
    if ((st = prepare(g, &out, 1, &pp, false)) != GLESC_OK) {
        graph_order_free(&pp.ord);
        return st;
    }
    pp.valid = true;
    pp.g = g;
    pp.out = out;
    pp.gen = g->gen;
    pp.computes = cs->computes;
    cs->prep = pp;
    return GLESC_OK;
}

glesc_status compute_start(glesc_graph *g, glesc_tensor *out)
{
    glesc_context *ctx = g->ctx;
    glesc_status st = check_outputs(g, &out, 1);
    if (st != GLESC_OK || (st = gl_context_bind(ctx, "compute_start")) != GLESC_OK)
        return st;
    compute_prepared pp;
    st = prepare(g, &out, 1, &pp, true);
    graph_order_free(&pp.ord);
    return st;
}

bool compute_background_compiles(const glesc_context *ctx)
{
    return gl_program_cache_background(ctx);
}

bool compute_background_done(glesc_context *ctx)
{
    return gl_program_cache_background_done(ctx);
}

/* Is the prepared compute this one, with nothing changed since? */
static bool prepared_matches(const compute_state *cs, const glesc_graph *g,
                             glesc_tensor *const *outs, int n)
{
    const compute_prepared *pp = &cs->prep;
    return pp->valid && pp->g == g && n == 1 && outs[0] == pp->out && pp->gen == g->gen &&
           pp->computes == cs->computes;
}

/* Fails naming the first input (a leaf) of ord that was never written;
 * counts the nodes and views before it into g->stats. */
static glesc_status check_inputs(glesc_graph *g, const graph_order_t *ord)
{
    for (int i = 0; i < ord->n; i++) {
        glesc_tensor *t = ord->nodes[i];
        graph_kind kind = graph_op(t->op)->kind;
        if (kind == GRAPH_KIND_LEAF && !t->written) {
            char sh[64];
            return core_err_set(&g->ctx->err, GLESC_ERROR_STATE,
                                "glesc_graph_compute: input %s%s%s %s %s was never written",
                                t->name ? "'" : "", t->name ? t->name : "", t->name ? "'" : "",
                                graph_shape_str(t, sh, sizeof sh), glesc_dtype_name(t->dtype));
        }
        g->stats.nodes += kind == GRAPH_KIND_ELTWISE || kind == GRAPH_KIND_ANCHOR;
        g->stats.views += kind == GRAPH_KIND_VIEW;
    }
    return GLESC_OK;
}

/* A GPU timer per kernel of p into *timers (core_free it, also on failure)
 * and room for their times in g->ktimes. */
static glesc_status timers_alloc(glesc_graph *g, const compute_plan *p, gl_timer **timers)
{
    *timers = core_calloc((size_t)p->n_kernels, sizeof **timers);
    glesc_kernel_time *kt = core_realloc(g->ktimes, (size_t)p->n_kernels * sizeof *kt);
    if (kt)
        g->ktimes = kt;
    if (!*timers || !kt)
        return core_err_set(&g->ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "kernel timers");
    return GLESC_OK;
}

/* Runs kernel k of p: memory for what it stores, its record (made again
 * where its sizes changed, checked too with verify), its dispatches (timed
 * by timers[k] unless timers is NULL); then its statistics, and the memory
 * whose last reader it was goes back to the pool. */
static glesc_status run_kernel(glesc_graph *g, compute_plan *p, const graph_order_t *ord, int k,
                               const glesc_graph_options *opts, bool verify, gl_timer *timers)
{
    glesc_context *ctx = g->ctx;
    kernels_kernel gk = compute_plan_kernel(p, ord, k);
    compute_kernel *pk = &p->kernels[k];
    if (abort_requested(ctx))
        return core_err_set(&ctx->err, GLESC_ERROR_CANCELLED,
                            "glesc_graph_compute: cancelled by the abort callback before "
                            "kernel %d of %d (%s)",
                            k + 1, p->n_kernels, pk->name);
    /* the stored nodes' memory: the out's, and a grouped matmul's others */
    glesc_tensor *outs_k[1 + KERNELS_MAX_SIB];
    int n_outs = 0;
    outs_k[n_outs++] = gk.out;
    for (int j = 0; j < gk.n_sib; j++)
        outs_k[n_outs++] = gk.sib_out[j];
    glesc_status st = GLESC_OK;
    for (int j = 0; j < n_outs; j++) {
        glesc_tensor *o = outs_k[j]->owner;
        if (!o->live && (st = graph_storage_alloc(o, GL_USAGE_ACTIVATIONS, false)) != GLESC_OK) {
            core_err_prefix(&ctx->err, "glesc_graph_compute: result of %s", pk->name);
            return st;
        }
    }
    /* the generator runs only where the sizes changed (or to verify) */
    bool replay = compute_record_matches(p, k, ord);
    if (!replay || verify) {
        kb b;
        st = compute_kernel_bind(ctx, &gk, compute_max_bindings(ctx), opts, &b);
        if (st == GLESC_OK)
            st = replay ? compute_record_verify(ctx, p, k, ord, &b)
                        : compute_record_make(ctx, p, k, ord, &b);
        if (st == GLESC_OK && !replay)
            g->stats.kernels_bound++;
        kb_free(&b);
    }
    if (st == GLESC_OK && timers)
        st = gl_timer_begin(ctx, &timers[k]);
    if (st == GLESC_OK)
        st = compute_record_dispatch(ctx, p, k, ord);
    if (st == GLESC_OK && timers)
        st = gl_timer_end(ctx, &timers[k]);
    if (st != GLESC_OK) {
        core_err_prefix(&ctx->err, "kernel %s", pk->name);
        return st;
    }
    const compute_record *rec = &pk->rec;
    g->stats.dispatches += rec->n_disp;
    for (int i = 0; i < rec->n_kbind; i++)
        if (rec->kbind_node[i] >= 0 && !((rec->kbind_write_mask >> i) & 1))
            g->stats.bytes_read += ord->nodes[rec->kbind_node[i]]->st.bytes;
    for (int j = 0; j < n_outs; j++) {
        outs_k[j]->owner->live = true;
        g->stats.bytes_written += graph_nbytes(outs_k[j]);
    }
    if (timers) {
        g->ktimes[k].name = pk->name;
        g->ktimes[k].dispatches = rec->n_disp;
    }
    for (int r = p->rel_start[k]; r < p->rel_start[k + 1]; r++)
        graph_storage_free(ord->nodes[p->rel_nodes[r]]);
    return GLESC_OK;
}

/* Gives back the memory of ord's nodes that is still held, except the
 * outputs kept (failed: all of it). */
static void release_unkept(glesc_graph *g, const graph_order_t *ord, bool failed)
{
    if (failed)
        g->n_kept = 0;
    for (int i = 0; i < ord->n; i++) {
        glesc_tensor *t = ord->nodes[i];
        if (t->owner != t || t->op == GLESC_OP_NONE || !t->live)
            continue;
        bool kept = false;
        for (int q = 0; q < g->n_kept; q++)
            kept |= g->kept[q] == t;
        if (!kept)
            graph_storage_free(t);
    }
}

/* After the run (status st): reads each kernel's GPU time into g->ktimes,
 * and into the trace from ts (the trace's clock) on, where st is a success;
 * releases and frees the timers. Returns st, or a timer's failure. */
static glesc_status timers_collect(glesc_graph *g, compute_state *cs, const compute_plan *p,
                                   gl_timer *timers, uint64_t ts, glesc_status st)
{
    glesc_context *ctx = g->ctx;
    for (int k = 0; k < p->n_kernels; k++) {
        uint64_t ns = 0;
        if (st == GLESC_OK) {
            glesc_status ts_st = gl_timer_result(ctx, &timers[k], &ns);
            if (ts_st != GLESC_OK)
                st = ts_st;
            g->ktimes[k].gpu_ns = ns;
            if (cs->trace) {
                char args[64];
                snprintf(args, sizeof args, "{\"dispatches\":%d}", g->ktimes[k].dispatches);
                trace_event(cs, p->kernels[k].name, 1, ts, ns, args);
            }
            ts += ns;
        }
        gl_timer_release(ctx, &timers[k]);
    }
    if (st == GLESC_OK)
        g->n_ktimes = p->n_kernels;
    core_free(timers);
    return st;
}

GLESC_API glesc_status glesc_graph_compute(glesc_graph *g, glesc_tensor *const *outs, int n)
{
    if (!g)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_graph_compute: NULL graph");
    glesc_context *ctx = g->ctx;
    glesc_status st = check_outputs(g, outs, n);
    if (st != GLESC_OK)
        return st;
    core_err_reset(&ctx->err);
    if ((st = gl_context_bind(ctx, "glesc_graph_compute")) != GLESC_OK)
        return st;
    compute_state *cs = compute_state_get(ctx);
    if (!cs)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "graph state");
    graph_release_kept(g);
    memset(&g->stats, 0, sizeof g->stats);
    g->n_ktimes = 0;
    /* prepared ahead (compute_prepare), or now */
    compute_prepared pp;
    uint64_t t_start; /* the compute's own time, without the profile's */
    if (prepared_matches(cs, g, outs, n)) {
        pp = cs->prep;
        cs->prep.valid = false; /* pp owns the order now */
        t_start = core_time_ns();
    } else {
        compute_prepared_drop(cs);
        st = prepare(g, outs, n, &pp, false);
        t_start = pp.t0;
    }
    cs->computes++;
    graph_order_t ord = pp.ord;
    compute_plan *p = pp.p;
    const glesc_graph_options opts = pp.opts;
    g->stats.plan_reused = pp.reused;
    g->stats.glsl_built = pp.glsl_built;
    if (st != GLESC_OK && !pp.t0) /* the profile failed: nothing ordered */
        return st;
    if (st == GLESC_OK)
        st = check_inputs(g, &ord);
    trace_open(cs, t_start);
    bool timing = opts.timing || cs->trace;
    bool verify = core_env_flag("GLESC_PLAN_VERIFY");
    glesc_stats cst0, cst1;
    glesc_context_stats(ctx, &cst0);
    g->last_glsl = p ? p->all_glsl : NULL;

    gl_timer *timers = NULL;
    if (st == GLESC_OK && timing && p->n_kernels)
        st = timers_alloc(g, p, &timers);

    /* run */
    uint64_t t_gpu0 = core_time_ns();
    for (int k = 0; st == GLESC_OK && k < p->n_kernels; k++)
        st = run_kernel(g, p, &ord, k, &opts, verify, timers);
    if (st == GLESC_OK) {
        g->stats.kernels = p->n_kernels;
        for (int i = 0; i < n; i++)
            if (outs[i]->owner->op != GLESC_OP_NONE && (st = keep_output(g, outs[i]->owner)))
                break;
    }
    /* whatever is still held and not an output goes back (also after errors) */
    release_unkept(g, &ord, st != GLESC_OK);
    if (timers)
        st = timers_collect(g, cs, p, timers, t_gpu0 - cs->trace_t0, st);
    glesc_context_stats(ctx, &cst1);
    g->stats.programs_compiled =
        pp.compiled + (int)(cst1.programs_compiled - cst0.programs_compiled);
    g->stats.cpu_ns = core_time_ns() - t_start;
    g->stats.kernel_times = g->ktimes;
    g->stats.n_kernel_times = g->n_ktimes;
    if (cs->trace) {
        trace_event(cs, "glesc_graph_compute", 2, t_start - cs->trace_t0, g->stats.cpu_ns, NULL);
        /* the host's work before the first dispatch (order, plan, apply) */
        trace_event(cs, "plan", 3, t_start - cs->trace_t0, t_gpu0 - t_start, NULL);
        fflush(cs->trace);
    }
    graph_order_free(&ord);
    return st;
}
