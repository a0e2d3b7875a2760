#!/usr/bin/env bash
# glesc's one entry point for people and CI, on Debian 12 as root:
#   tools/dev.sh run    install what is needed, build, run the main job
#                       (gguf-run's demo; arguments go to gguf-run)
#   tools/dev.sh test   install, build with -Werror, run every test suite,
#                       again under ASan+UBSan, a valgrind leak check, the
#                       format check, the arm64 cross build and the device
#                       check (its kernels compiled by Mesa's Panfrost G610
#                       and Freedreno a618 compilers); ends with
#                       "N passed, N failed"
#   tools/dev.sh devices [matrix.py options]
#                       the device matrix: tools/devices/setup.sh (Mesa 25's
#                       drm-shim drivers under qemu, glesc's arm64 build),
#                       then tools/devices/matrix.py (default: every model in
#                       ../shared/reference/models, else --synth; on g52,
#                       g610, a618, a740); see tools/devices/matrix.py --help
# GLESC_NO_INSTALL=1 skips apt-get (packages already there); GLESC_CROSS=0
# skips the arm64 cross build and the device check, GLESC_DEVICES=0 the
# device check alone (GLESC_DEVICES=gemm: a longer one, see devices_ci).
set -uo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(meson ninja-build pkg-config gcc libc6-dev python3 git
          libegl-dev libgles-dev libgbm-dev libegl-mesa0 libgl1-mesa-dri
          libxxhash-dev libpcre2-dev libutf8proc-dev libjson-c-dev libcriterion-dev
          valgrind clang-format libmicrohttpd-dev curl
          protobuf-c-compiler libprotobuf-c-dev libonnx-dev libonnx-testdata)
# The OpenAI client test of glesc-server (tests/server/): Debian's Node.js
# and npm, then the openai package by `npm ci`; optional, the test skips
# without them.
NODE_PACKAGES=(nodejs npm)
CROSS_PACKAGES=(gcc-aarch64-linux-gnu libc6-dev:arm64 libegl-dev:arm64 libgles-dev:arm64
                libgbm-dev:arm64 libxxhash-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64
                libjson-c-dev:arm64)

log() { printf '\n=== %s\n' "$*"; }

install_packages() {
    [ "${GLESC_NO_INSTALL:-0}" = 1 ] && return 0
    export DEBIAN_FRONTEND=noninteractive
    local cross=$1
    if [ "$cross" = 1 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
        dpkg --add-architecture arm64
    fi
    log "apt-get update"
    apt-get update -q >/dev/null || { echo "apt-get update failed"; return 1; }
    local pkgs=("${PACKAGES[@]}")
    [ "$cross" = 1 ] && pkgs+=("${CROSS_PACKAGES[@]}")
    log "apt-get install ${pkgs[*]}"
    apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null ||
        { echo "apt-get install failed"; return 1; }
    command -v npm >/dev/null ||
        apt-get install -y -q --no-install-recommends "${NODE_PACKAGES[@]}" >/dev/null ||
        echo "nodejs/npm not installed: the OpenAI client test will skip"
}

# tests/server/node_modules: the official openai package at package-lock.json's
# version (the test skips without it).
install_node_client() {
    command -v npm >/dev/null || return 0
    npm ci --prefix tests/server --no-audit --no-fund >/dev/null 2>&1 ||
        echo "npm ci failed: the OpenAI client test will skip"
}

build() { # build DIR [meson options...]
    local dir=$1; shift
    if [ ! -d "$dir" ]; then
        meson setup "$dir" "$@" >/dev/null || return 1
    else
        meson setup --reconfigure "$dir" "$@" >/dev/null || return 1
    fi
    ninja -C "$dir" || return 1
}

PASSED=0
FAILED=0
# Adds the Criterion counts of a meson test run (from its testlog.json).
count_criterion() {
    local counts
    counts=$(python3 - "$1" <<'PY'
import json, re, sys
p = f = 0
for line in open(sys.argv[1]):
    t = json.loads(line)
    m = re.search(r"Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)",
                  t.get("stderr", "") + t.get("stdout", ""))
    if m:
        p += int(m.group(2)); f += int(m.group(3))
        if t["result"] not in ("OK", "SKIP") and int(m.group(3)) == 0:
            f += 1  # the executable failed outside any test (sanitizer exit, leak)
    else:
        p += t["result"] in ("OK", "SKIP"); f += t["result"] not in ("OK", "SKIP")
print(p, f)
PY
)
    PASSED=$((PASSED + ${counts% *}))
    FAILED=$((FAILED + ${counts#* }))
}

check() { # check NAME COMMAND...: one pass/fail line
    if "${@:2}"; then
        PASSED=$((PASSED + 1)); echo "check $1: ok"
    else
        FAILED=$((FAILED + 1)); echo "check $1: FAILED"
    fi
}

run_suites() { # run_suites BUILD_DIR
    meson test -C "$1" --print-errorlogs --num-processes 2
    count_criterion "$1/meson-logs/testlog.json"
}

cmd_test() {
    local cross=${GLESC_CROSS:-1}
    install_packages "$cross" || exit 1
    install_node_client
    log "build (-Werror)"
    build build-ci -Dwerror=true --buildtype=debugoptimized || { echo "0 passed, 1 failed"; exit 1; }
    log "test suites (llvmpipe is the GPU on machines without one)"
    run_suites build-ci

    log "ASan + UBSan build and suites"
    # Leaks are checked by valgrind below: Criterion's workers _exit() before
    # LeakSanitizer would run, and llvmpipe's JIT code leaks by design.
    if build build-ci-asan -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false; then
        ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 run_suites build-ci-asan
    else
        FAILED=$((FAILED + 1))
    fi

    log "valgrind: context create/destroy releases everything"
    check valgrind-glesc-info valgrind -q --leak-check=full --errors-for-leak-kinds=definite \
        --suppressions=tests/valgrind.supp --error-exitcode=9 build-ci/tools/glesc-info

    log "clang-format"
    check clang-format bash -c "git ls-files '*.c' '*.h' | xargs clang-format --dry-run -Werror"
    check layers python3 tools/check-layers.py

    if [ "$cross" = 1 ]; then
        log "arm64 cross build (library and tools)"
        check cross-arm64 build build-ci-arm64 --cross-file cross/aarch64-linux-gnu.ini \
            -Dtests=false -Dwerror=true
        if [ "${GLESC_DEVICES:-1}" != 0 ]; then
            log "devices: Freedreno a618 prefill and decode, Panfrost G610 decode kernels (drm-shim)"
            check devices-ci devices_ci
        fi
    fi
    echo
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" = 0 ]
}

# The CI subset of the device matrix: one tiny synthesized llama Q8_0 model's
# kernels compiled by Mesa 25's Freedreno a618 compiler (the 12-token
# prefill: GEMMs, prefill attention; then decode) and Panfrost G610 compiler
# (decode). Fails on any compile or link error, limit breach or failed
# gguf-run, and on a spill in any decode kernel of either (the small GPUs'
# device class: docs/devices.md). G610's prefill kernels are left to the full
# matrix (tools/dev.sh devices) for their compile time under qemu (up to
# 2 min a GEMM) and their spills; GLESC_DEVICES=gemm adds G610's small-batch
# GEMM with the row norm folded in (the kernel that needed 9 storage buffers
# before the fusion split: fails at once where it breaches, minutes where it
# compiles). Reuses build-ci-arm64 (setup.sh adds the Mesa 25 sysroot and the
# preloads under SHIM_ROOT, default /opt/shim).
devices_ci() {
    local g610=decode timeout=300
    [ "${GLESC_DEVICES:-1}" = gemm ] && g610=decode,small-gemm timeout=1200
    SHIM_GLESC_BUILD=$PWD/build-ci-arm64 bash tools/devices/setup.sh || return 1
    python3 tools/devices/matrix.py --drivers g610,a618 --synth --synth-archs llama \
        --synth-types Q8_0 --phases prefill,decode --phases-for g610=$g610 \
        --jobs 2 --timeout $timeout --no-spills decode --build "$PWD/build-ci-arm64" \
        --out build-ci-arm64/devices
}

cmd_devices() {
    local default=()
    if ! printf '%s\n' "$@" | grep -qx -e --models -e --synth; then
        if compgen -G "../shared/reference/models/*.gguf" >/dev/null; then
            default=(--models ../shared/reference/models/*.gguf)
        else
            default=(--synth)
        fi
    fi
    bash tools/devices/setup.sh || exit 1
    log "tools/devices/matrix.py ${default[*]} $*"
    python3 tools/devices/matrix.py "${default[@]}" "$@"
}

cmd_run() {
    install_packages 0 || exit 1
    build build --buildtype=release || exit 1
    # Without arguments: gguf-run's demo (a random-weight llama model written
    # on the fly, loaded, generated from, throughput printed). Arguments go to
    # gguf-run: tools/dev.sh run -m model.gguf -p "Once upon a time".
    log "gguf-run $*"
    build/tools/gguf-run "$@"
}

case "${1:-}" in
test) shift; cmd_test "$@" ;;
run) shift; cmd_run "$@" ;;
devices) shift; cmd_devices "$@" ;;
*) echo "usage: tools/dev.sh run|test|devices" >&2; exit 2 ;;
esac
