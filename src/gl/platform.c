/*
 * platform.c — finding an EGL display and making a GLES 3.1 context on it
 * (glesc_context_create's first step; context.c holds the rest).
 *
 * Platforms, in the order `auto` tries them:
 *   1. GBM on each /dev/dri/renderD* node (EGL_PLATFORM_GBM_KHR): the usual
 *      path on Mesa drivers for real hardware (Panfrost, Freedreno, V3D, ...).
 *   2. EGL_EXT_platform_device: enumerated EGL devices, hardware before
 *      Mesa's software device (EGL_MESA_device_software). The path on the
 *      NVIDIA driver, which has no /dev/dri node on headless servers.
 *   3. EGL_MESA_platform_surfaceless: Mesa's last resort (llvmpipe).
 * The context is configless (EGL_KHR_no_config_context) and surfaceless
 * (EGL_KHR_surfaceless_context) where possible, else a pbuffer config/surface.
 * The reason for the choice is kept for glesc-info.
 *
 * EGL displays are per native display and eglTerminate is not reference
 * counted, so two glesc contexts on one display share it through a small
 * registry and only the last one terminates it. An application's own
 * display and context can be adopted instead: glesc then never creates,
 * terminates or destroys them.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gbm.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/sysmacros.h>
#endif

#include "gl/gl.h"

/* ---- shared-display registry ---- */

static pthread_mutex_t display_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    EGLDisplay dpy;
    int refs;
} displays[16];

static void display_ref(EGLDisplay dpy)
{
    pthread_mutex_lock(&display_lock);
    int free_slot = -1;
    for (int i = 0; i < (int)CORE_ARRAY_LEN(displays); i++) {
        if (displays[i].refs > 0 && displays[i].dpy == dpy) {
            displays[i].refs++;
            pthread_mutex_unlock(&display_lock);
            return;
        }
        if (displays[i].refs == 0 && free_slot < 0)
            free_slot = i;
    }
    if (free_slot >= 0) {
        displays[free_slot].dpy = dpy;
        displays[free_slot].refs = 1;
    }
    pthread_mutex_unlock(&display_lock);
}

/* Drops one reference; true when it was the last (the caller terminates). */
static bool display_unref(EGLDisplay dpy)
{
    bool last = true;
    pthread_mutex_lock(&display_lock);
    for (int i = 0; i < (int)CORE_ARRAY_LEN(displays); i++) {
        if (displays[i].refs > 0 && displays[i].dpy == dpy) {
            last = --displays[i].refs == 0;
            break;
        }
    }
    pthread_mutex_unlock(&display_lock);
    return last;
}

/* ---- extension strings ---- */

static bool ext_in(const char *list, const char *name)
{
    if (!list)
        return false;
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return true;
    return false;
}

static const char *client_extensions(void)
{
    return eglQueryString(EGL_NO_DISPLAY, EGL_EXTENSIONS);
}

static PFNEGLGETPLATFORMDISPLAYEXTPROC get_platform_display(void)
{
    if (!ext_in(client_extensions(), "EGL_EXT_platform_base"))
        return NULL;
    return (PFNEGLGETPLATFORMDISPLAYEXTPROC)eglGetProcAddress("eglGetPlatformDisplayEXT");
}

/* ---- context creation on one display ---- */

/* Initializes dpy and creates a current GLES 3.1+ context on it. On failure
 * ctx->err says why and dpy is released again. */
static glesc_status init_on_display(glesc_context *ctx, EGLDisplay dpy)
{
    if (dpy == EGL_NO_DISPLAY)
        return gl_egl_error(ctx, "eglGetPlatformDisplay");
    EGLint major, minor;
    if (!eglInitialize(dpy, &major, &minor))
        return gl_egl_error(ctx, "eglInitialize");
    display_ref(dpy);
    ctx->dpy = dpy;
    if (!eglBindAPI(EGL_OPENGL_ES_API))
        return gl_egl_error(ctx, "eglBindAPI(EGL_OPENGL_ES_API)");

    const char *dext = eglQueryString(dpy, EGL_EXTENSIONS);
    bool configless =
        ext_in(dext, "EGL_KHR_no_config_context") || ext_in(dext, "EGL_MESA_configless_context");
    bool surfaceless = ext_in(dext, "EGL_KHR_surfaceless_context");
    EGLConfig cfg = EGL_NO_CONFIG_KHR;
    if (!configless || !surfaceless) {
        const EGLint attrs[] = {EGL_RENDERABLE_TYPE, EGL_OPENGL_ES3_BIT, EGL_SURFACE_TYPE,
                                EGL_PBUFFER_BIT, EGL_NONE};
        EGLint n = 0;
        if (!eglChooseConfig(dpy, attrs, &cfg, 1, &n))
            return gl_egl_error(ctx, "eglChooseConfig(ES3, pbuffer)");
        if (n == 0)
            return core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED,
                                "eglChooseConfig: no OpenGL ES 3 pbuffer config on this display");
    }
    EGLint cattrs[16], k = 0;
    cattrs[k++] = EGL_CONTEXT_MAJOR_VERSION_KHR;
    cattrs[k++] = 3;
    cattrs[k++] = EGL_CONTEXT_MINOR_VERSION_KHR;
    cattrs[k++] = 1;
    if (ctx->debug && ext_in(dext, "EGL_KHR_create_context")) {
        cattrs[k++] = EGL_CONTEXT_FLAGS_KHR;
        cattrs[k++] = EGL_CONTEXT_OPENGL_DEBUG_BIT_KHR;
    }
    /* Ask to be told about GPU resets (glGetGraphicsResetStatus), so a reset
     * becomes GLESC_ERROR_CONTEXT_LOST; a driver that refuses the attribute
     * gets a second try without it. */
    EGLint k_plain = k;
    if (ext_in(dext, "EGL_EXT_create_context_robustness")) {
        cattrs[k++] = EGL_CONTEXT_OPENGL_RESET_NOTIFICATION_STRATEGY_EXT;
        cattrs[k++] = EGL_LOSE_CONTEXT_ON_RESET_EXT;
    }
    cattrs[k] = EGL_NONE;
    ctx->egl_ctx = eglCreateContext(dpy, cfg, EGL_NO_CONTEXT, cattrs);
    if (ctx->egl_ctx == EGL_NO_CONTEXT && k != k_plain) {
        cattrs[k_plain] = EGL_NONE;
        ctx->egl_ctx = eglCreateContext(dpy, cfg, EGL_NO_CONTEXT, cattrs);
    }
    if (ctx->egl_ctx == EGL_NO_CONTEXT)
        return gl_egl_error(ctx, "eglCreateContext(OpenGL ES 3.1)");
    if (!surfaceless) {
        const EGLint sattrs[] = {EGL_WIDTH, 1, EGL_HEIGHT, 1, EGL_NONE};
        ctx->surface = eglCreatePbufferSurface(dpy, cfg, sattrs);
        if (ctx->surface == EGL_NO_SURFACE)
            return gl_egl_error(ctx, "eglCreatePbufferSurface(1x1)");
    }
    if (!eglMakeCurrent(dpy, ctx->surface, ctx->surface, ctx->egl_ctx))
        return gl_egl_error(ctx, "eglMakeCurrent");
    /* what a helper context of the share group is made with */
    ctx->share_ok = surfaceless;
    ctx->egl_cfg = cfg;
    memcpy(ctx->egl_attrs, cattrs, sizeof ctx->egl_attrs);

    GLint gl_major = 0, gl_minor = 0;
    glGetIntegerv(GL_MAJOR_VERSION, &gl_major);
    glGetIntegerv(GL_MINOR_VERSION, &gl_minor);
    if (gl_major < 3 || (gl_major == 3 && gl_minor < 1)) {
        const char *ver = (const char *)glGetString(GL_VERSION);
        return core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED,
                            "the context is OpenGL ES %d.%d (%s); glesc needs 3.1 compute",
                            gl_major, gl_minor, ver ? ver : "?");
    }
    return GLESC_OK;
}

/* Undoes init_on_display (for a failed candidate and for destroy): releases
 * ctx from this thread if it is current here (nothing else), destroys
 * glesc's surface and, unless adopted, its context and display reference. */
void gl_platform_release(glesc_context *ctx)
{
    if (ctx->dpy != EGL_NO_DISPLAY) {
        /* An adopted context stays as the caller (destroy, create) leaves it,
         * unless it is current with glesc's surface, which goes now. */
        if (ctx->egl_ctx != EGL_NO_CONTEXT && eglGetCurrentContext() == ctx->egl_ctx &&
            (!ctx->adopted ||
             (ctx->surface != EGL_NO_SURFACE && eglGetCurrentSurface(EGL_DRAW) == ctx->surface)))
            eglMakeCurrent(ctx->dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
        if (ctx->surface != EGL_NO_SURFACE)
            eglDestroySurface(ctx->dpy, ctx->surface);
        if (!ctx->adopted) {
            if (ctx->egl_ctx != EGL_NO_CONTEXT)
                eglDestroyContext(ctx->dpy, ctx->egl_ctx);
            if (display_unref(ctx->dpy))
                eglTerminate(ctx->dpy);
        }
    }
    ctx->dpy = EGL_NO_DISPLAY;
    ctx->surface = EGL_NO_SURFACE;
    ctx->egl_ctx = EGL_NO_CONTEXT;
    if (ctx->gbm)
        gbm_device_destroy(ctx->gbm);
    ctx->gbm = NULL;
    if (ctx->drm_fd >= 0)
        close(ctx->drm_fd);
    ctx->drm_fd = -1;
}

/* ---- the three platforms ---- */

/* Linux's major number of DRM device nodes (drm.h's DRM_MAJOR). */
#define DRM_DEVICE_MAJOR 226

/* GBM on the render node at path. named: the caller (options or
 * GLESC_DEVICE) chose this node, so it must give a hardware renderer; Mesa
 * would otherwise fall back to its software rasterizer on anything it
 * cannot drive, /dev/null included. */
static glesc_status try_gbm_node(glesc_context *ctx, const char *path, bool named)
{
    ctx->drm_fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (ctx->drm_fd < 0)
        return core_err_set(&ctx->err, GLESC_ERROR_IO, "cannot open render node %s: %s", path,
                            strerror(errno));
    struct stat sb;
    bool drm = fstat(ctx->drm_fd, &sb) == 0 && S_ISCHR(sb.st_mode);
#ifdef __linux__
    drm = drm && major(sb.st_rdev) == DRM_DEVICE_MAJOR;
#endif
    glesc_status st;
    if (!drm) {
        st = core_err_set(&ctx->err, GLESC_ERROR_NOT_FOUND,
                          "%s is not a DRM render node (a character device of the "
                          "GPU driver, /dev/dri/renderD*)",
                          path);
        goto fail;
    }
    /* Opened non-blocking only so that a FIFO named by mistake cannot hang. */
    fcntl(ctx->drm_fd, F_SETFL, fcntl(ctx->drm_fd, F_GETFL) & ~O_NONBLOCK);
    PFNEGLGETPLATFORMDISPLAYEXTPROC gpd = get_platform_display();
    const char *cext = client_extensions();
    if (!gpd || !(ext_in(cext, "EGL_KHR_platform_gbm") || ext_in(cext, "EGL_MESA_platform_gbm"))) {
        st = core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED,
                          "cannot use render node %s: EGL has no GBM platform "
                          "(EGL_KHR_platform_gbm)",
                          path);
        goto fail;
    }
    ctx->gbm = gbm_create_device(ctx->drm_fd);
    if (!ctx->gbm) {
        st = core_err_set(&ctx->err, GLESC_ERROR_EGL, "gbm_create_device(%s) failed", path);
        goto fail;
    }
    st = init_on_display(ctx, gpd(EGL_PLATFORM_GBM_KHR, ctx->gbm, NULL));
    if (st == GLESC_OK && named) {
        const char *r = (const char *)glGetString(GL_RENDERER);
        if (gl_renderer_is_software(r))
            st = core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED,
                              "Mesa has no hardware driver for it: it gave the software renderer "
                              "'%s'",
                              r);
    }
    if (st != GLESC_OK) {
        core_err_prefix(&ctx->err, "GBM on %s", path);
        goto fail;
    }
    ctx->device_desc = core_strdup(path);
    return GLESC_OK;
fail:
    gl_platform_release(ctx);
    return st;
}

/* Render nodes, sorted so the choice is deterministic. */
static int list_render_nodes(char names[][64], int max)
{
    DIR *d = opendir("/dev/dri");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max)
        if (!strncmp(e->d_name, "renderD", 7))
            snprintf(names[n++], 64, "/dev/dri/%.50s", e->d_name);
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char t[64];
            memcpy(t, names[j], 64);
            memcpy(names[j], names[j - 1], 64);
            memcpy(names[j - 1], t, 64);
        }
    return n;
}

static glesc_status try_gbm(glesc_context *ctx, const char *device, sbuf *why)
{
    if (device)
        return try_gbm_node(ctx, device, true);
    char nodes[16][64];
    int n = list_render_nodes(nodes, 16);
    if (n == 0)
        return core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED,
                            "no DRM render node (/dev/dri/renderD*) on this machine");
    glesc_status st = GLESC_ERROR_UNSUPPORTED;
    for (int i = 0; i < n; i++) {
        st = try_gbm_node(ctx, nodes[i], false);
        if (st == GLESC_OK)
            return st;
        sbuf_appendf(why, "%s: %s; ", nodes[i], core_err_msg(&ctx->err));
    }
    return st;
}

typedef struct egl_device_info {
    EGLDeviceEXT dev;
    bool software;
    char name[160];
    const char *drm_file;
} egl_device_info;

static int enumerate_devices(glesc_context *ctx, egl_device_info *out, int max)
{
    const char *cext = client_extensions();
    if (!ext_in(cext, "EGL_EXT_device_enumeration") && !ext_in(cext, "EGL_EXT_device_base")) {
        core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED, "EGL has no EGL_EXT_device_enumeration");
        return -1;
    }
    PFNEGLQUERYDEVICESEXTPROC query_devices =
        (PFNEGLQUERYDEVICESEXTPROC)eglGetProcAddress("eglQueryDevicesEXT");
    PFNEGLQUERYDEVICESTRINGEXTPROC query_string =
        (PFNEGLQUERYDEVICESTRINGEXTPROC)eglGetProcAddress("eglQueryDeviceStringEXT");
    if (!query_devices || !query_string) {
        core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED, "eglQueryDevicesEXT is missing");
        return -1;
    }
    EGLDeviceEXT devs[16];
    EGLint n = 0;
    if (!query_devices(max < 16 ? max : 16, devs, &n)) {
        gl_egl_error(ctx, "eglQueryDevicesEXT");
        return -1;
    }
    for (EGLint i = 0; i < n; i++) {
        const char *ext = query_string(devs[i], EGL_EXTENSIONS);
        out[i].dev = devs[i];
        out[i].software = ext_in(ext, "EGL_MESA_device_software");
        out[i].drm_file = ext_in(ext, "EGL_EXT_device_drm")
                              ? query_string(devs[i], EGL_DRM_DEVICE_FILE_EXT)
                              : NULL;
        const char *renderer = ext_in(ext, "EGL_EXT_device_query_name")
                                   ? query_string(devs[i], EGL_RENDERER_EXT)
                                   : NULL;
        /* The query may set an EGL error when the device has no DRM node. */
        eglGetError();
        snprintf(out[i].name, sizeof out[i].name, "%s%s%s", renderer ? renderer : "",
                 renderer && out[i].drm_file ? " " : "", out[i].drm_file ? out[i].drm_file : "");
        if (!out[i].name[0])
            snprintf(out[i].name, sizeof out[i].name, "%s",
                     out[i].software ? "software" : "hardware");
    }
    return n;
}

static glesc_status try_device_index(glesc_context *ctx, egl_device_info *d, int index)
{
    PFNEGLGETPLATFORMDISPLAYEXTPROC gpd = get_platform_display();
    if (!gpd || !ext_in(client_extensions(), "EGL_EXT_platform_device"))
        return core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED,
                            "EGL has no EGL_EXT_platform_device");
    glesc_status st = init_on_display(ctx, gpd(EGL_PLATFORM_DEVICE_EXT, d->dev, NULL));
    if (st != GLESC_OK) {
        core_err_prefix(&ctx->err, "EGL device %d (%s)", index, d->name);
        gl_platform_release(ctx);
        return st;
    }
    char desc[200];
    snprintf(desc, sizeof desc, "EGL device %d (%s)", index, d->name);
    ctx->device_desc = core_strdup(desc);
    return GLESC_OK;
}

static bool is_index(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

static glesc_status try_device(glesc_context *ctx, const char *device, sbuf *why)
{
    egl_device_info devs[16];
    int n = enumerate_devices(ctx, devs, 16);
    if (n < 0)
        return ctx->err.status;
    if (n == 0)
        return core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED, "EGL enumerates no devices");
    if (device) {
        if (is_index(device)) {
            long idx = strtol(device, NULL, 10);
            if (idx >= n)
                return core_err_set(&ctx->err, GLESC_ERROR_NOT_FOUND,
                                    "EGL device index %ld does not exist (%d device%s found)", idx,
                                    n, n == 1 ? "" : "s");
            return try_device_index(ctx, &devs[idx], (int)idx);
        }
        for (int i = 0; i < n; i++)
            if (devs[i].drm_file && !strcmp(devs[i].drm_file, device))
                return try_device_index(ctx, &devs[i], i);
        return core_err_set(&ctx->err, GLESC_ERROR_NOT_FOUND,
                            "no EGL device has the DRM node '%s' (%d device%s found)", device, n,
                            n == 1 ? "" : "s");
    }
    /* Hardware devices first, then software. */
    glesc_status st = GLESC_ERROR_UNSUPPORTED;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            if (devs[i].software != (pass == 1))
                continue;
            st = try_device_index(ctx, &devs[i], i);
            if (st == GLESC_OK)
                return st;
            sbuf_appendf(why, "%s; ", core_err_msg(&ctx->err));
        }
    return st;
}

static glesc_status try_surfaceless(glesc_context *ctx)
{
    PFNEGLGETPLATFORMDISPLAYEXTPROC gpd = get_platform_display();
    if (!gpd || !ext_in(client_extensions(), "EGL_MESA_platform_surfaceless"))
        return core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED,
                            "EGL has no EGL_MESA_platform_surfaceless");
    glesc_status st =
        init_on_display(ctx, gpd(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, NULL));
    if (st != GLESC_OK) {
        core_err_prefix(&ctx->err, "surfaceless platform");
        gl_platform_release(ctx);
        return st;
    }
    ctx->device_desc = core_strdup("");
    return GLESC_OK;
}

/* ---- the choice, and adoption ---- */

GLESC_API const char *glesc_platform_name(glesc_platform p)
{
    switch (p) {
    case GLESC_PLATFORM_AUTO:
        return "auto";
    case GLESC_PLATFORM_GBM:
        return "gbm";
    case GLESC_PLATFORM_DEVICE:
        return "device";
    case GLESC_PLATFORM_SURFACELESS:
        return "surfaceless";
    }
    return "?";
}

glesc_status gl_platform_parse(const char *s, glesc_platform *out)
{
    for (int p = GLESC_PLATFORM_AUTO; p <= GLESC_PLATFORM_SURFACELESS; p++)
        if (!strcmp(s, glesc_platform_name((glesc_platform)p))) {
            *out = (glesc_platform)p;
            return GLESC_OK;
        }
    return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                        "GLESC_PLATFORM='%s' is not one of auto, gbm, device, surfaceless", s);
}

/* platform_src, device_src: where the choice came from ("the options",
 * "GLESC_PLATFORM", ...), for the reason glesc-info prints. */
glesc_status gl_platform_create(glesc_context *ctx, glesc_platform platform, const char *device,
                                const char *platform_src, const char *device_src)
{
    sbuf why;
    sbuf_init(&why);
    glesc_status st;
    char reason[512];
    switch (platform) {
    case GLESC_PLATFORM_GBM:
        st = try_gbm(ctx, device, &why);
        snprintf(reason, sizeof reason, "requested by %s", platform_src);
        break;
    case GLESC_PLATFORM_DEVICE:
        st = try_device(ctx, device, &why);
        snprintf(reason, sizeof reason, "requested by %s", platform_src);
        break;
    case GLESC_PLATFORM_SURFACELESS:
        st = try_surfaceless(ctx);
        snprintf(reason, sizeof reason, "requested by %s", platform_src);
        break;
    default: {
        /* auto: a device that looks like a path means GBM on that node, an
         * index means that EGL device; otherwise try all three in order. */
        if (device && !is_index(device)) {
            st = try_gbm(ctx, device, &why);
            platform = GLESC_PLATFORM_GBM;
            snprintf(reason, sizeof reason, "auto: %s names render node %s", device_src, device);
            break;
        }
        if (device) {
            st = try_device(ctx, device, &why);
            platform = GLESC_PLATFORM_DEVICE;
            snprintf(reason, sizeof reason, "auto: %s names EGL device %s", device_src, device);
            break;
        }
        st = try_gbm(ctx, NULL, &why);
        if (st == GLESC_OK) {
            platform = GLESC_PLATFORM_GBM;
            snprintf(reason, sizeof reason, "auto: first render node that gave a GLES 3.1 context");
            break;
        }
        char gbm_fail[200];
        snprintf(gbm_fail, sizeof gbm_fail, "%s", core_err_msg(&ctx->err));
        st = try_device(ctx, NULL, &why);
        if (st == GLESC_OK) {
            platform = GLESC_PLATFORM_DEVICE;
            snprintf(reason, sizeof reason,
                     "auto: GBM unusable (%.180s); EGL device preferred (hardware before software)",
                     gbm_fail);
            break;
        }
        char dev_fail[200];
        snprintf(dev_fail, sizeof dev_fail, "%s", core_err_msg(&ctx->err));
        st = try_surfaceless(ctx);
        platform = GLESC_PLATFORM_SURFACELESS;
        snprintf(reason, sizeof reason,
                 "auto: GBM unusable (%.180s); no EGL device gave a context (%.180s)", gbm_fail,
                 dev_fail);
        if (st != GLESC_OK)
            core_err_set(&ctx->err, st,
                         "no platform gave an OpenGL ES 3.1 context: gbm: %s; device: %s; "
                         "surfaceless: %s",
                         gbm_fail, dev_fail, core_err_msg(&ctx->err));
    }
    }
    if (st == GLESC_OK) {
        ctx->caps.platform = platform;
        ctx->platform_reason = core_strdup(reason);
    } else if (why.len && platform != GLESC_PLATFORM_AUTO &&
               platform != GLESC_PLATFORM_SURFACELESS) {
        core_err_set(&ctx->err, st, "%s: no candidate worked: %s", glesc_platform_name(platform),
                     sbuf_str(&why) ? sbuf_str(&why) : "");
    }
    sbuf_free(&why);
    return st;
}

/* The application's display and context (glesc_context_options'
 * egl_display, egl_context): checked, made current, never owned. */
glesc_status gl_platform_adopt(glesc_context *ctx, EGLDisplay dpy, EGLContext ectx)
{
    ctx->adopted = true;
    ctx->dpy = dpy;
    ctx->egl_ctx = ectx;
    EGLint api = 0;
    if (!eglQueryContext(dpy, ectx, EGL_CONTEXT_CLIENT_TYPE, &api))
        return gl_egl_error(ctx, "adopting the application's context: eglQueryContext");
    if (api != EGL_OPENGL_ES_API)
        return core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED,
                            "adopting the application's context: it is not an OpenGL ES context "
                            "(EGL_CONTEXT_CLIENT_TYPE 0x%04x)",
                            (unsigned)api);
    /* When glesc has to bind the context itself it uses no surface, or a
     * pbuffer of the context's config where EGL insists on one. */
    if (!ext_in(eglQueryString(dpy, EGL_EXTENSIONS), "EGL_KHR_surfaceless_context")) {
        EGLint id = 0, n = 0;
        EGLConfig cfg;
        if (!eglQueryContext(dpy, ectx, EGL_CONFIG_ID, &id))
            return gl_egl_error(ctx, "adopting the application's context: eglQueryContext");
        const EGLint attrs[] = {EGL_CONFIG_ID, id, EGL_NONE};
        if (!eglChooseConfig(dpy, attrs, &cfg, 1, &n) || n != 1)
            return core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED,
                                "adopting the application's context: the display has no "
                                "EGL_KHR_surfaceless_context and the context's config %d is "
                                "not found for a pbuffer",
                                (int)id);
        const EGLint sattrs[] = {EGL_WIDTH, 1, EGL_HEIGHT, 1, EGL_NONE};
        ctx->surface = eglCreatePbufferSurface(dpy, cfg, sattrs);
        if (ctx->surface == EGL_NO_SURFACE)
            return gl_egl_error(ctx, "adopting the application's context: "
                                     "eglCreatePbufferSurface(1x1) of its config");
    }
    glesc_status st = gl_context_bind(ctx, "adopting the application's context");
    if (st != GLESC_OK)
        return st;
    GLint gl_major = 0, gl_minor = 0;
    glGetIntegerv(GL_MAJOR_VERSION, &gl_major);
    glGetIntegerv(GL_MINOR_VERSION, &gl_minor);
    if (gl_major < 3 || (gl_major == 3 && gl_minor < 1))
        return core_err_set(&ctx->err, GLESC_ERROR_UNSUPPORTED,
                            "adopting the application's context: it is OpenGL ES %d.%d; glesc "
                            "needs 3.1 compute",
                            gl_major, gl_minor);
    ctx->caps.platform = GLESC_PLATFORM_AUTO;
    ctx->platform_reason = core_strdup("adopted: the application's EGLDisplay and EGLContext");
    ctx->device_desc = core_strdup("");
    return GLESC_OK;
}
