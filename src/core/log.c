/*
 * log.c — stderr logging with a level from GLESC_LOG (error|warn|info|debug),
 * environment helpers and the monotonic clock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/core.h"

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

static core_log_level max_level(void)
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
    if (lvl > max_level())
        return;
    static const char *const names[] = {"error", "warning", "info", "debug"};
    fprintf(stderr, "glesc: %s: ", names[lvl]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

uint64_t core_time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
