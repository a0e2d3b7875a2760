/*
 * grammar_parse.c — GBNF text to rules (grammar.h's layout), llama.cpp's
 * syntax: `name ::= alternatives` a line each (newlines allowed inside
 * parentheses and after '|'), string literals with escapes (\n \r \t \\ \"
 * \[ \] \xHH \uHHHH \UHHHHHHHH), character classes with ranges and '^'
 * negation, '.' for any character, groups, repetition * + ? {m} {m,} {m,n},
 * '#' comments. Groups and repetitions become generated rules
 * ("parent_N": '_' is no rule-name character, so they never clash).
 *
 * Every error names the line and column. Undefined rules, rules defined
 * twice, a missing root and left recursion (which would loop the matcher)
 * are errors; the GRAMMAR_MAX_* limits bound text, elements, rules,
 * nesting and repetition counts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "llm/grammar.h"

typedef struct gbuf {
    gelem *e;
    uint32_t n, cap;
} gbuf;

typedef struct grule {
    gbuf body;
    char *name;
    size_t def_pos; /* where it is defined, or SIZE_MAX */
    size_t ref_pos; /* where it was first used */
    uint32_t n_gen; /* generated rules named after it */
} grule;

typedef struct gp {
    const char *s;
    size_t len;
    grule *rules;
    uint32_t n_rules, cap_rules;
    uint32_t n_elems;
    int depth;
    bool failed;
} gp;

/* 1-based line and column of offset pos (columns count bytes). */
static void line_col(const gp *p, size_t pos, size_t *line, size_t *col)
{
    *line = 1;
    size_t start = 0;
    for (size_t i = 0; i < pos && i < p->len; i++)
        if (p->s[i] == '\n') {
            ++*line;
            start = i + 1;
        }
    *col = pos - start + 1;
}

static glesc_status fail(gp *p, size_t pos, const char *fmt, ...) CORE_PRINTF(3, 4);
static glesc_status fail(gp *p, size_t pos, const char *fmt, ...)
{
    if (p->failed)
        return GLESC_ERROR_FORMAT;
    p->failed = true;
    size_t line, col;
    line_col(p, pos, &line, &col);
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return core_err_set(NULL, GLESC_ERROR_FORMAT, "grammar: line %zu, column %zu: %s", line, col,
                        msg);
}

static char at(const gp *p, size_t pos)
{
    return pos < p->len ? p->s[pos] : '\0';
}

static bool is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

/* Spaces, tabs and comments; newlines too when nl. */
static size_t skip_space(const gp *p, size_t pos, bool nl)
{
    for (;;) {
        char c = at(p, pos);
        if (c == ' ' || c == '\t' || (nl && (c == '\r' || c == '\n'))) {
            pos++;
        } else if (c == '#') {
            while (pos < p->len && p->s[pos] != '\n' && p->s[pos] != '\r')
                pos++;
        } else {
            return pos;
        }
    }
}

static bool push(gp *p, uint32_t rule, uint32_t type, uint32_t value, size_t pos)
{
    if (p->failed)
        return false;
    if (p->n_elems >= GRAMMAR_MAX_ELEMS) {
        fail(p, pos, "the grammar grows past %u elements", GRAMMAR_MAX_ELEMS);
        return false;
    }
    gbuf *b = &p->rules[rule].body;
    if (b->n == b->cap) {
        uint32_t cap = b->cap ? 2 * b->cap : 16;
        gelem *e = core_realloc(b->e, cap * sizeof *e);
        if (!e) {
            p->failed = true;
            core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "grammar: %u elements", cap);
            return false;
        }
        b->e = e;
        b->cap = cap;
    }
    b->e[b->n++] = (gelem){type, value};
    p->n_elems++;
    return true;
}

/* A new rule named name[0..n); UINT32_MAX on failure. */
static uint32_t rule_new(gp *p, const char *name, size_t n, size_t pos)
{
    if (p->n_rules >= GRAMMAR_MAX_RULES) {
        fail(p, pos, "more than %u rules", GRAMMAR_MAX_RULES);
        return UINT32_MAX;
    }
    if (p->n_rules == p->cap_rules) {
        uint32_t cap = p->cap_rules ? 2 * p->cap_rules : 16;
        grule *r = core_realloc(p->rules, cap * sizeof *r);
        if (!r)
            goto oom;
        p->rules = r;
        p->cap_rules = cap;
    }
    grule *r = &p->rules[p->n_rules];
    *r = (grule){.def_pos = SIZE_MAX, .ref_pos = pos};
    if (!(r->name = core_strndup(name, n)))
        goto oom;
    return p->n_rules++;
oom:
    p->failed = true;
    core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "grammar: rule table");
    return UINT32_MAX;
}

static uint32_t rule_find(const gp *p, const char *name, size_t n)
{
    for (uint32_t i = 0; i < p->n_rules; i++)
        if (strlen(p->rules[i].name) == n && memcmp(p->rules[i].name, name, n) == 0)
            return i;
    return UINT32_MAX;
}

static uint32_t rule_named(gp *p, const char *name, size_t n, size_t pos)
{
    uint32_t id = rule_find(p, name, n);
    return id != UINT32_MAX ? id : rule_new(p, name, n, pos);
}

/* A rule generated for a group or repetition inside rule parent. */
static uint32_t rule_gen(gp *p, uint32_t parent, size_t pos)
{
    char name[96];
    snprintf(name, sizeof name, "%.64s_%u", p->rules[parent].name, ++p->rules[parent].n_gen);
    uint32_t id = rule_new(p, name, strlen(name), pos);
    if (id != UINT32_MAX)
        p->rules[id].def_pos = pos;
    return id;
}

/* One UTF-8 character of the text at *pos into *cp; false when invalid. */
static bool utf8_at(const gp *p, size_t *pos, uint32_t *cp)
{
    unsigned char c = (unsigned char)p->s[*pos];
    int n = c < 0x80             ? 0
            : (c & 0xE0) == 0xC0 ? 1
            : (c & 0xF0) == 0xE0 ? 2
            : (c & 0xF8) == 0xF0 ? 3
                                 : -1;
    if (n < 0)
        return false;
    uint32_t v = n == 0 ? c : n == 1 ? c & 0x1Fu : n == 2 ? c & 0x0Fu : c & 0x07u;
    for (int i = 1; i <= n; i++) {
        unsigned char d = (unsigned char)at(p, *pos + (size_t)i);
        if ((d & 0xC0) != 0x80)
            return false;
        v = v << 6 | (d & 0x3Fu);
    }
    *pos += (size_t)n + 1;
    *cp = v;
    return true;
}

/* One character of a literal or class, escapes decoded; false on error. */
static bool parse_char(gp *p, size_t *pos, uint32_t *cp)
{
    size_t start = *pos;
    if (*pos >= p->len) {
        fail(p, start, "unexpected end of the grammar");
        return false;
    }
    if (p->s[*pos] != '\\') {
        if (!utf8_at(p, pos, cp)) {
            fail(p, start, "invalid UTF-8");
            return false;
        }
        return true;
    }
    char e = at(p, *pos + 1);
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = core_hex_digit(at(p, *pos + 2 + (size_t)i));
            if (h < 0) {
                fail(p, start, "\\%c needs %d hex digits", e, digits);
                return false;
            }
            v = v << 4 | (uint32_t)h;
        }
        if (v > 0x10FFFF) {
            fail(p, start, "code point 0x%X is beyond Unicode", v);
            return false;
        }
        *cp = v;
        *pos += 2 + (size_t)digits;
        return true;
    }
    static const char from[] = "nrt\\\"[]-^", to[] = "\n\r\t\\\"[]-^";
    const char *f = e ? strchr(from, e) : NULL;
    if (!f) {
        fail(p, start, "unknown escape '\\%c'", e ? e : '0');
        return false;
    }
    *cp = (unsigned char)to[f - from];
    *pos += 2;
    return true;
}

static size_t parse_alternatives(gp *p, size_t pos, uint32_t rule, bool nested);

static size_t parse_literal(gp *p, size_t pos, uint32_t rule)
{
    size_t open = pos++;
    while (!p->failed && at(p, pos) != '"') {
        if (pos >= p->len || p->s[pos] == '\n' || p->s[pos] == '\r') {
            fail(p, open, "unterminated string literal");
            return pos;
        }
        uint32_t cp;
        if (parse_char(p, &pos, &cp))
            push(p, rule, GEL_CHAR, cp, pos);
    }
    return pos + 1;
}

static size_t parse_class(gp *p, size_t pos, uint32_t rule)
{
    size_t open = pos++;
    uint32_t type = GEL_CHAR;
    if (at(p, pos) == '^') {
        type = GEL_CHAR_NOT;
        pos++;
    }
    bool first = true;
    while (!p->failed && at(p, pos) != ']') {
        if (pos >= p->len || p->s[pos] == '\n' || p->s[pos] == '\r') {
            fail(p, open, "unterminated character class");
            return pos;
        }
        uint32_t lo, hi;
        if (!parse_char(p, &pos, &lo))
            return pos;
        push(p, rule, first ? type : GEL_CHAR_ALT, lo, pos);
        first = false;
        if (at(p, pos) == '-' && at(p, pos + 1) != ']' && pos + 1 < p->len) {
            size_t rpos = pos;
            pos++;
            if (!parse_char(p, &pos, &hi))
                return pos;
            if (hi < lo) {
                fail(p, rpos, "range end U+%04X is below its start U+%04X", hi, lo);
                return pos;
            }
            push(p, rule, GEL_CHAR_RNG_UPPER, hi, pos);
        }
    }
    if (first && !p->failed)
        fail(p, open, "empty character class");
    return pos + 1;
}

/* Unsigned decimal at pos (at most GRAMMAR_MAX_REPEAT); SIZE_MAX when none. */
static size_t parse_count(gp *p, size_t *pos, size_t open)
{
    size_t v = 0, start = *pos;
    while (at(p, *pos) >= '0' && at(p, *pos) <= '9') {
        v = v * 10 + (size_t)(p->s[*pos] - '0');
        if (v > GRAMMAR_MAX_REPEAT) {
            fail(p, open, "repetition count above %u", GRAMMAR_MAX_REPEAT);
            return SIZE_MAX;
        }
        ++*pos;
    }
    return *pos == start ? SIZE_MAX : v;
}

/* Replaces the last symbol (rule's elements from last) by min copies and
 * max - min optional ones (max SIZE_MAX: any number), through generated
 * rules: "x*" is r ::= x r | ; "x{0,3}" is r1 ::= x r2 | , r2 ::= x r3 | ... */
static void repeat_last(gp *p, uint32_t rule, uint32_t last, size_t min, size_t max, size_t pos)
{
    gbuf *b = &p->rules[rule].body;
    uint32_t n = b->n - last;
    gelem *sym = core_malloc(n * sizeof *sym);
    if (!sym) {
        p->failed = true;
        core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "grammar");
        return;
    }
    memcpy(sym, b->e + last, n * sizeof *sym);
    p->n_elems -= n;
    b->n = last;
    for (size_t i = 0; i < min && !p->failed; i++)
        for (uint32_t j = 0; j < n; j++)
            push(p, rule, sym[j].type, sym[j].value, pos);
    uint32_t tail = UINT32_MAX; /* the optional part's rule */
    size_t n_opt = max == SIZE_MAX ? 1 : max - min;
    for (size_t i = 0; i < n_opt && !p->failed; i++) {
        uint32_t r = rule_gen(p, rule, pos);
        if (r == UINT32_MAX)
            break;
        for (uint32_t j = 0; j < n; j++)
            push(p, r, sym[j].type, sym[j].value, pos);
        uint32_t next = max == SIZE_MAX ? r : tail;
        if (next != UINT32_MAX)
            push(p, r, GEL_RULE_REF, next, pos);
        push(p, r, GEL_ALT, 0, pos);
        push(p, r, GEL_END, 0, pos);
        tail = r;
    }
    if (tail != UINT32_MAX)
        push(p, rule, GEL_RULE_REF, tail, pos);
    core_free(sym);
}

static size_t parse_repetition(gp *p, size_t pos, uint32_t rule, uint32_t last, bool have_last)
{
    char c = p->s[pos];
    size_t open = pos, min, max;
    if (!have_last) {
        fail(p, pos, "'%c' with nothing before it to repeat", c);
        return pos;
    }
    if (c == '*' || c == '+' || c == '?') {
        min = c == '+';
        max = c == '?' ? 1 : SIZE_MAX;
        pos++;
    } else {
        pos = skip_space(p, pos + 1, false);
        if ((min = parse_count(p, &pos, open)) == SIZE_MAX) {
            fail(p, open, "expected a number after '{'");
            return pos;
        }
        max = min;
        pos = skip_space(p, pos, false);
        if (at(p, pos) == ',') {
            pos = skip_space(p, pos + 1, false);
            max = at(p, pos) == '}' ? SIZE_MAX : parse_count(p, &pos, open);
            if (max == SIZE_MAX && at(p, pos) != '}') {
                fail(p, open, "expected a number or '}' after ','");
                return pos;
            }
            pos = skip_space(p, pos, false);
        }
        if (at(p, pos) != '}') {
            fail(p, open, "expected '}' to close the repetition");
            return pos;
        }
        if (max < min) {
            fail(p, open, "repetition {%zu,%zu} has its maximum below its minimum", min, max);
            return pos;
        }
        pos++;
    }
    repeat_last(p, rule, last, min, max, open);
    return pos;
}

static size_t parse_ref(gp *p, size_t pos, uint32_t rule)
{
    size_t start = pos;
    while (is_word(at(p, pos)))
        pos++;
    uint32_t id = rule_named(p, p->s + start, pos - start, start);
    if (id != UINT32_MAX)
        push(p, rule, GEL_RULE_REF, id, start);
    return pos;
}

static size_t parse_group(gp *p, size_t pos, uint32_t rule)
{
    size_t open = pos;
    if (++p->depth > GRAMMAR_MAX_NESTING) {
        fail(p, open, "groups nested deeper than %d", GRAMMAR_MAX_NESTING);
        return pos;
    }
    uint32_t sub = rule_gen(p, rule, open);
    if (sub == UINT32_MAX)
        return pos;
    pos = parse_alternatives(p, skip_space(p, pos + 1, true), sub, true);
    if (!p->failed && at(p, pos) != ')')
        fail(p, open, "'(' without a matching ')'");
    push(p, rule, GEL_RULE_REF, sub, open);
    p->depth--;
    return pos + 1;
}

/* Symbols up to '|', ')', the end of a line (outside groups) or the end. */
static size_t parse_sequence(gp *p, size_t pos, uint32_t rule, bool nested)
{
    uint32_t last = 0;
    bool have_last = false;
    while (!p->failed && pos < p->len) {
        char c = p->s[pos];
        uint32_t start = p->rules[rule].body.n;
        if (c == '"') {
            pos = parse_literal(p, pos, rule);
        } else if (c == '[') {
            pos = parse_class(p, pos, rule);
        } else if (is_word(c)) {
            pos = parse_ref(p, pos, rule);
        } else if (c == '(') {
            pos = parse_group(p, pos, rule);
        } else if (c == '.') {
            push(p, rule, GEL_CHAR_ANY, 0, pos++);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            pos = skip_space(p, parse_repetition(p, pos, rule, last, have_last), nested);
            have_last = false; /* "x**" is an error, as in llama.cpp */
            continue;
        } else {
            break;
        }
        last = start;
        have_last = p->rules[rule].body.n > start;
        pos = skip_space(p, pos, nested);
    }
    return pos;
}

static size_t parse_alternatives(gp *p, size_t pos, uint32_t rule, bool nested)
{
    pos = parse_sequence(p, pos, rule, nested);
    while (!p->failed && at(p, pos) == '|') {
        push(p, rule, GEL_ALT, 0, pos);
        pos = parse_sequence(p, skip_space(p, pos + 1, true), rule, nested);
    }
    push(p, rule, GEL_END, 0, pos);
    return pos;
}

static size_t parse_rule(gp *p, size_t pos)
{
    size_t start = pos;
    while (is_word(at(p, pos)))
        pos++;
    if (pos == start) {
        fail(p, start, "expected a rule name");
        return pos;
    }
    uint32_t id = rule_named(p, p->s + start, pos - start, start);
    if (id == UINT32_MAX)
        return pos;
    if (p->rules[id].def_pos != SIZE_MAX) {
        size_t line, col;
        line_col(p, p->rules[id].def_pos, &line, &col);
        fail(p, start, "rule '%s' is defined again (first at line %zu, column %zu)",
             p->rules[id].name, line, col);
        return pos;
    }
    p->rules[id].def_pos = start;
    pos = skip_space(p, pos, false);
    if (strncmp(p->s + pos, "::=", CORE_MIN(3, p->len - pos)) != 0 || p->len - pos < 3) {
        fail(p, pos, "expected '::=' after the rule name '%s'", p->rules[id].name);
        return pos;
    }
    pos = parse_alternatives(p, skip_space(p, pos + 3, true), id, false);
    if (p->failed)
        return pos;
    char c = at(p, pos);
    if (c == ')')
        fail(p, pos, "')' without a matching '('");
    else if (pos < p->len && c != '\n' && c != '\r')
        fail(p, pos, "unexpected character '%c'", c);
    return skip_space(p, pos, true);
}

/* Nullable rules (one alternative that can match nothing), to a fixed point. */
static bool seq_nullable(const gp *p, const gelem *e, const bool *nullable)
{
    for (; e->type != GEL_END && e->type != GEL_ALT; e++)
        if (e->type != GEL_RULE_REF || !nullable[e->value])
            return false;
    return true;
}

static bool rule_nullable(const gp *p, uint32_t r, const bool *nullable)
{
    const gelem *e = p->rules[r].body.e;
    for (;;) {
        if (seq_nullable(p, e, nullable))
            return true;
        while (e->type != GEL_END && e->type != GEL_ALT)
            e++;
        if (e->type == GEL_END)
            return false;
        e++;
    }
}

/* DFS over "rule r may begin with rule s"; state 1 on the path, 2 done. */
static bool left_cycle(gp *p, uint32_t r, const bool *nullable, uint8_t *state, uint32_t *path,
                       uint32_t depth)
{
    if (depth >= GRAMMAR_MAX_DEPTH) {
        fail(p, p->rules[r].def_pos, "rules begin with rules more than %u deep", GRAMMAR_MAX_DEPTH);
        return true;
    }
    state[r] = 1;
    path[depth] = r;
    for (const gelem *e = p->rules[r].body.e;; e++) {
        for (const gelem *a = e; a->type == GEL_RULE_REF; a++) {
            uint32_t s = a->value;
            if (state[s] == 1) {
                sbuf b;
                sbuf_init(&b);
                for (uint32_t i = depth - CORE_MIN(depth, 8u); i <= depth; i++)
                    sbuf_appendf(&b, "%s -> ", p->rules[path[i]].name);
                sbuf_append(&b, p->rules[s].name);
                fail(p, p->rules[s].def_pos, "left recursion: %s", b.oom ? "?" : sbuf_str(&b));
                sbuf_free(&b);
                return true;
            }
            if (state[s] == 0 && left_cycle(p, s, nullable, state, path, depth + 1))
                return true;
            if (!nullable[s])
                break;
        }
        while (e->type != GEL_END && e->type != GEL_ALT)
            e++;
        if (e->type == GEL_END)
            break;
    }
    state[r] = 2;
    return false;
}

/* Undefined rules and left recursion. The DFS recurses once per rule along
 * a path of leading references, GRAMMAR_MAX_DEPTH at most. */
static void check_rules(gp *p)
{
    for (uint32_t i = 0; i < p->n_rules && !p->failed; i++)
        if (p->rules[i].def_pos == SIZE_MAX)
            fail(p, p->rules[i].ref_pos, "undefined rule '%s'", p->rules[i].name);
    if (p->failed)
        return;
    bool *nullable = core_calloc(p->n_rules, sizeof *nullable);
    uint8_t *state = core_calloc(p->n_rules, 1);
    uint32_t *path = core_calloc(GRAMMAR_MAX_DEPTH, sizeof *path);
    if (!nullable || !state || !path) {
        p->failed = true;
        core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "grammar: %u rules", p->n_rules);
        goto done;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < p->n_rules; r++)
            if (!nullable[r] && rule_nullable(p, r, nullable))
                changed = nullable[r] = true;
    }
    for (uint32_t r = 0; r < p->n_rules && !p->failed; r++)
        if (state[r] == 0)
            left_cycle(p, r, nullable, state, path, 0);
done:
    core_free(nullable);
    core_free(state);
    core_free(path);
}

static void gp_free(gp *p)
{
    for (uint32_t i = 0; i < p->n_rules; i++) {
        core_free(p->rules[i].body.e);
        core_free(p->rules[i].name);
    }
    core_free(p->rules);
}

/* The rules into one llm_grammar; the names move over. */
static llm_grammar *flatten(gp *p, uint32_t root)
{
    llm_grammar *g = core_calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->elems = core_malloc((size_t)(p->n_elems ? p->n_elems : 1) * sizeof *g->elems);
    g->rule_start = core_calloc(p->n_rules, sizeof *g->rule_start);
    g->names = core_calloc(p->n_rules, sizeof *g->names);
    if (!g->elems || !g->rule_start || !g->names) {
        llm_grammar_destroy(g);
        return NULL;
    }
    for (uint32_t r = 0; r < p->n_rules; r++) {
        g->rule_start[r] = g->n_elems;
        memcpy(g->elems + g->n_elems, p->rules[r].body.e, p->rules[r].body.n * sizeof(gelem));
        g->n_elems += p->rules[r].body.n;
        g->names[r] = p->rules[r].name;
        p->rules[r].name = NULL;
    }
    g->n_rules = p->n_rules;
    g->root = root;
    return g;
}

glesc_status llm_grammar_parse(const char *text, size_t len, const char *root, llm_grammar **out)
{
    core_err_reset(NULL);
    *out = NULL;
    if (!text && len)
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "grammar: text is NULL");
    if (len > GRAMMAR_MAX_TEXT)
        return core_err_set(NULL, GLESC_ERROR_LIMIT, "grammar: %zu bytes of text (at most %u)", len,
                            GRAMMAR_MAX_TEXT);
    if (!root)
        root = "root";
    gp p = {.s = text ? text : "", .len = len};
    size_t pos = skip_space(&p, 0, true);
    while (!p.failed && pos < p.len)
        pos = parse_rule(&p, pos);
    if (!p.failed && p.n_rules == 0)
        fail(&p, pos, "no rules");
    if (!p.failed)
        check_rules(&p);
    uint32_t rid = p.failed ? UINT32_MAX : rule_find(&p, root, strlen(root));
    if (!p.failed && rid == UINT32_MAX)
        core_err_set(NULL, GLESC_ERROR_NOT_FOUND, "grammar: no rule named '%s' (the start rule)",
                     root);
    glesc_status st = core_err_tls()->status;
    if (!p.failed && rid != UINT32_MAX) {
        *out = flatten(&p, rid);
        st = *out
                 ? GLESC_OK
                 : core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "grammar: %u elements", p.n_elems);
    }
    gp_free(&p);
    return st;
}

void llm_grammar_destroy(llm_grammar *g)
{
    if (!g)
        return;
    for (uint32_t r = 0; r < g->n_rules && g->names; r++)
        core_free(g->names[r]);
    core_free(g->names);
    core_free(g->elems);
    core_free(g->rule_start);
    core_free(g);
}
