/*
 * test_gguf_edit.h — rewrites a GGUF file with one change, for tests that
 * need a model broken in one precise way (a NaN weight, a key of the wrong
 * type or value) without committing binary files: everything else is copied
 * through the public reader and writer unchanged.
 */
#ifndef GLESC_TEST_GGUF_EDIT_H
#define GLESC_TEST_GGUF_EDIT_H

#include <stdint.h>

#include "glesc_gguf.h"

typedef struct test_gguf_edit {
    /* Sets this key (in place of its value, or added at the end), or NULL:
     * a scalar of key_type from key_value's packed little-endian bytes (a
     * NUL-terminated string for GLESC_GGUF_STRING), as
     * glesc_gguf_writer_set_raw takes it. */
    const char *key;
    glesc_gguf_type key_type;
    const void *key_value;
    /* In this f32 tensor (or NULL), element index becomes value. */
    const char *tensor;
    int64_t index;
    float value;
} test_gguf_edit;

/* Rewrites path in place with the change e describes; fails the test when
 * the file cannot be read or written, or the tensor is not f32. */
void test_gguf_rewrite(const char *path, const test_gguf_edit *e);

#endif
