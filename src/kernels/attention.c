/*
 * attention.c — fused attention: softmax(q·kᵀ·scale + mask) · v in one
 * kernel, for one query row (decode) or many (prefill), with grouped-query
 * heads (head h reads kv head h / (n_head / n_head_kv)).
 *
 * One workgroup per (query, head). The keys are walked in tiles of WG_SIZE:
 * each invocation scores one key (q is staged in shared memory), the
 * workgroup takes the tile's maximum, and the running state (max m, sum l,
 * output accumulators) is rescaled by exp(m_old - m_new) before the tile's
 * weighted values are added: the online softmax, numerically stable for any
 * logits and never storing a score row. Output dimensions are split across
 * invocations (DPT accumulators each, DPT = ceil(d_v / WG_SIZE): the op's
 * variant, so it is part of the plan's structure).
 *
 * q is read once per workgroup (into shared memory) through kb_expr, so an
 * elementwise prologue on it (rope, through the permute that makes q's
 * layout) costs nothing extra: rope(q) → attention is one kernel.
 */
#include <stdio.h>

#include "kernels/kernels.h"

#define ATTN_WG 64
#define ATTN_MAX_D 512

glesc_status kernels_gen_attention(kb *b)
{
    const glesc_tensor *a = b->gk->anchor;
    const glesc_tensor *q = a->src[0], *k = a->src[1], *v = a->src[2], *mask = a->src[3];
    bool causal = a->ip[0] != 0;
    int dpt = (int)((v->ne[0] + ATTN_WG - 1) / ATTN_WG);
    if (b->k) {
        emit_kernel_local_size(b->k, ATTN_WG, 1, 1);
        emit_kernel_shared(b->k, "float", "red_scratch", ATTN_WG);
        emit_kernel_shared(b->k, "float", "qs", ATTN_MAX_D);
        emit_kernel_shared(b->k, "float", "ps", ATTN_WG);
        emit_kernel_snippet(b->k, "common/reduce");
        emit_kernel_snippet(b->k, "graph/reduce");
        emit_kernel_snippet(b->k, "graph/eltwise");
        emit_kernel_define(b->k, "DPT", "%du", dpt);
        emit_kernel_comment(b->k,
                            "attention: one workgroup per (query, head), online softmax "
                            "over key tiles of WG_SIZE%s%s",
                            mask ? ", additive mask" : "", causal ? ", causal" : "");
    }
    kb_param_u(b, "D", (uint64_t)q->ne[0]);
    kb_param_u(b, "Dv", (uint64_t)v->ne[0]);
    kb_param_u(b, "Tk", (uint64_t)k->ne[1]);
    kb_param_u(b, "gqa", (uint64_t)(q->ne[2] / k->ne[2]));
    kb_param_f(b, "scale", a->fp[0]);
    if (causal)
        kb_param_i(b, "causal_off", k->ne[1] - q->ne[1]);
    kb_line(b, "uint i = gl_WorkGroupID.x; // query");
    kb_line(b, "uint h = gl_WorkGroupID.y; // head");
    kb_line(b, "uint hk = h / gqa;");
    kb_line(b, "uint lid = gl_LocalInvocationIndex;");
    char x[16];
    kb_line(b, "for (uint d = lid; d < D; d += WG_SIZE) {");
    const char *cq[4] = {"d", "i", "h", "0u"};
    kb_line(b, "qs[d] = %s * scale;", kb_expr(b, q, cq, x));
    kb_line(b, "}");
    kb_line(b, "memoryBarrierShared();");
    kb_line(b, "barrier();");
    kb_line(b, "float m = NEG_INF;");
    kb_line(b, "float l = 0.0;");
    kb_line(b, "float acc[DPT];");
    kb_line(b, "for (uint e = 0u; e < DPT; e++) {");
    kb_line(b, "acc[e] = 0.0;");
    kb_line(b, "}");
    kb_line(b, "for (uint t0 = 0u; t0 < Tk; t0 += WG_SIZE) {");
    kb_line(b, "uint j = t0 + lid;");
    kb_line(b, "float s = NEG_INF;");
    kb_line(b, "if (j < Tk) {");
    kb_line(b, "float dot = 0.0;");
    kb_line(b, "for (uint d = 0u; d < D; d++) {");
    const char *ck[4] = {"d", "j", "hk", "0u"};
    kb_line(b, "dot += qs[d] * %s;", kb_expr(b, k, ck, x));
    kb_line(b, "}");
    if (mask) {
        const char *cm[4] = {"j", "i", "h", "0u"};
        kb_line(b, "dot += %s;", kb_expr(b, mask, cm, x));
    }
    kb_line(b, "s = dot;");
    if (causal)
        kb_line(b, "s = int(j) > int(i) + causal_off ? NEG_INF : s;");
    kb_line(b, "}");
    kb_line(b, "float m_new = max(m, wg_reduce_max(s));");
    kb_line(b, "float p = s == NEG_INF ? 0.0 : exp(s - m_new);");
    kb_line(b, "float corr = m == NEG_INF ? 0.0 : exp(m - m_new);");
    kb_line(b, "ps[lid] = p;");
    kb_line(b, "l = l * corr + wg_reduce_sum(p); // its barriers also publish ps");
    kb_line(b, "uint tn = min(WG_SIZE, Tk - t0);");
    kb_line(b, "for (uint e = 0u; e < DPT; e++) {");
    kb_line(b, "uint d = lid + e * WG_SIZE;");
    kb_line(b, "float o = acc[e] * corr;");
    kb_line(b, "if (d < Dv) {");
    kb_line(b, "for (uint jj = 0u; jj < tn; jj++) {");
    const char *cv[4] = {"d", "(t0 + jj)", "hk", "0u"};
    kb_line(b, "o += ps[jj] * %s;", kb_expr(b, v, cv, x));
    kb_line(b, "}");
    kb_line(b, "}");
    kb_line(b, "acc[e] = o;");
    kb_line(b, "}");
    kb_line(b, "m = m_new;");
    kb_line(b, "memoryBarrierShared();");
    kb_line(b, "barrier(); // ps is rewritten by the next tile");
    kb_line(b, "}");
    kb_line(b, "float inv = l > 0.0 ? 1.0 / l : 0.0; // no visible key: zeros");
    kb_line(b, "for (uint e = 0u; e < DPT; e++) {");
    kb_line(b, "uint d = lid + e * WG_SIZE;");
    kb_line(b, "if (d < Dv) {");
    kb_line(b, "float y = acc[e] * inv;");
    const char *co[4] = {"d", "h", "i", "0u"};
    kb_store_out(b, co, "y", NULL);
    kb_line(b, "}");
    kb_line(b, "}");
    kb_dispatch_groups(b, (uint32_t)q->ne[1], (uint32_t)q->ne[2], 1);
    return b->st;
}
