/* gemvlab: a GEMV laboratory outside the library (docs/performance.md,
 * *The GEMV against hand-written ones*). A Q4_0 GEMV kernel (gemv_q4.glsl,
 * its own layout: a block's quants a uvec4, the scales f16) in variants
 * given by defines, checked against a C reference and timed over enough
 * copies of the weight to leave the L2: chained with storage barriers as a
 * decode step runs them, without barriers, and a dispatch at a time by a
 * GPU timer query (as glesc-bench times glesc's GEMV); each loop also by a
 * timer query around it, queued behind a long single-invocation dispatch
 * (the GPU's own time: the loop is host-bound otherwise). A CHAIN variant
 * also runs ordered by its flags instead of barriers.
 *   cc -O2 -o gemvlab tools/lab/gemvlab.c -lEGL -lGLESv2 -lm
 *   LAB_DEVICE=0 ./gemvlab tools/lab/gemv_q4.glsl 11008 4096 'r2u4|#define R 2;#define U 4'
 * A variant is "name|defines" (';' separates lines). LAB_DEVICE: use
 * EGL_EXT_platform_device's first device (else Mesa's surfaceless
 * platform); LAB_COPIES, LAB_ITERS (200): the copies and timed dispatches;
 * LAB_DUMP=dir: each program's binary (NVIDIA's holds its NV_gpu_program5
 * assembly as text). */
#define _GNU_SOURCE
#include "lab.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

/* A variant's dispatches over the weight's copies. */
typedef struct loop {
    GLint lq, ld, lc; /* uniforms: the copy's offsets, CHAIN's tokens (-1: none) */
    uint64_t qbytes, dbytes;
    int copies;
    GLuint groups;
    uint32_t *token;
} loop;

/* iters dispatches ordered by mode: 0 storage barriers, 1 nothing (wrong
 * results), 2 CHAIN's flags, 3 flags and barriers. */
static void run_loop(const loop *l, int mode, int iters)
{
    for (int i = 0; i < iters; i++) {
        glUniform1ui(l->lq, (GLuint)(l->qbytes / 16 * (uint64_t)(i % l->copies)));
        glUniform1ui(l->ld, (GLuint)(l->dbytes / 4 * (uint64_t)(i % l->copies)));
        if (l->lc >= 0) {
            ++*l->token;
            glUniform2ui(l->lc, mode >= 2 && i ? *l->token - 1 : 0, *l->token);
        }
        glDispatchCompute(l->groups, 1, 1);
        if (mode == 0 || mode == 3)
            glMemoryBarrier(GL_SHADER_STORAGE_BARRIER_BIT);
    }
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: gemvlab SHADER N K VARIANT...\n");
        return 2;
    }
    lab_context();
    char *body = lab_kernel_source(argv[1]);
    uint32_t N = atoi(argv[2]), K = atoi(argv[3]), nb = K / 32;
    uint64_t qbytes = (uint64_t)N * nb * 16, dbytes = (uint64_t)N * nb * 2;
    dbytes = (dbytes + 255) / 256 * 256;
    int copies = getenv("LAB_COPIES") ? atoi(getenv("LAB_COPIES"))
                                      : (int)((512ull << 20) / (qbytes + dbytes) + 1);
    int iters = getenv("LAB_ITERS") ? atoi(getenv("LAB_ITERS")) : 200;
    /* one copy's data, repeated */
    uint8_t *q = malloc(qbytes);
    uint16_t *d = calloc(dbytes / 2, 2);
    float *x = malloc(K * 4), *ref = calloc(N, 4);
    srand(1);
    for (uint64_t i = 0; i < qbytes; i++)
        q[i] = rand();
    for (uint64_t i = 0; i < (uint64_t)N * nb; i++)
        d[i] = lab_f2h((rand() / (float)RAND_MAX - 0.5f) * 0.02f);
    for (uint32_t i = 0; i < K; i++)
        x[i] = rand() / (float)RAND_MAX - 0.5f;
    for (uint32_t n = 0; n < N; n++) {
        double s = 0;
        for (uint32_t b = 0; b < nb; b++) {
            const uint8_t *bq = q + ((uint64_t)n * nb + b) * 16;
            float dd = lab_h2f(d[(uint64_t)n * nb + b]);
            for (int j = 0; j < 16; j++) {
                s += dd * ((bq[j] & 15) - 8) * x[b * 32 + j];
                s += dd * ((bq[j] >> 4) - 8) * x[b * 32 + 16 + j];
            }
        }
        ref[n] = (float)s;
    }
    GLuint bq, bd, bx, by;
    glGenBuffers(1, &bq);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, bq);
    glBufferData(GL_SHADER_STORAGE_BUFFER, qbytes * copies, NULL, GL_STATIC_DRAW);
    for (int c = 0; c < copies; c++)
        glBufferSubData(GL_SHADER_STORAGE_BUFFER, qbytes * c, qbytes, q);
    glGenBuffers(1, &bd);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, bd);
    glBufferData(GL_SHADER_STORAGE_BUFFER, dbytes * copies, NULL, GL_STATIC_DRAW);
    for (int c = 0; c < copies; c++)
        glBufferSubData(GL_SHADER_STORAGE_BUFFER, dbytes * c, dbytes, d);
    glGenBuffers(1, &bx);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, bx);
    glBufferData(GL_SHADER_STORAGE_BUFFER, K * 4, x, GL_STATIC_DRAW);
    glGenBuffers(1, &by);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, by);
    glBufferData(GL_SHADER_STORAGE_BUFFER, N * 4 * 2, NULL, GL_DYNAMIC_COPY);
    if (glGetError())
        lab_die("buffers");
    glBindBufferBase(GL_SHADER_STORAGE_BUFFER, 0, bq);
    glBindBufferBase(GL_SHADER_STORAGE_BUFFER, 1, bd);
    glBindBufferBase(GL_SHADER_STORAGE_BUFFER, 2, bx);
    glBindBufferBase(GL_SHADER_STORAGE_BUFFER, 3, by);
    GLuint bc; /* CHAIN's counters and flags */
    uint32_t token = 0;
    glGenBuffers(1, &bc);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, bc);
    glBufferData(GL_SHADER_STORAGE_BUFFER, 1024, NULL, GL_DYNAMIC_COPY);
    {
        static const uint32_t zeros[256];
        glBufferSubData(GL_SHADER_STORAGE_BUFFER, 0, sizeof zeros, zeros);
    }
    glBindBufferBase(GL_SHADER_STORAGE_BUFFER, 4, bc);
    /* timer queries, and a program that keeps the GPU busy for a while */
    lab_timer tm = lab_timers(3);
    GLuint span_query = 0; /* the loops' GPU time */
    if (tm.gen)
        tm.gen(1, &span_query);
    printf("N %u K %u: %.1f MB a copy, %d copies\n", N, K, (qbytes + dbytes) / 1e6, copies);
    for (int v = 4; v < argc; v++) {
        const char *defs;
        char *spec = lab_variant(argv[v], &defs);
        char extra[64];
        snprintf(extra, sizeof extra, "#define NN %uu\n#define KK %uu\n", N, K);
        GLuint p = lab_variant_program(defs, extra, body);
        if (!p) {
            printf("%-28s compile failed\n", spec);
            continue;
        }
        GLint wg[3];
        glGetProgramiv(p, GL_COMPUTE_WORK_GROUP_SIZE, wg);
        if (getenv("LAB_DUMP")) {
            GLint len = 0;
            glGetProgramiv(p, GL_PROGRAM_BINARY_LENGTH, &len);
            void *bin = malloc(len);
            GLenum fmt;
            glGetProgramBinary(p, len, NULL, &fmt, bin);
            char path[512];
            snprintf(path, sizeof path, "%s/v%d_%u_%u.bin", getenv("LAB_DUMP"), v, N, K);
            FILE *f = fopen(path, "wb");
            if (f) {
                fwrite(bin, 1, len, f);
                fclose(f);
            }
            free(bin);
        }
        glUseProgram(p);
        GLint lq = glGetUniformLocation(p, "qoff"), ld = glGetUniformLocation(p, "doff");
        /* the rows a workgroup takes: a 1-workgroup probe writes them to y[N] */
        glUniform1ui(lq, 0);
        glUniform1ui(ld, 0);
        glUniform1ui(glGetUniformLocation(p, "probe"), 1);
        glDispatchCompute(1, 1, 1);
        glMemoryBarrier(GL_BUFFER_UPDATE_BARRIER_BIT);
        glBindBuffer(GL_SHADER_STORAGE_BUFFER, by);
        float *yp = glMapBufferRange(GL_SHADER_STORAGE_BUFFER, N * 4, 4, GL_MAP_READ_BIT);
        GLuint rows_wg = yp ? (GLuint)yp[0] : 0;
        glUnmapBuffer(GL_SHADER_STORAGE_BUFFER);
        glUniform1ui(glGetUniformLocation(p, "probe"), 0);
        if (!rows_wg) {
            printf("%-28s probe failed\n", spec);
            continue;
        }
        GLuint groups = (N + rows_wg - 1) / rows_wg;
        /* correctness on copy 0 */
        glDispatchCompute(groups, 1, 1);
        glMemoryBarrier(GL_BUFFER_UPDATE_BARRIER_BIT);
        yp = glMapBufferRange(GL_SHADER_STORAGE_BUFFER, 0, N * 4, GL_MAP_READ_BIT);
        double worst = 0;
        for (uint32_t n = 0; yp && n < N; n++) {
            double e = fabs(yp[n] - ref[n]) / (fabs(ref[n]) + 1e-2);
            if (e > worst || isnan(yp[n]))
                worst = isnan(yp[n]) ? 1e9 : e;
        }
        glUnmapBuffer(GL_SHADER_STORAGE_BUFFER);
        /* µs a dispatch: one at a time by its own timer query, and each
         * mode's loop by the wall clock and on the GPU */
        double timed = 0, wall[4] = {0}, gpu[4] = {0};
        {
            if (tm.gen) {
                GLuint qs[64];
                tm.gen(64, qs);
                uint64_t tot = 0;
                int n = 0;
                for (int i = 0; i < iters; i++) {
                    int k = i % 64;
                    if (i >= 64) {
                        GLuint64 v = 0;
                        tm.get(qs[k], GL_QUERY_RESULT_EXT, &v);
                        tot += v;
                        n++;
                    }
                    glUniform1ui(lq, (GLuint)(qbytes / 16 * (i % copies)));
                    glUniform1ui(ld, (GLuint)(dbytes / 4 * (i % copies)));
                    tm.begin(GL_TIME_ELAPSED_EXT, qs[k]);
                    glDispatchCompute(groups, 1, 1);
                    tm.end(GL_TIME_ELAPSED_EXT);
                    glMemoryBarrier(GL_SHADER_STORAGE_BARRIER_BIT);
                }
                timed = n ? tot * 1e-9 / n : 0;
            }
        }
        /* 0: chained, 1: no barriers, 2 (CHAIN): flags, 3: flags and barriers */
        loop lp = {lq,     ld,    glGetUniformLocation(p, "chain"), qbytes, dbytes, copies,
                   groups, &token};
        int modes = lp.lc >= 0 ? 4 : 2;
        for (int mode = 0; mode < modes; mode++) {
            run_loop(&lp, 1, 20);
            glFinish();
            double t0 = lab_now();
            run_loop(&lp, mode, iters);
            glFinish();
            wall[mode] = (lab_now() - t0) / iters;
            /* the GPU's own time for the same loop: queued behind a long
             * single-invocation dispatch, so that the host is ahead */
            if (tm.sleeper && span_query) {
                glUseProgram(tm.sleeper);
                glDispatchCompute(1, 1, 1);
                glMemoryBarrier(GL_SHADER_STORAGE_BARRIER_BIT);
                glUseProgram(p);
                tm.begin(GL_TIME_ELAPSED_EXT, span_query);
                run_loop(&lp, mode, iters);
                tm.end(GL_TIME_ELAPSED_EXT);
                glFinish();
                GLuint64 v = 0;
                tm.get(span_query, GL_QUERY_RESULT_EXT, &v);
                gpu[mode] = v * 1e-9 / iters;
            }
        }
        if (span_query)
            printf(
                "%-28s GPU time a dispatch (behind a sleeper): barriers %7.2f us, none %7.2f us\n",
                spec, gpu[0] * 1e6, gpu[1] * 1e6);
        if (lp.lc >= 0) {
            glMemoryBarrier(GL_BUFFER_UPDATE_BARRIER_BIT);
            glBindBuffer(GL_SHADER_STORAGE_BUFFER, bc);
            uint32_t *m = glMapBufferRange(GL_SHADER_STORAGE_BUFFER, 512, 4, GL_MAP_READ_BIT);
            printf(
                "%-28s flags %7.2f us, flags and barriers %7.2f us (GPU %7.2f, %7.2f), fail %u\n",
                spec, wall[2] * 1e6, wall[3] * 1e6, gpu[2] * 1e6, gpu[3] * 1e6, m ? m[0] : 99u);
            glUnmapBuffer(GL_SHADER_STORAGE_BUFFER);
        }
        double gb = (qbytes + (double)N * nb * 2) / 1e9;
        printf("%-28s rows/wg %3u groups %6u  chained %7.2f us %6.0f GB/s | free %7.2f us %6.0f "
               "GB/s | timed %7.2f us | err %.1e\n",
               spec, rows_wg, groups, wall[0] * 1e6, gb / wall[0], wall[1] * 1e6, gb / wall[1],
               timed * 1e6, worst);
        fflush(stdout);
        glDeleteProgram(p);
        free(spec);
    }
    return 0;
}
