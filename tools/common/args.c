/*
 * args.c — see args.h.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"

int tool_parse_long(const char *prog, const char *flag, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "%s: %s: '%s' is not an integer in %ld..%ld\n", prog, flag, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int tool_parse_float(const char *prog, const char *flag, const char *v, float *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x)) {
        fprintf(stderr, "%s: %s: '%s' is not a number\n", prog, flag, v);
        return -1;
    }
    *out = (float)x;
    return 0;
}

bool tool_parse_platform(const char *name, glesc_platform *out)
{
    for (int k = GLESC_PLATFORM_AUTO; k <= GLESC_PLATFORM_SURFACELESS; k++)
        if (!strcmp(name, glesc_platform_name((glesc_platform)k))) {
            *out = (glesc_platform)k;
            return true;
        }
    return false;
}

bool tool_parse_kv_type(const char *name, glesc_dtype *out)
{
    static const glesc_dtype types[] = {GLESC_DTYPE_F32, GLESC_DTYPE_F16, GLESC_DTYPE_Q8_0,
                                        GLESC_DTYPE_Q4_0};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(name, glesc_dtype_name(types[i]))) {
            *out = types[i];
            return true;
        }
    return false;
}

glesc_dtype tool_kv_option(glesc_dtype t)
{
    return t == GLESC_DTYPE_F32 ? GLESC_KV_F32 : t;
}
