/*
 * matmul.h — private to src/kernels/: what the matmul kernel's two
 * generators share. matmul.c holds the GEMV (decode: m ≤ gemv_max_m
 * columns) and these helpers, gemm.c the GEMM (prefill); both bind the
 * kernel's matmuls (the anchor, a gate/up partner or the siblings of a
 * grouped q/k/v) through the helpers below, so weights, loaders, uniforms
 * and the dispatch per weight chunk are the same for both.
 */
#ifndef GLESC_KERNELS_MATMUL_H
#define GLESC_KERNELS_MATMUL_H

#include "kernels/kernels.h"

/* A grouped matmul's other members (uniforms s<i>_..., loader load_s<i>). */
typedef struct mm_sib {
    const glesc_tensor *a, *w;
    int wb;                    /* binding of its weight */
    bool units;                /* the fast units (a uvec4 binding) */
    int p_base, p_count, p_g0; /* param indices: first row, rows, first workgroup */
    int64_t chunk_rows;
    int n_chunks;
} mm_sib;

typedef struct mm_ctx mm_ctx;

/* The GEMM's operands from another op than a matmul (the convolution's
 * implicit im2col, conv.c): the sizes, and the generators of what
 * kernels_mm_common and the matmul's hooks give otherwise. common declares
 * the weight's unit locations load_w_wat(u) and load_w_wunit_x(u) and the
 * uniforms K, M, xb2 (batches along b2), n_base and n_count (setting
 * mc->p_base, mc->p_count); hooks emits gemm_x, gemm_store and
 * gemm_wunit_0 with gemm.glsl's signatures. One matmul, no pair, no
 * folded norm, one weight chunk. */
typedef struct gemm_provider {
    int64_t k, m, rows, batches; /* K, columns, weight rows, batches (b2) */
    void (*common)(kb *b, mm_ctx *mc, const void *arg);
    void (*hooks)(kb *b, const mm_ctx *mc, const void *arg);
    const void *arg;
} gemm_provider;

struct mm_ctx {
    const gemm_provider *prov;         /* NULL: a matmul node's (a, p, w, x below) */
    const glesc_tensor *a, *p, *w, *x; /* anchor, partner, weights, activation */
    int wb, wb2;                       /* bindings of W and the partner's W */
    int p_base, p_count;               /* param indices of n_base, n_count */
    bool units;                        /* the fast units, bindings as uvec4 */
    unsigned wload_extra; /* KERNELS_WLOAD_RAW, _HALF, _DEC_HALF: what the loaders also give */
    int p_blocks;         /* GEMV: param index of n_blocks */
    int64_t chunk_rows;
    int n_chunks;
    mm_sib sib[KERNELS_MAX_SIB];
    int n_sib;
    /* The GEMM's split of K: given a dispatch's workgroups, sets its
     * uniforms and returns the parts each workgroup's K is cut into (they
     * multiply the dispatch's z); NULL: none. */
    int64_t (*split)(kb *b, const mm_ctx *mc, int64_t groups);
    int p_ksplit, p_kper, p_kdp; /* GEMM: param indices of ksplit, kper, kdp */
    int64_t split_slots;         /* GEMM: workgroups the device runs at once */
    int64_t split_words;         /* GEMM: scratch words of a tile's part */
    /* GEMV: a folded arg max (gk->reduce): param indices of am_g0 and
     * am_total (glsl/graph/argmax.glsl); -1: none */
    int p_am_g0, p_am_total;
};

/* Bindings, the loaders of every matmul's weight (wload.c's 32-element
 * units: load_w, load_u for the partner, load_s<i> for sibling i) and the
 * uniforms both kernels read (see glsl/graph/gemv.glsl and gemm.glsl). */
void kernels_mm_common(kb *b, mm_ctx *mc);
/* Member j's loader name ("load_w" / "load_s1") into buf; returns buf. */
const char *kernels_mm_loader(int j, char buf[16]);
/* A group's store, member by member: "if (sel == 0u) {", "} else if ...",
 * the store of member j's value at co (with its epilogue; partner: the
 * pair's value), and the closing brace. */
void kernels_mm_member_open(kb *b, const mm_ctx *mc, int j);
void kernels_mm_member_close(kb *b, const mm_ctx *mc);
void kernels_mm_member_store(kb *b, int j, const char *const co[4], const char *value,
                             const char *partner);
/* The hooks gemv.glsl and gemm.glsl call, named "<kind>_x" and
 * "<kind>_norm_scale": x at (k, c, b2, b3) with its prologue, adding a
 * folded norm's square to sq; a folded norm's scale from sq (nothing
 * without a norm). */
void kernels_mm_x_hook(kb *b, const mm_ctx *mc, const glesc_tensor *nrm, const char *kind);
void kernels_mm_norm_scale_hook(kb *b, const glesc_tensor *nrm, const char *kind);
/* Every member's store at (n, c, b2, b3) of "dot" (the pair's "dot2"). */
void kernels_mm_member_stores(kb *b, const mm_ctx *mc, bool dual);
/* One dispatch per weight chunk (see matmul.c). */
void kernels_mm_dispatch(kb *b, const mm_ctx *mc, int64_t rows_per_wg, uint64_t max_groups,
                         bool spread, int64_t m_groups, int64_t batches);

/* The GEMM (gemm.c): mc's matmuls for m > gemv_max_m columns. */
glesc_status kernels_gen_gemm(kb *b, mm_ctx *mc);

#endif /* GLESC_KERNELS_MATMUL_H */
