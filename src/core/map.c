/*
 * map.c — growth and insertion of core_map (core.h); lookups are inline in
 * the header because the tokenizer's merge loop makes millions of them.
 */
#include <string.h>

#include "core/core.h"

#define MAP_MIN_SLOTS 16u
#define MAP_MAX_SLOTS (1u << 31)

const core_map_slot core_map_no_slots[1];

void core_map_init(core_map *m)
{
    memset(m, 0, sizeof *m);
}

void core_map_free(core_map *m)
{
    core_free(m->slots);
    core_map_init(m);
}

void core_map_clear(core_map *m)
{
    if (m->slots)
        memset(m->slots, 0, ((size_t)m->mask + 1) * sizeof *m->slots);
    m->count = 0;
}

static void place(core_map_slot *slots, uint32_t mask, core_map_slot s)
{
    uint32_t i = core_map_home(s.key, mask);
    while (slots[i].value1)
        i = (i + 1) & mask;
    slots[i] = s;
}

/* Rebuilds the table with nslots slots (a power of two). */
static bool rehash(core_map *m, uint32_t nslots)
{
    core_map_slot *slots = core_calloc(nslots, sizeof *slots);
    if (!slots)
        return false;
    if (m->slots) {
        for (uint32_t i = 0; i <= m->mask; i++)
            if (m->slots[i].value1)
                place(slots, nslots - 1, m->slots[i]);
        core_free(m->slots);
    }
    m->slots = slots;
    m->mask = nslots - 1;
    return true;
}

bool core_map_reserve(core_map *m, uint32_t n)
{
    if (n > MAP_MAX_SLOTS / 2)
        return false;
    if (m->slots && (uint64_t)n * 2 <= (uint64_t)m->mask + 1)
        return true;
    uint32_t want = MAP_MIN_SLOTS;
    while (want < 2 * n)
        want *= 2;
    return rehash(m, want);
}

bool core_map_add(core_map *m, uint64_t key, uint32_t value)
{
    if (value == UINT32_MAX)
        return false;
    if (!m->slots || ((uint64_t)m->count + 1) * 2 > (uint64_t)m->mask + 1) {
        uint32_t cap = m->slots ? m->mask + 1 : 0;
        if (cap >= MAP_MAX_SLOTS)
            return false;
        if (!rehash(m, cap ? cap * 2 : MAP_MIN_SLOTS))
            return false;
    }
    place(m->slots, m->mask, (core_map_slot){key, value + 1});
    m->count++;
    return true;
}
