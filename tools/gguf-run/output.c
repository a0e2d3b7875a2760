/*
 * output.c — what gguf-run reports: stdout with every write checked (a full
 * disk or closed descriptor is an error with its reason, never a silent
 * exit 0), the --json object (JSON strings through tools/common's escaper),
 * the -v lines of the stream and the summary line on stderr.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/json.h"
#include "gguf-run/gguf-run.h"

/* errno of stdout's first failed write or flush; 0 while all succeeded. */
static int out_errno;
/* The last byte out_write wrote was not a newline. */
static bool out_mid_line;

static bool out_check(bool ok)
{
    if (!ok && !out_errno)
        out_errno = errno ? errno : EIO;
    return !out_errno;
}

bool out_write(const void *p, size_t n)
{
    if (out_errno || n == 0)
        return !out_errno;
    errno = 0;
    out_mid_line = ((const char *)p)[n - 1] != '\n';
    return out_check(fwrite(p, 1, n, stdout) == n);
}

void out_compile_progress(void *user, int done, int total, const char *kernel)
{
    (void)user;
    (void)kernel;
    static bool shown;
    if (out_mid_line && isatty(1))
        return; /* not over a line of text on the same terminal */
    if (done < total) {
        fprintf(stderr, "\rgguf-run: compiling kernels %d/%d", done, total);
        shown = true;
    } else if (shown) {
        fprintf(stderr, "\r%*s\r", 40, "");
        shown = false;
    }
}

bool out_printf(const char *fmt, ...)
{
    if (out_errno)
        return false;
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    int n = vfprintf(stdout, fmt, ap);
    va_end(ap);
    return out_check(n >= 0 && !ferror(stdout));
}

bool out_flush(void)
{
    if (out_errno)
        return false;
    errno = 0;
    return out_check(fflush(stdout) == 0);
}

int out_finish(int rc)
{
    out_flush();
    errno = 0;
    out_check(fclose(stdout) == 0);
    if (!out_errno)
        return rc;
    fprintf(stderr, "gguf-run: writing output: %s\n", strerror(out_errno));
    return 1;
}

void verbose_line(run *r, const char *fmt, ...)
{
    char line[256]; /* the lines are short; a longer one is cut */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof line - 2 ? (size_t)n : sizeof line - 2;
    line[len++] = '\n';
    if (r->hold_verbose)
        buf_add(&r->verbose, line, len); /* out of memory: the line is lost, nothing else */
    else
        fwrite(line, 1, len, stderr);
}

void verbose_flush(run *r)
{
    if (r->verbose.len)
        fwrite(r->verbose.data, 1, r->verbose.len, stderr);
    r->verbose.len = 0;
}

static void json_ids(FILE *o, const int32_t *ids, size_t n)
{
    fputc('[', o);
    for (size_t i = 0; i < n; i++)
        fprintf(o, "%s%d", i ? ", " : "", ids[i]);
    fputc(']', o);
}

void summary(const run *r)
{
    char cached[64] = "";
    if (r->cached_tokens)
        snprintf(cached, sizeof cached, " (+%zu cached, loaded in %.0f ms)", r->cached_tokens,
                 r->cache_ms);
    fprintf(stderr,
            "gguf-run: load %.0f ms | prompt %zu tok%s, %.1f tok/s | decode %zu tok, %.1f tok/s | "
            "%d dispatches/token | %s\n",
            r->load_ms, r->prompt_tokens, cached,
            r->prompt_ms > 0 ? (double)r->prompt_tokens * 1e3 / r->prompt_ms : 0.0,
            r->decode_tokens,
            r->decode_ms > 0 ? (double)r->decode_tokens * 1e3 / r->decode_ms : 0.0,
            r->dispatches_per_token, glesc_context_caps(r->ctx)->renderer);
    if (r->o->verbose) {
        /* the peak since the load: the weights, the cache, and what steps took */
        glesc_memory_stats ms;
        glesc_context_memory(r->ctx, &ms);
        glesc_model_info mi;
        glesc_model_get_info(r->model, &mi);
        double mib = 1.0 / 1048576.0;
        uint64_t kv = ms.peak_persistent_bytes - mi.gpu_bytes,
                 act = ms.max_activation_requested_bytes;
        fprintf(stderr,
                "gguf-run: GPU memory at its peak: %.1f MiB = weights %.1f + KV cache %.1f + "
                "activations %.1f (the most held at once) + pool slack %.1f\n",
                (double)ms.peak_total_bytes * mib, (double)mi.gpu_bytes * mib, (double)kv * mib,
                (double)act * mib,
                (double)(ms.peak_total_bytes - ms.peak_persistent_bytes - act) * mib);
    }
}

bool print_json(const run *r, const int32_t *prompt_ids, size_t n_prompt)
{
    /* Built in memory and written in one piece: a failed write leaves no
     * half object behind a success. */
    char *text = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&text, &len);
    if (!o) {
        fprintf(stderr, "gguf-run: out of memory for the JSON output\n");
        return false;
    }
    fputs("{\"prompt_ids\": ", o);
    json_ids(o, prompt_ids, n_prompt);
    fputs(", \"generated_ids\": ", o);
    json_ids(o, (const int32_t *)(const void *)r->generated.data,
             r->generated.len / sizeof(int32_t));
    fputs(", \"text\": ", o);
    tool_json_string(o, r->text.data ? r->text.data : "", r->text.len);
    fprintf(o, ", \"stop\": \"%s\"", r->stop);
    fprintf(o,
            ", \"timings\": {\"load_ms\": %.3f, \"prompt_tokens\": %zu, \"prompt_ms\": %.3f, "
            "\"prompt_tok_per_s\": %.3f, \"prompt_cached_tokens\": %zu, \"decode_tokens\": %zu, "
            "\"decode_ms\": %.3f, "
            "\"decode_tok_per_s\": %.3f, \"dispatches_per_token\": %d}}\n",
            r->load_ms, r->prompt_tokens, r->prompt_ms,
            r->prompt_ms > 0 ? (double)r->prompt_tokens * 1e3 / r->prompt_ms : 0.0,
            r->cached_tokens, r->decode_tokens, r->decode_ms,
            r->decode_ms > 0 ? (double)r->decode_tokens * 1e3 / r->decode_ms : 0.0,
            r->dispatches_per_token);
    if (fclose(o) != 0 || !text) {
        free(text);
        fprintf(stderr, "gguf-run: out of memory for the JSON output\n");
        return false;
    }
    bool ok = out_write(text, len) && out_flush();
    free(text);
    return ok;
}
