#!/usr/bin/env python3
"""estimate.py: an ESTIMATE of glesc's decode speed on named boards (nothing measured on one).

From the device matrix's per-kernel compiler statistics (matrix.py --phases
decode, its --out directory) and the bytes each kernel of one decode step
moves, against each board's published memory bandwidth. docs/boards.md
gives the method, its limits, the sources and the table.

  tools/devices/estimate.py --matrix OUT --model tinyllama-1l.gguf=22 \\
      --model llama3.2-1b-1l.gguf=16 [--unroll2 OUT2] [--ctx 128,1024] [--kernels]

--model FILE=N_LAYER: the GGUF the matrix compiled (one layer is enough: a
layer's kernels do not depend on the layer count) and the real model's
layer count. --unroll2: a second matrix run of the same models with
GLESC_GEMV=unroll=2 (two units in a GEMV lane's loop body instead of one):
the difference of the two compiles' statistics is one loop body, which
turns the static statistics into a per-unit cost. Without it the whole
shader stands for the body (an upper bound on the compute time).

Per kernel: memory time = bytes / (bandwidth x efficiency) and compute time
= invocations x cost per invocation / (the GPU's issue rate); a step's time
is the sum over its kernels of max(memory at the high efficiency, compute)
(fast end) or memory at the low efficiency + compute (slow end: no overlap,
the low occupancy case), plus a per-dispatch overhead. Python 3 stdlib only.
"""
import argparse
import hashlib
import math
import os
import re
import struct
import sys

# (board, matrix driver, GPU, memory, GB/s, compute units, clock GHz); docs/boards.md
# cites each figure. A unit retires cost() 1.0 a cycle: Mali a core, V3D a QPU, Adreno a
# lane (its FP32 ALUs: a third party's count)
BOARDS = [
    ('RK3588', 'g610', 'Mali-G610 MC4', 'LPDDR4X-4266 64 bit', 34.1, 4, 1.0),
    ('Raspberry Pi 5', 'v3d71', 'V3D 7.1', 'LPDDR4X-4267 32 bit', 17.1, 16, 0.8),
    ('Snapdragon 8 Gen 2', 'a740', 'Adreno 740', 'LPDDR5X-8400 64 bit', 67.2, 1024, 0.68),
]
EFF = (0.8, 0.5)                 # fraction of the bandwidth reached: fast end, slow end
DISPATCH_US = (5.0, 20.0)        # per dispatch and barrier: fast end, slow end
GEMV_ROLES = ('qkv', 'o', 'down', 'gateup', 'head')

GGML = {0: ('F32', 1, 4), 1: ('F16', 1, 2), 2: ('Q4_0', 32, 18), 3: ('Q4_1', 32, 20),
        6: ('Q5_0', 32, 22), 7: ('Q5_1', 32, 24), 8: ('Q8_0', 32, 34), 10: ('Q2_K', 256, 84),
        11: ('Q3_K', 256, 110), 12: ('Q4_K', 256, 144), 13: ('Q5_K', 256, 176),
        14: ('Q6_K', 256, 210), 30: ('BF16', 1, 2)}


SIZES = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: 'B', 10: 'Q', 11: 'q',
         12: 'd'}                # GGUF metadata value types: struct formats (8 string, 9 array)


def gguf_tensors(path):
    """{name: (ggml type, [ne0, ne1, ...])} and the metadata, from a GGUF file's header"""
    with open(path, 'rb') as f:
        def rd(fmt):
            return struct.unpack('<' + fmt, f.read(struct.calcsize('<' + fmt)))[0]

        def string():
            return f.read(rd('Q')).decode('utf-8', 'replace')

        def value(t):
            if t == 8:
                return string()
            if t == 9:                   # arrays (the tokenizer's) are skipped
                et, n = rd('I'), rd('Q')
                if et in SIZES:
                    f.seek(n * struct.calcsize(SIZES[et]), 1)
                else:
                    for _ in range(n):
                        value(et)
                return None
            return rd(SIZES[t])
        if f.read(4) != b'GGUF':
            sys.exit('estimate.py: %s is not a GGUF file' % path)
        rd('I')
        n_tensors, n_kv = rd('Q'), rd('Q')
        meta = {}
        for _ in range(n_kv):
            k = string()
            meta[k] = value(rd('I'))
        tensors = {}
        for _ in range(n_tensors):
            name = string()
            dims = [rd('Q') for _ in range(rd('I'))]
            tensors[name] = (rd('I'), dims)
            rd('Q')                      # the data's offset
    return tensors, meta


def tbytes(t):
    typ, dims = t
    _, blk, size = GGML[typ]
    return math.prod(dims) // blk * size


class Model:
    def __init__(self, path, n_layer):
        self.path, self.n_layer = path, n_layer
        self.stem = os.path.splitext(os.path.basename(path))[0]
        self.t, meta = gguf_tensors(path)
        arch = meta.get('general.architecture', 'llama')
        self.name = re.sub(r'-1l(?=-|$)', '', self.stem)   # the one-layer file stands for the model
        g = lambda k: meta['%s.%s' % (arch, k)]
        self.n_embd, self.n_head, self.n_kv = g('embedding_length'), g('attention.head_count'), \
            g('attention.head_count_kv')
        self.n_ff = g('feed_forward_length')
        self.head_dim = self.n_embd // self.n_head
        self.kv_dim = self.head_dim * self.n_kv
        self.out = 'output.weight' if 'output.weight' in self.t else 'token_embd.weight'
        self.vocab = self.t[self.out][1][1]

    def w(self, name):
        return tbytes(self.t[name])


def work(m, role, ctx, kvb):
    """(count a step, bytes, rows N, K) of one kernel role"""
    e, l0 = m.n_embd, 'blk.0.'
    if role == 'embd':
        t = m.t['token_embd.weight']
        return 1, tbytes((t[0], [e])) + 4 * e, e, 1
    if role == 'kvwrite':
        return m.n_layer, m.kv_dim * (4 + kvb), m.kv_dim, 1
    if role == 'qkv':
        w = sum(m.w(l0 + 'attn_%s.weight' % x) for x in 'qkv')
        n = e + 2 * m.kv_dim
        return m.n_layer, w + 4 * e * 2 + 4 * n, n, e
    if role == 'attn':
        # the KV cache read once a step (a workgroup's heads share a kv head), the new
        # row written, q in, the output out
        b = 2 * ctx * m.kv_dim * kvb + 2 * m.kv_dim * kvb + 4 * (e + 2 * m.kv_dim) + 4 * e
        return m.n_layer, b, ctx, m.head_dim
    if role == 'o':
        return m.n_layer, m.w(l0 + 'attn_output.weight') + 4 * 3 * e, e, e
    if role == 'down':
        return m.n_layer, m.w(l0 + 'ffn_down.weight') + 4 * (m.n_ff + 2 * e), e, m.n_ff
    if role == 'gateup':
        w = m.w(l0 + 'ffn_gate.weight') + m.w(l0 + 'ffn_up.weight')
        return m.n_layer, w + 4 * e * 2 + 4 * m.n_ff, m.n_ff, e
    if role == 'head':
        return 1, m.w(m.out) + 4 * e * 2 + 4 * m.vocab, m.vocab, e
    raise ValueError(role)


def role_of(name, names):
    """the decode step's kernels of a llama model, by the ops fused into them (names: all
    the run's kernels)"""
    if name.startswith('get_rows'):
        return ['embd']
    if name == 'set_rows':
        return ['kvwrite']           # a cache write split from the attention (storage blocks)
    if name.startswith('attention'):
        return ['attn']
    if name.startswith('matmul+matmul+matmul'):
        return ['qkv']
    if name.startswith('matmul+matmul+') and 'silu' in name:
        return ['gateup']
    if name == 'matmul+add':
        return ['o', 'down']         # one program: the attention output and the FFN down
    if 'argmax' in name:
        return ['head']              # greedy decode: the GPU picks the token
    if name == 'matmul+rms_norm+mul' and not any('argmax' in n for n in names):
        return ['head']              # the logits head (read back), where the run had no other
    return []


STAT = re.compile(r'(?:SHADER-DB[^:]*:\s*|GL debug \[note[^\]]*\]: )(?:MESA_SHADER_COMPUTE|CL) '
                  r'shader: (.*)')


def parse_items(s):
    d = {}
    for item in s.split(', '):
        mm = re.match(r'\s*([\d.:\-]+) (.+)$', item.strip())
        if mm:
            d[mm.group(2)] = mm.group(1)
    return d


def defines(text):
    return {k: v.rstrip('u') for k, v in re.findall(r'^#define (\w+) (\S+)', text, re.M)}


def driver_kernels(out, drv):
    """{model stem: {kernel name: (stats, GLSL defines, key)}} of a driver's decode runs; the
    key is the GLSL's hash with UNROLL 1: a kernel and its unroll-2 twin share it"""
    rdir = os.path.join(out, drv, 'runs')
    if not os.path.isdir(rdir):
        return {}
    runs = []
    for r in os.listdir(rdir):
        try:
            runs.append((float(open(os.path.join(rdir, r, 'start')).read()), r))
        except (OSError, ValueError):
            pass
    entries, res = {}, {}
    for _, r in sorted(runs):                      # in the order they ran: the cache's order
        stem = r.rsplit('.', 1)[0]
        ks = res.setdefault(stem, {})
        cur = None
        for line in open(os.path.join(rdir, r, 'stderr'), errors='replace'):
            if line.startswith('@@TAP source '):
                f = line.split()[2]
                text = open(os.path.join(rdir, r, 'tap', f + '.glsl'), errors='replace').read()
                name = re.search(r'^// glesc kernel: (.*)$', text, re.M).group(1).strip()
                twin = re.sub(r'#define UNROLL \d+u', '#define UNROLL 1u', text)
                twin = re.sub(r'\d+ units in flight', '1 units in flight', twin)
                key = hashlib.sha1(twin.encode()).hexdigest()
                cur = [name, None, defines(text), key]
            elif line.startswith('@@TAP cache-put ') and cur:
                entries[line.split()[2]] = cur
                ks.setdefault(cur[0], cur)
            elif line.startswith('@@TAP cache-get ') and line.split()[3] == 'hit':
                k = entries.get(line.split()[2])
                if k:
                    ks.setdefault(k[0], k)
                cur = None               # a program binary: its statistics are no new compile's
            else:
                mm = STAT.search(line)
                if mm and cur and cur[1] is None:
                    cur[1] = parse_items(mm.group(1))
    return {s: {n: tuple(k[1:]) for n, k in ks.items() if k[1]} for s, ks in res.items()}


def cost(drv, s):
    """one invocation's cost in the issue rate's unit, from a shader's statistics"""
    if drv.startswith('g'):
        # Panfrost (Mesa's Valhall model, per invocation: FMA and CVT ops / 64, SFU / 16 a
        # core-cycle); load/store: one warp (16 invocations) an instruction a cycle, assumed
        return max(float(s['fma']), float(s['cvt']), float(s['sfu']), float(s['ls']) / 16)
    if drv.startswith('v3d'):
        # V3D: a QPU issues an instruction (with its SFU stalls) for 4 of a 16-wide thread's
        # lanes a cycle
        return float(s.get('inst-and-stalls', s['inst'])) / 4
    return float(s['inst'])          # ir3: every slot (nops too) a lane-cycle


def kernel_time(board, m, stats, dfn, body, role, ctx, kvb):
    """per-kernel (count, bytes, memory s fast/slow, compute s) of one role"""
    _, drv, _, _, bw, units, ghz = board
    count, nbytes, n, k = work(m, role, ctx, kvb)
    s = cost(drv, stats)
    wg = int(dfn.get('WG_SIZE', 64))
    if role in ('embd', 'kvwrite'):
        c = n * s                                # an invocation an element, about
    elif role == 'attn':
        # a workgroup per (kv head, split), splits to about 64 workgroups; the whole
        # shader once per tile of keys (an upper bound: the combine is counted every tile)
        t = int(dfn.get('T', 32))
        nsplit = max(1, min(math.ceil(ctx / t), 64 // max(1, m.n_kv)))
        tiles = math.ceil(ctx / nsplit / t)
        c = m.n_kv * nsplit * wg * s * tiles
    else:
        # GEMV: blocks of ROWS rows, each lane of a row's team takes every TEAM-th
        # 32-element unit: per block (static - bodies) + units x body
        team, nr = int(dfn.get('TEAM', 8)), int(dfn.get('NR', 1))
        nmemb = int(dfn.get('NMEMB', 1))
        rows = wg // team * nr
        u = math.ceil(k / 32 / team)
        if body is None:                         # no unroll-2 run: the whole shader a unit
            per = u * s
        else:
            per = max(s - nmemb * body, 0) + u * body
        c = math.ceil(n / rows) * wg * per
    comp = c / (units * ghz * 1e9)
    mem = [nbytes / (bw * 1e9 * e) for e in EFF]
    return count, nbytes, mem, comp


def board_kernels(out, drv, models):
    """driver_kernels(), with a missing arg-max head taken from another model: a run that
    stopped before its decode steps (V3D's shim can leave the prompt's logits NaN) has
    none, and another model's with the same head type and width is the same program (the
    vocabulary is a uniform)"""
    kd = driver_kernels(out, drv) if out else {}
    for m in models:
        kern = kd.get(m.stem)
        if kern is None or any('argmax' in n for n in kern):
            continue
        for o in models:
            if (o.t[o.out][0], o.n_embd) == (m.t[m.out][0], m.n_embd) and o.stem in kd:
                kern.update({n: k for n, k in kd[o.stem].items() if 'argmax' in n})
    return kd


def step(board, m, kern, twins, ctx, kvb):
    """one decode step: (fast s, slow s, bytes, memory s at the high efficiency, compute s,
    every GEMV costed from a body, per-kernel rows)"""
    drv = board[1]
    fast = slow = nbytes = mem = comp = 0.0
    dispatches, bodies, rows = 0, True, []
    for name, (stats, dfn, key) in kern.items():
        body = None
        if key in twins:              # the unroll-2 twin: one more loop body a matmul
            body = max(cost(drv, twins[key]) - cost(drv, stats), 0) / int(dfn.get('NMEMB', 1))
        for role in role_of(name, kern):
            cnt, b, mt, ct = kernel_time(board, m, stats, dfn, body, role, ctx, kvb)
            fast += cnt * max(mt[0], ct)
            slow += cnt * (mt[1] + ct)
            nbytes += cnt * b
            mem += cnt * mt[0]
            comp += cnt * ct
            dispatches += cnt
            bodies &= body is not None or role not in GEMV_ROLES
            rows.append((role, name, cnt, b, mt, ct, 'body' if body is not None else 'static'))
    fast += dispatches * DISPATCH_US[0] * 1e-6
    slow += dispatches * DISPATCH_US[1] * 1e-6
    return fast, slow, nbytes, mem, comp, bodies, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split('\n', 2)[2])
    ap.add_argument('--matrix', required=True, help="matrix.py's --out of a decode run")
    ap.add_argument('--unroll2', help='the same run with GLESC_GEMV=unroll=2 (loop bodies)')
    ap.add_argument('--model', action='append', required=True, metavar='FILE=N_LAYER',
                    help='a GGUF the matrix ran and its real layer count (repeatable)')
    ap.add_argument('--ctx', default='128,1024', help='context lengths (default 128,1024)')
    ap.add_argument('--kv', choices=('f32', 'f16'), default='f32',
                    help="KV cache bytes (default f32, gguf-run's; the statistics stay the run's)")
    ap.add_argument('--kernels', action='store_true', help='also the per-kernel table')
    a = ap.parse_args()
    models = []
    for spec in a.model:
        p, _, n = spec.rpartition('=')
        if not n.isdigit():
            ap.error('--model %s: FILE=N_LAYER' % spec)
        models.append(Model(p, int(n)))
    kvb = 4 if a.kv == 'f32' else 2
    print('ESTIMATE, not a measurement: bytes against %d-%d%% of the bandwidth and the '
          'compilers\' static statistics (docs/boards.md)\n' % (EFF[1] * 100, EFF[0] * 100))
    print('| board | GPU | model | bandwidth | context | MB a token | bytes alone | '
          'compute alone | estimate, tok/s | bound |')
    print('|---|---|---|---|---|---|---|---|---|---|')
    detail = []
    for board in BOARDS:
        bname, drv, gpu, mem, bw = board[:5]
        ks = board_kernels(a.matrix, drv, models)
        twins = {k[2]: k[0] for kern in board_kernels(a.unroll2, drv, models).values()
                 for k in kern.values()}
        for m in models:
            if m.stem not in ks:
                print('| %s | %s | %s | %s | | | | | no statistics (no matrix run) | |' % (
                    bname, gpu, m.name, mem))
                continue
            for ctx in (int(c) for c in a.ctx.split(',')):
                fast, slow, nbytes, tm, tc, bodies, rows = step(
                    board, m, ks[m.stem], twins, ctx, kvb)
                only = [bw * 1e9 * e / nbytes for e in EFF]
                print('| %s | %s | %s | %s, %.1f GB/s | %d | %.0f | %.1f-%.1f | %.1f%s | '
                      '**%.1f-%.1f** | %s |' % (
                          bname, gpu, m.name, mem, bw, ctx, nbytes / 1e6, only[1], only[0],
                          1 / tc, '' if bodies else ' (static)', 1 / slow, 1 / fast,
                          'compute' if tc > tm else 'memory'))
                detail += [(bname, m.name, ctx) + r for r in rows]
    if a.kernels:
        print('\nPer dispatch (count: dispatches a step): MB, memory ms at %d%% / %d%% of the '
              'bandwidth, compute ms (body: GEMV units costed from the unroll-2 difference; '
              'static: the whole shader a unit, an upper bound)\n' % (EFF[0] * 100, EFF[1] * 100))
        print('| board | model | ctx | role | kernel | count | MB | mem ms | compute ms | cost |')
        print('|---|---|---|---|---|---|---|---|---|---|')
        for bname, mn, ctx, role, name, cnt, b, mt, ct, how in detail:
            print('| %s | %s | %d | %s | %s | %d | %.2f | %.3f / %.3f | %.3f | %s |' % (
                bname, mn, ctx, role, name, cnt, b / 1e6, mt[0] * 1e3, mt[1] * 1e3, ct * 1e3, how))
    return 0


if __name__ == '__main__':
    sys.exit(main())
