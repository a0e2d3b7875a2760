/*
 * test_gguf_edit.c — see test_gguf_edit.h. The copy keeps the key order and
 * alignment; tensor data goes from the old file's mapping straight into the
 * new one (the writer renames its temporary file over the path, so the
 * mapping stays valid while it writes).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "test_gguf_edit.h"

void test_gguf_rewrite(const char *path, const test_gguf_edit *e)
{
    glesc_gguf *f = NULL;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    cr_assert_not_null(w);
    if (glesc_gguf_alignment(f) != 32)
        cr_assert_eq(glesc_gguf_writer_set_alignment(w, glesc_gguf_alignment(f)), GLESC_OK);
    bool key_done = false;
    for (int64_t i = 0; i < glesc_gguf_n_kv(f); i++) {
        const char *key = glesc_gguf_key(f, i);
        glesc_status st;
        if (!strcmp(key, "general.alignment"))
            continue; /* the writer adds it from the alignment */
        if (e->key && !strcmp(key, e->key)) {
            st = glesc_gguf_writer_set_raw(w, key, e->key_type, e->key_value);
            key_done = true;
        } else {
            const void *v;
            uint64_t n;
            cr_assert_eq(glesc_gguf_kv_raw(f, i, &v, &n), GLESC_OK);
            st = glesc_gguf_writer_set_encoded(w, key, glesc_gguf_kv_type(f, i), v, n);
        }
        cr_assert_eq(st, GLESC_OK, "%s: %s", key, glesc_last_errmsg());
    }
    if (e->key && !key_done)
        cr_assert_eq(glesc_gguf_writer_set_raw(w, e->key, e->key_type, e->key_value), GLESC_OK,
                     "%s", glesc_last_errmsg());
    float *edited = NULL;
    for (int64_t i = 0; i < glesc_gguf_n_tensors(f); i++) {
        glesc_gguf_tensor_info t;
        cr_assert_eq(glesc_gguf_tensor(f, i, &t), GLESC_OK);
        const void *data = t.data;
        if (e->tensor && !strcmp(t.name, e->tensor)) {
            cr_assert_eq(t.type, GLESC_DTYPE_F32, "%s is %s, not f32", t.name,
                         glesc_dtype_name(t.type));
            cr_assert(e->index >= 0 && (uint64_t)e->index < t.size / 4, "%s: index %lld", t.name,
                      (long long)e->index);
            edited = malloc((size_t)t.size);
            cr_assert_not_null(edited);
            memcpy(edited, t.data, (size_t)t.size);
            edited[e->index] = e->value;
            data = edited;
        }
        cr_assert_eq(glesc_gguf_writer_add_tensor(w, t.name, t.type, t.n_dims, t.ne, data, t.size),
                     GLESC_OK, "%s", glesc_last_errmsg());
    }
    cr_assert(!e->tensor || edited, "no tensor '%s' in %s", e->tensor, path);
    cr_assert_eq(glesc_gguf_writer_write(w, path), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_gguf_writer_destroy(w);
    free(edited);
    glesc_gguf_close(f);
}
