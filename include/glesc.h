/*
 * glesc.h — the engine's public API: status codes, the headless GPU context,
 * its capabilities and statistics, tensors and the lazy operation graph.
 *
 * Conventions (the header is the contract):
 *  - Errors, one channel: every fallible call returns a glesc_status:
 *    GLESC_OK (0) or a negative error; calls that return a pointer
 *    (builders) return NULL instead. The message of every failure, of every
 *    header's calls, is glesc_last_errmsg() on the calling thread: it names
 *    the step, file, key, tensor, shape or GL log. Every call that returns a
 *    glesc_status clears it on entry, so after GLESC_OK it is "". A builder
 *    that returns NULL sets it and leaves it alone otherwise. It stays valid
 *    until the calling thread's next glesc call. A context keeps a copy of
 *    the last failure of the calls on it (those taking the context or a
 *    graph, tensor or readback of it): glesc_context_errmsg(), for a
 *    context whose failure is read on another thread or after other
 *    calls; it follows the same clearing rule.
 *  - glesc_*_destroy(NULL) is a harmless no-op.
 *  - Threads: a context, and everything made on it, is used by one thread at
 *    a time. Every call that touches the GPU makes its context current on the
 *    calling thread when it is not (also when another EGL context is current
 *    there: that one is no longer current afterwards) and leaves it current.
 *    To move a context to another thread, call glesc_context_release_current()
 *    on the thread that used it last; a call on a context that is still
 *    current on another thread fails with GLESC_ERROR_STATE. Destroying a
 *    context never changes which context another thread, or the calling one,
 *    has current (unless that was the destroyed one).
 *  - Callbacks that can stop work (abort, progress, tokens) stop it by
 *    returning true.
 *  - Compatibility: enums whose values are said to be stable (glesc_status,
 *    glesc_dtype, glesc_platform, glesc_log_level) only ever get new values
 *    appended; glesc_op's order may change between versions.
 *  - Option structs (every struct a call reads its options or parameters
 *    from: glesc_context_options, glesc_graph_options, glesc_conv_params,
 *    glesc_pool_params, glesc_conv_transpose_params; glesc_llm.h's
 *    glesc_sampler_params, glesc_model_options, glesc_session_options,
 *    glesc_generate_params, glesc_chat_options) start with
 *    `uint32_t struct_size` and have an inline glesc_X_init(glesc_X *) that
 *    fills in the defaults and sets struct_size to the size the caller was
 *    compiled with: call it first, then set fields. The library reads only
 *    struct_size bytes (0: this header's layout), so a newer library reads
 *    an older caller's struct safely; new fields are appended and zero
 *    means their default. A NULL options pointer means the defaults of
 *    _init. Result structs the caller allocates (glesc_stats,
 *    glesc_compute_stats, glesc_roofline, glesc_model_info, ...) keep their
 *    layout within a soname; structs the library owns and hands out by
 *    pointer (glesc_caps) may grow at the end.
 */
#ifndef GLESC_H
#define GLESC_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "glesc_version.h" /* GLESC_VERSION_MAJOR, _MINOR, _PATCH, _NUMBER, _STRING */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(GLESC_BUILDING) && defined(__GNUC__)
#define GLESC_API __attribute__((visibility("default")))
#else
#define GLESC_API
#endif

/* Marks an old name kept for a while; the compiler says what replaces it. */
#if defined(__GNUC__) || defined(__clang__)
#define GLESC_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define GLESC_DEPRECATED(msg)
#endif

/* ---- Status codes: one list generates the enum, names and strings. Stable
 * values: new codes are appended. ---- */
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
    X(ERROR_STATE, -14, "call not valid in this state")                                            \
    X(ERROR_CANCELLED, -15, "cancelled by a callback")                                             \
    X(ERROR_CONTEXT_LOST, -16, "the GPU context was lost (device reset)")                          \
    X(ERROR_NUMERIC, -17, "non-finite values (NaN or infinity) in a result")

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

/* The library's version string, e.g. "0.1.0" (GLESC_VERSION_STRING of the
 * glesc.h it was built with; compare with the macros to detect a mismatch
 * between the header and the library). Static string. */
GLESC_API const char *glesc_version(void);

/* ---- Logging. Warnings and notes go to stderr as "glesc: warning: ..."
 * unless a callback takes them. ---- */
typedef enum glesc_log_level { /* stable values */
                               GLESC_LOG_ERROR = 0,
                               GLESC_LOG_WARN = 1,
                               GLESC_LOG_INFO = 2,
                               GLESC_LOG_DEBUG = 3,
} glesc_log_level;

/* msg is one line without a newline or the "glesc: " prefix, valid during the
 * call only. */
typedef void (*glesc_log_fn)(void *user, glesc_log_level level, const char *msg);
/* Sends every log message at or below the log level to fn (NULL: back to
 * stderr). Process-wide and thread-safe: messages of any thread reach fn
 * one at a time, and once this returns the previous callback is neither
 * running nor called again. fn must not call glesc. */
GLESC_API void glesc_set_log_callback(glesc_log_fn fn, void *user);
/* The most detailed level logged: explicit here beats GLESC_LOG (error,
 * warn, info, debug), which beats the default GLESC_LOG_WARN. A value outside
 * the enum returns to GLESC_LOG / the default. Process-wide. */
GLESC_API void glesc_set_log_level(glesc_log_level level);

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
typedef enum glesc_platform {                          /* stable values */
                              GLESC_PLATFORM_AUTO = 0, /* gbm → device → surfaceless */
                              GLESC_PLATFORM_GBM,    /* EGL_PLATFORM_GBM_KHR on a DRM render node */
                              GLESC_PLATFORM_DEVICE, /* EGL_EXT_platform_device */
                              GLESC_PLATFORM_SURFACELESS, /* EGL_MESA_platform_surfaceless */
} glesc_platform;

/* "auto", "gbm", "device", "surfaceless". Static string. */
GLESC_API const char *glesc_platform_name(glesc_platform p);

/* Options of glesc_context_create. A value given here beats the environment
 * variable of the same meaning, which beats the default; zero (NULL, false)
 * means "not given". */
typedef struct glesc_context_options {
    /* sizeof(glesc_context_options) as the caller was compiled, set by
     * glesc_context_options_init(); 0 means this header's layout. */
    uint32_t struct_size;
    /* GLESC_PLATFORM_AUTO: GLESC_PLATFORM when set, else auto. */
    glesc_platform platform;
    /* A render node path (GBM) or an EGL device index; NULL or "": GLESC_DEVICE.
     * A named device that cannot be used is an error, never replaced. */
    const char *device;
    /* Program binary cache; NULL: GLESC_CACHE_DIR, else the XDG default; "off" disables. */
    const char *cache_dir;
    /* KHR_debug messages of the driver to the log (false: GLESC_DEBUG=1). */
    bool debug;
    /* Testing aid: pretend GL_MAX_SHADER_STORAGE_BLOCK_SIZE is this many bytes
     * (0 = the driver's value; a larger value than the driver's is ignored). */
    uint64_t max_storage_block_size;
    /* Byte budget of buffers kept cached by the pool for the next compute
     * (0 = 64 MiB: a step's activations reuse each other's buffers, and
     * what a device holds beyond the weights and caches stays small). */
    uint64_t pool_budget;
    /* Testing aids for the portable path (false / 0 = the driver's): pretend
     * the device has no GL_KHR_shader_subgroup; cap the invocations per
     * workgroup (and each workgroup dimension) and the shared memory per
     * workgroup at these values (a larger value than the driver's is
     * ignored). GLES 3.1 guarantees 128 invocations and 16 KiB. */
    bool no_subgroups;
    int max_compute_invocations;
    int max_compute_shared_memory;
    /* An application's own EGLDisplay and EGLContext (both or neither; the
     * types are EGL's, void * here so this header needs no EGL include).
     * glesc then creates no display or context and destroys neither: the
     * display must be initialized, the context an OpenGL ES 3.1+ one, and
     * both must outlive the glesc context; platform and device are ignored.
     * glesc makes the context current where it needs it (with no surface
     * where EGL_KHR_surfaceless_context exists, else with a 1x1 pbuffer of
     * the context's config that glesc owns) and leaves the application's
     * surfaces as they are when it is current already. GL state glesc
     * changes and does not restore: the current program (glUseProgram), the
     * GL_SHADER_STORAGE_BUFFER bindings (generic and indexed 0..7), the
     * GL_UNIFORM_BUFFER bindings (generic and indexed 0), the
     * GL_COPY_READ_BUFFER and GL_COPY_WRITE_BUFFER bindings (left 0), the
     * compiler threads of GL_KHR_parallel_shader_compile (all), and with
     * debug on the KHR_debug callback and GL_DEBUG_OUTPUT_SYNCHRONOUS.
     * glesc binds whatever it uses before each use, so the application may
     * change any state between glesc calls; it must bind its own state again
     * after them. */
    void *egl_display;
    void *egl_context;
    /* Testing aid: cap GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS (the storage
     * buffers one compute shader may bind) at this value (0 = the driver's;
     * a larger value than the driver's is ignored). Fusion and every kernel
     * generator stay within it. */
    int max_compute_storage_blocks;
    /* Tuning aid: the device class whose kernel configurations to use
     * (glesc_caps.device_class's names; NULL or "auto": detected; an
     * unknown name fails glesc_context_create). GLESC_DEVICE_CLASS does the
     * same for every context. */
    const char *device_class;
} glesc_context_options;

/* Zeroes *opts (every option "not given") and sets struct_size. */
static inline void glesc_context_options_init(glesc_context_options *opts)
{
    for (size_t i = 0; i < sizeof *opts; i++)
        ((unsigned char *)opts)[i] = 0;
    opts->struct_size = (uint32_t)sizeof *opts;
}

/* Sets the testing caps of *opts (max_storage_block_size, no_subgroups,
 * max_compute_invocations, max_compute_shared_memory,
 * max_compute_storage_blocks) from a limits description: a comma list of
 * device classes and fields, later items winning over earlier ones.
 * Classes (the limits Mesa 25's drivers report, no subgroups on any):
 *   mali      Panfrost: 8 storage blocks, 256 invocations, 32 KiB shared
 *   adreno    Freedreno: 16 storage blocks, 1024 invocations, 32 KiB shared
 *   v3d       V3D (Raspberry Pi): 16 storage blocks, 256 invocations, 32 KiB
 *   portable  GLES 3.1's guarantees where glesc relies on them: 128
 *             invocations, 16 KiB shared (the storage blocks stay the driver's)
 * each with 128 MiB storage blocks. Fields: blocks=N, invocations=N,
 * shared=BYTES, ssbo=BYTES (K, M, G suffixes), subgroups=0. The same text
 * in the environment variable GLESC_LIMITS applies to every context, for
 * the caps the options leave at 0. Returns GLESC_ERROR_INVALID_ARGUMENT,
 * with a message naming the item, on anything else; *opts is then
 * unchanged. */
GLESC_API glesc_status glesc_context_options_limits(glesc_context_options *opts, const char *spec);

typedef struct glesc_context glesc_context;

/* Creates a GLES 3.1+ compute context with no window and no display server
 * (or adopts the application's: see glesc_context_options). opts may be
 * NULL (all defaults). On success *out owns the context (free it with
 * glesc_context_destroy) and it is current on this thread. On failure *out
 * is NULL, what was current on this thread is current again and
 * glesc_last_errmsg() names the step and the EGL error. */
GLESC_API glesc_status glesc_context_create(const glesc_context_options *opts, glesc_context **out);
/* Frees the context and everything made on it that is still alive
 * (destroy graphs, weights, models first). Makes ctx current for that if it
 * is not, and afterwards the context that was current on this thread before
 * the call is current again (none, when that was ctx). Call it on the thread
 * that uses ctx, or after releasing ctx there. */
GLESC_API void glesc_context_destroy(glesc_context *ctx);
/* ctx's copy of the message of the last failure of a call on it (what
 * glesc_last_errmsg() said on the thread that made the call); "" when the
 * last call on ctx that returns a status succeeded (see the conventions
 * above). Owned by ctx. NULL ctx: glesc_last_errmsg(). */
GLESC_API const char *glesc_context_errmsg(const glesc_context *ctx);
/* Makes ctx current on the calling thread (every call that needs it does
 * this itself). GLESC_ERROR_STATE when ctx is current on another thread. */
GLESC_API glesc_status glesc_context_make_current(glesc_context *ctx);
/* Releases ctx from the calling thread, so that another thread may use it.
 * A no-op (GLESC_OK) when ctx is not current on this thread. */
GLESC_API glesc_status glesc_context_release_current(glesc_context *ctx);

/* Called by glesc_graph_compute before each kernel (and before compiling a
 * new plan's programs); returning true stops the compute, which fails with
 * GLESC_ERROR_CANCELLED and a message naming the kernel it stopped before.
 * Kernels already submitted still run; the outputs of a cancelled compute
 * are undefined, the graph stays usable. Called on the thread that computes. */
typedef bool (*glesc_abort_fn)(void *user);
/* Sets ctx's abort callback (fn NULL: none). */
GLESC_API void glesc_context_set_abort_callback(glesc_context *ctx, glesc_abort_fn fn, void *user);

/* Called while a compute compiles programs that neither the memory nor the
 * disk cache holds: once before the first compile (done 0) and after each
 * one, done of total for this batch (a plan's misses), with the kernel's
 * name (its fused ops) of the program just compiled (NULL with done 0).
 * For a progress line on a first run, when a cold compile takes seconds.
 * Called on the thread that computes; it must not call glesc. */
typedef void (*glesc_compile_fn)(void *user, int done, int total, const char *kernel);
/* Sets ctx's compile callback (fn NULL: none). */
GLESC_API void glesc_context_set_compile_callback(glesc_context *ctx, glesc_compile_fn fn,
                                                  void *user);
/* Waits for the programs ctx compiles in the background and records them
 * (their binaries written to the disk cache). Where the driver compiles in
 * the background (NVIDIA's), a session's first prompt starts compiling its
 * decode step's programs and returns, and the driver compiles them while
 * the application goes on: call this before timing anything, since those
 * compiles share the driver with the work being timed. Returns at once
 * where nothing compiles; GLESC_ERROR_COMPILE if one failed (the step that
 * needs it compiles it again and reports it). */
GLESC_API glesc_status glesc_context_finish_compiles(glesc_context *ctx);

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
    glesc_platform platform;         /* the one used (AUTO for an adopted context) */
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
    /* The renderer runs on the CPU (Mesa's llvmpipe or softpipe, SwiftShader):
     * correct, but no GPU speed. */
    bool software;
    /* A GPU reset is reported (the context was created with, or adopted
     * having, GL_LOSE_CONTEXT_ON_RESET): work on a lost context then fails with
     * GLESC_ERROR_CONTEXT_LOST. Without it a reset may go unnoticed. */
    bool has_reset_notification;
    int uniform_buffer_offset_alignment; /* GL_UNIFORM_BUFFER_OFFSET_ALIGNMENT */
    /* The device class the kernels' configurations are chosen by: "nvidia",
     * "amd", "intel", "mali-bifrost", "mali-valhall", "adreno-6xx",
     * "adreno-7xx", "v3d", "llvmpipe" or "default" (an unknown driver);
     * detected from the renderer unless the options' device_class or
     * GLESC_DEVICE_CLASS names one. Static storage. */
    const char *device_class;
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
/* GPU memory glesc holds on a context: its storage buffers (every tensor's
 * memory and the kernels' scratch) by what holds them, in bytes allocated
 * from the driver. Weights and KV caches are both persistent tensors
 * (glesc_model_info.gpu_bytes and glesc_session_kv_bytes tell them apart). */
typedef struct glesc_memory_stats {
    /* Persistent tensors (glesc_weight_new), each buffer at its exact size. */
    uint64_t persistent_bytes;
    /* Buffers graphs hold now (inputs, intermediates of a compute, kept
     * outputs, kernel scratch), rounded up to the pool's size classes (at
     * most 25%); activation_requested_bytes is what their holders asked
     * for, the difference the rounding. */
    uint64_t activation_bytes, activation_requested_bytes;
    /* Released buffers the pool keeps for the next compute (at most
     * glesc_context_options.pool_budget). */
    uint64_t cached_bytes;
    uint64_t total_bytes; /* persistent + activation + cached */
    /* Since the context was created, glesc_context_reset_stats or
     * glesc_context_memory_reset_peak: the highest total_bytes and its split
     * at that moment (the peak adds up to the other three), and the most
     * activation_requested_bytes held at once (the steps' own peak, which
     * may fall at another moment: the rest of peak_total_bytes beyond the
     * persistent bytes and this is what the pool held beyond the most the
     * steps needed, its slack). */
    uint64_t peak_total_bytes, peak_persistent_bytes, peak_activation_bytes, peak_cached_bytes;
    uint64_t max_activation_requested_bytes;
} glesc_memory_stats;

/* Fills *out (zeros for a NULL ctx). Cheap: counters the pool keeps. */
GLESC_API void glesc_context_memory(const glesc_context *ctx, glesc_memory_stats *out);
/* Starts the peak of glesc_context_memory again from what is held now
 * (also done by glesc_context_reset_stats). NULL is a no-op. */
GLESC_API void glesc_context_memory_reset_peak(glesc_context *ctx);
/* The program cache directory in use, or NULL when disk caching is off. Owned by ctx. */
GLESC_API const char *glesc_context_cache_dir(const glesc_context *ctx);

/* ---- Memory bandwidth as glesc's shaders reach it (the rooflines) ---- */
typedef struct glesc_roofline {
    uint64_t bytes;            /* the buffer each kernel read */
    int local_size;            /* invocations per workgroup (from the caps, at most 256) */
    double copy_gbps;          /* copy kernel: bytes read + bytes written per ns (GB/s) */
    double read_gbps;          /* read-only kernel (a sum): bytes read per ns (GB/s) */
    uint64_t copy_ns, read_ns; /* median time of one run of each */
} glesc_roofline;

/* Measures two plain kernels over one buffer of `bytes` (0: 256 MiB; at most
 * the storage-block limit; rounded down to whole workgroups): a vec4 copy
 * and a read-only vec4 sum, each run `iters` times (0: 20) after a warm-up
 * and timed on the GPU (CPU time around glFinish where timer queries do not
 * measure compute work, as on llvmpipe); *out gets the medians. A kernel
 * that streams weights (a GEMV, a decode step) is set against read_gbps.
 * Takes about 3 × bytes of pool memory for the call. */
GLESC_API glesc_status glesc_context_roofline(glesc_context *ctx, uint64_t bytes, int iters,
                                              glesc_roofline *out);

/* ======================================================================
 * Tensors and the lazy operation graph.
 *
 * Shapes follow ggml: shape[0] (ne0) varies fastest; a tensor has 1 to 4
 * dimensions; missing dimensions are 1. Shapes are printed in that order
 * ("[4, 3]" is 4 elements per row, 3 rows).
 *
 * A graph records operations without running them: a builder (glesc_add,
 * glesc_matmul, ...) checks its arguments, infers the result's shape and
 * returns a node. glesc_graph_compute runs what the requested outputs need:
 * it orders the nodes, fuses elementwise work into neighbouring kernels,
 * reuses the plan of an earlier graph of the same structure (same ops,
 * types and shape pattern; sizes may differ), and keeps only the outputs.
 *
 * Errors of builders: a builder returns NULL on error and leaves the message
 * in glesc_last_errmsg() (and ctx's copy), naming the op and the shapes involved, e.g.
 * "glesc_add: shapes [4, 3] and [5, 3] do not broadcast". A builder given a
 * NULL source returns NULL and keeps the earlier message, so a chain of
 * builders reports its first failure.
 *
 * Ownership: graph tensors (inputs and nodes) belong to their graph and die
 * with glesc_graph_destroy / glesc_graph_reset. Persistent tensors (weights,
 * caches) belong to the caller until glesc_weight_free; graphs that use one
 * hold a reference, so freeing it while a graph still uses it is safe.
 * ====================================================================== */
typedef struct glesc_graph glesc_graph;
typedef struct glesc_tensor glesc_tensor;

/* Operations. The order is the op table's (src/graph/ops.c), not a file
 * format: it may change between versions. */
typedef enum glesc_op {
    GLESC_OP_NONE = 0, /* a leaf: graph input or persistent tensor */
    /* views: no copy, share the source's memory */
    GLESC_OP_RESHAPE,
    GLESC_OP_VIEW,
    GLESC_OP_PERMUTE,
    GLESC_OP_BROADCAST,
    /* elementwise unary (results are f32 unless said otherwise) */
    GLESC_OP_NEG,
    GLESC_OP_ABS,
    GLESC_OP_SQR,
    GLESC_OP_SQRT,
    GLESC_OP_RSQRT,
    GLESC_OP_EXP,
    GLESC_OP_LOG,
    GLESC_OP_SIN,
    GLESC_OP_COS,
    GLESC_OP_TANH,
    GLESC_OP_SIGMOID,
    GLESC_OP_RELU,
    GLESC_OP_GELU,     /* tanh approximation */
    GLESC_OP_GELU_ERF, /* exact form */
    GLESC_OP_SILU,
    GLESC_OP_SOFTPLUS,
    GLESC_OP_STEP,  /* 1 where x > 0, else 0 */
    GLESC_OP_SCALE, /* x * s + b */
    GLESC_OP_CLAMP, /* min(max(x, lo), hi) */
    GLESC_OP_CAST,  /* to f32, f16, bf16 or i32 */
    GLESC_OP_CONT,  /* contiguous copy, same type */
    /* elementwise binary with numpy broadcasting */
    GLESC_OP_ADD,
    GLESC_OP_SUB,
    GLESC_OP_MUL,
    GLESC_OP_DIV,
    GLESC_OP_MAX,
    GLESC_OP_MIN,
    GLESC_OP_POW,
    /* reductions along one axis (the axis keeps size 1) */
    GLESC_OP_SUM,
    GLESC_OP_MEAN,
    GLESC_OP_REDUCE_MAX,
    GLESC_OP_REDUCE_MIN,
    GLESC_OP_ARGMAX, /* i32 result */
    /* along dimension 0 */
    GLESC_OP_SOFTMAX,
    GLESC_OP_RMS_NORM,
    GLESC_OP_LAYER_NORM,
    GLESC_OP_MATMUL,
    GLESC_OP_GET_ROWS,
    GLESC_OP_SET_ROWS,
    GLESC_OP_CONCAT,
    GLESC_OP_CPY,
    GLESC_OP_ROPE,
    GLESC_OP_ATTENTION,
    /* vision: convolution */
    GLESC_OP_CONV,       /* 1-D and 2-D convolution (glesc_conv2d, glesc_conv1d) */
    GLESC_OP_BATCH_NORM, /* inference form, per channel (dimension 2) */
    /* vision: pooling and shape */
    GLESC_OP_LEAKY_RELU,   /* x >= 0 ? x : alpha x */
    GLESC_OP_ELU,          /* x >= 0 ? x : alpha (e^x - 1) */
    GLESC_OP_HARD_SIGMOID, /* max(0, min(1, alpha x + beta)) */
    GLESC_OP_HARD_SWISH,   /* x max(0, min(1, x / 6 + 1 / 2)) */
    GLESC_OP_PAD,          /* constant, reflect or edge padding */
    GLESC_OP_SLICE,        /* a strided window that is no view (a negative step) */
    GLESC_OP_GATHER,       /* ONNX Gather along one dimension */
    GLESC_OP_LOG_SOFTMAX,  /* along one dimension */
    GLESC_OP_POOL,         /* max or average pooling over dimensions 0 and 1 */
    GLESC_OP_CONV_TRANSPOSE,
    GLESC_OP_COUNT_ /* not an op */
} glesc_op;

/* "add", "rms_norm", ...; NULL for a value that is not an op. Static string. */
GLESC_API const char *glesc_op_name(glesc_op op);

typedef struct glesc_graph_options {
    /* sizeof(glesc_graph_options) as the caller was compiled, set by
     * glesc_graph_options_init(); 0 means this header's layout. */
    uint32_t struct_size;
    /* glesc_matmul uses the matrix-vector kernel when the activation has at
     * most this many columns (m), else the tiled matrix-matrix kernel.
     * 0 = the default (8). At most 8. */
    int gemv_max_m;
    /* Fusion: 0 = on unless GLESC_NO_FUSION=1 is set; 1 = on; -1 = off. */
    int fusion;
    /* Measure each kernel's GPU time (glesc_graph_stats().kernel_times).
     * Costs a timer query per kernel. Also on while GLESC_TRACE is set. */
    bool timing;
} glesc_graph_options;

/* Zeroes *opts (the defaults) and sets struct_size. */
static inline void glesc_graph_options_init(glesc_graph_options *opts)
{
    for (size_t i = 0; i < sizeof *opts; i++)
        ((unsigned char *)opts)[i] = 0;
    opts->struct_size = (uint32_t)sizeof *opts;
}

/* A new empty graph on ctx, or NULL (out of memory; message in ctx). Destroy
 * it before the context. */
GLESC_API glesc_graph *glesc_graph_create(glesc_context *ctx);
/* Frees the graph, its inputs and nodes and every buffer they hold, and drops
 * its references to persistent tensors. NULL is a no-op. */
GLESC_API void glesc_graph_destroy(glesc_graph *g);
/* Frees every tensor of g (as destroy) but keeps g and its options, ready for
 * the next step's nodes. Tensor handles of g become invalid. */
GLESC_API void glesc_graph_reset(glesc_graph *g);
/* Sets g's options (NULL: defaults); takes effect at the next compute. */
GLESC_API glesc_status glesc_graph_set_options(glesc_graph *g, const glesc_graph_options *opts);
/* The context g was created on. */
GLESC_API glesc_context *glesc_graph_context(const glesc_graph *g);

/* A graph input of the given type and shape (ndim 1..4; shape[0] fastest).
 * Types: f32, f16, bf16, i32. Write its data with glesc_tensor_write before
 * computing. Owned by g. NULL on error (message in the context). */
GLESC_API glesc_tensor *glesc_tensor_new(glesc_graph *g, glesc_dtype t, int ndim,
                                         const int64_t *shape);
/* A persistent tensor (a weight, a KV cache) on ctx: its memory lives until
 * glesc_weight_free and any graph of ctx may use it. Contents start as
 * zeros (written when a graph first uses the tensor or it is read, unless
 * glesc_tensor_write or glesc_weights_write filled it first: a new weight
 * is written once). A tensor larger than the device's storage-block limit
 * is split into row chunks (rows along dimensions 1..3); only matmul (as
 * the weight) and get_rows (as the table) read such a tensor. Types: f32,
 * f16, bf16, i32, and the ggml block types with a GPU layout (q4_0, q4_1,
 * q5_0, q5_1, q8_0, q8_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs,
 * mxfp4), whose row length shape[0] must be a multiple of the type's block;
 * a quantized tensor can only be matmul's weight or get_rows' table, used
 * whole (no views). NULL on error (message in ctx). */
GLESC_API glesc_tensor *glesc_weight_new(glesc_context *ctx, glesc_dtype t, int ndim,
                                         const int64_t *shape);
/* GPU bytes a persistent tensor of type t and shape takes on ctx, as
 * glesc_weight_new allocates it: block types repacked to whole 32-bit
 * words, split into row chunks beyond the storage-block limit, each buffer
 * at its exact size (rounded up to 4 bytes). ctx may be NULL (no
 * storage-block limit). 0 when glesc_weight_new would refuse the type or
 * shape, or a row does not fit the limit. For memory planning (see
 * glesc_model_estimate). */
GLESC_API uint64_t glesc_weight_gpu_bytes(const glesc_context *ctx, glesc_dtype t, int ndim,
                                          const int64_t *shape);
/* Drops the caller's reference to a persistent tensor; its memory goes when
 * no graph uses it any more. NULL is a no-op. Only for glesc_weight_new's
 * tensors. */
GLESC_API void glesc_weight_free(glesc_tensor *t);

/* Copies size bytes (exactly the tensor's size: elements × type size, in
 * ggml's contiguous layout) from src into a graph input or persistent tensor.
 * For a block type the size is glesc_dtype_row_bytes(type, shape[0]) per row
 * and src is the tensor's bytes as stored in a GGUF file (the GPU keeps the
 * blocks repacked to whole 32-bit words). */
GLESC_API glesc_status glesc_tensor_write(glesc_tensor *t, const void *src, size_t size);
/* Where glesc_weights_write takes a persistent tensor's contents from. read
 * copies the size bytes at offset of the contents, in glesc_tensor_write's
 * layout (a block type: the blocks as a GGUF file stores them), to dst and
 * returns GLESC_OK, or an error status with the message set on the calling
 * thread (glesc_last_errmsg(); glesc_gguf_tensor_read does both). It is
 * called from several threads at once, for ranges that never overlap, and
 * must be safe to call so. */
typedef glesc_status (*glesc_read_fn)(void *user, uint64_t offset, void *dst, size_t size);
typedef struct glesc_weight_source {
    glesc_tensor *tensor; /* a persistent tensor (glesc_weight_new) */
    glesc_read_fn read;
    void *user;
} glesc_weight_source;
/* Called by glesc_weights_write on the calling thread once source i and
 * every one before it are written; true stops the writing. */
typedef bool (*glesc_weights_done_fn)(void *user, int i);
/* Writes n persistent tensors from their sources (what glesc_tensor_write
 * does with each), on all cores: the contents are cut into pieces of about
 * a MiB that worker threads read through the sources and repack straight
 * into GPU-visible memory, while the calling thread keeps the GL work (maps,
 * copies, fences): reading and repacking the next pieces overlaps uploading
 * the earlier ones. The path (GLESC_UPLOAD=map|staging|subdata): a
 * staging buffer the GPU copies from (staging: the default where
 * GL_EXT_buffer_storage exists on a hardware GPU), the destination buffers
 * mapped (map: the default elsewhere, e.g. on a software renderer, whose
 * buffers are host memory) or glBufferSubData (subdata). done (may be
 * NULL) reports the sources in order; returning true fails the call with
 * GLESC_ERROR_CANCELLED. On failure the tensors' contents are undefined and
 * ctx's message names the failing tensor (by its name, else its index) with
 * the source's message. */
GLESC_API glesc_status glesc_weights_write(glesc_context *ctx, const glesc_weight_source *src,
                                           int n, glesc_weights_done_fn done, void *user);
/* Copies the tensor's elements in contiguous order (shape[0] fastest) into
 * dst; size must be exactly the tensor's size in bytes. t must be an input, a
 * persistent tensor, or an output of the last glesc_graph_compute of its
 * graph (or a view of one of those). A block-type tensor reads back in the
 * file layout, byte for byte what glesc_tensor_write was given. */
GLESC_API glesc_status glesc_tensor_read(glesc_tensor *t, void *dst, size_t size);
/* As glesc_tensor_read, converting f16, bf16 and i32 elements to float
 * (block types: dequantized with the CPU reference); n is the number of
 * elements dst holds (must equal the tensor's). */
GLESC_API glesc_status glesc_tensor_read_f32(glesc_tensor *t, float *dst, size_t n);
/* As glesc_tensor_write from floats (converted to the tensor's type, f16 and
 * bf16 rounded to nearest even, i32 truncated, block types quantized with
 * the CPU reference quantizer). */
GLESC_API glesc_status glesc_tensor_write_f32(glesc_tensor *t, const float *src, size_t n);

/* Reading a small result without waiting for later work. glesc_tensor_read
 * waits for everything submitted so far; a readback copies a tensor's bytes
 * on the GPU into a buffer of its own, after the work submitted so far and
 * before anything submitted later, so a caller can submit the next compute
 * first and read while it runs (pipelined greedy decoding reads each token
 * so). A readback is used from its context's thread, like the context. */
typedef struct glesc_readback glesc_readback;
/* A readback on ctx; *out NULL on failure (message in glesc_last_errmsg()). */
GLESC_API glesc_status glesc_readback_create(glesc_context *ctx, glesc_readback **out);
/* NULL is a no-op. */
GLESC_API void glesc_readback_destroy(glesc_readback *rb);
/* Queues the copy of t's bytes: t is a contiguous tensor of f32, f16, bf16
 * or i32 with values (as glesc_tensor_read takes it) in one storage block;
 * a copy queued before and not yet finished is dropped. The GPU work it
 * follows is every compute submitted so far. */
GLESC_API glesc_status glesc_readback_start(glesc_readback *rb, glesc_tensor *t);
/* Waits until the copy queued by the last glesc_readback_start is done
 * (work submitted after it keeps running) and copies its bytes to dst;
 * size must be the tensor's size in bytes. GLESC_ERROR_STATE when no copy
 * is queued; the copy is consumed. */
GLESC_API glesc_status glesc_readback_finish(glesc_readback *rb, void *dst, size_t size);

GLESC_API glesc_dtype glesc_tensor_dtype(const glesc_tensor *t);
GLESC_API int glesc_tensor_ndim(const glesc_tensor *t);
/* Size of dimension d (0..3); 1 beyond ndim. */
GLESC_API int64_t glesc_tensor_dim(const glesc_tensor *t, int d);
GLESC_API int64_t glesc_tensor_nelements(const glesc_tensor *t);
GLESC_API glesc_op glesc_tensor_op(const glesc_tensor *t);
/* Names the tensor in traces and messages (copied; NULL clears). */
GLESC_API void glesc_tensor_set_name(glesc_tensor *t, const char *name);

/* ---- Views: no copy; the result shares the source's memory. ---- */
/* Same elements, new shape (the source must be contiguous). */
GLESC_API glesc_tensor *glesc_reshape(glesc_graph *g, glesc_tensor *x, int ndim,
                                      const int64_t *shape);
/* As ggml_permute: source dimension i becomes result dimension perm[i];
 * perm is a permutation of 0..3. */
GLESC_API glesc_tensor *glesc_permute(glesc_graph *g, glesc_tensor *x, const int perm[4]);
/* Swaps dimensions 0 and 1. */
GLESC_API glesc_tensor *glesc_transpose(glesc_graph *g, glesc_tensor *x);
/* A strided window: shape, byte strides nb[1..ndim-1] (nb[0] is the element
 * size) and byte offset into x (which must be contiguous or a leaf). */
GLESC_API glesc_tensor *glesc_view(glesc_graph *g, glesc_tensor *x, int ndim, const int64_t *shape,
                                   const size_t *nb, size_t offset);
/* Repeats x along its size-1 dimensions to shape (stride 0, no copy). */
GLESC_API glesc_tensor *glesc_broadcast(glesc_graph *g, glesc_tensor *x, int ndim,
                                        const int64_t *shape);

/* ---- Elementwise ---- */
/* Any unary op from GLESC_OP_NEG to GLESC_OP_STEP (no parameters). */
GLESC_API glesc_tensor *glesc_unary(glesc_graph *g, glesc_op op, glesc_tensor *x);
/* Any binary op from GLESC_OP_ADD to GLESC_OP_POW, numpy broadcasting. */
GLESC_API glesc_tensor *glesc_binary(glesc_graph *g, glesc_op op, glesc_tensor *a, glesc_tensor *b);
GLESC_API glesc_tensor *glesc_neg(glesc_graph *g, glesc_tensor *x);
GLESC_API glesc_tensor *glesc_exp(glesc_graph *g, glesc_tensor *x);
GLESC_API glesc_tensor *glesc_silu(glesc_graph *g, glesc_tensor *x);
GLESC_API glesc_tensor *glesc_gelu(glesc_graph *g, glesc_tensor *x);
GLESC_API glesc_tensor *glesc_relu(glesc_graph *g, glesc_tensor *x);
GLESC_API glesc_tensor *glesc_tanh(glesc_graph *g, glesc_tensor *x);
GLESC_API glesc_tensor *glesc_sigmoid(glesc_graph *g, glesc_tensor *x);
GLESC_API glesc_tensor *glesc_sqrt(glesc_graph *g, glesc_tensor *x);
/* x * s + b */
GLESC_API glesc_tensor *glesc_scale(glesc_graph *g, glesc_tensor *x, float s, float b);
GLESC_API glesc_tensor *glesc_clamp(glesc_graph *g, glesc_tensor *x, float lo, float hi);
/* Converts to f32, f16, bf16 or i32 (from float: truncation toward zero). */
GLESC_API glesc_tensor *glesc_cast(glesc_graph *g, glesc_tensor *x, glesc_dtype t);
/* A contiguous copy of x (e.g. of a permuted view), same type. */
GLESC_API glesc_tensor *glesc_cont(glesc_graph *g, glesc_tensor *x);
GLESC_API glesc_tensor *glesc_add(glesc_graph *g, glesc_tensor *a, glesc_tensor *b);
GLESC_API glesc_tensor *glesc_sub(glesc_graph *g, glesc_tensor *a, glesc_tensor *b);
GLESC_API glesc_tensor *glesc_mul(glesc_graph *g, glesc_tensor *a, glesc_tensor *b);
GLESC_API glesc_tensor *glesc_div(glesc_graph *g, glesc_tensor *a, glesc_tensor *b);

/* ---- Reductions, softmax, norms ---- */
/* GLESC_OP_SUM, _MEAN, _REDUCE_MAX, _REDUCE_MIN or _ARGMAX along axis
 * (0..3); the axis keeps size 1. ARGMAX gives i32: the index of the first
 * maximum (numpy's), -1 for a row that holds a NaN. An ARGMAX along
 * dimension 0 of a matrix-vector product's result (one column) runs inside
 * the product's kernel (docs/graph.md, "Fusion"). */
GLESC_API glesc_tensor *glesc_reduce(glesc_graph *g, glesc_op op, glesc_tensor *x, int axis);
/* softmax(x * scale + mask) along dimension 0. mask (may be NULL) is added
 * after scaling and broadcasts to x (typically [ne0, ne1]); causal masks
 * column j of row i when j > i + (ne0 - ne1) (queries are the last ne1
 * positions). A row with no unmasked column gives zeros. */
GLESC_API glesc_tensor *glesc_softmax(glesc_graph *g, glesc_tensor *x, glesc_tensor *mask,
                                      float scale, bool causal);
/* x / sqrt(mean(x²) + eps) along dimension 0. */
GLESC_API glesc_tensor *glesc_rms_norm(glesc_graph *g, glesc_tensor *x, float eps);
/* (x - mean) / sqrt(var + eps) along dimension 0 (no weight or bias: multiply
 * and add them, they fuse into the same kernel). */
GLESC_API glesc_tensor *glesc_layer_norm(glesc_graph *g, glesc_tensor *x, float eps);

/* ---- Matrix products and rows ---- */
/* ggml's convention: W [k, n, b2w, b3w] × X [k, m, b2, b3] → [n, m, b2, b3]
 * (f32); W's batch dimensions broadcast (b2 a multiple of b2w, b3 of b3w).
 * W: f32, f16 or bf16 (dimension 0 contiguous) or a block type (a whole
 * persistent tensor); X: f32 or f16, any strides. */
GLESC_API glesc_tensor *glesc_matmul(glesc_graph *g, glesc_tensor *w, glesc_tensor *x);
/* Embedding lookup as ggml_get_rows (the table f32, f16, bf16 or a block
 * type, dequantized exactly as on the CPU): table [ne0, rows, b2] and i32 rows
 * [n, b2, b3] → [ne0, n, b2, b3] (f32), out[i, j, k, l] = table[i, rows[j,k,l], k]. */
GLESC_API glesc_tensor *glesc_get_rows(glesc_graph *g, glesc_tensor *table, glesc_tensor *rows);
/* Writes rows of src [ne0, n, b2, b3] into dst [ne0, R, b2, b3] at the
 * indices idx (i32 [n], or [n, b2] / [n, b2, b3]): dst[:, idx[j,k,l], k, l] =
 * src[:, j, k, l]. dst is written in place (typically a persistent KV
 * cache); the result is dst after the write: read dst through it. */
GLESC_API glesc_tensor *glesc_set_rows(glesc_graph *g, glesc_tensor *dst, glesc_tensor *src,
                                       glesc_tensor *idx);
/* a and b joined along dim; the other dimensions must match. */
GLESC_API glesc_tensor *glesc_concat(glesc_graph *g, glesc_tensor *a, glesc_tensor *b, int dim);
/* Copies src into dst (same shape; dst may be a strided view of a persistent
 * tensor; converts types). In place; the result is dst after the write. */
GLESC_API glesc_tensor *glesc_cpy(glesc_graph *g, glesc_tensor *src, glesc_tensor *dst);

/* ---- Positions and attention ---- */
typedef enum glesc_rope_mode {
    GLESC_ROPE_NORMAL = 0, /* rotate adjacent pairs (x[2i], x[2i+1]) */
    GLESC_ROPE_NEOX = 2,   /* rotate halves (x[i], x[i + n_dims/2]) (ggml's value) */
} glesc_rope_mode;
/* Rotary position embedding of x [head_dim, n_head, n_tokens, 1] with pos
 * (i32 [n_tokens]): the first n_dims (even, ≤ head_dim) dimensions rotate by
 * pos · freq_scale · base^(-2i/n_dims); the rest pass through. */
GLESC_API glesc_tensor *glesc_rope(glesc_graph *g, glesc_tensor *x, glesc_tensor *pos, int n_dims,
                                   glesc_rope_mode mode, float freq_base, float freq_scale);
/* As glesc_rope, with per-dimension frequency factors (ggml_rope_ext's c;
 * Llama 3's rope_freqs.weight): freq_factors is f32 [n_dims / 2] (a
 * persistent tensor, typically) or NULL, and rotation i turns by
 * pos · freq_scale · base^(-2i/n_dims) / freq_factors[i]. */
GLESC_API glesc_tensor *glesc_rope_ext(glesc_graph *g, glesc_tensor *x, glesc_tensor *pos,
                                       glesc_tensor *freq_factors, int n_dims, glesc_rope_mode mode,
                                       float freq_base, float freq_scale);
/* As glesc_rope_ext, with ggml_rope_ext's YaRN and magnitude parameters
 * (the same names and meaning): each rotated pair is also multiplied by
 * attn_factor (LongRoPE's magnitude, 1 for none). ext_factor ≠ 0 is YaRN:
 * rotation i turns by θ = θ_i·(1 − r) + θ_e·r, with θ_e = pos ·
 * base^(-2i/n_dims) / freq_factors[i] (extrapolated), θ_i = θ_e ·
 * freq_scale (interpolated) and r = ext_factor · ramp(i), the ramp falling
 * from 1 to 0 between the correction dimensions of beta_fast and
 * beta_slow rotations over n_ctx_orig positions, and the magnitude is
 * multiplied by 1 + 0.1·ln(1 / freq_scale) as well. ext_factor = 0 and
 * attn_factor = 1 is glesc_rope_ext. */
GLESC_API glesc_tensor *glesc_rope_yarn(glesc_graph *g, glesc_tensor *x, glesc_tensor *pos,
                                        glesc_tensor *freq_factors, int n_dims,
                                        glesc_rope_mode mode, int n_ctx_orig, float freq_base,
                                        float freq_scale, float ext_factor, float attn_factor,
                                        float beta_fast, float beta_slow);
/* Fused attention, ggml_flash_attn_ext's layout: q [d, n_q, n_head, 1],
 * k [d, n_kv, n_head_kv, 1], v [d, n_kv, n_head_kv, 1] (f32 or f16, any
 * strides), n_head a multiple of n_head_kv (grouped-query heads: head h
 * reads kv head h / (n_head / n_head_kv)). softmax(q·kᵀ·scale + mask) · v,
 * with mask (may be NULL) broadcasting [n_kv, n_q] and causal masking key j
 * for query i when j > i + (n_kv - n_q). Result [d, n_head, n_q, 1] (f32),
 * so a reshape to [d·n_head, n_q] feeds the output projection. */
GLESC_API glesc_tensor *glesc_attention(glesc_graph *g, glesc_tensor *q, glesc_tensor *k,
                                        glesc_tensor *v, glesc_tensor *mask, float scale,
                                        bool causal);
/* As glesc_attention, with a sliding window and soft-capped scores (Gemma
 * 2/3). n_swa > 0: query i (at position i + n_kv - n_q) sees key j only
 * when its position minus j is below n_swa (n_swa keys including its own
 * position; llama.cpp's standard window); 0: no window. softcap > 0: each
 * score s = q·k·scale becomes softcap·tanh(s / softcap) before the mask is
 * added; 0: none. */
GLESC_API glesc_tensor *glesc_attention_ext(glesc_graph *g, glesc_tensor *q, glesc_tensor *k,
                                            glesc_tensor *v, glesc_tensor *mask, float scale,
                                            bool causal, int n_swa, float softcap);

/* ---- Vision: convolution and batch normalization ----
 * Images are NCHW as ONNX stores them, which in glesc's shape order
 * (shape[0] fastest) is x [W, H, C, N]; a weight is ONNX's [C_out, C_in /
 * group, kH, kW], here [kW, kH, C_in / group, C_out]; a bias is [C_out].
 * Results are f32. */
typedef struct glesc_conv_params {
    /* sizeof(glesc_conv_params) as the caller was compiled, set by
     * glesc_conv_params_init(); 0 means this header's layout. */
    uint32_t struct_size;
    /* ONNX Conv's attributes in ONNX's order (spatial axes outer first:
     * H, then W). 0 means the default. */
    int strides[2];   /* H, W; default 1 */
    int pads[4];      /* H begin, W begin, H end, W end (may differ); default 0 */
    int dilations[2]; /* H, W; default 1 */
    int group;        /* C_in and C_out are multiples of it; default 1 */
} glesc_conv_params;

/* Zeroes *p (the defaults: stride 1, no padding, dilation 1, one group)
 * and sets struct_size. */
static inline void glesc_conv_params_init(glesc_conv_params *p)
{
    for (size_t i = 0; i < sizeof *p; i++)
        ((unsigned char *)p)[i] = 0;
    p->struct_size = (uint32_t)sizeof *p;
}

/* ---- Vision: pooling and shape ops (ONNX semantics, opset 13-17) ----
 * Images are [W, H, C, N] (ONNX's NCHW with the dimensions in glesc's
 * order, ne[0] fastest), 1-D signals [W, C, N]; window parameters are in
 * ONNX's order, as glesc_conv_params. */
/* x >= 0 ? x : alpha·x (ONNX LeakyRelu). */
GLESC_API glesc_tensor *glesc_leaky_relu(glesc_graph *g, glesc_tensor *x, float alpha);
/* x >= 0 ? x : alpha·(e^x − 1) (ONNX Elu). */
GLESC_API glesc_tensor *glesc_elu(glesc_graph *g, glesc_tensor *x, float alpha);
/* max(0, min(1, alpha·x + beta)) (ONNX HardSigmoid; its defaults 0.2, 0.5). */
GLESC_API glesc_tensor *glesc_hard_sigmoid(glesc_graph *g, glesc_tensor *x, float alpha,
                                           float beta);
/* x·max(0, min(1, x/6 + 1/2)) (ONNX HardSwish). */
GLESC_API glesc_tensor *glesc_hard_swish(glesc_graph *g, glesc_tensor *x);

typedef enum glesc_pad_mode {
    GLESC_PAD_CONSTANT = 0, /* the value */
    GLESC_PAD_REFLECT = 1,  /* mirrored without repeating the edge (numpy's reflect) */
    GLESC_PAD_EDGE = 2,     /* the edge element repeated */
} glesc_pad_mode;
/* ONNX Pad: pads[d] elements before and pads[4 + d] after dimension d
 * (glesc's order); a negative pad removes elements. Every result dimension
 * must keep at least one element. Reflect pads wider than the source
 * reflect again and a dimension of one element repeats it, as numpy's
 * pad. x f32, f16, bf16 or i32 (read as floats:
 * exact up to 2^24; glesc_cast the result back to i32). Result f32, the
 * source's ndim. A pure elementwise op: it fuses with its neighbours. */
GLESC_API glesc_tensor *glesc_pad(glesc_graph *g, glesc_tensor *x, const int64_t pads[8],
                                  glesc_pad_mode mode, float value);
/* ONNX Slice: for each of the n (1..4) dimensions axes[i] (0..3 in glesc's
 * order, distinct), elements starts[i], starts[i] + steps[i], ... up to
 * ends[i] (exclusive); negative starts/ends count from the end, both are
 * clamped as ONNX says (to [0, n] for positive steps, [-1, n-1] for
 * negative ones); steps[i] != 0 (NULL: all 1). With every step positive the
 * result is a view (no copy, x's type; a slice of a slice stays a view);
 * a negative step gives a GLESC_OP_SLICE node (an elementwise copy, f32).
 * An empty result is GLESC_ERROR_SHAPE. */
GLESC_API glesc_tensor *glesc_slice(glesc_graph *g, glesc_tensor *x, int n, const int *axes,
                                    const int64_t *starts, const int64_t *ends,
                                    const int64_t *steps);
/* ONNX Gather along dimension axis (glesc's order) of x with i32 indices
 * of any shape: the result's dimensions are x's below axis, then the
 * indices', then x's above axis (at most 4 in all; f32). A negative index
 * counts from the end (−1 is the last); an index outside [−n, n) reads 0
 * (ONNX calls it an error; the GPU cannot report one per element). */
GLESC_API glesc_tensor *glesc_gather(glesc_graph *g, glesc_tensor *x, glesc_tensor *indices,
                                     int axis);
/* ONNX Flatten: the 2-D [ne0·…·ne(k−1), ne(k)·…·ne3] for k in 0..4 (ONNX's
 * axis a of a rank-r tensor is k = r − a). A reshape (a view) of a
 * contiguous x, else of a contiguous copy. */
GLESC_API glesc_tensor *glesc_flatten(glesc_graph *g, glesc_tensor *x, int k);
/* log(softmax(x)) along dimension axis (0..3), computed as x − max −
 * log Σ e^(x − max) (no underflow to −inf). ONNX LogSoftmax (opset 13). */
GLESC_API glesc_tensor *glesc_log_softmax(glesc_graph *g, glesc_tensor *x, int axis);

typedef enum glesc_pool_type {
    GLESC_POOL_MAX = 0,
    GLESC_POOL_AVG = 1,
} glesc_pool_type;
/* Pooling windows with ONNX MaxPool's and AveragePool's attributes, in
 * ONNX's order (spatial axes outer first: H, then W), as glesc_conv_params. */
typedef struct glesc_pool_params {
    /* sizeof(glesc_pool_params) as the caller was compiled, set by
     * glesc_pool_params_init(); 0 means this header's layout. */
    uint32_t struct_size;
    glesc_pool_type type;
    int kernel_shape[2]; /* H, W; required (>= 1) */
    int strides[2];      /* H, W; default 1 */
    /* H begin, W begin, H end, W end; default 0. Each must be smaller than
     * its window's extent ((kernel - 1)·dilation + 1), so that no window
     * lies in the padding alone. */
    int pads[4];
    int dilations[2]; /* H, W; default 1 */
    /* Output size ceil instead of floor of (in + pads - extent) / stride +
     * 1; a last window that would start past the input and its begin
     * padding is dropped (PyTorch's and newer ONNX's rule). */
    bool ceil_mode;
    /* Average: divide by the window's positions inside the padded input
     * (true) or inside the input only (false, ONNX's default). Max ignores
     * padding. */
    bool count_include_pad;
} glesc_pool_params;

/* Zeroes *p (max pooling, the defaults; set kernel_shape) and sets
 * struct_size. */
static inline void glesc_pool_params_init(glesc_pool_params *p)
{
    for (size_t i = 0; i < sizeof *p; i++)
        ((unsigned char *)p)[i] = 0;
    p->struct_size = (uint32_t)sizeof *p;
}

/* ONNX Conv (2-D): x [W, H, C_in, N] (f32, f16 or bf16), w [kW, kH, C_in /
 * group, C_out] (f32, f16 or bf16), b [C_out] or NULL; params NULL = the
 * defaults. Result [OW, OH, C_out, N] with OH = (H + pad_h_begin +
 * pad_h_end - dilation_h·(kH - 1) - 1) / stride_h + 1 (floor; OW alike);
 * padding reads zeros. Depthwise: group = C_in. Elementwise consumers
 * (bias, batch norm, activation, clamp as ReLU6, residual add) run in the
 * convolution's kernel (docs/graph.md, "Fusion"). */
GLESC_API glesc_tensor *glesc_conv2d(glesc_graph *g, glesc_tensor *x, glesc_tensor *w,
                                     glesc_tensor *b, const glesc_conv_params *params);
/* ONNX Conv (1-D): x [W, C_in, N], w [kW, C_in / group, C_out], b [C_out]
 * or NULL; only params' W entries are read (strides[1], pads[1] and pads[3],
 * dilations[1]) and the H entries must be 0 or their default. Result [OW,
 * C_out, N]: the same op and kernel as glesc_conv2d over H = 1, with the
 * same fusion. */
GLESC_API glesc_tensor *glesc_conv1d(glesc_graph *g, glesc_tensor *x, glesc_tensor *w,
                                     glesc_tensor *b, const glesc_conv_params *params);
/* ONNX BatchNormalization, inference form: y = (x - mean[c]) · scale[c] /
 * sqrt(var[c] + eps) + bias[c] with c the channel, dimension 2 of x [W, H,
 * C, N] (a 1-D x [W, C, N] has it in dimension 1: reshape it to [W, 1, C,
 * N]); scale, bias, mean and var are [C] (f32, f16 or bf16). An
 * elementwise op: it fuses into the convolution before it, and where that
 * convolution's weight (and bias) and all four of the parameters are
 * constants it is folded into the weights instead: the result is then a
 * new convolution node (glesc_tensor_op says GLESC_OP_CONV) with weight
 * w·s and bias (b - mean)·s + bias, s = scale / sqrt(var + eps), computed
 * here on the CPU in double precision and held by g. A constant is a
 * persistent tensor (glesc_weight_new) of f32, f16 or bf16 whose contents
 * were written from the host (glesc_tensor_write, glesc_weights_write)
 * before this call; the fold reads its values now, so a later write to
 * one of them does not reach the folded node (build the graph again).
 * Folding is off while the graph's fusion is (glesc_graph_options.fusion
 * -1, or GLESC_NO_FUSION=1 with fusion 0): the batch norm is then a node
 * of its own. A fold reads the weights back from the GPU, each time a
 * graph is built: build a network's graph once and compute it many times. */
GLESC_API glesc_tensor *glesc_batch_norm(glesc_graph *g, glesc_tensor *x, glesc_tensor *scale,
                                         glesc_tensor *bias, glesc_tensor *mean, glesc_tensor *var,
                                         float eps);

/* MaxPool / AveragePool (2-D) of x [W, H, C, N] (f32, f16 or bf16) →
 * [OW, OH, C, N] (f32). A window with no input element (possible only with
 * dilation) gives 0. A fused elementwise producer is computed where the
 * window reads it, consumers in the same kernel. */
GLESC_API glesc_tensor *glesc_pool2d(glesc_graph *g, glesc_tensor *x, const glesc_pool_params *p);
/* The 1-D form: x [W, C, N]; only p's W entries are read (kernel_shape[1],
 * strides[1], pads[1] and pads[3], dilations[1]) and the H entries must be
 * 0 or their default. A 2-D pool of height 1 through reshapes. */
GLESC_API glesc_tensor *glesc_pool1d(glesc_graph *g, glesc_tensor *x, const glesc_pool_params *p);
/* GlobalAveragePool (GLESC_POOL_AVG) or GlobalMaxPool over the first
 * n_spatial (1 or 2) dimensions, which keep size 1: glesc_reduce's mean or
 * max over the merged dimensions (no new kernel). */
GLESC_API glesc_tensor *glesc_global_pool(glesc_graph *g, glesc_tensor *x, glesc_pool_type type,
                                          int n_spatial);

/* ONNX ConvTranspose's attributes in ONNX's order (H, then W), as
 * glesc_conv_params. 0 means the default. */
typedef struct glesc_conv_transpose_params {
    /* sizeof(glesc_conv_transpose_params) as the caller was compiled, set
     * by glesc_conv_transpose_params_init(); 0 means this header's layout. */
    uint32_t struct_size;
    int strides[2];        /* H, W; default 1 */
    int pads[4];           /* H begin, W begin, H end, W end (>= 0); default 0 */
    int dilations[2];      /* H, W; default 1 */
    int output_padding[2]; /* H, W; each below its stride or its dilation; default 0 */
    int group;             /* divides C_in; default 1 */
} glesc_conv_transpose_params;

/* Zeroes *p (the defaults) and sets struct_size. */
static inline void glesc_conv_transpose_params_init(glesc_conv_transpose_params *p)
{
    for (size_t i = 0; i < sizeof *p; i++)
        ((unsigned char *)p)[i] = 0;
    p->struct_size = (uint32_t)sizeof *p;
}

/* ONNX ConvTranspose (2-D): x [W, H, C_in, N], w [kW, kH, C_out / group,
 * C_in] (ONNX's [C_in, C_out / group, kH, kW]), b [C_out] or NULL (all f32,
 * f16 or bf16); params NULL = the defaults. Result [OW, OH, C_out, N]
 * (f32) with OH = stride_h·(H - 1) + output_padding_h + dilation_h·(kH -
 * 1) + 1 - pad_h_begin - pad_h_end (OW alike). ONNX's output_shape and
 * auto_pad are pads the caller computes. Elementwise consumers run in its
 * kernel. */
GLESC_API glesc_tensor *glesc_conv_transpose2d(glesc_graph *g, glesc_tensor *x, glesc_tensor *w,
                                               glesc_tensor *b,
                                               const glesc_conv_transpose_params *params);
/* The 1-D form: x [W, C_in, N], w [kW, C_out / group, C_in], b [C_out] or
 * NULL; only params' W entries are read (index 1 of strides, dilations,
 * output_padding; pads[1] and pads[3]) and the H entries must be 0 or
 * their default. Result [OW, C_out, N]: glesc_conv_transpose2d of height 1
 * through reshapes. */
GLESC_API glesc_tensor *glesc_conv_transpose1d(glesc_graph *g, glesc_tensor *x, glesc_tensor *w,
                                               glesc_tensor *b,
                                               const glesc_conv_transpose_params *params);

/* ---- Running ---- */
/* Computes outs[0..n-1] and what they need. Inputs must have been written.
 * Afterwards the outputs can be read (until the next compute on g); other
 * nodes' memory has gone back to the pool. */
GLESC_API glesc_status glesc_graph_compute(glesc_graph *g, glesc_tensor *const *outs, int n);

typedef struct glesc_kernel_time {
    const char *name; /* e.g. "rms_norm+mul"; owned by the graph */
    uint64_t gpu_ns;  /* GPU time (or CPU time around glFinish without timer queries) */
    int dispatches;
} glesc_kernel_time;

typedef struct glesc_compute_stats {
    int nodes;           /* op nodes the outputs needed (views and leaves not counted) */
    int views;           /* view nodes among them */
    int kernels;         /* kernels after fusion */
    int dispatches;      /* GPU dispatches (a kernel over a chunked weight makes several) */
    uint64_t bytes_read; /* estimate: every kernel input read once */
    uint64_t bytes_written;
    bool plan_reused;                      /* the plan came from the cache */
    int glsl_built;                        /* kernels whose GLSL was generated by this compute */
    int programs_compiled;                 /* programs compiled (not found in memory or on disk) */
    uint64_t cpu_ns;                       /* host time of the compute call */
    int n_kernel_times;                    /* entries in kernel_times (0 unless timing is on) */
    const glesc_kernel_time *kernel_times; /* owned by the graph, valid until the next compute */
    /* Kernels whose generator ran to bind this compute's buffers and sizes;
     * the others replayed what the plan recorded (the same sizes as the
     * last time): a decode step binds only the kernels that see the longer
     * cache. */
    int kernels_bound;
} glesc_compute_stats;

/* Statistics of the last compute of g. */
GLESC_API void glesc_graph_stats(const glesc_graph *g, glesc_compute_stats *out);
/* The generated GLSL of every kernel of the last compute's plan, in dispatch
 * order, separated by blank lines; NULL before the first compute. Owned by
 * the plan cache: valid until the next compute on g. For docs and debugging. */
GLESC_API const char *glesc_graph_last_glsl(const glesc_graph *g);

/* ---- Quantization (CPU) ---- */
/* Converts n_rows rows of n_per_row floats (src, row after row) into type t,
 * the rows packed one after the other at dst exactly as a GGUF file stores
 * them: glesc_dtype_row_bytes(t, n_per_row) bytes per row, any alignment.
 * Deterministic: the same floats give the same bytes on every host. f32,
 * f16 and bf16 are converted (round-to-nearest-even); the legacy types
 * (q4_0 .. q8_1), q8_k and mxfp4 follow ggml's reference quantizers byte for
 * byte; q2_k .. q6_k, iq4_nl and iq4_xs use round-to-nearest scales (valid
 * blocks, somewhat larger error than llama-quantize's searched scales).
 * Returns GLESC_ERROR_INVALID_ARGUMENT when a count is negative, n_per_row
 * is not a multiple of glesc_dtype_block_size(t), dst_size is smaller than
 * the rows need, src or dst is NULL while there is work, or (block types) an
 * input is not finite; GLESC_ERROR_UNSUPPORTED for a type glesc has no
 * quantizer for. The message (glesc_last_errmsg) names the type, the counts
 * or the element. Nothing is written on failure; the caller owns src and
 * dst. */
GLESC_API glesc_status glesc_quantize(glesc_dtype t, const float *src, int64_t n_rows,
                                      int64_t n_per_row, void *dst, size_t dst_size);

#ifdef __cplusplus
}
#endif
#endif /* GLESC_H */
