/*
 * fuzz_json_schema.c — libFuzzer target for the JSON schema converter
 * (src/llm/json_schema.c): every input is refused with a message or
 * converted to GBNF that the grammar parser accepts (a converter that
 * writes a grammar the parser refuses traps), never crashes.
 *
 * Build: as fuzz_gguf.c (build-fuzz). Seeds and dictionary:
 * tests/fuzz/run_fuzz.sh 600 fuzz_json_schema.
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
    char *gbnf = NULL;
    if (glesc_json_schema_to_grammar((const char *)data, size, &gbnf) != GLESC_OK) {
        const char *msg = glesc_last_errmsg();
        if (!msg || !*msg)
            __builtin_trap();
        return 0;
    }
    llm_grammar *g = NULL;
    glesc_status st = llm_grammar_parse(gbnf, strlen(gbnf), NULL, &g);
    if (st == GLESC_ERROR_FORMAT)
        __builtin_trap(); /* the converter wrote a grammar the parser refuses */
    if (g) {
        gmatch *m = NULL;
        if (gmatch_create(g, &m) == GLESC_OK)
            (void)gmatch_accept_bytes(m, "{\"a\": [1, \"x\", null]}", 21);
        gmatch_destroy(m);
    }
    llm_grammar_destroy(g);
    glesc_text_free(gbnf);
    return 0;
}
