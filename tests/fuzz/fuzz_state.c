/*
 * fuzz_state.c — libFuzzer target for the session state loader
 * (src/llm/state.c): every input is loaded into a session of a tiny
 * synthetic model, which must refuse it with a message or take it whole,
 * never read out of bounds or crash. The input's first byte picks a mode:
 * odd, the checksums (payload and header) are written again over the rest
 * before loading, so mutations reach the fields and contents behind them;
 * even, the bytes are loaded as given.
 *
 * Build: as fuzz_gguf.c (build-fuzz); needs a GPU context (llvmpipe does).
 * GLESC_FUZZ_STATE_SEED=PATH writes a valid state (mode byte 0) to PATH at
 * start: tests/fuzz/run_fuzz.sh 600 fuzz_state seeds the corpus with it.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/synth.h"
#include "glesc_llm.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { HEADER = 120, N_CTX = 16 };

static glesc_session *sess;
static glesc_sampler *smp;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    char path[] = "/tmp/glesc-fuzz-state-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        abort();
    close(fd);
    synth_params p;
    synth_params_default(&p);
    p.n_embd = 32;
    p.n_layer = 1;
    p.n_head = 2;
    p.n_head_kv = 1;
    p.n_ff = 32;
    p.n_ctx = N_CTX;
    p.n_vocab = 300;
    p.weight_type = GLESC_DTYPE_F32;
    glesc_context *ctx;
    glesc_model *m;
    if (synth_write(&p, path) != GLESC_OK) {
        fprintf(stderr, "fuzz_state: writing the model: %s\n", synth_errmsg());
        abort();
    }
    if (glesc_context_create(NULL, &ctx) != GLESC_OK ||
        glesc_model_load(ctx, path, NULL, &m) != GLESC_OK ||
        glesc_session_create(m, &(glesc_session_options){.n_ctx = N_CTX}, &sess) != GLESC_OK ||
        glesc_sampler_create(NULL, 300, &smp) != GLESC_OK) {
        fprintf(stderr, "fuzz_state: setup: %s\n", glesc_last_errmsg());
        abort();
    }
    unlink(path);
    const char *seed = getenv("GLESC_FUZZ_STATE_SEED");
    if (seed) {
        int32_t ids[5] = {1, 7, 9, 11, 13};
        float *row = malloc(300 * sizeof *row);
        glesc_sampler_accept(smp, 7);
        if (!row || glesc_session_eval(sess, ids, 5, 0, row) != GLESC_OK)
            abort();
        size_t n = glesc_session_state_size(sess, smp, 5);
        uint8_t *s = calloc(1, n + 1); /* mode byte 0: as given */
        FILE *f = fopen(seed, "wb");
        if (!s || !f || glesc_session_state_save(sess, smp, ids, 5, s + 1, n, NULL) != GLESC_OK ||
            fwrite(s, 1, n + 1, f) != n + 1 || fclose(f) != 0)
            abort();
        free(s);
        free(row);
    }
    return 0;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t n = size - 1;
    /* an exact-size copy, so ASan sees a read past the end */
    uint8_t *s = malloc(n ? n : 1);
    if (!s)
        abort();
    memcpy(s, data + 1, n);
    if ((data[0] & 1) && n >= HEADER) {
        put64(s + 104, XXH3_64bits(s + HEADER, n - HEADER));
        put64(s + 112, XXH3_64bits(s, 112));
    }
    int32_t toks[N_CTX];
    size_t n_tokens = 0;
    glesc_status st = glesc_session_state_load(sess, smp, s, n, toks, N_CTX, &n_tokens);
    if (st == GLESC_OK) {
        if (glesc_session_n_past(sess) != (int32_t)n_tokens || n_tokens > N_CTX)
            __builtin_trap();
        for (size_t i = 0; i < n_tokens; i++)
            if (toks[i] < 0 || toks[i] >= 300)
                __builtin_trap();
    } else if (!glesc_last_errmsg()[0]) {
        __builtin_trap(); /* a refusal always says why */
    }
    free(s);
    return 0;
}
