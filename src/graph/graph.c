/*
 * graph.c — graph objects (create, reset, destroy, options) and the compute
 * order: a depth-first walk from the requested outputs, sources before
 * their consumers, each node once. The order is deterministic (outputs in
 * the given order, sources in argument order), which is what lets two
 * graphs of the same structure share a plan: node i of one is node i of
 * the other.
 */
#include <stdatomic.h>
#include <string.h>

#include "graph/graph.h"

static void default_options(glesc_graph_options *o)
{
    memset(o, 0, sizeof *o);
}

GLESC_API glesc_graph *glesc_graph_create(glesc_context *ctx)
{
    if (!ctx)
        return NULL;
    glesc_graph *g = core_calloc(1, sizeof *g);
    if (!g) {
        core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "glesc_graph_create: out of memory");
        return NULL;
    }
    g->ctx = ctx;
    g->gen = graph_gen_next();
    default_options(&g->opts);
    return g;
}

uint64_t graph_gen_next(void)
{
    static atomic_uint_fast64_t next;
    return (uint64_t)atomic_fetch_add(&next, 1) + 1;
}

GLESC_API glesc_context *glesc_graph_context(const glesc_graph *g)
{
    return g->ctx;
}

GLESC_API glesc_status glesc_graph_set_options(glesc_graph *g, const glesc_graph_options *opts)
{
    if (!g)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_graph_set_options: NULL");
    core_err_reset(&g->ctx->err);
    glesc_graph_options o; /* NULL: the defaults */
    glesc_status st = core_struct_read(&g->ctx->err, &o, sizeof o, opts, "glesc_graph_set_options");
    if (st != GLESC_OK)
        return st;
    if (o.gemv_max_m < 0 || o.gemv_max_m > GRAPH_GEMV_MAX_M)
        return core_err_set(&g->ctx->err, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_graph_set_options: gemv_max_m %d is not 0..%d", o.gemv_max_m,
                            GRAPH_GEMV_MAX_M);
    g->opts = o;
    g->gen = graph_gen_next();
    return GLESC_OK;
}

/* Gives back the memory of the last compute's outputs. */
void graph_release_kept(glesc_graph *g)
{
    for (int i = 0; i < g->n_kept; i++) {
        glesc_tensor *o = g->kept[i];
        if (!o->persistent && o->op != GLESC_OP_NONE)
            graph_storage_free(o);
    }
    g->n_kept = 0;
}

static void free_tensors(glesc_graph *g)
{
    graph_release_kept(g);
    for (glesc_tensor *t = g->tensors, *next; t; t = next) {
        next = t->next;
        graph_free_tensor(t);
    }
    g->tensors = NULL;
    g->gen = graph_gen_next();
    for (int i = 0; i < g->n_persist; i++)
        glesc_weight_free(g->persist[i]);
    g->n_persist = 0;
}

GLESC_API void glesc_graph_reset(glesc_graph *g)
{
    if (!g)
        return;
    gl_context_bind_for_free(g->ctx, "glesc_graph_reset");
    free_tensors(g);
}

GLESC_API void glesc_graph_destroy(glesc_graph *g)
{
    if (!g)
        return;
    gl_context_bind_for_free(g->ctx, "glesc_graph_destroy");
    free_tensors(g);
    core_free(g->persist);
    core_free(g->kept);
    core_free(g->ktimes);
    core_free(g);
}

GLESC_API void glesc_graph_stats(const glesc_graph *g, glesc_compute_stats *out)
{
    *out = g->stats;
}

GLESC_API const char *glesc_graph_last_glsl(const glesc_graph *g)
{
    return g->last_glsl;
}

/* ---- order ---- */

static void clear_marks(glesc_graph *g)
{
    for (glesc_tensor *t = g->tensors; t; t = t->next)
        t->order = -1;
    for (int i = 0; i < g->n_persist; i++)
        g->persist[i]->order = -1;
}

glesc_status graph_order(glesc_graph *g, glesc_tensor *const *outs, int n, graph_order_t *o)
{
    memset(o, 0, sizeof *o);
    clear_marks(g);
    int count = 0;
    for (glesc_tensor *t = g->tensors; t; t = t->next)
        count++;
    count += g->n_persist;
    for (int i = 0; i < n; i++)
        if (outs[i]->persistent) {
            outs[i]->order = -1;
            count++;
        }
    o->nodes = core_calloc((size_t)count + 1, sizeof *o->nodes);
    /* explicit stack of (tensor, next source to visit) */
    glesc_tensor **stack = core_calloc((size_t)count + 1, sizeof *stack);
    int *next_src = core_calloc((size_t)count + 1, sizeof *next_src);
    if (!o->nodes || !stack || !next_src) {
        core_free(o->nodes);
        core_free(stack);
        core_free(next_src);
        o->nodes = NULL;
        return core_err_set(&g->ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "graph order");
    }
    for (int i = 0; i < n; i++) {
        if (outs[i]->order != -1)
            continue;
        int sp = 0;
        stack[sp] = outs[i];
        next_src[sp] = 0;
        outs[i]->order = -2; /* on the stack */
        sp++;
        while (sp > 0) {
            glesc_tensor *t = stack[sp - 1];
            if (next_src[sp - 1] < t->n_src) {
                glesc_tensor *s = t->src[next_src[sp - 1]++];
                if (s && s->order == -1) {
                    s->order = -2;
                    stack[sp] = s;
                    next_src[sp] = 0;
                    sp++;
                }
                continue;
            }
            t->order = o->n;
            o->nodes[o->n++] = t;
            sp--;
        }
    }
    core_free(stack);
    core_free(next_src);
    return GLESC_OK;
}

void graph_order_free(graph_order_t *o)
{
    core_free(o->nodes);
    memset(o, 0, sizeof *o);
}

void graph_narrow_skips(glesc_graph *g, bool on)
{
    if (g->narrow_skips != on)
        g->gen = graph_gen_next(); /* a compute prepared before does not apply */
    g->narrow_skips = on;
}

void graph_batch_kernels(glesc_graph *g)
{
    for (glesc_tensor *t = g->tensors; t; t = t->next)
        if (t->op == GLESC_OP_MATMUL || t->op == GLESC_OP_ATTENTION)
            t->batch_kernel = true;
}
