"""AutoHOOT benchmarks: Table 1 (gain of each optimization), Fig. 5 (CP-GN HVP vs JAX and
hand-written NumPy), Fig. 7 (CP-ALS sweep vs tensorly), whole CP-ALS and Tucker-HOOI calls on every
real tensor of ../shared/data/tensors (smallest first) vs tensorly, the executor's per-sweep overhead,
a DMRG sweep (vs quimb's DMRG2 when installed), and a table of issue 17's targets with verdicts.

Every figure is a ratio measured in the same run, single-threaded. Runs whose estimated peak memory exceeds
MEMORY_BUDGET are not started and are reported as "OOM (est. X GiB)", the analogue of the
paper's OOM rows, so the benchmark never endangers the machine.

Run: python -m bench.autohoot            (full sizes)
     python -c "from bench.autohoot import main; main(quick=True)"
"""
from __future__ import annotations

import os
import sys
import time
from math import prod
from pathlib import Path

import numpy as np
import opt_einsum as oe

from bench.common import best_time, plot_bars, plot_lines, print_table, write_csv
from sparsad import tensor as T
from sparsad.tensor.executor import canonical_subscripts
from sparsad.tensor.graph import topological

# Single-threaded, as the other suites: every code here (NumPy/SciPy BLAS for ours, tensorly and
# quimb; XLA for JAX) gets one thread. On a shared 2-core machine a multi-threaded BLAS call waits
# for a second core and can take many times its quiet time, which made same-run ratios a lottery.
# (XLA reads this before jax is first imported.)
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
MEMORY_BUDGET = 4 * 2**30          # bytes
LEVELS = {                          # Table 1 columns: which optimizer passes run
    "AD": None,
    "AD+OPT1": ("fuse", "path"),
    "AD+OPT1,2": ("fuse", "symbolic", "path"),
    "AD+OPT1,2,3": ("fuse", "symbolic", "path", "cse"),
}


# ----- CP graphs (order 3, rank R = s as in Table 1) -------------------------------------------
def cp_problem(s: int, R: int):
    X = T.Variable("X", (s, s, s))
    A, B, C = (T.Variable(n, (s, R)) for n in "ABC")
    model = T.einsum("ir,jr,kr->ijk", A, B, C)
    res = X - model
    loss = 0.5 * T.einsum("ijk,ijk->", res, res)
    return X, (A, B, C), model, loss


def kernel_graph(kernel: str, s: int):
    X, (A, B, C), model, loss = cp_problem(s, s)
    V = [T.Variable(f"V{n}", (s, s)) for n in range(3)]
    if kernel == "GN Jacobian":
        nodes = [T.jacobian(model, A)]
    elif kernel == "GN HVP":
        nodes = T.vjp(model, [A, B, C], T.jvp(model, [A, B, C], V))
    elif kernel == "ALS Hessian":
        nodes = [T.hessian(loss, [A])[0][0]]
    elif kernel == "ALS Hessian inv":
        nodes = [T.tensorinv(T.hessian(loss, [A])[0][0])]
    else:
        raise ValueError(kernel)
    return (X, A, B, C, *V), nodes


def feed_for(variables, seed=0):
    rng = np.random.default_rng(seed)
    return {v: rng.random(v.shape) for v in variables}


def peak_bytes(nodes) -> int:
    """Estimated peak memory of Executor(nodes).run: the live values along the schedule (the
    executor frees a value after its last use) plus the largest intermediate opt_einsum plans
    inside the einsum being evaluated."""
    order = topological(nodes)
    last_use = {}
    for step, n in enumerate(order):
        for c in n.inputs:
            last_use[c.uid] = step
    outputs = {n.uid for n in nodes}
    live, peak = 0, 0
    sizes = {}
    for step, n in enumerate(order):
        sizes[n.uid] = prod(n.shape)
        inner = 0
        if isinstance(n, T.Einsum) and len(n.inputs) > 2:
            info = oe.contract_path(canonical_subscripts(n.in_subs, n.out_sub),
                                    *[o.shape for o in n.inputs], shapes=True)[1]
            inner = 2 * int(info.largest_intermediate)
        live += sizes[n.uid]
        peak = max(peak, live + inner)
        for c in n.inputs:
            if last_use.get(c.uid) == step and c.uid not in outputs:
                live -= sizes.get(c.uid, 0)
                sizes[c.uid] = 0
    return 8 * peak


def jax_kernel(kernel: str, s: int):
    """The same kernel by JAX autodiff (jit-compiled) and its estimated peak memory."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    def model(a, b, c):
        return jnp.einsum("ir,jr,kr->ijk", a, b, c)

    def loss(a, b, c, x):
        return 0.5 * jnp.sum((x - model(a, b, c)) ** 2)

    s3, sR = s ** 3, s * s
    if kernel == "GN Jacobian":
        # jacfwd: the input (s R) is smaller than the output (s^3), JAX's better mode here.
        fn = jax.jit(lambda x, a, b, c, *v: jax.jacfwd(model)(a, b, c))
        est = 8 * 3 * s3 * sR
    elif kernel == "GN HVP":
        def gn(x, a, b, c, *v):
            _, jv = jax.jvp(model, (a, b, c), tuple(v))
            return jax.vjp(model, a, b, c)[1](jv)
        fn = jax.jit(gn)
        est = 8 * 4 * s3
    elif kernel == "ALS Hessian":
        fn = jax.jit(lambda x, a, b, c, *v: jax.hessian(loss)(a, b, c, x))
        est = 8 * 3 * s3 * sR
    else:
        def inv(x, a, b, c, *v):
            h = jax.hessian(loss)(a, b, c, x)
            return jnp.linalg.tensorinv(h, 2)
        fn = jax.jit(inv)
        est = 8 * 3 * s3 * sR
    return fn, est


def _fmt_oom(est: int) -> str:
    return f"OOM (est. {est / 2**30:.1f} GiB)"


def _block(result):
    for leaf in (result if isinstance(result, (list, tuple)) else [result]):
        if hasattr(leaf, "block_until_ready"):
            leaf.block_until_ready()
        elif isinstance(leaf, (list, tuple)):
            _block(leaf)
    return result


def table1(quick: bool) -> list[dict]:
    cases = ([("GN Jacobian", 6), ("GN HVP", 8), ("ALS Hessian", 8), ("ALS Hessian inv", 8)] if quick else
             [("GN Jacobian", 25), ("GN HVP", 40), ("GN HVP", 160), ("ALS Hessian", 40),
              ("ALS Hessian", 120), ("ALS Hessian", 160), ("ALS Hessian inv", 40),
              ("ALS Hessian inv", 120), ("ALS Hessian inv", 160)])
    repeat = 2 if quick else 3
    rows = []
    for kernel, s in cases:
        variables, nodes = kernel_graph(kernel, s)
        feed = feed_for(variables)
        row: dict = {"kernel": kernel, "s": s}
        print(f"  table 1: {kernel} s={s}", flush=True)
        fn, est = jax_kernel(kernel, s)
        args = [feed[v] for v in variables]
        if est > MEMORY_BUDGET:
            row["JAX AD"] = _fmt_oom(est)
        else:
            row["JAX AD"] = best_time(lambda: _block(fn(*args)), repeat=repeat)
        times = {}
        for level, passes in LEVELS.items():
            print(f"    {level}", flush=True)
            graph = nodes if passes is None else T.optimize(nodes, passes=passes, guard=False)
            need = peak_bytes(graph)
            if need > MEMORY_BUDGET:
                row[level] = _fmt_oom(need)
                continue
            ex = T.Executor(graph)
            times[level] = best_time(lambda: ex.run(feed), repeat=repeat)
            row[level] = times[level]
        best = times.get("AD+OPT1,2,3")
        baselines = [v for v in (row["JAX AD"], row["AD"]) if isinstance(v, float)]
        row["speed-up vs JAX"] = (row["JAX AD"] / best) if best and isinstance(row["JAX AD"], float) else "/"
        row["speed-up vs AD"] = (row["AD"] / best) if best and isinstance(row["AD"], float) else "/"
        del baselines
        rows.append(row)
    return rows


# ----- Fig. 5: CP-GN HVP against JAX and hand-written NumPy --------------------------------
def handwritten_gn_hvp(a, b, c, va, vb, vc):
    """J^T J v for CP, the Gram-matrix formula of Singh et al. (hand-written reference)."""
    ga, gb, gc = a.T @ a, b.T @ b, c.T @ c
    ua, ub, uc = va.T @ a, vb.T @ b, vc.T @ c
    out_a = va @ (gb * gc) + a @ (ub * gc + gb * uc)
    out_b = vb @ (ga * gc) + b @ (ua * gc + ga * uc)
    out_c = vc @ (ga * gb) + c @ (ua * gb + ga * ub)
    return out_a, out_b, out_c


def fig5(quick: bool) -> list[dict]:
    sizes = [8, 16] if quick else [40, 80, 160, 200, 320, 640]
    rows = []
    for s in sizes:
        variables, nodes = kernel_graph("GN HVP", s)
        opt = T.optimize(nodes)
        feed = feed_for(variables)
        X, A, B, C, *V = variables
        ex = T.Executor(opt)
        ref = handwritten_gn_hvp(feed[A], feed[B], feed[C], *[feed[v] for v in V])
        for got, want in zip(ex.run(feed), ref):
            np.testing.assert_allclose(got, want, rtol=1e-9)
        fn, est = jax_kernel("GN HVP", s)
        args = [feed[v] for v in variables]
        fns = {"ours": lambda: ex.run(feed),
               "hand": lambda: handwritten_gn_hvp(feed[A], feed[B], feed[C], *[feed[v] for v in V])}
        if est <= MEMORY_BUDGET:
            fns["jax"] = lambda: _block(fn(*args))
        # in turns, fastest of several rounds (first runs excluded): on a busy machine a
        # multi-threaded BLAS or XLA call can take many times its quiet time, for every code alike
        best = _interleaved_min(fns, rounds=3 if quick or s > 200 else 7)
        ours, hand = best["ours"], best["hand"]
        jax_t = best["jax"] if "jax" in best else _fmt_oom(est)
        rows.append({"s": s, "sparsad_s": ours, "handwritten_s": hand, "jax_s": jax_t,
                     "speedup_vs_jax": jax_t / ours if isinstance(jax_t, float) else "/",
                     "ratio_vs_handwritten": ours / hand})
    return rows


# ----- Fig. 7: CP-ALS sweep against tensorly --------------------------------------------------
def fig7(quick: bool) -> list[dict]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from cp_als import CPALS
    from tensorly.decomposition import parafac

    cases = [(16, 4), (24, 8)] if quick else [(100, 10), (200, 20), (300, 30)]
    sweeps = 3 if quick else 5
    rows = []
    for s, R in cases:
        rng = np.random.default_rng(0)
        x = rng.random((s, s, s))
        init = [rng.random((s, R)) for _ in range(3)]
        solver = CPALS(x.shape, R)                         # derive, optimize and plan once

        def ours_sweeps():
            vals = [f.copy() for f in init]
            for _ in range(sweeps):
                vals = solver.sweep(x, vals)

        def tensorly_iterations(n_iter):
            parafac(x, R, n_iter_max=n_iter, init=(np.ones(R), [f.copy() for f in init]), tol=0)

        # In turns, fastest of a few rounds (first runs excluded). tensorly's per-sweep time
        # leaves out its set-up: (sweeps + 1 iterations) - (1 iteration).
        best = _interleaved_min({"ours": ours_sweeps, "tl_n": lambda: tensorly_iterations(sweeps + 1),
                                 "tl_1": lambda: tensorly_iterations(1)}, rounds=3)
        ours = best["ours"] / sweeps
        theirs = max(best["tl_n"] - best["tl_1"], 1e-9) / sweeps
        rows.append({"s": s, "R": R, "sparsad_sweep_s": ours, "tensorly_sweep_s": theirs,
                     "speedup_vs_tensorly": theirs / ours})
    return rows


# ----- Small real tensors: whole calls against tensorly, and the executor's own overhead -------
def _interleaved_min(fns: dict, rounds: int) -> dict:
    """Min wall time of each function, the functions taking turns (a busy machine's noise falls on
    all of them alike); each is run once first (the first run, which builds graphs, excluded)."""
    for fn in fns.values():
        fn()
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best


def real_tensors_smallest_first() -> list[tuple[str, np.ndarray, str]]:
    """(name, tensor, note) for every real tensor of ../shared/data/tensors, smallest first.

    IL2 (13x4x12x8, the smallest) has missing entries stored as NaN: both codes get the same
    tensor with those entries set to 0 (neither code here masks missing entries)."""
    from sparsad._data import shared_data_dir

    root = shared_data_dir()
    found = []
    for path in sorted((root / "tensors").glob("*.npy")) if root else []:
        x = np.load(path, allow_pickle=False)
        if x.ndim < 3 or x.dtype.kind != "f":
            continue                       # Kinetic_missing is a boolean mask, not a tensor
        missing = int(np.count_nonzero(~np.isfinite(x)))
        note = f"{missing} missing entries set to 0" if missing else ""
        found.append((path.stem.removeprefix("tensorly_"), np.nan_to_num(x.astype(np.float64)), note))
    return sorted(found, key=lambda item: item[1].size)


def smallest_real_tensor():
    found = real_tensors_smallest_first()
    return (found[0][0], found[0][1]) if found else (None, None)


def _rounds_for(fns: dict, quick: bool) -> tuple[int, dict]:
    """Rounds of interleaved timing that fit a few seconds per case (at least 3, at most 25), and
    each function's first-call time (ours builds and optimizes its graph then, once per shape)."""
    first = {}
    for name, fn in fns.items():
        t0 = time.perf_counter()
        fn()
        first[name] = time.perf_counter() - t0
    once = sum(first.values())
    cap = 5 if quick else 25
    return max(3, min(cap, int((2.0 if quick else 12.0) / max(once, 1e-6)))), first


def small_real_rows(quick: bool) -> list[dict]:
    """CP-ALS (ranks 3 and 5) and Tucker-HOOI on every real tensor, smallest first: a whole
    decomposition call of ours (graph building included: cached per shape, so only the first call
    builds) against tensorly's, from the same initialisation, timed in turns (first run excluded)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import warnings

    import cp_als
    import tucker_hooi
    from tensorly.decomposition import parafac, tucker

    tensors = real_tensors_smallest_first()
    if not tensors:
        return [{"tensor": "absent", "note": "../shared/data/tensors not found"}]
    if quick:
        tensors = tensors[:1]
    n_iter = 20
    rows = []
    for name, x, note in tensors:
        shape = "x".join(map(str, x.shape))
        print(f"  small real: {name} {shape}", flush=True)
        for rank in (3, 5):
            init = [np.random.default_rng(0).random((s, rank)) for s in x.shape]

            def ours(rank=rank, init=init, x=x):
                return cp_als.cp_als(x, rank, n_iter, init=init, track_fit=False)

            def theirs(rank=rank, init=init, x=x):
                return parafac(x, rank, n_iter_max=n_iter, init=(np.ones(rank), [f.copy() for f in init]),
                               tol=0, normalize_factors=False)

            fns = {"ours": ours, "tensorly": theirs}
            rounds, first = _rounds_for(fns, quick)
            times = _interleaved_min(fns, rounds)
            rows.append({"tensor": name, "shape": shape, "method": f"CP-ALS rank {rank}", "iterations": n_iter,
                         "sparsad_s": times["ours"], "tensorly_s": times["tensorly"],
                         "speedup_vs_tensorly": times["tensorly"] / times["ours"],
                         "sparsad_first_call_s": first["ours"], "rounds": rounds, "note": note})
        ranks = tuple(min(s, r) for s, r in zip(x.shape, (5, 3, 4, 4)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fns = {"ours": lambda x=x, ranks=ranks: tucker_hooi.hooi(x, ranks, 10),
                   "tensorly": lambda x=x, ranks=ranks: tucker(x, rank=list(ranks), n_iter_max=10, tol=0, init="svd")}
            rounds, first = _rounds_for(fns, quick)
            times = _interleaved_min(fns, rounds)
        rows.append({"tensor": name, "shape": shape, "method": f"Tucker-HOOI ranks {ranks}", "iterations": 10,
                     "sparsad_s": times["ours"], "tensorly_s": times["tensorly"],
                     "speedup_vs_tensorly": times["tensorly"] / times["ours"],
                     "sparsad_first_call_s": first["ours"], "rounds": rounds, "note": note})
    return rows


def overhead_rows(quick: bool) -> list[dict]:
    """Per-sweep overhead of the executor: a CP-ALS sweep through Executor.run against the same
    kernels (its compiled steps) called back to back with their inputs ready, under the same BLAS
    thread setting as the run (the run's choice of one BLAS thread for small work is a policy, not
    overhead; `kernels_default_threads_s` shows the kernels with BLAS's own thread count)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import cp_als

    from sparsad.tensor.blas import one_blas_thread

    rows = []
    name, x = smallest_real_tensor()
    cases = [(name, x, 3)] if x is not None else []
    cases.append(("random 60^3", np.random.default_rng(0).random((60, 60, 60)), 10))
    for label, data, rank in cases:
        solver = cp_als.CPALS.for_shape(tuple(data.shape), rank)
        ex = T.Executor(solver.updates)                     # the sweep's kernels, no reuse
        vals = [np.random.default_rng(1).random((s, rank)) for s in data.shape]
        feed = {solver.X: data, **dict(zip(solver.factors, vals))}
        steps = ex._step_list(*ex._schedule(ex.nodes))
        serial = ex._steps(ex.nodes, *ex._schedule(ex.nodes))[1]
        values = {v.uid: ex._feed(v, feed[v]) for v in [solver.X, *solver.factors]}
        for uid, fn, args, _ in steps:                      # every intermediate, computed once
            if fn is not None:
                values[uid] = fn(*[values[a] for a in args])
        calls = [(fn, [values[a] for a in args]) for uid, fn, args, _ in steps if fn is not None]

        def kernels_only():
            for fn, args in calls:
                fn(*args)

        def kernels_as_run():
            if serial:
                with one_blas_thread():
                    kernels_only()
            else:
                kernels_only()

        times = _interleaved_min({"run": lambda: ex.run(feed), "kernels": kernels_as_run, "default": kernels_only},
                                 30 if quick else 100)
        rows.append({"tensor": label, "rank": rank, "one_blas_thread": serial, "sweep_s": times["run"],
                     "kernels_s": times["kernels"], "kernels_default_threads_s": times["default"],
                     "overhead": times["run"] / times["kernels"] - 1})
    return rows


# ----- DMRG sweep --------------------------------------------------------------------------
DMRG_SIZES = [(6, 2, 3, 8), (6, 4, 6, 16), (8, 4, 6, 32)]   # (sites, d, MPO bond, max MPS bond)


def dmrg_rows(quick: bool) -> list[dict]:
    return [row for size in DMRG_SIZES[:1 if quick else None] for row in _dmrg_row(quick, *size)]


def _dmrg_row(quick: bool, n_sites: int, d: int, bond: int, max_bond: int) -> list[dict]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import dmrg

    mpo = dmrg.random_symmetric_mpo(n_sites, d, bond)
    init = dmrg.initial_state(n_sites, d, max_bond, seed=1)
    # One sweep = one right-going pass over the bonds, as quimb's DMRG2 default ("R"). Both codes are
    # timed in turns in this process (fastest of several rounds, first runs excluded), so the
    # machine's load falls on both alike.
    result = {}

    def ours_sweep():
        dmrg.MATVECS[0] = 0
        result["energy"] = dmrg.dmrg(mpo, max_bond, sweeps=1, init=init, sweep_sequence="R")[0]
        result["matvecs"] = dmrg.MATVECS[0]

    def quimb_sweep():
        result["quimb_energy"] = dmrg.quimb_dmrg(mpo, max_bond, sweeps=1, init=init)   # the same start

    has_quimb = dmrg.quimb_dmrg(dmrg.random_symmetric_mpo(4, 2, 2), 4, sweeps=1) is not None
    fns = {"ours": ours_sweep, "quimb": quimb_sweep} if has_quimb else {"ours": ours_sweep}
    best = _interleaved_min(fns, rounds=3 if quick else 5)
    ours, energy = best["ours"], result["energy"]
    row = {"sites": n_sites, "d": d, "mpo_bond": bond, "max_bond": max_bond, "sparsad_sweep_s": ours,
           "energy": energy, "matvecs": result["matvecs"]}
    # The eigensolver's matrix-vector product alone, at a middle bond: graph HVP vs hand-written.
    rng = np.random.default_rng(0)
    # environments are symmetric in (bra bond, ket bond), as the example declares and checks
    left, right = (e + e.transpose(2, 1, 0) for e in (rng.standard_normal((max_bond, bond, max_bond))
                                                       for _ in range(2)))
    v = rng.standard_normal((max_bond, d, d, max_bond))
    ours_mv = dmrg.local_matvec(left, mpo[1], mpo[2], right)
    hand = oe.contract_expression("awc,wxst,xyuv,byd,ctvd->asub", left.shape, mpo[1].shape, mpo[2].shape,
                                  right.shape, v.shape, optimize="optimal")
    want = hand(left, mpo[1], mpo[2], right, v)
    np.testing.assert_allclose(ours_mv(v), want, rtol=1e-10, atol=1e-12 * np.abs(want).max())
    mv = _interleaved_min({"ours": lambda: ours_mv(v), "hand": lambda: hand(left, mpo[1], mpo[2], right, v)},
                          rounds=10 if quick else 30)
    row["matvec_s"], row["handwritten_matvec_s"] = mv["ours"], mv["hand"]
    row["matvec_ratio_vs_handwritten"] = row["matvec_s"] / row["handwritten_matvec_s"]
    if not has_quimb:
        row["quimb"] = "not installed"
        return [row]
    theirs = best["quimb"]
    row.update({"quimb_sweep_s": theirs, "quimb_energy": result["quimb_energy"], "speedup_vs_quimb": theirs / ours})
    return [row]


def main(quick: bool = False) -> None:
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        _main(quick)


def _main(quick: bool) -> None:
    # The sections the targets are read from run first, and their verdicts are printed
    # (and written) before the long paper-reproduction sections (Fig. 7, Table 1), which only add
    # the kept issue-6 row: on a busy machine a time limit then never costs the verdicts.
    small = small_real_rows(quick)
    print("\nReal tensors, smallest first: whole decompositions (first call excluded, graph building included)")
    print_table(small)
    write_csv("autohoot_small_real", small)
    if small and "speedup_vs_tensorly" in small[0]:
        plot_bars("autohoot_small_real", [{"case": f"{r['tensor']} {r['method']}", "speedup": r["speedup_vs_tensorly"]}
                                          for r in small],
                  "case", "speedup", title="Speed-up vs tensorly on the real tensors (smallest first)")
    ov = overhead_rows(quick)
    print("\nExecutor overhead per CP-ALS sweep (run vs its kernels back to back)")
    print_table(ov)
    write_csv("autohoot_overhead", ov)
    dm = dmrg_rows(quick)
    print("\nDMRG sweep")
    print_table(dm)
    write_csv("autohoot_dmrg", dm)
    f5 = fig5(quick)
    print("\nFig. 5: CP Gauss-Newton HVP")
    print_table(f5)
    write_csv("autohoot_fig5", f5)
    series = []
    for r in f5:
        for name, key in (("sparsad", "sparsad_s"), ("hand-written", "handwritten_s"), ("JAX", "jax_s")):
            if isinstance(r[key], float):
                series.append({"s": r["s"], "seconds": r[key], "implementation": name})
    plot_lines("autohoot_fig5", series, "s", "seconds", "implementation", title="CP-GN HVP (Fig. 5)")
    report_targets(target_rows(f5, [], small, ov, dm), quick)
    f7 = fig7(quick)
    print("\nFig. 7: CP-ALS sweep")
    print_table(f7)
    write_csv("autohoot_fig7", f7)
    plot_bars("autohoot_fig7", [{"case": f"s={r['s']},R={r['R']}", "speedup": r["speedup_vs_tensorly"]} for r in f7],
              "case", "speedup", title="CP-ALS sweep speed-up vs tensorly (Fig. 7)")
    t1 = table1(quick)
    print("\nTable 1: seconds per kernel evaluation (CP order 3, rank = s)")
    print_table(t1)
    write_csv("autohoot_table1", t1)
    gains = [{"case": f"{r['kernel']} s={r['s']}", "speedup": r["speed-up vs AD"]} for r in t1
             if isinstance(r["speed-up vs AD"], float)]
    if gains:
        plot_bars("autohoot_table1", gains, "case", "speedup", title="Table 1: optimized vs unoptimized AD graph")
    report_targets(target_rows(f5, f7, small, ov, dm), quick)


def target_rows(f5: list[dict], f7: list[dict], small: list[dict], ov: list[dict], dm: list[dict]) -> list[dict]:
    """Every speed target of issue 17 (and the ALS-sweep target kept from issue 6), read off this
    run's rows: what was measured, what is required, and the verdict."""
    rows = []

    def add(target, case, measured, required, ok, detail=""):
        rows.append({"target": target, "case": case, "measured": measured, "required": required,
                     "verdict": "met" if ok else "MISSED", "detail": detail})

    for r in small:
        if "speedup_vs_tensorly" not in r:
            continue
        what = "CP-ALS" if r["method"].startswith("CP") else "Tucker-HOOI"
        add(f"{what} faster than tensorly (real tensors, smallest up)", f"{r['tensor']} {r['shape']} {r['method']}",
            r["speedup_vs_tensorly"], "> 1x", r["speedup_vs_tensorly"] > 1, r.get("note", ""))
    for r in dm:
        if "speedup_vs_quimb" not in r:
            add("DMRG2 sweep no slower than quimb", f"L={r['sites']} d={r['d']} chi={r['max_bond']}", "/",
                ">= 1x", False, "quimb not installed")
            continue
        lower = r["energy"] <= r["quimb_energy"] + 1e-8 * abs(r["quimb_energy"])
        add("DMRG2 sweep no slower than quimb, equal or lower energy",
            f"L={r['sites']} d={r['d']} mpo={r['mpo_bond']} chi={r['max_bond']}", r["speedup_vs_quimb"], ">= 1x",
            r["speedup_vs_quimb"] >= 1 and lower, f"energy {r['energy']:.12g} vs quimb {r['quimb_energy']:.12g}")
    for r in f5:
        if r["s"] == 200:
            ok = isinstance(r["speedup_vs_jax"], float) and r["speedup_vs_jax"] >= 10
            add("CP-GN HVP >= 10x JAX at s = 200", "s=200", r["speedup_vs_jax"], ">= 10x", ok)
    for r in ov:
        add("per-sweep overhead within 10% of the contractions (CP-ALS)", f"{r['tensor']} rank {r['rank']}",
            r["overhead"], "<= 0.10", r["overhead"] <= 0.10, "overhead = run / kernels - 1")
    for r in f7:
        add("CP-ALS sweep no slower than tensorly (issue 6)", f"s={r['s']} R={r['R']}", r["speedup_vs_tensorly"],
            ">= 1x", r["speedup_vs_tensorly"] >= 1)
    return rows


def report_targets(rows: list[dict], quick: bool) -> None:
    print("\n== targets (issue 17) ==" + (" (quick sizes: judge the full run)" if quick else ""))
    print_table(rows)
    write_csv("autohoot_targets", rows)
    bars = [{"case": f"{r['target'].split(' ')[0]} {r['case']}"[:48],
             "ratio (speed-up; 1/(1+overhead))": (1 / (1 + r["measured"]) if "overhead" in r["target"] else r["measured"])}
            for r in rows if isinstance(r["measured"], float)]
    if bars:
        plot_bars("autohoot_targets", bars, "case", "ratio (speed-up; 1/(1+overhead))",
                  title="issue 17 targets: ratios in this run (> 1 line: faster)")
    missed = [r for r in rows if r["verdict"] != "met"]
    print(f"  {len(rows) - len(missed)} of {len(rows)} targets met" + ("" if not missed else ": missed " + "; ".join(
        f"{r['target']} [{r['case']}]" for r in missed)))


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
