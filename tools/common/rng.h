/*
 * rng.h — the tools' one random generator: Marsaglia's xorshift64 (shifts
 * 13, 7, 17), seeded by the caller, so generated text and synthetic weights
 * are the same on every run and host. Not for anything that needs quality
 * randomness. The state must not be 0.
 */
#ifndef GLESC_TOOLS_RNG_H
#define GLESC_TOOLS_RNG_H

#include <math.h>
#include <stdint.h>

/* The next state, which is also the output. */
static inline uint64_t tool_rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

/* Uniform in (0, 1), from the top 53 bits. */
static inline double tool_rng_uniform(uint64_t *s)
{
    return ((double)(tool_rng_next(s) >> 11) + 0.5) * 0x1.0p-53;
}

/* Standard normal (Box-Muller; two uniforms per value). */
static inline float tool_rng_normal(uint64_t *s)
{
    double u = tool_rng_uniform(s), v = tool_rng_uniform(s);
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

#endif
