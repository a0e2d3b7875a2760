#!/bin/sh
# Builds the fuzzer's seed corpus in OUT (default build-fuzz/seeds): the
# regression corpus (tests/gguf_corpus) plus the first 64 KiB of every GGUF in
# the shared folder (headers, metadata and tensor directories of real files).
# The shared models are read in place and never copied into the repository.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build-fuzz/seeds}
shared=${GLESC_SHARED_DIR:-$root/../shared}
mkdir -p "$out"
cp "$root"/tests/gguf_corpus/*.gguf "$out"/
if [ -d "$shared" ]; then
    find "$shared/models" "$shared/reference/models" -name '*.gguf' 2>/dev/null |
        while read -r f; do
            head -c 65536 "$f" >"$out/head-$(basename "$f")"
        done
fi
echo "$(ls "$out" | wc -l) seeds in $out"
