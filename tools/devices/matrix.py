#!/usr/bin/env python3
"""matrix.py: glesc's device matrix. Compiles every kernel glesc needs for the
given GGUF models on Mesa's real embedded GPU compilers (Panfrost, Freedreno,
V3D through drm-shim, see setup.sh and run-shim.sh beside this file) and
prints one markdown table per driver: each distinct kernel (by GLSL text)
once, the phases and models that use it, the compile/link result and the
compiler's statistics.

  tools/devices/matrix.py --drivers g610,a618 --models a.gguf b.gguf
  tools/devices/matrix.py --drivers g610 --synth --synth-archs llama --synth-types Q8_0

Per model it runs the arm64 gguf-run under run-shim.sh (SHIM_STATS=1
SHIM_TAP=1, GLESC_NO_PARALLEL_COMPILE=1, GLESC_COMPILE_THREADS=1: one
link at a time, so each shader-db line lies inside its kernel's link;
GLESC_GEMV_MAX_M=8: no device profile, whose timing is noise under the
shim) once per run kind:
  decode   --prompt-ids 1, -n 2: the decode kernels alone (only where decode
           is asked for without prefill)
  small    --prompt-ids of 5 ids, -n 1: the small-batch (5-column GEMV) path
  prefill  --prompt-ids of 12 ids, -n 3: the prefill GEMM, then decode steps
  small-gemm  5 ids, -n 1, GLESC_GEMV_MAX_M=1: the GEMM with the row norm
           folded in, taken for small batches where the device profile picks
           the GEMM (not in the default phases: slow on Panfrost and V3D)
  precompile  gguf-run --precompile: every kernel of every run above (each
           prompt length, decode, the greedy arg max head), compiled and never
           run; the only way to V3D 4.2's decode heads, whose runs end at the
           prompt's logits (the shim's readback is NaN)
Kernels linked before gguf-run's "prompt:" line (-v) belong to the run's
prompt phase, later ones to decode. All models of one driver share one
GLESC_CACHE_DIR (OUT/DRIVER/cache): a kernel compiles once per driver; a
later cache hit (glsl-tap's "cache-get NAME hit", tied to its source by the
"cache-put NAME" that followed its link) only adds the model and phase to its
row.

Exit status 1 on any compile or link failure, any failed or timed-out
gguf-run (its stderr's last lines are printed) or any limit breach message
(e.g. "kernel needs more than 8 storage buffers"); 2 on a usage error.
Python 3 standard library only.
"""
import argparse
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))

# name: (run-shim DRIVER, MODEL, table title)
DRIVERS = {
    'g52': ('panfrost', 'g52', 'Panfrost Mali-G52 (Bifrost, 7212)'),
    'g57': ('panfrost', 'g57', 'Panfrost Mali-G57 (Valhall, 9093)'),
    'g610': ('panfrost', 'g610', 'Panfrost Mali-G610 (Valhall CSF, a867)'),
    'a618': ('freedreno', '618', 'Freedreno Adreno 618 (a6xx)'),
    'a630': ('freedreno', '630', 'Freedreno Adreno 630 (a6xx)'),
    'a660': ('freedreno', '660', 'Freedreno Adreno 660 (a6xx)'),
    'a740': ('freedreno', '740', 'Freedreno Adreno 740 (a7xx)'),
    'a750': ('freedreno', '750', 'Freedreno Adreno 750 (a7xx)'),
    'v3d42': ('v3d', '4.2', 'V3D 4.2 (Raspberry Pi 4)'),
    'v3d71': ('v3d', '7.1', 'V3D 7.1 (Raspberry Pi 5)'),
}
PREFILL_IDS = [1] + list(range(3, 14))   # 12 ids (2 is </s> in llama vocabularies)
SMALL_IDS = [1, 3, 4, 5, 6]
# run name: (prompt phase, prompt ids, tokens generated, GLESC_GEMV_MAX_M)
RUNS = {
    'prefill': ('prefill', PREFILL_IDS, 3, '8'),
    'small': ('small', SMALL_IDS, 1, '8'),
    'decode': ('decode', [1], 2, '8'),
    # the GEMM for a small batch (where a device profile picks it), with the
    # row norm folded in as for every matmul of <= 8 columns
    'small-gemm': ('small-gemm', SMALL_IDS, 1, '1'),
    'precompile': ('precompile', None, 0, '8'),
}
SYNTH_ARCHS = ['llama', 'qwen2', 'qwen3', 'gemma2', 'gemma3', 'phi3']
SYNTH_TYPES = ['F32', 'F16', 'BF16', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'Q4_K_M', 'Q5_K_M',
               'Q6_K']
# tiny shapes: n_embd and n_ff multiples of 256 (K-quant blocks), head dim 64
SYNTH_SHAPE = ['--n-embd', '256', '--n-layer', '2', '--n-head', '4', '--n-head-kv', '2',
               '--n-ff', '512', '--n-vocab', '512', '--n-ctx', '128']

# shader-db lines (as ../shared/tools/shim/shader-stats.py reads them):
# Panfrost prints "SHADER-DB: MESA_SHADER_COMPUTE shader: ..." on stderr,
# Freedreno and V3D send theirs as KHR_debug notes glesc prints (GLESC_DEBUG=1)
STAT = re.compile(r'(?:SHADER-DB[^:]*:\s*|SHADER-DB-\S+ - |GL debug \[note[^\]]*\]: )'
                  r'(MESA_SHADER_COMPUTE|CS|CL) shader: (.*)')
NOISE = re.compile(r'export failed|Unknown DRM_IOCTL|^@@TAP|SHADER-DB|GL debug \[(note|low|medium)|'
                   r'Falling back to strategy|^\s*$')
LIMIT = re.compile(r'needs more than|too many|exceed|out of registers|limit', re.I)
ERROR = re.compile(r'error|failed|needs more than|too many|exceed', re.I)


def parse_items(s):
    """'532 inst, 67.0 cycles, 0:0 spills:fills' -> {'inst': '532', ...}"""
    d = {}
    for item in s.rstrip('\n').split(', '):
        m = re.match(r'\s*([\d.:\-]+) (.+)$', item.strip())
        if m:
            d[m.group(2)] = m.group(1)
    return d


def glsl_kind(text):
    """the kind from the GLSL's header: '// GEMM (glsl/graph/gemm.glsl): ...' -> 'GEMM'"""
    for line in text.split('\n')[2:4]:
        if line.startswith('// ') and not line.startswith('// glesc kernel'):
            return line[3:].split(' (')[0].split(':')[0][:24]
    return ''


def glsl_name(text):
    m = re.search(r'^// glesc kernel: (.*)$', text, re.M)
    return m.group(1).strip() if m else '?'


class Kernel:
    def __init__(self, key, name, kind):
        self.key, self.name, self.kind = key, name, kind
        self.phases, self.models = set(), set()
        self.stats = None          # the compute shader-db line's items
        self.link_s = None
        self.status = None         # '1' linked, '0' failed, None: no link seen
        self.messages = []         # the compiler's / glesc's messages for it
        self.compiled = False      # compiled in this matrix run (not only cache hits)
        self.unfinished = None     # its link was cut short (timeout)
        self.order = 0


class Driver:
    """the kernels of one driver, fed by the runs' logs in the order they ran"""

    def __init__(self, name):
        self.name = name
        self.kernels = {}          # GLSL sha1 (or 'entry:NAME') -> Kernel
        self.entries = {}          # glesc disk-cache entry name -> GLSL sha1
        self.runs = []             # (model, run, rc, seconds, tail)
        self.breaches = []         # (model, run, line)
        self.errors = []           # (model, run, line) not tied to a kernel

    def kernel(self, key, name, kind):
        k = self.kernels.get(key)
        if not k:
            k = self.kernels[key] = Kernel(key, name, kind)
            k.order = len(self.kernels)
        return k

    def feed(self, model, run, rundir):
        phase = RUNS[run][0]
        tap = os.path.join(rundir, 'tap')
        cur = None
        with open(os.path.join(rundir, 'stderr'), errors='replace') as f:
            lines = f.read().split('\n')
        for line in lines:
            if line.startswith('@@TAP cache-get '):
                _, _, name, how = line.split()[:4]
                if how == 'hit':
                    key = self.entries.get(name)
                    k = self.kernels.get(key) if key else None
                    if not k:  # an entry made before this matrix run: no source seen
                        k = self.kernel('entry:' + name, '(cached program %s)' % name[:12], '')
                    k.phases.add(phase)
                    k.models.add(model)
                    cur = None   # a program binary: its link-status line is no compile's
                continue
            if line.startswith('@@TAP cache-put '):
                # glesc writes the entry right after linking its source (whether it
                # looks the plan's entries up one by one or all first)
                name = line.split()[2]
                if cur and name not in self.entries:
                    self.entries[name] = cur.key
                continue
            if line.startswith('@@TAP source '):
                src = line.split()[2]
                try:
                    text = open(os.path.join(tap, src + '.glsl'), errors='replace').read()
                except OSError:
                    text = line
                key = hashlib.sha1(text.encode()).hexdigest()
                cur = self.kernel(key, glsl_name(text), glsl_kind(text))
                cur.phases.add(phase)
                cur.models.add(model)
                continue
            if line.startswith('@@TAP link-begin'):
                if cur:
                    cur.compiled = True
                continue
            if line.startswith('@@TAP link-end'):
                m = re.search(r' s=([\d.]+)', line)
                if cur and m and cur.link_s is None:
                    cur.link_s = float(m.group(1))
                continue
            if line.startswith('@@TAP link-status') or line.startswith('@@TAP compile-status'):
                st = line.split('status=')[1].split()[0]
                if cur and (cur.status is None or st == '0'):
                    cur.status = st if cur.status != '0' else '0'
                continue
            if line.startswith('gguf-run: prompt:'):
                phase = 'decode'
                continue
            m = STAT.search(line)
            if m:
                if cur and cur.stats is None:
                    cur.stats = parse_items(m.group(2).strip())
                continue
            if NOISE.search(line):
                continue
            if LIMIT.search(line) and re.search(r'needs more than|too many|exceed', line, re.I):
                self.breaches.append((model, run, line.strip()[:300]))
            if ERROR.search(line):
                if cur and cur.status == '0':
                    cur.messages.append(line.strip()[:300])
                else:
                    self.errors.append((model, run, line.strip()[:300]))
        if any(l.startswith('@@TAP source') for l in lines) and \
                not any(l.startswith('@@TAP cache-get') for l in lines):
            self.errors.append((model, run, 'warning: no "@@TAP cache-get" lines: an old '
                                'glsl-tap.so? (re-run tools/devices/setup.sh); cache hits '
                                'are not attributed'))
        rc, secs = read_rc(rundir)
        if cur and cur.compiled and cur.status is None and cur.link_s is None and rc != 0:
            if rc is None:
                cur.unfinished = 'UNFINISHED: in glLinkProgram when the run was stopped'
            else:
                cur.unfinished = '%s while linking (gguf-run %s after %.0f s)' % (
                    'TIMED OUT' if rc in (124, 137, -9) else 'STOPPED',
                    'killed' if rc in (124, 137, -9) else 'exit %s' % rc, secs)
        tail = [l for l in lines if l.strip() and not NOISE.search(l)][-8:]
        self.runs.append((model, run, rc, secs, tail))


def read_rc(rundir):
    try:
        rc, secs = open(os.path.join(rundir, 'rc')).read().split()[:2]
        return int(rc), float(secs)
    except (OSError, ValueError):
        return None, 0.0


def regs(drv, s):
    if not s:
        return ''
    if drv == 'panfrost':
        return s.get('threads', '')
    if drv == 'freedreno':
        return '%s / %s' % (s.get('full', '?'), s.get('waves', '?'))
    return '%s / %s' % (s.get('threads', '?'), s.get('max-temps', '?'))


def spills(drv, s):
    if not s:
        return ''
    if drv == 'freedreno':
        return '%s:%s' % (s.get('stp', '?'), s.get('ldp', '?'))
    return s.get('spills:fills', '')


def spilled(sp):
    return any(x not in ('0', '', '?') for x in sp.split(':'))


def models_cell(models, all_models):
    if len(all_models) > 3 and set(models) >= set(all_models):
        return 'all %d' % len(all_models)
    return ', '.join(sorted(models))


PHASE_ORDER = ['prefill', 'small', 'small-gemm', 'decode', 'precompile']


def report(d, all_models, out, no_spills=()):
    drv = DRIVERS[d.name][0]
    reg_col = {'panfrost': 'threads', 'freedreno': 'full regs / waves',
               'v3d': 'threads / max-temps'}[drv]
    sp_col = 'stp:ldp' if drv == 'freedreno' else 'spills:fills'
    w = out.append
    w('## %s (`%s`)\n' % (DRIVERS[d.name][2], d.name))
    w('| # | kernel | kind | phase | models | result | inst | %s | %s | link s |' % (reg_col, sp_col))
    w('|---|---|---|---|---|---|---|---|---|---|')
    ks = sorted(d.kernels.values(),
                key=lambda k: (min(PHASE_ORDER.index(p) for p in k.phases), k.order))
    failed = spilling = timed_out = 0
    total_s = 0.0
    worst, forbidden = [], []
    for i, k in enumerate(ks, 1):
        s = k.stats
        if k.status == '0':
            failed += 1
            result = 'FAILED: ' + ('; '.join(dict.fromkeys(k.messages))[:300] or 'link status 0')
        elif k.unfinished and k.status != '1':
            timed_out += 1
            result = k.unfinished
        elif not k.compiled:
            result = 'cached (not compiled in this run)'
        elif k.status == '1':
            result = 'ok'
        else:
            result = 'no link status'
        sp = spills(drv, s)
        if spilled(sp):
            spilling += 1
            a, b = (sp.split(':') + ['0'])[:2]
            worst.append((int(a or 0) + int(b or 0), sp, k, i))
            if set(k.phases) & set(no_spills):
                forbidden.append('#%d %s [%s, %s] %s' % (i, k.name, k.kind,
                                                         ', '.join(sorted(k.phases)), sp))
        if k.link_s is not None:
            total_s += k.link_s
        phases = ', '.join(p for p in PHASE_ORDER if p in k.phases)
        w('| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |' % (
            i, k.name, k.kind, phases, models_cell(k.models, all_models),
            result.replace('|', '\\|'), (s or {}).get('inst', ''), regs(drv, s), sp,
            '' if k.link_s is None else '%.2f' % k.link_s))
    not_run = [r for r in d.runs if r[2] is None and r[4] == ['(no log: not run)']]
    bad_runs = [r for r in d.runs if r[2] != 0 and r not in not_run]
    wall = sum(r[3] for r in d.runs)
    w('')
    summary = ('**%s**: %d kernels, %d failed, %d cut off by a timeout, %d with spills, '
               '%.1f s compiling (link), %d gguf-runs (%d failed%s), %.0f s wall' % (
                   d.name, len(ks), failed, timed_out, spilling, total_s,
                   len(d.runs) - len(not_run), len(bad_runs),
                   ', %d not run' % len(not_run) if not_run else '', wall))
    w(summary)
    if worst:
        worst.sort(key=lambda t: -t[0])
        w('')
        w('Worst spills: ' + '; '.join('#%d %s [%s] %s' % (i, k.name, k.kind, sp)
                                      for _, sp, k, i in worst[:3]))
    if not_run:
        w('')
        w('Not run (%d): %s' % (len(not_run), ', '.join('%s %s' % r[:2] for r in not_run)))
    for model, run, rc, secs, tail in bad_runs:
        why = 'timed out' if rc in (124, 137, -9) else (
            'stopped: no exit status' if rc is None else 'exit %d' % rc)
        w('')
        w('gguf-run FAILED on %s (%s run, %s after %.0f s); last lines of its stderr:' % (
            model, run, why, secs))
        w('```')
        w('\n'.join(l[:300] for l in tail))
        w('```')
    for model, run, line in dict.fromkeys(d.breaches):
        w('')
        w('LIMIT BREACH (%s, %s run): %s' % (model, run, line))
    errs = [e for e in dict.fromkeys(d.errors) if not LIMIT.search(e[2])]
    if errs:
        w('')
        w('Other error lines:')
        for model, run, line in errs[:20]:
            w('- %s (%s): `%s`' % (model, run, line))
    if forbidden:
        w('')
        w('SPILLS where none may be (--no-spills %s): %s' % (','.join(no_spills),
                                                             '; '.join(forbidden)))
    w('')
    ok = failed == 0 and not bad_runs and not d.breaches and not forbidden
    if forbidden:
        summary += ', %d spilling in %s' % (len(forbidden), ','.join(no_spills))
    return ok, summary


def synth_tool(args, env):
    if args.gguf_synth:
        return [args.gguf_synth]
    for b in ('build', 'build-ci', 'build-release'):
        p = os.path.join(SRC, b, 'tools', 'gguf-synth')
        if os.access(p, os.X_OK):
            return [p]
    # the arm64 build's gguf-synth through qemu (needs no GPU)
    sysroot = env.get('SHIM_SYSROOT') or os.path.join(args.shim_root, 'sysroot')
    return ['env', 'QEMU_LD_PREFIX=' + sysroot, 'qemu-aarch64-static',
            os.path.join(args.build, 'tools', 'gguf-synth')]


def synthesize(args, env):
    tool = synth_tool(args, env)
    d = os.path.join(args.out, 'models')
    os.makedirs(d, exist_ok=True)
    paths = []
    for arch in args.synth_archs.split(','):
        for t in args.synth_types.split(','):
            p = os.path.join(d, '%s-%s.gguf' % (arch, t.lower()))
            if not os.path.exists(p):
                cmd = tool + ['-o', p + '.tmp', '--arch', arch, '-t', t, '--threads', '2'] + SYNTH_SHAPE
                if arch in ('gemma2', 'gemma3'):
                    cmd += ['--n-swa', '16']
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
                if r.returncode != 0:
                    sys.exit('matrix.py: gguf-synth failed (%s):\n%s' % (' '.join(cmd),
                                                                        r.stdout[-2000:]))
                os.replace(p + '.tmp', p)
            paths.append(p)
    return paths


def run_one(args, name, model_path, run, log):
    drv, mdl, _ = DRIVERS[name]
    stem = os.path.splitext(os.path.basename(model_path))[0]
    rundir = os.path.join(args.out, name, 'runs', '%s.%s' % (stem, run))
    if args.resume and os.path.exists(os.path.join(rundir, 'rc')):
        return stem, rundir
    if os.path.exists(rundir):
        shutil.rmtree(rundir)
    os.makedirs(os.path.join(rundir, 'tap'))
    _, ids, n, gemv_max_m = RUNS[run]
    env = dict(os.environ, SHIM_STATS='1', SHIM_TAP='1', SHIM_TAP_DIR=os.path.join(rundir, 'tap'),
               GLESC_NO_PARALLEL_COMPILE='1', GLESC_COMPILE_THREADS='1',
               GLESC_GEMV_MAX_M=gemv_max_m,
               GLESC_CACHE_DIR=os.path.join(args.out, name, 'cache'), SHIM_ROOT=args.shim_root)
    what = ['--precompile'] if ids is None else ['--prompt-ids', ','.join(map(str, ids)),
                                                 '-n', str(n), '--temp', '0']
    cmd = ['bash', os.path.join(HERE, 'run-shim.sh'), drv, mdl, '--',
           os.path.join(args.build, 'tools', 'gguf-run'), '-m', model_path] + what + ['-v']
    t0 = time.time()
    with open(os.path.join(rundir, 'start'), 'w') as f:
        f.write('%.3f\n' % t0)
    with open(os.path.join(rundir, 'stdout'), 'w') as o, \
            open(os.path.join(rundir, 'stderr'), 'w') as e:
        p = subprocess.Popen(cmd, stdout=o, stderr=e, env=env, start_new_session=True)
        try:
            rc = p.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = 124
    secs = time.time() - t0
    with open(os.path.join(rundir, 'rc'), 'w') as f:
        f.write('%d %.1f\n' % (rc, secs))
    log('%s %s %s: %s in %.0f s' % (name, stem, run, 'ok' if rc == 0 else
                                    ('TIMED OUT' if rc == 124 else 'exit %d' % rc), secs))
    return stem, rundir


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog='drivers: ' + ', '.join(DRIVERS))
    ap.add_argument('--drivers', default='g52,g610,a618,a740',
                    help='comma-separated (default g52,g610,a618,a740); all: every one')
    ap.add_argument('--models', nargs='+', metavar='FILE', help='GGUF files')
    ap.add_argument('--synth', action='store_true',
                    help='write tiny models with gguf-synth (--synth-archs x --synth-types)')
    ap.add_argument('--synth-archs', default=','.join(SYNTH_ARCHS))
    ap.add_argument('--synth-types', default=','.join(SYNTH_TYPES))
    ap.add_argument('--gguf-synth', help='gguf-synth to use (default: an amd64 build in the '
                    'checkout, else the arm64 one under qemu)')
    ap.add_argument('--phases', default='prefill,small,decode',
                    help='prefill (12-id prompt: GEMM), small (5-id prompt: GEMV), decode, '
                    'small-gemm (5-id prompt, GEMM), precompile (all of them, never run) '
                    '(default prefill,small,decode)')
    ap.add_argument('--phases-for', action='append', default=[], metavar='DRIVER=PHASES',
                    help='other phases for one driver, e.g. g610=small,decode (repeatable)')
    ap.add_argument('--out', default=os.path.join(SRC, 'build-devices'),
                    help='logs, taps, caches, RESULTS.md (default build-devices in the checkout)')
    ap.add_argument('--timeout', '--kernel-timeout', type=float, default=1800,
                    help='seconds per gguf-run (default 1800)')
    ap.add_argument('--jobs', type=int, default=1, help='drivers run at once (default 1)')
    ap.add_argument('--no-spills', default='', metavar='PHASES',
                    help='fail where a kernel of these phases spills (e.g. decode)')
    ap.add_argument('--resume', action='store_true',
                    help='keep finished runs in --out (and the cache) instead of running again')
    ap.add_argument('--report-only', action='store_true', help='run nothing; tables from --out')
    ap.add_argument('--shim-root', default=os.environ.get('SHIM_ROOT', '/opt/shim'))
    ap.add_argument('--build', help='glesc arm64 build (default $SHIM_GLESC_BUILD or '
                    'SHIM_ROOT/build-arm64)')
    args = ap.parse_args()
    args.build = args.build or os.environ.get('SHIM_GLESC_BUILD') or \
        os.path.join(args.shim_root, 'build-arm64')
    names = list(DRIVERS) if args.drivers == 'all' else args.drivers.split(',')
    for n in names:
        if n not in DRIVERS:
            ap.error('unknown driver %s (known: %s)' % (n, ', '.join(DRIVERS)))
    def runs_for(spec):
        phases = spec.split(',')
        for p in phases:
            if p not in RUNS:
                ap.error('unknown phase %s (prefill, small, small-gemm, decode, precompile)'
                         % p)
        # the 12-id run's -n 3 has decode steps; the 5-id run's -n 1 has none
        want = ['small-gemm'] if 'small-gemm' in phases else []   # first: fails fastest
        if 'decode' in phases and 'prefill' not in phases:
            want.append('decode')
        return want + [r for r in ('small', 'prefill', 'precompile') if r in phases]
    druns = {n: runs_for(args.phases) for n in names}
    for spec in args.phases_for:
        n, _, ph = spec.partition('=')
        if n not in DRIVERS:
            ap.error('--phases-for %s: unknown driver %s' % (spec, n))
        druns[n] = runs_for(ph)
    if bool(args.models) == bool(args.synth):
        ap.error('give --models FILE... or --synth')
    args.out = os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)
    if not args.report_only:
        for f in ('gguf-run', 'gguf-synth'):
            p = os.path.join(args.build, 'tools', f)
            if f == 'gguf-run' and not os.access(p, os.X_OK):
                sys.exit('matrix.py: no %s (run tools/devices/setup.sh)' % p)
    models = [os.path.abspath(m) for m in args.models] if args.models else \
        synthesize(args, os.environ)
    for m in models:
        if not os.path.exists(m):
            sys.exit('matrix.py: %s: no such file' % m)
    stems = [os.path.splitext(os.path.basename(m))[0] for m in models]

    lock = threading.Lock()

    def log(msg):
        with lock:
            print('[%s] %s' % (time.strftime('%H:%M:%S'), msg), file=sys.stderr, flush=True)

    def do_driver(name):
        for m in models:
            for r in druns[name]:
                if args.report_only:
                    continue
                run_one(args, name, m, r, log)

    t0 = time.time()
    if not args.report_only:
        log('matrix: %s x %d models, out %s' % (
            ', '.join('%s (%s)' % (n, ','.join(druns[n])) for n in names), len(models), args.out))
        threads, queue = [], list(names)

        def worker():
            while True:
                with lock:
                    if not queue:
                        return
                    n = queue.pop(0)
                do_driver(n)
        for _ in range(max(1, min(args.jobs, len(names)))):
            t = threading.Thread(target=worker)
            t.start()
            threads.append(t)
        for t in threads:
            t.join()

    out = ['# glesc device matrix', '',
           'Mesa 25.0.7 drm-shim under qemu-aarch64-static; glesc build %s; models: %s; runs: %s '
           '(prefill: %d prompt ids, -n 3; small: %d ids, -n 1; decode: 1 id, -n 2; '
           'precompile: --precompile; GLESC_GEMV_MAX_M=8). '
           'Phase: prefill/small = linked during the prompt, decode = after it. '
           'Regs: Panfrost threads, Freedreno full regs / waves, V3D threads / max-temps. '
           'Spills: Freedreno stp:ldp (private stores:loads), others spills:fills. '
           'link s: seconds in glLinkProgram under qemu.' % (
               args.build, ', '.join(stems),
               '; '.join('%s: %s' % (n, ','.join(druns[n])) for n in names),
               len(PREFILL_IDS), len(SMALL_IDS)), '']
    ok_all, summaries = True, []
    for name in names:
        d = Driver(name)
        done = []
        for m, stem in zip(models, stems):
            for r in druns[name]:
                rd = os.path.join(args.out, name, 'runs', '%s.%s' % (stem, r))
                if os.path.exists(os.path.join(rd, 'stderr')):
                    try:
                        st = float(open(os.path.join(rd, 'start')).read())
                    except (OSError, ValueError):
                        st = 0
                    done.append((st, stem, r, rd))
                else:
                    d.runs.append((stem, r, None, 0.0, ['(no log: not run)']))
        for _, stem, r, rd in sorted(done):   # in the order they ran (the cache's order)
            d.feed(stem, r, rd)
        ok, summary = report(d, stems, out,
                             [p for p in args.no_spills.split(',') if p])
        ok_all &= ok
        summaries.append(summary)
    out += ['## Summary', ''] + ['- ' + s for s in summaries] + [
        '', 'matrix: %s (%.0f s)' % ('ok' if ok_all else 'FAILED', time.time() - t0), '']
    text = '\n'.join(out)
    with open(os.path.join(args.out, 'RESULTS.md'), 'w') as f:
        f.write(text)
    print(text)
    return 0 if ok_all else 1


if __name__ == '__main__':
    sys.exit(main())
