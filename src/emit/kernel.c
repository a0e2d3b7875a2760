/*
 * kernel.c — the kernel builder behind emit.h. Declarations are kept in
 * small lists and written out in a fixed order (version, extensions,
 * precision, defines, local size, buffers, uniforms, shared, helpers,
 * generated functions, main),
 * so the same calls always give the same text: the program cache keys on it.
 * Functions generated line by line (emit_kernel_function_begin/_end) come
 * after the helpers, so a helper calls them through a prototype.
 */
#include <stdio.h>
#include <string.h>

#include "emit/emit.h"

#define MAX_DECLS 32
/* Fused kernels pass every size and stride as a uniform (so one program
 * serves every shape): 4 strides and an offset per input add up. */
#define MAX_PARAMS 160

typedef struct named_text {
    char *name, *text;
} named_text;

struct emit_kernel {
    char *name;
    sbuf comments, body, fns;
    sbuf *out; /* where emit_kernel_line writes: body, or fns inside a function */
    int indent, main_indent;
    int local[3];
    struct {
        emit_elem elem;
        unsigned access;
        char *name;
    } bindings[MAX_DECLS];
    int n_bindings;
    struct {
        emit_param_type type;
        char *name;
    } params[MAX_PARAMS];
    int n_params;
    named_text ext[MAX_DECLS], defines[MAX_DECLS], shared[MAX_DECLS], helpers[64];
    int n_ext, n_defines, n_shared, n_helpers;
    int64_t shared_bytes; /* of the shared arrays (std430-like sizes, no padding) */
    bool oom;
    char misuse[256]; /* first misuse, reported by emit_kernel_glsl */
};

static const char *const elems[EMIT_ELEM_COUNT_] = {
    [EMIT_FLOAT] = "float", [EMIT_INT] = "int",     [EMIT_UINT] = "uint",   [EMIT_VEC2] = "vec2",
    [EMIT_VEC4] = "vec4",   [EMIT_UVEC2] = "uvec2", [EMIT_UVEC4] = "uvec4",
};

const char *emit_elem_glsl(emit_elem e)
{
    return (unsigned)e < EMIT_ELEM_COUNT_ ? elems[e] : "?";
}

static void misuse(emit_kernel *k, const char *fmt, const char *arg)
{
    if (!k->misuse[0])
        snprintf(k->misuse, sizeof k->misuse, fmt, arg);
}

static char *dup(emit_kernel *k, const char *s)
{
    char *p = core_strdup(s);
    if (!p)
        k->oom = true;
    return p;
}

emit_kernel *emit_kernel_create(const char *name)
{
    emit_kernel *k = core_calloc(1, sizeof *k);
    if (!k)
        return NULL;
    sbuf_init(&k->comments);
    sbuf_init(&k->body);
    sbuf_init(&k->fns);
    k->out = &k->body;
    k->local[0] = 64;
    k->local[1] = k->local[2] = 1;
    k->indent = 1;
    k->name = core_strdup(name);
    if (!k->name) {
        core_free(k);
        return NULL;
    }
    return k;
}

static void free_named(named_text *t, int n)
{
    for (int i = 0; i < n; i++) {
        core_free(t[i].name);
        core_free(t[i].text);
    }
}

void emit_kernel_destroy(emit_kernel *k)
{
    if (!k)
        return;
    core_free(k->name);
    sbuf_free(&k->comments);
    sbuf_free(&k->body);
    sbuf_free(&k->fns);
    for (int i = 0; i < k->n_bindings; i++)
        core_free(k->bindings[i].name);
    for (int i = 0; i < k->n_params; i++)
        core_free(k->params[i].name);
    free_named(k->ext, k->n_ext);
    free_named(k->defines, k->n_defines);
    free_named(k->shared, k->n_shared);
    free_named(k->helpers, k->n_helpers);
    core_free(k);
}

void emit_kernel_comment(emit_kernel *k, const char *fmt, ...)
{
    sbuf_append(&k->comments, "// ");
    va_list ap;
    va_start(ap, fmt);
    sbuf_appendv(&k->comments, fmt, ap);
    va_end(ap);
    sbuf_appendc(&k->comments, '\n');
}

static named_text *find_named(named_text *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name))
            return &t[i];
    return NULL;
}

/* Adds (name, text) once; with replace, a second add replaces the text. */
static void add_named(emit_kernel *k, named_text *t, int *n, int max, const char *name,
                      const char *text, bool replace)
{
    named_text *e = find_named(t, *n, name);
    if (e) {
        if (replace) {
            char *nt = dup(k, text);
            if (nt) {
                core_free(e->text);
                e->text = nt;
            }
        }
        return;
    }
    if (*n >= max) {
        misuse(k, "too many declarations (at '%s')", name);
        return;
    }
    char *nm = dup(k, name), *tx = dup(k, text);
    if (!nm || !tx) { /* k->oom is set; keep the lists free of NULL names */
        core_free(nm);
        core_free(tx);
        return;
    }
    t[*n].name = nm;
    t[*n].text = tx;
    (*n)++;
}

void emit_kernel_extension(emit_kernel *k, const char *name)
{
    add_named(k, k->ext, &k->n_ext, MAX_DECLS, name, "", false);
}

void emit_kernel_define(emit_kernel *k, const char *name, const char *fmt, ...)
{
    sbuf v;
    sbuf_init(&v);
    va_list ap;
    va_start(ap, fmt);
    sbuf_appendv(&v, fmt, ap);
    va_end(ap);
    if (!sbuf_str(&v))
        k->oom = true;
    else
        add_named(k, k->defines, &k->n_defines, MAX_DECLS, name, sbuf_str(&v), true);
    sbuf_free(&v);
}

void emit_kernel_local_size(emit_kernel *k, int x, int y, int z)
{
    k->local[0] = x;
    k->local[1] = y;
    k->local[2] = z;
}

static bool name_taken(const emit_kernel *k, const char *name)
{
    for (int i = 0; i < k->n_bindings; i++)
        if (!strcmp(k->bindings[i].name, name))
            return true;
    for (int i = 0; i < k->n_params; i++)
        if (!strcmp(k->params[i].name, name))
            return true;
    return false;
}

int emit_kernel_binding(emit_kernel *k, emit_elem elem, unsigned access, const char *name)
{
    if (k->n_bindings >= MAX_DECLS || name_taken(k, name)) {
        misuse(k, "binding '%s' is a duplicate or one too many", name);
        return -1;
    }
    char *nm = dup(k, name);
    if (!nm)
        return -1;
    int i = k->n_bindings++;
    k->bindings[i].elem = elem;
    k->bindings[i].access = access;
    k->bindings[i].name = nm;
    return i;
}

int emit_kernel_param(emit_kernel *k, emit_param_type type, const char *name)
{
    if (k->n_params >= MAX_PARAMS || name_taken(k, name)) {
        misuse(k, "parameter '%s' is a duplicate or one too many", name);
        return -1;
    }
    char *nm = dup(k, name);
    if (!nm)
        return -1;
    int i = k->n_params++;
    k->params[i].type = type;
    k->params[i].name = nm;
    return i;
}

static int glsl_type_bytes(const char *type)
{
    static const struct {
        const char *name;
        int bytes;
    } types[] = {{"float", 4}, {"int", 4},   {"uint", 4},   {"vec2", 8},  {"ivec2", 8},
                 {"uvec2", 8}, {"vec4", 16}, {"ivec4", 16}, {"uvec4", 16}};
    for (size_t i = 0; i < CORE_ARRAY_LEN(types); i++)
        if (!strcmp(type, types[i].name))
            return types[i].bytes;
    return 0;
}

void emit_kernel_shared(emit_kernel *k, const char *type, const char *name, int count)
{
    int bytes = glsl_type_bytes(type);
    if (!bytes || count <= 0) {
        misuse(k, "shared array of an unknown type or no elements (at '%s')", name);
        return;
    }
    if (find_named(k->shared, k->n_shared, name))
        return;
    char text[160];
    snprintf(text, sizeof text, "shared %s %s[%d];", type, name, count);
    add_named(k, k->shared, &k->n_shared, MAX_DECLS, name, text, false);
    k->shared_bytes += (int64_t)bytes * count;
}

void emit_kernel_footprint(const emit_kernel *k, int local[3], int64_t *shared_bytes)
{
    for (int i = 0; i < 3; i++)
        local[i] = k->local[i];
    *shared_bytes = k->shared_bytes;
}

void emit_kernel_helper(emit_kernel *k, const char *name, const char *text)
{
    add_named(k, k->helpers, &k->n_helpers, 64, name, text, false);
}

void emit_kernel_snippet(emit_kernel *k, const char *name)
{
    const char *text = emit_snippet_text(name);
    if (!text) {
        misuse(k, "no GLSL snippet glsl/%s.glsl", name);
        return;
    }
    emit_kernel_helper(k, name, text);
}

void emit_kernel_line(emit_kernel *k, const char *fmt, ...)
{
    sbuf line;
    sbuf_init(&line);
    va_list ap;
    va_start(ap, fmt);
    sbuf_appendv(&line, fmt, ap);
    va_end(ap);
    const char *s = sbuf_str(&line);
    if (!s) {
        k->oom = true;
        return;
    }
    size_t n = strlen(s);
    if (s[0] == '}' && k->indent > 1)
        k->indent--;
    if (n)
        sbuf_appendf(k->out, "%*s%s", 4 * k->indent, "", s);
    sbuf_appendc(k->out, '\n');
    if (n && s[n - 1] == '{')
        k->indent++;
    sbuf_free(&line);
}

void emit_kernel_function_begin(emit_kernel *k, const char *signature)
{
    if (k->out != &k->body) {
        misuse(k, "function '%s' begun inside another", signature);
        return;
    }
    sbuf_appendf(&k->fns, "%s {\n", signature);
    k->out = &k->fns;
    k->main_indent = k->indent;
    k->indent = 1;
}

void emit_kernel_function_end(emit_kernel *k)
{
    if (k->out != &k->fns) {
        misuse(k, "%s", "function ended that was not begun");
        return;
    }
    sbuf_append(&k->fns, "}\n\n");
    k->out = &k->body;
    k->indent = k->main_indent;
}

static const char *param_glsl(emit_param_type t)
{
    return t == EMIT_PARAM_INT ? "int" : t == EMIT_PARAM_UINT ? "uint" : "float";
}

char *emit_kernel_glsl(emit_kernel *k, core_err *err)
{
    if (k->oom || k->comments.oom || k->body.oom || k->fns.oom) {
        core_err_set(err, GLESC_ERROR_OUT_OF_MEMORY, "kernel '%s': out of memory", k->name);
        return NULL;
    }
    if (k->out != &k->body)
        misuse(k, "%s", "a function was begun and not ended");
    if (k->misuse[0]) {
        core_err_set(err, GLESC_ERROR_INVALID_ARGUMENT, "kernel '%s': %s", k->name, k->misuse);
        return NULL;
    }
    sbuf b;
    sbuf_init(&b);
    sbuf_append(&b, "#version 310 es\n");
    for (int i = 0; i < k->n_ext; i++)
        sbuf_appendf(&b, "#extension %s : require\n", k->ext[i].name);
    sbuf_appendf(&b, "// glesc kernel: %s\n", k->name);
    if (k->comments.len)
        sbuf_append(&b, sbuf_str(&k->comments) ? sbuf_str(&k->comments) : "");
    sbuf_append(&b, "precision highp float;\nprecision highp int;\n\n");
    int wg = k->local[0] * k->local[1] * k->local[2];
    sbuf_appendf(&b, "#define WG_SIZE %du\n", wg);
    for (int i = 0; i < k->n_defines; i++)
        sbuf_appendf(&b, "#define %s %s\n", k->defines[i].name, k->defines[i].text);
    sbuf_appendf(&b, "layout(local_size_x = %d, local_size_y = %d, local_size_z = %d) in;\n\n",
                 k->local[0], k->local[1], k->local[2]);
    for (int i = 0; i < k->n_bindings; i++) {
        unsigned a = k->bindings[i].access;
        sbuf_appendf(&b, "layout(std430, binding = %d) %s%s%s%sbuffer B%d { %s %s[]; };\n", i,
                     a & EMIT_RESTRICT ? "restrict " : "", a & EMIT_COHERENT ? "coherent " : "",
                     a & EMIT_READONLY ? "readonly " : "", a & EMIT_WRITEONLY ? "writeonly " : "",
                     i, emit_elem_glsl(k->bindings[i].elem), k->bindings[i].name);
    }
    if (k->n_bindings)
        sbuf_appendc(&b, '\n');
    /* one std140 block of scalars: param i is the word at byte 4·i */
    if (k->n_params) {
        sbuf_append(&b, "layout(std140, binding = 0) uniform Params {\n");
        for (int i = 0; i < k->n_params; i++)
            sbuf_appendf(&b, "    %s %s;\n", param_glsl(k->params[i].type), k->params[i].name);
        sbuf_append(&b, "};\n\n");
    }
    for (int i = 0; i < k->n_shared; i++)
        sbuf_appendf(&b, "%s\n", k->shared[i].text);
    if (k->n_shared)
        sbuf_appendc(&b, '\n');
    for (int i = 0; i < k->n_helpers; i++) {
        sbuf_append(&b, k->helpers[i].text);
        size_t n = strlen(k->helpers[i].text);
        if (n && k->helpers[i].text[n - 1] != '\n')
            sbuf_appendc(&b, '\n');
        sbuf_appendc(&b, '\n');
    }
    if (k->fns.len)
        sbuf_append(&b, sbuf_str(&k->fns) ? sbuf_str(&k->fns) : "");
    sbuf_append(&b, "void main() {\n");
    if (k->body.len)
        sbuf_append(&b, sbuf_str(&k->body) ? sbuf_str(&k->body) : "");
    sbuf_append(&b, "}\n");
    if (k->oom || k->comments.oom || k->body.oom || k->fns.oom)
        b.oom = true;
    char *text = sbuf_take(&b);
    if (!text)
        core_err_set(err, GLESC_ERROR_OUT_OF_MEMORY, "kernel '%s': out of memory", k->name);
    return text;
}

const char *emit_snippet_text(const char *name)
{
    for (int i = 0; i < emit_n_snippets; i++)
        if (!strcmp(emit_snippets[i].name, name))
            return emit_snippets[i].text;
    return NULL;
}
