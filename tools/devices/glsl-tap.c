/* glsl-tap: LD_PRELOAD interposer (arm64, run-shim.sh's SHIM_TAP=1) that
 * marks glesc's compiles on stderr so that a driver's shader-db lines can be
 * tied to glesc's kernel names, and optionally saves every GLSL source
 * (GLSL_TAP_DIR). With GLSL_TAP_DEBUG_ALL=1 it enables every KHR_debug
 * message (the default drops notifications, which is how freedreno and v3d
 * send their shader-db lines). Lines, all starting "@@TAP ":
 *   source NNNN shader=S kernel=NAME     glShaderSource (NNNN.glsl in the dir)
 *   link-begin / link-end prog=P s=SECONDS kernel=NAME   around glLinkProgram
 *   link-status / compile-status ... status=0|1
 *   cache-get NAME.entry hit|miss        glesc's disk cache looked up (openat)
 *   cache-put NAME.entry                 glesc's disk cache entry written
 *                                        (renameat over the entry's name)
 * The cache lines tie a program loaded from glesc's disk cache (no source,
 * no compile, no statistics) to the source that made the entry. Built by
 * setup.sh into $SHIM_ROOT/glsl-tap.so. */
#define _GNU_SOURCE
#include <EGL/egl.h>
#include <GLES3/gl31.h>
#include <GLES2/gl2ext.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAXN 65536
static char *shader_name[MAXN], *prog_name[MAXN];
static int seq;

static char *kernel_name(const char *src)
{
    const char *p = strstr(src, "// glesc kernel: ");
    if (!p)
        return strdup("?");
    p += strlen("// glesc kernel: ");
    size_t n = strcspn(p, "\n");
    char *s = malloc(n + 1);
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

void glShaderSource(GLuint sh, GLsizei count, const GLchar *const *str, const GLint *len)
{
    static void (*real)(GLuint, GLsizei, const GLchar *const *, const GLint *);
    if (!real)
        real = dlsym(RTLD_NEXT, "glShaderSource");
    size_t total = 0;
    for (int i = 0; i < count; i++)
        total += len && len[i] >= 0 ? (size_t)len[i] : strlen(str[i]);
    char *all = malloc(total + 1), *w = all;
    for (int i = 0; i < count; i++) {
        size_t n = len && len[i] >= 0 ? (size_t)len[i] : strlen(str[i]);
        memcpy(w, str[i], n);
        w += n;
    }
    *w = 0;
    static int debug_all_done;
    if (!debug_all_done) {
        debug_all_done = 1;
        const char *e = getenv("GLSL_TAP_DEBUG_ALL");
        if (e && *e == '1') {
            PFNGLDEBUGMESSAGECONTROLKHRPROC ctl =
                (PFNGLDEBUGMESSAGECONTROLKHRPROC)eglGetProcAddress("glDebugMessageControlKHR");
            if (ctl)
                ctl(GL_DONT_CARE, GL_DONT_CARE, GL_DONT_CARE, 0, NULL, GL_TRUE);
            fprintf(stderr, "@@TAP debug-all %s\n", ctl ? "on" : "unavailable");
        }
    }
    char *name = kernel_name(all);
    int id = ++seq;
    if (sh < MAXN) {
        free(shader_name[sh]);
        shader_name[sh] = name;
    }
    const char *dir = getenv("GLSL_TAP_DIR");
    if (dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%04d.glsl", dir, id);
        FILE *f = fopen(path, "w");
        if (f) {
            fputs(all, f);
            fclose(f);
        }
    }
    fprintf(stderr, "@@TAP source %04d shader=%u kernel=%s\n", id, sh, name);
    free(all);
    real(sh, count, str, len);
}

void glAttachShader(GLuint prog, GLuint sh)
{
    static void (*real)(GLuint, GLuint);
    if (!real)
        real = dlsym(RTLD_NEXT, "glAttachShader");
    if (prog < MAXN && sh < MAXN && shader_name[sh]) {
        free(prog_name[prog]);
        prog_name[prog] = strdup(shader_name[sh]);
    }
    real(prog, sh);
}

void glLinkProgram(GLuint prog)
{
    static void (*real)(GLuint);
    if (!real)
        real = dlsym(RTLD_NEXT, "glLinkProgram");
    const char *n = prog < MAXN && prog_name[prog] ? prog_name[prog] : "?";
    fprintf(stderr, "@@TAP link-begin prog=%u kernel=%s\n", prog, n);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    real(prog);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* s=: wall seconds inside glLinkProgram (where the drivers compile) */
    fprintf(stderr, "@@TAP link-end prog=%u s=%.3f kernel=%s\n", prog,
            (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9, n);
}

void glGetProgramiv(GLuint prog, GLenum pname, GLint *v)
{
    static void (*real)(GLuint, GLenum, GLint *);
    if (!real)
        real = dlsym(RTLD_NEXT, "glGetProgramiv");
    real(prog, pname, v);
    if (pname == GL_LINK_STATUS)
        fprintf(stderr, "@@TAP link-status prog=%u status=%d kernel=%s\n", prog, *v,
                prog < MAXN && prog_name[prog] ? prog_name[prog] : "?");
}

void glGetShaderiv(GLuint sh, GLenum pname, GLint *v)
{
    static void (*real)(GLuint, GLenum, GLint *);
    if (!real)
        real = dlsym(RTLD_NEXT, "glGetShaderiv");
    real(sh, pname, v);
    if (pname == GL_COMPILE_STATUS)
        fprintf(stderr, "@@TAP compile-status shader=%u status=%d kernel=%s\n", sh, *v,
                sh < MAXN && shader_name[sh] ? shader_name[sh] : "?");
}

static int is_entry(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    return n > 6 && !strcmp(name + n - 6, ".entry");
}

static const char *base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* glesc's disk cache reads an entry with openat(dirfd, "HASH.entry", O_RDONLY)
 * (openat64 where built with _FILE_OFFSET_BITS=64, as meson does) */
static int tap_openat(const char *sym, int dirfd, const char *name, int flags, mode_t mode)
{
    int (*real)(int, const char *, int, ...) =
        (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, sym);
    int fd = real(dirfd, name, flags, mode);
    if ((flags & O_ACCMODE) == O_RDONLY && is_entry(name))
        fprintf(stderr, "@@TAP cache-get %s %s\n", base(name), fd >= 0 ? "hit" : "miss");
    return fd;
}

#define OPENAT_MODE(flags, mode)                                                                   \
    mode_t mode = 0;                                                                               \
    if (flags & (O_CREAT | O_TMPFILE)) {                                                           \
        va_list ap;                                                                                \
        va_start(ap, flags);                                                                       \
        mode = va_arg(ap, mode_t);                                                                 \
        va_end(ap);                                                                                \
    }

int openat(int dirfd, const char *name, int flags, ...)
{
    OPENAT_MODE(flags, mode)
    return tap_openat("openat", dirfd, name, flags, mode);
}

int openat64(int dirfd, const char *name, int flags, ...)
{
    OPENAT_MODE(flags, mode)
    return tap_openat("openat64", dirfd, name, flags, mode);
}

/* and writes it to a temporary name renamed over HASH.entry */
int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
    static int (*real)(int, const char *, int, const char *);
    if (!real)
        real = (int (*)(int, const char *, int, const char *))dlsym(RTLD_NEXT, "renameat");
    int r = real(olddirfd, oldpath, newdirfd, newpath);
    if (r == 0 && is_entry(newpath))
        fprintf(stderr, "@@TAP cache-put %s\n", base(newpath));
    return r;
}
