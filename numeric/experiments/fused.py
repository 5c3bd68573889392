"""The sticky-chain step on the CPU as one fused pass per run: attention forward, readout and backward, query rows
four at a time, so that a row's scores, weights and score gradients never leave the core's cache.

The generated kernels (numeric/generated/attention.py) compute the step as whole-tile tensor operations: each query
block's score tile is written, softmaxed, read by alpha V, and read again by every product of the backward, about a
dozen passes over memory per tile element. Here the same closed forms are applied row by row, in this order:

    s_ij = scale q_i . k_j  (j <= i)           alpha_i = softmax(s_i)          o_i = sum_j alpha_ij v_j
    z_i = o_i W_O, g_i = (softmax(z_i) - y_i) / T, u_i = g_i W_O^T, dW_O += o_i^T g_i      (C5: the readout)
    b_ij = u_i . v_j,  r_i = u_i . o_i = sum_j alpha_ij b_ij                                (the baseline)
    dS_ij = alpha_ij (b_ij - r_i)                                                           (C1)
    dV_j += alpha_ij u_i  (C3),  dQ_i = scale sum_j dS_ij k_j  (C2),  dK_j += scale dS_ij q_i  (C4)
    N_j += alpha_ij  (C10's responsibilities, for the M-step arm)

The projections and the parameter gradients (C8) stay the generated torch forms. `emit` writes the kernel's
source with the widths written in (every loop over a width unrolled, so the loops over key positions are the only
loops and the compiler vectorises them); numba compiles it once per widths and dtype and caches the machine code
on disk. Runs (arms x seeds) are spread over torch's thread count; a run is split into query ranges when there are
fewer runs than threads. `tests/test_fused.py` holds it to the generated kernels at float64 and float32 and shows
that the same comparison rejects mutants of it.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import math
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from numeric.generated import attention as gen

ROWS = 4  # query rows per pass over the keys
CHUNK = 5  # value columns updated per pass (more write streams than this and the compiler stops vectorising)
KERNELS = ("auto", "fused", "generated")
# Widest head the kernel is emitted for: every loop over a width is unrolled, so compiling grows with it (d_k = d_v
# = 32 takes about 50 s on a 2-core CPU, against about 15 s at the paper's 10 and 15); wider heads keep the generated
# kernels, whose tile products run well at those widths.
MAX_WIDTH = 32
MUTANTS = ("drop-baseline", "dv-without-alpha", "lose-scale")  # deliberately wrong kernels the tests must reject


def available():
    """Whether numba can be imported (the fused kernel's compiler)."""
    return importlib.util.find_spec("numba") is not None


def applies(kernel, device, dtype, d_k=1, d_v=1):
    """Whether `kernel` ("auto", "fused" or "generated") means the fused step for this device, dtype and head widths;
    "fused" where it cannot run is an error, "auto" falls back to the generated kernels."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    why = None
    if not available():
        why = "numba is not installed"
    elif torch.device(device).type != "cpu" or dtype not in (torch.float32, torch.float64):
        why = f"it runs on the CPU in float32 or float64 only (device {device}, {dtype})"
    elif max(d_k, d_v) > MAX_WIDTH:
        why = f"it unrolls the head widths, up to {MAX_WIDTH} (d_k = {d_k}, d_v = {d_v})"
    if kernel == "fused" and why:
        raise ValueError(f"kernel='fused' cannot run here: {why}; use kernel='auto' or 'generated'")
    return kernel != "generated" and why is None


_EXP32 = '''
@J
def exp_sum(s, kb, n, mx):
    """s[0:n] <- exp(s[0:n] - mx), returned summed: 2^k p(r) with r = x - k ln 2 (Cody-Waite), p Cephes' expf
    polynomial (about 2 ulp); x below -87 is clamped there (e^-87 < 2e-38, under a float32 ulp of the row sum)."""
    for j in range(n):
        x = max(s[j] - mx, F(-87.0))
        k = np.floor(x * F(1.4426950408889634) + F(0.5))
        r = x - k * F(0.693359375) + k * F(2.12194440e-4)
        p = F(1.9875691500e-4)
        p = p * r + F(1.3981999507e-3)
        p = p * r + F(8.3334519073e-3)
        p = p * r + F(4.1665795894e-2)
        p = p * r + F(1.6666665459e-1)
        p = p * r + F(5.0000001201e-1)
        s[j] = p * r * r + r + F(1.0)
        kb[j] = np.int32(k) << 23
    bits = s.view(np.int32)
    for j in range(n):
        bits[j] += kb[j]
    total = F(0.0)
    for j in range(n):
        total += s[j]
    return total
'''

_EXP64 = '''
@J
def exp_sum(s, kb, n, mx):
    """s[0:n] <- exp(s[0:n] - mx), returned summed."""
    total = F(0.0)
    for j in range(n):
        e = math.exp(s[j] - mx)
        s[j] = e
        total += e
    return total
'''

_HELPERS = '''
@J
def row_max(s, n):
    mx = s[0]
    for j in range(n):
        mx = max(mx, s[j])
    return mx


@J
def normalise(s, n, stop, c):
    """s[0:n] *= c; s[n:stop] = 0 (the causal mask of the last rows of a pass)."""
    for j in range(n):
        s[j] *= c
    for j in range(n, stop):
        s[j] = F(0.0)
'''


def emit(d_k, d_v, symbols, dtype="float32", mutant=None):
    """The kernel's source for these widths and dtype ("float32" or "float64"); `mutant` (MUTANTS) emits a
    deliberately wrong one."""
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")
    if mutant is not None and mutant not in MUTANTS:
        raise ValueError(f"mutant must be one of {MUTANTS}, got {mutant!r}")
    rows, a_ = range(ROWS), ROWS
    out = [f"# Emitted by numeric/experiments/fused.py (d_k={d_k}, d_v={d_v}, symbols={symbols}, {dtype}"
           f"{', mutant ' + mutant if mutant else ''}).",
           "import math", "import numba", "import numpy as np", f"F = np.{dtype}",
           "J = numba.njit(fastmath={'reassoc', 'contract', 'nsz', 'arcp'}, nogil=True, cache=CACHE)",
           _EXP32 if dtype == "float32" else _EXP64, _HELPERS]
    w = out.append

    def loop(name, head, weights, row_views, col_views, body, setup=()):
        """A kernel of one loop over key positions j < n. `weights` (letter, width): the scalar arguments
        letter{a}_{c} for every query row a. `row_views` (local, array, loaded): local{a} = array[a], and where
        `loaded`, local{a}[j] read into {local}{local}{a}. `col_views` (local, array, width, base): local{c} =
        array[base + c]. `setup` lines run before the loop, `body` lines in it."""
        extra = "".join(", " + ", ".join(f"{letter}{a}_{c}" for a in rows for c in range(width)) for letter, width in weights)
        w(f"\n@J\ndef {name}({head}{extra}):")
        w("    " + "; ".join(f"{local}{a} = {array}[{a}]" for local, array, _ in row_views for a in rows))
        w("    " + "; ".join(f"{local}{c} = {array}[{base}{c}]" for local, array, width, base in col_views
                             for c in range(width)))
        for line in setup:
            w("    " + line)
        w("    for j in range(n):")
        loads = [f"{local}{local}{a} = {local}{a}[j]" for local, _, loaded in row_views if loaded for a in rows]
        for line in ["; ".join(loads)] * bool(loads) + list(body):
            w("        " + line)

    def terms(pairs):
        return " + ".join(f"{x} * {y}" for x, y in pairs)

    # the scores of ROWS queries against keys 0:n (the query weights already scaled)
    loop("scores", "s, KT, n", [("q", d_k)], [("s", "s", False)], [("K", "KT", d_k, "")],
         [f"k{d} = K{d}[j]" for d in range(d_k)]
         + [f"s{a}[j] = " + terms((f"q{a}_{d}", f"k{d}") for d in range(d_k)) for a in rows])
    # sum_j s_aj M_jc for ROWS rows and up to 3 columns c0.. of M (o = alpha V, dQ = dS K)
    for width in (1, 2, 3):
        loop(f"contract{width}", "s, M, n, c0", [], [("s", "s", True)], [("M", "M", width, "c0 + ")],
             [line for c in range(width) for line in [f"m{c} = M{c}[j]"] + [f"x{a}_{c} += ss{a} * m{c}" for a in rows]],
             setup=["; ".join(f"x{a}_{c} = F(0.0)" for c in range(width) for a in rows)])
        w("    return (" + ", ".join(f"x{a}_{c}" for c in range(width) for a in rows) + ",)")
    # dV_j += sum_a alpha_aj u_a for `width` (<= CHUNK) value columns from c0
    for width in sorted({min(CHUNK, d_v - c0) for c0 in range(0, d_v, CHUNK)}):
        weight = "" if mutant == "dv-without-alpha" else " * ss{a}"
        loop(f"values_grad{width}", "s, dVT, n, c0", [("u", width)], [("s", "s", True)],
             [("D", "dVT", width, "c0 + ")],
             [f"D{c}[j] += " + " + ".join(f"u{a}_{c}" + weight.format(a=a) for a in rows) for c in range(width)])
    # dS_aj = alpha_aj (u_a . v_j - r_a) into t, and the responsibilities
    loop("score_grads", "s, t, VT, resp, n, " + ", ".join(f"r{a}" for a in rows), [("u", d_v)], [("s", "s", True), ("t", "t", False)],
         [("V", "VT", d_v, "")],
         [f"v{d} = V{d}[j]" for d in range(d_v)]
         + [f"t{a}[j] = ss{a} * (({terms((f'u{a}_{d}', f'v{d}') for d in range(d_v))})"
            + ("" if mutant == "drop-baseline" else f" - r{a}") + ")" for a in rows]
         + ["resp[j] += " + " + ".join(f"ss{a}" for a in rows)])
    # dK_j += sum_a dS_aj q_a (the query weights already scaled)
    loop("keys_grad", "t, dKT, n", [("q", d_k)], [("t", "t", True)], [("D", "dKT", d_k, "")],
         [f"D{d}[j] += " + terms((f"q{a}_{d}", f"tt{a}") for a in rows) for d in range(d_k)])

    def contractions(target, source, width, dest):
        lines, c0 = [], 0
        while c0 < width:
            take = min(3, width - c0)
            names = ", ".join(f"x{a}_{c0 + c}" for c in range(take) for a in rows)
            lines.append(f"        {names}, = contract{take}({target}, {source}, n, {c0})")
            c0 += take
        lines += [dest(a, c) for a in rows for c in range(width)]
        return "\n".join(lines)

    qs = ", ".join(f"q[{a}, {d}]" for a in rows for d in range(d_k))
    us = ", ".join(f"u[{a}, {d}]" for a in rows for d in range(d_v))
    rs = ", ".join(f"r[{a}]" for a in rows)
    value_calls = "\n".join(f"        values_grad{min(CHUNK, d_v - c0)}(s, dVT, n, {c0}, " + ", ".join(
        f"u[{a}, {c0 + c}]" for a in rows for c in range(min(CHUNK, d_v - c0))) + ")" for c0 in range(0, d_v, CHUNK))
    q_scale = "F(1.0)" if mutant == "lose-scale" else "scale"
    w(f'''

@J
def run(Q, KT, VT, WO, y, scale, lo, hi, T, dQ, dKT, dVT, dWO, resp, s, t, kb):
    """Query rows lo:hi (lo a multiple of {a_}) of one run: dQ rows lo:hi written, dKT, dVT, dWO and resp
    accumulated over keys 0:hi; returns the summed cross-entropy of those rows. s, t (>= {a_}, hi), kb (hi): scratch."""
    total = 0.0
    inv_t = F(1.0) / F(T)
    q = np.zeros(({a_}, {d_k}), F)
    o = np.zeros(({a_}, {d_v}), F)
    u = np.zeros(({a_}, {d_v}), F)
    r = np.zeros({a_}, F)
    z = np.empty({symbols}, F)
    for i0 in range(lo, hi, {a_}):
        live = min({a_}, hi - i0)
        n = i0 + live
        for a in range({a_}):
            for d in range({d_k}):
                q[a, d] = Q[i0 + a, d] * scale if a < live else F(0.0)
        scores(s, KT, n, {qs})
        for a in range({a_}):
            if a >= live:  # past the last query: no weight anywhere, so no gradient and no responsibility
                normalise(s[a], 0, n, F(0.0))
                continue
            na = i0 + a + 1
            normalise(s[a], na, n, F(1.0) / exp_sum(s[a], kb, na, row_max(s[a], na)))
{contractions("s", "VT", d_v, lambda a, c: f"        o[{a}, {c}] = x{a}_{c}")}
        for a in range({a_}):
            if a >= live:
                for d in range({d_v}):
                    u[a, d] = F(0.0)
                r[a] = F(0.0)
                continue
            top = -np.inf
            for c in range({symbols}):
                acc = F(0.0)
                for d in range({d_v}):
                    acc += o[a, d] * WO[d, c]
                z[c] = acc
                top = max(top, acc)
            target = y[i0 + a]
            logit = z[target]
            norm = F(0.0)
            for c in range({symbols}):
                z[c] = math.exp(z[c] - top)
                norm += z[c]
            total += top + math.log(norm) - logit  # -log softmax(z)_target, without underflow
            for c in range({symbols}):
                z[c] = (z[c] / norm - (F(1.0) if c == target else F(0.0))) * inv_t
            ra = F(0.0)
            for d in range({d_v}):
                acc = F(0.0)
                for c in range({symbols}):
                    acc += z[c] * WO[d, c]
                    dWO[d, c] += o[a, d] * z[c]
                u[a, d] = acc
                ra += acc * o[a, d]
            r[a] = ra
{value_calls}
        score_grads(s, t, VT, resp, n, {rs}, {us})
{contractions("t", "KT", d_k, lambda a, c: f"        if {a} < live:" + chr(10) + f"            dQ[i0 + {a}, {c}] = x{a}_{c} * {q_scale}")}
        keys_grad(t, dKT, n, {qs})
    return total
''')
    return "\n".join(out) + "\n"


def cache_dir():
    """Where emitted kernels and numba's machine code are kept: $AGV_KERNEL_CACHE, else ~/.cache/agv/kernels."""
    root = os.environ.get("AGV_KERNEL_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agv" / "kernels"
    return Path(root)


_LOCK = threading.Lock()


@functools.lru_cache(maxsize=None)
def kernel(d_k, d_v, symbols, dtype="float32", mutant=None):
    """The compiled `run` of `emit(...)`: the source written under cache_dir() (named by its hash, so a changed
    emitter never meets an old file) and imported, numba caching its machine code beside it; where that directory
    cannot be written, the source is compiled in memory, each process anew."""
    source = emit(d_k, d_v, symbols, dtype, mutant)
    name = f"agv_fused_{hashlib.sha256(source.encode()).hexdigest()[:16]}"
    with _LOCK:
        try:
            folder = cache_dir()
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{name}.py"
            if not path.exists() or path.read_text() != source.replace("CACHE", "True"):
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(source.replace("CACHE", "True"))
                os.replace(tmp, path)
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # numba's cached code finds its globals by the module's name
            spec.loader.exec_module(module)
        except OSError:
            module = type(sys)(name)
            sys.modules[name] = module
            exec(compile(source.replace("CACHE", "False"), f"<{name}>", "exec"), module.__dict__)
    return module.run


@functools.lru_cache(maxsize=None)
def _pool(threads):
    return ThreadPoolExecutor(threads, thread_name_prefix="agv-fused")


def _parts(T, runs, threads):
    """Query ranges per run: the whole sequence, or, with fewer runs than threads, ranges of about equal work
    (row i costs about i: the cuts at T sqrt(p / parts)), each starting on a multiple of ROWS."""
    parts = max(1, min(-(-threads // runs), T // (4 * ROWS) or 1))
    cuts = sorted({0, T} | {min(T, round(T * math.sqrt(p / parts) / ROWS) * ROWS) for p in range(1, parts)})
    return list(zip(cuts[:-1], cuts[1:]))


class Step:
    """The fused gradients of sticky.gradients for one configuration's shapes: `__call__(params, data, scale, mstep)`
    returns the loss (A, S) and [dW_Q, dW_K, dW_V, dW_O] at the parameters' own (unpadded) widths."""

    def __init__(self, d_k, d_v, symbols, dtype, mutant=None, threads=None):
        self.dtype = dtype
        self.np_dtype = {torch.float32: "float32", torch.float64: "float64"}[dtype]
        self.run = kernel(d_k, d_v, symbols, self.np_dtype, mutant)
        self.threads = threads or torch.get_num_threads()
        self.local = threading.local()

    def _scratch(self, T):
        have = getattr(self.local, "scratch", None)
        if have is None or have[0].shape[1] < T:
            have = (torch.empty(ROWS, T, dtype=self.dtype).numpy(), torch.empty(ROWS, T, dtype=self.dtype).numpy(),
                    torch.empty(T, dtype=torch.int32).numpy())
            self.local.scratch = have
        return have

    def __call__(self, params, data, scale, mstep, mark=None):
        """`mark(component)`, when given, is called after the projections, the fused kernel and the parameter
        gradients (numeric.experiments.roofline's profile)."""
        mark = mark or (lambda component: None)
        x = data.x  # (1, S, T, d_in)
        q, k, v = (x @ w for w in params[:3])  # (A, S, T, d): the generated projections' inputs, as in gradients
        A, S, T = q.shape[0], q.shape[1], q.shape[2]
        R = A * S
        if not bool(torch.isfinite(q.sum() + k.sum() + v.sum() + params[3].sum())):  # inf - inf is nan too
            return None  # a diverged run: the generated kernels propagate its non-finite values as they are
        Q = q.reshape(R, T, -1).contiguous()
        KT, VT = (t.reshape(R, T, -1).mT.contiguous() for t in (k, v))
        WO = params[3].reshape(R, *params[3].shape[-2:]).contiguous()
        y = data.y.expand(A, S, T).reshape(R, T).contiguous()
        ranges = _parts(T, R, self.threads)
        P = len(ranges)
        dQ = torch.empty_like(Q)
        dKT, dVT = torch.zeros(P, *KT.shape, dtype=self.dtype), torch.zeros(P, *VT.shape, dtype=self.dtype)
        dWO, resp = torch.zeros(P, *WO.shape, dtype=self.dtype), torch.zeros(P, R, T, dtype=self.dtype)
        arrays = [t.numpy() for t in (Q, KT, VT, WO, y, dQ, dKT, dVT, dWO, resp)]
        Qn, KTn, VTn, WOn, yn, dQn, dKTn, dVTn, dWOn, respn = arrays
        sc = float(scale)

        def one(job):
            r, p = divmod(job, P)
            lo, hi = ranges[p]
            s, t, kb = self._scratch(T)
            return self.run(Qn[r], KTn[r], VTn[r], WOn[r], yn[r], sc, lo, hi, T, dQn[r], dKTn[p, r], dVTn[p, r],
                            dWOn[p, r], respn[p, r], s, t, kb)

        mark("projections")
        totals = list(_pool(self.threads).map(one, range(R * P)))
        loss = torch.tensor(totals, dtype=torch.float64).view(R, P).sum(1).div(T).to(self.dtype).view(A, S)
        dK, dV = (g.sum(0).mT.reshape(A, S, T, -1) for g in (dKT, dVT))
        if mstep is not None:  # C10: the M-step arm's value gradient divided by the responsibilities N_j
            norm = resp.sum(0).view(A, S, T)
            norm = torch.where(mstep.view(-1, 1, 1), norm.clamp_min(1e-12), torch.ones_like(norm))
            dV = dV / norm[..., None]
        mark("fused attention")
        dW_Q, dW_K, dW_V = gen.params_backward(x, dQ.view(A, S, T, -1), dK, dV)
        mark("parameter gradients")
        return loss, [dW_Q, dW_K, dW_V, dWO.sum(0).view(params[3].shape)]


def step_for(cfg, device, mutant=None):
    """The fused Step for a StickyConfig on `device`, or None where its `kernel` setting means the generated
    kernels."""
    if not applies(cfg.kernel, device, cfg.torch_dtype, cfg.d_k, cfg.d_v):
        return None
    return Step(cfg.d_k, cfg.d_v, cfg.symbols, cfg.torch_dtype, mutant)
