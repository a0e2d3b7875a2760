/*
 * iter.c — the public value iterator (glesc_gguf_iter_*, see glesc_gguf.h):
 * a walk over one metadata entry's encoded value (glesc_gguf_kv_raw) through
 * the bounds-checked cursor, with a stack of the arrays whose elements are
 * still being handed out. The reader validated the value at open, so the
 * walk never meets a bad length or type; skipping reuses the validating walk
 * (gguf_value_check) to step over elements.
 */
#include "core/core.h"
#include "gguf/gguf.h"

/* An array whose elements are being handed out. */
typedef struct open_array {
    glesc_gguf_type elem_type;
    uint64_t n, next; /* elements; index of the next one */
} open_array;

struct glesc_gguf_iter {
    gguf_cursor c;
    glesc_gguf_type type; /* of the entry's own value */
    bool started, done;
    int n_open;
    open_array open[GGUF_MAX_ARRAY_DEPTH];
};

GLESC_API glesc_status glesc_gguf_iter_create(const glesc_gguf *f, int64_t i, glesc_gguf_iter **out)
{
    core_err_reset(NULL);
    if (out)
        *out = NULL;
    const void *data;
    uint64_t size;
    if (!f || !out)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_gguf_iter_create: %s is NULL", f ? "out" : "f");
    if (glesc_gguf_kv_raw(f, i, &data, &size) != GLESC_OK)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_gguf_iter_create: entry %lld is out of range (%lld entries)",
                            (long long)i, (long long)glesc_gguf_n_kv(f));
    glesc_gguf_iter *it = core_calloc(1, sizeof *it);
    if (!it)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY,
                            "glesc_gguf_iter_create: out of memory");
    gguf_cursor_init(&it->c, data, size);
    it->type = glesc_gguf_kv_type(f, i);
    *out = it;
    return GLESC_OK;
}

GLESC_API void glesc_gguf_iter_destroy(glesc_gguf_iter *it)
{
    core_free(it);
}

/* Closes the arrays whose elements have all been handed out (an element
 * that is an array keeps its parent's slot until its own elements are
 * done); the walk ends when none is left open. */
static void close_finished(glesc_gguf_iter *it)
{
    while (it->n_open > 0 && it->open[it->n_open - 1].next == it->open[it->n_open - 1].n)
        it->n_open--;
    if (it->n_open == 0)
        it->done = true;
}

/* Decodes one value of type t at the cursor (validated at open). */
static void decode(gguf_cursor *c, glesc_gguf_type t, glesc_gguf_value *v)
{
    const uint8_t *p;
    switch (t) {
    case GLESC_GGUF_UINT8:
        v->as.u64 = *gguf_cursor_take(c, 1);
        break;
    case GLESC_GGUF_INT8:
        v->as.i64 = (int8_t)*gguf_cursor_take(c, 1);
        break;
    case GLESC_GGUF_BOOL:
        v->as.b = *gguf_cursor_take(c, 1) != 0;
        break;
    case GLESC_GGUF_UINT16:
        v->as.u64 = core_le16(gguf_cursor_take(c, 2));
        break;
    case GLESC_GGUF_INT16:
        v->as.i64 = (int16_t)core_le16(gguf_cursor_take(c, 2));
        break;
    case GLESC_GGUF_UINT32:
        v->as.u64 = gguf_cursor_u32(c);
        break;
    case GLESC_GGUF_INT32:
        v->as.i64 = (int32_t)gguf_cursor_u32(c);
        break;
    case GLESC_GGUF_UINT64:
        v->as.u64 = gguf_cursor_u64(c);
        break;
    case GLESC_GGUF_INT64:
        v->as.i64 = (int64_t)gguf_cursor_u64(c);
        break;
    case GLESC_GGUF_FLOAT32: {
        uint32_t bits = gguf_cursor_u32(c);
        float f;
        memcpy(&f, &bits, sizeof f);
        v->as.f64 = f;
        break;
    }
    case GLESC_GGUF_FLOAT64: {
        uint64_t bits = gguf_cursor_u64(c);
        memcpy(&v->as.f64, &bits, sizeof v->as.f64);
        break;
    }
    case GLESC_GGUF_STRING:
        v->as.str.len = gguf_cursor_u64(c);
        p = gguf_cursor_take(c, v->as.str.len);
        v->as.str.data = (const char *)p;
        break;
    case GLESC_GGUF_ARRAY:
        v->as.arr.elem_type = (glesc_gguf_type)gguf_cursor_u32(c);
        v->as.arr.n = gguf_cursor_u64(c);
        break;
    }
}

GLESC_API bool glesc_gguf_iter_next(glesc_gguf_iter *it, glesc_gguf_value *out)
{
    if (!it || it->done)
        return false;
    glesc_gguf_value v;
    memset(&v, 0, sizeof v);
    if (!it->started) {
        it->started = true;
        v.type = it->type;
    } else {
        open_array *a = &it->open[it->n_open - 1];
        v.type = a->elem_type;
        v.depth = it->n_open;
        v.index = a->next++;
    }
    decode(&it->c, v.type, &v);
    /* The reader's validation bounds the nesting by GGUF_MAX_ARRAY_DEPTH,
     * so an array with elements always finds a free slot. */
    if (v.type == GLESC_GGUF_ARRAY && v.as.arr.n > 0 && it->n_open < GGUF_MAX_ARRAY_DEPTH)
        it->open[it->n_open++] = (open_array){v.as.arr.elem_type, v.as.arr.n, 0};
    else
        close_finished(it);
    *out = v;
    return true;
}

GLESC_API void glesc_gguf_iter_skip(glesc_gguf_iter *it)
{
    if (!it || it->done || it->n_open == 0)
        return;
    open_array *a = &it->open[it->n_open - 1];
    uint32_t size = gguf_type_size(a->elem_type);
    if (size > 0) { /* fixed-size elements: one step */
        gguf_cursor_take(&it->c, (a->n - a->next) * size);
    } else {
        gguf_value_error err;
        for (uint64_t k = a->next; k < a->n; k++)
            gguf_value_check(&it->c, a->elem_type, it->n_open, &err);
    }
    a->next = a->n;
    close_finished(it);
}
