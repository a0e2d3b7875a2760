/*
 * test_synth_util.c — the tests' tiny synthetic model (see the header).
 */
#include "test_synth_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void test_tiny_params(synth_params *p, int n_layer, int n_ctx)
{
    synth_params_default(p);
    p->n_embd = 64;
    p->n_layer = n_layer;
    p->n_head = 4;
    p->n_head_kv = 2;
    p->n_ff = 96;
    p->n_ctx = n_ctx;
    p->weight_type = GLESC_DTYPE_F32;
}

char *test_synth_write(const synth_params *p, const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = malloc(n);
    cr_assert(path);
    snprintf(path, n, "%s/%s", dir, name);
    cr_assert_eq(synth_write(p, path), GLESC_OK, "%s: %s", path, synth_errmsg());
    return path;
}
