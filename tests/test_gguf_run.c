/*
 * test_gguf_run.c — tools/gguf-run as a subprocess (path in $GLESC_GGUF_RUN):
 * bad input gives a clear message naming the problem and a non-zero exit
 * (1: the file or the run, 2: usage), never a crash; and the outputs
 * (--json, --logits-out, --prompt-ids, seeds, chat on stdin, the demo) are
 * what they promise. Broken models are synthetic (tools/common/synth.h) so most
 * cases need no shared files; the rest skip without ../shared.
 */
#include <criterion/criterion.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/synth.h"
#include "test_util.h"

/* Runs gguf-run with args (a shell fragment; stdin from input when not
 * NULL) and collects its output. */
static test_run_result run_with(const char *args, const char *input)
{
    const char *exe = getenv("GLESC_GGUF_RUN");
    cr_assert(exe && *exe, "GLESC_GGUF_RUN is not set (run through meson test)");
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' --cache-dir off %s", exe, args);
    return test_run(cmd, input);
}

static test_run_result run(const char *args)
{
    return run_with(args, NULL);
}

/* Expects exit status `status` and every needle in stderr. */
static void expect_failure(const char *args, int status, const char *const *needles)
{
    test_run_result r = run(args);
    cr_log_info("gguf-run %s\n  -> %d: %s", args, r.status, r.err);
    cr_expect_eq(r.status, status, "gguf-run %s: exit %d, expected %d; stderr: %s", args, r.status,
                 status, r.err);
    for (const char *const *n = needles; *n; n++)
        cr_expect(strstr(r.err, *n) != NULL, "gguf-run %s: '%s' not in stderr: %s", args, *n,
                  r.err);
    test_run_free(&r);
}

/* A small synthetic model (1 layer, n_embd 64) at a fresh path; mutate
 * fills in the breakage. free() the path. */
static char *synth(void (*mutate)(synth_params *))
{
    char *dir = test_tmpdir();
    char *path = malloc(strlen(dir) + 16);
    sprintf(path, "%s/m.gguf", dir);
    free(dir);
    synth_params p;
    synth_params_default(&p);
    p.n_embd = 64;
    p.n_layer = 1;
    p.n_ff = 96;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_ctx = 64;
    if (mutate)
        mutate(&p);
    cr_assert_eq(synth_write(&p, path), GLESC_OK, "%s", synth_errmsg());
    return path;
}

static void rm(char *path)
{
    unlink(path);
    char *slash = strrchr(path, '/');
    if (slash) {
        *slash = 0;
        rmdir(path);
    }
    free(path);
}

/* ---- bad input ---- */

Test(gguf_run, missing_file)
{
    expect_failure("-m /nonexistent/model.gguf -p hi", 1,
                   (const char *[]){"/nonexistent/model.gguf", NULL});
}

Test(gguf_run, not_a_gguf_file)
{
    char *path = synth(NULL);
    FILE *f = fopen(path, "wb");
    fputs("this is a text file, not a model\n", f);
    fclose(f);
    char args[4200];
    snprintf(args, sizeof args, "-m '%s' -p hi", path);
    expect_failure(args, 1, (const char *[]){path, "magic", NULL});
    rm(path);
}

Test(gguf_run, truncated_file)
{
    char *path = synth(NULL);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(truncate(path, st.st_size / 2), 0);
    char args[4200];
    snprintf(args, sizeof args, "-m '%s' -p hi", path);
    expect_failure(args, 1, (const char *[]){path, NULL});
    rm(path);
}

static void skip_ffn_up(synth_params *p)
{
    p->skip_tensor = "blk.0.ffn_up.weight";
}

Test(gguf_run, missing_tensor)
{
    char *path = synth(skip_ffn_up);
    char args[4200];
    snprintf(args, sizeof args, "-m '%s' -p hi", path);
    expect_failure(args, 1, (const char *[]){"blk.0.ffn_up.weight", "missing", NULL});
    rm(path);
}

static void bad_k_shape(synth_params *p)
{
    p->bad_shape_tensor = "blk.0.attn_k.weight";
}

Test(gguf_run, wrong_tensor_shape)
{
    char *path = synth(bad_k_shape);
    char args[4200];
    snprintf(args, sizeof args, "-m '%s' -p hi", path);
    expect_failure(args, 1, (const char *[]){"blk.0.attn_k.weight", "has shape", "expected", NULL});
    rm(path);
}

static void arch_gemma9(synth_params *p)
{
    p->arch = "gemma9";
}

Test(gguf_run, unknown_architecture)
{
    char *path = synth(arch_gemma9);
    char args[4200];
    snprintf(args, sizeof args, "-m '%s' -p hi", path);
    expect_failure(args, 1,
                   (const char *[]){"architecture 'gemma9' is not supported", "llama", NULL});
    rm(path);
}

Test(gguf_run, prompt_longer_than_the_context)
{
    char *path = synth(NULL);
    char args[4200];
    snprintf(args, sizeof args,
             "-m '%s' -c 8 -p 'the little dog saw a big cat in the park one day and it was fun'",
             path);
    expect_failure(args, 1, (const char *[]){"tokens", "context", "-c", NULL});
    rm(path);
}

Test(gguf_run, quantized_weights_are_refused_or_run)
{
    TEST_REQUIRE_SHARED(model, "reference/models/tiny-q8_0.gguf");
    char args[4200];
    snprintf(args, sizeof args, "-m '%s' -p hi -n 2 --temp 0", model);
    test_run_result r = run(args);
    cr_log_info("q8_0: exit %d: %s", r.status, r.err);
    /* Quantized weights run; a build without a loader for the type must
     * refuse clearly, naming the tensor and type. */
    if (r.status != 0) {
        cr_expect_eq(r.status, 1);
        cr_expect(strstr(r.err, "q8_0") && strstr(r.err, "token_embd.weight"), "%s", r.err);
    }
    test_run_free(&r);
    free(model);
}

Test(gguf_run, bad_usage)
{
    char *path = synth(NULL);
    char args[4200];
    static const struct {
        const char *args, *needle;
        int status;
    } cases[] = {
        {"--no-such-flag", "unknown option", 2},
        {"--temp abc", "not a number", 2},
        {"-n 1.5", "not an integer", 2},
        {"--kv-type q4_0", "f32 or f16", 2},
        {"-p a --prompt-ids 1,2", "at most one", 2},
        {"--prompt-ids 1,,x", "--prompt-ids", 2},
        {"--prompt-ids 1,99999", "outside the vocabulary", 1},
        {"--chat-template nosuch --chat", "not a known template", 2},
        {"-c", "needs a value", 2},
        {"--platform nope -p hi", "--platform", 2},
        {"--top-p 0 -p hi", "top_p", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(args, sizeof args, "-m '%s' %s", path, cases[i].args);
        expect_failure(args, cases[i].status, (const char *[]){cases[i].needle, NULL});
    }
    rm(path);
}

/* ---- what the outputs promise ---- */

Test(gguf_run, demo_without_a_model)
{
    test_run_result r = run("-n 4");
    cr_expect_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.err, "RANDOM weights"), "%s", r.err);
    cr_expect(strstr(r.err, "tok/s") && strstr(r.err, "dispatches/token"), "%s", r.err);
    cr_expect(strncmp(r.out, "Once upon a time", 16) == 0, "%s", r.out);
    test_run_free(&r);
}

static const int once_greedy[8] = {432, 383, 286, 261, 376, 298, 315, 421};

Test(gguf_run, json_output)
{
    TEST_REQUIRE_SHARED(model, "models/stories260K.gguf");
    char args[4200];
    snprintf(args, sizeof args, "-m '%s' -p 'Once upon a time' -n 8 --temp 0 --json", model);
    test_run_result r = run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    json_object *o = json_tokener_parse(r.out);
    cr_assert_not_null(o, "not JSON: %s", r.out);
    json_object *p, *g, *t, *tm;
    cr_assert(json_object_object_get_ex(o, "prompt_ids", &p));
    cr_assert(json_object_object_get_ex(o, "generated_ids", &g));
    cr_assert(json_object_object_get_ex(o, "text", &t));
    cr_assert(json_object_object_get_ex(o, "timings", &tm));
    cr_expect_eq(json_object_array_length(p), 5);
    cr_assert_eq(json_object_array_length(g), 8);
    for (int i = 0; i < 8; i++)
        cr_expect_eq(json_object_get_int(json_object_array_get_idx(g, (size_t)i)), once_greedy[i]);
    cr_expect_str_eq(json_object_get_string(t), ", there was a little girl");
    json_object *v;
    cr_expect(json_object_object_get_ex(tm, "decode_tok_per_s", &v));
    cr_expect(json_object_object_get_ex(tm, "dispatches_per_token", &v));
    json_object_put(o);
    test_run_free(&r);
    free(model);
}

Test(gguf_run, json_escapes_control_characters_and_bad_utf8)
{
    /* A smoke test: hot sampling on the demo vocabulary (half of it byte
     * tokens, so quotes, control bytes and stray UTF-8 bytes come out) must
     * still print JSON that parses. Prompt: BOS, '"', '\\', newline, tab,
     * 0xff as byte tokens (id = 3 + byte). */
    char *path = synth(NULL);
    char args[4200];
    snprintf(args, sizeof args,
             "-m '%s' --prompt-ids 1,37,95,13,12,258 -n 24 --temp 1.5 --top-k 0 --top-p 1 "
             "--min-p 0 --seed 3 --json",
             path);
    test_run_result r = run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    json_object *o = json_tokener_parse(r.out);
    cr_expect_not_null(o, "not JSON: %s", r.out);
    json_object_put(o);
    test_run_free(&r);
    rm(path);
}

Test(gguf_run, logits_out_and_prompt_ids)
{
    TEST_REQUIRE_SHARED(model, "models/stories260K.gguf");
    char *dir = test_tmpdir();
    char lpath[4200], args[8400];
    snprintf(lpath, sizeof lpath, "%s/logits.bin", dir);
    snprintf(args, sizeof args,
             "-m '%s' --prompt-ids 1,403,407,261,378 -n 3 --temp 0 --json --logits-out '%s'", model,
             lpath);
    test_run_result r = run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    size_t n;
    float *l = test_read_file(lpath, &n);
    cr_assert_not_null(l);
    cr_assert_eq(n, (5 + 3) * 512 * sizeof(float), "%zu bytes", n);
    /* rows 0-4: the prompt positions; row 5 + k: the row generated token k
     * was sampled from (row 5 repeats row 4, the last prompt position) */
    cr_expect_eq(memcmp(l + 4 * 512, l + 5 * 512, 512 * sizeof *l), 0);
    for (int k = 0; k < 3; k++) {
        const float *row = l + (5 + k) * 512;
        int best = 0;
        for (int j = 1; j < 512; j++)
            if (row[j] > row[best])
                best = j;
        cr_expect_eq(best, once_greedy[k], "generated token %d", k);
    }
    cr_expect(strstr(r.out, "\"generated_ids\": [432, 383, 286]"), "%s", r.out);
    cr_expect(strstr(r.out, "\"prompt_ids\": [1, 403, 407, 261, 378]"), "%s", r.out);
    free(l);
    test_run_free(&r);
    /* -n 0: only the prompt */
    snprintf(args, sizeof args, "-m '%s' -p 'Once upon a time' -n 0 --logits-out '%s'", model,
             lpath);
    r = run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    l = test_read_file(lpath, &n);
    cr_expect_eq(n, 5 * 512 * sizeof(float));
    free(l);
    test_run_free(&r);
    unlink(lpath);
    rmdir(dir);
    free(dir);
    free(model);
}

Test(gguf_run, seeds_repeat_and_differ)
{
    char *path = synth(NULL);
    char args[4200];
    char *outs[3];
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "-m '%s' -p 'once upon' -n 12 --temp 1.0 --seed %d --json",
                 path, i < 2 ? 42 : 43);
        test_run_result r = run(args);
        cr_assert_eq(r.status, 0, "%s", r.err);
        char *g = strstr(r.out, "\"generated_ids\"");
        cr_assert_not_null(g);
        outs[i] = strndup(g, (size_t)(strchr(g, ']') - g));
        test_run_free(&r);
    }
    cr_expect_str_eq(outs[0], outs[1], "same seed, same tokens");
    cr_expect_str_neq(outs[0], outs[2], "another seed, other tokens");
    for (int i = 0; i < 3; i++)
        free(outs[i]);
    rm(path);
}

Test(gguf_run, escapes)
{
    TEST_REQUIRE_SHARED(model, "models/stories260K.gguf");
    char args[4200];
    snprintf(args, sizeof args, "-m '%s' --tokenize -e -p 'a\\nb\\x41\\q'", model);
    test_run_result a = run(args);
    snprintf(args, sizeof args, "-m '%s' --tokenize -p \"$(printf 'a\\nbA\\\\q')\"", model);
    test_run_result b = run(args);
    cr_expect_eq(a.status, 0, "%s", a.err);
    cr_expect_str_eq(a.out, b.out);
    test_run_free(&a);
    test_run_free(&b);
    free(model);
}

Test(gguf_run, chat_on_stdin)
{
    TEST_REQUIRE_SHARED(model, "models/stories260K.gguf");
    char args[4200];
    snprintf(args, sizeof args,
             "-m '%s' --chat --chat-template chatml --system 'Tell stories.' -n 6 --temp 0 -v",
             model);
    test_run_result r = run_with(args, "Once upon a time\nThe dog\n");
    cr_expect_eq(r.status, 0, "%s", r.err);
    cr_log_info("chat stdout: %s\nstderr: %s", r.out, r.err);
    /* two turns; the second evaluates only its new text */
    int prompts = 0;
    size_t first = 0, second = 0;
    for (const char *p = r.err; (p = strstr(p, "gguf-run: prompt: ")); p++) {
        size_t n = strtoul(p + 18, NULL, 10);
        if (prompts == 0)
            first = n;
        else if (prompts == 2)
            second = n;
        prompts++;
    }
    cr_expect_geq(prompts, 3, "%s", r.err);
    cr_expect_lt(second, first, "turn 2 evaluated %zu tokens, turn 1 %zu", second, first);
    test_run_free(&r);
    free(model);
}
