/*
 * test_grammar.c — GBNF grammars and constrained sampling: the parser takes
 * grammars of llama.cpp's example kinds (arithmetic, JSON, lists, chess
 * moves) and refuses malformed ones naming the line and column; the
 * matcher accepts and rejects strings; JSON schemas convert (and refuse
 * unsupported keywords naming them and their path); a sampler with a
 * grammar over the synthetic model's vocabulary, fed random logits (what a
 * random-weight model gives) under many seeds, only ever produces text the
 * grammar accepts, JSON that parses and validates for a schema; the
 * grammar's state follows glesc_sampler_copy and reset.
 */
#include <criterion/criterion.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "glesc_llm.h"
#include "llm/grammar.h"
#include "test_synth_util.h"
#include "test_util.h"

TEST_TMPDIR_SUITE(grammar);

static const char *arith = "root  ::= (expr \"=\" ws term \"\\n\")+\n"
                           "expr  ::= term ([-+*/] term)*\n"
                           "term  ::= ident | num | \"(\" ws expr \")\" ws\n"
                           "ident ::= [a-z] [a-z0-9_]* ws\n"
                           "num   ::= [0-9]+ ws\n"
                           "ws    ::= [ \\t\\n]*\n";

static const char *json_gbnf =
    "# JSON, as llama.cpp's grammars/json.gbnf describes it\n"
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "            value\n"
    "    (\",\" ws value)*\n"
    "  )? \"]\" ws\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
    "  )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static const char *list_gbnf = "root ::= item+\n"
                               "# one per line\n"
                               "item ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n";

static const char *chess = "root   ::= \"1. \" move \" \" move \"\\n\" ([1-9] [0-9]? \". \" move "
                           "\" \" move \"\\n\"){0,3}\n"
                           "move   ::= (pawn | nonpawn | castle) [+#]?\n"
                           "pawn   ::= ([a-h] \"x\")? [a-h] [1-8] (\"=\" [NBRQ])?\n"
                           "nonpawn ::= [NBKQR] [a-h]? [1-8]? \"x\"? [a-h] [1-8]\n"
                           "castle ::= \"O-O\" \"-O\"?\n";

static llm_grammar *parse(const char *text)
{
    llm_grammar *g = NULL;
    cr_assert_eq(llm_grammar_parse(text, strlen(text), NULL, &g), GLESC_OK, "%s\n%s",
                 glesc_last_errmsg(), text);
    return g;
}

static bool accepts(llm_grammar *g, const char *s)
{
    return llm_grammar_accepts(g, s, strlen(s));
}

Test(grammar, example_grammars_parse_and_match)
{
    llm_grammar *g = parse(arith);
    cr_expect(accepts(g, "a+b=c\n"));
    cr_expect(accepts(g, "x1 *(y +2) = 42\n1=1\n"));
    cr_expect(!accepts(g, "a+=b\n"));
    cr_expect(!accepts(g, "a=b"));
    llm_grammar_destroy(g);

    g = parse(json_gbnf);
    cr_expect(accepts(g, "{\"a\": [1, -2.5e3, true, null, {\"b\": \"x\\u00e9\\n\"}]}"));
    cr_expect(accepts(g, "{}"));
    cr_expect(accepts(g, "{\"é\": \"ü€😀\"}"));
    cr_expect(!accepts(g, "{\"a\": 01x}"));
    cr_expect(!accepts(g, "{\"a\" 1}"));
    cr_expect(!accepts(g, "[1]"));
    cr_expect(!accepts(g, "{\"a\": \"\x01\"}"));
    llm_grammar_destroy(g);

    g = parse(list_gbnf);
    cr_expect(accepts(g, "- milk\n- eggs\n"));
    cr_expect(!accepts(g, "- milk\n-\n"));
    cr_expect(!accepts(g, ""));
    llm_grammar_destroy(g);

    g = parse(chess);
    cr_expect(accepts(g, "1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n"));
    cr_expect(accepts(g, "1. O-O-O Qxd8#\n"));
    cr_expect(!accepts(g, "1. e9 e5\n"));
    cr_expect(!accepts(g, "1. e4 e5\n2. a3 a6\n3. a4 a5\n4. b3 b6\n5. b4 b5\n"), "{0,3}");
    llm_grammar_destroy(g);
}

Test(grammar, repetitions_classes_escapes)
{
    llm_grammar *g = parse("root ::= \"a\"{2,4} [^a-c\\]] . x? \"\\x41\\u00e9\\U0001F600\"\n"
                           "x ::= (\"q\" | [0-9]){3}\n");
    cr_expect(accepts(g, "aadzAé😀"));
    cr_expect(accepts(g, "aaaa]"
                         "\xC3\xA9"
                         "q1qAé😀") == false,
              "']' is excluded");
    cr_expect(accepts(g, "aaaaz"
                         "\xC3\xA9"
                         "q1qAé😀"));
    cr_expect(!accepts(g, "aaaaaz"
                          "zAé😀"),
              "five a");
    cr_expect(!accepts(g, "abzzAé😀"), "b is excluded");
    cr_expect(!accepts(g, "aazzq1Aé😀"), "{3} needs three");
    llm_grammar_destroy(g);
    g = parse("root ::= [a-z]{0,} \"!\"? ( \"x\" | ) \n");
    cr_expect(accepts(g, ""));
    cr_expect(accepts(g, "abc!x"));
    cr_expect(!accepts(g, "abc!!"));
    llm_grammar_destroy(g);
}

/* text must fail with a message that contains want (the position). */
static void refused(const char *text, const char *want)
{
    llm_grammar *g = NULL;
    glesc_status st = llm_grammar_parse(text, strlen(text), NULL, &g);
    cr_expect_neq(st, GLESC_OK, "accepted: %s", text);
    cr_expect_null(g);
    cr_expect(strstr(glesc_last_errmsg(), want), "%s\n  gave: %s\n  want: %s", text,
              glesc_last_errmsg(), want);
    llm_grammar_destroy(g);
}

Test(grammar, malformed_grammars_name_line_and_column)
{
    refused("root ::= \"abc\n", "line 1, column 10: unterminated string literal");
    refused("root ::= [abc\n", "line 1, column 10: unterminated character class");
    refused("root ::= a\na ::= (\"x\" | \"y\"\n", "line 2, column 7: '(' without a matching ')'");
    refused("root ::= \"x\" )\n", "line 1, column 14: ')' without a matching '('");
    refused("# comment\nroot := \"x\"\n", "line 2, column 6: expected '::='");
    refused("root ::= foo\n", "line 1, column 10: undefined rule 'foo'");
    refused("root ::= \"a\"\nroot ::= \"b\"\n",
            "line 2, column 1: rule 'root' is defined again (first at line 1, column 1)");
    refused("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"\n", "left recursion");
    refused("root ::= a\na ::= b? a \"x\"\nb ::= \"y\"\n", "left recursion");
    refused("root ::= * \"a\"\n", "line 1, column 10: '*' with nothing before it to repeat");
    refused("root ::= \"a\"{3,2}\n", "line 1, column 13: repetition {3,2}");
    refused("root ::= \"a\"{2\n", "line 1, column 13: expected '}'");
    refused("root ::= \"a\"{99999}\n", "repetition count above");
    refused("root ::= \"\\q\"\n", "line 1, column 11: unknown escape");
    refused("root ::= \"\\x4\"\n", "\\x needs 2 hex digits");
    refused("root ::= [z-a]\n", "range end");
    refused("root ::= []\n", "empty character class");
    refused("", "no rules");
    refused("start ::= \"x\"\n", "no rule named 'root'");
    refused("root ::= \"a\" $\n", "line 1, column 14: unexpected character '$'");
    refused("root ::= \"\xff\"\n", "invalid UTF-8");
    /* nesting past the limit fails cleanly, without deep recursion */
    char deep[400] = "root ::= ";
    for (int i = 0; i < 100; i++)
        strcat(deep, "(");
    refused(deep, "groups nested deeper than 64");
}

Test(grammar, size_limits)
{
    /* {m,n} copies multiply: a grammar that would expand past the element
     * limit fails with a message instead of exhausting memory */
    char bomb[400] = "root ::= \"";
    for (int i = 0; i < 200; i++)
        strcat(bomb, "x");
    strcat(bomb, "\"{9000}\n");
    refused(bomb, "the grammar grows past 1048576 elements");
}

/* ---- JSON schemas ---- */

static char *schema_gbnf(const char *schema)
{
    char *g = NULL;
    cr_assert_eq(glesc_json_schema_to_grammar(schema, strlen(schema), &g), GLESC_OK, "%s\n%s",
                 glesc_last_errmsg(), schema);
    return g;
}

static const char *person_schema =
    "{\"type\": \"object\", \"additionalProperties\": false,"
    " \"properties\": {"
    "  \"name\": {\"type\": \"string\", \"maxLength\": 12},"
    "  \"age\": {\"type\": \"integer\"},"
    "  \"role\": {\"enum\": [\"admin\", \"user\", null, 3]},"
    "  \"tags\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/tag\"}, \"minItems\": 1,"
    "            \"maxItems\": 3},"
    "  \"ok\": {\"type\": \"boolean\"},"
    "  \"score\": {\"type\": [\"number\", \"null\"]},"
    "  \"kind\": {\"const\": \"person\"}"
    " },"
    " \"required\": [\"name\", \"age\", \"kind\"],"
    " \"$defs\": {\"tag\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 4}}}";

Test(grammar, json_schema_converts)
{
    char *gbnf = schema_gbnf(person_schema);
    llm_grammar *g = parse(gbnf);
    cr_expect(accepts(g, "{\"name\": \"Ann\", \"age\": 31, \"kind\": \"person\"}"), "%s", gbnf);
    /* llama.cpp's order: the required properties, then the optional ones */
    cr_expect(accepts(g, "{\"name\":\"A\",\"age\":-3,\"kind\":\"person\",\"role\":3,"
                         "\"tags\":[\"x\",\"yz\"],\"ok\":true,\"score\":null}"));
    cr_expect(accepts(g, "{\"name\":\"A\",\"age\":0,\"kind\":\"person\",\"score\":1.5e3}"));
    cr_expect(!accepts(g, "{\"name\":\"A\",\"age\":0,\"score\":1.5e3,\"kind\":\"person\"}"));
    cr_expect(!accepts(g, "{\"name\":\"A\",\"kind\":\"person\"}"), "age is required");
    cr_expect(!accepts(g, "{\"age\":1,\"name\":\"A\",\"kind\":\"person\"}"), "order");
    cr_expect(!accepts(g, "{\"name\":\"A\",\"age\":1.5,\"kind\":\"person\"}"), "integer");
    cr_expect(!accepts(g, "{\"name\":\"A\",\"age\":1,\"tags\":[],\"kind\":\"person\"}"),
              "minItems");
    cr_expect(!accepts(g, "{\"name\":\"A\",\"age\":1,\"tags\":[\"toolong\"],\"kind\":\"person\"}"),
              "maxLength");
    cr_expect(!accepts(g, "{\"name\":\"A\",\"age\":1,\"kind\":\"robot\"}"), "const");
    cr_expect(!accepts(g, "{\"name\":\"A\",\"age\":1,\"kind\":\"person\",\"role\":\"x\"}"), "enum");
    llm_grammar_destroy(g);
    free(gbnf);

    /* only optional properties: any subset, in order; recursion through $ref */
    gbnf = schema_gbnf("{\"properties\": {\"a\": {\"type\": \"null\"}, \"b\": {\"$ref\": "
                       "\"#/definitions/node\"}},"
                       " \"definitions\": {\"node\": {\"type\": \"object\", \"properties\":"
                       " {\"next\": {\"$ref\": \"#/definitions/node\"}}}}}");
    g = parse(gbnf);
    cr_expect(accepts(g, "{}"));
    cr_expect(accepts(g, "{\"a\": null}"));
    cr_expect(accepts(g, "{\"b\": {\"next\": {\"next\": {}}}}"));
    cr_expect(accepts(g, "{\"a\": null, \"b\": {}}"));
    cr_expect(!accepts(g, "{\"b\": {}, \"a\": null}"));
    cr_expect(!accepts(g, "{, \"a\": null}"));
    llm_grammar_destroy(g);
    free(gbnf);
}

static void schema_refused(const char *schema, const char *want)
{
    char *g = NULL;
    cr_expect_neq(glesc_json_schema_to_grammar(schema, strlen(schema), &g), GLESC_OK, "%s", schema);
    cr_expect_null(g);
    cr_expect(strstr(glesc_last_errmsg(), want), "%s\n  gave: %s\n  want: %s", schema,
              glesc_last_errmsg(), want);
}

Test(grammar, json_schema_errors_name_keyword_and_path)
{
    schema_refused("{\"properties\": {\"age\": {\"type\": \"integer\", \"minimum\": 0}}}",
                   "#/properties/age: unsupported keyword 'minimum'");
    schema_refused("{\"type\": \"array\", \"items\": {\"type\": \"string\", \"pattern\": \"a+\"}}",
                   "#/items: unsupported keyword 'pattern'");
    schema_refused("{\"allOf\": []}", "#: unsupported keyword 'allOf'");
    schema_refused("{\"$ref\": \"#/definitions/missing\"}",
                   "#: $ref '#/definitions/missing' is not a schema");
    schema_refused("{\"$ref\": \"http://example.com/s.json\"}", "$ref 'http://example.com/s.json'");
    schema_refused("{\"type\": \"object\", \"properties\": {}, \"required\": [\"x\"]}",
                   "required property \"x\" is not in 'properties'");
    schema_refused("{\"type\": \"strnig\"}", "#: unknown type 'strnig'");
    schema_refused("{\"type\": \"array\", \"minItems\": 3, \"maxItems\": 2}",
                   "maxItems 2 is below minItems 3");
    schema_refused("{\"type\": \"object\", \"additionalProperties\": true}",
                   "unsupported keyword 'additionalProperties'");
    schema_refused("{\"type\": ", "json schema: not JSON at byte");
    schema_refused("{} x", "not JSON");
    schema_refused("[1]", "#: a schema must be an object or a boolean");
    /* fuzz_json_schema: json-c passes a string's invalid UTF-8 on, and the
     * grammar written from it did not parse */
    schema_refused("{\"enum\": [\"us\xffr\"]}", "json schema: not UTF-8 at byte 13");
    schema_refused("{\"const\": \"\xed\xa0\x80\"}", "not UTF-8 at byte 11"); /* a surrogate */
}

/* ---- Sampling with a grammar ---- */

static glesc_tokenizer *synth_tokenizer(void)
{
    synth_params p;
    test_tiny_params(&p, 1, 64);
    char *path = test_synth_write(&p, dir, "tiny.gguf");
    glesc_gguf *f;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_tokenizer *tok;
    cr_assert_eq(glesc_tokenizer_load(f, &tok), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_gguf_close(f);
    free(path);
    return tok;
}

/* Samples up to n_max tokens from random logits under seed; returns the
 * text (free()) and whether an EOG token ended it. */
static char *sample_text(glesc_sampler *s, const glesc_tokenizer *tok, uint32_t seed, int n_max,
                         bool *ended)
{
    int32_t V = glesc_tokenizer_n_vocab(tok);
    float *l = malloc((size_t)V * sizeof *l);
    char *text = calloc(1, 4 * (size_t)n_max * 16 + 1);
    size_t len = 0;
    *ended = false;
    for (int i = 0; i < n_max && !*ended; i++) {
        for (int32_t t = 0; t < V; t++) {
            seed = seed * 1664525u + 1013904223u;
            l[t] = (float)(seed >> 8) / (float)(1u << 24) * 8.0f - 4.0f;
        }
        int32_t id = glesc_sampler_sample(s, l);
        glesc_sampler_accept(s, id);
        if (glesc_tokenizer_is_eog(tok, id)) {
            *ended = true;
            break;
        }
        const char *piece;
        size_t n;
        cr_assert_eq(glesc_token_to_piece(tok, id, 0, &piece, &n), GLESC_OK);
        cr_assert(n <= 64);
        memcpy(text + len, piece, n);
        len += n;
    }
    free(l);
    return text;
}

Test(grammar, sampled_text_always_parses)
{
    glesc_tokenizer *tok = synth_tokenizer();
    int32_t V = glesc_tokenizer_n_vocab(tok);
    const char *grammars[] = {arith, chess, "root ::= (\"yes\" | \"no\" | [0-9]{1,3}) \" ok\"\n"};
    for (size_t k = 0; k < sizeof grammars / sizeof *grammars; k++) {
        llm_grammar *g = parse(grammars[k]);
        for (uint32_t seed = 1; seed <= 40; seed++) {
            glesc_sampler_params sp;
            glesc_sampler_params_init(&sp);
            sp.seed = seed;
            sp.temperature = seed % 4 == 0 ? 0.0f : 1.0f;
            glesc_sampler *s;
            cr_assert_eq(glesc_sampler_create(&sp, V, &s), GLESC_OK);
            cr_assert_eq(glesc_sampler_add_grammar(s, tok, grammars[k], NULL), GLESC_OK, "%s",
                         glesc_last_errmsg());
            bool ended;
            char *text = sample_text(s, tok, seed, 200, &ended);
            /* arith and chess may run on: every prefix must still be one */
            if (ended)
                cr_expect(accepts(g, text), "grammar %zu seed %u: %s", k, seed, text);
            else
                cr_expect(k != 2, "grammar %zu seed %u did not end: %s", k, seed, text);
            free(text);
            glesc_sampler_destroy(s);
        }
        llm_grammar_destroy(g);
    }
    glesc_tokenizer_destroy(tok);
}

/* A validator for the schema subset person_schema uses. */
static bool valid(json_object *v, json_object *schema, json_object *root)
{
    json_object *x;
    if (json_object_object_get_ex(schema, "$ref", &x)) {
        const char *ref = json_object_get_string(x) + strlen("#/$defs/");
        json_object *defs;
        json_object_object_get_ex(root, "$defs", &defs);
        json_object_object_get_ex(defs, ref, &x);
        return valid(v, x, root);
    }
    if (json_object_object_get_ex(schema, "const", &x))
        return json_object_equal(v, x);
    if (json_object_object_get_ex(schema, "enum", &x)) {
        for (size_t i = 0; i < json_object_array_length(x); i++)
            if (json_object_equal(v, json_object_array_get_idx(x, i)))
                return true;
        return false;
    }
    json_object *type;
    if (!json_object_object_get_ex(schema, "type", &type))
        return true;
    bool ok = false;
    size_t nt = json_object_is_type(type, json_type_array) ? json_object_array_length(type) : 1;
    for (size_t i = 0; i < nt && !ok; i++) {
        const char *t = json_object_get_string(
            json_object_is_type(type, json_type_array) ? json_object_array_get_idx(type, i) : type);
        json_type jt = json_object_get_type(v);
        ok = (!strcmp(t, "integer") && jt == json_type_int) ||
             (!strcmp(t, "number") && (jt == json_type_int || jt == json_type_double)) ||
             (!strcmp(t, "boolean") && jt == json_type_boolean) ||
             (!strcmp(t, "null") && jt == json_type_null) ||
             (!strcmp(t, "string") && jt == json_type_string) ||
             (!strcmp(t, "array") && jt == json_type_array) ||
             (!strcmp(t, "object") && jt == json_type_object);
    }
    if (!ok)
        return false;
    if (json_object_is_type(v, json_type_string)) {
        int len = json_object_get_string_len(v); /* bytes; the tests' strings are ASCII-ish */
        if (json_object_object_get_ex(schema, "maxLength", &x) && len > 4 * json_object_get_int(x))
            return false;
    }
    if (json_object_is_type(v, json_type_array)) {
        size_t n = json_object_array_length(v);
        if (json_object_object_get_ex(schema, "minItems", &x) && n < (size_t)json_object_get_int(x))
            return false;
        if (json_object_object_get_ex(schema, "maxItems", &x) && n > (size_t)json_object_get_int(x))
            return false;
        json_object_object_get_ex(schema, "items", &x);
        for (size_t i = 0; x && i < n; i++)
            if (!valid(json_object_array_get_idx(v, i), x, root))
                return false;
    }
    if (json_object_is_type(v, json_type_object)) {
        json_object *props = NULL, *req;
        json_object_object_get_ex(schema, "properties", &props);
        json_object_object_foreach(v, key, val)
        {
            json_object *ps;
            if (!props || !json_object_object_get_ex(props, key, &ps) || !valid(val, ps, root))
                return false;
        }
        if (json_object_object_get_ex(schema, "required", &req))
            for (size_t i = 0; i < json_object_array_length(req); i++)
                if (!json_object_object_get_ex(
                        v, json_object_get_string(json_object_array_get_idx(req, i)), &x))
                    return false;
    }
    return true;
}

Test(grammar, sampled_json_parses_and_validates)
{
    glesc_tokenizer *tok = synth_tokenizer();
    int32_t V = glesc_tokenizer_n_vocab(tok);
    json_object *schema = json_tokener_parse(person_schema);
    cr_assert(schema);
    int ended_n = 0;
    for (uint32_t seed = 1; seed <= 60; seed++) {
        glesc_sampler *s;
        cr_assert_eq(glesc_sampler_chain_create(V, seed, &s), GLESC_OK);
        cr_assert_eq(glesc_sampler_add_top_k(s, 50), GLESC_OK);
        cr_assert_eq(glesc_sampler_add_temperature(s, 1.5f), GLESC_OK);
        cr_assert_eq(glesc_sampler_add_json_schema(s, tok, person_schema), GLESC_OK, "%s",
                     glesc_last_errmsg());
        bool ended;
        char *text = sample_text(s, tok, seed * 7919u, 1500, &ended);
        if (ended) {
            ended_n++;
            json_object *v = json_tokener_parse(text);
            cr_expect(v, "seed %u: not JSON: %s", seed, text);
            cr_expect(v && valid(v, schema, schema), "seed %u: not valid: %s", seed, text);
            json_object_put(v);
        }
        free(text);
        glesc_sampler_destroy(s);
    }
    cr_expect_geq(ended_n, 55, "only %d of 60 generations finished", ended_n);
    json_object_put(schema);
    glesc_tokenizer_destroy(tok);
}

Test(grammar, eos_only_where_the_grammar_ends)
{
    glesc_tokenizer *tok = synth_tokenizer();
    int32_t V = glesc_tokenizer_n_vocab(tok), eos = glesc_tokenizer_eos(tok);
    float *l = calloc((size_t)V, sizeof *l);
    l[eos] = 100.0f; /* the model wants to stop at once */
    glesc_sampler *s;
    cr_assert_eq(glesc_sampler_chain_create(V, 1, &s), GLESC_OK);
    cr_assert_eq(glesc_sampler_add_greedy(s), GLESC_OK);
    cr_assert_eq(glesc_sampler_add_grammar(s, tok, "root ::= \"ab\"", NULL), GLESC_OK);
    int32_t a = glesc_sampler_sample(s, l);
    cr_expect_neq(a, eos);
    glesc_sampler_accept(s, a);
    const char *piece;
    size_t n;
    glesc_token_to_piece(tok, a, 0, &piece, &n);
    if (n == 1) { /* "a" alone: "b" must follow */
        int32_t b = glesc_sampler_sample(s, l);
        cr_expect_neq(b, eos);
        glesc_sampler_accept(s, b);
    }
    cr_expect_eq(glesc_sampler_sample(s, l), eos, "the grammar is done: only EOS");
    /* a copy continues where the grammar is; a reset starts over */
    glesc_sampler *c;
    cr_assert_eq(glesc_sampler_chain_create(V, 9, &c), GLESC_OK);
    cr_assert_eq(glesc_sampler_add_grammar(c, tok, "root ::= \"ab\"", NULL), GLESC_OK);
    glesc_sampler_copy(c, s);
    cr_expect_eq(glesc_sampler_sample(c, l), eos);
    glesc_sampler_reset(c);
    cr_expect_neq(glesc_sampler_sample(c, l), eos);
    glesc_sampler_destroy(c);
    glesc_sampler_destroy(s);
    free(l);
    glesc_tokenizer_destroy(tok);
}

Test(grammar, add_grammar_refusals)
{
    glesc_tokenizer *tok = synth_tokenizer();
    glesc_sampler *s;
    cr_assert_eq(glesc_sampler_chain_create(glesc_tokenizer_n_vocab(tok), 1, &s), GLESC_OK);
    cr_expect_eq(glesc_sampler_add_grammar(s, tok, "root ::= x\n", NULL), GLESC_ERROR_FORMAT);
    cr_expect(strstr(glesc_last_errmsg(), "line 1, column 10: undefined rule 'x'"), "%s",
              glesc_last_errmsg());
    cr_expect_eq(glesc_sampler_add_grammar(s, tok, "a ::= \"x\"\n", "b"), GLESC_ERROR_NOT_FOUND);
    cr_expect_eq(glesc_sampler_add_json_schema(s, tok, "{\"format\": \"date\"}"),
                 GLESC_ERROR_FORMAT);
    cr_expect(strstr(glesc_last_errmsg(), "unsupported keyword 'format'"), "%s",
              glesc_last_errmsg());
    cr_expect_eq(glesc_sampler_add_grammar(s, tok, "root ::= \"x\"\n", NULL), GLESC_OK);
    cr_expect_eq(glesc_sampler_add_grammar(s, tok, "root ::= \"x\"\n", NULL), GLESC_ERROR_STATE);
    glesc_sampler_destroy(s);
    glesc_tokenizer_destroy(tok);
}

/* The shared filter against one token at a time: at every state of a
 * random walk through a grammar, the tokens gmatch_filter allows are
 * exactly those that gmatch_accept_token takes on a copy of the state. */
Test(grammar, filter_equals_accepting_each_token)
{
    glesc_tokenizer *tok = synth_tokenizer();
    int32_t V = glesc_tokenizer_n_vocab(tok);
    gvocab *v;
    cr_assert_eq(gvocab_create(tok, &v), GLESC_OK);
    int32_t *ids = malloc((size_t)V * sizeof *ids);
    bool *ok = malloc((size_t)V);
    for (int32_t i = 0; i < V; i++)
        ids[i] = i;
    const char *grammars[] = {json_gbnf, chess, "root ::= [^\\x00-\\x7F]{1,3} [é-ü] \"x\"\n"};
    for (size_t k = 0; k < sizeof grammars / sizeof *grammars; k++) {
        llm_grammar *g = parse(grammars[k]);
        gmatch *m, *c;
        cr_assert_eq(gmatch_create(g, &m), GLESC_OK);
        cr_assert_eq(gmatch_create(g, &c), GLESC_OK);
        uint32_t seed = 11 + (uint32_t)k;
        for (int step = 0; step < 40; step++) {
            gmatch_filter(m, v, ids, (size_t)V, ok);
            int32_t allowed[512];
            int n_allowed = 0;
            for (int32_t t = 0; t < V; t++) {
                cr_assert_eq(gmatch_copy(c, m), GLESC_OK);
                bool takes = gmatch_accept_token(c, v, t);
                cr_assert_eq(ok[t], takes, "grammar %zu step %d token %d: filter %d, accept %d", k,
                             step, (int)t, ok[t], takes);
                if (takes && !glesc_tokenizer_is_eog(tok, t) && n_allowed < 512)
                    allowed[n_allowed++] = t;
            }
            if (n_allowed == 0)
                break;
            seed = seed * 1664525u + 1013904223u;
            cr_assert(gmatch_accept_token(m, v, allowed[(seed >> 8) % (uint32_t)n_allowed]));
        }
        gmatch_destroy(c);
        gmatch_destroy(m);
        llm_grammar_destroy(g);
    }
    free(ids);
    free(ok);
    gvocab_destroy(v);
    glesc_tokenizer_destroy(tok);
}

/* Fuzzing found (slow unit): an ambiguous grammar whose every character
 * may open another nesting level grows a stack per character, each as
 * deep as the text; hashing and comparing them all on each step made a
 * few hundred bytes take seconds. The state's elements are bounded
 * (GRAMMAR_MAX_STATE_WORDS) and stacks are deduplicated through a hash
 * table: 4000 characters are refused or taken in milliseconds. */
Test(grammar, ambiguous_grammars_stay_bounded, .timeout = 20)
{
    llm_grammar *g = parse("root ::= item+\nitem ::= \"- \"* [^\\r02^9]+root \"\\n\"\n");
    char *text = malloc(4003);
    memcpy(text, "- ", 2);
    memset(text + 2, 'm', 4000);
    text[4002] = 0;
    gmatch *m;
    cr_assert_eq(gmatch_create(g, &m), GLESC_OK);
    size_t taken = 0;
    while (taken < 4002 && gmatch_accept_bytes(m, text + taken, 1))
        taken++;
    cr_log_info("%zu of 4002 bytes taken before the state's limit", taken);
    cr_expect(!accepts(g, text));
    gmatch_destroy(m);
    free(text);
    llm_grammar_destroy(g);
}
