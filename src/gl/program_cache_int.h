/*
 * program_cache_int.h — what the program cache (program_cache.c) shares
 * with its compile pool (compile_pool.c): the cache's state and a batch's.
 * Private to those two files.
 */
#ifndef GLESC_GL_PROGRAM_CACHE_INT_H
#define GLESC_GL_PROGRAM_CACHE_INT_H

#include "gl/gl.h"

struct gl_program_cache {
    gl_program **progs; /* every linked program; records never move */
    uint32_t n_progs, cap_progs;
    core_map map; /* key.lo → index in progs */
    /* The disk key after the source hash (driver, glesc and format
     * versions); NULL: no disk entries (cache off, or the driver offers no
     * binary formats). */
    char *key_tail;
    size_t key_tail_len;
    uint64_t compiled, memory_hits, disk_hits, disk_rejects, disk_writes;
    bool parallel;     /* misses of a batch compile concurrently */
    int max_in_flight; /* most compiles started and not yet collected */
    /* Compile threads: a batch's misses are compiled by the GL thread and
     * up to threads - 1 others, each on a helper context of the share
     * group (made at first need, kept); 1: the GL thread alone. */
    int threads;
    EGLContext *helpers;
    int n_helpers;
    /* Compile processes (compile_procs.c): a batch's misses also go to up
     * to procs of them, started at the first batch that has misses to
     * spare and kept for the context's life. */
    int procs;
    char *compiler; /* the processes' program */
    gl_compiler **compilers;
    int n_compilers;
    uint64_t proc_linked; /* programs the processes linked */
    /* A software renderer (llvmpipe) makes a program's machine code at its
     * first dispatch, not at its link: each compile thread then dispatches
     * what it linked once, with zero workgroups (an indirect dispatch from
     * zero_groups, three zero words), so that the code is made on that
     * thread; the GL thread only collects. */
    bool warm_dispatch;
    GLuint zero_groups;
    /* Compiles started by gl_program_start_batch and not yet collected:
     * the driver compiles them while the GL thread goes on. */
    struct bg_compile *bg;
    int n_bg, cap_bg;
};

/* The state of one gl_program_get_batch. */
typedef struct batch {
    const char *const *sources;
    core_hash128 *hash; /* of each source */
    GLuint *pending;    /* a started compile not yet collected, else 0 */
    bool *miss;         /* in no cache: compiled by this batch */
    char **keys;        /* disk keys (NULL: no disk entry) */
    uint64_t *started;  /* core_time_ns when each miss's compile began */
    gl_binary *bin;     /* a miss a compile process linked: its binary */
    size_t key_len;     /* the same for every source */
    int in_flight;
    int done, misses; /* compiles collected, of misses (the compile callback's counts) */
} batch;

/* A program linked from a binary, or 0 when the driver refuses it (or
 * cannot make a program object). */
GLuint gl_program_from_binary(GLenum format, const void *data, GLsizei len);
/* Waits for miss i's link (its logs in the message on failure), then counts
 * it, writes its binary to disk and records it in out[i]. */
glesc_status gl_batch_collect(glesc_context *ctx, batch *b, int i, const gl_program **out);
/* Compiles and collects b's misses on the GL thread, compile threads and
 * compile processes (compile_pool.c). */
glesc_status gl_compile_threaded(glesc_context *ctx, batch *b, int n, const gl_program **out);

#endif
