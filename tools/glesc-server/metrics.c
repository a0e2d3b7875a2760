/*
 * metrics.c — GET /metrics in Prometheus's text format: requests by
 * status, tokens (prompt, of them cached, generated), the worker's time on
 * prompts and decode steps with the rates they give, the queue's depth,
 * busy slots and the GPU memory glesc holds (as the worker last read it:
 * only the GPU thread may ask the context).
 */
#include <stdio.h>
#include <stdlib.h>

#include "glesc-server/glesc-server.h"

/* The codes counted apart; another 4xx counts as 400, another 5xx as 500. */
static const int statuses[SRV_N_STATUS] = {200, 400, 401, 404, 405, 413, 499, 500, 503};

void metrics_count(srv_metrics *m, int status)
{
    int k = status >= 500 ? 7 : status >= 400 ? 1 : 0;
    for (int i = 0; i < SRV_N_STATUS; i++)
        if (statuses[i] == status)
            k = i;
    atomic_fetch_add(&m->requests[k], 1);
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP glesc_%s %s\n# TYPE glesc_%s %s\n", name, help, name, type);
}

static void value(FILE *f, const char *name, const char *type, const char *help, double v)
{
    family(f, name, type, help);
    fprintf(f, "glesc_%s %.9g\n", name, v);
}

char *metrics_text(srv_metrics *m, int n_slots, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        return NULL;
    family(f, "requests_total", "counter", "HTTP responses by status code.");
    for (int i = 0; i < SRV_N_STATUS; i++)
        fprintf(f, "glesc_requests_total{code=\"%d\"} %llu\n", statuses[i],
                (unsigned long long)atomic_load(&m->requests[i]));
    double p_s = (double)atomic_load(&m->prompt_ns) * 1e-9;
    double d_s = (double)atomic_load(&m->decode_ns) * 1e-9;
    double p_t = (double)atomic_load(&m->prompt_tokens);
    double c_t = (double)atomic_load(&m->cached_tokens);
    double g_t = (double)atomic_load(&m->generated_tokens);
    value(f, "prompt_tokens_total", "counter", "Prompt tokens of the requests (cached ones too).",
          p_t);
    value(f, "prompt_tokens_cached_total", "counter",
          "Prompt tokens a slot's KV cache held already (not evaluated).", c_t);
    value(f, "generated_tokens_total", "counter", "Tokens generated.", g_t);
    value(f, "prompt_seconds_total", "counter", "GPU thread time evaluating prompts.", p_s);
    value(f, "decode_seconds_total", "counter", "GPU thread time in decode steps.", d_s);
    value(f, "prompt_tokens_per_second", "gauge",
          "Evaluated prompt tokens per second of prompt time.", p_s > 0 ? (p_t - c_t) / p_s : 0);
    value(f, "decode_tokens_per_second", "gauge",
          "Generated tokens per second of decode time (all slots together).",
          d_s > 0 ? g_t / d_s : 0);
    value(f, "requests_cancelled_total", "counter", "Requests whose client went away.",
          (double)atomic_load(&m->cancelled));
    value(f, "requests_rejected_busy_total", "counter", "Requests refused with 503: queue full.",
          (double)atomic_load(&m->rejected_busy));
    value(f, "queue_depth", "gauge", "Requests waiting for a slot.",
          (double)atomic_load(&m->queue_depth));
    value(f, "slots_busy", "gauge", "Slots generating.", (double)atomic_load(&m->slots_busy));
    value(f, "slots_total", "gauge", "Slots (-np).", n_slots);
    family(f, "gpu_memory_bytes", "gauge", "GPU memory glesc holds, by holder.");
    fprintf(f, "glesc_gpu_memory_bytes{kind=\"total\"} %llu\n",
            (unsigned long long)atomic_load(&m->gpu_total));
    fprintf(f, "glesc_gpu_memory_bytes{kind=\"persistent\"} %llu\n",
            (unsigned long long)atomic_load(&m->gpu_persistent));
    fprintf(f, "glesc_gpu_memory_bytes{kind=\"kv_cache\"} %llu\n",
            (unsigned long long)atomic_load(&m->gpu_kv));
    fprintf(f, "glesc_gpu_memory_bytes{kind=\"activation\"} %llu\n",
            (unsigned long long)atomic_load(&m->gpu_activation));
    fprintf(f, "glesc_gpu_memory_bytes{kind=\"cached\"} %llu\n",
            (unsigned long long)atomic_load(&m->gpu_cached));
    bool err = ferror(f);
    if (fclose(f) || err) {
        free(buf);
        return NULL;
    }
    return buf;
}
