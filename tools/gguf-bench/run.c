/*
 * run.c — gguf-bench's measurements: a model's metadata from its GGUF
 * header (llama-bench's columns), a test's timed repetitions on one session
 * (an untimed warm-up first), and its per-kernel GPU times from one extra
 * step of a session created with timing.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "gguf-bench/gguf-bench.h"
#include "glesc_gguf.h"

glesc_context *bench_ctx;

enum kind kind_of(const char *name)
{
    static const struct {
        const char *op;
        enum kind k;
    } ops[] = {
        {"matmul", K_MATMUL},     {"attention", K_ATTENTION},
        {"rms_norm", K_NORM},     {"layer_norm", K_NORM},
        {"rope", K_ROPE},         {"get_rows", K_ROWS},
        {"set_rows", K_ROWS},     {"cpy", K_ROWS},
        {"concat", K_ROWS},       {"softmax", K_SOFTMAX},
        {"sum", K_REDUCE},        {"mean", K_REDUCE},
        {"reduce_max", K_REDUCE}, {"reduce_min", K_REDUCE},
        {"argmax", K_REDUCE},
    };
    size_t len = strcspn(name, "+");
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strlen(ops[i].op) == len && !strncmp(name, ops[i].op, len))
            return ops[i].k;
    return K_ELTWISE;
}

/* llama.cpp's names of general.file_type (llama_model_ftype_name). */
static const char *ftype_name(uint32_t id)
{
    static const char *const names[] = {
        [0] = "all F32",        [1] = "F16",
        [2] = "Q4_0",           [3] = "Q4_1",
        [7] = "Q8_0",           [8] = "Q5_0",
        [9] = "Q5_1",           [10] = "Q2_K - Medium",
        [11] = "Q3_K - Small",  [12] = "Q3_K - Medium",
        [13] = "Q3_K - Large",  [14] = "Q4_K - Small",
        [15] = "Q4_K - Medium", [16] = "Q5_K - Small",
        [17] = "Q5_K - Medium", [18] = "Q6_K",
        [32] = "BF16",
    };
    return id < sizeof names / sizeof names[0] && names[id] ? names[id] : NULL;
}

int read_meta(const char *path, model_meta *mm)
{
    memset(mm, 0, sizeof *mm);
    glesc_gguf *f;
    if (glesc_gguf_open(path, &f) != GLESC_OK) {
        fprintf(stderr, "gguf-bench: %s\n", glesc_last_errmsg());
        return 1;
    }
    const char *s;
    size_t len;
    if (glesc_gguf_get_str(f, "general.architecture", &s, &len) == GLESC_OK)
        snprintf(mm->arch, sizeof mm->arch, "%.*s", (int)len, s);
    int count[GLESC_DTYPE_COUNT_] = {0};
    uint64_t embd = 0, embd_row = 0;
    bool has_output = false;
    for (int64_t i = 0; i < glesc_gguf_n_tensors(f); i++) {
        glesc_gguf_tensor_info ti;
        if (glesc_gguf_tensor(f, i, &ti) != GLESC_OK)
            continue;
        mm->size += ti.size;
        mm->params += (uint64_t)(ti.ne[0] * ti.ne[1] * ti.ne[2] * ti.ne[3]);
        if (ti.n_dims >= 2)
            count[ti.type]++;
        if (!strcmp(ti.name, "token_embd.weight")) {
            embd = ti.size;
            embd_row = glesc_dtype_row_bytes(ti.type, ti.ne[0]);
        }
        has_output |= !strcmp(ti.name, "output.weight");
    }
    /* A decode step reads every weight once, except the embedding table:
     * one row of it, unless the head is tied to it and reads it whole. */
    mm->weight_bytes = mm->size - (has_output ? embd - embd_row : 0);
    uint32_t ft;
    const char *fn = NULL;
    if (glesc_gguf_get_u32(f, "general.file_type", &ft) == GLESC_OK)
        fn = ftype_name(ft);
    if (fn) {
        snprintf(mm->ftype, sizeof mm->ftype, "%s", fn);
    } else { /* llama.cpp guesses from the most common matrix type too */
        int best = 0;
        for (int t = 1; t < GLESC_DTYPE_COUNT_; t++)
            if (count[t] > count[best])
                best = t;
        const char *tn = glesc_dtype_name((glesc_dtype)best);
        snprintf(mm->ftype, sizeof mm->ftype, "%s (guessed)", tn ? tn : "?");
        for (char *c = mm->ftype; *c && *c != ' '; c++)
            *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
    }
    glesc_gguf_close(f);
    char sz[32];
    double p = (double)mm->params;
    if (p >= 1e9)
        snprintf(sz, sizeof sz, "%.0fB", p * 1e-9);
    else if (p >= 1e8)
        snprintf(sz, sizeof sz, "%.1fB", p * 1e-9);
    else
        snprintf(sz, sizeof sz, "%.0fM", p * 1e-6);
    snprintf(mm->desc, sizeof mm->desc, "%s %s %s", mm->arch, sz, mm->ftype);
    return 0;
}

void fill_ids(int32_t *ids, int n, int64_t n_vocab, uint64_t *rng)
{
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)(tool_rng_next(rng) % (uint64_t)n_vocab);
}

/* Adds the last eval's host times to h (build, submit, read). */
static void add_host(const glesc_session *s, uint64_t h[3])
{
    glesc_eval_stats es;
    glesc_session_last_stats(s, &es);
    h[0] += es.build_ns;
    h[1] += es.submit_ns;
    h[2] += es.read_ns;
}

/* One repetition: the depth (not timed), then the test; *ns its time, h
 * its host times summed (add_host) and h[3] the storage barriers issued. */
static glesc_status run_once(glesc_session *s, const result *r, int64_t n_vocab, int32_t *ids,
                             float *logits, uint64_t *rng, uint64_t *ns, uint64_t h[4])
{
    glesc_stats c0, c1;
    glesc_status st = glesc_session_truncate(s, 0);
    if (st == GLESC_OK && r->n_depth) {
        fill_ids(ids, r->n_depth, n_vocab, rng);
        st = glesc_session_eval(s, ids, (size_t)r->n_depth, 0, logits);
    }
    if (st != GLESC_OK)
        return st;
    glesc_context_stats(bench_ctx, &c0);
    uint64_t t0 = now_ns();
    if (r->n_prompt) {
        fill_ids(ids, r->n_prompt, n_vocab, rng);
        st = glesc_session_eval(s, ids, (size_t)r->n_prompt, 0, logits);
        add_host(s, h);
    } else if (r->greedy) {
        /* a random first token, then each step's input is the previous
         * one's arg max on the GPU: step i+1 is queued before step i's
         * token is read (the read's wait counts as the host's read time) */
        fill_ids(ids, 1, n_vocab, rng);
        st = glesc_session_eval_greedy(s, ids[0]);
        add_host(s, h);
        for (int i = 1; i <= r->n_gen && st == GLESC_OK; i++) {
            if (i < r->n_gen &&
                (st = glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS)) == GLESC_OK)
                add_host(s, h);
            uint64_t tr = now_ns();
            if (st == GLESC_OK)
                st = glesc_session_greedy_id(s, &ids[i % r->n_gen]);
            h[2] += now_ns() - tr;
        }
    } else {
        for (int i = 0; i < r->n_gen && st == GLESC_OK; i++) {
            fill_ids(ids, 1, n_vocab, rng);
            st = glesc_session_eval(s, ids, 1, 0, logits);
            add_host(s, h);
        }
    }
    *ns = now_ns() - t0;
    glesc_context_stats(bench_ctx, &c1);
    h[3] += c1.barriers - c0.barriers;
    return st;
}

/* Per-kernel GPU times of one step like the test's (a decode step, or a
 * batch of the prompt) on a session created with timing: the depth, then
 * (tg) a decode step to warm up and PROFILE_STEPS measured ones; list: the
 * first measured step's kernels on stderr. */
#define PROFILE_STEPS 4
static glesc_status profile(glesc_model *m, const glesc_session_options *so, result *r,
                            int64_t n_vocab, int32_t *ids, float *logits, uint64_t *rng, bool list)
{
    glesc_session_options o = *so;
    o.timing = true;
    o.n_ctx += PROFILE_STEPS + 1;
    glesc_session *s;
    glesc_status st = glesc_session_create(m, &o, &s);
    if (st != GLESC_OK)
        return st;
    if (r->n_depth) {
        fill_ids(ids, r->n_depth, n_vocab, rng);
        st = glesc_session_eval(s, ids, (size_t)r->n_depth, 0, logits);
    }
    if (st == GLESC_OK) /* as in the timed runs */
        st = glesc_context_finish_compiles(bench_ctx);
    int steps = r->n_prompt ? 1 : PROFILE_STEPS;
    int n = r->n_prompt ? (r->n_prompt < o.n_batch ? r->n_prompt : o.n_batch) : 1;
    if (st == GLESC_OK && !r->n_prompt) { /* a first decode step */
        fill_ids(ids, 1, n_vocab, rng);
        st = r->greedy ? glesc_session_eval_greedy(s, ids[0])
                       : glesc_session_eval(s, ids, 1, 0, logits);
    }
    for (int i = 0; i < steps && st == GLESC_OK; i++) {
        fill_ids(ids, n, n_vocab, rng);
        if (r->greedy && (st = glesc_session_eval_greedy(s, GLESC_GREEDY_PREVIOUS)) == GLESC_OK)
            st = glesc_session_greedy_id(s, &ids[0]);
        else if (!r->greedy)
            st = glesc_session_eval(s, ids, (size_t)n, 0, logits);
        if (st != GLESC_OK)
            break;
        const glesc_kernel_time *kt;
        int nk = glesc_session_kernel_times(s, &kt);
        for (int k = 0; k < nk; k++) {
            if (list && i == 0)
                fprintf(stderr, "gguf-bench: %s %s kernel %4d %-40s %3d %10.1f us\n", r->meta->desc,
                        r->test, k, kt[k].name, kt[k].dispatches, (double)kt[k].gpu_ns / 1e3);
            kind_time *t = &r->kinds[kind_of(kt[k].name)];
            t->gpu_ns += kt[k].gpu_ns;
            t->kernels++;
            t->dispatches += kt[k].dispatches;
            r->gpu_ns += kt[k].gpu_ns;
        }
    }
    if (st == GLESC_OK) {
        for (int k = 0; k < K_N; k++) {
            r->kinds[k].gpu_ns /= (uint64_t)steps;
            r->kinds[k].kernels /= steps;
            r->kinds[k].dispatches /= steps;
        }
        r->gpu_ns /= (uint64_t)steps;
        r->profiled = true;
        r->profile_steps = steps;
    }
    glesc_session_destroy(s);
    return st;
}

int run_test(glesc_model *m, const options *o, result *r, uint64_t *rng)
{
    glesc_model_info mi;
    glesc_model_get_info(m, &mi);
    int len = r->n_depth + (r->n_prompt > r->n_gen ? r->n_prompt : r->n_gen);
    glesc_session_options so = {.n_ctx = len,
                                .kv_type = tool_kv_option(r->kv),
                                .kv_type_v = tool_kv_option(r->kv_v),
                                .n_batch = r->n_batch};
    int32_t *ids = malloc((size_t)len * sizeof *ids);
    float *logits = malloc((size_t)mi.n_vocab * sizeof *logits);
    r->ns = calloc((size_t)r->reps, sizeof *r->ns);
    glesc_session *s = NULL;
    glesc_status st = GLESC_ERROR_OUT_OF_MEMORY;
    glesc_context_memory_reset_peak(bench_ctx);
    if (ids && logits && r->ns)
        st = glesc_session_create(m, &so, &s);
    uint64_t ns, host[4] = {0, 0, 0, 0};
    if (st == GLESC_OK && o->warmup)
        st = run_once(s, r, mi.n_vocab, ids, logits, rng, &ns, (uint64_t[4]){0, 0, 0, 0});
    /* a first prompt may leave the decode step's programs compiling in the
     * background (NVIDIA's driver), beside what is timed */
    if (st == GLESC_OK)
        st = glesc_context_finish_compiles(bench_ctx);
    for (int i = 0; i < r->reps && st == GLESC_OK; i++)
        st = run_once(s, r, mi.n_vocab, ids, logits, rng, &r->ns[i], host);
    if (st == GLESC_OK) {
        glesc_memory_stats ms;
        glesc_context_memory(bench_ctx, &ms);
        glesc_model_info mi2;
        glesc_model_get_info(m, &mi2);
        r->mem_held = ms.peak_total_bytes;
        r->mem_weights = mi2.gpu_bytes;
        r->mem_kv = glesc_session_kv_bytes(s); /* the cache alone */
        r->mem_act = ms.max_activation_requested_bytes;
        r->mem_slack = ms.peak_total_bytes - ms.peak_persistent_bytes - r->mem_act;
    }
    if (st == GLESC_OK) {
        double steps = (double)r->reps * (r->n_prompt ? 1 : r->n_gen);
        r->build_ns = (double)host[0] / steps;
        r->submit_ns = (double)host[1] / steps;
        r->read_ns = (double)host[2] / steps;
        r->barriers = (double)host[3] / steps;
        glesc_eval_stats es;
        glesc_session_last_stats(s, &es);
        r->dispatches = es.dispatches;
        r->kernels = es.kernels;
        int tokens = r->n_prompt ? r->n_prompt : r->n_gen;
        double sum = 0, sum2 = 0, nsum = 0, nsum2 = 0;
        for (int i = 0; i < r->reps; i++) {
            double ts = (double)tokens / ((double)r->ns[i] * 1e-9);
            sum += ts;
            sum2 += ts * ts;
            nsum += (double)r->ns[i];
            nsum2 += (double)r->ns[i] * (double)r->ns[i];
        }
        double n = r->reps;
        r->avg_ts = sum / n;
        r->avg_ns = nsum / n;
        r->stddev_ts = n > 1 ? sqrt(fmax(0, (sum2 - sum * sum / n) / (n - 1))) : 0;
        r->stddev_ns = n > 1 ? sqrt(fmax(0, (nsum2 - nsum * nsum / n) / (n - 1))) : 0;
    }
    glesc_session_destroy(s);
    if (st == GLESC_OK && o->profile)
        st = profile(m, &so, r, mi.n_vocab, ids, logits, rng, o->kernels);
    free(ids);
    free(logits);
    if (st != GLESC_OK) {
        fprintf(stderr, "gguf-bench: %s: %s: %s\n", r->file, r->test, glesc_last_errmsg());
        return 1;
    }
    return 0;
}
