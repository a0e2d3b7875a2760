#!/bin/sh
# Runs a GGUF fuzzer as one low-priority process (the build machine is
# shared). Usage: tests/fuzz/run_fuzz.sh [seconds [target]]
#   seconds  default 1800; target fuzz_gguf (default), fuzz_gguf_roundtrip,
#   fuzz_state (the session state loader), fuzz_grammar (the GBNF parser and
#   matcher), fuzz_json_schema (the JSON schema converter) or
#   fuzz_server_request (glesc-server's request parser)
# Needs build-fuzz (see fuzz_gguf.c). Crashes land in build-fuzz/crashes/;
# libFuzzer's log (with the final cov:/ft:/exec figures) in
# build-fuzz/fuzz-0.log. Each target keeps its own corpus folder and also
# reads the other's as seeds.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-1800}
target=${2:-fuzz_gguf}
cd "$root/build-fuzz"
sh "$root/tests/fuzz/make_seeds.sh" "$root/build-fuzz/seeds"
mkdir -p corpus corpus-roundtrip crashes
case $target in
fuzz_gguf) dirs="corpus seeds corpus-roundtrip" ;;
fuzz_gguf_roundtrip) dirs="corpus-roundtrip seeds corpus" ;;
fuzz_state)
    # a valid state as the seed (the target writes it), its own corpus
    mkdir -p corpus-state seeds-state
    GLESC_FUZZ_STATE_SEED=seeds-state/valid ./tests/fuzz/fuzz_state -runs=0 >/dev/null 2>&1
    exec nice -n 10 ./tests/fuzz/fuzz_state -max_total_time="$secs" -jobs=1 -max_len=16384 \
        -artifact_prefix=crashes/ corpus-state seeds-state ;;
fuzz_grammar | fuzz_json_schema)
    # the example grammars and schemas as seeds, a dictionary of their syntax
    kind=${target#fuzz_}
    case $kind in grammar) seeds=seeds_grammar dict=grammar.dict ;;
                  json_schema) seeds=seeds_schema dict=json_schema.dict ;; esac
    mkdir -p "corpus-$kind"
    exec nice -n 10 ./tests/fuzz/$target -max_total_time="$secs" -jobs=1 -max_len=4096 \
        -timeout=10 -dict="$root/tests/fuzz/$dict" -artifact_prefix=crashes/ "corpus-$kind" \
        "$root/tests/fuzz/$seeds" ;;
fuzz_server_request)
    mkdir -p corpus-server
    exec nice -n 10 ./tests/fuzz/fuzz_server_request -max_total_time="$secs" -jobs=1 \
        -max_len=8192 -dict="$root/tests/fuzz/server.dict" -artifact_prefix=crashes/ \
        corpus-server "$root/tests/fuzz/server_seeds" ;;
*) echo "unknown target $target" >&2; exit 2 ;;
esac
# shellcheck disable=SC2086
exec nice -n 10 ./tests/fuzz/$target -max_total_time="$secs" -jobs=1 -max_len=65536 \
    -dict="$root/tests/fuzz/gguf.dict" -artifact_prefix=crashes/ $dirs
