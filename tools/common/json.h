/*
 * json.h — JSON output shared by the tools: the one string escaper (and the
 * UTF-8 check it rests on, which gguf-info's text mode also uses), so every
 * tool's JSON is valid UTF-8 whatever bytes a model or file holds.
 */
#ifndef GLESC_TOOLS_JSON_H
#define GLESC_TOOLS_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Length (1..4) of the well-formed UTF-8 sequence at s, which has n > 0
 * bytes; 0 when it is not one (a stray continuation byte, an overlong form,
 * a surrogate, a value past U+10FFFF, or cut off by n). */
size_t tool_utf8_len(const uint8_t *s, size_t n);

/* Writes s[0..n) to out as a JSON string, quotes included: '"' and '\\'
 * escaped, \n \r \t \b \f as such, other control characters (and DEL) as
 * \u00XX, well-formed UTF-8 as it is, and each byte that is not part of
 * well-formed UTF-8 as \ufffd. s may hold any bytes, NUL included. */
void tool_json_string(FILE *out, const char *s, size_t n);

#endif
