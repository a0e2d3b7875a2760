/*
 * exec.c — glesc_graph_compute: the device profile on entry where the
 * graph depends on it (profile.c) → order → structure hash → cached plan or a
 * new one (fusion, lifetimes, GLSL for every kernel, one batch compile) →
 * run: each kernel's generator in bind mode collects this compute's buffers
 * and uniforms, gl_dispatch places barriers from buffer epochs, memory goes
 * back to the pool after its last reader. Statistics, per-kernel GPU times
 * and the Chrome trace (GLESC_TRACE=file.json) are gathered here.
 */
#include <stdio.h>
#include <string.h>

#include "compute/compute.h"

int compute_max_bindings(const glesc_context *ctx)
{
    return CORE_MIN(ctx->caps.max_compute_storage_blocks, KB_MAX_BIND);
}

glesc_status compute_kernel_glsl(glesc_context *ctx, const graph_kernel *gk, const char *name,
                                 int max_bind, const glesc_graph_options *opts, char **out)
{
    *out = NULL;
    emit_kernel *k = emit_kernel_create(name);
    if (!k)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "kernel %s", name);
    /* the kernel's name lists its ops; no sizes here: the text must not
     * depend on them (the program cache keys on it) */
    kb b;
    kb_init(&b, ctx, gk, k, max_bind);
    b.opts = opts;
    glesc_status st = kernels_gen(&b);
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

glesc_status compute_kernel_bind(glesc_context *ctx, const graph_kernel *gk, int max_bind,
                                 const glesc_graph_options *opts, kb *b)
{
    kb_init(b, ctx, gk, NULL, max_bind);
    b->opts = opts;
    return kernels_gen(b);
}

glesc_status compute_scratch_bind(glesc_context *ctx, kb_dispatch *d)
{
    if (d->scratch_bind < 0)
        return GLESC_OK;
    compute_state *cs = compute_state_get(ctx);
    if (!cs)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "kernel scratch");
    uint64_t need = CORE_MAX(d->scratch_bytes, 4096);
    if (!cs->scratch || cs->scratch->size < need) {
        gl_pool_release(ctx, cs->scratch);
        cs->scratch = NULL;
        glesc_status st = gl_pool_acquire(ctx, need, GL_USAGE_ACTIVATIONS, &cs->scratch);
        if (st == GLESC_OK)
            st = gl_buffer_clear(ctx, cs->scratch, 0, cs->scratch->size);
        if (st != GLESC_OK) {
            gl_pool_release(ctx, cs->scratch);
            cs->scratch = NULL;
            core_err_prefix(&ctx->err, "kernel scratch of %llu bytes", (unsigned long long)need);
            return st;
        }
    }
    d->bind[d->scratch_bind].buf = cs->scratch;
    return GLESC_OK;
}

static glesc_status build_programs(glesc_context *ctx, compute_plan *p, const graph_order_t *ord,
                                   int max_bind, const glesc_graph_options *opts)
{
    int nk = p->n_kernels;
    glesc_status st = GLESC_OK;
    const char **srcs = core_calloc((size_t)nk + 1, sizeof *srcs);
    const gl_program **progs = core_calloc((size_t)nk + 1, sizeof *progs);
    if (!srcs || !progs) {
        st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "building kernels");
        goto done;
    }
    for (int k = 0; k < nk && st == GLESC_OK; k++) {
        graph_kernel gk = compute_plan_kernel(p, ord, k);
        compute_kernel *pk = &p->kernels[k];
        if (!pk->glsl)
            st = compute_kernel_glsl(ctx, &gk, pk->name, max_bind, opts, &pk->glsl);
        srcs[k] = pk->glsl;
    }
    if (st == GLESC_OK && nk > 0)
        st = gl_program_get_batch(ctx, srcs, nk, progs);
    if (st != GLESC_OK)
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
        graph_kernel gk = compute_plan_kernel(p, ord, k);
        char *src;
        glesc_status st = compute_kernel_glsl(ctx, &gk, p->kernels[k].name, max_bind, opts, &src);
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
                                core_err_msg(&g->ctx->err));
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

/* Does g hold a matmul whose kernel depends on the GEMV threshold? */
static bool needs_gemv_threshold(const glesc_graph *g)
{
    for (const glesc_tensor *t = g->tensors; t; t = t->next)
        if (t->op == GLESC_OP_MATMUL && t->src[1]->ne[1] >= 2 && t->src[1]->ne[1] <= 8)
            return true;
    return false;
}

GLESC_API glesc_status glesc_graph_compute(glesc_graph *g, glesc_tensor *const *outs, int n)
{
    if (!g)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_graph_compute: NULL graph");
    glesc_context *ctx = g->ctx;
    glesc_status st = check_outputs(g, outs, n);
    if (st != GLESC_OK)
        return st;
    glesc_graph_options opts = g->opts;
    if (!opts.gemv_max_m) {
        /* Only a matmul with 2..8 activation columns depends on the GEMV
         * threshold: take the device profile then (measured the first time),
         * before anything of this compute happens. */
        opts.gemv_max_m = 8;
        if (needs_gemv_threshold(g)) {
            const compute_profile *prof = compute_profile_get(ctx);
            if (!prof)
                return ctx->err.status;
            opts.gemv_max_m = prof->gemv_max_m;
        }
    }
    uint64_t t_start = core_time_ns(); /* the compute's own time, without the profile's */
    graph_release_kept(g);
    memset(&g->stats, 0, sizeof g->stats);
    g->n_ktimes = 0;

    graph_order_t ord;
    if ((st = graph_order(g, outs, n, &ord)) != GLESC_OK)
        return st;
    count_consumers(&ord, outs, n);
    for (int i = 0; i < ord.n; i++) {
        glesc_tensor *t = ord.nodes[i];
        graph_kind kind = graph_op(t->op)->kind;
        if (kind == GRAPH_KIND_LEAF && !t->written) {
            char sh[64];
            st = core_err_set(&ctx->err, GLESC_ERROR_STATE,
                              "glesc_graph_compute: input %s%s%s %s %s was never written",
                              t->name ? "'" : "", t->name ? t->name : "", t->name ? "'" : "",
                              graph_shape_str(t, sh, sizeof sh), glesc_dtype_name(t->dtype));
            graph_order_free(&ord);
            return st;
        }
        g->stats.nodes += kind == GRAPH_KIND_ELTWISE || kind == GRAPH_KIND_ANCHOR;
        g->stats.views += kind == GRAPH_KIND_VIEW;
    }

    bool fusion = opts.fusion > 0 || (opts.fusion == 0 && !core_env_flag("GLESC_NO_FUSION"));
    int max_bind = compute_max_bindings(ctx);
    compute_state *cs = compute_state_get(ctx);
    if (!cs) {
        graph_order_free(&ord);
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "graph state");
    }
    trace_open(cs, t_start);
    bool timing = opts.timing || cs->trace;

    glesc_stats cst0, cst1;
    glesc_context_stats(ctx, &cst0);
    core_hash128 key = compute_plan_key(&ord, &opts, fusion, max_bind);
    compute_plan *p = compute_plan_find(ctx, key);
    /* compute_plan_key only reads the options; variants read gemv_max_m */
    if (p) {
        compute_plan_apply(p, &ord);
        g->stats.plan_reused = p->built;
        if (p->built && core_env_flag("GLESC_PLAN_VERIFY"))
            st = verify_plan(ctx, p, &ord, max_bind, &opts);
    } else {
        p = compute_plan_create(ctx, key, &ord, fusion, max_bind);
        if (!p)
            st = ctx->err.status;
    }
    if (st == GLESC_OK && !p->built) {
        st = build_programs(ctx, p, &ord, max_bind, &opts);
        g->stats.glsl_built = p->n_kernels;
    }
    g->last_glsl = p ? p->all_glsl : NULL;

    gl_timer *timers = NULL;
    if (st == GLESC_OK && timing && p->n_kernels) {
        timers = core_calloc((size_t)p->n_kernels, sizeof *timers);
        glesc_kernel_time *kt = core_realloc(g->ktimes, (size_t)p->n_kernels * sizeof *kt);
        if (!timers || !kt)
            st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "kernel timers");
        if (kt)
            g->ktimes = kt;
    }

    /* run */
    uint64_t t_gpu0 = core_time_ns();
    for (int k = 0; st == GLESC_OK && k < p->n_kernels; k++) {
        graph_kernel gk = compute_plan_kernel(p, &ord, k);
        compute_kernel *pk = &p->kernels[k];
        /* the stored nodes' memory: the out's, and a grouped matmul's others */
        glesc_tensor *outs_k[1 + GRAPH_MAX_SIB];
        int n_outs = 0;
        outs_k[n_outs++] = gk.out;
        for (int j = 0; j < gk.n_sib; j++)
            outs_k[n_outs++] = gk.sib_out[j];
        for (int j = 0; j < n_outs && st == GLESC_OK; j++) {
            glesc_tensor *o = outs_k[j]->owner;
            if (!o->live) {
                st = graph_storage_alloc(o, GL_USAGE_ACTIVATIONS, false);
                if (st != GLESC_OK)
                    core_err_prefix(&ctx->err, "glesc_graph_compute: result of %s", pk->name);
            }
        }
        if (st != GLESC_OK)
            break;
        kb b;
        st = compute_kernel_bind(ctx, &gk, max_bind, &opts, &b);
        if (st != GLESC_OK)
            core_err_prefix(&ctx->err, "kernel %s", pk->name);
        if (st == GLESC_OK && timers)
            st = gl_timer_begin(ctx, &timers[k]);
        for (int d = 0; st == GLESC_OK && d < b.n_disp; d++) {
            kb_dispatch *ds = &b.disp[d];
            st = compute_scratch_bind(ctx, ds);
            if (st == GLESC_OK)
                st = gl_dispatch(ctx, pk->prog, ds->bind, ds->n_bind, ds->param, ds->n_param,
                                 ds->groups);
            if (st != GLESC_OK)
                core_err_prefix(&ctx->err, "kernel %s", pk->name);
        }
        if (st == GLESC_OK && timers)
            st = gl_timer_end(ctx, &timers[k]);
        if (st == GLESC_OK) {
            g->stats.dispatches += b.n_disp;
            for (int i = 0; i < b.n_bind; i++)
                if (!b.bind[i].write)
                    g->stats.bytes_read += b.bind[i].owner->st.bytes;
            for (int j = 0; j < n_outs; j++) {
                outs_k[j]->owner->live = true;
                g->stats.bytes_written += graph_nbytes(outs_k[j]);
            }
            if (timers) {
                g->ktimes[k].name = pk->name;
                g->ktimes[k].dispatches = b.n_disp;
            }
        }
        kb_free(&b);
        for (int r = p->rel_start[k]; st == GLESC_OK && r < p->rel_start[k + 1]; r++)
            graph_storage_free(ord.nodes[p->rel_nodes[r]]);
    }
    if (st == GLESC_OK) {
        g->stats.kernels = p->n_kernels;
        for (int i = 0; i < n; i++)
            if (outs[i]->owner->op != GLESC_OP_NONE && (st = keep_output(g, outs[i]->owner)))
                break;
    }
    /* whatever is still held and not an output goes back (also after errors) */
    if (st != GLESC_OK)
        g->n_kept = 0;
    for (int i = 0; i < ord.n; i++) {
        glesc_tensor *t = ord.nodes[i];
        if (t->owner != t || t->op == GLESC_OP_NONE || !t->live)
            continue;
        bool kept = false;
        for (int q = 0; q < g->n_kept; q++)
            kept |= g->kept[q] == t;
        if (!kept)
            graph_storage_free(t);
    }
    if (timers) {
        uint64_t ts = t_gpu0 - cs->trace_t0;
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
    }
    glesc_context_stats(ctx, &cst1);
    g->stats.programs_compiled = (int)(cst1.programs_compiled - cst0.programs_compiled);
    g->stats.cpu_ns = core_time_ns() - t_start;
    g->stats.kernel_times = g->ktimes;
    g->stats.n_kernel_times = g->n_ktimes;
    if (cs->trace) {
        trace_event(cs, "glesc_graph_compute", 2, t_start - cs->trace_t0, g->stats.cpu_ns, NULL);
        fflush(cs->trace);
    }
    graph_order_free(&ord);
    return st;
}
