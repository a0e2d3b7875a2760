#!/usr/bin/env python3
"""loadtest.py: a load test of glesc-server (a benchmark, not a unit test).

C clients (default 8) send R requests each (default 50) at once, every
request with its own prompt, greedy (temperature 0), half of them streamed.
Each answer is checked against a reference: the same request sent alone
beforehand (one client, one at a time), so an answer that is missing,
incomplete, or holds another request's tokens is counted as wrong; a stream
must end with "data: [DONE]" and carry one id. Prints the count of
answered, failed and wrong requests, throughput (requests/s, generated
tokens/s) and latency percentiles (whole answer; first token of streams).
Exit 0 only when every request was answered and right.

usage: loadtest.py [--url http://127.0.0.1:8080] [--clients 8] [--requests 50]
                   [--max-tokens 32] [--api-key KEY] [--kind chat|completion]
"""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse

WORDS = ["sun", "tree", "cat", "ball", "river", "cake", "bird", "hat", "boat", "moon",
         "dog", "star", "book", "fish", "rain", "shoe"]


def prompt_of(i):
    """A prompt of its own for request i (from its first word on)."""
    a, b, c = WORDS[i % 16], WORDS[(i // 16) % 16], WORDS[(i // 256) % 16]
    return f"{a.capitalize()} {b} and {c}, story {i}: Once upon a time"


class Client:
    def __init__(self, url, key):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port or 80
        self.key = key
        self.conn = None

    def post(self, path, body):
        """(status, response object or None, raw bytes); reconnects once."""
        for attempt in (0, 1):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
                headers = {"Content-Type": "application/json"}
                if self.key:
                    headers["Authorization"] = f"Bearer {self.key}"
                self.conn.request("POST", path, json.dumps(body), headers)
                return self.conn.getresponse()
            except (OSError, http.client.HTTPException):
                self.conn = None
                if attempt:
                    raise


def one_request(cl, args, i, stream):
    """Sends request i: dict(ok, text, tokens, latency, ttft, error)."""
    body = {"max_tokens": args.max_tokens, "temperature": 0, "seed": i, "stream": stream}
    if args.kind == "chat":
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": prompt_of(i)}]
    else:
        path = "/v1/completions"
        body["prompt"] = prompt_of(i)
    if stream:
        body["stream_options"] = {"include_usage": True}
    t0 = time.monotonic()
    res = {"ok": False, "text": "", "tokens": 0, "ttft": None, "error": None}
    try:
        r = cl.post(path, body)
        if r.status != 200:
            res["error"] = f"status {r.status}: {r.read()[:200]!r}"
            return res
        if not stream:
            d = json.loads(r.read())
            c = d["choices"][0]
            res["text"] = c["message"]["content"] if args.kind == "chat" else c["text"]
            res["tokens"] = d["usage"]["completion_tokens"]
            res["ok"] = c["finish_reason"] in ("stop", "length")
        else:
            ids, done, text = set(), False, []
            for line in r:
                line = line.decode("utf-8").rstrip("\r\n")
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    done = True
                    continue
                d = json.loads(data)
                ids.add(d["id"])
                if d.get("usage"):
                    res["tokens"] = d["usage"]["completion_tokens"]
                for c in d["choices"]:
                    piece = c["delta"].get("content") if args.kind == "chat" else c.get("text")
                    if piece:
                        if res["ttft"] is None:
                            res["ttft"] = time.monotonic() - t0
                        text.append(piece)
            res["text"] = "".join(text)
            res["ok"] = done and len(ids) == 1
            if not res["ok"]:
                res["error"] = f"stream: [DONE] {done}, ids {sorted(ids)}"
    except Exception as e:  # every failure is counted, none stops the run
        res["error"] = f"{type(e).__name__}: {e}"
        cl.conn = None
    res["latency"] = time.monotonic() - t0
    return res


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=50, help="per client")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--api-key")
    ap.add_argument("--kind", choices=["chat", "completion"], default="chat")
    args = ap.parse_args()
    n = args.clients * args.requests

    # The reference: every request alone, whole (not streamed).
    ref_client = Client(args.url, args.api_key)
    t0 = time.monotonic()
    ref = []
    for i in range(n):
        r = one_request(ref_client, args, i, False)
        if not r["ok"]:
            print(f"reference request {i} failed: {r['error']}", file=sys.stderr)
            return 1
        ref.append(r["text"])
    ref_s = time.monotonic() - t0
    print(f"reference: {n} requests one at a time in {ref_s:.1f} s "
          f"({n / ref_s:.2f} requests/s)")

    results = [None] * n

    def run(c):
        cl = Client(args.url, args.api_key)
        for k in range(args.requests):
            i = c * args.requests + k
            results[i] = one_request(cl, args, i, stream=(i % 2 == 1))

    threads = [threading.Thread(target=run, args=(c,)) for c in range(args.clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0

    failed = [i for i, r in enumerate(results) if not r["ok"]]
    wrong = [i for i, r in enumerate(results) if r["ok"] and r["text"] != ref[i]]
    others = {t: i for i, t in enumerate(ref)}
    mixed = [i for i in wrong if results[i]["text"] in others]
    for i in failed[:5]:
        print(f"request {i} failed: {results[i]['error']}")
    for i in wrong[:5]:
        print(f"request {i} differs from its reference:\n  got  {results[i]['text']!r}\n"
              f"  want {ref[i]!r}")
    lat = [r["latency"] for r in results if r["ok"]]
    ttft = [r["ttft"] for r in results if r["ok"] and r["ttft"] is not None]
    tokens = sum(r["tokens"] for r in results if r["ok"])
    print(f"load: {args.clients} clients x {args.requests} requests ({args.kind}, "
          f"max_tokens {args.max_tokens}, half streamed) in {wall:.1f} s")
    print(f"  answered {n - len(failed)}/{n}, failed {len(failed)}, differing from the "
          f"reference {len(wrong)} (another request's answer: {len(mixed)})")
    print(f"  throughput: {n / wall:.2f} requests/s, {tokens / wall:.1f} generated tokens/s "
          f"({tokens} tokens)")
    print(f"  latency (whole answer): p50 {pct(lat, 50) * 1e3:.0f} ms, p90 "
          f"{pct(lat, 90) * 1e3:.0f} ms, p99 {pct(lat, 99) * 1e3:.0f} ms")
    if ttft:
        print(f"  first token (streams): p50 {pct(ttft, 50) * 1e3:.0f} ms, p90 "
              f"{pct(ttft, 90) * 1e3:.0f} ms, p99 {pct(ttft, 99) * 1e3:.0f} ms")
    return 0 if not failed and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
