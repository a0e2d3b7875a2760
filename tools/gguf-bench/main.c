/*
 * gguf-bench — llama-bench's figures for glesc, on the public API: prompt
 * processing (ppP: P tokens in one eval, the last logits row read back) and
 * text generation (tgN: N evals of one token, each reading its logits) at a
 * depth of D tokens already in the KV cache (a prompt evaluated first, not
 * timed), repeated -r times after an untimed warm-up repetition; tokens are
 * random ids, as llama-bench's. Results: a markdown table in llama-bench's
 * layout (model, size, params, backend, kv, test, t/s ± stddev over the
 * repetitions) and, per test, what bounds it: GPU dispatches per step, GPU
 * time per kernel kind (gemv, gemm, attention, norm, rope, rows, eltwise,
 * ...) from one extra step of a session created with timing (timer queries
 * would slow the timed runs), and for tg the effective weight bandwidth
 * (weight bytes a decode step reads × tokens per second) as a fraction of
 * two rooflines measured in the same run (glesc_context_roofline: a copy
 * kernel and a read-only one). --json prints all of it as one JSON object.
 * --portable runs the fallback path a small GPU gets: no subgroups, 128
 * invocations per workgroup, 16 KiB shared memory, 128 MiB storage blocks.
 * --greedy adds, after the tg tests, "tgN greedy" for each: N steps of
 * greedy decoding as glesc_generate runs it, pipelined through the public
 * API (glesc_session_eval_greedy: each step's token is the arg max the GPU
 * took, read while the next step runs; no logits read back).
 * --ttft P measures the time to the first tokens (a P-token prompt's eval,
 * then the first decode step) in fresh processes of itself: cold (empty
 * program caches, glesc's and the driver's), warm (the caches the cold run
 * left), and with only glesc's cache warm (see "Time to first token").
 *
 * main.c runs the tests of each model in order; gguf-bench.h names the
 * other files.
 *
 * usage: gguf-bench -m FILE [-m FILE ...] [-p 512] [-n 128] [-d 0] [-r 3] [options]
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/file.h"
#include "gguf-bench/gguf-bench.h"

int main(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    glesc_context_options co;
    if ((rc = context_options(&o, &co)) != 0)
        return rc;
    if (o.ttft_child)
        return ttft_child(&o, &co);
    glesc_context *ctx;
    if (glesc_context_create(&co, &ctx) != GLESC_OK) {
        fprintf(stderr, "gguf-bench: no GPU context: %s\n", glesc_last_errmsg());
        return 1;
    }
    bench_ctx = ctx;
    const glesc_caps *caps = glesc_context_caps(ctx);
    int n_tests = o.n_p + o.n_n * (o.greedy ? 2 : 1); /* --greedy: each tg twice */
    int max_results = o.n_models * o.n_kv * n_tests * o.n_d;
    result *res = calloc((size_t)max_results, sizeof *res);
    model_meta *meta = calloc((size_t)o.n_models, sizeof *meta);
    rc = res && meta ? 0 : 1;
    /* every file's header first: a wrong path fails before any measuring */
    for (int mi = 0; mi < o.n_models && !rc; mi++)
        rc = read_meta(o.models[mi], &meta[mi]);
    glesc_roofline roof = {0};
    if (!rc && o.roofline_mib > 0) {
        if (o.verbose)
            fprintf(stderr, "gguf-bench: rooflines over %ld MiB\n", o.roofline_mib);
        if (glesc_context_roofline(ctx, (uint64_t)o.roofline_mib << 20, 0, &roof) != GLESC_OK) {
            fprintf(stderr, "gguf-bench: %s\n", glesc_context_errmsg(ctx));
            rc = 1;
        }
    }
    int n_res = 0;
    uint64_t rng = o.seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
    bool tests = false; /* -p 0 -n 0 (e.g. with --ttft): no test table */
    for (int t = 0; t < o.n_p + o.n_n; t++)
        tests |= (t < o.n_p ? o.p[t] : o.n[t - o.n_p]) > 0;
    if (!o.json && !rc && tests)
        table_header();
    for (int mi = 0; mi < o.n_models && !rc; mi++) {
        glesc_model *m;
        double t0 = now_s();
        if (glesc_model_load(ctx, o.models[mi], NULL, &m) != GLESC_OK) {
            fprintf(stderr, "gguf-bench: %s\n", glesc_last_errmsg());
            rc = 1;
            break;
        }
        meta[mi].load_s = now_s() - t0;
        meta[mi].rss_after_load = tool_rss_bytes();
        glesc_model_info lmi;
        glesc_model_get_info(m, &lmi);
        meta[mi].gpu_weight_bytes = lmi.gpu_bytes;
        if (o.verbose)
            fprintf(stderr, "gguf-bench: %s loaded in %.1f s\n", o.models[mi], now_s() - t0);
        for (int kv = 0; kv < o.n_kv && !rc; kv++)
            for (int t = 0; t < n_tests && !rc; t++)
                for (int d = 0; d < o.n_d && !rc; d++) {
                    int pp = t < o.n_p ? o.p[t] : 0, tg = t < o.n_p ? 0 : o.n[(t - o.n_p) % o.n_n];
                    if (!pp && !tg)
                        continue;
                    result *r = &res[n_res];
                    r->file = o.models[mi];
                    r->meta = &meta[mi];
                    r->n_prompt = pp;
                    r->n_gen = tg;
                    r->n_depth = o.d[d];
                    r->n_batch = o.n_batch;
                    r->kv = o.kv[kv];
                    r->kv_v = o.kv_v_set ? o.kv_v : o.kv[kv];
                    r->reps = o.reps;
                    r->greedy = t >= o.n_p + o.n_n;
                    int w =
                        snprintf(r->test, sizeof r->test, "%s%d", pp ? "pp" : "tg", pp ? pp : tg);
                    if (r->greedy)
                        w += snprintf(r->test + w, sizeof r->test - (size_t)w, " greedy");
                    if (r->n_depth)
                        snprintf(r->test + w, sizeof r->test - (size_t)w, " @ d%d", r->n_depth);
                    if (o.verbose)
                        fprintf(stderr, "gguf-bench: %s %s\n", meta[mi].desc, r->test);
                    if ((rc = run_test(m, &o, r, &rng)) != 0)
                        break;
                    n_res++;
                    if (!o.json)
                        table_row(&o, r);
                }
        glesc_model_destroy(m);
    }
    ttft_result *tt = o.ttft ? calloc((size_t)o.n_models * TTFT_N, sizeof *tt) : NULL;
    int n_tt = 0;
    if (!rc && o.ttft && !tt)
        rc = 1;
    for (int mi = 0; mi < o.n_models && o.ttft && !rc; mi++)
        if ((rc = ttft_measure(&o, o.models[mi], &meta[mi], tt + n_tt)) == 0)
            n_tt += TTFT_N;
    if (!rc && o.json_file) {
        FILE *jf = fopen(o.json_file, "w");
        if (jf) {
            print_json(jf, &o, caps, o.roofline_mib > 0 ? &roof : NULL, res, n_res, tt, n_tt);
            rc = ferror(jf) | (fclose(jf) != 0);
        }
        if (!jf || rc) {
            fprintf(stderr, "gguf-bench: cannot write %s: %s\n", o.json_file, strerror(errno));
            rc = 1;
        }
    }
    if (!rc && o.json) {
        print_json(stdout, &o, caps, o.roofline_mib > 0 ? &roof : NULL, res, n_res, tt, n_tt);
    } else if (!rc) {
        if (tests)
            detail_table(res, n_res, o.roofline_mib > 0 ? &roof : NULL);
        memory_table(meta, &o, res, n_res);
        if (n_tt)
            ttft_table(tt, n_tt);
        if (o.roofline_mib > 0)
            printf("rooflines (%llu MiB, %d invocations): copy %.1f GB/s (read + write), read-only "
                   "%.1f GB/s.\n",
                   (unsigned long long)(roof.bytes >> 20), roof.local_size, roof.copy_gbps,
                   roof.read_gbps);
        printf("glesc %s on %s (%s)%s.\n", glesc_version(), caps->renderer, caps->version,
               o.portable ? ", portable path" : "");
    }
    for (int i = 0; i < n_res; i++)
        free(res[i].ns);
    if (res && n_res < max_results)
        free(res[n_res].ns);
    free(res);
    free(meta);
    free(tt);
    glesc_context_destroy(ctx);
    return rc;
}
