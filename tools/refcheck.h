/*
 * refcheck.h — comparing glesc's runtime with llama.cpp's reference outputs
 * (../shared/reference/expected/NAME.json, described in that folder's
 * README.md). Used by tools/ref-check.c and tests/test_refcheck.c.
 *
 * Per model and prompt: the prompt must tokenize to prompt_ids; the
 * teacher-forced ids are evaluated in one batch (F32 KV cache unless told
 * otherwise) and the logits at every position's top5 ids, and the whole
 * last_prompt_logits row, are compared: D = the largest absolute difference
 * must stay within suggested_tolerances.max_abs_logit_diff; where the stored
 * gap12 exceeds gap12_threshold the arg max over the whole row must equal
 * llama.cpp's; greedy generation must reproduce generated_ids up to the
 * first step whose generation_gap12 is at most gap12_threshold.
 */
#ifndef GLESC_TOOLS_REFCHECK_H
#define GLESC_TOOLS_REFCHECK_H

#include <stdbool.h>
#include <stdio.h>

#include "glesc.h"

typedef enum refcheck_status { REFCHECK_PASS, REFCHECK_FAIL, REFCHECK_SKIP } refcheck_status;

typedef struct refcheck_result {
    char model[96]; /* model file name */
    char types[64]; /* the matrix type ("f32", "q4_k", ...) */
    refcheck_status status;
    char note[512];  /* why it failed or was skipped */
    double max_diff; /* D */
    int worst_pos;   /* position of D (teacher-forced), prompt index in worst_prompt */
    int worst_prompt;
    double tol, gap12_threshold;
    int positions; /* positions compared (both prompts) */
    int argmax_checked, argmax_failed;
    int greedy_checked, greedy_matched; /* greedy tokens compared / equal */
    double seconds;
} refcheck_result;

typedef struct refcheck_options {
    /* the KV cache: F32 (0: the references' own) or F16, Q8_0, Q4_0 (the
     * tolerance widened by refcheck_kv_widening) */
    glesc_dtype kv_type;
    bool no_greedy; /* skip the greedy generation check */
    FILE *log;      /* per-position details (NULL: none) */
} refcheck_options;

/* What a KV cache of type t adds to a file's logit tolerance: the
 * references were made with an f32 cache; README §5.6 allows 0.03 for an
 * f16 one; q8_0 and q4_0 as measured (docs/correctness.md). */
double refcheck_kv_widening(glesc_dtype t);

/* Checks one expected/NAME.json; the model path inside it is resolved against
 * the JSON's folder's parent (the reference folder). Never aborts: failures
 * and skips are in *out. */
void refcheck_run(glesc_context *ctx, const char *json_path, const refcheck_options *o,
                  refcheck_result *out);

/* The table's header and one row. */
void refcheck_print_header(FILE *f);
void refcheck_print_row(FILE *f, const refcheck_result *r);

#endif
