/*
 * fuzz_grammar.c — libFuzzer target for the GBNF parser and matcher
 * (src/llm/grammar_parse.c, grammar.c). The input is grammar text, then
 * optionally a NUL and a string: the grammar must parse or be refused with
 * a message naming a line and column (or a limit), never crash, overflow
 * the stack or run away; an accepted grammar then matches the string (and
 * its own text) one byte at a time, as a token stream would feed it.
 *
 * Build: as fuzz_gguf.c (build-fuzz). Seeds and dictionary:
 * tests/fuzz/run_fuzz.sh 600 fuzz_grammar.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "glesc_llm.h"
#include "llm/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const char *nul = memchr(text, 0, size);
    size_t glen = nul ? (size_t)(nul - text) : size;
    const char *str = nul ? nul + 1 : text;
    size_t slen = nul ? size - glen - 1 : size;
    llm_grammar *g = NULL;
    glesc_status st = llm_grammar_parse(text, glen, NULL, &g);
    if (st != GLESC_OK) {
        const char *msg = glesc_last_errmsg();
        /* every refusal says why: a position, or the limit or rule named */
        if (!msg || !*msg || (st == GLESC_ERROR_FORMAT && !strstr(msg, "line ")))
            __builtin_trap();
        return 0;
    }
    gmatch *m = NULL;
    if (gmatch_create(g, &m) == GLESC_OK) {
        for (size_t i = 0; i < slen && i < 4096; i++)
            if (!gmatch_accept_bytes(m, str + i, 1))
                break;
        (void)gmatch_can_end(m);
        gmatch *c = NULL;
        if (gmatch_create(g, &c) == GLESC_OK && gmatch_copy(c, m) == GLESC_OK)
            (void)gmatch_hash(c);
        gmatch_destroy(c);
        gmatch_reset(m);
        (void)gmatch_accept_bytes(m, str, slen < 4096 ? slen : 4096);
    }
    gmatch_destroy(m);
    llm_grammar_destroy(g);
    return 0;
}
