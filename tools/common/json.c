/*
 * json.c — see json.h.
 */
#include "common/json.h"

size_t tool_utf8_len(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    /* Overlong forms, surrogates, beyond U+10FFFF. */
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

void tool_json_string(FILE *out, const char *s, size_t n)
{
    const uint8_t *u = (const uint8_t *)s;
    fputc('"', out);
    for (size_t i = 0; i < n;) {
        uint8_t c = u[i];
        const char *esc = NULL;
        switch (c) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        default:
            break;
        }
        if (esc) {
            fputs(esc, out);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(out, "\\u%04x", c);
            i++;
        } else {
            size_t len = tool_utf8_len(u + i, n - i < 4 ? n - i : 4);
            if (len == 0) {
                fputs("\\ufffd", out);
                i++;
            } else {
                fwrite(u + i, 1, len, out);
                i += len;
            }
        }
    }
    fputc('"', out);
}
