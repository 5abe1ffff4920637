"""Dense matrix products of loop nests: scalar loops vs BLAS (codegen/matvec.py, codegen/dense_loops.py).

Two tables, one run, single thread:
- `thresholds`: per block shape, the time of a row-sum nest as Numba runs it (scalar reduction),
  as per-row BLAS dots (`rt.dot`), as one gemv (`rt.matvec`); of a scaled-row nest (vectorised by
  Numba) vs one transposed gemv (`rt.vecmat`); of a three-loop product vs one gemm (`rt.matmat`).
  These set DOT_MIN_LENGTH, MATVEC_MIN_SIZE, VECMAT_MIN_SIZE and MATMAT_MIN_SIZE.
- `programs`: compiled sparsad derivatives of dense programs vs their NumPy closed forms.

Run `python -m bench.blas_nests [--quick]`; writes bench/results/blas_nests.csv and blas_nests.png.
"""
from __future__ import annotations

import os
import sys

if "numpy" not in sys.modules:  # single thread, as the corpus bench: both sides call the same BLAS
    for _blas_threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_blas_threads, "1")

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

from bench.common import best_time, plot_bars, print_table, write_csv  # noqa: E402
from sparsad.codegen import runtime as rt  # noqa: E402

SUITE = "blas_nests"


@njit(cache=True)
def _row_sums(M, v, rows, cols, out):
    for i in range(rows):
        total = 0.0
        for j in range(cols):
            total += v[j] * M[i * cols + j]
        out[i] += total


@njit(cache=True)
def _row_dots(M, v, rows, cols, out):
    for i in range(rows):
        out[i] += rt.dot(v, 0, M, i * cols, cols)


@njit(cache=True)
def _one_matvec(M, v, rows, cols, out):
    y = rt.matvec(M, 0, rows, cols, cols, v, 0)
    for i in range(rows):
        out[i] += y[i]


@njit(cache=True)
def _scaled_rows(M, u, rows, cols, out):
    for i in range(rows):
        for j in range(cols):
            out[j] += u[i] * M[i * cols + j]


@njit(cache=True)
def _one_vecmat(M, u, rows, cols, out):
    z = rt.vecmat(u, 0, M, 0, rows, cols, cols)
    for j in range(cols):
        out[j] += z[j]


@njit(cache=True)
def _product_loops(A, B, m, k, n, out):
    for s in range(k):
        for p in range(m):
            for q in range(n):
                out[p * n + q] += A[p * k + s] * B[s * n + q]


@njit(cache=True)
def _one_matmat(A, B, m, k, n, out):
    c = rt.matmat(A, 0, m, k, k, False, B, 0, k, n, n, False)
    for t in range(m * n):
        out[t] += c[t]


def _us(fn, *args) -> float:
    return 1e6 * best_time(lambda: fn(*args), repeat=200, warmup=2, budget_s=2.0, reduce=min)


def thresholds(quick: bool) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    shapes = [(16, 16), (32, 32), (64, 64), (50, 128), (300, 200)] if quick else \
        [(8, 8), (16, 16), (32, 32), (64, 64), (50, 96), (50, 128), (50, 200), (200, 16), (1000, 16), (300, 200),
         (16, 1433)]
    for r, c in shapes:
        M, v, u = rng.standard_normal(r * c), rng.standard_normal(c), rng.standard_normal(r)
        out_r, out_c = np.zeros(r), np.zeros(c)
        rows.append(dict(table="matvec", shape=f"{r}x{c}", size=r * c, loops_us=_us(_row_sums, M, v, r, c, out_r),
                         row_dots_us=_us(_row_dots, M, v, r, c, out_r), blas_us=_us(_one_matvec, M, v, r, c, out_r)))
        rows.append(dict(table="vecmat", shape=f"{r}x{c}", size=r * c, loops_us=_us(_scaled_rows, M, u, r, c, out_c),
                         row_dots_us=float("nan"), blas_us=_us(_one_vecmat, M, u, r, c, out_c)))
    for m, k, n in [(8, 8, 8), (16, 16, 16), (32, 16, 16), (32, 32, 32)] + ([] if quick else [(200, 32, 16)]):
        A, B, out = rng.standard_normal(m * k), rng.standard_normal(k * n), np.zeros(m * n)
        rows.append(dict(table="matmat", shape=f"{m}x{k}x{n}", size=m * k * n,
                         loops_us=_us(_product_loops, A, B, m, k, n, out), row_dots_us=float("nan"),
                         blas_us=_us(_one_matmat, A, B, m, k, n, out)))
    for row in rows:
        row["loops_over_blas"] = row["loops_us"] / row["blas_us"]
    return rows


BILINEAR = "sum(<i, r> in M) sum(<j, m> in r) u(i) * m * v(j)"
LEAST_SQUARES = "sum(<i, r> in X) let z = (sum(<j, a> in r) a * w(j)) - y(i) in z * z"
MATMUL = "sum(<i, r> in A) { i -> sum(<k, a> in r) a * B(k) }"


def programs(quick: bool) -> list[dict]:
    import sparsad

    rng = np.random.default_rng(1)
    n, m = (60, 40) if quick else (300, 200)
    M, u, v = rng.standard_normal((n, m)), rng.standard_normal(n), rng.standard_normal(m)
    y = rng.standard_normal(n)
    B, G = rng.standard_normal((m, 32)), rng.standard_normal((n, 32))
    cases = [
        ("bilinear_dense grad u", sparsad.grad(BILINEAR, wrt="u"), dict(M=M, u=u, v=v), lambda: M @ v),
        ("bilinear_dense grad v", sparsad.grad(BILINEAR, wrt="v"), dict(M=M, u=u, v=v), lambda: M.T @ u),
        ("dense lsq grad w", sparsad.grad(LEAST_SQUARES, wrt="w"), dict(X=M, w=v, y=y),
         lambda: 2.0 * M.T @ (M @ v - y)),
        ("dense A @ B", sparsad.compile(MATMUL, formats={"A": "dense"}), dict(A=M, B=B), lambda: M @ B),
        ("A @ B vjp B", sparsad.vjp(MATMUL, wrt="B"), dict(A=M, B=B, cotangent=G), lambda: M.T @ G),
        ("A @ B vjp A", sparsad.vjp(MATMUL, wrt="A"), dict(A=M, B=B, cotangent=G), lambda: G @ B.T),
    ]
    rows = []
    for name, fn, args, closed in cases:
        got = np.asarray(fn(**args), dtype=float)
        expected = closed()
        error = float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-300))
        ours = best_time(lambda: fn(**args), repeat=200, warmup=2, budget_s=3.0, reduce=min)
        theirs = best_time(closed, repeat=200, warmup=2, budget_s=3.0, reduce=min)
        rows.append(dict(case=name, shape=f"{n}x{m}", sparsad_us=1e6 * ours, closed_us=1e6 * theirs,
                         ratio=ours / theirs, max_rel_err=error, load1=os.getloadavg()[0]))
    return rows


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    limits = thresholds(quick)
    print_table(limits)
    measured = programs(quick)
    print_table(measured)
    print(f"wrote {write_csv(SUITE, limits + measured)}")
    print(f"wrote {plot_bars(SUITE, measured, 'case', 'ratio', title='sparsad / NumPy closed form (dense)', logy=False)}")


if __name__ == "__main__":
    main(sys.argv[1:])
