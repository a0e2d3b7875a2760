/*
 * hash.c — xxHash (XXH3) behind core's hashing names: 128-bit keys for the
 * program cache and structure caches, 64-bit checksums for cache files.
 */
#include <stdio.h>
#include <xxhash.h>

#include "core/core.h"

core_hash128 core_hash128_bytes(const void *data, size_t len)
{
    XXH128_hash_t h = XXH3_128bits(data, len);
    return (core_hash128){h.low64, h.high64};
}

uint64_t core_hash64_bytes(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}

struct core_hasher {
    XXH3_state_t *st;
};

core_hasher *core_hasher_create(void)
{
    core_hasher *h = core_malloc(sizeof *h);
    if (!h)
        return NULL;
    h->st = XXH3_createState();
    if (!h->st) {
        core_free(h);
        return NULL;
    }
    XXH3_128bits_reset(h->st);
    return h;
}

void core_hasher_update(core_hasher *h, const void *data, size_t len)
{
    XXH3_128bits_update(h->st, data, len);
}

core_hash128 core_hasher_digest(const core_hasher *h)
{
    XXH128_hash_t d = XXH3_128bits_digest(h->st);
    return (core_hash128){d.low64, d.high64};
}

void core_hasher_destroy(core_hasher *h)
{
    if (!h)
        return;
    XXH3_freeState(h->st);
    core_free(h);
}

void core_hash128_hex(core_hash128 h, char out[33])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.hi, (unsigned long long)h.lo);
}
