#!/usr/bin/env bash
# tools/devices/run-shim.sh DRIVER MODEL [--] CMD [ARGS...]
# (glesc's copy of ../shared/tools/shim/run-shim.sh; matrix.py runs it)
# Runs an arm64 program (e.g. glesc's cross-built glesc-info / gguf-run) under
# qemu-aarch64-static with Mesa 25.0.7's real Panfrost / Freedreno / V3D driver
# loaded on a faked DRM render node (Mesa's noop drm-shim: shaders compile,
# submissions do nothing). Needs what setup.sh builds under SHIM_ROOT.
#
#   DRIVER MODEL
#   panfrost  g52 | g57 | g610 | g310 | <hex product id, e.g. 7212, 9093, a867>
#   freedreno 618 | 630 | 660 | 730 | 740 | 750 | ... (the shim's FD_GPU_ID table)
#   v3d       4.2 | 7.1   (7.1 uses setup.sh's patched copy of the 4.2-only shim)
#   etnaviv|lima|vc4 -    (the shims' defaults; not tried with glesc)
#
# Environment (all optional):
#   SHIM_ROOT      setup.sh's root (default /opt/shim): sysroot, preloads, caches
#   SHIM_SYSROOT   sysroot (default $SHIM_ROOT/sysroot)
#   SHIM_STATS=1   the driver's shader-db statistics on stderr
#                  (BIFROST_MESA_DEBUG=shaderdb; FD_MESA_DEBUG=shaderdb,serialc or
#                  V3D_DEBUG=shaderdb,precompile, each with GLESC_DEBUG=1 and the
#                  tap's GLSL_TAP_DEBUG_ALL=1: they arrive as "GL debug [note..." lines)
#   SHIM_DISASM=1  with SHIM_STATS=1, also each shader's final code on stderr
#                  (BIFROST_MESA_DEBUG's shaders, V3D_DEBUG's qpu, IR3_SHADER_DEBUG=disasm;
#                  tools/devices/estimate.py reads it)
#   SHIM_TAP=1     also preload glsl-tap.so: "@@TAP ..." lines on stderr name
#                  glesc's kernel at each glShaderSource/glLinkProgram; with
#                  SHIM_TAP_DIR=DIR every GLSL source is saved there as NNNN.glsl;
#                  SHIM_TAP_SO overrides the preload (default $SHIM_ROOT/glsl-tap.so)
#   SHIM_QEMU_ARGS extra qemu-aarch64-static arguments (e.g. "-strace")
#   GLESC_CACHE_DIR defaults to $SHIM_ROOT/cache/DRIVER-MODEL (never shared
#                  between drivers; "off": none); Mesa's own disk cache is disabled.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,32p' "$0"; exit 2; }
drv=$1 model=$2; shift 2
[ "${1:-}" = "--" ] && shift
ROOT=${SHIM_ROOT:-/opt/shim}
S=${SHIM_SYSROOT:-$ROOT/sysroot}
L=/usr/lib/aarch64-linux-gnu          # guest path (qemu maps it into $S)
[ -e "$S$L/libgallium-25.0.7-2~bpo12+1.so" ] || { echo "run-shim: no sysroot at $S (run setup.sh)" >&2; exit 1; }
vars=()
case $drv in
panfrost)
    case $model in
    g52|G52) id=7212 ;; g57|G57) id=9093 ;; g610|G610) id=a867 ;; g310|G310) id=ac74 ;;
    *) id=$model ;;
    esac
    vars+=("PAN_GPU_ID=$id")
    preload=$L/libpanfrost_noop_drm_shim.so
    stats=(BIFROST_MESA_DEBUG=shaderdb${SHIM_DISASM:+,shaders}) ;;
freedreno)
    vars+=("FD_GPU_ID=${model#a}")
    # msm-queryfix.so first: it zeroes the shim's unanswered fault-count query
    # (without it freedreno reports a GPU reset at glesc's first wait)
    [ -e "$ROOT/msm-queryfix.so" ] || { echo "run-shim: $ROOT/msm-queryfix.so missing (setup.sh)" >&2; exit 1; }
    preload=$ROOT/msm-queryfix.so:$L/libfreedreno_noop_drm_shim.so
    # GALLIUM_THREAD=0: the threaded context drops synchronous debug callbacks
    stats=('FD_MESA_DEBUG=shaderdb,serialc' GALLIUM_THREAD=0 GLESC_DEBUG=1 GLSL_TAP_DEBUG_ALL=1)
    [ -n "${SHIM_DISASM:-}" ] && stats+=(IR3_SHADER_DEBUG=disasm) ;;
v3d)
    case $model in
    4.2|42) preload=$L/libv3d_noop_drm_shim.so ;;
    7.1|71) preload=$L/libv3d71_noop_drm_shim.so
            [ -e "$S$preload" ] || { echo "run-shim: $S$preload missing (setup.sh makes it)" >&2; exit 1; } ;;
    *) echo "run-shim: v3d model 4.2 or 7.1" >&2; exit 2 ;;
    esac
    stats=("V3D_DEBUG=shaderdb,precompile${SHIM_DISASM:+,qpu}" GLESC_DEBUG=1 GLSL_TAP_DEBUG_ALL=1) ;;
etnaviv|lima|vc4)
    preload=$L/lib${drv}_noop_drm_shim.so; stats=() ;;
*) echo "run-shim: unknown driver $drv" >&2; exit 2 ;;
esac
[ "${SHIM_STATS:-0}" = 1 ] && vars+=("${stats[@]}")
# freedreno and v3d send shader-db lines as KHR_debug notifications: the tap
# turns those on (GLSL_TAP_DEBUG_ALL), so SHIM_STATS=1 brings the tap along.
[ "${SHIM_STATS:-0}" = 1 ] && [ "$drv" != panfrost ] && SHIM_TAP=1
if [ "${SHIM_TAP:-0}" = 1 ]; then
    tap=${SHIM_TAP_SO:-$ROOT/glsl-tap.so}   # setup.sh builds it from glsl-tap.c
    [ -e "$tap" ] || { echo "run-shim: $tap missing (setup.sh builds it)" >&2; exit 1; }
    preload="$preload:$tap"
    [ -n "${SHIM_TAP_DIR:-}" ] && { mkdir -p "$SHIM_TAP_DIR"; vars+=("GLSL_TAP_DIR=$SHIM_TAP_DIR"); }
fi
export GLESC_CACHE_DIR=${GLESC_CACHE_DIR:-$ROOT/cache/$drv-$model}
[ "$GLESC_CACHE_DIR" = off ] || mkdir -p "$GLESC_CACHE_DIR"
# LD_PRELOAD and friends go only to the guest: qemu-aarch64-static is static.
exec env QEMU_LD_PREFIX="$S" \
    __EGL_VENDOR_LIBRARY_FILENAMES=/usr/share/glvnd/egl_vendor.d/50_mesa.json \
    GBM_BACKENDS_PATH=$L/gbm \
    MESA_SHADER_CACHE_DISABLE=true \
    LD_PRELOAD="$preload" \
    "${vars[@]}" \
    qemu-aarch64-static ${SHIM_QEMU_ARGS:-} "$@"
