/*
 * test_context.c — headless context creation on every platform the machine
 * has, the platform/device overrides and their errors, capabilities.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "gl/gl.h"
#include "test_util.h"

static void clear_env(void)
{
    unsetenv("GLESC_PLATFORM");
    unsetenv("GLESC_DEVICE");
}

TestSuite(context, .init = clear_env);

Test(context, auto_has_compute_caps)
{
    glesc_context *ctx = test_context(NULL);
    const glesc_caps *c = glesc_context_caps(ctx);
    cr_log_info("platform %s (%s), %s, %s", glesc_platform_name(c->platform), c->platform_reason,
                c->renderer, c->version);
    cr_assert(c->gl_major > 3 || (c->gl_major == 3 && c->gl_minor >= 1));
    cr_assert_neq(c->platform, GLESC_PLATFORM_AUTO);
    cr_assert_gt(c->max_storage_block_size, 0);
    cr_assert_geq(c->max_compute_storage_blocks, 4);
    cr_assert_geq(c->max_compute_invocations, 128);
    cr_assert_gt(c->storage_buffer_offset_alignment, 0);
    cr_assert_not_null(c->platform_reason);
    cr_assert_not_null(c->vendor);
    glesc_context_destroy(ctx);
    glesc_context_destroy(NULL); /* harmless */
}

static void try_platform(glesc_platform p)
{
    glesc_context_options o = {.platform = p, .cache_dir = "off"};
    glesc_context *ctx = NULL;
    glesc_status st = glesc_context_create(&o, &ctx);
    if (st == GLESC_ERROR_UNSUPPORTED || st == GLESC_ERROR_NOT_FOUND)
        cr_skip_test("platform %s does not exist on this machine: %s", glesc_platform_name(p),
                     glesc_last_errmsg());
    cr_assert_eq(st, GLESC_OK, "%s: %s", glesc_platform_name(p), glesc_last_errmsg());
    cr_assert_eq(glesc_context_caps(ctx)->platform, p);
    cr_log_info("%s: %s on %s", glesc_platform_name(p), glesc_context_caps(ctx)->renderer,
                glesc_context_caps(ctx)->device);
    glesc_context_destroy(ctx);
}

Test(context, platform_gbm)
{
    try_platform(GLESC_PLATFORM_GBM);
}

Test(context, platform_device)
{
    try_platform(GLESC_PLATFORM_DEVICE);
}

Test(context, platform_surfaceless)
{
    try_platform(GLESC_PLATFORM_SURFACELESS);
}

Test(context, bad_platform_env)
{
    setenv("GLESC_PLATFORM", "vulkan", 1);
    glesc_context *ctx = (glesc_context *)1;
    glesc_status st = glesc_context_create(NULL, &ctx);
    cr_assert_eq(st, GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_null(ctx);
    cr_assert(strstr(glesc_last_errmsg(), "GLESC_PLATFORM='vulkan'"), "%s", glesc_last_errmsg());
}

Test(context, bad_device_path)
{
    setenv("GLESC_DEVICE", "/dev/dri/renderD999", 1);
    glesc_context *ctx = NULL;
    glesc_status st = glesc_context_create(NULL, &ctx);
    cr_assert_neq(st, GLESC_OK);
    cr_assert_null(ctx);
    cr_assert(strstr(glesc_last_errmsg(), "/dev/dri/renderD999"), "%s", glesc_last_errmsg());
}

Test(context, bad_device_index)
{
    glesc_context_options o = {.platform = GLESC_PLATFORM_DEVICE, .device = "97"};
    glesc_context *ctx = NULL;
    glesc_status st = glesc_context_create(&o, &ctx);
    if (st == GLESC_ERROR_UNSUPPORTED)
        cr_skip_test("no EGL_EXT_platform_device here: %s", glesc_last_errmsg());
    cr_assert_eq(st, GLESC_ERROR_NOT_FOUND, "%s", glesc_last_errmsg());
    cr_assert(strstr(glesc_last_errmsg(), "index 97"), "%s", glesc_last_errmsg());
}

Test(context, storage_limit_override)
{
    glesc_context_options o = {.cache_dir = "off", .max_storage_block_size = 1 << 20};
    glesc_context *ctx = NULL;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    const glesc_caps *c = glesc_context_caps(ctx);
    cr_assert_eq(c->max_storage_block_size, 1u << 20);
    cr_assert_geq(c->driver_max_storage_block_size, 1u << 20);
    glesc_context_destroy(ctx);
}

/* The portable path's overrides (gguf-bench --portable) lower the caps;
 * values above the driver's change nothing. */
Test(context, portable_overrides)
{
    glesc_context_options o = {.cache_dir = "off",
                               .max_storage_block_size = 128u << 20,
                               .no_subgroups = true,
                               .max_compute_invocations = 128,
                               .max_compute_shared_memory = 16384};
    glesc_context *ctx = NULL;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    const glesc_caps *c = glesc_context_caps(ctx);
    cr_assert_not(c->has_subgroup);
    cr_assert_eq(c->max_compute_invocations, 128);
    cr_assert_eq(c->max_compute_shared_memory, 16384);
    for (int i = 0; i < 3; i++)
        cr_assert_leq(c->max_workgroup_size[i], 128);
    cr_assert_leq(c->max_storage_block_size, 128u << 20);
    glesc_context_destroy(ctx);

    glesc_context_options big = {.cache_dir = "off",
                                 .max_compute_invocations = 1 << 30,
                                 .max_compute_shared_memory = 1 << 30};
    glesc_context *ref = test_context(NULL);
    cr_assert_eq(glesc_context_create(&big, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    const glesc_caps *r = glesc_context_caps(ref);
    c = glesc_context_caps(ctx);
    cr_assert_eq(c->max_compute_invocations, r->max_compute_invocations);
    cr_assert_eq(c->max_compute_shared_memory, r->max_compute_shared_memory);
    cr_assert_eq(c->max_workgroup_size[0], r->max_workgroup_size[0]);
    cr_assert_eq(c->has_subgroup, r->has_subgroup);
    glesc_context_destroy(ctx);
    glesc_context_destroy(ref);
}

/* Two contexts at once share an EGL display; destroying one must leave the
 * other working. */
Test(context, two_contexts)
{
    glesc_context *a = test_context(NULL);
    glesc_context *b = test_context(NULL);
    glesc_context_destroy(a);
    cr_assert_eq(glesc_context_make_current(b), GLESC_OK, "%s", glesc_context_errmsg(b));
    gl_buffer *buf;
    cr_assert_eq(gl_pool_acquire(b, 1024, GL_USAGE_ACTIVATIONS, &buf), GLESC_OK);
    uint32_t in[4] = {1, 2, 3, 4}, out[4] = {0};
    cr_assert_eq(gl_buffer_upload(b, buf, 0, in, sizeof in), GLESC_OK);
    cr_assert_eq(gl_buffer_download(b, buf, 0, out, sizeof out), GLESC_OK, "%s",
                 glesc_context_errmsg(b));
    cr_assert_arr_eq(in, out, sizeof in);
    gl_pool_release(b, buf);
    glesc_context_destroy(b);
}

Test(context, debug_output)
{
    glesc_context_options o = {.cache_dir = "off", .debug = true};
    glesc_context *ctx = NULL;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_context_destroy(ctx);
}
