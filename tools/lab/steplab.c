/* steplab: outside the library (docs/performance.md, *A decode step's
 * GEMVs in one dispatch*): a decode step's chain of Q4_0 GEMVs (q/k/v,
 * o, gate/up, down a layer; each reads what the one before wrote) run as
 * one dispatch a GEMV with storage barriers between them, as glesc runs a
 * step, against one dispatch for the whole chain: CLAIM, a workgroup a
 * tile, claimed in order and waiting for the GEMV before (step_q4.glsl
 * says why that cannot deadlock), or PERSIST N, N workgroups looping over
 * every GEMV's tiles with a grid barrier between GEMVs (all resident: not
 * promised). Checked against a C reference, timed on the GPU (a timer
 * query around the steps, queued behind a long single-invocation dispatch
 * so that the host is ahead) and by the wall clock.
 *   cc -O2 -o steplab tools/lab/steplab.c -lEGL -lGLESv2 -lm
 *   LAB_DEVICE=0 ./steplab tools/lab/step_q4.glsl 2048,256,5632,22 'disp|#define UNROLLNV' \
 *       'claim|#define CLAIM;#define PREF' 'p132|#define PERSIST 132;#define PREF'
 * The shape is hidden,kv,ffn,layers (the q/k/v GEMV has hidden + 2 kv
 * rows). A variant is "name|defines" (';' separates lines); the others
 * run a dispatch a GEMV, with storage barriers and (timing only, wrong
 * results) without. LAB_ITERS (20): the timed steps; LAB_VERBOSE: the
 * first outputs against the reference. */
#define _GNU_SOURCE
#include "lab.h"
#include <math.h>

typedef struct phase {
    uint32_t k, n, qoff, doff, xoff, yoff, tiles, base;
} phase;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: steplab SHADER HIDDEN,KV,FFN,LAYERS VARIANT...\n");
        return 2;
    }
    unsigned H, KV, F, L;
    if (sscanf(argv[2], "%u,%u,%u,%u", &H, &KV, &F, &L) != 4 || H % 32 || F % 32 || !L) {
        fprintf(stderr, "steplab: shape %s: want hidden,kv,ffn,layers (multiples of 32)\n",
                argv[2]);
        return 2;
    }
    lab_context();
    char *body = lab_kernel_source(argv[1]);
    int iters = getenv("LAB_ITERS") ? atoi(getenv("LAB_ITERS")) : 20;
    /* the phases: x of each is the first k floats of the one before's y */
    uint32_t np = 4 * L, maxk = H > F ? H : F;
    phase *ph = calloc(np, sizeof *ph);
    uint64_t nq = 0, nd = 0; /* uvec4s of quants, halves of scales */
    uint32_t act = maxk;     /* floats of act: the input, then each y */
    for (uint32_t l = 0; l < L; l++) {
        uint32_t dims[4][2] = {{H, H + 2 * KV}, {H, H}, {H, 2 * F}, {F, H}};
        for (int g = 0; g < 4; g++) {
            phase *p = &ph[4 * l + g];
            p->k = dims[g][0];
            p->n = dims[g][1];
            p->qoff = (uint32_t)nq;
            p->doff = (uint32_t)nd;
            p->xoff = 4 * l + g ? ph[4 * l + g - 1].yoff : 0;
            p->yoff = act;
            act += (p->n + 3) / 4 * 4;
            nq += (uint64_t)p->n * (p->k / 32);
            nd += ((uint64_t)p->n * (p->k / 32) + 1) / 2 * 2;
        }
    }
    GLint maxblock = 0;
    glGetIntegerv(GL_MAX_SHADER_STORAGE_BLOCK_SIZE, &maxblock);
    if (nq * 16 > (uint64_t)(uint32_t)maxblock) {
        fprintf(stderr,
                "steplab: %.0f MB of quants, more than a storage block's %d: fewer layers\n",
                nq * 16 / 1e6, maxblock);
        return 2;
    }
    printf("shape %s: %u GEMVs, %.1f MB of weights\n", argv[2], np, (nq * 16 + nd * 2) / 1e6);
    /* the weights: random quants, scales of random signs that keep y's size
     * near x's (the quants' mean of -0.5 would grow it otherwise) */
    uint32_t *q = malloc(nq * 16);
    uint16_t *d = malloc(nd * 2);
    for (uint64_t i = 0; i < nq * 2; i++)
        ((uint64_t *)q)[i] = next();
    for (uint32_t p = 0; p < np; p++)
        for (uint64_t i = 0; i < (uint64_t)ph[p].n * (ph[p].k / 32); i++)
            d[ph[p].doff + i] = lab_f2h(
                (float)((next() & 1 ? 1 : -1) * (0.8 + 0.4 * (next() >> 11) / 9007199254740992.0) /
                        sqrt(21.5 * ph[p].k)));
    /* the reference: act's contents, the input x first (never overwritten) */
    float *ref = calloc(act, 4);
    for (uint32_t i = 0; i < maxk; i++)
        ref[i] = (float)((next() >> 11) / 9007199254740992.0 - 0.5);
    for (uint32_t p = 0; p < np; p++) {
        const float *x = ref + ph[p].xoff;
        for (uint32_t n = 0; n < ph[p].n; n++) {
            double s = 0;
            for (uint32_t b = 0; b < ph[p].k / 32; b++) {
                uint64_t i = (uint64_t)n * (ph[p].k / 32) + b;
                const uint8_t *bq = (const uint8_t *)(q + 4 * (ph[p].qoff + i));
                double t = 0;
                for (int j = 0; j < 16; j++)
                    t += ((bq[j] & 15) - 8) * x[b * 32 + j] +
                         ((bq[j] >> 4) - 8) * x[b * 32 + 16 + j];
                s += lab_h2f(d[ph[p].doff + i]) * t;
            }
            ref[ph[p].yoff + n] = (float)s;
        }
    }
    const float *want = ref + ph[np - 1].yoff;
    double rms = 0;
    for (uint32_t n = 0; n < H; n++)
        rms += (double)want[n] * want[n];
    rms = sqrt(rms / H);
    /* buffers */
    GLuint buf[6]; /* q, d, act, the phases, the counters, the sleeper's */
    glGenBuffers(6, buf);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, buf[0]);
    glBufferData(GL_SHADER_STORAGE_BUFFER, nq * 16, q, GL_STATIC_DRAW);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, buf[1]);
    glBufferData(GL_SHADER_STORAGE_BUFFER, nd * 2, d, GL_STATIC_DRAW);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, buf[2]);
    glBufferData(GL_SHADER_STORAGE_BUFFER, (GLsizeiptr)act * 4, NULL, GL_DYNAMIC_COPY);
    glBufferSubData(GL_SHADER_STORAGE_BUFFER, 0, maxk * 4, ref);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, buf[4]);
    glBufferData(GL_SHADER_STORAGE_BUFFER, 16 + 128 * (GLsizeiptr)np, NULL, GL_DYNAMIC_COPY);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, buf[5]);
    glBufferData(GL_SHADER_STORAGE_BUFFER, 16, NULL, GL_DYNAMIC_COPY);
    if (glGetError())
        lab_die("buffers (too large for this GPU?)");
    for (int i = 0; i < 6; i++)
        glBindBufferBase(GL_SHADER_STORAGE_BUFFER, i, buf[i]);
    /* zeroes the claim counter and every done counter (32 words a phase: a
     * variant may spread them a line each), keeps fail */
    GLuint reset = lab_program("#version 310 es\nlayout(local_size_x = 64) in;\n"
                               "layout(std430, binding = 4) buffer C { uint claim; uint fail; "
                               "uint spins; uint pad; uint done[]; };\nuniform uint nphase;\n",
                               "void main() {\n    uint i = gl_GlobalInvocationID.x;\n"
                               "    if (i == 0u) claim = 0u;\n"
                               "    for (; i < nphase; i += 64u) done[i] = 0u;\n}\n");
    lab_timer tm = lab_timers(5);
    GLuint span = 0;
    if (tm.gen)
        tm.gen(1, &span);
    for (int v = 3; v < argc; v++) {
        const char *defs;
        char *spec = lab_variant(argv[v], &defs);
        /* one dispatch: CLAIM's (every tile's workgroup) or PERSIST's (that
         * many workgroups) */
        const char *pers = strstr(defs, "PERSIST ");
        GLuint persist = pers ? (GLuint)atoi(pers + 8) : 0;
        int claim = strstr(defs, "CLAIM") != NULL || persist;
        char extra[128];
        snprintf(extra, sizeof extra, "#define MAXK %uu\n#define MAXB %u\n", maxk,
                 (maxk / 32 + 31) / 32);
        GLuint prog = lab_variant_program(defs, extra, body);
        if (!prog) {
            printf("%-16s compile failed\n", spec);
            continue;
        }
        GLint rpw = 2; /* rows a subgroup: the R the variant defines */
        const char *r = strstr(defs, "define R ");
        if (r)
            rpw = atoi(r + 9);
        uint32_t total = 0;
        for (uint32_t p = 0; p < np; p++) {
            ph[p].tiles = (ph[p].n + 8 * rpw - 1) / (8 * rpw);
            ph[p].base = total;
            total += ph[p].tiles;
        }
        glBindBuffer(GL_SHADER_STORAGE_BUFFER, buf[3]);
        glBufferData(GL_SHADER_STORAGE_BUFFER, np * sizeof *ph, ph, GL_STATIC_DRAW);
        glUseProgram(reset);
        glUniform1ui(glGetUniformLocation(reset, "nphase"), 32 * np);
        glUseProgram(prog);
        glUniform1ui(glGetUniformLocation(prog, "nphase"), np);
        glUniform1ui(glGetUniformLocation(prog, "ntiles"), total);
        glUniform1ui(glGetUniformLocation(prog, "probe"), 0);
        GLint lph = glGetUniformLocation(prog, "phase_id");
        uint32_t zeros[4] = {0, 0, 0, 0};
        glBindBuffer(GL_SHADER_STORAGE_BUFFER, buf[4]);
        glBufferSubData(GL_SHADER_STORAGE_BUFFER, 0, 16, zeros);
        GLuint gx = total < 32768 ? total : 32768, gy = (total + gx - 1) / gx;
        if (persist)
            gx = persist, gy = 1;
            /* one step: mode 0 with storage barriers, 1 without (wrong) */
#define STEP(mode)                                                                                 \
    do {                                                                                           \
        if (claim) {                                                                               \
            glUseProgram(reset);                                                                   \
            glDispatchCompute(1, 1, 1);                                                            \
            glMemoryBarrier(GL_SHADER_STORAGE_BARRIER_BIT);                                        \
            glUseProgram(prog);                                                                    \
            glDispatchCompute(gx, gy, 1);                                                          \
            glMemoryBarrier(GL_SHADER_STORAGE_BARRIER_BIT);                                        \
        } else                                                                                     \
            for (uint32_t p = 0; p < np; p++) {                                                    \
                glUniform1ui(lph, p);                                                              \
                glDispatchCompute(ph[p].tiles, 1, 1);                                              \
                if ((mode) == 0)                                                                   \
                    glMemoryBarrier(GL_SHADER_STORAGE_BARRIER_BIT);                                \
            }                                                                                      \
    } while (0)
        double wall[2] = {0}, gpu[2] = {0}, err = 0;
        for (int mode = 0; mode < (claim ? 1 : 2); mode++) {
            STEP(mode);
            glFinish();
            if (mode == 0) { /* check the first step's result */
                glMemoryBarrier(GL_BUFFER_UPDATE_BARRIER_BIT);
                glBindBuffer(GL_SHADER_STORAGE_BUFFER, buf[2]);
                const float *y = glMapBufferRange(GL_SHADER_STORAGE_BUFFER, ph[np - 1].yoff * 4,
                                                  H * 4, GL_MAP_READ_BIT);
                for (uint32_t n = 0; y && n < H; n++) {
                    double e = fabs(y[n] - want[n]) / rms;
                    if (e > err || isnan(y[n]))
                        err = isnan(y[n]) ? INFINITY : e;
                }
                if (!y)
                    err = INFINITY;
                if (getenv("LAB_VERBOSE"))
                    for (uint32_t n = 0; n < 4; n++)
                        fprintf(stderr, "y[%u] %g, want %g (map %p, GL error 0x%x)\n", n,
                                y ? y[n] : NAN, want[n], (const void *)y, glGetError());
                glUnmapBuffer(GL_SHADER_STORAGE_BUFFER);
            }
            double t0 = lab_now();
            for (int i = 0; i < iters; i++)
                STEP(mode);
            glFinish();
            wall[mode] = (lab_now() - t0) / iters;
            if (tm.gen && tm.sleeper) {
                glUseProgram(tm.sleeper);
                glDispatchCompute(1, 1, 1);
                glMemoryBarrier(GL_SHADER_STORAGE_BARRIER_BIT);
                glUseProgram(prog);
                tm.begin(GL_TIME_ELAPSED_EXT, span);
                for (int i = 0; i < iters; i++)
                    STEP(mode);
                tm.end(GL_TIME_ELAPSED_EXT);
                glFinish();
                GLuint64 t = 0;
                tm.get(span, GL_QUERY_RESULT_EXT, &t);
                gpu[mode] = t * 1e-9 / iters;
            }
        }
        uint32_t cs[3] = {0, 0, 0};
        glMemoryBarrier(GL_BUFFER_UPDATE_BARRIER_BIT);
        glBindBuffer(GL_SHADER_STORAGE_BUFFER, buf[4]);
        const uint32_t *m = glMapBufferRange(GL_SHADER_STORAGE_BUFFER, 0, 12, GL_MAP_READ_BIT);
        if (m)
            memcpy(cs, m, 12);
        glUnmapBuffer(GL_SHADER_STORAGE_BUFFER);
        double gb = (nq * 16 + nd * 2) / 1e9;
        printf("%-16s %6u workgroups: a step %8.1f us GPU (%6.0f GB/s, %5.2f us a GEMV), "
               "wall %8.1f us",
               spec, total, gpu[0] * 1e6, gpu[0] > 1e-6 ? gb / gpu[0] : 0, gpu[0] * 1e6 / np,
               wall[0] * 1e6);
        if (!claim)
            printf("; no barriers (wrong) %8.1f us GPU, wall %8.1f us", gpu[1] * 1e6,
                   wall[1] * 1e6);
        else
            printf("; fail %u, most spins %u", cs[1], cs[2]);
        printf("; worst error %.2e of the rms\n", err);
        fflush(stdout);
        glDeleteProgram(prog);
        free(spec);
    }
    return 0;
}
