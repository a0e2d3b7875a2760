/*
 * writer.c — the GGUF writer: collects metadata (encoded at once, in the file
 * format) and tensor descriptions, then writes a version 3 file in one pass:
 * header, metadata in order of first setting, tensor directory in order of
 * addition, padding to the alignment, tensor data (each tensor padded to the
 * alignment). A file without tensors ends after the directory. The file is written to
 * "path.tmp" and renamed over path, so a reader never sees half a file.
 *
 * Tensor data is not copied: add_tensor keeps the caller's pointer until
 * glesc_gguf_writer_write, so large weights go from the caller's memory
 * straight to the file; add_tensor_fn's tensors are produced by the caller's
 * callback while the file is written, one at a time, so a model larger than
 * memory can be generated tensor by tensor.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

typedef struct wkv {
    char *key;
    glesc_gguf_type type;
    uint8_t *val; /* encoded value, as in the file after the type field */
    size_t val_size;
} wkv;

typedef struct wtensor {
    char *name;
    glesc_dtype type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    const void *data; /* caller's; NULL writes zeros (unless fill is set) */
    glesc_gguf_fill_fn fill;
    void *fill_user;
    uint64_t size;
} wtensor;

struct glesc_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    uint32_t alignment;
};

GLESC_API glesc_gguf_writer *glesc_gguf_writer_create(void)
{
    glesc_gguf_writer *w = core_calloc(1, sizeof *w);
    if (w)
        w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

GLESC_API void glesc_gguf_writer_destroy(glesc_gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        core_free(w->kv[i].key);
        core_free(w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++)
        core_free(w->t[i].name);
    core_free(w->kv);
    core_free(w->t);
    core_free(w);
}

static bool is_pow2(uint64_t a)
{
    return a && (a & (a - 1)) == 0;
}

static wkv *find_kv(glesc_gguf_writer *w, const char *key)
{
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0)
            return &w->kv[i];
    }
    return NULL;
}

/* Stores an encoded value under key (taking ownership of val), replacing an
 * earlier value in place so the key keeps its position. */
static glesc_status put_kv(glesc_gguf_writer *w, const char *key, glesc_gguf_type type,
                           uint8_t *val, size_t val_size)
{
    /* general.alignment and the writer's alignment are one setting. */
    if (strcmp(key, "general.alignment") == 0) {
        uint32_t a = val_size == 4 ? core_le32(val) : 0;
        if (type != GLESC_GGUF_UINT32 || !is_pow2(a)) {
            core_free(val);
            return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                "gguf writer: key 'general.alignment' must be a uint32 power of "
                                "two");
        }
        w->alignment = a;
    }
    wkv *kv = find_kv(w, key);
    if (kv) {
        core_free(kv->val);
        kv->type = type;
        kv->val = val;
        kv->val_size = val_size;
        return GLESC_OK;
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *p = core_realloc(w->kv, cap * sizeof *p);
        if (!p) {
            core_free(val);
            return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "gguf writer: out of memory");
        }
        w->kv = p;
        w->cap_kv = cap;
    }
    char *k = core_strdup(key);
    if (!k) {
        core_free(val);
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "gguf writer: out of memory");
    }
    w->kv[w->n_kv++] = (wkv){k, type, val, val_size};
    return GLESC_OK;
}

static glesc_status check_key(glesc_gguf_writer *w, const char *key)
{
    if (!w)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "gguf writer: writer is NULL");
    if (!key || !*key)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: key is NULL or empty");
    return GLESC_OK;
}

/* Copies size bytes of an already encoded value and stores it. */
static glesc_status set_bytes(glesc_gguf_writer *w, const char *key, glesc_gguf_type type,
                              const void *bytes, size_t size)
{
    glesc_status st = check_key(w, key);
    if (st != GLESC_OK)
        return st;
    uint8_t *val = core_malloc(size ? size : 1);
    if (!val)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY,
                            "gguf writer: key '%s': out of memory for %zu bytes", key, size);
    if (size)
        memcpy(val, bytes, size);
    return put_kv(w, key, type, val, size);
}

GLESC_API glesc_status glesc_gguf_writer_set_alignment(glesc_gguf_writer *w, uint32_t alignment)
{
    core_err_reset(NULL);
    if (!w || !is_pow2(alignment))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: alignment %u is not a nonzero power of two",
                            (unsigned)alignment);
    w->alignment = alignment;
    wkv *kv = find_kv(w, "general.alignment");
    if (kv)
        core_put_le32(kv->val, alignment);
    return GLESC_OK;
}

GLESC_API glesc_status glesc_gguf_writer_set_raw(glesc_gguf_writer *w, const char *key,
                                                 glesc_gguf_type type, const void *v)
{
    core_err_reset(NULL);
    glesc_status st = check_key(w, key);
    if (st != GLESC_OK)
        return st;
    if (!v)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: key '%s': value is NULL", key);
    if (type == GLESC_GGUF_STRING)
        return glesc_gguf_writer_set_str(w, key, v);
    uint32_t size = gguf_type_size(type);
    if (!size)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: key '%s': set_raw takes a scalar, not %s (%d)", key,
                            glesc_gguf_type_name(type), (int)type);
    if (type == GLESC_GGUF_BOOL && *(const uint8_t *)v > 1)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: key '%s': bool byte %u is not 0 or 1", key,
                            *(const uint8_t *)v);
    return set_bytes(w, key, type, v, size);
}

GLESC_API glesc_status glesc_gguf_writer_set_u32(glesc_gguf_writer *w, const char *key, uint32_t v)
{
    core_err_reset(NULL);
    uint8_t b[4];
    core_put_le32(b, v);
    return set_bytes(w, key, GLESC_GGUF_UINT32, b, 4);
}

GLESC_API glesc_status glesc_gguf_writer_set_i32(glesc_gguf_writer *w, const char *key, int32_t v)
{
    core_err_reset(NULL);
    uint8_t b[4];
    core_put_le32(b, (uint32_t)v);
    return set_bytes(w, key, GLESC_GGUF_INT32, b, 4);
}

GLESC_API glesc_status glesc_gguf_writer_set_u64(glesc_gguf_writer *w, const char *key, uint64_t v)
{
    core_err_reset(NULL);
    uint8_t b[8];
    core_put_le64(b, v);
    return set_bytes(w, key, GLESC_GGUF_UINT64, b, 8);
}

GLESC_API glesc_status glesc_gguf_writer_set_f32(glesc_gguf_writer *w, const char *key, float v)
{
    core_err_reset(NULL);
    uint8_t b[4];
    core_put_le_f32(b, v);
    return set_bytes(w, key, GLESC_GGUF_FLOAT32, b, 4);
}

GLESC_API glesc_status glesc_gguf_writer_set_bool(glesc_gguf_writer *w, const char *key, bool v)
{
    core_err_reset(NULL);
    uint8_t b = v ? 1 : 0;
    return set_bytes(w, key, GLESC_GGUF_BOOL, &b, 1);
}

GLESC_API glesc_status glesc_gguf_writer_set_str(glesc_gguf_writer *w, const char *key,
                                                 const char *v)
{
    core_err_reset(NULL);
    glesc_status st = check_key(w, key);
    if (st != GLESC_OK)
        return st;
    if (!v)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: key '%s': string is NULL", key);
    size_t len = strlen(v), size;
    if (core_add_overflow(len, 8, &size))
        return core_err_set(NULL, GLESC_ERROR_LIMIT, "gguf writer: key '%s': string too long", key);
    uint8_t *val = core_malloc(size);
    if (!val)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY,
                            "gguf writer: key '%s': out of memory for %zu bytes", key, size);
    core_put_le64(val, len);
    memcpy(val + 8, v, len);
    return put_kv(w, key, GLESC_GGUF_STRING, val, size);
}

GLESC_API glesc_status glesc_gguf_writer_set_arr(glesc_gguf_writer *w, const char *key,
                                                 glesc_gguf_type elem_type, const void *data,
                                                 uint64_t n)
{
    core_err_reset(NULL);
    glesc_status st = check_key(w, key);
    if (st != GLESC_OK)
        return st;
    uint32_t esize = gguf_type_size(elem_type);
    if (!esize)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: key '%s': set_arr takes numeric elements, not %s (%d)",
                            key, glesc_gguf_type_name(elem_type), (int)elem_type);
    if (!data && n)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: key '%s': data is NULL", key);
    size_t bytes, size;
    if (n > SIZE_MAX || core_mul_overflow((size_t)n, esize, &bytes) ||
        core_add_overflow(bytes, 12, &size))
        return core_err_set(NULL, GLESC_ERROR_LIMIT,
                            "gguf writer: key '%s': array of %llu elements is too large", key,
                            (unsigned long long)n);
    if (elem_type == GLESC_GGUF_BOOL) {
        for (uint64_t i = 0; i < n; i++) {
            if (((const uint8_t *)data)[i] > 1)
                return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                    "gguf writer: key '%s': bool element %llu is not 0 or 1", key,
                                    (unsigned long long)i);
        }
    }
    uint8_t *val = core_malloc(size);
    if (!val)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY,
                            "gguf writer: key '%s': out of memory for %zu bytes", key, size);
    core_put_le32(val, (uint32_t)elem_type);
    core_put_le64(val + 4, n);
    if (bytes)
        memcpy(val + 12, data, bytes);
    return put_kv(w, key, GLESC_GGUF_ARRAY, val, size);
}

GLESC_API glesc_status glesc_gguf_writer_set_arr_str(glesc_gguf_writer *w, const char *key,
                                                     const char *const *strs, uint64_t n)
{
    core_err_reset(NULL);
    glesc_status st = check_key(w, key);
    if (st != GLESC_OK)
        return st;
    if (!strs && n)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: key '%s': strs is NULL", key);
    size_t size = 12;
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i])
            return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                "gguf writer: key '%s': string %llu is NULL", key,
                                (unsigned long long)i);
        if (core_add_overflow(size, 8 + strlen(strs[i]), &size))
            return core_err_set(NULL, GLESC_ERROR_LIMIT,
                                "gguf writer: key '%s': string array is too large", key);
    }
    uint8_t *val = core_malloc(size);
    if (!val)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY,
                            "gguf writer: key '%s': out of memory for %zu bytes", key, size);
    core_put_le32(val, GLESC_GGUF_STRING);
    core_put_le64(val + 4, n);
    size_t pos = 12;
    for (uint64_t i = 0; i < n; i++) {
        size_t len = strlen(strs[i]);
        core_put_le64(val + pos, len);
        memcpy(val + pos + 8, strs[i], len);
        pos += 8 + len;
    }
    return put_kv(w, key, GLESC_GGUF_ARRAY, val, size);
}

GLESC_API glesc_status glesc_gguf_writer_set_encoded(glesc_gguf_writer *w, const char *key,
                                                     glesc_gguf_type type, const void *data,
                                                     uint64_t size)
{
    core_err_reset(NULL);
    glesc_status st = check_key(w, key);
    if (st != GLESC_OK)
        return st;
    if ((!data && size) || size > SIZE_MAX)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: key '%s': data is NULL or too large", key);
    gguf_cursor c;
    gguf_cursor_init(&c, data, size);
    gguf_value_error err;
    if (!gguf_value_check(&c, type, 0, &err))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: key '%s': encoded value, byte %llu: %s", key,
                            (unsigned long long)err.pos, err.msg);
    if (c.pos != size)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: key '%s': encoded %s value is %llu bytes, not %llu", key,
                            glesc_gguf_type_name(type), (unsigned long long)c.pos,
                            (unsigned long long)size);
    return set_bytes(w, key, type, data, (size_t)size);
}

/* add_tensor and add_tensor_fn: t holds the data source (data or fill). */
static glesc_status add_tensor(glesc_gguf_writer *w, const char *name, glesc_dtype type, int n_dims,
                               const int64_t *ne, wtensor t)
{
    core_err_reset(NULL);
    if (!w || !name || !*name || !ne)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: add_tensor: NULL writer, name or shape");
    const quant_type_info *q = quant_type(type);
    if (!q)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: tensor '%s': unknown type %d", name, (int)type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: tensor '%s': n_dims %d is not in 1..%d", name, n_dims,
                            GGUF_MAX_DIMS);
    for (size_t i = 0; i < w->n_t; i++) {
        if (strcmp(w->t[i].name, name) == 0)
            return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                "gguf writer: tensor '%s' was already added", name);
    }
    t.type = type;
    t.n_dims = n_dims;
    uint64_t size = t.size;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] <= 0) /* the reader refuses an empty dimension too */
            return core_err_set(NULL, GLESC_ERROR_SHAPE,
                                "gguf writer: tensor '%s': ne[%d] = %lld is not positive", name, d,
                                (long long)t.ne[d]);
    }
    if (t.ne[0] % q->block_size)
        return core_err_set(NULL, GLESC_ERROR_SHAPE,
                            "gguf writer: tensor '%s': row length %lld is not a multiple of %s's "
                            "block size %d",
                            name, (long long)t.ne[0], q->name, q->block_size);
    uint64_t row = glesc_dtype_row_bytes(type, t.ne[0]), rows = 1, expect = 0;
    int64_t nel = 1;
    bool overflow = row == 0;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        overflow |= __builtin_mul_overflow(nel, t.ne[d], &nel);
    for (int d = 1; d < GGUF_MAX_DIMS; d++)
        overflow |= __builtin_mul_overflow(rows, (uint64_t)t.ne[d], &rows);
    overflow |= __builtin_mul_overflow(row, rows, &expect);
    if (overflow)
        return core_err_set(NULL, GLESC_ERROR_SHAPE,
                            "gguf writer: tensor '%s': size of shape %lld x %lld x %lld x %lld "
                            "overflows",
                            name, (long long)t.ne[0], (long long)t.ne[1], (long long)t.ne[2],
                            (long long)t.ne[3]);
    if (size != expect)
        return core_err_set(NULL, GLESC_ERROR_SHAPE,
                            "gguf writer: tensor '%s': size %llu does not match %llu rows of %llu "
                            "bytes (%s, shape %lld x %lld x %lld x %lld) = %llu",
                            name, (unsigned long long)size, (unsigned long long)rows,
                            (unsigned long long)row, q->name, (long long)t.ne[0],
                            (long long)t.ne[1], (long long)t.ne[2], (long long)t.ne[3],
                            (unsigned long long)expect);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 16;
        wtensor *p = core_realloc(w->t, cap * sizeof *p);
        if (!p)
            return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "gguf writer: out of memory");
        w->t = p;
        w->cap_t = cap;
    }
    t.name = core_strdup(name);
    if (!t.name)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "gguf writer: out of memory");
    w->t[w->n_t++] = t;
    return GLESC_OK;
}

GLESC_API glesc_status glesc_gguf_writer_add_tensor(glesc_gguf_writer *w, const char *name,
                                                    glesc_dtype type, int n_dims, const int64_t *ne,
                                                    const void *data, uint64_t size)
{
    return add_tensor(w, name, type, n_dims, ne, (wtensor){.data = data, .size = size});
}

GLESC_API glesc_status glesc_gguf_writer_add_tensor_fn(glesc_gguf_writer *w, const char *name,
                                                       glesc_dtype type, int n_dims,
                                                       const int64_t *ne, uint64_t size,
                                                       glesc_gguf_fill_fn fill, void *user)
{
    core_err_reset(NULL);
    if (!fill)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "gguf writer: add_tensor_fn: tensor '%s': NULL callback",
                            name ? name : "(null)");
    return add_tensor(w, name, type, n_dims, ne,
                      (wtensor){.fill = fill, .fill_user = user, .size = size});
}

/* ---- Writing ---- */

typedef struct out {
    FILE *fp;
    uint64_t pos;
    bool failed;
} out;

static void out_bytes(out *o, const void *p, size_t n)
{
    if (o->failed || n == 0)
        return;
    if (fwrite(p, 1, n, o->fp) != n)
        o->failed = true;
    o->pos += n;
}

static void out_u32(out *o, uint32_t v)
{
    uint8_t b[4];
    core_put_le32(b, v);
    out_bytes(o, b, 4);
}

static void out_u64(out *o, uint64_t v)
{
    uint8_t b[8];
    core_put_le64(b, v);
    out_bytes(o, b, 8);
}

static void out_str(out *o, const char *s)
{
    size_t n = strlen(s);
    out_u64(o, n);
    out_bytes(o, s, n);
}

static void out_zeros(out *o, uint64_t n)
{
    static const uint8_t zeros[4096];
    while (n && !o->failed) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        out_bytes(o, zeros, k);
        n -= k;
    }
}

static uint64_t align_up(uint64_t x, uint32_t a)
{
    return (x + a - 1) & ~(uint64_t)(a - 1);
}

GLESC_API glesc_status glesc_gguf_writer_write(glesc_gguf_writer *w, const char *path)
{
    core_err_reset(NULL);
    if (!w || !path)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "gguf writer: NULL writer or path");
    /* general.alignment is written whenever it is not the default. */
    if (w->alignment != GGUF_DEFAULT_ALIGNMENT && !find_kv(w, "general.alignment")) {
        glesc_status st = glesc_gguf_writer_set_u32(w, "general.alignment", w->alignment);
        if (st != GLESC_OK)
            return st;
    }
    sbuf tmp;
    sbuf_init(&tmp);
    sbuf_appendf(&tmp, "%s.tmp", path);
    const char *tmp_path = sbuf_str(&tmp);
    if (!tmp_path)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "gguf writer: out of memory");
    glesc_status st = GLESC_OK;
    out o = {fopen(tmp_path, "wb"), 0, false};
    if (!o.fp) {
        st = core_err_set(NULL, GLESC_ERROR_IO, "%s: cannot create: %s", tmp_path, strerror(errno));
        goto done;
    }
    out_bytes(&o, GGUF_MAGIC, 4);
    out_u32(&o, 3);
    out_u64(&o, w->n_t);
    out_u64(&o, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        out_str(&o, w->kv[i].key);
        out_u32(&o, (uint32_t)w->kv[i].type);
        out_bytes(&o, w->kv[i].val, w->kv[i].val_size);
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        out_str(&o, t->name);
        out_u32(&o, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++)
            out_u64(&o, (uint64_t)t->ne[d]);
        out_u32(&o, (uint32_t)t->type);
        out_u64(&o, offset);
        offset = align_up(offset + t->size, w->alignment);
    }
    /* offset is now the size of the data section. Without tensors the file
     * ends after the directory, unpadded, as ggml writes vocab-only files;
     * the reader accepts that, and a large alignment then costs no
     * padding. */
    bool has_data = offset > 0;
    if (has_data)
        out_zeros(&o, align_up(o.pos, w->alignment) - o.pos);
    uint64_t data_start = o.pos;
    for (size_t i = 0; i < w->n_t && has_data && !o.failed; i++) {
        const wtensor *t = &w->t[i];
        if (t->fill && t->size) {
            void *buf = core_malloc((size_t)t->size);
            if (!buf) {
                st = core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY,
                                  "gguf writer: tensor '%s': %llu bytes", t->name,
                                  (unsigned long long)t->size);
                break;
            }
            st = t->fill(t->fill_user, t->name, buf, t->size);
            if (st == GLESC_OK)
                out_bytes(&o, buf, (size_t)t->size);
            core_free(buf);
            if (st != GLESC_OK)
                break;
        } else if (t->data)
            out_bytes(&o, t->data, (size_t)t->size);
        else
            out_zeros(&o, t->size);
        /* Every tensor, the last one too, is padded to the alignment (as
         * ggml's writer does). */
        out_zeros(&o, align_up(o.pos - data_start, w->alignment) - (o.pos - data_start));
    }
    if (st != GLESC_OK) { /* a callback's failure or no memory for its tensor */
        fclose(o.fp);
        remove(tmp_path);
        goto done;
    }
    if (o.failed || fflush(o.fp) != 0 || fsync(fileno(o.fp)) != 0) {
        st = core_err_set(NULL, GLESC_ERROR_IO, "%s: write failed at byte %llu: %s", tmp_path,
                          (unsigned long long)o.pos, strerror(errno));
        fclose(o.fp);
        remove(tmp_path);
        goto done;
    }
    if (fclose(o.fp) != 0) {
        st = core_err_set(NULL, GLESC_ERROR_IO, "%s: close failed: %s", tmp_path, strerror(errno));
        remove(tmp_path);
        goto done;
    }
    if (rename(tmp_path, path) != 0) {
        st = core_err_set(NULL, GLESC_ERROR_IO, "cannot rename %s to %s: %s", tmp_path, path,
                          strerror(errno));
        remove(tmp_path);
        goto done;
    }
done:
    sbuf_free(&tmp);
    return st;
}
