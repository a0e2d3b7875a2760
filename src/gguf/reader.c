/*
 * reader.c — the GGUF reader: opens a file (mapped) or a buffer, has
 * parse.c validate all of it up front, and then hands out views into the
 * mapping: the header fields, metadata entries by index or key (typed values
 * in getters.c) and tensors by index or name. Once glesc_gguf_open succeeds,
 * the accessors need no checks beyond the index they are given.
 *
 * A file is opened without blocking (a FIFO or device given as a model is
 * refused by name, never waited on) and its descriptor is kept: tensor data
 * can be copied with pread (glesc_gguf_tensor_read), so a file that shrinks
 * while it is in use is an error naming it rather than a SIGBUS in the
 * mapping.
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
    if (f->fd >= 0 && f->own_fd)
        close(f->fd);
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
    f->fd = -1;
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
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
     * writer before the check below could refuse it. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
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
    if (!f) {
        st = core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "%s: out of memory", path);
        goto fail;
    }
    f->fd = fd; /* kept for glesc_gguf_tensor_read; reader_free closes it */
    f->own_fd = true;
    fd = -1;
    if (!(f->name = core_strdup(path))) {
        st = core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "%s: out of memory", path);
        goto fail;
    }
    static const uint8_t empty[1];
    f->data = empty;
    f->size = (uint64_t)sb.st_size;
    if (sb.st_size > 0) {
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, f->fd, 0);
        if (m == MAP_FAILED) {
            st = core_err_set(NULL, GLESC_ERROR_IO, "%s: cannot map %llu bytes: %s", path,
                              (unsigned long long)sb.st_size, strerror(errno));
            goto fail;
        }
        f->map = m;
        f->map_size = (size_t)sb.st_size;
        f->data = m;
    }
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

void gguf_reader_pread_from(glesc_gguf *f, int fd, uint64_t offset)
{
    f->fd = fd;
    f->fd_offset = offset;
    f->own_fd = false;
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
    out->data = f->data + f->data_offset + t->offset;
    return GLESC_OK;
}

/* pread of n bytes at off into dst, across short reads and signals; returns
 * the bytes read (fewer at the end of the file) or -1 with errno. */
static int64_t pread_full(int fd, void *dst, uint64_t n, uint64_t off)
{
    uint64_t done = 0;
    while (done < n) {
        size_t chunk = (size_t)CORE_MIN(n - done, (uint64_t)1 << 30);
        ssize_t r = pread(fd, (char *)dst + done, chunk, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        done += (uint64_t)r;
    }
    return (int64_t)done;
}

GLESC_API glesc_status glesc_gguf_tensor_read(const glesc_gguf *f, int64_t i, uint64_t offset,
                                              void *dst, uint64_t n)
{
    core_err_reset(NULL);
    if (!f || i < 0 || i >= f->n_tensors || (!dst && n))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "%s: glesc_gguf_tensor_read: tensor index %lld out of range (%lld "
                            "tensors) or NULL destination",
                            f ? f->name : "(null)", (long long)i,
                            (long long)(f ? f->n_tensors : 0));
    const gguf_tensor *t = &f->tensors[i];
    if (offset > t->size || n > t->size - offset)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "%s: tensor '%s': bytes %llu..%llu are outside its %llu bytes", f->name,
                            t->name, (unsigned long long)offset, (unsigned long long)(offset + n),
                            (unsigned long long)t->size);
    uint64_t pos = f->data_offset + t->offset + offset;
    if (f->fd < 0) {
        memcpy(dst, f->data + pos, (size_t)n);
        return GLESC_OK;
    }
    uint64_t at = f->fd_offset + pos; /* in the file */
    int64_t got = pread_full(f->fd, dst, n, at);
    if (got < 0)
        return core_err_set(
            NULL, GLESC_ERROR_IO, "%s: tensor '%s': reading %llu bytes at offset %llu: %s", f->name,
            t->name, (unsigned long long)n, (unsigned long long)at, strerror(errno));
    if ((uint64_t)got < n) {
        struct stat sb;
        unsigned long long now = fstat(f->fd, &sb) == 0 ? (unsigned long long)sb.st_size : 0;
        return core_err_set(NULL, GLESC_ERROR_IO,
                            "%s: tensor '%s': the file now ends at byte %llu, before the end of "
                            "the tensor's data (bytes %llu..%llu of the file): it was truncated "
                            "or rewritten while in use",
                            f->name, t->name, now, (unsigned long long)(at - offset),
                            (unsigned long long)(at - offset + t->size));
    }
    return GLESC_OK;
}
