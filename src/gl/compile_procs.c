/*
 * compile_procs.c — compile processes: helpers (the glesc-compiler
 * program) that compile programs on their own context of the same device
 * and hand back the program binaries, which the GL thread loads with
 * glProgramBinary. For a driver that compiles one program of a process at
 * a time however many threads or contexts ask (NVIDIA's), while separate
 * processes compile concurrently: the program cache's compile pool gives
 * each helper a worker thread (program_cache.c).
 *
 * A helper is spawned (posix_spawn) with one end of a socket pair as fd 3,
 * the platform and device of the context (the same GPU and driver), no
 * program cache of its own and no compile processes (no recursion). It
 * answers with a hello: "GLCP", the protocol version, then GL_VENDOR,
 * GL_RENDERER and GL_VERSION, which must equal the context's (else its
 * binaries would be refused: it is not used). Then, for each request (a
 * u32 length and the source), a reply: u32 status (0 linked, 1 failed to
 * compile or link), u32 binary format, u32 length and the binary. Words
 * are little endian. EOF on its socket ends a helper, as does a minute
 * with no request (the next batch starts another); a helper that dies,
 * hangs past a generous limit or answers nonsense is killed and its
 * request compiled on the GL thread instead, as is a request it failed
 * (which then fails there with the driver's log).
 *
 * The program: GLESC_COMPILER, else glesc-compiler beside the library (or
 * the program linking it statically), else in the libexec folder glesc was
 * installed with. How many: GLESC_COMPILE_PROCESSES (0 none), else 4 on
 * NVIDIA's driver and none elsewhere (Mesa's drivers compile on helper
 * contexts' threads in one process).
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gl/gl.h"
#include "glesc_config.h"

extern char **environ;

#define HELLO_MAGIC 0x50434c47u /* "GLCP" */
#define PROTOCOL_VERSION 1u
#define HELLO_MS 30000    /* a helper's start: context and driver */
#define COMPILE_MS 600000 /* one program (V3D's compiler takes minutes) */
#define IDLE_MS 60000     /* a helper with nothing to do exits */
#define MAX_STRING (1u << 16)
#define MAX_BINARY (1u << 30)

struct gl_compiler {
    pid_t pid;
    int fd;
    int state;        /* 0: started, hello not read; 1: ready; -1: unusable */
    uint64_t started; /* core_time_ns at its spawn */
};

int gl_compile_procs_default(const glesc_context *ctx)
{
    long v;
    if (core_env_long("GLESC_COMPILE_PROCESSES", 0, 64, &v))
        return (int)v;
    if (ctx->adopted)
        return 0;
    /* NVIDIA's driver: one compile at a time per process (docs/performance.md,
     * *Time to first token on the H200*) */
    return ctx->caps.vendor && strstr(ctx->caps.vendor, "NVIDIA") ? 4 : 0;
}

/* ---- the socket ---- */

/* Reads len bytes, waiting at most ms for each part; false on EOF, error
 * or time out. */
static bool read_all(int fd, void *buf, size_t len, int ms)
{
    char *p = buf;
    while (len > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* Writes len bytes; no SIGPIPE when the peer is gone. */
static bool write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

static bool read_u32(int fd, uint32_t *v, int ms)
{
    uint8_t b[4];
    if (!read_all(fd, b, 4, ms))
        return false;
    *v = core_le32(b);
    return true;
}

static bool write_u32(int fd, uint32_t v)
{
    uint8_t b[4];
    core_put_le32(b, v);
    return write_all(fd, b, 4);
}

/* A length-prefixed string of at most MAX_STRING bytes, NUL-terminated;
 * core_free it. */
static char *read_string(int fd, int ms)
{
    uint32_t len;
    if (!read_u32(fd, &len, ms) || len > MAX_STRING)
        return NULL;
    char *s = core_malloc((size_t)len + 1);
    if (s && !read_all(fd, s, len, ms)) {
        core_free(s);
        return NULL;
    }
    if (s)
        s[len] = '\0';
    return s;
}

static bool write_string(int fd, const char *s)
{
    size_t len = s ? strlen(s) : 0;
    return write_u32(fd, (uint32_t)len) && write_all(fd, s ? s : "", len);
}

/* ---- the parent's side ---- */

/* Whether path is a program this process may run. */
static bool runnable(const char *path)
{
    return path && *path && access(path, X_OK) == 0;
}

char *gl_compiler_find(void)
{
    const char *env = core_env("GLESC_COMPILER");
    char path[4096];
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else {
        static const char here; /* an address inside the library (or program) */
        Dl_info info;
        const char *slash =
            dladdr(&here, &info) && info.dli_fname ? strrchr(info.dli_fname, '/') : NULL;
        if (slash)
            snprintf(path, sizeof path, "%.*s/glesc-compiler", (int)(slash - info.dli_fname),
                     info.dli_fname);
        if (!slash || !runnable(path))
            snprintf(path, sizeof path, "%s/glesc-compiler", GLESC_LIBEXECDIR);
    }
    if (runnable(path))
        return core_strdup(path);
    core_log(CORE_LOG_INFO, "compile processes: none, %s is no program this process may run%s",
             path, env && *env ? " (GLESC_COMPILER)" : "");
    return NULL;
}

gl_compiler *gl_compiler_spawn(glesc_context *ctx, const char *path)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return NULL;
    const char *argv[8] = {path, "--fd", "3", "--platform",
                           glesc_platform_name(ctx->caps.platform)};
    int argc = 5;
    if (ctx->device_arg) {
        argv[argc++] = "--device";
        argv[argc++] = ctx->device_arg;
    }
    argv[argc] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 3); /* clears close-on-exec */
    pid_t pid;
    int err = posix_spawn(&pid, path, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(sv[1]);
    gl_compiler *h = err ? NULL : core_calloc(1, sizeof *h);
    if (!h) {
        core_log(CORE_LOG_INFO, "compile processes: cannot start %s: %s", path,
                 err ? strerror(err) : "out of memory");
        close(sv[0]);
        if (!err) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        return NULL;
    }
    h->pid = pid;
    h->fd = sv[0];
    h->started = core_time_ns();
    return h;
}

int gl_compiler_wait(gl_compiler *h, const glesc_context *ctx, int ms)
{
    if (h->state)
        return h->state;
    struct pollfd pfd = {.fd = h->fd, .events = POLLIN};
    if (poll(&pfd, 1, ms) == 0) {
        if (core_time_ns() - h->started < (uint64_t)HELLO_MS * 1000000u)
            return 0;
        core_log(CORE_LOG_INFO, "compile processes: a helper did not start in %d s (pid %d)",
                 HELLO_MS / 1000, (int)h->pid);
        return h->state = -1;
    }
    h->state = -1;
    uint32_t magic = 0, version = 0;
    if (!read_u32(h->fd, &magic, HELLO_MS) || !read_u32(h->fd, &version, HELLO_MS) ||
        magic != HELLO_MAGIC || version != PROTOCOL_VERSION) {
        core_log(CORE_LOG_INFO, "compile processes: a helper did not start (pid %d)", (int)h->pid);
        return -1;
    }
    const char *want[3] = {ctx->caps.vendor, ctx->caps.renderer, ctx->caps.version};
    bool same = true;
    for (int i = 0; i < 3; i++) {
        char *s = read_string(h->fd, HELLO_MS);
        same = same && s && want[i] && !strcmp(s, want[i]);
        core_free(s);
    }
    if (!same) {
        core_log(CORE_LOG_INFO, "compile processes: a helper has another driver or device");
        return -1;
    }
    core_log(CORE_LOG_DEBUG, "compile processes: pid %d ready %.1f ms after its start", (int)h->pid,
             (double)(core_time_ns() - h->started) / 1e6);
    return h->state = 1;
}

int gl_compiler_compile(gl_compiler *h, const char *source, gl_binary *out)
{
    memset(out, 0, sizeof *out);
    if (h->state <= 0)
        return -1;
    uint32_t status, format, len;
    uint64_t t0 = core_time_ns();
    if (!write_string(h->fd, source) || !read_u32(h->fd, &status, COMPILE_MS) ||
        !read_u32(h->fd, &format, COMPILE_MS) || !read_u32(h->fd, &len, COMPILE_MS) ||
        len > MAX_BINARY || status > 1 || (status == 1 && len)) {
        h->state = -1;
        return -1;
    }
    if (status == 1)
        return 0;
    void *data = core_malloc(len ? len : 1);
    if (!data || !read_all(h->fd, data, len, COMPILE_MS)) {
        core_free(data);
        h->state = -1; /* out of step with it now */
        return -1;
    }
    *out = (gl_binary){.data = data, .len = len, .format = format};
    core_log(CORE_LOG_DEBUG, "compile processes: pid %d linked a program in %.1f ms (%u bytes)",
             (int)h->pid, (double)(core_time_ns() - t0) / 1e6, (unsigned)len);
    return 1;
}

bool gl_compiler_usable(gl_compiler *h)
{
    /* a ready helper has nothing to say between requests: anything (its
     * EOF after IDLE_MS) means it is gone */
    struct pollfd pfd = {.fd = h->fd, .events = POLLIN};
    if (h->state > 0 && poll(&pfd, 1, 0) != 0)
        h->state = -1;
    return h->state >= 0;
}

void gl_compiler_destroy(gl_compiler *h)
{
    if (!h)
        return;
    close(h->fd); /* an idle helper exits at EOF; a busy one is killed */
    kill(h->pid, SIGKILL);
    while (waitpid(h->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    core_free(h);
}

/* ---- the helper's side ---- */

int gl_compiler_serve(glesc_context *ctx, int fd)
{
    if (!write_u32(fd, HELLO_MAGIC) || !write_u32(fd, PROTOCOL_VERSION) ||
        !write_string(fd, ctx->caps.vendor) || !write_string(fd, ctx->caps.renderer) ||
        !write_string(fd, ctx->caps.version))
        return 1;
    for (;;) {
        uint32_t len;
        if (!read_u32(fd, &len, IDLE_MS))
            return 0; /* EOF (the parent is done), or idle */
        char *source = core_malloc((size_t)len + 1);
        if (!source || !read_all(fd, source, len, -1))
            return 1;
        source[len] = '\0';
        GLuint prog = 0;
        void *bin = NULL;
        GLint blen = 0;
        GLenum format = 0;
        GLsizei got = 0;
        if (gl_compile_start(ctx, source, &prog) == GLESC_OK &&
            gl_compile_finish(ctx, prog, source) == GLESC_OK) {
            glGetProgramiv(prog, GL_PROGRAM_BINARY_LENGTH, &blen);
            if (blen > 0 && (bin = core_malloc((size_t)blen)))
                glGetProgramBinary(prog, blen, &got, &format, bin);
        }
        core_err_reset(&ctx->err);
        if (prog)
            glDeleteProgram(prog);
        core_free(source);
        bool ok = got > 0 && glGetError() == GL_NO_ERROR;
        bool sent = write_u32(fd, ok ? 0 : 1) && write_u32(fd, ok ? format : 0) &&
                    write_u32(fd, ok ? (uint32_t)got : 0) &&
                    (!ok || write_all(fd, bin, (size_t)got));
        core_free(bin);
        if (!sent)
            return 1;
    }
}
