/*
 * test_gguf_run.c — tools/gguf-run as a subprocess (path in $GLESC_GGUF_RUN):
 * bad input gives a clear message naming the problem and a non-zero exit
 * (1: the file or the run, 2: usage), never a crash; and the outputs
 * (--json, --logits-out, --prompt-ids, seeds, chat on stdin, the demo) are
 * what they promise. Broken models are synthetic (tools/common/synth.h) so most
 * cases need no shared files; the rest skip without ../shared.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/synth.h"
#include "test_gguf_edit.h"
#include "test_synth_util.h"
#include "test_util.h"

/* Runs gguf-run with args (a shell fragment; stdin from input when not
 * NULL) and collects its output. */
static test_run_result run_with(const char *args, const char *input)
{
    const char *exe = test_tool("GLESC_GGUF_RUN");
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
    synth_params p;
    test_tiny_params(&p, 1, 64);
    p.weight_type = GLESC_DTYPE_F16;
    if (mutate)
        mutate(&p);
    char *dir = test_tmpdir();
    char *path = test_synth_write(&p, dir, "m.gguf");
    free(dir);
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

/* Refused before the prompt is echoed, and a failed run prints no summary
 * (it printed one with 0 tok/s). */
Test(gguf_run, prompt_longer_than_the_context)
{
    char *path = synth(NULL);
    char args[4200];
    snprintf(args, sizeof args,
             "-m '%s' -c 8 -p 'the little dog saw a big cat in the park one day and it was fun'",
             path);
    test_run_result r = run(args);
    cr_expect_eq(r.status, 1, "%s", r.err);
    cr_expect(strstr(r.err, "tokens") && strstr(r.err, "context") && strstr(r.err, "-c"), "%s",
              r.err);
    cr_expect_str_eq(r.out, "", "the prompt was echoed first");
    cr_expect(!strstr(r.err, "tok/s"), "a summary after a failure: %s", r.err);
    test_run_free(&r);
    rm(path);
}

/* The file name once per message (a type error of a key was prefixed with
 * it a second time), and the key named. */
static void expect_named_once(const char *path, const char *args_fmt, const char *needle)
{
    char args[4200];
    snprintf(args, sizeof args, args_fmt, path);
    test_run_result r = run(args);
    cr_log_info("%s -> %d: %s", args, r.status, r.err);
    cr_expect_eq(r.status, 1, "%s", r.err);
    const char *first = strstr(r.err, path);
    cr_expect(first && !strstr(first + 1, path), "the file is not named exactly once: %s", r.err);
    cr_expect(strstr(r.err, needle), "'%s' not in: %s", needle, r.err);
    test_run_free(&r);
}

Test(gguf_run, messages_name_the_file_once)
{
    char *path = synth(NULL);
    test_gguf_rewrite(path, &(test_gguf_edit){.key = "llama.embedding_length",
                                              .key_type = GLESC_GGUF_STRING,
                                              .key_value = "sixty-four"});
    expect_named_once(path, "-m '%s' -p hi", "key 'llama.embedding_length'");
    rm(path);
    path = synth(NULL);
    uint32_t one = 1;
    test_gguf_rewrite(path, &(test_gguf_edit){.key = "tokenizer.ggml.model",
                                              .key_type = GLESC_GGUF_UINT32,
                                              .key_value = &one});
    expect_named_once(path, "-m '%s' -p hi", "key 'tokenizer.ggml.model'");
    expect_named_once(path, "-m '%s' --tokenize -p hi", "key 'tokenizer.ggml.model'");
    rm(path);
    path = synth(NULL);
    test_gguf_rewrite(path, &(test_gguf_edit){.key = "general.architecture",
                                              .key_type = GLESC_GGUF_UINT32,
                                              .key_value = &one});
    expect_named_once(path, "-m '%s' -p hi", "key 'general.architecture'");
    rm(path);
}

static void token_embd_one_row_more(synth_params *p)
{
    p->bad_shape_tensor = "token_embd.weight";
}

/* token_embd.weight with a row too many: it is the one blamed (output.weight
 * was, as n_vocab came from token_embd's rows). */
Test(gguf_run, wrong_token_embd_is_blamed)
{
    char *path = synth(token_embd_one_row_more);
    char args[4200];
    snprintf(args, sizeof args, "-m '%s' -p hi", path);
    test_run_result r = run(args);
    cr_log_info("%s", r.err);
    cr_expect_eq(r.status, 1, "%s", r.err);
    cr_expect(strstr(r.err, "tensor 'token_embd.weight' has shape") && strstr(r.err, "expected"),
              "%s", r.err);
    cr_expect(!strstr(r.err, "'output.weight' has shape"), "%s", r.err);
    test_run_free(&r);
    rm(path);
}

/* A FIFO as the model is refused by name at once (gguf-run waited forever
 * in open(); `timeout` ends such a regression instead of leaving it). */
Test(gguf_run, fifo_model, .timeout = 120)
{
    const char *exe = test_tool("GLESC_GGUF_RUN");
    char *dir = test_tmpdir();
    char fifo[4200], cmd[8800];
    snprintf(fifo, sizeof fifo, "%s/model.gguf", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    for (int tokenize = 0; tokenize < 2; tokenize++) {
        snprintf(cmd, sizeof cmd, "timeout 30 '%s' --cache-dir off -m '%s' -p hi%s", exe, fifo,
                 tokenize ? " --tokenize" : "");
        test_run_result r = test_run(cmd, NULL);
        cr_expect_eq(r.status, 1, "%s: exit %d: %s", cmd, r.status, r.err);
        cr_expect(strstr(r.err, fifo) && strstr(r.err, "not a regular file"), "%s", r.err);
        test_run_free(&r);
    }
    unlink(fifo);
    rmdir(dir);
    free(dir);
}

static void f32_weights(synth_params *p)
{
    p->weight_type = GLESC_DTYPE_F32;
}

/* A NaN hyperparameter is refused by key; a NaN weight fails the step that
 * meets it, naming it and the position (both gave ids 0 and empty text with
 * exit 0). */
Test(gguf_run, nan_is_an_error)
{
    char *path = synth(NULL);
    float nan = NAN;
    test_gguf_rewrite(path, &(test_gguf_edit){.key = "llama.attention.layer_norm_rms_epsilon",
                                              .key_type = GLESC_GGUF_FLOAT32,
                                              .key_value = &nan});
    char args[4200];
    snprintf(args, sizeof args, "-m '%s' -p hi -n 4", path);
    expect_failure(args, 1,
                   (const char *[]){path, "llama.attention.layer_norm_rms_epsilon",
                                    "not a finite number", NULL});
    rm(path);

    path = synth(NULL);
    test_gguf_rewrite(path, &(test_gguf_edit){.tensor = "output_norm.weight", .value = NAN});
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1,300,301 -n 4", path);
    test_run_result r = run(args);
    cr_log_info("%s", r.err);
    cr_expect_eq(r.status, 1, "%s", r.err);
    cr_expect(strstr(r.err, "evaluating the prompt: the logits of position 2 (token 301, in a "
                            "batch of positions 0..2) are not finite"),
              "%s", r.err);
    cr_expect(!strstr(r.err, "tok/s"), "%s", r.err);
    test_run_free(&r);
    rm(path);

    /* The first greedy token's embedding row gets a NaN: the prompt
     * evaluates, the first decode step fails. */
    path = synth(f32_weights);
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1,300,301 -n 1 --temp 0 --json", path);
    r = run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *g = strstr(r.out, "\"generated_ids\": [");
    cr_assert_not_null(g, "%s", r.out);
    int first = atoi(g + strlen("\"generated_ids\": ["));
    test_run_free(&r);
    cr_assert(first != 300 && first != 301 && first != 1, "first token %d is in the prompt", first);
    test_gguf_rewrite(path, &(test_gguf_edit){.tensor = "token_embd.weight",
                                              .index = (int64_t)first * 64,
                                              .value = NAN});
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1,300,301 -n 4 --temp 0", path);
    r = run(args);
    cr_log_info("%s", r.err);
    cr_expect_eq(r.status, 1, "%s", r.err);
    char want[128];
    snprintf(want, sizeof want, "decoding: the logits of position 3 (token %d) are not finite",
             first);
    cr_expect(strstr(r.err, want), "'%s' not in: %s", want, r.err);
    cr_expect(!strstr(r.err, "tok/s"), "%s", r.err);
    test_run_free(&r);
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
        {"--kv-type q5_0", "f32, f16, q8_0 or q4_0", 2},
        {"-p a --prompt-ids 1,2", "at most one", 2},
        {"--prompt-ids 1,,x", "--prompt-ids", 2},
        {"--prompt-ids 1,99999", "outside the vocabulary", 1},
        {"--chat-template nosuch --chat", "not a known template", 2},
        {"-c", "needs a value", 2},
        {"--platform nope -p hi", "--platform", 2},
        {"--top-p -1 -p hi", "top_p -1 must be at least 0", 2},
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

/* ---- --prompt-cache ---- */

/* One --json run's generated ids (as text), prompt and cached token counts. */
typedef struct cache_run {
    char ids[512], err[2048];
    int prompt_tokens, cached_tokens;
} cache_run;

static cache_run cache_run_with(const char *model, const char *prompt_ids, const char *extra)
{
    char args[8400];
    snprintf(args, sizeof args, "-m '%s' --prompt-ids %s -n 6 --temp 0 --json %s", model,
             prompt_ids, extra);
    test_run_result r = run(args);
    cr_assert_eq(r.status, 0, "gguf-run %s: %s", args, r.err);
    cache_run c = {0};
    snprintf(c.err, sizeof c.err, "%s", r.err);
    json_object *o = json_tokener_parse(r.out), *g, *tm, *v;
    cr_assert_not_null(o, "not JSON: %s", r.out);
    cr_assert(json_object_object_get_ex(o, "generated_ids", &g));
    snprintf(c.ids, sizeof c.ids, "%s", json_object_to_json_string(g));
    cr_assert(json_object_object_get_ex(o, "timings", &tm));
    cr_assert(json_object_object_get_ex(tm, "prompt_tokens", &v));
    c.prompt_tokens = json_object_get_int(v);
    cr_assert(json_object_object_get_ex(tm, "prompt_cached_tokens", &v));
    c.cached_tokens = json_object_get_int(v);
    json_object_put(o);
    test_run_free(&r);
    return c;
}

static void other_seed(synth_params *p)
{
    p->seed = 99;
}

/* The state saved after a prompt is loaded by the next run whose prompt
 * starts the same: only the rest is evaluated and the tokens are those of
 * a run without the cache; a corrupted file or another model's is a
 * warning with the reason, and the whole prompt is evaluated. */
Test(gguf_run, prompt_cache)
{
    char *path = synth(NULL), *other = synth(other_seed);
    char *dir = test_tmpdir();
    char cache[4200], opt[4300];
    snprintf(cache, sizeof cache, "%s/prompt.cache", dir);
    snprintf(opt, sizeof opt, "--prompt-cache '%s'", cache);
    const char *p1 = "1,20,30,40,50,60,70,80", *p2 = "1,20,30,40,50,60,70,80,90,100,110";
    cache_run plain1 = cache_run_with(path, p1, ""), plain2 = cache_run_with(path, p2, "");
    cache_run a = cache_run_with(path, p1, opt);
    cr_expect_eq(a.cached_tokens, 0);
    cr_expect_eq(a.prompt_tokens, 8);
    cr_expect_str_eq(a.ids, plain1.ids);
    cache_run b = cache_run_with(path, p1, opt); /* the same prompt: nothing evaluated */
    cr_expect_eq(b.cached_tokens, 8, "%s", b.err);
    cr_expect_eq(b.prompt_tokens, 0);
    cr_expect_str_eq(b.ids, plain1.ids);
    cache_run c = cache_run_with(path, p2, opt); /* a longer one: the rest */
    cr_expect_eq(c.cached_tokens, 8);
    cr_expect_eq(c.prompt_tokens, 3);
    cr_expect_str_eq(c.ids, plain2.ids);
    /* read-only: a shorter prompt evaluates its last token again, saves nothing */
    size_t n_before, n_after;
    free(test_read_file(cache, &n_before));
    snprintf(opt, sizeof opt, "--prompt-cache '%s' --prompt-cache-ro", cache);
    cache_run d = cache_run_with(path, p1, opt);
    cr_expect_eq(d.cached_tokens, 7);
    cr_expect_eq(d.prompt_tokens, 1);
    cr_expect_str_eq(d.ids, plain1.ids);
    free(test_read_file(cache, &n_after));
    cr_expect_eq(n_after, n_before, "--prompt-cache-ro wrote the file");
    /* another model: refused with the reason */
    cache_run e = cache_run_with(other, p2, opt);
    cr_expect_eq(e.cached_tokens, 0);
    cr_expect(strstr(e.err, "warning: --prompt-cache") && strstr(e.err, "another model"), "%s",
              e.err);
    /* a flipped byte: refused, evaluated whole, saved over it */
    uint8_t *bytes = test_read_file(cache, &n_before);
    bytes[n_before / 2] ^= 1;
    FILE *f = fopen(cache, "wb");
    cr_assert(f);
    cr_assert_eq(fwrite(bytes, 1, n_before, f), n_before);
    fclose(f);
    free(bytes);
    snprintf(opt, sizeof opt, "--prompt-cache '%s'", cache);
    cache_run g = cache_run_with(path, p2, opt);
    cr_expect_eq(g.cached_tokens, 0);
    cr_expect(strstr(g.err, "checksum") && strstr(g.err, "prompt.cache"), "%s", g.err);
    cr_expect_str_eq(g.ids, plain2.ids);
    cr_expect_eq(cache_run_with(path, p2, opt).cached_tokens, 11);
    /* usage */
    char args[8400];
    snprintf(args, sizeof args, "-m '%s' --prompt-cache '%s' --logits-out /dev/null", path, cache);
    expect_failure(args, 2, (const char *const[]){"--logits-out", NULL});
    snprintf(args, sizeof args, "-m '%s' --prompt-cache-ro", path);
    expect_failure(args, 2, (const char *const[]){"needs --prompt-cache", NULL});
    unlink(cache);
    rmdir(dir);
    free(dir);
    rm(path);
    rm(other);
}

/* A chat's system message goes through the file: evaluated and saved by
 * the first run, loaded by the next, the replies the same. */
Test(gguf_run, prompt_cache_chat_system_message)
{
    char *path = synth(NULL), *dir = test_tmpdir();
    char args[8400];
    snprintf(args, sizeof args,
             "-m '%s' --chat --chat-template chatml --system 'Be brief.' -c 256 -n 5 --temp 0 "
             "-v --prompt-cache '%s/sys.cache'",
             path, dir);
    test_run_result a = run_with(args, "Hello\nMore\n"), b = run_with(args, "Hello\nMore\n");
    cr_assert_eq(a.status, 0, "%s", a.err);
    cr_assert_eq(b.status, 0, "%s", b.err);
    cr_expect(strstr(a.err, "tokens saved to"), "%s", a.err);
    cr_expect(strstr(b.err, "the system message's"), "%s", b.err);
    cr_expect_str_eq(a.out, b.out);
    test_run_free(&a);
    test_run_free(&b);
    snprintf(args, sizeof args, "%s/sys.cache", dir);
    unlink(args);
    rmdir(dir);
    free(dir);
    rm(path);
}

/* ---- inputs and outputs that cannot be used ---- */

/* A 4 GB virtual memory cap, so a regression that reads without bound
 * fails instead of taking the machine's memory; not under AddressSanitizer,
 * which reserves terabytes of address space for its shadow. */
#if defined(__SANITIZE_ADDRESS__)
#define VM_CAP ""
#else
#define VM_CAP "ulimit -v 4000000;"
#endif

/* Runs gguf-run with args inside a shell line: before, then gguf-run under
 * VM_CAP. */
static test_run_result run_capped(const char *before, const char *args)
{
    const char *exe = test_tool("GLESC_GGUF_RUN");
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s (" VM_CAP " exec '%s' --cache-dir off %s)", before, exe, args);
    return test_run(cmd, NULL);
}

/* Text, --json, --tokenize and a chat written to a full disk: exit 1 with
 * the reason (text and --json exited 0, --tokenize 1 without a word). */
Test(gguf_run, write_errors)
{
    char *path = synth(NULL);
    static const char *const modes[] = {"-p hi -n 4", "-p hi -n 4 --json", "-p hi --tokenize",
                                        "-p hi -n 2 --no-display-prompt", "--chat -n 4"};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        char args[4400];
        snprintf(args, sizeof args, "-m '%s' %s >/dev/full", path, modes[i]);
        test_run_result r = run_with(args, "hello\n");
        cr_log_info("%s -> %d: %s", modes[i], r.status, r.err);
        cr_expect_eq(r.status, 1, "%s: exit %d: %s", modes[i], r.status, r.err);
        cr_expect(strstr(r.err, "gguf-run: writing output: No space left on device\n"), "%s: %s",
                  modes[i], r.err);
        cr_expect(!strstr(r.err, "tok/s"), "%s: a summary after a failure: %s", modes[i], r.err);
        test_run_free(&r);
    }
    rm(path);
}

/* An endless prompt file stops at the stated limit (it grew until the
 * process was killed). */
Test(gguf_run, prompt_file_limit, .timeout = 120)
{
    char *path = synth(NULL);
    char args[4400];
    snprintf(args, sizeof args, "-m '%s' -f /dev/zero", path);
    test_run_result r = run_capped("", args);
    cr_expect_eq(r.status, 1, "%s", r.err);
    cr_expect(strstr(r.err, "-f /dev/zero: the file has more than 16777216 bytes (16 MiB), the "
                            "limit for a prompt"),
              "%s", r.err);
    test_run_free(&r);
    rm(path);
}

/* A chat line without end stops at the stated limit (it had none). */
Test(gguf_run, chat_message_limit, .timeout = 120)
{
    char *path = synth(NULL);
    char args[4400];
    snprintf(args, sizeof args, "-m '%s' --chat -n 2", path);
    test_run_result r = run_capped("head -c 3000000 /dev/zero | tr '\\0' a |", args);
    cr_log_info("%s", r.err);
    cr_expect_eq(r.status, 1, "%s", r.err);
    cr_expect(strstr(r.err, "a chat message on stdin is longer than 1048576 bytes (1 MiB), the "
                            "limit"),
              "%s", r.err);
    test_run_free(&r);
    rm(path);
}

/* A system message with which no message fits fails once, exit 1 (every
 * turn failed, exit 0). */
Test(gguf_run, system_message_larger_than_the_context)
{
    char *path = synth(NULL);
    char args[4400];
    snprintf(args, sizeof args,
             "-m '%s' --chat --chat-template chatml -c 16 -n 2 --system 'the little dog saw a "
             "big cat in the park one day and it was fun to see them play'",
             path);
    test_run_result r = run_with(args, "hello\nagain\n");
    cr_log_info("%s", r.err);
    cr_expect_eq(r.status, 1, "%s", r.err);
    const char *m = strstr(r.err, "the system message takes");
    cr_expect(m && strstr(m, "the context holds 16") && strstr(m, "--system"), "%s", r.err);
    cr_expect(m && !strstr(m + 1, "the system message takes"), "said twice: %s", r.err);
    cr_expect(!strstr(r.err, "does not fit"), "%s", r.err);
    test_run_free(&r);
    rm(path);
}

/* -n 0 reports "stop": "length" (it said "none", which the README does not
 * list). */
Test(gguf_run, json_stop_without_generation)
{
    char *path = synth(NULL);
    char args[4400];
    snprintf(args, sizeof args, "-m '%s' -p hi -n 0 --json", path);
    test_run_result r = run(args);
    cr_expect_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\"generated_ids\": [], \"text\": \"\", \"stop\": \"length\""), "%s",
              r.out);
    test_run_free(&r);
    rm(path);
}

/* ---- on a terminal ----
 * gguf-run on a pseudo-terminal (its stdin, stdout and stderr), where
 * Ctrl-C (\x03) and Ctrl-D (\x04) act as they do for a user: the terminal
 * sends SIGINT, or ends the input. */

typedef struct term {
    pid_t pid;
    int fd;    /* the terminal's other side */
    char *out; /* all it showed, NUL-terminated */
    size_t len, cap;
} term;

static term term_start(const char *args)
{
    const char *exe = test_tool("GLESC_GGUF_RUN");
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "exec '%s' --cache-dir off %s", exe, args);
    term t = {0};
    t.out = calloc(1, 1);
    struct winsize ws = {.ws_row = 50, .ws_col = 200};
    t.pid = forkpty(&t.fd, NULL, NULL, &ws);
    if (t.pid < 0 && (errno == ENODEV || errno == ENOENT)) {
        int e = errno;
        free(t.out);
        cr_skip_test("no pseudo-terminal here (forkpty: %s; /dev/pts not mounted?): skipping "
                     "a test that runs gguf-run on a terminal",
                     strerror(e));
    }
    cr_assert(t.pid >= 0, "forkpty: %s", strerror(errno));
    if (t.pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGINT, SIG_DFL);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return t;
}

/* Reads what the terminal shows for up to timeout_s seconds, until done
 * says so; false when the program ended first or the time ran out. */
static bool term_read(term *t, int timeout_s, bool (*done)(const term *, const void *),
                      const void *arg)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!done(t, arg)) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left = timeout_s * 1000L - (now.tv_sec - t0.tv_sec) * 1000L -
                    (now.tv_nsec - t0.tv_nsec) / 1000000L;
        struct pollfd p = {t->fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return false;
        if (t->len + 4096 + 1 > t->cap) {
            t->cap = (t->len + 4096 + 1) * 2;
            t->out = realloc(t->out, t->cap);
            cr_assert_not_null(t->out);
        }
        ssize_t n = read(t->fd, t->out + t->len, 4096);
        if (n <= 0) /* EIO once the program has ended */
            return false;
        t->len += (size_t)n;
        t->out[t->len] = 0;
    }
    return true;
}

typedef struct after {
    size_t from;
    const char *needle;
} after;

static bool shows(const term *t, const void *arg)
{
    const after *a = arg;
    return a->from <= t->len && strstr(t->out + a->from, a->needle) != NULL;
}

static bool has_bytes(const term *t, const void *arg)
{
    return t->len >= *(const size_t *)arg;
}

static bool never(const term *t, const void *arg)
{
    (void)t;
    (void)arg;
    return false;
}

static void term_send(term *t, const char *s)
{
    cr_assert_eq(write(t->fd, s, strlen(s)), (ssize_t)strlen(s));
}

/* Waits for the program to end: its status as test_run reports it. */
static int term_end(term *t)
{
    term_read(t, 60, never, NULL);
    int st;
    cr_assert_eq(waitpid(t->pid, &st, 0), t->pid);
    close(t->fd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void long_context(synth_params *p)
{
    p->n_ctx = 2048;
}

/* The chat's prompt on a terminal: after the reply's newline, "\n> ". */
#define TERM_PROMPT "\r\n\r\n> "

/* Ctrl-C during a reply stops the reply and the chat goes on at the prompt
 * (it killed the process and the conversation); Ctrl-D then ends it with
 * the summary on a line of its own (it went on the prompt's line). */
Test(gguf_run, ctrl_c_stops_a_chat_reply, .timeout = 300)
{
    char *path = synth(long_context);
    char args[4400];
    snprintf(args, sizeof args,
             "-m '%s' --chat --chat-template chatml -c 2048 -n 1500 --ignore-eos --temp 0", path);
    term t = term_start(args);
    cr_assert(term_read(&t, 120, shows, &(after){0, "\r\n> "}), "no prompt: %s", t.out);
    for (int turn = 0; turn < 2; turn++) {
        term_send(&t, turn ? "And then\n" : "Once upon a time\n");
        size_t want = t.len + 64; /* the echo and some of the reply */
        cr_assert(term_read(&t, 120, has_bytes, &want), "turn %d: no reply: %s", turn, t.out);
        size_t mark = t.len;
        term_send(&t, "\x03");
        cr_assert(term_read(&t, 120, shows, &(after){mark, TERM_PROMPT}),
                  "turn %d: Ctrl-C did not return to the prompt: %s", turn, t.out);
    }
    size_t mark = t.len;
    term_send(&t, "\x04");
    int status = term_end(&t);
    cr_log_info("terminal: %s", t.out);
    cr_expect_eq(status, 0, "%s", t.out);
    const char *s = strstr(t.out + mark, "gguf-run: load");
    cr_assert_not_null(s, "no summary: %s", t.out + mark);
    cr_expect(s - t.out >= 2 && s[-1] == '\n', "the summary is not on a line of its own: %s",
              t.out + mark);
    const char *d = strstr(s, "decode ");
    cr_assert_not_null(d);
    long decoded = strtol(d + 7, NULL, 10);
    cr_expect(decoded > 0 && decoded < 1500, "%ld tokens decoded in two stopped replies", decoded);
    free(t.out);
    rm(path);
}

/* Ctrl-C at the prompt ends gguf-run, as SIGINT does. */
Test(gguf_run, ctrl_c_at_the_prompt_exits, .timeout = 300)
{
    char *path = synth(NULL);
    char args[4400];
    snprintf(args, sizeof args, "-m '%s' --chat --chat-template chatml -n 4", path);
    term t = term_start(args);
    cr_assert(term_read(&t, 120, shows, &(after){0, "\r\n> "}), "no prompt: %s", t.out);
    term_send(&t, "\x03");
    cr_expect_eq(term_end(&t), 128 + SIGINT, "%s", t.out);
    free(t.out);
    rm(path);
}

/* With -v -v on a terminal, the per-token lines come after the streamed
 * text and the prompt's line before it (both broke into the text). */
Test(gguf_run, verbose_lines_stay_out_of_the_text, .timeout = 300)
{
    char *path = synth(NULL);
    char args[4400];
    snprintf(args, sizeof args, "-m '%s' -p 'once upon a time' -n 8 --temp 0 -v -v", path);
    term t = term_start(args);
    int status = term_end(&t);
    cr_log_info("terminal: %s", t.out);
    cr_expect_eq(status, 0, "%s", t.out);
    const char *text = strstr(t.out, "once upon a time");
    cr_assert_not_null(text, "%s", t.out);
    const char *eol = strchr(text, '\n');
    cr_assert_not_null(eol, "%s", t.out);
    char *line = strndup(text, (size_t)(eol - text));
    cr_expect(!strstr(line, "gguf-run") && !strchr(line, '['), "the text line holds: %s", line);
    cr_expect(strstr(eol, "gguf-run: decode step: token"), "%s", t.out);
    cr_expect(strstr(t.out, "gguf-run: prompt: ") < text, "%s", t.out);
    free(line);
    free(t.out);
    rm(path);
}

/* ---- Constrained sampling: --grammar, --json-schema, --logit-bias ---- */

/* A --json run's text (malloc'ed) and its first generated id; fails the
 * test when the run does. */
static char *json_text(const char *args, int *first_id)
{
    test_run_result r = run(args);
    cr_assert_eq(r.status, 0, "gguf-run %s: %s", args, r.err);
    json_object *o = json_tokener_parse(r.out), *t, *g;
    cr_assert_not_null(o, "not JSON: %s", r.out);
    cr_assert(json_object_object_get_ex(o, "text", &t));
    cr_assert(json_object_object_get_ex(o, "generated_ids", &g));
    if (first_id)
        *first_id =
            json_object_array_length(g) ? json_object_get_int(json_object_array_get_idx(g, 0)) : -1;
    char *text = strdup(json_object_get_string(t));
    json_object_put(o);
    test_run_free(&r);
    return text;
}

Test(gguf_run, grammar_and_json_schema, .timeout = 300)
{
    char *model = synth(NULL);
    char args[8192];
    for (int seed = 1; seed <= 4; seed++) {
        snprintf(args, sizeof args,
                 "-m '%s' -p 'Q' -n 100 -s %d --temp 1.5 --json --grammar "
                 "'root ::= (\"yes\" | \"no\") \"!\"'",
                 model, seed);
        char *text = json_text(args, NULL);
        cr_expect(!strcmp(text, "yes!") || !strcmp(text, "no!"), "seed %d: '%s'", seed, text);
        free(text);
    }
    const char *schema = "{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"},"
                         " \"s\": {\"enum\": [\"a\", \"b\"]}}, \"required\": [\"n\", \"s\"]}";
    for (int seed = 1; seed <= 4; seed++) {
        snprintf(args, sizeof args, "-m '%s' -p 'Q' -n 300 -s %d --temp 1 --json -j '%s'", model,
                 seed, schema);
        char *text = json_text(args, NULL);
        json_object *v = json_tokener_parse(text), *x;
        cr_expect(v && json_object_object_get_ex(v, "n", &x) &&
                      json_object_is_type(x, json_type_int) &&
                      json_object_object_get_ex(v, "s", &x),
                  "seed %d: '%s'", seed, text);
        json_object_put(v);
        free(text);
    }
    /* a chat: each reply follows the grammar from its start */
    snprintf(args, sizeof args,
             "-m '%s' --chat --chat-template chatml -n 40 -s 3 --grammar 'root ::= \"ok\" [0-9]'",
             model);
    test_run_result r = run_with(args, "one\ntwo\n");
    cr_expect_eq(r.status, 0, "%s", r.err);
    int replies = 0;
    for (const char *p = r.out; (p = strstr(p, "ok")); p += 2)
        replies += p[2] >= '0' && p[2] <= '9';
    cr_expect_eq(replies, 2, "stdout: %s", r.out);
    test_run_free(&r);
    rm(model);
}

Test(gguf_run, logit_bias, .timeout = 120)
{
    char *model = synth(NULL);
    char args[8192];
    int first, banned;
    snprintf(args, sizeof args, "-m '%s' -p 'Q' -n 1 --temp 0 --json", model);
    free(json_text(args, &first));
    snprintf(args, sizeof args, "-m '%s' -p 'Q' -n 1 --temp 0 --json --logit-bias %d-inf", model,
             first);
    free(json_text(args, &banned));
    cr_expect_neq(banned, first, "the banned token %d came again", first);
    rm(model);
}

Test(gguf_run, grammar_errors)
{
    const char *const bad_rule[] = {"--grammar: grammar: line 2, column 7: undefined rule 'b'",
                                    NULL};
    expect_failure("--grammar 'root ::= a\na ::= b'", 2, bad_rule);
    const char *const no_file[] = {"--grammar-file: cannot read /nonexistent/g.gbnf", NULL};
    expect_failure("--grammar-file /nonexistent/g.gbnf", 2, no_file);
    const char *const two[] = {"give at most one of --grammar", NULL};
    expect_failure("--grammar 'root ::= \"x\"' -j '{}'", 2, two);
    const char *const kw[] = {"--json-schema: json schema: #/properties/x: unsupported keyword "
                              "'format'",
                              NULL};
    expect_failure("-j '{\"properties\": {\"x\": {\"format\": \"date\"}}}'", 2, kw);
    const char *const not_json[] = {"--json-schema: json schema: not JSON", NULL};
    expect_failure("-j '{'", 2, not_json);
    const char *const bias[] = {"--logit-bias: 'x+1' is not TOKEN+BIAS", NULL};
    expect_failure("--logit-bias x+1", 2, bias);
    const char *const typ[] = {"--typical 0 must be in (0, 1]", NULL};
    expect_failure("--typical 0", 2, typ);
}

static void heads_of_32(synth_params *p)
{
    p->head_dim = 32;
}

/* llama.cpp's -ctk/-ctv: keys q8_0, values q4_0 (-v names both); the same
 * tokens as --kv-type f32 here; a quantized cache on heads of 16 refused. */
Test(gguf_run, kv_cache_types, .timeout = 300)
{
    char *path = synth(heads_of_32);
    char args[4400];
    snprintf(args, sizeof args, "-m '%s' -p 'hello world' -n 4 --temp 0 -v -ctk q8_0 -ctv q4_0",
             path);
    test_run_result r = run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.err, "KV q8_0/q4_0"), "%s", r.err);
    test_run_free(&r);
    snprintf(args, sizeof args, "-m '%s' -p 'hello world' -n 4 --temp 0 -v --kv-type q8_0", path);
    r = run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.err, "KV q8_0\n"), "%s", r.err);
    test_run_free(&r);
    rm(path);
    path = synth(NULL); /* heads of 16 */
    snprintf(args, sizeof args, "-m '%s' -p hi -n 1 -ctv q4_0", path);
    expect_failure(args, 1, (const char *[]){"q4_0 KV cache (values)", "multiple of 32", NULL});
    rm(path);
}
