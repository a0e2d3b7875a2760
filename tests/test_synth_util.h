/*
 * test_synth_util.h — the small synthetic models the runtime-level suites
 * write with tools/common/synth.c: one shape for all of them, one way to
 * write a file and fail the test with synth's message.
 */
#ifndef GLESC_TEST_SYNTH_UTIL_H
#define GLESC_TEST_SYNTH_UTIL_H

#include "common/synth.h"

/* The tests' tiny llama: synth_params_default with n_embd 64, 4 heads (2 KV
 * heads), n_ff 96, f32 weights, n_layer layers and a context of n_ctx. */
void test_tiny_params(synth_params *p, int n_layer, int n_ctx);

/* Writes p to dir/name, failing the test with synth's message; returns the
 * path (free() it). */
char *test_synth_write(const synth_params *p, const char *dir, const char *name);

#endif
