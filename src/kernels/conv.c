/*
 * conv.c — the convolution kernel (glsl/graph/conv.glsl) and the batch
 * normalization's expression. The kernel is direct: a workgroup stages its
 * tile's input patch and the weights of COT output channels in shared
 * memory, CIT input channels a step, and each invocation accumulates its
 * pixel (no im2col buffer). The hooks the GLSL calls are generated here
 * from the graph, so the input, weight and bias are read through kb_expr
 * (any float type, any strides) and the result leaves through
 * kb_store_out (the fused epilogue: batch norm, activation, residual add).
 *
 * The tile and channel blocking are the op's variant (codegen.c): the
 * kernel size, COT, CIT and the tile's shape, chosen from the shapes and the
 * device's shared memory (at most 16 KiB used, GLES 3.1's guarantee, and
 * WG_SIZE 128 invocations, its guaranteed minimum): the same code runs on
 * every device.
 *
 * Where a group's reduction is long, its output channels many and the
 * output large (conv_path: K = C_in/group · kH · kW ≥ CONV_GEMM_MIN_K,
 * C_out/group ≥ CONV_GEMM_MIN_CO, at least CONV_GEMM_MIN_TILES tiles of
 * 128 x 128), the convolution is the prefill's GEMM instead
 * (gemm.c, glsl/graph/gemm.glsl) over the implicit im2col matrix: weight
 * rows are the group's output channels (the weight read as [C_out, K]),
 * columns the output pixels of every image (N · OH · OW), k = (c, ky, kx);
 * the hooks written here (a gemm_provider) read the patch element straight
 * from the NCHW input (zero in the padding), the weight element, and store
 * through kb_store_out at (ox, oy, channel, image), so the bias and the
 * fused epilogue stay one dispatch. A group is one of the GEMM's batches.
 * GLESC_CONV=gemm|direct forces a path (tests, benchmarks).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul.h"

#define CONV_WG 128
#define CONV_SHARED 16384 /* bytes of shared memory the kernel may take */
#define CONV_MAX_K 255    /* kernel size per axis (the variant keeps 8 bits each) */

typedef struct conv_cfg {
    int kw, kh, cot, cit, tw, th, ppi;
    bool one;   /* a 1x1 kernel: flat tiles, no patch */
    int pw, ph; /* the patch */
    int64_t tiles;
} conv_cfg;

static int pow2_at_least(int64_t v, int cap)
{
    int p = 1;
    while (p < v && p < cap)
        p *= 2;
    return p;
}

/* Workgroups (all three dimensions together) that c gives t. */
static int64_t conv_groups(const graph_conv_dims *d, const conv_cfg *c)
{
    return c->tiles * d->group * ((d->co / d->group + c->cot - 1) / c->cot) * d->n;
}

static void conv_tiles(const graph_conv_dims *d, conv_cfg *c)
{
    if (c->one)
        c->tiles = (d->ow * d->oh + CONV_WG - 1) / CONV_WG;
    else
        c->tiles = ((d->ow + c->tw - 1) / c->tw) *
                   ((d->oh + (int64_t)c->th * c->ppi - 1) / ((int64_t)c->th * c->ppi));
}

/* Shared memory c takes (bytes). */
static int64_t conv_shared(const conv_cfg *c)
{
    int64_t wbytes = (int64_t)c->cit * c->kh * c->kw * ((c->cot + 3) / 4) * (c->cot == 1 ? 4 : 16);
    return wbytes + (c->one ? 0 : (int64_t)c->cit * c->ph * c->pw * 4);
}

/* The blocking of convolution t, or false (no fit: message in *why).
 * Enough workgroups come first (at least CONV_MIN_GROUPS where the shape
 * allows: a wide GPU needs them), then the most reuse: more output
 * channels (COT) and rows (PPI) per workgroup, more input channels a step. */
#define CONV_MIN_GROUPS 256
static bool conv_config(const glesc_tensor *t, conv_cfg *c, const char **why)
{
    graph_conv_dims d;
    graph_conv_dims_of(t, &d);
    *why = NULL;
    if (d.kw > CONV_MAX_K || d.kh > CONV_MAX_K) {
        *why = "the kernel is larger than 255 along an axis";
        return false;
    }
    c->kw = (int)d.kw;
    c->kh = (int)d.kh;
    c->one = c->kw == 1 && c->kh == 1;
    int64_t cog = d.co / d.group, cg = d.cg;
    /* one row of 128 pixels when the output is one row (1-D), else 16 x 8 */
    c->tw = d.oh == 1 ? CONV_WG : 16;
    c->th = CONV_WG / c->tw;
    c->ppi = 1;
    c->cot = cog == 1 ? 1 : cog <= 4 ? 4 : cog <= 8 ? 8 : 16;
    conv_tiles(&d, c);
    while (c->cot > 4 && conv_groups(&d, c) < CONV_MIN_GROUPS)
        c->cot /= 2;
    if (!c->one)
        for (int ppi = 4; ppi > 1; ppi /= 2) {
            conv_cfg e = *c;
            e.ppi = ppi;
            conv_tiles(&d, &e);
            if ((int64_t)e.th * ppi <= d.oh && conv_groups(&d, &e) >= CONV_MIN_GROUPS) {
                *c = e;
                break;
            }
        }
    c->pw = (c->tw - 1) * d.sw + (c->kw - 1) * d.dw + 1;
    c->ph = (c->th * c->ppi - 1) * d.sh + (c->kh - 1) * d.dh + 1;
    int shared = CONV_SHARED;
    if (t->ctx && t->ctx->caps.max_compute_shared_memory > 0)
        shared = CORE_MIN(shared, t->ctx->caps.max_compute_shared_memory);
    for (c->cit = pow2_at_least(cg, c->one ? 64 : 32); c->cit >= 1; c->cit /= 2)
        if (conv_shared(c) <= shared)
            return true;
    *why = "one input channel's patch and its weights do not fit the shared memory (a large "
           "dilation or stride)";
    return false;
}

/* The GEMM path's thresholds (conv_path). Below the first two a GEMM tile
 * (64 or 128 weight rows, K a 32-element unit a step) would mostly hold
 * zeros: depthwise and small grouped convolutions, a first layer's 3
 * channels. The third: the GEMM's 128 x 128 tiles must fill a large GPU
 * (about 128 workgroups at once, gemm.c's GEMM_SLOTS_GPU), since the direct
 * kernel's small tiles give at least 256 workgroups where the shape allows.
 * Measured on the H200 (vision-bench, MobileNet v2 at 224 x 224): its
 * pointwise layers through the GEMM (K ≥ 64, C_out ≥ 32, whatever the tile
 * count) ran at 262 GFLOP/s against the direct kernel's 628 at batch 1,
 * and 1.67 against 3.09 TFLOP/s for the whole network at batch 8: 14 x 14
 * and 7 x 7 layers give the GEMM 2 to 40 tiles. */
#define CONV_GEMM_MIN_K 64
#define CONV_GEMM_MIN_CO 32
#define CONV_GEMM_MIN_TILES 128

/* 1: the GEMM (implicit im2col), 0: the direct kernel, -1: GLESC_CONV is
 * neither "gemm" nor "direct" (the generator says so). */
static int conv_path(const glesc_tensor *t)
{
    const char *e = getenv("GLESC_CONV");
    if (e && *e) {
        if (!strcmp(e, "gemm"))
            return 1;
        if (!strcmp(e, "direct"))
            return 0;
        return -1;
    }
    graph_conv_dims d;
    graph_conv_dims_of(t, &d);
    int64_t cog = d.co / d.group;
    int64_t tiles = (cog + 127) / 128 * ((d.n * d.oh * d.ow + 127) / 128) * d.group;
    return d.cg * d.kh * d.kw >= CONV_GEMM_MIN_K && cog >= CONV_GEMM_MIN_CO &&
           tiles >= CONV_GEMM_MIN_TILES;
}

uint32_t kernels_conv_variant(const glesc_tensor *t)
{
    if (conv_path(t) == 1) {
        graph_conv_dims d;
        graph_conv_dims_of(t, &d);
        /* the GEMM's narrow tiles for few columns, as a matmul's bit 18 */
        return 1u << 24 | (d.n * d.ow * d.oh <= KERNELS_GEMM_SMALL_M ? 1u << 25 : 0u);
    }
    conv_cfg c;
    const char *why;
    if (!conv_config(t, &c, &why))
        return 0; /* the generator refuses it */
    int cot_i = c.cot == 1 ? 0 : c.cot == 4 ? 1 : c.cot == 8 ? 2 : 3, cit_l = 0;
    while ((1 << cit_l) < c.cit)
        cit_l++;
    return (uint32_t)c.kw | (uint32_t)c.kh << 8 | (uint32_t)cot_i << 16 | (uint32_t)cit_l << 18 |
           (c.tw == CONV_WG ? 1u << 21 : 0u) | (uint32_t)(c.ppi >> 1) << 22;
}

/* A tensor split into row chunks (a persistent one beyond the device's
 * storage-block limit) is not read by this kernel: refused by name. */
static void refuse_chunked(kb *b, const glesc_tensor *t, const char *what, const char *hint)
{
    if (t && t->owner->st.n_chunks > 1)
        kb_fail(b, GLESC_ERROR_LIMIT,
                "conv: the %s %s is larger than the device's storage-block limit (%llu bytes): "
                "%s",
                what, GRAPH_SH(t), (unsigned long long)b->ctx->caps.max_storage_block_size, hint);
}

/* The GEMM path's hooks: the convolution's dimensions and tensors. */
typedef struct im2col {
    graph_conv_dims d;
    const glesc_tensor *x, *w, *bias;
} im2col;

/* Coordinates of a convolution's tensors, with H (dimension 1) dropped for
 * a 1-D one: c[0], c[1], c[2], c[3] → c[0], c[2], c[3], 0. */
static void conv_coords(bool one_d, const char *c[4])
{
    if (one_d)
        for (int i = 1; i < 4; i++)
            c[i] = i < 3 ? c[i + 1] : "0u";
}

/* The uniforms and defines the hooks read, K, M, xb2 (the groups), the
 * rows (a group's output channels) and the weight's unit locations: k runs
 * straight, the two runs of 16 side by side. */
static void im2col_common(kb *b, mm_ctx *mc, const void *arg)
{
    const graph_conv_dims *d = &((const im2col *)arg)->d;
    if (b->k) {
        emit_kernel_define(b->k, "KW", "%du", (int)d->kw);
        emit_kernel_define(b->k, "KH", "%du", (int)d->kh);
        emit_kernel_define(b->k, "SW", "%du", d->sw);
        emit_kernel_define(b->k, "SH", "%du", d->sh);
        emit_kernel_define(b->k, "DW", "%du", d->dw);
        emit_kernel_define(b->k, "DH", "%du", d->dh);
        emit_kernel_define(b->k, "GEMM_COLS_FIRST", "1"); /* NCHW: pixels run fastest */
        emit_kernel_comment(b->k, "convolution as a GEMM over the implicit im2col matrix: "
                                  "rows the output channels, columns the pixels, k = (c, ky, kx)");
    }
    kb_param_u(b, "K", (uint64_t)(d->cg * d->kh * d->kw));
    kb_param_u(b, "M", (uint64_t)(d->n * d->oh * d->ow));
    kb_param_u(b, "xb2", (uint64_t)d->group);
    kb_param_u(b, "IW", (uint64_t)d->w);
    kb_param_u(b, "IH", (uint64_t)d->h);
    kb_param_u(b, "OW", (uint64_t)d->ow);
    kb_param_u(b, "OH", (uint64_t)d->oh);
    kb_param_u(b, "CG", (uint64_t)d->cg);
    kb_param_u(b, "COG", (uint64_t)(d->co / d->group));
    kb_param_u(b, "PAD_L", (uint64_t)d->pw);
    kb_param_u(b, "PAD_T", (uint64_t)d->ph);
    mc->p_base = kb_param_u(b, "n_base", 0);
    mc->p_count = kb_param_u(b, "n_count", (uint64_t)(d->co / d->group));
    if (b->k) {
        emit_kernel_helper(b->k, "load_w_wat", "uvec4 load_w_wat(uint u) { return uvec4(u); }\n");
        emit_kernel_helper(
            b->k, "load_w_wunit_x",
            "uvec2 load_w_wunit_x(uint u) { return uvec2(32u * u, 32u * u + 16u); }\n");
    }
}

/* gemm_x (the patch element k of column c: the input at the window's tap,
 * zero in the padding), gemm_wunit_0 (32 weights of output channel nl of
 * group b2, zero past K) and gemm_store (bias, epilogue, at the pixel). */
static void im2col_hooks(kb *b, const mm_ctx *mc, const void *arg)
{
    (void)mc;
    const im2col *ic = arg;
    char v[16];
    const char *cx[4] = {"ixu", "iyu", "ci", "img"}, *cw[4] = {"kx", "ky", "cl", "co"},
               *cy[4] = {"ox", "oy", "oc", "img"};
    conv_coords(ic->d.one_d, cx);
    conv_coords(ic->d.one_d, cw);
    conv_coords(ic->d.one_d, cy);
    if (b->k)
        emit_kernel_function_begin(
            b->k, "float gemm_x(uint k, uint c, uint b2, uint b3, inout float sq)");
    kb_line(b, "uint ci = b2 * CG + k / (KH * KW), r = k %% (KH * KW);");
    kb_line(b, "uint img = c / (OW * OH), p = c %% (OW * OH);");
    kb_line(b, "int iy = int((p / OW) * SH + (r / KW) * DH) - int(PAD_T);");
    kb_line(b, "int ix = int((p %% OW) * SW + (r %% KW) * DW) - int(PAD_L);");
    kb_line(b, "bool inside = ix >= 0 && ix < int(IW) && iy >= 0 && iy < int(IH);");
    kb_line(b, "uint ixu = uint(clamp(ix, 0, int(IW) - 1)), iyu = uint(clamp(iy, 0, int(IH) - "
               "1));");
    kb_line(b, "float xv = %s;", kb_expr(b, ic->x, cx, v));
    kb_line(b, "return inside ? xv : 0.0;");
    if (b->k) {
        emit_kernel_function_end(b->k);
        emit_kernel_function_begin(b->k, "void gemm_wunit_0(uint nl, uint b2, uint b3, uvec4 at, "
                                         "uint u, out vec4 q[8], out vec4 ab)");
    }
    kb_line(b, "uint co = b2 * COG + nl;");
    kb_line(b, "ab = vec4(1.0, 0.0, 1.0, 0.0);");
    kb_line(b, "for (uint i = 0u; i < 32u; i++) {");
    kb_line(b, "uint k = min(u * 32u + i, K - 1u);");
    kb_line(b, "uint cl = k / (KH * KW), r = k %% (KH * KW), ky = r / KW, kx = r %% KW;");
    kb_line(b, "float wv = %s;", kb_expr(b, ic->w, cw, v));
    kb_line(b, "q[i / 4u][i %% 4u] = u * 32u + i < K ? wv : 0.0;");
    kb_line(b, "}");
    if (b->k) {
        emit_kernel_function_end(b->k);
        emit_kernel_function_begin(b->k, "void gemm_store(uint sel, uint n, uint c, uint b2, "
                                         "uint b3, float dot, float dot2)");
    }
    kb_line(b, "uint oc = b2 * COG + n;");
    kb_line(b, "uint img = c / (OW * OH), p = c %% (OW * OH), oy = p / OW, ox = p %% OW;");
    kb_line(b, "float v = dot;");
    if (ic->bias)
        kb_line(b, "v += %s;", kb_expr(b, ic->bias, (const char *[4]){"oc", "0u", "0u", "0u"}, v));
    kb_store_out(b, cy, "v", NULL);
    if (b->k)
        emit_kernel_function_end(b->k);
}

/* Convolution t as the GEMM (see the header comment). */
static glesc_status gen_conv_gemm(kb *b, const glesc_tensor *a)
{
    im2col ic = {.x = a->src[0], .w = a->src[1], .bias = a->src[2]};
    graph_conv_dims_of(a, &ic.d);
    gemm_provider pv = {.k = ic.d.cg * ic.d.kh * ic.d.kw,
                        .m = ic.d.n * ic.d.oh * ic.d.ow,
                        .rows = ic.d.co / ic.d.group,
                        .batches = ic.d.group,
                        .common = im2col_common,
                        .hooks = im2col_hooks,
                        .arg = &ic};
    if (pv.k > UINT32_MAX / 2 || pv.m > UINT32_MAX / 2)
        return kb_fail(b, GLESC_ERROR_LIMIT, "conv: result %s is too large for the GEMM path",
                       GRAPH_SH(a));
    if (pv.batches > 65535)
        return kb_fail(b, GLESC_ERROR_LIMIT, "conv: %d groups exceed 65535 for the GEMM path",
                       ic.d.group);
    mm_ctx mc = {0};
    mc.prov = &pv;
    mc.p_am_g0 = mc.p_am_total = -1;
    return kernels_gen_gemm(b, &mc);
}

glesc_status kernels_gen_conv(kb *b)
{
    const glesc_tensor *a = b->gk->anchor, *x = a->src[0], *w = a->src[1], *bias = a->src[2];
    int path = conv_path(a);
    if (path < 0)
        return kb_fail(b, GLESC_ERROR_INVALID_ARGUMENT, "GLESC_CONV=%s: expected gemm or direct",
                       getenv("GLESC_CONV"));
    if (path == 1) {
        refuse_chunked(b, x, "input", "split the batch or the image");
        refuse_chunked(b, w, "weight", "split the output channels over several convolutions");
        refuse_chunked(b, b->gk->out, "result", "split the batch or the image");
        if (b->st != GLESC_OK)
            return b->st;
        return gen_conv_gemm(b, a);
    }
    conv_cfg c;
    const char *why;
    if (!conv_config(a, &c, &why))
        return kb_fail(b, GLESC_ERROR_LIMIT, "conv: w %s: %s", GRAPH_SH(w), why);
    refuse_chunked(b, x, "input", "split the batch or the image");
    refuse_chunked(b, w, "weight", "split the output channels over several convolutions");
    refuse_chunked(b, b->gk->out, "result", "split the batch or the image");
    graph_conv_dims d;
    graph_conv_dims_of(a, &d);
    int grp = d.group;
    int64_t cog = d.co / grp, cg = d.cg;
    int64_t tiles_x = (d.ow + c.tw - 1) / c.tw;
    int64_t cotiles = (cog + c.cot - 1) / c.cot;
    const glesc_caps *caps = &b->ctx->caps;
    if (c.tiles > caps->max_workgroup_count[0] || grp * cotiles > caps->max_workgroup_count[1] ||
        d.n > caps->max_workgroup_count[2])
        return kb_fail(b, GLESC_ERROR_LIMIT,
                       "conv: result %s needs %lld x %lld x %lld workgroups, above the device's "
                       "%d x %d x %d",
                       GRAPH_SH(a), (long long)c.tiles, (long long)(grp * cotiles), (long long)d.n,
                       caps->max_workgroup_count[0], caps->max_workgroup_count[1],
                       caps->max_workgroup_count[2]);
    int cot4 = (c.cot + 3) / 4;
    if (b->k) {
        emit_kernel_local_size(b->k, CONV_WG, 1, 1);
        emit_kernel_snippet(b->k, "graph/eltwise"); /* for the fused epilogue */
        if (c.one) {
            emit_kernel_define(b->k, "CONV_1X1", "1");
        } else {
            emit_kernel_define(b->k, "TW", "%du", c.tw);
            emit_kernel_define(b->k, "TH", "%du", c.th);
            emit_kernel_define(b->k, "PPI", "%du", c.ppi);
            emit_kernel_define(b->k, "PW", "%du", c.pw);
            emit_kernel_define(b->k, "PH", "%du", c.ph);
            emit_kernel_shared(b->k, "float", "xs", c.cit * c.ph * c.pw);
        }
        const char *wt = c.cot == 1 ? "float" : "vec4";
        emit_kernel_define(b->k, "COT", "%du", c.cot);
        emit_kernel_define(b->k, "COT4", "%du", cot4);
        emit_kernel_define(b->k, "WLANES", "%du", c.cot == 1 ? 1 : 4);
        emit_kernel_define(b->k, "WTYPE", "%s", wt);
        emit_kernel_define(b->k, "CIT", "%du", c.cit);
        emit_kernel_define(b->k, "KW", "%du", c.kw);
        emit_kernel_define(b->k, "KH", "%du", c.kh);
        emit_kernel_define(b->k, "SW", "%du", d.sw);
        emit_kernel_define(b->k, "SH", "%du", d.sh);
        emit_kernel_define(b->k, "DW", "%du", d.dw);
        emit_kernel_define(b->k, "DH", "%du", d.dh);
        emit_kernel_shared(b->k, wt, "ws", c.cit * c.kh * c.kw * cot4);
        if (c.one)
            emit_kernel_comment(b->k,
                                "convolution (glsl/graph/conv.glsl): 1x1 kernel, tiles of %d "
                                "pixels by %d output channels, %d input channels a step",
                                CONV_WG, c.cot, c.cit);
        else
            emit_kernel_comment(b->k,
                                "convolution (glsl/graph/conv.glsl): %dx%d kernel, tiles of %d x "
                                "%d pixels by %d output channels, %d input channels a step",
                                c.kw, c.kh, c.tw, c.th * c.ppi, c.cot, c.cit);
    }
    kb_param_u(b, "IW", (uint64_t)d.w);
    kb_param_u(b, "IH", (uint64_t)d.h);
    kb_param_u(b, "OW", (uint64_t)d.ow);
    kb_param_u(b, "OH", (uint64_t)d.oh);
    kb_param_u(b, "CG", (uint64_t)cg);
    kb_param_u(b, "COG", (uint64_t)cog);
    kb_param_u(b, "COTILES", (uint64_t)cotiles);
    kb_param_u(b, "TILES_X", (uint64_t)tiles_x);
    kb_param_u(b, "PAD_L", (uint64_t)d.pw);
    kb_param_u(b, "PAD_T", (uint64_t)d.ph);
    if (b->k)
        emit_kernel_snippet(b->k, "graph/conv");
    /* the hooks; a 1-D convolution's tensors lack dimension 1 (H) */
    char v[16], bv[16];
    const char *cx[4] = {"ix", "iy", "ci", "n"}, *cw[4] = {"kx", "ky", "(ci % CG)", "co"},
               *cy[4] = {"ox", "oy", "co", "n"};
    if (d.one_d)
        for (int i = 1; i < 4; i++) {
            cx[i] = i < 3 ? cx[i + 1] : "0u";
            cw[i] = i < 3 ? cw[i + 1] : "0u";
            cy[i] = i < 3 ? cy[i + 1] : "0u";
        }
    if (b->k)
        emit_kernel_function_begin(b->k, "float conv_x(uint ix, uint iy, uint ci, uint n)");
    kb_line(b, "return %s;", kb_expr(b, x, cx, v));
    if (b->k) {
        emit_kernel_function_end(b->k);
        emit_kernel_function_begin(b->k, "float conv_w(uint kx, uint ky, uint ci, uint co)");
    }
    kb_line(b, "return %s;", kb_expr(b, w, cw, v));
    if (b->k) {
        emit_kernel_function_end(b->k);
        emit_kernel_function_begin(b->k, "void conv_store(uint ox, uint oy, uint co, uint n, "
                                         "float v)");
    }
    if (bias)
        kb_line(b, "v += %s;", kb_expr(b, bias, (const char *[4]){"co", "0u", "0u", "0u"}, bv));
    kb_store_out(b, cy, "v", NULL);
    if (b->k)
        emit_kernel_function_end(b->k);
    kb_line(b, "conv_main();");
    kb_dispatch_groups(b, (uint32_t)c.tiles, (uint32_t)(grp * cotiles), (uint32_t)d.n);
    return b->st;
}

void kernels_expr_batch_norm(kb *b, const glesc_tensor *t, const char *const c[4], sbuf *out)
{
    char xv[16], s[16], bb[16], m[16], var[16], eps[16];
    const char *cc[4] = {c[2], "0u", "0u", "0u"}; /* the channel */
    snprintf(eps, sizeof eps, "bn%d_eps", b->n_fparam++);
    kb_param_f(b, eps, t->fp[0]);
    kb_expr(b, t->src[0], c, xv);
    kb_expr(b, t->src[1], cc, s);
    kb_expr(b, t->src[2], cc, bb);
    kb_expr(b, t->src[3], cc, m);
    kb_expr(b, t->src[4], cc, var);
    sbuf_appendf(out, "((%s - %s) * (%s * inversesqrt(%s + %s)) + %s)", xv, m, s, var, eps, bb);
}
