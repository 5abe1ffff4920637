"""Tucker decomposition by HOOI with AD-derived, dimension-tree-optimized kernels (AutoHOOT Fig. 7d).

With orthonormal factors, HOOI maximises f = 0.5 ||G||^2 for the core G = X x_1 A_1^T ... x_N A_N^T.
For mode n, grad(f, A_n) = Y_n Y_n^T A_n where Y_n = X x_{m != n} A_m^T is the TTMc; the update is the
leading left singular vectors of Y_n (mode-n unfolding). The TTMc of every mode is the Jacobian of
the core with respect to A_n contracted away, i.e. an einsum that `optimize(..., dimension_tree=...)`
orders so that consecutive modes share their first contractions. Compared with
tensorly.decomposition.tucker (also HOOI).

Run: python examples/tucker_hooi.py
"""
from __future__ import annotations

import string
import sys
import time
from functools import lru_cache
from pathlib import Path

import numpy as np

from sparsad import tensor as T
from sparsad._data import real_tensors

sys.path.insert(0, str(Path(__file__).resolve().parent))


@lru_cache(maxsize=32)
def tucker_graph(shape, ranks):
    """(X, factors, optimized TTMc nodes, objective), built and optimized once per shape and ranks."""
    letters = string.ascii_lowercase[:len(shape)]
    core_letters = string.ascii_uppercase[:len(shape)]
    X = T.Variable("X", shape)
    factors = [T.Variable(f"A{n}", (s, r)) for n, (s, r) in enumerate(zip(shape, ranks))]
    core = T.einsum(letters + "," + ",".join(f"{a}{b}" for a, b in zip(letters, core_letters)) + "->" + core_letters,
                    X, *factors)
    objective = 0.5 * T.einsum(f"{core_letters},{core_letters}->", core, core)
    # The TTMc of mode n from the core's explicit Jacobian w.r.t. A_n (shape core + (s_n, r_n)):
    # J[.., a_n, .., i, r] = delta(a_n, r) Y_n[i, ..]; tracing a_n against r gives r_n Y_n.
    ttmcs = []
    for n, site in enumerate(factors):
        J = T.jacobian(core, site)
        others = core_letters[:n] + core_letters[n + 1:]
        spec = f"{core_letters[:n]}z{core_letters[n + 1:]}yz->y{others}"
        ttmcs.append(T.Scale(1.0 / ranks[n], T.einsum(spec, J)))
    optimized = T.optimize(ttmcs + [objective], dimension_tree=factors)
    return X, factors, optimized[:-1], optimized[-1]


@lru_cache(maxsize=32)
def _executor(shape, ranks):
    X, factors, ttmcs, objective = tucker_graph(shape, ranks)
    return X, factors, ttmcs, objective, T.Executor(ttmcs + [objective], reuse=True)


def leading_left_singular_vectors(m: np.ndarray, r: int) -> np.ndarray:
    """The r leading left singular vectors of a matrix. A wide matrix (rows <= columns, as the
    unfoldings here are) goes through the eigenvectors of its small Gram matrix m m^T; a tall one
    through a thin SVD."""
    rows, cols = m.shape
    if rows <= cols:
        _, vecs = np.linalg.eigh(m @ m.T)
        return vecs[:, ::-1][:, :r]
    return np.linalg.svd(m, full_matrices=False)[0][:, :r]


def hooi(x: np.ndarray, ranks, n_iter: int = 20, init=None):
    X, factors, ttmcs, objective, executor = _executor(tuple(x.shape), tuple(int(r) for r in ranks))
    if init is None:   # HOSVD initialisation, as tensorly's default
        init = []
        for n, r in enumerate(ranks):
            unfold = np.moveaxis(x, n, 0).reshape(x.shape[n], -1)
            init.append(leading_left_singular_vectors(unfold, r))
    vals = [np.array(a) for a in init]
    history = []
    x_sq = float(np.einsum("i,i->", x.reshape(-1), x.reshape(-1)))
    for _ in range(n_iter):
        for n, node in enumerate(ttmcs):
            (y,) = executor.run({X: x, **dict(zip(factors, vals))}, out=[node])
            vals[n] = leading_left_singular_vectors(y.reshape(y.shape[0], -1), ranks[n])
        (f,) = executor.run({X: x, **dict(zip(factors, vals))}, out=[objective])
        history.append(np.sqrt(max(0.0, 1 - 2 * f / x_sq)))   # relative error
    return vals, history


def compare_with_tensorly(x: np.ndarray, ranks, n_iter: int) -> dict:
    """Relative errors and times of our HOOI and tensorly's on the same tensor and iterations."""
    from tensorly.decomposition import tucker

    t0 = time.perf_counter()
    _, err = hooi(x, ranks, n_iter)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    tl_core, tl_factors = tucker(x, rank=list(ranks), n_iter_max=n_iter, tol=0, init="svd")
    t_tl = time.perf_counter() - t0
    tl_err = np.linalg.norm(x - reconstruct(tl_core, tl_factors)) / np.linalg.norm(x)
    return {"error_sparsad": err[-1], "error_tensorly": tl_err, "time_sparsad_s": t_ours, "time_tensorly_s": t_tl}


def reconstruct(core: np.ndarray, factors) -> np.ndarray:
    letters, core_letters = string.ascii_lowercase[:core.ndim], string.ascii_uppercase[:core.ndim]
    spec = core_letters + "," + ",".join(f"{a}{b}" for a, b in zip(letters, core_letters)) + "->" + letters
    return np.einsum(spec, core, *factors)


def main(small: bool = False) -> dict:
    shape, ranks, n_iter = ((8, 9, 10), (3, 3, 4), 15) if small else ((80, 80, 80), (10, 10, 10), 20)
    rng = np.random.default_rng(0)
    core = rng.standard_normal(ranks)
    mats = [np.linalg.qr(rng.standard_normal((s, r)))[0] for s, r in zip(shape, ranks)]
    x = reconstruct(core, mats) + 0.05 * rng.standard_normal(shape)
    result = compare_with_tensorly(x, ranks, n_iter)
    rows = [{"tensor": f"synthetic {shape}", "ranks": ranks, **result}]
    for name, data in real_tensors(limit_mb=4.0 if small else 50.0):
        r = tuple(min(d, 3 if small else 5) for d in data.shape)
        rows.append({"tensor": name, "ranks": r, **compare_with_tensorly(data, r, 5 if small else n_iter)})
    for row in rows:
        print(f"Tucker-HOOI {row['tensor']:>28s} ranks {row['ranks']}: rel. error sparsad "
              f"{row['error_sparsad']:.8f} ({row['time_sparsad_s']:.2f}s), tensorly "
              f"{row['error_tensorly']:.8f} ({row['time_tensorly_s']:.2f}s)")
    return {**result, "rows": rows}


if __name__ == "__main__":
    main()
