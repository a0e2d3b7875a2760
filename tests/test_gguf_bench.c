/*
 * test_gguf_bench.c — the benchmark tools as subprocesses (paths in
 * $GLESC_GGUF_SYNTH, $GLESC_GGUF_BENCH, $GLESC_GGUF_RUN): gguf-synth writes a
 * small model of the tinyllama preset in every file type it knows and
 * gguf-run loads and runs each; gguf-bench runs llama-bench's tests on one
 * (-p 8 -n 4 -r 1), its JSON parses and holds every field it promises
 * (also with --portable), its table has a row per test, and bad usage is
 * exit status 2 with a message; --ttft's cold start compiles and writes every
 * program and its warm starts compile none.
 */
#include <criterion/criterion.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/synth.h"
#include "test_util.h"

/* Runs the tool named by environment variable `env` with args (a shell
 * fragment) and collects its output. */
static test_run_result run(const char *env, const char *args)
{
    const char *exe = test_tool(env);
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' %s", exe, args);
    return test_run(cmd, NULL);
}

TEST_TMPDIR_SUITE(gguf_bench);

/* The tinyllama preset shrunk to one layer of 256. */
#define SMALL "tinyllama-1.1b --n-layer 1 --n-embd 256 --n-head 4 --n-head-kv 2 --n-ff 512 "

static void synth(const char *type, const char *file)
{
    char args[4400];
    snprintf(args, sizeof args, SMALL "--n-vocab 400 -t %s -o '%s/%s'", type, dir, file);
    test_run_result r = run("GLESC_GGUF_SYNTH", args);
    cr_assert_eq(r.status, 0, "gguf-synth %s: %s", args, r.err);
    cr_assert(strstr(r.err, "wrote"), "%s", r.err);
    test_run_free(&r);
}

/* gguf-bench with flags on a new model of that type in file; fails the
 * test unless it exits 0. */
static test_run_result bench_on(const char *type, const char *file, const char *flags)
{
    synth(type, file);
    char args[4400];
    snprintf(args, sizeof args, "--cache-dir off -m '%s/%s' %s", dir, file, flags);
    test_run_result r = run("GLESC_GGUF_BENCH", args);
    cr_assert_eq(r.status, 0, "gguf-bench %s: %s", args, r.err);
    return r;
}

Test(gguf_bench, synth_every_file_type_runs)
{
    for (int f = SYNTH_FTYPE_NONE + 1; f < SYNTH_FTYPE_COUNT_; f++) {
        const char *type = synth_ftype_name((synth_ftype)f);
        char file[32], args[4400];
        snprintf(file, sizeof file, "m-%s.gguf", type);
        synth(type, file);
        snprintf(args, sizeof args,
                 "--cache-dir off -m '%s/%s' -p 'Once upon a time' -n 4 --temp 0 --ignore-eos", dir,
                 file);
        test_run_result r = run("GLESC_GGUF_RUN", args);
        cr_log_info("%s: %s", type, r.err);
        cr_expect_eq(r.status, 0, "gguf-run on a %s model: %s", type, r.err);
        cr_expect(strstr(r.err, "decode"), "%s: %s", type, r.err);
        test_run_free(&r);
    }
}

static json_object *get(json_object *o, const char *key)
{
    json_object *v = NULL;
    cr_assert(json_object_object_get_ex(o, key, &v), "no \"%s\" in %s", key,
              json_object_to_json_string(o));
    return v;
}

static void check_json(const char *out, bool portable)
{
    json_object *root = json_tokener_parse(out);
    cr_assert_not_null(root, "not JSON: %s", out);
    cr_expect_str_eq(json_object_get_string(get(root, "glesc_version")), glesc_version());
    json_object *dev = get(root, "device");
    cr_expect(json_object_get_string(get(dev, "renderer"))[0]);
    cr_expect_eq(json_object_get_boolean(get(dev, "portable")), portable);
    if (portable) {
        cr_expect_not(json_object_get_boolean(get(dev, "subgroups")));
        cr_expect_eq(json_object_get_int(get(dev, "max_compute_invocations")), 128);
        cr_expect_leq(json_object_get_int64(get(dev, "max_storage_block_size")), 128 << 20);
    }
    json_object *roof = get(root, "roofline");
    cr_expect_gt(json_object_get_double(get(roof, "copy_gbps")), 0);
    cr_expect_gt(json_object_get_double(get(roof, "read_gbps")), 0);
    cr_expect_eq(json_object_get_int(get(roof, "local_size")), portable ? 128 : 256);
    json_object *res = get(root, "results");
    cr_assert_eq(json_object_array_length(res), 2, "pp8 and tg4");
    const char *tests[2] = {"pp8", "tg4"};
    for (int i = 0; i < 2; i++) {
        json_object *r = json_object_array_get_idx(res, (size_t)i);
        cr_expect_str_eq(json_object_get_string(get(r, "test")), tests[i]);
        cr_expect_str_eq(json_object_get_string(get(r, "model_type")), "Q4_0");
        cr_expect_gt(json_object_get_int64(get(r, "model_size")), 0);
        cr_expect_gt(json_object_get_int64(get(r, "model_n_params")), 0);
        cr_expect_gt(json_object_get_int64(get(r, "weight_bytes_per_token")), 0);
        cr_expect_eq(json_object_get_int(get(r, "n_prompt")), i ? 0 : 8);
        cr_expect_eq(json_object_get_int(get(r, "n_gen")), i ? 4 : 0);
        cr_expect_eq(json_object_get_int(get(r, "reps")), 1);
        cr_expect_eq(json_object_array_length(get(r, "samples_ns")), 1);
        cr_expect_eq(json_object_array_length(get(r, "samples_ts")), 1);
        cr_expect_gt(json_object_get_double(get(r, "avg_ts")), 0);
        get(r, "stddev_ts");
        cr_expect_gt(json_object_get_int(get(r, "dispatches_per_step")), 0);
        json_object *prof = get(r, "profile");
        cr_expect_gt(json_object_get_int64(get(prof, "gpu_ns_per_step")), 0);
        json_object *kinds = get(prof, "kinds");
        json_object *mm = get(kinds, i ? "gemv" : "gemm");
        cr_expect_gt(json_object_get_int(get(mm, "kernels")), 0);
        get(kinds, "attention");
        if (i) {
            double gbps = json_object_get_double(get(r, "weight_gbps"));
            cr_expect_gt(gbps, 0);
            cr_expect_float_eq(json_object_get_double(get(r, "weight_bw_of_read")),
                               gbps / json_object_get_double(get(roof, "read_gbps")), 1e-3);
            cr_expect_gt(json_object_get_double(get(r, "weight_bw_of_copy")), 0);
        } else {
            cr_expect(json_object_is_type(get(r, "weight_gbps"), json_type_null));
        }
    }
    json_object_put(root);
}

Test(gguf_bench, json_has_every_field)
{
    synth("Q4_0", "b.gguf");
    char args[4400];
    snprintf(args, sizeof args,
             "--cache-dir off -m '%s/b.gguf' -p 8 -n 4 -r 1 --roofline-mib 1 --json", dir);
    test_run_result r = run("GLESC_GGUF_BENCH", args);
    cr_assert_eq(r.status, 0, "gguf-bench %s: %s", args, r.err);
    check_json(r.out, false);
    test_run_free(&r);

    snprintf(args, sizeof args,
             "--cache-dir off -m '%s/b.gguf' -p 8 -n 4 -r 1 --roofline-mib 1 --json --portable",
             dir);
    r = run("GLESC_GGUF_BENCH", args);
    cr_assert_eq(r.status, 0, "gguf-bench %s: %s", args, r.err);
    check_json(r.out, true);
    test_run_free(&r);
}

/* The tables: a row per test (two depths here), the details and rooflines;
 * the JSON file beside them. */
Test(gguf_bench, markdown_tables)
{
    synth("Q8_0", "t.gguf");
    char args[4400];
    snprintf(args, sizeof args,
             "--cache-dir off -m '%s/t.gguf' -p 8 -n 4 -d 0,8 -r 2 --roofline-mib 1 --kv-type f16 "
             "--json-file '%s/t.json'",
             dir, dir);
    test_run_result r = run("GLESC_GGUF_BENCH", args);
    cr_assert_eq(r.status, 0, "gguf-bench %s: %s", args, r.err);
    cr_log_info("%s", r.out);
    const char *want[] = {"| model",      "Q8_0",      "| f16 |",    "pp8 |",
                          "pp8 @ d8 |",   "tg4 |",     "tg4 @ d8 |", "disp/step",
                          "gemv/gemm ms", "rooflines", " ± "};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(strstr(r.out, want[i]), "'%s' not in:\n%s", want[i], r.out);
    test_run_free(&r);
    /* --json-file: the same results as JSON beside the tables */
    char path[4200];
    snprintf(path, sizeof path, "%s/t.json", dir);
    json_object *root = json_object_from_file(path);
    cr_assert_not_null(root, "%s does not parse", path);
    json_object *res = get(root, "results");
    cr_assert_eq(json_object_array_length(res), 4);
    cr_expect_str_eq(json_object_get_string(get(json_object_array_get_idx(res, 3), "test")),
                     "tg4 @ d8");
    cr_expect_str_eq(json_object_get_string(get(json_object_array_get_idx(res, 3), "kv_type")),
                     "f16");
    json_object_put(root);
}

/* --kv-type LIST with -ctv: a result per keys' type, named keys/values,
 * and the cache's bytes: one layer of 2 KV heads of 64 at a context of
 * 8 + 2 positions, keys q8_0 (a row of 4 blocks: 128 bytes of quants and
 * 16 of scales, padded) or q4_0 (64 and 16), values f16 (256 bytes). */
Test(gguf_bench, kv_cache_types)
{
    test_run_result r = bench_on("Q8_0", "kv.gguf",
                                 "-p 0 -n 2 -d 8 -r 1 --roofline-mib 0 --no-profile --kv-type "
                                 "q8_0,q4_0 -ctv f16 --json");
    json_object *root = json_tokener_parse(r.out);
    cr_assert_not_null(root, "not JSON: %s", r.out);
    json_object *res = get(root, "results");
    cr_assert_eq(json_object_array_length(res), 2);
    static const char *const names[2] = {"q8_0/f16", "q4_0/f16"};
    static const int64_t bytes[2] = {10 * (144 + 256), 10 * (80 + 256)};
    for (size_t i = 0; i < 2; i++) {
        json_object *o = json_object_array_get_idx(res, i);
        cr_expect_str_eq(json_object_get_string(get(o, "kv_type")), names[i]);
        cr_expect_str_eq(json_object_get_string(get(o, "test")), "tg2 @ d8");
        cr_expect_eq(json_object_get_int64(get(get(o, "gpu_memory"), "kv_cache")), bytes[i], "%s",
                     names[i]);
    }
    json_object_put(root);
    test_run_free(&r);
}

/* --kernels: the profiled step's kernels on stderr, numbered from 0, their
 * GPU times adding up to the profile's time per step (one step for pp). */
Test(gguf_bench, kernels_listed)
{
    test_run_result r =
        bench_on("Q4_0", "k.gguf", "-p 8 -n 0 -r 1 --roofline-mib 0 --kernels --json");
    int n = 0;
    double us = 0;
    for (const char *l = r.err; (l = strstr(l, " pp8 kernel ")) != NULL; l++) {
        int idx, disp;
        char name[128];
        double t;
        cr_assert_eq(sscanf(l, " pp8 kernel %d %127s %d %lf us", &idx, name, &disp, &t), 4,
                     "%.120s", l);
        cr_expect_eq(idx, n, "%.120s", l);
        cr_expect_geq(disp, 1);
        us += t;
        n++;
    }
    json_object *root = json_tokener_parse(r.out);
    cr_assert_not_null(root, "not JSON: %s", r.out);
    json_object *res = json_object_array_get_idx(get(root, "results"), 0);
    cr_expect_eq(n, json_object_get_int(get(res, "kernels_per_step")), "%s", r.err);
    double gpu_us =
        (double)json_object_get_int64(get(get(res, "profile"), "gpu_ns_per_step")) / 1e3;
    cr_expect(fabs(us - gpu_us) <= 0.01 * gpu_us + 0.1 * n, "kernels %.1f us, profile %.1f us", us,
              gpu_us);
    json_object_put(root);
    test_run_free(&r);
}

/* --greedy: each tgN again as "tgN greedy" (pipelined greedy steps), with
 * the dispatches of a tg step (the arg max runs inside the output head's
 * kernel), greedy marked in the JSON. */
Test(gguf_bench, greedy_tests)
{
    test_run_result r =
        bench_on("Q4_0", "g.gguf", "-p 0 -n 4,6 -r 1 --roofline-mib 0 --greedy --json");
    json_object *root = json_tokener_parse(r.out);
    cr_assert_not_null(root, "not JSON: %s", r.out);
    json_object *res = get(root, "results");
    cr_assert_eq(json_object_array_length(res), 4, "tg4, tg6, tg4 greedy, tg6 greedy");
    const char *tests[4] = {"tg4", "tg6", "tg4 greedy", "tg6 greedy"};
    for (int i = 0; i < 4; i++) {
        json_object *t = json_object_array_get_idx(res, (size_t)i);
        cr_expect_str_eq(json_object_get_string(get(t, "test")), tests[i]);
        cr_expect_eq(json_object_get_boolean(get(t, "greedy")), i >= 2);
        cr_expect_eq(json_object_get_int(get(t, "n_gen")), i % 2 ? 6 : 4);
        cr_expect_gt(json_object_get_double(get(t, "avg_ts")), 0);
        cr_expect_eq(
            json_object_get_int(get(t, "dispatches_per_step")),
            json_object_get_int(get(json_object_array_get_idx(res, 0), "dispatches_per_step")),
            "a greedy step takes the dispatches of a tg step");
    }
    json_object_put(root);
    test_run_free(&r);
}

Test(gguf_bench, bad_usage)
{
    const struct {
        const char *args, *needle;
    } cases[] = {
        {"-p 8", "no model"},
        {"-m x.gguf --frobnicate", "unknown option"},
        {"-m x.gguf -p 8,abc", "-p"},
        {"-m x.gguf --kv-type q5_0", "q5_0"},
        {"-m x.gguf -ctv bf16", "-ctv"},
        {"-m x.gguf -r 0", "-r"},
        {"-m x.gguf --kernels --no-profile", "--kernels"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        test_run_result r = run("GLESC_GGUF_BENCH", cases[i].args);
        cr_expect_eq(r.status, 2, "%s: exit %d: %s", cases[i].args, r.status, r.err);
        cr_expect(strstr(r.err, cases[i].needle), "%s: %s", cases[i].args, r.err);
        test_run_free(&r);
    }
    test_run_result r = run("GLESC_GGUF_BENCH", "--cache-dir off -m /nonexistent/m.gguf -n 1 -p 0");
    cr_expect_eq(r.status, 1, "%s", r.err);
    cr_expect(strstr(r.err, "/nonexistent/m.gguf"), "%s", r.err);
    test_run_free(&r);
    r = run("GLESC_GGUF_SYNTH", "tinyllama-9b -o /tmp/x.gguf");
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "tinyllama-1.1b"), "lists the presets: %s", r.err);
    test_run_free(&r);
    r = run("GLESC_GGUF_SYNTH", "-t Q3_X -o /tmp/x.gguf");
    cr_expect_eq(r.status, 2);
    cr_expect(strstr(r.err, "Q4_K_M"), "lists the types: %s", r.err);
    test_run_free(&r);
}

/* --ttft: three fresh processes of gguf-bench on caches of their own: the
 * cold one compiles every program and writes each binary, the warm ones
 * (both caches warm; glesc's alone) load them all and compile nothing. One
 * run (llvmpipe's cold compiles take seconds): the table on stdout, the
 * JSON in a file. */
Test(gguf_bench, ttft_cold_and_warm, .timeout = 600)
{
    synth("Q4_0", "f.gguf");
    char args[8800], json[4200];
    snprintf(json, sizeof json, "%s/ttft.json", dir);
    snprintf(args, sizeof args,
             "--cache-dir off -m '%s/f.gguf' --ttft 12 -p 0 -n 0 --roofline-mib 0 --json-file "
             "'%s'",
             dir, json);
    test_run_result r = run("GLESC_GGUF_BENCH", args);
    cr_assert_eq(r.status, 0, "gguf-bench %s: %s", args, r.err);
    cr_log_info("%s", r.out);
    const char *want[] = {"ttft start", "| cold ", "| warm ", "| warm glesc, cold driver |",
                          "TTFT ms",    "of cold", "(12)",    "100%"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(strstr(r.out, want[i]), "'%s' not in:\n%s", want[i], r.out);
    cr_expect_null(strstr(r.out, "t/s"), "no test table with -p 0 -n 0:\n%s", r.out);
    test_run_free(&r);

    json_object *root = json_object_from_file(json);
    cr_assert_not_null(root, "%s does not parse", json);
    cr_expect_eq(json_object_array_length(get(root, "results")), 0, "-p 0 -n 0: no tests");
    json_object *t = get(root, "ttft");
    cr_assert_eq(json_object_array_length(t), 3, "%s", json_object_to_json_string(t));
    const char *starts[3] = {"cold", "warm", "warm glesc, cold driver"};
    int64_t compiled = 0;
    for (int i = 0; i < 3; i++) {
        json_object *e = json_object_array_get_idx(t, (size_t)i);
        cr_expect_str_eq(json_object_get_string(get(e, "start")), starts[i]);
        cr_expect_eq(json_object_get_int(get(e, "n_prompt")), 12);
        int64_t prompt = json_object_get_int64(get(e, "prompt_ns")),
                decode = json_object_get_int64(get(e, "decode_ns"));
        cr_expect_gt(prompt, 0);
        cr_expect_gt(decode, 0);
        cr_expect_gt(json_object_get_int64(get(e, "context_ns")), 0);
        cr_expect_gt(json_object_get_int64(get(e, "load_ns")), 0);
        cr_expect_eq(json_object_get_int64(get(e, "ttft_ns")), prompt + decode);
        int64_t c = json_object_get_int64(get(e, "programs_compiled"));
        int64_t hits = json_object_get_int64(get(e, "program_disk_hits"));
        cr_expect_eq(json_object_get_int64(get(e, "program_disk_rejects")), 0);
        if (i == 0) {
            compiled = c;
            cr_expect_gt(c, 0, "the cold start compiles");
            cr_expect_eq(hits, 0);
            cr_expect_eq(json_object_get_int64(get(e, "program_disk_writes")), c);
            cr_expect_float_eq(json_object_get_double(get(e, "of_cold")), 1.0, 1e-9);
        } else {
            cr_expect_eq(c, 0, "the %s start compiled %lld programs", starts[i], (long long)c);
            /* at least the cold start's: a driver compiling in the
             * background also wrote the programs it compiled for later
             * steps (the decode step's) when the context ended */
            cr_expect_geq(hits, compiled, "the %s start: %lld disk hits of %lld", starts[i],
                          (long long)hits, (long long)compiled);
            cr_expect_gt(json_object_get_double(get(e, "of_cold")), 0);
        }
    }
    json_object_put(root);

    r = run("GLESC_GGUF_BENCH", "-m x.gguf --ttft 0");
    cr_expect_eq(r.status, 2, "%s", r.err);
    cr_expect(strstr(r.err, "--ttft"), "%s", r.err);
    test_run_free(&r);
}
