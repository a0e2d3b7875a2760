/*
 * compiler_main.c — glesc-compiler, the compile process (compile_procs.c):
 * makes a context on the platform and device it is given, with no program
 * cache and no compile processes of its own, then serves its parent's
 * compile requests on the socket at --fd until EOF. Not for users: the
 * library starts it.
 *
 * usage: glesc-compiler --fd N --platform NAME [--device DEV]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gl/gl.h"

int main(int argc, char **argv)
{
    int fd = -1;
    const char *platform = "auto", *device = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--fd"))
            fd = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--platform"))
            platform = argv[i + 1];
        else if (!strcmp(argv[i], "--device"))
            device = argv[i + 1];
    }
    if (fd < 0) {
        fprintf(stderr, "glesc-compiler: the library starts this program (no --fd given)\n");
        return 2;
    }
    /* no helpers of its own: not processes, not threads */
    setenv("GLESC_COMPILE_PROCESSES", "0", 1);
    setenv("GLESC_COMPILE_THREADS", "1", 1);
    glesc_context_options o;
    glesc_context_options_init(&o);
    o.device = device;
    o.cache_dir = "off";
    glesc_context *ctx = NULL;
    if (gl_platform_parse(platform, &o.platform) != GLESC_OK ||
        glesc_context_create(&o, &ctx) != GLESC_OK) {
        fprintf(stderr, "glesc-compiler: %s\n", glesc_last_errmsg());
        return 1;
    }
    int rc = gl_context_bind(ctx, "glesc-compiler") == GLESC_OK ? gl_compiler_serve(ctx, fd) : 1;
    glesc_context_destroy(ctx);
    return rc;
}
