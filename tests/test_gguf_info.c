/*
 * test_gguf_info.c — runs tools/gguf-info (path in $GLESC_GGUF_INFO, set by
 * tests/meson.build) and checks its exit codes (0 ok, 1 bad file, 2 bad
 * usage), the reader's message on stderr, string escaping in both modes and
 * the abbreviation of long arrays on a shared model.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

typedef struct run_result {
    int status;
    char *out, *err;
} run_result;

/* Runs gguf-info with args (a shell fragment) and collects its output. */
static run_result run(const char *args)
{
    const char *exe = getenv("GLESC_GGUF_INFO");
    cr_assert(exe && *exe, "GLESC_GGUF_INFO is not set");
    char out_path[64], err_path[64], cmd[8192];
    snprintf(out_path, sizeof out_path, "/tmp/glesc-gguf-info-%ld.out", (long)getpid());
    snprintf(err_path, sizeof err_path, "/tmp/glesc-gguf-info-%ld.err", (long)getpid());
    snprintf(cmd, sizeof cmd, "'%s' %s >%s 2>%s", exe, args, out_path, err_path);
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "cannot run %s", cmd);
    run_result r = {WEXITSTATUS(st), NULL, NULL};
    size_t n;
    r.out = test_read_file(out_path, &n);
    r.err = test_read_file(err_path, &n);
    cr_assert(r.out && r.err);
    unlink(out_path);
    unlink(err_path);
    return r;
}

static void run_free(run_result *r)
{
    free(r->out);
    free(r->err);
}

static char *corpus_file(const char *name)
{
    const char *root = getenv("GLESC_SOURCE_ROOT");
    char buf[4096];
    snprintf(buf, sizeof buf, "'%s/tests/gguf_corpus/%s'", root && *root ? root : ".", name);
    return strdup(buf);
}

Test(gguf_info, usage)
{
    run_result r = run("--help");
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "usage: gguf-info"));
    run_free(&r);
    r = run("");
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "no file given"));
    run_free(&r);
    r = run("--bogus x.gguf");
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "unknown option '--bogus'"));
    run_free(&r);
    r = run("a.gguf b.gguf");
    cr_assert_eq(r.status, 2);
    run_free(&r);
}

Test(gguf_info, bad_files)
{
    char *p = corpus_file("bad_row_not_block_multiple.gguf");
    run_result r = run(p);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "offset 100: tensor 'blk.0.attn_q.weight': row length 33 is not a "
                            "multiple of q8_0's block size 32"),
              "%s", r.err);
    cr_assert_str_eq(r.out, "");
    run_free(&r);
    free(p);
    p = corpus_file("bad_version1.gguf");
    char args[4200];
    snprintf(args, sizeof args, "--json %s", p);
    r = run(args);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "GGUF version 1 is not supported"), "%s", r.err);
    run_free(&r);
    free(p);
    r = run("/nonexistent/file.gguf");
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "/nonexistent/file.gguf: cannot open"), "%s", r.err);
    run_free(&r);
}

Test(gguf_info, text_and_json)
{
    char *p = corpus_file("ok_all_types.gguf");
    run_result r = run(p);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "alignment:   64\n"));
    cr_assert(strstr(r.out, "\"tab\\there \\\"quoted\\\" \\\\ \\x01 \\xff\""), "%s", r.out);
    cr_assert(strstr(r.out, "[[1, 2], [\"a\"], [[0.5]]]"), "%s", r.out);
    cr_assert(strstr(r.out, "q8_0"));
    run_free(&r);
    char args[4200];
    snprintf(args, sizeof args, "--json %s", p);
    r = run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "\"value\": \"tab\\there \\\"quoted\\\" \\\\ \\u0001 \\ufffd\""), "%s",
              r.out);
    cr_assert(strstr(r.out, "\"n_tensors\": 3, \"total_bytes\": 148, \"total_elements\": 88"), "%s",
              r.out);
    cr_assert(strstr(r.out, "{\"name\": \"q8\", \"type\": \"q8_0\", \"shape\": [32, 2], "
                            "\"bytes\": 68, \"offset\": 64}"),
              "%s", r.out);
    run_free(&r);
    free(p);
}

Test(gguf_info, shared_model)
{
    TEST_REQUIRE_SHARED(path, "models/stories260K.gguf");
    char args[4200];
    snprintf(args, sizeof args, "'%s'", path);
    run_result r = run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "tensors: 48\n"));
    cr_assert(strstr(r.out, "[\"<unk>\", \"<s>\", \"</s>\", \"<0x00>\", \"<0x01>\", \"<0x02>\", "
                            "\"<0x03>\", \"<0x04>\", ... (512 total)]"),
              "%s", r.out);
    cr_assert(strstr(r.out, "  f32            48         1171200          292800\n"), "%s", r.out);
    run_free(&r);
    snprintf(args, sizeof args, "--json '%s'", path);
    r = run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "\"elem_type\": \"string\", \"n\": 512, \"truncated\": true"));
    run_free(&r);
    free(path);
}
