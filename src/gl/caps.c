/*
 * caps.c — what the context offers: versions, compute limits, the storage
 * block limit that decides tensor splitting, binary formats and the optional
 * extensions glesc may use; the context options' testing overrides lower
 * them (a smaller storage block, no subgroups, fewer invocations and less
 * shared memory: the portable path on a big GPU).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gl/gl.h"

bool gl_has_extension(const char *name)
{
    GLint n = 0;
    glGetIntegerv(GL_NUM_EXTENSIONS, &n);
    for (GLint i = 0; i < n; i++) {
        const char *e = (const char *)glGetStringi(GL_EXTENSIONS, (GLuint)i);
        if (e && !strcmp(e, name))
            return true;
    }
    return false;
}

bool gl_renderer_is_software(const char *r)
{
    return r && (strstr(r, "llvmpipe") || strstr(r, "softpipe") || strstr(r, "SwiftShader") ||
                 strstr(r, "Software Rasterizer"));
}

static char *dup_gl_string(GLenum name)
{
    const char *s = (const char *)glGetString(name);
    return core_strdup(s ? s : "");
}

/* ---- limits descriptions (glesc_context_options_limits, GLESC_LIMITS) ---- */

typedef struct limits_class {
    const char *name;
    int blocks, invocations, shared;
} limits_class;

/* What Mesa 25.0's drivers report for compute (through drm-shim: docs/devices.md);
 * none of them offers GL_KHR_shader_subgroup. */
static const limits_class limits_classes[] = {
    {"mali", 8, 256, 32 << 10},
    {"adreno", 16, 1024, 32 << 10},
    {"v3d", 16, 256, 32 << 10},
    {"portable", 0, 128, 16 << 10},
};

static bool limits_int(const char *v, int *out)
{
    uint64_t n;
    if (!core_parse_size(v, &n) || n > INT32_MAX)
        return false;
    *out = (int)n;
    return true;
}

GLESC_API glesc_status glesc_context_options_limits(glesc_context_options *opts, const char *spec)
{
    core_err_reset(NULL);
    if (!opts || !spec)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                            "glesc_context_options_limits: opts or spec is NULL");
    glesc_context_options o = *opts;
    char item[64];
    for (const char *p = spec; *p;) {
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof item)
            return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                "limits '%s': an empty or overlong item at offset %d", spec,
                                (int)(p - spec));
        memcpy(item, p, len);
        item[len] = 0;
        p += len + (p[len] == ',');
        char *eq = strchr(item, '=');
        if (!eq) {
            const limits_class *c = NULL;
            for (size_t i = 0; i < CORE_ARRAY_LEN(limits_classes); i++)
                if (!strcmp(item, limits_classes[i].name))
                    c = &limits_classes[i];
            if (!c)
                return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                    "limits '%s': '%s' is no device class (mali, adreno, v3d, "
                                    "portable) and no field (blocks=, invocations=, shared=, "
                                    "ssbo=, subgroups=0)",
                                    spec, item);
            o.no_subgroups = true;
            o.max_storage_block_size = 128u << 20;
            o.max_compute_invocations = c->invocations;
            o.max_compute_shared_memory = c->shared;
            if (c->blocks)
                o.max_compute_storage_blocks = c->blocks;
            continue;
        }
        *eq = 0;
        const char *v = eq + 1;
        bool ok;
        if (!strcmp(item, "blocks"))
            ok = limits_int(v, &o.max_compute_storage_blocks);
        else if (!strcmp(item, "invocations"))
            ok = limits_int(v, &o.max_compute_invocations);
        else if (!strcmp(item, "shared"))
            ok = limits_int(v, &o.max_compute_shared_memory);
        else if (!strcmp(item, "ssbo"))
            ok = core_parse_size(v, &o.max_storage_block_size);
        else if (!strcmp(item, "subgroups"))
            ok = !strcmp(v, "0") && (o.no_subgroups = true);
        else
            return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT,
                                "limits '%s': no field '%s' (blocks, invocations, shared, ssbo, "
                                "subgroups)",
                                spec, item);
        if (!ok)
            return core_err_set(
                NULL, GLESC_ERROR_INVALID_ARGUMENT, "limits '%s': %s=%s is not %s", spec, item, v,
                !strcmp(item, "subgroups") ? "0" : "a positive number (K, M, G allowed)");
    }
    *opts = o;
    return GLESC_OK;
}

glesc_status gl_limits_from_env(glesc_context_options *opts)
{
    const char *e = core_env("GLESC_LIMITS");
    if (!e)
        return GLESC_OK;
    glesc_context_options env;
    memset(&env, 0, sizeof env);
    glesc_status st = glesc_context_options_limits(&env, e);
    if (st != GLESC_OK) {
        core_err_prefix(NULL, "GLESC_LIMITS");
        return st;
    }
    /* the options' own caps win */
    if (!opts->max_storage_block_size)
        opts->max_storage_block_size = env.max_storage_block_size;
    opts->no_subgroups |= env.no_subgroups;
    if (!opts->max_compute_invocations)
        opts->max_compute_invocations = env.max_compute_invocations;
    if (!opts->max_compute_shared_memory)
        opts->max_compute_shared_memory = env.max_compute_shared_memory;
    if (!opts->max_compute_storage_blocks)
        opts->max_compute_storage_blocks = env.max_compute_storage_blocks;
    return GLESC_OK;
}

/* v lowered to cap when cap is set (> 0) and smaller. */
static int cap_int(int v, int cap)
{
    return cap > 0 && cap < v ? cap : v;
}

glesc_status gl_caps_query(glesc_context *ctx, const glesc_context_options *opts)
{
    glesc_caps *c = &ctx->caps;
    c->vendor = dup_gl_string(GL_VENDOR);
    c->renderer = dup_gl_string(GL_RENDERER);
    c->version = dup_gl_string(GL_VERSION);
    c->glsl_version = dup_gl_string(GL_SHADING_LANGUAGE_VERSION);
    if (!c->vendor || !c->renderer || !c->version || !c->glsl_version)
        return core_err_set(&ctx->err, GLESC_ERROR_OUT_OF_MEMORY, "capability strings");
    glGetIntegerv(GL_MAJOR_VERSION, &c->gl_major);
    glGetIntegerv(GL_MINOR_VERSION, &c->gl_minor);
    c->platform_reason = ctx->platform_reason;
    c->device = ctx->device_desc ? ctx->device_desc : "";

    GLint64 ssbo = 0;
    glGetInteger64v(GL_MAX_SHADER_STORAGE_BLOCK_SIZE, &ssbo);
    c->driver_max_storage_block_size = (uint64_t)ssbo;
    c->max_storage_block_size = (uint64_t)ssbo;
    if (opts->max_storage_block_size && opts->max_storage_block_size < c->max_storage_block_size)
        c->max_storage_block_size = opts->max_storage_block_size;
    glGetIntegerv(GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS, &c->max_compute_storage_blocks);
    c->max_compute_storage_blocks =
        cap_int(c->max_compute_storage_blocks, opts->max_compute_storage_blocks);
    glGetIntegerv(GL_MAX_COMPUTE_SHARED_MEMORY_SIZE, &c->max_compute_shared_memory);
    glGetIntegerv(GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS, &c->max_compute_invocations);
    for (GLuint i = 0; i < 3; i++) {
        glGetIntegeri_v(GL_MAX_COMPUTE_WORK_GROUP_SIZE, i, &c->max_workgroup_size[i]);
        glGetIntegeri_v(GL_MAX_COMPUTE_WORK_GROUP_COUNT, i, &c->max_workgroup_count[i]);
        c->max_workgroup_size[i] = cap_int(c->max_workgroup_size[i], opts->max_compute_invocations);
    }
    c->max_compute_invocations = cap_int(c->max_compute_invocations, opts->max_compute_invocations);
    c->max_compute_shared_memory =
        cap_int(c->max_compute_shared_memory, opts->max_compute_shared_memory);
    glGetIntegerv(GL_SHADER_STORAGE_BUFFER_OFFSET_ALIGNMENT, &c->storage_buffer_offset_alignment);
    if (c->storage_buffer_offset_alignment <= 0)
        c->storage_buffer_offset_alignment = 256;
    glGetIntegerv(GL_UNIFORM_BUFFER_OFFSET_ALIGNMENT, &c->uniform_buffer_offset_alignment);
    if (c->uniform_buffer_offset_alignment <= 0)
        c->uniform_buffer_offset_alignment = 256;
    glGetIntegerv(GL_NUM_PROGRAM_BINARY_FORMATS, &c->num_program_binary_formats);

    /* GLESC_NO_SUBGROUPS=1 as the option: runs the shared-memory fallbacks
     * (what llvmpipe runs) on a GPU with subgroups, e.g. its tests */
    const char *nosg = getenv("GLESC_NO_SUBGROUPS");
    bool no_sg = opts->no_subgroups || (nosg && nosg[0] && strcmp(nosg, "0") != 0);
    c->has_subgroup = !no_sg && gl_has_extension("GL_KHR_shader_subgroup");
    if (c->has_subgroup) {
        GLint v = 0;
        glGetIntegerv(GL_SUBGROUP_SIZE_KHR, &v);
        c->subgroup_size = v;
        glGetIntegerv(GL_SUBGROUP_SUPPORTED_STAGES_KHR, &v);
        c->subgroup_stages = (uint32_t)v;
        glGetIntegerv(GL_SUBGROUP_SUPPORTED_FEATURES_KHR, &v);
        c->subgroup_features = (uint32_t)v;
        /* Only useful to us when compute shaders have it. */
        if (!(c->subgroup_stages & GL_COMPUTE_SHADER_BIT))
            c->has_subgroup = false;
    }
    c->has_timer_query = gl_has_extension("GL_EXT_disjoint_timer_query");
    ctx->timer_cpu = c->renderer && strstr(c->renderer, "llvmpipe") != NULL;
    c->software = gl_renderer_is_software(c->renderer);
    ctx->cpu_device = c->software;
    c->has_parallel_compile = gl_has_extension("GL_KHR_parallel_shader_compile");
    c->has_buffer_storage = gl_has_extension("GL_EXT_buffer_storage");
    static const char *const f16_exts[] = {"GL_EXT_shader_explicit_arithmetic_types_float16",
                                           "GL_AMD_gpu_shader_half_float", "GL_NV_gpu_shader5"};
    ctx->f16_ext = NULL;
    for (size_t i = 0; i < CORE_ARRAY_LEN(f16_exts) && !ctx->f16_ext; i++)
        if (gl_has_extension(f16_exts[i]))
            ctx->f16_ext = f16_exts[i];
    c->has_debug = (c->gl_major == 3 && c->gl_minor >= 2) || gl_has_extension("GL_KHR_debug");
    /* Resets are reported only when the context was made with (or, adopted,
     * has) the lose-context-on-reset strategy. GL_RESET_NOTIFICATION_STRATEGY
     * exists from GLES 3.2 and in GL_KHR/EXT_robustness (the same value). */
    bool robustness = (c->gl_major == 3 && c->gl_minor >= 2) ||
                      gl_has_extension("GL_KHR_robustness") ||
                      gl_has_extension("GL_EXT_robustness");
    if (robustness) {
        GLint strategy = 0;
        glGetIntegerv(GL_RESET_NOTIFICATION_STRATEGY, &strategy);
        c->has_reset_notification = strategy == GL_LOSE_CONTEXT_ON_RESET;
    }
    glesc_status st = gl_check(ctx, "capability query");
    return st != GLESC_OK ? st : gl_devclass_choose(ctx, opts->device_class);
}
