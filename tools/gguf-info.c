/*
 * gguf-info — prints what a GGUF file holds: version, alignment, metadata,
 * the tensor table and totals per type; --json gives the same as one JSON
 * object. It opens the file with the validating reader, so a malformed file
 * is reported (exit 1) with the reader's message: file, offset, key/tensor.
 *
 * Values are walked with the public value iterator (glesc_gguf_iter), so
 * arrays of arrays print like any other value; JSON strings go through the
 * tools' one escaper (tools/common/json.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "glesc_gguf.h"

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
    "control bytes and bytes that are not valid UTF-8) and escapes key and tensor\n"
    "names the same way, unquoted. JSON mode escapes quotes, backslashes and\n"
    "control characters (\\n, \\u0001, ...) and replaces each byte that is not part\n"
    "of valid UTF-8 with U+FFFD (written \\ufffd); non-finite floats are null. In\n"
    "JSON, an abbreviated array has \"n\" (its length) and \"truncated\": true beside\n"
    "its first elements; an abbreviated array inside an array is written as\n"
    "{\"n\": N, \"values\": [...]}.\n"
    "\n"
    "Exit status: 0 success, 1 the file cannot be read or is malformed (the reason\n"
    "is printed on stderr), 2 bad usage.\n";

enum { ARRAY_SHOWN = 8, STRING_SHOWN = 120 };

typedef struct opts {
    bool json, full;
} opts;

/* The first `shown` of the n bytes at s with C escapes: \n, \t, \", \\,
 * \xNN for other control bytes and bytes that are not valid UTF-8. */
static void put_escaped(FILE *out, const char *s, uint64_t shown, uint64_t n)
{
    const uint8_t *u = (const uint8_t *)s;
    for (uint64_t i = 0; i < shown;) {
        uint8_t c = u[i];
        const char *esc = c == '"'    ? "\\\""
                          : c == '\\' ? "\\\\"
                          : c == '\n' ? "\\n"
                          : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t"
                                      : NULL;
        size_t len = esc || c < 0x20 || c == 0x7f
                         ? 0
                         : tool_utf8_len(u + i, (size_t)(n - i < 4 ? n - i : 4));
        if (esc)
            fputs(esc, out);
        else if (len == 0)
            fprintf(out, "\\x%02x", c);
        else
            fwrite(u + i, 1, len, out);
        i += len ? len : 1;
    }
}

/* A string in text mode: quoted, escaped (put_escaped), abbreviated unless
 * --full. In JSON mode: the tools' JSON string. */
static void put_string(FILE *out, const opts *o, const char *s, uint64_t n)
{
    if (o->json) {
        tool_json_string(out, s, (size_t)n);
        return;
    }
    uint64_t shown = !o->full && n > STRING_SHOWN ? STRING_SHOWN : n;
    fputc('"', out);
    put_escaped(out, s, shown, n);
    fputc('"', out);
    if (shown < n)
        fprintf(out, "... (%llu bytes)", (unsigned long long)n);
}

/* A key or tensor name for the text mode's columns: escaped like a value
 * (a name may hold control bytes or invalid UTF-8 too), unquoted, in full.
 * malloc'ed; NULL (message printed) on out-of-memory. */
static char *name_text(const char *name)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (m) {
        size_t n = strlen(name);
        put_escaped(m, name, n, n);
    }
    if (!m || fclose(m) != 0) {
        free(text);
        fprintf(stderr, "gguf-info: out of memory\n");
        return NULL;
    }
    return text;
}

static void put_float(FILE *out, const opts *o, double v, int digits)
{
    if (!isfinite(v) && o->json)
        fputs("null", out);
    else
        fprintf(out, "%.*g", digits, v);
}

/* Prints the iterator's next value (and, for an array, its elements). */
static void put_value(FILE *out, const opts *o, glesc_gguf_iter *it, bool top)
{
    glesc_gguf_value v;
    if (!glesc_gguf_iter_next(it, &v))
        return; /* not reached: arrays say how many elements follow */
    switch (v.type) {
    case GLESC_GGUF_UINT8:
    case GLESC_GGUF_UINT16:
    case GLESC_GGUF_UINT32:
    case GLESC_GGUF_UINT64:
        fprintf(out, "%llu", (unsigned long long)v.as.u64);
        return;
    case GLESC_GGUF_INT8:
    case GLESC_GGUF_INT16:
    case GLESC_GGUF_INT32:
    case GLESC_GGUF_INT64:
        fprintf(out, "%lld", (long long)v.as.i64);
        return;
    case GLESC_GGUF_BOOL:
        fputs(v.as.b ? "true" : "false", out);
        return;
    case GLESC_GGUF_FLOAT32:
        put_float(out, o, v.as.f64, 9);
        return;
    case GLESC_GGUF_FLOAT64:
        put_float(out, o, v.as.f64, 17);
        return;
    case GLESC_GGUF_STRING:
        put_string(out, o, v.as.str.data, v.as.str.len);
        return;
    case GLESC_GGUF_ARRAY: {
        uint64_t n = v.as.arr.n;
        uint64_t shown = o->full || n < ARRAY_SHOWN ? n : ARRAY_SHOWN;
        bool nested_obj = o->json && !top && shown < n;
        if (nested_obj)
            fprintf(out, "{\"n\": %llu, \"values\": ", (unsigned long long)n);
        fputc('[', out);
        for (uint64_t i = 0; i < shown; i++) {
            if (i)
                fputs(", ", out);
            put_value(out, o, it, false);
        }
        if (shown < n)
            glesc_gguf_iter_skip(it);
        if (shown < n && !o->json)
            fprintf(out, ", ... (%llu total)", (unsigned long long)n);
        fputc(']', out);
        if (nested_obj)
            fputc('}', out);
        return;
    }
    }
}

/* The value of entry i; false (message printed) when no iterator can be made. */
static bool put_entry(FILE *out, const opts *o, const glesc_gguf *f, int64_t i)
{
    glesc_gguf_iter *it;
    if (glesc_gguf_iter_create(f, i, &it) != GLESC_OK) {
        fprintf(stderr, "gguf-info: %s\n", glesc_last_errmsg());
        return false;
    }
    put_value(out, o, it, true);
    glesc_gguf_iter_destroy(it);
    return true;
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

static int max_int(int a, int b)
{
    return a > b ? a : b;
}

/* Both printers return false (message printed) when a value cannot be
 * walked (out of memory). */
static bool print_text(FILE *out, const opts *o, const char *path, const glesc_gguf *f)
{
    fprintf(out, "file:        %s\n", path);
    fprintf(out, "version:     %u\n", (unsigned)glesc_gguf_version(f));
    fprintf(out, "alignment:   %u\n", (unsigned)glesc_gguf_alignment(f));
    fprintf(out, "data offset: %llu\n", (unsigned long long)glesc_gguf_data_offset(f));
    fprintf(out, "file size:   %llu\n", (unsigned long long)glesc_gguf_file_size(f));
    int64_t n_kv = glesc_gguf_n_kv(f);
    fprintf(out, "\nmetadata: %lld entries\n", (long long)n_kv);
    int kw = 0;
    for (int64_t i = 0; i < n_kv; i++) {
        char *key = name_text(glesc_gguf_key(f, i));
        if (!key)
            return false;
        kw = max_int(kw, (int)strlen(key));
        free(key);
    }
    for (int64_t i = 0; i < n_kv; i++) {
        char ts[64];
        type_str(ts, sizeof ts, f, i);
        char *key = name_text(glesc_gguf_key(f, i));
        if (!key)
            return false;
        fprintf(out, "  %-*s  %-20s  ", kw, key, ts);
        free(key);
        if (!put_entry(out, o, f, i))
            return false;
        fputc('\n', out);
    }
    int64_t n_t = glesc_gguf_n_tensors(f);
    fprintf(out, "\ntensors: %lld\n", (long long)n_t);
    type_total totals[GLESC_DTYPE_COUNT_] = {{0}};
    type_total all = {0};
    if (n_t > 0) {
        int nw = 4;
        for (int64_t i = 0; i < n_t; i++) {
            glesc_gguf_tensor_info t;
            glesc_gguf_tensor(f, i, &t);
            char *name = name_text(t.name);
            if (!name)
                return false;
            nw = max_int(nw, (int)strlen(name));
            free(name);
        }
        fprintf(out, "  %5s  %-*s  %-7s  %-26s  %12s  %12s\n", "#", nw, "name", "type", "shape",
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
            char *name = name_text(t.name);
            if (!name)
                return false;
            fprintf(out, "  %5lld  %-*s  %-7s  %-26s  %12llu  %12llu\n", (long long)i, nw, name,
                    glesc_dtype_name(t.type), shape, (unsigned long long)t.size,
                    (unsigned long long)t.offset);
            free(name);
            type_total *tt = &totals[t.type];
            tt->tensors++;
            tt->bytes += t.size;
            tt->elements += n_elements(&t);
            all.tensors++;
            all.bytes += t.size;
            all.elements += n_elements(&t);
        }
        fprintf(out, "\ntotals by type:\n  %-7s  %8s  %14s  %14s\n", "type", "tensors", "bytes",
                "elements");
        for (int t = 0; t < GLESC_DTYPE_COUNT_; t++) {
            if (totals[t].tensors)
                fprintf(out, "  %-7s  %8lld  %14llu  %14llu\n", glesc_dtype_name((glesc_dtype)t),
                        (long long)totals[t].tensors, (unsigned long long)totals[t].bytes,
                        (unsigned long long)totals[t].elements);
        }
        fprintf(out, "  %-7s  %8lld  %14llu  %14llu\n", "all", (long long)all.tensors,
                (unsigned long long)all.bytes, (unsigned long long)all.elements);
    }
    return true;
}

static bool print_json(FILE *out, const opts *o, const char *path, const glesc_gguf *f)
{
    fputs("{\"file\": ", out);
    put_string(out, o, path, strlen(path));
    fprintf(out,
            ", \"version\": %u, \"alignment\": %u, \"data_offset\": %llu, "
            "\"file_size\": %llu,\n \"metadata\": [",
            (unsigned)glesc_gguf_version(f), (unsigned)glesc_gguf_alignment(f),
            (unsigned long long)glesc_gguf_data_offset(f),
            (unsigned long long)glesc_gguf_file_size(f));
    for (int64_t i = 0; i < glesc_gguf_n_kv(f); i++) {
        const char *key = glesc_gguf_key(f, i);
        glesc_gguf_type t = glesc_gguf_kv_type(f, i);
        fputs(i ? ",\n  {\"key\": " : "\n  {\"key\": ", out);
        put_string(out, o, key, strlen(key));
        fprintf(out, ", \"type\": \"%s\"", glesc_gguf_type_name(t));
        if (t == GLESC_GGUF_ARRAY) {
            uint64_t n = glesc_gguf_arr_n(f, i);
            fprintf(out, ", \"elem_type\": \"%s\", \"n\": %llu",
                    glesc_gguf_type_name(glesc_gguf_arr_type(f, i)), (unsigned long long)n);
            if (!o->full && n > ARRAY_SHOWN)
                fputs(", \"truncated\": true", out);
        }
        fputs(", \"value\": ", out);
        if (!put_entry(out, o, f, i))
            return false;
        fputc('}', out);
    }
    fputs("],\n \"tensors\": [", out);
    type_total totals[GLESC_DTYPE_COUNT_] = {{0}};
    type_total all = {0};
    for (int64_t i = 0; i < glesc_gguf_n_tensors(f); i++) {
        glesc_gguf_tensor_info t;
        glesc_gguf_tensor(f, i, &t);
        fputs(i ? ",\n  {\"name\": " : "\n  {\"name\": ", out);
        put_string(out, o, t.name, strlen(t.name));
        fprintf(out, ", \"type\": \"%s\", \"shape\": [", glesc_dtype_name(t.type));
        for (int d = 0; d < t.n_dims; d++)
            fprintf(out, "%s%lld", d ? ", " : "", (long long)t.ne[d]);
        fprintf(out, "], \"bytes\": %llu, \"offset\": %llu}", (unsigned long long)t.size,
                (unsigned long long)t.offset);
        totals[t.type].tensors++;
        totals[t.type].bytes += t.size;
        totals[t.type].elements += n_elements(&t);
        all.tensors++;
        all.bytes += t.size;
        all.elements += n_elements(&t);
    }
    fputs("],\n \"totals\": [", out);
    bool first = true;
    for (int t = 0; t < GLESC_DTYPE_COUNT_; t++) {
        if (!totals[t].tensors)
            continue;
        fprintf(out,
                "%s\n  {\"type\": \"%s\", \"tensors\": %lld, \"bytes\": %llu, "
                "\"elements\": %llu}",
                first ? "" : ",", glesc_dtype_name((glesc_dtype)t), (long long)totals[t].tensors,
                (unsigned long long)totals[t].bytes, (unsigned long long)totals[t].elements);
        first = false;
    }
    fprintf(out, "],\n \"n_tensors\": %lld, \"total_bytes\": %llu, \"total_elements\": %llu}\n",
            (long long)all.tensors, (unsigned long long)all.bytes,
            (unsigned long long)all.elements);
    return true;
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
    /* The output is built in memory and written at the end, so a failure
     * leaves nothing half-printed on stdout. */
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    bool ok = out && (o.json ? print_json(out, &o, path, f) : print_text(out, &o, path, f));
    glesc_gguf_close(f);
    if (out && fclose(out) != 0)
        ok = false;
    if (!ok || !text) {
        if (!out || ok)
            fprintf(stderr, "gguf-info: out of memory\n");
        free(text);
        return 1;
    }
    int rc = 0;
    if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0 || fclose(stdout) != 0) {
        fprintf(stderr, "gguf-info: writing output: %s\n", strerror(errno));
        rc = 1;
    }
    free(text);
    return rc;
}
