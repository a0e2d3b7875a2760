/*
 * value.c — GGUF metadata value types: their names and sizes, and the
 * validating walk over one encoded value (gguf_value_check), which the
 * reader runs on files and the writer on encoded values handed to it.
 */
#include <stdio.h>

#include "gguf/gguf.h"

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

bool gguf_type_is_known(uint32_t t)
{
    return t <= GLESC_GGUF_FLOAT64;
}

/* ---- Validation ---- */

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
    if (!gguf_type_is_known((uint32_t)t)) {
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
        if (!gguf_type_is_known(et)) {
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
