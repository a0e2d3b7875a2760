/*
 * wload.c — weight loaders: how matmul and get_rows read a weight row, per
 * weight type, as GLSL functions over the weight's binding (row_byte: the
 * row's first byte in it; ne0: a GLSL expression, the row's length):
 *
 *   KERNELS_WLOAD_ELEM  float NAME(uint row_byte, uint k): element k;
 *   KERNELS_WLOAD_UNIT  32-element units (glsl/graph/gemv.glsl, gemm.glsl):
 *                       `uvec4 NAME_wat(uint u)`, where unit u's block
 *                       lies in any row (the same for every row: computed
 *                       once for all the rows a lane reads),
 *                       `void NAME_wunit(uint row_byte, uvec4 at, uint u,
 *                       out vec4 q[8], out vec4 ab)` and `uvec2
 *                       NAME_wunit_x(uint u)`, see glsl/quant/common.glsl;
 *                       NAME_MINS is defined when the runs' values have an
 *                       offset (ab.y, ab.w). With KERNELS_WLOAD_RAW,
 *                       where kernels_wload_raw says so, the unit also
 *                       comes in two steps for the GEMV (gemv_units.glsl's
 *                       GEMV_RAW): `void NAME_wraw(uint row_byte, uvec4 at,
 *                       uint u, out uvec4 r[4])` only loads its words and
 *                       `void NAME_wdec(uvec4 r[4], uvec4 at, uint u, out
 *                       vec4 q[8], out vec4 ab)` decodes them (the
 *                       snippet's unit_raw / unit_dec, praw / pdec).
 *                       With KERNELS_WLOAD_HALF, plain types
 *                       (kernels_wload_half) also give half a unit, for a
 *                       GEMM invocation that stages half a
 *                       row's: `void NAME_whalf(uint row_byte, uint u,
 *                       uint h, out vec4 q[4])`, elements 16h .. 16h+15
 *                       of unit u (the snippet's phalf). With
 *                       KERNELS_WLOAD_DEC_HALF, block types whose snippet
 *                       has unit_dec_half also decode half a unit from
 *                       NAME_wraw's words: `void NAME_wdech(uvec4 r[4],
 *                       uvec4 at, uint u, uint h, out vec4 q[4], out vec2
 *                       ab)`, run h's quants and its scale and offset.
 *                       With KERNELS_WLOAD_UHALF (every type, also
 *                       without UVEC4): the GEMV's half units, `void
 *                       NAME_wuhalf(uint row_byte, uvec4 at, uint u, uint
 *                       h, out vec4 q[4], out vec2 ab)`, run h of unit u
 *                       with its scale and offset. With
 *                       KERNELS_WLOAD_UQUAD, block types whose snippet
 *                       has unit_q4 and f32, f16, bf16 (pq4;
 *                       kernels_wload_uquad): the GEMV's quarter units,
 *                       `void NAME_wuq(uint row_byte, uvec4 at, uint u,
 *                       uint h, uint j, out vec4 q)`, vec4 j of run h's
 *                       quants (the plain types': vec4 4h + j of the
 *                       unit, j up to 7), and `vec2 NAME_wuab(uint
 *                       row_byte, uvec4 at, uint u, uint h)`, the run's
 *                       scale and offset (the plain types': 1 and 0);
 *                       the block types without them, through dq4
 *                       (kernels_wload_uquad's units false), without
 *                       KERNELS_WLOAD_UVEC4.
 *
 * f32, f16 and bf16 element loaders are written here. The ggml block types
 * are built on the glsl/quant/ snippets (the ones tests/test_quant_gpu.c
 * checks against the CPU reference): quant/common, the layout's qlocate
 * (quant_gpu_locate_glsl, from src/quant/gpu.c's table) and the type's
 * snippet, reading words through QW(i) and QW4(i), macros over the binding
 * as uint words or, for the fast units, as uvec4. A kernel can hold
 * two loaders (gate/up pair), so every loader gets its own copy of the
 * snippets with each top-level name renamed by a #define to NAME_<name>
 * (collected from the text: function definitions, structs and constants
 * at the start of a line), and every macro is #undef'd after the copy.
 *
 * The GEMV's units come from the snippet's own decoder where the type has
 * one (`unit`: scales decoded once per 32 elements, exact integer quants
 * from one fma each) and the rows are 16-byte aligned, reading the binding
 * as uvec4 (kernels_wload_units); otherwise from the snippet's runs
 * (dq4_run: q2_k, q3_k, their scales applied after), dq4 (the other
 * block types) or the element loader (plain weights of an odd length or
 * alignment), element by element, masked past ne0.
 */
#include <string.h>

#include "kernels/kernels.h"
#include "quant/quant.h"

static void emit_f32(sbuf *o, const char *fn, const char *buf)
{
    sbuf_appendf(o, "float %s(uint row_byte, uint k) {\n    return %s[(row_byte >> 2u) + k];\n}\n",
                 fn, buf);
}

static void emit_f16(sbuf *o, const char *fn, const char *buf)
{
    sbuf_appendf(o,
                 "float %s(uint row_byte, uint k) {\n"
                 "    uint i = (row_byte >> 1u) + k;\n"
                 "    return f16_at(%s[i >> 1u], i);\n}\n",
                 fn, buf);
}

static void emit_bf16(sbuf *o, const char *fn, const char *buf)
{
    sbuf_appendf(o,
                 "float %s(uint row_byte, uint k) {\n"
                 "    uint i = (row_byte >> 1u) + k;\n"
                 "    return bf16_at(%s[i >> 1u], i);\n}\n",
                 fn, buf);
}

/* Do all of w's rows start on a multiple of `a` bytes? */
static bool rows_aligned(const glesc_tensor *w, int64_t a)
{
    bool ok = w->offs % (uint64_t)a == 0;
    for (int d = 1; d < 4; d++)
        ok = ok && (w->ne[d] == 1 || w->nb[d] % a == 0);
    return ok;
}

static bool snippet_has(glesc_dtype t, const char *what)
{
    const char *s = quant_gpu_snippet(t) ? emit_snippet_text(quant_gpu_snippet(t)) : NULL;
    return s && strstr(s, what) != NULL;
}

static bool snippet_has_unit(glesc_dtype t)
{
    return snippet_has(t, "\nvoid unit(");
}

bool kernels_wload_raw(const glesc_tensor *w)
{
    return kernels_wload_units(w) &&
           snippet_has(w->dtype, graph_dtype_quant(w->dtype) ? "\nvoid unit_raw(" : "\nvoid praw(");
}

bool kernels_wload_dec_half(const glesc_tensor *w)
{
    return graph_dtype_quant(w->dtype) && kernels_wload_raw(w) &&
           snippet_has(w->dtype, "\nvoid unit_dec_half(");
}

bool kernels_wload_uquad(const glesc_tensor *w)
{
    if (!kernels_wload_units(w))
        return false;
    if (!graph_dtype_quant(w->dtype))
        return snippet_has(w->dtype, "\nvec4 pq4(");
    return snippet_has(w->dtype, "\nvec4 unit_q4(") && snippet_has(w->dtype, "\nvec2 unit_ab(");
}

bool kernels_wload_half(const glesc_tensor *w)
{
    return !graph_dtype_quant(w->dtype) && kernels_wload_units(w) &&
           snippet_has(w->dtype, "\nvoid phalf(");
}

bool kernels_wload_units(const glesc_tensor *w)
{
    switch (w->dtype) {
    case GLESC_DTYPE_F32:
    case GLESC_DTYPE_F16:
    case GLESC_DTYPE_BF16:
        return w->ne[0] % 32 == 0 && rows_aligned(w, 16);
    default:
        /* whole quantized tensors only (no views): rows of 16-byte multiples */
        return quant_gpu_align(w->dtype) == 16 && snippet_has_unit(w->dtype);
    }
}

static bool is_ident(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Appends to defs "#define NAME P_NAME" for each top-level function, struct
 * or constant of text and to undefs "#undef X" for those and every macro it
 * defines. A top-level definition is a line starting with an identifier
 * (`TYPE NAME(`, `struct NAME {` or `const TYPE NAME =`); body lines are
 * indented. */
static void snippet_names(const char *text, const char *prefix, sbuf *defs, sbuf *undefs)
{
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        const char *p = l;
        if (!strncmp(p, "#define ", 8)) {
            p += 8;
            const char *e = p;
            while (is_ident(*e))
                e++;
            sbuf_appendf(undefs, "#undef %.*s\n", (int)(e - p), p);
            continue;
        }
        if (!is_ident(*p))
            continue; /* indented body line, comment, brace or blank */
        if (!strncmp(p, "const ", 6))
            p += 6;
        /* the type (or "struct"), a space, then the name */
        while (is_ident(*p))
            p++;
        if (*p != ' ')
            continue;
        p++;
        const char *n = p;
        while (is_ident(*p))
            p++;
        if (p == n || (*p != '(' && *p != ' '))
            continue;
        sbuf_appendf(defs, "#define %.*s %s_%.*s\n", (int)(p - n), n, prefix, (int)(p - n), n);
        sbuf_appendf(undefs, "#undef %.*s\n", (int)(p - n), n);
    }
}

/* The QW / QW4 macros over buf, read as uint words or as uvec4. */
static void word_macros(sbuf *o, const char *buf, bool as_uvec4)
{
    if (as_uvec4)
        sbuf_appendf(o, "#define QW(i) qw_pick(%s[(i) >> 2u], i)\n#define QW4(i) %s[i]\n", buf,
                     buf);
    else
        sbuf_appendf(o,
                     "#define QW(i) %s[i]\n#define QW4(i) uvec4(%s[4u * (i)], %s[4u * (i) + 1u], "
                     "%s[4u * (i) + 2u], %s[4u * (i) + 3u])\n",
                     buf, buf, buf, buf, buf);
}

/* The body that fills q[0..n) with vec4 first + i (first: a GLSL
 * expression, in vec4) of unit u: dq4 of the block (block types, whose
 * block is a multiple of 32) or the element loader fn (plain types, masked
 * past ne0). */
static void generic_vec4s(sbuf *o, const char *fn, const char *ne0, bool block, int n,
                          const char *first)
{
    if (block)
        sbuf_appendf(o,
                     "    uint r = row_byte >> 2u;\n"
                     "    qblock b = qblock(r + at.x, r + at.y, r + at.z, at.w);\n"
                     "    uint j0 = 32u * u %% QK / 4u + %s;\n"
                     "    for (uint i = 0u; i < %du; i++) {\n"
                     "        q[i] = dq4(b, j0 + i);\n"
                     "    }\n",
                     first, n);
    else
        sbuf_appendf(o,
                     "    for (uint i = 0u; i < %du; i++) {\n"
                     "        uint k = 32u * u + 4u * (%s + i);\n"
                     "        q[i] = vec4(k < (%s) ? %s(row_byte, k) : 0.0,\n"
                     "                    k + 1u < (%s) ? %s(row_byte, k + 1u) : 0.0,\n"
                     "                    k + 2u < (%s) ? %s(row_byte, k + 2u) : 0.0,\n"
                     "                    k + 3u < (%s) ? %s(row_byte, k + 3u) : 0.0);\n"
                     "    }\n",
                     n, first, ne0, fn, ne0, fn, ne0, fn, ne0, fn);
}

/* Does t's snippet give its runs of 16 elements with their scales
 * (dq4_run: the quants and each run's scale and offset, applied after,
 * as a unit's; q2_k, q3_k)? */
static bool snippet_has_run(glesc_dtype t)
{
    return snippet_has(t, "\nvoid dq4_run(");
}

/* The unit's two runs of 16 elements from dq4_run (block types whose
 * snippet has it, which defines QMINS where the runs have offsets): the
 * quants as they are, each run's scale and offset in ab. dq4 would decode
 * the scale again for each vec4, and its scaled values held more
 * registers: V3D's GEMMs of q2_k and q3_k (the whole unit decoded, of
 * which an invocation stages half) spilled 11:24-31:27 at 2 threads, 0:0
 * with the runs (docs/devices.md, *V3D*). */
static void run_unit(sbuf *o)
{
    sbuf_append(o, "    uint r = row_byte >> 2u;\n"
                   "    qblock b = qblock(r + at.x, r + at.y, r + at.z, at.w);\n"
                   "    uint s = 32u * u % QK / 16u;\n"
                   "    vec4 q0[4], q1[4];\n"
                   "    dq4_run(b, s, q0, ab.xy);\n"
                   "    dq4_run(b, s + 1u, q1, ab.zw);\n"
                   "    for (uint i = 0u; i < 4u; i++) {\n"
                   "        q[i] = q0[i];\n"
                   "        q[4u + i] = q1[i];\n"
                   "    }\n}\n");
}

/* The GEMV unit of a type without a decoder of its own: its runs (run:
 * run_unit) or 32 elements of generic_vec4s. */
static void generic_unit(sbuf *o, const char *fn, const char *ne0, bool block, bool run)
{
    sbuf_appendf(o,
                 "uvec2 %s_wunit_x(uint u) {\n"
                 "    return uvec2(32u * u, 32u * u + 16u);\n}\n",
                 fn);
    if (block)
        sbuf_appendf(o,
                     "uvec4 %s_wat(uint u) {\n"
                     "    qblock b = qlocate(0u, (%s) / QK, 32u * u / QK);\n"
                     "    return uvec4(b.f0, b.f1, b.f2, b.i);\n}\n",
                     fn, ne0);
    else
        sbuf_appendf(o, "uvec4 %s_wat(uint u) {\n    return uvec4(0u);\n}\n", fn);
    sbuf_appendf(
        o, "void %s_wunit(uint row_byte, uvec4 at, uint u, out vec4 q[8], out vec4 ab) {\n", fn);
    if (run) {
        run_unit(o);
        return;
    }
    generic_vec4s(o, fn, ne0, block, 8, "0u");
    sbuf_append(o, "    ab = vec4(1.0, 0.0, 1.0, 0.0);\n}\n");
}

/* generic_unit's run h (KERNELS_WLOAD_UHALF). */
static void generic_uhalf(sbuf *o, const char *fn, const char *ne0, bool block, bool run)
{
    sbuf_appendf(o,
                 "void %s_wuhalf(uint row_byte, uvec4 at, uint u, uint h, out vec4 q[4], "
                 "out vec2 ab) {\n",
                 fn);
    if (run) {
        sbuf_append(o, "    uint r = row_byte >> 2u;\n"
                       "    dq4_run(qblock(r + at.x, r + at.y, r + at.z, at.w), 32u * u % QK / 16u "
                       "+ h, q, ab);\n}\n");
        return;
    }
    generic_vec4s(o, fn, ne0, block, 4, "4u * h");
    sbuf_append(o, "    ab = vec2(1.0, 0.0);\n}\n");
}

/* generic_unit's quarter units (KERNELS_WLOAD_UQUAD, block types): vec4
 * 4h + j of unit u, its quants by the snippet's dq4_q and its run's scale
 * and offset by dq4_ab (runs of 16 elements, one scale each) where it has
 * them (own), else by dq4, the scale applied. */
static void generic_uquad(sbuf *o, const char *fn, bool own)
{
    sbuf_appendf(o,
                 "void %s_wuq(uint row_byte, uvec4 at, uint u, uint h, uint j, out vec4 q) {\n"
                 "    uint r = row_byte >> 2u;\n"
                 "    q = %s(qblock(r + at.x, r + at.y, r + at.z, at.w), 32u * u %% QK / 4u + 4u * "
                 "h + j);\n}\n"
                 "vec2 %s_wuab(uint row_byte, uvec4 at, uint u, uint h) {\n",
                 fn, own ? "dq4_q" : "dq4", fn);
    if (own)
        sbuf_append(o, "    uint r = row_byte >> 2u;\n"
                       "    return dq4_ab(qblock(r + at.x, r + at.y, r + at.z, at.w), 32u * u % QK "
                       "/ 16u + h);\n}\n");
    else
        sbuf_append(o, "    return vec2(1.0, 0.0);\n}\n");
}

/* A block type's half unit (KERNELS_WLOAD_UHALF) from its snippet's
 * unit_raw and unit_dec_half: only run h's quants are decoded. A type
 * without them decodes the whole unit and keeps half (the same values,
 * without the registers saved). */
static void block_uhalf(sbuf *o, const glesc_tensor *w, const char *fn)
{
    sbuf_appendf(o,
                 "void %s_wuhalf(uint row_byte, uvec4 at, uint u, uint h, out vec4 q[4], "
                 "out vec2 ab) {\n"
                 "    uint w = row_byte >> 2u;\n",
                 fn);
    if (kernels_wload_dec_half(w))
        sbuf_append(o,
                    "    uvec4 r[4];\n"
                    "    unit_raw(qblock(w + at.x, w + at.y, w + at.z, at.w), u % QU, r);\n"
                    "    unit_dec_half(r, qblock(at.x, at.y, at.z, at.w), u % QU, h, q, ab);\n}\n");
    else
        sbuf_append(o, "    vec4 f[8];\n"
                       "    vec4 a4;\n"
                       "    unit(qblock(w + at.x, w + at.y, w + at.z, at.w), u % QU, f, a4);\n"
                       "    for (uint i = 0u; i < 4u; i++) {\n"
                       "        q[i] = h == 0u ? f[i] : f[4u + i];\n"
                       "    }\n"
                       "    ab = h == 0u ? a4.xy : a4.zw;\n}\n");
}

/* The snippet-based loaders of t (and, with units, the fast units
 * over a uvec4 binding; f32/f16/bf16 come here only for those). */
static bool quant_emit(sbuf *o, const glesc_tensor *w, const char *fn, const char *buf,
                       unsigned what, const char *ne0, bool units)
{
    glesc_dtype t = w->dtype;
    bool plain = !graph_dtype_quant(t);
    bool fast = (what & KERNELS_WLOAD_UNIT) && units;
    const char *snippet = quant_gpu_snippet(t);
    const char *common = emit_snippet_text("quant/common");
    const char *text = snippet ? emit_snippet_text(snippet) : NULL;
    if (!common || !text)
        return false;
    sbuf undefs, locate;
    sbuf_init(&undefs);
    sbuf_init(&locate);
    quant_gpu_locate_glsl(t, &locate);
    sbuf_appendf(o,
                 "// weight loader %s: %s (glsl/%s.glsl) in %s; the snippets' names are renamed "
                 "%s_* so that each loader has its own copy\n",
                 fn, glesc_dtype_name(t), snippet, buf, fn);
    word_macros(o, buf, fast && !(what & KERNELS_WLOAD_WORDS));
    sbuf_append(&undefs, "#undef QW\n#undef QW4\n");
    snippet_names(common, fn, o, &undefs);
    if (locate.len)
        snippet_names(sbuf_str(&locate), fn, o, &undefs);
    snippet_names(text, fn, o, &undefs);
    sbuf_append(o, common);
    if (locate.len)
        sbuf_append(o, sbuf_str(&locate));
    sbuf_append(o, text);
    if (!plain && (what & KERNELS_WLOAD_ELEM))
        sbuf_appendf(o,
                     "float %s(uint row_byte, uint k) {\n"
                     "    return dq4(qlocate(row_byte >> 2u, (%s) / QK, k / QK), (k %% QK) >> "
                     "2u)[k & 3u];\n}\n",
                     fn, ne0);
    if (fast && plain) {
        int esize = (int)graph_dtype_size(t);
        sbuf_appendf(o,
                     "uvec2 %s_wunit_x(uint u) {\n"
                     "    return uvec2(32u * u, 32u * u + 16u);\n}\n"
                     "uvec4 %s_wat(uint u) {\n"
                     "    return uvec4(0u);\n}\n"
                     "void %s_wunit(uint row_byte, uvec4 at, uint u, out vec4 q[8], out vec4 ab) "
                     "{\n"
                     "    punit((row_byte >> 4u) + %du * u, q);\n"
                     "    ab = vec4(1.0, 0.0, 1.0, 0.0);\n}\n",
                     fn, fn, fn, 2 * esize);
        if ((what & KERNELS_WLOAD_HALF) && kernels_wload_half(w))
            sbuf_appendf(o,
                         "void %s_whalf(uint row_byte, uint u, uint h, out vec4 q[4]) {\n"
                         "    phalf((row_byte >> 4u) + %du * u + %du * h, q);\n}\n",
                         fn, 2 * esize, esize);
        if (what & KERNELS_WLOAD_UHALF)
            sbuf_appendf(o,
                         "void %s_wuhalf(uint row_byte, uvec4 at, uint u, uint h, out vec4 q[4], "
                         "out vec2 ab) {\n"
                         "    phalf((row_byte >> 4u) + %du * u + %du * h, q);\n"
                         "    ab = vec2(1.0, 0.0);\n}\n",
                         fn, 2 * esize, esize);
        if ((what & KERNELS_WLOAD_RAW) && kernels_wload_raw(w))
            sbuf_appendf(o,
                         "void %s_wraw(uint row_byte, uvec4 at, uint u, out uvec4 r[4]) {\n"
                         "    praw((row_byte >> 4u) + %du * u, r);\n}\n"
                         "void %s_wdec(uvec4 r[4], uvec4 at, uint u, out vec4 q[8], out vec4 ab) "
                         "{\n"
                         "    pdec(r, q);\n"
                         "    ab = vec4(1.0, 0.0, 1.0, 0.0);\n}\n",
                         fn, 2 * esize, fn);
        if ((what & KERNELS_WLOAD_UQUAD) && kernels_wload_uquad(w))
            sbuf_appendf(o,
                         "void %s_wuq(uint row_byte, uvec4 at, uint u, uint h, uint j, out vec4 q) "
                         "{\n"
                         "    q = pq4((row_byte >> 4u) + %du * u, h, j);\n}\n"
                         "vec2 %s_wuab(uint row_byte, uvec4 at, uint u, uint h) {\n"
                         "    return vec2(1.0, 0.0);\n}\n",
                         fn, 2 * esize, fn);
    } else if (fast) {
        sbuf_appendf(o,
                     "uvec2 %s_wunit_x(uint u) {\n"
                     "    return (u / QU) * QK + unit_x(u %% QU);\n}\n"
                     "uvec4 %s_wat(uint u) {\n"
                     "    qblock b = qlocate(0u, (%s) / QK, u / QU);\n"
                     "    return uvec4(b.f0, b.f1, b.f2, b.i);\n}\n"
                     "void %s_wunit(uint row_byte, uvec4 at, uint u, out vec4 q[8], out vec4 ab) "
                     "{\n"
                     "    uint r = row_byte >> 2u;\n"
                     "    unit(qblock(r + at.x, r + at.y, r + at.z, at.w), u %% QU, q, ab);\n}\n"
                     "#ifdef QMINS\n#define %s_MINS 1\n#endif\n",
                     fn, fn, ne0, fn, fn);
        if ((what & KERNELS_WLOAD_RAW) && kernels_wload_raw(w))
            sbuf_appendf(
                o,
                "void %s_wraw(uint row_byte, uvec4 at, uint u, out uvec4 r[4]) {\n"
                "    uint w = row_byte >> 2u;\n"
                "    unit_raw(qblock(w + at.x, w + at.y, w + at.z, at.w), u %% QU, r);\n}\n"
                "void %s_wdec(uvec4 r[4], uvec4 at, uint u, out vec4 q[8], out vec4 ab) "
                "{\n"
                "    unit_dec(r, qblock(at.x, at.y, at.z, at.w), u %% QU, q, ab);\n}\n",
                fn, fn);
        if ((what & KERNELS_WLOAD_DEC_HALF) && kernels_wload_dec_half(w))
            sbuf_appendf(o,
                         "void %s_wdech(uvec4 r[4], uvec4 at, uint u, uint h, out vec4 q[4], "
                         "out vec2 ab) {\n"
                         "    unit_dec_half(r, qblock(at.x, at.y, at.z, at.w), u %% QU, h, q, "
                         "ab);\n}\n",
                         fn);
        if (what & KERNELS_WLOAD_UHALF)
            block_uhalf(o, w, fn);
        if ((what & KERNELS_WLOAD_UQUAD) && kernels_wload_uquad(w))
            sbuf_appendf(o,
                         "void %s_wuq(uint row_byte, uvec4 at, uint u, uint h, uint j, out vec4 q) "
                         "{\n"
                         "    uint w = row_byte >> 2u;\n"
                         "    q = unit_q4(qblock(w + at.x, w + at.y, w + at.z, at.w), u %% QU, h, "
                         "j);\n}\n"
                         "vec2 %s_wuab(uint row_byte, uvec4 at, uint u, uint h) {\n"
                         "    uint w = row_byte >> 2u;\n"
                         "    return unit_ab(qblock(w + at.x, w + at.y, w + at.z, at.w), u %% QU, "
                         "h);\n}\n",
                         fn, fn);
    } else if (what & KERNELS_WLOAD_UNIT) {
        bool run = snippet_has_run(t);
        bool own = snippet_has(t, "\nvec4 dq4_q(") && snippet_has(t, "\nvec2 dq4_ab(");
        bool quad = what & KERNELS_WLOAD_UQUAD;
        generic_unit(o, fn, ne0, true, run);
        if (what & KERNELS_WLOAD_UHALF)
            generic_uhalf(o, fn, ne0, true, run);
        if (quad)
            generic_uquad(o, fn, own);
        /* the runs' offsets (ab.y, ab.w) where the units give them apart */
        if (run || (quad && own))
            sbuf_appendf(o, "#ifdef QMINS\n#define %s_MINS 1\n#endif\n", fn);
    }
    if (sbuf_str(&undefs))
        sbuf_append(o, sbuf_str(&undefs));
    else
        o->oom = true;
    if (locate.oom)
        o->oom = true;
    sbuf_free(&undefs);
    sbuf_free(&locate);
    return true;
}

/* The writer of a plain type's element loaders; NULL for the block types. */
typedef void (*plain_loader)(sbuf *o, const char *fn, const char *buf);
static plain_loader plain_loader_of(glesc_dtype t)
{
    switch (t) {
    case GLESC_DTYPE_F32:
        return emit_f32;
    case GLESC_DTYPE_F16:
        return emit_f16;
    case GLESC_DTYPE_BF16:
        return emit_bf16;
    default:
        return NULL;
    }
}

void kernels_wload_emit(kb *b, const glesc_tensor *w, const char *fn, const char *buf,
                        unsigned what, const char *ne0)
{
    if (!b->k)
        return;
    glesc_dtype t = w->dtype;
    plain_loader plain = plain_loader_of(t);
    bool units = (what & KERNELS_WLOAD_UNIT) && (what & KERNELS_WLOAD_UVEC4);
    if (units && !kernels_wload_units(w)) {
        kb_fail(b, GLESC_ERROR_STATE, "weight loader %s: %s rows have no uvec4 units", fn,
                glesc_dtype_name(t));
        return;
    }
    sbuf s;
    sbuf_init(&s);
    bool ok = quant_gpu_readable(t);
    if (ok && plain && units) {
        /* the fast units read the binding as uvec4 through the type's snippet */
        ok = quant_emit(&s, w, fn, buf,
                        KERNELS_WLOAD_UNIT |
                            (what & (KERNELS_WLOAD_RAW | KERNELS_WLOAD_HALF | KERNELS_WLOAD_UHALF |
                                     KERNELS_WLOAD_UQUAD | KERNELS_WLOAD_WORDS)),
                        ne0, true);
    } else if (ok && plain) {
        emit_kernel_snippet(b->k, "common/f16");
        plain(&s, fn, buf);
        if (what & KERNELS_WLOAD_UNIT)
            generic_unit(&s, fn, ne0, false, false);
        if ((what & KERNELS_WLOAD_UNIT) && (what & KERNELS_WLOAD_UHALF))
            generic_uhalf(&s, fn, ne0, false, false);
    } else if (ok) {
        ok = quant_emit(&s, w, fn, buf, what, ne0, units);
    }
    if (!ok)
        kb_fail(b, GLESC_ERROR_UNSUPPORTED, "weight loader %s: no GLSL snippet for %s", fn,
                glesc_dtype_name(t) ? glesc_dtype_name(t) : "(unknown type)");
    else if (!sbuf_str(&s))
        kb_fail(b, GLESC_ERROR_OUT_OF_MEMORY, "weight loader %s (%s)", fn, glesc_dtype_name(t));
    else
        emit_kernel_helper(b->k, fn, sbuf_str(&s));
    sbuf_free(&s);
}
