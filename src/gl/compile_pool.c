/*
 * compile_pool.c — a batch's misses compiled at once (program_cache.c's
 * gl_program_get_batch): by the GL thread, compile threads on helper
 * contexts of the share group, and compile processes (compile_procs.c),
 * each with a worker thread here. Workers take the misses in order; the GL
 * thread alone collects them (binary to disk, record, progress callback).
 */
#include <pthread.h>
#include <string.h>

#include "gl/gl.h"
#include "gl/program_cache_int.h"

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
    EGLContext helper; /* a compile thread's, or */
    gl_compiler *proc; /* a compile process's */
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

/* A compile process's worker: hands the misses it takes to the process;
 * what that cannot link comes back without a binary, for the GL thread. */
static void *compile_proc_main(void *arg)
{
    compile_worker *w = arg;
    compile_pool *p = w->p;
    /* one still starting is waited for while there is work it could take */
    for (int r; (r = gl_compiler_wait(w->proc, p->ctx, 10)) <= 0;) {
        pthread_mutex_lock(&p->mu);
        bool left = !p->stop && p->next < p->n_todo;
        pthread_mutex_unlock(&p->mu);
        if (r < 0 || !left)
            return NULL;
    }
    for (bool alive = true; alive;) {
        pthread_mutex_lock(&p->mu);
        int i = pool_take(p);
        pthread_mutex_unlock(&p->mu);
        if (i < 0)
            break;
        p->b->started[i] = core_time_ns();
        alive = gl_compiler_compile(w->proc, p->b->sources[i], &p->b->bin[i]) >= 0;
        pool_finished(p, i, 0);
    }
    return NULL;
}

/* Up to want compile processes (started once, kept; unusable ones are
 * replaced); how many there are. */
static int compilers_ensure(glesc_context *ctx, int want)
{
    gl_program_cache *c = ctx->programs;
    for (int i = c->n_compilers - 1; i >= 0; i--)
        if (!gl_compiler_usable(c->compilers[i])) {
            gl_compiler_destroy(c->compilers[i]);
            c->compilers[i] = c->compilers[--c->n_compilers];
        }
    if (want <= c->n_compilers)
        return want < 0 ? 0 : want;
    gl_compiler **v = core_realloc(c->compilers, (size_t)want * sizeof *v);
    if (!v)
        return c->n_compilers;
    c->compilers = v;
    while (c->n_compilers < want) {
        gl_compiler *h = gl_compiler_spawn(ctx, c->compiler);
        if (!h) {
            c->procs = c->n_compilers; /* none to be had: stop asking */
            break;
        }
        c->compilers[c->n_compilers++] = h;
    }
    return c->n_compilers;
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

glesc_status gl_compile_threaded(glesc_context *ctx, batch *b, int n, const gl_program **out)
{
    gl_program_cache *c = ctx->programs;
    compile_pool p = {.ctx = ctx, .b = b};
    p.todo = core_calloc((size_t)b->misses, sizeof *p.todo);
    p.done = core_calloc((size_t)b->misses, sizeof *p.done);
    /* the GL thread compiles too, except where the workers dispatch (its
     * context's bindings are the executor's) */
    int n_workers = CORE_MIN(c->threads, b->misses) - (c->warm_dispatch ? 0 : 1);
    n_workers = helpers_ensure(ctx, n_workers);
    int n_procs = c->procs > 0 ? compilers_ensure(ctx, CORE_MIN(c->procs, b->misses - 1)) : 0;
    if (c->warm_dispatch && n_workers > 0 && !c->zero_groups) {
        static const GLuint zero[3];
        glGenBuffers(1, &c->zero_groups);
        glBindBuffer(GL_DISPATCH_INDIRECT_BUFFER, c->zero_groups);
        glBufferData(GL_DISPATCH_INDIRECT_BUFFER, sizeof zero, zero, GL_STATIC_DRAW);
        glBindBuffer(GL_DISPATCH_INDIRECT_BUFFER, 0);
        glFinish(); /* complete before the helpers bind it */
    }
    p.zero_groups = c->warm_dispatch ? c->zero_groups : 0;
    if (n_workers < 0)
        n_workers = 0;
    compile_worker *w = core_calloc((size_t)(n_workers + n_procs + 1), sizeof *w);
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
    for (int k = 0; k < n_workers + n_procs; k++) {
        bool proc = k >= n_workers;
        w[started] = (compile_worker){.p = &p};
        if (proc)
            w[started].proc = c->compilers[k - n_workers];
        else
            w[started].helper = c->helpers[k];
        if (pthread_create(&w[started].thread, NULL, proc ? compile_proc_main : compile_worker_main,
                           &w[started]) == 0)
            started++;
    }
    b->in_flight = p.n_todo;
    int at_once = started + (p.zero_groups && started ? 0 : 1);
    if (at_once > c->max_in_flight)
        c->max_in_flight = at_once;
    glesc_status st = GLESC_OK;
    int collected = 0, seen = 0, by_procs = 0;
    pthread_mutex_lock(&p.mu);
    while (collected < p.n_todo && st == GLESC_OK) {
        int i;
        if (seen < p.n_done) { /* a compiled one: collect it */
            i = p.done[seen++];
            pthread_mutex_unlock(&p.mu);
            gl_binary *bin = &b->bin[i];
            if (!b->pending[i] && bin->data && bin->len <= INT32_MAX) { /* a process linked it */
                b->pending[i] = gl_program_from_binary(bin->format, bin->data, (GLsizei)bin->len);
                by_procs += b->pending[i] != 0;
            }
            if (!b->pending[i]) { /* a worker could not make its objects or link it */
                b->started[i] = core_time_ns();
                st = gl_compile_start(ctx, b->sources[i], &b->pending[i]);
            }
            if (st == GLESC_OK)
                st = gl_batch_collect(ctx, b, i, out);
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
    c->proc_linked += (uint64_t)by_procs;
    if (n_procs)
        core_log(CORE_LOG_DEBUG, "program cache: compile processes linked %d of %d programs",
                 by_procs, p.n_todo);
    pthread_cond_destroy(&p.cv);
    pthread_mutex_destroy(&p.mu);
    core_free(p.todo);
    core_free(p.done);
    core_free(w);
    return st;
}
