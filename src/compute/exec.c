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

glesc_status compute_kernel_glsl(glesc_context *ctx, const graph_kernel *gk, const char *name,
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

glesc_status compute_kernel_bind(glesc_context *ctx, const graph_kernel *gk, int max_bind,
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
            st = compute_kernel_glsl(ctx, &gk, pk->name, max_bind, opts, &pk->glsl, NULL);
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

/* ---- Replay ----
 * A reused plan does not run its generators again: each kernel keeps the
 * dispatches its generator made in bind mode (a compute_record: bindings by
 * the owner's order index and chunk, uniform values, workgroup counts)
 * together with the sizes of its sig_nodes they were made for. A later
 * compute whose sizes for that kernel are the same dispatches the record
 * with this compute's buffers; one where they differ (a decode step's
 * attention over one more cached position) runs that kernel's generator in
 * bind mode and records again. A record's uniform values are parameter
 * blocks in the plan's uniform buffer, written when it records: a replayed
 * dispatch binds a range and writes nothing. GLESC_PLAN_VERIFY=1 runs the
 * generator for every replayed kernel too and fails where the values
 * differ. */

#define SIG_WORDS 13

static void sig_of(const glesc_tensor *t, int64_t *w)
{
    for (int d = 0; d < 4; d++) {
        w[d] = t->ne[d];
        w[4 + d] = t->nb[d];
    }
    w[8] = (int64_t)t->offs;
    uint32_t f[GRAPH_MAX_FP];
    memcpy(f, t->fp, sizeof f);
    w[9] = (int64_t)((uint64_t)f[0] << 32 | f[1]);
    w[10] = (int64_t)((uint64_t)f[2] << 32 | f[3]);
    w[11] = t->st.n_chunks;
    w[12] = t->st.chunk_rows;
}
_Static_assert(GRAPH_MAX_FP == 4, "sig_of packs four float params");

/* Are kernel k's sizes those its record was made for? */
static bool record_matches(const compute_plan *p, int k, const graph_order_t *ord)
{
    const compute_kernel *pk = &p->kernels[k];
    if (!pk->rec.valid)
        return false;
    const int *nodes = p->sig_nodes + pk->sig_start;
    for (int j = 0; j < pk->sig_count; j++) {
        int64_t w[SIG_WORDS];
        sig_of(ord->nodes[nodes[j]], w);
        if (memcmp(w, pk->rec.sig + (size_t)j * SIG_WORDS, sizeof w))
            return false;
    }
    return true;
}

/* Order index of a bound owner; -1 (message set) when it is not in ord. */
static int owner_node(glesc_context *ctx, const graph_order_t *ord, const glesc_tensor *o,
                      const char *name)
{
    if (o->order >= 0 && o->order < ord->n && ord->nodes[o->order] == o)
        return o->order;
    core_err_set(&ctx->err, GLESC_ERROR_STATE,
                 "kernel %s binds a %s tensor outside the compute order", name,
                 glesc_op_name(o->op));
    return -1;
}

/* Writes kernel k's parameter blocks into the plan's buffer: into its own
 * region when they fit, else into a new one at the end (the buffer grows by
 * doubling, keeping what it holds). */
/* need bytes at the end of the plan's params_buf (growing it by doubling,
 * keeping what it holds); *off their offset. */
static glesc_status params_region(glesc_context *ctx, compute_plan *p, uint64_t need, uint64_t *off)
{
    glesc_status st;
    if (p->params_used + need > p->params_size) {
        uint64_t size = CORE_MAX(p->params_size * 2, p->params_used + need);
        size = CORE_MAX(size, (uint64_t)4096);
        GLuint nb;
        if ((st = gl_param_buffer_create(ctx, size, &nb)) != GLESC_OK)
            return st;
        if (p->params_used &&
            (st = gl_param_buffer_copy(ctx, p->params_buf, nb, p->params_used)) != GLESC_OK) {
            gl_param_buffer_destroy(ctx, nb);
            return st;
        }
        gl_param_buffer_destroy(ctx, p->params_buf);
        p->params_buf = nb;
        p->params_size = size;
    }
    *off = p->params_used;
    p->params_used += need;
    return GLESC_OK;
}

static glesc_status record_write_blocks(glesc_context *ctx, compute_plan *p, int k)
{
    compute_record *r = &p->kernels[k].rec;
    uint64_t need = 0;
    for (int d = 0; d < r->n_disp; d++)
        if (r->disp[d].n_param)
            need += gl_param_block_stride(ctx, r->disp[d].n_param);
    if (need == 0)
        return GLESC_OK;
    glesc_status st = GLESC_OK;
    if (need > r->block_cap) {
        if ((st = params_region(ctx, p, need, &r->block0)) != GLESC_OK)
            return st;
        r->block_cap = need;
        r->block_use = 0; /* a region no dispatch read yet */
        r->alt_cap = 0;
    } else if (r->block_use > ctx->synced) {
        /* a dispatch that may still run reads the region: write the other
         * one (made now if there is none), waiting only if both may */
        if (r->alt_cap < need) {
            if ((st = params_region(ctx, p, r->block_cap, &r->alt0)) != GLESC_OK)
                return st;
            r->alt_cap = r->block_cap;
            r->alt_use = 0;
        }
        uint64_t b0 = r->block0, use = r->block_use, cap = r->block_cap;
        r->block0 = r->alt0;
        r->block_use = r->alt_use;
        r->block_cap = r->alt_cap;
        r->alt0 = b0;
        r->alt_use = use;
        r->alt_cap = cap;
        if ((st = gl_host_write_guard(ctx, r->block_use, "parameter blocks")) != GLESC_OK)
            return st;
    }
    unsigned char *staging = core_malloc((size_t)need);
    if (!staging)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "parameter blocks");
    uint64_t off = 0;
    for (int d = 0; d < r->n_disp; d++) {
        compute_rec_disp *rd = &r->disp[d];
        rd->block = r->block0 + off;
        if (!rd->n_param)
            continue;
        uint64_t stride = gl_param_block_stride(ctx, rd->n_param);
        memset(staging + off, 0, (size_t)stride);
        gl_param_block_pack(r->params + rd->param0, rd->n_param, staging + off);
        off += stride;
    }
    st = gl_param_buffer_write(ctx, p->params_buf, r->block0, staging, need);
    core_free(staging);
    return st;
}

/* Makes kernel k's record from b (its generator's bind-mode run). */
static glesc_status record_make(glesc_context *ctx, compute_plan *p, int k,
                                const graph_order_t *ord, const kb *b)
{
    compute_kernel *pk = &p->kernels[k];
    compute_record *r = &pk->rec;
    r->valid = false;
    int n_params = 0;
    for (int d = 0; d < b->n_disp; d++)
        n_params += b->disp[d].n_param;
    if (!r->sig && pk->sig_count)
        r->sig = core_calloc((size_t)pk->sig_count * SIG_WORDS, sizeof *r->sig);
    if (b->n_disp > r->cap_disp) {
        compute_rec_disp *nd = core_realloc(r->disp, (size_t)b->n_disp * sizeof *nd);
        if (nd) {
            r->disp = nd;
            r->cap_disp = b->n_disp;
        }
    }
    if (n_params > r->cap_params) {
        gl_param *np = core_realloc(r->params, (size_t)n_params * sizeof *np);
        if (np) {
            r->params = np;
            r->cap_params = n_params;
        }
    }
    if ((pk->sig_count && !r->sig) || b->n_disp > r->cap_disp || n_params > r->cap_params)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "kernel %s: dispatch record",
                            pk->name);
    r->n_kbind = b->n_bind;
    r->kbind_write_mask = 0;
    for (int i = 0; i < b->n_bind; i++) {
        if (!b->bind[i].owner) /* the scratch buffer: named by binding, not by node */
            r->kbind_node[i] = -1;
        else if ((r->kbind_node[i] = owner_node(ctx, ord, b->bind[i].owner, pk->name)) < 0)
            return ctx->err.status;
        r->kbind_write_mask |= (uint32_t)b->bind[i].write << i;
    }
    int q = 0;
    for (int d = 0; d < b->n_disp; d++) {
        const kb_dispatch *ds = &b->disp[d];
        compute_rec_disp *rd = &r->disp[d];
        rd->n_bind = ds->n_bind;
        rd->write_mask = 0;
        rd->scratch_bytes = ds->scratch_bytes;
        for (int i = 0; i < ds->n_bind; i++) {
            /* kb_dispatch_groups took binding i's buffer from bind[i]'s
             * owner and chunk at the time of the dispatch */
            int node = r->kbind_node[i];
            if (node < 0) {
                rd->bind_node[i] = -1;
                rd->bind_chunk[i] = 0;
                rd->write_mask |= (uint32_t)ds->bind[i].write << i;
                continue;
            }
            const graph_storage *st = &ord->nodes[node]->st;
            int chunk = 0;
            while (chunk < st->n_chunks && st->chunks[chunk] != ds->bind[i].buf)
                chunk++;
            if (chunk == st->n_chunks)
                return core_err_set(&ctx->err, GLESC_ERROR_STATE,
                                    "kernel %s: dispatch %d binds a buffer its binding %d does "
                                    "not own",
                                    pk->name, d, i);
            rd->bind_node[i] = node;
            rd->bind_chunk[i] = chunk;
            rd->write_mask |= (uint32_t)ds->bind[i].write << i;
        }
        rd->param0 = q;
        rd->n_param = ds->n_param;
        memcpy(r->params + q, ds->param, (size_t)ds->n_param * sizeof *ds->param);
        q += ds->n_param;
        memcpy(rd->groups, ds->groups, sizeof rd->groups);
    }
    r->n_disp = b->n_disp;
    r->n_params = q;
    glesc_status st = record_write_blocks(ctx, p, k);
    if (st != GLESC_OK)
        return st;
    const int *nodes = p->sig_nodes + pk->sig_start;
    for (int j = 0; j < pk->sig_count; j++)
        sig_of(ord->nodes[nodes[j]], r->sig + (size_t)j * SIG_WORDS);
    r->valid = true;
    return GLESC_OK;
}

/* GLESC_PLAN_VERIFY=1: the record replayed for kernel k equals what its
 * generator makes now (b). A difference means a generator read a size of a
 * node outside the kernel's sig_nodes. */
static glesc_status record_verify(glesc_context *ctx, const compute_plan *p, int k,
                                  const graph_order_t *ord, const kb *b)
{
    const compute_kernel *pk = &p->kernels[k];
    const compute_record *r = &pk->rec;
    if (b->n_disp != r->n_disp)
        return core_err_set(&ctx->err, GLESC_ERROR_STATE,
                            "plan replay (kernel %d): recorded with %d dispatches, its "
                            "generator now makes %d for the same sizes",
                            k, r->n_disp, b->n_disp);
    for (int d = 0; d < b->n_disp; d++) {
        const kb_dispatch *ds = &b->disp[d];
        const compute_rec_disp *rd = &r->disp[d];
        const char *what = NULL;
        int at = -1;
        if (ds->n_bind != rd->n_bind || ds->n_param != rd->n_param)
            what = "the number of bindings or uniforms";
        else if (memcmp(ds->groups, rd->groups, sizeof rd->groups))
            what = "the workgroup counts";
        if (!what && (ds->scratch_bind >= 0 ? ds->scratch_bytes : 0) !=
                         (ds->scratch_bind >= 0 ? rd->scratch_bytes : 0))
            what = "scratch size";
        for (int i = 0; !what && i < ds->n_bind; i++) {
            if (rd->bind_node[i] < 0 || i == ds->scratch_bind) {
                if (rd->bind_node[i] >= 0 || i != ds->scratch_bind) {
                    what = "binding";
                    at = i;
                }
                continue;
            }
            const graph_storage *st = &ord->nodes[rd->bind_node[i]]->st;
            if (rd->bind_chunk[i] >= st->n_chunks ||
                st->chunks[rd->bind_chunk[i]] != ds->bind[i].buf ||
                ((rd->write_mask >> i) & 1) != ds->bind[i].write) {
                what = "binding";
                at = i;
            }
        }
        for (int i = 0; !what && i < ds->n_param; i++) {
            const gl_param *x = &r->params[rd->param0 + i], *y = &ds->param[i];
            if (x->type != y->type || memcmp(&x->v, &y->v, sizeof x->v)) {
                what = "uniform";
                at = i;
            }
        }
        if (what) {
            char idx[16] = "";
            if (at >= 0)
                snprintf(idx, sizeof idx, " %d", at);
            return core_err_set(&ctx->err, GLESC_ERROR_STATE,
                                "plan replay (kernel %d), dispatch %d: the recorded %s%s "
                                "differs from what its generator makes for the same sizes",
                                k, d, what, idx);
        }
    }
    return GLESC_OK;
}

/* Dispatches kernel k's record with this compute's buffers. */
static glesc_status record_dispatch(glesc_context *ctx, compute_plan *p, int k,
                                    const graph_order_t *ord)
{
    compute_kernel *pk = &p->kernels[k];
    const compute_record *r = &pk->rec;
    for (int d = 0; d < r->n_disp; d++) {
        const compute_rec_disp *rd = &r->disp[d];
        gl_binding bind[KB_MAX_BIND];
        for (int i = 0; i < rd->n_bind; i++) {
            if (rd->bind_node[i] < 0) { /* the context's scratch buffer */
                gl_buffer *sb;
                glesc_status st = compute_scratch(ctx, rd->scratch_bytes, &sb);
                if (st != GLESC_OK)
                    return st;
                bind[i] = (gl_binding){sb, 0, 0, (rd->write_mask >> i) & 1};
                continue;
            }
            const glesc_tensor *o = ord->nodes[rd->bind_node[i]];
            if (rd->bind_chunk[i] >= o->st.n_chunks)
                return core_err_set(&ctx->err, GLESC_ERROR_STATE,
                                    "kernel binds a %s tensor that has no memory",
                                    glesc_op_name(o->op));
            bind[i] =
                (gl_binding){o->st.chunks[rd->bind_chunk[i]], 0, 0, (rd->write_mask >> i) & 1};
        }
        glesc_status st =
            gl_dispatch_block(ctx, pk->prog, bind, rd->n_bind, rd->n_param ? p->params_buf : 0,
                              rd->block, gl_param_block_size(rd->n_param), rd->groups);
        if (st != GLESC_OK)
            return st;
        if (rd->n_param)
            pk->rec.block_use = ctx->dispatches;
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
        if (t->op == GLESC_OP_MATMUL && t->src[1]->ne[1] >= 2 && t->src[1]->ne[1] <= 8)
            return true;
    return false;
}

/* Orders g for outs[0..n) and finds its plan, or makes and builds one:
 * what a compute does before its first dispatch. pp->ord is the caller's
 * to free, also on failure; pp->t0 is when the device profile (taken here
 * the first time a graph needs it) was done. */
static glesc_status prepare(glesc_graph *g, glesc_tensor *const *outs, int n, compute_prepared *pp)
{
    glesc_context *ctx = g->ctx;
    memset(pp, 0, sizeof *pp);
    pp->opts = g->opts;
    if (!pp->opts.gemv_max_m) {
        /* Only a matmul with 2..8 activation columns depends on the GEMV
         * threshold: take the device profile then (measured the first time),
         * before anything of this compute happens. */
        pp->opts.gemv_max_m = 8;
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
    /* GLESC_FUSE_SKIP: fusions left out for GEMMs; GLESC_FUSE_GEMM_NORM:
     * norms folded into GEMMs too (tuning, docs/environment.md) */
    unsigned fusion = opts->fusion > 0 || (opts->fusion == 0 && !core_env_flag("GLESC_NO_FUSION"))
                          ? GRAPH_FUSE_ON | graph_fuse_skips(core_env("GLESC_FUSE_SKIP")) |
                                (core_env_flag("GLESC_FUSE_GEMM_NORM") ? GRAPH_FUSE_GEMM_NORM : 0) |
                                GRAPH_FUSE_GEMV_MAX_M(opts->gemv_max_m)
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
        else
            st = build_programs(ctx, p, &pp->ord, max_bind, opts);
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
    if ((st = prepare(g, &out, 1, &pp)) != GLESC_OK) {
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

/* Is the prepared compute this one, with nothing changed since? */
static bool prepared_matches(const compute_state *cs, const glesc_graph *g,
                             glesc_tensor *const *outs, int n)
{
    const compute_prepared *pp = &cs->prep;
    return pp->valid && pp->g == g && n == 1 && outs[0] == pp->out && pp->gen == g->gen &&
           pp->computes == cs->computes;
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
        st = prepare(g, outs, n, &pp);
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
    for (int i = 0; i < ord.n && st == GLESC_OK; i++) {
        glesc_tensor *t = ord.nodes[i];
        graph_kind kind = graph_op(t->op)->kind;
        if (kind == GRAPH_KIND_LEAF && !t->written) {
            char sh[64];
            st = core_err_set(&ctx->err, GLESC_ERROR_STATE,
                              "glesc_graph_compute: input %s%s%s %s %s was never written",
                              t->name ? "'" : "", t->name ? t->name : "", t->name ? "'" : "",
                              graph_shape_str(t, sh, sizeof sh), glesc_dtype_name(t->dtype));
            break;
        }
        g->stats.nodes += kind == GRAPH_KIND_ELTWISE || kind == GRAPH_KIND_ANCHOR;
        g->stats.views += kind == GRAPH_KIND_VIEW;
    }
    trace_open(cs, t_start);
    bool timing = opts.timing || cs->trace;
    bool verify = core_env_flag("GLESC_PLAN_VERIFY");
    int max_bind = compute_max_bindings(ctx);
    glesc_stats cst0, cst1;
    glesc_context_stats(ctx, &cst0);
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
        if (abort_requested(ctx)) {
            st = core_err_set(&ctx->err, GLESC_ERROR_CANCELLED,
                              "glesc_graph_compute: cancelled by the abort callback before "
                              "kernel %d of %d (%s)",
                              k + 1, p->n_kernels, pk->name);
            break;
        }
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
        /* the generator runs only where the sizes changed (or to verify) */
        bool replay = record_matches(p, k, &ord);
        if (!replay || verify) {
            kb b;
            st = compute_kernel_bind(ctx, &gk, max_bind, &opts, &b);
            if (st == GLESC_OK)
                st = replay ? record_verify(ctx, p, k, &ord, &b) : record_make(ctx, p, k, &ord, &b);
            if (st == GLESC_OK && !replay)
                g->stats.kernels_bound++;
            kb_free(&b);
        }
        if (st == GLESC_OK && timers)
            st = gl_timer_begin(ctx, &timers[k]);
        if (st == GLESC_OK)
            st = record_dispatch(ctx, p, k, &ord);
        if (st == GLESC_OK && timers)
            st = gl_timer_end(ctx, &timers[k]);
        if (st != GLESC_OK) {
            core_err_prefix(&ctx->err, "kernel %s", pk->name);
            break;
        }
        const compute_record *rec = &pk->rec;
        g->stats.dispatches += rec->n_disp;
        for (int i = 0; i < rec->n_kbind; i++)
            if (rec->kbind_node[i] >= 0 && !((rec->kbind_write_mask >> i) & 1))
                g->stats.bytes_read += ord.nodes[rec->kbind_node[i]]->st.bytes;
        for (int j = 0; j < n_outs; j++) {
            outs_k[j]->owner->live = true;
            g->stats.bytes_written += graph_nbytes(outs_k[j]);
        }
        if (timers) {
            g->ktimes[k].name = pk->name;
            g->ktimes[k].dispatches = rec->n_disp;
        }
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
        /* the host's work before the first dispatch (order, plan, apply) */
        trace_event(cs, "plan", 3, t_start - cs->trace_t0, t_gpu0 - t_start, NULL);
        fflush(cs->trace);
    }
    graph_order_free(&ord);
    return st;
}
