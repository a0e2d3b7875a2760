/*
 * test_util.c — see test_util.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

char *test_shared_path(const char *rel)
{
    const char *dir = getenv("GLESC_SHARED_DIR");
    const char *root = getenv("GLESC_SOURCE_ROOT");
    char buf[4096];
    if (dir && *dir)
        snprintf(buf, sizeof buf, "%s/%s", dir, rel);
    else
        snprintf(buf, sizeof buf, "%s/../shared/%s", root && *root ? root : ".", rel);
    if (access(buf, R_OK) != 0)
        return NULL;
    return strdup(buf);
}

void *test_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *data = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            char *p = realloc(data, cap + 1);
            if (!p) {
                free(data);
                fclose(f);
                return NULL;
            }
            data = p;
        }
        size_t n = fread(data + len, 1, cap - len, f);
        if (n == 0)
            break;
        len += n;
    }
    fclose(f);
    data[len] = '\0';
    *size = len;
    return data;
}
