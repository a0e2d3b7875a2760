/*
 * fuzz_gguf.c — libFuzzer target for the GGUF reader: opens the input with
 * glesc_gguf_open_memory and, when it is accepted, walks every entry, every
 * getter on every key and every tensor, so a validation gap shows up as an
 * out-of-bounds read under ASan rather than going unnoticed.
 *
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined
 *        -Db_lundef=false -Dtests=false; run with tests/fuzz/run_fuzz.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "glesc_gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Touches every byte of a range so ASan checks that it is readable. */
static volatile uint8_t sink;

static void touch(const void *p, uint64_t n)
{
    const uint8_t *b = p;
    uint8_t acc = 0;
    for (uint64_t i = 0; i < n; i++)
        acc ^= b[i];
    sink = acc;
}

static void walk_key(const glesc_gguf *f, int64_t i)
{
    const char *key = glesc_gguf_key(f, i);
    if (!key || glesc_gguf_find_key(f, key) != i)
        __builtin_trap();
    const void *raw;
    uint64_t raw_size;
    if (glesc_gguf_kv_raw(f, i, &raw, &raw_size) == GLESC_OK)
        touch(raw, raw_size);
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
    bool b;
    const char *s;
    size_t len;
    (void)glesc_gguf_get_u32(f, key, &u32);
    (void)glesc_gguf_get_i32(f, key, &i32);
    (void)glesc_gguf_get_u64(f, key, &u64);
    (void)glesc_gguf_get_i64(f, key, &i64);
    (void)glesc_gguf_get_f32(f, key, &f32);
    (void)glesc_gguf_get_f64(f, key, &f64);
    (void)glesc_gguf_get_bool(f, key, &b);
    if (glesc_gguf_get_str(f, key, &s, &len) == GLESC_OK)
        touch(s, len);
    glesc_gguf_type et;
    uint64_t n;
    const void *arr;
    if (glesc_gguf_get_arr(f, key, &et, &n, &arr) == GLESC_OK) {
        static const uint8_t esize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        if ((unsigned)et >= sizeof esize || !esize[et])
            __builtin_trap();
        touch(arr, n * esize[et]);
    }
    uint64_t an = glesc_gguf_arr_n(f, i);
    (void)glesc_gguf_kv_type(f, i);
    (void)glesc_gguf_arr_type(f, i);
    /* First, last and one past the end of every array. */
    uint64_t idxs[3] = {0, an ? an - 1 : 0, an};
    for (int k = 0; k < 3; k++) {
        if (glesc_gguf_get_arr_str(f, key, idxs[k], &s, &len) == GLESC_OK)
            touch(s, len);
        (void)glesc_gguf_get_arr_f32(f, key, idxs[k], &f32);
        (void)glesc_gguf_get_arr_i64(f, key, idxs[k], &i64);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    glesc_gguf *f = NULL;
    if (glesc_gguf_open_memory(data, size, "fuzz.gguf", &f) != GLESC_OK)
        return 0;
    (void)glesc_gguf_version(f);
    (void)glesc_gguf_alignment(f);
    (void)glesc_gguf_data_offset(f);
    (void)glesc_gguf_file_size(f);
    for (int64_t i = 0; i < glesc_gguf_n_kv(f); i++)
        walk_key(f, i);
    (void)glesc_gguf_key(f, glesc_gguf_n_kv(f));
    (void)glesc_gguf_find_key(f, "general.architecture");
    for (int64_t i = 0; i < glesc_gguf_n_tensors(f); i++) {
        glesc_gguf_tensor_info ti;
        if (glesc_gguf_tensor(f, i, &ti) != GLESC_OK)
            __builtin_trap();
        if (glesc_gguf_find_tensor(f, ti.name) != i)
            __builtin_trap();
        touch(ti.data, ti.size);
    }
    glesc_gguf_tensor_info ti;
    (void)glesc_gguf_tensor(f, glesc_gguf_n_tensors(f), &ti);
    glesc_gguf_close(f);
    return 0;
}
