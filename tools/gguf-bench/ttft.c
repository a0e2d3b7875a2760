/*
 * ttft.c — time to first token (gguf-bench --ttft P).
 *
 * --ttft P: each measurement is a fresh process of this program
 * (/proc/self/exe --ttft-child ...) that creates a context, loads the
 * model, creates a session, evaluates a P-token prompt of random ids (the
 * first token's logits) and one decode step of its greedy token, and prints
 * the times and the program cache's counters on one line for the parent.
 * The program caches live in a temporary directory: glesc's (--cache-dir)
 * and the driver's own (Mesa: MESA_SHADER_CACHE_DIR, NVIDIA:
 * __GL_SHADER_DISK_CACHE_PATH), so "cold" starts from nothing even on a
 * machine that ran the same kernels before. Three runs: cold (both empty),
 * warm (both as the cold run left them: a user's second start), and glesc's
 * cache warm with an empty driver cache (what glesc's binaries alone give).
 * TTFT is the prompt plus the first decode step; context creation and the
 * load are shown beside it, not in it.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf-bench/gguf-bench.h"

#define TTFT_LINE "gguf-bench-ttft"

static const char *const ttft_phase_names[TTFT_N] = {"cold", "warm", "warm glesc, cold driver"};
/* the driver cache subfolder each phase uses */
static const char *const ttft_driver_dirs[TTFT_N] = {"driver", "driver", "driver-empty"};

/* --ttft-child: one cold or warm start, its figures on stdout. */
int ttft_child(const options *o, const glesc_context_options *co)
{
    uint64_t t0 = now_ns();
    glesc_context *ctx = NULL;
    glesc_model *m = NULL;
    glesc_session *s = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    if (glesc_context_create(co, &ctx) != GLESC_OK) {
        fprintf(stderr, "gguf-bench: no GPU context: %s\n", glesc_last_errmsg());
        return 1;
    }
    uint64_t t1 = now_ns();
    glesc_status st = glesc_model_load(ctx, o->models[0], NULL, &m);
    glesc_model_info mi = {0};
    if (st == GLESC_OK) {
        glesc_model_get_info(m, &mi);
        glesc_session_options so = {.n_ctx = o->ttft + 1,
                                    .kv_type = tool_kv_option(o->kv[0]),
                                    .kv_type_v = tool_kv_option(o->kv_v_set ? o->kv_v : o->kv[0]),
                                    .n_batch = o->n_batch};
        st = glesc_session_create(m, &so, &s);
    }
    ids = malloc((size_t)o->ttft * sizeof *ids);
    logits = malloc((size_t)(mi.n_vocab > 0 ? mi.n_vocab : 1) * sizeof *logits);
    if (st == GLESC_OK && (!ids || !logits))
        st = GLESC_ERROR_OUT_OF_MEMORY;
    uint64_t t2 = now_ns(), t3 = t2, t4 = t2;
    if (st == GLESC_OK) {
        uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
        fill_ids(ids, o->ttft, mi.n_vocab, &rng);
        st = glesc_session_eval(s, ids, (size_t)o->ttft, 0, logits);
        t3 = now_ns();
    }
    if (st == GLESC_OK) {
        int32_t next = 0; /* the greedy first token */
        for (int64_t v = 1; v < mi.n_vocab; v++)
            if (logits[v] > logits[next])
                next = (int32_t)v;
        st = glesc_session_eval(s, &next, 1, 0, logits);
        t4 = now_ns();
    }
    int rc = 0;
    if (st != GLESC_OK) {
        fprintf(stderr, "gguf-bench: --ttft %s: %s\n", o->models[0],
                m ? glesc_context_errmsg(ctx) : glesc_last_errmsg());
        rc = 1;
    } else {
        glesc_stats gs;
        glesc_context_stats(ctx, &gs);
        printf(TTFT_LINE " %llu %llu %llu %llu %llu %llu %llu %llu\n",
               (unsigned long long)(t1 - t0), (unsigned long long)(t2 - t1),
               (unsigned long long)(t3 - t2), (unsigned long long)(t4 - t3),
               (unsigned long long)gs.programs_compiled, (unsigned long long)gs.program_disk_hits,
               (unsigned long long)gs.program_disk_writes,
               (unsigned long long)gs.program_disk_rejects);
    }
    free(ids);
    free(logits);
    glesc_session_destroy(s);
    glesc_model_destroy(m);
    glesc_context_destroy(ctx);
    return rc;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Runs one --ttft-child for model and phase with the caches under dir;
 * 0 and *r filled, or 1 after a message. */
static int ttft_spawn(const options *o, const char *model, const char *dir, int phase,
                      ttft_result *r)
{
    char glesc_dir[4200], driver_dir[4200], p[32], b[32], seed[32];
    snprintf(glesc_dir, sizeof glesc_dir, "%s/glesc", dir);
    snprintf(driver_dir, sizeof driver_dir, "%s/%s", dir, ttft_driver_dirs[phase]);
    snprintf(p, sizeof p, "%d", o->ttft);
    snprintf(b, sizeof b, "%d", o->n_batch);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    if (mkdir(driver_dir, 0700) && errno != EEXIST) {
        fprintf(stderr, "gguf-bench: --ttft: cannot create %s: %s\n", driver_dir, strerror(errno));
        return 1;
    }
    const char *argv[24] = {"gguf-bench",  "--ttft-child",
                            "-m",          model,
                            "--ttft",      p,
                            "-b",          b,
                            "--kv-type",   glesc_dtype_name(o->kv[0]),
                            "--seed",      seed,
                            "--cache-dir", glesc_dir};
    int n = 14;
    if (o->kv_v_set) {
        argv[n++] = "-ctv";
        argv[n++] = glesc_dtype_name(o->kv_v);
    }
    if (o->portable)
        argv[n++] = "--portable";
    if (o->platform) {
        argv[n++] = "--platform";
        argv[n++] = o->platform;
    }
    if (o->device) {
        argv[n++] = "--device";
        argv[n++] = o->device;
    }
    int fds[2];
    if (pipe(fds)) {
        fprintf(stderr, "gguf-bench: --ttft: pipe: %s\n", strerror(errno));
        return 1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "gguf-bench: --ttft: fork: %s\n", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return 1;
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        setenv("MESA_SHADER_CACHE_DIR", driver_dir, 1);
        setenv("__GL_SHADER_DISK_CACHE_PATH", driver_dir, 1);
        execv("/proc/self/exe", (char *const *)argv);
        fprintf(stderr, "gguf-bench: --ttft: cannot run /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    char out[1024];
    size_t len = 0;
    ssize_t k;
    while ((k = read(fds[0], out + len, sizeof out - 1 - len)) > 0 || (k < 0 && errno == EINTR))
        len += k > 0 ? (size_t)k : 0;
    out[len] = '\0';
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    memset(r, 0, sizeof *r);
    r->file = model;
    r->n_prompt = o->ttft;
    r->phase = phase;
    unsigned long long ns[4];
    const char *line = strstr(out, TTFT_LINE " ");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !line ||
        sscanf(line + strlen(TTFT_LINE), "%llu %llu %llu %llu %llu %llu %llu %llu", &ns[0], &ns[1],
               &ns[2], &ns[3], &r->compiled, &r->disk_hits, &r->disk_writes,
               &r->disk_rejects) != 8) {
        fprintf(stderr, "gguf-bench: --ttft: the %s run of %s failed (status %d)\n",
                ttft_phase_names[phase], model, status);
        return 1;
    }
    r->context_ns = ns[0];
    r->load_ns = ns[1];
    r->prompt_ns = ns[2];
    r->decode_ns = ns[3];
    return 0;
}

/* The three runs of one model into r[0 .. TTFT_N), in a temporary
 * directory removed afterwards. */
int ttft_measure(const options *o, const char *model, const model_meta *meta, ttft_result *r)
{
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/gguf-bench-ttft-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "gguf-bench: --ttft: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    int rc = 0;
    for (int ph = 0; ph < TTFT_N && !rc; ph++) {
        if (o->verbose)
            fprintf(stderr, "gguf-bench: %s ttft, %s\n", meta->desc, ttft_phase_names[ph]);
        rc = ttft_spawn(o, model, dir, ph, &r[ph]);
        r[ph].meta = meta;
    }
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}

static double ms(uint64_t ns)
{
    return (double)ns * 1e-6;
}

static uint64_t ttft_ns(const ttft_result *r)
{
    return r->prompt_ns + r->decode_ns;
}

void ttft_table(const ttft_result *t, int n)
{
    printf("\n| %-30s | %-23s | context ms | load ms | prompt ms (n) | 1st decode ms | TTFT ms | "
           "of cold | compiled | disk hits |\n",
           "model", "ttft start");
    printf("| %.30s | %.23s | ---------: | ------: | ------------: | ------------: | ------: | "
           "------: | -------: | --------: |\n",
           "------------------------------", "-----------------------");
    for (int i = 0; i < n; i++) {
        const ttft_result *r = &t[i], *cold = &t[i - r->phase];
        char prompt[32];
        snprintf(prompt, sizeof prompt, "%.1f (%d)", ms(r->prompt_ns), r->n_prompt);
        printf("| %-30s | %-23s | %10.1f | %7.1f | %13s | %13.1f | %7.1f | %6.0f%% | %8llu | %9llu "
               "|\n",
               r->meta->desc, ttft_phase_names[r->phase], ms(r->context_ns), ms(r->load_ns), prompt,
               ms(r->decode_ns), ms(ttft_ns(r)),
               100.0 * (double)ttft_ns(r) / fmax((double)ttft_ns(cold), 1), r->compiled,
               r->disk_hits);
    }
    printf("\nTTFT: the prompt's eval (its token count in parentheses) and the first decode "
           "step, in fresh processes (context creation and the load beside it, not in it); "
           "cold: empty program caches (glesc's and the driver's), warm: as the cold run left "
           "them; of cold: TTFT over the cold TTFT.\n");
    for (int i = 0; i < n; i++)
        if (t[i].phase != TTFT_COLD && t[i].compiled)
            printf("note: the %s start of %s compiled %llu programs the cold one had cached.\n",
                   ttft_phase_names[t[i].phase], t[i].file, t[i].compiled);
}

void ttft_json(FILE *out, const ttft_result *t, int n)
{
    fprintf(out, ", \"ttft\": [");
    for (int i = 0; i < n; i++) {
        const ttft_result *r = &t[i], *cold = &t[i - r->phase];
        fprintf(out, "%s\n  {", i ? "," : "");
        json_kv_str(out, "model_filename", r->file, true);
        json_kv_str(out, "model_desc", r->meta->desc, true);
        json_kv_str(out, "start", ttft_phase_names[r->phase], true);
        fprintf(out,
                "\"n_prompt\": %d, \"context_ns\": %llu, \"load_ns\": %llu, \"prompt_ns\": %llu, "
                "\"decode_ns\": %llu, \"ttft_ns\": %llu, \"of_cold\": %.4f, "
                "\"programs_compiled\": %llu, \"program_disk_hits\": %llu, "
                "\"program_disk_writes\": %llu, \"program_disk_rejects\": %llu}",
                r->n_prompt, (unsigned long long)r->context_ns, (unsigned long long)r->load_ns,
                (unsigned long long)r->prompt_ns, (unsigned long long)r->decode_ns,
                (unsigned long long)ttft_ns(r), (double)ttft_ns(r) / fmax((double)ttft_ns(cold), 1),
                r->compiled, r->disk_hits, r->disk_writes, r->disk_rejects);
    }
    fprintf(out, "\n]");
}
