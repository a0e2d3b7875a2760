/*
 * args.h — command-line option values shared by the tools: integers and
 * floats checked whole (a message naming the tool, the flag and the value
 * on stderr when they are not), and the GPU platform's names.
 */
#ifndef GLESC_TOOLS_ARGS_H
#define GLESC_TOOLS_ARGS_H

#include <stdbool.h>

#include "glesc.h"
#include "glesc_llm.h"

/* v as a decimal integer in lo..hi into *out: 0; otherwise -1 after
 * "PROG: FLAG: 'V' is not an integer in LO..HI" on stderr. */
int tool_parse_long(const char *prog, const char *flag, const char *v, long lo, long hi, long *out);
/* v as a finite number into *out: 0; otherwise -1 after
 * "PROG: FLAG: 'V' is not a number" on stderr. */
int tool_parse_float(const char *prog, const char *flag, const char *v, float *out);
/* The platform called name ("auto", "gbm", "device", "surfaceless", as
 * glesc_platform_name says them) into *out; false when there is none. */
bool tool_parse_platform(const char *name, glesc_platform *out);
/* A KV cache type's name (f32, f16, q8_0, q4_0) into *out; false when name
 * is none of them. */
bool tool_parse_kv_type(const char *name, glesc_dtype *out);
/* A KV cache type as glesc_session_options' kv_type takes it (f32 is
 * GLESC_KV_F32 there, since GLESC_DTYPE_F32 is the default's 0). */
glesc_dtype tool_kv_option(glesc_dtype t);

#endif
