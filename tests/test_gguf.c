/*
 * test_gguf.c — the GGUF reader and writer without the shared models: the
 * malformed-file corpus (tests/gguf_corpus, one defect per file: expected
 * status and a piece of the message), round trips of every value type,
 * nested and string arrays and tensors of several types at alignments 32 and
 * 64, tensors produced by callbacks while the file is written, the typed
 * getters' conversions and errors, writer argument checks, and every
 * allocation failure during open.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "glesc_gguf.h"
#include "gguf/gguf.h"
#include "test_util.h"

static char *corpus_path(const char *name)
{
    const char *root = getenv("GLESC_SOURCE_ROOT");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/tests/gguf_corpus/%s", root && *root ? root : ".", name);
    return strdup(buf);
}

/* ---- Malformed corpus ---- */

typedef struct corpus_case {
    const char *file;
    glesc_status status;
    const char *msg; /* a piece of the expected message */
} corpus_case;

static const corpus_case corpus[] = {
    {"bad_empty.gguf", GLESC_ERROR_FORMAT, "offset 0: file is 0 bytes, too short"},
    {"bad_magic.gguf", GLESC_ERROR_FORMAT, "offset 0: bad magic 47 47 55 58"},
    {"bad_truncated_header.gguf", GLESC_ERROR_FORMAT, "offset 8: header is cut off"},
    {"bad_version1.gguf", GLESC_ERROR_UNSUPPORTED, "GGUF version 1 is not supported"},
    {"bad_version99.gguf", GLESC_ERROR_UNSUPPORTED, "GGUF version 99 is not supported"},
    {"bad_big_endian.gguf", GLESC_ERROR_UNSUPPORTED, "big-endian"},
    {"bad_n_kv_absurd.gguf", GLESC_ERROR_FORMAT, "n_kv 1152921504606846976 is more than"},
    {"bad_n_tensors_absurd.gguf", GLESC_ERROR_FORMAT, "n_tensors 1152921504606846976 is more"},
    {"bad_key_past_eof.gguf", GLESC_ERROR_FORMAT, "key length 1099511627776 goes past the end"},
    {"bad_string_past_eof.gguf", GLESC_ERROR_FORMAT,
     "key 'general.name': string length 1000 goes past the end"},
    {"bad_array_len_overflow.gguf", GLESC_ERROR_FORMAT,
     "key 'a': array of 2305843009213693953 uint64 elements cannot fit"},
    {"bad_string_array_absurd.gguf", GLESC_ERROR_FORMAT,
     "key 'tokenizer.ggml.tokens': array of 1152921504606846976 string elements cannot fit"},
    {"bad_array_depth_bomb.gguf", GLESC_ERROR_FORMAT,
     "key 'bomb': arrays nested deeper than 8 levels"},
    {"bad_unknown_value_type.gguf", GLESC_ERROR_FORMAT, "key 'x': unknown value type 13"},
    {"bad_unknown_array_type.gguf", GLESC_ERROR_FORMAT, "key 'x': array of unknown value type 42"},
    {"bad_bool_value.gguf", GLESC_ERROR_FORMAT, "key 'flag': bool value is 2"},
    {"bad_key_nul.gguf", GLESC_ERROR_FORMAT, "contains a NUL byte"},
    {"bad_duplicate_key.gguf", GLESC_ERROR_FORMAT, "key 'general.name' appears twice"},
    {"bad_alignment0.gguf", GLESC_ERROR_FORMAT,
     "key 'general.alignment': 0 is not a nonzero power of two"},
    {"bad_alignment3.gguf", GLESC_ERROR_FORMAT,
     "key 'general.alignment': 3 is not a nonzero power of two"},
    {"bad_alignment_type.gguf", GLESC_ERROR_FORMAT, "'general.alignment' is a string"},
    {"bad_truncated_tensor_info.gguf", GLESC_ERROR_FORMAT,
     "tensor 'weight_with_a_long_name': type and offset are cut off"},
    {"bad_tensor_name_past_eof.gguf", GLESC_ERROR_FORMAT, "tensor name length 4611686018427387904"},
    {"bad_unknown_tensor_type.gguf", GLESC_ERROR_FORMAT, "tensor 'w': unknown tensor type 4"},
    {"bad_n_dims5.gguf", GLESC_ERROR_FORMAT, "tensor 'w': n_dims 5 is not in 1..4"},
    {"bad_n_dims0.gguf", GLESC_ERROR_FORMAT, "tensor 'w': n_dims 0 is not in 1..4"},
    {"bad_negative_ne.gguf", GLESC_ERROR_FORMAT, "tensor 'w': ne[0] = -1 is negative"},
    {"bad_zero_dim.gguf", GLESC_ERROR_FORMAT, "tensor 'empty': ne[1] is 0 (empty dimension)"},
    {"bad_ne_overflow.gguf", GLESC_ERROR_FORMAT, "tensor 'w': element count overflows"},
    {"bad_row_bytes_overflow.gguf", GLESC_ERROR_FORMAT, "tensor 'w': byte size of a row"},
    {"bad_bytes_overflow.gguf", GLESC_ERROR_FORMAT, "tensor 'w': byte size overflows"},
    {"bad_row_not_block_multiple.gguf", GLESC_ERROR_FORMAT,
     "offset 100: tensor 'blk.0.attn_q.weight': row length 33 is not a multiple of q8_0's block "
     "size 32"},
    {"bad_offset_unaligned.gguf", GLESC_ERROR_FORMAT,
     "tensor 'b': data offset 16 is not a multiple of the alignment 32"},
    {"bad_offset_past_eof.gguf", GLESC_ERROR_FORMAT, "tensor 'w': data (offset 64, 16 bytes) goes"},
    {"bad_size_past_eof.gguf", GLESC_ERROR_FORMAT, "tensor 'w': data (offset 0, 256 bytes) goes"},
    {"bad_no_data_section.gguf", GLESC_ERROR_FORMAT, "goes past the end of the file"},
    {"bad_overflow_offset.gguf", GLESC_ERROR_FORMAT, "goes past the end of the file"},
    {"bad_overlap.gguf", GLESC_ERROR_FORMAT, "tensor 'b' (data bytes 32..64) overlaps tensor 'a'"},
    {"bad_duplicate_tensor.gguf", GLESC_ERROR_FORMAT, "tensor 'a' appears twice"},
    {"ok_minimal.gguf", GLESC_OK, NULL},
    {"ok_vocab_only.gguf", GLESC_OK, NULL},
    {"ok_all_types.gguf", GLESC_OK, NULL},
    {"ok_version2.gguf", GLESC_OK, NULL},
    /* Found by fuzz_gguf_roundtrip (slow unit, 12 s): valid, alignment 2^31 and
     * no tensors; the writer padded its copy to 2 GiB until files without
     * tensor bytes were left unpadded. */
    {"fuzz_slow_alignment_2g.gguf", GLESC_OK, NULL},
};

Test(gguf, corpus_table_is_complete)
{
    /* Every file in the corpus folder has a row (fuzzer finds too). */
    char *dir = corpus_path("");
    DIR *d = opendir(dir);
    cr_assert(d, "cannot list %s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0)
            continue;
        n++;
        bool found = false;
        for (size_t i = 0; i < CORE_ARRAY_LEN(corpus); i++)
            found |= strcmp(corpus[i].file, e->d_name) == 0;
        cr_expect(found, "%s has no row in the corpus table", e->d_name);
    }
    closedir(d);
    free(dir);
    cr_assert_eq((size_t)n, CORE_ARRAY_LEN(corpus), "%d files in tests/gguf_corpus, %zu rows", n,
                 CORE_ARRAY_LEN(corpus));
}

Test(gguf, corpus)
{
    for (size_t i = 0; i < CORE_ARRAY_LEN(corpus); i++) {
        const corpus_case *c = &corpus[i];
        char *path = corpus_path(c->file);
        glesc_gguf *f = (glesc_gguf *)1;
        glesc_status st = glesc_gguf_open(path, &f);
        const char *msg = glesc_last_errmsg();
        cr_expect_eq(st, c->status, "%s: status %s, expected %s (%s)", c->file,
                     glesc_status_name(st), glesc_status_name(c->status), msg);
        if (c->status != GLESC_OK) {
            cr_expect_null(f, "%s: *out must be NULL on failure", c->file);
            cr_expect(strstr(msg, c->msg) != NULL, "%s: message '%s' lacks '%s'", c->file, msg,
                      c->msg);
            cr_expect(strstr(msg, c->file) != NULL, "%s: message '%s' does not name the file",
                      c->file, msg);
            cr_expect(strstr(msg, ": offset ") != NULL, "%s: message '%s' has no offset", c->file,
                      msg);
        }
        /* The same bytes through open_memory give the same verdict. */
        size_t size = 0;
        void *data = test_read_file(path, &size);
        cr_assert(data, "cannot read %s", path);
        glesc_gguf *g = NULL;
        cr_expect_eq(glesc_gguf_open_memory(data, size, c->file, &g), c->status, "%s (memory)",
                     c->file);
        glesc_gguf_close(g);
        glesc_gguf_close(st == GLESC_OK ? f : NULL);
        free(data);
        free(path);
    }
}

Test(gguf, open_errors)
{
    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open("/nonexistent/x.gguf", &f), GLESC_ERROR_IO);
    cr_assert(strstr(glesc_last_errmsg(), "/nonexistent/x.gguf"));
    cr_assert_eq(glesc_gguf_open("/", &f), GLESC_ERROR_IO);
    cr_assert_eq(glesc_gguf_open(NULL, &f), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_open("x", NULL), GLESC_ERROR_INVALID_ARGUMENT);
    glesc_gguf_close(NULL);
}

/* ---- Reading the hand-made valid file ---- */

Test(gguf, all_types_getters)
{
    char *path = corpus_path("ok_all_types.gguf");
    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_gguf_version(f), 3);
    cr_assert_eq(glesc_gguf_alignment(f), 64);
    cr_assert_eq(glesc_gguf_data_offset(f) % 64, 0);
    cr_assert_eq(glesc_gguf_n_kv(f), 18);

    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
    bool b;
    cr_assert_eq(glesc_gguf_get_u32(f, "u8", &u32), GLESC_OK);
    cr_assert_eq(u32, 200);
    cr_assert_eq(glesc_gguf_get_i32(f, "i8", &i32), GLESC_OK);
    cr_assert_eq(i32, -100);
    cr_assert_eq(glesc_gguf_get_u32(f, "i8", &u32), GLESC_ERROR_TYPE); /* negative */
    cr_assert(strstr(glesc_last_errmsg(), "key 'i8': wanted uint32, found int8"), "%s",
              glesc_last_errmsg());
    cr_assert_eq(glesc_gguf_get_i64(f, "u16", &i64), GLESC_OK);
    cr_assert_eq(i64, 60000);
    cr_assert_eq(glesc_gguf_get_i32(f, "i16", &i32), GLESC_OK);
    cr_assert_eq(i32, -30000);
    cr_assert_eq(glesc_gguf_get_u32(f, "u32", &u32), GLESC_OK);
    cr_assert_eq(u32, 4000000000u);
    cr_assert_eq(glesc_gguf_get_i32(f, "u32", &i32), GLESC_ERROR_TYPE); /* too large */
    cr_assert_eq(glesc_gguf_get_i32(f, "i32", &i32), GLESC_OK);
    cr_assert_eq(i32, -2000000000);
    cr_assert_eq(glesc_gguf_get_u64(f, "u64", &u64), GLESC_OK);
    cr_assert_eq(u64, UINT64_MAX);
    cr_assert_eq(glesc_gguf_get_i64(f, "u64", &i64), GLESC_ERROR_TYPE);
    cr_assert_eq(glesc_gguf_get_i64(f, "i64", &i64), GLESC_OK);
    cr_assert_eq(i64, INT64_MIN);
    cr_assert_eq(glesc_gguf_get_u64(f, "i64", &u64), GLESC_ERROR_TYPE);
    cr_assert_eq(glesc_gguf_get_f32(f, "f32", &f32), GLESC_OK);
    cr_assert_eq(f32, 1.5f);
    cr_assert_eq(glesc_gguf_get_f64(f, "f64", &f64), GLESC_OK);
    cr_assert_eq(f64, -2.25);
    cr_assert_eq(glesc_gguf_get_f64(f, "i32", &f64), GLESC_OK); /* integers convert */
    cr_assert_eq(f64, -2000000000.0);
    cr_assert_eq(glesc_gguf_get_u32(f, "f32", &u32), GLESC_ERROR_TYPE);
    cr_assert_eq(glesc_gguf_get_bool(f, "bool", &b), GLESC_OK);
    cr_assert(b);
    cr_assert_eq(glesc_gguf_get_bool(f, "u8", &b), GLESC_ERROR_TYPE);
    cr_assert_eq(glesc_gguf_get_u32(f, "bool", &u32), GLESC_ERROR_TYPE);
    const char *s;
    size_t len;
    cr_assert_eq(glesc_gguf_get_str(f, "str", &s, &len), GLESC_OK);
    static const char expect_str[] = "tab\there \"quoted\" \\ \x01 \xff";
    cr_assert_eq(len, sizeof expect_str - 1);
    cr_assert(memcmp(s, expect_str, len) == 0);
    cr_assert_eq(glesc_gguf_get_str(f, "u8", &s, &len), GLESC_ERROR_TYPE);
    cr_assert(strstr(glesc_last_errmsg(), "key 'u8': wanted string, found uint8"));
    cr_assert_eq(glesc_gguf_get_u32(f, "absent.key", &u32), GLESC_ERROR_NOT_FOUND);
    cr_assert(strstr(glesc_last_errmsg(), "'absent.key'"));
    cr_assert_eq(glesc_gguf_get_u32(f, "str", &u32), GLESC_ERROR_TYPE);

    /* Arrays. */
    glesc_gguf_type et;
    uint64_t n;
    const void *data;
    cr_assert_eq(glesc_gguf_get_arr(f, "arr.i32", &et, &n, &data), GLESC_OK);
    cr_assert_eq(et, GLESC_GGUF_INT32);
    cr_assert_eq(n, 3);
    int32_t vals[3];
    memcpy(vals, data, sizeof vals); /* little-endian host assumed by this check */
    cr_assert_eq(vals[1], -2);
    cr_assert_eq(glesc_gguf_get_arr_i64(f, "arr.i32", 1, &i64), GLESC_OK);
    cr_assert_eq(i64, -2);
    cr_assert_eq(glesc_gguf_get_arr_f32(f, "arr.i32", 2, &f32), GLESC_OK);
    cr_assert_eq(f32, 3.0f);
    cr_assert_eq(glesc_gguf_get_arr_i64(f, "arr.i32", 3, &i64), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_get_arr(f, "arr.str", &et, &n, &data), GLESC_ERROR_TYPE);
    cr_assert(strstr(glesc_last_errmsg(), "wanted numeric array, found array of 3 string"), "%s",
              glesc_last_errmsg());
    cr_assert_eq(glesc_gguf_get_arr_str(f, "arr.str", 2, &s, &len), GLESC_OK);
    cr_assert_eq(len, 2);
    cr_assert(memcmp(s, "zz", 2) == 0);
    cr_assert_eq(glesc_gguf_get_arr_str(f, "arr.str", 1, &s, &len), GLESC_OK);
    cr_assert_eq(len, 0);
    cr_assert_eq(glesc_gguf_get_arr_str(f, "arr.str", 3, &s, &len), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_get_arr_str(f, "arr.i32", 0, &s, &len), GLESC_ERROR_TYPE);
    cr_assert_eq(glesc_gguf_get_arr(f, "arr.nested", &et, &n, &data), GLESC_ERROR_TYPE);
    int64_t ni = glesc_gguf_find_key(f, "arr.nested");
    cr_assert_geq(ni, 0);
    cr_assert_eq(glesc_gguf_kv_type(f, ni), GLESC_GGUF_ARRAY);
    cr_assert_eq(glesc_gguf_arr_type(f, ni), GLESC_GGUF_ARRAY);
    cr_assert_eq(glesc_gguf_arr_n(f, ni), 3);
    cr_assert_eq(glesc_gguf_get_arr(f, "arr.empty", &et, &n, &data), GLESC_OK);
    cr_assert_eq(n, 0);
    cr_assert_eq(et, GLESC_GGUF_FLOAT64);
    cr_assert_eq(glesc_gguf_key(f, 18), NULL);
    cr_assert_eq(glesc_gguf_key(f, -1), NULL);
    cr_assert_str_eq(glesc_gguf_key(f, 0), "general.alignment");

    /* Tensors. */
    cr_assert_eq(glesc_gguf_n_tensors(f), 3);
    glesc_gguf_tensor_info ti;
    cr_assert_eq(glesc_gguf_tensor(f, glesc_gguf_find_tensor(f, "q8"), &ti), GLESC_OK);
    cr_assert_str_eq(ti.name, "q8");
    cr_assert_eq(ti.type, GLESC_DTYPE_Q8_0);
    cr_assert_eq(ti.n_dims, 2);
    cr_assert_eq(ti.ne[0], 32);
    cr_assert_eq(ti.ne[1], 2);
    cr_assert_eq(ti.ne[2], 1);
    cr_assert_eq(ti.offset, 64);
    cr_assert_eq(ti.size, 68);
    cr_assert_eq(((const uint8_t *)ti.data)[0], 1);
    cr_assert_eq(glesc_gguf_find_tensor(f, "nope"), -1);
    cr_assert_eq(glesc_gguf_tensor(f, 3, &ti), GLESC_ERROR_INVALID_ARGUMENT);
    glesc_gguf_close(f);
    free(path);
}

Test(gguf, type_names)
{
    cr_assert_str_eq(glesc_gguf_type_name(GLESC_GGUF_FLOAT64), "float64");
    cr_assert_str_eq(glesc_gguf_type_name(GLESC_GGUF_ARRAY), "array");
    cr_assert_str_eq(glesc_gguf_type_name((glesc_gguf_type)13), "?");
    cr_assert_str_eq(glesc_gguf_type_name((glesc_gguf_type)-1), "?");
}

/* Every allocation during open fails in turn: each must be reported as
 * out-of-memory, leak nothing (ASan) and leave *out NULL. */
Test(gguf, open_out_of_memory)
{
    char *path = corpus_path("ok_all_types.gguf");
    size_t size;
    void *data = test_read_file(path, &size);
    cr_assert(data);
    for (long k = 0;; k++) {
        core_alloc_fail_after(k);
        glesc_gguf *f = (glesc_gguf *)1;
        glesc_status st = glesc_gguf_open_memory(data, size, "x.gguf", &f);
        core_alloc_fail_after(-1);
        if (st == GLESC_OK) {
            cr_assert_gt(k, 3);
            glesc_gguf_close(f);
            break;
        }
        cr_assert_eq(st, GLESC_ERROR_OUT_OF_MEMORY, "allocation %ld: %s", k, glesc_last_errmsg());
        cr_assert_null(f);
    }
    free(data);
    free(path);
}

/* ---- Round trips through the writer ---- */

static char *tmp_file(const char *tag)
{
    char buf[256];
    snprintf(buf, sizeof buf, "/tmp/glesc-test-gguf-%ld-%s.gguf", (long)getpid(), tag);
    return strdup(buf);
}

static void round_trip(uint32_t alignment)
{
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    cr_assert(w);
    if (alignment != 32)
        cr_assert_eq(glesc_gguf_writer_set_alignment(w, alignment), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_str(w, "general.architecture", "llama"), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_u32(w, "u32", 4000000000u), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_i32(w, "i32", -7), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_u64(w, "u64", UINT64_MAX - 1), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_f32(w, "f32", 0.1f), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_bool(w, "bool", true), GLESC_OK);
    /* Every scalar type through set_raw (packed little-endian bytes). */
    const uint8_t raw[8] = {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    const char *raw_keys[] = {"r.u8",   "r.i8", "r.u16", "r.i16", "r.u32", "r.i32", "r.f32",
                              "r.bool", NULL,   NULL,    "r.u64", "r.i64", "r.f64"};
    for (int t = 0; t <= GLESC_GGUF_FLOAT64; t++) {
        if (!raw_keys[t])
            continue;
        const uint8_t one = 1;
        cr_assert_eq(glesc_gguf_writer_set_raw(w, raw_keys[t], (glesc_gguf_type)t,
                                               t == GLESC_GGUF_BOOL ? &one : raw),
                     GLESC_OK, "%s", glesc_last_errmsg());
    }
    cr_assert_eq(glesc_gguf_writer_set_raw(w, "r.str", GLESC_GGUF_STRING, "raw string"), GLESC_OK);
    /* Replacing keeps the position, changes the value and type. */
    cr_assert_eq(glesc_gguf_writer_set_u32(w, "replaced", 1), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_str(w, "replaced", "now a string"), GLESC_OK);
    const int16_t i16s[4] = {-1, 2, -3, 4};
    cr_assert_eq(glesc_gguf_writer_set_arr(w, "arr.i16", GLESC_GGUF_INT16, i16s, 4), GLESC_OK);
    const float fs[3] = {0.5f, -1.0f, 3.25f};
    cr_assert_eq(glesc_gguf_writer_set_arr(w, "arr.f32", GLESC_GGUF_FLOAT32, fs, 3), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_arr(w, "arr.empty", GLESC_GGUF_UINT64, NULL, 0), GLESC_OK);
    const char *strs[] = {"<unk>", "", "\xe2\x96\x81hello", "a\"b\\c"};
    cr_assert_eq(glesc_gguf_writer_set_arr_str(w, "arr.str", strs, 4), GLESC_OK);
    /* An array of arrays: [[1, 2], ["x"], [[true]]] encoded by hand. */
    uint8_t nested[128];
    size_t p = 0;
    core_put_le32(nested + p, GLESC_GGUF_ARRAY), p += 4;
    core_put_le64(nested + p, 3), p += 8;
    core_put_le32(nested + p, GLESC_GGUF_UINT8), p += 4;
    core_put_le64(nested + p, 2), p += 8;
    nested[p++] = 1;
    nested[p++] = 2;
    core_put_le32(nested + p, GLESC_GGUF_STRING), p += 4;
    core_put_le64(nested + p, 1), p += 8;
    core_put_le64(nested + p, 1), p += 8;
    nested[p++] = 'x';
    core_put_le32(nested + p, GLESC_GGUF_ARRAY), p += 4;
    core_put_le64(nested + p, 1), p += 8;
    core_put_le32(nested + p, GLESC_GGUF_BOOL), p += 4;
    core_put_le64(nested + p, 1), p += 8;
    nested[p++] = 1;
    cr_assert_eq(glesc_gguf_writer_set_encoded(w, "arr.nested", GLESC_GGUF_ARRAY, nested, p),
                 GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_gguf_writer_set_encoded(w, "bad", GLESC_GGUF_ARRAY, nested, p - 1),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_writer_set_encoded(w, "bad", GLESC_GGUF_UINT8, nested, 2),
                 GLESC_ERROR_INVALID_ARGUMENT);

    /* Tensors of several types, with data and zero-filled. */
    float t0[5 * 3];
    for (int i = 0; i < 15; i++)
        t0[i] = (float)i * 0.25f;
    uint8_t q8[2 * 34 * 2], q4k[144], f16[2 * 3];
    for (size_t i = 0; i < sizeof q8; i++)
        q8[i] = (uint8_t)(i * 7);
    for (size_t i = 0; i < sizeof q4k; i++)
        q4k[i] = (uint8_t)(255 - i);
    memset(f16, 0x3c, sizeof f16);
    const int64_t ne0[2] = {5, 3}, ne1[2] = {64, 2}, ne2[1] = {256}, ne3[3] = {1, 3, 1},
                  ne4[4] = {32, 1, 1, 2};
    cr_assert_eq(glesc_gguf_writer_add_tensor(w, "t.f32", GLESC_DTYPE_F32, 2, ne0, t0, sizeof t0),
                 GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_add_tensor(w, "t.q8_0", GLESC_DTYPE_Q8_0, 2, ne1, q8, sizeof q8),
                 GLESC_OK);
    cr_assert_eq(
        glesc_gguf_writer_add_tensor(w, "t.q4_k", GLESC_DTYPE_Q4_K, 1, ne2, q4k, sizeof q4k),
        GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_add_tensor(w, "t.f16", GLESC_DTYPE_F16, 3, ne3, f16, sizeof f16),
                 GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_add_tensor(w, "t.zeros", GLESC_DTYPE_Q4_0, 4, ne4, NULL, 36),
                 GLESC_OK);

    char *path = tmp_file(alignment == 32 ? "a32" : "a64");
    cr_assert_eq(glesc_gguf_writer_write(w, path), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_gguf_writer_destroy(w);

    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_gguf_version(f), 3);
    cr_assert_eq(glesc_gguf_alignment(f), alignment);
    cr_assert_eq(glesc_gguf_find_key(f, "general.alignment") >= 0, alignment != 32);
    const char *s;
    size_t len;
    cr_assert_eq(glesc_gguf_get_str(f, "general.architecture", &s, &len), GLESC_OK);
    cr_assert(len == 5 && memcmp(s, "llama", 5) == 0);
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
    bool b;
    cr_assert_eq(glesc_gguf_get_u32(f, "u32", &u32), GLESC_OK);
    cr_assert_eq(u32, 4000000000u);
    cr_assert_eq(glesc_gguf_get_i32(f, "i32", &i32), GLESC_OK);
    cr_assert_eq(i32, -7);
    cr_assert_eq(glesc_gguf_get_u64(f, "u64", &u64), GLESC_OK);
    cr_assert_eq(u64, UINT64_MAX - 1);
    cr_assert_eq(glesc_gguf_get_f32(f, "f32", &f32), GLESC_OK);
    cr_assert_eq(f32, 0.1f);
    cr_assert_eq(glesc_gguf_get_bool(f, "bool", &b), GLESC_OK);
    cr_assert(b);
    /* The raw scalars: 0xfe, 0xfffe, ... as each type reads them. */
    cr_assert_eq(glesc_gguf_get_u32(f, "r.u8", &u32), GLESC_OK);
    cr_assert_eq(u32, 0xfe);
    cr_assert_eq(glesc_gguf_get_i32(f, "r.i8", &i32), GLESC_OK);
    cr_assert_eq(i32, -2);
    cr_assert_eq(glesc_gguf_get_u32(f, "r.u16", &u32), GLESC_OK);
    cr_assert_eq(u32, 0xfffe);
    cr_assert_eq(glesc_gguf_get_i32(f, "r.i16", &i32), GLESC_OK);
    cr_assert_eq(i32, -2);
    cr_assert_eq(glesc_gguf_get_u32(f, "r.u32", &u32), GLESC_OK);
    cr_assert_eq(u32, 0xfffffffe);
    cr_assert_eq(glesc_gguf_get_i64(f, "r.i32", &i64), GLESC_OK);
    cr_assert_eq(i64, -2);
    cr_assert_eq(glesc_gguf_get_u64(f, "r.u64", &u64), GLESC_OK);
    cr_assert_eq(u64, UINT64_MAX - 1);
    cr_assert_eq(glesc_gguf_get_i64(f, "r.i64", &i64), GLESC_OK);
    cr_assert_eq(i64, -2);
    cr_assert_eq(glesc_gguf_get_f64(f, "r.f32", &f64), GLESC_OK);
    cr_assert(f64 != f64); /* 0xfffffffe is a NaN */
    cr_assert_eq(glesc_gguf_get_f64(f, "r.f64", &f64), GLESC_OK);
    cr_assert(f64 != f64);
    cr_assert_eq(glesc_gguf_get_bool(f, "r.bool", &b), GLESC_OK);
    cr_assert(b);
    cr_assert_eq(glesc_gguf_get_str(f, "r.str", &s, &len), GLESC_OK);
    cr_assert(len == 10 && memcmp(s, "raw string", 10) == 0);
    int64_t ri = glesc_gguf_find_key(f, "replaced");
    cr_assert_eq(glesc_gguf_kv_type(f, ri), GLESC_GGUF_STRING);
    cr_assert_lt(ri, glesc_gguf_find_key(f, "arr.i16"));
    for (uint64_t i = 0; i < 4; i++) {
        cr_assert_eq(glesc_gguf_get_arr_i64(f, "arr.i16", i, &i64), GLESC_OK);
        cr_assert_eq(i64, i16s[i]);
    }
    for (uint64_t i = 0; i < 3; i++) {
        cr_assert_eq(glesc_gguf_get_arr_f32(f, "arr.f32", i, &f32), GLESC_OK);
        cr_assert_eq(f32, fs[i]);
    }
    glesc_gguf_type et;
    uint64_t n;
    const void *data;
    cr_assert_eq(glesc_gguf_get_arr(f, "arr.empty", &et, &n, &data), GLESC_OK);
    cr_assert(et == GLESC_GGUF_UINT64 && n == 0);
    cr_assert_eq(glesc_gguf_arr_n(f, glesc_gguf_find_key(f, "arr.str")), 4);
    for (uint64_t i = 0; i < 4; i++) {
        cr_assert_eq(glesc_gguf_get_arr_str(f, "arr.str", i, &s, &len), GLESC_OK);
        cr_assert(len == strlen(strs[i]) && memcmp(s, strs[i], len) == 0);
    }
    int64_t nk = glesc_gguf_find_key(f, "arr.nested");
    const void *enc;
    uint64_t enc_size;
    cr_assert_eq(glesc_gguf_kv_raw(f, nk, &enc, &enc_size), GLESC_OK);
    cr_assert_eq(enc_size, p);
    cr_assert(memcmp(enc, nested, p) == 0);

    cr_assert_eq(glesc_gguf_n_tensors(f), 5);
    const char *names[5] = {"t.f32", "t.q8_0", "t.q4_k", "t.f16", "t.zeros"};
    const void *datas[5] = {t0, q8, q4k, f16, NULL};
    const uint64_t sizes[5] = {sizeof t0, sizeof q8, sizeof q4k, sizeof f16, 36};
    const glesc_dtype types[5] = {GLESC_DTYPE_F32, GLESC_DTYPE_Q8_0, GLESC_DTYPE_Q4_K,
                                  GLESC_DTYPE_F16, GLESC_DTYPE_Q4_0};
    uint64_t expect_off = 0;
    for (int i = 0; i < 5; i++) {
        glesc_gguf_tensor_info ti;
        cr_assert_eq(glesc_gguf_tensor(f, i, &ti), GLESC_OK);
        cr_assert_str_eq(ti.name, names[i]);
        cr_assert_eq(ti.type, types[i]);
        cr_assert_eq(ti.size, sizes[i]);
        cr_assert_eq(ti.offset, expect_off, "%s at %llu", names[i], (unsigned long long)ti.offset);
        cr_assert_eq(ti.offset % alignment, 0);
        expect_off = (ti.offset + ti.size + alignment - 1) / alignment * alignment;
        if (datas[i]) {
            cr_assert(memcmp(ti.data, datas[i], ti.size) == 0, "%s data differs", names[i]);
        } else {
            for (uint64_t k = 0; k < ti.size; k++)
                cr_assert_eq(((const uint8_t *)ti.data)[k], 0);
        }
    }
    glesc_gguf_tensor_info ti;
    cr_assert_eq(glesc_gguf_tensor(f, 3, &ti), GLESC_OK);
    cr_assert(ti.n_dims == 3 && ti.ne[0] == 1 && ti.ne[1] == 3 && ti.ne[2] == 1 && ti.ne[3] == 1);
    cr_assert_eq(glesc_gguf_file_size(f), glesc_gguf_data_offset(f) + expect_off);
    glesc_gguf_close(f);
    unlink(path);
    free(path);
}

Test(gguf, round_trip_alignment_32)
{
    round_trip(32);
}

Test(gguf, round_trip_alignment_64)
{
    round_trip(64);
}

Test(gguf, writer_errors)
{
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    cr_assert(w);
    cr_assert_eq(glesc_gguf_writer_set_alignment(w, 0), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_writer_set_alignment(w, 48), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_writer_set_u32(w, "general.alignment", 3),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_writer_set_str(w, "general.alignment", "32"),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_writer_set_u32(w, NULL, 1), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_writer_set_u32(w, "", 1), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_writer_set_str(w, "s", NULL), GLESC_ERROR_INVALID_ARGUMENT);
    const uint8_t two = 2;
    cr_assert_eq(glesc_gguf_writer_set_raw(w, "b", GLESC_GGUF_BOOL, &two),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_writer_set_raw(w, "a", GLESC_GGUF_ARRAY, &two),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_writer_set_raw(w, "a", (glesc_gguf_type)99, &two),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_writer_set_arr(w, "a", GLESC_GGUF_STRING, &two, 1),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_writer_set_arr(w, "a", GLESC_GGUF_BOOL, &two, 1),
                 GLESC_ERROR_INVALID_ARGUMENT);
    const char *strs[] = {"a", NULL};
    cr_assert_eq(glesc_gguf_writer_set_arr_str(w, "a", strs, 2), GLESC_ERROR_INVALID_ARGUMENT);

    uint8_t buf[256] = {0};
    const int64_t ne[2] = {32, 2}, bad_row[1] = {33}, neg[1] = {-4}, five[1] = {1};
    cr_assert_eq(glesc_gguf_writer_add_tensor(w, "w", GLESC_DTYPE_Q8_0, 2, ne, buf, 67),
                 GLESC_ERROR_SHAPE);
    cr_assert(strstr(glesc_last_errmsg(), "tensor 'w': size 67 does not match 2 rows of 34"), "%s",
              glesc_last_errmsg());
    cr_assert_eq(glesc_gguf_writer_add_tensor(w, "w", GLESC_DTYPE_Q8_0, 1, bad_row, buf, 34),
                 GLESC_ERROR_SHAPE);
    cr_assert(strstr(glesc_last_errmsg(), "row length 33 is not a multiple of q8_0's block size"));
    cr_assert_eq(glesc_gguf_writer_add_tensor(w, "w", GLESC_DTYPE_F32, 1, neg, buf, 0),
                 GLESC_ERROR_SHAPE);
    cr_assert_eq(glesc_gguf_writer_add_tensor(w, "w", (glesc_dtype)4, 1, five, buf, 0),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_writer_add_tensor(w, "w", GLESC_DTYPE_F32, 5, ne, buf, 0),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_gguf_writer_add_tensor(w, "w", GLESC_DTYPE_Q8_0, 2, ne, buf, 68), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_add_tensor(w, "w", GLESC_DTYPE_Q8_0, 2, ne, buf, 68),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(glesc_last_errmsg(), "tensor 'w' was already added"));
    cr_assert_eq(glesc_gguf_writer_write(w, "/nonexistent-dir/x.gguf"), GLESC_ERROR_IO);
    cr_assert(strstr(glesc_last_errmsg(), "/nonexistent-dir/x.gguf.tmp"), "%s",
              glesc_last_errmsg());
    glesc_gguf_writer_destroy(w);
    glesc_gguf_writer_destroy(NULL);
}

/* Alignment set through the key and through the setter agree; the file is
 * written to path.tmp and renamed (no .tmp left behind). */
Test(gguf, writer_alignment_key)
{
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    cr_assert_eq(glesc_gguf_writer_set_u32(w, "general.alignment", 128), GLESC_OK);
    float x[3] = {1, 2, 3};
    const int64_t ne[1] = {3};
    cr_assert_eq(glesc_gguf_writer_add_tensor(w, "a", GLESC_DTYPE_F32, 1, ne, x, 12), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_add_tensor(w, "b", GLESC_DTYPE_F32, 1, ne, x, 12), GLESC_OK);
    char *path = tmp_file("a128");
    cr_assert_eq(glesc_gguf_writer_write(w, path), GLESC_OK);
    glesc_gguf_writer_destroy(w);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    cr_assert_neq(access(tmp, F_OK), 0);
    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_gguf_alignment(f), 128);
    glesc_gguf_tensor_info ti;
    cr_assert_eq(glesc_gguf_tensor(f, 1, &ti), GLESC_OK);
    cr_assert_eq(ti.offset, 128);
    glesc_gguf_close(f);
    unlink(path);
    free(path);
}

/* Many keys: lookups go through the hash index, every key is found at its
 * own index. */
Test(gguf, many_keys)
{
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    char key[64];
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof key, "k.%d", i);
        cr_assert_eq(glesc_gguf_writer_set_u32(w, key, (uint32_t)i * 3), GLESC_OK);
    }
    char *path = tmp_file("many");
    cr_assert_eq(glesc_gguf_writer_write(w, path), GLESC_OK);
    glesc_gguf_writer_destroy(w);
    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK);
    cr_assert_eq(glesc_gguf_n_kv(f), 5000);
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof key, "k.%d", i);
        cr_assert_eq(glesc_gguf_find_key(f, key), i);
        uint32_t v;
        cr_assert_eq(glesc_gguf_get_u32(f, key, &v), GLESC_OK);
        cr_assert_eq(v, (uint32_t)i * 3);
    }
    cr_assert_eq(glesc_gguf_find_key(f, "k.5000"), -1);
    cr_assert_eq(glesc_gguf_find_key(f, NULL), -1);
    glesc_gguf_close(f);
    unlink(path);
    free(path);
}

/* Every allocation of a writer's life fails in turn: each call reports
 * out-of-memory or succeeds, nothing leaks (ASan), and once no allocation
 * fails the file reads back. */
Test(gguf, writer_out_of_memory)
{
    char *path = tmp_file("oom");
    const char *strs[] = {"a", "bb"};
    const uint8_t enc[12 + 2] = {GLESC_GGUF_UINT8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 7, 8};
    const float x[4] = {1, 2, 3, 4};
    const int64_t ne[1] = {4};
    for (long k = 0;; k++) {
        core_alloc_fail_after(k);
        glesc_gguf_writer *w = glesc_gguf_writer_create();
        bool all_ok = w != NULL;
        if (w) {
            glesc_status st[8] = {
                glesc_gguf_writer_set_u32(w, "u", 1),
                glesc_gguf_writer_set_str(w, "s", "text"),
                glesc_gguf_writer_set_arr(w, "a", GLESC_GGUF_FLOAT32, x, 4),
                glesc_gguf_writer_set_arr_str(w, "as", strs, 2),
                glesc_gguf_writer_set_encoded(w, "e", GLESC_GGUF_ARRAY, enc, sizeof enc),
                glesc_gguf_writer_set_alignment(w, 64),
                glesc_gguf_writer_add_tensor(w, "t", GLESC_DTYPE_F32, 1, ne, x, sizeof x),
                glesc_gguf_writer_write(w, path),
            };
            for (int i = 0; i < 8; i++) {
                cr_assert(st[i] == GLESC_OK || st[i] == GLESC_ERROR_OUT_OF_MEMORY,
                          "allocation %ld, call %d: %s", k, i, glesc_status_name(st[i]));
                all_ok &= st[i] == GLESC_OK;
            }
            glesc_gguf_writer_destroy(w);
        }
        core_alloc_fail_after(-1);
        if (all_ok) {
            cr_assert_gt(k, 5);
            break;
        }
    }
    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_gguf_n_kv(f), 6); /* five keys and general.alignment */
    cr_assert_eq(glesc_gguf_alignment(f), 64);
    glesc_gguf_close(f);
    unlink(path);
    free(path);
}

/* Without tensors the file ends after the directory (no padding, even for
 * a large alignment), and the reader accepts it. A tensor with an empty
 * dimension is refused, as the reader refuses it. */
Test(gguf, writer_no_data_no_padding)
{
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    cr_assert_eq(glesc_gguf_writer_set_alignment(w, 1u << 31), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_str(w, "general.name", "vocab only"), GLESC_OK);
    const int64_t ne[2] = {256, 0};
    cr_assert_eq(glesc_gguf_writer_add_tensor(w, "empty", GLESC_DTYPE_Q4_K, 2, ne, NULL, 0),
                 GLESC_ERROR_SHAPE);
    cr_assert(strstr(glesc_last_errmsg(), "tensor 'empty': ne[1] = 0 is not positive"), "%s",
              glesc_last_errmsg());
    char *path = tmp_file("nodata");
    cr_assert_eq(glesc_gguf_writer_write(w, path), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_gguf_writer_destroy(w);
    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_lt(glesc_gguf_file_size(f), 200);
    cr_assert_eq(glesc_gguf_alignment(f), 1u << 31);
    cr_assert_eq(glesc_gguf_n_tensors(f), 0);
    glesc_gguf_close(f);
    unlink(path);
    free(path);
}

/* ---- Files that are not regular, files that shrink ---- */

/* A FIFO or a device given as a GGUF file is refused by name at once: an
 * open() that waited for a writer would hang every caller. */
Test(gguf, not_a_regular_file_is_refused_without_waiting, .timeout = 30)
{
    char *dir = test_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/fifo.gguf", dir);
    cr_assert_eq(mkfifo(path, 0600), 0);
    const char *paths[] = {path, "/dev/null", dir};
    for (size_t i = 0; i < CORE_ARRAY_LEN(paths); i++) {
        glesc_gguf *f = (glesc_gguf *)1;
        cr_expect_eq(glesc_gguf_open(paths[i], &f), GLESC_ERROR_IO, "%s", paths[i]);
        cr_expect_null(f);
        char want[4300];
        snprintf(want, sizeof want, "%s: not a regular file", paths[i]);
        cr_expect_str_eq(glesc_last_errmsg(), want);
    }
    unlink(path);
    rmdir(dir);
    free(dir);
}

/* glesc_gguf_tensor_read copies a tensor's bytes (from the file with pread,
 * from memory for a memory reader); when the file was truncated after it
 * was opened it fails naming the file and tensor, where touching the
 * mapping's vanished pages would be a SIGBUS. */
Test(gguf, tensor_read_copies_and_survives_truncation)
{
    float a[64], b[64];
    for (int i = 0; i < 64; i++) {
        a[i] = (float)i;
        b[i] = -(float)i;
    }
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    cr_assert_eq(
        glesc_gguf_writer_add_tensor(w, "a", GLESC_DTYPE_F32, 1, (int64_t[]){64}, a, sizeof a),
        GLESC_OK);
    cr_assert_eq(
        glesc_gguf_writer_add_tensor(w, "b", GLESC_DTYPE_F32, 2, (int64_t[]){32, 2}, b, sizeof b),
        GLESC_OK);
    char *path = tmp_file("shrinks");
    cr_assert_eq(glesc_gguf_writer_write(w, path), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_gguf_writer_destroy(w);
    size_t size;
    void *bytes = test_read_file(path, &size);
    cr_assert_not_null(bytes);
    glesc_gguf *f = NULL, *mem = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_gguf_open_memory(bytes, size, "mem", &mem), GLESC_OK);
    float got[64];
    for (int k = 0; k < 2; k++) {
        const glesc_gguf *r = k ? mem : f;
        memset(got, 0, sizeof got);
        cr_assert_eq(glesc_gguf_tensor_read(r, 1, 0, got, sizeof got), GLESC_OK, "%s",
                     glesc_last_errmsg());
        cr_expect_eq(memcmp(got, b, sizeof b), 0);
        cr_assert_eq(glesc_gguf_tensor_read(r, 0, 40 * 4, got, 8), GLESC_OK);
        cr_expect(got[0] == 40.0f && got[1] == 41.0f);
        cr_expect_eq(glesc_gguf_tensor_read(r, 0, 60 * 4, got, 32), GLESC_ERROR_INVALID_ARGUMENT);
        cr_expect(strstr(glesc_last_errmsg(), "tensor 'a': bytes 240..272 are outside its 256"),
                  "%s", glesc_last_errmsg());
        cr_expect_eq(glesc_gguf_tensor_read(r, 2, 0, got, 4), GLESC_ERROR_INVALID_ARGUMENT);
    }
    /* Cut the file in the middle of tensor b. */
    glesc_gguf_tensor_info ti;
    cr_assert_eq(glesc_gguf_tensor(f, 1, &ti), GLESC_OK);
    cr_assert_eq(truncate(path, (off_t)(glesc_gguf_data_offset(f) + ti.offset + 100)), 0);
    cr_assert_eq(glesc_gguf_tensor_read(f, 0, 0, got, sizeof a), GLESC_OK, "%s",
                 glesc_last_errmsg());
    cr_expect_eq(memcmp(got, a, sizeof a), 0);
    cr_assert_eq(glesc_gguf_tensor_read(f, 1, 0, got, sizeof b), GLESC_ERROR_IO);
    const char *msg = glesc_last_errmsg();
    cr_expect(strstr(msg, path) && strstr(msg, "tensor 'b'") && strstr(msg, "truncated"), "%s",
              msg);
    cr_log_info("%s", msg);
    glesc_gguf_close(f);
    glesc_gguf_close(mem);
    free(bytes);
    unlink(path);
    free(path);
}

/* add_tensor_fn: each callback runs once, in the order of addition, with the
 * tensor's name and size, and its bytes land where add_tensor's would. */
typedef struct fill_log {
    int calls;
    char names[4][8];
    glesc_status fail_with; /* returned by the call named "t1" */
} fill_log;

static glesc_status fill_pattern(void *user, const char *name, void *dst, uint64_t size)
{
    fill_log *log = user;
    if (log->calls < 4)
        snprintf(log->names[log->calls], sizeof log->names[0], "%s", name);
    log->calls++;
    if (log->fail_with && !strcmp(name, "t1"))
        return log->fail_with;
    for (uint64_t i = 0; i < size; i++)
        ((uint8_t *)dst)[i] = (uint8_t)(i * 3 + (uint64_t)name[1]);
    return GLESC_OK;
}

Test(gguf, writer_tensor_callbacks)
{
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    fill_log log = {0};
    const int64_t ne0[2] = {64, 3}, ne1[1] = {7};
    const float mid[2] = {1.5f, -2.0f};
    cr_assert_eq(glesc_gguf_writer_add_tensor_fn(w, "t0", GLESC_DTYPE_Q8_0, 2, ne0, 3 * 2 * 34,
                                                 fill_pattern, &log),
                 GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(
        glesc_gguf_writer_add_tensor(w, "mid", GLESC_DTYPE_F32, 1, (int64_t[]){2}, mid, sizeof mid),
        GLESC_OK);
    cr_assert_eq(
        glesc_gguf_writer_add_tensor_fn(w, "t1", GLESC_DTYPE_F16, 1, ne1, 14, fill_pattern, &log),
        GLESC_OK);
    /* the size is checked as add_tensor checks it; a callback is required */
    cr_assert_eq(
        glesc_gguf_writer_add_tensor_fn(w, "t2", GLESC_DTYPE_F16, 1, ne1, 15, fill_pattern, &log),
        GLESC_ERROR_SHAPE);
    cr_assert_eq(glesc_gguf_writer_add_tensor_fn(w, "t3", GLESC_DTYPE_F16, 1, ne1, 14, NULL, NULL),
                 GLESC_ERROR_INVALID_ARGUMENT);
    char *path = tmp_file("fill");
    cr_assert_eq(glesc_gguf_writer_write(w, path), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(log.calls, 2);
    cr_assert_str_eq(log.names[0], "t0");
    cr_assert_str_eq(log.names[1], "t1");

    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    for (int64_t i = 0; i < 3; i++) {
        glesc_gguf_tensor_info ti;
        cr_assert_eq(glesc_gguf_tensor(f, i, &ti), GLESC_OK);
        const uint8_t *b = ti.data;
        if (i == 1) {
            cr_assert_eq(memcmp(b, mid, sizeof mid), 0);
            continue;
        }
        cr_assert_eq(ti.size, i == 0 ? 204u : 14u);
        for (uint64_t k = 0; k < ti.size; k++)
            cr_assert_eq(b[k], (uint8_t)(k * 3 + (uint64_t)ti.name[1]), "%s byte %llu", ti.name,
                         (unsigned long long)k);
    }
    glesc_gguf_close(f);
    unlink(path);

    /* A failing callback stops the write with its status: no file, no
     * temporary file. */
    log = (fill_log){.fail_with = GLESC_ERROR_IO};
    cr_assert_eq(glesc_gguf_writer_write(w, path), GLESC_ERROR_IO);
    cr_assert_eq(log.calls, 2);
    cr_assert_eq(access(path, F_OK), -1);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    cr_assert_eq(access(tmp, F_OK), -1);
    glesc_gguf_writer_destroy(w);
    free(path);
}
