/*
 * glesc-info — what the GPU context offers, like clinfo or
 * `vulkaninfo --summary`: the platform chosen and why, versions, compute
 * limits, extensions glesc may use, and the program cache.
 *
 * usage: glesc-info [--json] [--platform P] [--device D] [--cache-dir DIR]
 *                   [--limits SPEC]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "common/json.h"
#include "glesc.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: glesc-info [--json] [--platform auto|gbm|device|surfaceless] "
               "[--device PATH|INDEX] [--cache-dir DIR|off] [--limits SPEC]\n"
               "Prints what the headless OpenGL ES context offers to glesc (--limits: within\n"
               "a smaller device's limits, e.g. mali; see glesc_context_options_limits).\n"
               "Environment: GLESC_PLATFORM, GLESC_DEVICE, GLESC_CACHE_DIR, GLESC_LIMITS,\n"
               "GLESC_DEBUG=1\n"
               "(a flag given wins over its variable).\n");
}

/* A C string as JSON (NULL as ""), through the tools' one escaper. */
static void json_str(const char *s)
{
    tool_json_string(stdout, s ? s : "", s ? strlen(s) : 0);
}

static const char *features(uint32_t f, char *buf, size_t n)
{
    static const char *names[] = {"basic",     "vote",    "arithmetic",
                                  "ballot",    "shuffle", "shuffle_relative",
                                  "clustered", "quad"};
    buf[0] = '\0';
    for (int i = 0; i < 8; i++)
        if (f & (1u << i)) {
            strncat(buf, buf[0] ? " " : "", n - strlen(buf) - 1);
            strncat(buf, names[i], n - strlen(buf) - 1);
        }
    return buf;
}

/* The flags into *opts and *json; -1 to go on, else the exit status (0
 * after --help, 2 after a message). */
static int parse_args(int argc, char **argv, glesc_context_options *opts, bool *json)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json")) {
            *json = true;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "--platform") || !strcmp(a, "--device") ||
                    !strcmp(a, "--cache-dir") || !strcmp(a, "--limits")) &&
                   i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(a, "--limits")) {
                if (glesc_context_options_limits(opts, v) != GLESC_OK) {
                    fprintf(stderr, "glesc-info: --limits: %s\n", glesc_last_errmsg());
                    return 2;
                }
            } else if (!strcmp(a, "--device")) {
                opts->device = v;
            } else if (!strcmp(a, "--cache-dir")) {
                opts->cache_dir = v;
            } else if (!tool_parse_platform(v, &opts->platform)) {
                fprintf(stderr,
                        "glesc-info: --platform '%s' is not one of auto, gbm, device, "
                        "surfaceless\n",
                        v);
                return 2;
            } else {
                /* The library takes GLESC_PLATFORM_AUTO as "not given"; an
                 * explicit --platform auto must win over the variable too. */
                unsetenv("GLESC_PLATFORM");
            }
        } else {
            fprintf(stderr, "glesc-info: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    return -1;
}

/* The caps, the cache directory and its statistics as one JSON object. */
static void print_json(const glesc_caps *c, const glesc_stats *s, const char *cache,
                       const char *feat)
{
    printf("{\"glesc_version\": ");
    json_str(glesc_version());
    printf(", \"platform\": ");
    json_str(glesc_platform_name(c->platform));
    printf(", \"platform_reason\": ");
    json_str(c->platform_reason);
    printf(", \"device\": ");
    json_str(c->device);
    printf(", \"vendor\": ");
    json_str(c->vendor);
    printf(", \"renderer\": ");
    json_str(c->renderer);
    printf(", \"device_class\": ");
    json_str(c->device_class);
    printf(", \"version\": ");
    json_str(c->version);
    printf(", \"glsl_version\": ");
    json_str(c->glsl_version);
    printf(", \"gl_major\": %d, \"gl_minor\": %d", c->gl_major, c->gl_minor);
    printf(", \"software\": %s, \"reset_notification\": %s", c->software ? "true" : "false",
           c->has_reset_notification ? "true" : "false");
    printf(", \"max_storage_block_size\": %llu, \"driver_max_storage_block_size\": %llu",
           (unsigned long long)c->max_storage_block_size,
           (unsigned long long)c->driver_max_storage_block_size);
    printf(", \"max_compute_storage_blocks\": %d, \"max_compute_shared_memory\": %d",
           c->max_compute_storage_blocks, c->max_compute_shared_memory);
    printf(", \"max_compute_invocations\": %d", c->max_compute_invocations);
    printf(", \"max_workgroup_size\": [%d, %d, %d]", c->max_workgroup_size[0],
           c->max_workgroup_size[1], c->max_workgroup_size[2]);
    printf(", \"max_workgroup_count\": [%d, %d, %d]", c->max_workgroup_count[0],
           c->max_workgroup_count[1], c->max_workgroup_count[2]);
    printf(", \"storage_buffer_offset_alignment\": %d", c->storage_buffer_offset_alignment);
    printf(", \"num_program_binary_formats\": %d", c->num_program_binary_formats);
    printf(", \"subgroup\": {\"supported\": %s, \"size\": %d, \"stages\": %u, "
           "\"features\": ",
           c->has_subgroup ? "true" : "false", c->subgroup_size, c->subgroup_stages);
    json_str(feat);
    printf("}, \"extensions\": {\"GL_EXT_disjoint_timer_query\": %s, "
           "\"GL_KHR_parallel_shader_compile\": %s, \"GL_EXT_buffer_storage\": %s, "
           "\"GL_KHR_debug\": %s}",
           c->has_timer_query ? "true" : "false", c->has_parallel_compile ? "true" : "false",
           c->has_buffer_storage ? "true" : "false", c->has_debug ? "true" : "false");
    printf(", \"cache_dir\": ");
    if (cache)
        json_str(cache);
    else
        printf("null");
    printf(", \"cache_stats\": {\"compiles\": %llu, \"memory_hits\": %llu, \"disk_hits\": "
           "%llu, \"disk_rejects\": %llu}}\n",
           (unsigned long long)s->programs_compiled, (unsigned long long)s->program_memory_hits,
           (unsigned long long)s->program_disk_hits, (unsigned long long)s->program_disk_rejects);
}

/* The caps, the cache directory and its statistics as text. */
static void print_text(const glesc_caps *c, const glesc_stats *s, const char *cache,
                       const char *feat)
{
    printf("glesc %s\n", glesc_version());
    printf("Platform:            %s (%s)\n", glesc_platform_name(c->platform), c->platform_reason);
    printf("Device:              %s\n", c->device[0] ? c->device : "(default display)");
    printf("Vendor:              %s\n", c->vendor);
    printf("Renderer:            %s%s\n", c->renderer,
           c->software ? " (software: runs on the CPU)" : "");
    printf("Device class:        %s\n", c->device_class);
    printf("Version:             %s (ES %d.%d)\n", c->version, c->gl_major, c->gl_minor);
    printf("GLSL:                %s\n", c->glsl_version);
    printf("Max storage block:   %llu bytes (%.1f MiB)%s\n",
           (unsigned long long)c->max_storage_block_size,
           (double)c->max_storage_block_size / 1048576.0,
           c->max_storage_block_size != c->driver_max_storage_block_size ? " (lowered for testing)"
                                                                         : "");
    printf("Compute SSBOs:       %d\n", c->max_compute_storage_blocks);
    printf("Shared memory:       %d bytes\n", c->max_compute_shared_memory);
    printf("Max invocations:     %d\n", c->max_compute_invocations);
    printf("Max workgroup size:  %d x %d x %d\n", c->max_workgroup_size[0],
           c->max_workgroup_size[1], c->max_workgroup_size[2]);
    printf("Max workgroups:      %d x %d x %d\n", c->max_workgroup_count[0],
           c->max_workgroup_count[1], c->max_workgroup_count[2]);
    printf("SSBO offset align:   %d bytes\n", c->storage_buffer_offset_alignment);
    printf("Binary formats:      %d\n", c->num_program_binary_formats);
    if (c->has_subgroup)
        printf("Subgroups:           GL_KHR_shader_subgroup, size %d, features: %s\n",
               c->subgroup_size, feat);
    else
        printf("Subgroups:           no (shared-memory reductions)\n");
    printf("Timer query:         %s\n",
           c->has_timer_query ? "GL_EXT_disjoint_timer_query" : "no (CPU time around glFinish)");
    printf("Parallel compile:    %s\n", c->has_parallel_compile ? "yes" : "no");
    printf("Buffer storage:      %s\n", c->has_buffer_storage ? "yes" : "no");
    printf("Debug output:        %s\n", c->has_debug ? "yes (GLESC_DEBUG=1)" : "no");
    printf("Reset notification:  %s\n",
           c->has_reset_notification ? "yes (a GPU reset is reported as a lost context)" : "no");
    printf("Program cache:       %s\n", cache ? cache : "off");
    printf("Cache stats:         %llu compiles, %llu memory hits, %llu disk hits, %llu "
           "disk rejects\n",
           (unsigned long long)s->programs_compiled, (unsigned long long)s->program_memory_hits,
           (unsigned long long)s->program_disk_hits, (unsigned long long)s->program_disk_rejects);
}

int main(int argc, char **argv)
{
    glesc_context_options opts;
    glesc_context_options_init(&opts);
    bool json = false;
    int rc = parse_args(argc, argv, &opts, &json);
    if (rc >= 0)
        return rc;
    glesc_context *ctx;
    glesc_status st = glesc_context_create(&opts, &ctx);
    if (st != GLESC_OK) {
        fprintf(stderr, "glesc-info: %s: %s\n", glesc_status_name(st), glesc_last_errmsg());
        return 1;
    }
    const glesc_caps *c = glesc_context_caps(ctx);
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    const char *cache = glesc_context_cache_dir(ctx);
    char feat[128];
    features(c->subgroup_features, feat, sizeof feat);
    if (json)
        print_json(c, &s, cache, feat);
    else
        print_text(c, &s, cache, feat);
    glesc_context_destroy(ctx);
    return 0;
}
