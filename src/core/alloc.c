/*
 * alloc.c — the single allocation hook (Lua's lua_Alloc) and the failure
 * injection that tests use to walk every out-of-memory path.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static void *default_alloc(void *user, void *ptr, size_t size)
{
    (void)user;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, size);
}

static glesc_alloc_fn alloc_fn = default_alloc;
static void *alloc_user;
/* Failure injection: counts allocations; fails once count >= fail_at. */
static long alloc_count;
static long alloc_fail_at = -1;

GLESC_API void glesc_set_allocator(glesc_alloc_fn fn, void *user)
{
    alloc_fn = fn ? fn : default_alloc;
    alloc_user = fn ? user : NULL;
}

long core_alloc_fail_after(long n)
{
    long made = alloc_count;
    alloc_count = 0;
    alloc_fail_at = n;
    return made;
}

static bool inject_failure(void)
{
    long i = alloc_count++;
    return alloc_fail_at >= 0 && i >= alloc_fail_at;
}

void *core_malloc(size_t size)
{
    if (size == 0)
        size = 1;
    if (inject_failure())
        return NULL;
    return alloc_fn(alloc_user, NULL, size);
}

void *core_calloc(size_t n, size_t size)
{
    size_t total;
    if (core_mul_overflow(n, size, &total))
        return NULL;
    void *p = core_malloc(total);
    if (p)
        memset(p, 0, total);
    return p;
}

void *core_realloc(void *ptr, size_t size)
{
    if (size == 0)
        size = 1;
    if (inject_failure())
        return NULL;
    return alloc_fn(alloc_user, ptr, size);
}

void core_free(void *ptr)
{
    if (ptr)
        alloc_fn(alloc_user, ptr, 0);
}

char *core_strndup(const char *s, size_t n)
{
    char *p = core_malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

char *core_strdup(const char *s)
{
    return core_strndup(s, strlen(s));
}
