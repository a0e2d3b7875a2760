/*
 * fuse.c — the fusion pass: groups the nodes of a compute order into
 * kernels. It lives with code generation because what it may merge is what
 * the generators can absorb: each op's codegen row (codegen.c) says so
 * (prologue, epilogue, norm prologue, ...), and graph's semantic row only
 * what the op means (kind, in place, remapped coordinates, a row gather).
 *
 * Every elementwise or anchor node starts as its own kernel. Walking the
 * order, each edge P → C (P a source of C) may merge P's kernel into C's:
 *
 *  - C elementwise, P's kernel pure elementwise, same shape: P becomes part
 *    of C's expression (elementwise chains of any length, prologues of the
 *    other operands of an epilogue).
 *  - C elementwise, P's kernel has an anchor that takes an epilogue, C's
 *    kernel pure elementwise, same shape: C's kernel becomes the anchor's
 *    epilogue (rms_norm → ·w → +r; matmul → +bias → silu; ...).
 *  - C an anchor taking a prologue on that source, P's kernel pure
 *    elementwise: P is computed where the anchor loads it (x + r → rms_norm;
 *    for matmul's activation at most MATMUL_PROLOGUE_MAX nodes, since every
 *    workgroup recomputes it).
 *  - both matmuls of the same activation with same-shaped weights (gate and
 *    up feeding silu(g)·u): one kernel computing both dot products; the
 *    second is the kernel's partner.
 *
 * Legality, for every merge: P has exactly one consumer, is not a requested
 * output, is not written in place (set_rows, cpy) and owns its memory (a
 * view is never fused as a producer: views are read through their strides;
 * a reshape or permute between a pure elementwise P and C is looked through,
 * since it only renames coordinates: rope → reshape → set_rows is one
 * kernel); the merged kernel binds
 * at most max_bindings buffers; and it must not read memory it writes (in
 * place ops into a tensor the kernel also reads).
 *
 * A kernel runs at the position of its out node: all external inputs of its
 * members come before that, and since every member but out has its one
 * consumer inside the kernel, merging never creates a cycle between kernels.
 *
 * Then passes over the kernels (their comments say more): fused row
 * writes (a KV-cache set_rows into the attention that reads it), grouped
 * matmuls (q, k, v), reductions as epilogues (an arg max over a GEMV's
 * rows), reduction prologues (a row norm folded into the anchor reading
 * it), and gathers computed where they are read (an embedding lookup with
 * no kernel of its own).
 */
#include <string.h>

#include "kernels/kernels.h"

typedef struct fk {
    glesc_tensor *anchor, *partner, *out;
    glesc_tensor *sib[KERNELS_MAX_SIB], *sib_out[KERNELS_MAX_SIB]; /* a grouped matmul */
    int n_sib;
    glesc_tensor *reduce; /* a reduction folded into the anchor's epilogue */
    int head, tail;       /* member list through next[] (order indices) */
    bool alive;
} fk;

typedef struct fuse_state {
    glesc_tensor **order;
    int n;
    fk *k;
    int *next;
    int max_bindings;
    const int *budget; /* per order index: the most a kernel holding it binds, or NULL */
    unsigned fusion;   /* kernels_fuse's flags */
    int nk;            /* kernels created (k[0..nk)), dead ones included */
} fuse_state;

static bool is_inplace_dst(const glesc_tensor *m, int s)
{
    const graph_op_info *info = graph_op(m->op);
    return info->inplace &&
           ((m->op == GLESC_OP_SET_ROWS && s == 0) || (m->op == GLESC_OP_CPY && s == 1));
}

/* The owners kernel k writes (its out's and its siblings' outs'); returns
 * how many were added to w (at most 1 + KERNELS_MAX_SIB). */
static int written_by(const fk *k, glesc_tensor **w)
{
    int n = 0;
    w[n++] = k->out->owner;
    for (int i = 0; i < k->n_sib; i++)
        w[n++] = k->sib_out[i]->owner;
    return n;
}

/* Distinct owners read by kernels a ∪ b, and whether one of the written
 * owners (written[0..n_written)) is among them. Returns the binding count
 * (reads and writes), or -1 on an overlap. */
static int count_bindings(fuse_state *fs, int a, int b, glesc_tensor *const *written, int n_written)
{
    glesc_tensor *seen[64], *loads[KB_MAX_FUSED_LOADS];
    int n_seen = 0, n_loads = 0;
    int ks[2] = {a, b};
    for (int j = 0; j < 2; j++) {
        if (ks[j] < 0)
            continue;
        for (int i = fs->k[ks[j]].head; i >= 0; i = fs->next[i]) {
            glesc_tensor *m = fs->order[i];
            /* the sources of m, and of the gathers m computes where it
             * reads them (kernels_gather_inline) */
            glesc_tensor *reads[GRAPH_MAX_SRC * (1 + GRAPH_MAX_SRC)];
            int n_reads = 0;
            for (int s = 0; s < m->n_src; s++) {
                glesc_tensor *x = m->src[s];
                if (!x || is_inplace_dst(m, s))
                    continue;
                if (!kernels_gather_inline(x)) {
                    reads[n_reads++] = x;
                    continue;
                }
                for (int q = 0; q < x->n_src; q++)
                    if (x->src[q])
                        reads[n_reads++] = x->src[q];
            }
            for (int r = 0; r < n_reads; r++) {
                glesc_tensor *x = reads[r];
                if (x->kernel >= 0 && (x->kernel == a || x->kernel == b))
                    continue; /* computed inside */
                glesc_tensor *o = x->owner;
                for (int q = 0; q < n_written; q++)
                    if (o == written[q])
                        return -1;
                bool dup = false;
                for (int q = 0; q < n_loads; q++)
                    dup |= loads[q] == x;
                if (!dup) {
                    if (n_loads == KB_MAX_FUSED_LOADS)
                        return 1 << 20;
                    loads[n_loads++] = x;
                }
                dup = false;
                for (int q = 0; q < n_seen; q++)
                    dup |= seen[q] == o;
                if (!dup) {
                    if (n_seen == (int)CORE_ARRAY_LEN(seen))
                        return 1 << 20;
                    seen[n_seen++] = o;
                }
            }
        }
    }
    int extra = 0;
    for (int j = 0; j < 2; j++) {
        if (ks[j] >= 0 && fs->k[ks[j]].anchor)
            extra += kernels_op(fs->k[ks[j]].anchor->op)->extra_bindings;
        if (ks[j] >= 0 && fs->k[ks[j]].reduce)
            extra++; /* the scratch of the workgroups' combine */
    }
    return n_seen + n_written + extra;
}

/* May kernels a and b (b < 0: a alone) as one kernel bind nb buffers (nb
 * from count_bindings; < 0: an overlap)? Within max_bindings and within the
 * budget of each of their members. */
static bool within(const fuse_state *fs, int a, int b, int nb)
{
    if (nb < 0 || nb > fs->max_bindings)
        return false;
    int ks[2] = {a, b};
    for (int j = 0; fs->budget && j < 2; j++)
        for (int i = ks[j] >= 0 ? fs->k[ks[j]].head : -1; i >= 0; i = fs->next[i])
            if (nb > fs->budget[i])
                return false;
    return true;
}

/* May kernels a and b become one that writes what kernel b writes (and,
 * with both, what a writes too: a group or pair whose outs all stay)? */
static bool fits_writing(fuse_state *fs, int a, int b, bool both)
{
    glesc_tensor *w[2 * (1 + KERNELS_MAX_SIB)];
    int nw = both ? written_by(&fs->k[a], w) : 0;
    nw += written_by(&fs->k[b], w + nw);
    return within(fs, a, b, count_bindings(fs, a, b, w, nw));
}

/* Does kernel k contain a node that reads its sources at other coordinates? */
static bool has_remap(fuse_state *fs, int k)
{
    for (int i = fs->k[k].head; i >= 0; i = fs->next[i])
        if (graph_op(fs->order[i]->op)->remaps)
            return true;
    return false;
}

#define MATMUL_PROLOGUE_MAX 3

unsigned kernels_fuse_skips(const char *list)
{
    static const char *const names[] = {"pair", "group", "norm", "prologue", "epilogue"};
    unsigned skip = 0;
    for (size_t i = 0; list && i < CORE_ARRAY_LEN(names); i++)
        if (strstr(list, names[i]))
            skip |= (unsigned)KERNELS_FUSE_SKIP_PAIR << i;
    return skip;
}

/* A fusion the flags leave out for matmuls of more than one column (any
 * prefill matmul, GEMV or GEMM: GLESC_FUSE_SKIP's tuning) or for the narrow
 * GEMM only (KERNELS_FUSE_NARROW_SKIPS), not a GEMV/GEMM choice (that is
 * kernels_matmul_gemv's). One column on the batch kernels counts as the
 * batch it runs the programs of (the first steps after a prompt,
 * graph_batch_kernels): their kernels are the prompt's. */
static bool gemm_skips(const fuse_state *fs, const glesc_tensor *mm, unsigned what)
{
    if (!mm || mm->op != GLESC_OP_MATMUL || (mm->src[1]->ne[1] <= 1 && !mm->batch_kernel))
        return false;
    return (fs->fusion & what) || ((fs->fusion & KERNELS_FUSE_NARROW_SKIPS(what)) &&
                                   mm->src[1]->ne[1] <= KERNELS_GEMM_SMALL_M &&
                                   !kernels_matmul_gemv(mm, (int)((fs->fusion >> 8) & 15u)));
}

/* Decode's gate/up pair left apart (KERNELS_FUSE_SPLIT_DECODE_PAIR): a
 * one-column GEMV whose weight type's paired kernel does not fit the
 * class's registers, where each GEMV alone does (Mali: docs/devices.md). */
static bool decode_pair_split(const fuse_state *fs, const glesc_tensor *mm)
{
    return (fs->fusion & KERNELS_FUSE_SPLIT_DECODE_PAIR) && mm->op == GLESC_OP_MATMUL &&
           mm->src[1]->ne[1] == 1 && !kernels_gemv_pair_lean(mm->src[0]);
}

/* A norm is not folded into a GEMM (kernels_matmul_gemv false under the
 * threshold in the flags) unless KERNELS_FUSE_GEMM_NORM: each of its row
 * tiles would load the norm's weight beside x and sum x's squares again, which
 * costs more than the norm's own kernel and its result read plainly (on the
 * H200 and on llvmpipe alike: docs/environment.md, GLESC_FUSE_GEMM_NORM). */
static bool gemm_norm_off(const fuse_state *fs, const glesc_tensor *mm)
{
    return !(fs->fusion & KERNELS_FUSE_GEMM_NORM) && mm->op == GLESC_OP_MATMUL &&
           !kernels_matmul_gemv(mm, (int)((fs->fusion >> 8) & 15u));
}

static int members(fuse_state *fs, int k)
{
    int n = 0;
    for (int i = fs->k[k].head; i >= 0; i = fs->next[i])
        n++;
    return n;
}

static bool same_matmul_pair(const glesc_tensor *a, const glesc_tensor *b)
{
    if (a->op != GLESC_OP_MATMUL || b->op != GLESC_OP_MATMUL)
        return false;
    const glesc_tensor *wa = a->src[0], *wb = b->src[0];
    return a->src[1] == b->src[1] && wa->dtype == wb->dtype && graph_same_shape(wa, wb);
}

static void try_merge(fuse_state *fs, glesc_tensor *p, glesc_tensor *c, int s)
{
    /* A reshape or permute between P and C only renames coordinates: P may
     * still be computed inside C's kernel, at the remapped coordinates, as
     * long as P's kernel is pure elementwise (an anchor's value exists only
     * at its own coordinates). Strided views and broadcasts stay leaves. */
    glesc_tensor *view = NULL;
    if (graph_op(p->op)->kind == GRAPH_KIND_VIEW) {
        if ((p->op != GLESC_OP_RESHAPE && p->op != GLESC_OP_PERMUTE) || p->n_consumers != 1 ||
            p->is_output || p->kernel >= 0 || !p->src[0])
            return;
        view = p;
        p = p->src[0];
    }
    int kp = p->kernel, kc = c->kernel;
    if (kp < 0 || kc < 0 || kp == kc)
        return;
    fk *KP = &fs->k[kp], *KC = &fs->k[kc];
    const graph_op_info *ip = graph_op(p->op), *ic = graph_op(c->op);
    if (KP->out != p || p->is_output || p->n_consumers != 1 || ip->inplace || p->owner != p)
        return;
    if (view && KP->anchor)
        return;
    const glesc_tensor *seen = view ? view : p; /* what C reads */
    glesc_tensor *anchor, *partner;
    if (ic->kind == GRAPH_KIND_ELTWISE) {
        /* A source of another shape is read at C's coordinates only by a
         * node that computes them itself (a remap: pad, slice, gather,
         * concat); any other would broadcast it. Indices (i32: rope's
         * positions) stay loads from memory. */
        if (is_inplace_dst(c, s) ||
            (!graph_same_shape(seen, c) && (!ic->remaps || p->dtype == GLESC_DTYPE_I32)))
            return;
        if (!KP->anchor) {
            anchor = KC->anchor;
            partner = KC->partner;
        } else if (!KC->anchor) {
            if (!kernels_op(KP->anchor->op)->epilogue || has_remap(fs, kc) ||
                gemm_skips(fs, KP->anchor, KERNELS_FUSE_SKIP_EPILOGUE))
                return;
            anchor = KP->anchor;
            partner = KP->partner;
        } else if (!KP->partner && !KC->partner && same_matmul_pair(KC->anchor, KP->anchor) &&
                   !has_remap(fs, kc) && !has_remap(fs, kp) &&
                   !gemm_skips(fs, KC->anchor, KERNELS_FUSE_SKIP_PAIR) &&
                   !decode_pair_split(fs, KC->anchor)) {
            anchor = KC->anchor;
            partner = KP->anchor;
        } else {
            return;
        }
    } else if (ic->kind == GRAPH_KIND_ANCHOR) {
        if (c != KC->anchor || !((kernels_op(c->op)->prologue >> s) & 1u) || KP->anchor)
            return;
        /* matmul re-reads its activation in every workgroup: a prologue is
         * recomputed there, so only a short one pays */
        if (c->op == GLESC_OP_MATMUL && (members(fs, kp) > MATMUL_PROLOGUE_MAX ||
                                         gemm_skips(fs, c, KERNELS_FUSE_SKIP_PROLOGUE)))
            return;
        anchor = KC->anchor;
        partner = KC->partner;
    } else {
        return;
    }
    if (view)
        view->kernel = kc; /* counted as inside */
    glesc_tensor *w[1 + KERNELS_MAX_SIB];
    int nw = written_by(KC, w);
    int nb = count_bindings(fs, kp, kc, w, nw);
    if (!within(fs, kp, kc, nb)) {
        if (view)
            view->kernel = -1;
        return;
    }
    /* merge KP (and the view) into KC */
    for (int i = KP->head; i >= 0; i = fs->next[i])
        fs->order[i]->kernel = kc;
    fs->next[KC->tail] = KP->head;
    KC->tail = KP->tail;
    if (view) {
        fs->next[KC->tail] = view->order;
        fs->next[view->order] = -1;
        KC->tail = view->order;
    }
    KC->anchor = anchor;
    KC->partner = partner;
    KP->alive = false;
}

/* Does t (a member of kernel k, or outside it) depend on node x within k? */
static bool depends_in(const glesc_tensor *t, const glesc_tensor *x, int k)
{
    if (t == x)
        return true;
    if (!t || t->kernel != k)
        return false;
    for (int s = 0; s < t->n_src; s++)
        if (depends_in(t->src[s], x, k))
            return true;
    return false;
}

/* Is every member of kernel k that depends on the norm nrm linear in it? */
static bool linear_in(fuse_state *fs, int k, const glesc_tensor *nrm)
{
    for (int i = fs->k[k].head; i >= 0; i = fs->next[i]) {
        const glesc_tensor *m = fs->order[i];
        if (m == nrm || !depends_in(m, nrm, k))
            continue;
        switch (m->op) {
        case GLESC_OP_MUL:
            if (depends_in(m->src[0], nrm, k) == depends_in(m->src[1], nrm, k))
                return false;
            break;
        case GLESC_OP_DIV:
            if (depends_in(m->src[1], nrm, k))
                return false;
            break;
        case GLESC_OP_NEG:
        case GLESC_OP_CONT:
            break;
        default:
            return false;
        }
    }
    return true;
}

static bool is_anchor_of(const fk *K, const glesc_tensor *t)
{
    if (t == K->anchor || t == K->partner)
        return true;
    for (int i = 0; i < K->n_sib; i++)
        if (t == K->sib[i])
            return true;
    return false;
}

/* Is every consumer of x one of kernel k's anchors, reading x where it
 * takes a norm prologue? (The norm's value exists only where the anchor
 * loads that source: not in its epilogue, not in another kernel.) */
static bool only_norm_consumers(fuse_state *fs, const glesc_tensor *x, int k)
{
    const fk *K = &fs->k[k];
    for (int i = x->order + 1; i < fs->n; i++) {
        const glesc_tensor *c = fs->order[i];
        for (int s = 0; s < c->n_src; s++)
            if (c->src[s] == x &&
                (!is_anchor_of(K, c) || !((kernels_op(c->op)->norm_prologue >> s) & 1u)))
                return false;
    }
    return true;
}

/* Moves kernel kp's members into kc (kc keeps its anchors and out). */
static void absorb(fuse_state *fs, int kp, int kc)
{
    fk *KP = &fs->k[kp], *KC = &fs->k[kc];
    for (int i = KP->head; i >= 0; i = fs->next[i])
        fs->order[i]->kernel = kc;
    fs->next[KC->tail] = KP->head;
    KC->tail = KP->tail;
    KP->alive = false;
}

/*
 * Reduction prologues: a kernel that computes a row norm (rms_norm with
 * its epilogue, e.g. ·w, and its elementwise prologue, e.g. x + r) whose
 * output only kernel C reads joins C, if C's anchor takes a norm prologue
 * (docs/graph.md). Where the anchor applies the scale to its own result
 * (matmul: it sums the squares of the norm's input in its k loop) only its
 * anchors may read the output, on a source where they take the norm, and
 * the path from the norm must be linear; elsewhere (attention: qwen3's
 * per-head q and k norms before rope) the scale is computed where the
 * value is loaded, a loop over the row. The output may have several
 * consumers (q, k and v of one grouped matmul; gate and up), as long as all
 * are in C, so this runs after the other merges.
 */
static void fold_norms(fuse_state *fs)
{
    for (int kp = 0; kp < fs->nk; kp++) {
        fk *KP = &fs->k[kp];
        const glesc_tensor *nrm = KP->anchor, *x = KP->out;
        if (!KP->alive || !nrm || !kernels_op(nrm->op)->row_scale || KP->partner || KP->n_sib ||
            x->is_output || x->owner != x || !graph_same_shape(nrm, x))
            continue;
        /* the kernel computing x's consumers (all in one) */
        int kc = -1;
        bool one = true;
        for (int i = x->order + 1; i < fs->n; i++)
            for (int s = 0; s < fs->order[i]->n_src; s++)
                if (fs->order[i]->src[s] == x) {
                    one &= fs->order[i]->kernel >= 0 && (kc < 0 || fs->order[i]->kernel == kc);
                    kc = fs->order[i]->kernel;
                }
        if (!one || kc < 0 || kc == kp || !fs->k[kc].alive || !fs->k[kc].anchor)
            continue;
        fk *KC = &fs->k[kc];
        const kernels_codegen *ia = kernels_op(KC->anchor->op);
        if (!ia->norm_prologue || gemm_skips(fs, KC->anchor, KERNELS_FUSE_SKIP_NORM) ||
            gemm_norm_off(fs, KC->anchor))
            continue;
        if (ia->norm_deferred) {
            /* the scale is applied to the anchor's result: only the
             * anchors may read x, linearly, where they take the norm */
            if (!only_norm_consumers(fs, x, kc) || !linear_in(fs, kp, nrm))
                continue;
            if (KC->anchor->op == GLESC_OP_MATMUL && members(fs, kp) - 1 > MATMUL_PROLOGUE_MAX)
                continue;
        } else {
            /* the scale is computed where the value is loaded: any member
             * of the kernel may read x, and the anchor on a source where it
             * takes a norm */
            bool ok = true;
            for (int i = x->order + 1; i < fs->n; i++) {
                const glesc_tensor *c = fs->order[i];
                for (int s = 0; s < c->n_src; s++)
                    if (c->src[s] == x && is_anchor_of(KC, c))
                        ok &= (kernels_op(c->op)->norm_prologue >> s) & 1u;
            }
            if (!ok)
                continue;
        }
        if (!fits_writing(fs, kp, kc, false))
            continue;
        absorb(fs, kp, kc);
    }
}

static int kpos(const fuse_state *fs, int k);

/* Does any kernel other than k1 and k2, running at a position in (lo,
 * hi), read or write memory of owner o? */
static bool owner_used_between(fuse_state *fs, const glesc_tensor *o, int k1, int k2, int lo,
                               int hi);

/*
 * Fused row writes: a set_rows (with its prologue, e.g. rope(k)) whose
 * result only an anchor that takes it (attention's k and v) reads, through
 * views, joins that anchor's kernel: the kernel writes the new rows itself
 * and computes them wherever it reads them (kb_row_writes_begin), so the
 * KV-cache write costs no dispatch of its own. The destination must be a
 * 2-D tensor of its own (a leaf: a cache) of an element type (a quantized
 * cache's rows are written by set_rows' own kernel, a block per
 * invocation), and no kernel in between may
 * touch it, since the write moves to the reader's position.
 */
static void fold_row_writes(fuse_state *fs)
{
    for (int kc = 0; kc < fs->nk; kc++) {
        fk *KC = &fs->k[kc];
        if (!KC->alive || !KC->anchor)
            continue;
        const glesc_tensor *a = KC->anchor;
        unsigned bits = kernels_op(a->op)->row_write_prologue;
        for (int s = 0; s < a->n_src; s++) {
            const glesc_tensor *x = a->src[s];
            if (!((bits >> s) & 1u) || !x)
                continue;
            bool ok = true;
            while (x && graph_op(x->op)->kind == GRAPH_KIND_VIEW) {
                ok &= x->n_consumers == 1 && !x->is_output && x->kernel < 0;
                x = x->src[0];
            }
            if (!ok || !x || x->op != GLESC_OP_SET_ROWS || x->kernel < 0 || x->kernel == kc)
                continue;
            int kp = x->kernel;
            fk *KP = &fs->k[kp];
            const glesc_tensor *dst = x->src[0], *idx = x->src[2];
            if (!KP->alive || KP->anchor != x || KP->out != x || KP->partner || KP->n_sib ||
                x->n_consumers != 1 || x->is_output || dst->op != GLESC_OP_NONE ||
                graph_dtype_quant(dst->dtype) || /* a block is quantized whole (rows.c) */
                dst->ne[2] * dst->ne[3] != 1 || idx->ne[1] * idx->ne[2] * idx->ne[3] != 1)
                continue;
            if (owner_used_between(fs, dst->owner, kp, kc, kpos(fs, kp), kpos(fs, kc)))
                continue;
            if (!fits_writing(fs, kp, kc, false))
                continue;
            absorb(fs, kp, kc);
        }
    }
}

/* Where kernel k runs: at its first out in the order. */
static int kpos(const fuse_state *fs, int k)
{
    const fk *K = &fs->k[k];
    int p = K->out->order;
    for (int i = 0; i < K->n_sib; i++)
        p = CORE_MIN(p, K->sib_out[i]->order);
    return p;
}

/* Could kernel k1's and k2's members run at position pos, in one kernel
 * whose workgroups compute either (a grouped matmul)? Every value they
 * read from memory must come from a kernel that runs before pos (so the
 * position order stays a topological order of the kernels), neither may
 * read the other's result (another workgroup computes it), and nothing they
 * read may be overwritten in place by a kernel they would now precede. */
static bool can_run_together(fuse_state *fs, int k1, int k2, int pos)
{
    int ks[2] = {k1, k2};
    for (int j = 0; j < 2; j++) {
        int old = kpos(fs, ks[j]);
        for (int i = fs->k[ks[j]].head; i >= 0; i = fs->next[i]) {
            const glesc_tensor *m = fs->order[i];
            for (int s = 0; s < m->n_src; s++) {
                const glesc_tensor *x = m->src[s];
                if (!x || x->kernel == ks[j])
                    continue;
                if (x->kernel == ks[1 - j])
                    return false;
                const glesc_tensor *y = x;
                while (graph_op(y->op)->kind == GRAPH_KIND_VIEW && y->src[0])
                    y = y->src[0];
                if (y->kernel >= 0 && kpos(fs, y->kernel) >= pos)
                    return false;
                for (int w = 0; w < fs->n; w++) {
                    const glesc_tensor *t = fs->order[w];
                    if (t->owner == x->owner && t != x->owner && graph_op(t->op)->inplace &&
                        t->kernel >= 0 && kpos(fs, t->kernel) >= pos && kpos(fs, t->kernel) < old)
                        return false;
                }
            }
        }
    }
    return true;
}

static bool owner_used_between(fuse_state *fs, const glesc_tensor *o, int k1, int k2, int lo,
                               int hi)
{
    for (int i = 0; i < fs->n; i++) {
        const glesc_tensor *t = fs->order[i];
        if (t->kernel < 0 || t->kernel == k1 || t->kernel == k2)
            continue;
        int p = kpos(fs, t->kernel);
        if (p <= lo || p >= hi)
            continue;
        if (t->owner == o)
            return true;
        for (int s = 0; s < t->n_src; s++)
            if (t->src[s] && t->src[s]->owner == o)
                return true;
    }
    return false;
}

/* May kernel k2's matmul join kernel k1's as a sibling? */
static bool can_group(fuse_state *fs, int k1, int k2)
{
    const fk *A = &fs->k[k1], *B = &fs->k[k2];
    const glesc_tensor *a = A->anchor, *b = B->anchor;
    if (!A->alive || !B->alive || k1 == k2 || !a || !b || a->op != GLESC_OP_MATMUL ||
        b->op != GLESC_OP_MATMUL || A->partner || B->partner || B->n_sib || A->reduce ||
        B->reduce || A->n_sib == KERNELS_MAX_SIB || a->src[1] != b->src[1] ||
        gemm_skips(fs, a, KERNELS_FUSE_SKIP_GROUP))
        return false;
    /* whole 2-D weights, one batch: a workgroup picks its matmul by row */
    const glesc_tensor *x = a->src[1];
    if (x->ne[2] * x->ne[3] != 1 || a->src[0]->ne[2] * a->src[0]->ne[3] != 1 ||
        b->src[0]->ne[2] * b->src[0]->ne[3] != 1)
        return false;
    /* each result in its own memory (not written in place into another
     * tensor: that write would move) */
    if (B->out->owner != B->out || A->out->owner != A->out)
        return false;
    if (!can_run_together(fs, k1, k2, CORE_MIN(kpos(fs, k1), kpos(fs, k2))))
        return false;
    return fits_writing(fs, k1, k2, true);
}

/*
 * Grouped matmuls: matmuls of the same activation with no common consumer
 * (q, k and v of an attention layer) become one kernel whose workgroups
 * pick their matmul by output row range; each keeps its own weight (any
 * type), epilogue and output. The first in the order is the kernel's
 * anchor, the others its siblings. One dispatch instead of three, and the
 * activation's norm can then fold into it (fold_norms).
 */
static void group_matmuls(fuse_state *fs)
{
    for (int k1 = 0; k1 < fs->nk; k1++)
        for (int k2 = k1 + 1; k2 < fs->nk && fs->k[k1].alive; k2++) {
            if (!can_group(fs, k1, k2))
                continue;
            fk *A = &fs->k[k1], *B = &fs->k[k2];
            A->sib[A->n_sib] = B->anchor;
            A->sib_out[A->n_sib] = B->out;
            A->n_sib++;
            absorb(fs, k2, k1);
        }
}

/*
 * Paired KV-cache writes: the set_rows of a layer's keys and values into
 * quantized caches (kernels of their own, never folded into the attention:
 * see fold_row_writes) become one kernel whose invocations pick their
 * write by index, the first in the order the anchor and the other its
 * sibling: one dispatch instead of two. Both take the same row indices,
 * write caches of their own, and nothing between them may touch either
 * cache, since the later write moves to the earlier one's position.
 */
static void pair_kv_writes(fuse_state *fs)
{
    for (int k1 = 0; k1 < fs->nk; k1++)
        for (int k2 = k1 + 1; k2 < fs->nk && fs->k[k1].alive; k2++) {
            fk *A = &fs->k[k1], *B = &fs->k[k2];
            const glesc_tensor *a = A->anchor, *b = B->anchor;
            if (!A->alive || !B->alive || !a || !b || a->op != GLESC_OP_SET_ROWS ||
                b->op != GLESC_OP_SET_ROWS || !graph_kv_quant(a->src[0]->dtype) ||
                !graph_kv_quant(b->src[0]->dtype) || A->n_sib || B->n_sib || A->partner ||
                B->partner || A->reduce || B->reduce || A->out != a || B->out != b ||
                a->src[2] != b->src[2] || a->src[0]->owner == b->src[0]->owner)
                continue;
            int lo = CORE_MIN(kpos(fs, k1), kpos(fs, k2)),
                hi = CORE_MAX(kpos(fs, k1), kpos(fs, k2));
            if (owner_used_between(fs, a->src[0]->owner, k1, k2, lo, hi) ||
                owner_used_between(fs, b->src[0]->owner, k1, k2, lo, hi) ||
                !can_run_together(fs, k1, k2, lo))
                continue;
            if (!fits_writing(fs, k1, k2, true))
                continue;
            A->sib[0] = B->anchor;
            A->sib_out[0] = B->out;
            A->n_sib = 1;
            absorb(fs, k2, k1);
        }
}

/*
 * Reductions as epilogues: an arg max along dimension 0 of a matmul's
 * result that is one column (the logits of one position: greedy sampling
 * on the GPU) joins the matmul's kernel, whose GEMV then keeps each
 * invocation's best row instead of storing the rows, and whose last
 * workgroup combines the workgroups' bests (no second dispatch, the rows
 * never reach memory). The matmul's result must be the arg max's only
 * reading (and no output), the matmul alone in its kernel's anchors (no
 * pair, no group); the arg max's own epilogue (a cpy into a persistent
 * tensor: the next step's token) comes along.
 */
static void fold_reductions(fuse_state *fs)
{
    for (int kr = 0; kr < fs->nk; kr++) {
        fk *KR = &fs->k[kr];
        glesc_tensor *r = KR->anchor;
        if (!KR->alive || !r || !kernels_op(r->op)->reduce_epilogue || r->ip[0] != 0 ||
            KR->partner || KR->n_sib || KR->reduce)
            continue;
        glesc_tensor *x = r->src[0];
        if (!x || x->kernel < 0 || x->kernel == kr)
            continue;
        int kp = x->kernel;
        fk *KP = &fs->k[kp];
        if (!KP->alive || !KP->anchor || !kernels_op(KP->anchor->op)->takes_reduce ||
            KP->out != x || KP->partner || KP->n_sib || KP->reduce || x->n_consumers != 1 ||
            x->is_output || x->owner != x || x->ne[1] * x->ne[2] * x->ne[3] != 1 ||
            KP->anchor->ne[1] * KP->anchor->ne[2] * KP->anchor->ne[3] != 1)
            continue;
        glesc_tensor *w[1 + KERNELS_MAX_SIB];
        int nw = written_by(KR, w);
        int nb = count_bindings(fs, kp, kr, w, nw);
        if (!within(fs, kp, kr, nb < 0 ? -1 : nb + 1)) /* + the combine's scratch */
            continue;
        absorb(fs, kr, kp);
        KP->out = KR->out;
        KP->reduce = r;
    }
}

bool kernels_gather_inline(const glesc_tensor *t)
{
    return t && graph_op(t->op)->gather && t->kernel < 0;
}

/*
 * Gathers computed where they are read: a get_rows (an embedding lookup)
 * whose table and indices are leaves in one buffer each, whose kernel is
 * itself alone, and whose every reader is a kernel member that reads it
 * through kb_expr (elementwise, or an anchor on a source it takes a
 * prologue on) keeps no kernel of its own: each kernel reading it computes
 * the rows it needs from the table (kernels_expr_gather): one dispatch less
 * per step. Not where a reader is a matmul's kernel: a model's first layer
 * would then have a q/k/v product and an output projection of its own,
 * programs the other layers' do not share, for a dispatch of a few
 * microseconds (stories260K on llvmpipe: two programs, 16 of a cold run's
 * 47 s of compiling; on Mali-G610 each is a q/k/v GEMM of 15 minutes in the
 * device harness). Runs last, over the final kernels; a reading kernel
 * must stay within the binding limit with the table and indices instead of
 * the gathered rows.
 */
static void inline_gathers(fuse_state *fs)
{
    for (int kg = 0; kg < fs->nk; kg++) {
        fk *K = &fs->k[kg];
        glesc_tensor *gr = K->anchor;
        if (!K->alive || !gr || !graph_op(gr->op)->gather || K->out != gr || K->head != K->tail ||
            gr->is_output || gr->owner != gr)
            continue;
        bool ok = true;
        for (int s = 0; s < gr->n_src; s++) {
            const glesc_tensor *x = gr->src[s];
            ok &= x && x->op == GLESC_OP_NONE && x->owner == x && x->st.n_chunks <= 1;
        }
        int readers[64], n_readers = 0;
        for (int i = gr->order + 1; ok && i < fs->n; i++) {
            const glesc_tensor *c = fs->order[i];
            const graph_op_info *ic = graph_op(c->op);
            for (int s = 0; ok && s < c->n_src; s++) {
                if (c->src[s] != gr)
                    continue;
                const fk *KC = c->kernel >= 0 ? &fs->k[c->kernel] : NULL;
                ok &= KC && c->kernel != kg && !(KC->anchor && KC->anchor->op == GLESC_OP_MATMUL) &&
                      (ic->kind == GRAPH_KIND_ELTWISE
                           ? !is_inplace_dst(c, s)
                           : ic->kind == GRAPH_KIND_ANCHOR &&
                                 ((kernels_op(c->op)->prologue >> s) & 1u));
                bool dup = false;
                for (int q = 0; ok && q < n_readers; q++)
                    dup |= readers[q] == c->kernel;
                if (ok && !dup) {
                    ok &= n_readers < (int)CORE_ARRAY_LEN(readers);
                    if (ok)
                        readers[n_readers++] = c->kernel;
                }
            }
        }
        if (!ok || !n_readers)
            continue;
        gr->kernel = -1; /* kernels_gather_inline from now on */
        for (int q = 0; ok && q < n_readers; q++) {
            glesc_tensor *w[1 + KERNELS_MAX_SIB];
            int nw = written_by(&fs->k[readers[q]], w);
            ok = within(fs, readers[q], -1, count_bindings(fs, readers[q], -1, w, nw));
        }
        if (!ok) {
            gr->kernel = kg;
            continue;
        }
        K->alive = false;
    }
}

void kernels_fuse(glesc_tensor **order, int n, unsigned fusion, int max_bindings, const int *budget,
                  kernels_kernel *kernels, int *n_kernels)
{
    fk *k = core_calloc((size_t)n + 1, sizeof *k);
    int *next = core_calloc((size_t)n + 1, sizeof *next);
    int *remap = core_calloc((size_t)n + 1, sizeof *remap);
    int nk = 0;
    if (!remap) {
        core_free(k);
        k = NULL;
    }
    for (int i = 0; i < n; i++) {
        glesc_tensor *t = order[i];
        graph_kind kind = graph_op(t->op)->kind;
        t->kernel = -1;
        if (!k || !next || (kind != GRAPH_KIND_ELTWISE && kind != GRAPH_KIND_ANCHOR))
            continue;
        k[nk] = (fk){.anchor = kind == GRAPH_KIND_ANCHOR ? t : NULL,
                     .out = t,
                     .head = i,
                     .tail = i,
                     .alive = true};
        next[i] = -1;
        t->kernel = nk++;
    }
    if (!k || !next) { /* no memory for fusion: one kernel per node, in order */
        for (int i = 0; i < n; i++) {
            graph_kind kind = graph_op(order[i]->op)->kind;
            if (kind != GRAPH_KIND_ELTWISE && kind != GRAPH_KIND_ANCHOR)
                continue;
            kernels[nk] = (kernels_kernel){
                .anchor = kind == GRAPH_KIND_ANCHOR ? order[i] : NULL, .out = order[i], .id = nk};
            order[i]->kernel = nk++;
        }
        *n_kernels = nk;
        core_free(k);
        core_free(next);
        core_free(remap);
        return;
    }
    fuse_state fs = {order, n, k, next, max_bindings, budget, fusion, nk};
    if (fusion & KERNELS_FUSE_ON)
        for (int i = 0; i < n; i++) {
            glesc_tensor *c = order[i];
            for (int s = 0; s < c->n_src && c->kernel >= 0; s++)
                if (c->src[s])
                    try_merge(&fs, c->src[s], c, s);
        }
    if (fusion & KERNELS_FUSE_ON) {
        fold_row_writes(&fs);
        group_matmuls(&fs);
        pair_kv_writes(&fs);
        fold_reductions(&fs);
        fold_norms(&fs);
        inline_gathers(&fs);
    }
    /* Surviving kernels in the order of their first out node; renumber. */
    int out_n = 0;
    for (int i = 0; i < nk; i++)
        remap[i] = -1;
    for (int i = 0; i < n; i++) {
        glesc_tensor *t = order[i];
        if (t->kernel < 0 || !k[t->kernel].alive || remap[t->kernel] >= 0 ||
            kpos(&fs, t->kernel) != i)
            continue;
        fk *f = &k[t->kernel];
        remap[t->kernel] = out_n;
        kernels_kernel *gk = &kernels[out_n];
        *gk = (kernels_kernel){.anchor = f->anchor,
                               .partner = f->partner,
                               .out = f->out,
                               .n_sib = f->n_sib,
                               .reduce = f->reduce,
                               .id = out_n};
        for (int j = 0; j < f->n_sib; j++) {
            gk->sib[j] = f->sib[j];
            gk->sib_out[j] = f->sib_out[j];
        }
        glesc_tensor *w[1 + KERNELS_MAX_SIB];
        int nw = written_by(f, w);
        gk->bindings = count_bindings(&fs, t->kernel, -1, w, nw);
        out_n++;
    }
    for (int i = 0; i < n; i++)
        if (order[i]->kernel >= 0)
            order[i]->kernel = remap[order[i]->kernel];
    *n_kernels = out_n;
    core_free(remap);
    core_free(k);
    core_free(next);
}
