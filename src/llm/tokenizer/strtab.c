/*
 * strtab.c — the tokenizer's small containers (tokenizer.h): the string
 * table, which keeps every token text and BPE merge half in one arena under
 * a dense id and finds it by content through a core_map of 64-bit hashes,
 * and the growable id array the encoders append to.
 */
#include <string.h>

#include "llm/tokenizer/tokenizer.h"

void tok_strtab_init(tok_strtab *t)
{
    memset(t, 0, sizeof *t);
}

void tok_strtab_free(tok_strtab *t)
{
    core_free(t->arena);
    core_free(t->off);
    core_free(t->len);
    core_map_free(&t->map);
    tok_strtab_init(t);
}

static uint64_t str_hash(const char *s, size_t n)
{
    return core_hash64_bytes(n ? s : "", n);
}

/* Id of s (whose str_hash is h), or -1. */
static inline int32_t find_hashed(const tok_strtab *t, const char *s, size_t n, uint64_t h)
{
    core_map_probe p = core_map_probe_start(&t->map, h);
    uint32_t id;
    while (core_map_probe_next(&p, &id))
        if (t->len[id] == n && memcmp(t->arena + t->off[id], s, n) == 0)
            return (int32_t)id;
    return -1;
}

int32_t tok_strtab_find(const tok_strtab *t, const char *s, size_t n)
{
    return find_hashed(t, s, n, str_hash(s, n));
}

int32_t tok_strtab_intern(tok_strtab *t, const char *s, size_t n, bool *added)
{
    uint64_t h = str_hash(s, n);
    int32_t found = find_hashed(t, s, n, h);
    if (found >= 0) {
        if (added)
            *added = false;
        return found;
    }
    if (n > UINT32_MAX || t->n >= INT32_MAX - 1)
        return -1;
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 1024;
        uint32_t *off = core_realloc(t->off, (size_t)cap * sizeof *off);
        if (!off)
            return -1;
        t->off = off;
        uint32_t *len = core_realloc(t->len, (size_t)cap * sizeof *len);
        if (!len)
            return -1;
        t->len = len;
        t->cap = cap;
    }
    if (t->arena_len + n > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 65536;
        while (cap < t->arena_len + n)
            cap *= 2;
        if (cap > UINT32_MAX)
            return -1;
        char *a = core_realloc(t->arena, cap);
        if (!a)
            return -1;
        t->arena = a;
        t->arena_cap = cap;
    }
    uint32_t id = t->n;
    if (!core_map_add(&t->map, h, id))
        return -1;
    if (n)
        memcpy(t->arena + t->arena_len, s, n);
    t->n++;
    t->off[id] = (uint32_t)t->arena_len;
    t->len[id] = (uint32_t)n;
    t->arena_len += n;
    if (added)
        *added = true;
    return (int32_t)id;
}

void tok_ids_push(tok_ids *a, int32_t id)
{
    if (a->oom)
        return;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *v = core_realloc(a->v, cap * sizeof *v);
        if (!v) {
            a->oom = true;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
}
