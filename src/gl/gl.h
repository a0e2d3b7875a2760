/*
 * gl.h — the GL layer: the headless EGL context behind glesc_context, its
 * capabilities, the SSBO pool, the program cache (memory + disk binaries),
 * and the executor primitive (upload, download, dispatch with automatic
 * barrier placement, fences, GPU timers).
 *
 * Everything here runs on the thread that has the context current: public
 * entry points that touch GL first call gl_context_bind (or
 * gl_context_bind_for_free), which makes it so.
 */
#ifndef GLESC_GL_H
#define GLESC_GL_H

#include <EGL/egl.h>
#include <EGL/eglext.h>
#include <GLES3/gl32.h>
#include <GLES2/gl2ext.h>

#include "core/core.h"
#include "core/disk_cache.h"

typedef struct gl_pool gl_pool;
typedef struct gl_program_cache gl_program_cache;

/* Extension entry points, NULL where the extension is absent. */
typedef struct gl_ext_fns {
    void(GL_APIENTRY *MaxShaderCompilerThreadsKHR)(GLuint count);
    void(GL_APIENTRY *GenQueriesEXT)(GLsizei n, GLuint *ids);
    void(GL_APIENTRY *DeleteQueriesEXT)(GLsizei n, const GLuint *ids);
    void(GL_APIENTRY *BeginQueryEXT)(GLenum target, GLuint id);
    void(GL_APIENTRY *EndQueryEXT)(GLenum target);
    void(GL_APIENTRY *GetQueryObjectuivEXT)(GLuint id, GLenum pname, GLuint *params);
    void(GL_APIENTRY *GetQueryObjectui64vEXT)(GLuint id, GLenum pname, GLuint64 *params);
    void(GL_APIENTRY *DebugMessageCallback)(GLDEBUGPROCKHR cb, const void *user);
    /* GLES 3.2, GL_KHR_robustness or GL_EXT_robustness; loaded only when the
     * context reports resets (caps.has_reset_notification). */
    GLenum(GL_APIENTRY *GetGraphicsResetStatus)(void);
    /* GL_EXT_buffer_storage (caps.has_buffer_storage): staging buffers
     * mapped for the whole upload (gl_staging_create). */
    void(GL_APIENTRY *BufferStorageEXT)(GLenum target, GLsizeiptr size, const void *data,
                                        GLbitfield flags);
} gl_ext_fns;

/* A buffer range bound to an indexed binding point (exec.c's state cache). */
typedef struct gl_bound {
    GLuint buf; /* 0: unknown or nothing */
    uint64_t offset, size;
} gl_bound;
#define GL_BOUND_SSBOS 16

/* Device classes (devclass.c): a GPU family, or a CPU renderer. */
typedef enum gl_devclass {
    GL_CLASS_DEFAULT, /* an unknown driver: the conservative configurations */
    GL_CLASS_LLVMPIPE,
    GL_CLASS_NVIDIA,
    GL_CLASS_AMD,
    GL_CLASS_INTEL,
    GL_CLASS_MALI_BIFROST,
    GL_CLASS_MALI_VALHALL,
    GL_CLASS_ADRENO_6XX,
    GL_CLASS_ADRENO_7XX,
    GL_CLASS_V3D,
    GL_CLASS_COUNT
} gl_devclass;

const char *gl_devclass_name(gl_devclass c);
bool gl_devclass_parse(const char *name, gl_devclass *out);
/* The class the strings name (software: a CPU renderer). */
gl_devclass gl_devclass_detect(const char *vendor, const char *renderer, bool software);
/* Sets ctx->devclass and caps.device_class after the caps query: opt (the
 * options' device_class), else GLESC_DEVICE_CLASS, else detected; "auto"
 * detects. An unknown name is an error naming it. */
glesc_status gl_devclass_choose(glesc_context *ctx, const char *opt);

struct glesc_context {
    core_err err;
    /* EGL objects */
    EGLDisplay dpy;
    EGLContext egl_ctx;
    EGLSurface surface; /* glesc's own pbuffer; EGL_NO_SURFACE when surfaceless */
    /* dpy and egl_ctx are the application's (glesc_context_options'
     * egl_display, egl_context): never terminated or destroyed here. The
     * application may change GL state between calls, so nothing may assume
     * state from an earlier call survives (an executor state cache must be
     * invalidated on entry then). */
    bool adopted;
    /* How glesc made egl_ctx, for helper contexts of its share group
     * (gl_helper_create): its config and attributes; share_ok when glesc
     * made it itself, surfaceless (a helper needs no surface then). */
    bool share_ok;
    EGLConfig egl_cfg;
    EGLint egl_attrs[16];
    /* A reset was seen (or simulated): every later call fails with
     * GLESC_ERROR_CONTEXT_LOST without touching GL. */
    bool lost;
    GLenum simulated_reset; /* testing aid, see gl_context_simulate_reset */
    glesc_abort_fn abort_fn;
    void *abort_user;
    glesc_compile_fn compile_fn;
    void *compile_user;
    int drm_fd; /* GBM only; -1 otherwise */
    struct gbm_device *gbm;
    /* capabilities and the strings they point to */
    glesc_caps caps;
    char *platform_reason, *device_desc, *extensions_note;
    gl_ext_fns fn;
    /* resources */
    gl_pool *pool;
    gl_program_cache *programs;
    char *cache_dir; /* NULL: disk cache off */
    /* The cache directory's entries (program binaries, tuning data); NULL
     * when off or unusable. Opened and closed by program_cache.c. */
    core_disk_cache *disk_cache;
    /* executor state: barrier epochs (see exec.c) */
    uint64_t ssbo_epoch, update_epoch;
    uint64_t dispatches, barriers;
    /* Dispatches known complete: ctx->dispatches when the last wait for
     * the GPU began (exec.c, "Host writes"). */
    uint64_t synced;
    /* host writes that had to wait for the GPU (gl_host_write_guard): a
     * pipelined step must cause none */
    uint64_t write_waits;
    /* the last dispatch whose parameter block is in the ring */
    uint64_t param_ring_use;
    /* Submission pacing (exec.c, "Flushes"): dispatches since the last
     * flush or host wait, and how many make the next flush; flush_max 0
     * turns early flushes off (GLESC_FLUSH_EVERY=0). */
    uint32_t since_flush, flush_at, flush_max;
    /* the storage barriers' bits (GLESC_BARRIERS; 0: none, measuring) */
    GLbitfield barrier_bits;
    /* What the executor last bound (exec.c, "State cache"): the program,
     * the first storage binding points and the parameter block. */
    struct {
        GLuint program;
        gl_bound ssbo[GL_BOUND_SSBOS];
        gl_bound params;
    } bound;
    /* The ring of parameter blocks of gl_dispatch (exec.c). */
    GLuint param_ring;
    uint64_t param_ring_size, param_ring_pos;
    bool debug;
    /* GPU timers fall back to CPU time around glFinish: the driver's
     * GL_TIME_ELAPSED queries do not cover compute dispatches (llvmpipe
     * reports ~1 ns for a multi-second GEMM). */
    bool timer_cpu;
    /* The device is a CPU (Mesa's llvmpipe): kernels that choose a
     * workgroup size by device take small ones there (its barriers and
     * large workgroups cost more than the parallelism gives). */
    bool cpu_device;
    /* The device class (devclass.c): what the kernels' configurations are
     * chosen by (src/kernels/devclass.c). */
    gl_devclass devclass;
    /* The GLSL extension with float16_t / f16vec4 arithmetic
     * (GL_EXT_shader_explicit_arithmetic_types_float16,
     * GL_AMD_gpu_shader_half_float or GL_NV_gpu_shader5, the first the
     * driver lists); NULL: none. glesc-bench measures its multiply-add rate
     * beside fp32's (compute_roofline_fma). */
    const char *f16_ext;
    /* State of a higher layer that lives as long as the context (the compute
     * layer's plan cache, trace file and device profile). The gl layer cannot
     * call upward, so that layer registers its destructor here;
     * glesc_context_destroy calls it first, while the GL context is still
     * current. */
    void *compute_state;
    void (*compute_state_free)(glesc_context *ctx);
};

/* Sets ctx's error with the current EGL error appended, returns GLESC_ERROR_EGL. */
glesc_status gl_egl_error(glesc_context *ctx, const char *step);
/* Reads glGetError; on an error sets ctx's message naming step, returns
 * GLESC_ERROR_GL (GLESC_ERROR_CONTEXT_LOST when the error is a lost context
 * or a reset is reported). */
glesc_status gl_check(glesc_context *ctx, const char *step);
const char *gl_error_name(GLenum e);

/* ---- Platforms (platform.c) ---- */
/* Finds a display on platform (GLESC_PLATFORM_AUTO: GBM, then EGL devices,
 * then surfaceless) and makes a GLES 3.1+ context on it current; device
 * (NULL: any) is a render node path or an EGL device index. platform_src,
 * device_src: where the choice came from ("the options", "GLESC_PLATFORM",
 * ...), for the reason glesc-info prints. Sets caps.platform,
 * platform_reason and device_desc; on failure ctx->err names every
 * candidate tried. */
glesc_status gl_platform_create(glesc_context *ctx, glesc_platform platform, const char *device,
                                const char *platform_src, const char *device_src);
/* The application's display and context (glesc_context_options'
 * egl_display, egl_context): checked, made current, never owned. */
glesc_status gl_platform_adopt(glesc_context *ctx, EGLDisplay dpy, EGLContext ectx);
/* Undoes gl_platform_create or gl_platform_adopt: releases ctx from this
 * thread if it is current here, destroys glesc's surface and, unless
 * adopted, its context and display reference; closes a GBM device. */
void gl_platform_release(glesc_context *ctx);
/* A GLESC_PLATFORM value (glesc_platform_name's words) into *out; an error
 * in the thread's message when it is none. */
glesc_status gl_platform_parse(const char *s, glesc_platform *out);

/* ---- Current context and resets (context.c) ---- */
/* For a public entry point `call` that touches GL: makes ctx current on the
 * calling thread unless it is (a cheap eglGetCurrentContext comparison);
 * GLESC_ERROR_STATE when it is current on another thread,
 * GLESC_ERROR_CONTEXT_LOST once a reset was seen; the message names call. */
glesc_status gl_context_bind(glesc_context *ctx, const char *call);
/* The same for calls that free (and return nothing): when ctx cannot be
 * made current the failure is logged and no context is left current on
 * this thread, so the GL calls that follow touch no one else's objects
 * (they do nothing; ctx's GL objects go with its EGL context). */
void gl_context_bind_for_free(glesc_context *ctx, const char *call);
/* After the GPU finished or failed work: asks the driver whether the
 * context was reset (where it reports resets). GLESC_ERROR_CONTEXT_LOST
 * with a message naming step and the kind of reset, else GLESC_OK. */
glesc_status gl_reset_check(glesc_context *ctx, const char *step);
/* Testing aid: the next gl_reset_check reports status (GL_GUILTY_CONTEXT_RESET,
 * GL_INNOCENT_CONTEXT_RESET or GL_UNKNOWN_CONTEXT_RESET) as if the driver did. */
void gl_context_simulate_reset(glesc_context *ctx, GLenum status);

/* ---- Helper contexts (context.c) ----
 * A context of ctx's share group that another thread makes current, so
 * that thread can do GL work whose objects the GL thread then uses: the
 * program cache's compile threads. Only where glesc made ctx itself,
 * surfaceless (else GLESC_ERROR_UNSUPPORTED). A helper is created and
 * destroyed on ctx's thread, bound and released on its own. */
glesc_status gl_helper_create(glesc_context *ctx, EGLContext *out);
/* Makes helper current on the calling thread (no surface); false when EGL
 * refuses. */
bool gl_helper_bind(const glesc_context *ctx, EGLContext helper);
/* Releases the calling thread's helper and its EGL thread state. */
void gl_helper_release(const glesc_context *ctx);
/* EGL_NO_CONTEXT is a no-op. */
void gl_helper_destroy(glesc_context *ctx, EGLContext helper);

/* ---- Capabilities (caps.c) ---- */
glesc_status gl_caps_query(glesc_context *ctx, const glesc_context_options *opts);
/* GLESC_LIMITS (glesc_context_options_limits' text) into the caps *opts
 * leaves at 0; an error (in the thread's message) when it does not parse. */
glesc_status gl_limits_from_env(glesc_context_options *opts);
/* True when renderer names a CPU implementation (llvmpipe, softpipe, ...). */
bool gl_renderer_is_software(const char *renderer);
bool gl_has_extension(const char *name);

/* ---- SSBO pool (pool.c) ----
 * Buffers are handed out by (size class, usage). Size classes are the powers
 * of two split in four steps (1, 1.25, 1.5, 1.75 × 2^k), so a buffer is at
 * most 25% larger than asked for; released buffers are cached and trimmed
 * least-recently-used first to the byte budget. Persistent buffers
 * (GL_USAGE_WEIGHTS) are the exception: exact size, deleted on release. */
typedef enum gl_usage {
    GL_USAGE_WEIGHTS,     /* persistent tensors (weights, KV caches): exact size, never cached */
    GL_USAGE_ACTIVATIONS, /* written and read by shaders */
    GL_USAGE_READBACK,    /* written by shaders, read by the host */
    /* the kernels' scratch (compute_scratch): its own class, so a new one
     * (it only grows) is never a buffer that work in flight still uses,
     * which the host's zero fill could land under */
    GL_USAGE_SCRATCH,
    GL_USAGE_COUNT_
} gl_usage;

typedef struct gl_buffer {
    GLuint id;
    uint64_t size;      /* the size class: bytes allocated */
    uint64_t requested; /* bytes asked for by the current holder */
    gl_usage usage;
    bool defined;  /* contents written since acquire */
    bool unbacked; /* no data store yet (gl_pool_acquire_unbacked) */
    /* barrier tracking: epochs of the last shader write / read (exec.c) */
    uint64_t write_ssbo_epoch, write_update_epoch, read_ssbo_epoch;
    /* the last dispatch that bound it (ctx->dispatches then): a host write
     * must not overtake it (exec.c, "Host writes") */
    uint64_t last_use;
    uint64_t lru_tick;             /* when it was released (cached buffers) */
    bool cached;                   /* in the pool's cache (else held by a user) */
    struct gl_buffer *prev, *next; /* the pool's live or cached list */
} gl_buffer;

uint64_t gl_pool_size_class(uint64_t size);
glesc_status gl_pool_create(glesc_context *ctx, uint64_t budget);
void gl_pool_destroy(glesc_context *ctx);
/* A buffer of at least size bytes for usage. Refuses sizes above the
 * storage-block limit (GLESC_ERROR_LIMIT, message names both sizes). */
glesc_status gl_pool_acquire(glesc_context *ctx, uint64_t size, gl_usage usage, gl_buffer **out);
/* A persistent buffer (GL_USAGE_WEIGHTS) of exactly size bytes, counted as
 * held, whose data store comes later, at gl_buffer_back: nothing else may
 * use it before (releasing it is fine). For a writer that allocates each
 * buffer just ahead of the threads that fill it, where the driver's
 * allocation is costly work of its own (llvmpipe zero-fills a new buffer
 * on the calling thread), so that it overlaps the filling of the buffers
 * before instead of all coming first. */
glesc_status gl_pool_acquire_unbacked(glesc_context *ctx, uint64_t size, gl_buffer **out);
/* Gives an unbacked buffer its data store (contents undefined); nothing
 * for one that has it. On failure the buffer stays unbacked. */
glesc_status gl_buffer_back(glesc_context *ctx, gl_buffer *buf);
/* Returns buf to the cache (NULL is a no-op); trims to the budget. */
void gl_pool_release(glesc_context *ctx, gl_buffer *buf);
/* Deletes cached buffers until at most budget bytes stay cached. */
void gl_pool_trim(glesc_context *ctx, uint64_t budget);
/* The pool's release clock now, and the deletion of every buffer cached
 * after that time: what a piece of work released since gl_pool_tick goes
 * back to the driver (the device profile's, which nothing reuses). */
uint64_t gl_pool_tick(const glesc_context *ctx);
void gl_pool_drop_since(glesc_context *ctx, uint64_t tick);
void gl_pool_stats(const glesc_context *ctx, glesc_stats *st);
void gl_pool_reset_stats(glesc_context *ctx);
/* The peak of glesc_context_memory starts again from what is held now. */
void gl_pool_reset_peak(glesc_context *ctx);

/* ---- Program cache (program_cache.c) ---- */
typedef struct gl_program {
    GLuint id;
    core_hash128 key; /* hash of the source */
    int local_size[3];
} gl_program;

glesc_status gl_program_cache_create(glesc_context *ctx, const char *dir);
void gl_program_cache_destroy(glesc_context *ctx);
/* The program for a compute shader source: from memory, else from the disk
 * cache, else compiled (and written to disk). The program is owned by the
 * cache and lives as long as the context. Compile/link errors carry the full
 * info log and the numbered source lines around the error. */
glesc_status gl_program_get(glesc_context *ctx, const char *source, const gl_program **out);
/* The same for n sources at once: every hit is taken and every miss started
 * before any is waited for, so misses compile concurrently: on compile
 * threads with helper contexts (GLESC_COMPILE_THREADS; see program_cache.c),
 * else where the driver has GL_KHR_parallel_shader_compile (unless
 * GLESC_NO_PARALLEL_COMPILE=1); a source given twice is compiled once. */
glesc_status gl_program_get_batch(glesc_context *ctx, const char *const *sources, int n,
                                  const gl_program **out);
/* One program's compile (compile.c). gl_compile_link: glCreateShader ..
 * glLinkProgram (the link may still run where the driver compiles
 * concurrently); the program, or 0 when an object could not be made
 * (*failed names the call); touches no glesc state (the compile threads
 * call it on their helper contexts). gl_compile_start: the same into *prog,
 * a 0 an error. gl_compile_finish: waits for prog's link; on failure the
 * error with the logs and the source lines around the first it names. */
GLuint gl_compile_link(const char *source, const char **failed);
glesc_status gl_compile_start(glesc_context *ctx, const char *source, GLuint *prog);
glesc_status gl_compile_finish(glesc_context *ctx, GLuint prog, const char *source);
/* Whether compiles can run in the background while the GL thread goes on:
 * the driver's GL_KHR_parallel_shader_compile with no compile threads of
 * glesc's (NVIDIA's driver; not llvmpipe, whose threads compile). */
bool gl_program_cache_background(const glesc_context *ctx);
/* Starts compiling every source no cache holds and returns without waiting
 * (where gl_program_cache_background; elsewhere nothing): a later
 * gl_program_get_batch of one of them takes it, waiting if it is not done. */
glesc_status gl_program_start_batch(glesc_context *ctx, const char *const *sources, int n);
/* Records the background compiles the driver reports done (one that failed
 * is left to the batch that needs it, which compiles it again and reports);
 * whether none is left. Never waits. */
bool gl_program_cache_background_done(glesc_context *ctx);
/* Waits for every background compile and records it; the first failure's
 * status (its message in ctx->err) after all are done. */
glesc_status gl_program_cache_background_finish(glesc_context *ctx);
void gl_program_cache_stats(const glesc_context *ctx, glesc_stats *st);
void gl_program_cache_reset_stats(glesc_context *ctx);
/* Whether a batch's misses compile concurrently (the driver's
 * GL_KHR_parallel_shader_compile, not switched off by
 * GLESC_NO_PARALLEL_COMPILE=1); read when the context is created. */
bool gl_program_cache_parallel(const glesc_context *ctx);
/* The most compiles that were started and not yet collected at once since
 * creation or the last reset of the statistics: 1 when compiles run one at
 * a time, up to a batch's misses when they run concurrently. */
int gl_program_cache_max_in_flight(const glesc_context *ctx);
/* Path of the disk entry for source (for tests), or NULL when disk caching
 * is off. core_free the result. */
char *gl_program_cache_entry_path(glesc_context *ctx, const char *source);
/* Forgets every in-memory program (they are deleted), so the next get goes to
 * the disk cache: used by tests and benchmarks. */
void gl_program_cache_drop_memory(glesc_context *ctx);

/* ---- Executor primitive (exec.c) ---- */
glesc_status gl_buffer_upload(glesc_context *ctx, gl_buffer *buf, uint64_t offset, const void *data,
                              uint64_t size);
/* Fills [offset, offset+size) with zero bytes. */
/* Before the host writes memory that the dispatch numbered last_use (a
 * ctx->dispatches value) used: waits for the GPU when that dispatch may not
 * have completed (exec.c, "Host writes"); what names the write in a
 * timeout's message. */
glesc_status gl_host_write_guard(glesc_context *ctx, uint64_t last_use, const char *what);
glesc_status gl_buffer_clear(glesc_context *ctx, gl_buffer *buf, uint64_t offset, uint64_t size);
/* Waits (fence) for the GPU work that writes buf, then copies to dst. */
glesc_status gl_buffer_download(glesc_context *ctx, gl_buffer *buf, uint64_t offset, void *dst,
                                uint64_t size);
/* A fence after the work submitted so far (glDeleteSync it); *issued: the
 * dispatches issued before it (ctx->dispatches). */
glesc_status gl_sync_fence(glesc_context *ctx, GLsync *out, uint64_t *issued);
/* Waits for sync (flushing); GLESC_ERROR_TIMEOUT after timeout_ns. Once it
 * signalled, the issued dispatches before it count as done (ctx->synced:
 * host writes to memory only they used need not wait). */
glesc_status gl_sync_wait(glesc_context *ctx, GLsync sync, uint64_t issued, uint64_t timeout_ns);
/* Waits for sync only (work submitted after it may still run), then copies
 * [offset, +size) of buf to dst: buf must be one that no work after sync
 * touches (a readback buffer a copy before sync filled). */
glesc_status gl_buffer_download_after(glesc_context *ctx, GLsync sync, uint64_t issued,
                                      gl_buffer *buf, uint64_t offset, void *dst, uint64_t size);
/* Copies size bytes of src at src_offset to dst at dst_offset on the GPU,
 * after the shader writes to either (barriers as needed). */
glesc_status gl_buffer_copy(glesc_context *ctx, gl_buffer *src, uint64_t src_offset, gl_buffer *dst,
                            uint64_t dst_offset, uint64_t size);

/* Bulk uploads (persistent tensors, glesc_weights_write) take one of three
 * paths: the destination buffer mapped for writing (GL_UPLOAD_MAP), a
 * persistently mapped staging buffer copied by the GPU (GL_UPLOAD_STAGING,
 * GL_EXT_buffer_storage), or glBufferSubData from host memory
 * (GL_UPLOAD_SUBDATA, every driver). On the H200 (NVIDIA 580) staging loads
 * TinyLlama Q4_0 in 0.04-0.08 s, map in 0.07-0.36 s with a host copy of
 * every mapped buffer kept by the driver (the process's RSS grows by the
 * weights), subdata in 0.4-0.5 s (the GL thread copies alone); on a
 * software renderer the buffers are host memory, and writing them in place
 * (map) saves the copy. */
typedef enum gl_upload_path { GL_UPLOAD_MAP, GL_UPLOAD_STAGING, GL_UPLOAD_SUBDATA } gl_upload_path;
/* GLESC_UPLOAD=map|staging|subdata where set (staging falls back to map
 * without GL_EXT_buffer_storage), else staging where GL_EXT_buffer_storage
 * exists on a hardware renderer, else map. */
gl_upload_path gl_upload_path_get(const glesc_context *ctx);
const char *gl_upload_path_name(gl_upload_path p);
/* Maps all of buf for writing; its old contents are discarded
 * (GL_MAP_INVALIDATE_BUFFER_BIT). Any thread may write through *out until
 * gl_buffer_unmap. */
glesc_status gl_buffer_map_write(glesc_context *ctx, gl_buffer *buf, void **out);
glesc_status gl_buffer_unmap(glesc_context *ctx, gl_buffer *buf);
/* A host-visible buffer mapped for writing while it lives (persistent,
 * coherent), the source of GPU copies into pool buffers. */
typedef struct gl_staging {
    GLuint id;
    uint64_t size;
    void *ptr; /* writable by any thread; what is written before a
                  gl_staging_copy is what it copies */
} gl_staging;
/* GLESC_ERROR_UNSUPPORTED without GL_EXT_buffer_storage. */
glesc_status gl_staging_create(glesc_context *ctx, uint64_t size, gl_staging *out);
void gl_staging_destroy(glesc_context *ctx, gl_staging *s);
/* Copies [offset, offset+size) of s into buf at dst_offset on the GPU, in
 * order with later GL commands. Write that part of s again only after a
 * fence issued after this copy has signalled (gl_fence_*). */
glesc_status gl_staging_copy(glesc_context *ctx, gl_staging *s, uint64_t offset, gl_buffer *buf,
                             uint64_t dst_offset, uint64_t size);
/* A host-readable buffer mapped while it lives (persistent, coherent,
 * client storage where the driver offers it), the destination of GPU copies
 * that the host reads after a fence: no map or unmap per read.
 * GLESC_ERROR_UNSUPPORTED without GL_EXT_buffer_storage. */
glesc_status gl_read_staging_create(glesc_context *ctx, uint64_t size, gl_staging *out);
/* Copies [offset, offset+size) of buf into s at dst_offset on the GPU, in
 * order with the dispatches before it (their writes complete first). Read
 * s->ptr only after a fence issued after this copy has signalled. */
glesc_status gl_copy_to_staging(glesc_context *ctx, gl_buffer *buf, uint64_t offset, gl_staging *s,
                                uint64_t dst_offset, uint64_t size);
/* A fence after the GL commands issued so far: NULL on failure (message in
 * ctx). gl_fence_wait: timeout_ns 0 polls; true when signalled.
 * gl_fence_delete: NULL is a no-op. */
GLsync gl_fence_insert(glesc_context *ctx);
glesc_status gl_fence_wait(glesc_context *ctx, GLsync fence, uint64_t timeout_ns, bool *done);
void gl_fence_delete(GLsync fence);

typedef struct gl_binding {
    gl_buffer *buf;
    uint64_t offset; /* multiple of caps.storage_buffer_offset_alignment */
    uint64_t size;   /* 0: to the end of the buffer */
    bool write;      /* the kernel writes it (else reads only) */
} gl_binding;

typedef enum gl_param_type { GL_PARAM_INT, GL_PARAM_UINT, GL_PARAM_FLOAT } gl_param_type;
typedef struct gl_param {
    gl_param_type type;
    union {
        int32_t i;
        uint32_t u;
        float f;
    } v;
} gl_param;

#define GL_PARAM_U(x) ((gl_param){GL_PARAM_UINT, {.u = (uint32_t)(x)}})
#define GL_PARAM_I(x) ((gl_param){GL_PARAM_INT, {.i = (int32_t)(x)}})
#define GL_PARAM_F(x) ((gl_param){GL_PARAM_FLOAT, {.f = (float)(x)}})

/* Parameters reach a kernel as one std140 uniform block at uniform
 * binding point 0 (emit declares it): param i is the 32-bit word at byte
 * 4·i. A block of n params takes gl_param_block_size(n) bytes. */
uint64_t gl_param_block_size(int n_params);
/* Bytes from one block to the next in a buffer of blocks: the size rounded
 * up to the device's GL_UNIFORM_BUFFER_OFFSET_ALIGNMENT. */
uint64_t gl_param_block_stride(const glesc_context *ctx, int n_params);
/* The block of params[0..n) as words (gl_param_block_size(n) bytes at out,
 * the padding zero). */
void gl_param_block_pack(const gl_param *params, int n_params, void *out);

/* A buffer of parameter blocks (a GL uniform buffer) that a caller fills
 * once and dispatches from many times. */
glesc_status gl_param_buffer_create(glesc_context *ctx, uint64_t size, GLuint *out);
void gl_param_buffer_destroy(glesc_context *ctx, GLuint buf);
glesc_status gl_param_buffer_write(glesc_context *ctx, GLuint buf, uint64_t offset,
                                   const void *data, uint64_t size);
/* Copies [0, size) of from into to (growing a buffer of blocks). */
glesc_status gl_param_buffer_copy(glesc_context *ctx, GLuint from, GLuint to, uint64_t size);
/* The executor's cache of bindings forgets buffer buf (it is being
 * deleted: GL unbinds it, and its name may come back for another). */
void gl_bound_forget(glesc_context *ctx, GLuint buf);
/* ... forgets everything: other code may have bound its own state (an
 * adopted context's application between glesc calls). */
void gl_bound_reset(glesc_context *ctx);

/* Binds bindings[i] to storage binding point i and the parameter block
 * (params[i] as word i) to uniform binding point 0, places a memory barrier
 * only where a binding depends on an earlier dispatch's writes (or is
 * written after an earlier read), and dispatches groups[0..2] workgroups.
 * The block goes through a ring buffer of the context: one write per
 * dispatch. */
glesc_status gl_dispatch(glesc_context *ctx, const gl_program *prog, const gl_binding *bindings,
                         int n_bindings, const gl_param *params, int n_params,
                         const uint32_t groups[3]);
/* The same with the parameter block already in a buffer of blocks: size
 * bytes at offset of buf (a multiple of the uniform offset alignment); buf
 * 0 for a kernel without params. Nothing is written: a kernel dispatched
 * again with the same params costs one binding. */
glesc_status gl_dispatch_block(glesc_context *ctx, const gl_program *prog,
                               const gl_binding *bindings, int n_bindings, GLuint buf,
                               uint64_t offset, uint64_t size, const uint32_t groups[3]);
/* Waits for all submitted work (fence); GLESC_ERROR_TIMEOUT after timeout_ns. */
glesc_status gl_finish(glesc_context *ctx, uint64_t timeout_ns);

/* GPU timer: GL_EXT_disjoint_timer_query where present, else CPU time around
 * glFinish (which serializes; note it in reports). */
typedef struct gl_timer {
    GLuint query;
    uint64_t cpu_start, cpu_ns;
    bool gpu, running;
} gl_timer;
glesc_status gl_timer_begin(glesc_context *ctx, gl_timer *t);
glesc_status gl_timer_end(glesc_context *ctx, gl_timer *t);
/* Elapsed nanoseconds (waits for the query result). GLESC_ERROR_GL when the
 * GPU reported a disjoint event (the figure is meaningless). */
glesc_status gl_timer_result(glesc_context *ctx, gl_timer *t, uint64_t *ns);
void gl_timer_release(glesc_context *ctx, gl_timer *t);

#endif /* GLESC_GL_H */
