/*
 * ref-check.c — compares glesc's runtime with llama.cpp's reference outputs
 * (see refcheck.h for the rules) and prints one table row per model: the
 * worst logit difference D, the tolerance, the positions compared, the arg
 * max and greedy checks. Exit status 0 when every supported model passes,
 * 1 when one fails, 2 for bad usage. A development tool: built, not
 * installed.
 *
 *   ref-check [--kv-type f32|f16|q8_0|q4_0] [--no-greedy] [-v] [JSON...]
 *
 * Without JSON arguments it checks every file of
 * $GLESC_SHARED_DIR/reference/expected (default ../shared/reference/expected
 * beside the source tree, or ./shared/...).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "glesc.h"
#include "refcheck.h"

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every *.json of dir, sorted; NULL-terminated, malloc'ed. */
static char **list_dir(const char *dir, int *n)
{
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char **v = NULL;
    int cap = 0;
    *n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json"))
            continue;
        if (*n + 1 >= cap) {
            cap = cap ? cap * 2 : 32;
            char **nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv)
                break;
            v = nv;
        }
        v[*n] = malloc(strlen(dir) + len + 2);
        if (!v[*n])
            break;
        sprintf(v[*n], "%s/%s", dir, e->d_name);
        (*n)++;
    }
    closedir(d);
    if (v)
        qsort(v, (size_t)*n, sizeof *v, by_name);
    return v;
}

int main(int argc, char **argv)
{
    refcheck_options o = {0};
    int first = argc, verbose = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kv-type") && i + 1 < argc) {
            const char *v = argv[++i];
            if (!tool_parse_kv_type(v, &o.kv_type)) {
                fprintf(stderr, "ref-check: --kv-type: '%s' is not f32, f16, q8_0 or q4_0\n", v);
                return 2;
            }
        } else if (!strcmp(argv[i], "--no-greedy")) {
            o.no_greedy = true;
        } else if (!strcmp(argv[i], "-v")) {
            verbose = 1;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: ref-check [--kv-type f32|f16|q8_0|q4_0] [--no-greedy] [-v] "
                   "[JSON...]\n");
            return 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "ref-check: unknown option '%s'\n", argv[i]);
            return 2;
        } else {
            first = i;
            break;
        }
    }
    if (verbose)
        o.log = stderr;
    char **files;
    int n;
    char dir[4096];
    if (first < argc) {
        files = argv + first;
        n = argc - first;
    } else {
        const char *shared = getenv("GLESC_SHARED_DIR");
        const char *root = getenv("GLESC_SOURCE_ROOT");
        if (shared && *shared)
            snprintf(dir, sizeof dir, "%s/reference/expected", shared);
        else
            snprintf(dir, sizeof dir, "%s/../shared/reference/expected",
                     root && *root ? root : ".");
        files = list_dir(dir, &n);
        if (!files || n == 0) {
            fprintf(stderr,
                    "ref-check: no reference files in %s (set GLESC_SHARED_DIR or give JSON "
                    "files)\n",
                    dir);
            return 2;
        }
    }
    glesc_context *ctx;
    glesc_context_options co = {0};
    if (glesc_context_create(&co, &ctx) != GLESC_OK) {
        fprintf(stderr, "ref-check: no GPU context: %s\n", glesc_last_errmsg());
        return 1;
    }
    printf("glesc vs llama.cpp (reference/README.md), KV cache %s, GPU %s\n",
           glesc_dtype_name(o.kv_type), glesc_context_caps(ctx)->renderer);
    refcheck_print_header(stdout);
    int failed = 0, passed = 0, skipped = 0;
    for (int i = 0; i < n; i++) {
        refcheck_result r;
        if (verbose)
            fprintf(stderr, "%s\n", files[i]);
        refcheck_run(ctx, files[i], &o, &r);
        refcheck_print_row(stdout, &r);
        fflush(stdout);
        failed += r.status == REFCHECK_FAIL;
        passed += r.status == REFCHECK_PASS;
        skipped += r.status == REFCHECK_SKIP;
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    glesc_context_destroy(ctx);
    if (first >= argc) {
        for (int i = 0; i < n; i++)
            free(files[i]);
        free(files);
    }
    return failed ? 1 : 0;
}
