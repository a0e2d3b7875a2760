/*
 * chain.c — dispatches ordered by flags instead of storage barriers.
 *
 * A storage barrier between two dependent dispatches makes the GPU drain
 * the first before it launches the second: on the H200 that costs a
 * decode step's ~110 dependent dispatches 4–6 µs each (docs/performance.md,
 * *What bounds it*). In a chain, a kernel (emit_kernel_chain's wrapper)
 * instead waits at its start, one invocation a workgroup spinning on an
 * atomic, until the dispatch before it has set its flag to that
 * dispatch's token, runs, and its last workgroup to finish sets its own
 * flag: the second dispatch's workgroups are launched while the first's
 * last ones still run, and what a kernel reads before the wait (a GEMV's
 * weights, which no dispatch writes) overlaps the first's tail. Every
 * storage binding of a chained kernel is coherent: without the barrier,
 * nothing else keeps a compute unit's cache from serving a buffer's old
 * contents.
 *
 * Tokens count the chained dispatches (never 0); a token's slot is its
 * value mod GL_CHAIN_SLOTS, which is safe because a dispatch signals only
 * after the one before it signalled. Every chained dispatch waits for the
 * one before, dependent or not, so that a dispatch's flag means that every
 * dispatch before it finished too; a chain therefore starts only after a
 * storage barrier (one is placed when other dispatches ran since the
 * last), and anything else that touches buffers between dispatches (host
 * copies, uploads) ends it.
 *
 * What GLES does not promise: that the dispatch waited for runs while the
 * waiting one's workgroups occupy the GPU (drivers launch a queue's
 * dispatches in order; NVIDIA's does), and that coherent writes of one
 * dispatch are visible to the next without a barrier. So a chain is used
 * only where GLESC_CHAIN or the device class turns it on, a spin gives up
 * after a bound and sets a fail word in host-visible memory, and the next
 * wait for the GPU that sees it reports an error and turns the chain off
 * (the same programs then run with barriers).
 */
#include <string.h>

#include "gl/gl.h"

/* Flag slots (emit_kernel_chain's GLSL uses the same count). */
#define GL_CHAIN_SLOTS 64u

/* GLESC_CHAIN=1|0; unset: the device class's choice (none yet). */
static bool chain_wanted(const glesc_context *ctx)
{
    long v = -1;
    core_env_long("GLESC_CHAIN", 0, 1, &v);
    if (v >= 0)
        return v == 1;
    (void)ctx;
    return false;
}

glesc_status gl_chain_init(glesc_context *ctx)
{
    memset(&ctx->chain, 0, sizeof ctx->chain);
    if (!chain_wanted(ctx))
        return GLESC_OK;
    GLint points = 0;
    glGetIntegerv(GL_MAX_SHADER_STORAGE_BUFFER_BINDINGS, &points);
    points = CORE_MIN(points, 96);
    /* two binding points above every kernel's, two blocks beside them */
    if (!ctx->fn.BufferStorageEXT || ctx->caps.max_compute_storage_blocks < 4 ||
        points - 2 < ctx->caps.max_compute_storage_blocks) {
        core_log(CORE_LOG_WARN,
                 "GLESC_CHAIN: the driver lacks GL_EXT_buffer_storage or storage bindings "
                 "(%d binding points, %d blocks): dispatches keep their barriers",
                 (int)points, ctx->caps.max_compute_storage_blocks);
        return GLESC_OK;
    }
    static const uint32_t zeros[2 * GL_CHAIN_SLOTS];
    glGenBuffers(1, &ctx->chain.buf);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, ctx->chain.buf);
    glBufferData(GL_SHADER_STORAGE_BUFFER, sizeof zeros, zeros, GL_DYNAMIC_COPY);
    const GLbitfield flags = GL_MAP_READ_BIT | GL_MAP_PERSISTENT_BIT_EXT | GL_MAP_COHERENT_BIT_EXT;
    glGenBuffers(1, &ctx->chain.fail_buf);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, ctx->chain.fail_buf);
    ctx->fn.BufferStorageEXT(GL_SHADER_STORAGE_BUFFER, 16, zeros, flags);
    ctx->chain.fail = glMapBufferRange(GL_SHADER_STORAGE_BUFFER, 0, 16, flags);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, 0);
    glesc_status st = gl_check(ctx, "the dispatch chain's buffers");
    if (st == GLESC_OK && !ctx->chain.fail)
        st = core_err_set(&ctx->err, GLESC_ERROR_GL, "the dispatch chain's fail word: no mapping");
    if (st != GLESC_OK) {
        gl_chain_free(ctx);
        return st;
    }
    ctx->chain.binding = (int)points - 2;
    ctx->chain.on = true;
    return GLESC_OK;
}

void gl_chain_free(glesc_context *ctx)
{
    if (ctx->chain.fail_buf) {
        if (ctx->chain.fail) {
            glBindBuffer(GL_SHADER_STORAGE_BUFFER, ctx->chain.fail_buf);
            glUnmapBuffer(GL_SHADER_STORAGE_BUFFER);
            glBindBuffer(GL_SHADER_STORAGE_BUFFER, 0);
        }
        glDeleteBuffers(1, &ctx->chain.fail_buf);
    }
    if (ctx->chain.buf)
        glDeleteBuffers(1, &ctx->chain.buf);
    memset(&ctx->chain, 0, sizeof ctx->chain);
}

bool gl_chain_order(glesc_context *ctx, const gl_program *prog, bool need_barrier, uint32_t *wait)
{
    *wait = 0;
    if (!ctx->chain.on || prog->chain_loc < 0)
        return need_barrier;
    if (ctx->chain.last) {
        *wait = ctx->chain.last;
        if (need_barrier)
            ctx->chain.replaced++;
        return false;
    }
    /* a chain's first dispatch: after everything before it */
    return need_barrier || ctx->chain.since_barrier > 0;
}

void gl_chain_issue(glesc_context *ctx, const gl_program *prog, uint32_t wait)
{
    ctx->chain.since_barrier++;
    if (prog->chain_loc < 0) {
        ctx->chain.last = 0;
        return;
    }
    uint32_t tok = 0;
    if (ctx->chain.on) {
        if (!ctx->chain.bound) {
            glBindBufferBase(GL_SHADER_STORAGE_BUFFER, (GLuint)ctx->chain.binding, ctx->chain.buf);
            glBindBufferBase(GL_SHADER_STORAGE_BUFFER, (GLuint)ctx->chain.binding + 1,
                             ctx->chain.fail_buf);
            ctx->chain.bound = true;
        }
        if (!++ctx->chain.token)
            ++ctx->chain.token;
        tok = ctx->chain.token;
    }
    glUniform2ui(prog->chain_loc, wait, tok);
    ctx->chain.last = tok;
}

void gl_chain_barrier(glesc_context *ctx)
{
    ctx->chain.last = 0;
    ctx->chain.since_barrier = 0;
}

void gl_chain_break(glesc_context *ctx)
{
    ctx->chain.last = 0;
}

glesc_status gl_chain_check(glesc_context *ctx)
{
    if (!ctx->chain.on || !ctx->chain.fail || !ctx->chain.fail[0])
        return GLESC_OK;
    ctx->chain.on = false;
    ctx->chain.last = 0;
    return core_err_set(&ctx->err, GLESC_ERROR_GL,
                        "a chained dispatch gave up waiting for the one before it (GLESC_CHAIN): "
                        "its results may be wrong; dispatches use storage barriers from now on "
                        "(GLESC_CHAIN=0 keeps the chain off)");
}
