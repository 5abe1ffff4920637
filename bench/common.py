"""What every benchmark suite shares: timing, a printed table, a CSV and a PNG plot.

Speed claims are ratios against a competitor measured in the same run, never absolute times.
"""
from __future__ import annotations

import csv
import statistics
import time
from pathlib import Path
from typing import Callable, Iterable

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def best_time(fn: Callable[[], object], repeat: int = 5, warmup: int = 1, budget_s: float = 10.0,
              reduce: Callable[[list], float] = statistics.median) -> float:
    """Median (or `reduce`) wall time of `fn` in seconds over `repeat` runs after `warmup` runs
    (stops early past budget)."""
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return reduce(times)


def steady_time(fn: Callable[[], object], repeat: int = 3, budget_s: float = 0.25, batch_s: float = 1e-3,
                max_batches: int = 10) -> float:
    """Least time per call of `fn` over at least `repeat` batches (more while within `budget_s`, up
    to `max_batches`), after one warm-up call. A call shorter than `batch_s` runs k times per batch,
    k calls lasting about `batch_s` (k from calling it for a quarter of that first), so that
    neither the timer's own cost nor one preemption of the process lands on a single microsecond
    call; a longer call is one call per batch (then this is `best_time(fn, repeat, warmup=1,
    budget_s, reduce=min)`). Every tool compared in a run is timed this way.

    >>> steady_time(lambda: sum(range(10))) < 1e-3
    True
    """
    fn()  # warm-up
    calls, start = 0, time.perf_counter()
    while True:  # calibration, also the first sample
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= batch_s / 4:
            break
    best = elapsed / calls
    calls = 1 if calls == 1 and elapsed >= batch_s else max(1, int(batch_s * calls / elapsed))
    for done in range(2, max(repeat, max_batches) + 1):
        if calls == 1 and done > repeat:
            break  # long calls: `repeat` of them at most, as best_time
        if time.perf_counter() - start > budget_s and (calls == 1 or done > repeat):
            break
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def print_table(rows: list[dict], columns: Iterable[str] | None = None) -> None:
    if not rows:
        print("(no rows)")
        return
    columns = list(columns or rows[0].keys())

    def fmt(value):
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value)

    cells = [[fmt(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)))


def write_csv(suite: str, rows: list[dict]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{suite}.csv"
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def plot_lines(suite: str, rows: list[dict], x: str, y: str, series: str, *, title: str = "",
               logx: bool = True, logy: bool = True, name: str | None = None) -> Path:
    """One line per value of `series`, `y` against `x`; written to bench/results/<name>.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label in dict.fromkeys(row[series] for row in rows):
        pts = sorted((row[x], row[y]) for row in rows if row[series] == label)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=str(label))
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title or suite)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    path = RESULTS_DIR / f"{name or suite}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_bars(suite: str, rows: list[dict], label: str, value: str, *, title: str = "",
              logy: bool = True, name: str | None = None) -> Path:
    """A bar per row: `value` (e.g. a speed-up ratio) for each `label`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(max(6.4, 0.5 * len(rows)), 4.2))
    ax.bar([str(r[label]) for r in rows], [r[value] for r in rows])
    if logy:
        ax.set_yscale("log")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_ylabel(value)
    ax.set_title(title or suite)
    ax.tick_params(axis="x", rotation=60, labelsize="small")
    fig.tight_layout()
    path = RESULTS_DIR / f"{name or suite}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
