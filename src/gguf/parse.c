/*
 * parse.c — validates a whole GGUF file (versions 2 and 3) before the reader
 * hands out anything, in the steps of gguf_parse below: header, metadata,
 * tensor directory, names and their indexes, alignment, tensor data.
 *
 * Layout (little-endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 * n_kv × (string key, u32 type, value), n_tensors × (string name, u32 n_dims,
 * n_dims × u64 ne, u32 type, u64 offset), padding to the alignment, tensor
 * data. A string is a u64 length and that many bytes (no NUL).
 *
 * Everything is read through gguf_cursor, so no read can leave the buffer;
 * each count is compared with the bytes left before anything is allocated for
 * it (a count of 2^60 fails at once), and every size computation is checked
 * for overflow. Vocab-only files that stop right after the tensor directory
 * (no padding, no data) are valid: the data section is only required to
 * exist when there are tensors. Every failure names the file and the offset
 * of the offending field.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "quant/quant.h"

/* What the steps share: the cursor, and where each name sits in the file
 * (names are copied in one block once all are known). */
typedef struct parse_state {
    glesc_gguf *f;
    gguf_cursor c;
    uint64_t n_kv, n_tensors;
    uint64_t name_bytes; /* all names with their NULs */
    const uint8_t **key_src, **tname_src;
    uint64_t *key_len;
    uint64_t tdir_off;   /* offset of the tensor directory */
    uint64_t header_end; /* offset just past the directory */
} parse_state;

/* Sets the thread's error ("file: offset N: message") and returns false. */
static bool fail(const glesc_gguf *f, glesc_status st, uint64_t at, const char *fmt, ...)
    CORE_PRINTF(4, 5);

static bool fail(const glesc_gguf *f, glesc_status st, uint64_t at, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    core_err_set(NULL, st, "%s: offset %llu: %s", f->name, (unsigned long long)at, msg);
    return false;
}

/* Reads a key or tensor name: checks its length against the bytes left and
 * that it has no NUL byte (the NUL-terminated copies must be faithful). */
static bool read_name(glesc_gguf *f, gguf_cursor *c, const char *what, const uint8_t **s,
                      uint64_t *len)
{
    uint64_t at = c->pos;
    *len = gguf_cursor_u64(c);
    if (c->overrun)
        return fail(f, GLESC_ERROR_FORMAT, at, "%s length is cut off by the end of the file", what);
    *s = gguf_cursor_take(c, *len);
    if (!*s)
        return fail(f, GLESC_ERROR_FORMAT, at,
                    "%s length %llu goes past the end of the file (%llu bytes left)", what,
                    (unsigned long long)*len, (unsigned long long)(f->size - at - 8));
    if (memchr(*s, 0, (size_t)*len))
        return fail(f, GLESC_ERROR_FORMAT, at, "%s '%.*s' contains a NUL byte", what,
                    (int)CORE_MIN(*len, 200), (const char *)*s);
    return true;
}

/* ---- Header ---- */

static bool parse_header(parse_state *ps)
{
    glesc_gguf *f = ps->f;
    gguf_cursor *c = &ps->c;
    if (f->size < 4)
        return fail(f, GLESC_ERROR_FORMAT, 0, "file is %llu bytes, too short for a GGUF header",
                    (unsigned long long)f->size);
    if (memcmp(f->data, GGUF_MAGIC, 4) != 0)
        return fail(f, GLESC_ERROR_FORMAT, 0,
                    "bad magic %02x %02x %02x %02x (expected \"GGUF\"): not a GGUF file",
                    f->data[0], f->data[1], f->data[2], f->data[3]);
    gguf_cursor_take(c, 4);
    f->version = gguf_cursor_u32(c);
    if (c->overrun)
        return fail(f, GLESC_ERROR_FORMAT, 4,
                    "header is cut off by the end of the file (%llu bytes)",
                    (unsigned long long)f->size);
    if (f->version == 1)
        return fail(f, GLESC_ERROR_UNSUPPORTED, 4,
                    "GGUF version 1 is not supported (it uses 32-bit counts; convert the file "
                    "to version 3)");
    if (f->version != 2 && f->version != 3) {
        if ((f->version & 0xffff) == 0 && f->version != 0)
            return fail(f, GLESC_ERROR_UNSUPPORTED, 4,
                        "GGUF version %u is not supported (this looks like a big-endian file; "
                        "only little-endian versions 2 and 3 are)",
                        (unsigned)f->version);
        return fail(f, GLESC_ERROR_UNSUPPORTED, 4,
                    "GGUF version %u is not supported (only 2 and 3 are)", (unsigned)f->version);
    }
    ps->n_tensors = gguf_cursor_u64(c);
    ps->n_kv = gguf_cursor_u64(c);
    if (c->overrun)
        return fail(f, GLESC_ERROR_FORMAT, 8,
                    "header is cut off by the end of the file (%llu bytes)",
                    (unsigned long long)f->size);
    return true;
}

/* ---- Metadata ---- */

/* One key/value entry: its key, type and value (validated by
 * gguf_value_check), and for arrays the element type, count and, for
 * string arrays, where each element starts. */
static bool parse_kv(parse_state *ps, uint64_t i)
{
    glesc_gguf *f = ps->f;
    gguf_cursor *c = &ps->c;
    gguf_kv *kv = &f->kv[i];
    kv->key_off = c->pos;
    if (!read_name(f, c, "key", &ps->key_src[i], &ps->key_len[i]))
        return false;
    ps->name_bytes += ps->key_len[i] + 1;
    int klen = (int)CORE_MIN(ps->key_len[i], 200);
    const char *kstr = (const char *)ps->key_src[i];
    uint64_t type_off = c->pos;
    uint32_t type = gguf_cursor_u32(c);
    if (c->overrun)
        return fail(f, GLESC_ERROR_FORMAT, type_off,
                    "key '%.*s': value type is cut off by the end of the file", klen, kstr);
    if (!gguf_type_is_known(type))
        return fail(f, GLESC_ERROR_FORMAT, type_off, "key '%.*s': unknown value type %u", klen,
                    kstr, (unsigned)type);
    kv->type = (glesc_gguf_type)type;
    kv->val_off = c->pos;
    gguf_value_error verr;
    if (!gguf_value_check(c, kv->type, 0, &verr))
        return fail(f, GLESC_ERROR_FORMAT, verr.pos, "key '%.*s': %s", klen, kstr, verr.msg);
    kv->val_size = c->pos - kv->val_off;
    if (kv->type != GLESC_GGUF_ARRAY)
        return true;
    const uint8_t *p = f->data + kv->val_off;
    kv->arr_type = (glesc_gguf_type)core_le32(p);
    kv->arr_n = core_le64(p + 4);
    if (kv->arr_type != GLESC_GGUF_STRING || !kv->arr_n)
        return true;
    /* n strings took at least 8n validated bytes: the count fits. */
    kv->str_index = core_calloc((size_t)kv->arr_n, sizeof *kv->str_index);
    if (!kv->str_index)
        return fail(f, GLESC_ERROR_OUT_OF_MEMORY, kv->val_off,
                    "key '%.*s': out of memory for the index of %llu strings", klen, kstr,
                    (unsigned long long)kv->arr_n);
    uint64_t pos = kv->val_off + 12;
    for (uint64_t j = 0; j < kv->arr_n; j++) {
        kv->str_index[j] = pos;
        pos += 8 + core_le64(f->data + pos);
    }
    return true;
}

static bool parse_metadata(parse_state *ps)
{
    glesc_gguf *f = ps->f;
    /* Each entry takes at least 8 (key length) + 4 (type) + 1 bytes. */
    if (ps->n_kv > gguf_cursor_left(&ps->c) / 13)
        return fail(f, GLESC_ERROR_FORMAT, 16,
                    "n_kv %llu is more than the %llu bytes left can hold",
                    (unsigned long long)ps->n_kv, (unsigned long long)gguf_cursor_left(&ps->c));
    if (ps->n_kv) {
        f->kv = core_calloc((size_t)ps->n_kv, sizeof *f->kv);
        ps->key_src = core_calloc((size_t)ps->n_kv, sizeof *ps->key_src);
        ps->key_len = core_calloc((size_t)ps->n_kv, sizeof *ps->key_len);
        if (!f->kv || !ps->key_src || !ps->key_len)
            return fail(f, GLESC_ERROR_OUT_OF_MEMORY, 16, "out of memory for %llu metadata entries",
                        (unsigned long long)ps->n_kv);
    }
    f->n_kv = (int64_t)ps->n_kv;
    for (uint64_t i = 0; i < ps->n_kv; i++)
        if (!parse_kv(ps, i))
            return false;
    return true;
}

/* ---- Tensor directory ---- */

/* A tensor's byte size from its shape and type: the element count must fit
 * in int64 (as ggml requires), the row must be whole blocks, and rows × row
 * bytes must fit. nlen, nstr: its name for messages (the file's bytes, not
 * yet NUL-terminated). */
static bool tensor_size(glesc_gguf *f, gguf_tensor *t, const quant_type_info *q, int nlen,
                        const char *nstr)
{
    uint64_t shape_off = t->info_off + 8 + t->name_len + 4;
    int64_t nel = 1;
    for (int d = 0; d < t->n_dims; d++) {
        if (__builtin_mul_overflow(nel, t->ne[d], &nel))
            return fail(f, GLESC_ERROR_FORMAT, shape_off,
                        "tensor '%.*s': element count overflows (shape %lld x %lld x %lld x %lld)",
                        nlen, nstr, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                        (long long)t->ne[3]);
    }
    if (t->ne[0] % q->block_size)
        return fail(f, GLESC_ERROR_FORMAT, shape_off,
                    "tensor '%.*s': row length %lld is not a multiple of %s's block size %d", nlen,
                    nstr, (long long)t->ne[0], q->name, q->block_size);
    uint64_t row = glesc_dtype_row_bytes(t->type, t->ne[0]);
    if (row == 0)
        return fail(f, GLESC_ERROR_FORMAT, shape_off,
                    "tensor '%.*s': byte size of a row of %lld %s elements overflows", nlen, nstr,
                    (long long)t->ne[0], q->name);
    uint64_t size = row;
    for (int d = 1; d < t->n_dims; d++) {
        if (__builtin_mul_overflow(size, (uint64_t)t->ne[d], &size))
            return fail(f, GLESC_ERROR_FORMAT, shape_off,
                        "tensor '%.*s': byte size overflows (shape %lld x %lld x %lld x %lld of "
                        "%s)",
                        nlen, nstr, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                        (long long)t->ne[3], q->name);
    }
    t->size = size;
    return true;
}

/* One directory entry: name, shape, type and data offset. */
static bool parse_tensor_info(parse_state *ps, uint64_t i)
{
    glesc_gguf *f = ps->f;
    gguf_cursor *c = &ps->c;
    gguf_tensor *t = &f->tensors[i];
    t->info_off = c->pos;
    if (!read_name(f, c, "tensor name", &ps->tname_src[i], &t->name_len))
        return false;
    ps->name_bytes += t->name_len + 1;
    int nlen = (int)CORE_MIN(t->name_len, 200);
    const char *nstr = (const char *)ps->tname_src[i];
    uint64_t at = c->pos;
    uint32_t n_dims = gguf_cursor_u32(c);
    if (c->overrun)
        return fail(f, GLESC_ERROR_FORMAT, at,
                    "tensor '%.*s': n_dims is cut off by the end of the file", nlen, nstr);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return fail(f, GLESC_ERROR_FORMAT, at, "tensor '%.*s': n_dims %u is not in 1..%d", nlen,
                    nstr, (unsigned)n_dims, GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        at = c->pos;
        uint64_t ne = gguf_cursor_u64(c);
        if (c->overrun)
            return fail(f, GLESC_ERROR_FORMAT, at,
                        "tensor '%.*s': shape is cut off by the end of the file", nlen, nstr);
        if (ne > (uint64_t)INT64_MAX)
            return fail(f, GLESC_ERROR_FORMAT, at, "tensor '%.*s': ne[%u] = %lld is negative", nlen,
                        nstr, (unsigned)d, (long long)(int64_t)ne);
        /* ggml's reader takes an empty dimension, but no model has one and
         * every consumer would have to handle a tensor without bytes. */
        if (ne == 0)
            return fail(f, GLESC_ERROR_FORMAT, at, "tensor '%.*s': ne[%u] is 0 (empty dimension)",
                        nlen, nstr, (unsigned)d);
        t->ne[d] = (int64_t)ne;
    }
    at = c->pos;
    uint32_t type = gguf_cursor_u32(c);
    t->offset = gguf_cursor_u64(c);
    if (c->overrun)
        return fail(f, GLESC_ERROR_FORMAT, at,
                    "tensor '%.*s': type and offset are cut off by the end of the file", nlen,
                    nstr);
    const quant_type_info *q = quant_type((glesc_dtype)type);
    if (!q)
        return fail(f, GLESC_ERROR_FORMAT, at, "tensor '%.*s': unknown tensor type %u", nlen, nstr,
                    (unsigned)type);
    t->type = (glesc_dtype)type;
    return tensor_size(f, t, q, nlen, nstr);
}

static bool parse_tensor_dir(parse_state *ps)
{
    glesc_gguf *f = ps->f;
    ps->tdir_off = ps->c.pos;
    /* Each entry takes at least 8 + 4 + 8 + 4 + 8 bytes. */
    if (ps->n_tensors > gguf_cursor_left(&ps->c) / 32)
        return fail(
            f, GLESC_ERROR_FORMAT, 8, "n_tensors %llu is more than the %llu bytes left can hold",
            (unsigned long long)ps->n_tensors, (unsigned long long)gguf_cursor_left(&ps->c));
    if (ps->n_tensors) {
        f->tensors = core_calloc((size_t)ps->n_tensors, sizeof *f->tensors);
        ps->tname_src = core_calloc((size_t)ps->n_tensors, sizeof *ps->tname_src);
        if (!f->tensors || !ps->tname_src)
            return fail(f, GLESC_ERROR_OUT_OF_MEMORY, ps->tdir_off,
                        "out of memory for %llu tensors", (unsigned long long)ps->n_tensors);
    }
    f->n_tensors = (int64_t)ps->n_tensors;
    for (uint64_t i = 0; i < ps->n_tensors; i++)
        if (!parse_tensor_info(ps, i))
            return false;
    ps->header_end = ps->c.pos;
    return true;
}

/* ---- Names ---- */

/* One block of NUL-terminated copies of every key and tensor name. */
static bool copy_names(parse_state *ps)
{
    glesc_gguf *f = ps->f;
    if (ps->name_bytes) {
        f->names = core_malloc((size_t)ps->name_bytes);
        if (!f->names)
            return fail(f, GLESC_ERROR_OUT_OF_MEMORY, 0, "out of memory for %llu bytes of names",
                        (unsigned long long)ps->name_bytes);
    }
    char *np = f->names;
    for (int64_t i = 0; i < f->n_kv; i++) {
        memcpy(np, ps->key_src[i], (size_t)ps->key_len[i]);
        np[ps->key_len[i]] = '\0';
        f->kv[i].key = np;
        np += ps->key_len[i] + 1;
    }
    for (int64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        memcpy(np, ps->tname_src[i], (size_t)t->name_len);
        np[t->name_len] = '\0';
        t->name = np;
        np += t->name_len + 1;
    }
    return true;
}

/* The name indexes, which catch a key or tensor name given twice. */
static bool index_names(parse_state *ps)
{
    glesc_gguf *f = ps->f;
    if (ps->n_kv > UINT32_MAX / 4 || ps->n_tensors > UINT32_MAX / 4 ||
        !core_map_reserve(&f->kv_index, (uint32_t)ps->n_kv) ||
        !core_map_reserve(&f->tensor_index, (uint32_t)ps->n_tensors))
        return fail(f, GLESC_ERROR_OUT_OF_MEMORY, 0, "out of memory for the name indexes");
    for (int64_t i = 0; i < f->n_kv; i++) {
        int64_t j = gguf_index_add(f, GGUF_TABLE_KV, i);
        if (j >= 0)
            return fail(f, GLESC_ERROR_FORMAT, f->kv[i].key_off,
                        "key '%s' appears twice (entries %lld and %lld)", f->kv[i].key,
                        (long long)j, (long long)i);
    }
    for (int64_t i = 0; i < f->n_tensors; i++) {
        int64_t j = gguf_index_add(f, GGUF_TABLE_TENSORS, i);
        if (j >= 0)
            return fail(f, GLESC_ERROR_FORMAT, f->tensors[i].info_off,
                        "tensor '%s' appears twice (tensors %lld and %lld)", f->tensors[i].name,
                        (long long)j, (long long)i);
    }
    return true;
}

/* ---- Data section ---- */

/* general.alignment (a power of two, default 32) and the data offset: the
 * end of the directory rounded up to it. */
static bool read_alignment(parse_state *ps)
{
    glesc_gguf *f = ps->f;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = gguf_index_find(f, GGUF_TABLE_KV, "general.alignment");
    if (ai >= 0) {
        const gguf_kv *kv = &f->kv[ai];
        if (kv->type != GLESC_GGUF_UINT32)
            return fail(f, GLESC_ERROR_FORMAT, kv->key_off,
                        "key 'general.alignment' is a %s, not a uint32",
                        glesc_gguf_type_name(kv->type));
        uint32_t a = core_le32(f->data + kv->val_off);
        if (a == 0 || (a & (a - 1)) != 0)
            return fail(f, GLESC_ERROR_FORMAT, kv->val_off,
                        "key 'general.alignment': %u is not a nonzero power of two", (unsigned)a);
        f->alignment = a;
    }
    uint64_t pad = (f->alignment - ps->header_end % f->alignment) % f->alignment;
    if (__builtin_add_overflow(ps->header_end, pad, &f->data_offset))
        return fail(f, GLESC_ERROR_FORMAT, ps->header_end, "data offset overflows");
    return true;
}

/* qsort has no context argument in C11: sort (offset, index) pairs instead. */
typedef struct span {
    uint64_t offset, end;
    int64_t index;
} span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

/* Every tensor's data is aligned and inside the file. */
static bool check_tensor_bounds(parse_state *ps)
{
    glesc_gguf *f = ps->f;
    uint64_t data_size = f->size > f->data_offset ? f->size - f->data_offset : 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        uint64_t off_field = t->info_off + 8 + t->name_len + 4 + 8 * (uint64_t)t->n_dims + 4;
        if (t->offset % f->alignment)
            return fail(f, GLESC_ERROR_FORMAT, off_field,
                        "tensor '%s': data offset %llu is not a multiple of the alignment %u",
                        t->name, (unsigned long long)t->offset, (unsigned)f->alignment);
        uint64_t end;
        if (__builtin_add_overflow(t->offset, t->size, &end) || end > data_size)
            return fail(f, GLESC_ERROR_FORMAT, off_field,
                        "tensor '%s': data (offset %llu, %llu bytes) goes past the end of the "
                        "file (data section of %llu bytes at offset %llu)",
                        t->name, (unsigned long long)t->offset, (unsigned long long)t->size,
                        (unsigned long long)data_size, (unsigned long long)f->data_offset);
    }
    return true;
}

/* No two tensors' data overlap. */
static bool check_tensor_overlaps(parse_state *ps)
{
    glesc_gguf *f = ps->f;
    if (f->n_tensors < 2)
        return true;
    span *spans = core_calloc((size_t)f->n_tensors, sizeof *spans);
    if (!spans)
        return fail(f, GLESC_ERROR_OUT_OF_MEMORY, ps->tdir_off,
                    "out of memory for checking %lld tensors", (long long)f->n_tensors);
    int64_t n = f->n_tensors;
    for (int64_t i = 0; i < n; i++) {
        const gguf_tensor *t = &f->tensors[i];
        spans[i] = (span){t->offset, t->offset + t->size, i};
    }
    qsort(spans, (size_t)n, sizeof *spans, cmp_span);
    bool ok = true;
    for (int64_t k = 1; k < n && ok; k++) {
        if (spans[k].offset < spans[k - 1].end) {
            const gguf_tensor *a = &f->tensors[spans[k - 1].index];
            const gguf_tensor *b = &f->tensors[spans[k].index];
            ok = fail(f, GLESC_ERROR_FORMAT, b->info_off,
                      "tensor '%s' (data bytes %llu..%llu) overlaps tensor '%s' (bytes "
                      "%llu..%llu)",
                      b->name, (unsigned long long)b->offset,
                      (unsigned long long)(b->offset + b->size), a->name,
                      (unsigned long long)a->offset, (unsigned long long)(a->offset + a->size));
        }
    }
    core_free(spans);
    return ok;
}

glesc_status gguf_parse(glesc_gguf *f)
{
    parse_state ps = {.f = f};
    gguf_cursor_init(&ps.c, f->data, f->size);
    bool ok = parse_header(&ps) && parse_metadata(&ps) && parse_tensor_dir(&ps) &&
              copy_names(&ps) && index_names(&ps) && read_alignment(&ps) &&
              check_tensor_bounds(&ps) && check_tensor_overlaps(&ps);
    core_free(ps.key_src);
    core_free(ps.key_len);
    core_free(ps.tname_src);
    return ok ? GLESC_OK : core_err_tls()->status;
}
