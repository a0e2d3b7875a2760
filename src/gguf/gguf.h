/*
 * gguf.h — internals of the GGUF layer shared by its files: a bounds-checked
 * little-endian cursor (Mesa's blob_reader: a sticky overrun flag, so a run
 * of reads is checked once); the value types and the validating walk over
 * one encoded metadata value (value.c), which the reader uses on files and
 * the writer on encoded values handed to it; and the reader's state, which
 * reader.c opens and indexes, parse.c fills and getters.c decodes.
 *
 * The file format is little-endian whatever the host: every multi-byte field
 * is assembled from bytes by core's core_le* readers.
 */
#ifndef GLESC_GGUF_INTERNAL_H
#define GLESC_GGUF_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/core.h"
#include "glesc_gguf.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32u
/* Deepest nesting of arrays accepted (an array of arrays is depth 2). Real
 * files use depth 1; the limit keeps a nesting bomb from recursing deeply. */
#define GGUF_MAX_ARRAY_DEPTH 8
#define GGUF_MAX_DIMS 4

typedef struct gguf_cursor {
    const uint8_t *base;
    uint64_t size; /* bytes at base */
    uint64_t pos;  /* next byte to read */
    bool overrun;  /* sticky: a read went past the end */
} gguf_cursor;

static inline void gguf_cursor_init(gguf_cursor *c, const void *base, uint64_t size)
{
    c->base = (const uint8_t *)base;
    c->size = size;
    c->pos = 0;
    c->overrun = false;
}

static inline uint64_t gguf_cursor_left(const gguf_cursor *c)
{
    return c->overrun ? 0 : c->size - c->pos;
}

/* Reserves n bytes and returns them, or NULL (and sets overrun) when fewer
 * than n are left. */
static inline const uint8_t *gguf_cursor_take(gguf_cursor *c, uint64_t n)
{
    if (c->overrun || n > c->size - c->pos) {
        c->overrun = true;
        return NULL;
    }
    const uint8_t *p = c->base + c->pos;
    c->pos += n;
    return p;
}

/* Reads return 0 after an overrun; check c->overrun after a group of reads. */
static inline uint32_t gguf_cursor_u32(gguf_cursor *c)
{
    const uint8_t *p = gguf_cursor_take(c, 4);
    return p ? core_le32(p) : 0;
}

static inline uint64_t gguf_cursor_u64(gguf_cursor *c)
{
    const uint8_t *p = gguf_cursor_take(c, 8);
    return p ? core_le64(p) : 0;
}

/* Bytes of one scalar of type t (0 for STRING, ARRAY and unknown types). */
uint32_t gguf_type_size(glesc_gguf_type t);
/* The fewest bytes one element of type t can take in a file: its size, 8
 * for a string (the length), 12 for an array (type and count); 0 if unknown. */
uint32_t gguf_type_min_size(glesc_gguf_type t);
bool gguf_type_is_integer(glesc_gguf_type t);
/* A type id this reader knows (the file's u32, before any cast). */
bool gguf_type_is_known(uint32_t t);

/* What went wrong in gguf_value_check: where (absolute cursor position) and
 * a short description (static or formatted into msg). */
typedef struct gguf_value_error {
    uint64_t pos;
    char msg[160];
} gguf_value_error;

/* Validates and skips one value of type t at the cursor (for an array: the
 * element type, count and elements; nested arrays up to GGUF_MAX_ARRAY_DEPTH).
 * Checks every length and count against the bytes left, known types and bool
 * bytes of 0 or 1. depth is 0 for a top-level value. On failure returns
 * false with err filled (the cursor is then left anywhere). */
bool gguf_value_check(gguf_cursor *c, glesc_gguf_type t, int depth, gguf_value_error *err);

/* ---- The reader's state ---- */

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
    int fd;             /* for glesc_gguf_tensor_read's pread; -1: copy from data */
    uint64_t fd_offset; /* where data[0] is in fd */
    bool own_fd;        /* closed with the reader (glesc_gguf_open's own) */
    uint32_t version, alignment;
    uint64_t data_offset;
    int64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    char *names;                     /* every key and tensor name, NUL-terminated */
    core_map kv_index, tensor_index; /* hash of the name → index */
};

/* Validates the whole file f->data[0..f->size) and fills the rest of f
 * (parse.c). On failure the thread's error says what and where, and f holds
 * whatever was allocated so far for reader.c to free. */
glesc_status gguf_parse(glesc_gguf *f);

/* For a reader of memory that maps fd from offset on (a model loaded from
 * a descriptor): glesc_gguf_tensor_read then reads the tensors from fd with
 * pread, so a file truncated under the mapping is an error, not a SIGBUS.
 * fd stays the caller's and must stay open while f is used. */
void gguf_reader_pread_from(glesc_gguf *f, int fd, uint64_t offset);

/* The name indexes (reader.c): which table an index covers. */
typedef enum gguf_table { GGUF_TABLE_KV, GGUF_TABLE_TENSORS } gguf_table;

/* The entry of table named name, or -1 (also for a NULL name). */
int64_t gguf_index_find(const glesc_gguf *f, gguf_table table, const char *name);
/* Indexes entry i of table under its name, or returns the index of an
 * earlier entry with that name (indexing nothing). -1 when indexed. The
 * index must have room (core_map_reserve), so this cannot fail. */
int64_t gguf_index_add(glesc_gguf *f, gguf_table table, int64_t i);

#endif /* GLESC_GGUF_INTERNAL_H */
