/*
 * json_schema.c — a JSON Schema subset to a GBNF grammar (the facts of
 * llama.cpp's json-schema-to-grammar: one rule per schema, a bounded
 * whitespace rule, required properties in order and then optional ones,
 * each optional, in order). Supported: type (a name or a list),
 * object/properties/required/additionalProperties false, array/items/
 * minItems/maxItems, string/minLength/maxLength, number, integer, boolean,
 * null, enum, const, anyOf/oneOf, $ref to #/definitions/... or
 * #/$defs/...; annotations (title, description, default, examples, $schema,
 * $id, $comment) are ignored. Any other keyword is an error naming it and
 * its JSON path ("#/properties/age: unsupported keyword 'minimum'").
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "glesc_llm.h"

#define JS_MAX_DEPTH 64
#define JS_MAX_ITEMS 1000 /* minItems, maxItems, minLength, maxLength */

typedef struct js {
    sbuf rules;
    json_object *doc;
    char **names; /* rule names in use */
    size_t n_names, cap_names;
    struct jsref {
        char *ref, *rule;
    } * refs;
    size_t n_refs, cap_refs;
    int depth;
    bool failed;
} js;

/* The primitives: llama.cpp's shapes, a 20-space bound on whitespace. */
static const char js_prims[] =
    "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" space ( string \":\" space value ( \",\" space string \":\" space value )* "
    ")? \"}\" space\n"
    "array ::= \"[\" space ( value ( \",\" space value )* )? \"]\" space\n"
    "string ::= \"\\\"\" char* \"\\\"\" space\n"
    "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "number ::= \"-\"? integral-part ( \".\" decimal-part )? ( [eE] [-+]? integral-part )? "
    "space\n"
    "integer ::= \"-\"? integral-part space\n"
    "integral-part ::= [0] | [1-9] [0-9]{0,15}\n"
    "decimal-part ::= [0-9]{1,16}\n"
    "boolean ::= ( \"true\" | \"false\" ) space\n"
    "null ::= \"null\" space\n";

static const char *const js_reserved[] = {"space",   "value", "object",        "array",
                                          "string",  "char",  "number",        "integer",
                                          "boolean", "null",  "integral-part", "decimal-part"};

static const char *js_rule(js *j, json_object *schema, const char *path, const char *name);

static void js_fail(js *j, const char *path, const char *fmt, ...) CORE_PRINTF(3, 4);
static void js_fail(js *j, const char *path, const char *fmt, ...)
{
    if (j->failed)
        return;
    j->failed = true;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    core_err_set(NULL, GLESC_ERROR_FORMAT, "json schema: %s: %s", path, msg);
}

static bool name_used(const js *j, const char *n)
{
    for (size_t i = 0; i < sizeof js_reserved / sizeof *js_reserved; i++)
        if (!strcmp(js_reserved[i], n))
            return true;
    for (size_t i = 0; i < j->n_names; i++)
        if (!strcmp(j->names[i], n))
            return true;
    return false;
}

/* A fresh rule name from hint (characters outside [a-zA-Z0-9-] become
 * '-'); owned by j. */
static const char *name_new(js *j, const char *hint)
{
    sbuf b;
    sbuf_init(&b);
    for (const char *c = hint; *c && b.len < 80; c++) {
        bool word = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                    (*c >= '0' && *c <= '9') || *c == '-';
        sbuf_appendc(&b, word ? *c : '-');
    }
    if (b.len == 0)
        sbuf_append(&b, "r");
    size_t base = b.len;
    for (unsigned k = 1; !b.oom && name_used(j, sbuf_str(&b)); k++) {
        b.len = base;
        sbuf_appendf(&b, "-%u", k);
    }
    char *n = sbuf_take(&b);
    if (n && j->n_names == j->cap_names) {
        size_t cap = j->cap_names ? 2 * j->cap_names : 32;
        char **v = core_realloc(j->names, cap * sizeof *v);
        if (v) {
            j->names = v;
            j->cap_names = cap;
        }
    }
    if (!n || j->n_names == j->cap_names) {
        core_free(n);
        j->failed = true;
        core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "json schema: rule names");
        return NULL;
    }
    return j->names[j->n_names++] = n;
}

/* A GBNF string literal of bytes s[0..n). */
static void lit(sbuf *b, const char *s, size_t n)
{
    sbuf_appendc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            sbuf_appendf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7F)
            sbuf_appendf(b, "\\x%02X", c);
        else
            sbuf_appendc(b, (char)c);
    }
    sbuf_appendc(b, '"');
}

/* A JSON value as the literal text it is written as. */
static void lit_json(sbuf *b, json_object *v)
{
    const char *t =
        json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    lit(b, t, strlen(t));
}

static char *child_path(const char *path, const char *a, const char *b)
{
    sbuf p;
    sbuf_init(&p);
    sbuf_appendf(&p, "%s/%s", path, a);
    if (b)
        sbuf_appendf(&p, "/%s", b);
    return sbuf_take(&p);
}

static void emit(js *j, const char *name, const sbuf *body)
{
    sbuf_appendf(&j->rules, "%s ::= %s\n", name, body->oom ? "" : sbuf_str(body));
    if (body->oom && !j->failed) {
        j->failed = true;
        core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "json schema");
    }
}

static const char *ref_rule(js *j, const char *ref, const char *path)
{
    for (size_t i = 0; i < j->n_refs; i++)
        if (!strcmp(j->refs[i].ref, ref))
            return j->refs[i].rule;
    const char *def = NULL, *key = NULL;
    if (!strncmp(ref, "#/definitions/", 14)) {
        def = "definitions";
        key = ref + 14;
    } else if (!strncmp(ref, "#/$defs/", 8)) {
        def = "$defs";
        key = ref + 8;
    }
    json_object *defs, *target;
    if (!def || strchr(key, '/') || !json_object_object_get_ex(j->doc, def, &defs) ||
        !json_object_object_get_ex(defs, key, &target)) {
        js_fail(j, path, "$ref '%s' is not a schema under #/definitions/ or #/$defs/", ref);
        return NULL;
    }
    if (j->n_refs == j->cap_refs) {
        size_t cap = j->cap_refs ? 2 * j->cap_refs : 8;
        struct jsref *r = core_realloc(j->refs, cap * sizeof *r);
        if (!r) {
            js_fail(j, path, "out of memory");
            return NULL;
        }
        j->refs = r;
        j->cap_refs = cap;
    }
    char *hint = child_path("ref", key, NULL);
    const char *rule = hint ? name_new(j, hint) : NULL;
    core_free(hint);
    char *copy = core_strdup(ref);
    if (!rule || !copy) {
        core_free(copy);
        js_fail(j, path, "out of memory");
        return NULL;
    }
    j->refs[j->n_refs++] = (struct jsref){copy, (char *)rule};
    /* the name is known before the body: a definition may refer to itself */
    char *dpath = child_path("#", def, key);
    js_rule(j, target, dpath ? dpath : ref, rule);
    core_free(dpath);
    return rule;
}

static bool get_count(js *j, json_object *s, const char *key, const char *path, int64_t *out)
{
    json_object *v;
    if (!json_object_object_get_ex(s, key, &v))
        return false;
    if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0 ||
        json_object_get_int64(v) > JS_MAX_ITEMS) {
        js_fail(j, path, "%s must be a whole number from 0 to %d", key, JS_MAX_ITEMS);
        return false;
    }
    *out = json_object_get_int64(v);
    return true;
}

/* "x{min,max}" for bounds read from the schema (max -1: none). */
static void repeat(sbuf *b, int64_t min, int64_t max)
{
    if (max < 0)
        sbuf_appendf(b, "{%lld,}", (long long)min);
    else
        sbuf_appendf(b, "{%lld,%lld}", (long long)min, (long long)max);
}

static void body_array(js *j, json_object *s, const char *path, const char *name, sbuf *b)
{
    json_object *items = NULL;
    const char *item = "value";
    if (json_object_object_get_ex(s, "items", &items)) {
        if (json_object_is_type(items, json_type_array)) {
            js_fail(j, path, "unsupported keyword 'items' as a list (tuples)");
            return;
        }
        char *cp = child_path(path, "items", NULL), *hint = child_path(name, "item", NULL);
        const char *r = cp && hint ? name_new(j, hint) : NULL;
        if (r)
            item = js_rule(j, items, cp, r);
        core_free(cp);
        core_free(hint);
    }
    int64_t min = 0, max = -1;
    get_count(j, s, "minItems", path, &min);
    get_count(j, s, "maxItems", path, &max);
    if (max >= 0 && max < min)
        js_fail(j, path, "maxItems %lld is below minItems %lld", (long long)max, (long long)min);
    if (j->failed || !item)
        return;
    sbuf_append(b, "\"[\" space ");
    if (max != 0) {
        sbuf_appendf(b, "%s%s ( \",\" space %s )", min == 0 ? "( " : "", item, item);
        repeat(b, min ? min - 1 : 0, max < 0 ? -1 : max - 1);
        sbuf_append(b, min == 0 ? " )? " : " ");
    }
    sbuf_append(b, "\"]\" space");
}

/* One "\"key\"" space ":" space <rule> rule for property key. */
static const char *prop_rule(js *j, const char *key, json_object *ps, const char *path,
                             const char *name)
{
    char *cp = child_path(path, "properties", key), *hint = child_path(name, key, NULL);
    char *khint = hint ? child_path(hint, "kv", NULL) : NULL;
    const char *vr = cp && hint ? name_new(j, hint) : NULL;
    const char *v = vr ? js_rule(j, ps, cp, vr) : NULL;
    const char *kv = v && khint ? name_new(j, khint) : NULL;
    if (kv) {
        sbuf body;
        sbuf_init(&body);
        json_object *k = json_object_new_string(key);
        lit_json(&body, k);
        json_object_put(k);
        sbuf_appendf(&body, " space \":\" space %s", v);
        emit(j, kv, &body);
        sbuf_free(&body);
    }
    core_free(cp);
    core_free(hint);
    core_free(khint);
    return kv;
}

static bool is_required(json_object *req, const char *key)
{
    for (size_t i = 0; req && i < json_object_array_length(req); i++)
        if (!strcmp(json_object_get_string(json_object_array_get_idx(req, i)), key))
            return true;
    return false;
}

static void body_object(js *j, json_object *s, const char *path, const char *name, sbuf *b)
{
    json_object *props = NULL, *req = NULL, *add;
    if (json_object_object_get_ex(s, "additionalProperties", &add) &&
        !(json_object_is_type(add, json_type_boolean) && !json_object_get_boolean(add))) {
        js_fail(j, path, "unsupported keyword 'additionalProperties' (only false)");
        return;
    }
    json_object_object_get_ex(s, "required", &req);
    if (req && !json_object_is_type(req, json_type_array)) {
        js_fail(j, path, "'required' must be a list of names");
        return;
    }
    if (!json_object_object_get_ex(s, "properties", &props) && !req) {
        sbuf_append(b, "object");
        return;
    }
    if (props && !json_object_is_type(props, json_type_object)) {
        js_fail(j, path, "'properties' must be an object");
        return;
    }
    for (size_t i = 0; req && i < json_object_array_length(req); i++) {
        json_object *k = json_object_array_get_idx(req, i), *x;
        if (!json_object_is_type(k, json_type_string) ||
            !json_object_object_get_ex(props, json_object_get_string(k), &x)) {
            js_fail(j, path, "required property %s is not in 'properties'",
                    json_object_to_json_string(k));
            return;
        }
    }
    if (!props) {
        sbuf_append(b, "\"{\" space \"}\" space");
        return;
    }
    const char *opt[64];
    size_t n_opt = 0, n_req = 0;
    sbuf_append(b, "\"{\" space ");
    json_object_object_foreach(props, key, ps)
    {
        const char *kv = prop_rule(j, key, ps, path, name);
        if (!kv)
            return;
        if (is_required(req, key)) {
            sbuf_appendf(b, n_req++ ? "\",\" space %s " : "%s ", kv);
        } else if (n_opt == 64) {
            js_fail(j, path, "more than 64 optional properties");
            return;
        } else {
            opt[n_opt++] = kv;
        }
    }
    if (n_req) {
        for (size_t i = 0; i < n_opt; i++)
            sbuf_appendf(b, "( \",\" space %s )? ", opt[i]);
    } else if (n_opt) { /* the first present one has no comma before it */
        sbuf_append(b, "( ");
        for (size_t i = 0; i < n_opt; i++) {
            sbuf_appendf(b, "%s%s ", i ? "| " : "", opt[i]);
            for (size_t k = i + 1; k < n_opt; k++)
                sbuf_appendf(b, "( \",\" space %s )? ", opt[k]);
        }
        sbuf_append(b, ")? ");
    }
    sbuf_append(b, "\"}\" space");
}

static void body_string(js *j, json_object *s, const char *path, sbuf *b)
{
    int64_t min = 0, max = -1;
    bool lo = get_count(j, s, "minLength", path, &min),
         hi = get_count(j, s, "maxLength", path, &max);
    if (max >= 0 && max < min)
        js_fail(j, path, "maxLength %lld is below minLength %lld", (long long)max, (long long)min);
    if (!lo && !hi) {
        sbuf_append(b, "string");
        return;
    }
    sbuf_append(b, "\"\\\"\" char");
    repeat(b, min, max);
    sbuf_append(b, " \"\\\"\" space");
}

static void body_type(js *j, json_object *s, const char *type, const char *path, const char *name,
                      sbuf *b)
{
    if (!strcmp(type, "object"))
        body_object(j, s, path, name, b);
    else if (!strcmp(type, "array"))
        body_array(j, s, path, name, b);
    else if (!strcmp(type, "string"))
        body_string(j, s, path, b);
    else if (!strcmp(type, "number") || !strcmp(type, "integer") || !strcmp(type, "boolean") ||
             !strcmp(type, "null"))
        sbuf_append(b, type);
    else
        js_fail(j, path, "unknown type '%s'", type);
}

/* Every keyword of s is one this converter reads or ignores. */
static void check_keywords(js *j, json_object *s, const char *path)
{
    static const char *const known[] = {
        "type",      "properties",  "required",    "additionalProperties",
        "items",     "minItems",    "maxItems",    "enum",
        "const",     "$ref",        "anyOf",       "oneOf",
        "minLength", "maxLength",   "definitions", "$defs",
        "title",     "description", "default",     "examples",
        "$schema",   "$id",         "$comment"};
    json_object_object_foreach(s, key, v)
    {
        (void)v;
        bool ok = false;
        for (size_t i = 0; i < sizeof known / sizeof *known && !ok; i++)
            ok = !strcmp(known[i], key);
        if (!ok) {
            js_fail(j, path, "unsupported keyword '%s'", key);
            return;
        }
    }
}

static void body_alts(js *j, json_object *list, const char *kw, const char *path, const char *name,
                      sbuf *b)
{
    size_t n = json_object_is_type(list, json_type_array) ? json_object_array_length(list) : 0;
    if (n == 0) {
        js_fail(j, path, "'%s' must be a non-empty list", kw);
        return;
    }
    for (size_t i = 0; i < n && !j->failed; i++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%zu", i);
        char *cp = child_path(path, kw, idx), *hint = child_path(name, idx, NULL);
        const char *r = cp && hint ? name_new(j, hint) : NULL;
        const char *sub = r ? js_rule(j, json_object_array_get_idx(list, i), cp, r) : NULL;
        if (sub)
            sbuf_appendf(b, "%s%s", i ? " | " : "", sub);
        core_free(cp);
        core_free(hint);
    }
}

/* The body of schema s's rule into b. */
static void body(js *j, json_object *s, const char *path, const char *name, sbuf *b)
{
    if (json_object_is_type(s, json_type_boolean)) {
        if (!json_object_get_boolean(s))
            js_fail(j, path, "the schema false matches nothing");
        sbuf_append(b, "value");
        return;
    }
    if (!json_object_is_type(s, json_type_object)) {
        js_fail(j, path, "a schema must be an object or a boolean");
        return;
    }
    check_keywords(j, s, path);
    json_object *v;
    if (j->failed)
        return;
    if (json_object_object_get_ex(s, "$ref", &v)) {
        const char *r = json_object_is_type(v, json_type_string)
                            ? ref_rule(j, json_object_get_string(v), path)
                            : (js_fail(j, path, "$ref must be a string"), NULL);
        if (r)
            sbuf_append(b, r);
    } else if (json_object_object_get_ex(s, "const", &v)) {
        lit_json(b, v);
        sbuf_append(b, " space");
    } else if (json_object_object_get_ex(s, "enum", &v)) {
        size_t n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;
        if (n == 0)
            js_fail(j, path, "'enum' must be a non-empty list");
        sbuf_append(b, "( ");
        for (size_t i = 0; i < n; i++) {
            sbuf_append(b, i ? " | " : "");
            lit_json(b, json_object_array_get_idx(v, i));
        }
        sbuf_append(b, " ) space");
    } else if (json_object_object_get_ex(s, "anyOf", &v)) {
        body_alts(j, v, "anyOf", path, name, b);
    } else if (json_object_object_get_ex(s, "oneOf", &v)) {
        body_alts(j, v, "oneOf", path, name, b);
    } else if (json_object_object_get_ex(s, "type", &v)) {
        if (json_object_is_type(v, json_type_string)) {
            body_type(j, s, json_object_get_string(v), path, name, b);
        } else if (json_object_is_type(v, json_type_array) && json_object_array_length(v)) {
            for (size_t i = 0; i < json_object_array_length(v) && !j->failed; i++) {
                json_object *t = json_object_array_get_idx(v, i);
                sbuf_append(b, i ? " | " : "");
                if (json_object_is_type(t, json_type_string))
                    body_type(j, s, json_object_get_string(t), path, name, b);
                else
                    js_fail(j, path, "'type' lists something other than a name");
            }
        } else {
            js_fail(j, path, "'type' must be a name or a non-empty list of names");
        }
    } else if (json_object_object_get_ex(s, "properties", &v)) {
        body_object(j, s, path, name, b);
    } else if (json_object_object_get_ex(s, "items", &v)) {
        body_array(j, s, path, name, b);
    } else {
        sbuf_append(b, "value");
    }
}

/* Emits rule name for schema s (at path); returns name, NULL on failure. */
static const char *js_rule(js *j, json_object *schema, const char *path, const char *name)
{
    if (j->failed)
        return NULL;
    if (++j->depth > JS_MAX_DEPTH) {
        js_fail(j, path, "schemas nested deeper than %d", JS_MAX_DEPTH);
        return NULL;
    }
    sbuf b;
    sbuf_init(&b);
    body(j, schema, path, name, &b);
    if (!j->failed)
        emit(j, name, &b);
    sbuf_free(&b);
    j->depth--;
    return j->failed ? NULL : name;
}

/* The offset of the first byte of s[0..n) that is not valid UTF-8, or n. */
static size_t utf8_invalid_at(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t k = c < 0x80                 ? 0
                   : c >= 0xC2 && c <= 0xDF ? 1
                   : (c & 0xF0) == 0xE0     ? 2
                   : c >= 0xF0 && c <= 0xF4 ? 3
                                            : SIZE_MAX;
        if (k == SIZE_MAX || k >= n - i)
            return i;
        uint32_t v = k == 0 ? c : c & (0x3Fu >> k);
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80)
                return i;
            v = v << 6 | (s[i + j] & 0x3Fu);
        }
        static const uint32_t min[] = {0, 0x80, 0x800, 0x10000};
        if (v < min[k] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return i;
        i += k + 1;
    }
    return n;
}

GLESC_API glesc_status glesc_json_schema_to_grammar(const char *schema, size_t len, char **gbnf_out)
{
    core_err_reset(NULL);
    if (!gbnf_out || (!schema && len))
        return core_err_set(NULL, GLESC_ERROR_INVALID_ARGUMENT, "json schema: NULL argument");
    *gbnf_out = NULL;
    if (len > INT32_MAX)
        return core_err_set(NULL, GLESC_ERROR_LIMIT, "json schema: %zu bytes", len);
    size_t bad = utf8_invalid_at((const unsigned char *)schema, len);
    if (bad < len) /* JSON text is UTF-8 (RFC 8259); json-c would pass the bytes on */
        return core_err_set(NULL, GLESC_ERROR_FORMAT, "json schema: not UTF-8 at byte %zu", bad);
    json_tokener *tk = json_tokener_new();
    if (!tk)
        return core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "json schema");
    json_object *doc = json_tokener_parse_ex(tk, schema ? schema : "", (int)len);
    enum json_tokener_error e = json_tokener_get_error(tk);
    if (!doc || e != json_tokener_success || (size_t)json_tokener_get_parse_end(tk) < len) {
        size_t at = json_tokener_get_parse_end(tk);
        const char *why = e == json_tokener_continue  ? "unexpected end of the text"
                          : e != json_tokener_success ? json_tokener_error_desc(e)
                                                      : "text after the schema";
        json_object_put(doc);
        json_tokener_free(tk);
        return core_err_set(NULL, GLESC_ERROR_FORMAT, "json schema: not JSON at byte %zu: %s", at,
                            why);
    }
    json_tokener_free(tk);
    js j = {.doc = doc};
    sbuf_init(&j.rules);
    j.names = NULL;
    const char *root = name_new(&j, "root");
    if (root)
        js_rule(&j, doc, "#", root);
    sbuf_append(&j.rules, js_prims);
    glesc_status st = GLESC_OK;
    if (j.failed)
        st = core_err_tls()->status;
    else if (!(*gbnf_out = sbuf_take(&j.rules)))
        st = core_err_set(NULL, GLESC_ERROR_OUT_OF_MEMORY, "json schema: grammar text");
    sbuf_free(&j.rules);
    for (size_t i = 0; i < j.n_names; i++)
        core_free(j.names[i]);
    for (size_t i = 0; i < j.n_refs; i++)
        core_free(j.refs[i].ref);
    core_free(j.names);
    core_free(j.refs);
    json_object_put(doc);
    return st;
}
