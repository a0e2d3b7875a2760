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
