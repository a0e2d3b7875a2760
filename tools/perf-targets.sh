#!/usr/bin/env bash
# perf-targets.sh — every performance figure the decode and prefill issues
# set a target for, in one command, with the project's own tools (the
# docs/performance.md is written from its output):
#
#   tools/perf-targets.sh [-B BUILD] [-o OUTDIR] [--preset NAME] [--quick]
#
# It writes random-weight models of a real shape with gguf-synth (F16, Q8_0,
# Q4_0, Q4_K_M; TinyLlama-1.1B unless --preset), then runs
#   1. gguf-bench pp512 + tg128 (+ greedy) on all four, with the rooflines
#      (decode tokens/s, dispatches per token, weight bandwidth, prefill,
#      load time, GPU memory, host RSS),
#   2. the same on Q4_0 and Q4_K_M with --portable (the fallback a small GPU
#      gets: no subgroups, 128 invocations, 16 KiB shared, 128 MiB buffers),
#   3. tg128 at a depth of 2048 tokens next to depth 0 (Q4_0), and at
#      depth 2048 for each KV cache type (f32, f16, q8_0, q4_0),
#   4. time to first token cold and warm (Q4_0),
#   5. glesc-bench --gemm 512 (the FMA peak, 4096x4096 and TinyLlama's shapes),
#   6. glesc-bench's GEMV table (every type, 4096x4096 and 11008x4096),
# after a warm-up run of the same models and GEMMs (not measured).
# Exit status 1 when a tool failed or ran past its limit (PT_TIMEOUT).
# --quick shrinks everything (a 4-layer 512-wide model, -p 64 -n 32 -r 2,
# small GEMV/GEMM shapes) so the script itself can be tried on llvmpipe.
# Logs and gguf-bench's JSON go to OUTDIR (default: a temporary folder).
set -uo pipefail

BUILD=build
OUTDIR=
PRESET=tinyllama-1.1b
QUICK=0
while [ $# -gt 0 ]; do
    case "$1" in
    -B) BUILD=$2; shift 2 ;;
    -o) OUTDIR=$2; shift 2 ;;
    --preset) PRESET=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    *) echo "usage: tools/perf-targets.sh [-B BUILD] [-o OUTDIR] [--preset NAME] [--quick]" >&2
       exit 2 ;;
    esac
done
T=$BUILD/tools
for t in gguf-synth gguf-bench glesc-bench glesc-info; do
    [ -x "$T/$t" ] || { echo "perf-targets: $T/$t is not built (meson setup $BUILD --buildtype=release)" >&2; exit 1; }
done
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
[ -n "$OUTDIR" ] || OUTDIR=$WORK/out
mkdir -p "$OUTDIR"
export GLESC_CACHE_DIR=$WORK/cache

if [ "$QUICK" = 1 ]; then
    SYNTH=(--n-layer 4 --n-embd 512 --n-ff 1408 --n-vocab 4096 --n-head 8 --n-head-kv 2)
    P=64; N=32; R=2; D=256; TTFT=16
    GEMV_SHAPES=512x512,1024x512; GEMM_SHAPES=512x512; GEMM_M=64
else
    SYNTH=()
    P=512; N=128; R=3; D=2048; TTFT=32
    GEMV_SHAPES=4096x4096,11008x4096; GEMM_SHAPES=4096x4096,2048x2048,2048x5632,11264x2048
    GEMM_M=512
fi
section() { printf '\n=== %s\n' "$*"; }
# Each tool run has its own time limit (PT_TIMEOUT seconds, default 240), so
# one that hangs (the H200's driver sometimes stalls a process for 20-45 s
# or more, docs/tools.md: glesc-bench) costs its own section, not the ones after it.
LIMIT=${PT_TIMEOUT:-240}
run() {
    timeout "$LIMIT" "$@"
    local rc=$?
    [ $rc = 124 ] && echo "perf-targets: $(basename "$1") stopped after $LIMIT s (PT_TIMEOUT)"
    [ $rc = 0 ] || FAILED=1
}
FAILED=0

section "device"
"$T/glesc-info" | head -6
git -C "$(dirname "$0")" log -1 --format='commit %h %cd' --date=short 2>/dev/null

section "models (gguf-synth $PRESET)"
for t in F16 Q8_0 Q4_0 Q4_K_M; do
    "$T/gguf-synth" "$PRESET" "${SYNTH[@]}" -t "$t" -o "$WORK/m-$t.gguf" &
done
wait
M=()
for t in Q4_0 Q4_K_M Q8_0 F16; do
    [ -f "$WORK/m-$t.gguf" ] || { echo "perf-targets: gguf-synth failed for $t" >&2; exit 1; }
    M+=(-m "$WORK/m-$t.gguf")
done

# The first process to run kernels the driver has not compiled before times
# them badly (the H200: pp512 9,111 +- 4,573 t/s in such a run, 11,501 +- 447
# in the next; GEMM rows at a fifth of their rate): run them once, unmeasured.
section "warm-up (the same kernels, not measured)"
run "$T/gguf-bench" "${M[@]}" -p "$P" -n 16 -r 1 --roofline-mib 0 > /dev/null
run "$T/glesc-bench" --gemm "$GEMM_M" --types f16,q4_0,q4_k --shapes "$GEMM_SHAPES" --iters 2 \
    > /dev/null
echo "done"

section "1. pp$P and tg$N, full path"
run "$T/gguf-bench" "${M[@]}" -p "$P" -n "$N" -r "$R" --greedy --json-file "$OUTDIR/full.json"
section "2. pp$P and tg$N, --portable"
run "$T/gguf-bench" -m "$WORK/m-Q4_0.gguf" -m "$WORK/m-Q4_K_M.gguf" -p "$P" -n "$N" -r "$R" \
    --portable --roofline-mib 0 --json-file "$OUTDIR/portable.json"
section "3. tg$N at depth 0 and $D (Q4_0)"
run "$T/gguf-bench" -m "$WORK/m-Q4_0.gguf" -p 0 -n "$N" -d "0,$D" -r "$R" --roofline-mib 0 \
    --json-file "$OUTDIR/depth.json"
section "3b. tg$N at depth $D per KV cache type (Q4_0): speed and the cache's bytes"
run "$T/gguf-bench" -m "$WORK/m-Q4_0.gguf" -p 0 -n "$N" -d "$D" -r "$R" --roofline-mib 0 \
    --kv-type f32,f16,q8_0,q4_0 --json-file "$OUTDIR/kv-types.json"
section "4. time to first token, $TTFT-token prompt (Q4_0)"
run "$T/gguf-bench" -m "$WORK/m-Q4_0.gguf" -p 0 -n 0 --roofline-mib 0 --ttft "$TTFT"
section "5. GEMM of $GEMM_M columns, fraction of the FMA peak"
run "$T/glesc-bench" --gemm "$GEMM_M" --types f16,q4_0,q4_k --shapes "$GEMM_SHAPES"
section "6. GEMV, fraction of the read-only roofline"
run "$T/glesc-bench" --types f16,bf16,q8_0,q4_0,q4_1,q5_0,q5_1,q4_k,q5_k,q6_k --shapes "$GEMV_SHAPES"
exit $FAILED
