/*
 * kb_expr.c — the kernel builder's reads (see kernels.h): strided loads of
 * leaves, reads of memory that fused row writes write (kb.c's stores), and
 * the expression walk that implements fusion (kb_expr): a member's value
 * computed inline from its sources, a folded row norm, a view's
 * coordinates mapped onto its source, an inlined gather.
 *
 * Indices. Every tensor access is `offset + Σ c_d · stride_d` in elements of
 * the owner's type, with offset and strides as uniforms and the stride of a
 * size-1 dimension set to 0: that one rule gives views (any strides),
 * broadcasting (stride 0) and plain contiguous tensors the same code, so a
 * program is independent of sizes and layouts.
 */
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"
#include "quant/quant.h"

/* ---- loads ---- */

static size_t owner_esize(const glesc_tensor *t)
{
    return graph_dtype_size(t->owner->dtype);
}

/* Sets up t's (a leaf's) binding and offset/stride uniforms "l<i>_o",
 * "l<i>_s0".. once per kernel; returns i. */
int kb_leaf(kb *b, const glesc_tensor *t)
{
    for (int i = 0; i < b->n_leaf; i++)
        if (b->leaf[i].t == t)
            return i;
    if (b->n_leaf >= KB_MAX_LEAF) {
        kb_fail(b, GLESC_ERROR_LIMIT, "kernel reads more than %d tensors", KB_MAX_LEAF);
        return 0;
    }
    if (t->owner->st.n_chunks > 1)
        kb_fail(b, GLESC_ERROR_UNSUPPORTED,
                "a tensor split into %d chunks can only be read by matmul (as the weight) and "
                "get_rows (as the table)",
                t->owner->st.n_chunks);
    int i = b->n_leaf++;
    b->leaf[i].t = t;
    b->leaf[i].binding = kb_binding(b, t->owner, 0, false);
    char name[24];
    snprintf(name, sizeof name, "l%d_o", i);
    if (graph_dtype_quant(t->owner->dtype)) { /* a KV cache's blocks: element indices */
        b->leaf[i].param = kb_param_u(b, name, (uint64_t)graph_quant_elem_offs(t));
        for (int d = 0; d < 4; d++) {
            snprintf(name, sizeof name, "l%d_s%d", i, d);
            kb_param_u(b, name, t->ne[d] == 1 ? 0 : (uint64_t)graph_quant_elem_stride(t, d));
        }
        snprintf(name, sizeof name, "l%d_n0", i);
        kb_param_u(b, name, (uint64_t)t->owner->ne[0]);
        snprintf(name, sizeof name, "l%d_rw", i);
        kb_param_u(b, name, graph_row_bytes(t->owner->dtype, t->owner->ne[0]) / 4);
        return i;
    }
    size_t es = owner_esize(t);
    b->leaf[i].param = kb_param_u(b, name, t->offs / es);
    for (int d = 0; d < 4; d++) {
        snprintf(name, sizeof name, "l%d_s%d", i, d);
        kb_param_u(b, name, t->ne[d] == 1 ? 0 : (uint64_t)t->nb[d] / es);
    }
    return i;
}

/* The word layout of a KV cache's block type (src/quant/gpu.c): a row's
 * blocks in groups of 8, each group the quants of its blocks (qw words a
 * block) and then their f16 scales (two a word), each array padded to 16
 * bytes; the last group of a row as long as its blocks need. gw: the words
 * of a full group. */
void kernels_kvq_layout(glesc_dtype t, uint32_t *qw, uint32_t *gw)
{
    *qw = (uint32_t)(quant_type(t)->block_bytes - 2) / 4;
    *gw = (uint32_t)(quant_gpu_row_bytes(t, 8 * 32) / 4);
}

/* `float kvq_t<bi>(uint e, uint n0, uint rw)`: element e of the q8_0 or
 * q4_0 tensor bound at bi, counted in a dense [n0, ...] array whose GPU rows
 * are rw words (attention's keys and values, read where they are: no
 * dequantized copy). q8_0: byte e % 32 of the block's quants, signed;
 * q4_0: byte (e % 32) % 16, low nibble for the first 16 elements; times d. */
static void kvq_helper(kb *b, glesc_dtype dt, int bi)
{
    if (!b->k)
        return;
    uint32_t qw, gw;
    kernels_kvq_layout(dt, &qw, &gw);
    char name[24];
    snprintf(name, sizeof name, "kvq_t%d", bi);
    sbuf f;
    sbuf_init(&f);
    sbuf_appendf(&f,
                 "// Element e of the %s KV cache in t%d (a row n0 elements, rw words):\n"
                 "// its block's group of 8, the quants (%u words a block), then the\n"
                 "// scales of the group's cnt blocks (f16, two a word).\n"
                 "float %s(uint e, uint n0, uint rw) {\n"
                 "    uint r = e / n0;\n"
                 "    uint c = e - r * n0;\n"
                 "    uint blk = c >> 5u;\n"
                 "    uint i = blk & 7u;\n"
                 "    uint g = blk >> 3u;\n"
                 "    uint cnt = min(8u, (n0 >> 5u) - g * 8u);\n"
                 "    uint base = r * rw + g * %uu;\n"
                 "    vec2 dd = unpackHalf2x16(t%d[base + cnt * %uu + (i >> 1u)]);\n"
                 "    float d = (i & 1u) == 0u ? dd.x : dd.y;\n"
                 "    uint l = c & 31u;\n",
                 glesc_dtype_name(dt), bi, qw, name, gw, bi, qw);
    if (dt == GLESC_DTYPE_Q8_0)
        sbuf_appendf(&f,
                     "    uint w = t%d[base + i * 8u + (l >> 2u)];\n"
                     "    return d * float(int(w << (24u - 8u * (l & 3u))) >> 24);\n"
                     "}\n",
                     bi);
    else
        sbuf_appendf(&f,
                     "    uint w = t%d[base + i * 4u + ((l & 15u) >> 2u)];\n"
                     "    uint q = (w >> (8u * (l & 3u) + 4u * (l >> 4u))) & 15u;\n"
                     "    return d * (float(q) - 8.0);\n"
                     "}\n",
                     bi);
    if (sbuf_str(&f))
        emit_kernel_helper(b->k, name, sbuf_str(&f));
    else
        kb_fail(b, GLESC_ERROR_OUT_OF_MEMORY, "KV cache loader");
    sbuf_free(&f);
}

/* "(l2_o + c0 * l2_s0 + ...)", leaving out literal-zero coordinates. */
void kb_index_expr(sbuf *out, const char *prefix, const char *const c[4])
{
    sbuf_appendf(out, "(%s_o", prefix);
    for (int d = 0; d < 4; d++)
        if (strcmp(c[d], "0u") != 0)
            sbuf_appendf(out, " + %s * %s_s%d", c[d], prefix, d);
    sbuf_append(out, ")");
}

/* `float var = <element ix of binding bi, of type dt>;` (decl false: an
 * assignment to an existing var). */
static void load_elem(kb *b, glesc_dtype dt, int bi, const char *ix, const char *var, bool decl)
{
    const char *f = decl ? "float " : "";
    switch (dt) {
    case GLESC_DTYPE_F32:
        kb_line(b, "%s%s = t%d[%s];", f, var, bi, ix);
        break;
    case GLESC_DTYPE_I32:
        kb_line(b, "%s%s = float(t%d[%s]);", f, var, bi, ix);
        break;
    case GLESC_DTYPE_F16:
    case GLESC_DTYPE_BF16: {
        if (b->k)
            emit_kernel_snippet(b->k, "common/f16");
        kb_line(b, "uint i%s = %s;", var, ix);
        kb_line(b, "%s%s = %s(t%d[i%s >> 1u], i%s);", f, var,
                dt == GLESC_DTYPE_F16 ? "f16_at" : "bf16_at", bi, var, var);
        break;
    }
    default:
        kb_fail(b, GLESC_ERROR_UNSUPPORTED, "no load for %s", glesc_dtype_name(dt));
    }
}

static int row_writer_of(const kb *b, const glesc_tensor *owner)
{
    for (int i = 0; i < b->n_rw; i++)
        if (b->rw[i].w->owner == owner)
            return i;
    return -1;
}

/* A load of memory a fused row write writes (kb_row_writes_begin): rows
 * this kernel writes are computed from the set_rows source, others read. */
static void load_written(kb *b, int w, const char *ix, const char *var)
{
    const glesc_tensor *sr = b->rw[w].w;
    kb_line(b, "uint e%s = %s;", var, ix);
    if (b->few_div && sr->src[1]->ne[1] == 1) {
        /* one row written (the structure hash's dimension of 1): its
         * elements are the rw<w>_row from its start on (rw<w>_find's
         * answer without the row's division) */
        int li = b->rw[w].idx_leaf;
        kb_line(b, "int p%s = t%d[l%d_o];", var, b->leaf[li].binding, li);
        kb_line(b, "uint c%s = e%s - rw%d_o - uint(p%s) * rw%d_row;", var, var, w, var, w);
        kb_line(b, "float %s;", var);
        kb_line(b, "if (p%s >= 0 && c%s < rw%d_row) {", var, var, w);
        kb_line(b, "uint q%s = 0u;", var);
    } else {
        kb_line(b, "uint r%s = (e%s - rw%d_o) / rw%d_row;", var, var, w, w);
        kb_line(b, "int n%s = rw%d_find(r%s);", var, w, var);
        kb_line(b, "float %s;", var);
        kb_line(b, "if (n%s >= 0) {", var);
        kb_line(b, "uint c%s = e%s - rw%d_o - r%s * rw%d_row;", var, var, w, var, w);
        kb_line(b, "uint q%s = uint(n%s);", var, var);
    }
    char col[24], row[24], v[16];
    snprintf(col, sizeof col, "c%s", var);
    snprintf(row, sizeof row, "q%s", var);
    const char *cs[4] = {col, row, "0u", "0u"};
    int memo = b->n_memo; /* values computed in the branch stay in it */
    b->depth++;
    kb_expr(b, sr->src[1], cs, v);
    b->depth--;
    b->n_memo = memo;
    /* exactly what the write stores: rounded to the destination's type
     * (the half's bits expanded by hand: a compiler may fold
     * unpackHalf2x16(packHalf2x16(x)) back into x) */
    if (sr->owner->dtype == GLESC_DTYPE_F16) {
        if (b->k)
            emit_kernel_helper(b->k, "f16_round",
                               "// x rounded to f16 as packHalf2x16 rounds it, back in f32.\n"
                               "float f16_round(float x) {\n"
                               "    uint h = packHalf2x16(vec2(x, 0.0)) & 0xffffu;\n"
                               "    uint s = (h & 0x8000u) << 16;\n"
                               "    uint e = (h >> 10) & 0x1fu;\n"
                               "    uint m = h & 0x3ffu;\n"
                               "    if (e == 0u) { // zero or subnormal: m · 2^-24\n"
                               "        float f = float(m) * 5.9604644775390625e-8;\n"
                               "        return s != 0u ? -f : f;\n"
                               "    }\n"
                               "    if (e == 31u) {\n"
                               "        return uintBitsToFloat(s | 0x7f800000u | (m << 13));\n"
                               "    }\n"
                               "    return uintBitsToFloat(s | ((e + 112u) << 23) | (m << 13));\n"
                               "}\n");
        kb_line(b, "%s = f16_round(%s);", var, v);
    } else if (sr->owner->dtype == GLESC_DTYPE_BF16)
        kb_line(b,
                "%s = uintBitsToFloat(((floatBitsToUint(%s) + 0x7fffu + ((floatBitsToUint(%s) >> "
                "16) & 1u)) >> 16) << 16);",
                var, v, v);
    else
        kb_line(b, "%s = %s;", var, v);
    kb_line(b, "} else {");
    char ev[24];
    snprintf(ev, sizeof ev, "e%s", var);
    if (b->rw_else)
        kb_line(b, "%s = %s;", var, b->rw_else);
    else
        load_elem(b, sr->owner->dtype, b->rw[w].binding, ev, var, false);
    kb_line(b, "}");
}

static void load_leaf(kb *b, const glesc_tensor *t, const char *const c[4], const char *var)
{
    int li = kb_leaf(b, t);
    int bi = b->leaf[li].binding;
    int w = b->rw_read_memory ? -1 : row_writer_of(b, t->owner);
    if (!b->k) {
        if (w >= 0) /* the source's uniforms, in build mode's order */
            load_written(b, w, "0u", var);
        return;
    }
    sbuf idx;
    sbuf_init(&idx);
    char prefix[16];
    snprintf(prefix, sizeof prefix, "l%d", li);
    kb_index_expr(&idx, prefix, c);
    const char *ix = sbuf_str(&idx) ? sbuf_str(&idx) : "0u";
    if (w >= 0)
        load_written(b, w, ix, var);
    else if (graph_dtype_quant(t->owner->dtype)) {
        kvq_helper(b, t->owner->dtype, bi);
        kb_line(b, "float %s = kvq_t%d(%s, l%d_n0, l%d_rw);", var, bi, ix, li, li);
    } else
        load_elem(b, t->owner->dtype, bi, ix, var, true);
    sbuf_free(&idx);
}

const char *kb_load_int(kb *b, const glesc_tensor *t, const char *const c[4], char buf[16])
{
    if (t->dtype != GLESC_DTYPE_I32)
        kb_fail(b, GLESC_ERROR_TYPE, "index tensor must be i32");
    int li = kb_leaf(b, t);
    kb_var(b, buf);
    if (b->k) {
        sbuf idx;
        sbuf_init(&idx);
        char prefix[16];
        snprintf(prefix, sizeof prefix, "l%d", li);
        kb_index_expr(&idx, prefix, c);
        kb_line(b, "int %s = t%d[%s];", buf, b->leaf[li].binding,
                sbuf_str(&idx) ? sbuf_str(&idx) : "0u");
        sbuf_free(&idx);
    }
    return buf;
}

bool kb_is_member(const kb *b, const glesc_tensor *t)
{
    const graph_op_info *info = graph_op(t->op);
    if (t->kernel != b->gk->id || t == b->gk->anchor || t == b->gk->partner)
        return false;
    for (int i = 0; i < b->gk->n_sib; i++)
        if (t == b->gk->sib[i])
            return false;
    return info->kind == GRAPH_KIND_ELTWISE || info->kind == GRAPH_KIND_VIEW ||
           kernels_op(t->op)->row_scale;
}

const glesc_tensor *kb_row_norm(const kb *b, const glesc_tensor *src)
{
    if (!src || !kb_is_member(b, src))
        return NULL;
    if (kernels_op(src->op)->row_scale)
        return src;
    for (int s = 0; s < src->n_src; s++) {
        const glesc_tensor *n = kb_row_norm(b, src->src[s]);
        if (n)
            return n;
    }
    return NULL;
}

void kb_row_norm_scale(kb *b, const glesc_tensor *norm, const char *var, const char *sq,
                       const char *len)
{
    if (!b->norm_eps_declared) {
        kb_param_f(b, "rn_eps", norm->fp[0]);
        b->norm_eps_declared = true;
    }
    kb_line(b, "float %s = inversesqrt(%s / float(%s) + rn_eps);", var, sq, len);
}

/* A folded row norm's value at c computed where it is loaded: its input
 * times the row's scale, a loop over the row (memoized per row within one
 * kb_expr). */
static const char *norm_inline(kb *b, const glesc_tensor *t, const char *const c[4], char out[16])
{
    char key[96], in[16], sc[16];
    snprintf(key, sizeof key, "norm,%s,%s,%s", c[1], c[2], c[3]);
    sc[0] = 0;
    for (int i = 0; i < b->n_memo; i++)
        if (b->memo[i].t == t && !strcmp(b->memo[i].coords, key))
            snprintf(sc, sizeof sc, "%s", b->memo[i].var);
    if (!sc[0]) {
        int id = b->n_fparam++;
        char pn[24], j[16], x[16], acc[16];
        snprintf(pn, sizeof pn, "nr%d_len", id);
        kb_param_u(b, pn, (uint64_t)t->ne[0]);
        snprintf(pn, sizeof pn, "nr%d_eps", id);
        kb_param_f(b, pn, t->fp[0]);
        kb_var(b, acc);
        snprintf(j, sizeof j, "nj%d", id);
        kb_line(b, "float %s = 0.0;", acc);
        kb_line(b, "for (uint %s = 0u; %s < nr%d_len; %s++) {", j, j, id, j);
        const char *cj[4] = {j, c[1], c[2], c[3]};
        int memo = b->n_memo; /* values of the loop body stay in it */
        b->depth++;
        kb_expr(b, t->src[0], cj, x);
        b->depth--;
        b->n_memo = memo;
        kb_line(b, "%s += %s * %s;", acc, x, x);
        kb_line(b, "}");
        kb_var(b, sc);
        kb_line(b, "float %s = inversesqrt(%s / float(nr%d_len) + nr%d_eps);", sc, acc, id, id);
        if (b->n_memo < KB_MAX_MEMO) {
            b->memo[b->n_memo].t = t;
            snprintf(b->memo[b->n_memo].coords, sizeof b->memo[b->n_memo].coords, "%s", key);
            snprintf(b->memo[b->n_memo].var, sizeof b->memo[b->n_memo].var, "%s", sc);
            b->n_memo++;
        }
    }
    b->depth++;
    kb_expr(b, t->src[0], c, in);
    b->depth--;
    kb_var(b, out);
    kb_line(b, "float %s = %s * %s; // %s", out, in, sc, graph_op(t->op)->name);
    return out;
}

/* A folded row norm's value at c: its input, with the scale deferred to the
 * anchor (see kb_row_norm), or computed here. */
static const char *norm_expr(kb *b, const glesc_tensor *t, const char *const c[4], char out[16])
{
    if (!kernels_op(b->gk->anchor->op)->norm_deferred)
        return norm_inline(b, t, c, out);
    b->depth++;
    kb_expr(b, t->src[0], c, out);
    b->depth--;
    snprintf(b->norm_in, sizeof b->norm_in, "%s", out);
    b->norm_evals++;
    return out;
}

/* A reshape or permute inside the kernel: the source's value at the
 * corresponding coordinates. */
static const char *view_expr(kb *b, const glesc_tensor *t, const char *const c[4], char out[16])
{
    const glesc_tensor *src = t->src[0];
    if (t->op == GLESC_OP_PERMUTE) {
        /* source dimension i is result dimension perm[i] */
        const char *cs[4] = {c[t->ip[0]], c[t->ip[1]], c[t->ip[2]], c[t->ip[3]]};
        return kb_expr(b, src, cs, out);
    }
    /* reshape: through the flat index */
    int id = b->n_fparam++;
    char pn[24], f[16];
    for (int d = 0; d < 3; d++) {
        snprintf(pn, sizeof pn, "rs%d_a%d", id, d);
        kb_param_u(b, pn, (uint64_t)t->ne[d]);
    }
    for (int d = 0; d < 3; d++) {
        snprintf(pn, sizeof pn, "rs%d_b%d", id, d);
        kb_param_u(b, pn, (uint64_t)src->ne[d]);
    }
    kb_var(b, f);
    kb_line(b, "uint %s = %s + rs%d_a0 * (%s + rs%d_a1 * (%s + rs%d_a2 * %s));", f, c[0], id, c[1],
            id, c[2], id, c[3]);
    char cs_[4][24];
    for (int d = 0; d < 4; d++)
        snprintf(cs_[d], sizeof cs_[d], "%s_%d", f, d);
    const char *cs[4] = {cs_[0], cs_[1], cs_[2], cs_[3]};
    if (b->few_div) {
        /* the source's dimensions of 1 (the structure hash's) have
         * coordinate 0 and take no division; its last other one is the
         * quotient as it is (f is below the product of the sizes) */
        int last = 0;
        for (int d = 0; d < 4; d++)
            if (src->ne[d] != 1)
                last = d;
        char q[24]; /* f divided by the sizes of the dimensions before d */
        snprintf(q, sizeof q, "%s", f);
        for (int d = last + 1; d < 4; d++)
            cs[d] = "0u";
        for (int d = 0; d <= last; d++) {
            if (src->ne[d] == 1) {
                cs[d] = "0u";
                continue;
            }
            if (d == last) {
                snprintf(cs_[d], sizeof cs_[d], "%s", q);
                break;
            }
            kb_line(b, "uint %s = %s %% rs%d_b%d;", cs_[d], q, id, d);
            char qn[24];
            snprintf(qn, sizeof qn, "%s_q%d", f, d + 1);
            kb_line(b, "uint %s = %s / rs%d_b%d;", qn, q, id, d);
            snprintf(q, sizeof q, "%s", qn);
        }
        return kb_expr(b, src, cs, out);
    }
    kb_line(b, "uint %s = %s %% rs%d_b0;", cs_[0], f, id);
    kb_line(b, "uint %s = (%s / rs%d_b0) %% rs%d_b1;", cs_[1], f, id, id);
    kb_line(b, "uint %s = (%s / rs%d_b0 / rs%d_b1) %% rs%d_b2;", cs_[2], f, id, id, id);
    kb_line(b, "uint %s = %s / rs%d_b0 / rs%d_b1 / rs%d_b2;", cs_[3], f, id, id, id);
    return kb_expr(b, src, cs, out);
}

const char *kb_expr(kb *b, const glesc_tensor *t, const char *const c[4], char out[16])
{
    if (t == b->cur_anchor && b->anchor_var) {
        snprintf(out, 16, "%s", b->anchor_var);
        return out;
    }
    if (t == b->gk->partner && b->partner_var) {
        snprintf(out, 16, "%s", b->partner_var);
        return out;
    }
    if (b->depth == 0) {
        b->n_memo = 0;
        b->norm_evals = 0;
    }
    char key[96];
    snprintf(key, sizeof key, "%s,%s,%s,%s", c[0], c[1], c[2], c[3]);
    for (int i = 0; i < b->n_memo; i++)
        if (b->memo[i].t == t && !strcmp(b->memo[i].coords, key)) {
            snprintf(out, 16, "%s", b->memo[i].var);
            return out;
        }
    if (kb_is_member(b, t) && kernels_op(t->op)->row_scale) {
        norm_expr(b, t, c, out);
    } else if (kb_is_member(b, t) && graph_op(t->op)->kind == GRAPH_KIND_VIEW) {
        b->depth++;
        view_expr(b, t, c, out);
        b->depth--;
    } else if (kb_is_member(b, t)) {
        sbuf e;
        sbuf_init(&e);
        b->depth++;
        kernels_op(t->op)->expr(b, t, c, &e);
        b->depth--;
        kb_var(b, out);
        kb_line(b, "float %s = %s; // %s", out, sbuf_str(&e) ? sbuf_str(&e) : "0.0",
                graph_op(t->op)->name);
        sbuf_free(&e);
    } else if (kernels_gather_inline(t)) {
        b->depth++;
        kernels_expr_gather(b, t, c, out);
        b->depth--;
    } else {
        if (t->kernel == b->gk->id && graph_op(t->op)->kind != GRAPH_KIND_ELTWISE)
            kb_fail(b, GLESC_ERROR_STATE, "kernel reads the anchor %s before it has a value",
                    glesc_op_name(t->op));
        kb_var(b, out);
        load_leaf(b, t, c, out);
    }
    if (b->n_memo < KB_MAX_MEMO) {
        b->memo[b->n_memo].t = t;
        snprintf(b->memo[b->n_memo].coords, sizeof b->memo[b->n_memo].coords, "%s", key);
        snprintf(b->memo[b->n_memo].var, sizeof b->memo[b->n_memo].var, "%s", out);
        b->n_memo++;
    }
    return out;
}
