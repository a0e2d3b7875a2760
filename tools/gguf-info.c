/*
 * gguf-info — prints what a GGUF file holds: version, alignment, metadata,
 * the tensor table and totals per type; --json gives the same as one JSON
 * object. It opens the file with the validating reader, so a malformed file
 * is reported (exit 1) with the reader's message: file, offset, key/tensor.
 *
 * Values are decoded from their encoded bytes (glesc_gguf_kv_raw), which the
 * reader has validated, so arrays of arrays print like any other value.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "glesc_gguf.h"
#include "gguf/gguf.h"

static const char usage[] =
    "usage: gguf-info [--json] [--full] FILE.gguf\n"
    "\n"
    "Prints a GGUF file's version, alignment, metadata, tensor table (name, type,\n"
    "shape, bytes, offset in the data section) and totals per tensor type.\n"
    "\n"
    "  --json    print everything as one JSON object\n"
    "  --full    print arrays and strings in full (by default arrays show their\n"
    "            first 8 elements and '... (N total)', strings in text mode their\n"
    "            first 120 bytes)\n"
    "  -h, --help  this text\n"
    "\n"
    "Text mode quotes strings with C escapes (\\n, \\t, \\\", \\\\, \\xNN for other\n"
    "control bytes and bytes that are not valid UTF-8). JSON mode escapes quotes,\n"
    "backslashes and control characters (\\n, \\u0001, ...) and replaces each byte\n"
    "that is not part of valid UTF-8 with U+FFFD (written \\ufffd); non-finite\n"
    "floats are null. In JSON, an abbreviated array has \"n\" (its length) and\n"
    "\"truncated\": true beside its first elements; an abbreviated array inside an\n"
    "array is written as {\"n\": N, \"values\": [...]}.\n"
    "\n"
    "Exit status: 0 success, 1 the file cannot be read or is malformed (the reason\n"
    "is printed on stderr), 2 bad usage.\n";

enum { ARRAY_SHOWN = 8, STRING_SHOWN = 120 };

typedef struct opts {
    bool json, full;
} opts;

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t utf8_len(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    /* Overlong forms, surrogates, beyond U+10FFFF. */
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

static void put_string(sbuf *b, const opts *o, const uint8_t *s, uint64_t n)
{
    uint64_t shown = n;
    if (!o->json && !o->full && n > STRING_SHOWN)
        shown = STRING_SHOWN;
    sbuf_appendc(b, '"');
    for (uint64_t i = 0; i < shown;) {
        uint8_t c = s[i];
        const char *esc = NULL;
        switch (c) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        case '\b':
            esc = o->json ? "\\b" : NULL;
            break;
        case '\f':
            esc = o->json ? "\\f" : NULL;
            break;
        default:
            break;
        }
        if (esc) {
            sbuf_append(b, esc);
            i++;
            continue;
        }
        if (c < 0x20 || c == 0x7f) {
            sbuf_appendf(b, o->json ? "\\u%04x" : "\\x%02x", c);
            i++;
            continue;
        }
        size_t len = utf8_len(s + i, (size_t)CORE_MIN(n - i, 4));
        if (len == 0) {
            if (o->json)
                sbuf_append(b, "\\ufffd");
            else
                sbuf_appendf(b, "\\x%02x", c);
            i++;
            continue;
        }
        sbuf_appendn(b, (const char *)s + i, len);
        i += len;
    }
    sbuf_appendc(b, '"');
    if (shown < n)
        sbuf_appendf(b, "... (%llu bytes)", (unsigned long long)n);
}

static void put_float(sbuf *b, const opts *o, double v, int digits)
{
    if (!isfinite(v) && o->json)
        sbuf_append(b, "null");
    else
        sbuf_appendf(b, "%.*g", digits, v);
}

/* Prints one value of type t at the cursor (validated bytes) and advances. */
static void put_value(sbuf *b, const opts *o, gguf_cursor *c, glesc_gguf_type t, bool top)
{
    const uint8_t *p;
    switch (t) {
    case GLESC_GGUF_UINT8:
        sbuf_appendf(b, "%u", *gguf_cursor_take(c, 1));
        return;
    case GLESC_GGUF_INT8:
        sbuf_appendf(b, "%d", (int8_t)*gguf_cursor_take(c, 1));
        return;
    case GLESC_GGUF_BOOL:
        sbuf_append(b, *gguf_cursor_take(c, 1) ? "true" : "false");
        return;
    case GLESC_GGUF_UINT16:
        sbuf_appendf(b, "%u", core_le16(gguf_cursor_take(c, 2)));
        return;
    case GLESC_GGUF_INT16:
        sbuf_appendf(b, "%d", (int16_t)core_le16(gguf_cursor_take(c, 2)));
        return;
    case GLESC_GGUF_UINT32:
        sbuf_appendf(b, "%lu", (unsigned long)gguf_cursor_u32(c));
        return;
    case GLESC_GGUF_INT32:
        sbuf_appendf(b, "%ld", (long)(int32_t)gguf_cursor_u32(c));
        return;
    case GLESC_GGUF_UINT64:
        sbuf_appendf(b, "%llu", (unsigned long long)gguf_cursor_u64(c));
        return;
    case GLESC_GGUF_INT64:
        sbuf_appendf(b, "%lld", (long long)(int64_t)gguf_cursor_u64(c));
        return;
    case GLESC_GGUF_FLOAT32: {
        uint32_t bits = gguf_cursor_u32(c);
        float v;
        memcpy(&v, &bits, 4);
        put_float(b, o, v, 9);
        return;
    }
    case GLESC_GGUF_FLOAT64: {
        uint64_t bits = gguf_cursor_u64(c);
        double v;
        memcpy(&v, &bits, 8);
        put_float(b, o, v, 17);
        return;
    }
    case GLESC_GGUF_STRING: {
        uint64_t n = gguf_cursor_u64(c);
        p = gguf_cursor_take(c, n);
        put_string(b, o, p, n);
        return;
    }
    case GLESC_GGUF_ARRAY: {
        glesc_gguf_type et = (glesc_gguf_type)gguf_cursor_u32(c);
        uint64_t n = gguf_cursor_u64(c);
        uint64_t shown = o->full ? n : CORE_MIN(n, (uint64_t)ARRAY_SHOWN);
        bool nested_obj = o->json && !top && shown < n;
        if (nested_obj)
            sbuf_appendf(b, "{\"n\": %llu, \"values\": ", (unsigned long long)n);
        sbuf_appendc(b, '[');
        for (uint64_t i = 0; i < n; i++) {
            if (i < shown) {
                if (i)
                    sbuf_append(b, ", ");
                put_value(b, o, c, et, false);
            } else {
                gguf_value_error err;
                gguf_value_check(c, et, 1, &err); /* skip: validated at open */
            }
        }
        if (shown < n && !o->json)
            sbuf_appendf(b, ", ... (%llu total)", (unsigned long long)n);
        sbuf_appendc(b, ']');
        if (nested_obj)
            sbuf_appendc(b, '}');
        return;
    }
    }
}

static void type_str(char *buf, size_t size, const glesc_gguf *f, int64_t i)
{
    glesc_gguf_type t = glesc_gguf_kv_type(f, i);
    if (t == GLESC_GGUF_ARRAY)
        snprintf(buf, size, "array<%s>[%llu]", glesc_gguf_type_name(glesc_gguf_arr_type(f, i)),
                 (unsigned long long)glesc_gguf_arr_n(f, i));
    else
        snprintf(buf, size, "%s", glesc_gguf_type_name(t));
}

typedef struct type_total {
    int64_t tensors;
    uint64_t bytes, elements;
} type_total;

static uint64_t n_elements(const glesc_gguf_tensor_info *t)
{
    /* The reader checked that the product fits in int64. */
    uint64_t n = 1;
    for (int d = 0; d < 4; d++)
        n *= (uint64_t)t->ne[d];
    return n;
}

static void print_text(sbuf *b, const opts *o, const char *path, const glesc_gguf *f)
{
    sbuf_appendf(b, "file:        %s\n", path);
    sbuf_appendf(b, "version:     %u\n", (unsigned)glesc_gguf_version(f));
    sbuf_appendf(b, "alignment:   %u\n", (unsigned)glesc_gguf_alignment(f));
    sbuf_appendf(b, "data offset: %llu\n", (unsigned long long)glesc_gguf_data_offset(f));
    sbuf_appendf(b, "file size:   %llu\n", (unsigned long long)glesc_gguf_file_size(f));
    int64_t n_kv = glesc_gguf_n_kv(f);
    sbuf_appendf(b, "\nmetadata: %lld entries\n", (long long)n_kv);
    int kw = 0;
    for (int64_t i = 0; i < n_kv; i++)
        kw = CORE_MAX(kw, (int)strlen(glesc_gguf_key(f, i)));
    for (int64_t i = 0; i < n_kv; i++) {
        char ts[64];
        type_str(ts, sizeof ts, f, i);
        const void *raw;
        uint64_t size;
        glesc_gguf_kv_raw(f, i, &raw, &size);
        gguf_cursor c;
        gguf_cursor_init(&c, raw, size);
        sbuf_appendf(b, "  %-*s  %-20s  ", kw, glesc_gguf_key(f, i), ts);
        put_value(b, o, &c, glesc_gguf_kv_type(f, i), true);
        sbuf_appendc(b, '\n');
    }
    int64_t n_t = glesc_gguf_n_tensors(f);
    sbuf_appendf(b, "\ntensors: %lld\n", (long long)n_t);
    type_total totals[GLESC_DTYPE_COUNT_] = {{0}};
    type_total all = {0};
    if (n_t > 0) {
        int nw = 4;
        for (int64_t i = 0; i < n_t; i++) {
            glesc_gguf_tensor_info t;
            glesc_gguf_tensor(f, i, &t);
            nw = CORE_MAX(nw, (int)strlen(t.name));
        }
        sbuf_appendf(b, "  %5s  %-*s  %-7s  %-26s  %12s  %12s\n", "#", nw, "name", "type", "shape",
                     "bytes", "offset");
        for (int64_t i = 0; i < n_t; i++) {
            glesc_gguf_tensor_info t;
            glesc_gguf_tensor(f, i, &t);
            char shape[128];
            int len = snprintf(shape, sizeof shape, "[");
            for (int d = 0; d < t.n_dims; d++)
                len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%lld", d ? ", " : "",
                                (long long)t.ne[d]);
            snprintf(shape + len, sizeof shape - (size_t)len, "]");
            sbuf_appendf(b, "  %5lld  %-*s  %-7s  %-26s  %12llu  %12llu\n", (long long)i, nw,
                         t.name, glesc_dtype_name(t.type), shape, (unsigned long long)t.size,
                         (unsigned long long)t.offset);
            type_total *tt = &totals[t.type];
            tt->tensors++;
            tt->bytes += t.size;
            tt->elements += n_elements(&t);
            all.tensors++;
            all.bytes += t.size;
            all.elements += n_elements(&t);
        }
        sbuf_appendf(b, "\ntotals by type:\n  %-7s  %8s  %14s  %14s\n", "type", "tensors", "bytes",
                     "elements");
        for (int t = 0; t < GLESC_DTYPE_COUNT_; t++) {
            if (totals[t].tensors)
                sbuf_appendf(b, "  %-7s  %8lld  %14llu  %14llu\n", glesc_dtype_name((glesc_dtype)t),
                             (long long)totals[t].tensors, (unsigned long long)totals[t].bytes,
                             (unsigned long long)totals[t].elements);
        }
        sbuf_appendf(b, "  %-7s  %8lld  %14llu  %14llu\n", "all", (long long)all.tensors,
                     (unsigned long long)all.bytes, (unsigned long long)all.elements);
    }
}

static void print_json(sbuf *b, const opts *o, const char *path, const glesc_gguf *f)
{
    sbuf_append(b, "{\"file\": ");
    put_string(b, o, (const uint8_t *)path, strlen(path));
    sbuf_appendf(b,
                 ", \"version\": %u, \"alignment\": %u, \"data_offset\": %llu, "
                 "\"file_size\": %llu,\n \"metadata\": [",
                 (unsigned)glesc_gguf_version(f), (unsigned)glesc_gguf_alignment(f),
                 (unsigned long long)glesc_gguf_data_offset(f),
                 (unsigned long long)glesc_gguf_file_size(f));
    for (int64_t i = 0; i < glesc_gguf_n_kv(f); i++) {
        const char *key = glesc_gguf_key(f, i);
        glesc_gguf_type t = glesc_gguf_kv_type(f, i);
        sbuf_append(b, i ? ",\n  {\"key\": " : "\n  {\"key\": ");
        put_string(b, o, (const uint8_t *)key, strlen(key));
        sbuf_appendf(b, ", \"type\": \"%s\"", glesc_gguf_type_name(t));
        if (t == GLESC_GGUF_ARRAY) {
            uint64_t n = glesc_gguf_arr_n(f, i);
            sbuf_appendf(b, ", \"elem_type\": \"%s\", \"n\": %llu",
                         glesc_gguf_type_name(glesc_gguf_arr_type(f, i)), (unsigned long long)n);
            if (!o->full && n > ARRAY_SHOWN)
                sbuf_append(b, ", \"truncated\": true");
        }
        const void *raw;
        uint64_t size;
        glesc_gguf_kv_raw(f, i, &raw, &size);
        gguf_cursor c;
        gguf_cursor_init(&c, raw, size);
        sbuf_append(b, ", \"value\": ");
        put_value(b, o, &c, t, true);
        sbuf_appendc(b, '}');
    }
    sbuf_append(b, "],\n \"tensors\": [");
    type_total totals[GLESC_DTYPE_COUNT_] = {{0}};
    type_total all = {0};
    for (int64_t i = 0; i < glesc_gguf_n_tensors(f); i++) {
        glesc_gguf_tensor_info t;
        glesc_gguf_tensor(f, i, &t);
        sbuf_append(b, i ? ",\n  {\"name\": " : "\n  {\"name\": ");
        put_string(b, o, (const uint8_t *)t.name, strlen(t.name));
        sbuf_appendf(b, ", \"type\": \"%s\", \"shape\": [", glesc_dtype_name(t.type));
        for (int d = 0; d < t.n_dims; d++)
            sbuf_appendf(b, "%s%lld", d ? ", " : "", (long long)t.ne[d]);
        sbuf_appendf(b, "], \"bytes\": %llu, \"offset\": %llu}", (unsigned long long)t.size,
                     (unsigned long long)t.offset);
        totals[t.type].tensors++;
        totals[t.type].bytes += t.size;
        totals[t.type].elements += n_elements(&t);
        all.tensors++;
        all.bytes += t.size;
        all.elements += n_elements(&t);
    }
    sbuf_append(b, "],\n \"totals\": [");
    bool first = true;
    for (int t = 0; t < GLESC_DTYPE_COUNT_; t++) {
        if (!totals[t].tensors)
            continue;
        sbuf_appendf(b,
                     "%s\n  {\"type\": \"%s\", \"tensors\": %lld, \"bytes\": %llu, "
                     "\"elements\": %llu}",
                     first ? "" : ",", glesc_dtype_name((glesc_dtype)t),
                     (long long)totals[t].tensors, (unsigned long long)totals[t].bytes,
                     (unsigned long long)totals[t].elements);
        first = false;
    }
    sbuf_appendf(b, "],\n \"n_tensors\": %lld, \"total_bytes\": %llu, \"total_elements\": %llu}\n",
                 (long long)all.tensors, (unsigned long long)all.bytes,
                 (unsigned long long)all.elements);
}

int main(int argc, char **argv)
{
    opts o = {false, false};
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            o.json = true;
        } else if (strcmp(a, "--full") == 0) {
            o.full = true;
        } else if (strcmp(a, "--") == 0 && i + 1 == argc - 1 && !path) {
            path = argv[++i];
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "gguf-info: unknown option '%s'\n\n%s", a, usage);
            return 2;
        } else if (path) {
            fprintf(stderr, "gguf-info: more than one file given\n\n%s", usage);
            return 2;
        } else {
            path = a;
        }
    }
    if (!path) {
        fprintf(stderr, "gguf-info: no file given\n\n%s", usage);
        return 2;
    }
    glesc_gguf *f = NULL;
    if (glesc_gguf_open(path, &f) != GLESC_OK) {
        fprintf(stderr, "gguf-info: %s\n", glesc_last_errmsg());
        return 1;
    }
    sbuf b;
    sbuf_init(&b);
    if (o.json)
        print_json(&b, &o, path, f);
    else
        print_text(&b, &o, path, f);
    glesc_gguf_close(f);
    const char *text = sbuf_str(&b);
    if (!text) {
        fprintf(stderr, "gguf-info: out of memory\n");
        sbuf_free(&b);
        return 1;
    }
    int rc = fputs(text, stdout) < 0 || fflush(stdout) != 0 ? 1 : 0;
    if (rc)
        fprintf(stderr, "gguf-info: cannot write the output\n");
    sbuf_free(&b);
    return rc;
}
