/*
 * devclass.c — the kernels' configurations per device class (the class:
 * src/gl/devclass.c, from the renderer, or GLESC_DEVICE_CLASS): what each
 * generator starts from before the caps clamp it and its tuning variable
 * (GLESC_GEMV, GLESC_GEMM, GLESC_ATTN, GLESC_ATTN_DECODE) overrides it.
 * Data, one row per class, each with where its values come from.
 *
 * The large GPUs' row is the H200's measured best (docs/performance.md);
 * llvmpipe's was measured on it (its SIMD loops favour small workgroups,
 * and LLVM's compile time grows with every written-out copy of a unit).
 * The small GPUs' row comes from the device matrix (docs/devices.md,
 * *Device classes*): the compilers of Mesa 25.0.7's Panfrost (G52, G610),
 * Freedreno (a618, a740) and V3D (4.2, 7.1) on every decode kernel of a
 * llama model in Q4_0 and Q8_0, over sweeps of each knob.
 */
#include "kernels/kernels.h"

/* The GPUs that are not small: the H200's tuning (256-invocation GEMVs of
 * 32-lane teams, two rows a team for decode, one unit in flight, 8
 * columns at once; decode attention split over 256 workgroups). Compile
 * time counts too, since a first start waits for it: one unit in flight
 * decodes as fast as two and compiles in half the time, and the narrow
 * GEMM (up to 64 columns: short prompts, the first token's) is written as
 * loops, which compile in a third of the time; the wide GEMM stays
 * written out, which prefill is faster with (docs/performance.md, *Time to
 * first token on the H200*). GEMM slots, the workgroups of 256 invocations
 * the device runs at once: about one per compute unit (the H200 has 132,
 * an A100 108, an RTX 4090 128); a guess, since GLES does not say
 * (NVIDIA's GL_NV_shader_thread_group, whose gl_SMCountNV would, is not in
 * the H200's GLES); only the split of K depends on it.
 * A session's prompts of the narrow GEMM's widths (up to 64 tokens)
 * without its q/k/v group, gate/up pair and epilogues (fuse_skip_narrow;
 * graph_narrow_skips): their matmuls then share one program a weight
 * type (the plain GEMM) and the adds and silu·up are small kernels, which
 * NVIDIA's driver compiles faster than the fused GEMMs: cold time to first
 * token (a 32-token prompt and one step, H200, alternating in one visit)
 * TinyLlama Q4_0 855-1,046 ms against 1,155-1,466, Q4_K_M 1,058-1,295
 * against 1,369-1,981. Cost: short prompts run more dispatches, pp32
 * 3,338 against 3,834 t/s, pp64 6,324 against 7,804 (pp512 and decode
 * unchanged). Compiling the fused ones in the background after a first
 * prompt and switching was tried: the first steps then waited 1.4-2.4 s
 * for the driver (docs/performance.md, *The cold first token*).
 * Decode attention with few integer divisions (decode_few_div, first
 * V3D's): a fused KV-cache write's row found by a subtraction, not a
 * division by a uniform and a search per element read, which held each
 * tile load behind its own branch; H200, TinyLlama, the kernel 7-10%
 * faster at depth 0 and 2048, tg64 at depth 2048 Q4_0 427-430 against
 * 403-408, Q8_0 390-391 against 371 (docs/performance.md, *Decode at
 * depth*). From 512 keys on, the decode attention's key and value tiles
 * go through registers (decode_regs_from; the session compiles that
 * variant ahead of the depth): H200, TinyLlama tg64 in two rounds, always
 * against never, Q4_0 584-593 / 565-566 at depth 0, 542-544 / 500-513 at
 * 512, 480-492 / 415-421 at 2048; Q8_0 466-471 / 481-483 at depth 0 (why
 * Q8_0's shallow steps lose is not settled), 443-455 / 448-456 at 512,
 * 400-409 / 370-383 at 2048 (docs/performance.md, *Decode at depth*). */
static const kernels_class large_gpu = {
    .gemv = {.wg = 256,
             .team = 32,
             .nr1 = 2,
             .nrm = 1,
             .unroll_q = 1,
             .fill = 4,
             .xs = 4096,
             .cols = 8,
             .groups = 256},
    .gemm = {.slots = 128, .loop = false, .loop_narrow = true, .pad = true},
    .attn = {.wg = 128,
             .target = 256,
             .pf_wg = 256,
             .pf_target = 512,
             .decode_max_q = 1,
             .decode_regs_from = 512,
             .decode_few_div = true},
    .fuse_skip_narrow =
        KERNELS_FUSE_SKIP_GROUP | KERNELS_FUSE_SKIP_PAIR | KERNELS_FUSE_SKIP_EPILOGUE,
};

/* The small GPUs (Mali, Adreno, V3D, and a driver glesc does not know).
 * GEMV: one row a team and one unit in flight are what remove the spills
 * (the H200's two rows and two units spilled on G610 in every decode GEMV,
 * 20:122 to 75:1036, at 3-24 s a link; on a618 in gate/up and the head);
 * one vec4 a fill halves the code; 64-invocation workgroups of 8-lane teams
 * give Freedreno 64-wide waves (6-10 of them, 384-640 invocations an SP,
 * against 2 of 128) and cut 5-20% of the instructions everywhere; a
 * 1024-element x slice keeps a workgroup's shared memory low enough for
 * two or more workgroups an SP (ir3 fits the waves to the shared memory,
 * then raises the registers to match). Two columns a pass: every column
 * adds its accumulator and its x unit (five spilled on G610 in every
 * configuration). Half units (a run of 16 elements a step, in a loop the
 * compiler keeps rolled: only a run's weights and x live at once) take
 * the spills out of every decode GEMV of Q4_0, Q5_1's and Q8_0's q/k/v on
 * G610, and cut V3D's from 27:21-45:60 to 0:0-24:19 (f32, f16, bf16: none
 * left). What is left: with this row Mali runs every GEMV at 1 thread
 * (more than 32 registers; Mali's own row, below, takes most of them to
 * 2), the gate/up of the block types with offsets or K-quant scales spills
 * 5:38-9:48 on G610, and V3D's GEMVs with a folded norm 4:4-24:19.
 * GEMM: the 64 x 16 tile of 4 x 2 an invocation, nothing of the next
 * step in flight during a step (no_prefetch), the step as a loop
 * (docs/devices.md, *GEMM register tiles*: llama Q4_0's prefill GEMMs,
 * spills:fills q/k/v, down, gate/up; the 64 x 32 of 4 x 4 with the next
 * step in flight before): G610 79:482, 37:196, 40:215 -> 0:0 each; G52
 * 85:500, 39:202, 40:222 -> 0:0; V3D 4.2 131:146, 131:146, 164:150 ->
 * 0:0, 0:0, 16:22 (its gate/up pair: see v3d); a618 and a740 0:0 before
 * and after, 4-26% fewer instructions, a618's gate/up at 4 waves (was 2).
 * Q8_0, F16 and Q4_K_M alike (0:0 everywhere but G610's GEMMs of a Q6_K
 * weight, 4:43 and 1:9, were 111:578 and 47:232: Mali's x_first, below,
 * takes those out). 4 x 2 in flight still
 * spilled (G610 10:61, V3D 4.2 55:61), and so did 4 x 4 without the
 * prefetch (G610 2:29, V3D 4.2 11:19-32:31). Prefill attention: 16 rows (8
 * queries of 2 heads) and 32-key tiles a workgroup of 128 (the tiles would
 * otherwise grow to 64 keys, which 16 rows leave room for in 32 KiB of
 * shared memory), so an invocation holds 1 x 4 scores and 1 x 2 output
 * vec4 (with 32 rows, 2 x 4 and 2 x 2: every Mali and V3D spilled). llama
 * Q4_0's, spills:fills 32 rows -> 16 (docs/devices.md, *Prefill
 * attention*): G610 10:59 -> 0:0, G52 8:54 -> 0:0, V3D 4.2 33:64 -> 0:0,
 * 7.1 48:74 -> 0:0, V3D's link 23-25 s -> 4-5 s; a618 and a740 0:0 before
 * and after, 8% fewer instructions. 32 rows of 16-key tiles (2 x 2 scores)
 * still spilled on V3D (6:20, 18:49), 16 rows of 64-key tiles (1 x 8) on
 * Mali and V3D (7:48-36:51). 32 rows of a 256-invocation workgroup compile
 * to the same invocation (0:0 alike) and share a staged key tile among
 * twice the rows, but 128 is what every other small-GPU kernel runs (256
 * with barriers untried on the boards). A longer head holds more output
 * vec4 an invocation with 16 rows (d 128: 1 x 4; d 256, whose shared
 * memory leaves 8-key tiles: 1 x 8), so the rows halve while an
 * invocation has more than the class's pf_out (PF_OUT: V3D 2, Mali 4,
 * none elsewhere) and fewer rows lower them. One layer of each shape,
 * Q4_0, prefill attention, spills:fills (docs/devices.md, *Prefill
 * attention of long heads*): Gemma 3 1B and Gemma 2 2B (d 256: 8 rows of
 * 16-key tiles, 1 x 4) V3D 7.1 36:70 -> 5:12, 4.2 33:66 -> 0:0, G610
 * 3:29 -> 0:0, G52 1:6 -> 0:0; Llama-2-7B's and Qwen3's d 128 and
 * Phi-3.5-mini's 96 (8 rows, 1 x 2) V3D 7.1 12:30, 11:34, 2:4 -> 0:0, 4.2
 * 4:10, 5:12 (d 128) -> 0:0; 7-29% fewer instructions, links under qemu
 * 8-48 s -> 3-23 s on V3D. Adreno compiles all of them 0:0 with 16 rows.
 * Where no fewer rows bring an invocation within pf_out (V3D's heads of
 * 256: 4 output vec4 at any rows of 16-key tiles), the kernel takes
 * narrower steps (attention.c's narrow: q staged an element at a time, a
 * tile's values added one output vec4 at a time over a loop the compiler
 * keeps): V3D 7.1 5:12 -> 0:0 (Gemma 3 1B 3218 -> 2765 instructions,
 * Gemma 2 2B 2909 -> 2638), 4.2 0:0 with 9-13% fewer (docs/devices.md,
 * *V3D's long heads*).
 * A macro: Mali's and V3D's rows are the same but for the GEMV's quarter
 * units (quad), the decode attention's registers (LEAN: decode_cu,
 * decode_lean; ACC: decode_co, decode_acc, Mali's only), its integer
 * divisions (FEW_DIV: decode_few_div, V3D's only), prefill's scores loop
 * (ROLL: pf_roll, V3D's only), the GEMM's x fetched first (XFIRST:
 * x_first, Mali's only), prefill's output vec4 an invocation (PF_OUT)
 * and the decode attention's loops kept rolled (DROLL: decode_roll, V3D's
 * only), Mali's for its split decode pair and V3D's for its fusions, below. */
#define SMALL_GPU_ROWS(QUAD, LEAN, FEW_DIV, ROLL, XFIRST, ACC, PF_OUT, DROLL)                      \
    .gemv = {.wg = 64,                                                                             \
             .team = 8,                                                                            \
             .nr1 = 1,                                                                             \
             .nrm = 1,                                                                             \
             .unroll_q = 1,                                                                        \
             .fill = 1,                                                                            \
             .xs = 1024,                                                                           \
             .cols = 2,                                                                            \
             .groups = 256,                                                                        \
             .half = true,                                                                         \
             .quad = QUAD},                                                                        \
    .gemm = {.bn = 64,                                                                             \
             .bm = 16,                                                                             \
             .tn = 4,                                                                              \
             .tm = 2,                                                                              \
             .slots = 16,                                                                          \
             .loop = true,                                                                         \
             .pad = true,                                                                          \
             .no_prefetch = true,                                                                  \
             .x_first = XFIRST},                                                                   \
    .attn = {.wg = 128,                                                                            \
             .target = 64,                                                                         \
             .pf_wg = 128,                                                                         \
             .pf_target = 64,                                                                      \
             .pf_r = 16,                                                                           \
             .pf_bk = 32,                                                                          \
             .pf_out = PF_OUT,                                                                     \
             .decode_max_q = 1,                                                                    \
             .decode_cu = (LEAN) ? 2 : 0,                                                          \
             .decode_co = (ACC) ? 2 : 0,                                                           \
             .decode_acc = (ACC) ? 2 : 0,                                                          \
             .decode_lean = LEAN,                                                                  \
             .decode_few_div = FEW_DIV,                                                            \
             .decode_roll = DROLL,                                                                 \
             .pf_roll = ROLL}

static const kernels_class small_gpu = {
    SMALL_GPU_ROWS(false, false, false, false, false, false, 0, 0)};

/* Mali (Bifrost G52, Valhall G610): the small GPUs' row with the GEMV's
 * quarter units (quad: a run's vec4 of quants decoded and multiplied one
 * at a time, a word a load, and the values the compilers can compute
 * again not held across its loops, gemv.glsl's GEMV_LEAN), for every
 * block type (the snippet's unit_q4, its dq4_q or dq4) and for f32, f16
 * and bf16 (pq4: a vec4 of weights of scale 1, each product straight into
 * the accumulators, gemv_units.glsl's GEMV_PLAIN). Panfrost runs two
 * threads a core only within 32 registers, and with half units every
 * decode GEMV took more: 39-64 registers on G610 and G52, 1 thread. With
 * the quarter units (the device matrix, a synthesized llama in each type
 * and the reference q3_k, q2_k and plain-type models, decode): 2 threads
 * and no spills for every decode GEMV but the gate/up pairs of the block
 * types other than q4_0 and q8_0 (36-46 registers, 1 thread; q3_k's
 * spilled 33:86): those run as two GEMVs (decode_pair_split: the norm,
 * gate, up with silu(gate) a kernel each, 2 threads; docs/devices.md,
 * *What is left*). Cost: each vec4 loads its word and its run's scale
 * again (cached), and the quants are converted byte by byte (conversions,
 * not the fma of the other rows); a split pair costs two more dispatches a
 * layer (the norm's own kernel, its result and the gate's through memory).
 * The decode attention (LEAN: the combine 2 splits a round, the fused
 * KV-cache writes after the attention with their row lookup where it is
 * called, NeoX rope's index by a select): 2 threads and no spills on G610
 * and G52 for every synthesized arch, was 1 (docs/devices.md, *What is
 * left*). With 4 or more query heads a kv head (TinyLlama 8, Qwen2.5-0.5B
 * 7, Llama-3.2-1B and Gemma 3 1B 4, the reference phi3 and qwen2 4) it was
 * 1 thread again: an invocation held every head's accumulators in
 * registers across the key tiles, beside the key hooks (rope, the fused
 * writes), and the combine all its outputs' loads of a round. ACC: the
 * accumulators in shared memory between tiles where an invocation has
 * more than 2 (decode_acc), the combine in passes of 2 outputs
 * (decode_co): 2 threads and no spills on both for all of them (G610
 * TinyLlama 3175 -> 3027 instructions, Llama-3.2-1B 3003 -> 3046, phi3
 * 3303 -> 3350; docs/devices.md, *Decode attention of 4 and more heads a
 * kv head*). Fewer heads a workgroup instead needed 2 on G610 (NeoX rope
 * at 4: 1 thread), left Gemma 3 1B at 1 and staged each kv head's keys
 * and values 4 to 7 times as often. V3D keeps them in registers (2
 * threads either way; ACC cost it 9-17% more instructions).
 * The prefill GEMM's step fetches x before it decodes the weights
 * (x_first: one vec4 of x live through the decode, not the decoded four
 * vec4 of weights through x's fetch and its prologue): on G610 the GEMMs
 * of a Q6_K weight (Q4_K_M's v and down) went 4:43 and 1:9 -> 0:0 with
 * 2-4% fewer instructions, phi3's down with its silu(gate) * up prologue
 * and residual 1:9-6:33 -> 0:0 (Q8_0, Q4_0, Q4_K_M); the other prefill
 * GEMMs of a synthesized llama, phi3, qwen3 and gemma3 0:0 before and
 * after on G610 and G52, their instructions within 0.6% (docs/devices.md,
 * *Mali's prefill GEMMs: x first*). Not the other classes': a740 took up
 * to 4.3% more instructions, V3D 7.1's phi3 Q4_K_M down spilled (6:11,
 * was 0:0). */
static const kernels_class mali = {SMALL_GPU_ROWS(true, true, false, false, true, true, 4, 0),
                                   .decode_pair_split = true};

/* V3D: the small GPUs' row, with prefill's q, k and v in three GEMMs, not
 * one grouped kernel: V3D's compiler links the grouped one (three copies
 * of the K loop) in 120-130 s under qemu against 20 s for each of its
 * parts (issue 26's 60 s; V3D 7.1, llama Q4_0, docs/devices.md). And
 * prefill's gate and up in two GEMMs, not the pair: with the 4 x 2 tile
 * the pair is the one GEMM left spilling at 2 threads (both weights'
 * decode in one loop; V3D 4.2 16:22, 7.1 24:27; apart, each 0:0, so
 * every prefill GEMM of llama Q4_0, Q8_0, F16 and Q4_K_M is 0:0 on both,
 * was 123:139-191:190). Decode keeps its grouped and paired GEMVs.
 * Mali's quarter units and lean decode attention (its pair kept: V3D's
 * registers hold it at 2 threads): with the half units every GEMV with a
 * folded norm spilled at 2 threads (4:4-24:19: the GEMV itself, not the
 * norm, was over the registers), so did the 2..8-column GEMVs
 * (28:24-36:36, llama Q4_0) and the decode attention on 7.1 (llama 7:13,
 * phi3 18:20) and on 4.2 with NeoX rope (phi3 11:15); with them every
 * decode and 2..8-column kernel of a synthesized llama and phi3 in F16,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K_M, Q5_K_M and Q6_K is 0:0 at 2
 * threads on both, with 15-45% fewer instructions in the GEMVs
 * (docs/devices.md, *V3D*); the plain types' (GEMV_PLAIN) keep a
 * synthesized llama's f32, f16 and bf16 decode and 2..8-column GEMVs 0:0
 * at 2 threads on both, with 2-12% fewer instructions than their half
 * units (docs/devices.md, *Mali*). The decode attention with few integer
 * divisions by uniforms (decode_few_div, kb's few_div: V3D divides in
 * software, several temporaries a division, and the fused KV-cache
 * writes' hooks divided several times a key element): a folded reshape's
 * coordinates in its source's dimensions of 1 taken as 0, a decode step's
 * one row written found by a subtraction. With Mali's lean attention alone
 * qwen3 (q/k norms), gemma2 and gemma3 still spilled on 7.1 (2:5; window
 * layers 2:5, global 6:7; 8:8); with it every synthesized arch's decode
 * attention is 0:0 at 2 threads on both drivers, with 30-33% fewer
 * instructions (7.1: 2240-2534 -> 1512-1745; docs/devices.md, *V3D*).
 * Prefill's scores loop over the head's vec4s bounded by a uniform
 * (pf_roll, attn_prefill.glsl's ATTN_ROLL): with a constant bound the
 * compiler wrote out a head of 32 (8 vec4: the reference llama, qwen3 and
 * gemma3 models), all of its q and k loads in flight, and the attention of
 * a short prompt and of a prefill alike spilled 76:128-79:134 at 2 threads
 * on both drivers (links 32-44 s under qemu; not the fused KV-cache
 * writes' divisions, nor rope or the q/k norms: the writes and rope taken
 * out by hand still spilled 76:122); bounded, 0:0 with 23-28% fewer
 * instructions (7.1: 2956-3428 -> 2128-2647), links 2-4 s. A head of 64
 * was kept a loop before: a few instructions more or less, 0:0 alike
 * (docs/devices.md, *V3D*). The decode attention's per-head loops over a
 * key tile (its running maximum and sum, run by HG invocations) bounded by
 * a uniform where a tile has at most 16 keys (decode_roll; Mesa's V3D
 * writes out loops of up to 16 iterations, its max_unroll_iterations):
 * written out, the 16-key tiles of the heads of 96 and 128 spilled with
 * one query head a kv head (Llama-2-7B: 7.1 12:18, 4.2 6:6; Phi-3.5-mini
 * 16:26, 11:16); rolled, 0:0 at 2 threads (7.1 2578 -> 1655 and 2720 ->
 * 1788 instructions), and the other long heads' fewer instructions too
 * (Qwen3's 128 2419 -> 2021, Gemma 3 1B's 256 2625 -> 2548;
 * docs/devices.md, *V3D's long heads*). The tiles of 32 and 64 keys
 * (heads of 64 and 32) are loops already: their GLSL is the same. 8-key
 * tiles for the long heads (GLESC_ATTN_DECODE=t=8) were 0:0 too, with
 * more instructions (1844, 2052) and twice the barriers a key. */
static const kernels_class v3d = {SMALL_GPU_ROWS(true, true, true, true, false, false, 2, 16),
                                  .fuse_skip = KERNELS_FUSE_SKIP_GROUP | KERNELS_FUSE_SKIP_PAIR};

/* llvmpipe: 64-invocation GEMVs of 4-lane teams (the demo's 256-wide GEMVs
 * ran 2.5x faster than with 8 rows of teams of 16), four rows a team (the
 * demo model's decode 25% faster than two), one unit and one vec4 at a
 * time (halves a cold compile, decode no slower). A short prompt (up to 8
 * tokens) runs the decode step's programs: the GEMV a column a pass and
 * the decode attention for every query; its GEMM has one tile for every
 * width (64 x 64 of 8 x 8: llvmpipe runs an invocation's accumulators as
 * vector registers of its SIMD loop; the step as a loop, swizzled rows;
 * never split). So a
 * first use compiles the decode's programs and, for longer prompts, the
 * GEMMs and the prefill attention, and no prompt length compiles more
 * after it. GEMV up to 8 columns: what the device profile measures on it,
 * without the programs it compiles. */
static const kernels_class cpu = {
    .gemv = {.wg = 64,
             .team = 4,
             .nr1 = 4,
             .nrm = 4,
             .unroll_q = 1,
             .fill = 1,
             .xs = 4096,
             .cols = 1,
             .groups = 256},
    .gemm = {.bn = 64, .bm = 64, .tn = 8, .tm = 8, .slots = 1, .loop = true, .pad = false},
    .attn = {.wg = 64, .target = 8, .pf_wg = 128, .pf_target = 8, .decode_max_q = 8},
    .gemv_max_m = 8,
};

static const kernels_class *const classes[GL_CLASS_COUNT] = {
    [GL_CLASS_DEFAULT] = &small_gpu,    [GL_CLASS_LLVMPIPE] = &cpu,
    [GL_CLASS_NVIDIA] = &large_gpu,     [GL_CLASS_AMD] = &large_gpu,
    [GL_CLASS_INTEL] = &large_gpu,      [GL_CLASS_MALI_BIFROST] = &mali,
    [GL_CLASS_MALI_VALHALL] = &mali,    [GL_CLASS_ADRENO_6XX] = &small_gpu,
    [GL_CLASS_ADRENO_7XX] = &small_gpu, [GL_CLASS_V3D] = &v3d,
};

const kernels_class *kernels_class_of(const glesc_context *ctx)
{
    gl_devclass c = ctx->devclass;
    return classes[c >= 0 && c < GL_CLASS_COUNT ? c : GL_CLASS_DEFAULT];
}
