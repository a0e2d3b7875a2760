/*
 * static_consumer.c — an application linking libglesc.a (built and run by
 * tests/check_exports.py). It defines functions under some of glesc's
 * internal names, as an application that also links ggml does
 * (gguf_type_size): with the internal symbols local to the archive, the link
 * succeeds and glesc keeps using its own. Nothing here needs a GPU.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "glesc.h"
#include "glesc_gguf.h"

/* Internal names of glesc's, defined again by the application. */
size_t gguf_type_size(int type);
void *core_malloc(size_t size);
void sbuf_init(void *b);

size_t gguf_type_size(int type)
{
    return (size_t)type + 1000;
}

void *core_malloc(size_t size)
{
    (void)size;
    return NULL;
}

void sbuf_init(void *b)
{
    (void)b;
}

int main(void)
{
    if (strcmp(glesc_status_name(GLESC_ERROR_FORMAT), "GLESC_ERROR_FORMAT") != 0)
        return 1;
    /* A GGUF file with one uint32 key: the reader (parse, value sizes,
     * allocation, name index) runs on glesc's own internals. */
    static const uint8_t file[] = {
        'G', 'G', 'U', 'F',             /* magic */
        3,   0,   0,   0,               /* version */
        0,   0,   0,   0,   0, 0, 0, 0, /* n_tensors */
        1,   0,   0,   0,   0, 0, 0, 0, /* n_kv */
        1,   0,   0,   0,   0, 0, 0, 0, /* key length */
        'k',                            /* key */
        4,   0,   0,   0,               /* type: uint32 */
        7,   0,   0,   0,               /* value */
    };
    glesc_gguf *f = NULL;
    if (glesc_gguf_open_memory(file, sizeof file, "consumer", &f) != GLESC_OK) {
        fprintf(stderr, "open: %s\n", glesc_last_errmsg());
        return 1;
    }
    uint32_t v = 0;
    glesc_status st = glesc_gguf_get_u32(f, "k", &v);
    glesc_gguf_close(f);
    if (st != GLESC_OK || v != 7) {
        fprintf(stderr, "get_u32: %s (%u)\n", glesc_last_errmsg(), v);
        return 1;
    }
    /* The error path formats a message through glesc's allocator. */
    if (glesc_gguf_open_memory("GGUX", 4, "bad", &f) != GLESC_ERROR_FORMAT ||
        !strstr(glesc_last_errmsg(), "bad magic")) {
        fprintf(stderr, "bad magic not reported: %s\n", glesc_last_errmsg());
        return 1;
    }
    printf("glesc %s\n", glesc_version());
    return 0;
}
