/*
 * pool.c — storage buffers by (size class, usage). Activations of one graph
 * step come and go in the same few sizes, so a cache of released buffers
 * turns almost every acquire into a hit; the budget bounds what the cache
 * keeps, least-recently-released buffers go first. Persistent buffers
 * (weights, KV caches) live as long as their tensor and are never reused by
 * another size: they are allocated at their exact size and deleted when
 * released, so they cost no size-class slack and leave nothing cached.
 *
 * The pool also keeps the accounts behind glesc_context_memory: bytes held
 * by usage, what the holders asked for (the rest is size-class rounding),
 * cached bytes, the split at the moment the total was highest, and the
 * most the holders of activations asked for at once.
 */
#include <string.h>

#include "gl/gl.h"

/* Bytes of the pool by holder, summed or at one moment (the peak). */
typedef struct pool_split {
    uint64_t live[GL_USAGE_COUNT_]; /* held, by usage */
    uint64_t requested;             /* asked for by the non-persistent holders */
    uint64_t cached;
} pool_split;

struct gl_pool {
    gl_buffer *live;   /* held by users */
    gl_buffer *cached; /* released, most recent first */
    uint64_t budget, tick;
    uint64_t hits, misses, live_bytes, cached_bytes, peak_bytes, live_n, cached_n;
    pool_split now, at_peak; /* at_peak: when live + cached was peak_bytes */
    uint64_t max_requested;  /* the most now.requested since the peak's reset */
};

static const GLenum usage_hint[GL_USAGE_COUNT_] = {
    [GL_USAGE_WEIGHTS] = GL_STATIC_DRAW,
    [GL_USAGE_ACTIVATIONS] = GL_DYNAMIC_COPY,
    [GL_USAGE_READBACK] = GL_DYNAMIC_READ,
    [GL_USAGE_SCRATCH] = GL_DYNAMIC_COPY,
};

uint64_t gl_pool_size_class(uint64_t size)
{
    if (size <= 256)
        return 256;
    int k = 63 - __builtin_clzll(size);
    uint64_t step = (1ull << k) / 4;
    return (size + step - 1) / step * step;
}

static void list_push(gl_buffer **head, gl_buffer *b)
{
    b->prev = NULL;
    b->next = *head;
    if (*head)
        (*head)->prev = b;
    *head = b;
}

static void list_remove(gl_buffer **head, gl_buffer *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else
        *head = b->next;
    if (b->next)
        b->next->prev = b->prev;
    b->prev = b->next = NULL;
}

glesc_status gl_pool_create(glesc_context *ctx, uint64_t budget)
{
    ctx->pool = core_calloc(1, sizeof *ctx->pool);
    if (!ctx->pool)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "buffer pool");
    ctx->pool->budget = budget;
    return GLESC_OK;
}

static void delete_buffer(glesc_context *ctx, gl_buffer *b)
{
    gl_bound_forget(ctx, b->id); /* deleting unbinds it: the executor's cache must know */
    glDeleteBuffers(1, &b->id);
    core_free(b);
}

void gl_pool_destroy(glesc_context *ctx)
{
    gl_pool *p = ctx->pool;
    if (!p)
        return;
    if (p->live_n)
        core_log(CORE_LOG_WARN, "context destroyed with %llu buffer(s) still held",
                 (unsigned long long)p->live_n);
    while (p->live) {
        gl_buffer *b = p->live;
        list_remove(&p->live, b);
        delete_buffer(ctx, b);
    }
    while (p->cached) {
        gl_buffer *b = p->cached;
        list_remove(&p->cached, b);
        delete_buffer(ctx, b);
    }
    core_free(p);
    ctx->pool = NULL;
}

/* Gives b its data store: b->size bytes for b->usage. */
static glesc_status back(glesc_context *ctx, gl_buffer *b)
{
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, b->id);
    glBufferData(GL_SHADER_STORAGE_BUFFER, (GLsizeiptr)b->size, NULL, usage_hint[b->usage]);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, 0);
    glesc_status st = gl_check(ctx, "glBufferData");
    if (st != GLESC_OK) {
        core_err_prefix(&ctx->err, "allocating a storage buffer of %llu bytes",
                        (unsigned long long)b->size);
        return st;
    }
    b->unbacked = false;
    return GLESC_OK;
}

glesc_status gl_buffer_back(glesc_context *ctx, gl_buffer *b)
{
    return b->unbacked ? back(ctx, b) : GLESC_OK;
}

static glesc_status acquire(glesc_context *ctx, uint64_t size, gl_usage usage, bool backed,
                            gl_buffer **out)
{
    gl_pool *p = ctx->pool;
    *out = NULL;
    uint64_t limit = ctx->caps.max_storage_block_size;
    if ((unsigned)usage >= GL_USAGE_COUNT_)
        return core_err_set(&ctx->err, GLESC_ERROR_INVALID_ARGUMENT, "buffer usage %d", usage);
    if (size > limit)
        return core_err_set(&ctx->err, GLESC_ERROR_LIMIT,
                            "a storage buffer of %llu bytes exceeds the device's storage block "
                            "limit of %llu bytes (GL_MAX_SHADER_STORAGE_BLOCK_SIZE): split it",
                            (unsigned long long)size, (unsigned long long)limit);
    bool exact = usage == GL_USAGE_WEIGHTS; /* persistent: never cached */
    uint64_t cls = exact ? size : gl_pool_size_class(size);
    if (cls > limit)
        cls = limit;
    for (gl_buffer *b = exact ? NULL : p->cached; b; b = b->next) {
        if (b->size == cls && b->usage == usage) {
            list_remove(&p->cached, b);
            p->cached_bytes -= b->size;
            p->cached_n--;
            b->cached = false;
            b->requested = size;
            b->defined = false;
            list_push(&p->live, b);
            p->live_bytes += b->size;
            p->live_n++;
            p->hits++;
            p->now.cached -= b->size;
            p->now.live[usage] += b->size;
            p->now.requested += size;
            p->max_requested = CORE_MAX(p->max_requested, p->now.requested);
            *out = b;
            return GLESC_OK;
        }
    }
    gl_buffer *b = core_calloc(1, sizeof *b);
    if (!b)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "buffer record");
    glGenBuffers(1, &b->id);
    b->size = cls;
    b->requested = size;
    b->usage = usage;
    b->unbacked = true;
    glesc_status st = backed ? back(ctx, b) : GLESC_OK;
    if (st != GLESC_OK) {
        delete_buffer(ctx, b);
        return st;
    }
    list_push(&p->live, b);
    p->live_bytes += cls;
    p->live_n++;
    p->misses++;
    p->now.live[usage] += cls;
    p->now.requested += exact ? 0 : size;
    p->max_requested = CORE_MAX(p->max_requested, p->now.requested);
    if (p->live_bytes + p->cached_bytes > p->peak_bytes) {
        p->peak_bytes = p->live_bytes + p->cached_bytes;
        p->at_peak = p->now;
    }
    *out = b;
    return GLESC_OK;
}

glesc_status gl_pool_acquire(glesc_context *ctx, uint64_t size, gl_usage usage, gl_buffer **out)
{
    return acquire(ctx, size, usage, true, out);
}

glesc_status gl_pool_acquire_unbacked(glesc_context *ctx, uint64_t size, gl_buffer **out)
{
    return acquire(ctx, size, GL_USAGE_WEIGHTS, false, out);
}

/* Deletes cached buffer b. */
static void drop_cached(glesc_context *ctx, gl_buffer *b)
{
    gl_pool *p = ctx->pool;
    list_remove(&p->cached, b);
    p->cached_bytes -= b->size;
    p->cached_n--;
    p->now.cached -= b->size;
    delete_buffer(ctx, b);
}

void gl_pool_trim(glesc_context *ctx, uint64_t budget)
{
    gl_pool *p = ctx->pool;
    while (p->cached_bytes > budget && p->cached) {
        gl_buffer *oldest = p->cached;
        for (gl_buffer *b = p->cached; b; b = b->next)
            if (b->lru_tick < oldest->lru_tick)
                oldest = b;
        drop_cached(ctx, oldest);
    }
}

uint64_t gl_pool_tick(const glesc_context *ctx)
{
    return ctx->pool->tick;
}

void gl_pool_drop_since(glesc_context *ctx, uint64_t tick)
{
    gl_buffer *next;
    for (gl_buffer *b = ctx->pool->cached; b; b = next) {
        next = b->next;
        if (b->lru_tick > tick)
            drop_cached(ctx, b);
    }
}

void gl_pool_release(glesc_context *ctx, gl_buffer *b)
{
    if (!b)
        return;
    gl_pool *p = ctx->pool;
    list_remove(&p->live, b);
    p->live_bytes -= b->size;
    p->live_n--;
    p->now.live[b->usage] -= b->size;
    if (b->usage == GL_USAGE_WEIGHTS) {
        delete_buffer(ctx, b);
        return;
    }
    p->now.requested -= b->requested;
    p->now.cached += b->size;
    b->cached = true;
    b->lru_tick = ++p->tick;
    list_push(&p->cached, b);
    p->cached_bytes += b->size;
    p->cached_n++;
    gl_pool_trim(ctx, p->budget);
}

void gl_pool_stats(const glesc_context *ctx, glesc_stats *st)
{
    const gl_pool *p = ctx->pool;
    st->pool_hits = p->hits;
    st->pool_misses = p->misses;
    st->pool_live_bytes = p->live_bytes;
    st->pool_cached_bytes = p->cached_bytes;
    st->pool_peak_bytes = p->peak_bytes;
    st->pool_live_buffers = p->live_n;
    st->pool_cached_buffers = p->cached_n;
}

void gl_pool_reset_stats(glesc_context *ctx)
{
    gl_pool *p = ctx->pool;
    p->hits = p->misses = 0;
    gl_pool_reset_peak(ctx);
}

void gl_pool_reset_peak(glesc_context *ctx)
{
    gl_pool *p = ctx->pool;
    p->peak_bytes = p->live_bytes + p->cached_bytes;
    p->at_peak = p->now;
    p->max_requested = p->now.requested;
}

static void split_out(const pool_split *s, uint64_t *persistent, uint64_t *activation,
                      uint64_t *cached)
{
    *persistent = s->live[GL_USAGE_WEIGHTS];
    *activation =
        s->live[GL_USAGE_ACTIVATIONS] + s->live[GL_USAGE_READBACK] + s->live[GL_USAGE_SCRATCH];
    *cached = s->cached;
}

GLESC_API void glesc_context_memory(const glesc_context *ctx, glesc_memory_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!ctx)
        return;
    const gl_pool *p = ctx->pool;
    split_out(&p->now, &out->persistent_bytes, &out->activation_bytes, &out->cached_bytes);
    out->activation_requested_bytes = p->now.requested;
    out->total_bytes = p->live_bytes + p->cached_bytes;
    split_out(&p->at_peak, &out->peak_persistent_bytes, &out->peak_activation_bytes,
              &out->peak_cached_bytes);
    out->peak_total_bytes = p->peak_bytes;
    out->max_activation_requested_bytes = p->max_requested;
}

GLESC_API void glesc_context_memory_reset_peak(glesc_context *ctx)
{
    if (ctx)
        gl_pool_reset_peak(ctx);
}
