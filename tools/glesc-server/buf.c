/*
 * buf.c — the growable byte buffer the server's files share, and the clock.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "glesc-server/glesc-server.h"

void buf_add(srv_buf *b, const void *p, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->oom = true;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0; /* always terminated, for messages */
}

void buf_free(srv_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
