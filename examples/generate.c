/* generate.c — the smallest complete generation program: load a GGUF model,
 * compile its kernels with a progress line, print a greedy continuation.
 *     cc generate.c $(pkg-config --cflags --libs glesc) -o generate
 *     ./generate MODEL.gguf "Once upon a time"                            */
#include <stdio.h>
#include <string.h>

#include <glesc_llm.h>

static void on_compile(void *user, int done, int total, const char *kernel)
{
    (void)user, (void)kernel;
    fprintf(stderr, "\rcompiling kernels %d/%d%s", done, total, done == total ? "\n" : "");
}

static bool on_token(void *user, int32_t id, const char *piece, size_t len)
{
    (void)user, (void)id;
    fwrite(piece, 1, len, stdout);
    return false; /* true would stop here */
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return fprintf(stderr, "usage: %s MODEL.gguf PROMPT\n", argv[0]), 2;
    glesc_context *ctx = NULL;
    glesc_model *m = NULL;
    glesc_session *s = NULL;
    glesc_sampler *smp = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    glesc_sampler_params sp;
    glesc_sampler_params_init(&sp);
    sp.temperature = 0; /* greedy */
    glesc_generate_params gp;
    glesc_generate_params_init(&gp);
    gp.n_predict = 32;
    gp.on_token = on_token;
    glesc_generate_result res;
    bool ok = glesc_context_create(NULL, &ctx) == GLESC_OK &&
              glesc_model_load(ctx, argv[1], NULL, &m) == GLESC_OK &&
              glesc_session_create(m, &(glesc_session_options){.n_ctx = 512}, &s) == GLESC_OK;
    if (ok) /* every kernel the session needs, once per machine (then from the disk cache) */
        glesc_context_set_compile_callback(ctx, on_compile, NULL);
    ok = ok && glesc_session_precompile(s) == GLESC_OK &&
         glesc_tokenize_alloc(glesc_model_tokenizer(m), argv[2], strlen(argv[2]),
                              GLESC_TOKENIZE_ADD_SPECIAL, &ids, &n) == GLESC_OK &&
         glesc_sampler_create(&sp, glesc_tokenizer_n_vocab(glesc_model_tokenizer(m)), &smp) ==
             GLESC_OK &&
         glesc_generate(s, smp, ids, n, &gp, &res) == GLESC_OK;
    if (!ok)
        fprintf(stderr, "generate: %s\n", glesc_last_errmsg());
    glesc_tokens_free(ids);
    glesc_sampler_destroy(smp);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    glesc_context_destroy(ctx);
    return ok ? 0 : 1;
}
