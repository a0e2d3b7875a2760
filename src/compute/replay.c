/*
 * replay.c — a plan kernel's record: made from what its generator did in
 * bind mode, matched against a compute's sizes, checked (GLESC_PLAN_VERIFY)
 * and dispatched with the compute's buffers; exec.c runs the kernels.
 *
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
 * differ.
 */
#include <string.h>

#include "compute/compute.h"

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
bool compute_record_matches(const compute_plan *p, int k, const graph_order_t *ord)
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

/* Writes kernel k's parameter blocks into the plan's buffer: into its own
 * region when they fit, else into a new one at the end (the buffer grows by
 * doubling, keeping what it holds). */
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
glesc_status compute_record_make(glesc_context *ctx, compute_plan *p, int k,
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
glesc_status compute_record_verify(glesc_context *ctx, const compute_plan *p, int k,
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
glesc_status compute_record_dispatch(glesc_context *ctx, compute_plan *p, int k,
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
