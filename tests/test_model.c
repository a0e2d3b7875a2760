/*
 * test_model.c — llama-family hyperparameters and tensor validation: the
 * shared models load with the expected sizes, gemma2, gemma3 and phi3 with
 * llama.cpp's per-layer decisions, and bad files (unknown
 * architecture, missing key, missing tensor, wrong shape) give errors that
 * name the file, key or tensor.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/model.h"
#include "test_util.h"

Test(model, shared_models_load)
{
    static const char *const files[] = {
        "models/stories260K.gguf",         "models/TinyStories-656K-Q8_0.gguf",
        "models/llama-2-tiny-random.gguf", "reference/models/tiny-q4_k_m.gguf",
        "models/extra/mqa-q4_k.gguf",      "models/extra/q8_0-gpt2.gguf",
        "models/extra/f16-spm32k.gguf",
    };
    TEST_REQUIRE_SHARED(first, files[0]);
    free(first);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *p = test_shared_path(files[i]);
        cr_assert_not_null(p, "%s missing", files[i]);
        glesc_gguf *f;
        cr_assert_eq(glesc_gguf_open(p, &f), GLESC_OK, "%s", glesc_last_errmsg());
        llm_hparams hp;
        cr_assert_eq(llm_hparams_load(f, files[i], &hp), GLESC_OK, "%s", glesc_last_errmsg());
        cr_assert_eq(llm_tensors_check(f, files[i], &hp), GLESC_OK, "%s", glesc_last_errmsg());
        cr_log_info("%-36s %s: vocab %lld embd %lld layers %lld ff %lld heads %lld/%lld "
                    "head_dim %lld rot %lld base %g eps %g%s",
                    files[i], hp.arch_name, (long long)hp.n_vocab, (long long)hp.n_embd,
                    (long long)hp.n_layer, (long long)hp.n_ff, (long long)hp.n_head,
                    (long long)hp.n_head_kv, (long long)hp.head_dim, (long long)hp.n_rot,
                    hp.rope_freq_base, hp.rms_eps, hp.tied_output ? " tied" : "");
        if (i == 0) {
            cr_assert_eq(hp.n_embd, 64);
            cr_assert_eq(hp.n_layer, 5);
            cr_assert_eq(hp.n_head, 8);
            cr_assert_eq(hp.n_head_kv, 4);
            cr_assert_eq(hp.head_dim, 8);
            cr_assert_eq(hp.n_ff, 172);
            cr_assert_eq(hp.n_vocab, 512);
            cr_assert_float_eq(hp.rope_freq_base, 10000.0f, 0, "default freq base");
            cr_assert_not(hp.tied_output);
        }
        if (i == 1)
            cr_assert(hp.tied_output, "TinyStories-656K has no output.weight");
        glesc_gguf_close(f);
        free(p);
    }
}

/* llama.cpp's per-architecture decisions, as the reference files record
 * them (model.arch_hparams of reference/expected/<name>.json): which layers
 * are local, each layer's rope base, the scores' scale, the embedding
 * scale, soft-capping and the window. */
Test(model, reference_architectures_match_llama_cpp_decisions)
{
    static const struct {
        const char *file;
        int n_swa;
        bool swa[6];
        float base[6];
        float kq_scale, embd_scale, attn_cap, final_cap;
        bool fused;
    } cases[] = {
        {"reference/models/gemma2-f32.gguf", 16, {1, 0}, {1e4f, 1e4f}, 0.125f, 16, 50, 30, false},
        {"reference/models/gemma3-f32.gguf",
         16,
         {1, 1, 1, 1, 1, 0},
         {1e4f, 1e4f, 1e4f, 1e4f, 1e4f, 1e6f},
         0.17677669f,
         16,
         0,
         0,
         false},
        {"reference/models/phi3-f32.gguf", 0, {0, 0}, {1e4f, 1e4f}, 0.125f, 1, 0, 0, true},
    };
    TEST_REQUIRE_SHARED(first, cases[0].file);
    free(first);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = test_shared_path(cases[i].file);
        glesc_gguf *f;
        cr_assert_eq(glesc_gguf_open(p, &f), GLESC_OK, "%s", glesc_last_errmsg());
        llm_hparams hp;
        cr_assert_eq(llm_hparams_load(f, cases[i].file, &hp), GLESC_OK, "%s", glesc_last_errmsg());
        cr_assert_eq(llm_tensors_check(f, cases[i].file, &hp), GLESC_OK, "%s", glesc_last_errmsg());
        cr_expect_eq(hp.n_swa, cases[i].n_swa, "%s", cases[i].file);
        for (int64_t l = 0; l < hp.n_layer; l++) {
            cr_expect_eq(llm_layer_is_swa(&hp, l), cases[i].swa[l], "%s layer %lld", cases[i].file,
                         (long long)l);
            cr_expect_float_eq(llm_layer_rope_base(&hp, l), cases[i].base[l], 0, "%s layer %lld",
                               cases[i].file, (long long)l);
            cr_expect_float_eq(llm_layer_rope_scale(&hp, l), 1.0f, 0);
        }
        cr_expect_float_eq(hp.attn_scale, cases[i].kq_scale, 1e-7f, "%s", cases[i].file);
        cr_expect_float_eq(hp.embd_scale, cases[i].embd_scale, 0, "%s", cases[i].file);
        cr_expect_float_eq(hp.attn_softcap, cases[i].attn_cap, 0, "%s", cases[i].file);
        cr_expect_float_eq(hp.final_softcap, cases[i].final_cap, 0, "%s", cases[i].file);
        cr_expect_eq(hp.fused_qkv, cases[i].fused, "%s", cases[i].file);
        cr_expect_eq(hp.fused_up, cases[i].fused, "%s", cases[i].file);
        glesc_gguf_close(f);
        free(p);
    }
}

/* A tiny llama file through the writer; `mutate` breaks one thing. */
typedef enum { OK, ARCH, NO_LAYERS, NO_TENSOR, BAD_SHAPE, BAD_HEADS, BAD_ROPE } mutation;

static char *write_model(mutation m)
{
    char *dir = test_tmpdir();
    static char path[4200];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    free(dir);
    glesc_gguf_writer *w = glesc_gguf_writer_create();
    glesc_gguf_writer_set_str(w, "general.architecture", m == ARCH ? "gemma9" : "llama");
    glesc_gguf_writer_set_u32(w, "llama.embedding_length", 8);
    if (m != NO_LAYERS)
        glesc_gguf_writer_set_u32(w, "llama.block_count", 1);
    glesc_gguf_writer_set_u32(w, "llama.feed_forward_length", 16);
    glesc_gguf_writer_set_u32(w, "llama.attention.head_count", 2);
    glesc_gguf_writer_set_u32(w, "llama.attention.head_count_kv", m == BAD_HEADS ? 3 : 1);
    if (m == BAD_ROPE)
        glesc_gguf_writer_set_str(w, "llama.rope.scaling.type", "ntk");
    static const struct {
        const char *name;
        int nd;
        int64_t ne[2];
    } t[] = {
        {"token_embd.weight", 2, {8, 10}},       {"output_norm.weight", 1, {8, 1}},
        {"blk.0.attn_norm.weight", 1, {8, 1}},   {"blk.0.attn_q.weight", 2, {8, 8}},
        {"blk.0.attn_k.weight", 2, {8, 4}},      {"blk.0.attn_v.weight", 2, {8, 4}},
        {"blk.0.attn_output.weight", 2, {8, 8}}, {"blk.0.ffn_norm.weight", 1, {8, 1}},
        {"blk.0.ffn_gate.weight", 2, {8, 16}},   {"blk.0.ffn_up.weight", 2, {8, 16}},
        {"blk.0.ffn_down.weight", 2, {16, 8}},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (m == NO_TENSOR && !strcmp(t[i].name, "blk.0.ffn_up.weight"))
            continue;
        int64_t ne[2] = {t[i].ne[0], t[i].ne[1]};
        if (m == BAD_SHAPE && !strcmp(t[i].name, "blk.0.attn_k.weight"))
            ne[1] = 8;
        cr_assert_eq(glesc_gguf_writer_add_tensor(w, t[i].name, GLESC_DTYPE_F32, t[i].nd, ne, NULL,
                                                  (uint64_t)ne[0] * (t[i].nd == 2 ? ne[1] : 1) * 4),
                     GLESC_OK, "%s", glesc_last_errmsg());
    }
    cr_assert_eq(glesc_gguf_writer_write(w, path), GLESC_OK, "%s", glesc_last_errmsg());
    glesc_gguf_writer_destroy(w);
    return path;
}

static void expect_error(mutation m, glesc_status want, const char *needle)
{
    char *path = write_model(m);
    glesc_gguf *f;
    cr_assert_eq(glesc_gguf_open(path, &f), GLESC_OK, "%s", glesc_last_errmsg());
    llm_hparams hp;
    glesc_status st = llm_hparams_load(f, "m.gguf", &hp);
    if (st == GLESC_OK)
        st = llm_tensors_check(f, "m.gguf", &hp);
    cr_log_info("mutation %d: %s", m, st ? glesc_last_errmsg() : "ok");
    cr_assert_eq(st, want, "got %s: %s", glesc_status_name(st), glesc_last_errmsg());
    if (needle)
        cr_assert(strstr(glesc_last_errmsg(), needle), "message '%s' lacks '%s'",
                  glesc_last_errmsg(), needle);
    glesc_gguf_close(f);
}

Test(model, valid_tiny_file)
{
    expect_error(OK, GLESC_OK, NULL);
}

Test(model, unknown_architecture)
{
    expect_error(ARCH, GLESC_ERROR_UNSUPPORTED, "'gemma9'");
}

Test(model, missing_key)
{
    expect_error(NO_LAYERS, GLESC_ERROR_NOT_FOUND, "llama.block_count");
}

Test(model, missing_tensor)
{
    expect_error(NO_TENSOR, GLESC_ERROR_NOT_FOUND, "'blk.0.ffn_up.weight'");
}

Test(model, unknown_rope_scaling)
{
    expect_error(BAD_ROPE, GLESC_ERROR_UNSUPPORTED,
                 "llama.rope.scaling.type 'ntk' is not supported (none, linear, yarn");
}

Test(model, wrong_shape)
{
    expect_error(BAD_SHAPE, GLESC_ERROR_SHAPE, "'blk.0.attn_k.weight' has shape [8, 8");
}

Test(model, heads_not_multiple)
{
    expect_error(BAD_HEADS, GLESC_ERROR_FORMAT, "head_count_kv");
}
