/* lab.h — what tools/lab's programs share: a clock and a headless GLES 3.1
 * context (EGL_EXT_platform_device's device LAB_DEVICE where it is set,
 * else Mesa's surfaceless platform, else the default display). */
#ifndef LAB_H
#define LAB_H
#include <EGL/egl.h>
#include <EGL/eglext.h>
#include <GLES3/gl31.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double lab_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline void lab_die(const char *what)
{
    fprintf(stderr, "lab: %s (GL error 0x%x, EGL error 0x%x)\n", what, glGetError(), eglGetError());
    exit(1);
}

static inline void lab_context(void)
{
    EGLDisplay dpy = EGL_NO_DISPLAY;
    PFNEGLQUERYDEVICESEXTPROC qd = (void *)eglGetProcAddress("eglQueryDevicesEXT");
    PFNEGLGETPLATFORMDISPLAYEXTPROC gpd = (void *)eglGetProcAddress("eglGetPlatformDisplayEXT");
    const char *want = getenv("LAB_DEVICE");
    if (want && qd && gpd) {
        EGLDeviceEXT devs[8];
        EGLint n = 0;
        int i = atoi(want);
        qd(8, devs, &n);
        if (i < 0 || i >= n)
            lab_die("LAB_DEVICE names no EGL device");
        dpy = gpd(EGL_PLATFORM_DEVICE_EXT, devs[i], NULL);
    }
    if (dpy == EGL_NO_DISPLAY && gpd)
        dpy = gpd(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, NULL);
    if (dpy == EGL_NO_DISPLAY)
        dpy = eglGetDisplay(EGL_DEFAULT_DISPLAY);
    if (!eglInitialize(dpy, NULL, NULL))
        lab_die("eglInitialize");
    eglBindAPI(EGL_OPENGL_ES_API);
    EGLint ca[] = {EGL_CONTEXT_MAJOR_VERSION, 3, EGL_CONTEXT_MINOR_VERSION, 1, EGL_NONE};
    EGLContext c = eglCreateContext(dpy, EGL_NO_CONFIG_KHR, EGL_NO_CONTEXT, ca);
    if (c == EGL_NO_CONTEXT || !eglMakeCurrent(dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, c))
        lab_die("a GLES 3.1 context");
    fprintf(stderr, "renderer: %s\n", glGetString(GL_RENDERER));
}

/* A compute program of the two source strings (head: the defines), or 0
 * with the compiler's log on stderr. */
static inline GLuint lab_program(const char *head, const char *body)
{
    GLuint sh = glCreateShader(GL_COMPUTE_SHADER);
    const char *src[2] = {head, body};
    glShaderSource(sh, 2, src, NULL);
    glCompileShader(sh);
    GLint ok;
    char log[8192];
    glGetShaderiv(sh, GL_COMPILE_STATUS, &ok);
    if (!ok) {
        glGetShaderInfoLog(sh, sizeof log, NULL, log);
        fprintf(stderr, "%s\n%s", head, log);
        return 0;
    }
    GLuint p = glCreateProgram();
    glAttachShader(p, sh);
    glLinkProgram(p);
    glGetProgramiv(p, GL_LINK_STATUS, &ok);
    if (!ok) {
        glGetProgramInfoLog(p, sizeof log, NULL, log);
        fprintf(stderr, "link: %s", log);
        return 0;
    }
    return p;
}
#endif
