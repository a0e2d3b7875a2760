/*
 * compile.c — one compute program's compile and link: started (the link
 * may go on where the driver compiles concurrently), then waited for, with
 * the driver's log and the numbered source lines around the error on
 * failure. The program cache (program_cache.c) and its compile threads
 * call these.
 */
#include <stdlib.h>
#include <string.h>

#include "gl/gl.h"

/* The log, then the numbered source lines around the first line it names
 * ("0:12(5)" from Mesa, "0(12)" from NVIDIA), or the whole source if none. */
static void format_compile_error(sbuf *b, const char *what, const char *log, const char *source)
{
    sbuf_appendf(b, "%s failed:\n%s\n", what, log && *log ? log : "(empty info log)");
    long line = -1;
    const char *p = log ? strstr(log, "0:") : NULL;
    if (p)
        line = strtol(p + 2, NULL, 10);
    else if (log && (p = strstr(log, "0(")))
        line = strtol(p + 2, NULL, 10);
    long lo = line > 0 ? line - 4 : 1, hi = line > 0 ? line + 4 : 1l << 30;
    long n = 1;
    sbuf_append(b, "--- source ---\n");
    for (const char *s = source; *s; n++) {
        const char *e = strchr(s, '\n');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (n >= lo && n <= hi)
            sbuf_appendf(b, "%s%4ld | %.*s\n", n == line ? ">" : " ", n, (int)len, s);
        s += len + (e ? 1 : 0);
    }
}

/* glCreateShader .. glLinkProgram (the link may still run where the driver
 * compiles concurrently): the program, or 0 when an object could not be
 * made (*failed names the call). Touches no glesc state: the compile
 * threads call it on their helper contexts. */
GLuint gl_compile_link(const char *source, const char **failed)
{
    GLuint sh = glCreateShader(GL_COMPUTE_SHADER);
    if (!sh) {
        *failed = "glCreateShader(GL_COMPUTE_SHADER)";
        return 0;
    }
    glShaderSource(sh, 1, &source, NULL);
    glCompileShader(sh);
    GLuint p = glCreateProgram();
    if (!p) {
        glDeleteShader(sh);
        *failed = "glCreateProgram";
        return 0;
    }
    glAttachShader(p, sh);
    glProgramParameteri(p, GL_PROGRAM_BINARY_RETRIEVABLE_HINT, GL_TRUE);
    glLinkProgram(p);
    return p;
}

/* Starts compiling and linking source into *prog. glCreateShader and
 * glCreateProgram return 0 only when no usable context is current (or it
 * was lost): that is an error here, never a program 0 for a later dispatch. */
glesc_status gl_compile_start(glesc_context *ctx, const char *source, GLuint *prog)
{
    const char *failed = "";
    if ((*prog = gl_compile_link(source, &failed)))
        return GLESC_OK;
    glesc_status st = gl_check(ctx, failed);
    return st != GLESC_OK
               ? st
               : core_err_set(&ctx->err, GLESC_ERROR_GL,
                              "%s returned 0 with no GL error: is the context current?", failed);
}

/* Waits for prog's link; on failure sets the error with the logs. */
glesc_status gl_compile_finish(glesc_context *ctx, GLuint prog, const char *source)
{
    GLint ok = GL_FALSE;
    glGetProgramiv(prog, GL_LINK_STATUS, &ok);
    GLuint sh = 0;
    GLsizei nsh = 0;
    glGetAttachedShaders(prog, 1, &nsh, &sh);
    glesc_status st = GLESC_OK;
    if (!ok) {
        GLint cok = GL_TRUE, len = 0;
        char *log = NULL;
        if (nsh)
            glGetShaderiv(sh, GL_COMPILE_STATUS, &cok);
        if (!cok)
            glGetShaderiv(sh, GL_INFO_LOG_LENGTH, &len);
        else
            glGetProgramiv(prog, GL_INFO_LOG_LENGTH, &len);
        log = core_malloc((size_t)len + 1);
        if (log) {
            log[0] = '\0';
            if (!cok)
                glGetShaderInfoLog(sh, len + 1, NULL, log);
            else
                glGetProgramInfoLog(prog, len + 1, NULL, log);
        }
        sbuf b;
        sbuf_init(&b);
        format_compile_error(&b, cok ? "compute program link" : "compute shader compilation", log,
                             source);
        st = core_err_set(&ctx->err, GLESC_ERROR_COMPILE, "%s",
                          sbuf_str(&b) ? sbuf_str(&b) : "shader compilation failed");
        sbuf_free(&b);
        core_free(log);
    }
    if (nsh) {
        glDetachShader(prog, sh);
        glDeleteShader(sh);
    }
    return st;
}
