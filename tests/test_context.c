/*
 * test_context.c — headless context creation on every platform the machine
 * has, the platform/device overrides and their errors, capabilities; the
 * current context (two contexts on one thread, threads handing a context
 * over, an application's adopted context), GPU resets, the abort callback.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gl/gl.h"
#include "test_util.h"

static void clear_env(void)
{
    unsetenv("GLESC_PLATFORM");
    unsetenv("GLESC_DEVICE");
    unsetenv("GLESC_LIMITS");
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

/* GLESC_LIMITS lowers every context's caps where the options leave them;
 * the options' own values win; a description that does not parse fails the
 * context with the variable's name in the message. */
Test(context, limits_from_the_environment)
{
    setenv("GLESC_LIMITS", "mali", 1);
    glesc_context_options o = {.cache_dir = "off", .max_compute_invocations = 128};
    glesc_context *ctx = NULL;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    const glesc_caps *c = glesc_context_caps(ctx);
    cr_assert_leq(c->max_compute_storage_blocks, 8);
    cr_assert_eq(c->max_compute_invocations, 128, "the option wins");
    cr_assert_leq(c->max_compute_shared_memory, 32768);
    cr_assert_leq(c->max_storage_block_size, 128u << 20);
    cr_assert_not(c->has_subgroup);
    glesc_context_destroy(ctx);

    setenv("GLESC_LIMITS", "mali,blocks=x", 1);
    ctx = NULL;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_null(ctx);
    cr_assert(strstr(glesc_last_errmsg(), "GLESC_LIMITS: limits 'mali,blocks=x': blocks=x"), "%s",
              glesc_last_errmsg());
    unsetenv("GLESC_LIMITS");
}

/* The device class from the drivers' strings (as Mesa 25 and the vendors'
 * drivers give them), and named by the option or GLESC_DEVICE_CLASS. */
Test(context, device_class_from_the_renderer_or_named)
{
    static const struct {
        const char *vendor, *renderer;
        bool software;
        gl_devclass want;
    } cases[] = {
        {"Mesa", "llvmpipe (LLVM 15.0.6, 256 bits)", true, GL_CLASS_LLVMPIPE},
        {"Panfrost", "Mali-G610 (Panfrost)", false, GL_CLASS_MALI_VALHALL},
        {"Panfrost", "Mali-G57 (Panfrost)", false, GL_CLASS_MALI_VALHALL},
        {"Panfrost", "Mali-G52 r1 (Panfrost)", false, GL_CLASS_MALI_BIFROST},
        {"Panfrost", "Mali-G31 (Panfrost)", false, GL_CLASS_MALI_BIFROST},
        {"Panfrost", "Mali-T860 (Panfrost)", false, GL_CLASS_MALI_BIFROST},
        {"freedreno", "FD618", false, GL_CLASS_ADRENO_6XX},
        {"freedreno", "FD740", false, GL_CLASS_ADRENO_7XX},
        {"Qualcomm", "Adreno (TM) 740", false, GL_CLASS_ADRENO_7XX},
        {"Broadcom", "V3D 7.1", false, GL_CLASS_V3D},
        {"Broadcom", "V3D 4.2", false, GL_CLASS_V3D},
        {"NVIDIA Corporation", "NVIDIA H200/PCIe/SSE2", false, GL_CLASS_NVIDIA},
        {"AMD", "AMD Radeon Graphics (radeonsi, gfx1103_r1, LLVM 15.0.7, DRM 3.54)", false,
         GL_CLASS_AMD},
        {"Intel", "Mesa Intel(R) UHD Graphics 620 (KBL GT2)", false, GL_CLASS_INTEL},
        {"Imagination Technologies", "PowerVR B-Series BXE-4-32", false, GL_CLASS_DEFAULT},
        {NULL, NULL, false, GL_CLASS_DEFAULT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gl_devclass c = gl_devclass_detect(cases[i].vendor, cases[i].renderer, cases[i].software);
        cr_assert_eq(c, cases[i].want, "%s: %s, want %s",
                     cases[i].renderer ? cases[i].renderer : "", gl_devclass_name(c),
                     gl_devclass_name(cases[i].want));
    }
    /* named: the option wins over the environment; "auto" detects */
    setenv("GLESC_DEVICE_CLASS", "mali-valhall", 1);
    glesc_context_options o = {.cache_dir = "off", .device_class = "adreno-6xx"};
    glesc_context *ctx = NULL;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_str_eq(glesc_context_caps(ctx)->device_class, "adreno-6xx");
    glesc_context_destroy(ctx);
    o.device_class = NULL;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_str_eq(glesc_context_caps(ctx)->device_class, "mali-valhall");
    glesc_context_destroy(ctx);
    setenv("GLESC_DEVICE_CLASS", "auto", 1);
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    const glesc_caps *caps = glesc_context_caps(ctx);
    cr_assert_str_eq(caps->device_class, gl_devclass_name(gl_devclass_detect(
                                             caps->vendor, caps->renderer, caps->software)));
    glesc_context_destroy(ctx);
    /* an unknown name is an error naming it */
    setenv("GLESC_DEVICE_CLASS", "mali-g610", 1);
    ctx = NULL;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_null(ctx);
    cr_assert(strstr(glesc_last_errmsg(), "GLESC_DEVICE_CLASS \"mali-g610\" is no device class"),
              "%s", glesc_last_errmsg());
    unsetenv("GLESC_DEVICE_CLASS");
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

/* ---- The current context: two contexts on one thread, threads, adoption ---- */

/* y = 2x + 1 over 4 floats on ctx's own graph; checks the values. */
static glesc_status compute_on(glesc_context *ctx)
{
    glesc_graph *g = glesc_graph_create(ctx);
    cr_assert_not_null(g);
    glesc_tensor *x = glesc_tensor_new(g, GLESC_DTYPE_F32, 1, (int64_t[]){4});
    float in[4] = {1, 2, 3, 4}, out[4] = {0};
    glesc_status st = glesc_tensor_write_f32(x, in, 4);
    glesc_tensor *y = glesc_scale(g, x, 2.0f, 1.0f);
    if (st == GLESC_OK)
        st = glesc_graph_compute(g, &y, 1);
    if (st == GLESC_OK)
        st = glesc_tensor_read_f32(y, out, 4);
    if (st == GLESC_OK)
        for (int i = 0; i < 4; i++)
            cr_assert_float_eq(out[i], 2 * in[i] + 1, 0, "element %d: %g", i, out[i]);
    glesc_graph_destroy(g);
    return st;
}

/* Issue 10, defect 1: create two, make the second current, destroy the first,
 * compute on the second. The old destroy released the thread
 * (eglReleaseThread), the compute then compiled with no context current and
 * dispatched program 0: a crash in gl_dispatch. */
Test(context, destroying_one_keeps_the_other_current)
{
    glesc_context *a = test_context(NULL);
    glesc_context *b = test_context(NULL);
    cr_assert_eq(glesc_context_make_current(b), GLESC_OK, "%s", glesc_context_errmsg(b));
    glesc_context_destroy(a);
    cr_assert_eq(eglGetCurrentContext(), b->egl_ctx, "destroying a released b");
    cr_assert_eq(compute_on(b), GLESC_OK, "%s", glesc_context_errmsg(b));
    glesc_context_destroy(b);
    cr_assert_eq(eglGetCurrentContext(), EGL_NO_CONTEXT);
}

/* Destroying a context that is not current brings back the one that was. */
Test(context, destroy_restores_the_previous_context)
{
    glesc_context *a = test_context(NULL);
    glesc_context *b = test_context(NULL);                                /* b is current now */
    cr_assert_eq(compute_on(a), GLESC_OK, "%s", glesc_context_errmsg(a)); /* binds a */
    cr_assert_eq(eglGetCurrentContext(), a->egl_ctx);
    cr_assert_eq(compute_on(b), GLESC_OK, "%s", glesc_context_errmsg(b)); /* binds b */
    cr_assert_eq(glesc_context_make_current(a), GLESC_OK);
    glesc_context_destroy(b);
    cr_assert_eq(eglGetCurrentContext(), a->egl_ctx, "a is still current");
    cr_assert_eq(compute_on(a), GLESC_OK, "%s", glesc_context_errmsg(a));
    glesc_context_destroy(a);
}

/* Every entry that touches GL binds its context: interleaved work on two
 * contexts needs no make_current, and weights of one are freed while the
 * other is current. */
Test(context, interleaved_contexts_bind_themselves)
{
    glesc_context *a = test_context(NULL);
    glesc_context *b = test_context(NULL);
    glesc_tensor *wa = glesc_weight_new(a, GLESC_DTYPE_F32, 1, (int64_t[]){8});
    glesc_tensor *wb = glesc_weight_new(b, GLESC_DTYPE_F32, 1, (int64_t[]){8});
    cr_assert(wa && wb);
    float va[8] = {1, 2, 3, 4, 5, 6, 7, 8}, vb[8] = {8, 7, 6, 5, 4, 3, 2, 1}, r[8];
    cr_assert_eq(glesc_tensor_write_f32(wa, va, 8), GLESC_OK, "%s", glesc_context_errmsg(a));
    cr_assert_eq(glesc_tensor_write_f32(wb, vb, 8), GLESC_OK, "%s", glesc_context_errmsg(b));
    cr_assert_eq(glesc_tensor_read_f32(wa, r, 8), GLESC_OK, "%s", glesc_context_errmsg(a));
    cr_assert_arr_eq(r, va, sizeof va);
    cr_assert_eq(compute_on(b), GLESC_OK, "%s", glesc_context_errmsg(b));
    glesc_weight_free(wa); /* binds a, deletes a's buffer, not b's */
    cr_assert_eq(glesc_tensor_read_f32(wb, r, 8), GLESC_OK, "%s", glesc_context_errmsg(b));
    cr_assert_arr_eq(r, vb, sizeof vb);
    glesc_weight_free(wb);
    glesc_context_destroy(b);
    glesc_context_destroy(a);
}

/* The program cache never hands out program 0: with no context current,
 * glCreateShader returns 0 and that is an error naming it. */
Test(context, compile_without_a_current_context_fails)
{
    glesc_context *ctx = test_context(NULL);
    cr_assert(eglMakeCurrent(ctx->dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT));
    char *src = test_saxpy_glsl(64);
    const gl_program *p = (const gl_program *)1;
    glesc_status st = gl_program_get(ctx, src, &p);
    cr_assert_neq(st, GLESC_OK);
    cr_assert(strstr(glesc_context_errmsg(ctx), "glCreateShader"), "%s", glesc_context_errmsg(ctx));
    core_free(src);
    glesc_context_destroy(ctx);
}

typedef struct handoff {
    glesc_context *ctx;
    pthread_barrier_t made, released;
    bool release;
} handoff;

/* Creates a context, computes, releases it (or keeps it current until told). */
static void *worker(void *arg)
{
    handoff *h = arg;
    h->ctx = test_context(NULL);
    cr_assert_eq(compute_on(h->ctx), GLESC_OK, "%s", glesc_context_errmsg(h->ctx));
    if (h->release)
        cr_assert_eq(glesc_context_release_current(h->ctx), GLESC_OK);
    pthread_barrier_wait(&h->made);
    pthread_barrier_wait(&h->released);
    if (!h->release)
        cr_assert_eq(glesc_context_release_current(h->ctx), GLESC_OK);
    return NULL;
}

/* A context moves to another thread once the first releases it; before
 * that, a call on it is a clear error, not a GL error or a crash. */
Test(context, threads_hand_a_context_over)
{
    handoff h = {.release = false};
    pthread_barrier_init(&h.made, NULL, 2);
    pthread_barrier_init(&h.released, NULL, 2);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, worker, &h), 0);
    pthread_barrier_wait(&h.made);
    glesc_status st = compute_on(h.ctx);
    cr_assert_eq(st, GLESC_ERROR_STATE, "%s", glesc_status_name(st));
    cr_assert(strstr(glesc_context_errmsg(h.ctx), "current on another thread"), "%s",
              glesc_context_errmsg(h.ctx));
    cr_assert(strstr(glesc_context_errmsg(h.ctx), "glesc_tensor_write"), "%s",
              glesc_context_errmsg(h.ctx));
    cr_assert_eq(glesc_context_make_current(h.ctx), GLESC_ERROR_STATE);
    pthread_barrier_wait(&h.released);
    pthread_join(t, NULL);
    cr_assert_eq(compute_on(h.ctx), GLESC_OK, "%s", glesc_context_errmsg(h.ctx));
    glesc_context_destroy(h.ctx);

    /* Released at once: the next thread just uses it. */
    handoff h2 = {.release = true};
    pthread_barrier_init(&h2.made, NULL, 2);
    pthread_barrier_init(&h2.released, NULL, 2);
    cr_assert_eq(pthread_create(&t, NULL, worker, &h2), 0);
    pthread_barrier_wait(&h2.made);
    cr_assert_eq(compute_on(h2.ctx), GLESC_OK, "%s", glesc_context_errmsg(h2.ctx));
    cr_assert_eq(glesc_context_release_current(h2.ctx), GLESC_OK);
    pthread_barrier_wait(&h2.released);
    pthread_join(t, NULL);
    glesc_context_destroy(h2.ctx);
}

Test(context, release_current)
{
    glesc_context *ctx = test_context(NULL);
    cr_assert_eq(glesc_context_release_current(ctx), GLESC_OK);
    cr_assert_eq(eglGetCurrentContext(), EGL_NO_CONTEXT);
    cr_assert_eq(glesc_context_release_current(ctx), GLESC_OK, "not current: a no-op");
    cr_assert_eq(compute_on(ctx), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    cr_assert_eq(eglGetCurrentContext(), ctx->egl_ctx, "the call bound it");
    cr_assert_eq(glesc_context_make_current(NULL), GLESC_ERROR_INVALID_ARGUMENT);
    glesc_context_destroy(ctx);
}

/* The application's own display and context, made here like an app that
 * renders with GLES would: adopted, computed on, and still working after
 * glesc's context is destroyed. */
typedef struct app_egl {
    EGLDisplay dpy;
    EGLContext ctx;
} app_egl;

static app_egl app_egl_create(void)
{
    PFNEGLGETPLATFORMDISPLAYEXTPROC gpd =
        (PFNEGLGETPLATFORMDISPLAYEXTPROC)eglGetProcAddress("eglGetPlatformDisplayEXT");
    const char *cext = eglQueryString(EGL_NO_DISPLAY, EGL_EXTENSIONS);
    if (!gpd || !cext || !strstr(cext, "EGL_MESA_platform_surfaceless"))
        cr_skip_test("no EGL_MESA_platform_surfaceless to make an application context on");
    app_egl a;
    a.dpy = gpd(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, NULL);
    cr_assert(a.dpy != EGL_NO_DISPLAY && eglInitialize(a.dpy, NULL, NULL));
    cr_assert(eglBindAPI(EGL_OPENGL_ES_API));
    const EGLint attrs[] = {EGL_CONTEXT_MAJOR_VERSION_KHR, 3, EGL_CONTEXT_MINOR_VERSION_KHR, 1,
                            EGL_NONE};
    a.ctx = eglCreateContext(a.dpy, EGL_NO_CONFIG_KHR, EGL_NO_CONTEXT, attrs);
    cr_assert(a.ctx != EGL_NO_CONTEXT, "eglCreateContext: 0x%x", eglGetError());
    return a;
}

/* The app's context works: a buffer round trip through its own GL calls. */
#define app_egl_check(a) app_egl_check_at(a, __LINE__)
static void app_egl_check_at(const app_egl *a, int line)
{
    cr_assert_eq(eglGetCurrentContext(), a->ctx, "line %d: the app's context is not current", line);
    GLuint buf;
    uint32_t in[4] = {5, 6, 7, 8}, out[4] = {0};
    glGenBuffers(1, &buf);
    glBindBuffer(GL_COPY_READ_BUFFER, buf);
    glBufferData(GL_COPY_READ_BUFFER, sizeof in, in, GL_STATIC_READ);
    const void *p = glMapBufferRange(GL_COPY_READ_BUFFER, 0, sizeof in, GL_MAP_READ_BIT);
    cr_assert_not_null(p, "GL error 0x%x", glGetError());
    memcpy(out, p, sizeof out);
    glUnmapBuffer(GL_COPY_READ_BUFFER);
    glDeleteBuffers(1, &buf);
    cr_assert_arr_eq(in, out, sizeof in);
    cr_assert_eq(glGetError(), GL_NO_ERROR);
}

/* The app binds state of its own where glesc binds (program, storage and
 * uniform binding points), as a renderer sharing the context would; glesc
 * must not take it for its own bindings of the last call. */
static GLuint app_egl_bind_own_state(void)
{
    GLuint buf;
    glGenBuffers(1, &buf);
    glBindBuffer(GL_COPY_WRITE_BUFFER, buf);
    glBufferData(GL_COPY_WRITE_BUFFER, 4096, NULL, GL_DYNAMIC_DRAW);
    glBindBuffer(GL_COPY_WRITE_BUFFER, 0);
    for (GLuint i = 0; i < 8; i++)
        glBindBufferRange(GL_SHADER_STORAGE_BUFFER, i, buf, 0, 4096);
    glBindBufferRange(GL_UNIFORM_BUFFER, 0, buf, 0, 256);
    glUseProgram(0);
    cr_assert_eq(glGetError(), GL_NO_ERROR);
    return buf;
}

Test(context, adopts_the_applications_context)
{
    app_egl a = app_egl_create();
    cr_assert(eglMakeCurrent(a.dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, a.ctx));
    app_egl_check(&a);

    glesc_context_options o;
    glesc_context_options_init(&o);
    o.cache_dir = "off";
    o.egl_display = a.dpy;
    o.egl_context = a.ctx;
    glesc_context *ctx = NULL;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert(strstr(glesc_context_caps(ctx)->platform_reason, "adopted"));
    cr_assert_eq(compute_on(ctx), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    app_egl_check(&a); /* the app's calls between glesc's */
    GLuint app_buf = app_egl_bind_own_state();
    cr_assert_eq(compute_on(ctx), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    glDeleteBuffers(1, &app_buf);
    glesc_context_destroy(ctx);
    /* Still current (it was, before the destroy), still the app's, working. */
    app_egl_check(&a);

    /* Adopted while not current: glesc binds it for its calls; a destroy
     * with nothing current binds it to free glesc's objects and leaves the
     * thread as it found it. */
    cr_assert(eglMakeCurrent(a.dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT));
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_context_release_current(ctx), GLESC_OK);
    cr_assert_eq(compute_on(ctx), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    cr_assert_eq(eglGetCurrentContext(), a.ctx);
    cr_assert_eq(glesc_context_release_current(ctx), GLESC_OK);
    glesc_context_destroy(ctx);
    cr_assert_eq(eglGetCurrentContext(), EGL_NO_CONTEXT);
    cr_assert(eglMakeCurrent(a.dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, a.ctx),
              "the display and context still exist: 0x%x", eglGetError());
    app_egl_check(&a);

    /* A glesc context of its own beside the app's: destroying it leaves the
     * app's current. */
    glesc_context *own = test_context(NULL); /* current now */
    cr_assert(eglMakeCurrent(a.dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, a.ctx));
    cr_assert_eq(compute_on(own), GLESC_OK, "%s", glesc_context_errmsg(own));
    cr_assert(eglMakeCurrent(a.dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, a.ctx));
    glesc_context_destroy(own);
    app_egl_check(&a);

    eglMakeCurrent(a.dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
    eglDestroyContext(a.dpy, a.ctx);
    eglTerminate(a.dpy);
}

Test(context, adoption_needs_both_handles)
{
    glesc_context_options o = {.egl_display = (void *)1};
    glesc_context *ctx = (glesc_context *)1;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_null(ctx);
    cr_assert(strstr(glesc_last_errmsg(), "egl_context"), "%s", glesc_last_errmsg());
}

/* ---- Choices: explicit beats the environment; a named device is used or
 * refused, never replaced ---- */

/* Issue 10, defect 8: the options' platform used to lose to GLESC_PLATFORM. */
Test(context, explicit_platform_beats_the_environment)
{
    glesc_context_options o = {.platform = GLESC_PLATFORM_SURFACELESS, .cache_dir = "off"};
    glesc_context *probe = NULL;
    if (glesc_context_create(&o, &probe) != GLESC_OK)
        cr_skip_test("no surfaceless platform here: %s", glesc_last_errmsg());
    glesc_context_destroy(probe);
    setenv("GLESC_PLATFORM", "gbm", 1);
    setenv("GLESC_DEVICE", "/dev/dri/renderD999", 1);
    glesc_context *ctx = NULL;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    const glesc_caps *c = glesc_context_caps(ctx);
    cr_assert_eq(c->platform, GLESC_PLATFORM_SURFACELESS);
    cr_assert(strstr(c->platform_reason, "options"), "%s", c->platform_reason);
    glesc_context_destroy(ctx);
    /* A bad value in the environment does not matter when the option decides. */
    setenv("GLESC_PLATFORM", "vulkan", 1);
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_context_destroy(ctx);
    /* Not given: the environment decides. */
    setenv("GLESC_PLATFORM", "surfaceless", 1);
    cr_assert_eq(glesc_context_create(&(glesc_context_options){.cache_dir = "off"}, &ctx), GLESC_OK,
                 "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_context_caps(ctx)->platform, GLESC_PLATFORM_SURFACELESS);
    cr_assert(strstr(glesc_context_caps(ctx)->platform_reason, "GLESC_PLATFORM"));
    glesc_context_destroy(ctx);
}

Test(context, explicit_device_beats_the_environment)
{
    glesc_context_options o = {
        .platform = GLESC_PLATFORM_DEVICE, .device = "0", .cache_dir = "off"};
    glesc_context *ctx = NULL;
    if (glesc_context_create(&o, &ctx) != GLESC_OK)
        cr_skip_test("no EGL device 0 here: %s", glesc_last_errmsg());
    glesc_context_destroy(ctx);
    setenv("GLESC_DEVICE", "97", 1);
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert(strstr(glesc_context_caps(ctx)->device, "EGL device 0"), "%s",
              glesc_context_caps(ctx)->device);
    glesc_context_destroy(ctx);
    o.device = NULL; /* not given: GLESC_DEVICE's 97 */
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_ERROR_NOT_FOUND);
    cr_assert(strstr(glesc_last_errmsg(), "97"), "%s", glesc_last_errmsg());
}

/* Issue 10, defect 9: GLESC_PLATFORM=gbm GLESC_DEVICE=/dev/null reported
 * "gbm, /dev/null" and ran on Mesa's software rasterizer. */
Test(context, a_named_device_that_cannot_be_used_is_an_error)
{
    setenv("GLESC_PLATFORM", "gbm", 1);
    setenv("GLESC_DEVICE", "/dev/null", 1);
    glesc_context *ctx = (glesc_context *)1;
    glesc_status st = glesc_context_create(NULL, &ctx);
    cr_assert_neq(st, GLESC_OK, "/dev/null gave a context: %s",
                  ctx ? glesc_context_caps(ctx)->renderer : "");
    cr_assert_null(ctx);
    cr_assert(strstr(glesc_last_errmsg(), "/dev/null"), "%s", glesc_last_errmsg());
    cr_assert(strstr(glesc_last_errmsg(), "not a DRM render node"), "%s", glesc_last_errmsg());
    /* The same through the options, and a regular file. */
    unsetenv("GLESC_PLATFORM");
    unsetenv("GLESC_DEVICE");
    char *dir = test_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/renderD128", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fclose(f);
    glesc_context_options o = {.device = path};
    cr_assert_neq(glesc_context_create(&o, &ctx), GLESC_OK);
    cr_assert(strstr(glesc_last_errmsg(), "not a DRM render node"), "%s", glesc_last_errmsg());
    remove(path);
    rmdir(dir);
    free(dir);
}

Test(context, caps_say_when_the_renderer_is_software)
{
    glesc_context *ctx = test_context(NULL);
    const glesc_caps *c = glesc_context_caps(ctx);
    bool cpu = strstr(c->renderer, "llvmpipe") || strstr(c->renderer, "softpipe");
    cr_assert_eq(c->software, cpu, "%s: software %d", c->renderer, c->software);
    glesc_context_destroy(ctx);
}

/* ---- GPU resets ---- */

/* Where EGL offers EGL_EXT_create_context_robustness (Mesa does, llvmpipe
 * included) the context asks for reset notification. A reset (simulated:
 * llvmpipe never resets) fails the next wait for the GPU with
 * GLESC_ERROR_CONTEXT_LOST, every later call too, and the context can still
 * be destroyed. */
Test(context, a_reset_loses_the_context)
{
    glesc_context *ctx = test_context(NULL);
    const char *dext = eglQueryString(ctx->dpy, EGL_EXTENSIONS);
    if (dext && strstr(dext, "EGL_EXT_create_context_robustness")) {
        cr_assert(glesc_context_caps(ctx)->has_reset_notification);
        GLint strategy = 0;
        glGetIntegerv(GL_RESET_NOTIFICATION_STRATEGY, &strategy);
        cr_assert_eq(strategy, GL_LOSE_CONTEXT_ON_RESET);
        cr_assert_not_null(ctx->fn.GetGraphicsResetStatus);
    }
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = glesc_tensor_new(g, GLESC_DTYPE_F32, 1, (int64_t[]){4});
    float v[4] = {1, 2, 3, 4};
    cr_assert_eq(glesc_tensor_write_f32(x, v, 4), GLESC_OK);
    glesc_tensor *y = glesc_scale(g, x, 2, 0);
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    gl_context_simulate_reset(ctx, GL_GUILTY_CONTEXT_RESET);
    glesc_status st = glesc_tensor_read_f32(y, v, 4);
    cr_assert_eq(st, GLESC_ERROR_CONTEXT_LOST, "%s", glesc_status_name(st));
    cr_assert(strstr(glesc_context_errmsg(ctx), "GL_GUILTY_CONTEXT_RESET"), "%s",
              glesc_context_errmsg(ctx));
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_ERROR_CONTEXT_LOST);
    cr_assert(strstr(glesc_context_errmsg(ctx), "lost earlier"), "%s", glesc_context_errmsg(ctx));
    cr_assert_eq(glesc_tensor_write_f32(x, v, 4), GLESC_ERROR_CONTEXT_LOST);
    cr_assert_null(glesc_weight_new(ctx, GLESC_DTYPE_F32, 1, (int64_t[]){4}));
    cr_assert_str_eq(glesc_status_name(GLESC_ERROR_CONTEXT_LOST), "GLESC_ERROR_CONTEXT_LOST");
    glesc_graph_destroy(g);
    glesc_context_destroy(ctx);
}

/* ---- The abort callback ---- */

typedef struct abort_counter {
    int calls, stop_at;
} abort_counter;

static bool abort_after(void *user)
{
    abort_counter *a = user;
    return ++a->calls >= a->stop_at;
}

Test(context, the_abort_callback_stops_a_compute_between_kernels)
{
    glesc_context *ctx = test_context(NULL);
    glesc_graph *g = glesc_graph_create(ctx);
    /* softmax(x) then a sum: two anchors, two kernels. */
    glesc_tensor *x = glesc_tensor_new(g, GLESC_DTYPE_F32, 2, (int64_t[]){8, 2});
    float v[16];
    for (int i = 0; i < 16; i++)
        v[i] = (float)i;
    cr_assert_eq(glesc_tensor_write_f32(x, v, 16), GLESC_OK);
    glesc_tensor *y = glesc_reduce(g, GLESC_OP_SUM, glesc_softmax(g, x, NULL, 1.0f, false), 0);
    abort_counter a = {.stop_at = 3}; /* before compiling, kernel 1, then stop before kernel 2 */
    glesc_context_set_abort_callback(ctx, abort_after, &a);
    glesc_status st = glesc_graph_compute(g, &y, 1);
    cr_assert_eq(st, GLESC_ERROR_CANCELLED, "%s", glesc_status_name(st));
    cr_assert(strstr(glesc_context_errmsg(ctx), "before kernel 2 of 2"), "%s",
              glesc_context_errmsg(ctx));
    cr_assert_eq(a.calls, 3);
    /* Stopped before compiling anything. */
    glesc_graph *g2 = glesc_graph_create(ctx);
    glesc_tensor *x2 = glesc_tensor_new(g2, GLESC_DTYPE_F32, 1, (int64_t[]){8});
    cr_assert_eq(glesc_tensor_write_f32(x2, v, 8), GLESC_OK);
    glesc_tensor *y2 = glesc_sqrt(g2, x2);
    a = (abort_counter){.stop_at = 1};
    cr_assert_eq(glesc_graph_compute(g2, &y2, 1), GLESC_ERROR_CANCELLED);
    cr_assert(strstr(glesc_context_errmsg(ctx), "before compiling"), "%s",
              glesc_context_errmsg(ctx));
    glesc_graph_destroy(g2);
    /* Without the callback the same graph computes, right. */
    glesc_context_set_abort_callback(ctx, NULL, NULL);
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    float s[2];
    cr_assert_eq(glesc_tensor_read_f32(y, s, 2), GLESC_OK);
    cr_assert_float_eq(s[0], 1.0f, 1e-5f);
    cr_assert_float_eq(s[1], 1.0f, 1e-5f);
    glesc_graph_destroy(g);
    glesc_context_destroy(ctx);
}

/* ---- Messages and option structs ---- */

/* Issue 10, defect 12: a message outlived the successful calls after it. */
Test(context, a_success_clears_the_message)
{
    setenv("GLESC_PLATFORM", "vulkan", 1);
    glesc_context *ctx = NULL;
    cr_assert_neq(glesc_context_create(NULL, &ctx), GLESC_OK);
    cr_assert_str_neq(glesc_last_errmsg(), "");
    unsetenv("GLESC_PLATFORM");
    ctx = test_context(NULL);
    cr_assert_str_eq(glesc_last_errmsg(), "");

    glesc_graph *g = glesc_graph_create(ctx);
    glesc_tensor *x = glesc_tensor_new(g, GLESC_DTYPE_F32, 1, (int64_t[]){4});
    float v[4] = {1, 2, 3, 4};
    cr_assert_eq(glesc_tensor_write_f32(x, v, 3), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_str_neq(glesc_context_errmsg(ctx), "");
    /* One channel: the thread's message names every failure, the context's
     * is its copy. */
    cr_assert_str_eq(glesc_last_errmsg(), glesc_context_errmsg(ctx));
    cr_assert_eq(glesc_tensor_write_f32(x, v, 4), GLESC_OK);
    cr_assert_str_eq(glesc_context_errmsg(ctx), "");
    cr_assert_str_eq(glesc_last_errmsg(), "");
    /* A builder's failure is named by the compute it makes fail, also after
     * successful calls in between. */
    glesc_tensor *b = glesc_tensor_new(g, GLESC_DTYPE_F32, 1, (int64_t[]){5});
    glesc_tensor *bad = glesc_add(g, x, b);
    cr_assert_null(bad);
    cr_assert(strstr(glesc_context_errmsg(ctx), "broadcast"), "%s", glesc_context_errmsg(ctx));
    cr_assert(strstr(glesc_last_errmsg(), "broadcast"), "%s", glesc_last_errmsg());
    cr_assert_eq(glesc_tensor_write_f32(x, v, 4), GLESC_OK);
    cr_assert_str_eq(glesc_context_errmsg(ctx), "");
    cr_assert_eq(glesc_graph_compute(g, &bad, 1), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(glesc_context_errmsg(ctx), "broadcast"), "%s", glesc_context_errmsg(ctx));
    glesc_tensor *y = glesc_sqrt(g, x);
    cr_assert_eq(glesc_graph_compute(g, &y, 1), GLESC_OK);
    cr_assert_str_eq(glesc_context_errmsg(ctx), "");
    cr_assert_eq(glesc_graph_set_options(g, &(glesc_graph_options){.gemv_max_m = 9}),
                 GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(glesc_graph_set_options(g, NULL), GLESC_OK);
    cr_assert_str_eq(glesc_context_errmsg(ctx), "");
    glesc_graph_destroy(g);
    glesc_context_destroy(ctx);
}

/* An option struct carries the size the caller was compiled with: the
 * library reads only that much (fields a newer header appended are left at
 * their defaults), and 0 means this header's layout. */
Test(context, option_structs_carry_their_size)
{
    glesc_context_options o;
    glesc_context_options_init(&o);
    cr_assert_eq(o.struct_size, sizeof o);
    cr_assert_null(o.device);
    cr_assert_eq(o.platform, GLESC_PLATFORM_AUTO);
    glesc_graph_options go;
    glesc_graph_options_init(&go);
    cr_assert_eq(go.struct_size, sizeof go);

    /* A caller compiled before egl_display existed: garbage where the newer
     * fields would be is not read. */
    unsigned char buf[sizeof(glesc_context_options) + 64];
    memset(buf, 0xa5, sizeof buf);
    glesc_context_options *old = (glesc_context_options *)(void *)buf;
    size_t old_size = offsetof(glesc_context_options, egl_display);
    memset(old, 0, old_size);
    old->struct_size = (uint32_t)old_size;
    old->cache_dir = "off";
    glesc_context *ctx = NULL;
    cr_assert_eq(glesc_context_create(old, &ctx), GLESC_OK, "%s", glesc_last_errmsg());
    cr_assert_null(glesc_context_cache_dir(ctx));
    glesc_graph *g = glesc_graph_create(ctx);
    glesc_graph_options *gold = (glesc_graph_options *)(void *)buf;
    memset(buf, 0xa5, sizeof buf);
    memset(gold, 0, offsetof(glesc_graph_options, timing));
    gold->struct_size = (uint32_t)offsetof(glesc_graph_options, timing);
    cr_assert_eq(glesc_graph_set_options(g, gold), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    glesc_graph_destroy(g);
    glesc_context_destroy(ctx);

    /* A size that cannot hold even itself is refused. */
    o.struct_size = 2;
    cr_assert_eq(glesc_context_create(&o, &ctx), GLESC_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(glesc_last_errmsg(), "struct_size"), "%s", glesc_last_errmsg());
}
