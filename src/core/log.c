/*
 * log.c — logging: messages at or below the level (glesc_set_log_level,
 * else GLESC_LOG = error|warn|info|debug, else warn) go to the application's
 * callback (glesc_set_log_callback) or to stderr; environment helpers and
 * the monotonic clock.
 *
 * The callback and its user pointer are one pair under a mutex that is also
 * held while the callback runs: messages of several threads reach it one at
 * a time, and once glesc_set_log_callback returns the old pair is no longer
 * in use (its user data may be freed).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/core.h"

_Static_assert((int)CORE_LOG_ERROR == (int)GLESC_LOG_ERROR &&
                   (int)CORE_LOG_WARN == (int)GLESC_LOG_WARN &&
                   (int)CORE_LOG_INFO == (int)GLESC_LOG_INFO &&
                   (int)CORE_LOG_DEBUG == (int)GLESC_LOG_DEBUG,
               "core_log_level and glesc_log_level must agree");

const char *core_env(const char *name)
{
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

bool core_env_flag(const char *name)
{
    const char *v = core_env(name);
    return v && (!strcmp(v, "1") || !strcasecmp(v, "yes") || !strcasecmp(v, "true") ||
                 !strcasecmp(v, "on"));
}

bool core_env_long(const char *name, long lo, long hi, long *out)
{
    const char *v = core_env(name);
    if (!v)
        return false;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (*end || errno || n < lo || n > hi) {
        core_log(CORE_LOG_WARN, "%s=%s is not a whole number in %ld..%ld; ignored", name, v, lo,
                 hi);
        return false;
    }
    *out = n;
    return true;
}

bool core_parse_size(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    unsigned shift = 0;
    if (*end == 'k' || *end == 'K')
        shift = 10;
    else if (*end == 'm' || *end == 'M')
        shift = 20;
    else if (*end == 'g' || *end == 'G')
        shift = 30;
    if (shift)
        end++;
    if (errno || *end || n == 0 || n > (UINT64_MAX >> shift))
        return false;
    *out = (uint64_t)n << shift;
    return true;
}

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static glesc_log_fn log_fn;
static void *log_user;
/* glesc_set_log_level's level, or -1 for GLESC_LOG / the default. */
static int api_level = -1;

GLESC_API void glesc_set_log_callback(glesc_log_fn fn, void *user)
{
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_user = fn ? user : NULL;
    pthread_mutex_unlock(&log_lock);
}

GLESC_API void glesc_set_log_level(glesc_log_level level)
{
    int v =
        (int)level >= (int)GLESC_LOG_ERROR && (int)level <= (int)GLESC_LOG_DEBUG ? (int)level : -1;
    pthread_mutex_lock(&log_lock);
    api_level = v;
    pthread_mutex_unlock(&log_lock);
}

static core_log_level env_level(void)
{
    const char *v = core_env("GLESC_LOG");
    if (!v)
        return CORE_LOG_WARN;
    if (!strcasecmp(v, "error"))
        return CORE_LOG_ERROR;
    if (!strcasecmp(v, "info"))
        return CORE_LOG_INFO;
    if (!strcasecmp(v, "debug"))
        return CORE_LOG_DEBUG;
    return CORE_LOG_WARN;
}

void core_log(core_log_level lvl, const char *fmt, ...)
{
    pthread_mutex_lock(&log_lock);
    core_log_level max = api_level >= 0 ? (core_log_level)api_level : env_level();
    if (lvl > max) {
        pthread_mutex_unlock(&log_lock);
        return;
    }
    /* Formatted with libc's allocator (as error messages are): a log line
     * must survive an injected allocation failure. */
    char small[512], *msg = small;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof small && (msg = malloc((size_t)n + 1)) != NULL) {
        va_start(ap, fmt);
        vsnprintf(msg, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    if (!msg)
        msg = small; /* truncated rather than lost */
    if (log_fn) {
        log_fn(log_user, (glesc_log_level)lvl, msg);
    } else {
        static const char *const names[] = {"error", "warning", "info", "debug"};
        fprintf(stderr, "glesc: %s: %s\n", names[lvl], msg);
    }
    pthread_mutex_unlock(&log_lock);
    if (msg != small)
        free(msg);
}

uint64_t core_time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
