/*
 * test_pool.c — SSBO pool: size classes waste at most 25%, released buffers
 * are reused by (class, usage), persistent buffers take their exact size and
 * are never cached, LRU trimming to the budget, the storage-block limit is
 * refused with a clear message, statistics and the memory accounts
 * (glesc_context_memory) add up, unbacked buffers get their store later.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "gl/gl.h"
#include "test_util.h"

Test(pool, size_classes_bound_waste)
{
    uint64_t prev = 0;
    for (uint64_t s = 1; s < (1ull << 32); s = s * 9 / 8 + 1) {
        uint64_t c = gl_pool_size_class(s);
        cr_assert_geq(c, s);
        if (s > 256)
            cr_assert_leq((double)(c - s), 0.25 * (double)s, "size %llu class %llu",
                          (unsigned long long)s, (unsigned long long)c);
        cr_assert_geq(c, prev, "classes must not shrink as sizes grow");
        prev = c;
    }
    cr_assert_eq(gl_pool_size_class(1000), 1024);
    cr_assert_eq(gl_pool_size_class(1025), 1280);
    cr_assert_eq(gl_pool_size_class(1 << 20), 1 << 20);
}

Test(pool, reuse_by_class_and_usage)
{
    glesc_context *ctx = test_context(NULL);
    gl_buffer *a, *b, *c;
    cr_assert_eq(gl_pool_acquire(ctx, 5000, GL_USAGE_ACTIVATIONS, &a), GLESC_OK);
    cr_assert_eq(a->size, gl_pool_size_class(5000));
    GLuint id = a->id;
    gl_pool_release(ctx, a);
    /* Same class (5000 and 5100 share a class), same usage: a hit. */
    cr_assert_eq(gl_pool_acquire(ctx, 5100, GL_USAGE_ACTIVATIONS, &b), GLESC_OK);
    cr_assert_eq(b->id, id);
    cr_assert_not(b->defined, "a reused buffer's contents are undefined");
    /* Another usage: a miss; persistent buffers take their exact size. */
    cr_assert_eq(gl_pool_acquire(ctx, 5000, GL_USAGE_WEIGHTS, &c), GLESC_OK);
    cr_assert_neq(c->id, id);
    cr_assert_eq(c->size, 5000);
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.pool_hits, 1);
    cr_assert_eq(s.pool_misses, 2);
    cr_assert_eq(s.pool_live_buffers, 2);
    cr_assert_eq(s.pool_live_bytes, b->size + c->size);
    cr_assert_eq(s.pool_cached_bytes, 0);
    gl_pool_release(ctx, b);
    gl_pool_release(ctx, c);
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.pool_live_bytes, 0);
    cr_assert_eq(s.pool_cached_buffers, 1, "a persistent buffer is deleted on release");
    cr_assert_eq(s.pool_cached_bytes, gl_pool_size_class(5000));
    cr_assert_geq(s.pool_peak_bytes, s.pool_cached_bytes);
    glesc_context_destroy(ctx);
}

/* An unbacked persistent buffer is counted as held at once, gets its data
 * store at gl_buffer_back (a second call does nothing) and works then; one
 * released before it was backed goes without a trace. */
Test(pool, unbacked_buffers)
{
    glesc_context *ctx = test_context(NULL);
    glesc_memory_stats m0, m;
    glesc_context_memory(ctx, &m0);
    gl_buffer *a, *b;
    cr_assert_eq(gl_pool_acquire_unbacked(ctx, 4096, &a), GLESC_OK);
    cr_assert_eq(gl_pool_acquire_unbacked(ctx, 1 << 20, &b), GLESC_OK);
    cr_assert(a->unbacked && b->unbacked);
    cr_assert_eq(a->size, 4096);
    glesc_context_memory(ctx, &m);
    cr_expect_eq(m.persistent_bytes - m0.persistent_bytes, 4096 + (1 << 20));
    cr_assert_eq(gl_buffer_back(ctx, a), GLESC_OK);
    cr_assert_not(a->unbacked);
    cr_assert_eq(gl_buffer_back(ctx, a), GLESC_OK);
    uint32_t in[1024], out[1024];
    for (int i = 0; i < 1024; i++)
        in[i] = 0x9e3779b9u * (uint32_t)i;
    cr_assert_eq(gl_buffer_upload(ctx, a, 0, in, sizeof in), GLESC_OK);
    cr_assert_eq(gl_buffer_download(ctx, a, 0, out, sizeof out), GLESC_OK);
    cr_assert_arr_eq(in, out, sizeof in);
    gl_pool_release(ctx, b);
    gl_pool_release(ctx, a);
    glesc_context_memory(ctx, &m);
    cr_expect_eq(m.persistent_bytes, m0.persistent_bytes);
    cr_expect_eq(m.cached_bytes, m0.cached_bytes, "persistent buffers are never cached");
    cr_assert_eq(glGetError(), GL_NO_ERROR);
    glesc_context_destroy(ctx);
}

/* glesc_context_memory splits what the pool holds by holder, and the split
 * at the peak adds up to the peak. */
Test(pool, memory_accounts)
{
    glesc_context *ctx = test_context(NULL);
    glesc_memory_stats m0, m;
    glesc_context_memory(ctx, &m0);
    glesc_context_memory_reset_peak(ctx);
    gl_buffer *w, *a, *b;
    cr_assert_eq(gl_pool_acquire(ctx, 100000, GL_USAGE_WEIGHTS, &w), GLESC_OK);
    cr_assert_eq(gl_pool_acquire(ctx, 5000, GL_USAGE_ACTIVATIONS, &a), GLESC_OK);
    cr_assert_eq(gl_pool_acquire(ctx, 70000, GL_USAGE_ACTIVATIONS, &b), GLESC_OK);
    glesc_context_memory(ctx, &m);
    cr_expect_eq(m.persistent_bytes - m0.persistent_bytes, 100000);
    cr_expect_eq(m.activation_bytes - m0.activation_bytes,
                 gl_pool_size_class(5000) + gl_pool_size_class(70000));
    cr_expect_eq(m.activation_requested_bytes - m0.activation_requested_bytes, 75000);
    cr_expect_eq(m.total_bytes, m.persistent_bytes + m.activation_bytes + m.cached_bytes);
    gl_pool_release(ctx, b);
    glesc_context_memory(ctx, &m);
    cr_expect_eq(m.cached_bytes - m0.cached_bytes, gl_pool_size_class(70000));
    cr_expect_eq(m.activation_requested_bytes - m0.activation_requested_bytes, 5000);
    /* the peak was before the release, with b live */
    cr_expect_eq(m.peak_total_bytes, m.total_bytes);
    cr_expect_eq(m.peak_total_bytes,
                 m.peak_persistent_bytes + m.peak_activation_bytes + m.peak_cached_bytes);
    cr_expect_eq(m.peak_activation_bytes - m0.activation_bytes,
                 gl_pool_size_class(5000) + gl_pool_size_class(70000));
    cr_expect_eq(m.peak_cached_bytes, m0.cached_bytes);
    cr_expect_eq(m.max_activation_requested_bytes - m0.activation_requested_bytes, 75000);
    /* a hit moves bytes from cached to live: no new peak */
    cr_assert_eq(gl_pool_acquire(ctx, 69000, GL_USAGE_ACTIVATIONS, &b), GLESC_OK);
    gl_pool_release(ctx, w);
    glesc_context_memory(ctx, &m);
    cr_expect_eq(m.persistent_bytes, m0.persistent_bytes);
    cr_expect_eq(m.activation_requested_bytes - m0.activation_requested_bytes, 74000);
    cr_expect_eq(m.peak_persistent_bytes - m0.persistent_bytes, 100000);
    cr_expect_eq(m.max_activation_requested_bytes - m0.activation_requested_bytes, 75000);
    glesc_context_memory_reset_peak(ctx);
    glesc_context_memory(ctx, &m);
    cr_expect_eq(m.peak_total_bytes, m.total_bytes);
    cr_expect_eq(m.peak_persistent_bytes, m.persistent_bytes);
    cr_expect_eq(m.max_activation_requested_bytes, m.activation_requested_bytes);
    gl_pool_release(ctx, a);
    gl_pool_release(ctx, b);
    glesc_context_memory(NULL, &m);
    cr_expect_eq(m.total_bytes, 0);
    glesc_context_destroy(ctx);
}

Test(pool, lru_trim_to_budget)
{
    glesc_context_options o = {.cache_dir = "off", .pool_budget = 3 * 65536};
    glesc_context *ctx = NULL;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    gl_buffer *b[5];
    GLuint ids[5];
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(gl_pool_acquire(ctx, 65536, GL_USAGE_ACTIVATIONS, &b[i]), GLESC_OK);
        ids[i] = b[i]->id;
    }
    for (int i = 0; i < 5; i++)
        gl_pool_release(ctx, b[i]);
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.pool_cached_bytes, 3 * 65536, "cache trimmed to the budget");
    /* The two released first were dropped: the next three acquires get the
     * three most recently released buffers. */
    for (int i = 0; i < 3; i++) {
        gl_buffer *x;
        cr_assert_eq(gl_pool_acquire(ctx, 65536, GL_USAGE_ACTIVATIONS, &x), GLESC_OK);
        cr_assert(x->id == ids[2] || x->id == ids[3] || x->id == ids[4]);
    }
    gl_pool_trim(ctx, 0);
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.pool_cached_bytes, 0);
    glesc_context_destroy(ctx); /* also frees the three still held */
}

Test(pool, refuses_above_storage_limit)
{
    glesc_context_options o = {.cache_dir = "off", .max_storage_block_size = 1 << 20};
    glesc_context *ctx = NULL;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    gl_buffer *b = (gl_buffer *)1;
    cr_assert_eq(gl_pool_acquire(ctx, (1 << 20) + 1, GL_USAGE_WEIGHTS, &b), GLESC_ERROR_LIMIT);
    cr_assert_null(b);
    cr_assert(strstr(glesc_context_errmsg(ctx), "1048577"), "%s", glesc_context_errmsg(ctx));
    /* Exactly the limit works, even though its class would be larger. */
    cr_assert_eq(gl_pool_acquire(ctx, (1 << 20) - 7, GL_USAGE_WEIGHTS, &b), GLESC_OK);
    cr_assert_leq(b->size, 1u << 20);
    gl_pool_release(ctx, b);
    glesc_context_destroy(ctx);
}
