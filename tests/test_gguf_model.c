/*
 * test_gguf_model.c — the GGUF reader and writer on the real files of the
 * shared folder (skipped where ../shared is absent): every model, vocab and
 * reference file opens and its tensors tile the data section; the legacy
 * files are refused for the right reason; a writer-made copy of every file
 * (each value through set_raw / set_arr / set_arr_str / set_encoded, each
 * tensor through add_tensor) re-reads identically and is byte-identical to
 * the original (all of them were written by ggml, which lays files out the
 * same way).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "glesc_gguf.h"
#include "gguf/gguf.h"
#include "test_util.h"

/* The folders of the shared area holding GGUF files. */
static const char *const dirs[] = {"models", "models/extra", "models/vocab", "reference/models"};

typedef void (*file_fn)(const char *path, const char *rel);

/* Calls fn on every .gguf in dirs; returns how many. */
static int for_each_model(file_fn fn)
{
    int n = 0;
    for (size_t k = 0; k < CORE_ARRAY_LEN(dirs); k++) {
        char *dir = test_shared_path(dirs[k]);
        if (!dir)
            continue;
        DIR *d = opendir(dir);
        cr_assert(d, "cannot list %s", dir);
        for (struct dirent *e; (e = readdir(d));) {
            size_t len = strlen(e->d_name);
            if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0)
                continue;
            char path[4096], rel[512];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            snprintf(rel, sizeof rel, "%s/%s", dirs[k], e->d_name);
            fn(path, rel);
            n++;
        }
        closedir(d);
        free(dir);
    }
    return n;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

static void check_layout(const char *path, const char *rel)
{
    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s: %s", rel, glesc_last_errmsg());
    int64_t n = glesc_gguf_n_tensors(f);
    uint32_t a = glesc_gguf_alignment(f);
    uint64_t expect_off = 0, total = 0;
    const void *data0 = NULL;
    for (int64_t i = 0; i < n; i++) {
        glesc_gguf_tensor_info ti;
        cr_assert_eq(glesc_gguf_tensor(f, i, &ti), GLESC_OK);
        uint64_t rows = (uint64_t)(ti.ne[1] * ti.ne[2] * ti.ne[3]);
        cr_assert_eq(ti.size, glesc_dtype_row_bytes(ti.type, ti.ne[0]) * rows, "%s: %s", rel,
                     ti.name);
        /* ggml writes tensors in directory order, each padded to the alignment. */
        cr_assert_eq(ti.offset, expect_off, "%s: %s at %llu, expected %llu", rel, ti.name,
                     (unsigned long long)ti.offset, (unsigned long long)expect_off);
        cr_assert_eq(glesc_gguf_find_tensor(f, ti.name), i);
        expect_off = align_up(ti.offset + ti.size, a);
        total += ti.size;
        if (i == 0)
            data0 = ti.data;
        cr_assert_eq((uint64_t)((const uint8_t *)ti.data - (const uint8_t *)data0), ti.offset,
                     "%s: %s", rel, ti.name);
    }
    if (n > 0)
        cr_assert_eq(glesc_gguf_file_size(f), glesc_gguf_data_offset(f) + expect_off,
                     "%s: the tensors (%llu bytes) do not add up to the data section", rel,
                     (unsigned long long)total);
    else
        cr_assert_leq(glesc_gguf_file_size(f), glesc_gguf_data_offset(f), "%s", rel);
    for (int64_t i = 0; i < glesc_gguf_n_kv(f); i++)
        cr_assert_eq(glesc_gguf_find_key(f, glesc_gguf_key(f, i)), i);
    glesc_gguf_close(f);
}

Test(gguf_model, every_file_opens_and_adds_up)
{
    TEST_REQUIRE_SHARED(models, "models/stories260K.gguf");
    free(models);
    int n = for_each_model(check_layout);
    cr_assert_geq(n, 27, "only %d GGUF files found", n);
}

Test(gguf_model, legacy_v1_refused)
{
    TEST_REQUIRE_SHARED(path, "models/legacy/tinyllamas-stories-260k-f32.gguf");
    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_ERROR_UNSUPPORTED);
    cr_assert(strstr(glesc_last_errmsg(), "GGUF version 1 is not supported"), "%s",
              glesc_last_errmsg());
    cr_assert_null(f);
    free(path);
}

/* The v2 Q8_0 file stores 5 ffn_down tensors with rows of 172 elements as
 * 344 blocks laid end to end, so blocks straddle rows. The first of them in
 * directory order is refused by name. */
Test(gguf_model, legacy_q8_0_rows_refused)
{
    TEST_REQUIRE_SHARED(path, "models/legacy/tinyllamas-stories-260k-q8_0.gguf");
    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_ERROR_FORMAT);
    cr_assert(strstr(glesc_last_errmsg(),
                     ": offset 11802: tensor 'blk.0.ffn_down.weight': row length 172 is not a "
                     "multiple of q8_0's block size 32"),
              "%s", glesc_last_errmsg());
    cr_assert_null(f);
    free(path);
}

Test(gguf_model, stories260k_metadata)
{
    TEST_REQUIRE_SHARED(path, "models/stories260K.gguf");
    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_gguf_n_tensors(f), 48);
    uint32_t v;
    cr_assert_eq(glesc_gguf_get_u32(f, "llama.embedding_length", &v), GLESC_OK);
    cr_assert_eq(v, 64);
    cr_assert_eq(glesc_gguf_get_u32(f, "llama.feed_forward_length", &v), GLESC_OK);
    cr_assert_eq(v, 172);
    float eps;
    cr_assert_eq(glesc_gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps), GLESC_OK);
    cr_assert_float_eq(eps, 1e-5f, 1e-9f);
    const char *s;
    size_t len;
    cr_assert_eq(glesc_gguf_get_str(f, "general.architecture", &s, &len), GLESC_OK);
    cr_assert(len == 5 && memcmp(s, "llama", 5) == 0);
    cr_assert_eq(glesc_gguf_get_str(f, "tokenizer.ggml.pre", &s, &len), GLESC_ERROR_NOT_FOUND);
    cr_assert_eq(glesc_gguf_get_arr_str(f, "tokenizer.ggml.tokens", 1, &s, &len), GLESC_OK);
    cr_assert(len == 3 && memcmp(s, "<s>", 3) == 0);
    glesc_gguf_tensor_info ti;
    cr_assert_eq(glesc_gguf_tensor(f, glesc_gguf_find_tensor(f, "output.weight"), &ti), GLESC_OK);
    glesc_gguf_tensor_info te;
    cr_assert_eq(glesc_gguf_tensor(f, glesc_gguf_find_tensor(f, "token_embd.weight"), &te),
                 GLESC_OK);
    cr_assert(ti.size == te.size &&
              memcmp(ti.data, te.data, ti.size) == 0); /* tied, stored twice */
    glesc_gguf_close(f);
    free(path);
}

/* Vocab-only files end right after the metadata: valid, 0 tensors; their
 * token arrays read through the O(1) string index. */
Test(gguf_model, vocab_files)
{
    static const struct {
        const char *rel;
        uint64_t n_vocab, n_merges;
    } vocabs[] = {
        {"models/vocab/ggml-vocab-llama-spm.gguf", 32000, 0},
        {"models/vocab/ggml-vocab-phi-3.gguf", 32064, 0},
        {"models/vocab/ggml-vocab-gpt-2.gguf", 50257, 50000},
        {"models/vocab/ggml-vocab-deepseek-coder.gguf", 32256, 31757},
        {"models/vocab/ggml-vocab-deepseek-llm.gguf", 102400, 99757},
    };
    TEST_REQUIRE_SHARED(probe, "models/vocab/ggml-vocab-llama-spm.gguf");
    free(probe);
    for (size_t k = 0; k < CORE_ARRAY_LEN(vocabs); k++) {
        char *path = test_shared_path(vocabs[k].rel);
        cr_assert(path, "%s is missing", vocabs[k].rel);
        glesc_gguf *f = NULL;
        cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
        cr_assert_eq(glesc_gguf_n_tensors(f), 0);
        cr_assert_lt(glesc_gguf_file_size(f), glesc_gguf_data_offset(f) + 32);
        int64_t ti = glesc_gguf_find_key(f, "tokenizer.ggml.tokens");
        cr_assert_eq(glesc_gguf_arr_n(f, ti), vocabs[k].n_vocab, "%s", vocabs[k].rel);
        /* Walk the encoded array and compare every element with the index. */
        const void *raw;
        uint64_t raw_size;
        cr_assert_eq(glesc_gguf_kv_raw(f, ti, &raw, &raw_size), GLESC_OK);
        const uint8_t *p = (const uint8_t *)raw + 12;
        for (uint64_t i = 0; i < vocabs[k].n_vocab; i++) {
            const char *s;
            size_t len;
            cr_assert_eq(glesc_gguf_get_arr_str(f, "tokenizer.ggml.tokens", i, &s, &len), GLESC_OK);
            cr_assert_eq(len, core_le64(p));
            cr_assert_eq((const uint8_t *)s, p + 8);
            p += 8 + len;
        }
        cr_assert_eq(p, (const uint8_t *)raw + raw_size);
        int64_t mi = glesc_gguf_find_key(f, "tokenizer.ggml.merges");
        cr_assert_eq(mi >= 0 ? glesc_gguf_arr_n(f, mi) : 0, vocabs[k].n_merges, "%s",
                     vocabs[k].rel);
        glesc_gguf_close(f);
        free(path);
    }
}

/* ---- Copy through the writer ---- */

static void copy_kv(glesc_gguf_writer *w, const glesc_gguf *f, int64_t i)
{
    const char *key = glesc_gguf_key(f, i);
    glesc_gguf_type t = glesc_gguf_kv_type(f, i);
    const void *raw;
    uint64_t raw_size;
    cr_assert_eq(glesc_gguf_kv_raw(f, i, &raw, &raw_size), GLESC_OK);
    glesc_status st;
    if (t == GLESC_GGUF_STRING) {
        const char *s;
        size_t len;
        cr_assert_eq(glesc_gguf_get_str(f, key, &s, &len), GLESC_OK);
        if (memchr(s, 0, len)) {
            st = glesc_gguf_writer_set_encoded(w, key, t, raw, raw_size);
        } else {
            char *z = strndup(s, len);
            st = glesc_gguf_writer_set_raw(w, key, t, z);
            free(z);
        }
    } else if (t != GLESC_GGUF_ARRAY) {
        st = glesc_gguf_writer_set_raw(w, key, t, raw);
    } else if (glesc_gguf_arr_type(f, i) == GLESC_GGUF_STRING) {
        uint64_t n = glesc_gguf_arr_n(f, i);
        char **strs = calloc(n ? n : 1, sizeof *strs);
        bool has_nul = false;
        for (uint64_t k = 0; k < n; k++) {
            const char *s;
            size_t len;
            cr_assert_eq(glesc_gguf_get_arr_str(f, key, k, &s, &len), GLESC_OK);
            has_nul |= memchr(s, 0, len) != NULL;
            strs[k] = strndup(s, len);
        }
        if (has_nul)
            st = glesc_gguf_writer_set_encoded(w, key, t, raw, raw_size);
        else
            st = glesc_gguf_writer_set_arr_str(w, key, (const char *const *)strs, n);
        for (uint64_t k = 0; k < n; k++)
            free(strs[k]);
        free(strs);
    } else if (glesc_gguf_arr_type(f, i) == GLESC_GGUF_ARRAY) {
        st = glesc_gguf_writer_set_encoded(w, key, t, raw, raw_size);
    } else {
        glesc_gguf_type et;
        uint64_t n;
        const void *data;
        cr_assert_eq(glesc_gguf_get_arr(f, key, &et, &n, &data), GLESC_OK);
        st = glesc_gguf_writer_set_arr(w, key, et, data, n);
    }
    cr_assert_eq(st, GLESC_OK, "key '%s': %s", key, glesc_last_errmsg());
}

static void check_copy(const char *path, const char *rel)
{
    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s: %s", rel, glesc_last_errmsg());
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    cr_assert(w);
    if (glesc_gguf_alignment(f) != 32)
        cr_assert_eq(glesc_gguf_writer_set_alignment(w, glesc_gguf_alignment(f)), GLESC_OK);
    for (int64_t i = 0; i < glesc_gguf_n_kv(f); i++)
        copy_kv(w, f, i);
    for (int64_t i = 0; i < glesc_gguf_n_tensors(f); i++) {
        glesc_gguf_tensor_info ti;
        cr_assert_eq(glesc_gguf_tensor(f, i, &ti), GLESC_OK);
        cr_assert_eq(
            glesc_gguf_writer_add_tensor(w, ti.name, ti.type, ti.n_dims, ti.ne, ti.data, ti.size),
            GLESC_OK, "%s: %s", rel, glesc_last_errmsg());
    }
    char out[256];
    snprintf(out, sizeof out, "/tmp/glesc-test-gguf-copy-%ld.gguf", (long)getpid());
    cr_assert_eq(glesc_gguf_writer_write(w, out), GLESC_OK, "%s: %s", rel, glesc_last_errmsg());
    glesc_gguf_writer_destroy(w);

    glesc_gguf *g = NULL;
    cr_assert_eq(glesc_gguf_open(out, &g), GLESC_OK, "copy of %s: %s", rel, glesc_last_errmsg());
    cr_assert_eq(glesc_gguf_n_kv(g), glesc_gguf_n_kv(f));
    cr_assert_eq(glesc_gguf_alignment(g), glesc_gguf_alignment(f));
    for (int64_t i = 0; i < glesc_gguf_n_kv(f); i++) {
        cr_assert_str_eq(glesc_gguf_key(g, i), glesc_gguf_key(f, i));
        cr_assert_eq(glesc_gguf_kv_type(g, i), glesc_gguf_kv_type(f, i));
        const void *a, *b;
        uint64_t na, nb;
        cr_assert_eq(glesc_gguf_kv_raw(f, i, &a, &na), GLESC_OK);
        cr_assert_eq(glesc_gguf_kv_raw(g, i, &b, &nb), GLESC_OK);
        cr_assert(na == nb && memcmp(a, b, na) == 0, "%s: key '%s' differs", rel,
                  glesc_gguf_key(f, i));
    }
    cr_assert_eq(glesc_gguf_n_tensors(g), glesc_gguf_n_tensors(f));
    for (int64_t i = 0; i < glesc_gguf_n_tensors(f); i++) {
        glesc_gguf_tensor_info a, b;
        cr_assert_eq(glesc_gguf_tensor(f, i, &a), GLESC_OK);
        cr_assert_eq(glesc_gguf_tensor(g, i, &b), GLESC_OK);
        cr_assert_str_eq(a.name, b.name);
        cr_assert(a.type == b.type && a.n_dims == b.n_dims && a.offset == b.offset &&
                  a.size == b.size && memcmp(a.ne, b.ne, sizeof a.ne) == 0);
        cr_assert(memcmp(a.data, b.data, a.size) == 0, "%s: tensor '%s' bytes differ", rel, a.name);
    }
    glesc_gguf_close(g);
    glesc_gguf_close(f);

    /* ggml lays files out as this writer does (vocab-only files unpadded
     * too): the copy is byte-identical. */
    size_t sa, sb;
    uint8_t *fa = test_read_file(path, &sa), *fb = test_read_file(out, &sb);
    cr_assert(fa && fb);
    cr_assert_eq(sb, sa, "%s: copy of %zu bytes, original %zu", rel, sb, sa);
    cr_assert(memcmp(fa, fb, sa) == 0, "%s: the copy differs from the original", rel);
    free(fa);
    free(fb);
    unlink(out);
}

Test(gguf_model, writer_copies_are_identical, .timeout = 600)
{
    TEST_REQUIRE_SHARED(models, "models/stories260K.gguf");
    free(models);
    int n = for_each_model(check_copy);
    cr_assert_geq(n, 27);
}
