#!/usr/bin/env bash
# tools/devices/setup.sh: builds, from scratch, what run-shim.sh and matrix.py
# need on a Debian 12 x86-64 machine (root; Debian's mirror reachable through
# apt): Mesa 25.0.7's real Panfrost / Freedreno / V3D drivers on drm-shim,
# run under qemu-aarch64-static, and glesc's arm64 cross build.
#   bash tools/devices/setup.sh          (tools/dev.sh devices runs it)
# glesc's copy of the harness in ../shared/tools/shim (see its README).
#
# Everything it makes lies under one root, SHIM_ROOT (default /opt/shim):
#   $SHIM_ROOT/apt/          private apt state (sources.list with bookworm,
#                            -updates, -security and bookworm-backports; its
#                            own lists, cache and an empty dpkg status file)
#                            and pkglist.txt, the resolved arm64 closure
#   $SHIM_ROOT/sysroot/      an arm64 root made by `dpkg -x` of Mesa 25.0.7 from
#                            bookworm-backports (libegl-mesa0, mesa-libgallium,
#                            libgbm1, mesa-drm-shim) and everything they and
#                            glesc's tools need (nothing of it is installed
#                            system-wide), plus libv3d71_noop_drm_shim.so: the
#                            v3d noop shim, whose IDENT registers say V3D 4.2,
#                            patched to say 7.1 (Raspberry Pi 5); re-made only
#                            when the resolved closure changes
#   $SHIM_ROOT/glsl-tap.so, $SHIM_ROOT/msm-queryfix.so
#                            the preload helpers (from the .c files beside this)
#   $SHIM_ROOT/build-arm64/  glesc's arm64 cross build (meson, out of tree) of
#                            GLESC_SRC's working tree
#   $SHIM_ROOT/cache/        run-shim.sh's per-driver GLESC_CACHE_DIRs
#   $SHIM_ROOT/logs/         this script's apt and build logs
# System-wide (Debian 12's, installed with apt-get where missing): qemu-user-
# static, the arm64 cross compiler, meson/ninja/pkg-config/git/python3, gcc,
# the Debian archive keyring and glesc's arm64 -dev packages (they bring
# Debian 12's arm64 Mesa 22.3.6 libraries beside the amd64 ones; run-shim.sh
# never uses them; the amd64 Mesa is left alone).
#
# Environment (all optional):
#   SHIM_ROOT          the root above (default /opt/shim)
#   SHIM_SYSROOT       the sysroot (default $SHIM_ROOT/sysroot)
#   GLESC_SRC          glesc checkout to build (default: the one this script
#                      lies in); GLESC_SRC=none: no glesc build
#   SHIM_GLESC_BUILD   its build folder (default $SHIM_ROOT/build-arm64)
#   GLESC_NO_INSTALL=1 no system-wide apt-get (fails if a package is missing)
# Re-running it refreshes the apt lists and rebuilds glesc incrementally (run
# it again, or `ninja -C $SHIM_ROOT/build-arm64`, after changing glesc).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${SHIM_ROOT:-/opt/shim}
mkdir -p "$ROOT"
ROOT=$(cd "$ROOT" && pwd)
S=${SHIM_SYSROOT:-$ROOT/sysroot}
A=$ROOT/apt
LOG=$ROOT/logs
B=${SHIM_GLESC_BUILD:-$ROOT/build-arm64}
MESA_VER=25.0.7-2~bpo12+1
export DEBIAN_FRONTEND=noninteractive
mkdir -p "$LOG" "$ROOT/cache"
SYS_PACKAGES=(qemu-user-static gcc-aarch64-linux-gnu meson ninja-build pkg-config git python3
              gcc libc6-dev debian-archive-keyring dpkg-dev coreutils
              libc6-dev:arm64 libegl-dev:arm64 libgles-dev:arm64 libgbm-dev:arm64
              libxxhash-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 libjson-c-dev:arm64)

fail() { echo "setup.sh: $*" >&2; exit 1; }
# fail_log LOG WHAT: the last lines of LOG, then fail
fail_log() { tail -n 30 "$1" >&2; fail "$2 failed (log: $1)"; }

find_glesc() {
    GLESC_SRC=${GLESC_SRC:-$HERE/../..}   # the checkout this script lies in
    [ "$GLESC_SRC" = none ] && return 0
    GLESC_SRC=$(cd "$GLESC_SRC" && pwd)
    [ -f "$GLESC_SRC/meson.build" ] && [ -f "$GLESC_SRC/cross/aarch64-linux-gnu.ini" ] ||
        fail "$GLESC_SRC is not a glesc checkout (no meson.build and cross/aarch64-linux-gnu.ini); cd into one or set GLESC_SRC"
}
find_glesc
echo "== SHIM_ROOT=$ROOT, GLESC_SRC=$GLESC_SRC"

echo "== system packages (Debian 12): qemu-user-static, cross compiler, arm64 -dev"
[ -r /etc/debian_version ] && command -v apt-get >/dev/null ||
    fail "needs Debian 12 (apt-get, dpkg); this is $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}")"
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    [ "$(id -u)" = 0 ] || fail "dpkg --add-architecture arm64 needs root"
    dpkg --add-architecture arm64
fi
missing=()
for p in "${SYS_PACKAGES[@]}"; do
    dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    [ "${GLESC_NO_INSTALL:-0}" != 1 ] || fail "missing system packages (GLESC_NO_INSTALL=1): ${missing[*]}"
    [ "$(id -u)" = 0 ] || fail "missing system packages, apt-get needs root: ${missing[*]}"
    echo "installing: ${missing[*]} (log: $LOG/apt-system.log)"
    # the lock timeout waits for another apt/dpkg (unattended upgrades) instead of failing
    apt-get -o DPkg::Lock::Timeout=300 update -q > "$LOG/apt-system.log" 2>&1 ||
        fail_log "$LOG/apt-system.log" "apt-get update (is Debian's mirror reachable?)"
    apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}" \
        >> "$LOG/apt-system.log" 2>&1 || fail_log "$LOG/apt-system.log" "apt-get install ${missing[*]}"
    for p in "${missing[@]}"; do
        dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' ||
            fail "$p is still not installed after apt-get install (log: $LOG/apt-system.log)"
    done
else
    echo "all there"
fi

echo "== private apt config in $A (bookworm, -updates, -security, bookworm-backports; arm64)"
mkdir -p "$A/lists/partial" "$A/cache" "$A/archives/partial" "$A/debs" \
    "$A/sources.list.d" "$A/preferences.d"
K=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f $K ] || fail "$K missing (apt-get install debian-archive-keyring)"
cat > "$A/sources.list" <<EOS
deb [signed-by=$K] http://deb.debian.org/debian bookworm main
deb [signed-by=$K] http://deb.debian.org/debian bookworm-updates main
deb [signed-by=$K] http://deb.debian.org/debian-security bookworm-security main
deb [signed-by=$K] http://deb.debian.org/debian bookworm-backports main
EOS
# backports' own priority (100) loses to bookworm's (500): raise it, so that
# Mesa's dependencies come from the same suite (libdrm, libwayland, libelf)
cat > "$A/preferences" <<'EOS'
Package: *
Pin: release n=bookworm-backports
Pin-Priority: 500
EOS
: > "$A/status"
cat > "$A/apt.conf" <<EOS
Dir::Etc::SourceList "$A/sources.list";
Dir::Etc::SourceParts "$A/sources.list.d";
Dir::Etc::Preferences "$A/preferences";
Dir::Etc::PreferencesParts "$A/preferences.d";
Dir::State "$A";
Dir::State::Lists "$A/lists";
Dir::State::status "$A/status";
Dir::Cache "$A/cache";
Dir::Cache::archives "$A/archives";
APT::Architecture "arm64";
APT::Architectures { "arm64"; };
APT::Install-Recommends "false";
APT::Sandbox::User "root";
Debug::NoLocking "true";
EOS
export APT_CONFIG=$A/apt.conf
apt-get update -q > "$LOG/apt-private.log" 2>&1 || fail_log "$LOG/apt-private.log" "apt-get update (private)"
grep -q bookworm-backports_main_binary-arm64_Packages <(ls "$A/lists") ||
    fail_log "$LOG/apt-private.log" "bookworm-backports' arm64 list missing: apt-get update (private)"

echo "== resolving the arm64 closure"
apt-get -s install libc6 libegl1 libgles2 libglvnd0 libgbm1=$MESA_VER libdrm2 libdrm-common \
    libegl-mesa0=$MESA_VER mesa-libgallium=$MESA_VER mesa-drm-shim=$MESA_VER \
    libxxhash0 libpcre2-8-0 libutf8proc2 libjson-c5 > "$A/sim.txt" 2>&1 ||
    fail_log "$A/sim.txt" "resolving (apt-get -s install)"
awk '/^Inst/{gsub(/[()]/,"",$3); print $2"="$3}' "$A/sim.txt" > "$A/pkglist.txt"
n=$(wc -l < "$A/pkglist.txt")
[ "$n" -gt 0 ] || fail_log "$A/sim.txt" "resolving: no packages"
echo "$n packages (list: $A/pkglist.txt)"
STAMP=$S/.glesc-pkglist   # the closure the sysroot was made from
# download the closure, unpack it into a new sysroot, add the V3D 7.1 shim
make_sysroot() {
    local pkgs debs
    mapfile -t pkgs < "$A/pkglist.txt"
    (cd "$A/debs" && rm -f ./*.deb && apt-get download "${pkgs[@]}") \
        >> "$LOG/apt-private.log" 2>&1 || fail_log "$LOG/apt-private.log" "apt-get download"
    debs=("$A"/debs/*.deb)
    [ "${#debs[@]}" = "$n" ] || fail "downloaded ${#debs[@]} of $n packages (log: $LOG/apt-private.log)"
    unset APT_CONFIG

    echo "== unpacking into $S"
    rm -rf "$S" && mkdir -p "$S"
    for d in "$A"/debs/*.deb; do dpkg -x "$d" "$S"; done
    # merged /usr, as on a real bookworm system: the guest's ld.so searches
    # /lib/aarch64-linux-gnu first, and qemu falls back to the host's files
    # (which may hold Debian 12's own arm64 Mesa 22) for any path missing here
    if [ -d "$S/lib" ] && [ ! -L "$S/lib" ]; then
        cp -a "$S/lib/." "$S/usr/lib/" && rm -rf "${S:?}/lib" && ln -s usr/lib "$S/lib"
    fi
    mkdir -p "$S/etc" && printf '/usr/lib/aarch64-linux-gnu\n' > "$S/etc/ld.so.conf"
    ldconfig -r "$S" 2>/dev/null || : > "$S/etc/ld.so.cache"   # keep the host's cache out
    [ -e "$S/usr/lib/aarch64-linux-gnu/libgallium-$MESA_VER.so" ] || fail "no libgallium-$MESA_VER.so in $S"

    echo "== V3D 7.1 shim (patched copy)"
    python3 - "$S/usr/lib/aarch64-linux-gnu" <<'EOP'
import struct, sys
d = bytearray(open(sys.argv[1] + '/libv3d_noop_drm_shim.so', 'rb').read())
def swap(old, new):
    p = struct.pack('<I', old); assert d.count(p) == 1, hex(old)
    i = d.find(p); d[i:i+4] = struct.pack('<I', new)
swap(0x04443356, 0x07443356)  # CORE0_IDENT0: tech version 4 -> 7
swap(0x81001422, 0x81001421)  # CORE0_IDENT1: revision 2 -> 1  (4.2 -> 7.1)
open(sys.argv[1] + '/libv3d71_noop_drm_shim.so', 'wb').write(d)
EOP
    cp "$A/pkglist.txt" "$STAMP"
}
if [ -f "$STAMP" ] && cmp -s "$STAMP" "$A/pkglist.txt" &&
   [ -e "$S/usr/lib/aarch64-linux-gnu/libv3d71_noop_drm_shim.so" ]; then
    echo "== sysroot $S: made from the same $n packages, kept"
else
    make_sysroot
fi
unset APT_CONFIG

echo "== preload helpers in $ROOT"
# built aside and renamed: runs going on keep the file they loaded
for p in glsl-tap:-lEGL msm-queryfix:; do
    n=${p%%:*}
    aarch64-linux-gnu-gcc -O2 -Wall -shared -fPIC -o "$ROOT/$n.so.tmp" "$HERE/$n.c" -ldl ${p#*:} ||
        fail "building $n.so"
    mv -f "$ROOT/$n.so.tmp" "$ROOT/$n.so"
done

if [ "$GLESC_SRC" != none ]; then
    echo "== glesc ($GLESC_SRC) arm64 cross build in $B"
    if [ -f "$B/meson-info/meson-info.json" ]; then
        # a build of another checkout: start again
        src=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["directories"]["source"])' \
              "$B/meson-info/meson-info.json")
        [ "$(cd "$src" 2>/dev/null && pwd)" = "$GLESC_SRC" ] || { echo "(was a build of $src: wiped)"; rm -rf "$B"; }
    fi
    if [ ! -f "$B/build.ninja" ]; then
        if [ -e "$B" ]; then   # a failed configure's leftovers, nothing else
            [ -d "$B/meson-logs" ] || [ -z "$(ls -A "$B")" ] || fail "$B exists and is no meson build folder"
            rm -rf "$B"
        fi
        meson setup "$B" "$GLESC_SRC" --cross-file "$GLESC_SRC/cross/aarch64-linux-gnu.ini" \
            -Dtests=false --buildtype=release > "$LOG/glesc-build.log" 2>&1 ||
            fail_log "$LOG/glesc-build.log" "meson setup"
    fi
    ninja -C "$B" >> "$LOG/glesc-build.log" 2>&1 || fail_log "$LOG/glesc-build.log" "ninja"
fi

echo "== check"
info=${GLESC_INFO:-$B/tools/glesc-info}
if [ -x "$info" ]; then
    out=$(SHIM_ROOT=$ROOT SHIM_SYSROOT=$S GLESC_CACHE_DIR=off "$HERE/run-shim.sh" panfrost g52 -- "$info" 2>&1) ||
        { echo "$out" | tail -n 20 >&2; fail "glesc-info on panfrost g52 failed"; }
    echo "$out" | sed -n '2,7p'
    grep -q 'Mesa 25\.0\.7' <<< "$out" ||
        fail "glesc-info does not report Mesa 25.0.7 (the host's arm64 Mesa leaked in? see README)"
    echo "ok: $info runs on Mesa 25.0.7's Panfrost"
else
    echo "(no glesc-info at $info: skipped)"
fi
