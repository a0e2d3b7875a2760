/*
 * test_core.c — the core layer: status names, error messages, the string
 * builder (also under injected allocation failure), hashing.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "core/core.h"

Test(core, status_names)
{
    cr_assert_str_eq(glesc_status_name(GLESC_OK), "GLESC_OK");
    cr_assert_str_eq(glesc_status_name(GLESC_ERROR_EGL), "GLESC_ERROR_EGL");
    cr_assert_str_eq(glesc_status_name((glesc_status)-999), "GLESC_UNKNOWN");
    cr_assert_str_eq(glesc_status_str(GLESC_ERROR_OUT_OF_MEMORY), "out of memory");
}

Test(core, error_messages)
{
    core_err e = {0};
    cr_assert_str_eq(core_err_msg(&e), "");
    cr_assert_eq(core_err_set(&e, GLESC_ERROR_FORMAT, "tensor '%s' at offset %d", "w", 12),
                 GLESC_ERROR_FORMAT);
    core_err_prefix(&e, "file %s", "x.gguf");
    cr_assert_str_eq(core_err_msg(&e), "file x.gguf: tensor 'w' at offset 12");
    core_err_clear(&e);
    core_err_set(NULL, GLESC_ERROR_IO, "thread-local %d", 7);
    cr_assert_str_eq(glesc_last_errmsg(), "thread-local 7");
}

Test(core, sbuf_basic)
{
    sbuf b;
    sbuf_init(&b);
    cr_assert_str_eq(sbuf_str(&b), "");
    for (int i = 0; i < 1000; i++)
        sbuf_appendf(&b, "%d,", i);
    sbuf_append(&b, "end");
    cr_assert_eq(b.len, strlen(sbuf_str(&b)));
    cr_assert(strncmp(sbuf_str(&b), "0,1,2,", 6) == 0);
    sbuf_reset(&b);
    sbuf_append_indented(&b, "a;\n\nb;", 4);
    cr_assert_str_eq(sbuf_str(&b), "    a;\n\n    b;\n");
    char *s = sbuf_take(&b);
    cr_assert_str_eq(s, "    a;\n\n    b;\n");
    core_free(s);
    cr_assert_str_eq(sbuf_str(&b), "");
    sbuf_free(&b);
}

/* Every allocation position fails once: the builder must end in the sticky
 * OOM state (never crash), and a run with no failure gives the full text. */
Test(core, sbuf_injected_allocation_failure)
{
    sbuf ref;
    sbuf_init(&ref);
    for (int i = 0; i < 200; i++)
        sbuf_appendf(&ref, "line %d of the kernel\n", i);
    cr_assert_not_null(sbuf_str(&ref));
    for (long k = 0; k < 16; k++) {
        sbuf b;
        sbuf_init(&b);
        core_alloc_fail_after(k);
        for (int i = 0; i < 200; i++)
            sbuf_appendf(&b, "line %d of the kernel\n", i);
        long made = core_alloc_fail_after(-1);
        if (k < made) {
            cr_assert(b.oom, "failure at allocation %ld was not sticky", k);
            cr_assert_null(sbuf_str(&b));
            cr_assert_null(sbuf_take(&b));
        } else {
            cr_assert_str_eq(sbuf_str(&b), sbuf_str(&ref));
        }
        sbuf_free(&b);
    }
    sbuf_free(&ref);
}

Test(core, hashing)
{
    core_hash128 a = core_hash128_bytes("abc", 3), b = core_hash128_bytes("abd", 3);
    cr_assert(!core_hash128_eq(a, b));
    core_hasher *h = core_hasher_create();
    cr_assert_not_null(h);
    core_hasher_update(h, "a", 1);
    core_hasher_update(h, "bc", 2);
    cr_assert(core_hash128_eq(core_hasher_digest(h), a));
    core_hasher_destroy(h);
    char hex[33];
    core_hash128_hex(a, hex);
    cr_assert_eq(strlen(hex), 32);
}
