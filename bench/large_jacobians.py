"""Matrix-by-matrix Jacobians at real size (issue 11): the two corpus cases that ran past the
corpus bench's 20 s cap (gcn_layer w.r.t. X: 34 M entries; attn_output w.r.t. K: 17 M entries,
on the 11,143-node mesh DIMACS10/fe_4elt2), against a hand-written NumPy closed form that
builds the same COO tensor (the same four sorted coordinate arrays and values).

The corpus has no closed form for a non-scalar program's Jacobian at real size (it builds
small ones from unit cotangents); these are written here from the derivative by hand:

- gcn_layer, Z = tanh(A X W):  dZ[i,o] / dX[j,f] = (1 - Z[i,o]^2) A[i,j] W[f,o]   for A[i,j] stored
- attn_output, O = P V with P the row softmax of (Q K^T on M's pattern):
  dO[i,d] / dK[j,k] = P[i,j] Q[i,k] (V[j,d] - O[i,d])   for M[i,j] stored

    python -m bench.large_jacobians [--quick]

Prints the first call (compile + run), the steady time of sparsad and of the closed form and
their ratio (one run, the least of a few calls, the load average recorded; also their CPU times
and its ratio, steadier on a loaded machine, and the ratio of user times, steadier still when
other processes press on memory), checks that both
give the same tensor, and writes bench/results/large_jacobians.csv and .png.
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import time

import numpy as np

from bench.common import best_time, plot_bars, print_table, write_csv

SUITE = "large_jacobians"


def _pattern(A):
    rows = np.repeat(np.arange(A.shape[0], dtype=np.int64), np.diff(A.indptr))
    return rows, A.indices.astype(np.int64), np.asarray(A.indptr, dtype=np.int64)


def _row_blocks(rows, cols, indptr, blocks: np.ndarray, n_out: int):
    """The COO arrays (i, a, j, b) of a Jacobian whose entries are blocks[e, a, b] at (rows[e], a,
    cols[e], b): sorted by i, then a, then j (the entries of row i in column order), then b."""
    nnz, na, nb = blocks.shape
    start = indptr[rows]  # first entry of the row of every entry
    length = np.diff(indptr)[rows]
    # position of (e, a, b): the row's block, then a, then e's place in its row, then b
    position = (start[:, None, None] * na * nb + np.arange(na)[None, :, None] * length[:, None, None] * nb
                + (np.arange(nnz) - start)[:, None, None] * nb + np.arange(nb)[None, None, :])
    count = nnz * na * nb
    order = position.ravel()
    idx = [np.empty(count, np.int64) for _ in range(4)]
    idx[0][order] = np.broadcast_to(rows[:, None, None], blocks.shape).ravel()
    idx[1][order] = np.broadcast_to(np.arange(na)[None, :, None], blocks.shape).ravel()
    idx[2][order] = np.broadcast_to(cols[:, None, None], blocks.shape).ravel()
    idx[3][order] = np.broadcast_to(np.arange(nb)[None, None, :], blocks.shape).ravel()
    values = np.empty(count)
    values[order] = blocks.ravel()
    return idx, values


def gcn_x_closed_form(I):
    A, X, W = I["A"], I["X"], I["W"]
    rows, cols, indptr = _pattern(A)
    Z = np.tanh(A @ X @ W)
    slope = 1.0 - Z * Z  # n x h
    blocks = slope[rows][:, :, None] * A.data[:, None, None] * W.T[None, :, :]  # (nnz, h, f)
    return _row_blocks(rows, cols, indptr, blocks, Z.shape[1])


def attn_k_closed_form(I):
    M, Q, K, V = I["M"], I["Q"], I["K"], I["V"]
    rows, cols, indptr = _pattern(M)
    scores = np.einsum("ek,ek->e", Q[rows], K[cols])
    weights = np.exp(scores)
    totals = np.bincount(rows, weights, minlength=M.shape[0])
    P = weights / totals[rows]
    out = np.zeros((M.shape[0], V.shape[1]))
    np.add.at(out, rows, P[:, None] * V[cols])
    blocks = (P[:, None, None] * (V[cols] - out[rows])[:, :, None] * Q[rows][:, None, :])  # (nnz, d, k)
    return _row_blocks(rows, cols, indptr, blocks, V.shape[1])


CASES = [("gcn_layer", "X", gcn_x_closed_form), ("attn_output", "K", attn_k_closed_form)]


def _cpu_time(call, repeat: int = 3) -> tuple[float, float]:
    """The least CPU time (this process, user + system) of a few calls, and the least user time:
    on a shared machine the wall time of both sides grows with the load (memory bandwidth too),
    the CPU time less so; the system time (page faults of fresh buffers, which both sides pay)
    grows with the memory pressure other processes make, the user time hardly."""
    best, best_user = float("inf"), float("inf")
    for _ in range(repeat):
        start, user = time.process_time(), os.times().user
        call()
        best = min(best, time.process_time() - start)
        best_user = min(best_user, os.times().user - user)
    return best, best_user


def run(quick: bool = False) -> list[dict]:
    from bench.corpus import call_arguments, make_derivative, prepare
    from bench.corpora.nablasd import ENTRIES

    rows = []
    for program, wrt, closed in CASES:
        P = prepare(ENTRIES[program], real=not quick)
        derivative = make_derivative(P.entry, wrt, "jacobian")
        args = call_arguments(P, wrt, "jacobian", None)
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        ours = derivative(**args)
        first = time.perf_counter() - t0
        idx, reference = closed(P.raw)
        if isinstance(ours, np.ndarray):  # small inputs (--quick): a dense result
            expected = np.zeros(ours.shape)
            expected[tuple(idx)] = reference
            coords, values, reference = None, ours.ravel(), expected.ravel()
            same_pattern = True
        else:
            coords, values = ours.coordinates()
            same_pattern = coords.shape[1] == len(reference) and all(np.array_equal(coords[m], idx[m])
                                                                     for m in range(4))
        error = float(np.max(np.abs(values - reference)) / max(np.max(np.abs(reference)), 1e-300)) \
            if same_pattern else float("nan")
        entries = len(reference)
        del ours, coords, values, idx, reference
        steady = best_time(lambda: derivative(**args), repeat=2, warmup=0, budget_s=60, reduce=min)
        closed_s = best_time(lambda: closed(P.raw), repeat=2, warmup=0, budget_s=60, reduce=min)
        (ours_cpu, ours_user), (closed_cpu, closed_user) = (_cpu_time(lambda: derivative(**args)),
                                                            _cpu_time(lambda: closed(P.raw)))
        rows.append(dict(program=program, wrt=wrt, entries=entries,
                         first_s=first, sparsad_s=steady, closed_s=closed_s, ratio=steady / closed_s,
                         sparsad_cpu_s=ours_cpu, closed_cpu_s=closed_cpu, cpu_ratio=ours_cpu / closed_cpu,
                         user_ratio=ours_user / closed_user,
                         same_pattern=same_pattern, max_rel_err=error, load1=load))
    return rows


def main(argv: list[str]) -> None:
    rows = run(quick="--quick" in argv)
    print_table(rows)
    print(f"wrote {write_csv(SUITE, rows)}")
    for row in rows:
        row["case"] = f"{row['program']}/{row['wrt']}"
    print(f"wrote {plot_bars(SUITE, rows, 'case', 'ratio', title='sparsad / closed form (Jacobian as COO)', logy=False)}")


if __name__ == "__main__":
    main(sys.argv[1:])
