/*
 * output.c — what gguf-run reports: the --json object (JSON strings through
 * tools/common's escaper) and the summary line on stderr.
 */
#include <stdio.h>

#include "common/json.h"
#include "gguf-run/gguf-run.h"

static void json_ids(FILE *o, const int32_t *ids, size_t n)
{
    fputc('[', o);
    for (size_t i = 0; i < n; i++)
        fprintf(o, "%s%d", i ? ", " : "", ids[i]);
    fputc(']', o);
}

void summary(const run *r)
{
    fprintf(stderr,
            "gguf-run: load %.0f ms | prompt %zu tok, %.1f tok/s | decode %zu tok, %.1f tok/s | "
            "%d dispatches/token | %s\n",
            r->load_ms, r->prompt_tokens,
            r->prompt_ms > 0 ? (double)r->prompt_tokens * 1e3 / r->prompt_ms : 0.0,
            r->decode_tokens,
            r->decode_ms > 0 ? (double)r->decode_tokens * 1e3 / r->decode_ms : 0.0,
            r->dispatches_per_token, glesc_context_caps(r->ctx)->renderer);
}

void print_json(const run *r, const int32_t *prompt_ids, size_t n_prompt)
{
    FILE *o = stdout;
    fputs("{\"prompt_ids\": ", o);
    json_ids(o, prompt_ids, n_prompt);
    fputs(", \"generated_ids\": ", o);
    json_ids(o, (const int32_t *)(const void *)r->generated.data,
             r->generated.len / sizeof(int32_t));
    fputs(", \"text\": ", o);
    tool_json_string(o, r->text.data ? r->text.data : "", r->text.len);
    fprintf(o, ", \"stop\": \"%s\"", r->stop ? r->stop : "none");
    fprintf(o,
            ", \"timings\": {\"load_ms\": %.3f, \"prompt_tokens\": %zu, \"prompt_ms\": %.3f, "
            "\"prompt_tok_per_s\": %.3f, \"decode_tokens\": %zu, \"decode_ms\": %.3f, "
            "\"decode_tok_per_s\": %.3f, \"dispatches_per_token\": %d}}\n",
            r->load_ms, r->prompt_tokens, r->prompt_ms,
            r->prompt_ms > 0 ? (double)r->prompt_tokens * 1e3 / r->prompt_ms : 0.0,
            r->decode_tokens, r->decode_ms,
            r->decode_ms > 0 ? (double)r->decode_tokens * 1e3 / r->decode_ms : 0.0,
            r->dispatches_per_token);
}
