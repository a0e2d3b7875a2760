/*
 * program_cache.c — compute programs, compiled once per process and, through
 * glGetProgramBinary/glProgramBinary, once per machine.
 *
 * Memory: the linked programs in one array, found through a core_map keyed
 * by the XXH3-128 of the source (its low word in the map, both words
 * compared). Disk: entries of the context's core_disk_cache (see
 * core/disk_cache.h: full key stored and compared, checksummed, written to a
 * unique temporary file and renamed, size-capped with LRU eviction). The key
 * is text, NUL-separated: the source's XXH3-128 (hex), GL_VENDOR,
 * GL_RENDERER, GL_VERSION, the glesc version, the driver's program binary
 * formats and the entry format version, so a driver or glesc update never
 * loads a stale binary. The blob is the binary format (u32, little endian)
 * followed by the program binary. An entry the driver rejects (GL_LINK_STATUS
 * false after glProgramBinary) is deleted and the program compiled again;
 * nothing on the disk path is fatal: an unusable directory only costs compiles.
 * A batch whose entries were refused says so once, as a warning naming the
 * directory and the count (each entry and its reason at info).
 *
 * Compiling: a batch (a plan's kernels) first takes every hit, then
 * compiles the misses on compile threads where there are two or more of
 * them and more than one thread (GLESC_COMPILE_THREADS; by default the
 * processors up to 8, and 1 on NVIDIA's driver, which compiles one
 * program at a time however many threads ask, and for an application's
 * context): each thread makes a helper context of the share group current
 * and takes misses in turn; the GL thread takes them too and alone collects
 * them (below). On a software renderer (llvmpipe), whose machine code is
 * made at a program's first dispatch, each thread also dispatches what it
 * linked with zero workgroups, and the GL thread only collects.
 *
 * Otherwise every miss is started (glCompileShader + glLinkProgram), then
 * collected. Where
 * the driver has GL_KHR_parallel_shader_compile (and GLESC_NO_PARALLEL_COMPILE
 * is not set) it is asked for all the threads it has and compiles the misses
 * concurrently; they are collected as GL_COMPLETION_STATUS_KHR reports them
 * done (their binaries written to disk while the rest still compile), and
 * only when none is done does the collector wait, on the oldest. Without the
 * extension, or with GLESC_NO_PARALLEL_COMPILE=1 (its threads set to 0, the
 * spec's "no additional threads"), each miss is compiled, linked and
 * collected before the next one starts.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gl/gl.h"
#include "glesc_config.h"

/* The blob's layout; part of the key, so a change never reads an old blob. */
#define CACHE_FORMAT_VERSION 2u
#define BLOB_HEADER 4u /* the binary format */

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

/* A compile running in the background (gl_program_start_batch). */
typedef struct bg_compile {
    char *source; /* a copy: the caller's may go */
    core_hash128 hash;
    char *key; /* its disk key, or NULL */
    size_t key_len;
    GLuint prog;
    uint64_t started;
} bg_compile;

static glesc_status bg_collect(glesc_context *ctx, int i, const gl_program **out);

/* ---- the in-memory map ---- */

static gl_program *map_find(const gl_program_cache *c, core_hash128 k)
{
    core_map_probe probe = core_map_probe_start(&c->map, k.lo);
    uint32_t i;
    while (core_map_probe_next(&probe, &i))
        if (core_hash128_eq(c->progs[i]->key, k))
            return c->progs[i];
    return NULL;
}

static bool map_insert(gl_program_cache *c, gl_program *p)
{
    if (c->n_progs == c->cap_progs) {
        uint32_t cap = c->cap_progs ? c->cap_progs * 2 : 64;
        gl_program **v = core_realloc(c->progs, (size_t)cap * sizeof *v);
        if (!v)
            return false;
        c->progs = v;
        c->cap_progs = cap;
    }
    if (!core_map_add(&c->map, p->key.lo, c->n_progs))
        return false;
    c->progs[c->n_progs++] = p;
    return true;
}

/* ---- life cycle ---- */

/* The constant part of the disk key: everything but the source. */
static char *make_key_tail(glesc_context *ctx, size_t *len)
{
    sbuf b;
    sbuf_init(&b);
    const char *parts[] = {ctx->caps.vendor, ctx->caps.renderer, ctx->caps.version, GLESC_VERSION};
    for (size_t i = 0; i < CORE_ARRAY_LEN(parts); i++) {
        sbuf_append(&b, parts[i] ? parts[i] : "");
        sbuf_appendc(&b, '\0'); /* NUL separates the parts */
    }
    GLint n = ctx->caps.num_program_binary_formats;
    GLint *formats = core_calloc((size_t)n, sizeof *formats);
    if (!formats) {
        sbuf_free(&b);
        return NULL;
    }
    glGetIntegerv(GL_PROGRAM_BINARY_FORMATS, formats);
    sbuf_append(&b, "binary formats");
    for (GLint i = 0; i < n; i++)
        sbuf_appendf(&b, " 0x%x", (unsigned)formats[i]);
    core_free(formats);
    sbuf_appendc(&b, '\0');
    sbuf_appendf(&b, "program entry v%u", CACHE_FORMAT_VERSION);
    *len = b.len;
    return sbuf_take(&b);
}

/* Compile threads (see the struct): GLESC_COMPILE_THREADS, else 1 where
 * glesc cannot make helper contexts (an application's context), else
 * the processors, at most 8. */
static int compile_threads(const glesc_context *ctx)
{
    long v;
    if (core_env_long("GLESC_COMPILE_THREADS", 1, 4096, &v))
        return v > 64 ? 64 : (int)v;
    if (!ctx->share_ok || ctx->adopted)
        return 1;
    /* NVIDIA's driver compiles one program of a process at a time: more
     * threads only contend (docs/performance.md, *Time to first token on
     * the H200*) */
    if (ctx->caps.vendor && strstr(ctx->caps.vendor, "NVIDIA"))
        return 1;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

glesc_status gl_program_cache_create(glesc_context *ctx, const char *dir)
{
    gl_program_cache *c = core_calloc(1, sizeof *c);
    if (!c)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "program cache");
    core_map_init(&c->map);
    ctx->programs = c;
    c->parallel = ctx->caps.has_parallel_compile && !core_env_flag("GLESC_NO_PARALLEL_COMPILE");
    if (ctx->fn.MaxShaderCompilerThreadsKHR) /* 0xffffffff: as many as the driver has */
        ctx->fn.MaxShaderCompilerThreadsKHR(c->parallel ? 0xffffffffu : 0u);
    c->threads = compile_threads(ctx);
    c->warm_dispatch = ctx->caps.software;
    glesc_status st = GLESC_OK;
    if (dir && (st = core_disk_cache_open(dir, 0, &ctx->err, &ctx->disk_cache)) != GLESC_OK)
        return st;
    if (ctx->disk_cache && ctx->caps.num_program_binary_formats > 0 &&
        !(c->key_tail = make_key_tail(ctx, &c->key_tail_len)))
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "program cache key");
    return GLESC_OK;
}

void gl_program_cache_drop_memory(glesc_context *ctx)
{
    gl_program_cache *c = ctx->programs;
    for (uint32_t i = 0; i < c->n_progs; i++) {
        glDeleteProgram(c->progs[i]->id);
        core_free(c->progs[i]);
    }
    c->n_progs = 0;
    core_map_clear(&c->map);
}

void gl_program_cache_destroy(glesc_context *ctx)
{
    gl_program_cache *c = ctx->programs;
    if (!c)
        return;
    /* background compiles are finished and recorded (their binaries on
     * disk for the next start), not deleted while the driver compiles */
    if (gl_program_cache_background_finish(ctx) != GLESC_OK)
        core_err_reset(&ctx->err);
    core_free(c->bg);
    gl_program_cache_drop_memory(ctx);
    if (c->zero_groups)
        glDeleteBuffers(1, &c->zero_groups);
    for (int i = 0; i < c->n_helpers; i++)
        gl_helper_destroy(ctx, c->helpers[i]);
    core_free(c->helpers);
    core_free(c->progs);
    core_map_free(&c->map);
    core_free(c->key_tail);
    core_free(c);
    ctx->programs = NULL;
    core_disk_cache_close(ctx->disk_cache);
    ctx->disk_cache = NULL;
}

/* ---- disk entries ---- */

/* The disk key of source (see the top of the file); NULL when disk entries
 * are off or out of memory. core_free it. */
static char *disk_key(const gl_program_cache *c, const char *source, size_t *len)
{
    if (!c->key_tail)
        return NULL;
    char hex[33];
    core_hash128_hex(core_hash128_bytes(source, strlen(source)), hex);
    char *k = core_malloc(33 + c->key_tail_len);
    if (!k)
        return NULL;
    memcpy(k, hex, 33); /* with its NUL */
    memcpy(k + 33, c->key_tail, c->key_tail_len);
    *len = 33 + c->key_tail_len;
    return k;
}

char *gl_program_cache_entry_path(glesc_context *ctx, const char *source)
{
    size_t len;
    char *key = disk_key(ctx->programs, source, &len);
    char *path = key ? core_disk_cache_entry_path(ctx->disk_cache, key, len) : NULL;
    core_free(key);
    return path;
}

/* Tries the disk entry for key; returns a linked program or 0. Entries the
 * disk cache refuses, and binaries the driver refuses, count as rejects. */
static GLuint disk_load(glesc_context *ctx, const char *key, size_t key_len)
{
    gl_program_cache *c = ctx->programs;
    core_disk_cache_stats before, after;
    core_disk_cache_get_stats(ctx->disk_cache, &before);
    unsigned char *blob;
    size_t len;
    bool found = core_disk_cache_get(ctx->disk_cache, key, key_len, (void **)&blob, &len);
    core_disk_cache_get_stats(ctx->disk_cache, &after);
    c->disk_rejects += after.rejects - before.rejects;
    if (!found)
        return 0;
    GLuint prog = 0;
    const char *why = "shorter than its format word";
    if (len > BLOB_HEADER && len - BLOB_HEADER <= INT32_MAX) {
        GLenum format = core_le32(blob);
        if (!(prog = glCreateProgram())) { /* not the entry's fault */
            core_free(blob);
            return 0;
        }
        glProgramBinary(prog, format, blob + BLOB_HEADER, (GLsizei)(len - BLOB_HEADER));
        GLint ok = GL_FALSE;
        glGetProgramiv(prog, GL_LINK_STATUS, &ok);
        while (glGetError() != GL_NO_ERROR) /* a rejected format raises GL_INVALID_ENUM */
            ok = GL_FALSE;
        if (!ok) {
            glDeleteProgram(prog);
            prog = 0;
            why = "the driver rejected the binary";
        }
    }
    core_free(blob);
    if (!prog) {
        char *path = core_disk_cache_entry_path(ctx->disk_cache, key, key_len);
        core_log(CORE_LOG_INFO, "program cache: %s: %s; deleted, recompiling",
                 path ? path : "entry", why);
        core_free(path);
        core_disk_cache_remove(ctx->disk_cache, key, key_len);
        c->disk_rejects++;
        return 0;
    }
    c->disk_hits++;
    return prog;
}

static void disk_store(glesc_context *ctx, GLuint prog, const char *key, size_t key_len)
{
    gl_program_cache *c = ctx->programs;
    GLint len = 0;
    glGetProgramiv(prog, GL_PROGRAM_BINARY_LENGTH, &len);
    if (len <= 0)
        return;
    unsigned char *buf = core_malloc(BLOB_HEADER + (size_t)len);
    if (!buf)
        return;
    GLenum format = 0;
    GLsizei got = 0;
    glGetProgramBinary(prog, len, &got, &format, buf + BLOB_HEADER);
    if (glGetError() == GL_NO_ERROR && got > 0) {
        core_put_le32(buf, format);
        if (core_disk_cache_put(ctx->disk_cache, key, key_len, buf, BLOB_HEADER + (size_t)got))
            c->disk_writes++;
    }
    core_free(buf);
}

static gl_program *make_program(glesc_context *ctx, GLuint id, core_hash128 key)
{
    gl_program *p = core_calloc(1, sizeof *p);
    if (!p) {
        glDeleteProgram(id);
        core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "program record");
        return NULL;
    }
    p->id = id;
    p->key = key;
    glGetProgramiv(id, GL_COMPUTE_WORK_GROUP_SIZE, p->local_size);
    if (!map_insert(ctx->programs, p)) {
        glDeleteProgram(id);
        core_free(p);
        core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "program cache map");
        return NULL;
    }
    return p;
}

/* The state of one gl_program_get_batch. */
typedef struct batch {
    const char *const *sources;
    core_hash128 *hash; /* of each source */
    GLuint *pending;    /* a started compile not yet collected, else 0 */
    bool *miss;         /* in no cache: compiled by this batch */
    char **keys;        /* disk keys (NULL: no disk entry) */
    uint64_t *started;  /* core_time_ns when each miss's compile began */
    size_t key_len;     /* the same for every source */
    int in_flight;
    int done, misses; /* compiles collected, of misses (the compile callback's counts) */
} batch;

/* The kernel name of a generated source ("// glesc kernel: NAME"), or "". */
static void kernel_name(const char *src, char *buf, size_t cap)
{
    const char *p = strstr(src, "// glesc kernel: ");
    size_t n = 0;
    if (p) {
        p += strlen("// glesc kernel: ");
        n = strcspn(p, "\n");
        n = n < cap - 1 ? n : cap - 1;
        memcpy(buf, p, n);
    }
    buf[n] = 0;
}

/* Waits for miss i's link (its logs in the message on failure), then counts
 * it, writes its binary to disk and records it. */
static glesc_status collect(glesc_context *ctx, batch *b, int i, const gl_program **out)
{
    gl_program_cache *c = ctx->programs;
    GLuint id = b->pending[i];
    b->pending[i] = 0;
    b->in_flight--;
    glesc_status st = gl_compile_finish(ctx, id, b->sources[i]);
    if (st != GLESC_OK) {
        glDeleteProgram(id);
        return st;
    }
    c->compiled++;
    char name[160];
    kernel_name(b->sources[i], name, sizeof name);
    core_log(CORE_LOG_DEBUG, "program cache: %s compiled and linked %.1f ms after it began",
             *name ? name : "(unnamed)", (double)(core_time_ns() - b->started[i]) / 1e6);
    if (b->keys[i])
        disk_store(ctx, id, b->keys[i], b->key_len);
    out[i] = make_program(ctx, id, b->hash[i]);
    if (ctx->compile_fn)
        ctx->compile_fn(ctx->compile_user, ++b->done, b->misses, name);
    return out[i] ? GLESC_OK : ctx->err.status;
}

/* Collects every started compile: whichever the driver reports complete
 * first; when none is, waits on the oldest (no spinning). */
static glesc_status collect_all(glesc_context *ctx, batch *b, int n, const gl_program **out)
{
    while (b->in_flight > 0) {
        int pick = -1, oldest = -1;
        for (int i = 0; i < n && pick < 0; i++) {
            if (!b->pending[i])
                continue;
            if (oldest < 0)
                oldest = i;
            GLint done = GL_FALSE;
            glGetProgramiv(b->pending[i], GL_COMPLETION_STATUS_KHR, &done);
            if (done)
                pick = i;
        }
        glesc_status st = collect(ctx, b, pick >= 0 ? pick : oldest, out);
        if (st != GLESC_OK)
            return st;
    }
    return GLESC_OK;
}

/* ---- compiles in the background ---- */

/* The background compile of source (hash h), or -1. */
static int bg_find(const gl_program_cache *c, core_hash128 h, const char *source)
{
    for (int i = 0; i < c->n_bg; i++)
        if (core_hash128_eq(c->bg[i].hash, h) && !strcmp(c->bg[i].source, source))
            return i;
    return -1;
}

/* Waits for background compile i's link, takes it off the list and records
 * it as collect does a batch's (*out: the program). */
static glesc_status bg_collect(glesc_context *ctx, int i, const gl_program **out)
{
    gl_program_cache *c = ctx->programs;
    bg_compile e = c->bg[i];
    c->bg[i] = c->bg[--c->n_bg];
    *out = NULL;
    glesc_status st = gl_compile_finish(ctx, e.prog, e.source);
    if (st == GLESC_OK) {
        c->compiled++;
        char name[160];
        kernel_name(e.source, name, sizeof name);
        core_log(CORE_LOG_DEBUG,
                 "program cache: %s compiled and linked in the background, %.1f ms after it began",
                 *name ? name : "(unnamed)", (double)(core_time_ns() - e.started) / 1e6);
        if (e.key)
            disk_store(ctx, e.prog, e.key, e.key_len);
        if (!(*out = make_program(ctx, e.prog, e.hash)))
            st = ctx->err.status;
    } else {
        glDeleteProgram(e.prog);
    }
    core_free(e.source);
    core_free(e.key);
    return st;
}

bool gl_program_cache_background(const glesc_context *ctx)
{
    const gl_program_cache *c = ctx->programs;
    return c->parallel && c->threads <= 1;
}

glesc_status gl_program_start_batch(glesc_context *ctx, const char *const *sources, int n)
{
    gl_program_cache *c = ctx->programs;
    if (!gl_program_cache_background(ctx))
        return GLESC_OK;
    for (int i = 0; i < n; i++) {
        core_hash128 h = core_hash128_bytes(sources[i], strlen(sources[i]));
        if (map_find(c, h) || bg_find(c, h, sources[i]) >= 0)
            continue;
        size_t key_len = 0;
        char *key = c->key_tail ? disk_key(c, sources[i], &key_len) : NULL;
        GLuint id = key ? disk_load(ctx, key, key_len) : 0;
        if (id) {
            core_free(key);
            if (!make_program(ctx, id, h))
                return ctx->err.status;
            continue;
        }
        if (c->n_bg == c->cap_bg) {
            int cap = c->cap_bg ? 2 * c->cap_bg : 16;
            bg_compile *v = core_realloc(c->bg, (size_t)cap * sizeof *v);
            if (!v) {
                core_free(key);
                return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "background compiles");
            }
            c->bg = v;
            c->cap_bg = cap;
        }
        bg_compile e = {.hash = h, .key = key, .key_len = key_len, .started = core_time_ns()};
        e.source = core_strdup(sources[i]);
        glesc_status st =
            e.source ? gl_compile_start(ctx, sources[i], &e.prog)
                     : core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "background compiles");
        if (st != GLESC_OK) {
            core_free(e.source);
            core_free(key);
            return st;
        }
        c->bg[c->n_bg++] = e;
    }
    return GLESC_OK;
}

bool gl_program_cache_background_done(glesc_context *ctx)
{
    gl_program_cache *c = ctx->programs;
    for (int i = c->n_bg - 1; i >= 0; i--) {
        GLint done = GL_FALSE;
        glGetProgramiv(c->bg[i].prog, GL_COMPLETION_STATUS_KHR, &done);
        const gl_program *p;
        if (done && bg_collect(ctx, i, &p) != GLESC_OK) {
            /* compiled again, and reported, by the batch that needs it */
            core_log(CORE_LOG_WARN, "program cache: a background compile failed: %s",
                     core_err_msg(&ctx->err));
            core_err_reset(&ctx->err);
        }
    }
    return c->n_bg == 0;
}

glesc_status gl_program_cache_background_finish(glesc_context *ctx)
{
    gl_program_cache *c = ctx->programs;
    glesc_status first = GLESC_OK;
    char msg[512] = "";
    while (c->n_bg > 0) {
        const gl_program *p;
        glesc_status st = bg_collect(ctx, 0, &p);
        if (st != GLESC_OK && first == GLESC_OK) {
            first = st;
            snprintf(msg, sizeof msg, "%s", core_err_msg(&ctx->err));
        }
    }
    return first == GLESC_OK ? GLESC_OK
                             : core_err_set(&ctx->err, first, "a background compile: %s", msg);
}

/* ---- compile threads ---- */

/* A threaded batch: the misses (todo) are taken in order by the GL thread
 * and the workers; each compiled one is queued (done) for the GL thread,
 * which alone collects (binary to disk, record, progress callback). */
typedef struct compile_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const glesc_context *ctx;
    batch *b;
    int *todo, n_todo, next; /* misses; the next to take */
    int *done, n_done;       /* compiled, in the order they finished */
    GLuint zero_groups;      /* warm dispatches' indirect buffer, else 0 */
    bool stop;               /* the GL thread failed: take no more */
} compile_pool;

typedef struct compile_worker {
    compile_pool *p;
    EGLContext helper;
    pthread_t thread;
} compile_worker;

/* Takes the next miss (-1: none left); under p->mu. */
static int pool_take(compile_pool *p)
{
    return p->stop || p->next >= p->n_todo ? -1 : p->todo[p->next++];
}

static void pool_finished(compile_pool *p, int i, GLuint prog)
{
    pthread_mutex_lock(&p->mu);
    p->b->pending[i] = prog;
    p->done[p->n_done++] = i;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void *compile_worker_main(void *arg)
{
    compile_worker *w = arg;
    compile_pool *p = w->p;
    if (!gl_helper_bind(p->ctx, w->helper))
        return NULL; /* the GL thread compiles what is left */
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int i = pool_take(p);
        pthread_mutex_unlock(&p->mu);
        if (i < 0)
            break;
        const char *failed = "";
        p->b->started[i] = core_time_ns(); /* read by the GL thread after pool_finished */
        GLuint prog = gl_compile_link(p->b->sources[i], &failed);
        if (prog) {
            GLint ok = GL_FALSE; /* waits for the link */
            glGetProgramiv(prog, GL_LINK_STATUS, &ok);
            if (ok && p->zero_groups) {
                glUseProgram(prog);
                glBindBuffer(GL_DISPATCH_INDIRECT_BUFFER, p->zero_groups);
                glDispatchComputeIndirect(0);
                glUseProgram(0);
            }
        }
        /* complete before another context of the group uses it */
        glFinish();
        pool_finished(p, i, prog); /* 0: the GL thread compiles it again */
    }
    gl_helper_release(p->ctx);
    return NULL;
}

/* Up to want helper contexts (made once, kept for the context's life); how
 * many there are. A driver that refuses one gets no more requests. */
static int helpers_ensure(glesc_context *ctx, int want)
{
    gl_program_cache *c = ctx->programs;
    if (want <= c->n_helpers)
        return want;
    EGLContext *v = core_realloc(c->helpers, (size_t)want * sizeof *v);
    if (!v)
        return c->n_helpers;
    c->helpers = v;
    while (c->n_helpers < want) {
        EGLContext h;
        if (gl_helper_create(ctx, &h) != GLESC_OK) {
            core_log(CORE_LOG_INFO, "program cache: %s; compiling on %d thread%s",
                     glesc_context_errmsg(ctx), c->n_helpers + 1, c->n_helpers ? "s" : "");
            core_err_reset(&ctx->err);
            c->threads = c->n_helpers + 1;
            break;
        }
        c->helpers[c->n_helpers++] = h;
    }
    return c->n_helpers;
}

/* Compiles and collects b's misses on the GL thread and compile threads. */
static glesc_status compile_threaded(glesc_context *ctx, batch *b, int n, const gl_program **out)
{
    gl_program_cache *c = ctx->programs;
    compile_pool p = {.ctx = ctx, .b = b};
    p.todo = core_calloc((size_t)b->misses, sizeof *p.todo);
    p.done = core_calloc((size_t)b->misses, sizeof *p.done);
    /* the GL thread compiles too, except where the workers dispatch (its
     * context's bindings are the executor's) */
    int n_workers = CORE_MIN(c->threads, b->misses) - (c->warm_dispatch ? 0 : 1);
    n_workers = helpers_ensure(ctx, n_workers);
    if (c->warm_dispatch && n_workers > 0 && !c->zero_groups) {
        static const GLuint zero[3];
        glGenBuffers(1, &c->zero_groups);
        glBindBuffer(GL_DISPATCH_INDIRECT_BUFFER, c->zero_groups);
        glBufferData(GL_DISPATCH_INDIRECT_BUFFER, sizeof zero, zero, GL_STATIC_DRAW);
        glBindBuffer(GL_DISPATCH_INDIRECT_BUFFER, 0);
        glFinish(); /* complete before the helpers bind it */
    }
    p.zero_groups = c->warm_dispatch ? c->zero_groups : 0;
    compile_worker *w = core_calloc((size_t)(n_workers > 0 ? n_workers : 1), sizeof *w);
    if (!p.todo || !p.done || !w) {
        core_free(p.todo);
        core_free(p.done);
        core_free(w);
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "compile threads");
    }
    for (int i = 0; i < n; i++)
        if (b->miss[i])
            p.todo[p.n_todo++] = i;
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    int started = 0;
    for (int k = 0; k < n_workers; k++) {
        w[started] = (compile_worker){.p = &p, .helper = c->helpers[k]};
        if (pthread_create(&w[started].thread, NULL, compile_worker_main, &w[started]) == 0)
            started++;
    }
    b->in_flight = p.n_todo;
    int at_once = started + (p.zero_groups && started ? 0 : 1);
    if (at_once > c->max_in_flight)
        c->max_in_flight = at_once;
    glesc_status st = GLESC_OK;
    int collected = 0, seen = 0;
    pthread_mutex_lock(&p.mu);
    while (collected < p.n_todo && st == GLESC_OK) {
        int i;
        if (seen < p.n_done) { /* a compiled one: collect it */
            i = p.done[seen++];
            pthread_mutex_unlock(&p.mu);
            if (!b->pending[i]) { /* a worker could not make its objects */
                b->started[i] = core_time_ns();
                st = gl_compile_start(ctx, b->sources[i], &b->pending[i]);
            }
            if (st == GLESC_OK)
                st = collect(ctx, b, i, out);
            collected++;
        } else if ((!p.zero_groups || started == 0) && (i = pool_take(&p)) >= 0) {
            /* the GL thread compiles too (all of them if no worker started) */
            pthread_mutex_unlock(&p.mu);
            GLuint prog = 0;
            b->started[i] = core_time_ns();
            st = gl_compile_start(ctx, b->sources[i], &prog);
            if (st == GLESC_OK)
                pool_finished(&p, i, prog);
        } else {
            pthread_cond_wait(&p.cv, &p.mu);
            continue;
        }
        pthread_mutex_lock(&p.mu);
    }
    p.stop = true;
    pthread_mutex_unlock(&p.mu);
    for (int k = 0; k < started; k++)
        pthread_join(w[k].thread, NULL);
    pthread_cond_destroy(&p.cv);
    pthread_mutex_destroy(&p.mu);
    core_free(p.todo);
    core_free(p.done);
    core_free(w);
    return st;
}

glesc_status gl_program_get_batch(glesc_context *ctx, const char *const *sources, int n,
                                  const gl_program **out)
{
    gl_program_cache *c = ctx->programs;
    size_t cap = (size_t)(n > 0 ? n : 1);
    batch b = {.sources = sources};
    b.hash = core_calloc(cap, sizeof *b.hash);
    b.pending = core_calloc(cap, sizeof *b.pending);
    b.miss = core_calloc(cap, sizeof *b.miss);
    b.keys = core_calloc(cap, sizeof *b.keys);
    b.started = core_calloc(cap, sizeof *b.started);
    uint64_t rejects = c->disk_rejects;
    glesc_status st = GLESC_OK;
    if (!b.hash || !b.pending || !b.miss || !b.keys || !b.started) {
        st = core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "program batch");
        goto done;
    }
    /* Pass 1: memory and disk hits; the rest are misses, counted for the
     * compile callback (a source twice in the batch is one miss). */
    bool *miss = b.miss;
    for (int i = 0; i < n; i++) {
        out[i] = NULL;
        b.hash[i] = core_hash128_bytes(sources[i], strlen(sources[i]));
        /* The same source twice in one batch: compile it once (counted
         * alike in both modes: not a memory hit). */
        bool dup = false;
        for (int j = 0; j < i && !dup; j++)
            dup =
                miss[j] && core_hash128_eq(b.hash[j], b.hash[i]) && !strcmp(sources[j], sources[i]);
        if (dup)
            continue;
        if ((out[i] = map_find(c, b.hash[i]))) {
            c->memory_hits++;
            continue;
        }
        int bi = bg_find(c, b.hash[i], sources[i]);
        if (bi >= 0) { /* started ahead: waited for here if not done yet */
            if ((st = bg_collect(ctx, bi, &out[i])) != GLESC_OK)
                goto done;
            continue;
        }
        if (c->key_tail) {
            b.keys[i] = disk_key(c, sources[i], &b.key_len);
            GLuint id = b.keys[i] ? disk_load(ctx, b.keys[i], b.key_len) : 0;
            if (id) {
                if (!(out[i] = make_program(ctx, id, b.hash[i]))) {
                    st = ctx->err.status;
                    goto done;
                }
                continue;
            }
        }
        miss[i] = true;
        b.misses++;
    }
    if (b.misses && ctx->compile_fn)
        ctx->compile_fn(ctx->compile_user, 0, b.misses, NULL);
    bool threaded = c->threads > 1 && b.misses > 1;
    if (threaded && (st = compile_threaded(ctx, &b, n, out)) != GLESC_OK)
        goto done;
    /* Otherwise start compiling every miss (and, when compiles do not run
     * concurrently, finish it before the next). */
    for (int i = 0; i < n && !threaded; i++) {
        if (!miss[i])
            continue;
        b.started[i] = core_time_ns();
        if ((st = gl_compile_start(ctx, sources[i], &b.pending[i])) != GLESC_OK)
            goto done;
        if (++b.in_flight > c->max_in_flight)
            c->max_in_flight = b.in_flight;
        if (!c->parallel && (st = collect(ctx, &b, i, out)) != GLESC_OK)
            goto done;
    }
    /* Pass 2: collect the concurrent compiles. */
    if ((st = collect_all(ctx, &b, n, out)) != GLESC_OK)
        goto done;
    /* Duplicates within the batch. */
    for (int i = 0; i < n; i++)
        if (!out[i])
            out[i] = map_find(c, b.hash[i]);
    st = gl_check(ctx, "program cache");

done:
    if (c->disk_rejects > rejects) {
        uint64_t k = c->disk_rejects - rejects;
        core_log(CORE_LOG_WARN,
                 "program cache: %llu cached program%s in %s %s damaged, foreign or refused by "
                 "the driver: deleted and compiled again (GLESC_LOG=info names %s)",
                 (unsigned long long)k, k > 1 ? "s" : "", core_disk_cache_dir(ctx->disk_cache),
                 k > 1 ? "were" : "was", k > 1 ? "them" : "it");
    }
    if (b.pending)
        for (int i = 0; i < n; i++)
            if (b.pending[i])
                glDeleteProgram(b.pending[i]);
    if (b.keys)
        for (int i = 0; i < n; i++)
            core_free(b.keys[i]);
    core_free(b.hash);
    core_free(b.pending);
    core_free(b.miss);
    core_free(b.keys);
    core_free(b.started);
    return st;
}

glesc_status gl_program_get(glesc_context *ctx, const char *source, const gl_program **out)
{
    return gl_program_get_batch(ctx, &source, 1, out);
}

void gl_program_cache_stats(const glesc_context *ctx, glesc_stats *st)
{
    const gl_program_cache *c = ctx->programs;
    st->programs_compiled = c->compiled;
    st->program_memory_hits = c->memory_hits;
    st->program_disk_hits = c->disk_hits;
    st->program_disk_rejects = c->disk_rejects;
    st->program_disk_writes = c->disk_writes;
}

void gl_program_cache_reset_stats(glesc_context *ctx)
{
    gl_program_cache *c = ctx->programs;
    c->compiled = c->memory_hits = c->disk_hits = c->disk_rejects = c->disk_writes = 0;
    c->max_in_flight = 0;
}

bool gl_program_cache_parallel(const glesc_context *ctx)
{
    return ctx->programs->parallel;
}

int gl_program_cache_max_in_flight(const glesc_context *ctx)
{
    return ctx->programs->max_in_flight;
}
