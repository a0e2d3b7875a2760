/*
 * gguf.h — internals of the GGUF layer shared by the reader, the writer and
 * the tools: a bounds-checked little-endian cursor (Mesa's blob_reader: a
 * sticky overrun flag, so a run of reads is checked once) and the validating
 * walk over one encoded metadata value, which the reader uses on files and
 * the writer on encoded values handed to it.
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

#endif /* GLESC_GGUF_INTERNAL_H */
