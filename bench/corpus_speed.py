"""CPU-time ratios of corpus derivatives against their closed forms, at real size (issue 11).

`bench/corpus.py` times with the wall clock; on a loaded machine a sub-millisecond kernel is
preempted often enough that its best-of-five can be 30x its own cost. This runner times both
sides with `time.process_time` (CPU time of this process), in the same process, one case after
the other, and writes bench/results/corpus_speed.csv and corpus_speed.png.

    python -m bench.corpus_speed --only=spmm_fro_loss,sddmm_sum [--kinds=grad,vjp]
    python -m bench.corpus_speed --misses     # the 78 cases of MISSES
    python -m bench.corpus_speed --out=NAME   # writes bench/results/NAME.csv/.png instead
"""
from __future__ import annotations

import os
import sys

if "numba" not in sys.modules:
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import statistics
import time
import warnings

from bench.common import plot_bars, print_table, write_csv
from bench.corpus import (KINDS, Budget, call_arguments, cases, closed_form, count_interpreter, direction,
                          fallback_cause, make_derivative, prepare, time_cap)
from bench.corpora.nablasd import ENTRIES

SUITE = "corpus_speed"
# programs (every derivative of each: 78 cases) the issue-11 runs found slow at least once: dense
# operands of sparse products (SpMM loss, SDDMM, GCN), second sparse operands (Hadamard), rows of
# softmax/log-sum-exp, Laplacian forms and MTTKRP on a COO tensor
MISSES = ("spmm_fro_loss", "sddmm_sum", "hadamard_sum", "laplacian_quad", "gcn_tanh_sum", "gcn_layer",
          "row_softmax", "row_lse", "row_log_softmax", "hadamard", "mttkrp3_coo")


def cpu_best(fn, budget_s: float = 1.5, repeat: int = 7) -> float:
    """The least CPU time of up to `repeat` calls (stopping once `budget_s` is spent)."""
    best, spent = float("inf"), 0.0
    for _ in range(repeat):
        start = time.process_time()
        fn()
        took = time.process_time() - start
        best, spent = min(best, took), spent + took
        if spent > budget_s:
            break
    return best


def measure(name: str, wrt: str, kind: str, prepared: dict) -> dict:
    row = dict(program=name, wrt=wrt, kind=kind, status="", out_type="", sparsad_cpu_s="", closed_cpu_s="",
               ratio="", note="")
    try:
        if name not in prepared:
            prepared[name] = prepare(ENTRIES[name], real=True)
        P = prepared[name]
        seed = direction(P, wrt, kind)
        fn, args = make_derivative(P.entry, wrt, kind), call_arguments(P, wrt, kind, seed)
        with warnings.catch_warnings(record=True) as caught, count_interpreter() as counter, time_cap(90):
            warnings.simplefilter("always")
            result = fn(**args)  # the first call compiles
        row["status"] = "fallback" if fallback_cause(caught, counter["n"]) else "compiled"
        row["out_type"] = type(result).__name__
        with time_cap(60):
            row["sparsad_cpu_s"] = cpu_best(lambda: fn(**args))
        reference = closed_form(P, wrt, kind, seed)
        if reference is not None:
            reference()
            row["closed_cpu_s"] = cpu_best(reference)
            if row["closed_cpu_s"] > 0:
                row["ratio"] = row["sparsad_cpu_s"] / row["closed_cpu_s"]
    except Budget as error:
        row.update(status="timeout", note=str(error))
    except Exception as error:  # recorded: the run goes on
        if isinstance(error.__cause__, Budget):  # the cap's alarm fired inside a Numba call
            row.update(status="timeout", note=str(error.__cause__))
        else:
            row.update(status="error", note=f"{type(error).__name__}: {error}"[:200])
    return row


def main(only: list[str] | None = None, kinds: tuple = KINDS, suite: str = SUITE) -> list[dict]:
    try:
        import numba

        numba.set_num_threads(1)
    except Exception:  # noqa: BLE001
        pass
    warnings.simplefilter("ignore")
    from threadpoolctl import threadpool_limits

    prepared: dict = {}
    # BLAS in the closed forms single-threaded too: on a loaded machine its 2 threads spin and
    # cost 5-10x the CPU time of one
    with threadpool_limits(limits=1):
        rows = [measure(e.name, wrt, kind, prepared)
                for e, wrt, kind in cases([ENTRIES[n] for n in only] if only else None, kinds)]
    print_table(rows, ("program", "wrt", "kind", "status", "out_type", "sparsad_cpu_s", "closed_cpu_s", "ratio", "note"))
    path = write_csv(suite, rows)
    timed = [dict(r, label=f"{r['program']}/{r['wrt']}/{r['kind']}") for r in rows if isinstance(r["ratio"], float)]
    if timed:
        timed.sort(key=lambda r: -r["ratio"])
        plot_bars(suite, timed[:80], "label", "ratio", title="sparsad CPU time / closed-form CPU time")
        ratios = sorted(r["ratio"] for r in timed)
        print(f"{len(ratios)} timed: median {statistics.median(ratios):.3g}x, worst {ratios[-1]:.3g}x "
              f"({timed[0]['label']}), within 5x {sum(x <= 5 for x in ratios)}, within 2x {sum(x <= 2 for x in ratios)}")
    print(f"wrote {path}")
    return rows


if __name__ == "__main__":
    chosen = [a.split("=", 1)[1].split(",") for a in sys.argv[1:] if a.startswith("--only=")]
    kinds = [a.split("=", 1)[1].split(",") for a in sys.argv[1:] if a.startswith("--kinds=")]
    out = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--out=")]
    only = list(MISSES) if "--misses" in sys.argv[1:] else chosen[0] if chosen else None
    main(only=only, kinds=tuple(kinds[0]) if kinds else KINDS, suite=out[0] if out else SUITE)
