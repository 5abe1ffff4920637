"""Coarsening benchmarks (paper Table 1 / Table 3): differentiation and end-to-end gradient time.

For every application and configuration, in one run:

* torch: primal with autograd recording, ``backward`` alone (differentiation), primal+backward
  (end to end), and the primal under ``no_grad``;
* coarsened (torch): ``backward`` through the spliced generated adjoint (differentiation), the
  generated adjoint alone, ``sparsad.coarsen.grad`` (end to end: recording primal only when
  control flow needs it, compiled with Numba from the second call of a signature on, so the
  timed calls use it) and value-and-gradient (``no_grad`` primal + ``grad``, e.g. HMC's U and
  grad U);
* JAX: ``jax.jit(f)`` and ``jax.jit(jax.grad(f))`` (BGDHyperOpt: the ``lax.scan`` form, since
  ``jit`` cannot run its data-dependent ``break``), and ``sparsad.coarsen.grad`` on JAX arrays.

Ratios are against the competitor measured in the same run; every time per call is the best of
``repeat`` batches of calls (``per_call_time``).  Run:
``.venv/bin/python -m bench.coarsen`` (``--quick`` for configuration 1 only, ``--app NAME`` for one
application, e.g. ``--app BGDHyperOpt``; may be repeated).

Then the corpus of functions written the way PyTorch users write them (``bench/corpora/coarsen.py``,
``corpus_main``): for each, coarsened or fell back (with the reason), other exceptions, error vs
autograd on several input draws, speed vs torch autograd and vs ``jax.jit(jax.grad)`` of its JAX
twin, and the first-call time, each function in a worker subprocess under a time limit.  Writes
``bench/results/coarsen_corpus.csv`` and ``coarsen_corpus_*.png``.  Options: ``--corpus-only``,
``--no-corpus``, ``--case NAME`` (repeatable), ``--timeout SECONDS`` (per function), ``--draws N`` and
``--repeat N`` (input draws per function, timing repetitions); ``--first-calls-only``: status, error vs
autograd and first-call time only (no timings, no JAX, the adjoint in generated torch code without
the Numba tiers: a quick look at coverage and compile time).  ``--quick`` uses the small trip counts
of the tests; the default is the natural ones.  The first call is reported as wall time and as the
calling thread's CPU time (which the machine's load does not inflate), and ``first_call_deferred``
says whether it was served by plain autograd because its symbolic work passed the call's wall
deadline (``sparsad.coarsen.budget``; the work then finished in the background).  Per-call times
of the corpus (torch autograd, ``coarsen.grad``, ``jax.jit(jax.grad)`` alike) are the best of
``--repeat`` batches of calls, each batch about 2 ms long (``per_call_time``): on a loaded machine
a batch that was preempted only looks slower, so the best batch is the cost of a call.
"""
from __future__ import annotations

import re
import sys
import warnings

import torch

from bench.common import plot_bars, print_table, write_csv

APP_NAMES = ["BGDHyperOpt", "Brachistochrone", "HMC", "HookeanSpring", "CartPole"]


def _torch_rows(name: str, config: int, repeat: int) -> dict:
    import sparsad.coarsen as coarsen
    from sparsad.coarsen import apps, tiers

    fn, _, make, argnums = apps.APPS[name]
    tensors, static = make(config)
    args = tensors + static
    leaves = [t.clone().requires_grad_(i in argnums) for i, t in enumerate(tensors)]

    def primal_graph():
        return fn(*leaves, *static)

    def primal_plain():
        with torch.no_grad():
            return fn(*tensors, *static)

    def end_to_end():
        out = fn(*leaves, *static)
        out.backward()

    out = primal_graph()
    t_primal_graph = per_call_time(primal_graph, repeat=repeat)
    t_primal = per_call_time(primal_plain, repeat=repeat)
    t_e2e = per_call_time(end_to_end, repeat=repeat)
    t_diff = per_call_time(lambda: out.backward(retain_graph=True), repeat=repeat)

    wrapped = coarsen.symbolic(fn)
    grad_fn = coarsen.grad(wrapped, argnums=argnums)
    with warnings.catch_warnings():
        warnings.simplefilter("error", coarsen.CoarsenFallbackWarning)
        grad_fn(*args)  # builds and checks the adjoint once (compile time, not timed)
        grad_fn(*args)  # (the second call of a signature starts compiling the recording primal)
        spliced = wrapped(*leaves, *static)
        spliced.backward(retain_graph=True)
        for _ in range(SETTLE_ROUNDS):  # background symbolic work and Numba tiers: time the steady state
            tiers.wait()
            grad_fn(*args)
            spliced = wrapped(*leaves, *static)
        tiers.wait()
    t_c_diff = per_call_time(lambda: spliced.backward(retain_graph=True), repeat=repeat)
    t_c_adjoint = per_call_time(_adjoint_call(wrapped, args, tensors, argnums), repeat=repeat)
    t_c_e2e = per_call_time(lambda: grad_fn(*args), repeat=repeat)

    def value_and_grad():  # what HMC needs per step: U and grad U
        with torch.no_grad():
            value = fn(*tensors, *static)
        return value, grad_fn(*args)

    t_c_vg = per_call_time(value_and_grad, repeat=repeat)
    t_c_forward = per_call_time(lambda: wrapped(*leaves, *static), repeat=repeat)
    size = tensors[0].shape[0] if name != "CartPole" else tensors[1].shape[0]
    return {
        "app": name, "config": config, "size": int(size),
        "torch_primal_ms": 1e3 * t_primal, "torch_primal_graph_ms": 1e3 * t_primal_graph,
        "torch_diff_ms": 1e3 * t_diff, "torch_e2e_ms": 1e3 * t_e2e,
        "coarsen_diff_ms": 1e3 * t_c_diff, "coarsen_adjoint_ms": 1e3 * t_c_adjoint, "coarsen_e2e_ms": 1e3 * t_c_e2e,
        "coarsen_forward_ms": 1e3 * t_c_forward, "coarsen_value_and_grad_ms": 1e3 * t_c_vg,
        "value_and_grad_speedup_vs_torch": t_e2e / t_c_vg,
        "diff_speedup_vs_torch": t_diff / t_c_diff, "adjoint_speedup_vs_torch": t_diff / t_c_adjoint,
        "e2e_speedup_vs_torch": t_e2e / t_c_e2e,
        "coarsen_grad_over_torch_primal": t_c_e2e / t_primal,
    }


def _adjoint_call(wrapped, args, tensors, argnums):
    """The generated adjoint alone, called as torch's engine calls it (record taken beforehand)."""
    from sparsad.coarsen.plan import param_values

    plan = wrapped.plan(args)
    with torch.no_grad():
        _, record = plan.run(*args)
    elev = plan.elevation(record)
    compiled = plan.adjoint(elev, tuple(argnums), "torch", tensors[argnums[0]])
    params = param_values(elev, record)
    seed = torch.ones((), dtype=torch.float64)
    return lambda: compiled.fn(*tensors, *params, seed)


def _jax_rows(name: str, config: int, repeat: int, row: dict) -> None:
    try:
        import jax
    except ImportError:  # JAX is optional for the benchmark
        return
    jax.config.update("jax_enable_x64", True)
    import sparsad.coarsen as coarsen
    from sparsad.coarsen import apps

    from sparsad.coarsen import tiers

    _, fj, make, argnums = apps.APPS[name]
    tensors, static = make(config, backend="jax")
    args = tensors + static
    baseline = apps.bgd_hyperopt_scan if name == "BGDHyperOpt" else fj
    nstatic = len(static)
    positions = tuple(range(len(tensors)))

    def closed(f):
        return lambda *ts: f(*ts, *static)

    primal = jax.jit(closed(baseline))
    gradient = jax.jit(jax.grad(closed(baseline), argnums=argnums))
    jax.block_until_ready(primal(*tensors))
    jax.block_until_ready(gradient(*tensors))
    t_primal = per_call_time(lambda: jax.block_until_ready(primal(*tensors)), repeat=repeat)
    t_grad = per_call_time(lambda: jax.block_until_ready(gradient(*tensors)), repeat=repeat)
    grad_fn = coarsen.grad(fj, argnums=argnums)
    jax.block_until_ready(grad_fn(*args))
    tiers.wait()
    t_c = per_call_time(lambda: jax.block_until_ready(grad_fn(*args)), repeat=repeat)
    row.update({
        "jax_jit_primal_ms": 1e3 * t_primal, "jax_jit_grad_ms": 1e3 * t_grad,
        "jax_diff_ms": 1e3 * max(t_grad - t_primal, 0.0), "coarsen_jax_e2e_ms": 1e3 * t_c,
        "diff_speedup_vs_jax_jit_grad": t_grad / (row["coarsen_diff_ms"] / 1e3),
        "adjoint_speedup_vs_jax_jit_grad": t_grad / (row["coarsen_adjoint_ms"] / 1e3),
        "e2e_speedup_vs_jax_jit_grad": t_grad / (row["coarsen_e2e_ms"] / 1e3),
    })
    del nstatic, positions


def main(quick: bool = False, apps: list[str] | None = None, corpus: bool = True, only_corpus: bool = False,
         timeout: float | None = None, cases: list[str] | None = None, draws: int | None = None,
         repeat: int | None = None) -> None:
    """The five applications, then the corpus of users' functions (``corpus_main``)."""
    if not only_corpus:
        apps_main(quick, apps)
    if corpus:
        corpus_main(quick=quick, timeout=timeout, names=cases, draws=draws, repeat=repeat)


def apps_main(quick: bool = False, apps: list[str] | None = None) -> None:
    configs = (1,) if quick else (1, 2, 3)
    repeat = 5 if quick else 30
    rows = []
    for name in apps or APP_NAMES:
        for config in configs:
            row = _torch_rows(name, config, repeat)
            _jax_rows(name, config, repeat, row)
            rows.append(row)
            print(f"  done {name} config {config}", file=sys.stderr)
    columns = ["app", "config", "size", "torch_diff_ms", "coarsen_diff_ms", "coarsen_adjoint_ms",
               "diff_speedup_vs_torch", "adjoint_speedup_vs_torch",
               "torch_e2e_ms", "coarsen_e2e_ms", "e2e_speedup_vs_torch", "coarsen_value_and_grad_ms",
               "value_and_grad_speedup_vs_torch", "jax_jit_grad_ms",
               "diff_speedup_vs_jax_jit_grad", "adjoint_speedup_vs_jax_jit_grad", "e2e_speedup_vs_jax_jit_grad",
               "torch_primal_ms",
               "coarsen_grad_over_torch_primal"]
    print_table(rows, columns)
    path = write_csv("coarsen", rows)
    print(f"CSV: {path}")
    labelled = [dict(r, label=f"{r['app']}-{r['config']}") for r in rows]
    plot_bars("coarsen", labelled, "label", "diff_speedup_vs_torch",
              title="differentiation speed-up of coarsening over PyTorch autograd", name="coarsen_diff_vs_torch")
    plot_bars("coarsen", labelled, "label", "e2e_speedup_vs_torch",
              title="end-to-end gradient speed-up over PyTorch autograd", name="coarsen_e2e_vs_torch")
    if "jax_jit_grad_ms" in rows[0]:
        plot_bars("coarsen", labelled, "label", "e2e_speedup_vs_jax_jit_grad",
                  title="end-to-end gradient speed-up over jax.jit(jax.grad)", name="coarsen_e2e_vs_jax")
    _report_targets(rows)


def _report_targets(rows: list[dict]) -> None:
    print("targets:")
    for r in rows:
        if r["app"] == "BGDHyperOpt":
            print(f"  BGDHyperOpt-{r['config']}: differentiation via .backward() {r['diff_speedup_vs_torch']:.1f}x vs "
                  f"torch autograd backward (target 20x); generated adjoint alone "
                  f"{r['adjoint_speedup_vs_torch']:.1f}x vs torch backward and "
                  f"{r.get('adjoint_speedup_vs_jax_jit_grad', float('nan')):.1f}x vs jax.jit(jax.grad) (target 5x); "
                  f"through .backward() {r.get('diff_speedup_vs_jax_jit_grad', float('nan')):.1f}x vs jax.jit(jax.grad); "
                  f"end to end (coarsen.grad) {r['e2e_speedup_vs_torch']:.1f}x vs torch and "
                  f"{r.get('e2e_speedup_vs_jax_jit_grad', float('nan')):.2f}x vs jax.jit(jax.grad)")
        if r["app"] == "HookeanSpring":
            print(f"  HookeanSpring-{r['config']}: coarsened gradient / torch primal = "
                  f"{r['coarsen_grad_over_torch_primal']:.2f} (target < 1); coarsen.grad "
                  f"{r.get('e2e_speedup_vs_jax_jit_grad', float('nan')):.2f}x vs jax.jit(jax.grad)")
    slower = [f"{r['app']}-{r['config']}" for r in rows
              if min(r["diff_speedup_vs_torch"], r["e2e_speedup_vs_torch"], r["value_and_grad_speedup_vs_torch"]) < 1]
    print("  slower than PyTorch autograd: " + (", ".join(slower) if slower else "none"))
    if "e2e_speedup_vs_jax_jit_grad" in rows[0]:
        behind = [f"{r['app']}-{r['config']} ({r['e2e_speedup_vs_jax_jit_grad']:.2f}x)" for r in rows
                  if r["e2e_speedup_vs_jax_jit_grad"] < 1]
        print("  coarsen.grad slower than jax.jit(jax.grad): " + (", ".join(behind) if behind else "none"))


def _apps_from_argv(argv: list[str]) -> list[str] | None:
    names = [argv[k + 1] for k, a in enumerate(argv[:-1]) if a == "--app"]
    unknown = [n for n in names if n not in APP_NAMES]
    if unknown:
        raise SystemExit(f"unknown app(s) {', '.join(unknown)}; choose from {', '.join(APP_NAMES)}")
    return names or None


# --------------------------------------------------------------------------- the corpus of users' functions
# Functions nobody wrote for coarsening (bench/corpora/coarsen.py): for each, ``coarsen.grad`` on several
# input draws (coarsened or fell back, and why; any other exception), its error against torch autograd,
# its speed against torch autograd and against ``jax.jit(jax.grad)`` of the JAX twin, and the first-call
# time.  Each function runs in a worker subprocess under a time limit, so an unbounded first call is
# recorded as a timeout instead of stalling the suite.

CORPUS_TIMEOUT_S = 90.0         # per function: first call, the other draws, the references and the timings
CORPUS_QUICK_TIMEOUT_S = 30.0
WORKER_START_S = 300.0          # importing torch, JAX, SymPy and Numba on a loaded machine
WRONG_GRADIENT = 1e-6           # relative error vs autograd above which a gradient counts as wrong
CORPUS_COLUMNS = ["function", "kind", "status", "first_call_s", "first_call_cpu_s", "first_call_deferred", "second_call_s", "compiled_ready_s", "max_rel_err", "torch_ms",
                  "coarsen_ms", "jax_ms", "speedup_vs_torch", "speedup_vs_jax", "cause"]


def gradient_reference(fn, args: tuple, argnums) -> list:
    """Gradients of ``fn`` by plain PyTorch autograd (zeros where an argument is unused)."""
    leaves = [a.detach().clone().requires_grad_(i in argnums) if isinstance(a, torch.Tensor) else a
              for i, a in enumerate(args)]
    grads = torch.autograd.grad(fn(*leaves), [leaves[i] for i in argnums], allow_unused=True)
    return [torch.zeros_like(leaves[i]) if g is None else g for g, i in zip(grads, argnums)]


RELATIVE_FLOOR = 1e-6  # an argument's gradient is compared at no finer scale than this share of the largest


def relative_error(got, expected: list) -> float:
    """Largest over the arguments of max|got - expected| / scale (NaN or a shape mismatch: inf).

    The scale of an argument is max|expected| over its entries, but at least ``RELATIVE_FLOOR``
    times the largest over all arguments: a gradient that vanishes at an optimum (1e-11 where the
    others are 0.1) is not judged by its rounding errors alone.
    """
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    if len(got) != len(expected):
        return float("inf")
    pairs = [(torch.as_tensor(g, dtype=torch.float64), torch.as_tensor(e, dtype=torch.float64))
             for g, e in zip(got, expected)]
    overall = max((e.abs().max().item() for _, e in pairs if e.numel()), default=0.0)
    worst = 0.0
    for g, e in pairs:
        if g.shape != e.shape or (not bool(torch.isfinite(g).all()) and bool(torch.isfinite(e).all())):
            return float("inf")
        scale = max(e.abs().max().item() if e.numel() else 0.0, RELATIVE_FLOOR * overall)
        diff = (g - e).abs().max().item() if e.numel() else 0.0
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst


def fallback_cause(message: str) -> str:
    """The reason of a fallback warning or an error, without the function's name, file, lines and numbers."""
    text = message.split("falls back to plain autograd: ", 1)[-1]
    text = re.sub(r"\S+\.py(:\d+)?", "<file>", text)
    text = re.sub(r"\bline \d+", "line N", text)
    text = re.sub(r"\b\d+(\.\d+)?\b", "N", text)
    return text.strip()[:110]


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def per_call_time(fn, repeat: int = 20, batch_s: float = 2e-3, budget_s: float = 10.0) -> float:
    """Seconds per call of ``fn``: the best of ``repeat`` batches of calls, each about ``batch_s`` long
    (stops early past ``budget_s``)."""
    import time

    fn()
    start = time.perf_counter()
    fn()
    one = time.perf_counter() - start
    calls = max(1, min(2000, int(batch_s / max(one, 1e-7))))
    best, end = float("inf"), time.perf_counter() + budget_s
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
        if time.perf_counter() > end:
            break
    return best


SETTLE_ROUNDS = 3  # calls (each after tiers.wait()) that take a function to its steady state before timing


def measure_corpus_case(name: str, small: bool = False, draws: int = 3, repeat: int = 20, report=None) -> dict:
    """Everything the corpus table shows about one function; ``report(row)`` is called after each stage."""
    import time

    import sparsad.coarsen as coarsen
    from bench.corpora.coarsen import CASES_BY_NAME, draw
    from sparsad.coarsen import budget, tiers

    report = report or (lambda row: None)
    case = CASES_BY_NAME[name]
    row = {"function": name, "kind": case.kind, "constructs": case.constructs, "status": "running",
           "stage": "first call", "draws": draws}
    report(dict(row))
    first_calls_only = repeat <= 0  # status, errors and first calls; no timings, no Numba tiers
    grad_fn = coarsen.grad(case.torch_fn, case.argnums, numba=not first_calls_only)
    inputs = [draw(case, seed, small) for seed in range(draws)]
    errors, later = [], []
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k, args in enumerate(inputs):
            start, start_cpu, deferred = time.perf_counter(), time.thread_time(), budget.deferred_calls
            try:
                got = grad_fn(*args)
            except Exception as why:  # anything but a fallback is a bug of the library
                row.update(status="error", error=_one_line(why), stage=f"draw {k}")
                break
            elapsed = time.perf_counter() - start
            if k == 0:
                row["first_call_s"] = elapsed
                row["first_call_cpu_s"] = time.thread_time() - start_cpu  # (the load of other processes aside)
                row["first_call_deferred"] = budget.deferred_calls > deferred
            elif k == 1:
                row["second_call_s"] = elapsed
            else:
                later.append(elapsed)
            errors.append(relative_error(got, gradient_reference(case.torch_fn, args, case.argnums)))
            row.update(stage=f"draw {k + 1} of {draws} done", max_rel_err=max(errors))
            report(dict(row))
        # symbolic work past a call's deadline, and the Numba tiers (adjoint, recording primal), go on in
        # the background while the calls above run plain autograd or the generated torch code: wait for
        # them (and report when they were ready), then call until the steady state (a fallback whose
        # work failed in the background warns here)
        if row.get("status") != "error":
            try:
                for _ in range(1 if first_calls_only else SETTLE_ROUNDS):
                    tiers.wait()
                    grad_fn(*inputs[0])
            except Exception as why:
                row.update(status="error", error=_one_line(why), stage="settling")
            if not first_calls_only:
                tiers.wait()
                row["compiled_ready_s"] = time.perf_counter() - started
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, coarsen.CoarsenFallbackWarning)]
    if later:
        row["later_call_max_s"] = max(later)
    if row["status"] != "error":
        row["status"] = "fallback" if fallbacks else "coarsened"
    if fallbacks:
        row["reason"] = " | ".join(dict.fromkeys(m.split("falls back to plain autograd: ", 1)[-1] for m in fallbacks))
    row["cause"] = fallback_cause(row.get("error") or (fallbacks[0] if fallbacks else ""))
    row["wrong_gradient"] = bool(errors) and max(errors) > WRONG_GRADIENT
    row["stage"] = "timing torch autograd"
    report(dict(row))
    if row["status"] == "error":
        return row
    if first_calls_only:
        row["stage"] = "done"
        return row

    args = inputs[0]
    leaves = [a.detach().clone().requires_grad_(i in case.argnums) if isinstance(a, torch.Tensor) else a
              for i, a in enumerate(args)]
    wanted = [leaves[i] for i in case.argnums]
    t_torch = per_call_time(lambda: torch.autograd.grad(case.torch_fn(*leaves), wanted, allow_unused=True),
                            repeat=repeat)
    t_coarsen = per_call_time(lambda: grad_fn(*args), repeat=repeat)
    row.update(torch_ms=1e3 * t_torch, coarsen_ms=1e3 * t_coarsen, speedup_vs_torch=t_torch / t_coarsen,
               stage="jax.jit(jax.grad) of the twin")
    report(dict(row))
    _measure_jax(case, lambda: draw(case, 0, small, "jax"), gradient_reference(case.torch_fn, args, case.argnums),
                 repeat, row)
    row["stage"] = "done"
    return row


def _measure_jax(case, make_args, reference: list, repeat: int, row: dict) -> None:
    import time

    import jax
    import numpy as np

    try:
        with jax.enable_x64(True):  # scoped: float64 like the torch side, without changing the process's JAX
            jargs = make_args()
            static = tuple(i for i, a in enumerate(jargs) if not isinstance(a, jax.Array))
            gradient = jax.jit(jax.grad(case.jax_fn, argnums=case.argnums), static_argnums=static)
            start = time.perf_counter()
            got = jax.block_until_ready(gradient(*jargs))
            row["jax_first_call_s"] = time.perf_counter() - start
            row["jax_twin_rel_err"] = relative_error([torch.from_numpy(np.array(g)) for g in got], reference)
            t_jax = per_call_time(lambda: jax.block_until_ready(gradient(*jargs)), repeat=repeat)
    except Exception as why:  # a twin JAX cannot jit is noted, not fatal
        row["jax_error"] = _one_line(why)
        return
    row.update(jax_ms=1e3 * t_jax, speedup_vs_jax=t_jax / (row["coarsen_ms"] / 1e3))


def _corpus_worker(conn) -> None:
    """Subprocess: measure the functions it is sent, streaming ("partial", row) and ("done", row)."""
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    try:  # warm-up, so that the first function's first call does not pay for Numba's and JAX's start-up
        import jax
        import jax.numpy as jnp

        import sparsad.coarsen as coarsen
        from bench.corpora.coarsen import euler_decay
        one = torch.tensor(1.0, dtype=torch.float64)
        for _ in range(2):
            coarsen.grad(euler_decay, (0, 1))(one, one, 2)
        from sparsad.coarsen import tiers
        tiers.wait()
        with jax.enable_x64(True):
            jax.jit(jax.grad(jnp.sum))(jnp.ones(3))
    except Exception as why:  # the measurements themselves will say what is wrong
        print(f"corpus worker warm-up: {_one_line(why)}", file=sys.stderr)
    conn.send(("ready", None))
    while True:
        task = conn.recv()
        if task is None:
            return
        name, small, draws, repeat = task
        try:
            row = measure_corpus_case(name, small, draws, repeat, lambda r: conn.send(("partial", r)))
        except Exception as why:  # a failure of the harness or of the references, not of coarsen.grad
            row = {"function": name, "status": "harness error", "error": _one_line(why)}
        conn.send(("done", row))


class _Worker:
    """One measuring subprocess; killed and replaced when a function overruns its time limit."""

    def __init__(self):
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_corpus_worker, args=(child,), daemon=True)
        self.process.start()
        child.close()
        if not self.conn.poll(WORKER_START_S):
            self.stop()
            raise RuntimeError(f"the corpus worker did not start within {WORKER_START_S:.0f} s")
        self.conn.recv()

    def run(self, task: tuple, timeout: float) -> tuple[dict | None, str]:
        """(last row received, "done" | "timeout" | "crashed")."""
        import time

        self.conn.send(task)
        deadline = time.monotonic() + timeout
        row = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.conn.poll(left):
                return row, "timeout"
            try:
                kind, row = self.conn.recv()
            except (EOFError, ConnectionError):
                return row, "crashed"
            if kind == "done":
                return row, "done"

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()


def run_corpus(names: list[str], small: bool, draws: int, repeat: int, timeout: float) -> list[dict]:
    """Measure every named function in a worker subprocess, ``timeout`` seconds each (tqdm progress)."""
    from tqdm import tqdm

    from bench.corpora.coarsen import CASES_BY_NAME

    rows = []
    worker = None
    try:
        progress = tqdm(names, desc="coarsen corpus", unit="fn", file=sys.stderr)
        for name in progress:
            progress.set_postfix_str(name)
            worker = worker or _Worker()
            row, how = worker.run((name, small, draws, repeat), timeout)
            case = CASES_BY_NAME[name]
            row = row or {"function": name, "stage": "first call"}
            row.setdefault("kind", case.kind)
            row.setdefault("constructs", case.constructs)
            if how != "done":
                worker.stop()
                worker = None
                stage = row.get("stage", "first call")
                if row.get("status") in (None, "running"):  # did not finish its draws: the finding is the overrun
                    row["status"] = how
                    row["cause"] = (f"no result within {timeout:.0f} s ({stage})" if how == "timeout"
                                    else f"the worker process died ({stage})")
                else:
                    row["note"] = f"{how} during {stage}"
            rows.append(row)
    finally:
        if worker is not None:
            worker.conn.send(None)
            worker.stop()
    return rows


def summarize_corpus(rows: list[dict], timeout: float) -> dict:
    """Print the summary (shares, causes, first-call times, speed-ups) and return its figures."""
    import statistics
    from collections import Counter

    n = len(rows)
    counts = Counter(r["status"] for r in rows)
    done = [r for r in rows if r["status"] == "coarsened"]
    wrong = [r["function"] for r in rows if r.get("wrong_gradient")]
    firsts = [r["first_call_s"] for r in rows if "first_call_s" in r]
    firsts_with_timeouts = firsts + [timeout] * sum(r["status"] == "timeout" and "first_call_s" not in r for r in rows)
    summary = {
        "functions": n, "coarsened": counts["coarsened"], "coarsened_pct": 100.0 * counts["coarsened"] / max(n, 1),
        "fallback": counts["fallback"], "error": counts["error"], "timeout": counts["timeout"],
        "crashed": counts["crashed"], "wrong_gradients": len(wrong),
        "first_call_median_s": statistics.median(firsts_with_timeouts) if firsts_with_timeouts else float("nan"),
        "first_call_max_s": max(firsts_with_timeouts, default=float("nan")),
        "first_call_median_coarsened_s": statistics.median([r["first_call_s"] for r in done]) if done else float("nan"),
        "first_call_max_coarsened_s": max((r["first_call_s"] for r in done), default=float("nan")),
    }
    for key, column in (("vs_torch", "speedup_vs_torch"), ("vs_jax", "speedup_vs_jax")):
        ratios = [r[column] for r in done if column in r]
        summary[f"median_speedup_{key}"] = statistics.median(ratios) if ratios else float("nan")
        summary[f"min_speedup_{key}"] = min(ratios, default=float("nan"))
        summary[f"slower_{key}"] = [r["function"] for r in done if r.get(column, 1.0) < 1.0]
    print(f"\ncorpus: {n} functions; coarsened {counts['coarsened']} ({summary['coarsened_pct']:.0f}%), "
          f"fell back {counts['fallback']}, other exceptions {counts['error']}, timeouts ({timeout:.0f} s) "
          f"{counts['timeout']}, crashed {counts['crashed']}; wrong gradients (rel. err > {WRONG_GRADIENT:g}): "
          f"{len(wrong)} {wrong if wrong else ''}")
    print(f"first call (trace + symbolic + compile): median {summary['first_call_median_s']:.2f} s, max "
          f"{summary['first_call_max_s']:.2f} s (timeouts counted as {timeout:.0f} s); coarsened only: median "
          f"{summary['first_call_median_coarsened_s']:.2f} s, max {summary['first_call_max_coarsened_s']:.2f} s")
    deferred = [r["function"] for r in rows if r.get("first_call_deferred")]
    summary["first_calls_deferred"] = len(deferred)
    print(f"first calls served by plain autograd while their symbolic work went on in the background (wall "
          f"deadline): {len(deferred)} {deferred if deferred else ''}")
    cpus = [r["first_call_cpu_s"] for r in rows if "first_call_cpu_s" in r]
    if cpus:
        summary["first_call_cpu_median_s"], summary["first_call_cpu_max_s"] = statistics.median(cpus), max(cpus)
        print(f"first call, CPU time of the calling thread (the machine's load aside; timeouts not counted): median "
              f"{summary['first_call_cpu_median_s']:.2f} s, max {summary['first_call_cpu_max_s']:.2f} s")
    print(f"coarsened functions, coarsen.grad vs torch autograd: median {summary['median_speedup_vs_torch']:.2f}x, "
          f"min {summary['min_speedup_vs_torch']:.2f}x (slower: {', '.join(summary['slower_vs_torch']) or 'none'})")
    print(f"coarsened functions, coarsen.grad vs jax.jit(jax.grad): median {summary['median_speedup_vs_jax']:.2f}x, "
          f"min {summary['min_speedup_vs_jax']:.2f}x (slower: {', '.join(summary['slower_vs_jax']) or 'none'})")
    fallbacks = [r for r in rows if r["status"] == "fallback" and "speedup_vs_torch" in r]
    if fallbacks:
        worst = min(fallbacks, key=lambda r: r["speedup_vs_torch"])
        print(f"fallen-back functions, coarsen.grad vs torch autograd: median "
              f"{statistics.median(r['speedup_vs_torch'] for r in fallbacks):.2f}x, worst {worst['function']} "
              f"{worst['speedup_vs_torch']:.2f}x (the price of falling back)")
    twins = [r["function"] for r in rows if r.get("jax_twin_rel_err", 0.0) > WRONG_GRADIENT or "jax_error" in r]
    summary["jax_twins_off"] = twins
    print(f"JAX twins whose gradient differs from torch autograd or that did not run: {', '.join(twins) or 'none'}")
    causes: dict[tuple, list] = {}
    for r in rows:
        if r["status"] != "coarsened":
            causes.setdefault((r["status"], r.get("cause", "")), []).append(r["function"])
    table = [{"status": s, "count": len(fs), "cause": c, "functions": ", ".join(fs)}
             for (s, c), fs in sorted(causes.items(), key=lambda item: (-len(item[1]), item[0]))]
    print("\nnot coarsened, by cause:")
    print_table(table, ["status", "count", "cause", "functions"])
    return summary


def corpus_main(quick: bool = False, timeout: float | None = None, names: list[str] | None = None,
                draws: int | None = None, repeat: int | None = None) -> list[dict]:
    """``sparsad bench coarsen``'s corpus part: table, CSV and plots in bench/results/, then the summary."""
    from bench.corpora.coarsen import CASES, CASES_BY_NAME

    unknown = [n for n in names or [] if n not in CASES_BY_NAME]
    if unknown:
        raise SystemExit(f"unknown corpus function(s): {', '.join(unknown)}")
    timeout = timeout or (CORPUS_QUICK_TIMEOUT_S if quick else CORPUS_TIMEOUT_S)
    names = names or [c.name for c in CASES]
    draws, repeat = draws or (2 if quick else 3), repeat or (5 if quick else 20)
    print(f"\n=== coarsening corpus: {len(names)} functions, {draws} draws each, "
          f"{'small' if quick else 'natural'} trip counts, {timeout:.0f} s per function ===")
    rows = run_corpus(names, small=quick, draws=draws, repeat=repeat, timeout=timeout)
    print_table(rows, CORPUS_COLUMNS)
    print(f"CSV: {write_csv('coarsen_corpus', rows)}")
    done = [r for r in rows if "speedup_vs_torch" in r and r["status"] == "coarsened"]
    if done:
        plot_bars("coarsen_corpus", done, "function", "speedup_vs_torch", name="coarsen_corpus_vs_torch",
                  title="corpus, coarsened functions: coarsen.grad speed-up over torch autograd")
    with_jax = [r for r in done if "speedup_vs_jax" in r]
    if with_jax:
        plot_bars("coarsen_corpus", with_jax, "function", "speedup_vs_jax", name="coarsen_corpus_vs_jax",
                  title="corpus, coarsened functions: coarsen.grad speed-up over jax.jit(jax.grad)")
    timed = [dict(r, first_call_s=r.get("first_call_s", timeout)) for r in rows if r["status"] != "harness error"]
    if timed:
        plot_bars("coarsen_corpus", timed, "function", "first_call_s", name="coarsen_corpus_first_call",
                  title="corpus: first call of coarsen.grad (s; timeouts at the limit)")
    summarize_corpus(rows, timeout)
    return rows


def compare_corpus(before_csv: str, after_csv: str, timeout: float = 60.0) -> list[dict]:
    """Two corpus runs side by side (e.g. before and after a change): first-call time, time until the
    compiled tiers were ready, status and speed-ups per function; table, CSV and plot in bench/results/."""
    import csv
    import statistics

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.common import RESULTS_DIR

    def load(path):
        with open(path, newline="") as handle:
            return {r["function"]: r for r in csv.DictReader(handle)}

    def number(row, key, default=None):
        try:
            return float(row.get(key) or "nan") if row.get(key) not in (None, "") else default
        except ValueError:
            return default

    before, after = load(before_csv), load(after_csv)
    rows = []
    for name in before:
        if name not in after:
            continue
        b, a = before[name], after[name]
        rows.append({"function": name, "status_before": b["status"], "status_after": a["status"],
                     "first_call_before_s": number(b, "first_call_s", timeout),
                     "first_call_after_s": number(a, "first_call_s", timeout),
                     "first_call_cpu_before_s": number(b, "first_call_cpu_s"),
                     "first_call_cpu_after_s": number(a, "first_call_cpu_s"),
                     "second_call_after_s": number(a, "second_call_s"),
                     "compiled_ready_after_s": number(a, "compiled_ready_s"),
                     "vs_torch_before": number(b, "speedup_vs_torch"), "vs_torch_after": number(a, "speedup_vs_torch"),
                     "vs_jax_before": number(b, "speedup_vs_jax"), "vs_jax_after": number(a, "speedup_vs_jax")})
    print_table(rows, list(rows[0]))
    path = write_csv("coarsen_corpus_before_after", rows)
    print(f"CSV: {path}")
    for when in ("before", "after"):
        firsts = [r[f"first_call_{when}_s"] for r in rows]
        done = [r for r in rows if r[f"status_{when}"] == "coarsened"]
        jax = [r[f"vs_jax_{when}"] for r in done if r[f"vs_jax_{when}"] is not None]
        torch_ = [r[f"vs_torch_{when}"] for r in done if r[f"vs_torch_{when}"] is not None]
        cpus = [r[f"first_call_cpu_{when}_s"] for r in rows if r[f"first_call_cpu_{when}_s"] is not None]
        if cpus:
            print(f"{when}: first call CPU time median {statistics.median(cpus):.2f} s, max {max(cpus):.2f} s "
                  f"(timeouts not counted)")
        print(f"{when}: coarsened {len(done)}/{len(rows)}; first call median {statistics.median(firsts):.2f} s, "
              f"max {max(firsts):.2f} s (timeouts as {timeout:.0f} s); coarsened: vs torch autograd median "
              f"{statistics.median(torch_) if torch_ else float('nan'):.1f}x, min {min(torch_, default=float('nan')):.2f}x; "
              f"vs jax.jit(jax.grad) median {statistics.median(jax) if jax else float('nan'):.2f}x")
    shown = sorted(rows, key=lambda r: -r["first_call_before_s"])
    fig, ax = plt.subplots(figsize=(max(8, 0.22 * len(shown)), 4.5))
    xs = range(len(shown))
    ax.bar([x - 0.2 for x in xs], [r["first_call_before_s"] for r in shown], width=0.4, label="before")
    ax.bar([x + 0.2 for x in xs], [r["first_call_after_s"] for r in shown], width=0.4, label="after")
    ax.set_yscale("log")
    ax.set_ylabel("first call of coarsen.grad (s)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r["function"] for r in shown], rotation=90, fontsize=6)
    ax.axhline(2.0, color="grey", linestyle=":", linewidth=0.8)
    ax.axhline(10.0, color="grey", linestyle="--", linewidth=0.8)
    ax.legend()
    ax.set_title("corpus: first call before / after (same machine, same session)")
    fig.tight_layout()
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    fig.savefig(RESULTS_DIR / "coarsen_corpus_before_after.png", dpi=120)
    plt.close(fig)
    print(f"plot: {RESULTS_DIR / 'coarsen_corpus_before_after.png'}")
    return rows


def _float_option(argv: list[str], flag: str) -> float | None:
    values = [argv[k + 1] for k, a in enumerate(argv[:-1]) if a == flag]
    return float(values[-1]) if values else None

if __name__ == "__main__":
    argv = sys.argv
    if "--compare" in argv:  # --compare BEFORE.csv AFTER.csv
        at = argv.index("--compare")
        compare_corpus(argv[at + 1], argv[at + 2], _float_option(argv, "--timeout") or 60.0)
        raise SystemExit(0)
    main(quick="--quick" in argv, apps=_apps_from_argv(argv), corpus="--no-corpus" not in argv,
         only_corpus="--corpus-only" in argv, timeout=_float_option(argv, "--timeout"),
         cases=[argv[k + 1] for k, a in enumerate(argv[:-1]) if a == "--case"] or None,
         draws=int(_float_option(argv, "--draws") or 0) or None,
         repeat=-1 if "--first-calls-only" in argv else int(_float_option(argv, "--repeat") or 0) or None)
