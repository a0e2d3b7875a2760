/*
 * test_program_cache.c — compile errors carry the log and source; a second
 * context loads every program from disk with 0 compiles; truncated and
 * bit-flipped entries are detected and replaced; an unwritable cache
 * directory costs nothing but compiles; batches compile.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emit/emit.h"
#include "gl/gl.h"
#include "test_util.h"

static char *variant(int i)
{
    return test_saxpy_glsl(32 << (i % 4)); /* 4 distinct programs */
}

Test(program_cache, compile_error_has_log_and_source)
{
    glesc_context *ctx = test_context(NULL);
    const char *bad = "#version 310 es\nlayout(local_size_x = 1) in;\nvoid main() {\n"
                      "    undefined_thing = 1;\n}\n";
    const gl_program *p;
    cr_assert_eq(gl_program_get(ctx, bad, &p), GLESC_ERROR_COMPILE);
    const char *msg = glesc_context_errmsg(ctx);
    cr_assert(strstr(msg, "compute shader compilation failed"), "%s", msg);
    cr_assert(strstr(msg, "undefined_thing"), "%s", msg);
    cr_assert(strstr(msg, "   4 |"), "numbered source missing: %s", msg);
    glesc_context_destroy(ctx);
}

Test(program_cache, second_context_loads_from_disk)
{
    char *dir = test_tmpdir();
    char *src[4];
    for (int i = 0; i < 4; i++)
        src[i] = variant(i);
    const gl_program *p[4];
    glesc_stats s;

    glesc_context *ctx = test_context(dir);
    if (glesc_context_caps(ctx)->num_program_binary_formats == 0)
        cr_skip_test("the driver offers no program binary formats");
    cr_assert_eq(gl_program_get_batch(ctx, (const char *const *)src, 4, p), GLESC_OK, "%s",
                 glesc_context_errmsg(ctx));
    cr_assert_eq(gl_program_get(ctx, src[0], &p[0]), GLESC_OK);
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.programs_compiled, 4);
    cr_assert_eq(s.program_memory_hits, 1);
    cr_assert_eq(s.program_disk_writes, 4);
    cr_assert_eq(p[1]->local_size[0], 64);
    glesc_context_destroy(ctx);

    ctx = test_context(dir);
    cr_assert_eq(gl_program_get_batch(ctx, (const char *const *)src, 4, p), GLESC_OK, "%s",
                 glesc_context_errmsg(ctx));
    glesc_context_stats(ctx, &s);
    cr_log_info("second context: %llu compiles, %llu disk hits",
                (unsigned long long)s.programs_compiled, (unsigned long long)s.program_disk_hits);
    cr_assert_eq(s.programs_compiled, 0, "a second run must not compile");
    cr_assert_eq(s.program_disk_hits, 4);
    cr_assert_eq(p[2]->local_size[0], 128, "binary-loaded program keeps its local size");
    glesc_context_destroy(ctx);
    for (int i = 0; i < 4; i++)
        core_free(src[i]);
    free(dir);
}

static void damage(const char *path, bool truncate_it)
{
    size_t n;
    unsigned char *data = test_read_file(path, &n);
    cr_assert_not_null(data, "no cache entry at %s", path);
    FILE *f = fopen(path, "wb");
    if (truncate_it) {
        fwrite(data, 1, n / 2, f);
    } else {
        data[n - 5] ^= 0x10; /* one bit inside the blob */
        fwrite(data, 1, n, f);
    }
    fclose(f);
    free(data);
}

static void survive_damage(bool truncate_it)
{
    char *dir = test_tmpdir();
    char *src = variant(1);
    const gl_program *p;
    glesc_context *ctx = test_context(dir);
    if (glesc_context_caps(ctx)->num_program_binary_formats == 0)
        cr_skip_test("the driver offers no program binary formats");
    cr_assert_eq(gl_program_get(ctx, src, &p), GLESC_OK);
    char *path = gl_program_cache_entry_path(ctx, src);
    glesc_context_destroy(ctx);

    damage(path, truncate_it);
    ctx = test_context(dir);
    cr_assert_eq(gl_program_get(ctx, src, &p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.program_disk_rejects, 1, "damaged entry not detected");
    cr_assert_eq(s.programs_compiled, 1);
    cr_assert_eq(s.program_disk_writes, 1, "damaged entry not replaced");
    glesc_context_destroy(ctx);

    ctx = test_context(dir); /* the replacement is good */
    cr_assert_eq(gl_program_get(ctx, src, &p), GLESC_OK);
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.program_disk_hits, 1);
    cr_assert_eq(s.programs_compiled, 0);
    glesc_context_destroy(ctx);
    core_free(path);
    core_free(src);
    free(dir);
}

Test(program_cache, truncated_entry_replaced)
{
    survive_damage(true);
}

Test(program_cache, bit_flipped_entry_replaced)
{
    survive_damage(false);
}

/* A cache "directory" below a regular file can never be created or written
 * (this holds for root too, unlike chmod). */
Test(program_cache, unwritable_dir_is_harmless)
{
    char *dir = test_tmpdir();
    char file[4200], cache[4300];
    snprintf(file, sizeof file, "%s/file", dir);
    FILE *f = fopen(file, "w");
    fclose(f);
    snprintf(cache, sizeof cache, "%s/cache", file);
    glesc_context *ctx = test_context(cache);
    char *src = variant(0);
    const gl_program *p;
    cr_assert_eq(gl_program_get(ctx, src, &p), GLESC_OK, "%s", glesc_context_errmsg(ctx));
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.programs_compiled, 1);
    cr_assert_eq(s.program_disk_writes, 0);
    glesc_context_destroy(ctx);
    core_free(src);
    free(dir);
}

Test(program_cache, off_means_no_files)
{
    glesc_context *ctx = test_context(NULL);
    cr_assert_null(glesc_context_cache_dir(ctx));
    char *src = variant(0);
    cr_assert_null(gl_program_cache_entry_path(ctx, src));
    const gl_program *p;
    cr_assert_eq(gl_program_get(ctx, src, &p), GLESC_OK);
    gl_program_cache_drop_memory(ctx);
    cr_assert_eq(gl_program_get(ctx, src, &p), GLESC_OK);
    glesc_stats s;
    glesc_context_stats(ctx, &s);
    cr_assert_eq(s.programs_compiled, 2);
    glesc_context_destroy(ctx);
    core_free(src);
}
