/*
 * test_roofline.c — glesc_context_roofline: both kernels compile and run on
 * the device, the figures are consistent with the times and sizes, the
 * workgroup follows the caps (the portable overrides give 128), and bad
 * arguments are refused with a message.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "glesc.h"
#include "test_util.h"

static void check(const glesc_roofline *r, uint64_t asked)
{
    cr_assert_gt(r->bytes, 0);
    cr_assert_leq(r->bytes, asked);
    cr_assert_eq(r->bytes % ((uint64_t)r->local_size * 8 * 16), 0, "whole workgroups");
    cr_assert_gt(r->copy_ns, 0);
    cr_assert_gt(r->read_ns, 0);
    cr_assert_float_eq(r->copy_gbps, 2.0 * (double)r->bytes / (double)r->copy_ns, 1e-9);
    cr_assert_float_eq(r->read_gbps, (double)r->bytes / (double)r->read_ns, 1e-9);
    cr_log_info("roofline over %llu bytes, %d invocations: copy %.2f GB/s, read %.2f GB/s",
                (unsigned long long)r->bytes, r->local_size, r->copy_gbps, r->read_gbps);
}

Test(roofline, measures)
{
    glesc_context *ctx = test_context(NULL);
    glesc_roofline r;
    uint64_t asked = (1u << 20) + 1000; /* not whole workgroups: rounded down */
    cr_assert_eq(glesc_context_roofline(ctx, asked, 3, &r), GLESC_OK, "%s",
                 glesc_context_errmsg(ctx));
    check(&r, asked);
    const glesc_caps *c = glesc_context_caps(ctx);
    cr_assert_leq(r.local_size, 256);
    cr_assert_leq(r.local_size, c->max_compute_invocations);
    glesc_context_destroy(ctx);
}

Test(roofline, portable_workgroup)
{
    glesc_context_options o = {.cache_dir = "off",
                               .no_subgroups = true,
                               .max_compute_invocations = 128,
                               .max_compute_shared_memory = 16384};
    glesc_context *ctx = NULL;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_roofline r;
    cr_assert_eq(glesc_context_roofline(ctx, 1u << 20, 2, &r), GLESC_OK, "%s",
                 glesc_context_errmsg(ctx));
    cr_assert_eq(r.local_size, 128);
    check(&r, 1u << 20);
    glesc_context_destroy(ctx);
}

Test(roofline, bad_arguments)
{
    glesc_context *ctx = test_context(NULL);
    glesc_roofline r;
    cr_assert_eq(glesc_context_roofline(NULL, 0, 0, &r), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_context_roofline(ctx, 0, -1, &r), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_context_roofline(ctx, 100, 1, &r), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(glesc_context_errmsg(ctx), "workgroup"), "%s", glesc_context_errmsg(ctx));
    glesc_context_destroy(ctx);
}
