#!/usr/bin/env bash
# test_curl.sh — glesc-server over curl on a tiny random-weight model: every
# endpoint, streamed and whole answers, OpenAI's error objects with their
# status (400, 401, 404, 405, 413, 503), the KV prefix a chat's next turn
# reuses, a client that goes away mid-stream (its generation cancelled), a
# slow client timed out, and SIGTERM (the running stream ends with
# [DONE], exit 0). One slot and no queue, so "busy" is deterministic.
. "$(dirname "$0")/lib.sh"
command -v curl >/dev/null || skip "curl is not installed"
synth_model
KEY=test-key
# One slot of 2048 positions (beyond the model's 256: long generations
# give the busy and cancel checks time).
server_start -np 1 -c 2048 --queue 0 --api-key "$KEY" --timeout 3 --max-body 16384 \
    --max-tokens 2000
A=(-s -H "Authorization: Bearer $KEY" -H "Content-Type: application/json")

# py FILE EXPR: EXPR over d (the JSON in FILE) is true.
py() {
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)' "$@" ||
        { echo "  $2 is false for: $(head -c 600 "$1")"; return 1; }
}
# post PATH BODY OUT: the status code on stdout, the body in OUT.
post() { curl "${A[@]}" -o "$3" -w '%{http_code}' "$SERVER_URL$1" -d "$2"; }
status_is() { [ "$1" = "$2" ] || { echo "  status $1, expected $2"; return 1; }; }

# ---- the GET endpoints
check "GET /health" test "$(curl -s -o "$TMP/h" -w '%{http_code}' "$SERVER_URL/health")" = 200
check "/health needs no key" py "$TMP/h" 'd["status"] == "ok"'
curl "${A[@]}" "$SERVER_URL/v1/models" >"$TMP/models"
check "GET /v1/models" py "$TMP/models" 'd["object"] == "list" and d["data"][0]["id"] == "tiny"'

# ---- chat, whole
s=$(post /v1/chat/completions '{"model":"x","messages":[{"role":"system","content":"Be brief."},
    {"role":"user","content":"Hello"}],"max_tokens":8,"temperature":0}' "$TMP/chat")
check "chat: 200" status_is "$s" 200
check "chat: a chat.completion" py "$TMP/chat" 'd["object"] == "chat.completion" and
    d["choices"][0]["message"]["role"] == "assistant" and
    isinstance(d["choices"][0]["message"]["content"], str) and
    d["choices"][0]["finish_reason"] in ("stop", "length") and d["model"] == "x"'
check "chat: usage adds up" py "$TMP/chat" 'd["usage"]["completion_tokens"] <= 8 and
    d["usage"]["prompt_tokens"] > 0 and
    d["usage"]["total_tokens"] == d["usage"]["prompt_tokens"] + d["usage"]["completion_tokens"]'

# ---- chat, streamed: every event JSON, the chunks, then [DONE]
curl "${A[@]}" -N "$SERVER_URL/v1/chat/completions" -d '{"messages":[{"role":"user",
    "content":"Hi"}],"max_tokens":6,"stream":true,"stream_options":{"include_usage":true}}' \
    >"$TMP/sse"
sse_ok() {
    python3 - "$TMP/sse" <<'PY'
import json, sys
events = [l[6:] for l in open(sys.argv[1]).read().split("\n\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events[-1]
chunks = [json.loads(e) for e in events[:-1]]
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
assert chunks[-2]["choices"][0]["finish_reason"] in ("stop", "length")
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] <= 6
PY
}
check "chat stream: chunks, finish, usage, [DONE]" sse_ok

# ---- completions: greedy answers repeat; stop strings end the text
body='{"prompt":"Once upon a time","max_tokens":12,"temperature":0}'
post /v1/completions "$body" "$TMP/c1" >/dev/null
post /v1/completions "$body" "$TMP/c2" >/dev/null
check "completion: a text_completion" py "$TMP/c1" 'd["object"] == "text_completion" and
    d["usage"]["completion_tokens"] <= 12'
check "completion: greedy is repeatable" py "$TMP/c2" \
    "d['choices'][0]['text'] == json.load(open('$TMP/c1'))['choices'][0]['text']"
stop=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["choices"][0]["text"]
print(json.dumps(t[3:5]) if len(t) > 5 else "\"~~\"")' "$TMP/c1")
post /v1/completions "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"temperature\":0,
    \"stop\":[$stop]}" "$TMP/c3" >/dev/null
check "completion: a stop string ends the text before it" py "$TMP/c3" \
    "d['choices'][0]['text'] == json.load(open('$TMP/c1'))['choices'][0]['text'].split($stop)[0]"

# ---- response_format through the grammar sampler; logit_bias
schema='{"type":"object","properties":{"color":{"enum":["red","green","blue"]},
    "ok":{"type":"boolean"}},"required":["color","ok"]}'
for seed in 1 2 3; do
    post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"JSON\"}],
        \"max_tokens\":300,\"seed\":$seed,\"response_format\":{\"type\":\"json_schema\",
        \"json_schema\":{\"name\":\"c\",\"schema\":$schema}}}" "$TMP/js" >/dev/null
    check "json_schema (seed $seed): the answer parses and follows the schema" py "$TMP/js" \
        'd["choices"][0]["finish_reason"] == "stop" and
         (lambda o: o["color"] in ("red", "green", "blue") and isinstance(o["ok"], bool))(
             json.loads(d["choices"][0]["message"]["content"]))'
done
s=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"JSON"}],"max_tokens":40,
    "response_format":{"type":"json_object"}}' "$TMP/jo")
check "json_object: 200" status_is "$s" 200
check "json_object: the answer starts an object" py "$TMP/jo" \
    'd["choices"][0]["message"]["content"].lstrip().startswith("{")'
# token 68 is the byte "A" (<0x41>) of the vocabulary: +100 makes every pick
post /v1/completions '{"prompt":"Once","max_tokens":5,"temperature":0,"logit_bias":{"68":100}}' \
    "$TMP/lb" >/dev/null
check "logit_bias +100: that token every time" py "$TMP/lb" 'd["choices"][0]["text"] == "AAAAA"'
post /v1/completions '{"prompt":"Once","max_tokens":5,"temperature":1,"seed":5,
    "logit_bias":{"68":100}}' "$TMP/lb" >/dev/null
check "logit_bias +100 with sampling: that token every time" py "$TMP/lb" \
    'd["choices"][0]["text"] == "AAAAA"'

# ---- a chat's next turn reuses the slot's KV prefix
post /v1/chat/completions '{"messages":[{"role":"user","content":"Tell me a story"}],
    "max_tokens":10,"temperature":0}' "$TMP/t1" >/dev/null
turn2=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
print(json.dumps({"messages":[{"role":"user","content":"Tell me a story"},
    {"role":"assistant","content":d["choices"][0]["message"]["content"]},
    {"role":"user","content":"Another"}],"max_tokens":4}))' "$TMP/t1")
post /v1/chat/completions "$turn2" "$TMP/t2" >/dev/null
check "chat: the next turn evaluates only what is new" py "$TMP/t2" \
    "d['usage']['prompt_tokens_details']['cached_tokens'] >= json.load(open('$TMP/t1'))['usage']['prompt_tokens']"

# ---- errors: OpenAI's error object with the right status
err() { # err NAME STATUS PATH BODY [CURL ARGS...]: status and an error object
    local s
    s=$(curl -s -o "$TMP/e" -w '%{http_code}' "${@:5}" "$SERVER_URL$3" -d "$4")
    check "$1: $2" status_is "$s" "$2"
    check "$1: an error object" py "$TMP/e" 'isinstance(d["error"]["message"], str) and
        d["error"]["code"] == '"$2"
}
err "bad JSON" 400 /v1/chat/completions '{"messages":[' "${A[@]}"
err "temperature out of range" 400 /v1/chat/completions \
    '{"messages":[{"role":"user","content":"a"}],"temperature":5}' "${A[@]}"
check "temperature out of range: names the field" py "$TMP/e" 'd["error"]["param"] == "temperature"'
err "no messages" 400 /v1/chat/completions '{"messages":[]}' "${A[@]}"
err "max_tokens over the limit" 400 /v1/completions '{"prompt":"a","max_tokens":100000}' "${A[@]}"
err "a prompt longer than a slot" 400 /v1/completions \
    "{\"prompt\":[$(printf '1,%.0s' $(seq 2100))1]}" "${A[@]}"
err "a json_schema keyword the grammar lacks" 400 /v1/chat/completions \
    '{"messages":[{"role":"user","content":"a"}],"response_format":{"type":"json_schema",
      "json_schema":{"schema":{"type":"string","pattern":"a+"}}}}' "${A[@]}"
check "the schema's error names the keyword" py "$TMP/e" '"pattern" in d["error"]["message"]'
err "no key" 401 /v1/chat/completions '{"messages":[{"role":"user","content":"a"}]}'
err "a wrong key" 401 /v1/models '' -H "Authorization: Bearer nope" -X GET
err "no such endpoint" 404 /v1/nothing '{}' "${A[@]}"
err "GET on a POST endpoint" 405 /v1/completions '' "${A[@]}" -X GET
head -c 20000 /dev/zero | tr '\0' a >"$TMP/big"
s=$(curl "${A[@]}" -o "$TMP/e" -w '%{http_code}' "$SERVER_URL/v1/completions" --data-binary @"$TMP/big")
check "a body over --max-body: 413" status_is "$s" 413
s=$(curl "${A[@]}" -o "$TMP/e" -w '%{http_code}' -H "Transfer-Encoding: chunked" \
    "$SERVER_URL/v1/completions" --data-binary @"$TMP/big")
check "a chunked body over --max-body: 413" status_is "$s" 413

# ---- busy: one slot, no queue; a client that goes away is cancelled
# 2000 tokens, the end-of-sequence token banned: seconds on llvmpipe
long='{"prompt":"Once","max_tokens":2000,"stream":true,"logit_bias":{"2":-100}}'
curl "${A[@]}" -N "$SERVER_URL/v1/completions" -d "$long" >"$TMP/long" &
CURL=$!
for _ in $(seq 100); do grep -qs '"text"' "$TMP/long" && break; sleep 0.1; done
s=$(post /v1/completions '{"prompt":"a","max_tokens":1}' "$TMP/e")
check "a second request while the one slot is busy: 503" status_is "$s" 503
kill "$CURL"
wait "$CURL" 2>/dev/null
cancelled() {
    for _ in $(seq 50); do
        curl -s "${A[@]}" "$SERVER_URL/metrics" | grep -q '^glesc_requests_cancelled_total 1$' &&
            return 0
        sleep 0.1
    done
    return 1
}
check "a client gone mid-stream: its generation cancelled within 5 s" cancelled
s=$(post /v1/completions '{"prompt":"a","max_tokens":1}' "$TMP/e")
check "the slot is free again" status_is "$s" 200
curl -s "${A[@]}" "$SERVER_URL/metrics" >"$TMP/metrics"
check "metrics: Prometheus text" grep -q '^glesc_gpu_memory_bytes{kind="total"} [1-9]' "$TMP/metrics"

# ---- a slow client (headers never finished) is dropped after --timeout (3 s)
slow() {
    python3 - "${SERVER_URL#http://}" <<'PY'
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
s.settimeout(15)
t = time.time()
try:
    closed = s.recv(100) is not None
except OSError:
    closed = True
sys.exit(0 if closed and time.time() - t < 10 else 1)
PY
}
check "a slow client is timed out" slow

# ---- SIGTERM: the running stream finishes with [DONE], exit 0
curl "${A[@]}" -N "$SERVER_URL/v1/completions" \
    -d '{"prompt":"Once","max_tokens":300,"stream":true,"logit_bias":{"2":-100}}' >"$TMP/last" &
CURL=$!
for _ in $(seq 100); do grep -qs '"text"' "$TMP/last" && break; sleep 0.1; done
server_stop
wait "$CURL"
check "SIGTERM: exit status 0" test "$SERVER_RC" = 0
check "SIGTERM: the running stream ends with [DONE]" grep -q '^data: \[DONE\]' "$TMP/last"

[ "$FAILS" = 0 ] || die "$FAILS checks failed"
echo "all checks passed"
