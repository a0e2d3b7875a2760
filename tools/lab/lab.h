/* lab.h — what tools/lab's programs share: a clock and a headless GLES 3.1
 * context (EGL_EXT_platform_device's device LAB_DEVICE where it is set,
 * else Mesa's surfaceless platform, else the default display). */
#ifndef LAB_H
#define LAB_H
#include <EGL/egl.h>
#include <EGL/eglext.h>
#include <GLES3/gl31.h>
#include <GLES2/gl2ext.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
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
/* A whole file, NUL-terminated; and f16 to and from f32 (the labs' own,
 * rounding toward zero). */
static inline char *lab_slurp(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (!f)
        lab_die(p);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc(n + 1);
    if (fread(s, 1, n, f) != (size_t)n)
        lab_die("read");
    s[n] = 0;
    fclose(f);
    return s;
}

static inline uint16_t lab_f2h(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t s = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
    if (e < 103)
        return s;
    if (e < 113)
        return s | ((m | 0x800000) >> (126 - e));
    return s | ((e - 112) << 10) | (m >> 13);
}

static inline float lab_h2f(uint16_t h)
{
    uint32_t s = (h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
    if (e == 0)
        return (s ? -1.f : 1.f) * m / 16777216.f;
    x = s | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* A Q4_0 kernel's source: q4_common.glsl (next to it) and then the file
 * at path (malloc'ed, NUL-terminated). */
static inline char *lab_kernel_source(const char *path)
{
    const char *slash = strrchr(path, '/');
    int dir = slash ? (int)(slash - path + 1) : 0;
    char common[4096];
    snprintf(common, sizeof common, "%.*sq4_common.glsl", dir, path);
    char *a = lab_slurp(common), *b = lab_slurp(path);
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    free(a);
    free(b);
    return s;
}

/* A variant "name|defines" (';' separates lines): its name (malloc'ed)
 * and, in *defs, what follows the '|' ("" without one). */
static inline char *lab_variant(const char *arg, const char **defs)
{
    char *name = strdup(arg), *bar = strchr(name, '|');
    *defs = bar ? arg + (bar - name) + 1 : "";
    if (bar)
        *bar = 0;
    return name;
}

/* The program of a variant: "#version 310 es", its defines, the lab's own
 * (extra), then body; 0 (the log on stderr) where it does not build. */
static inline GLuint lab_variant_program(const char *defs, const char *extra, const char *body)
{
    char head[4096];
    snprintf(head, sizeof head, "#version 310 es\n%s\n%s", defs, extra);
    for (char *c = head; *c; c++)
        if (*c == ';')
            *c = '\n';
    return lab_program(head, body);
}

/* GPU timer queries (GL_EXT_disjoint_timer_query; all NULL where absent) and
 * a program that keeps the GPU busy for a while (a single invocation, about
 * 8 ms on an H200, writing y[1] of the binding given): a loop queued behind
 * it is timed on the GPU with the host ahead. */
typedef struct lab_timer {
    PFNGLGENQUERIESEXTPROC gen;
    PFNGLBEGINQUERYEXTPROC begin;
    PFNGLENDQUERYEXTPROC end;
    PFNGLGETQUERYOBJECTUI64VEXTPROC get;
    GLuint sleeper;
} lab_timer;

static inline lab_timer lab_timers(int binding)
{
    char head[160];
    snprintf(head, sizeof head,
             "#version 310 es\nlayout(local_size_x = 1) in;\n"
             "layout(std430, binding = %d) buffer Y { float y[]; };\n",
             binding);
    lab_timer t = {(void *)eglGetProcAddress("glGenQueriesEXT"),
                   (void *)eglGetProcAddress("glBeginQueryEXT"),
                   (void *)eglGetProcAddress("glEndQueryEXT"),
                   (void *)eglGetProcAddress("glGetQueryObjectui64vEXT"), 0};
    if (!(t.gen && t.begin && t.end && t.get))
        t.gen = NULL;
    t.sleeper =
        lab_program(head, "void main() {\n    float a = y[0];\n"
                          "    for (uint i = 0u; i < 4000000u; i++) a = a * 0.9999999 + 0.5;\n"
                          "    y[1] = a;\n}\n");
    return t;
}
#endif
