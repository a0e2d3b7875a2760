/*
 * sbuf.c — the string builder every text producer writes through (the kernel
 * emitter above all). Out-of-memory is sticky: once an append fails, later
 * appends do nothing and sbuf_str() returns NULL, so callers check once.
 */
#include <stdio.h>
#include <string.h>

#include "core/core.h"

void sbuf_init(sbuf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = false;
}

void sbuf_free(sbuf *b)
{
    core_free(b->data);
    sbuf_init(b);
}

void sbuf_reset(sbuf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static bool reserve(sbuf *b, size_t extra)
{
    if (b->oom)
        return false;
    size_t need;
    if (core_add_overflow(b->len, extra + 1, &need)) {
        b->oom = true;
        return false;
    }
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = core_realloc(b->data, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void sbuf_appendn(sbuf *b, const char *s, size_t n)
{
    if (!reserve(b, n))
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void sbuf_append(sbuf *b, const char *s)
{
    sbuf_appendn(b, s, strlen(s));
}

void sbuf_appendc(sbuf *b, char c)
{
    sbuf_appendn(b, &c, 1);
}

void sbuf_appendv(sbuf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if (!reserve(b, (size_t)n))
        return;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void sbuf_appendf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sbuf_appendv(b, fmt, ap);
    va_end(ap);
}

void sbuf_append_indented(sbuf *b, const char *s, int indent)
{
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t n = nl ? (size_t)(nl - s) : strlen(s);
        if (n > 0)
            sbuf_appendf(b, "%*s", indent, "");
        sbuf_appendn(b, s, n);
        sbuf_appendc(b, '\n');
        s += n + (nl ? 1 : 0);
    }
}

const char *sbuf_str(const sbuf *b)
{
    if (b->oom)
        return NULL;
    return b->data ? b->data : "";
}

char *sbuf_take(sbuf *b)
{
    char *s = NULL;
    if (!b->oom)
        s = b->data ? b->data : core_strdup("");
    else
        core_free(b->data);
    sbuf_init(b);
    return s;
}
