#!/usr/bin/env python3
"""http_fuzz.py: malformed HTTP at a running glesc-server (a manual check,
not a meson test): from 4 threads for SECONDS, random bytes, valid requests
with bytes mutated, broken chunked bodies, wrong Content-Length (up to
2^40), headers of up to 100 KB, clients that close at once or read a byte.
Run it against a sanitizer build, then check the server still answers and
exits cleanly on SIGTERM.

usage: http_fuzz.py HOST:PORT SECONDS
"""
import os
import random
import socket
import sys
import threading
import time

host, port = sys.argv[1].rsplit(":", 1)
port, secs = int(port), float(sys.argv[2])
bodies = [
    b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true}',
    b'{"prompt":"Once","max_tokens":3,"stop":["a"],"logit_bias":{"68":5}}',
    b'{"messages":[{"role":"user","content":"x"}],"max_tokens":8,"response_format":{"type":"json_object"}}',
    b'{"prompt":[1,2,3],"max_tokens":2,"temperature":0}',
]
paths = [b"/v1/chat/completions", b"/v1/completions", b"/health", b"/metrics", b"/v1/models", b"/x"]
def req():
    b = random.choice(bodies)
    p = random.choice(paths)
    m = random.choice([b"POST", b"GET", b"PUT", b"POST"])
    kind = random.randrange(8)
    if kind == 0:
        return os.urandom(random.randrange(1, 600))
    if kind == 1:  # chunked, maybe broken
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(b[i:i+7]), b[i:i+7]) for i in range(0, len(b), 7))
        if random.random() < 0.5: chunks = chunks[:random.randrange(len(chunks))] + b"zz\r\n"
        return m + b" " + p + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
    if kind == 2:  # wrong content-length
        return m + b" " + p + b" HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % random.choice([0, 1, len(b) // 2, len(b) * 2, 2**40]) + b
    if kind == 3:  # huge header
        return m + b" " + p + b" HTTP/1.1\r\nHost: x\r\nX: " + b"a" * random.randrange(1000, 100000) + b"\r\n\r\n"
    r = bytearray(m + b" " + p + b" HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
    for _ in range(random.randrange(0, 6)):  # byte mutations
        i = random.randrange(len(r)); r[i] = random.randrange(256)
    return bytes(r)
stop = time.time() + secs
count = [0]
def run():
    while time.time() < stop:
        try:
            s = socket.create_connection((host, port), timeout=3)
            s.sendall(req())
            if random.random() < 0.3:
                s.close(); count[0] += 1; continue  # gone early
            try:
                s.recv(random.choice([1, 100, 65536]))
            except socket.timeout:
                pass
            s.close()
            count[0] += 1
        except OSError:
            time.sleep(0.01)
ts = [threading.Thread(target=run) for _ in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
print("requests", count[0])
