/*
 * fuzz_gguf_roundtrip.c — libFuzzer property target: whatever the reader
 * accepts, copied through the writer (every value with set_encoded, every
 * tensor with add_tensor), must be accepted by the writer, re-read, and come
 * back identical: keys, types, encoded values, tensor shapes and bytes, and
 * the alignment. Any difference traps. Slower than fuzz_gguf (it writes a
 * file per accepted input), so it complements it rather than replacing it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "glesc_gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok)
{
    if (!ok)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    glesc_gguf *f = NULL;
    if (glesc_gguf_open_memory(data, size, "fuzz.gguf", &f) != GLESC_OK)
        return 0;
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    check(w != NULL);
    check(glesc_gguf_writer_set_alignment(w, glesc_gguf_alignment(f)) == GLESC_OK);
    for (int64_t i = 0; i < glesc_gguf_n_kv(f); i++) {
        const void *raw;
        uint64_t n;
        check(glesc_gguf_kv_raw(f, i, &raw, &n) == GLESC_OK);
        const char *key = glesc_gguf_key(f, i);
        glesc_status st = glesc_gguf_writer_set_encoded(w, key, glesc_gguf_kv_type(f, i), raw, n);
        /* The writer refuses only empty keys, which the format allows. */
        check(st == GLESC_OK || (key[0] == '\0' && st == GLESC_ERROR_INVALID_ARGUMENT));
        if (st != GLESC_OK)
            goto done;
    }
    for (int64_t i = 0; i < glesc_gguf_n_tensors(f); i++) {
        glesc_gguf_tensor_info t;
        check(glesc_gguf_tensor(f, i, &t) == GLESC_OK);
        glesc_status st =
            glesc_gguf_writer_add_tensor(w, t.name, t.type, t.n_dims, t.ne, t.data, t.size);
        check(st == GLESC_OK || (t.name[0] == '\0' && st == GLESC_ERROR_INVALID_ARGUMENT));
        if (st != GLESC_OK)
            goto done;
    }
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz-gguf-roundtrip-%ld.gguf", (long)getpid());
    check(glesc_gguf_writer_write(w, path) == GLESC_OK);
    glesc_gguf *g = NULL;
    check(glesc_gguf_open(path, &g) == GLESC_OK);
    unlink(path);
    check(glesc_gguf_version(g) == 3);
    check(glesc_gguf_alignment(g) == glesc_gguf_alignment(f));
    int64_t extra =
        glesc_gguf_alignment(f) != 32 && glesc_gguf_find_key(f, "general.alignment") < 0;
    check(glesc_gguf_n_kv(g) == glesc_gguf_n_kv(f) + extra);
    for (int64_t i = 0; i < glesc_gguf_n_kv(f); i++) {
        const void *a, *b;
        uint64_t na, nb;
        check(strcmp(glesc_gguf_key(f, i), glesc_gguf_key(g, i)) == 0);
        check(glesc_gguf_kv_type(f, i) == glesc_gguf_kv_type(g, i));
        check(glesc_gguf_kv_raw(f, i, &a, &na) == GLESC_OK);
        check(glesc_gguf_kv_raw(g, i, &b, &nb) == GLESC_OK);
        check(na == nb && memcmp(a, b, na) == 0);
    }
    check(glesc_gguf_n_tensors(g) == glesc_gguf_n_tensors(f));
    for (int64_t i = 0; i < glesc_gguf_n_tensors(f); i++) {
        glesc_gguf_tensor_info a, b;
        check(glesc_gguf_tensor(f, i, &a) == GLESC_OK);
        check(glesc_gguf_tensor(g, i, &b) == GLESC_OK);
        check(strcmp(a.name, b.name) == 0 && a.type == b.type && a.n_dims == b.n_dims);
        check(memcmp(a.ne, b.ne, sizeof a.ne) == 0 && a.size == b.size);
        check(memcmp(a.data, b.data, a.size) == 0);
    }
    glesc_gguf_close(g);
done:
    glesc_gguf_writer_destroy(w);
    glesc_gguf_close(f);
    return 0;
}
