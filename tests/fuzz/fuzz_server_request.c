/*
 * fuzz_server_request.c — libFuzzer target for glesc-server's request
 * parser (tools/glesc-server/request.c): every input, as the body of a
 * chat request and of a completion request, must give a checked request
 * or a 400-class error with a message, never read out of bounds, leak or
 * crash; what it accepts keeps the limits it was given (checked here, a
 * trap where not).
 *
 * Build: as fuzz_gguf.c (build-fuzz); no GPU needed. Seeds:
 * tests/fuzz/server_seeds/, dictionary tests/fuzz/server.dict
 * (tests/fuzz/run_fuzz.sh 600 fuzz_server_request).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "glesc-server/glesc-server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const srv_request *r, const srv_limits *lim)
{
    if (r->n_stop > SRV_MAX_STOP || r->n_bias > SRV_MAX_BIAS ||
        r->n_msgs > (size_t)lim->max_messages || r->max_tokens > lim->max_tokens)
        __builtin_trap();
    for (size_t i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !*r->stop[i] || strlen(r->stop[i]) > SRV_MAX_STOP_LEN)
            __builtin_trap();
    for (size_t i = 0; i < r->n_bias; i++)
        if (r->bias[i].id < 0 || r->bias[i].id >= lim->n_vocab || !(r->bias[i].bias >= -100) ||
            !(r->bias[i].bias <= 100))
            __builtin_trap();
    for (size_t i = 0; i < r->n_msgs; i++)
        if (!r->msgs[i].role || !r->msgs[i].content)
            __builtin_trap();
    if (r->kind == SRV_CHAT ? !r->n_msgs : !r->prompt && !r->n_prompt_ids)
        __builtin_trap();
    for (size_t i = 0; i < r->n_prompt_ids; i++)
        if (r->prompt_ids[i] < 0 || r->prompt_ids[i] >= lim->n_vocab)
            __builtin_trap();
    if (r->format == SRV_FORMAT_JSON_SCHEMA && !r->schema)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    srv_limits lim = {.max_messages = 8, .max_tokens = 512, .n_vocab = 32000};
    for (int k = 0; k < 2; k++) {
        srv_request r;
        srv_error e;
        int rc =
            request_parse((const char *)data, size, k ? SRV_CHAT : SRV_COMPLETION, &lim, &r, &e);
        if (rc == 0)
            check(&r, &lim);
        else if ((e.status != 400 && e.status != 500) || !e.message[0] || !e.type)
            __builtin_trap();
        request_free(&r);
    }
    return 0;
}
