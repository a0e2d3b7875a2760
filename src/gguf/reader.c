/*
 * reader.c — the GGUF reader: opens a file (mapped) or a buffer, has
 * parse.c validate all of it up front, and then hands out views into the
 * mapping: the header fields, metadata entries by index or key (typed values
 * in getters.c) and tensors by index or name. Once glesc_gguf_open succeeds,
 * the accessors need no checks beyond the index they are given.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"

/* ---- Name indexes: the 64-bit hash of a name → its entry ---- */

static const char *entry_name(const glesc_gguf *f, gguf_table table, int64_t i)
{
    return table == GGUF_TABLE_KV ? f->kv[i].key : f->tensors[i].name;
}

static const core_map *index_of(const glesc_gguf *f, gguf_table table)
{
    return table == GGUF_TABLE_KV ? &f->kv_index : &f->tensor_index;
}

static int64_t index_lookup(const glesc_gguf *f, gguf_table table, const char *name, uint64_t h)
{
    const core_map *ix = index_of(f, table);
    core_map_probe p = core_map_probe_start(ix, h);
    uint32_t j;
    while (core_map_probe_next(&p, &j))
        if (strcmp(entry_name(f, table, j), name) == 0)
            return j;
    return -1;
}

int64_t gguf_index_find(const glesc_gguf *f, gguf_table table, const char *name)
{
    return name ? index_lookup(f, table, name, core_hash64_bytes(name, strlen(name))) : -1;
}

int64_t gguf_index_add(glesc_gguf *f, gguf_table table, int64_t i)
{
    const char *name = entry_name(f, table, i);
    uint64_t h = core_hash64_bytes(name, strlen(name));
    int64_t j = index_lookup(f, table, name, h);
    if (j < 0)
        core_map_add(table == GGUF_TABLE_KV ? &f->kv_index : &f->tensor_index, h, (uint32_t)i);
    return j;
}

/* ---- Opening and closing ---- */

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

static glesc_status open_common(glesc_gguf *f, glesc_gguf **out)
{
    glesc_status st = gguf_parse(f);
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
    core_err_reset(NULL);
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
    core_err_reset(NULL);
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
    return f ? gguf_index_find(f, GGUF_TABLE_KV, key) : -1;
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
    core_err_reset(NULL);
    const gguf_kv *kv = kv_at(f, i);
    if (!kv || !data || !size)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_gguf_kv_raw: entry %lld out of range or NULL argument",
                            (long long)i);
    *data = f->data + kv->val_off;
    *size = kv->val_size;
    return GLESC_OK;
}

/* ---- Tensors ---- */

GLESC_API int64_t glesc_gguf_n_tensors(const glesc_gguf *f)
{
    return f ? f->n_tensors : 0;
}

GLESC_API int64_t glesc_gguf_find_tensor(const glesc_gguf *f, const char *name)
{
    return f ? gguf_index_find(f, GGUF_TABLE_TENSORS, name) : -1;
}

GLESC_API glesc_status glesc_gguf_tensor(const glesc_gguf *f, int64_t i,
                                         glesc_gguf_tensor_info *out)
{
    core_err_reset(NULL);
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
