/*
 * err.c — status names (generated from GLESC_STATUS_MAP) and the error
 * messages that carry the evidence of a failure. One channel: the calling
 * thread's message (glesc_last_errmsg) holds every failure; a context's own
 * record (glesc_context_errmsg) is a copy kept with the context, so every
 * change to a context's record is made to the thread's too.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "glesc_config.h"

GLESC_API const char *glesc_status_name(glesc_status s)
{
    switch (s) {
#define NAME_(name, value, str)                                                                    \
    case GLESC_##name:                                                                             \
        return "GLESC_" #name;
        GLESC_STATUS_MAP(NAME_)
#undef NAME_
    }
    return "GLESC_UNKNOWN";
}

GLESC_API const char *glesc_status_str(glesc_status s)
{
    switch (s) {
#define STR_(name, value, str)                                                                     \
    case GLESC_##name:                                                                             \
        return str;
        GLESC_STATUS_MAP(STR_)
#undef STR_
    }
    return "unknown status";
}

GLESC_API const char *glesc_version(void)
{
    return GLESC_VERSION;
}

static _Thread_local core_err tls_err;

/* A thread's message is freed when the thread exits: a pthread key whose
 * destructor frees it, set the first time the thread keeps a message
 * (glesc-server's connection threads come and go; each failed request
 * leaked its message before). */
static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static bool tls_key_ok;

static void tls_free(void *p)
{
    core_err *e = p;
    free(e->msg);
    e->msg = NULL;
}

static void tls_key_make(void)
{
    tls_key_ok = pthread_key_create(&tls_key, tls_free) == 0;
}

static void tls_track(core_err *e)
{
    if (e != &tls_err || e->msg)
        return; /* a context's message, or this thread's is tracked already */
    pthread_once(&tls_once, tls_key_make);
    if (tls_key_ok)
        pthread_setspecific(tls_key, e);
}

core_err *core_err_tls(void)
{
    return &tls_err;
}

GLESC_API const char *glesc_last_errmsg(void)
{
    return core_err_msg(&tls_err);
}

/* The thread's message becomes a copy of a context's record e (libc's
 * strdup, as every message). */
static void mirror(const core_err *e)
{
    if (e == &tls_err)
        return;
    char *msg = e->msg ? strdup(e->msg) : NULL;
    free(tls_err.msg);
    tls_err.msg = msg;
    tls_err.status = e->status;
}

/* The message is formatted with libc's malloc, not the hook: an error report
 * must survive an injected or real allocation failure. When even that fails,
 * a static text stands in. */
glesc_status core_err_setv(core_err *e, glesc_status st, const char *fmt, va_list ap)
{
    if (!e)
        e = &tls_err;
    char *msg = NULL;
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n >= 0) {
        msg = malloc((size_t)n + 1);
        if (msg)
            vsnprintf(msg, (size_t)n + 1, fmt, ap);
    }
    tls_track(e);
    free(e->msg);
    e->msg = msg;
    e->status = st;
    mirror(e);
    return st;
}

glesc_status core_err_set(core_err *e, glesc_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    core_err_setv(e, st, fmt, ap);
    va_end(ap);
    return st;
}

void core_err_prefix(core_err *e, const char *fmt, ...)
{
    if (!e)
        e = &tls_err;
    char pre[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    const char *old = e->msg ? e->msg : glesc_status_str(e->status);
    size_t n = strlen(pre) + 2 + strlen(old) + 1;
    char *msg = malloc(n);
    if (!msg)
        return;
    snprintf(msg, n, "%s: %s", pre, old);
    tls_track(e);
    free(e->msg);
    e->msg = msg;
    mirror(e);
}

glesc_status core_err_copy(core_err *dst, const core_err *src)
{
    if (!dst)
        dst = &tls_err;
    if (dst == src)
        return src->status;
    return core_err_set(dst, src->status, "%s", core_err_msg(src));
}

const char *core_err_msg(const core_err *e)
{
    if (!e)
        e = &tls_err;
    if (e->status == GLESC_OK)
        return "";
    return e->msg ? e->msg : glesc_status_str(e->status);
}

const char *core_err_last_failure(const core_err *e)
{
    if (!e)
        e = &tls_err;
    if (e->msg)
        return e->msg;
    return e->status == GLESC_OK ? "" : glesc_status_str(e->status);
}

void core_err_reset(core_err *e)
{
    if (e)
        e->status = GLESC_OK;
    tls_err.status = GLESC_OK;
}

void core_err_clear(core_err *e)
{
    if (!e)
        e = &tls_err;
    free(e->msg);
    e->msg = NULL;
    e->status = GLESC_OK;
}

glesc_status core_struct_read(core_err *e, void *dst, size_t dst_size, const void *src,
                              const char *fn)
{
    if (core_struct_in(dst, dst_size, src))
        return GLESC_OK;
    return core_err_set(e, GLESC_ERROR_INVALID_ARGUMENT,
                        "%s: struct_size %u is too small (use the struct's _init function)", fn,
                        (unsigned)*(const uint32_t *)src);
}
