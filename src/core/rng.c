/*
 * rng.c — the one pseudo-random generator: xoshiro256** (Blackman and Vigna),
 * its state filled from the seed by splitmix64 as the authors recommend. The
 * sampler's seeded draws are this stream, so its outputs must never change.
 */
#include <math.h>

#include "core/core.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void core_rng_seed(core_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

uint64_t core_rng_next(core_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double core_rng_uniform(core_rng *r)
{
    return (double)(core_rng_next(r) >> 11) * 0x1.0p-53;
}

double core_rng_normal(core_rng *r)
{
    /* (0, 1) rather than [0, 1): log(0) must not happen. */
    double u1 = ((double)(core_rng_next(r) >> 11) + 0.5) * 0x1.0p-53;
    double u2 = core_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
