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

Test(refcheck, logits_and_greedy_match_llama_cpp, .timeout = 580)
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
    cr_assert_gt(n, 0, "no reference files in %s", dir);

    glesc_context *ctx = test_context(NULL);
    int passed = 0;
    bool saw_stories = false;
    fprintf(stderr, "glesc vs llama.cpp, KV cache f32, %s\n", glesc_context_caps(ctx)->renderer);
    refcheck_print_header(stderr);
    for (int i = 0; i < n; i++) {
        refcheck_result r;
        refcheck_run(ctx, files[i], NULL, &r);
        refcheck_print_row(stderr, &r);
        cr_expect_eq(r.status, REFCHECK_PASS, "%s: %s", r.model, r.note);
        cr_expect_leq(r.max_diff, r.tol, "%s: D %.3g > %.3g", r.model, r.max_diff, r.tol);
        cr_expect_eq(r.argmax_failed, 0, "%s", r.model);
        cr_expect_eq(r.greedy_matched, r.greedy_checked, "%s", r.model);
        if (!strcmp(r.model, "stories260K.gguf")) {
            saw_stories = true;
            cr_expect_eq(r.greedy_checked, 96, "stories260K: both prompts' 48 greedy ids");
            cr_expect_eq(r.greedy_matched, 96);
        }
        passed += r.status == REFCHECK_PASS;
    }
    for (int i = 0; i < n; i++)
        free(files[i]);
    cr_log_info("%d of %d reference models passed", passed, n);
    cr_expect_eq(passed, n, "every reference model must pass");
    cr_expect(saw_stories, "stories260K.json was not checked");
    glesc_context_destroy(ctx);
    free(dir);
}
