/*
 * core.h — the bottom layer every other module uses: error messages, the one
 * allocation hook, the string builder, hashing, the hash map, little-endian
 * fields, the random number generator and logging.
 */
#ifndef GLESC_CORE_H
#define GLESC_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "glesc.h"

#if defined(__GNUC__)
#define CORE_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define CORE_PRINTF(fmt, args)
#endif

#define CORE_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define CORE_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CORE_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- Errors ----
 * A core_err holds the status and message of the last failure. The thread's
 * own (core_err_tls, glesc_last_errmsg) is the one channel every failure
 * reaches; a context keeps a copy of its calls' failures (its err): setting,
 * prefixing or resetting a context's record does the same to the thread's. */
typedef struct core_err {
    glesc_status status;
    char *msg; /* heap, or NULL */
} core_err;

core_err *core_err_tls(void);
/* Formats the message into e (or the thread's when e is NULL) and returns st. */
glesc_status core_err_set(core_err *e, glesc_status st, const char *fmt, ...) CORE_PRINTF(3, 4);
glesc_status core_err_setv(core_err *e, glesc_status st, const char *fmt, va_list ap);
/* Prefixes the existing message with "prefix: " (keeps the status). */
void core_err_prefix(core_err *e, const char *fmt, ...) CORE_PRINTF(2, 3);
/* Copies src's status and message into dst (no-op when they are the same). */
glesc_status core_err_copy(core_err *dst, const core_err *src);
/* The message; "" while the status is GLESC_OK. */
const char *core_err_msg(const core_err *e);
/* Back to GLESC_OK (e NULL: the thread's): public calls that return a status
 * do it on entry, so a success leaves "". The text of the failure before
 * stays readable through core_err_last_failure: a compute given the NULL
 * result of a failed builder names that failure even after calls that
 * succeeded in between. */
void core_err_reset(core_err *e);
const char *core_err_last_failure(const core_err *e);
/* Frees the message and resets (e NULL: the thread's). */
void core_err_clear(core_err *e);

/* ---- Allocation (all heap memory goes through glesc_set_allocator's hook) ---- */
void *core_malloc(size_t size);
void *core_calloc(size_t n, size_t size); /* checks n*size for overflow */
void *core_realloc(void *ptr, size_t size);
void core_free(void *ptr);
char *core_strdup(const char *s);
char *core_strndup(const char *s, size_t n);
/* size = a*b, false on overflow. */
static inline bool core_mul_overflow(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}
/* The value of hexadecimal digit c, or -1. */
static inline int core_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static inline bool core_add_overflow(size_t a, size_t b, size_t *out)
{
    return __builtin_add_overflow(a, b, out);
}

/* Copies a public option struct that starts with `uint32_t struct_size` (its
 * size as the caller was compiled; 0: this build's) into dst (dst_size
 * bytes): the fields the caller knows, zero (the default) for newer ones;
 * a caller's fields this build does not know are ignored. src may be NULL
 * (all defaults). False when struct_size is too small to hold itself. */
static inline bool core_struct_in(void *dst, size_t dst_size, const void *src)
{
    uint32_t n = 0;
    __builtin_memset(dst, 0, dst_size);
    if (!src)
        return true;
    __builtin_memcpy(&n, src, sizeof n);
    if (n != 0 && n < sizeof n)
        return false;
    __builtin_memcpy(dst, src, n == 0 || n > dst_size ? dst_size : n);
    return true;
}

/* core_struct_in, with the error: GLESC_ERROR_INVALID_ARGUMENT in e (NULL:
 * the thread's) naming fn when src's struct_size is too small. */
glesc_status core_struct_read(core_err *e, void *dst, size_t dst_size, const void *src,
                              const char *fn);

/* Testing aid: the n-th allocation from now on (0 = the next) and every one
 * after it fails; -1 switches failure injection off. Returns the number of
 * allocations made since the last call. */
long core_alloc_fail_after(long n);

/* ---- String builder (Lua's luaL_Buffer): append with a sticky OOM flag ---- */
typedef struct sbuf {
    char *data; /* always NUL-terminated when len > 0 or after sbuf_init */
    size_t len, cap;
    bool oom;
} sbuf;

void sbuf_init(sbuf *b);
void sbuf_free(sbuf *b);
void sbuf_reset(sbuf *b); /* length 0, keeps capacity, clears nothing else */
void sbuf_append(sbuf *b, const char *s);
void sbuf_appendn(sbuf *b, const char *s, size_t n);
void sbuf_appendc(sbuf *b, char c);
void sbuf_appendf(sbuf *b, const char *fmt, ...) CORE_PRINTF(2, 3);
void sbuf_appendv(sbuf *b, const char *fmt, va_list ap);
/* Appends s with every line prefixed by `indent` spaces (empty lines stay empty). */
void sbuf_append_indented(sbuf *b, const char *s, int indent);
/* The text ("" when empty); NULL after an out-of-memory. Owned by b. */
const char *sbuf_str(const sbuf *b);
/* Hands the text to the caller (core_free it); NULL on OOM. b is reset. */
char *sbuf_take(sbuf *b);

/* ---- Hashing (xxHash, XXH3) ---- */
typedef struct core_hash128 {
    uint64_t lo, hi;
} core_hash128;

core_hash128 core_hash128_bytes(const void *data, size_t len);
uint64_t core_hash64_bytes(const void *data, size_t len);
/* Streaming 128-bit hash over several parts. */
typedef struct core_hasher core_hasher;
core_hasher *core_hasher_create(void);
void core_hasher_update(core_hasher *h, const void *data, size_t len);
core_hash128 core_hasher_digest(const core_hasher *h);
void core_hasher_destroy(core_hasher *h);
/* 32 lowercase hex digits + NUL. */
void core_hash128_hex(core_hash128 h, char out[33]);
static inline bool core_hash128_eq(core_hash128 a, core_hash128 b)
{
    return a.lo == b.lo && a.hi == b.hi;
}

/* ---- Hash map (map.c): 64-bit key → uint32 value, open addressing ----
 * The map stores a 64-bit key word beside each value and knows nothing else
 * of the keys. Where the key is itself a 64-bit integer (a pair of ids) the
 * word is the key and a match is exact. Where the key is a string or a wider
 * hash, the word is its 64-bit hash and the caller compares its own keys on
 * each candidate the probe hands back, so two keys with one hash can both be
 * stored (core_map_add never refuses a repeated word). Linear probing, load
 * at most 1/2; values are typically indices into the caller's own arrays. */
typedef struct core_map_slot {
    uint64_t key;
    uint32_t value1; /* value + 1; 0 = empty */
} core_map_slot;

typedef struct core_map {
    core_map_slot *slots; /* NULL until the first add or reserve */
    uint32_t mask;        /* slots has mask + 1 entries, a power of two */
    uint32_t count;
} core_map;

void core_map_init(core_map *m);
void core_map_free(core_map *m);
/* Removes every entry, keeps the capacity. */
void core_map_clear(core_map *m);
/* Makes room for n entries in all; false on out-of-memory or n > 2^30. */
bool core_map_reserve(core_map *m, uint32_t n);
/* Adds (key, value), growing as needed; false on out-of-memory or a value
 * of UINT32_MAX (the map is then unchanged). */
bool core_map_add(core_map *m, uint64_t key, uint32_t value);

/* A lookup in progress: the values stored under one key word, in turn. */
typedef struct core_map_probe {
    const core_map_slot *slots;
    uint32_t mask, pos;
    uint64_t key;
} core_map_probe;

/* The slot a key word's probe starts at. Fibonacci hashing: integer keys
 * (pairs of small ids) spread as well as hashes do. */
static inline uint32_t core_map_home(uint64_t key, uint32_t mask)
{
    return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & mask;
}

/* The one empty slot a probe of a map without slots looks at, so that a
 * probe needs no test for a missing table. */
extern const core_map_slot core_map_no_slots[1];

static inline core_map_probe core_map_probe_start(const core_map *m, uint64_t key)
{
    if (!m->slots)
        return (core_map_probe){core_map_no_slots, 0, 0, key};
    return (core_map_probe){m->slots, m->mask, core_map_home(key, m->mask), key};
}

/* The next value stored under the probe's key word: true with *value set,
 * false when there are no more. The map must not change during a probe. */
static inline bool core_map_probe_next(core_map_probe *p, uint32_t *value)
{
    for (;;) {
        const core_map_slot *s = &p->slots[p->pos];
        if (!s->value1)
            return false;
        p->pos = (p->pos + 1) & p->mask;
        if (s->key == p->key) {
            *value = s->value1 - 1;
            return true;
        }
    }
}

/* The first value stored under key: for maps whose key words are exact. */
static inline bool core_map_get(const core_map *m, uint64_t key, uint32_t *value)
{
    core_map_probe p = core_map_probe_start(m, key);
    return core_map_probe_next(&p, value);
}

/* ---- Little-endian fields (p: any alignment) ----
 * File formats (GGUF, ggml blocks, cache entries) are little-endian whatever
 * the host: fields are assembled from bytes, never read through a cast. */
static inline uint16_t core_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static inline uint32_t core_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t core_le64(const uint8_t *p)
{
    return (uint64_t)core_le32(p) | (uint64_t)core_le32(p + 4) << 32;
}

static inline void core_put_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void core_put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void core_put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* IEEE-754 binary32 / binary64 fields. */
static inline float core_le_f32(const uint8_t *p)
{
    uint32_t u = core_le32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline double core_le_f64(const uint8_t *p)
{
    uint64_t u = core_le64(p);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

static inline void core_put_le_f32(uint8_t *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    core_put_le32(p, u);
}

/* ---- Random numbers (rng.c): xoshiro256** seeded through splitmix64 ----
 * One generator for everything that draws (the sampler, tests): a seed
 * gives the same stream on every host. */
typedef struct core_rng {
    uint64_t s[4];
} core_rng;

void core_rng_seed(core_rng *r, uint64_t seed);
uint64_t core_rng_next(core_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double core_rng_uniform(core_rng *r);
/* Standard normal (Box-Muller; the uniform under the logarithm is never 0). */
double core_rng_normal(core_rng *r);

/* ---- Logging ---- */
typedef enum core_log_level {
    CORE_LOG_ERROR,
    CORE_LOG_WARN,
    CORE_LOG_INFO,
    CORE_LOG_DEBUG
} core_log_level;
void core_log(core_log_level lvl, const char *fmt, ...) CORE_PRINTF(2, 3);
/* Reads an environment variable; NULL when unset or empty. */
const char *core_env(const char *name);
/* True when the variable is set to 1/yes/true/on. */
bool core_env_flag(const char *name);
/* A whole decimal number in lo..hi into *out: true. False when unset, and
 * when set to anything else (a warning naming the variable, its value and
 * the range: the caller's default stands). */
bool core_env_long(const char *name, long lo, long hi, long *out);
/* A byte count: decimal digits with an optional K, M or G suffix (KiB, MiB,
 * GiB), the whole of s; false (and *out unchanged) on anything else, zero
 * or an overflow. */
bool core_parse_size(const char *s, uint64_t *out);

/* Monotonic time in nanoseconds. */
uint64_t core_time_ns(void);

#endif /* GLESC_CORE_H */
