/*
 * wload.c — weight loaders: how matmul and get_rows read one element of a
 * weight row, per weight type. A loader is a GLSL function
 * `float NAME(uint row_byte, uint k)`: element k of the row that starts at
 * byte row_byte of the binding. Quantized types add a row here (their block
 * layout decoded inside the function, k / block size picking the block);
 * the generators do not change.
 */
#include "kernels/kernels.h"

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

static const kernels_wload loaders[] = {
    {GLESC_DTYPE_F32, EMIT_FLOAT, 1, emit_f32},
    {GLESC_DTYPE_F16, EMIT_UINT, 1, emit_f16},
    {GLESC_DTYPE_BF16, EMIT_UINT, 1, emit_bf16},
};

const kernels_wload *kernels_wload_find(glesc_dtype t)
{
    for (size_t i = 0; i < CORE_ARRAY_LEN(loaders); i++)
        if (loaders[i].dtype == t)
            return &loaders[i];
    return NULL;
}

void kernels_wload_emit(kb *b, const kernels_wload *wl, const char *fn, const char *buf)
{
    if (!b->k)
        return;
    emit_kernel_snippet(b->k, "common/f16");
    sbuf s;
    sbuf_init(&s);
    wl->emit(&s, fn, buf);
    if (sbuf_str(&s))
        emit_kernel_helper(b->k, fn, sbuf_str(&s));
    else
        kb_fail(b, GLESC_ERROR_OUT_OF_MEMORY, "weight loader");
    sbuf_free(&s);
}
