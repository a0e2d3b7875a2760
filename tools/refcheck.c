/*
 * refcheck.c — see refcheck.h. JSON through json-c (Debian's libjson-c):
 * the reference files store float32 values as the shortest decimal that
 * reads back to the same float32, so parsing as double and narrowing gives
 * the stored value.
 */
#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "glesc_llm.h"
#include "refcheck.h"

static void note(refcheck_result *r, refcheck_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->note, sizeof r->note, fmt, ap);
    va_end(ap);
    r->status = st;
}

static json_object *get(json_object *o, const char *key)
{
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static bool get_ids(json_object *a, int32_t **ids, size_t *n)
{
    if (!a || !json_object_is_type(a, json_type_array))
        return false;
    *n = json_object_array_length(a);
    *ids = malloc((*n ? *n : 1) * sizeof **ids);
    if (!*ids)
        return false;
    for (size_t i = 0; i < *n; i++)
        (*ids)[i] = (int32_t)json_object_get_int(json_object_array_get_idx(a, i));
    return true;
}

static float fval(json_object *v)
{
    return (float)json_object_get_double(v);
}

static int32_t argmax(const float *v, int64_t n)
{
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = (int32_t)i;
    return best;
}

/* Checks one prompt of the JSON. Returns false (with a note) on failure. */
static bool check_prompt(glesc_session *s, const glesc_tokenizer *tok, int64_t n_vocab,
                         json_object *p, int pi, const refcheck_options *o, refcheck_result *r)
{
    bool ok = false;
    int32_t *prompt_ids = NULL, *tf_ids = NULL, *gen_ids = NULL, *mine = NULL;
    size_t n_prompt = 0, n_tf = 0, n_gen = 0, n_mine = 0;
    float *logits = NULL;
    json_object *tf = get(p, "teacher_forced");
    json_object *positions = get(tf, "positions");
    json_object *last_row = get(p, "last_prompt_logits");
    json_object *gaps = get(p, "generation_gap12");
    const char *prompt = json_object_get_string(get(p, "prompt"));
    if (!prompt || !get_ids(get(p, "prompt_ids"), &prompt_ids, &n_prompt) ||
        !get_ids(get(tf, "ids"), &tf_ids, &n_tf) ||
        !get_ids(get(p, "generated_ids"), &gen_ids, &n_gen) || !positions || !last_row ||
        json_object_array_length(positions) != n_tf || n_prompt == 0) {
        note(r, REFCHECK_FAIL, "prompt %d: malformed reference JSON", pi);
        goto done;
    }
    /* rule 1: tokenization */
    if (glesc_tokenize_alloc(tok, prompt, strlen(prompt), GLESC_TOKENIZE_ADD_SPECIAL, &mine,
                             &n_mine) != GLESC_OK) {
        note(r, REFCHECK_FAIL, "prompt %d: tokenize: %s", pi, glesc_last_errmsg());
        goto done;
    }
    if (n_mine != n_prompt || memcmp(mine, prompt_ids, n_prompt * sizeof *mine)) {
        note(r, REFCHECK_FAIL, "prompt %d ('%s'): tokenizes to %zu ids, not llama.cpp's %zu", pi,
             prompt, n_mine, n_prompt);
        goto done;
    }
    /* rules 2-4: teacher-forced logits */
    logits = malloc(n_tf * (size_t)n_vocab * sizeof *logits);
    if (!logits) {
        note(r, REFCHECK_FAIL, "out of memory");
        goto done;
    }
    glesc_session_truncate(s, 0);
    if (glesc_session_eval(s, tf_ids, n_tf, GLESC_EVAL_ALL_LOGITS, logits) != GLESC_OK) {
        note(r, REFCHECK_FAIL, "prompt %d: eval: %s", pi, glesc_last_errmsg());
        goto done;
    }
    for (size_t i = 0; i < n_tf; i++) {
        json_object *pos = json_object_array_get_idx(positions, i);
        const float *row = logits + i * (size_t)n_vocab;
        double dpos = 0;
        json_object *top5 = get(pos, "top5");
        for (size_t k = 0; top5 && k < json_object_array_length(top5); k++) {
            json_object *pair = json_object_array_get_idx(top5, k);
            int id = json_object_get_int(json_object_array_get_idx(pair, 0));
            float want = fval(json_object_array_get_idx(pair, 1));
            if (id < 0 || id >= n_vocab)
                continue;
            dpos = fmax(dpos, fabs((double)row[id] - want));
        }
        if (i == n_prompt - 1) {
            size_t nl = json_object_array_length(last_row);
            for (size_t j = 0; j < nl && j < (size_t)n_vocab; j++)
                dpos =
                    fmax(dpos, fabs((double)row[j] - fval(json_object_array_get_idx(last_row, j))));
        }
        if (dpos > r->max_diff) {
            r->max_diff = dpos;
            r->worst_pos = (int)i;
            r->worst_prompt = pi;
        }
        r->positions++;
        double gap = json_object_get_double(get(pos, "gap12"));
        int want_arg = json_object_get_int(get(pos, "argmax"));
        int got_arg = argmax(row, n_vocab);
        if (gap > r->gap12_threshold) {
            r->argmax_checked++;
            if (got_arg != want_arg) {
                r->argmax_failed++;
                if (o->log)
                    fprintf(o->log, "  prompt %d pos %zu: argmax %d, llama.cpp %d (gap12 %.3g)\n",
                            pi, i, got_arg, want_arg, gap);
            }
        }
        if (o->log)
            fprintf(o->log, "  prompt %d pos %3zu: max |diff| %.3g%s\n", pi, i, dpos,
                    i == n_prompt - 1 ? " (full row)" : "");
    }
    /* rule 5: greedy generation */
    if (!o->no_greedy) {
        glesc_session_truncate(s, 0);
        if (glesc_session_eval(s, prompt_ids, n_prompt, 0, logits) != GLESC_OK) {
            note(r, REFCHECK_FAIL, "prompt %d: eval: %s", pi, glesc_last_errmsg());
            goto done;
        }
        for (size_t k = 0; k < n_gen; k++) {
            double gap = gaps ? json_object_get_double(json_object_array_get_idx(gaps, k)) : 1e9;
            if (gap <= r->gap12_threshold)
                break; /* from here the sequences may legitimately split */
            int32_t id = argmax(logits, n_vocab);
            r->greedy_checked++;
            if (id != gen_ids[k]) {
                if (o->log)
                    fprintf(o->log, "  prompt %d greedy step %zu: %d, llama.cpp %d\n", pi, k, id,
                            gen_ids[k]);
                break;
            }
            r->greedy_matched++;
            if (k + 1 < n_gen && glesc_session_eval(s, &id, 1, 0, logits) != GLESC_OK) {
                note(r, REFCHECK_FAIL, "prompt %d: decode: %s", pi, glesc_last_errmsg());
                goto done;
            }
        }
    }
    ok = true;
done:
    free(prompt_ids);
    free(tf_ids);
    free(gen_ids);
    glesc_tokens_free(mine);
    free(logits);
    return ok;
}

double refcheck_kv_widening(glesc_dtype t)
{
    switch (t) {
    case GLESC_DTYPE_F16:
        return 0.03; /* README §5.6: an f16 cache adds ~1e-3 to 3e-2 on these models */
    case GLESC_DTYPE_Q8_0:
        return 0.1;
    case GLESC_DTYPE_Q4_0:
        return 1.5;
    default:
        return 0;
    }
}

void refcheck_run(glesc_context *ctx, const char *json_path, const refcheck_options *o,
                  refcheck_result *r)
{
    memset(r, 0, sizeof *r);
    refcheck_options defaults = {0};
    if (!o)
        o = &defaults;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const char *base = strrchr(json_path, '/');
    snprintf(r->model, sizeof r->model, "%s", base ? base + 1 : json_path);
    json_object *root = json_object_from_file(json_path);
    glesc_model *m = NULL;
    glesc_session *s = NULL;
    char *path = NULL;
    if (!root) {
        note(r, REFCHECK_FAIL, "cannot parse %s: %s", json_path, json_util_get_last_err());
        goto done;
    }
    const char *file = json_object_get_string(get(root, "model_file"));
    const char *rel = json_object_get_string(get(root, "model_path"));
    if (file)
        snprintf(r->model, sizeof r->model, "%s", file);
    json_object *tol = get(root, "suggested_tolerances");
    json_object *prompts = get(root, "prompts");
    if (!rel || !tol || !prompts || !json_object_is_type(prompts, json_type_array)) {
        note(r, REFCHECK_FAIL, "%s: not a reference file (schema 1)", json_path);
        goto done;
    }
    r->tol = json_object_get_double(get(tol, "max_abs_logit_diff"));
    r->gap12_threshold = json_object_get_double(get(tol, "gap12_threshold"));
    if (o->kv_type != GLESC_DTYPE_F32) {
        r->tol += refcheck_kv_widening(o->kv_type);
        r->gap12_threshold = 2 * r->tol;
    }
    json_object *types = get(get(root, "model"), "tensor_types");
    json_object *qt = get(types, "blk.0.attn_q.weight");
    if (!qt) /* phi3: one fused q/k/v matrix */
        qt = get(types, "blk.0.attn_qkv.weight");
    snprintf(r->types, sizeof r->types, "%s", qt ? json_object_get_string(qt) : "?");
    for (char *c = r->types; *c; c++)
        *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    /* the model path is relative to the reference folder (the JSON's parent's parent) */
    size_t dir_len = base ? (size_t)(base - json_path) : 0;
    path = malloc(dir_len + strlen(rel) + 8);
    if (!path) {
        note(r, REFCHECK_FAIL, "out of memory");
        goto done;
    }
    if (base)
        sprintf(path, "%.*s/../%s", (int)dir_len, json_path, rel);
    else
        sprintf(path, "../%s", rel);
    glesc_status st = glesc_model_load(ctx, path, NULL, &m);
    if (st == GLESC_ERROR_UNSUPPORTED) {
        /* the loader's message names what is missing: an architecture, a
         * weight type or a scaling method */
        const char *why = glesc_last_errmsg();
        const char *after_file = strstr(why, ": ");
        note(r, REFCHECK_SKIP, "%s", after_file ? after_file + 2 : why);
        goto done;
    }
    if (st != GLESC_OK) {
        note(r, REFCHECK_FAIL, "load: %s", glesc_last_errmsg());
        goto done;
    }
    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    int n_max = 0;
    for (size_t i = 0; i < json_object_array_length(prompts); i++)
        n_max += (int)json_object_array_length(
            get(get(json_object_array_get_idx(prompts, i), "teacher_forced"), "ids"));
    glesc_session_options so = {
        .n_ctx = n_max + 8,
        .kv_type = o->kv_type == GLESC_DTYPE_F32 ? GLESC_KV_F32 : o->kv_type}; /* f32: not 0 */
    if ((st = glesc_session_create(m, &so, &s)) != GLESC_OK) {
        /* a quantized cache on heads of no multiple of 32 is refused (as
         * llama.cpp refuses it): the model is skipped for that type */
        bool blocks = o->kv_type == GLESC_DTYPE_Q8_0 || o->kv_type == GLESC_DTYPE_Q4_0;
        note(r, blocks && st == GLESC_ERROR_INVALID_ARGUMENT ? REFCHECK_SKIP : REFCHECK_FAIL, "%s",
             glesc_last_errmsg());
        goto done;
    }
    r->status = REFCHECK_PASS;
    for (size_t i = 0; i < json_object_array_length(prompts); i++)
        if (!check_prompt(s, glesc_model_tokenizer(m), mi.n_vocab,
                          json_object_array_get_idx(prompts, i), (int)i, o, r))
            goto done;
    if (r->max_diff > r->tol)
        note(r, REFCHECK_FAIL, "max |logit diff| %.3g at prompt %d position %d exceeds %.3g",
             r->max_diff, r->worst_prompt, r->worst_pos, r->tol);
    else if (r->argmax_failed)
        note(r, REFCHECK_FAIL, "%d of %d arg max checks differ", r->argmax_failed,
             r->argmax_checked);
    else if (!o->no_greedy && r->greedy_matched != r->greedy_checked)
        note(r, REFCHECK_FAIL, "greedy generation differs after %d of %d tokens", r->greedy_matched,
             r->greedy_checked);
done:
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    free(path);
    json_object_put(root);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    r->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
}

void refcheck_print_header(FILE *f)
{
    fprintf(f, "%-28s %-6s %10s %9s %10s %11s %9s  %s\n", "model", "type", "D", "tolerance",
            "positions", "argmax", "greedy", "result");
}

void refcheck_print_row(FILE *f, const refcheck_result *r)
{
    if (r->status == REFCHECK_SKIP) {
        fprintf(f, "%-28s %-6s %10s %9s %10s %11s %9s  skipped: %s\n", r->model, r->types, "-", "-",
                "-", "-", "-", r->note);
        return;
    }
    char arg[32], greedy[32];
    snprintf(arg, sizeof arg, "%d/%d", r->argmax_checked - r->argmax_failed, r->argmax_checked);
    snprintf(greedy, sizeof greedy, "%d/%d", r->greedy_matched, r->greedy_checked);
    fprintf(f, "%-28s %-6s %10.3g %9.2g %10d %11s %9s  %s%s%s\n", r->model, r->types, r->max_diff,
            r->tol, r->positions, arg, greedy, r->status == REFCHECK_PASS ? "ok" : "FAIL",
            r->note[0] ? ": " : "", r->note);
}
