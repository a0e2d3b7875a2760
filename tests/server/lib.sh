# lib.sh — sourced by the glesc-server tests: a tiny random-weight model
# (gguf-synth), a server on a free port, and checks that fail the test with
# the evidence. Needs $GLESC_SERVER and $GLESC_GGUF_SYNTH (meson sets them).
set -u
: "${GLESC_SERVER:?set by meson}" "${GLESC_GGUF_SYNTH:?set by meson}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/glesc-server-test.XXXXXX")
SERVER_PID=
FAILS=0

cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

skip() { echo "SKIP: $*"; exit 77; }
die() { echo "FAIL: $*"; [ -f "$TMP/server.log" ] && sed 's/^/  server: /' "$TMP/server.log"; exit 1; }
check() { # check NAME CONDITION-COMMAND...
    if "${@:2}"; then echo "ok - $1"; else echo "not ok - $1"; FAILS=$((FAILS + 1)); fi
}

# The tests' model: llama, 1 layer, n_embd 64, f32, context 256.
synth_model() {
    "$GLESC_GGUF_SYNTH" -o "$TMP/m.gguf" --n-embd 64 --n-layer 1 --n-head 4 --n-head-kv 2 \
        --n-ff 96 --n-ctx 256 -t F32 --name tiny >/dev/null 2>"$TMP/synth.log" ||
        die "gguf-synth: $(cat "$TMP/synth.log")"
}

# server_start ARGS...: starts glesc-server on the model, waits for "ready"
# (120 s: llvmpipe compiles the kernels) and sets SERVER_URL.
server_start() {
    "$GLESC_SERVER" -m "$TMP/m.gguf" --port 0 --cache-dir "$TMP/cache" "$@" \
        >"$TMP/server.out" 2>"$TMP/server.log" &
    SERVER_PID=$!
    for _ in $(seq 600); do
        grep -qs "glesc-server: ready" "$TMP/server.log" && break
        kill -0 "$SERVER_PID" 2>/dev/null || die "glesc-server exited before it was ready"
        sleep 0.2
    done
    grep -q "glesc-server: ready" "$TMP/server.log" || die "glesc-server not ready after 120 s"
    SERVER_URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$TMP/server.log")
    [ -n "$SERVER_URL" ] || die "no address in the server's log"
}

# server_stop: SIGTERM; its exit status in SERVER_RC.
server_stop() {
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID"
    SERVER_RC=$?
    SERVER_PID=
}
