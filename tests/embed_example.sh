#!/bin/sh
# embed_example.sh BUILD_ROOT SOURCE_ROOT GGUF_SYNTH CC CC_ARGS — the
# examples (examples/embed.c, examples/generate.c) as an application builds
# them: the
# current build installed into a temporary root (meson install --destdir),
# the example compiled with that root's pkg-config flags only (so it sees the
# installed headers, never include/ of the source tree) and run on a small
# random-weight model written by gguf-synth. CC_ARGS are what an
# instrumented build needs its programs built with (-fsanitize=...,
# --coverage), possibly empty.
set -eu
build=$1 src=$2 synth=$3 cc=$4 cc_args=$5
tmp=$(mktemp -d "${TMPDIR:-/tmp}/glesc-embed-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if ! meson install -C "$build" --destdir "$tmp/root" --no-rebuild >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log"
    echo "embed_example: meson install failed"
    exit 1
fi
pc=$(find "$tmp/root" -name glesc.pc | head -n 1)
[ -n "$pc" ] || { echo "embed_example: no glesc.pc installed"; exit 1; }
PKG_CONFIG_PATH=$(dirname "$pc")
PKG_CONFIG_SYSROOT_DIR="$tmp/root"
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
cflags=$(pkg-config --cflags glesc)
libs=$(pkg-config --libs glesc)
libdir=$(pkg-config --libs-only-L glesc | sed 's/^-L//; s/ .*//')
case "$cflags" in
*"$tmp/root"*) ;;
*) echo "embed_example: pkg-config --cflags glesc does not point into the install: $cflags"; exit 1 ;;
esac
echo "\$ cc -std=c11 -Wall -Wextra -Wpedantic -Werror $cc_args embed.c $cflags $libs"
# shellcheck disable=SC2086 # the flags are word lists
$cc -std=c11 -Wall -Wextra -Wpedantic -Werror $cc_args "$src/examples/embed.c" $cflags $libs \
    -Wl,-rpath,"$libdir" -o "$tmp/embed"
"$synth" -o "$tmp/model.gguf" -t Q8_0 --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 \
    --n-ff 128 --n-ctx 512 --threads 1 >/dev/null
GLESC_CACHE_DIR=off "$tmp/embed" "$tmp/model.gguf"
echo "\$ cc -std=c11 -Wall -Wextra -Wpedantic -Werror $cc_args generate.c $cflags $libs"
# shellcheck disable=SC2086 # the flags are word lists
$cc -std=c11 -Wall -Wextra -Wpedantic -Werror $cc_args "$src/examples/generate.c" $cflags $libs \
    -Wl,-rpath,"$libdir" -o "$tmp/generate"
GLESC_CACHE_DIR=off "$tmp/generate" "$tmp/model.gguf" "Once upon a time" >"$tmp/generate.out"
[ -s "$tmp/generate.out" ] || { echo "embed_example: generate printed nothing"; exit 1; }
echo "generate: $(wc -c <"$tmp/generate.out") bytes of text"
