/*
 * output.c — gguf-bench's results: a markdown table in llama-bench's layout
 * as the tests run, then what bounds each test and the memory it held, or
 * all of it as one JSON object (--json, --json-file).
 */
#include <math.h>
#include <string.h>

#include "common/json.h"
#include "gguf-bench/gguf-bench.h"

static const char *const kind_names[K_N] = {"matmul", "attention", "norm",   "rope",
                                            "rows",   "softmax",   "reduce", "eltwise"};

/* The kind's name in a test: matmuls are GEMVs in decode steps. */
const char *kind_name(int k, bool tg)
{
    return k == K_MATMUL ? (tg ? "gemv" : "gemm") : kind_names[k];
}

static void fmt_size(char *buf, size_t cap, uint64_t bytes)
{
    if (bytes >= (1ull << 30))
        snprintf(buf, cap, "%.2f GiB", (double)bytes / (1ull << 30));
    else
        snprintf(buf, cap, "%.2f MiB", (double)bytes / (1ull << 20));
}

static void fmt_params(char *buf, size_t cap, uint64_t n)
{
    if (n >= 1000000000u)
        snprintf(buf, cap, "%.2f B", (double)n * 1e-9);
    else
        snprintf(buf, cap, "%.2f M", (double)n * 1e-6);
}

/* Weight bytes per second of a tg test, in GB/s (0 for pp). */
static double weight_gbps(const result *r)
{
    return r->n_gen ? (double)r->meta->weight_bytes * r->avg_ts * 1e-9 : 0;
}

static const char *backend(const options *o)
{
    return o->portable ? "GLES portable" : "GLES";
}

const char *kv_name(const result *r, char buf[32])
{
    snprintf(buf, 32, r->kv == r->kv_v ? "%s" : "%s/%s", glesc_dtype_name(r->kv),
             glesc_dtype_name(r->kv_v));
    return buf;
}

void table_header(void)
{
    printf("| %-30s | %10s | %10s | %-13s | %3s | %15s | %20s |\n", "model", "size", "params",
           "backend", "kv", "test", "t/s");
    printf("| %.30s | %.9s: | %.9s: | %.13s | %.3s | %.14s: | %.19s: |\n",
           "------------------------------", "----------", "----------", "-------------", "---",
           "---------------", "--------------------");
}

void table_row(const options *o, const result *r)
{
    char sz[32], pr[32], ts[48], kv[32];
    fmt_size(sz, sizeof sz, r->meta->size);
    fmt_params(pr, sizeof pr, r->meta->params);
    snprintf(ts, sizeof ts, "%.2f ± %.2f", r->avg_ts, r->stddev_ts);
    /* "±" is two bytes in one column */
    printf("| %-30s | %10s | %10s | %-13s | %3s | %15s | %21s |\n", r->meta->desc, sz, pr,
           backend(o), kv_name(r, kv), r->test, ts);
    fflush(stdout);
}

/* What bounds each test: dispatches, GPU time by kernel kind, bandwidth. */
void detail_table(const result *res, int n, const glesc_roofline *roof)
{
    bool used[K_N] = {false};
    bool any_profile = false, any_tg = false;
    for (int i = 0; i < n; i++) {
        any_profile |= res[i].profiled;
        any_tg |= res[i].n_gen > 0;
        for (int k = 0; k < K_N; k++)
            used[k] |= res[i].kinds[k].kernels > 0;
    }
    printf("\n| %-30s | %15s | disp/step | barr/step | GPU ms/step | GPU/wall | host ms b/s/r | "
           "weights "
           "GB/s | of copy | of read |",
           "model", "test");
    for (int k = 0; k < K_N; k++)
        if (used[k])
            printf(" %15s |", k == K_MATMUL ? "gemv/gemm ms" : kind_names[k]);
    printf("\n| %.30s | %.14s: | --------: | --------: | ----------: | -------: | ------------: | "
           "-----------: | ------: | ------: |",
           "------------------------------", "---------------");
    for (int k = 0; k < K_N; k++)
        if (used[k])
            printf(" --------------: |");
    printf("\n");
    for (int i = 0; i < n; i++) {
        const result *r = &res[i];
        double step_ns = r->n_gen ? r->avg_ns / r->n_gen : r->avg_ns;
        double gbps = weight_gbps(r);
        char gpu[32] = "-", busy[32] = "-", wb[32] = "-", oc[32] = "-", orr[32] = "-";
        if (r->profiled) {
            snprintf(gpu, sizeof gpu, "%.3f", (double)r->gpu_ns * 1e-6);
            /* a decode step's wall time (tg) or the prompt's (pp: the
             * profile times one batch; compare per batch) */
            int batches = r->n_prompt ? (r->n_prompt + r->n_batch - 1) / r->n_batch : 1;
            snprintf(busy, sizeof busy, "%.0f%%",
                     100.0 * (double)r->gpu_ns * batches / fmax(step_ns, 1));
        }
        if (r->n_gen) {
            snprintf(wb, sizeof wb, gbps >= 10 ? "%.1f" : "%.3f", gbps);
            if (roof && roof->copy_gbps > 0) {
                snprintf(oc, sizeof oc, "%.0f%%", 100.0 * gbps / roof->copy_gbps);
                snprintf(orr, sizeof orr, "%.0f%%", 100.0 * gbps / roof->read_gbps);
            }
        }
        char host[48];
        snprintf(host, sizeof host, "%.2f/%.2f/%.2f", r->build_ns * 1e-6, r->submit_ns * 1e-6,
                 r->read_ns * 1e-6);
        printf("| %-30s | %15s | %9d | %9.1f | %11s | %8s | %13s | %12s | %7s | %7s |",
               r->meta->desc, r->test, r->dispatches, r->barriers, gpu, busy, host, wb, oc, orr);
        for (int k = 0; k < K_N; k++) {
            if (!used[k])
                continue;
            char cell[48] = "-";
            if (r->profiled && r->kinds[k].kernels)
                snprintf(cell, sizeof cell, "%.3f (%.0f%%)", (double)r->kinds[k].gpu_ns * 1e-6,
                         100.0 * (double)r->kinds[k].gpu_ns / fmax((double)r->gpu_ns, 1));
            printf(" %15s |", cell);
        }
        printf("\n");
    }
    if (any_profile)
        printf("\nGPU ms/step: per decode step (tg) or per prompt batch (pp), the sum of its "
               "kernels' GPU times (each with its dispatch and barrier latency) in one extra "
               "step timed kernel by kernel; GPU/wall: that sum over the timed runs' wall time "
               "per step (near or above 100%%: the GPU never waits for the CPU).\n");
    printf("host ms b/s/r: per step (tg) or prompt (pp) of the timed runs, the host's time "
           "building the graph / submitting it (glesc_graph_compute) / reading the logits "
           "back, waiting for the GPU included (glesc_eval_stats).\n");
    if (any_tg)
        printf("weights GB/s: weight bytes a decode step reads × tg's tokens per second.\n");
}

static double mib(uint64_t b)
{
    return (double)b / (1 << 20);
}

/* The loads and the GPU memory each test held at its peak. */
void memory_table(const model_meta *meta, const options *o, const result *res, int n)
{
    printf("\n| %-30s | %7s | %9s | %11s | %12s |\n", "model", "load s", "file GB/s", "weights MiB",
           "host RSS MiB");
    printf("| %.30s | ------: | --------: | ----------: | -----------: |\n",
           "------------------------------");
    for (int i = 0; i < o->n_models; i++)
        if (meta[i].load_s > 0)
            printf("| %-30s | %7.3f | %9.2f | %11.1f | %12.1f |\n", meta[i].desc, meta[i].load_s,
                   (double)meta[i].size / meta[i].load_s * 1e-9, mib(meta[i].gpu_weight_bytes),
                   mib(meta[i].rss_after_load));
    if (n) {
        printf("\n| %-30s | %3s | %15s | %12s | %11s | %8s | %15s | %14s | %11s |\n", "model", "kv",
               "test", "GPU MiB held", "weights MiB", "KV MiB", "activations MiB", "pool slack MiB",
               "held/(W+KV)");
        printf("| %.30s | --- | %.14s: | -----------: | ----------: | -------: | "
               "--------------: | -------------: | ----------: |\n",
               "------------------------------", "---------------");
    }
    for (int i = 0; i < n; i++) {
        const result *r = &res[i];
        char kv[32];
        printf("| %-30s | %3s | %15s | %12.1f | %11.1f | %8.1f | %15.1f | %14.1f | %11.3f |\n",
               r->meta->desc, kv_name(r, kv), r->test, mib(r->mem_held), mib(r->mem_weights),
               mib(r->mem_kv), mib(r->mem_act), mib(r->mem_slack),
               (double)r->mem_held / fmax(1, (double)(r->mem_weights + r->mem_kv)));
    }
    printf("\nload s: glesc_model_load's wall time; host RSS: the process's resident memory "
           "right after it. GPU MiB held: the most GPU buffer memory held at once during a "
           "test's session and timed runs (glesc_context_memory), split into the weights, the "
           "KV cache, activations and kernel scratch, and pool slack (released buffers kept for "
           "reuse, size-class rounding).\n");
}

void json_kv_str(FILE *out, const char *key, const char *v, bool comma)
{
    fprintf(out, "\"%s\": ", key);
    if (v)
        tool_json_string(out, v, strlen(v));
    else
        fprintf(out, "null");
    if (comma)
        fprintf(out, ", ");
}

void print_json(FILE *out, const options *o, const glesc_caps *c, const glesc_roofline *roof,
                const result *res, int n, const ttft_result *tt, int n_tt)
{
    fprintf(out, "{");
    json_kv_str(out, "glesc_version", glesc_version(), true);
    char date[32];
    time_t t = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    json_kv_str(out, "date", date, true);
    fprintf(out, "\"device\": {");
    json_kv_str(out, "vendor", c->vendor, true);
    json_kv_str(out, "renderer", c->renderer, true);
    json_kv_str(out, "device_class", c->device_class, true);
    json_kv_str(out, "gl_version", c->version, true);
    json_kv_str(out, "platform", glesc_platform_name(c->platform), true);
    json_kv_str(out, "backend", backend(o), true);
    fprintf(out,
            "\"portable\": %s, \"subgroups\": %s, \"subgroup_size\": %d, "
            "\"max_compute_invocations\": %d, \"max_compute_shared_memory\": %d, "
            "\"max_storage_block_size\": %llu}, ",
            o->portable ? "true" : "false", c->has_subgroup ? "true" : "false", c->subgroup_size,
            c->max_compute_invocations, c->max_compute_shared_memory,
            (unsigned long long)c->max_storage_block_size);
    if (roof && roof->bytes)
        fprintf(out,
                "\"roofline\": {\"bytes\": %llu, \"local_size\": %d, \"copy_gbps\": %.3f, "
                "\"read_gbps\": %.6g, \"copy_ns\": %llu, \"read_ns\": %llu}, ",
                (unsigned long long)roof->bytes, roof->local_size, roof->copy_gbps, roof->read_gbps,
                (unsigned long long)roof->copy_ns, (unsigned long long)roof->read_ns);
    else
        fprintf(out, "\"roofline\": null, ");
    fprintf(out, "\"results\": [");
    for (int i = 0; i < n; i++) {
        const result *r = &res[i];
        fprintf(out, "%s\n  {", i ? "," : "");
        json_kv_str(out, "model_filename", r->file, true);
        json_kv_str(out, "model_desc", r->meta->desc, true);
        json_kv_str(out, "model_type", r->meta->ftype, true);
        json_kv_str(out, "arch", r->meta->arch, true);
        fprintf(
            out,
            "\"model_size\": %llu, \"model_n_params\": %llu, \"weight_bytes_per_token\": %llu, ",
            (unsigned long long)r->meta->size, (unsigned long long)r->meta->params,
            (unsigned long long)r->meta->weight_bytes);
        fprintf(out,
                "\"load_s\": %.4f, \"host_rss_after_load\": %llu, \"gpu_memory\": {\"held\": "
                "%llu, \"weights\": %llu, \"kv_cache\": %llu, \"activations\": %llu, "
                "\"pool_slack\": %llu}, ",
                r->meta->load_s, (unsigned long long)r->meta->rss_after_load,
                (unsigned long long)r->mem_held, (unsigned long long)r->mem_weights,
                (unsigned long long)r->mem_kv, (unsigned long long)r->mem_act,
                (unsigned long long)r->mem_slack);
        json_kv_str(out, "backend", backend(o), true);
        json_kv_str(out, "test", r->test, true);
        char kv[32];
        json_kv_str(out, "kv_type", kv_name(r, kv), true);
        fprintf(out,
                "\"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, \"n_batch\": %d, \"reps\": %d, "
                "\"greedy\": %s, ",
                r->n_prompt, r->n_gen, r->n_depth, r->n_batch, r->reps,
                r->greedy ? "true" : "false");
        int tokens = r->n_prompt ? r->n_prompt : r->n_gen;
        fprintf(out, "\"samples_ns\": [");
        for (int k = 0; k < r->reps; k++)
            fprintf(out, "%s%llu", k ? ", " : "", (unsigned long long)r->ns[k]);
        fprintf(out, "], \"samples_ts\": [");
        for (int k = 0; k < r->reps; k++)
            fprintf(out, "%s%.3f", k ? ", " : "", (double)tokens / ((double)r->ns[k] * 1e-9));
        fprintf(out,
                "], \"avg_ns\": %.0f, \"stddev_ns\": %.0f, \"avg_ts\": %.3f, \"stddev_ts\": %.3f, ",
                r->avg_ns, r->stddev_ns, r->avg_ts, r->stddev_ts);
        fprintf(out, "\"host_ns_per_step\": {\"build\": %.0f, \"submit\": %.0f, \"read\": %.0f}, ",
                r->build_ns, r->submit_ns, r->read_ns);
        fprintf(out,
                "\"dispatches_per_step\": %d, \"kernels_per_step\": %d, \"barriers_per_step\": "
                "%.1f, ",
                r->dispatches, r->kernels, r->barriers);
        if (r->n_gen) {
            double gbps = weight_gbps(r);
            fprintf(out, "\"weight_gbps\": %.6g, ", gbps);
            if (roof && roof->bytes)
                fprintf(out, "\"weight_bw_of_copy\": %.4f, \"weight_bw_of_read\": %.4f, ",
                        gbps / roof->copy_gbps, gbps / roof->read_gbps);
            else
                fprintf(out, "\"weight_bw_of_copy\": null, \"weight_bw_of_read\": null, ");
        } else {
            fprintf(out, "\"weight_gbps\": null, \"weight_bw_of_copy\": null, "
                         "\"weight_bw_of_read\": null, ");
        }
        if (!r->profiled) {
            fprintf(out, "\"profile\": null}");
            continue;
        }
        fprintf(out, "\"profile\": {\"steps\": %d, \"gpu_ns_per_step\": %llu, \"kinds\": {",
                r->profile_steps, (unsigned long long)r->gpu_ns);
        bool first = true;
        for (int k = 0; k < K_N; k++) {
            if (!r->kinds[k].kernels)
                continue;
            fprintf(out, "%s\"%s\": {\"gpu_ns\": %llu, \"kernels\": %d, \"dispatches\": %d}",
                    first ? "" : ", ", kind_name(k, r->n_gen > 0),
                    (unsigned long long)r->kinds[k].gpu_ns, r->kinds[k].kernels,
                    r->kinds[k].dispatches);
            first = false;
        }
        fprintf(out, "}}}");
    }
    fprintf(out, "\n]");
    if (n_tt)
        ttft_json(out, tt, n_tt);
    fprintf(out, "}\n");
}
