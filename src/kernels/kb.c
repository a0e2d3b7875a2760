/*
 * kb.c — the kernel builder/binder every generator writes through (see
 * kernels.h): declarations and statements in build mode, recorded uniform
 * values and buffers in both modes, dispatches, and stores (f16/bf16
 * through 32-bit atomics), fused row writes and the scratch buffer. Loads
 * and the expression walk that implements fusion are kb_expr.c's.
 *
 * Indices. Every tensor access is `offset + Σ c_d · stride_d` in elements of
 * the owner's type, with offset and strides as uniforms and the stride of a
 * size-1 dimension set to 0 (kb_index_expr): views, broadcasting and plain
 * contiguous tensors get the same code.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

void kb_init(kb *b, glesc_context *ctx, const kernels_kernel *gk, emit_kernel *k, int max_bind)
{
    memset(b, 0, sizeof *b);
    b->ctx = ctx;
    b->gk = gk;
    b->k = k;
    b->max_bind = CORE_MIN(max_bind, KB_MAX_BIND);
    b->scratch_bind = -1;
}

void kb_free(kb *b)
{
    core_free(b->disp);
    b->disp = NULL;
}

glesc_status kb_fail(kb *b, glesc_status st, const char *fmt, ...)
{
    if (b->st != GLESC_OK)
        return b->st;
    va_list ap;
    va_start(ap, fmt);
    core_err_setv(&b->ctx->err, st, fmt, ap);
    va_end(ap);
    b->st = st;
    return st;
}

void kb_line(kb *b, const char *fmt, ...)
{
    if (!b->k)
        return;
    sbuf s;
    sbuf_init(&s);
    va_list ap;
    va_start(ap, fmt);
    sbuf_appendv(&s, fmt, ap);
    va_end(ap);
    if (sbuf_str(&s))
        emit_kernel_line(b->k, "%s", sbuf_str(&s));
    else
        kb_fail(b, GLESC_ERROR_OUT_OF_MEMORY, "kernel text: out of memory");
    sbuf_free(&s);
}

const char *kb_var(kb *b, char buf[16])
{
    snprintf(buf, 16, "v%d", b->n_var++);
    return buf;
}

static int add_param(kb *b, emit_param_type et, const char *name, gl_param v)
{
    if (b->n_param >= KB_MAX_PARAM) {
        kb_fail(b, GLESC_ERROR_LIMIT, "kernel needs more than %d uniforms", KB_MAX_PARAM);
        return 0;
    }
    if (b->k)
        emit_kernel_param(b->k, et, name);
    b->param[b->n_param] = v;
    return b->n_param++;
}

int kb_param_u(kb *b, const char *name, uint64_t v)
{
    if (v > UINT32_MAX)
        kb_fail(b, GLESC_ERROR_LIMIT, "kernel uniform %s = %llu does not fit 32 bits", name,
                (unsigned long long)v);
    return add_param(b, EMIT_PARAM_UINT, name, GL_PARAM_U(v));
}

int kb_param_i(kb *b, const char *name, int64_t v)
{
    if (v > INT32_MAX || v < INT32_MIN)
        kb_fail(b, GLESC_ERROR_LIMIT, "kernel uniform %s = %lld does not fit 32 bits", name,
                (long long)v);
    return add_param(b, EMIT_PARAM_INT, name, GL_PARAM_I(v));
}

int kb_param_f(kb *b, const char *name, float v)
{
    return add_param(b, EMIT_PARAM_FLOAT, name, GL_PARAM_F(v));
}

void kb_param_set_u(kb *b, int idx, uint64_t v)
{
    if (idx >= 0 && idx < b->n_param)
        b->param[idx] = GL_PARAM_U(v);
}

static emit_elem elem_of(glesc_dtype dt)
{
    switch (dt) {
    case GLESC_DTYPE_F32:
        return EMIT_FLOAT;
    case GLESC_DTYPE_I32:
        return EMIT_INT;
    default:
        return EMIT_UINT; /* f16/bf16 pairs and quant blocks as 32-bit words */
    }
}

static int bind_as(kb *b, glesc_tensor *owner, int chunk, bool write, emit_elem elem)
{
    for (int i = 0; i < b->n_bind; i++) {
        if (b->bind[i].owner != owner)
            continue;
        if (b->bind[i].write != write && !b->bind[i].rw)
            kb_fail(b, GLESC_ERROR_STATE,
                    "kernel would read and write the same memory (%s %s): the fusion pass "
                    "should have refused this",
                    glesc_op_name(owner->op), glesc_dtype_name(owner->dtype));
        if (b->bind[i].elem != (int)elem)
            kb_fail(b, GLESC_ERROR_STATE,
                    "kernel reads the memory of a %s tensor both as words and as uvec4",
                    glesc_dtype_name(owner->dtype));
        return i;
    }
    if (b->n_bind >= b->max_bind) {
        b->over_bind = true;
        kb_fail(b, GLESC_ERROR_LIMIT, "kernel needs more than %d storage buffers", b->max_bind);
        return 0;
    }
    int i = b->n_bind++;
    b->bind[i].owner = owner;
    b->bind[i].chunk = chunk;
    b->bind[i].write = write;
    b->bind[i].elem = (int)elem;
    if (b->k) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        unsigned access = write ? EMIT_RESTRICT : EMIT_READONLY | EMIT_RESTRICT;
        emit_kernel_binding(b->k, elem, access, name);
    }
    return i;
}

int kb_binding(kb *b, glesc_tensor *owner, int chunk, bool write)
{
    return bind_as(b, owner, chunk, write, elem_of(owner->dtype));
}

int kb_binding_uvec4(kb *b, glesc_tensor *owner, int chunk)
{
    return bind_as(b, owner, chunk, false, EMIT_UVEC4);
}

void kb_binding_set_chunk(kb *b, int idx, int chunk)
{
    if (idx >= 0 && idx < b->n_bind)
        b->bind[idx].chunk = chunk;
}

void kb_dispatch_groups(kb *b, uint32_t gx, uint32_t gy, uint32_t gz)
{
    if (b->k || b->st != GLESC_OK)
        return;
    if (b->n_disp == b->cap_disp) {
        int cap = b->cap_disp ? 2 * b->cap_disp : 2;
        kb_dispatch *d = core_realloc(b->disp, (size_t)cap * sizeof *d);
        if (!d) {
            kb_fail(b, GLESC_ERROR_OUT_OF_MEMORY, "dispatch list");
            return;
        }
        b->disp = d;
        b->cap_disp = cap;
    }
    kb_dispatch *d = &b->disp[b->n_disp];
    d->scratch_bind = b->scratch_bind;
    d->scratch_bytes = b->scratch_bytes;
    for (int i = 0; i < b->n_bind; i++) {
        glesc_tensor *o = b->bind[i].owner;
        if (!o) { /* the scratch buffer: the executor fills it in */
            d->bind[i] = (gl_binding){NULL, 0, 0, true};
            continue;
        }
        if (!o->st.n_chunks || b->bind[i].chunk >= o->st.n_chunks) {
            kb_fail(b, GLESC_ERROR_STATE, "kernel binds a %s tensor that has no memory",
                    glesc_op_name(o->op));
            return;
        }
        d->bind[i] = (gl_binding){o->st.chunks[b->bind[i].chunk], 0, 0, b->bind[i].write};
    }
    d->n_bind = b->n_bind;
    memcpy(d->param, b->param, (size_t)b->n_param * sizeof *b->param);
    d->n_param = b->n_param;
    d->groups[0] = gx;
    d->groups[1] = gy;
    d->groups[2] = gz;
    b->n_disp++;
}

int kb_workgroup(const kb *b, int want)
{
    const glesc_caps *c = &b->ctx->caps;
    int cap = CORE_MIN(want, CORE_MIN(c->max_compute_invocations, c->max_workgroup_size[0]));
    int wg = 1;
    while (wg * 2 <= cap)
        wg *= 2;
    return wg;
}

void kb_dispatch_1d(kb *b, uint64_t total)
{
    uint64_t x = total, y = 1;
    while (x > 65535) {
        y *= 2;
        x = (total + y - 1) / y;
    }
    kb_dispatch_groups(b, (uint32_t)x, (uint32_t)y, 1);
}

/* ---- tuning variables ---- */

void kernels_env_ints(const char *name, const char *const *keys, int *vals, int n, int min)
{
    const char *e = getenv(name);
    for (const char *p = e; p && *p;) {
        char key[16];
        int v, len = 0;
        if (sscanf(p, "%15[a-z]=%d%n", key, &v, &len) != 2 || len <= 0 || v < min)
            return;
        for (int i = 0; i < n; i++)
            if (!strcmp(key, keys[i]))
                vals[i] = v;
        p += len;
        p += *p == ',';
    }
}

/* ---- stores ---- */

static void store_elem(kb *b, glesc_dtype dt, int bi, const char *ix, const char *val);

/* Stores out (the kernel's out, or sibling `which`'s: which > 0) at c,
 * after its epilogue over anchor's value; its offset and strides are the
 * uniforms "o_o", "o_s0".. (or "o<which>_o"..), declared once. */
static void store_node(kb *b, int which, const glesc_tensor *out, const glesc_tensor *anchor,
                       const char *const c[4], const char *anchor_value, const char *partner_value)
{
    b->cur_anchor = anchor;
    b->anchor_var = anchor_value;
    b->partner_var = partner_value;
    char val[16];
    kb_expr(b, out, c, val);
    b->anchor_var = b->partner_var = NULL;
    b->cur_anchor = NULL;
    glesc_tensor *o = out->owner;
    int bi = kb_binding(b, o, 0, true);
    if (o->st.n_chunks > 1)
        kb_fail(b, GLESC_ERROR_UNSUPPORTED, "cannot write a tensor split into chunks");
    size_t es = graph_dtype_size(o->dtype);
    char prefix[8], name[16];
    if (which)
        snprintf(prefix, sizeof prefix, "o%d", which);
    else
        snprintf(prefix, sizeof prefix, "o");
    if (!b->out_declared[which]) {
        b->out_declared[which] = true;
        snprintf(name, sizeof name, "%s_o", prefix);
        kb_param_u(b, name, out->offs / es);
        for (int d = 0; d < 4; d++) {
            snprintf(name, sizeof name, "%s_s%d", prefix, d);
            kb_param_u(b, name, out->ne[d] == 1 ? 0 : (uint64_t)out->nb[d] / es);
        }
    }
    if (!b->k)
        return;
    sbuf idx;
    sbuf_init(&idx);
    kb_index_expr(&idx, prefix, c);
    store_elem(b, o->dtype, bi, sbuf_str(&idx) ? sbuf_str(&idx) : "0u", val);
    sbuf_free(&idx);
}

/* Element ix of binding bi (type dt) = val; f16/bf16 through atomics. */
static void store_elem(kb *b, glesc_dtype dt, int bi, const char *ix, const char *val)
{
    switch (dt) {
    case GLESC_DTYPE_F32:
        kb_line(b, "t%d[%s] = %s;", bi, ix, val);
        break;
    case GLESC_DTYPE_I32:
        kb_line(b, "t%d[%s] = int(%s);", bi, ix, val);
        break;
    case GLESC_DTYPE_F16:
    case GLESC_DTYPE_BF16:
        /* Two halves share a word: each invocation clears and sets only its
         * own half with atomics, so neighbours never overwrite each other. */
        kb_line(b, "uint i_%s = %s;", val, ix);
        if (dt == GLESC_DTYPE_F16) {
            kb_line(b, "uint h_%s = packHalf2x16(vec2(%s, 0.0)) & 0xffffu;", val, val);
        } else {
            kb_line(b, "uint u_%s = floatBitsToUint(%s);", val, val);
            kb_line(b,
                    "uint h_%s = (u_%s + 0x7fffu + ((u_%s >> 16) & 1u)) >> 16; // to nearest "
                    "even",
                    val, val, val);
        }
        kb_line(b, "atomicAnd(t%d[i_%s >> 1u], (i_%s & 1u) == 0u ? 0xffff0000u : 0x0000ffffu);", bi,
                val, val);
        kb_line(b, "atomicOr(t%d[i_%s >> 1u], h_%s << ((i_%s & 1u) * 16u));", bi, val, val, val);
        break;
    default:
        kb_fail(b, GLESC_ERROR_UNSUPPORTED, "no store for %s", glesc_dtype_name(dt));
    }
}

void kb_store_out(kb *b, const char *const c[4], const char *anchor_value,
                  const char *partner_value)
{
    store_node(b, 0, b->gk->out, b->gk->anchor, c, anchor_value, partner_value);
}

const char *kb_reduce_input(kb *b, const char *const c[4], const char *anchor_value,
                            const char *partner_value, char out[16])
{
    const glesc_tensor *r = b->gk->reduce;
    if (!r) {
        kb_fail(b, GLESC_ERROR_STATE, "kernel has no folded reduction");
        snprintf(out, 16, "0.0");
        return out;
    }
    b->cur_anchor = b->gk->anchor;
    b->anchor_var = anchor_value;
    b->partner_var = partner_value;
    kb_expr(b, r->src[0], c, out);
    b->anchor_var = b->partner_var = NULL;
    b->cur_anchor = NULL;
    return out;
}

void kb_store_reduced(kb *b, const char *const c[4], const char *value)
{
    if (!b->gk->reduce) {
        kb_fail(b, GLESC_ERROR_STATE, "kernel has no folded reduction");
        return;
    }
    store_node(b, 0, b->gk->out, b->gk->reduce, c, value, NULL);
}

void kb_store_sib(kb *b, int i, const char *const c[4], const char *value)
{
    if (i < 0 || i >= b->gk->n_sib) {
        kb_fail(b, GLESC_ERROR_STATE, "kernel has no sibling %d", i);
        return;
    }
    store_node(b, i + 1, b->gk->sib_out[i], b->gk->sib[i], c, value, NULL);
}

void kb_coords_from_flat(kb *b, const char *flat, const glesc_tensor *t, const char *prefix,
                         const char *name)
{
    char pn[24];
    for (int d = 0; d < 3; d++) {
        snprintf(pn, sizeof pn, "%s%d", prefix, d);
        kb_param_u(b, pn, (uint64_t)t->ne[d]);
    }
    kb_line(b, "uint %s0 = %s %% %s0;", name, flat, prefix);
    kb_line(b, "uint %s_r = %s / %s0;", name, flat, prefix);
    kb_line(b, "uint %s1 = %s_r %% %s1;", name, name, prefix);
    kb_line(b, "%s_r /= %s1;", name, prefix);
    kb_line(b, "uint %s2 = %s_r %% %s2;", name, name, prefix);
    kb_line(b, "uint %s3 = %s_r / %s2;", name, name, prefix);
}

/* ---- fused row writes and scratch ---- */

/* Collects the set_rows members reachable from t through views and
 * members (sources of this kernel's anchor). */
static void find_row_writers(kb *b, const glesc_tensor *t)
{
    if (!t)
        return;
    if (t->op == GLESC_OP_SET_ROWS && t->kernel == b->gk->id && t != b->gk->anchor) {
        for (int i = 0; i < b->n_rw; i++)
            if (b->rw[i].w == t)
                return;
        if (b->n_rw == KB_MAX_RW) {
            kb_fail(b, GLESC_ERROR_LIMIT, "kernel writes more than %d row sets", KB_MAX_RW);
            return;
        }
        b->rw[b->n_rw++].w = t;
        return;
    }
    if (graph_op(t->op)->kind == GRAPH_KIND_VIEW || kb_is_member(b, t))
        for (int s = 0; s < t->n_src; s++)
            find_row_writers(b, t->src[s]);
}

void kb_row_writes_begin(kb *b)
{
    const glesc_tensor *a = b->gk->anchor;
    for (int s = 0; a && s < a->n_src; s++)
        find_row_writers(b, a->src[s]);
    for (int w = 0; w < b->n_rw; w++) {
        const glesc_tensor *sr = b->rw[w].w, *dst = sr->src[0], *src = sr->src[1],
                           *idx = sr->src[2];
        glesc_tensor *o = sr->owner;
        if (o->st.n_chunks > 1 || dst->ne[2] * dst->ne[3] != 1 || idx->dtype != GLESC_DTYPE_I32) {
            kb_fail(b, GLESC_ERROR_STATE,
                    "fused set_rows: the destination must be a 2-D tensor "
                    "in one buffer");
            return;
        }
        /* read and written through one binding */
        int bi = kb_binding(b, o, 0, true);
        b->bind[bi].rw = true;
        b->rw[w].binding = bi;
        b->rw[w].idx_leaf = kb_leaf(b, idx);
        size_t es = graph_dtype_size(o->dtype);
        char pn[24];
        snprintf(pn, sizeof pn, "rw%d_o", w);
        kb_param_u(b, pn, dst->offs / es);
        snprintf(pn, sizeof pn, "rw%d_row", w);
        kb_param_u(b, pn, (uint64_t)dst->nb[1] / es);
        snprintf(pn, sizeof pn, "rw%d_s0", w);
        kb_param_u(b, pn, (uint64_t)dst->nb[0] / es);
        snprintf(pn, sizeof pn, "rw%d_rows", w);
        kb_param_u(b, pn, (uint64_t)dst->ne[1]);
        snprintf(pn, sizeof pn, "rw%d_ne0", w);
        kb_param_u(b, pn, (uint64_t)src->ne[0]);
        snprintf(pn, sizeof pn, "rw%d_n", w);
        kb_param_u(b, pn, (uint64_t)src->ne[1]);
        if (!b->k || (b->few_div && src->ne[1] == 1)) /* one row: no lookup (load_written) */
            continue;
        int li = b->rw[w].idx_leaf, pb = b->leaf[li].binding;
        /* Which source row (if any) writes destination row `row`: with
         * consecutive indices (a decode step's positions) one subtraction,
         * else a search from the last row (the last write wins, as on the
         * CPU). */
        sbuf h;
        sbuf_init(&h);
        if (b->lean)
            sbuf_appendf(&h,
                         "int rw%d_find(uint row) {\n"
                         "    int p0 = t%d[l%d_o];\n"
                         "    bool seq = true;\n"
                         "    for (uint q = 1u; q < rw%d_n; q++) {\n"
                         "        seq = seq && t%d[l%d_o + q * l%d_s0] == p0 + int(q);\n"
                         "    }\n"
                         "    int r = int(row) - p0;\n"
                         "    if (seq) {\n",
                         w, pb, li, w, pb, li, li);
        else
            sbuf_appendf(&h,
                         "bool rw%d_seq;\n"
                         "int rw%d_p0;\n"
                         "int rw%d_find(uint row) {\n"
                         "    int r = int(row) - rw%d_p0;\n"
                         "    if (rw%d_seq) {\n",
                         w, w, w, w, w);
        sbuf_appendf(&h,
                     "        return r >= 0 && r < int(rw%d_n) ? r : -1;\n"
                     "    }\n"
                     "    for (int q = int(rw%d_n) - 1; q >= 0; q--) {\n"
                     "        if (t%d[l%d_o + uint(q) * l%d_s0] == int(row)) {\n"
                     "            return q;\n"
                     "        }\n"
                     "    }\n"
                     "    return -1;\n"
                     "}\n",
                     w, w, pb, li, li);
        char name[24];
        snprintf(name, sizeof name, "rw%d_find", w);
        if (sbuf_str(&h))
            emit_kernel_helper(b->k, name, sbuf_str(&h));
        else
            kb_fail(b, GLESC_ERROR_OUT_OF_MEMORY, "kernel text: out of memory");
        sbuf_free(&h);
        if (b->lean)
            continue;
        kb_line(b, "rw%d_p0 = t%d[l%d_o];", w, pb, li);
        kb_line(b, "rw%d_seq = true;", w);
        kb_line(b, "for (uint q = 1u; q < rw%d_n; q++) {", w);
        kb_line(b, "rw%d_seq = rw%d_seq && t%d[l%d_o + q * l%d_s0] == rw%d_p0 + int(q);", w, w, pb,
                li, li, w);
        kb_line(b, "}");
    }
}

void kb_row_writes_store(kb *b, const char *id, const char *stride)
{
    for (int w = 0; w < b->n_rw; w++) {
        const glesc_tensor *sr = b->rw[w].w;
        char v[16], row[16];
        kb_line(b, "for (uint rwe = %s; rwe < rw%d_ne0 * rw%d_n; rwe += %s) {", id, w, w, stride);
        if (b->few_div && sr->src[1]->ne[1] == 1) { /* one row (kb's few_div) */
            kb_line(b, "uint rc0 = rwe;");
            kb_line(b, "uint rc1 = 0u;");
        } else {
            kb_line(b, "uint rc0 = rwe %% rw%d_ne0;", w);
            kb_line(b, "uint rc1 = rwe / rw%d_ne0;", w);
        }
        const char *ci[4] = {"rc1", "0u", "0u", "0u"};
        kb_load_int(b, sr->src[2], ci, row);
        kb_line(b, "if (%s >= 0 && %s < int(rw%d_rows)) { // rows outside are dropped", row, row,
                w);
        const char *cs[4] = {"rc0", "rc1", "0u", "0u"};
        kb_expr(b, sr->src[1], cs, v);
        if (b->k) {
            char ix[128];
            snprintf(ix, sizeof ix, "rw%d_o + uint(%s) * rw%d_row + rc0 * rw%d_s0", w, row, w, w);
            store_elem(b, sr->owner->dtype, b->rw[w].binding, ix, v);
        }
        kb_line(b, "}");
        kb_line(b, "}");
    }
}

int kb_scratch(kb *b, uint64_t bytes)
{
    b->scratch_bytes = bytes;
    if (b->scratch_bind >= 0)
        return b->scratch_bind;
    if (b->n_bind >= b->max_bind) {
        b->over_bind = true;
        kb_fail(b, GLESC_ERROR_LIMIT, "kernel needs more than %d storage buffers", b->max_bind);
        return 0;
    }
    int i = b->n_bind++;
    b->bind[i].owner = NULL;
    b->bind[i].chunk = 0;
    b->bind[i].write = true;
    b->bind[i].elem = EMIT_UINT;
    b->scratch_bind = i;
    if (b->k) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        emit_kernel_binding(b->k, EMIT_UINT, EMIT_COHERENT, name);
    }
    return i;
}
