/*
 * args.h — command-line option values shared by the tools: integers and
 * floats checked whole (a message naming the tool, the flag and the value
 * on stderr when they are not), and the GPU platform's names.
 */
#ifndef GLESC_TOOLS_ARGS_H
#define GLESC_TOOLS_ARGS_H

#include <stdbool.h>

#include "glesc.h"

/* v as a decimal integer in lo..hi into *out: 0; otherwise -1 after
 * "PROG: FLAG: 'V' is not an integer in LO..HI" on stderr. */
int tool_parse_long(const char *prog, const char *flag, const char *v, long lo, long hi, long *out);
/* v as a finite number into *out: 0; otherwise -1 after
 * "PROG: FLAG: 'V' is not a number" on stderr. */
int tool_parse_float(const char *prog, const char *flag, const char *v, float *out);
/* The platform called name ("auto", "gbm", "device", "surfaceless", as
 * glesc_platform_name says them) into *out; false when there is none. */
bool tool_parse_platform(const char *name, glesc_platform *out);

#endif
