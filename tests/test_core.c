/*
 * test_core.c — the core layer: status names, error messages, the string
 * builder (also under injected allocation failure), hashing, the hash map,
 * little-endian fields, the random number generator and integer
 * environment variables.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

Test(core, status_names)
{
    cr_assert_str_eq(glesc_status_name(GLESC_OK), "GLESC_OK");
    cr_assert_str_eq(glesc_status_name(GLESC_ERROR_EGL), "GLESC_ERROR_EGL");
    cr_assert_str_eq(glesc_status_name((glesc_status)-999), "GLESC_UNKNOWN");
    cr_assert_str_eq(glesc_status_str(GLESC_ERROR_OUT_OF_MEMORY), "out of memory");
}

Test(core, error_messages)
{
    core_err e = {0};
    cr_assert_str_eq(core_err_msg(&e), "");
    cr_assert_eq(core_err_set(&e, GLESC_ERROR_FORMAT, "tensor '%s' at offset %d", "w", 12),
                 GLESC_ERROR_FORMAT);
    core_err_prefix(&e, "file %s", "x.gguf");
    cr_assert_str_eq(core_err_msg(&e), "file x.gguf: tensor 'w' at offset 12");
    core_err_clear(&e);
    core_err_set(NULL, GLESC_ERROR_IO, "thread-local %d", 7);
    cr_assert_str_eq(glesc_last_errmsg(), "thread-local 7");
}

Test(core, sbuf_basic)
{
    sbuf b;
    sbuf_init(&b);
    cr_assert_str_eq(sbuf_str(&b), "");
    for (int i = 0; i < 1000; i++)
        sbuf_appendf(&b, "%d,", i);
    sbuf_append(&b, "end");
    cr_assert_eq(b.len, strlen(sbuf_str(&b)));
    cr_assert(strncmp(sbuf_str(&b), "0,1,2,", 6) == 0);
    sbuf_reset(&b);
    sbuf_append_indented(&b, "a;\n\nb;", 4);
    cr_assert_str_eq(sbuf_str(&b), "    a;\n\n    b;\n");
    char *s = sbuf_take(&b);
    cr_assert_str_eq(s, "    a;\n\n    b;\n");
    core_free(s);
    cr_assert_str_eq(sbuf_str(&b), "");
    sbuf_free(&b);
}

/* Every allocation position fails once: the builder must end in the sticky
 * OOM state (never crash), and a run with no failure gives the full text. */
Test(core, sbuf_injected_allocation_failure)
{
    sbuf ref;
    sbuf_init(&ref);
    for (int i = 0; i < 200; i++)
        sbuf_appendf(&ref, "line %d of the kernel\n", i);
    cr_assert_not_null(sbuf_str(&ref));
    for (long k = 0; k < 16; k++) {
        sbuf b;
        sbuf_init(&b);
        core_alloc_fail_after(k);
        for (int i = 0; i < 200; i++)
            sbuf_appendf(&b, "line %d of the kernel\n", i);
        long made = core_alloc_fail_after(-1);
        if (k < made) {
            cr_assert(b.oom, "failure at allocation %ld was not sticky", k);
            cr_assert_null(sbuf_str(&b));
            cr_assert_null(sbuf_take(&b));
        } else {
            cr_assert_str_eq(sbuf_str(&b), sbuf_str(&ref));
        }
        sbuf_free(&b);
    }
    sbuf_free(&ref);
}

Test(core, hashing)
{
    core_hash128 a = core_hash128_bytes("abc", 3), b = core_hash128_bytes("abd", 3);
    cr_assert(!core_hash128_eq(a, b));
    core_hasher *h = core_hasher_create();
    cr_assert_not_null(h);
    core_hasher_update(h, "a", 1);
    core_hasher_update(h, "bc", 2);
    cr_assert(core_hash128_eq(core_hasher_digest(h), a));
    core_hasher_destroy(h);
    char hex[33];
    core_hash128_hex(a, hex);
    cr_assert_eq(strlen(hex), 32);
}

/* Many keys, some sharing a key word (as strings with one hash would): every
 * value comes back under its word, in insertion order, and nothing else. */
Test(core, map_add_find)
{
    core_map m;
    core_map_init(&m);
    uint32_t v;
    cr_assert(!core_map_get(&m, 7, &v)); /* empty: no slots yet */
    enum { N = 5000 };
    for (uint32_t i = 0; i < N; i++)
        cr_assert(core_map_add(&m, (uint64_t)(i / 2) << 32 | 0xabc, i));
    cr_assert_eq(m.count, N);
    cr_assert_leq((uint64_t)m.count * 2, (uint64_t)m.mask + 1, "load above 1/2");
    for (uint32_t w = 0; w < N / 2; w++) {
        core_map_probe p = core_map_probe_start(&m, (uint64_t)w << 32 | 0xabc);
        uint32_t got[3], n = 0;
        while (n < 3 && core_map_probe_next(&p, &got[n]))
            n++;
        cr_assert_eq(n, 2, "word %u: %u values", w, n);
        cr_assert(got[0] == 2 * w && got[1] == 2 * w + 1, "word %u: %u %u", w, got[0], got[1]);
    }
    cr_assert(!core_map_get(&m, (uint64_t)N << 32 | 0xabc, &v));
    cr_assert(!core_map_get(&m, 0, &v));
    cr_assert(!core_map_add(&m, 1, UINT32_MAX));
    uint32_t cap = m.mask + 1;
    core_map_clear(&m);
    cr_assert(m.count == 0 && m.mask + 1 == cap);
    cr_assert(!core_map_get(&m, 0xabc, &v));
    cr_assert(core_map_add(&m, 0xabc, 5) && core_map_get(&m, 0xabc, &v) && v == 5);
    core_map_free(&m);
    core_map_free(&m);
    cr_assert(core_map_reserve(&m, 1000));
    cr_assert_geq(m.mask + 1, 2000);
    core_map_free(&m);
}

/* A failed growth leaves the map as it was. */
Test(core, map_out_of_memory)
{
    core_map m;
    core_map_init(&m);
    for (uint32_t i = 0; i < 8; i++)
        cr_assert(core_map_add(&m, i, i));
    core_alloc_fail_after(0);
    bool added = core_map_add(&m, 100, 100);
    core_alloc_fail_after(-1);
    cr_assert(!added);
    cr_assert_eq(m.count, 8);
    uint32_t v;
    for (uint32_t i = 0; i < 8; i++)
        cr_assert(core_map_get(&m, i, &v) && v == i);
    cr_assert(!core_map_get(&m, 100, &v));
    core_map_free(&m);
}

Test(core, little_endian)
{
    uint8_t b[8];
    core_put_le64(b, 0x0807060504030201ull);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(b[i], i + 1);
    cr_assert_eq(core_le16(b), 0x0201);
    cr_assert_eq(core_le32(b + 1), 0x05040302u);
    cr_assert_eq(core_le64(b), 0x0807060504030201ull);
    core_put_le32(b, 0xdeadbeefu);
    cr_assert(b[0] == 0xef && b[3] == 0xde);
    core_put_le16(b + 6, 0xfffe);
    cr_assert(b[6] == 0xfe && b[7] == 0xff);
}

/* Known answers of xoshiro256** seeded through splitmix64 (computed
 * independently from the reference algorithms): the sampler's seeded draws
 * are this stream. */
Test(core, rng_stream)
{
    core_rng r;
    core_rng_seed(&r, 0);
    cr_assert_eq(core_rng_next(&r), 0x99ec5f36cb75f2b4ull);
    cr_assert_eq(core_rng_next(&r), 0xbf6e1f784956452aull);
    cr_assert_eq(core_rng_next(&r), 0x1a5f849d4933e6e0ull);
    core_rng_seed(&r, 42);
    cr_assert_eq(core_rng_next(&r), 0x15780b2e0c2ec716ull);
    cr_assert_eq(core_rng_next(&r), 0x6104d9866d113a7eull);
    core_rng_seed(&r, 42);
    cr_assert_eq(core_rng_uniform(&r), (double)(0x15780b2e0c2ec716ull >> 11) * 0x1.0p-53);
    double sum = 0, sq = 0;
    enum { N = 20000 };
    for (int i = 0; i < N; i++) {
        double u = core_rng_uniform(&r);
        cr_assert(u >= 0.0 && u < 1.0);
        double x = core_rng_normal(&r);
        cr_assert(isfinite(x));
        sum += x;
        sq += x * x;
    }
    cr_assert(fabs(sum / N) < 0.05 && fabs(sq / N - 1.0) < 0.05, "mean %g, variance %g", sum / N,
              sq / N);
}

/* core_env_long: a whole number in range, else false with *out kept
 * (unset, empty, trailing text, out of range, overflow). */
Test(core, env_long)
{
    long v = 7;
    unsetenv("GLESC_TEST_LONG");
    cr_expect(!core_env_long("GLESC_TEST_LONG", 0, 10, &v));
    const char *bad[] = {"", "x", "3x", "-1", "11", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("GLESC_TEST_LONG", bad[i], 1);
        cr_expect(!core_env_long("GLESC_TEST_LONG", 0, 10, &v), "'%s' accepted", bad[i]);
    }
    cr_expect_eq(v, 7, "a refused value leaves the default");
    setenv("GLESC_TEST_LONG", "10", 1);
    cr_expect(core_env_long("GLESC_TEST_LONG", 0, 10, &v));
    cr_expect_eq(v, 10);
    unsetenv("GLESC_TEST_LONG");
}
