"""Sparse solves on NumPy arrays: triangular (Numba), direct (SuperLU via SciPy), and CG.

`cg` is written against the array protocol only (arithmetic, `.sum(0)`, comparisons), so the
same loop runs on NumPy arrays and on PyTorch tensors on any device.
"""
from __future__ import annotations

import warnings
from typing import Callable

import numpy as np

from sparsad.errors import InputError, ShapeError, UnsupportedError
from sparsad.ops import kernels
from sparsad.ops.pattern import CSRPattern


class ConvergenceWarning(RuntimeWarning):
    """An iterative solver stopped at maxiter before reaching its tolerance."""


def check_triangular(pattern: CSRPattern, values: np.ndarray, lower: bool, unit: bool, name: str = "L") -> None:
    """Raise unless `pattern` is square, triangular on the given side, with a usable diagonal."""
    n, m = pattern.shape
    if n != m:
        raise ShapeError(f"{name} must be square for a triangular solve, got shape {pattern.shape}")
    wrong = pattern.indices > pattern.rows if lower else pattern.indices < pattern.rows
    if wrong.any():
        p = int(np.argmax(wrong))
        side = "above" if lower else "below"
        raise InputError(f"{name} has an entry {side} the diagonal at ({pattern.rows[p]}, {pattern.indices[p]}); "
                         f"pass lower={not lower} or drop those entries")
    if not unit:
        pos = pattern.diagonal_positions
        missing = np.flatnonzero((pos < 0) | (values[np.maximum(pos, 0)] == 0))
        if missing.size:
            raise InputError(f"{name} is singular: diagonal entry ({missing[0]}, {missing[0]}) is zero or not "
                             "stored; pass unit_diagonal=True if the diagonal is implicitly 1")


def triangular_solve(pattern: CSRPattern, values: np.ndarray, b: np.ndarray, lower: bool = True,
                     unit: bool = False) -> np.ndarray:
    """x with T x = b, T triangular in CSR (b of shape (n,) or (n, C)); inputs validated by the caller."""
    rhs = b[:, None] if b.ndim == 1 else b
    out = np.zeros(rhs.shape, dtype=np.result_type(values, rhs))
    kernels.csr_trisolve(pattern.indptr, pattern.indices, values, np.ascontiguousarray(rhs), lower, unit, out)
    return out[:, 0] if b.ndim == 1 else out


class LUFactor:
    """SuperLU factorisation of a square CSR matrix, solving with A or A^T (reused by the backward)."""

    def __init__(self, pattern: CSRPattern, values: np.ndarray, name: str = "A"):
        import scipy.sparse.linalg

        if pattern.shape[0] != pattern.shape[1]:
            raise ShapeError(f"{name} must be square to solve with it, got shape {pattern.shape}")
        if values.dtype not in (np.float32, np.float64):
            raise UnsupportedError(f"{name} must be float32 or float64 for SuperLU, got {values.dtype}")
        matrix = pattern.to_scipy(values).tocsc()
        try:
            self.lu = scipy.sparse.linalg.splu(matrix)
        except RuntimeError as exc:  # SuperLU reports exact singularity this way
            raise InputError(f"{name} is singular (SuperLU: {exc}); a direct solve needs an invertible matrix") from None
        self.dtype = values.dtype

    def solve(self, b: np.ndarray, transpose: bool = False) -> np.ndarray:
        out = self.lu.solve(np.asarray(b, dtype=self.dtype), trans="T" if transpose else "N")
        return np.ascontiguousarray(out)


def cg(matvec: Callable, b, *, tol: float = 1e-10, maxiter: int | None = None, x0=None,
       name: str = "cg"):
    """Conjugate gradients for SPD systems, columns of b solved together.

    Stops when every column's residual norm is at most tol * ||b column||. Returns (x, iterations).
    Warns ConvergenceWarning at maxiter (default 10 n).
    """
    n = b.shape[0]
    maxiter = 10 * n if maxiter is None else int(maxiter)
    x = b * 0 if x0 is None else x0 * 1
    r = b - matvec(x) if x0 is not None else b * 1
    p = r * 1
    rs = (r * r).sum(0)
    target = tol * tol * (b * b).sum(0)
    for it in range(maxiter + 1):
        if bool((rs <= target).all()):
            return x, it
        if it == maxiter:
            break
        ap = matvec(p)
        pap = (p * ap).sum(0)
        alpha = rs / (pap + (pap == 0))
        x = x + alpha * p
        r = r - alpha * ap
        rs_new = (r * r).sum(0)
        p = r + (rs_new / (rs + (rs == 0))) * p
        rs = rs_new
    ratio = float(((rs / (target + (target == 0))) ** 0.5).max()) * tol
    warnings.warn(f"{name}: no convergence in {maxiter} iterations (relative residual {ratio:.2e} > tol {tol:g}); "
                  "raise maxiter or precondition the system", ConvergenceWarning, stacklevel=3)
    return x, maxiter
