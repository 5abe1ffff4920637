"""Per-call speed of ``coarsen.grad`` on the coarsening corpus, in one process (the steady state).

``bench/coarsen.py`` measures each corpus function in a worker subprocess, with several input
draws, error checks and first-call times.  This suite measures only what a training loop sees:
after the first calls and once the Numba tiers compiled in the background are in use
(``tiers.wait()``), the time per call (best of batches, ``bench.coarsen.per_call_time``) of ``coarsen.grad`` against plain PyTorch autograd and
``jax.jit(jax.grad)`` of the JAX twin, on the natural sizes, plus the first and second call times
(the second call used to compile the recording primal in the calling process).  A function whose
calls overrun ``--timeout`` seconds (default 60; a child compiling on a loaded machine counts) is
recorded as a timeout.  Writes ``bench/results/coarsen_percall.csv`` and ``coarsen_percall_vs_jax.png``.

Run: ``python -m bench.coarsen_percall [--small] [--timeout S] [NAME ...]``.  Two CSVs of it
(e.g. before and after a change, run side by side) compare with ``--compare BEFORE AFTER``.
"""
from __future__ import annotations

import csv
import signal
import statistics
import sys
import time
import warnings

import torch

from bench.common import RESULTS_DIR, plot_bars, print_table, write_csv

COLUMNS = ["function", "status", "first_call_s", "second_call_s", "rel_err", "torch_ms", "coarsen_ms", "jax_ms",
           "speedup_vs_torch", "speedup_vs_jax", "cause"]


class _Overrun(Exception):
    pass


def measure(name: str, small: bool, timeout: float, repeat: int = 7) -> dict:
    import jax

    import sparsad.coarsen as coarsen
    from bench.coarsen import SETTLE_ROUNDS, gradient_reference, per_call_time, relative_error
    from bench.corpora.coarsen import CASES_BY_NAME, draw
    from sparsad.coarsen import tiers

    case = CASES_BY_NAME[name]
    row: dict = {"function": name}
    gradient = coarsen.grad(case.torch_fn, case.argnums)
    args = draw(case, 0, small)

    def overrun(*_):
        raise _Overrun()

    previous = signal.signal(signal.SIGALRM, overrun)
    signal.alarm(max(1, int(timeout)))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for key in ("first_call_s", "second_call_s"):
                start = time.perf_counter()
                gradient(*args)
                row[key] = time.perf_counter() - start
            for _ in range(SETTLE_ROUNDS):  # background symbolic work and Numba tiers: the steady state
                tiers.wait()
                out = gradient(*args)
        fallbacks = [str(w.message).split("autograd: ", 1)[-1] for w in caught
                     if issubclass(w.category, coarsen.CoarsenFallbackWarning)]
        row["status"] = "fallback" if fallbacks else "coarsened"
        row["cause"] = fallbacks[0][:110] if fallbacks else ""
        row["rel_err"] = relative_error(out, gradient_reference(case.torch_fn, args, case.argnums))
        leaves = [a.detach().clone().requires_grad_(i in case.argnums) if isinstance(a, torch.Tensor) else a
                  for i, a in enumerate(args)]
        wanted = [leaves[i] for i in case.argnums]
        t_torch = per_call_time(lambda: torch.autograd.grad(case.torch_fn(*leaves), wanted, allow_unused=True),
                                repeat=repeat)
        t_coarsen = per_call_time(lambda: gradient(*args), repeat=repeat)
        signal.alarm(0)
        row.update(torch_ms=1e3 * t_torch, coarsen_ms=1e3 * t_coarsen, speedup_vs_torch=t_torch / t_coarsen)
        with jax.enable_x64(True):
            jargs = draw(case, 0, small, "jax")
            static = tuple(i for i, a in enumerate(jargs) if not isinstance(a, jax.Array))
            jitted = jax.jit(jax.grad(case.jax_fn, argnums=case.argnums), static_argnums=static)
            jax.block_until_ready(jitted(*jargs))
            t_jax = per_call_time(lambda: jax.block_until_ready(jitted(*jargs)), repeat=repeat)
        row.update(jax_ms=1e3 * t_jax, speedup_vs_jax=t_jax / t_coarsen)
    except _Overrun:
        row.update(status="timeout", cause=f"no result within {timeout:.0f} s")
    except Exception as why:  # a failure is a finding, not the end of the run
        row.setdefault("status", "error")
        row["cause"] = f"{type(why).__name__}: {str(why).splitlines()[0] if str(why) else ''}"[:110]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return row


def main(names: list[str] | None = None, small: bool = False, timeout: float = 60.0) -> list[dict]:
    from bench.corpora.coarsen import CASES

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    rows = []
    for name in names or [c.name for c in CASES]:
        rows.append(measure(name, small, timeout))
        print(f"  {name}: {rows[-1]['status']}", file=sys.stderr, flush=True)
    print_table(rows, COLUMNS)
    print(f"CSV: {write_csv('coarsen_percall', rows)}")
    done = [r for r in rows if r["status"] == "coarsened" and "speedup_vs_jax" in r]
    if done:
        plot_bars("coarsen_percall", done, "function", "speedup_vs_jax", name="coarsen_percall_vs_jax",
                  title="corpus: coarsen.grad per call, speed-up over jax.jit(jax.grad)")
        print(f"coarsened {len(done)}: vs jax.jit(jax.grad) median "
              f"{statistics.median(r['speedup_vs_jax'] for r in done):.2f}x, vs torch autograd median "
              f"{statistics.median(r['speedup_vs_torch'] for r in done):.1f}x; slower than torch autograd: "
              f"{[r['function'] for r in done if r['speedup_vs_torch'] < 1] or 'none'}")
    return rows


def compare(before_csv: str, after_csv: str) -> list[dict]:
    """Two runs side by side: per-call speed-ups and statuses; table, CSV and plot in bench/results/."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def load(path):
        with open(path, newline="") as handle:
            return {r["function"]: r for r in csv.DictReader(handle)}

    def number(row, key):
        try:
            return float(row.get(key) or "nan")
        except ValueError:
            return float("nan")

    before, after = load(before_csv), load(after_csv)
    rows = []
    for name, a in after.items():
        if name in before:
            b = before[name]
            rows.append({"function": name, "status_before": b["status"], "status_after": a["status"],
                         "coarsen_us_before": 1e3 * number(b, "coarsen_ms"),
                         "coarsen_us_after": 1e3 * number(a, "coarsen_ms"),
                         "vs_jax_before": number(b, "speedup_vs_jax"), "vs_jax_after": number(a, "speedup_vs_jax"),
                         "vs_torch_before": number(b, "speedup_vs_torch"),
                         "vs_torch_after": number(a, "speedup_vs_torch"),
                         "second_call_s_before": number(b, "second_call_s"),
                         "second_call_s_after": number(a, "second_call_s"), "cause_after": a.get("cause", "")[:70]})
    print_table(rows, list(rows[0]))
    print(f"CSV: {write_csv('coarsen_percall_before_after', rows)}")
    for when in ("before", "after"):
        done = [r for r in rows if r[f"status_{when}"] == "coarsened" and r[f"vs_jax_{when}"] == r[f"vs_jax_{when}"]]
        if done:
            print(f"{when}: coarsened {len(done)}/{len(rows)}; vs jax.jit(jax.grad) median "
                  f"{statistics.median(r[f'vs_jax_{when}'] for r in done):.2f}x; vs torch autograd median "
                  f"{statistics.median(r[f'vs_torch_{when}'] for r in done):.1f}x, min "
                  f"{min(r[f'vs_torch_{when}'] for r in done):.2f}x")
    fig, ax = plt.subplots(figsize=(max(8, 0.25 * len(rows)), 4.5))
    xs = range(len(rows))
    for shift, when in ((-0.2, "before"), (0.2, "after")):
        ax.bar([x + shift for x in xs], [r[f"vs_jax_{when}"] if r[f"status_{when}"] == "coarsened" else 0.0
                                         for r in rows], width=0.4, label=when)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.axhline(1.5, color="grey", linestyle="--", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("coarsen.grad speed-up over jax.jit(jax.grad)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r["function"] for r in rows], rotation=90, fontsize=6)
    ax.legend()
    ax.set_title("corpus: per-call speed before / after (0: not coarsened or not measured)")
    fig.tight_layout()
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    fig.savefig(RESULTS_DIR / "coarsen_percall_before_after.png", dpi=120)
    plt.close(fig)
    return rows


if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--compare" in argv:
        at = argv.index("--compare")
        compare(argv[at + 1], argv[at + 2])
        raise SystemExit(0)
    timeout = 60.0
    if "--timeout" in argv:
        at = argv.index("--timeout")
        timeout = float(argv[at + 1])
        del argv[at:at + 2]
    main([a for a in argv if not a.startswith("--")] or None, small="--small" in argv, timeout=timeout)
