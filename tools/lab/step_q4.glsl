// tools/lab/steplab.c's chain of Q4_0 GEMVs, each reading what the one
// before wrote (a decode step's matmuls without the rest). Phase p's table
// entry (ph[2p], ph[2p + 1]): K, N, the first block's uvec4 in q, its
// first scale's half in d; x's and y's first float in act, the phase's
// workgroups and the workgroups before it. A workgroup (8 subgroups of 32)
// takes R rows a subgroup; each lane loads all of its blocks of its rows
// (up to MAXB a row) into registers, then x into shared memory, then adds
// up. As dispatches (one a phase, gl_WorkGroupID.x its tile, ordered by
// the host's storage barriers) or, with CLAIM, as one dispatch of every
// phase's workgroups: each claims the next tile from a counter and, unless
// its phase is the first, waits until every workgroup of the phase before
// has counted itself done. A tile is claimed only by a running workgroup
// and waits only for tiles claimed before it, so the lowest unfinished one
// never waits: nothing depends on how many workgroups are resident or in
// which order the driver launches them. PERSIST (main's second form): a
// fixed grid looping over every phase's tiles. PREF: the weights are
// loaded before the wait (CLAIM) or the grid barrier (PERSIST), so that
// they are in registers when x is ready. POLLV, BACKOFF: how the wait
// reads (wait_phase). DS: the done counters' stride in words (32: each on
// its own 128-byte line). ALLWAIT: every invocation polls, not only the
// first (whose warp's other lanes wait at the barrier meanwhile: a
// divergent spin). NOSG, UNROLLNV: q4_common.glsl.
#ifndef R
#define R 2
#endif
#ifdef POLLV
#define POLLQ volatile
#define POLL(v) (v)
#else
#define POLLQ
#define POLL(v) atomicOr(v, 0u)
#endif
#ifndef BACKOFF
#define BACKOFF 0
#endif
#ifndef DS
#define DS 1
#endif
#ifndef SPIN
#define SPIN 4096u // the wait gives up after SPIN * SPIN reads
#endif
layout(std430, binding = 0) restrict readonly buffer Q { uvec4 q[]; };
layout(std430, binding = 1) restrict readonly buffer D { uint d[]; };
layout(std430, binding = 2) coherent buffer A { float act[]; };
layout(std430, binding = 3) restrict readonly buffer P { uvec4 ph[]; };
layout(std430, binding = 4) coherent POLLQ buffer C { uint claim; uint fail; uint spins; uint pad; uint done[]; };
uniform uint phase_id, nphase, ntiles, probe;
shared uint s_tile, s_phase;
// x, 8 vec4 (a block) padded to 9 against bank conflicts where that fits
#if MAXK * 9u / 2u <= 49152u
#define XP 9u
#else
#define XP 8u
#endif
shared vec4 xs[MAXK / 32u * XP];

float bdot(uvec4 w, uint b)
{
    uint o = b * XP;
    float s = dot(lo4(w.x), xs[o]) + dot(hi4(w.x), xs[o + 4u]);
    s += dot(lo4(w.y), xs[o + 1u]) + dot(hi4(w.y), xs[o + 5u]);
    s += dot(lo4(w.z), xs[o + 2u]) + dot(hi4(w.z), xs[o + 6u]);
    s += dot(lo4(w.w), xs[o + 3u]) + dot(hi4(w.w), xs[o + 7u]);
    return s;
}

#define NW (uint(R) * uint(MAXB))
uvec4 w[NW];
float sc[NW];

void load_weights(uint K, uint N, uint qoff, uint doff, uint tile)
{
    uint lid = gl_LocalInvocationID.x, lane = lid % 32u, nb = K / 32u;
    uint row0 = min(tile * 8u * uint(R) + lid / 32u * uint(R), N - uint(R));
    for (uint r = 0u; r < uint(R); r++)
        for (uint j = 0u; j < uint(MAXB); j++) {
            uint blk = lane + 32u * j, i = (row0 + r) * nb + blk;
            w[r * uint(MAXB) + j] = blk < nb ? q[qoff + i] : uvec4(0u);
            vec2 h = blk < nb ? unpackHalf2x16(d[(doff + i) >> 1u]) : vec2(0.0);
            sc[r * uint(MAXB) + j] = ((doff + i) & 1u) == 0u ? h.x : h.y;
        }
}

// lid 0 waits until every workgroup of phase p - 1 is done (bounded: a
// spin that gives up sets fail, and the results are wrong)
void wait_phase(uint p)
{
#ifdef CLAIM
#ifdef ALLWAIT
    if (p > 0u) { // every invocation polls: no lane spins apart from its warp
#else
    if (p > 0u && gl_LocalInvocationID.x == 0u) {
#endif
        // POLLV: plain (volatile) reads, else atomics; BACKOFF n: n dependent
        // multiply-adds between reads (thousands of workgroups polling one
        // word by atomics queue behind each other and the increments)
        uint need = ph[2u * (p - 1u) + 1u].z, s = 0u;
#if BACKOFF > 0
        float bo = float(s);
        for (uint o = 0u; o < SPIN && POLL(done[(p - 1u) * uint(DS)]) < need; o++)
            for (uint i = 0u; i < SPIN && POLL(done[(p - 1u) * uint(DS)]) < need; i++) {
                s++;
                for (uint k = 0u; k < uint(BACKOFF); k++)
                    bo = bo * 0.999 + 1.0;
            }
        if (bo == -1.0)
            atomicOr(fail, 4u);
#else
        for (uint o = 0u; o < SPIN && POLL(done[(p - 1u) * uint(DS)]) < need; o++)
            for (uint i = 0u; i < SPIN && POLL(done[(p - 1u) * uint(DS)]) < need; i++)
                s++;
#endif
        if (atomicOr(done[(p - 1u) * uint(DS)], 0u) < need)
            atomicOr(fail, 1u);
        atomicMax(spins, s);
    }
    barrier();
    memoryBarrierBuffer();
#endif
}

// use the loaded words before a wait, so that the compiler cannot move
// their loads after it (probe is never equal)
void keep_weights()
{
    uint chk = 0u;
    for (uint i = 0u; i < NW; i++)
        chk ^= w[i].x ^ w[i].w;
    if (chk == probe + 0x9e3779b9u)
        atomicOr(fail, 2u);
}

void stage_x(uvec4 a, uvec4 b)
{
    uint lid = gl_LocalInvocationID.x;
    for (uint i = lid; i < a.x / 4u; i += 256u)
        xs[i + (XP - 8u) * (i >> 3u)] = vec4(act[b.x + 4u * i], act[b.x + 4u * i + 1u],
                                             act[b.x + 4u * i + 2u], act[b.x + 4u * i + 3u]);
    memoryBarrierShared();
    barrier();
}

// the tile's rows from the loaded weights and the staged x
void gemv_tile(uvec4 a, uvec4 b, uint tile)
{
    uint lid = gl_LocalInvocationID.x, lane = lid % 32u, nb = a.x / 32u;
    uint row0 = min(tile * 8u * uint(R) + lid / 32u * uint(R), a.y - uint(R));
    for (uint r = 0u; r < uint(R); r++) {
        float acc = 0.0;
        for (uint j = 0u; j < uint(MAXB); j++) {
            uint blk = lane + 32u * j;
            if (blk < nb)
                acc += sc[r * uint(MAXB) + j] * bdot(w[r * uint(MAXB) + j], blk);
        }
        acc = subgroupAdd(acc);
        if (lane == 0u)
            act[b.y + row0 + r] = acc;
    }
}

#ifdef PERSIST
// PERSIST: the dispatch's workgroups (PERSIST of them, all resident: GLES
// does not promise it; a wait that gives up sets fail) take every phase's
// tiles in turn, a grid barrier between phases (tools/lab/barlab.c's
// counter). With PREF, a workgroup loads its first tile of the next phase
// before the barrier.
void main()
{
    uint lid = gl_LocalInvocationID.x, wg = gl_WorkGroupID.x, G = gl_NumWorkGroups.x;
    bool have = false;
    for (uint p = 0u; p < nphase; p++) {
        uvec4 a = ph[2u * p], b = ph[2u * p + 1u];
        stage_x(a, b);
        for (uint tile = wg; tile < b.z; tile += G) {
            if (!have)
                load_weights(a.x, a.y, a.z, a.w, tile);
            have = false;
            gemv_tile(a, b, tile);
        }
        if (p + 1u == nphase)
            break;
#ifdef PREF
        uvec4 a1 = ph[2u * p + 2u], b1 = ph[2u * p + 3u];
        if (wg < b1.z) {
            load_weights(a1.x, a1.y, a1.z, a1.w, wg);
            keep_weights();
            have = true;
        }
#endif
        memoryBarrierBuffer();
        barrier();
        if (lid == 0u) {
            uint target = (p + 1u) * G, s = 0u;
            atomicAdd(claim, 1u);
            for (uint o = 0u; o < SPIN && POLL(claim) < target; o++)
                for (uint i = 0u; i < SPIN && POLL(claim) < target; i++)
                    s++;
            if (atomicOr(claim, 0u) < target)
                atomicOr(fail, 1u);
            atomicMax(spins, s);
        }
        barrier();
        memoryBarrierBuffer();
    }
}
#else
void main()
{
    uint lid = gl_LocalInvocationID.x;
    if (lid == 0u) {
#ifdef CLAIM
        uint t = atomicAdd(claim, 1u), p = 0u;
        while (p + 1u < nphase && t >= ph[2u * (p + 1u) + 1u].w)
            p++;
        s_tile = t - ph[2u * p + 1u].w;
        s_phase = t < ntiles ? p : 0xffffffffu;
#else
        s_tile = gl_WorkGroupID.x;
        s_phase = phase_id;
#endif
    }
    barrier();
    uint p = s_phase, tile = s_tile;
    if (p == 0xffffffffu)
        return; // a workgroup past the last tile (a 2-D dispatch's rounding)
    uvec4 a = ph[2u * p], b = ph[2u * p + 1u];
#ifdef PREF
    load_weights(a.x, a.y, a.z, a.w, tile);
    keep_weights();
    wait_phase(p);
#else
    wait_phase(p);
    load_weights(a.x, a.y, a.z, a.w, tile);
#endif
    stage_x(a, b);
    gemv_tile(a, b, tile);
#ifdef CLAIM
    memoryBarrierBuffer();
    barrier();
    if (lid == 0u)
        atomicAdd(done[p * uint(DS)], 1u);
#endif
}
#endif
