/*
 * wload.c — weight loaders: how matmul and get_rows read a weight row, per
 * weight type. A loader is a GLSL function `float NAME(uint row_byte, uint
 * k)`: element k of the row that starts at byte row_byte of the binding;
 * with vec4 asked for, also `vec4 NAME4(uint row_byte, uint k4)`: elements
 * 4·k4 .. 4·k4+3 (row_byte then a multiple of 4).
 *
 * f32, f16 and bf16 are written here. The ggml block types are built on the
 * glsl/quant/ snippets (the ones tests/test_quant_gpu.c checks against the
 * CPU reference): each defines QK, QWORDS and `vec4 dq4(uint b, uint j)`
 * over the uint buffer named by the macro QW, and quant/common defines its
 * helpers (qbyte, nib4, ...). A kernel can hold two loaders (gate/up pair),
 * each over its own binding, so every loader gets its own copy of both
 * snippets with each top-level name renamed by a #define to NAME_<name>
 * (collected from the snippet text: function definitions and constants at
 * the start of a line), and every macro is #undef'd after the copy. The
 * per-element loader decodes a group of 4 and picks one; matmul uses NAME4
 * where it can (variant: kernels_wload_vec4), get_rows the scalar one.
 */
#include <string.h>

#include "kernels/kernels.h"
#include "quant/quant.h"

static void emit_f32(sbuf *o, const char *fn, const char *buf, bool vec4)
{
    sbuf_appendf(o, "float %s(uint row_byte, uint k) {\n    return %s[(row_byte >> 2u) + k];\n}\n",
                 fn, buf);
    if (vec4)
        sbuf_appendf(o,
                     "vec4 %s4(uint row_byte, uint k4) {\n"
                     "    uint i = (row_byte >> 2u) + 4u * k4;\n"
                     "    return vec4(%s[i], %s[i + 1u], %s[i + 2u], %s[i + 3u]);\n}\n",
                     fn, buf, buf, buf, buf);
}

static void emit_f16(sbuf *o, const char *fn, const char *buf, bool vec4)
{
    sbuf_appendf(o,
                 "float %s(uint row_byte, uint k) {\n"
                 "    uint i = (row_byte >> 1u) + k;\n"
                 "    return f16_at(%s[i >> 1u], i);\n}\n",
                 fn, buf);
    if (vec4)
        sbuf_appendf(o,
                     "vec4 %s4(uint row_byte, uint k4) {\n"
                     "    uint i = (row_byte >> 2u) + 2u * k4;\n"
                     "    return vec4(unpackHalf2x16(%s[i]), unpackHalf2x16(%s[i + 1u]));\n}\n",
                     fn, buf, buf);
}

static void emit_bf16(sbuf *o, const char *fn, const char *buf, bool vec4)
{
    sbuf_appendf(o,
                 "float %s(uint row_byte, uint k) {\n"
                 "    uint i = (row_byte >> 1u) + k;\n"
                 "    return bf16_at(%s[i >> 1u], i);\n}\n",
                 fn, buf);
    if (vec4)
        sbuf_appendf(o,
                     "vec4 %s4(uint row_byte, uint k4) {\n"
                     "    uint i = (row_byte >> 2u) + 2u * k4;\n"
                     "    uvec2 w = uvec2(%s[i], %s[i + 1u]);\n"
                     "    return uintBitsToFloat(uvec4(w.x << 16u, w.x & 0xffff0000u, w.y << 16u, "
                     "w.y & 0xffff0000u));\n}\n",
                     fn, buf, buf);
}

bool kernels_wload_vec4(const glesc_tensor *w)
{
    if (w->ne[0] % 4)
        return false;
    switch (w->dtype) {
    case GLESC_DTYPE_F32:
        return true; /* word-addressed: any row start works */
    case GLESC_DTYPE_F16:
    case GLESC_DTYPE_BF16: {
        /* pairs of words: every row must start on a word */
        bool ok = w->offs % 4 == 0;
        for (int d = 1; d < 4; d++)
            ok = ok && (w->ne[d] == 1 || w->nb[d] % 4 == 0);
        return ok;
    }
    default:
        return graph_dtype_quant(w->dtype); /* GPU rows are whole words of whole blocks */
    }
}

static bool is_ident(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Appends to defs "#define NAME P_NAME" for each top-level function or
 * constant of text and to undefs "#undef X" for those and every macro it
 * defines. A top-level definition is a line starting with an identifier
 * (`TYPE NAME(` or `const TYPE NAME =`); body lines are indented. */
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
        /* the type, a space, then the name */
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

static bool quant_emit(sbuf *o, glesc_dtype t, const char *fn, const char *buf, bool vec4)
{
    const char *snippet = quant_gpu_snippet(t);
    const char *common = emit_snippet_text("quant/common");
    const char *text = snippet ? emit_snippet_text(snippet) : NULL;
    if (!common || !text)
        return false;
    sbuf undefs;
    sbuf_init(&undefs);
    sbuf_appendf(o,
                 "// weight loader %s: %s blocks (glsl/%s.glsl) in %s; the snippets' names are "
                 "renamed %s_* so that each loader has its own copy\n",
                 fn, glesc_dtype_name(t), snippet, buf, fn);
    sbuf_appendf(o, "#define QW %s\n", buf);
    sbuf_append(&undefs, "#undef QW\n");
    snippet_names(common, fn, o, &undefs);
    snippet_names(text, fn, o, &undefs);
    sbuf_append(o, common);
    sbuf_append(o, text);
    sbuf_appendf(o,
                 "float %s(uint row_byte, uint k) {\n"
                 "    return dq4((row_byte >> 2u) + (k / QK) * QWORDS, (k %% QK) >> 2u)[k & 3u];\n"
                 "}\n",
                 fn);
    if (vec4)
        sbuf_appendf(o,
                     "vec4 %s4(uint row_byte, uint k4) {\n"
                     "    return dq4((row_byte >> 2u) + (k4 / (QK / 4u)) * QWORDS, k4 %% (QK / "
                     "4u));\n}\n",
                     fn);
    if (sbuf_str(&undefs))
        sbuf_append(o, sbuf_str(&undefs));
    else
        o->oom = true;
    sbuf_free(&undefs);
    return true;
}

/* The writer of a plain type's loader; NULL for the block types. */
typedef void (*plain_loader)(sbuf *o, const char *fn, const char *buf, bool vec4);
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

void kernels_wload_emit(kb *b, glesc_dtype t, const char *fn, const char *buf, bool vec4)
{
    if (!b->k)
        return;
    plain_loader plain = plain_loader_of(t);
    sbuf s;
    sbuf_init(&s);
    bool ok = quant_gpu_readable(t);
    if (ok && plain) {
        emit_kernel_snippet(b->k, "common/f16");
        plain(&s, fn, buf, vec4);
    } else if (ok) {
        ok = quant_emit(&s, t, fn, buf, vec4);
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
