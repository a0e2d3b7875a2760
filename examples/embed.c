/*
 * embed.c — glesc as an application embeds it, end to end, through the
 * installed headers and pkg-config only:
 *
 *     cc embed.c $(pkg-config --cflags --libs glesc) -o embed
 *     ./embed MODEL.gguf
 *
 * It prints the library's version, estimates the model's memory before
 * loading it, cancels one load from its progress callback, loads the model
 * from an open file descriptor, runs a small graph on a second context,
 * generates a continuation with a token callback (and once more stopped by
 * that callback), and holds a chat over several turns (one reply stopped by
 * the callback, as a user's Ctrl-C would stop it). Any failure prints the
 * library's message and exits 1. The tests run it on a synthetic model
 * (tests/embed_example.sh: gguf-synth writes it), so the text it prints is
 * gibberish.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <glesc.h>
#include <glesc_gguf.h>
#include <glesc_llm.h>

/* Calls that take no context leave their message in glesc_last_errmsg(). */
#define CHECK(call)                                                                                \
    do {                                                                                           \
        glesc_status st_ = (call);                                                                 \
        if (st_ != GLESC_OK) {                                                                     \
            fprintf(stderr, "embed: %s: %s: %s\n", #call, glesc_status_name(st_),                  \
                    glesc_last_errmsg());                                                          \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "embed: expected %s (line %d)\n", #cond, __LINE__);                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Cancels a load halfway through. */
static bool cancel_halfway(void *user, uint64_t done, uint64_t total)
{
    (void)user;
    return done * 2 >= total;
}

static bool show_progress(void *user, uint64_t done, uint64_t total)
{
    int *calls = user;
    (*calls)++;
    if (done == total)
        printf("loaded %llu bytes of tensors in %d steps\n", (unsigned long long)total, *calls);
    return false;
}

/* Prints each piece of text as it comes; stops after `stop_after` tokens
 * when that is set. */
typedef struct printer {
    int tokens, stop_after;
} printer;

static bool print_piece(void *user, int32_t id, const char *piece, size_t len)
{
    printer *p = user;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    if (id >= 0)
        p->tokens++;
    return p->stop_after > 0 && p->tokens >= p->stop_after;
}

static void on_event(void *user, const glesc_gen_event *ev)
{
    (void)user;
    if (ev->kind == GLESC_GEN_EVENT_START_OVER)
        printf("\n[the context is full: the conversation starts over]\n");
}

/* A second context runs an unrelated computation: y = x + x. */
static void second_context(void)
{
    /* Its program cache directory cannot be created (a path under a
     * regular file): glesc warns once, through the application's log
     * callback, and runs without the disk cache. */
    glesc_context_options o;
    glesc_context_options_init(&o);
    o.cache_dir = "/dev/null/glesc-cache";
    glesc_context *ctx;
    CHECK(glesc_context_create(&o, &ctx));
    glesc_graph *g = glesc_graph_create(ctx);
    EXPECT(g);
    int64_t shape[1] = {4};
    glesc_tensor *x = glesc_tensor_new(g, GLESC_DTYPE_F32, 1, shape);
    const float in[4] = {1, 2, 3, 4};
    float out[4];
    EXPECT(x && glesc_tensor_write_f32(x, in, 4) == GLESC_OK);
    glesc_tensor *y = glesc_add(g, x, x);
    if (!y || glesc_graph_compute(g, &y, 1) != GLESC_OK ||
        glesc_tensor_read_f32(y, out, 4) != GLESC_OK) {
        fprintf(stderr, "embed: second context: %s\n", glesc_context_errmsg(ctx));
        exit(1);
    }
    EXPECT(out[3] == 8.0f);
    printf("second context (%s): x + x = %g %g %g %g\n", glesc_context_caps(ctx)->renderer, out[0],
           out[1], out[2], out[3]);
    glesc_graph_destroy(g);
    glesc_context_destroy(ctx); /* must leave the first context alone */
}

static void log_to_app(void *user, glesc_log_level level, const char *msg)
{
    ++*(int *)user;
    fprintf(stderr, "[app log, glesc level %d] %s\n", (int)level, msg);
}

static bool abort_now(void *user)
{
    return *(const bool *)user;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: embed MODEL.gguf\n");
        return 2;
    }
    const char *path = argv[1];
    /* The headers this program was compiled with must be the library's. */
    printf("glesc %s (headers %s, %d)\n", glesc_version(), GLESC_VERSION_STRING,
           GLESC_VERSION_NUMBER);
    EXPECT(!strcmp(glesc_version(), GLESC_VERSION_STRING));
    /* glesc's log lines go to the application's logger. */
    int log_lines = 0;
    glesc_set_log_callback(log_to_app, &log_lines);

    glesc_context *ctx;
    CHECK(glesc_context_create(NULL, &ctx));
    printf("GPU: %s (%s platform)\n", glesc_context_caps(ctx)->renderer,
           glesc_platform_name(glesc_context_caps(ctx)->platform));

    /* Memory before loading: from the file's metadata and tensor table. */
    glesc_gguf *f;
    CHECK(glesc_gguf_open(path, &f));
    glesc_session_options so = {.n_ctx = 512};
    glesc_model_memory mem;
    CHECK(glesc_model_estimate(ctx, f, &so, &mem));
    glesc_gguf_close(f);
    printf("estimate: %llu GPU bytes (weights %llu, KV cache %llu, activations %llu), "
           "%llu host bytes\n",
           (unsigned long long)mem.gpu_bytes, (unsigned long long)mem.weight_bytes,
           (unsigned long long)mem.kv_bytes, (unsigned long long)mem.scratch_bytes,
           (unsigned long long)mem.host_bytes);

    /* A load the progress callback cancels. */
    glesc_model_options mo;
    glesc_model_options_init(&mo);
    mo.progress = cancel_halfway;
    glesc_model *model;
    EXPECT(glesc_model_load(ctx, path, &mo, &model) == GLESC_ERROR_CANCELLED && !model);
    printf("cancelled load: %s\n", glesc_last_errmsg());

    /* The model from an open descriptor (offset 0, up to the end of the
     * file); the descriptor is the caller's to close. */
    int fd = open(path, O_RDONLY);
    EXPECT(fd >= 0);
    int calls = 0;
    mo.progress = show_progress;
    mo.progress_user = &calls;
    CHECK(glesc_model_load_fd(ctx, fd, 0, 0, path, &mo, &model));
    close(fd);
    glesc_model_info mi;
    glesc_model_get_info(model, &mi);
    printf("model: %s, %lld layers, %llu GPU bytes of weights (estimated %llu)\n", mi.arch,
           (long long)mi.n_layer, (unsigned long long)mi.gpu_bytes,
           (unsigned long long)mem.weight_bytes);
    EXPECT(mi.gpu_bytes == mem.weight_bytes);

    /* Another context on the same thread, created, used and destroyed. */
    second_context();
    EXPECT(log_lines > 0); /* its cache warning came through the callback */
    /* No make_current needed: every entry point binds its own context. */

    glesc_session *s;
    CHECK(glesc_session_create(model, &so, &s));
    /* An abort callback stops a compute between kernels. */
    bool stop = true;
    glesc_context_set_abort_callback(ctx, abort_now, &stop);
    int32_t bos = 1;
    EXPECT(glesc_session_eval(s, &bos, 1, 0, NULL) == GLESC_ERROR_CANCELLED);
    printf("aborted eval: %s\n", glesc_last_errmsg());
    stop = false;
    CHECK(glesc_session_truncate(s, 0));
    const glesc_tokenizer *tok = glesc_model_tokenizer(model);
    glesc_sampler_params sp;
    glesc_sampler_params_init(&sp);
    sp.temperature = 0; /* greedy: the same text every run */
    glesc_sampler *smp;
    CHECK(glesc_sampler_create(&sp, glesc_tokenizer_n_vocab(tok), &smp));

    /* Generation with a token callback. */
    const char *prompt = "Once upon a time";
    int32_t *ids;
    size_t n;
    CHECK(glesc_tokenize_alloc(tok, prompt, strlen(prompt), GLESC_TOKENIZE_ADD_SPECIAL, &ids, &n));
    glesc_generate_params gp;
    glesc_generate_params_init(&gp);
    gp.n_predict = 16;
    printer pr = {0, 0};
    gp.on_token = print_piece;
    gp.token_user = &pr;
    glesc_generate_result res;
    printf("generate: %s", prompt);
    CHECK(glesc_generate(s, smp, ids, n, &gp, &res));
    printf("\n  (%d tokens, stop: %s)\n", (int)res.n_generated, glesc_stop_reason_name(res.stop));
    EXPECT(res.stop == GLESC_STOP_LENGTH && res.n_generated == 16);

    /* The same, stopped by the callback after 5 tokens. */
    CHECK(glesc_session_truncate(s, 0));
    glesc_sampler_reset(smp);
    pr = (printer){0, 5};
    printf("generate, stopped by the callback: %s", prompt);
    CHECK(glesc_generate(s, smp, ids, n, &gp, &res));
    printf("\n  (%d tokens, stop: %s)\n", (int)res.n_generated, glesc_stop_reason_name(res.stop));
    EXPECT(res.stop == GLESC_STOP_CALLBACK && res.n_generated == 5);
    glesc_tokens_free(ids);

    /* A chat: the session's cache keeps the conversation between turns. */
    glesc_chat_options co;
    glesc_chat_options_init(&co);
    co.system = "You tell short stories.";
    glesc_chat *chat;
    CHECK(glesc_chat_create(s, smp, &co, &chat));
    printf("chat (%s template)\n", glesc_chat_template_name(glesc_chat_get_template(chat)));
    gp.n_predict = 12;
    gp.on_event = on_event;
    const char *turns[] = {"Hello", "Tell me about a dog", "And then?"};
    for (int t = 0; t < 3; t++) {
        pr = (printer){0, t == 1 ? 3 : 0}; /* the second reply is cut short */
        printf("> %s\n", turns[t]);
        CHECK(glesc_chat_send(chat, turns[t], &gp, &res));
        printf("\n  (%d tokens, stop: %s, %zu tokens of text evaluated, cache %d of %d)\n",
               (int)res.n_generated, glesc_stop_reason_name(res.stop), res.prompt_tokens,
               (int)glesc_session_n_past(s), (int)glesc_session_n_ctx(s));
        EXPECT(res.stop == (t == 1 ? GLESC_STOP_CALLBACK : GLESC_STOP_LENGTH));
    }
    size_t n_msgs;
    const glesc_chat_message *msgs = glesc_chat_messages(chat, &n_msgs);
    EXPECT(n_msgs == 7 && !strcmp(msgs[0].role, "system"));
    printf("history: %zu messages; the cut reply is kept: '%s'\n", n_msgs, msgs[4].content);

    glesc_chat_destroy(chat);
    glesc_sampler_destroy(smp);
    glesc_session_destroy(s);
    glesc_model_destroy(model);
    glesc_context_destroy(ctx);
    printf("ok\n");
    return 0;
}
