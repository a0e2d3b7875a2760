#!/bin/sh
# Runs the GGUF fuzzer as one low-priority process (the build machine is
# shared). Usage: tests/fuzz/run_fuzz.sh [seconds]   (default 1800)
# Needs build-fuzz (see fuzz_gguf.c). Crashes land in build-fuzz/crashes/;
# libFuzzer's log (with the final cov:/ft:/exec figures) in build-fuzz/fuzz-0.log.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-1800}
cd "$root/build-fuzz"
sh "$root/tests/fuzz/make_seeds.sh" "$root/build-fuzz/seeds"
mkdir -p corpus crashes
exec nice -n 10 ./tests/fuzz/fuzz_gguf -max_total_time="$secs" -jobs=1 -max_len=65536 \
    -dict="$root/tests/fuzz/gguf.dict" -artifact_prefix=crashes/ corpus seeds
