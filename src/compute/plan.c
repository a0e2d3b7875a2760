/*
 * plan.c — the planner: the structure hash, plans (fusion, buffer
 * lifetimes) and their cache on the context, which lives in the context's
 * compute state (with the trace file and the device profile).
 *
 * The hash covers everything a kernel's text or the fusion decisions may
 * depend on: per node in order its op, type, rank, sources (by order
 * index), owner, integer params, whether it is an output or persistent,
 * which dimensions are 1, whether it has its sources' shapes, and the op's
 * codegen variant (kernels_variant); plus the options. Sizes are left out
 * on purpose: a decode step with one more cached position is the same
 * structure, and reuses the plan and its programs with new uniforms.
 *
 * Lifetimes: the memory of an intermediate goes back to the pool right
 * after the last kernel that reads it (views and in-place writes count as
 * reads of their owner), so the pool hands it to the next kernel's result
 * and peak memory stays near the widest set of live tensors.
 */
#include <string.h>

#include "compute/compute.h"

#define PLAN_CACHE_MAX 256

static void plan_free(glesc_context *ctx, compute_plan *p)
{
    if (!p)
        return;
    gl_param_buffer_destroy(ctx, p->params_buf);
    if (p->kernels)
        for (int k = 0; k < p->n_kernels; k++) {
            core_free(p->kernels[k].name);
            core_free(p->kernels[k].glsl);
            core_free(p->kernels[k].rec.sig);
            core_free(p->kernels[k].rec.disp);
            core_free(p->kernels[k].rec.params);
        }
    core_free(p->kernels);
    core_free(p->node_kernel);
    core_free(p->keep);
    core_free(p->rel_start);
    core_free(p->rel_nodes);
    core_free(p->sig_nodes);
    core_free(p->all_glsl);
    core_free(p);
}

void compute_plans_drop(glesc_context *ctx)
{
    compute_state *s = ctx->compute_state;
    if (!s)
        return;
    for (compute_plan *p = s->plans, *next; p; p = next) {
        next = p->next;
        plan_free(ctx, p);
    }
    s->plans = NULL;
    s->n_plans = 0;
    compute_prepared_drop(s);
    s->computes++;
}

static void state_free(glesc_context *ctx)
{
    compute_state *s = ctx->compute_state;
    if (!s)
        return;
    compute_plans_drop(ctx);
    if (s->trace) {
        fputs("\n]}\n", s->trace);
        fclose(s->trace);
    }
    gl_pool_release(ctx, s->scratch);
    core_free(s);
    ctx->compute_state = NULL;
}

compute_state *compute_state_get(glesc_context *ctx)
{
    if (!ctx->compute_state) {
        ctx->compute_state = core_calloc(1, sizeof(compute_state));
        if (ctx->compute_state)
            ctx->compute_state_free = state_free;
    }
    return ctx->compute_state;
}

core_hash128 compute_plan_key(const graph_order_t *ord, const glesc_graph_options *o,
                              unsigned fusion, int max_bindings)
{
    core_hasher *h = core_hasher_create();
    if (!h)
        return (core_hash128){0, 0};
    int32_t head[4] = {(int32_t)fusion, o->gemv_max_m, max_bindings, ord->n};
    core_hasher_update(h, head, sizeof head);
    bool debug = core_env_flag("GLESC_DEBUG_HASH");
    for (int i = 0; i < ord->n; i++) {
        const glesc_tensor *t = ord->nodes[i];
        const graph_op_info *info = graph_op(t->op);
        int32_t rec[12 + GRAPH_MAX_SRC + GRAPH_MAX_IP] = {0};
        int r = 0;
        rec[r++] = t->op;
        rec[r++] = t->dtype;
        rec[r++] = t->ndim;
        rec[r++] = t->owner->order;
        /* fusion never folds a gather from a table split into chunks */
        rec[r++] = (t->is_output ? 1 : 0) | (t->persistent ? 2 : 0) |
                   (t->persistent && t->st.n_chunks > 1 ? 4 : 0);
        int ones = 0, same = 0;
        for (int d = 0; d < 4; d++)
            ones |= (t->ne[d] == 1) << d;
        for (int s = 0; s < t->n_src; s++) {
            const glesc_tensor *x = t->src[s];
            rec[r++] = x ? x->order : -1;
            /* which sources have t's shape: the fusion pass asks this of
             * elementwise and anchor consumers only (a view's is chance) */
            if (x && info->kind != GRAPH_KIND_VIEW && graph_same_shape(x, t))
                same |= 1 << s;
        }
        rec[r++] = ones;
        rec[r++] = same;
        rec[r++] = (int32_t)kernels_variant(t, o);
        if (t->op != GLESC_OP_NONE)
            for (int p = 0; p < GRAPH_MAX_IP; p++)
                rec[r++] = t->ip[p];
        core_hasher_update(h, rec, sizeof rec);
        if (debug) {
            fprintf(stderr, "%3d %-10s", i, info->name);
            for (int q = 0; q < r; q++)
                fprintf(stderr, " %d", rec[q]);
            fprintf(stderr, "\n");
        }
    }
    core_hash128 key = core_hasher_digest(h);
    core_hasher_destroy(h);
    return key;
}

compute_plan *compute_plan_find(glesc_context *ctx, core_hash128 key)
{
    compute_state *s = compute_state_get(ctx);
    if (!s)
        return NULL;
    compute_plan *prev = NULL;
    for (compute_plan *p = s->plans; p; prev = p, p = p->next) {
        if (!core_hash128_eq(p->key, key))
            continue;
        if (prev) { /* move to the front */
            prev->next = p->next;
            p->next = s->plans;
            s->plans = p;
        }
        return p;
    }
    return NULL;
}

static char *kernel_name(const graph_order_t *ord, const kernels_kernel *gk)
{
    sbuf b;
    sbuf_init(&b);
    if (gk->anchor)
        sbuf_append(&b, glesc_op_name(gk->anchor->op));
    if (gk->partner)
        sbuf_appendf(&b, "+%s", glesc_op_name(gk->partner->op));
    for (int i = 0; i < gk->n_sib; i++)
        sbuf_appendf(&b, "+%s", glesc_op_name(gk->sib[i]->op));
    for (int i = 0; i < ord->n; i++) {
        const glesc_tensor *t = ord->nodes[i];
        bool sib = false;
        for (int j = 0; j < gk->n_sib; j++)
            sib |= t == gk->sib[j];
        if (t->kernel != gk->id || t == gk->anchor || t == gk->partner || sib)
            continue;
        sbuf_appendf(&b, "%s%s", b.len ? "+" : "", glesc_op_name(t->op));
    }
    return sbuf_take(&b);
}

/* Each kernel's sig_nodes: the nodes it computes, their sources and the
 * owners of both, once each. A generator in bind mode reads sizes, strides,
 * offsets and float params of exactly these (a view's own fields already
 * say where its chain of views lands) and the chunking of their owners. */
static bool plan_sig_nodes(compute_plan *p, const graph_order_t *ord)
{
    int n = ord->n, nk = p->n_kernels;
    int *by_kernel = core_calloc((size_t)n + 1, sizeof *by_kernel);
    int *start = core_calloc((size_t)nk + 2, sizeof *start);
    int *stamp = core_calloc((size_t)n + 1, sizeof *stamp);
    /* at most the node, its owner, and each source with its owner (and a
     * gather's sources with theirs) */
    p->sig_nodes = core_calloc((size_t)n * (2 + 2 * GRAPH_MAX_SRC * (1 + GRAPH_MAX_SRC)) + 1,
                               sizeof *p->sig_nodes);
    bool ok = by_kernel && start && stamp && p->sig_nodes;
    if (ok) {
        for (int i = 0; i < n; i++)
            if (p->node_kernel[i] >= 0)
                start[p->node_kernel[i] + 1]++;
        for (int k = 0; k < nk; k++)
            start[k + 1] += start[k];
        int *fill = stamp; /* used as the fill count first, then as stamps */
        for (int i = 0; i < n; i++)
            if (p->node_kernel[i] >= 0) {
                int k = p->node_kernel[i];
                by_kernel[start[k] + fill[k]++] = i;
            }
        for (int i = 0; i < n; i++)
            stamp[i] = -1;
        int m = 0;
#define SIG_ADD(t)                                                                                 \
    do {                                                                                           \
        int o_ = (t)->order;                                                                       \
        if (o_ >= 0 && o_ < n && stamp[o_] != k) {                                                 \
            stamp[o_] = k;                                                                         \
            p->sig_nodes[m++] = o_;                                                                \
        }                                                                                          \
    } while (0)
        for (int k = 0; k < nk; k++) {
            p->kernels[k].sig_start = m;
            for (int j = start[k]; j < start[k + 1]; j++) {
                const glesc_tensor *t = ord->nodes[by_kernel[j]];
                SIG_ADD(t);
                SIG_ADD(t->owner);
                for (int s = 0; s < t->n_src; s++)
                    if (t->src[s]) {
                        const glesc_tensor *x = t->src[s];
                        SIG_ADD(x);
                        SIG_ADD(x->owner);
                        /* a gather computed here: its table and indices */
                        for (int q = 0; kernels_gather_inline(x) && q < x->n_src; q++)
                            if (x->src[q]) {
                                SIG_ADD(x->src[q]);
                                SIG_ADD(x->src[q]->owner);
                            }
                    }
            }
            p->kernels[k].sig_count = m - p->kernels[k].sig_start;
        }
#undef SIG_ADD
    }
    core_free(by_kernel);
    core_free(start);
    core_free(stamp);
    return ok;
}

/* Rounds of fit_kernels that lower a kernel's budget by its excess before
 * the next one takes its members' fusion away. */
#define FIT_ROUNDS 3

/*
 * Fusion whose every kernel fits the device's storage-block limit, by
 * construction: the fusion pass counts what a merged kernel binds, but only
 * the generator knows for sure (a GEMM's split-K scratch, a GEMV's combine,
 * the loaders a weight type needs). So each kernel's GLSL is generated
 * here, counting its bindings against KB_MAX_BIND; a kernel over
 * max_bindings is split: fusion runs again with a budget for its members
 * lowered by the excess (after FIT_ROUNDS rounds, to none: each member its
 * own kernel). Only a single op that alone needs more than the device
 * allows is an error, naming it. The fitting kernels' GLSL goes to glsl[]
 * (build_programs compiles it). On success the nodes' kernels are set.
 */
static glesc_status fit_kernels(glesc_context *ctx, const graph_order_t *ord, unsigned fusion,
                                int max_bindings, const glesc_graph_options *opts,
                                kernels_kernel *gks, int *nk, char **names, char **glsl)
{
    int n = ord->n;
    int *budget = NULL;
    glesc_status st = GLESC_OK;
    for (int round = 0;; round++) {
        kernels_fuse(ord->nodes, n, fusion, max_bindings, budget, gks, nk);
        bool fits = true;
        for (int k = 0; k < *nk && st == GLESC_OK; k++) {
            int need = 0;
            if (!(names[k] = kernel_name(ord, &gks[k]))) {
                st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "graph plan");
                break;
            }
            st = compute_kernel_glsl(ctx, &gks[k], names[k], KB_MAX_BIND, opts, &glsl[k], &need);
            if (need <= max_bindings || (st != GLESC_OK && need <= KB_MAX_BIND))
                continue; /* fits, or failed for another reason */
            st = GLESC_OK;
            core_err_reset(&ctx->err);
            core_free(glsl[k]);
            glsl[k] = NULL;
            if (!budget) {
                if (!(budget = core_malloc((size_t)n * sizeof *budget))) {
                    st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "graph plan");
                    break;
                }
                for (int i = 0; i < n; i++)
                    budget[i] = max_bindings;
            }
            int lower =
                round < FIT_ROUNDS
                    ? gks[k].bindings - CORE_MAX(1, CORE_MIN(need, KB_MAX_BIND + 1) - max_bindings)
                    : 0;
            bool split = false;
            for (int i = 0; i < n; i++)
                if (ord->nodes[i]->kernel == k && budget[i] > 0) {
                    budget[i] = CORE_MAX(0, CORE_MIN(budget[i] - 1, lower));
                    split = true;
                }
            if (!split) {
                st = core_err_set(&ctx->err, GLESC_ERROR_LIMIT,
                                  "kernel %s needs %s%d storage buffers, the device allows %d "
                                  "(GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS)",
                                  names[k], need > KB_MAX_BIND ? "more than " : "",
                                  CORE_MIN(need, KB_MAX_BIND), max_bindings);
                break;
            }
            fits = false;
        }
        if (st != GLESC_OK || fits)
            break;
        for (int k = 0; k < *nk; k++) {
            core_free(names[k]);
            core_free(glsl[k]);
            names[k] = glsl[k] = NULL;
        }
    }
    core_free(budget);
    return st;
}

compute_plan *compute_plan_create(glesc_context *ctx, core_hash128 key, const graph_order_t *ord,
                                  unsigned fusion, int max_bindings,
                                  const glesc_graph_options *opts)
{
    compute_state *s = compute_state_get(ctx);
    int n = ord->n;
    compute_plan *p = core_calloc(1, sizeof *p);
    kernels_kernel *gks = core_calloc((size_t)n + 1, sizeof *gks);
    char **names = core_calloc((size_t)n + 1, sizeof *names);
    char **glsl = core_calloc((size_t)n + 1, sizeof *glsl);
    if (!s || !p || !gks || !names || !glsl)
        goto oom;
    p->key = key;
    p->n_nodes = n;
    if (fit_kernels(ctx, ord, fusion, max_bindings, opts, gks, &p->n_kernels, names, glsl) !=
        GLESC_OK)
        goto fail;
    int nk = p->n_kernels;
    p->kernels = core_calloc((size_t)nk + 1, sizeof *p->kernels);
    p->node_kernel = core_calloc((size_t)n + 1, sizeof *p->node_kernel);
    p->keep = core_calloc((size_t)n + 1, sizeof *p->keep);
    p->rel_start = core_calloc((size_t)nk + 2, sizeof *p->rel_start);
    p->rel_nodes = core_calloc((size_t)n + 1, sizeof *p->rel_nodes);
    int *last = core_calloc((size_t)n + 1, sizeof *last);
    if (!p->kernels || !p->node_kernel || !p->keep || !p->rel_start || !p->rel_nodes || !last) {
        core_free(last);
        goto oom;
    }
    for (int k = 0; k < nk; k++) {
        const kernels_kernel *gk = &gks[k];
        compute_kernel *pk = &p->kernels[k];
        pk->anchor = gk->anchor ? gk->anchor->order : -1;
        pk->partner = gk->partner ? gk->partner->order : -1;
        pk->out = gk->out->order;
        pk->n_sib = gk->n_sib;
        pk->reduce = gk->reduce ? gk->reduce->order : -1;
        for (int j = 0; j < gk->n_sib; j++) {
            pk->sib[j] = gk->sib[j]->order;
            pk->sib_out[j] = gk->sib_out[j]->order;
        }
        pk->name = names[k];
        pk->glsl = glsl[k];
        names[k] = glsl[k] = NULL;
    }
    /* lifetimes: the last kernel touching each owner's memory */
    for (int i = 0; i < n; i++)
        last[i] = -1;
    for (int i = 0; i < n; i++) {
        const glesc_tensor *t = ord->nodes[i];
        p->node_kernel[i] = t->kernel;
        if (t->is_output)
            p->keep[t->owner->order] = true;
        if (t->kernel < 0)
            continue;
        last[t->owner->order] = CORE_MAX(last[t->owner->order], t->kernel);
        for (int j = 0; j < t->n_src; j++)
            if (t->src[j])
                last[t->src[j]->owner->order] = CORE_MAX(last[t->src[j]->owner->order], t->kernel);
    }
    /* bucket the releasable owners by kernel (counting sort) */
    for (int i = 0; i < n; i++) {
        const glesc_tensor *t = ord->nodes[i];
        if (t->owner == t && t->op != GLESC_OP_NONE && !p->keep[i] && last[i] >= 0)
            p->rel_start[last[i] + 1]++;
    }
    for (int k = 0; k < nk; k++)
        p->rel_start[k + 1] += p->rel_start[k];
    int *fill = core_calloc((size_t)nk + 1, sizeof *fill);
    if (!fill) {
        core_free(last);
        goto oom;
    }
    for (int i = 0; i < n; i++) {
        const glesc_tensor *t = ord->nodes[i];
        if (t->owner == t && t->op != GLESC_OP_NONE && !p->keep[i] && last[i] >= 0)
            p->rel_nodes[p->rel_start[last[i]] + fill[last[i]]++] = i;
    }
    core_free(fill);
    core_free(last);
    core_free(gks);
    core_free(names);
    core_free(glsl);
    gks = NULL;
    names = glsl = NULL;
    if (!plan_sig_nodes(p, ord))
        goto oom;
    /* into the cache, evicting the least recently used */
    p->next = s->plans;
    s->plans = p;
    if (++s->n_plans > PLAN_CACHE_MAX) {
        compute_plan *q = s->plans;
        while (q->next && q->next->next)
            q = q->next;
        plan_free(ctx, q->next);
        q->next = NULL;
        s->n_plans--;
    }
    return p;

oom:
    core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "graph plan: out of memory");
fail:
    for (int k = 0; names && glsl && k < n; k++) {
        core_free(names[k]);
        core_free(glsl[k]);
    }
    core_free(names);
    core_free(glsl);
    core_free(gks);
    plan_free(ctx, p);
    return NULL;
}

void compute_plan_apply(const compute_plan *p, const graph_order_t *ord)
{
    for (int i = 0; i < ord->n; i++)
        ord->nodes[i]->kernel = p->node_kernel[i];
}

kernels_kernel compute_plan_kernel(const compute_plan *p, const graph_order_t *ord, int k)
{
    const compute_kernel *pk = &p->kernels[k];
    kernels_kernel gk = {
        .anchor = pk->anchor >= 0 ? ord->nodes[pk->anchor] : NULL,
        .partner = pk->partner >= 0 ? ord->nodes[pk->partner] : NULL,
        .out = ord->nodes[pk->out],
        .n_sib = pk->n_sib,
        .reduce = pk->reduce >= 0 ? ord->nodes[pk->reduce] : NULL,
        .id = k,
    };
    for (int j = 0; j < pk->n_sib; j++) {
        gk.sib[j] = ord->nodes[pk->sib[j]];
        gk.sib_out[j] = ord->nodes[pk->sib_out[j]];
    }
    return gk;
}
