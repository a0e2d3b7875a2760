/*
 * options.c — glesc-server's command line: llama-server's flags where they
 * apply (-m, --host, --port, -c, -np, -b, --api-key, --timeout,
 * --chat-template, -ctk/-ctv, -a), the limits of what a request may ask,
 * and glesc's GPU flags (--platform, --device, --cache-dir, --limits), the
 * values checked through tools/common/args.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "glesc-server/glesc-server.h"

#define PROG "glesc-server"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: glesc-server -m FILE [options]\n"
            "\n"
            "An OpenAI-compatible HTTP server for a GGUF model on the GPU (OpenGL ES compute):\n"
            "POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,\n"
            "GET /metrics. SIGTERM stops it: new requests are refused, running ones finish.\n"
            "\n"
            "Server:\n"
            "  -m, --model FILE        GGUF model\n"
            "  -a, --alias NAME        the model's name in answers (default: general.name)\n"
            "  --host ADDR             address to listen on (127.0.0.1)\n"
            "  --port N                port (8080; 0: any free one, printed)\n"
            "  --api-key KEY           require 'Authorization: Bearer KEY' (not for /health)\n"
            "  --timeout N             seconds a connection may stay idle (600)\n"
            "  --max-connections N     connections at once (64)\n"
            "\n"
            "Slots and limits:\n"
            "  -np, --parallel N       slots: requests generated at once, each with its own\n"
            "                          KV cache (4)\n"
            "  -c, --ctx-size N        KV positions of all slots together, N / np each (0: each\n"
            "                          slot the model's training context, at most 4096)\n"
            "  -b, --batch-size N      prompt tokens per step (512); a long prompt is taken in\n"
            "                          steps so that the other slots keep generating\n"
            "  --queue N               requests that may wait for a slot (16; more: 503)\n"
            "  --max-body BYTES        largest request body (1048576; more: 413)\n"
            "  --max-messages N        most messages of a chat request (256)\n"
            "  --max-tokens N          most max_tokens a request may ask (0: a slot's context)\n"
            "  --chat-template NAME    llama.cpp's template names (default: detected from the\n"
            "                          model, else chatml)\n"
            "  -ctk, --cache-type-k T  KV cache type of keys (and values): f16 (default), f32,\n"
            "                          q8_0, q4_0\n"
            "  -ctv, --cache-type-v T  the values' type alone\n"
            "\n"
            "GPU:\n"
            "  --platform NAME         auto, gbm, device, surfaceless (or GLESC_PLATFORM)\n"
            "  --device DEV            render node path or EGL device index (or GLESC_DEVICE)\n"
            "  --cache-dir DIR         program binary cache (\"off\" disables)\n"
            "  --limits SPEC           run within a smaller device's limits (see gguf-run)\n"
            "  -v, --verbose           one line per request on stderr\n"
            "  -h, --help              this text\n");
}

static int kv_type(const char *flag, const char *v, srv_options *o)
{
    glesc_dtype t;
    if (!tool_parse_kv_type(v, &t)) {
        fprintf(stderr, PROG ": %s: '%s' is not f32, f16, q8_0 or q4_0\n", flag, v);
        return -1;
    }
    if (!strcmp(flag, "-ctv") || !strcmp(flag, "--cache-type-v"))
        o->kv_type_v = tool_kv_option(t);
    else
        o->kv_type = tool_kv_option(t);
    return 0;
}

static bool is(const char *a, const char *s, const char *l)
{
    return (s && !strcmp(a, s)) || (l && !strcmp(a, l));
}

/* A flag with value v into *o: 0, 1 (not a flag of this kind), -1 (bad value). */
static int parse_value(srv_options *o, const char *a, const char *v)
{
    struct {
        const char *s, *l;
        const char **dst;
    } const strs[] = {
        {"-m", "--model", &o->model},
        {"-a", "--alias", &o->alias},
        {NULL, "--host", &o->host},
        {NULL, "--api-key", &o->api_key},
        {NULL, "--chat-template", &o->chat_template},
        {NULL, "--platform", &o->platform},
        {NULL, "--device", &o->device},
        {NULL, "--cache-dir", &o->cache_dir},
        {NULL, "--limits", &o->limits},
    };
    struct {
        const char *s, *l;
        long *dst, lo, hi;
    } const nums[] = {
        {NULL, "--port", &o->port, 0, 65535},
        {"-c", "--ctx-size", &o->n_ctx, 0, 1 << 24},
        {"-np", "--parallel", &o->n_parallel, 1, 64},
        {"-b", "--batch-size", &o->n_batch, 1, 4096},
        {NULL, "--queue", &o->queue, 0, 4096},
        {NULL, "--timeout", &o->timeout, 1, 86400},
        {NULL, "--max-connections", &o->max_conns, 1, 4096},
        {NULL, "--max-body", &o->max_body, 1024, 1L << 30},
        {NULL, "--max-messages", &o->max_messages, 1, 1 << 16},
        {NULL, "--max-tokens", &o->max_tokens, 0, 1 << 24},
    };
    if (is(a, "-ctk", "--cache-type-k") || is(a, "-ctv", "--cache-type-v"))
        return kv_type(a, v, o);
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++)
        if (is(a, strs[i].s, strs[i].l)) {
            *strs[i].dst = v;
            return 0;
        }
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++)
        if (is(a, nums[i].s, nums[i].l))
            return tool_parse_long(PROG, a, v, nums[i].lo, nums[i].hi, nums[i].dst) ? -1 : 0;
    return 1;
}

int options_parse(int argc, char **argv, srv_options *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->n_parallel = 4;
    o->n_batch = 512;
    o->queue = 16;
    o->timeout = 600;
    o->max_conns = 64;
    o->max_body = 1 << 20;
    o->max_messages = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (is(a, "-h", "--help")) {
            usage(stdout);
            return 0;
        }
        if (is(a, "-v", "--verbose")) {
            o->verbose = 1;
            continue;
        }
        if (is(a, NULL, "--metrics")) /* llama-server's switch: /metrics is always on here */
            continue;
        if (i + 1 >= argc) {
            fprintf(stderr, PROG ": %s: %s\n", a,
                    a[0] == '-' ? "unknown flag or missing value" : "unexpected argument");
            usage(stderr);
            return 2;
        }
        int rc = parse_value(o, a, argv[i + 1]);
        if (rc < 0)
            return 2;
        if (rc > 0) {
            fprintf(stderr, PROG ": unknown flag '%s' (--help lists them)\n", a);
            return 2;
        }
        i++;
    }
    if (!o->model) {
        fprintf(stderr, PROG ": -m FILE is required\n");
        usage(stderr);
        return 2;
    }
    if (o->chat_template && glesc_chat_template_find(o->chat_template) == GLESC_CHAT_NONE) {
        fprintf(stderr, PROG ": --chat-template: '%s' is no template of llama.cpp's names\n",
                o->chat_template);
        return 2;
    }
    if (o->n_ctx && o->n_ctx / o->n_parallel < 16) {
        fprintf(stderr, PROG ": -c %ld over %ld slots leaves %ld positions each; at least 16\n",
                o->n_ctx, o->n_parallel, o->n_ctx / o->n_parallel);
        return 2;
    }
    glesc_platform p;
    if (o->platform && !tool_parse_platform(o->platform, &p)) {
        fprintf(stderr, PROG ": --platform: '%s' is not auto, gbm, device, surfaceless\n",
                o->platform);
        return 2;
    }
    return -1;
}
