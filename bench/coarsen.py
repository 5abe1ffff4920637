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

Ratios are against the competitor measured in the same run.  Run:
``.venv/bin/python -m bench.coarsen`` (``--quick`` for configuration 1 only, ``--app NAME`` for one
application, e.g. ``--app BGDHyperOpt``; may be repeated).
"""
from __future__ import annotations

import sys
import warnings

import torch

from bench.common import best_time, plot_bars, print_table, write_csv

APP_NAMES = ["BGDHyperOpt", "Brachistochrone", "HMC", "HookeanSpring", "CartPole"]


def _torch_rows(name: str, config: int, repeat: int) -> dict:
    import sparsad.coarsen as coarsen
    from sparsad.coarsen import apps

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
    t_primal_graph = best_time(primal_graph, repeat=repeat)
    t_primal = best_time(primal_plain, repeat=repeat)
    t_e2e = best_time(end_to_end, repeat=repeat)
    t_diff = best_time(lambda: out.backward(retain_graph=True), repeat=repeat)

    wrapped = coarsen.symbolic(fn)
    grad_fn = coarsen.grad(wrapped, argnums=argnums)
    with warnings.catch_warnings():
        warnings.simplefilter("error", coarsen.CoarsenFallbackWarning)
        grad_fn(*args)  # builds and checks the adjoint once (compile time, not timed)
        spliced = wrapped(*leaves, *static)
        spliced.backward(retain_graph=True)
    t_c_diff = best_time(lambda: spliced.backward(retain_graph=True), repeat=repeat)
    t_c_adjoint = best_time(_adjoint_call(wrapped, args, tensors, argnums), repeat=repeat)
    t_c_e2e = best_time(lambda: grad_fn(*args), repeat=repeat)

    def value_and_grad():  # what HMC needs per step: U and grad U
        with torch.no_grad():
            value = fn(*tensors, *static)
        return value, grad_fn(*args)

    t_c_vg = best_time(value_and_grad, repeat=repeat)
    t_c_forward = best_time(lambda: wrapped(*leaves, *static), repeat=repeat)
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
    t_primal = best_time(lambda: jax.block_until_ready(primal(*tensors)), repeat=repeat)
    t_grad = best_time(lambda: jax.block_until_ready(gradient(*tensors)), repeat=repeat)
    grad_fn = coarsen.grad(fj, argnums=argnums)
    jax.block_until_ready(grad_fn(*args))
    t_c = best_time(lambda: jax.block_until_ready(grad_fn(*args)), repeat=repeat)
    row.update({
        "jax_jit_primal_ms": 1e3 * t_primal, "jax_jit_grad_ms": 1e3 * t_grad,
        "jax_diff_ms": 1e3 * max(t_grad - t_primal, 0.0), "coarsen_jax_e2e_ms": 1e3 * t_c,
        "diff_speedup_vs_jax_jit_grad": t_grad / (row["coarsen_diff_ms"] / 1e3),
        "adjoint_speedup_vs_jax_jit_grad": t_grad / (row["coarsen_adjoint_ms"] / 1e3),
        "e2e_speedup_vs_jax_jit_grad": t_grad / (row["coarsen_e2e_ms"] / 1e3),
    })
    del nstatic, positions


def main(quick: bool = False, apps: list[str] | None = None) -> None:
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


if __name__ == "__main__":
    main(quick="--quick" in sys.argv, apps=_apps_from_argv(sys.argv))
