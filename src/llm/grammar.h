/*
 * grammar.h — GBNF grammars (llama.cpp's format) for constrained sampling,
 * private to llm. grammar_parse.c turns the text into rules of elements;
 * grammar.c runs them: a set of pushdown stacks over Unicode code points
 * (llama.cpp's llama-grammar), advanced a code point at a time, that tells
 * which tokens of a vocabulary may come next. json_schema.c writes a
 * grammar from a JSON schema.
 *
 * Layout: one flat array of elements; rule r's alternatives start at
 * rule_start[r], each ends in GEL_ALT (another follows) or GEL_END (the
 * rule's last). A character set is GEL_CHAR / GEL_CHAR_NOT / GEL_CHAR_ANY
 * followed by GEL_CHAR_ALT (another code point) and GEL_CHAR_RNG_UPPER (the
 * element before is a range's lower end) elements. A stack is element
 * indices, the top last; its top is always a character set (advanced) and
 * an empty stack means the grammar may end there.
 */
#ifndef GLESC_LLM_GRAMMAR_H
#define GLESC_LLM_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "glesc_llm.h"

enum {
    GEL_END = 0,            /* end of the rule's last alternative */
    GEL_ALT = 1,            /* end of an alternative, another follows */
    GEL_RULE_REF = 2,       /* value: rule id */
    GEL_CHAR = 3,           /* value: code point (a set's first) */
    GEL_CHAR_NOT = 4,       /* value: code point (a negated set's first) */
    GEL_CHAR_RNG_UPPER = 5, /* value: upper end of the range begun by the element before */
    GEL_CHAR_ALT = 6,       /* value: one more code point of the set */
    GEL_CHAR_ANY = 7,       /* any code point ('.') */
};

typedef struct gelem {
    uint32_t type, value;
} gelem;

/* Parse limits, so hostile input cannot exhaust the C stack or memory. */
#define GRAMMAR_MAX_TEXT (1u << 20)  /* bytes of grammar text */
#define GRAMMAR_MAX_ELEMS (1u << 20) /* elements after repetitions expand */
#define GRAMMAR_MAX_RULES 65536u     /* rules, the generated ones too */
#define GRAMMAR_MAX_NESTING 64       /* nested groups */
#define GRAMMAR_MAX_REPEAT 10000u    /* m and n of {m,n} */
/* Matching limits: a stack's depth, the stacks of one state and their
 * elements together (a step's work is proportional to them), and the
 * expansions one advance may make before the grammar is called ambiguous. */
#define GRAMMAR_MAX_DEPTH 4096u
#define GRAMMAR_MAX_STACKS 4096u
#define GRAMMAR_MAX_STATE_WORDS 65536u
#define GRAMMAR_MAX_EXPAND 65536u

typedef struct llm_grammar {
    gelem *elems;
    uint32_t n_elems;
    uint32_t *rule_start; /* [n_rules] */
    uint32_t n_rules;
    uint32_t root;
    char **names; /* [n_rules], for messages; generated rules are "parent_N" */
} llm_grammar;

/* Parses GBNF text[0..len) with start rule root ("root" when NULL). On
 * failure *out is NULL and the message names the line and column
 * ("grammar: line 3, column 9: expected '::=' after the rule name"). */
glesc_status llm_grammar_parse(const char *text, size_t len, const char *root, llm_grammar **out);
void llm_grammar_destroy(llm_grammar *g);

/* ---- grammar.c: matching ---- */

/* A matcher's state: the stacks and a UTF-8 sequence a token left open. */
typedef struct gmatch gmatch;

/* The code points of every token, decoded once (from the start of a
 * character): what filtering reads on each step. */
typedef struct gvocab gvocab;

glesc_status gmatch_create(const llm_grammar *g, gmatch **out);
void gmatch_destroy(gmatch *m);
/* Back to the start rule. */
void gmatch_reset(gmatch *m);
/* dst takes src's state (both of one grammar). */
glesc_status gmatch_copy(gmatch *dst, const gmatch *src);
/* Feeds bytes; false (m unchanged) when the grammar cannot continue with
 * them. */
bool gmatch_accept_bytes(gmatch *m, const char *s, size_t n);
/* May the text end here (a stack is empty and no character is open)? */
bool gmatch_can_end(const gmatch *m);
/* The grammar accepts all of s[0..n) from its start (a fresh state). */
bool llm_grammar_accepts(const llm_grammar *g, const char *s, size_t n);

glesc_status gvocab_create(const glesc_tokenizer *tok, gvocab **out);
void gvocab_destroy(gvocab *v);
/* ok[i] = may token ids[i] come next (EOG tokens: only where the grammar
 * can end; tokens that render as nothing never). */
void gmatch_filter(gmatch *m, const gvocab *v, const int32_t *ids, size_t n, bool *ok);
/* Advances by token id (rendered through v); false (m unchanged) when the
 * token is not allowed. An EOG token is allowed where the grammar can end
 * and changes nothing. */
bool gmatch_accept_token(gmatch *m, const gvocab *v, int32_t id);

/* A hash of the state (the stacks in their order, the open sequence): equal
 * states reached the same way hash alike, for caching filter results. */
uint64_t gmatch_hash(const gmatch *m);

#endif
