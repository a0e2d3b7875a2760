#!/usr/bin/env python3
"""estimate.py: an ESTIMATE of glesc's decode speed on named boards (nothing measured on one).

From the device matrix's decode runs (matrix.py --phases decode, run with
SHIM_DISASM=1 so that each kernel's final code is in its logs) and the bytes
each kernel of one decode step moves, against each board's published memory
bandwidth. docs/boards.md gives the method, its limits, the sources and the
table.

  SHIM_DISASM=1 tools/devices/matrix.py --phases decode --models M1 M2 ... --out OUT
  tools/devices/estimate.py --matrix OUT --model tinyllama-1l.gguf=22 \\
      --model llama3.2-1b-1l.gguf=16 [--ctx 128,1024] [--kernels] [--loops]

--model FILE=N_LAYER: the GGUF the matrix compiled (one layer is enough: a
layer's kernels do not depend on the layer count) and the real model's
layer count.

Compute: each kernel's final code (Panfrost's IR after scheduling, V3D's QPU
code, ir3's disassembly) is read as a list of instructions and its loops
(back edges); every loop gets the trip count the kernel's GLSL gives it
(gemv.glsl and gemv_units.glsl: the blocks, the slices of x, x's fill, a
lane's units, the quarter units' runs and vec4s; attn_decode.glsl: the key
tiles and what each tile does), and the instructions, each weighed by its
loops' trips, are one invocation's work. A kernel whose loops do not have the
shape its GLSL gives (or whose code is not in the logs) falls back to its
whole shader once per unit or tile, marked "static".

Per kernel: memory time = bytes / (bandwidth x efficiency) and compute time
= invocations x cost per invocation / (the GPU's issue rate); a step's time
is the sum over its kernels of max(memory at the high efficiency, compute)
(fast end) or memory at the low efficiency + compute (slow end: no overlap),
plus a per-dispatch overhead. Python 3 stdlib only.
"""
import argparse
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
GEMV_TWO = 2                     # matmul.c's gemv_two uniform: a unit's runs; 2 x: a run's vec4s

GGML = {0: ('F32', 1, 4), 1: ('F16', 1, 2), 2: ('Q4_0', 32, 18), 3: ('Q4_1', 32, 20),
        6: ('Q5_0', 32, 22), 7: ('Q5_1', 32, 24), 8: ('Q8_0', 32, 34), 10: ('Q2_K', 256, 84),
        11: ('Q3_K', 256, 110), 12: ('Q4_K', 256, 144), 13: ('Q5_K', 256, 176),
        14: ('Q6_K', 256, 210), 30: ('BF16', 1, 2)}

SIZES = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: 'B', 10: 'Q', 11: 'q',
         12: 'd'}                # GGUF metadata value types: struct formats (8 string, 9 array)

# Valhall's execution unit of each opcode (Mesa's src/panfrost/compiler/valhall/ISA.xml;
# the rest are CVT's: integer adds, compares, moves, conversions, branches), counted as
# Mesa's shader-db does: FMA and CVT 64 a core-cycle, SFU 16; load/store one warp's a cycle
VALHALL = {}
for _u, _ops in (('fma', 'FMA FMA_RSCALE FADD FADD_IMM FADD_LSCALE LDEXP IDP'),
                 ('sfu', 'IMUL IMULD CLPER LSHIFT_AND RSHIFT_AND LSHIFT_OR RSHIFT_OR LSHIFT_XOR '
                         'RSHIFT_XOR MUX POPCOUNT BITREV NOT_OLD FRCP FRSQ FLOGD FPCLASS '
                         'FLOG_TABLE FRCP_APPROX FRSQ_APPROX FSIN_TABLE FCOS_TABLE FSINCOS_OFFSET '
                         'FEXP_TABLE FEXP FATAN_ASSIST CUBE_SSEL CUBE_TSEL CUBEFACE1 CUBEFACE2_V9'),
                 ('ls', 'LD_BUFFER LOAD STORE LEA_BUFFER LEA_BUF_IMM ATOM ATOM1_RETURN '
                        'ATOM_RETURN ST_CVT LD_ATTR LD_ATTR_IMM LEA_ATTR LEA_ATTR_IMM LD_TEX '
                        'LD_TEX_IMM LEA_TEX LEA_TEX_IMM'),
                 ('none', 'BARRIER')):
    VALHALL.update(dict.fromkeys(_ops.split(), _u))
EXP = re.compile(r'\b(FEXP|exp|exp2)\b')     # an exponential (softmax) in Mali, V3D, ir3 code


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
    """(count a step, bytes, rows N or elements, K, the members' rows) of one kernel role"""
    e, l0 = m.n_embd, 'blk.0.'
    if role == 'embd':
        t = m.t['token_embd.weight']
        return 1, tbytes((t[0], [e])) + 4 * e, e, 1, None
    if role == 'kvwrite':
        return m.n_layer, m.kv_dim * (4 + kvb), m.kv_dim, 1, None
    if role == 'qkv':
        w = sum(m.w(l0 + 'attn_%s.weight' % x) for x in 'qkv')
        n = e + 2 * m.kv_dim
        return m.n_layer, w + 4 * e * 2 + 4 * n, n, e, (e, m.kv_dim, m.kv_dim)
    if role == 'attn':
        # the KV cache read once a step (a workgroup's heads share a kv head), the new
        # row written, q in, the output out
        b = 2 * ctx * m.kv_dim * kvb + 2 * m.kv_dim * kvb + 4 * (e + 2 * m.kv_dim) + 4 * e
        return m.n_layer, b, ctx, m.head_dim, None
    if role == 'o':
        return m.n_layer, m.w(l0 + 'attn_output.weight') + 4 * 3 * e, e, e, None
    if role == 'down':
        return m.n_layer, m.w(l0 + 'ffn_down.weight') + 4 * (m.n_ff + 2 * e), e, m.n_ff, None
    if role == 'gateup':
        w = m.w(l0 + 'ffn_gate.weight') + m.w(l0 + 'ffn_up.weight')
        return m.n_layer, w + 4 * e * 2 + 4 * m.n_ff, m.n_ff, e, None
    if role == 'head':
        return 1, m.w(m.out) + 4 * e * 2 + 4 * m.vocab, m.vocab, e, None
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


# ---- each kernel's final code: [[slots, unit, text]] and its loops [(first, last)] ----

def back_edges(targets):
    """loops of a listing: (target, branch) for each branch to an earlier instruction"""
    return [(t, k) for k, t in targets if t <= k]


def mali_dumps(path):
    """the final IR (BIFROST_MESA_DEBUG=shaders: the third dump of blocks, after
    scheduling) of every compute shader in a run's stdout, in compile order"""
    out, blocks, compute, nth = [], None, False, 0
    cur = None

    def close():
        if blocks is not None and compute:
            ins, first, edges = [], {}, []
            for idx, ops, succ in blocks:
                first[idx] = len(ins)
                ins += [[1, VALHALL.get(o.split('.')[0], 'cvt'), o] for o in ops]
                edges += [(s, len(ins) - 1, idx) for s in succ]
            loops = [(first[s], max(k, first[s])) for s, k, idx in edges if s <= idx]
            out.append((ins, loops))
    for line in open(path, errors='replace'):
        line = line.rstrip('\n')
        if line.startswith('shader: MESA_SHADER'):
            close()
            compute, nth, blocks, cur = line.endswith('COMPUTE'), 0, None, None
            continue
        m = re.match(r'block(\d+) \{', line)
        if m and compute:
            nth += m.group(1) == '0'
            if nth == 3:
                blocks = [] if m.group(1) == '0' else blocks
                cur = [int(m.group(1)), [], []]
            continue
        if cur is not None and line.startswith('}'):
            cur[2] = [int(s) for s in re.findall(r'block(\d+)', line.split(' from ')[0])]
            blocks.append(cur)
            cur = None
        elif cur is not None and line.strip():
            t = line.strip()
            cur[1].append((t.split(' = ', 1)[1] if ' = ' in t else t).split()[0])
    close()
    return out


def v3d_listing(lines):
    """V3D_DEBUG=qpu: one instruction a line; a branch's offset is in bytes from the
    instruction after its three delay slots, which run with it"""
    ins, targets = [], []
    for t in lines:
        ins.append([1, None, t])
        m = re.match(r'b\w*\.\w+\s+(-?\d+)', t)
        if m:
            targets.append((len(ins) - 1, len(ins) + 3 + int(m.group(1)) // 8))
    return ins, [(t, k + 3) for t, k in back_edges(targets)]


def ir3_listing(lines):
    """IR3_SHADER_DEBUG=disasm: labels lNNN:, branches to #lNNN; an instruction takes 1 +
    its (rptN) + its (nopN) slots (ir3's shader-db count); the preamble (up to shpe,
    once a wave) and what follows end are not counted"""
    ins, labels, targets = [], {}, []
    for t in lines:
        m = re.match(r'l(\d+):$', t)
        if m:
            labels[int(m.group(1))] = len(ins)
            continue
        n = lambda k: int((re.search(r'\(%s(\d)\)' % k, t) or [0, 0])[1])
        ins.append([1 + n('rpt') + n('nop'), None, t])
        m = re.search(r'\b(jump|br)\b.*#l(\d+)', t)
        if m:
            targets.append((len(ins) - 1, int(m.group(2))))
    pre = [k for k, x in enumerate(ins) if re.search(r'\bshpe\b', x[2])]
    end = [k for k, x in enumerate(ins) if re.search(r'\bend\b', x[2])]
    for k, x in enumerate(ins):
        if (pre and k <= pre[0]) or (end and k > end[-1]):
            x[0] = 0
    targets = [(k, labels[t]) for k, t in targets if t in labels]
    return ins, back_edges(targets)


def stat_line(line):
    """a shader-db line's items (Panfrost on stderr, V3D and Freedreno as GL debug notes)"""
    m = re.search(r'(?:SHADER-DB[^:]*:\s*|GL debug \[note[^\]]*\]: )(?:MESA_SHADER_COMPUTE|CL) '
                  r'shader: (.*)', line)
    if not m:
        return None
    d = {}
    for item in m.group(1).split(', '):
        mm = re.match(r'\s*([\d.:\-]+) (.+)$', item.strip())
        if mm:
            d[mm.group(2)] = mm.group(1)
    return d


def defines(text):
    return {k: v.rstrip('u') for k, v in re.findall(r'^#define (\w+) (\S+)', text, re.M)}


def run_kernels(rdir, drv, cache):
    """{kernel name: (stats, GLSL defines, code or None)} of one matrix run, the first
    compile of each name; a program binary from glesc's cache (an earlier run's: cache,
    {entry: kernel}, which this run's puts extend) compiles nothing and is the entry's.
    A link's code is the listing with as many instructions as its statistics say (V3D
    prints each register-allocation strategy's try)"""
    comps, cur, code, ks = [], None, None, {}
    mali, v3d, fresh = drv.startswith('g'), drv.startswith('v3d'), False
    for line in open(os.path.join(rdir, 'stderr'), errors='replace'):
        if line.startswith('@@TAP source '):
            f = line.split()[2]
            text = open(os.path.join(rdir, 'tap', f + '.glsl'), errors='replace').read()
            name = re.search(r'^// glesc kernel: (.*)$', text, re.M).group(1).strip()
            cur = {'name': name, 'dfn': defines(text), 'stats': None, 'code': None}
            comps.append(cur)
        elif line.startswith('@@TAP link-begin'):
            code = []
        elif line.startswith('@@TAP link-end'):
            if cur is not None and cur['stats'] is not None and code:
                got = [c for c in map(v3d_listing if v3d else ir3_listing, code)
                       if sum(x[0] for x in c[0]) == int(cur['stats']['inst'])]
                cur['code'] = got[-1] if got else None
            code = None
        elif line.startswith('@@TAP cache-put ') and cur is not None:
            cache[line.split()[2]] = cur
            ks.setdefault(cur['name'], cur)
        elif line.startswith('@@TAP cache-get ') and line.split()[3] == 'hit':
            if line.split()[2] in cache:
                ks.setdefault(cache[line.split()[2]]['name'], cache[line.split()[2]])
            cur = None                   # a program binary: no new compile
        elif code is not None and v3d:
            if 'QPU:' in line:
                fresh = 'MESA_SHADER_COMPUTE' in line
                if fresh:
                    code.append([])
            elif line.startswith('0x') and fresh:
                code[-1].append(line[19:].strip())
        elif code is not None and not mali and line.startswith('MESA: info: '):
            t = line[12:].strip()
            if t.startswith('@'):        # a shader's inputs and constants, then its code
                fresh = True
            elif t and not t.startswith(';'):
                if fresh:
                    code.append([])
                    fresh = False
                if code:
                    code[-1].append(t)
        st = stat_line(line)
        if st is not None:
            if mali:
                comps.append({'stat_only': True, 'stats': st})  # pairs with stdout's dumps
            if cur is not None and cur['stats'] is None:
                cur['stats'] = st
                if mali:
                    comps[-1]['owner'] = cur
    if mali:
        dumps = mali_dumps(os.path.join(rdir, 'stdout'))
        stats = [c for c in comps if c.get('stat_only')]
        if len(dumps) == len(stats):
            for c, d in zip(stats, dumps):
                if 'owner' in c and sum(x[0] for x in d[0]) == int(c['stats']['inst']):
                    c['owner']['code'] = d
    for c in comps:
        if not c.get('stat_only') and c['stats'] is not None:
            ks.setdefault(c['name'], c)
    return {n: (c['stats'], c['dfn'], c['code']) for n, c in ks.items() if c['stats']}


def driver_kernels(out, drv):
    """{model stem: {kernel name: (stats, defines, code)}} of a driver's decode runs"""
    rdir = os.path.join(out, drv, 'runs')
    if not os.path.isdir(rdir):
        return {}
    runs = []
    for r in os.listdir(rdir):
        try:
            runs.append((float(open(os.path.join(rdir, r, 'start')).read()), r))
        except (OSError, ValueError):
            pass
    cache = {}                       # in the order the runs ran: the program cache's
    return {r.rsplit('.', 1)[0]: run_kernels(os.path.join(rdir, r), drv, cache)
            for _, r in sorted(runs)}


# ---- loop trip counts from the GLSL ----

class Tree:
    """the loops of a listing, nested: loops[i] = (first, last), kids[i] in code order
    (kids[None]: the top level)"""

    def __init__(self, loops):
        self.loops = sorted(set(loops), key=lambda x: (x[0], -x[1]))
        self.kids = {None: []}
        for i, (h, t) in enumerate(self.loops):
            par = next((j for j in range(i - 1, -1, -1)
                        if self.loops[j][0] <= h and self.loops[j][1] >= t), None)
            self.kids.setdefault(par, []).append(i)
            self.kids[i] = []

    def chain(self, i):
        """loop i and its only descendants, outermost first (None where one has several)"""
        c = [i]
        while self.kids[c[-1]]:
            if len(self.kids[c[-1]]) > 1:
                return None
            c.append(self.kids[c[-1]][0])
        return c

    def under(self, i):
        return [i] + [d for k in self.kids[i] for d in self.under(k)]


def gemv_trips(tree, dfn, k, members):
    """each loop's iterations each time the loop around it runs once (gemv.glsl,
    gemv_units.glsl), or None where the loops are not the GLSL's: the block loop (once: the
    costs are a block's) holds the slices of x, each with x's fill (GEMV_LEAN: its elements
    in runs of 2 x gemv_two; else FILL vec4s an iteration) and NMEMB unit loops (a lane's
    units; GEMV_HALF: a unit's runs, gemv_two; GEMV_QUAD: a run's vec4s, 2 x gemv_two), of
    which a block takes one member's; after the slices the stores (once; a loop in them: a
    team's sums)"""
    wg, team = int(dfn['WG_SIZE']), int(dfn.get('TEAM', 8))
    xs, ks, unroll = int(dfn['XS']), int(dfn.get('KSPLIT', 1)), int(dfn.get('UNROLL', 1))
    nmemb, mcols = int(dfn.get('NMEMB', 1)), int(dfn.get('MCOLS', 1))
    lean, half, quad = 'GEMV_LEAN' in dfn, 'GEMV_HALF' in dfn, 'GEMV_QUAD' in dfn
    if 'GEMV_RAW' in dfn or 'GEMV_PASSES' in dfn:
        return None                  # pipelined units, column passes: not a decode GEMV here
    top = [i for i in tree.kids[None] if tree.kids[i]]
    if len(top) != 1:
        return None
    g = top[0]
    inner = [i for i in tree.kids[g] if tree.kids[i]]
    if len(inner) != 1 or len(tree.kids[inner[0]]) < nmemb + 1:
        return None
    k0 = inner[0]
    slices = [min(xs, k - s) for s in range(0, k, xs)]
    fill = sum(math.ceil(n / 32) * 8 for n in slices) / len(slices) / wg  # vec4s a slice
    units = sum(math.ceil(n / 32) for n in slices) / len(slices) / (team * ks * unroll)
    trips = dict.fromkeys(range(len(tree.loops)), 1.0)
    trips[k0] = len(slices)
    share = [r / sum(members) for r in members] if members and len(members) == nmemb \
        else [1.0 / nmemb] * nmemb
    for j, u in enumerate(tree.kids[k0][-nmemb:]):
        c = tree.chain(u)
        want = [units * share[j]] + [GEMV_TWO] * half + [2 * GEMV_TWO] * quad
        if c is None or len(c) != len(want):
            return None
        trips.update(zip(c, want))
    for f in tree.kids[k0][:-nmemb]:
        c = tree.chain(f)
        want = [fill, 2 * GEMV_TWO] if lean else [fill / int(dfn['FILL'])]
        if c is None or len(c) < len(want):
            return None
        trips.update(dict.fromkeys(c, mcols))    # the columns' loop, where it is kept
        trips.update(zip(c[len(c) - len(want):], want))
    for s in tree.kids[g]:
        if s != k0:
            trips.update(dict.fromkeys(tree.under(s)[1:], team * ks))
    return trips


def attn_trips(tree, ins, dfn, tiles):
    """each loop's iterations each time the loop around it runs once, in a decode
    attention workgroup (attn_decode.glsl), or None where the loops are not the GLSL's: the
    key tiles' loop (the top-level loop with the most loops in it) holds the tile's keys
    (T x D elements over the workgroup; the KV-cache lookups in it are not entered in a
    decode step), the scores (HG x T over the workgroup) each with its D products, the
    values (ATTN_V_SHARED), then loops over the tile's keys (the maximum, the sums, the
    weighted values) or its scores (the exponentials); of the loops before the tiles the
    last stages q (HG x D over the workgroup), the others write the new rows (once); those
    after combine the splits (once, an upper bound: only the last workgroup does)"""
    wg, hg, t, d = int(dfn['WG_SIZE']), int(dfn['HG']), int(dfn['T']), int(dfn['D'])
    dv = int(dfn.get('DV', d))
    vs = 'ATTN_V_SHARED' in dfn
    top = tree.kids[None]
    if not top:
        return None
    tl = max(top, key=lambda i: len(tree.under(i)))
    kids = tree.kids[tl]
    if 'ATTN_REGS' in dfn or len(kids) < 3 + vs or len(tree.kids[kids[1]]) != 1:
        return None
    trips = dict.fromkeys(range(len(tree.loops)), 1.0)
    trips.update(dict.fromkeys(tree.under(tl), 0.0))
    trips[tl] = tiles
    trips[kids[0]] = math.ceil(t * d / wg)
    trips[kids[1]] = math.ceil(hg * t / wg)
    trips[tree.kids[kids[1]][0]] = d
    if vs:
        trips[kids[2]] = math.ceil(t * dv / wg)
    for i in kids[2 + vs:]:
        h, e = tree.loops[i]
        trips[i] = math.ceil(hg * t / wg) if any(EXP.search(x[2]) for x in ins[h:e + 1]) else t
        trips.update(dict.fromkeys(tree.under(i)[1:], 1.0))
    before = [i for i in top if tree.loops[i][0] < tree.loops[tl][0]]
    if before:
        trips[before[-1]] = math.ceil(hg * d / wg)
    return trips


def weighed(ins, tree, trips):
    """[(slots x the trips of the instruction's loops, unit)]"""
    w = [1.0] * len(ins)
    for i, (h, e) in enumerate(tree.loops):
        for k in range(h, e + 1):
            w[k] *= trips[i]
    return [(x[0] * wk, x[1]) for x, wk in zip(ins, w)]


def cost(drv, s=None, dyn=None):
    """one invocation's cost in the issue rate's unit, from a shader's statistics (s) or
    its instructions weighed by their loops (dyn)"""
    if drv.startswith('g'):
        # Mesa's Valhall model per invocation: FMA and CVT ops / 64, SFU / 16 a core-cycle;
        # load/store: one warp (16 invocations) an instruction a cycle, assumed
        if dyn is not None:
            u = {}
            for n, unit in dyn:
                u[unit] = u.get(unit, 0.0) + n
            return max(u.get('fma', 0) / 64, u.get('cvt', 0) / 64, u.get('sfu', 0) / 16,
                       u.get('ls', 0) / 16)
        return max(float(s['fma']), float(s['cvt']), float(s['sfu']), float(s['ls']) / 16)
    n = sum(x[0] for x in dyn) if dyn is not None else \
        float(s.get('inst-and-stalls', s['inst']) if drv.startswith('v3d') else s['inst'])
    # V3D: a QPU issues an instruction for 4 of a 16-wide thread's lanes a cycle;
    # ir3: every slot (nops and repeats too) a lane-cycle
    return n / 4 if drv.startswith('v3d') else n


def splits(m, dfn, ctx):
    """a decode attention's key splits (workgroups per kv head: about 64 workgroups in all,
    the small GPUs' class in attention.c) and key tiles a split"""
    t = int(dfn.get('T', 32))
    nsplit = max(1, min(math.ceil(ctx / t), 64 // max(1, m.n_kv)))
    return nsplit, math.ceil(ctx / nsplit / t)


def loop_trips(m, kernel, role, ctx, kvb):
    """(the loops, their trips) of a kernel's code; trips None where the loops are not
    the GLSL's or the logs had no code"""
    _, dfn, code = kernel
    if not code:
        return None, None
    tree = Tree(code[1])
    if role == 'attn':
        return tree, attn_trips(tree, code[0], dfn, splits(m, dfn, ctx)[1])
    if role in ('embd', 'kvwrite'):
        return tree, {} if not tree.loops else None
    _, _, _, k, members = work(m, role, ctx, kvb)
    return tree, gemv_trips(tree, dfn, k, members)


def kernel_time(board, m, kernel, role, ctx, kvb):
    """per-kernel (count, bytes, memory s fast/slow, compute s, how) of one role"""
    _, drv, _, _, bw, units, ghz = board
    stats, dfn, code = kernel
    count, nbytes, n, k, _ = work(m, role, ctx, kvb)
    tree, trips = loop_trips(m, kernel, role, ctx, kvb)
    s = cost(drv, stats) if trips is None else cost(drv, dyn=weighed(code[0], tree, trips))
    wg = int(dfn.get('WG_SIZE', 64))
    how = 'static' if trips is None else 'loops'
    if role in ('embd', 'kvwrite'):
        c, how = n * s, 'element'    # an invocation an element, about
    elif role == 'attn':
        # a workgroup per (kv head, split); without its loops, the whole shader a tile
        nsplit, tiles = splits(m, dfn, ctx)
        c = m.n_kv * nsplit * wg * s * (tiles if trips is None else 1)
    else:
        # GEMV: blocks of ROWS rows, a workgroup's; without its loops, the whole shader
        # once a unit of a lane's
        team, nr, ks = int(dfn.get('TEAM', 8)), int(dfn.get('NR', 1)), int(dfn.get('KSPLIT', 1))
        per = s if trips is not None else math.ceil(k / 32 / team / ks) * s
        c = math.ceil(n / (wg // team // ks * nr)) * wg * per
    comp = c / (units * ghz * 1e9)
    mem = [nbytes / (bw * 1e9 * e) for e in EFF]
    return count, nbytes, mem, comp, how


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


def step(board, m, kern, ctx, kvb):
    """one decode step: (fast s, slow s, bytes, memory s at the high efficiency, compute s,
    every kernel costed from its loops, per-kernel rows)"""
    fast = slow = nbytes = mem = comp = 0.0
    dispatches, loops, rows = 0, True, []
    for name, kernel in kern.items():
        for role in role_of(name, kern):
            cnt, b, mt, ct, how = kernel_time(board, m, kernel, role, ctx, kvb)
            fast += cnt * max(mt[0], ct)
            slow += cnt * (mt[1] + ct)
            nbytes += cnt * b
            mem += cnt * mt[0]
            comp += cnt * ct
            dispatches += cnt
            loops &= how == 'loops' or role in ('embd', 'kvwrite')
            th = kernel[0].get('threads', kernel[0].get('waves', ''))
            rows.append((role, name, cnt, b, mt, ct, th, how))
    fast += dispatches * DISPATCH_US[0] * 1e-6
    slow += dispatches * DISPATCH_US[1] * 1e-6
    return fast, slow, nbytes, mem, comp, loops, rows


def show_loops(board, m, kern, ctx, kvb):
    """each kernel's loops as the estimate counts them: each loop's own instructions (not
    those of a loop in it) and its iterations each time the loop around it runs once; then
    an invocation's cost (a GEMV's for a block of rows, the attention's for a workgroup)"""
    drv = board[1]
    for name, kernel in kern.items():
        roles = role_of(name, kern)
        if not kernel[2] or not roles:
            continue
        ins = kernel[2][0]
        tree, trips = loop_trips(m, kernel, roles[-1], ctx, kvb)
        span = lambda i: sum(x[0] for x in ins[tree.loops[i][0]:tree.loops[i][1] + 1])
        total = sum(x[0] for x in ins)
        print('%s, %s, %s (%s, K %d), %d instructions, %d in no loop%s:' % (
            board[0], m.name, name, ', '.join(roles), work(m, roles[-1], ctx, kvb)[3], total,
            total - sum(span(i) for i in tree.kids[None]),
            '' if trips is not None else ' (not the GLSL\'s loops: static)'))

        def rec(i, depth):
            print('  %s%d x %s' % ('  ' * depth, span(i) - sum(span(c) for c in tree.kids[i]),
                                   '%g' % trips[i] if trips is not None else '?'))
            for c in tree.kids[i]:
                rec(c, depth + 1)
        for i in tree.kids[None]:
            rec(i, 0)
        if trips is not None:
            print('  cost %.1f' % cost(drv, dyn=weighed(ins, tree, trips)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split('\n', 2)[2])
    ap.add_argument('--matrix', required=True,
                    help="matrix.py's --out of a decode run made with SHIM_DISASM=1")
    ap.add_argument('--model', action='append', required=True, metavar='FILE=N_LAYER',
                    help='a GGUF the matrix ran and its real layer count (repeatable)')
    ap.add_argument('--ctx', default='128,1024', help='context lengths (default 128,1024)')
    ap.add_argument('--kv', choices=('f32', 'f16'), default='f32',
                    help="KV cache bytes (default f32, gguf-run's; the statistics stay the run's)")
    ap.add_argument('--kernels', action='store_true', help='also the per-kernel table')
    ap.add_argument('--loops', action='store_true',
                    help="also each kernel's loops and their executions (the first --ctx)")
    a = ap.parse_args()
    models = []
    for spec in a.model:
        p, _, n = spec.rpartition('=')
        if not n.isdigit():
            ap.error('--model %s: FILE=N_LAYER' % spec)
        models.append(Model(p, int(n)))
    kvb = 4 if a.kv == 'f32' else 2
    ctxs = [int(c) for c in a.ctx.split(',')]
    print('ESTIMATE, not a measurement: bytes against %d-%d%% of the bandwidth and the '
          'compilers\' code, its loops weighed by their trips (docs/boards.md)\n' % (
              EFF[1] * 100, EFF[0] * 100))
    print('| board | GPU | model | bandwidth | context | MB a token | bytes alone | '
          'compute alone | estimate, tok/s | bound |')
    print('|---|---|---|---|---|---|---|---|---|---|')
    detail, shown = [], []
    for board in BOARDS:
        bname, drv, gpu, mem, bw = board[:5]
        ks = board_kernels(a.matrix, drv, models)
        for m in models:
            if m.stem not in ks:
                print('| %s | %s | %s | %s | | | | | no statistics (no matrix run) | |' % (
                    bname, gpu, m.name, mem))
                continue
            shown.append((board, m, ks[m.stem]))
            for ctx in ctxs:
                fast, slow, nbytes, tm, tc, loops, rows = step(board, m, ks[m.stem], ctx, kvb)
                only = [bw * 1e9 * e / nbytes for e in EFF]
                print('| %s | %s | %s | %s, %.1f GB/s | %d | %.0f | %.1f-%.1f | %.1f%s | '
                      '**%.1f-%.1f** | %s |' % (
                          bname, gpu, m.name, mem, bw, ctx, nbytes / 1e6, only[1], only[0],
                          1 / tc, '' if loops else ' (static)', 1 / slow, 1 / fast,
                          'compute' if tc > tm else 'memory'))
                detail += [(bname, m.name, ctx) + r for r in rows]
    if a.kernels:
        print('\nPer dispatch (count: dispatches a step): MB, memory ms at %d%% / %d%% of the '
              'bandwidth, compute ms, threads (Freedreno: waves); loops: the code\'s loops '
              'weighed by their trips, static: the whole shader once a unit or tile\n' % (
                  EFF[0] * 100, EFF[1] * 100))
        print('| board | model | ctx | role | kernel | count | MB | mem ms | compute ms | '
              'threads | cost |')
        print('|---|---|---|---|---|---|---|---|---|---|---|')
        for bname, mn, ctx, role, name, cnt, b, mt, ct, th, how in detail:
            print('| %s | %s | %d | %s | %s | %d | %.2f | %.3f / %.3f | %.3f | %s | %s |' % (
                bname, mn, ctx, role, name, cnt, b / 1e6, mt[0] * 1e3, mt[1] * 1e3,
                ct * 1e3, th, how))
    if a.loops:
        print()
        for board, m, kern in shown:
            show_loops(board, m, kern, ctxs[0], kvb)
    return 0


if __name__ == '__main__':
    sys.exit(main())
