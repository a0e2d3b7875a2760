/*
 * glesc.h — the engine's public API: status codes, the headless GPU context,
 * its capabilities and statistics.
 *
 * Conventions (the header is the contract):
 *  - Every fallible call returns a glesc_status: GLESC_OK (0) or a negative
 *    error. The message of the last failure names the step, file, tensor or GL
 *    log; read it with glesc_context_errmsg() (calls that take a context) or
 *    glesc_last_errmsg() (calls that do not). Messages stay valid until the
 *    next failing call on the same context / thread.
 *  - glesc_*_destroy(NULL) is a harmless no-op.
 *  - A context is used from one thread at a time; the thread that created it
 *    has it current. Call glesc_context_make_current() to move it.
 */
#ifndef GLESC_H
#define GLESC_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(GLESC_BUILDING) && defined(__GNUC__)
#define GLESC_API __attribute__((visibility("default")))
#else
#define GLESC_API
#endif

/* ---- Status codes: one list generates the enum, names and strings. ---- */
#define GLESC_STATUS_MAP(X)                                                                        \
    X(OK, 0, "success")                                                                            \
    X(ERROR_INVALID_ARGUMENT, -1, "invalid argument")                                              \
    X(ERROR_OUT_OF_MEMORY, -2, "out of memory")                                                    \
    X(ERROR_EGL, -3, "EGL failure")                                                                \
    X(ERROR_GL, -4, "OpenGL ES failure")                                                           \
    X(ERROR_UNSUPPORTED, -5, "not supported by this device or build")                              \
    X(ERROR_COMPILE, -6, "shader compilation or link failed")                                      \
    X(ERROR_IO, -7, "input/output error")                                                          \
    X(ERROR_FORMAT, -8, "malformed input")                                                         \
    X(ERROR_NOT_FOUND, -9, "not found")                                                            \
    X(ERROR_LIMIT, -10, "exceeds a device or format limit")                                        \
    X(ERROR_SHAPE, -11, "shape mismatch")                                                          \
    X(ERROR_TYPE, -12, "type mismatch")                                                            \
    X(ERROR_TIMEOUT, -13, "timed out waiting for the GPU")                                         \
    X(ERROR_STATE, -14, "call not valid in this state")

typedef enum glesc_status {
#define GLESC_STATUS_ENUM_(name, value, str) GLESC_##name = value,
    GLESC_STATUS_MAP(GLESC_STATUS_ENUM_)
#undef GLESC_STATUS_ENUM_
} glesc_status;

/* "GLESC_ERROR_EGL" etc.; "GLESC_UNKNOWN" for values not in the list. Static string. */
GLESC_API const char *glesc_status_name(glesc_status s);
/* A short human description ("EGL failure"). Static string. */
GLESC_API const char *glesc_status_str(glesc_status s);
/* The message of the last failure on this thread from a call that takes no
 * context (e.g. opening a GGUF file). Never NULL; "" when there was none. */
GLESC_API const char *glesc_last_errmsg(void);

/* glesc's version string, e.g. "0.1.0". Static string. */
GLESC_API const char *glesc_version(void);

/* ---- Element types. Values are ggml's type ids, as stored in GGUF files:
 * append-only, never renumbered. Quantized types hold blocks of
 * glesc_dtype_block_size() elements in glesc_dtype_block_bytes() bytes. ---- */
typedef enum glesc_dtype {
    GLESC_DTYPE_F32 = 0,
    GLESC_DTYPE_F16 = 1,
    GLESC_DTYPE_Q4_0 = 2,
    GLESC_DTYPE_Q4_1 = 3,
    GLESC_DTYPE_Q5_0 = 6,
    GLESC_DTYPE_Q5_1 = 7,
    GLESC_DTYPE_Q8_0 = 8,
    GLESC_DTYPE_Q8_1 = 9,
    GLESC_DTYPE_Q2_K = 10,
    GLESC_DTYPE_Q3_K = 11,
    GLESC_DTYPE_Q4_K = 12,
    GLESC_DTYPE_Q5_K = 13,
    GLESC_DTYPE_Q6_K = 14,
    GLESC_DTYPE_Q8_K = 15,
    GLESC_DTYPE_IQ2_XXS = 16,
    GLESC_DTYPE_IQ2_XS = 17,
    GLESC_DTYPE_IQ3_XXS = 18,
    GLESC_DTYPE_IQ1_S = 19,
    GLESC_DTYPE_IQ4_NL = 20,
    GLESC_DTYPE_IQ3_S = 21,
    GLESC_DTYPE_IQ2_S = 22,
    GLESC_DTYPE_IQ4_XS = 23,
    GLESC_DTYPE_I8 = 24,
    GLESC_DTYPE_I16 = 25,
    GLESC_DTYPE_I32 = 26,
    GLESC_DTYPE_I64 = 27,
    GLESC_DTYPE_F64 = 28,
    GLESC_DTYPE_IQ1_M = 29,
    GLESC_DTYPE_BF16 = 30,
    GLESC_DTYPE_TQ1_0 = 34,
    GLESC_DTYPE_TQ2_0 = 35,
    GLESC_DTYPE_MXFP4 = 39,
    GLESC_DTYPE_COUNT_ = 40 /* one past the largest id; not a type */
} glesc_dtype;

/* "f32", "q4_k", ...; NULL for an id that is not a type. Static string. */
GLESC_API const char *glesc_dtype_name(glesc_dtype t);
/* Elements per block (1 for plain types); 0 for an unknown id. */
GLESC_API int glesc_dtype_block_size(glesc_dtype t);
/* Bytes per block; 0 for an unknown id. */
GLESC_API int glesc_dtype_block_bytes(glesc_dtype t);
/* Bytes of a row of n elements, or 0 when n is not a multiple of the block
 * size, the type is unknown, or the size overflows. */
GLESC_API uint64_t glesc_dtype_row_bytes(glesc_dtype t, int64_t n);

/* ---- Allocation hook (Lua's lua_Alloc): every heap allocation of glesc goes
 * through it. realloc semantics: ptr NULL → allocate, size 0 → free (return
 * NULL). Pass NULL to restore the libc allocator. Not thread-safe: set it
 * before creating any object. */
typedef void *(*glesc_alloc_fn)(void *user, void *ptr, size_t size);
GLESC_API void glesc_set_allocator(glesc_alloc_fn fn, void *user);

/* ---- Headless context ---- */
typedef enum glesc_platform {
    GLESC_PLATFORM_AUTO = 0,    /* gbm → device → surfaceless */
    GLESC_PLATFORM_GBM,         /* EGL_PLATFORM_GBM_KHR on a DRM render node */
    GLESC_PLATFORM_DEVICE,      /* EGL_EXT_platform_device */
    GLESC_PLATFORM_SURFACELESS, /* EGL_MESA_platform_surfaceless */
} glesc_platform;

/* "auto", "gbm", "device", "surfaceless". Static string. */
GLESC_API const char *glesc_platform_name(glesc_platform p);

typedef struct glesc_context_options {
    glesc_platform platform; /* overridden by GLESC_PLATFORM when set */
    const char *device;      /* render node path or EGL device index; GLESC_DEVICE overrides */
    const char
        *cache_dir; /* program binary cache; NULL → GLESC_CACHE_DIR, XDG default; "off" disables */
    bool debug;     /* KHR_debug message log to stderr (also GLESC_DEBUG=1) */
    /* Testing aid: pretend GL_MAX_SHADER_STORAGE_BLOCK_SIZE is this many bytes
     * (0 = the driver's value; a larger value than the driver's is ignored). */
    uint64_t max_storage_block_size;
    /* Byte budget of buffers kept cached by the pool (0 = 256 MiB). */
    uint64_t pool_budget;
} glesc_context_options;

typedef struct glesc_context glesc_context;

/* Creates a GLES 3.1+ compute context with no window and no display server.
 * opts may be NULL (all defaults). On success *out owns the context (free it
 * with glesc_context_destroy) and it is current on this thread. On failure
 * *out is NULL and glesc_last_errmsg() names the step and the EGL error. */
GLESC_API glesc_status glesc_context_create(const glesc_context_options *opts, glesc_context **out);
GLESC_API void glesc_context_destroy(glesc_context *ctx);
/* Message of the last failure of a call on ctx; "" when none. Owned by ctx. */
GLESC_API const char *glesc_context_errmsg(const glesc_context *ctx);
/* Makes ctx current on the calling thread. */
GLESC_API glesc_status glesc_context_make_current(glesc_context *ctx);

/* Bits of glesc_caps.subgroup_features (values of GL_KHR_shader_subgroup). */
enum {
    GLESC_SUBGROUP_BASIC = 1u << 0,
    GLESC_SUBGROUP_VOTE = 1u << 1,
    GLESC_SUBGROUP_ARITHMETIC = 1u << 2,
    GLESC_SUBGROUP_BALLOT = 1u << 3,
    GLESC_SUBGROUP_SHUFFLE = 1u << 4,
    GLESC_SUBGROUP_SHUFFLE_RELATIVE = 1u << 5,
    GLESC_SUBGROUP_CLUSTERED = 1u << 6,
    GLESC_SUBGROUP_QUAD = 1u << 7,
};

typedef struct glesc_caps {
    const char *vendor, *renderer, *version, *glsl_version; /* owned by the context */
    int gl_major, gl_minor;
    glesc_platform platform;         /* the one actually used */
    const char *platform_reason;     /* why auto chose it; owned by the context */
    const char *device;              /* render node path or "EGL device N (name)"; may be "" */
    uint64_t max_storage_block_size; /* effective (after the testing override) */
    uint64_t driver_max_storage_block_size; /* as the driver reports it */
    int max_compute_storage_blocks;
    int max_compute_shared_memory;
    int max_compute_invocations;
    int max_workgroup_size[3];
    int max_workgroup_count[3];
    int storage_buffer_offset_alignment;
    int num_program_binary_formats;
    bool has_subgroup;          /* GL_KHR_shader_subgroup */
    int subgroup_size;          /* 0 when absent */
    uint32_t subgroup_stages;   /* GL shader stage bits */
    uint32_t subgroup_features; /* GLESC_SUBGROUP_* */
    bool has_timer_query;       /* GL_EXT_disjoint_timer_query */
    bool has_parallel_compile;  /* GL_KHR_parallel_shader_compile */
    bool has_buffer_storage;    /* GL_EXT_buffer_storage */
    bool has_debug;             /* GL_KHR_debug or GLES 3.2 */
} glesc_caps;

/* Capabilities of ctx; the pointer stays valid for the context's life. */
GLESC_API const glesc_caps *glesc_context_caps(const glesc_context *ctx);

typedef struct glesc_stats {
    /* SSBO pool */
    uint64_t pool_hits, pool_misses;
    uint64_t pool_live_bytes, pool_cached_bytes, pool_peak_bytes;
    uint64_t pool_live_buffers, pool_cached_buffers;
    /* program cache */
    uint64_t programs_compiled, program_memory_hits, program_disk_hits, program_disk_rejects;
    uint64_t program_disk_writes;
    /* executor */
    uint64_t dispatches, barriers;
} glesc_stats;

/* Counters since creation (or glesc_context_reset_stats). */
GLESC_API void glesc_context_stats(const glesc_context *ctx, glesc_stats *out);
GLESC_API void glesc_context_reset_stats(glesc_context *ctx);
/* The program cache directory in use, or NULL when disk caching is off. Owned by ctx. */
GLESC_API const char *glesc_context_cache_dir(const glesc_context *ctx);

#ifdef __cplusplus
}
#endif
#endif /* GLESC_H */
