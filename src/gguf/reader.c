/*
 * reader.c — the GGUF reader (versions 2 and 3): maps the file, validates all
 * of it up front and then hands out views into the mapping.
 *
 * Layout (little-endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 * n_kv × (string key, u32 type, value), n_tensors × (string name, u32 n_dims,
 * n_dims × u64 ne, u32 type, u64 offset), padding to the alignment, tensor
 * data. A string is a u64 length and that many bytes (no NUL).
 *
 * Everything is parsed through gguf_cursor, so no read can leave the buffer;
 * each count is compared with the bytes left before anything is allocated for
 * it (a count of 2^60 fails at once), and every size computation is checked
 * for overflow. Once glesc_gguf_open succeeds, the accessors need no checks
 * beyond the index they are given. Vocab-only files that stop right after the
 * tensor directory (no padding, no data) are valid: the data section is only
 * required to exist when some tensor has bytes in it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

typedef struct gguf_kv {
    const char *key;  /* NUL-terminated, in f->names */
    uint64_t key_off; /* file offset of the key's length field */
    glesc_gguf_type type;
    glesc_gguf_type arr_type; /* arrays only */
    uint64_t arr_n;           /* arrays only */
    uint64_t val_off;         /* file offset of the value (after the type field) */
    uint64_t val_size;        /* bytes of the encoded value */
    uint64_t *str_index;      /* string arrays: file offset of each element */
} gguf_kv;

typedef struct gguf_tensor {
    const char *name;  /* NUL-terminated, in f->names */
    uint64_t info_off; /* file offset of the tensor's directory entry */
    uint64_t name_len;
    glesc_dtype type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t offset, size;
} gguf_tensor;

struct glesc_gguf {
    char *name; /* file name for messages */
    const uint8_t *data;
    uint64_t size;
    void *map; /* mmap base, or NULL for open_memory */
    size_t map_size;
    uint32_t version, alignment;
    uint64_t data_offset;
    int64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    char *names;                     /* every key and tensor name, NUL-terminated */
    core_map kv_index, tensor_index; /* hash of the name → index */
};

/* ---- Types ---- */

static const char *const type_names[] = {
    "uint8", "int8",   "uint16", "int16",  "uint32", "int32",   "float32",
    "bool",  "string", "array",  "uint64", "int64",  "float64",
};

GLESC_API const char *glesc_gguf_type_name(glesc_gguf_type t)
{
    if ((unsigned)t >= CORE_ARRAY_LEN(type_names))
        return "?";
    return type_names[t];
}

uint32_t gguf_type_size(glesc_gguf_type t)
{
    switch (t) {
    case GLESC_GGUF_UINT8:
    case GLESC_GGUF_INT8:
    case GLESC_GGUF_BOOL:
        return 1;
    case GLESC_GGUF_UINT16:
    case GLESC_GGUF_INT16:
        return 2;
    case GLESC_GGUF_UINT32:
    case GLESC_GGUF_INT32:
    case GLESC_GGUF_FLOAT32:
        return 4;
    case GLESC_GGUF_UINT64:
    case GLESC_GGUF_INT64:
    case GLESC_GGUF_FLOAT64:
        return 8;
    case GLESC_GGUF_STRING:
    case GLESC_GGUF_ARRAY:
        break;
    }
    return 0;
}

uint32_t gguf_type_min_size(glesc_gguf_type t)
{
    if (t == GLESC_GGUF_STRING)
        return 8;
    if (t == GLESC_GGUF_ARRAY)
        return 12;
    return gguf_type_size(t);
}

bool gguf_type_is_integer(glesc_gguf_type t)
{
    switch (t) {
    case GLESC_GGUF_UINT8:
    case GLESC_GGUF_INT8:
    case GLESC_GGUF_UINT16:
    case GLESC_GGUF_INT16:
    case GLESC_GGUF_UINT32:
    case GLESC_GGUF_INT32:
    case GLESC_GGUF_UINT64:
    case GLESC_GGUF_INT64:
        return true;
    default:
        return false;
    }
}

static bool type_is_known(uint32_t t)
{
    return t <= GLESC_GGUF_FLOAT64;
}

/* ---- Value validation (shared with the writer's set_encoded) ---- */

#define VERR(err, at, ...)                                                                         \
    do {                                                                                           \
        (err)->pos = (at);                                                                         \
        snprintf((err)->msg, sizeof(err)->msg, __VA_ARGS__);                                       \
    } while (0)

/* Counts a value's string elements too, so the reader can size the index of
 * a string array. */
bool gguf_value_check(gguf_cursor *c, glesc_gguf_type t, int depth, gguf_value_error *err)
{
    uint64_t at = c->pos;
    if (!type_is_known((uint32_t)t)) {
        VERR(err, at, "unknown value type %u", (unsigned)t);
        return false;
    }
    if (t == GLESC_GGUF_STRING) {
        uint64_t len = gguf_cursor_u64(c);
        if (c->overrun) {
            VERR(err, at, "string length is cut off by the end of the data");
            return false;
        }
        if (!gguf_cursor_take(c, len)) {
            VERR(err, at, "string length %llu goes past the end of the data (%llu bytes left)",
                 (unsigned long long)len, (unsigned long long)(c->size - at - 8));
            return false;
        }
        return true;
    }
    if (t == GLESC_GGUF_ARRAY) {
        if (depth >= GGUF_MAX_ARRAY_DEPTH) {
            VERR(err, at, "arrays nested deeper than %d levels", GGUF_MAX_ARRAY_DEPTH);
            return false;
        }
        uint32_t et = gguf_cursor_u32(c);
        uint64_t n = gguf_cursor_u64(c);
        if (c->overrun) {
            VERR(err, at, "array header is cut off by the end of the data");
            return false;
        }
        if (!type_is_known(et)) {
            VERR(err, at, "array of unknown value type %u", (unsigned)et);
            return false;
        }
        uint64_t min = gguf_type_min_size((glesc_gguf_type)et);
        uint64_t left = gguf_cursor_left(c);
        if (n > left / min) {
            VERR(err, at + 4, "array of %llu %s elements cannot fit in the %llu bytes left",
                 (unsigned long long)n, glesc_gguf_type_name((glesc_gguf_type)et),
                 (unsigned long long)left);
            return false;
        }
        uint32_t esize = gguf_type_size((glesc_gguf_type)et);
        if (esize) {
            const uint8_t *p = gguf_cursor_take(c, n * esize); /* n*esize <= left: no overflow */
            if (et == GLESC_GGUF_BOOL) {
                for (uint64_t i = 0; i < n; i++) {
                    if (p[i] > 1) {
                        VERR(err, c->pos - n + i, "bool array element %llu is %u, not 0 or 1",
                             (unsigned long long)i, p[i]);
                        return false;
                    }
                }
            }
            return true;
        }
        for (uint64_t i = 0; i < n; i++) {
            if (!gguf_value_check(c, (glesc_gguf_type)et, depth + 1, err))
                return false;
        }
        return true;
    }
    const uint8_t *p = gguf_cursor_take(c, gguf_type_size(t));
    if (!p) {
        VERR(err, at, "%s value is cut off by the end of the data", glesc_gguf_type_name(t));
        return false;
    }
    if (t == GLESC_GGUF_BOOL && *p > 1) {
        VERR(err, at, "bool value is %u, not 0 or 1", *p);
        return false;
    }
    return true;
}

/* ---- Name index ---- */

/* The entry named s (hash h) in an index over the names name_of gives, or
 * -1. */
static int64_t index_lookup(const core_map *ix, const char *s, uint64_t h,
                            const char *(*name_of)(const glesc_gguf *, int64_t),
                            const glesc_gguf *f)
{
    core_map_probe p = core_map_probe_start(ix, h);
    uint32_t j;
    while (core_map_probe_next(ix, &p, &j))
        if (strcmp(name_of(f, j), s) == 0)
            return j;
    return -1;
}

static int64_t index_find(const core_map *ix, const char *s,
                          const char *(*name_of)(const glesc_gguf *, int64_t), const glesc_gguf *f)
{
    return s ? index_lookup(ix, s, core_hash64_bytes(s, strlen(s)), name_of, f) : -1;
}

/* Inserts entry i named s, or returns the index of an earlier entry with
 * the same name (without inserting). -1 when inserted; the index must have
 * room for i (core_map_reserve), so inserting cannot fail. */
static int64_t index_insert(core_map *ix, const char *s, int64_t i,
                            const char *(*name_of)(const glesc_gguf *, int64_t),
                            const glesc_gguf *f)
{
    uint64_t h = core_hash64_bytes(s, strlen(s));
    int64_t j = index_lookup(ix, s, h, name_of, f);
    if (j < 0)
        core_map_add(ix, h, (uint32_t)i);
    return j;
}

static const char *kv_name(const glesc_gguf *f, int64_t i)
{
    return f->kv[i].key;
}

static const char *tensor_name(const glesc_gguf *f, int64_t i)
{
    return f->tensors[i].name;
}

/* ---- Parsing ---- */

#define FAIL(st, at, ...)                                                                          \
    do {                                                                                           \
        fail(f, st, at, __VA_ARGS__);                                                              \
        goto fail;                                                                                 \
    } while (0)

static glesc_status fail(const glesc_gguf *f, glesc_status st, uint64_t at, const char *fmt, ...)
    CORE_PRINTF(4, 5);

static glesc_status fail(const glesc_gguf *f, glesc_status st, uint64_t at, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return core_err_set(NULL, st, "%s: offset %llu: %s", f->name, (unsigned long long)at, msg);
}

/* Reads a key or tensor name: checks its length against the bytes left and
 * that it has no NUL byte (the NUL-terminated copies must be faithful). */
static bool read_name(glesc_gguf *f, gguf_cursor *c, const char *what, const uint8_t **s,
                      uint64_t *len)
{
    uint64_t at = c->pos;
    *len = gguf_cursor_u64(c);
    if (c->overrun) {
        fail(f, GLESC_ERROR_FORMAT, at, "%s length is cut off by the end of the file", what);
        return false;
    }
    *s = gguf_cursor_take(c, *len);
    if (!*s) {
        fail(f, GLESC_ERROR_FORMAT, at,
             "%s length %llu goes past the end of the file (%llu bytes left)", what,
             (unsigned long long)*len, (unsigned long long)(f->size - at - 8));
        return false;
    }
    if (memchr(*s, 0, (size_t)*len)) {
        fail(f, GLESC_ERROR_FORMAT, at, "%s '%.*s' contains a NUL byte", what,
             (int)CORE_MIN(*len, 200), (const char *)*s);
        return false;
    }
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

static void reader_free(glesc_gguf *f)
{
    if (!f)
        return;
    if (f->kv) {
        for (int64_t i = 0; i < f->n_kv; i++)
            core_free(f->kv[i].str_index);
    }
    core_free(f->kv);
    core_free(f->tensors);
    core_free(f->names);
    core_map_free(&f->kv_index);
    core_map_free(&f->tensor_index);
    if (f->map)
        munmap(f->map, f->map_size);
    core_free(f->name);
    core_free(f);
}

static glesc_status parse(glesc_gguf *f)
{
    gguf_cursor c;
    gguf_cursor_init(&c, f->data, f->size);
    span *spans = NULL;
    /* Name bytes are counted while parsing, then copied in one block. */
    uint64_t name_bytes = 0;
    const uint8_t **key_src = NULL, **tname_src = NULL;
    uint64_t *key_len = NULL;

    /* Header. */
    if (f->size < 4 || memcmp(f->data, GGUF_MAGIC, 4) != 0) {
        if (f->size < 4)
            FAIL(GLESC_ERROR_FORMAT, 0, "file is %llu bytes, too short for a GGUF header",
                 (unsigned long long)f->size);
        FAIL(GLESC_ERROR_FORMAT, 0,
             "bad magic %02x %02x %02x %02x (expected \"GGUF\"): not a GGUF file", f->data[0],
             f->data[1], f->data[2], f->data[3]);
    }
    gguf_cursor_take(&c, 4);
    f->version = gguf_cursor_u32(&c);
    if (c.overrun)
        FAIL(GLESC_ERROR_FORMAT, 4, "header is cut off by the end of the file (%llu bytes)",
             (unsigned long long)f->size);
    if (f->version == 1)
        FAIL(GLESC_ERROR_UNSUPPORTED, 4,
             "GGUF version 1 is not supported (it uses 32-bit counts; convert the file to "
             "version 3)");
    if (f->version != 2 && f->version != 3) {
        if ((f->version & 0xffff) == 0 && f->version != 0)
            FAIL(GLESC_ERROR_UNSUPPORTED, 4,
                 "GGUF version %u is not supported (this looks like a big-endian file; only "
                 "little-endian versions 2 and 3 are)",
                 (unsigned)f->version);
        FAIL(GLESC_ERROR_UNSUPPORTED, 4, "GGUF version %u is not supported (only 2 and 3 are)",
             (unsigned)f->version);
    }
    uint64_t n_tensors = gguf_cursor_u64(&c);
    uint64_t n_kv = gguf_cursor_u64(&c);
    if (c.overrun)
        FAIL(GLESC_ERROR_FORMAT, 8, "header is cut off by the end of the file (%llu bytes)",
             (unsigned long long)f->size);

    /* Metadata. Each entry takes at least 8 (key length) + 4 (type) + 1 bytes. */
    if (n_kv > gguf_cursor_left(&c) / 13)
        FAIL(GLESC_ERROR_FORMAT, 16, "n_kv %llu is more than the %llu bytes left can hold",
             (unsigned long long)n_kv, (unsigned long long)gguf_cursor_left(&c));
    if (n_kv) {
        f->kv = core_calloc((size_t)n_kv, sizeof *f->kv);
        key_src = core_calloc((size_t)n_kv, sizeof *key_src);
        key_len = core_calloc((size_t)n_kv, sizeof *key_len);
        if (!f->kv || !key_src || !key_len)
            FAIL(GLESC_ERROR_OUT_OF_MEMORY, 16, "out of memory for %llu metadata entries",
                 (unsigned long long)n_kv);
    }
    f->n_kv = (int64_t)n_kv;
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        kv->key_off = c.pos;
        if (!read_name(f, &c, "key", &key_src[i], &key_len[i]))
            goto fail;
        name_bytes += key_len[i] + 1;
        int klen = (int)CORE_MIN(key_len[i], 200);
        const char *kstr = (const char *)key_src[i];
        uint64_t type_off = c.pos;
        uint32_t type = gguf_cursor_u32(&c);
        if (c.overrun)
            FAIL(GLESC_ERROR_FORMAT, type_off,
                 "key '%.*s': value type is cut off by the end of the file", klen, kstr);
        if (!type_is_known(type))
            FAIL(GLESC_ERROR_FORMAT, type_off, "key '%.*s': unknown value type %u", klen, kstr,
                 (unsigned)type);
        kv->type = (glesc_gguf_type)type;
        kv->val_off = c.pos;
        gguf_value_error verr;
        if (!gguf_value_check(&c, kv->type, 0, &verr))
            FAIL(GLESC_ERROR_FORMAT, verr.pos, "key '%.*s': %s", klen, kstr, verr.msg);
        kv->val_size = c.pos - kv->val_off;
        if (kv->type == GLESC_GGUF_ARRAY) {
            const uint8_t *p = f->data + kv->val_off;
            kv->arr_type = (glesc_gguf_type)core_le32(p);
            kv->arr_n = core_le64(p + 4);
            if (kv->arr_type == GLESC_GGUF_STRING && kv->arr_n) {
                /* n strings took at least 8n validated bytes: the count fits. */
                kv->str_index = core_calloc((size_t)kv->arr_n, sizeof *kv->str_index);
                if (!kv->str_index)
                    FAIL(GLESC_ERROR_OUT_OF_MEMORY, kv->val_off,
                         "key '%.*s': out of memory for the index of %llu strings", klen, kstr,
                         (unsigned long long)kv->arr_n);
                uint64_t pos = kv->val_off + 12;
                for (uint64_t j = 0; j < kv->arr_n; j++) {
                    kv->str_index[j] = pos;
                    pos += 8 + core_le64(f->data + pos);
                }
            }
        }
    }

    /* Tensor directory. Each entry takes at least 8 + 4 + 8 + 4 + 8 bytes. */
    uint64_t tdir_off = c.pos;
    if (n_tensors > gguf_cursor_left(&c) / 32)
        FAIL(GLESC_ERROR_FORMAT, 8, "n_tensors %llu is more than the %llu bytes left can hold",
             (unsigned long long)n_tensors, (unsigned long long)gguf_cursor_left(&c));
    if (n_tensors) {
        f->tensors = core_calloc((size_t)n_tensors, sizeof *f->tensors);
        tname_src = core_calloc((size_t)n_tensors, sizeof *tname_src);
        if (!f->tensors || !tname_src)
            FAIL(GLESC_ERROR_OUT_OF_MEMORY, tdir_off, "out of memory for %llu tensors",
                 (unsigned long long)n_tensors);
    }
    f->n_tensors = (int64_t)n_tensors;
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        t->info_off = c.pos;
        if (!read_name(f, &c, "tensor name", &tname_src[i], &t->name_len))
            goto fail;
        name_bytes += t->name_len + 1;
        int nlen = (int)CORE_MIN(t->name_len, 200);
        const char *nstr = (const char *)tname_src[i];
        uint64_t at = c.pos;
        uint32_t n_dims = gguf_cursor_u32(&c);
        if (c.overrun)
            FAIL(GLESC_ERROR_FORMAT, at, "tensor '%.*s': n_dims is cut off by the end of the file",
                 nlen, nstr);
        if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
            FAIL(GLESC_ERROR_FORMAT, at, "tensor '%.*s': n_dims %u is not in 1..%d", nlen, nstr,
                 (unsigned)n_dims, GGUF_MAX_DIMS);
        t->n_dims = (int)n_dims;
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            at = c.pos;
            uint64_t ne = gguf_cursor_u64(&c);
            if (c.overrun)
                FAIL(GLESC_ERROR_FORMAT, at,
                     "tensor '%.*s': shape is cut off by the end of the file", nlen, nstr);
            if (ne > (uint64_t)INT64_MAX)
                FAIL(GLESC_ERROR_FORMAT, at, "tensor '%.*s': ne[%u] = %lld is negative", nlen, nstr,
                     (unsigned)d, (long long)(int64_t)ne);
            t->ne[d] = (int64_t)ne;
        }
        at = c.pos;
        uint32_t type = gguf_cursor_u32(&c);
        t->offset = gguf_cursor_u64(&c);
        if (c.overrun)
            FAIL(GLESC_ERROR_FORMAT, at,
                 "tensor '%.*s': type and offset are cut off by the end of the file", nlen, nstr);
        const quant_type_info *q = quant_type((glesc_dtype)type);
        if (!q)
            FAIL(GLESC_ERROR_FORMAT, at, "tensor '%.*s': unknown tensor type %u", nlen, nstr,
                 (unsigned)type);
        t->type = (glesc_dtype)type;
        /* Sizes: the element count must fit in int64 (as ggml requires), the
         * row must be whole blocks, and rows × row bytes must fit. */
        uint64_t shape_off = t->info_off + 8 + t->name_len + 4;
        int64_t nel = 1;
        bool zero = false;
        for (int d = 0; d < t->n_dims; d++) {
            if (t->ne[d] == 0)
                zero = true;
        }
        for (int d = 0; d < t->n_dims && !zero; d++) {
            if (__builtin_mul_overflow(nel, t->ne[d], &nel))
                FAIL(GLESC_ERROR_FORMAT, shape_off,
                     "tensor '%.*s': element count overflows (shape %lld x %lld x %lld x %lld)",
                     nlen, nstr, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                     (long long)t->ne[3]);
        }
        if (t->ne[0] % q->block_size)
            FAIL(GLESC_ERROR_FORMAT, shape_off,
                 "tensor '%.*s': row length %lld is not a multiple of %s's block size %d", nlen,
                 nstr, (long long)t->ne[0], q->name, q->block_size);
        uint64_t row = glesc_dtype_row_bytes(t->type, t->ne[0]);
        if (row == 0 && t->ne[0] != 0)
            FAIL(GLESC_ERROR_FORMAT, shape_off,
                 "tensor '%.*s': byte size of a row of %lld %s elements overflows", nlen, nstr,
                 (long long)t->ne[0], q->name);
        uint64_t size = row;
        for (int d = 1; d < t->n_dims && !zero; d++) {
            if (__builtin_mul_overflow(size, (uint64_t)t->ne[d], &size))
                FAIL(GLESC_ERROR_FORMAT, shape_off,
                     "tensor '%.*s': byte size overflows (shape %lld x %lld x %lld x %lld of %s)",
                     nlen, nstr, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                     (long long)t->ne[3], q->name);
        }
        t->size = zero ? 0 : size;
    }
    uint64_t header_end = c.pos;

    /* Names: one block of NUL-terminated copies; then the indexes, which
     * catch duplicates. */
    if (name_bytes) {
        f->names = core_malloc((size_t)name_bytes);
        if (!f->names)
            FAIL(GLESC_ERROR_OUT_OF_MEMORY, 0, "out of memory for %llu bytes of names",
                 (unsigned long long)name_bytes);
    }
    char *np = f->names;
    for (int64_t i = 0; i < f->n_kv; i++) {
        memcpy(np, key_src[i], (size_t)key_len[i]);
        np[key_len[i]] = '\0';
        f->kv[i].key = np;
        np += key_len[i] + 1;
    }
    for (int64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        memcpy(np, tname_src[i], (size_t)t->name_len);
        np[t->name_len] = '\0';
        t->name = np;
        np += t->name_len + 1;
    }
    if (n_kv > UINT32_MAX / 4 || n_tensors > UINT32_MAX / 4 ||
        !core_map_reserve(&f->kv_index, (uint32_t)n_kv) ||
        !core_map_reserve(&f->tensor_index, (uint32_t)n_tensors))
        FAIL(GLESC_ERROR_OUT_OF_MEMORY, 0, "out of memory for the name indexes");
    for (int64_t i = 0; i < f->n_kv; i++) {
        int64_t j = index_insert(&f->kv_index, f->kv[i].key, i, kv_name, f);
        if (j >= 0)
            FAIL(GLESC_ERROR_FORMAT, f->kv[i].key_off,
                 "key '%s' appears twice (entries %lld and %lld)", f->kv[i].key, (long long)j,
                 (long long)i);
    }
    for (int64_t i = 0; i < f->n_tensors; i++) {
        int64_t j = index_insert(&f->tensor_index, f->tensors[i].name, i, tensor_name, f);
        if (j >= 0)
            FAIL(GLESC_ERROR_FORMAT, f->tensors[i].info_off,
                 "tensor '%s' appears twice (tensors %lld and %lld)", f->tensors[i].name,
                 (long long)j, (long long)i);
    }

    /* Alignment. */
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = index_find(&f->kv_index, "general.alignment", kv_name, f);
    if (ai >= 0) {
        const gguf_kv *kv = &f->kv[ai];
        if (kv->type != GLESC_GGUF_UINT32)
            FAIL(GLESC_ERROR_FORMAT, kv->key_off, "key 'general.alignment' is a %s, not a uint32",
                 glesc_gguf_type_name(kv->type));
        uint32_t a = core_le32(f->data + kv->val_off);
        if (a == 0 || (a & (a - 1)) != 0)
            FAIL(GLESC_ERROR_FORMAT, kv->val_off,
                 "key 'general.alignment': %u is not a nonzero power of two", (unsigned)a);
        f->alignment = a;
    }
    uint64_t pad = (f->alignment - header_end % f->alignment) % f->alignment;
    if (__builtin_add_overflow(header_end, pad, &f->data_offset))
        FAIL(GLESC_ERROR_FORMAT, header_end, "data offset overflows");

    /* Tensor data: aligned, inside the file, not overlapping. */
    uint64_t data_size = f->size > f->data_offset ? f->size - f->data_offset : 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        uint64_t off_field = t->info_off + 8 + t->name_len + 4 + 8 * (uint64_t)t->n_dims + 4;
        if (t->offset % f->alignment)
            FAIL(GLESC_ERROR_FORMAT, off_field,
                 "tensor '%s': data offset %llu is not a multiple of the alignment %u", t->name,
                 (unsigned long long)t->offset, (unsigned)f->alignment);
        uint64_t end;
        if (__builtin_add_overflow(t->offset, t->size, &end) || end > data_size ||
            (t->size && f->data_offset > f->size))
            FAIL(GLESC_ERROR_FORMAT, off_field,
                 "tensor '%s': data (offset %llu, %llu bytes) goes past the end of the file "
                 "(data section of %llu bytes at offset %llu)",
                 t->name, (unsigned long long)t->offset, (unsigned long long)t->size,
                 (unsigned long long)data_size, (unsigned long long)f->data_offset);
    }
    if (f->n_tensors > 1) {
        spans = core_calloc((size_t)f->n_tensors, sizeof *spans);
        if (!spans)
            FAIL(GLESC_ERROR_OUT_OF_MEMORY, tdir_off, "out of memory for checking %lld tensors",
                 (long long)f->n_tensors);
        int64_t n = 0;
        for (int64_t i = 0; i < f->n_tensors; i++) {
            const gguf_tensor *t = &f->tensors[i];
            if (t->size)
                spans[n++] = (span){t->offset, t->offset + t->size, i};
        }
        qsort(spans, (size_t)n, sizeof *spans, cmp_span);
        for (int64_t k = 1; k < n; k++) {
            if (spans[k].offset < spans[k - 1].end) {
                const gguf_tensor *a = &f->tensors[spans[k - 1].index];
                const gguf_tensor *b = &f->tensors[spans[k].index];
                FAIL(GLESC_ERROR_FORMAT, b->info_off,
                     "tensor '%s' (data bytes %llu..%llu) overlaps tensor '%s' (bytes %llu..%llu)",
                     b->name, (unsigned long long)b->offset,
                     (unsigned long long)(b->offset + b->size), a->name,
                     (unsigned long long)a->offset, (unsigned long long)(a->offset + a->size));
            }
        }
    }

    core_free(spans);
    core_free(key_src);
    core_free(key_len);
    core_free(tname_src);
    return GLESC_OK;
fail:
    core_free(spans);
    core_free(key_src);
    core_free(key_len);
    core_free(tname_src);
    return core_err_tls()->status;
}

static glesc_status open_common(glesc_gguf *f, glesc_gguf **out)
{
    glesc_status st = parse(f);
    if (st != GLESC_OK) {
        reader_free(f);
        return st;
    }
    *out = f;
    return GLESC_OK;
}

GLESC_API glesc_status glesc_gguf_open_memory(const void *data, size_t size, const char *name,
                                              glesc_gguf **out)
{
    if (!out)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_gguf_open_memory: data is NULL");
    glesc_gguf *f = core_calloc(1, sizeof *f);
    if (!f)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "out of memory opening %s",
                            name ? name : "(memory)");
    f->name = core_strdup(name ? name : "(memory)");
    if (!f->name) {
        core_free(f);
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "out of memory opening %s",
                            name ? name : "(memory)");
    }
    static const uint8_t empty[1];
    f->data = data ? data : empty;
    f->size = size;
    return open_common(f, out);
}

GLESC_API glesc_status glesc_gguf_open(const char *path, glesc_gguf **out)
{
    if (!out)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_gguf_open: out is NULL");
    *out = NULL;
    if (!path)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "glesc_gguf_open: path is NULL");
    glesc_status st = GLESC_OK;
    glesc_gguf *f = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        st = core_err_set(NULL, GLESC_ERROR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = core_err_set(NULL, GLESC_ERROR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = core_err_set(NULL, GLESC_ERROR_IO, "%s: not a regular file", path);
        goto fail;
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        st = core_err_set(NULL, GLESC_ERROR_LIMIT, "%s: %llu bytes do not fit in memory", path,
                          (unsigned long long)sb.st_size);
        goto fail;
    }
    f = core_calloc(1, sizeof *f);
    if (!f || !(f->name = core_strdup(path))) {
        st = core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "%s: out of memory", path);
        goto fail;
    }
    static const uint8_t empty[1];
    f->data = empty;
    f->size = (uint64_t)sb.st_size;
    if (sb.st_size > 0) {
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            st = core_err_set(NULL, GLESC_ERROR_IO, "%s: cannot map %llu bytes: %s", path,
                              (unsigned long long)sb.st_size, strerror(errno));
            goto fail;
        }
        f->map = m;
        f->map_size = (size_t)sb.st_size;
        f->data = m;
    }
    /* The mapping outlives the descriptor. */
    close(fd);
    return open_common(f, out);
fail:
    if (fd >= 0)
        close(fd);
    reader_free(f);
    return st;
}

GLESC_API void glesc_gguf_close(glesc_gguf *f)
{
    reader_free(f);
}

/* ---- Accessors ---- */

GLESC_API uint32_t glesc_gguf_version(const glesc_gguf *f)
{
    return f ? f->version : 0;
}

GLESC_API uint32_t glesc_gguf_alignment(const glesc_gguf *f)
{
    return f ? f->alignment : 0;
}

GLESC_API uint64_t glesc_gguf_data_offset(const glesc_gguf *f)
{
    return f ? f->data_offset : 0;
}

GLESC_API uint64_t glesc_gguf_file_size(const glesc_gguf *f)
{
    return f ? f->size : 0;
}

GLESC_API int64_t glesc_gguf_n_kv(const glesc_gguf *f)
{
    return f ? f->n_kv : 0;
}

GLESC_API int64_t glesc_gguf_find_key(const glesc_gguf *f, const char *key)
{
    return f ? index_find(&f->kv_index, key, kv_name, f) : -1;
}

static const gguf_kv *kv_at(const glesc_gguf *f, int64_t i)
{
    return f && i >= 0 && i < f->n_kv ? &f->kv[i] : NULL;
}

GLESC_API const char *glesc_gguf_key(const glesc_gguf *f, int64_t i)
{
    const gguf_kv *kv = kv_at(f, i);
    return kv ? kv->key : NULL;
}

GLESC_API glesc_gguf_type glesc_gguf_kv_type(const glesc_gguf *f, int64_t i)
{
    const gguf_kv *kv = kv_at(f, i);
    return kv ? kv->type : (glesc_gguf_type)-1;
}

GLESC_API glesc_gguf_type glesc_gguf_arr_type(const glesc_gguf *f, int64_t i)
{
    const gguf_kv *kv = kv_at(f, i);
    return kv && kv->type == GLESC_GGUF_ARRAY ? kv->arr_type : (glesc_gguf_type)0;
}

GLESC_API uint64_t glesc_gguf_arr_n(const glesc_gguf *f, int64_t i)
{
    const gguf_kv *kv = kv_at(f, i);
    return kv && kv->type == GLESC_GGUF_ARRAY ? kv->arr_n : 0;
}

GLESC_API glesc_status glesc_gguf_kv_raw(const glesc_gguf *f, int64_t i, const void **data,
                                         uint64_t *size)
{
    const gguf_kv *kv = kv_at(f, i);
    if (!kv || !data || !size)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_gguf_kv_raw: entry %lld out of range or NULL argument",
                            (long long)i);
    *data = f->data + kv->val_off;
    *size = kv->val_size;
    return GLESC_OK;
}

/* ---- Typed getters ---- */

/* A scalar number decoded from the file: integers exactly, floats as double. */
typedef struct num {
    enum { NUM_INT, NUM_UINT, NUM_FLOAT } kind;
    int64_t i;
    uint64_t u;
    double d;
} num;

static bool num_decode(glesc_gguf_type t, const uint8_t *p, num *n)
{
    switch (t) {
    case GLESC_GGUF_UINT8:
        *n = (num){.kind = NUM_UINT, .u = p[0]};
        return true;
    case GLESC_GGUF_INT8:
        *n = (num){.kind = NUM_INT, .i = (int8_t)p[0]};
        return true;
    case GLESC_GGUF_UINT16:
        *n = (num){.kind = NUM_UINT, .u = core_le16(p)};
        return true;
    case GLESC_GGUF_INT16:
        *n = (num){.kind = NUM_INT, .i = (int16_t)core_le16(p)};
        return true;
    case GLESC_GGUF_UINT32:
        *n = (num){.kind = NUM_UINT, .u = core_le32(p)};
        return true;
    case GLESC_GGUF_INT32:
        *n = (num){.kind = NUM_INT, .i = (int32_t)core_le32(p)};
        return true;
    case GLESC_GGUF_UINT64:
        *n = (num){.kind = NUM_UINT, .u = core_le64(p)};
        return true;
    case GLESC_GGUF_INT64:
        *n = (num){.kind = NUM_INT, .i = (int64_t)core_le64(p)};
        return true;
    case GLESC_GGUF_FLOAT32: {
        uint32_t b = core_le32(p);
        float v;
        memcpy(&v, &b, 4);
        *n = (num){.kind = NUM_FLOAT, .d = v};
        return true;
    }
    case GLESC_GGUF_FLOAT64: {
        uint64_t b = core_le64(p);
        double v;
        memcpy(&v, &b, 8);
        *n = (num){.kind = NUM_FLOAT, .d = v};
        return true;
    }
    default:
        return false;
    }
}

/* Range of an integer target type, as a signed/unsigned pair of limits. */
static bool num_to_i64(const num *n, int64_t lo, int64_t hi, int64_t *out)
{
    if (n->kind == NUM_INT && n->i >= lo && n->i <= hi) {
        *out = n->i;
        return true;
    }
    if (n->kind == NUM_UINT && hi >= 0 && n->u <= (uint64_t)hi) {
        *out = (int64_t)n->u;
        return true;
    }
    return false;
}

static bool num_to_u64(const num *n, uint64_t hi, uint64_t *out)
{
    if (n->kind == NUM_UINT && n->u <= hi) {
        *out = n->u;
        return true;
    }
    if (n->kind == NUM_INT && n->i >= 0 && (uint64_t)n->i <= hi) {
        *out = (uint64_t)n->i;
        return true;
    }
    return false;
}

static double num_to_f64(const num *n)
{
    if (n->kind == NUM_INT)
        return (double)n->i;
    if (n->kind == NUM_UINT)
        return (double)n->u;
    return n->d;
}

static void type_desc(const gguf_kv *kv, char *buf, size_t size)
{
    if (kv->type == GLESC_GGUF_ARRAY)
        snprintf(buf, size, "array of %llu %s", (unsigned long long)kv->arr_n,
                 glesc_gguf_type_name(kv->arr_type));
    else
        snprintf(buf, size, "%s", glesc_gguf_type_name(kv->type));
}

static glesc_status type_error(const glesc_gguf *f, const gguf_kv *kv, const char *wanted,
                               const char *why)
{
    char actual[64];
    type_desc(kv, actual, sizeof actual);
    return core_err_set(NULL, GLESC_ERROR_TYPE, "%s: key '%s': wanted %s, found %s%s", f->name,
                        kv->key, wanted, actual, why ? why : "");
}

static const gguf_kv *lookup(const glesc_gguf *f, const char *key, glesc_status *st)
{
    if (!f || !key) {
        *st = core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "NULL reader or key");
        return NULL;
    }
    int64_t i = glesc_gguf_find_key(f, key);
    if (i < 0) {
        *st = core_err_set(NULL, GLESC_ERROR_NOT_FOUND, "%s: key '%s' not found", f->name, key);
        return NULL;
    }
    *st = GLESC_OK;
    return &f->kv[i];
}

/* Decodes a scalar number of entry kv; *p gets its bytes. */
static glesc_status get_num(const glesc_gguf *f, const char *key, const char *wanted, bool int_only,
                            num *n, const gguf_kv **kvp)
{
    glesc_status st;
    const gguf_kv *kv = lookup(f, key, &st);
    if (!kv)
        return st;
    *kvp = kv;
    if (!num_decode(kv->type, f->data + kv->val_off, n) ||
        (int_only && !gguf_type_is_integer(kv->type)))
        return type_error(f, kv, wanted, NULL);
    return GLESC_OK;
}

#define INT_GETTER(fn, ctype, wanted, conv)                                                        \
    GLESC_API glesc_status fn(const glesc_gguf *f, const char *key, ctype *out)                    \
    {                                                                                              \
        num n = {0};                                                                               \
        const gguf_kv *kv = NULL;                                                                  \
        glesc_status st = get_num(f, key, wanted, true, &n, &kv);                                  \
        if (st != GLESC_OK)                                                                        \
            return st;                                                                             \
        conv;                                                                                      \
    }

INT_GETTER(glesc_gguf_get_u32, uint32_t, "uint32", {
    uint64_t v;
    if (!num_to_u64(&n, UINT32_MAX, &v))
        return type_error(f, kv, "uint32", " (value out of range)");
    if (out)
        *out = (uint32_t)v;
    return GLESC_OK;
})
INT_GETTER(glesc_gguf_get_i32, int32_t, "int32", {
    int64_t v;
    if (!num_to_i64(&n, INT32_MIN, INT32_MAX, &v))
        return type_error(f, kv, "int32", " (value out of range)");
    if (out)
        *out = (int32_t)v;
    return GLESC_OK;
})
INT_GETTER(glesc_gguf_get_u64, uint64_t, "uint64", {
    uint64_t v;
    if (!num_to_u64(&n, UINT64_MAX, &v))
        return type_error(f, kv, "uint64", " (value out of range)");
    if (out)
        *out = v;
    return GLESC_OK;
})
INT_GETTER(glesc_gguf_get_i64, int64_t, "int64", {
    int64_t v;
    if (!num_to_i64(&n, INT64_MIN, INT64_MAX, &v))
        return type_error(f, kv, "int64", " (value out of range)");
    if (out)
        *out = v;
    return GLESC_OK;
})

GLESC_API glesc_status glesc_gguf_get_f64(const glesc_gguf *f, const char *key, double *out)
{
    num n = {0};
    const gguf_kv *kv = NULL;
    glesc_status st = get_num(f, key, "float64", false, &n, &kv);
    if (st == GLESC_OK && out)
        *out = num_to_f64(&n);
    return st;
}

GLESC_API glesc_status glesc_gguf_get_f32(const glesc_gguf *f, const char *key, float *out)
{
    num n = {0};
    const gguf_kv *kv = NULL;
    glesc_status st = get_num(f, key, "float32", false, &n, &kv);
    if (st == GLESC_OK && out)
        *out = (float)num_to_f64(&n);
    return st;
}

GLESC_API glesc_status glesc_gguf_get_bool(const glesc_gguf *f, const char *key, bool *out)
{
    glesc_status st;
    const gguf_kv *kv = lookup(f, key, &st);
    if (!kv)
        return st;
    if (kv->type != GLESC_GGUF_BOOL)
        return type_error(f, kv, "bool", NULL);
    if (out)
        *out = f->data[kv->val_off] != 0;
    return GLESC_OK;
}

GLESC_API glesc_status glesc_gguf_get_str(const glesc_gguf *f, const char *key, const char **s,
                                          size_t *len)
{
    glesc_status st;
    const gguf_kv *kv = lookup(f, key, &st);
    if (!kv)
        return st;
    if (kv->type != GLESC_GGUF_STRING)
        return type_error(f, kv, "string", NULL);
    if (s)
        *s = (const char *)f->data + kv->val_off + 8;
    if (len)
        *len = (size_t)core_le64(f->data + kv->val_off);
    return GLESC_OK;
}

static const gguf_kv *lookup_numeric_array(const glesc_gguf *f, const char *key, glesc_status *st)
{
    const gguf_kv *kv = lookup(f, key, st);
    if (!kv)
        return NULL;
    if (kv->type != GLESC_GGUF_ARRAY || !gguf_type_size(kv->arr_type)) {
        *st = type_error(f, kv, "numeric array", NULL);
        return NULL;
    }
    return kv;
}

GLESC_API glesc_status glesc_gguf_get_arr(const glesc_gguf *f, const char *key,
                                          glesc_gguf_type *elem_type, uint64_t *n,
                                          const void **data)
{
    glesc_status st;
    const gguf_kv *kv = lookup_numeric_array(f, key, &st);
    if (!kv)
        return st;
    if (elem_type)
        *elem_type = kv->arr_type;
    if (n)
        *n = kv->arr_n;
    if (data)
        *data = f->data + kv->val_off + 12;
    return GLESC_OK;
}

static glesc_status index_error(const glesc_gguf *f, const gguf_kv *kv, uint64_t idx)
{
    return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                        "%s: key '%s': index %llu is out of range (array of %llu)", f->name,
                        kv->key, (unsigned long long)idx, (unsigned long long)kv->arr_n);
}

GLESC_API glesc_status glesc_gguf_get_arr_str(const glesc_gguf *f, const char *key, uint64_t idx,
                                              const char **s, size_t *len)
{
    glesc_status st;
    const gguf_kv *kv = lookup(f, key, &st);
    if (!kv)
        return st;
    if (kv->type != GLESC_GGUF_ARRAY || kv->arr_type != GLESC_GGUF_STRING)
        return type_error(f, kv, "array of string", NULL);
    if (idx >= kv->arr_n)
        return index_error(f, kv, idx);
    uint64_t pos = kv->str_index[idx];
    if (s)
        *s = (const char *)f->data + pos + 8;
    if (len)
        *len = (size_t)core_le64(f->data + pos);
    return GLESC_OK;
}

static glesc_status arr_elem(const glesc_gguf *f, const char *key, uint64_t idx, num *n,
                             const gguf_kv **kvp)
{
    glesc_status st;
    const gguf_kv *kv = lookup_numeric_array(f, key, &st);
    if (!kv)
        return st;
    *kvp = kv;
    if (idx >= kv->arr_n)
        return index_error(f, kv, idx);
    const uint8_t *p = f->data + kv->val_off + 12 + idx * gguf_type_size(kv->arr_type);
    if (!num_decode(kv->arr_type, p, n)) /* bool elements */
        return type_error(f, kv, "numeric array", NULL);
    return GLESC_OK;
}

GLESC_API glesc_status glesc_gguf_get_arr_f32(const glesc_gguf *f, const char *key, uint64_t idx,
                                              float *out)
{
    num n = {0};
    const gguf_kv *kv = NULL;
    glesc_status st = arr_elem(f, key, idx, &n, &kv);
    if (st == GLESC_OK && out)
        *out = (float)num_to_f64(&n);
    return st;
}

GLESC_API glesc_status glesc_gguf_get_arr_i64(const glesc_gguf *f, const char *key, uint64_t idx,
                                              int64_t *out)
{
    num n = {0};
    const gguf_kv *kv = NULL;
    glesc_status st = arr_elem(f, key, idx, &n, &kv);
    if (st != GLESC_OK)
        return st;
    int64_t v;
    if (!gguf_type_is_integer(kv->arr_type) || !num_to_i64(&n, INT64_MIN, INT64_MAX, &v))
        return core_err_set(NULL, GLESC_ERROR_TYPE,
                            "%s: key '%s': wanted int64, found element %llu of an array of %s%s",
                            f->name, kv->key, (unsigned long long)idx,
                            glesc_gguf_type_name(kv->arr_type),
                            gguf_type_is_integer(kv->arr_type) ? " (value out of range)" : "");
    if (out)
        *out = v;
    return GLESC_OK;
}

/* ---- Tensors ---- */

GLESC_API int64_t glesc_gguf_n_tensors(const glesc_gguf *f)
{
    return f ? f->n_tensors : 0;
}

GLESC_API int64_t glesc_gguf_find_tensor(const glesc_gguf *f, const char *name)
{
    return f ? index_find(&f->tensor_index, name, tensor_name, f) : -1;
}

GLESC_API glesc_status glesc_gguf_tensor(const glesc_gguf *f, int64_t i,
                                         glesc_gguf_tensor_info *out)
{
    if (!f || !out || i < 0 || i >= f->n_tensors)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "%s: tensor index %lld is out of range (%lld tensors)",
                            f ? f->name : "(null)", (long long)i,
                            (long long)(f ? f->n_tensors : 0));
    const gguf_tensor *t = &f->tensors[i];
    out->name = t->name;
    out->type = t->type;
    out->n_dims = t->n_dims;
    memcpy(out->ne, t->ne, sizeof out->ne);
    out->offset = t->offset;
    out->size = t->size;
    /* A zero-byte tensor of a file without a data section points at the
     * end of the file, never past it. */
    uint64_t pos =
        t->size ? f->data_offset + t->offset : CORE_MIN(f->data_offset + t->offset, f->size);
    out->data = f->data + pos;
    return GLESC_OK;
}
