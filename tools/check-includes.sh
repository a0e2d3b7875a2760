#!/bin/sh
# check-includes.sh ROOT — the tools that are clients of the public API
# (gguf-run, glesc-server, gguf-info, gguf-synth, gguf-bench, glesc-info, tokenizer-bench, vision-bench,
# ref-check and tools/common) include no header of src/: every "quoted" include must be a
# public header (include/NAME) or a header of tools/ (tools/NAME: common/...,
# gguf-run/..., gguf-bench/..., refcheck.h), and no <angled> include may name a file of src/.
# Prints each offending line as FILE:LINE: TEXT; exit 1 when there is one.
# The unit suite runs it (tests/meson.build, test "tools_includes").
root=${1:?usage: check-includes.sh SOURCE_ROOT}
cd "$root" || exit 2
files=$(ls tools/gguf-run/*.[ch] tools/glesc-server/*.[ch] tools/gguf-info*.c tools/gguf-synth.c tools/gguf-bench/*.[ch] \
           tools/glesc-info*.c tools/tokenizer-bench.c tools/vision-bench.c \
           tools/ref-check.c tools/refcheck.[ch] tools/common/*.[ch] 2>/dev/null)
[ -n "$files" ] || { echo "check-includes.sh: no tool sources under $root/tools"; exit 2; }
for f in $files; do
    grep -n '^[[:space:]]*#[[:space:]]*include' "$f" | while IFS= read -r line; do
        h=$(printf '%s\n' "$line" | sed -n 's/.*include[[:space:]]*["<]\([^">]*\)[">].*/\1/p')
        case $line in
        *'"'*)
            case $h in *..*) ok=no ;; *) ok=yes ;; esac
            if [ $ok = yes ] && { [ -f "include/$h" ] || [ -f "tools/$h" ]; }; then
                continue
            fi ;;
        *)
            case $h in *..* | src/*) ;; *) [ -e "src/$h" ] || continue ;; esac ;;
        esac
        echo "$f:$line"
    done
done | { grep . && exit 1; exit 0; }
