/* barlab: outside the library (docs/performance.md, *A grid barrier
 * against a dispatch's*): the cost of a grid barrier inside one dispatch
 * (an atomic counter; it needs every workgroup resident, which GLES does
 * not promise: a spin that gives up sets `fail`) against a dispatch and a
 * storage barrier, for P phases and G workgroups of 256 each.
 *   cc -O2 -o barlab tools/lab/barlab.c -lEGL -lGLESv2
 *   LAB_DEVICE=0 ./barlab 100 132 264 528 1056 */
#define _GNU_SOURCE
#include "lab.h"
#include <stdint.h>
#include <string.h>

static const char *src =
    "#version 310 es\n"
    "layout(local_size_x = 256) in;\n"
    "layout(std430, binding = 0) coherent buffer C { uint ctr; uint fail; uint spins_max; };\n"
    "layout(std430, binding = 1) coherent buffer D { uint data[]; };\n"
    "uniform uint nphase, grid, spin_limit;\n"
    "void main() {\n"
    "    uint lid = gl_LocalInvocationID.x, wg = gl_WorkGroupID.x;\n"
    "    uint n = gl_NumWorkGroups.x;\n"
    "    for (uint p = 0u; p < nphase; p++) {\n"
    "        // a phase's work: read what another workgroup wrote in the last\n"
    "        uint src_wg = (wg + 1u) % n;\n"
    "        uint v = p == 0u ? 0u : data[src_wg * 256u + lid];\n"
    "        data[wg * 256u + lid] = v + 1u;\n"
    "        if (grid == 0u) break;\n"
    "        memoryBarrierBuffer();\n"
    "        barrier();\n"
    "        if (lid == 0u) {\n"
    "            uint target = (p + 1u) * n;\n"
    "            atomicAdd(ctr, 1u);\n"
    "            uint s = 0u;\n"
    "            while (atomicOr(ctr, 0u) < target && s < spin_limit && atomicOr(fail, 0u) == 0u) "
    "s++;\n"
    "            if (atomicOr(ctr, 0u) < target) atomicOr(fail, 1u);\n"
    "            atomicMax(spins_max, s);\n"
    "        }\n"
    "        barrier();\n"
    "        memoryBarrierBuffer();\n"
    "    }\n"
    "}\n";

int main(int argc, char **argv)
{
    lab_context();
    int phases = argc > 1 ? atoi(argv[1]) : 100;
    GLuint p = lab_program(src, "");
    if (!p)
        return 1;
    glUseProgram(p);
    GLuint b[2];
    glGenBuffers(2, b);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, b[0]);
    glBufferData(GL_SHADER_STORAGE_BUFFER, 16, NULL, GL_DYNAMIC_COPY);
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, b[1]);
    glBufferData(GL_SHADER_STORAGE_BUFFER, 4u << 20, NULL, GL_DYNAMIC_COPY);
    glBindBufferBase(GL_SHADER_STORAGE_BUFFER, 0, b[0]);
    glBindBufferBase(GL_SHADER_STORAGE_BUFFER, 1, b[1]);
    GLint lph = glGetUniformLocation(p, "nphase"), lg = glGetUniformLocation(p, "grid"),
          ls = glGetUniformLocation(p, "spin_limit");
    glUniform1ui(ls, 200000);
    for (int a = 2; a < argc; a++) {
        GLuint G = atoi(argv[a]);
        if (G * 256 * 4 > (4u << 20))
            continue;
        double tg = 0, td = 0;
        uint32_t res[3] = {0};
        for (int rep = 0; rep < 3; rep++) {
            /* one dispatch, phases grid barriers */
            uint32_t z[3] = {0, 0, 0};
            glBindBuffer(GL_SHADER_STORAGE_BUFFER, b[0]);
            glBufferSubData(GL_SHADER_STORAGE_BUFFER, 0, 12, z);
            glUniform1ui(lph, phases);
            glUniform1ui(lg, 1);
            glFinish();
            double t0 = lab_now();
            glDispatchCompute(G, 1, 1);
            glFinish();
            tg = lab_now() - t0;
            glMemoryBarrier(GL_BUFFER_UPDATE_BARRIER_BIT);
            uint32_t *m = glMapBufferRange(GL_SHADER_STORAGE_BUFFER, 0, 12, GL_MAP_READ_BIT);
            memcpy(res, m, 12);
            glUnmapBuffer(GL_SHADER_STORAGE_BUFFER);
            /* phases dispatches, a storage barrier between */
            glUniform1ui(lph, 1);
            glUniform1ui(lg, 0);
            glFinish();
            t0 = lab_now();
            for (int i = 0; i < phases; i++) {
                glDispatchCompute(G, 1, 1);
                glMemoryBarrier(GL_SHADER_STORAGE_BARRIER_BIT);
            }
            glFinish();
            td = lab_now() - t0;
        }
        printf("G %5u: grid barrier %7.2f us a phase (ctr %u, fail %u, most spins %u) | dispatch + "
               "barrier %7.2f us\n",
               G, tg * 1e6 / phases, res[0], res[1], res[2], td * 1e6 / phases);
        fflush(stdout);
    }
    return 0;
}
