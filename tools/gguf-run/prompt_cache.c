/*
 * prompt_cache.c — gguf-run's --prompt-cache FILE, as llama-cli's: the
 * session's state (glesc_session_state_*: the prompt's tokens and the KV
 * cache of their positions) is saved after the prompt is evaluated; a
 * later run loads it when it was saved for the same model and KV type,
 * keeps the positions whose tokens start its own prompt and evaluates only
 * the rest. In a chat the state is the system message's
 * (glesc_chat_prefill). A state that does not load (another model, a
 * corrupted file) is a warning naming the reason, and the whole prompt is
 * evaluated and saved over it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gguf-run/gguf-run.h"

/* Loads the file into the session: its tokens (malloc'ed, *n of them), or
 * NULL with *n 0 when there is no file or it does not load (a warning). */
static int32_t *load_state(run *r, size_t *n)
{
    const char *path = r->o->prompt_cache;
    *n = 0;
    if (access(path, F_OK) != 0 && errno == ENOENT) {
        if (r->o->verbose)
            fprintf(stderr, "gguf-run: prompt cache: %s does not exist yet\n", path);
        return NULL;
    }
    size_t cap = (size_t)glesc_session_n_ctx(r->sess);
    int32_t *cached = malloc(cap * sizeof *cached);
    if (!cached) {
        fprintf(stderr, "gguf-run: out of memory\n");
        return NULL;
    }
    /* the sampler stays as the options made it (its seed) */
    if (glesc_session_state_load_file(r->sess, NULL, path, cached, cap, n) != GLESC_OK) {
        fprintf(stderr, "gguf-run: warning: --prompt-cache: %s; the whole prompt is evaluated\n",
                glesc_last_errmsg());
        glesc_session_truncate(r->sess, 0);
        free(cached);
        *n = 0;
        return NULL;
    }
    return cached;
}

size_t prompt_cache_load(run *r, const int32_t *ids, size_t n)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t n_cached = 0, k = 0;
    int32_t *cached = load_state(r, &n_cached);
    if (!cached)
        return 0;
    while (k < n && k < n_cached && cached[k] == ids[k])
        k++;
    free(cached);
    /* the prompt's last row: the state's own, or that token again */
    bool whole = k == n && n_cached == n && glesc_session_logits(r->sess);
    if (!whole && k == n)
        k--;
    glesc_session_truncate(r->sess, (int32_t)k);
    for (size_t i = 0; i < k; i++)
        glesc_sampler_accept_prompt(r->smp, ids[i]);
    r->cache_ms = ms_since(&t0);
    r->prompt_ms += r->cache_ms;
    r->cached_tokens = k;
    if (r->o->verbose)
        fprintf(stderr,
                "gguf-run: prompt cache: %zu of the prompt's %zu tokens from %s (%zu saved), "
                "%.1f ms\n",
                k, n, r->o->prompt_cache, n_cached, ms_since(&t0));
    return k;
}

int prompt_cache_save(run *r, const int32_t *ids, size_t n)
{
    if (r->o->prompt_cache_ro)
        return 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (glesc_session_state_save_file(r->sess, NULL, ids, n, r->o->prompt_cache) != GLESC_OK) {
        fprintf(stderr, "gguf-run: --prompt-cache: %s\n", glesc_last_errmsg());
        return -1;
    }
    if (r->o->verbose)
        fprintf(stderr, "gguf-run: prompt cache: %zu tokens saved to %s (%.1f KiB) in %.1f ms\n", n,
                r->o->prompt_cache, (double)glesc_session_state_size(r->sess, NULL, n) / 1024.0,
                ms_since(&t0));
    return 0;
}

int prompt_cache_chat(run *r, glesc_chat *chat)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t n_cached = 0, n = 0;
    int32_t *cached = load_state(r, &n_cached), *ids = NULL;
    int rc = 0;
    if (glesc_chat_prefill(chat, cached, n_cached, &ids, &n) != GLESC_OK) {
        fprintf(stderr, "gguf-run: --prompt-cache: %s\n", glesc_last_errmsg());
        rc = 1;
    } else if (n > 0 && n == n_cached && !memcmp(ids, cached, n * sizeof *ids)) {
        r->cached_tokens = n;
        r->cache_ms = ms_since(&t0);
        r->prompt_ms += r->cache_ms;
        if (r->o->verbose)
            fprintf(stderr, "gguf-run: prompt cache: the system message's %zu tokens from %s\n", n,
                    r->o->prompt_cache);
    } else if (n > 0) {
        r->prompt_tokens += n;
        r->prompt_ms += ms_since(&t0);
        rc = prompt_cache_save(r, ids, n) ? 1 : 0;
    } else if (r->o->verbose) {
        fprintf(stderr, "gguf-run: prompt cache: no system message to keep apart%s\n",
                r->o->system ? " (the template merges it into the first turn)" : "");
    }
    glesc_tokens_free(ids);
    free(cached);
    return rc;
}
