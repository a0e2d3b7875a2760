/*
 * test_refcheck.c — glesc against llama.cpp's reference outputs
 * (../shared/reference): every model whose weights this build supports must
 * stay within its suggested logit tolerance, agree on the arg max where the
 * reference's top-2 gap exceeds the threshold, and reproduce the greedy ids
 * (stories260K: all 48 of both prompts). Every weight type and every
 * architecture of the reference models (llama, qwen2, qwen3, gemma2,
 * gemma3, phi3) is supported, so no model may be skipped. The rules are in
 * tools/refcheck.h.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/refcheck.h"
#include "test_util.h"

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The reference models whose place in name order is part modulo parts:
 * four tests, each its own process under meson (tests/meson.build) with
 * its own time limit, two at a time on two cores; on llvmpipe nearly all
 * of a model's time is compiling its kernels (a model with the shaders in
 * Mesa's cache takes under a second; cold, a third of the models took
 * 380-440 s, too near the limit). */
static void check_part(int part, int parts)
{
    TEST_REQUIRE_SHARED(dir, "reference/expected");
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    char *files[64];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) {
        size_t len = strlen(e->d_name);
        if (len > 5 && !strcmp(e->d_name + len - 5, ".json")) {
            files[n] = malloc(strlen(dir) + len + 2);
            sprintf(files[n], "%s/%s", dir, e->d_name);
            n++;
        }
    }
    closedir(d);
    qsort(files, (size_t)n, sizeof *files, by_name);
    cr_assert_gt(n, part, "fewer than %d reference files in %s", part + 1, dir);

    glesc_context *ctx = test_context(NULL);
    int passed = 0, mine = 0;
    const glesc_caps *caps = glesc_context_caps(ctx);
    fprintf(stderr,
            "glesc vs llama.cpp, KV cache f32, %s (%d storage blocks, %d invocations, %d bytes "
            "shared%s; class %s), fusion %s, part %d of %d\n",
            caps->renderer, caps->max_compute_storage_blocks, caps->max_compute_invocations,
            caps->max_compute_shared_memory, getenv("GLESC_LIMITS") ? ": GLESC_LIMITS" : "",
            caps->device_class, getenv("GLESC_NO_FUSION") ? "off" : "on", part + 1, parts);
    refcheck_print_header(stderr);
    for (int i = part; i < n; i += parts) {
        refcheck_result r;
        refcheck_run(ctx, files[i], NULL, &r);
        refcheck_print_row(stderr, &r);
        cr_expect_eq(r.status, REFCHECK_PASS, "%s: %s", r.model, r.note);
        cr_expect_leq(r.max_diff, r.tol, "%s: D %.3g > %.3g", r.model, r.max_diff, r.tol);
        cr_expect_eq(r.argmax_failed, 0, "%s", r.model);
        cr_expect_eq(r.greedy_matched, r.greedy_checked, "%s", r.model);
        if (!strcmp(r.model, "stories260K.gguf")) {
            cr_expect_eq(r.greedy_checked, 96, "stories260K: both prompts' 48 greedy ids");
            cr_expect_eq(r.greedy_matched, 96);
        }
        passed += r.status == REFCHECK_PASS;
        mine++;
    }
    bool stories = false;
    for (int i = 0; i < n; i++) {
        stories = stories || strstr(files[i], "/stories260K.json");
        free(files[i]);
    }
    cr_expect(stories, "no stories260K.json in %s", dir);
    cr_log_info("%d of %d reference models of part %d passed", passed, mine, part + 1);
    cr_expect_eq(passed, mine, "every reference model must pass");
    glesc_context_destroy(ctx);
    free(dir);
}

#define PARTS 4
Test(refcheck, part_1_of_4, .timeout = 580)
{
    check_part(0, PARTS);
}
Test(refcheck, part_2_of_4, .timeout = 580)
{
    check_part(1, PARTS);
}
Test(refcheck, part_3_of_4, .timeout = 580)
{
    check_part(2, PARTS);
}
Test(refcheck, part_4_of_4, .timeout = 580)
{
    check_part(3, PARTS);
}
