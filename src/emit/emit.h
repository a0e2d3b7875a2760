/*
 * emit.h — the kernel emitter: builds complete, readable GLSL ES 3.10 compute
 * shaders from declarations (storage bindings, parameters, shared arrays,
 * helpers, local size, extensions) and a body, all written through sbuf.
 *
 * Binding i of a kernel is storage binding point i and parameter i is the
 * i-th 32-bit member of one std140 uniform block at uniform binding point 0
 * (`layout(std140, binding = 0) uniform Params`), which is how gl_dispatch
 * binds them: no name lookups at dispatch time, and a kernel's parameters
 * are one buffer range (written once, bound again on every replay).
 *
 * Errors are sticky like sbuf's: a failed allocation marks the kernel and
 * emit_kernel_glsl() returns NULL; a misuse (unknown snippet, duplicate name)
 * is reported by emit_kernel_glsl's status through emit_kernel_error().
 */
#ifndef GLESC_EMIT_H
#define GLESC_EMIT_H

#include "core/core.h"

typedef enum emit_elem {
    EMIT_FLOAT,
    EMIT_INT,
    EMIT_UINT,
    EMIT_VEC2,
    EMIT_VEC4,
    EMIT_UVEC2,
    EMIT_UVEC4,
    EMIT_ELEM_COUNT_
} emit_elem;

/* GLSL spelling of an element type ("float", "uvec4"). */
const char *emit_elem_glsl(emit_elem e);

enum emit_access {
    EMIT_READONLY = 1u << 0,
    EMIT_WRITEONLY = 1u << 1,
    EMIT_COHERENT = 1u << 2,
    EMIT_RESTRICT = 1u << 3,
};

typedef enum emit_param_type { EMIT_PARAM_INT, EMIT_PARAM_UINT, EMIT_PARAM_FLOAT } emit_param_type;

typedef struct emit_kernel emit_kernel;

/* name appears in the header comment; NULL on out-of-memory. */
emit_kernel *emit_kernel_create(const char *name);
void emit_kernel_destroy(emit_kernel *k);

/* A line of the header comment (e.g. which fused ops the kernel implements). */
void emit_kernel_comment(emit_kernel *k, const char *fmt, ...) CORE_PRINTF(2, 3);
/* `#extension NAME : require` (once per name). */
void emit_kernel_extension(emit_kernel *k, const char *name);
/* `#define NAME VALUE` in the prelude (once per name; the last value wins). */
void emit_kernel_define(emit_kernel *k, const char *name, const char *fmt, ...) CORE_PRINTF(3, 4);
void emit_kernel_local_size(emit_kernel *k, int x, int y, int z);
/* A storage buffer `NAME[]` of elem; returns its binding index. */
int emit_kernel_binding(emit_kernel *k, emit_elem elem, unsigned access, const char *name);
/* A scalar parameter; returns its index in the parameter block. */
int emit_kernel_param(emit_kernel *k, emit_param_type type, const char *name);
/* `shared TYPE NAME[COUNT];` (TYPE a 32-bit scalar or a 2- or 4-vector of them) */
void emit_kernel_shared(emit_kernel *k, const char *type, const char *name, int count);
/* The workgroup size and the bytes of shared memory declared so far. */
void emit_kernel_footprint(const emit_kernel *k, int local[3], int64_t *shared_bytes);
/* A helper function (or any top-level text), added once by name. */
void emit_kernel_helper(emit_kernel *k, const char *name, const char *text);
/* The GLSL file glsl/NAME.glsl as a helper (embedded at build time). Unknown
 * names are an error reported by emit_kernel_glsl. */
void emit_kernel_snippet(emit_kernel *k, const char *name);
/* One statement line of main(); indentation follows braces: a line ending in
 * '{' indents the following lines, a line starting with '}' dedents. */
void emit_kernel_line(emit_kernel *k, const char *fmt, ...) CORE_PRINTF(2, 3);

/* Lines written between these (emit_kernel_line) form a function
 * `SIGNATURE { ... }` instead of statements of main(): a hook generated
 * for a helper (e.g. glsl/graph/gemv.glsl's x load and store), which
 * declares its prototype. Generated functions follow the helpers. */
void emit_kernel_function_begin(emit_kernel *k, const char *signature);
void emit_kernel_function_end(emit_kernel *k);

/* The complete shader text (core_free it), or NULL with err set (misuse or
 * out of memory). */
char *emit_kernel_glsl(emit_kernel *k, core_err *err);

/* Embedded snippets (generated from glsl/ by embed_glsl). */
typedef struct emit_snippet {
    const char *name; /* path under glsl/ without .glsl: "common/reduce" */
    const char *text;
} emit_snippet;
extern const emit_snippet emit_snippets[];
extern const int emit_n_snippets;
const char *emit_snippet_text(const char *name);

#endif /* GLESC_EMIT_H */
