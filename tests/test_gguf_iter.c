/*
 * test_gguf_iter.c — the public value iterator of glesc_gguf.h: every value
 * type as an entry's own value and as array elements, strings with any
 * bytes, arrays of strings, arrays of arrays (empty ones among them) down to
 * the deepest nesting the reader accepts, skipping the rest of an array at
 * each depth, and the refused arguments. Files are made with the writer;
 * expectations are written out by hand, not derived from the reader.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "glesc_gguf.h"
#include "test_util.h"

/* ---- Building encoded values (little endian, as the file stores them) ---- */

typedef struct enc {
    uint8_t b[4096];
    size_t n;
} enc;

static void put(enc *e, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        e->b[e->n++] = (uint8_t)(v >> (8 * i));
}

static void put_arr(enc *e, glesc_gguf_type et, uint64_t n)
{
    put(e, (uint64_t)et, 4);
    put(e, n, 8);
}

static void put_str(enc *e, const char *s, size_t len)
{
    put(e, len, 8);
    memcpy(e->b + e->n, s, len);
    e->n += len;
}

/* ---- The file: one entry per case ---- */

static char *dir, *path;
static glesc_gguf *file;

static void write_file(void)
{
    dir = test_tmpdir();
    path = malloc(strlen(dir) + 16);
    sprintf(path, "%s/iter.gguf", dir);
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    cr_assert_not_null(w);
    uint8_t u8 = 200, i8 = 0x80, b1 = 1;
    uint8_t u16[2] = {0x34, 0x12}, i16[2] = {0xfe, 0xff};
    uint8_t u32[4] = {0x78, 0x56, 0x34, 0x12}, i32[4] = {0x00, 0x00, 0x00, 0x80};
    uint8_t u64[8] = {1, 2, 3, 4, 5, 6, 7, 0xf8},
            i64[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    float f32 = 0.1f;
    double f64 = -2.5e300;
    uint8_t f32b[4], f64b[8];
    memcpy(f32b, &f32, 4); /* the test host is little endian, as the format */
    memcpy(f64b, &f64, 8);
    cr_assert_eq(glesc_gguf_writer_set_raw(w, "u8", GLESC_GGUF_UINT8, &u8), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_raw(w, "i8", GLESC_GGUF_INT8, &i8), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_raw(w, "u16", GLESC_GGUF_UINT16, u16), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_raw(w, "i16", GLESC_GGUF_INT16, i16), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_raw(w, "u32", GLESC_GGUF_UINT32, u32), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_raw(w, "i32", GLESC_GGUF_INT32, i32), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_raw(w, "f32", GLESC_GGUF_FLOAT32, f32b), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_raw(w, "bool", GLESC_GGUF_BOOL, &b1), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_raw(w, "u64", GLESC_GGUF_UINT64, u64), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_raw(w, "i64", GLESC_GGUF_INT64, i64), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_raw(w, "f64", GLESC_GGUF_FLOAT64, f64b), GLESC_OK);
    enc e = {{0}, 0};
    put_str(&e, "a\0b\xff", 4); /* a NUL and a byte that is not UTF-8 */
    cr_assert_eq(glesc_gguf_writer_set_encoded(w, "str", GLESC_GGUF_STRING, e.b, e.n), GLESC_OK);

    /* An array of each element type but ARRAY, two elements each. */
    static const glesc_gguf_type scalar[] = {
        GLESC_GGUF_UINT8,  GLESC_GGUF_INT8,   GLESC_GGUF_UINT16,  GLESC_GGUF_INT16,
        GLESC_GGUF_UINT32, GLESC_GGUF_INT32,  GLESC_GGUF_FLOAT32, GLESC_GGUF_BOOL,
        GLESC_GGUF_STRING, GLESC_GGUF_UINT64, GLESC_GGUF_INT64,   GLESC_GGUF_FLOAT64};
    e.n = 0;
    put_arr(&e, GLESC_GGUF_ARRAY, 12);
    for (size_t k = 0; k < 12; k++) {
        glesc_gguf_type t = scalar[k];
        put_arr(&e, t, 2);
        if (t == GLESC_GGUF_STRING) {
            put_str(&e, "", 0);
            put_str(&e, "xyz", 3);
            continue;
        }
        int size = t == GLESC_GGUF_UINT8 || t == GLESC_GGUF_INT8 || t == GLESC_GGUF_BOOL        ? 1
                   : t == GLESC_GGUF_UINT16 || t == GLESC_GGUF_INT16                            ? 2
                   : t == GLESC_GGUF_UINT64 || t == GLESC_GGUF_INT64 || t == GLESC_GGUF_FLOAT64 ? 8
                                                                                                : 4;
        if (t == GLESC_GGUF_FLOAT32) {
            float a = 1.5f, b = -0.0f;
            uint32_t ab, bb;
            memcpy(&ab, &a, 4);
            memcpy(&bb, &b, 4);
            put(&e, ab, 4);
            put(&e, bb, 4);
        } else if (t == GLESC_GGUF_FLOAT64) {
            double a = 1e-300, b = INFINITY;
            uint64_t ab, bb;
            memcpy(&ab, &a, 8);
            memcpy(&bb, &b, 8);
            put(&e, ab, 8);
            put(&e, bb, 8);
        } else if (t == GLESC_GGUF_BOOL) {
            put(&e, 0, 1);
            put(&e, 1, 1);
        } else {
            put(&e, 1, size);                /* 1 */
            put(&e, ~(uint64_t)0 - 1, size); /* all ones but the lowest bit: -2 or max - 1 */
        }
    }
    cr_assert_eq(glesc_gguf_writer_set_encoded(w, "each", GLESC_GGUF_ARRAY, e.b, e.n), GLESC_OK);

    /* [[["p", "q"], []], [], [[7]]]: arrays of arrays with empty ones. */
    e.n = 0;
    put_arr(&e, GLESC_GGUF_ARRAY, 3);
    put_arr(&e, GLESC_GGUF_ARRAY, 2);
    put_arr(&e, GLESC_GGUF_STRING, 2);
    put_str(&e, "p", 1);
    put_str(&e, "q", 1);
    put_arr(&e, GLESC_GGUF_STRING, 0);
    put_arr(&e, GLESC_GGUF_ARRAY, 0);
    put_arr(&e, GLESC_GGUF_ARRAY, 1);
    put_arr(&e, GLESC_GGUF_INT32, 1);
    put(&e, 7, 4);
    cr_assert_eq(glesc_gguf_writer_set_encoded(w, "nested", GLESC_GGUF_ARRAY, e.b, e.n), GLESC_OK);

    /* Eight arrays deep (the reader's limit), the innermost holding 5 and 6. */
    e.n = 0;
    for (int d = 0; d < 7; d++)
        put_arr(&e, GLESC_GGUF_ARRAY, 1);
    put_arr(&e, GLESC_GGUF_UINT16, 2);
    put(&e, 5, 2);
    put(&e, 6, 2);
    cr_assert_eq(glesc_gguf_writer_set_encoded(w, "deep", GLESC_GGUF_ARRAY, e.b, e.n), GLESC_OK);

    /* Strings, for skipping over variable-size elements: ["s0", ..., "s9"]. */
    const char *strs[10] = {"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"};
    cr_assert_eq(glesc_gguf_writer_set_arr_str(w, "strs", strs, 10), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_arr(w, "empty", GLESC_GGUF_UINT32, NULL, 0), GLESC_OK);

    cr_assert_eq(glesc_gguf_writer_write(w, path), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_gguf_writer_destroy(w);
    cr_assert_eq(glesc_gguf_open(path, &file), GLESC_OK, "%s", glesc_last_errmsg());
}

static void remove_file(void)
{
    glesc_gguf_close(file);
    unlink(path);
    rmdir(dir);
    free(path);
    free(dir);
}

TestSuite(gguf_iter, .init = write_file, .fini = remove_file);

static glesc_gguf_iter *iter(const char *key)
{
    int64_t i = glesc_gguf_find_key(file, key);
    cr_assert_geq(i, 0, "no key %s", key);
    glesc_gguf_iter *it = NULL;
    cr_assert_eq(glesc_gguf_iter_create(file, i, &it), GLESC_OK, "%s", glesc_last_errmsg());
    return it;
}

/* The next value, which must exist and have type t, depth d and index ix. */
static glesc_gguf_value next(glesc_gguf_iter *it, glesc_gguf_type t, int d, uint64_t ix)
{
    glesc_gguf_value v;
    cr_assert(glesc_gguf_iter_next(it, &v), "walk ended early (wanted %s at depth %d)",
              glesc_gguf_type_name(t), d);
    cr_assert_eq(v.type, t, "type %s, wanted %s", glesc_gguf_type_name(v.type),
                 glesc_gguf_type_name(t));
    cr_assert_eq(v.depth, d, "%s: depth %d, wanted %d", glesc_gguf_type_name(t), v.depth, d);
    cr_assert_eq(v.index, ix, "%s: index %llu, wanted %llu", glesc_gguf_type_name(t),
                 (unsigned long long)v.index, (unsigned long long)ix);
    return v;
}

static void expect_end(glesc_gguf_iter *it)
{
    glesc_gguf_value v;
    v.type = (glesc_gguf_type)99;
    cr_expect_not(glesc_gguf_iter_next(it, &v), "a value after the end (%s)",
                  glesc_gguf_type_name(v.type));
    cr_expect_eq((int)v.type, 99, "*out written at the end");
    cr_expect_not(glesc_gguf_iter_next(it, &v), "a value after the end, twice");
    glesc_gguf_iter_skip(it); /* a no-op at the end */
    cr_expect_not(glesc_gguf_iter_next(it, &v));
}

Test(gguf_iter, every_scalar_type_as_an_entry)
{
    static const struct {
        const char *key;
        glesc_gguf_type t;
        uint64_t u;
        int64_t i;
        double f;
    } cases[] = {
        {"u8", GLESC_GGUF_UINT8, 200, 0, 0},
        {"i8", GLESC_GGUF_INT8, 0, -128, 0},
        {"u16", GLESC_GGUF_UINT16, 0x1234, 0, 0},
        {"i16", GLESC_GGUF_INT16, 0, -2, 0},
        {"u32", GLESC_GGUF_UINT32, 0x12345678, 0, 0},
        {"i32", GLESC_GGUF_INT32, 0, INT32_MIN, 0},
        {"u64", GLESC_GGUF_UINT64, 0xf807060504030201ull, 0, 0},
        {"i64", GLESC_GGUF_INT64, 0, -1, 0},
        {"f32", GLESC_GGUF_FLOAT32, 0, 0, (double)0.1f},
        {"f64", GLESC_GGUF_FLOAT64, 0, 0, -2.5e300},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        glesc_gguf_iter *it = iter(cases[k].key);
        glesc_gguf_value v = next(it, cases[k].t, 0, 0);
        switch (cases[k].t) {
        case GLESC_GGUF_UINT8:
        case GLESC_GGUF_UINT16:
        case GLESC_GGUF_UINT32:
        case GLESC_GGUF_UINT64:
            cr_expect_eq(v.as.u64, cases[k].u, "%s: %llu", cases[k].key,
                         (unsigned long long)v.as.u64);
            break;
        case GLESC_GGUF_FLOAT32:
        case GLESC_GGUF_FLOAT64:
            cr_expect_eq(v.as.f64, cases[k].f, "%s: %.17g", cases[k].key, v.as.f64);
            break;
        default:
            cr_expect_eq(v.as.i64, cases[k].i, "%s: %lld", cases[k].key, (long long)v.as.i64);
        }
        expect_end(it);
        glesc_gguf_iter_destroy(it);
    }
    glesc_gguf_iter *it = iter("bool");
    cr_expect(next(it, GLESC_GGUF_BOOL, 0, 0).as.b);
    expect_end(it);
    glesc_gguf_iter_destroy(it);
    it = iter("str");
    glesc_gguf_value v = next(it, GLESC_GGUF_STRING, 0, 0);
    cr_expect_eq(v.as.str.len, 4);
    cr_expect(memcmp(v.as.str.data, "a\0b\xff", 4) == 0);
    expect_end(it);
    glesc_gguf_iter_destroy(it);
}

Test(gguf_iter, every_type_as_array_elements)
{
    glesc_gguf_iter *it = iter("each");
    glesc_gguf_value v = next(it, GLESC_GGUF_ARRAY, 0, 0);
    cr_assert_eq(v.as.arr.elem_type, GLESC_GGUF_ARRAY);
    cr_assert_eq(v.as.arr.n, 12);
    static const glesc_gguf_type scalar[] = {
        GLESC_GGUF_UINT8,  GLESC_GGUF_INT8,   GLESC_GGUF_UINT16,  GLESC_GGUF_INT16,
        GLESC_GGUF_UINT32, GLESC_GGUF_INT32,  GLESC_GGUF_FLOAT32, GLESC_GGUF_BOOL,
        GLESC_GGUF_STRING, GLESC_GGUF_UINT64, GLESC_GGUF_INT64,   GLESC_GGUF_FLOAT64};
    static const uint64_t umax1[] = {[GLESC_GGUF_UINT8] = 254,
                                     [GLESC_GGUF_UINT16] = 65534,
                                     [GLESC_GGUF_UINT32] = 4294967294u,
                                     [GLESC_GGUF_UINT64] = UINT64_MAX - 1};
    for (uint64_t k = 0; k < 12; k++) {
        glesc_gguf_type t = scalar[k];
        v = next(it, GLESC_GGUF_ARRAY, 1, k);
        cr_expect_eq(v.as.arr.elem_type, t);
        cr_expect_eq(v.as.arr.n, 2);
        glesc_gguf_value a = next(it, t, 2, 0), b = next(it, t, 2, 1);
        const char *name = glesc_gguf_type_name(t);
        switch (t) {
        case GLESC_GGUF_UINT8:
        case GLESC_GGUF_UINT16:
        case GLESC_GGUF_UINT32:
        case GLESC_GGUF_UINT64:
            cr_expect_eq(a.as.u64, 1, "%s", name);
            cr_expect_eq(b.as.u64, umax1[t], "%s: %llu", name, (unsigned long long)b.as.u64);
            break;
        case GLESC_GGUF_INT8:
        case GLESC_GGUF_INT16:
        case GLESC_GGUF_INT32:
        case GLESC_GGUF_INT64:
            cr_expect_eq(a.as.i64, 1, "%s", name);
            cr_expect_eq(b.as.i64, -2, "%s: %lld", name, (long long)b.as.i64);
            break;
        case GLESC_GGUF_FLOAT32:
            cr_expect_eq(a.as.f64, 1.5);
            cr_expect(b.as.f64 == 0.0 && signbit(b.as.f64));
            break;
        case GLESC_GGUF_FLOAT64:
            cr_expect_eq(a.as.f64, 1e-300);
            cr_expect(isinf(b.as.f64) && b.as.f64 > 0);
            break;
        case GLESC_GGUF_BOOL:
            cr_expect(!a.as.b && b.as.b);
            break;
        case GLESC_GGUF_STRING:
            cr_expect_eq(a.as.str.len, 0);
            cr_expect(b.as.str.len == 3 && memcmp(b.as.str.data, "xyz", 3) == 0);
            break;
        default:
            cr_assert_fail("unexpected type");
        }
    }
    expect_end(it);
    glesc_gguf_iter_destroy(it);
}

Test(gguf_iter, arrays_of_arrays_depth_first)
{
    /* [[["p", "q"], []], [], [[7]]] */
    glesc_gguf_iter *it = iter("nested");
    cr_expect_eq(next(it, GLESC_GGUF_ARRAY, 0, 0).as.arr.n, 3);
    cr_expect_eq(next(it, GLESC_GGUF_ARRAY, 1, 0).as.arr.n, 2);
    glesc_gguf_value v = next(it, GLESC_GGUF_ARRAY, 2, 0);
    cr_expect(v.as.arr.elem_type == GLESC_GGUF_STRING && v.as.arr.n == 2);
    cr_expect(memcmp(next(it, GLESC_GGUF_STRING, 3, 0).as.str.data, "p", 1) == 0);
    cr_expect(memcmp(next(it, GLESC_GGUF_STRING, 3, 1).as.str.data, "q", 1) == 0);
    v = next(it, GLESC_GGUF_ARRAY, 2, 1);
    cr_expect(v.as.arr.elem_type == GLESC_GGUF_STRING && v.as.arr.n == 0);
    v = next(it, GLESC_GGUF_ARRAY, 1, 1);
    cr_expect(v.as.arr.elem_type == GLESC_GGUF_ARRAY && v.as.arr.n == 0);
    cr_expect_eq(next(it, GLESC_GGUF_ARRAY, 1, 2).as.arr.n, 1);
    cr_expect_eq(next(it, GLESC_GGUF_ARRAY, 2, 0).as.arr.n, 1);
    cr_expect_eq(next(it, GLESC_GGUF_INT32, 3, 0).as.i64, 7);
    expect_end(it);
    glesc_gguf_iter_destroy(it);

    it = iter("deep");
    for (int d = 0; d < 8; d++)
        next(it, GLESC_GGUF_ARRAY, d, 0);
    cr_expect_eq(next(it, GLESC_GGUF_UINT16, 8, 0).as.u64, 5);
    cr_expect_eq(next(it, GLESC_GGUF_UINT16, 8, 1).as.u64, 6);
    expect_end(it);
    glesc_gguf_iter_destroy(it);

    it = iter("empty");
    v = next(it, GLESC_GGUF_ARRAY, 0, 0);
    cr_expect(v.as.arr.elem_type == GLESC_GGUF_UINT32 && v.as.arr.n == 0);
    expect_end(it);
    glesc_gguf_iter_destroy(it);
}

Test(gguf_iter, skip_the_rest_of_an_array)
{
    /* Strings (variable size): two of ten, then the rest skipped. */
    glesc_gguf_iter *it = iter("strs");
    glesc_gguf_iter_skip(it); /* nothing open yet: a no-op */
    cr_expect_eq(next(it, GLESC_GGUF_ARRAY, 0, 0).as.arr.n, 10);
    next(it, GLESC_GGUF_STRING, 1, 0);
    glesc_gguf_value v = next(it, GLESC_GGUF_STRING, 1, 1);
    cr_expect(v.as.str.len == 2 && memcmp(v.as.str.data, "s1", 2) == 0);
    glesc_gguf_iter_skip(it);
    expect_end(it);
    glesc_gguf_iter_destroy(it);

    /* Skipping right after the array: all its elements. */
    it = iter("strs");
    next(it, GLESC_GGUF_ARRAY, 0, 0);
    glesc_gguf_iter_skip(it);
    expect_end(it);
    glesc_gguf_iter_destroy(it);

    /* Inner arrays: skipping the rest of [[p, q], []] after "p" (the
     * innermost open array is ["p", "q"]), then of the outer array. */
    it = iter("nested");
    next(it, GLESC_GGUF_ARRAY, 0, 0);
    next(it, GLESC_GGUF_ARRAY, 1, 0);
    next(it, GLESC_GGUF_ARRAY, 2, 0);
    next(it, GLESC_GGUF_STRING, 3, 0);
    glesc_gguf_iter_skip(it); /* "q" */
    next(it, GLESC_GGUF_ARRAY, 2, 1);
    next(it, GLESC_GGUF_ARRAY, 1, 1);
    glesc_gguf_iter_skip(it); /* [[7]] */
    expect_end(it);
    glesc_gguf_iter_destroy(it);

    /* A nested array skipped whole from its own start. */
    it = iter("nested");
    next(it, GLESC_GGUF_ARRAY, 0, 0);
    next(it, GLESC_GGUF_ARRAY, 1, 0);
    glesc_gguf_iter_skip(it); /* ["p", "q"], [] */
    next(it, GLESC_GGUF_ARRAY, 1, 1);
    next(it, GLESC_GGUF_ARRAY, 1, 2);
    next(it, GLESC_GGUF_ARRAY, 2, 0);
    cr_expect_eq(next(it, GLESC_GGUF_INT32, 3, 0).as.i64, 7);
    expect_end(it);
    glesc_gguf_iter_destroy(it);

    /* Fixed-size elements at the deepest level, then every level above. */
    it = iter("each");
    next(it, GLESC_GGUF_ARRAY, 0, 0);
    next(it, GLESC_GGUF_ARRAY, 1, 0);
    next(it, GLESC_GGUF_UINT8, 2, 0);
    glesc_gguf_iter_skip(it);
    cr_expect_eq(next(it, GLESC_GGUF_ARRAY, 1, 1).as.arr.elem_type, GLESC_GGUF_INT8);
    glesc_gguf_iter_skip(it); /* the rest of [1, -2] of int8 */
    next(it, GLESC_GGUF_ARRAY, 1, 2);
    glesc_gguf_iter_skip(it);
    glesc_gguf_iter_skip(it); /* the outer array's remaining 9 */
    expect_end(it);
    glesc_gguf_iter_destroy(it);

    it = iter("deep");
    for (int d = 0; d < 8; d++)
        next(it, GLESC_GGUF_ARRAY, d, 0);
    next(it, GLESC_GGUF_UINT16, 8, 0);
    glesc_gguf_iter_skip(it); /* 6; every enclosing array is then complete */
    expect_end(it);
    glesc_gguf_iter_destroy(it);
}

Test(gguf_iter, refused_arguments)
{
    glesc_gguf_iter *it = (glesc_gguf_iter *)&it;
    cr_expect_eq(glesc_gguf_iter_create(file, glesc_gguf_n_kv(file), &it),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_null(it);
    cr_expect(strstr(glesc_last_errmsg(), "out of range"), "%s", glesc_last_errmsg());
    cr_expect_eq(glesc_gguf_iter_create(file, -1, &it), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_eq(glesc_gguf_iter_create(NULL, 0, &it), GLESC_ERROR_INVALID_ARGUMENT);
    cr_expect_eq(glesc_gguf_iter_create(file, 0, NULL), GLESC_ERROR_INVALID_ARGUMENT);
    glesc_gguf_value v;
    cr_expect_not(glesc_gguf_iter_next(NULL, &v));
    glesc_gguf_iter_skip(NULL);
    glesc_gguf_iter_destroy(NULL);
}
