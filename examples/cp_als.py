"""CP decomposition by alternating least squares, derived by AD (AutoHOOT §3 and §5.4).

Each update is Newton's step on its quadratic subproblem, written as
    A_new = A - tensordot(tensorinv(hessian(loss, A)), grad(loss, A))
and `optimize` turns it into the classical form: the Gram-matrix inverse (a structured inverse of
the Kronecker-structured Hessian) applied to an MTTKRP contracted along a dimension tree.
The fit is compared with tensorly.decomposition.parafac.

Run: python examples/cp_als.py
"""
from __future__ import annotations

import string
import time
from functools import lru_cache

import numpy as np

from sparsad import tensor as T
from sparsad._data import real_tensors


def cp_graph(shape, rank):
    """Variables, loss 0.5 ||X - [[A_1, ..., A_N]]||^2 and the optimized ALS updates."""
    letters = string.ascii_lowercase[:len(shape)]
    X = T.Variable("X", shape)
    factors = [T.Variable(f"A{n}", (s, rank)) for n, s in enumerate(shape)]
    model = T.einsum(",".join(f"{c}z" for c in letters) + "->" + letters, *factors)
    residual = X - model
    loss = 0.5 * T.einsum(f"{letters},{letters}->", residual, residual)
    updates = []
    for site in factors:
        hess = T.hessian(loss, [site])[0][0]
        updates.append(site - T.tensordot(T.tensorinv(hess), T.grad(loss, site)))
    *optimized, loss_opt = T.optimize(updates + [loss], dimension_tree=factors)
    return X, factors, loss_opt, updates, optimized


def frobenius(x: np.ndarray) -> float:
    """||x|| by an elementwise sum: a BLAS dot wakes BLAS threads, costly on a busy machine."""
    flat = x.reshape(-1)
    return float(np.sqrt(np.einsum("i,i->", flat, flat)))


def fit_of(x: np.ndarray, factors: list[np.ndarray]) -> float:
    letters = string.ascii_lowercase[:x.ndim]
    approx = np.einsum(",".join(f"{c}z" for c in letters) + "->" + letters, *factors)
    return 1.0 - np.linalg.norm(x - approx) / np.linalg.norm(x)


class CPALS:
    """The optimized ALS updates for one shape and rank, planned once and run for many sweeps.

    CPALS.for_shape(shape, rank) caches one solver per (shape, rank): building and optimizing the
    graph is paid once per shape, not per call.
    """

    @classmethod
    @lru_cache(maxsize=32)
    def for_shape(cls, shape: tuple, rank: int) -> "CPALS":
        return cls(shape, rank)

    def __init__(self, shape, rank):
        self.X, self.factors, self.loss, _, self.updates = cp_graph(tuple(shape), rank)
        # reuse=True keeps the dimension-tree intermediates (X times the last factor) between
        # the updates of one sweep.
        self.executor = T.Executor(self.updates + [self.loss], reuse=True)

    def sweep(self, x: np.ndarray, vals: list[np.ndarray]) -> list[np.ndarray]:
        for n, update in enumerate(self.updates):
            feed = {self.X: x, **dict(zip(self.factors, vals))}
            (vals[n],) = self.executor.run(feed, out=[update])
        return vals

    def fit(self, x: np.ndarray, vals: list[np.ndarray], x_norm: float | None = None) -> float:
        """1 - ||X - [[A]]|| / ||X|| from the optimized loss graph (Gram matrices, no s^N model)."""
        (loss,) = self.executor.run({self.X: x, **dict(zip(self.factors, vals))}, out=[self.loss])
        x_norm = frobenius(x) if x_norm is None else x_norm
        return 1.0 - np.sqrt(max(2.0 * float(loss), 0.0)) / x_norm


def cp_als(x: np.ndarray, rank: int, n_iter: int = 50, seed: int = 0, init=None, tol: float = 0.0,
           solver: CPALS | None = None, track_fit: bool = True):
    """ALS with the AD-derived, optimized updates. Returns (factors, fits per sweep); with
    track_fit=False (and tol=0) only the final fit is computed, as tensorly does without tol."""
    solver = solver or CPALS.for_shape(tuple(x.shape), int(rank))
    rng = np.random.default_rng(seed)
    vals = [np.array(f) for f in init] if init is not None else [rng.random((s, rank)) for s in x.shape]
    fits = []
    x_norm = frobenius(x)
    for _ in range(n_iter):
        vals = solver.sweep(x, vals)
        if track_fit or tol:
            fits.append(solver.fit(x, vals, x_norm))
        if tol and len(fits) > 1 and abs(fits[-1] - fits[-2]) < tol:
            break
    if not fits:
        fits.append(solver.fit(x, vals, x_norm))
    return vals, fits


def low_rank_tensor(shape, rank, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    factors = [rng.standard_normal((s, rank)) for s in shape]
    letters = string.ascii_lowercase[:len(shape)]
    x = np.einsum(",".join(f"{c}z" for c in letters) + "->" + letters, *factors)
    return x + noise * np.linalg.norm(x) / np.sqrt(x.size) * rng.standard_normal(shape)


def compare_with_tensorly(x: np.ndarray, rank: int, n_iter: int, seed: int = 0) -> dict:
    from tensorly.decomposition import parafac

    rng = np.random.default_rng(seed)
    init = [rng.random((s, rank)) for s in x.shape]
    t0 = time.perf_counter()
    ours, fits = cp_als(x, rank, n_iter, init=init)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    cp = parafac(x, rank, n_iter_max=n_iter, init=(np.ones(rank), [f.copy() for f in init]), tol=0,
                 normalize_factors=False)
    t_tl = time.perf_counter() - t0
    weights, theirs = cp
    theirs = [theirs[0] * weights] + list(theirs[1:])
    return {"fit_sparsad": fits[-1], "fit_tensorly": fit_of(x, theirs), "time_sparsad_s": t_ours,
            "time_tensorly_s": t_tl}


def main(small: bool = False) -> list[dict]:
    shape, rank, n_iter = ((6, 7, 8), 3, 30) if small else ((60, 60, 60), 10, 50)
    x = low_rank_tensor(shape, rank, noise=0.01)
    rows = [{"tensor": f"synthetic {shape}", "rank": rank, **compare_with_tensorly(x, rank, n_iter)}]
    for name, data in real_tensors(limit_mb=4.0 if small else 50.0):
        r = 2 if small else 5
        rows.append({"tensor": name, "rank": r, **compare_with_tensorly(data, r, 10 if small else n_iter)})
    for row in rows:
        print(f"{row['tensor']:>32s} rank {row['rank']:2d}: fit sparsad {row['fit_sparsad']:.6f}  "
              f"tensorly {row['fit_tensorly']:.6f}  ({row['time_sparsad_s']:.3f}s vs {row['time_tensorly_s']:.3f}s)")
    return rows


if __name__ == "__main__":
    main()
