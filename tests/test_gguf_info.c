/*
 * test_gguf_info.c — runs tools/gguf-info (path in $GLESC_GGUF_INFO, set by
 * tests/meson.build) and checks its exit codes (0 ok, 1 bad file, 2 bad
 * usage), the reader's message on stderr, string and name escaping in both
 * modes, the abbreviation of long arrays on a shared model, and files or
 * outputs that cannot be used (a FIFO, an empty dimension, a full disk).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "glesc_gguf.h"
#include "test_util.h"

/* Runs gguf-info with args (a shell fragment) and collects its output. */
static test_run_result run(const char *args)
{
    const char *exe = test_tool("GLESC_GGUF_INFO");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s", exe, args);
    test_run_result r = test_run(cmd, NULL);
    cr_assert(r.status < 128, "%s was killed (status %d)", cmd, r.status);
    return r;
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
    test_run_result r = run("--help");
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "usage: gguf-info"));
    test_run_free(&r);
    r = run("");
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "no file given"));
    test_run_free(&r);
    r = run("--bogus x.gguf");
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "unknown option '--bogus'"));
    test_run_free(&r);
    r = run("a.gguf b.gguf");
    cr_assert_eq(r.status, 2);
    test_run_free(&r);
}

Test(gguf_info, bad_files)
{
    char *p = corpus_file("bad_row_not_block_multiple.gguf");
    test_run_result r = run(p);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "offset 100: tensor 'blk.0.attn_q.weight': row length 33 is not a "
                            "multiple of q8_0's block size 32"),
              "%s", r.err);
    cr_assert_str_eq(r.out, "");
    test_run_free(&r);
    free(p);
    p = corpus_file("bad_version1.gguf");
    char args[4200];
    snprintf(args, sizeof args, "--json %s", p);
    r = run(args);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "GGUF version 1 is not supported"), "%s", r.err);
    test_run_free(&r);
    free(p);
    r = run("/nonexistent/file.gguf");
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "/nonexistent/file.gguf: cannot open"), "%s", r.err);
    test_run_free(&r);
}

Test(gguf_info, text_and_json)
{
    char *p = corpus_file("ok_all_types.gguf");
    test_run_result r = run(p);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "alignment:   64\n"));
    cr_assert(strstr(r.out, "\"tab\\there \\\"quoted\\\" \\\\ \\x01 \\xff\""), "%s", r.out);
    cr_assert(strstr(r.out, "[[1, 2], [\"a\"], [[0.5]]]"), "%s", r.out);
    cr_assert(strstr(r.out, "q8_0"));
    test_run_free(&r);
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
    test_run_free(&r);
    free(p);
}

Test(gguf_info, shared_model)
{
    TEST_REQUIRE_SHARED(path, "models/stories260K.gguf");
    char args[4200];
    snprintf(args, sizeof args, "'%s'", path);
    test_run_result r = run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "tensors: 48\n"));
    cr_assert(strstr(r.out, "[\"<unk>\", \"<s>\", \"</s>\", \"<0x00>\", \"<0x01>\", \"<0x02>\", "
                            "\"<0x03>\", \"<0x04>\", ... (512 total)]"),
              "%s", r.out);
    cr_assert(strstr(r.out, "  f32            48         1171200          292800\n"), "%s", r.out);
    test_run_free(&r);
    snprintf(args, sizeof args, "--json '%s'", path);
    r = run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "\"elem_type\": \"string\", \"n\": 512, \"truncated\": true"));
    test_run_free(&r);
    free(path);
}

/* Key and tensor names are escaped in text mode as values are: a control
 * byte in a name must not reach the terminal raw. */
Test(gguf_info, names_are_escaped)
{
    char *dir = test_tmpdir();
    char path[4200], args[4300];
    snprintf(path, sizeof path, "%s/names.gguf", dir);
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    cr_assert_eq(glesc_gguf_writer_set_u32(w, "evil\x1b[2Jkey\n", 7), GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_set_u32(w, "plain", 8), GLESC_OK);
    cr_assert_eq(
        glesc_gguf_writer_add_tensor(w, "t\tab\xff", GLESC_DTYPE_F32, 1, (int64_t[]){4}, NULL, 16),
        GLESC_OK);
    cr_assert_eq(glesc_gguf_writer_write(w, path), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_gguf_writer_destroy(w);
    snprintf(args, sizeof args, "'%s'", path);
    test_run_result r = run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(!strchr(r.out, '\x1b') && !strchr(r.out, '\t') && !strstr(r.out, "\xff"), "%s",
              r.out);
    /* padded to the widest escaped name */
    cr_expect(strstr(r.out, "  evil\\x1b[2Jkey\\n  uint32                7\n"), "%s", r.out);
    cr_expect(strstr(r.out, "  plain             uint32                8\n"), "%s", r.out);
    cr_expect(strstr(r.out, "t\\tab\\xff"), "%s", r.out);
    test_run_free(&r);
    unlink(path);
    rmdir(dir);
    free(dir);
}

/* A tensor with an empty dimension is refused, naming tensor and dimension. */
Test(gguf_info, zero_dimension)
{
    char *p = corpus_file("bad_zero_dim.gguf");
    test_run_result r = run(p);
    cr_assert_eq(r.status, 1);
    cr_expect(strstr(r.err, "tensor 'empty': ne[1] is 0 (empty dimension)"), "%s", r.err);
    cr_expect_str_eq(r.out, "");
    test_run_free(&r);
    free(p);
}

/* A FIFO is refused at once (it was opened blocking, waiting for a writer
 * forever; `timeout` ends such a regression instead of leaving it); output
 * that cannot be written is an error. */
Test(gguf_info, fifo_and_full_output, .timeout = 60)
{
    const char *exe = test_tool("GLESC_GGUF_INFO");
    char *dir = test_tmpdir();
    char path[4200], args[4400], cmd[8800];
    snprintf(path, sizeof path, "%s/fifo", dir);
    cr_assert_eq(mkfifo(path, 0600), 0);
    snprintf(cmd, sizeof cmd, "timeout 20 '%s' '%s'", exe, path);
    test_run_result r = test_run(cmd, NULL);
    cr_expect_eq(r.status, 1);
    cr_expect(strstr(r.err, ": not a regular file"), "%s", r.err);
    test_run_free(&r);
    unlink(path);
    rmdir(dir);
    free(dir);
    char *p = corpus_file("ok_all_types.gguf");
    snprintf(args, sizeof args, "%s >/dev/full", p);
    r = run(args);
    cr_expect_eq(r.status, 1);
    cr_expect(strstr(r.err, "gguf-info: writing output: No space left on device"), "%s", r.err);
    test_run_free(&r);
    free(p);
}
