/*
 * file.c — see file.h. Reads in growing chunks rather than by the file's
 * size, so pipes and /dev/stdin work too; the limit is checked as the bytes
 * come, so an endless source (/dev/zero) stops at it instead of growing
 * until the process is killed.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/file.h"

char *tool_read_file(const char *path, size_t max, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) {
            fclose(f);
            errno = ENOMEM;
            return NULL;
        }
        size_t room = cap - n; /* at most one byte past max: enough to know */
        if (max < SIZE_MAX && room > max + 1 - n)
            room = max + 1 - n;
        size_t got = fread(buf + n, 1, room, f);
        n += got;
        if (got < room || n > max)
            break;
        if (n < cap)
            continue;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb)
            free(buf);
        buf = nb;
    }
    int err = ferror(f) ? errno : n > max ? EFBIG : 0;
    fclose(f);
    if (err) {
        free(buf);
        errno = err;
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

uint64_t tool_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    long page = sysconf(_SC_PAGESIZE);
    return (uint64_t)resident * (uint64_t)(page > 0 ? page : 4096);
}
