/*
 * context.c — the headless EGL context: no window, no display server.
 * Creating and destroying it (the platform and its display: platform.c;
 * caps, pool and program cache), EGL and GL errors, and the public
 * context API.
 *
 * Current context. A context is used by one thread at a time; each public
 * entry point that touches GL binds its context when it is not current on
 * the calling thread (gl_context_bind), and destroying one context restores
 * whatever the calling thread had current before, so contexts never disturb
 * each other. Where EGL_EXT_create_context_robustness exists the context
 * asks to be told about GPU resets; a reset makes it "lost" for good.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gl/gl.h"

/* ---- error helpers ---- */

static const char *egl_error_name(EGLint e)
{
    switch (e) {
#define C_(x)                                                                                      \
    case x:                                                                                        \
        return #x;
        C_(EGL_SUCCESS)
        C_(EGL_NOT_INITIALIZED)
        C_(EGL_BAD_ACCESS)
        C_(EGL_BAD_ALLOC)
        C_(EGL_BAD_ATTRIBUTE)
        C_(EGL_BAD_CONFIG)
        C_(EGL_BAD_CONTEXT)
        C_(EGL_BAD_CURRENT_SURFACE)
        C_(EGL_BAD_DISPLAY)
        C_(EGL_BAD_MATCH)
        C_(EGL_BAD_NATIVE_PIXMAP)
        C_(EGL_BAD_NATIVE_WINDOW)
        C_(EGL_BAD_PARAMETER)
        C_(EGL_BAD_SURFACE)
        C_(EGL_CONTEXT_LOST)
        C_(EGL_BAD_DEVICE_EXT)
#undef C_
    }
    return "unknown EGL error";
}

glesc_status gl_egl_error(glesc_context *ctx, const char *step)
{
    EGLint e = eglGetError();
    return core_err_set(ctx ? &ctx->err : NULL, GLESC_ERROR_EGL, "%s failed: %s (0x%04x)", step,
                        egl_error_name(e), (unsigned)e);
}

const char *gl_error_name(GLenum e)
{
    switch (e) {
    case GL_NO_ERROR:
        return "GL_NO_ERROR";
    case GL_INVALID_ENUM:
        return "GL_INVALID_ENUM";
    case GL_INVALID_VALUE:
        return "GL_INVALID_VALUE";
    case GL_INVALID_OPERATION:
        return "GL_INVALID_OPERATION";
    case GL_INVALID_FRAMEBUFFER_OPERATION:
        return "GL_INVALID_FRAMEBUFFER_OPERATION";
    case GL_OUT_OF_MEMORY:
        return "GL_OUT_OF_MEMORY";
    case GL_CONTEXT_LOST:
        return "GL_CONTEXT_LOST";
    }
    return "unknown GL error";
}

glesc_status gl_check(glesc_context *ctx, const char *step)
{
    GLenum e = glGetError();
    if (e == GL_NO_ERROR)
        return GLESC_OK;
    /* Drain the remaining flags so the next check starts clean. */
    for (int i = 0; i < 16 && glGetError() != GL_NO_ERROR; i++)
        ;
    /* A failure may be the first sign of a reset: name that, not its symptom. */
    glesc_status st = gl_reset_check(ctx, step);
    if (st != GLESC_OK)
        return st;
    if (e == GL_CONTEXT_LOST) {
        ctx->lost = true;
        return core_err_set(&ctx->err, GLESC_ERROR_CONTEXT_LOST,
                            "%s failed: GL_CONTEXT_LOST: the GPU context was lost; destroy it "
                            "and create a new one",
                            step);
    }
    return core_err_set(&ctx->err,
                        e == GL_OUT_OF_MEMORY ? GLESC_ERROR_OUT_OF_MEMORY : GLESC_ERROR_GL,
                        "%s failed: %s (0x%04x)", step, gl_error_name(e), (unsigned)e);
}

static const char *reset_name(GLenum r)
{
    switch (r) {
    case GL_GUILTY_CONTEXT_RESET:
        return "GL_GUILTY_CONTEXT_RESET: glesc's own work made the GPU reset";
    case GL_INNOCENT_CONTEXT_RESET:
        return "GL_INNOCENT_CONTEXT_RESET: other work made the GPU reset";
    case GL_UNKNOWN_CONTEXT_RESET:
        return "GL_UNKNOWN_CONTEXT_RESET: the GPU reset for an unknown cause";
    }
    return "an unknown reset status";
}

glesc_status gl_reset_check(glesc_context *ctx, const char *step)
{
    if (ctx->lost)
        return core_err_set(&ctx->err, GLESC_ERROR_CONTEXT_LOST,
                            "%s: the GPU context was lost earlier; destroy it and create a new one",
                            step);
    GLenum r = GL_NO_ERROR;
    if (ctx->simulated_reset) {
        r = ctx->simulated_reset;
        ctx->simulated_reset = GL_NO_ERROR;
    } else if (ctx->fn.GetGraphicsResetStatus) {
        r = ctx->fn.GetGraphicsResetStatus();
    }
    if (r == GL_NO_ERROR)
        return GLESC_OK;
    ctx->lost = true;
    return core_err_set(&ctx->err, GLESC_ERROR_CONTEXT_LOST,
                        "%s: the GPU context was lost (%s); its buffers and programs are gone: "
                        "destroy the context and create a new one",
                        step, reset_name(r));
}

void gl_context_simulate_reset(glesc_context *ctx, GLenum status)
{
    ctx->simulated_reset = status;
}

/* ---- creation and the public API ---- */

/* KHR_debug's messages (the debug option) go to glesc's log. */
static void debug_callback(GLenum source, GLenum type, GLuint id, GLenum severity, GLsizei length,
                           const GLchar *message, const void *user)
{
    (void)source;
    (void)length;
    (void)user;
    const char *sev = severity == GL_DEBUG_SEVERITY_HIGH_KHR     ? "high"
                      : severity == GL_DEBUG_SEVERITY_MEDIUM_KHR ? "medium"
                      : severity == GL_DEBUG_SEVERITY_LOW_KHR    ? "low"
                                                                 : "note";
    /* Asked for with the debug option: logged at the default level. */
    core_log(CORE_LOG_WARN, "GL debug [%s, type 0x%x, id %u]: %s", sev, (unsigned)type,
             (unsigned)id, message);
}

static void load_ext_fns(glesc_context *ctx)
{
#define LOAD_(field, name)                                                                         \
    do {                                                                                           \
        __eglMustCastToProperFunctionPointerType p_ = eglGetProcAddress(name);                     \
        memcpy(&ctx->fn.field, &p_, sizeof p_);                                                    \
    } while (0)
    if (ctx->caps.has_parallel_compile)
        LOAD_(MaxShaderCompilerThreadsKHR, "glMaxShaderCompilerThreadsKHR");
    if (ctx->caps.has_timer_query) {
        LOAD_(GenQueriesEXT, "glGenQueriesEXT");
        LOAD_(DeleteQueriesEXT, "glDeleteQueriesEXT");
        LOAD_(BeginQueryEXT, "glBeginQueryEXT");
        LOAD_(EndQueryEXT, "glEndQueryEXT");
        LOAD_(GetQueryObjectuivEXT, "glGetQueryObjectuivEXT");
        LOAD_(GetQueryObjectui64vEXT, "glGetQueryObjectui64vEXT");
        if (!ctx->fn.GenQueriesEXT || !ctx->fn.BeginQueryEXT || !ctx->fn.GetQueryObjectui64vEXT)
            ctx->caps.has_timer_query = false;
    }
    if (ctx->caps.has_debug) {
        LOAD_(DebugMessageCallback,
              ctx->caps.gl_minor >= 2 ? "glDebugMessageCallback" : "glDebugMessageCallbackKHR");
    }
    if (ctx->caps.has_reset_notification) {
        if (ctx->caps.gl_minor >= 2)
            LOAD_(GetGraphicsResetStatus, "glGetGraphicsResetStatus");
        if (!ctx->fn.GetGraphicsResetStatus && gl_has_extension("GL_KHR_robustness"))
            LOAD_(GetGraphicsResetStatus, "glGetGraphicsResetStatusKHR");
        if (!ctx->fn.GetGraphicsResetStatus && gl_has_extension("GL_EXT_robustness"))
            LOAD_(GetGraphicsResetStatus, "glGetGraphicsResetStatusEXT");
        if (!ctx->fn.GetGraphicsResetStatus)
            ctx->caps.has_reset_notification = false;
    }
    if (ctx->caps.has_buffer_storage) {
        LOAD_(BufferStorageEXT, "glBufferStorageEXT");
        if (!ctx->fn.BufferStorageEXT)
            ctx->caps.has_buffer_storage = false;
    }
#undef LOAD_
}

/* What is current on the calling thread, to be restored. */
typedef struct egl_binding {
    EGLDisplay dpy;
    EGLContext ctx;
    EGLSurface draw, read;
} egl_binding;

static egl_binding current_binding(void)
{
    egl_binding b = {eglGetCurrentDisplay(), eglGetCurrentContext(), eglGetCurrentSurface(EGL_DRAW),
                     eglGetCurrentSurface(EGL_READ)};
    return b;
}

/* Makes b current again (b.ctx none: releases whatever is current, which
 * then can only be a context glesc bound). */
static void restore_binding(const egl_binding *b)
{
    if (b->ctx != EGL_NO_CONTEXT) {
        if (eglGetCurrentContext() != b->ctx || eglGetCurrentSurface(EGL_DRAW) != b->draw ||
            eglGetCurrentSurface(EGL_READ) != b->read)
            if (!eglMakeCurrent(b->dpy, b->draw, b->read, b->ctx))
                core_log(CORE_LOG_WARN,
                         "could not make the previous EGL context current again "
                         "(EGL error 0x%04x)",
                         (unsigned)eglGetError());
    } else if (eglGetCurrentContext() != EGL_NO_CONTEXT) {
        eglMakeCurrent(eglGetCurrentDisplay(), EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
    }
}

/* GLESC_FLUSH_EVERY: the most dispatches between the executor's early
 * flushes (exec.c, "Flushes"); 0 turns them off. */
static uint32_t flush_max_from_env(void)
{
    long n = 16;
    core_env_long("GLESC_FLUSH_EVERY", 0, 1000000, &n);
    return (uint32_t)n;
}

/* GLESC_BARRIERS, a measurement aid (docs/environment.md): the bits of the
 * executor's storage barriers: "storage" (GL_SHADER_STORAGE_BARRIER_BIT,
 * the default), "all" (GL_ALL_BARRIER_BITS) or "none" (no barrier between
 * dependent dispatches: wrong results, for timing what barriers cost). */
static GLbitfield barrier_bits_from_env(void)
{
    const char *v = core_env("GLESC_BARRIERS");
    if (!v || !*v || !strcmp(v, "storage"))
        return GL_SHADER_STORAGE_BARRIER_BIT;
    if (!strcmp(v, "all"))
        return GL_ALL_BARRIER_BITS;
    if (!strcmp(v, "none")) {
        core_log(CORE_LOG_WARN, "GLESC_BARRIERS=none: no barriers between dependent dispatches, "
                                "results are wrong (a measurement aid)");
        return 0;
    }
    core_log(CORE_LOG_WARN, "GLESC_BARRIERS=%s is not storage, all or none; using storage", v);
    return GL_SHADER_STORAGE_BARRIER_BIT;
}

GLESC_API glesc_status glesc_context_create(const glesc_context_options *opts, glesc_context **out)
{
    core_err_reset(NULL);
    if (!out)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_context_create: out is NULL");
    *out = NULL;
    glesc_context_options o;
    glesc_status st = core_struct_read(NULL, &o, sizeof o, opts, "glesc_context_create");
    if (st != GLESC_OK)
        return st;
    if ((int)o.platform < GLESC_PLATFORM_AUTO || (int)o.platform > GLESC_PLATFORM_SURFACELESS)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_context_create: platform %d is not a glesc_platform",
                            (int)o.platform);
    if (!o.egl_display != !o.egl_context)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_context_create: egl_display and egl_context are given "
                            "together or not at all");
    /* Explicit (the options) beats the environment beats the default. */
    st = gl_limits_from_env(&o);
    if (st != GLESC_OK)
        return st;
    glesc_platform platform = o.platform;
    const char *platform_src = "the options";
    const char *penv = core_env("GLESC_PLATFORM");
    if (platform == GLESC_PLATFORM_AUTO && penv && !o.egl_context) {
        if ((st = gl_platform_parse(penv, &platform)) != GLESC_OK)
            return st;
        platform_src = "GLESC_PLATFORM";
    }
    const char *device = o.device && *o.device ? o.device : NULL;
    const char *device_src = "the device option";
    if (!device && (device = core_env("GLESC_DEVICE")) != NULL)
        device_src = "GLESC_DEVICE";

    glesc_context *ctx = core_calloc(1, sizeof *ctx);
    if (!ctx)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "glesc_context_create: out of memory");
    egl_binding prev = current_binding();
    ctx->dpy = EGL_NO_DISPLAY;
    ctx->egl_ctx = EGL_NO_CONTEXT;
    ctx->surface = EGL_NO_SURFACE;
    ctx->drm_fd = -1;
    ctx->ssbo_epoch = ctx->update_epoch = 1;
    ctx->debug = o.debug || core_env_flag("GLESC_DEBUG");
    ctx->flush_max = flush_max_from_env();
    ctx->barrier_bits = barrier_bits_from_env();
    ctx->flush_at = 1;

    if (o.egl_context)
        st = gl_platform_adopt(ctx, (EGLDisplay)o.egl_display, (EGLContext)o.egl_context);
    else
        st = gl_platform_create(ctx, platform, device, platform_src, device_src);
    if (st != GLESC_OK)
        goto fail;
    if ((st = gl_caps_query(ctx, &o)) != GLESC_OK)
        goto fail;
    load_ext_fns(ctx);
    if (ctx->debug) {
        if (ctx->fn.DebugMessageCallback) {
            glEnable(GL_DEBUG_OUTPUT_SYNCHRONOUS_KHR);
            ctx->fn.DebugMessageCallback(debug_callback, ctx);
        } else {
            core_log(CORE_LOG_WARN, "GLESC_DEBUG: the context has no KHR_debug");
        }
    }

    /* Explicit beats GLESC_CACHE_DIR beats the XDG default. */
    ctx->cache_dir = core_disk_cache_resolve_dir(o.cache_dir);
    if ((st = gl_pool_create(ctx, o.pool_budget ? o.pool_budget : 64u << 20)) != GLESC_OK)
        goto fail;
    if ((st = gl_program_cache_create(ctx, ctx->cache_dir)) != GLESC_OK)
        goto fail;
    if ((st = gl_check(ctx, "context setup")) != GLESC_OK)
        goto fail;
    /* Platforms tried before the one that worked left their failures. */
    core_err_reset(&ctx->err);
    *out = ctx;
    return GLESC_OK;

fail:
    core_err_copy(NULL, &ctx->err);
    glesc_context_destroy(ctx);
    restore_binding(&prev);
    return st;
}

/* Makes ctx current on this thread unless it is; false with the EGL error
 * in *egl_err when eglMakeCurrent fails. */
static bool bind_raw(glesc_context *ctx, EGLint *egl_err)
{
    if (eglGetCurrentContext() == ctx->egl_ctx)
        return true;
    if (eglQueryAPI() != EGL_OPENGL_ES_API)
        eglBindAPI(EGL_OPENGL_ES_API);
    if (eglMakeCurrent(ctx->dpy, ctx->surface, ctx->surface, ctx->egl_ctx))
        return true;
    *egl_err = eglGetError();
    return false;
}

glesc_status gl_context_bind(glesc_context *ctx, const char *call)
{
    if (ctx->lost)
        return core_err_set(&ctx->err, GLESC_ERROR_CONTEXT_LOST,
                            "%s: the GPU context was lost earlier; destroy it and create a new one",
                            call);
    EGLint e = EGL_SUCCESS;
    if (bind_raw(ctx, &e)) {
        /* an application that shares its context may have bound its own
         * program and buffers since glesc's last call */
        if (ctx->adopted)
            gl_bound_reset(ctx);
        return GLESC_OK;
    }
    if (e == EGL_BAD_ACCESS)
        return core_err_set(&ctx->err, GLESC_ERROR_STATE,
                            "%s: the context is current on another thread (a context is used by "
                            "one thread at a time: call glesc_context_release_current there "
                            "first)",
                            call);
    if (e == EGL_CONTEXT_LOST) {
        ctx->lost = true;
        return core_err_set(&ctx->err, GLESC_ERROR_CONTEXT_LOST,
                            "%s: eglMakeCurrent: EGL_CONTEXT_LOST: the GPU context was lost; "
                            "destroy it and create a new one",
                            call);
    }
    return core_err_set(&ctx->err, GLESC_ERROR_EGL,
                        "%s: making the context current failed: eglMakeCurrent: %s (0x%04x)", call,
                        egl_error_name(e), (unsigned)e);
}

void gl_context_bind_for_free(glesc_context *ctx, const char *call)
{
    EGLint e = EGL_SUCCESS;
    if (bind_raw(ctx, &e))
        return; /* also a lost context: its GL calls fail harmlessly */
    core_log(CORE_LOG_ERROR,
             "%s: the context cannot be made current (eglMakeCurrent: %s%s); its GPU objects "
             "are left to the EGL context",
             call, egl_error_name(e),
             e == EGL_BAD_ACCESS ? ", it is current on another thread" : "");
    if (eglGetCurrentContext() != EGL_NO_CONTEXT)
        eglMakeCurrent(eglGetCurrentDisplay(), EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
}

GLESC_API void glesc_context_destroy(glesc_context *ctx)
{
    if (!ctx)
        return;
    egl_binding prev = current_binding();
    /* GL objects are deleted with ctx current; if it cannot be made current
     * (current on another thread) nothing is current while they are
     * "deleted" and they go with the EGL context. Without an EGL context
     * (a creation that failed early) there are no GL objects. */
    if (ctx->egl_ctx != EGL_NO_CONTEXT)
        gl_context_bind_for_free(ctx, "glesc_context_destroy");
    if (ctx->compute_state_free)
        ctx->compute_state_free(ctx);
    gl_param_buffer_destroy(ctx, ctx->param_ring);
    gl_program_cache_destroy(ctx);
    gl_pool_destroy(ctx);
    /* An adopted context that was current before stays current (it is the
     * application's); otherwise the previous binding comes back. */
    if (!(ctx->adopted && prev.ctx == ctx->egl_ctx))
        restore_binding(prev.ctx == ctx->egl_ctx ? &(egl_binding){0} : &prev);
    gl_platform_release(ctx);
    core_free(ctx->platform_reason);
    core_free(ctx->device_desc);
    core_free(ctx->cache_dir);
    core_free((void *)ctx->caps.vendor);
    core_free((void *)ctx->caps.renderer);
    core_free((void *)ctx->caps.version);
    core_free((void *)ctx->caps.glsl_version);
    core_err_clear(&ctx->err);
    core_free(ctx);
}

GLESC_API const char *glesc_context_errmsg(const glesc_context *ctx)
{
    return ctx ? core_err_msg(&ctx->err) : glesc_last_errmsg();
}

GLESC_API glesc_status glesc_context_make_current(glesc_context *ctx)
{
    if (!ctx)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_context_make_current: NULL context");
    core_err_reset(&ctx->err);
    return gl_context_bind(ctx, "glesc_context_make_current");
}

GLESC_API glesc_status glesc_context_release_current(glesc_context *ctx)
{
    if (!ctx)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_context_release_current: NULL context");
    core_err_reset(&ctx->err);
    if (eglGetCurrentContext() != ctx->egl_ctx)
        return GLESC_OK;
    /* Pending work must reach the GPU before another thread takes over. */
    glFlush();
    if (!eglMakeCurrent(ctx->dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT))
        return gl_egl_error(ctx, "glesc_context_release_current: eglMakeCurrent(none)");
    return GLESC_OK;
}

GLESC_API void glesc_context_set_abort_callback(glesc_context *ctx, glesc_abort_fn fn, void *user)
{
    if (!ctx)
        return;
    ctx->abort_fn = fn;
    ctx->abort_user = fn ? user : NULL;
}

GLESC_API void glesc_context_set_compile_callback(glesc_context *ctx, glesc_compile_fn fn,
                                                  void *user)
{
    if (!ctx)
        return;
    ctx->compile_fn = fn;
    ctx->compile_user = fn ? user : NULL;
}

GLESC_API glesc_status glesc_context_finish_compiles(glesc_context *ctx)
{
    if (!ctx)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_context_finish_compiles: NULL context");
    core_err_reset(&ctx->err);
    glesc_status st = gl_context_bind(ctx, "glesc_context_finish_compiles");
    return st == GLESC_OK ? gl_program_cache_background_finish(ctx) : st;
}

GLESC_API const glesc_caps *glesc_context_caps(const glesc_context *ctx)
{
    return &ctx->caps;
}

GLESC_API const char *glesc_context_cache_dir(const glesc_context *ctx)
{
    return ctx->cache_dir;
}

GLESC_API void glesc_context_stats(const glesc_context *ctx, glesc_stats *out)
{
    memset(out, 0, sizeof *out);
    gl_pool_stats(ctx, out);
    gl_program_cache_stats(ctx, out);
    out->dispatches = ctx->dispatches;
    out->barriers = ctx->barriers;
}

GLESC_API void glesc_context_reset_stats(glesc_context *ctx)
{
    gl_pool_reset_stats(ctx);
    gl_program_cache_reset_stats(ctx);
    ctx->dispatches = ctx->barriers = 0;
}

/* ---- Helper contexts ---- */

glesc_status gl_helper_create(glesc_context *ctx, EGLContext *out)
{
    *out = EGL_NO_CONTEXT;
    if (!ctx->share_ok || ctx->adopted)
        return core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED,
                            "helper context: the context is the application's or has a surface");
    /* the same config and attributes: a share group's contexts must agree
     * (the reset notification strategy above all) */
    EGLContext h = eglCreateContext(ctx->dpy, ctx->egl_cfg, ctx->egl_ctx, ctx->egl_attrs);
    if (h == EGL_NO_CONTEXT)
        return gl_egl_error(ctx, "eglCreateContext (helper of the share group)");
    *out = h;
    return GLESC_OK;
}

bool gl_helper_bind(const glesc_context *ctx, EGLContext helper)
{
    return eglMakeCurrent(ctx->dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, helper) == EGL_TRUE;
}

void gl_helper_release(const glesc_context *ctx)
{
    eglMakeCurrent(ctx->dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
    eglReleaseThread(); /* the thread's EGL state: helper threads are short-lived */
}

void gl_helper_destroy(glesc_context *ctx, EGLContext helper)
{
    if (helper != EGL_NO_CONTEXT)
        eglDestroyContext(ctx->dpy, helper);
}
