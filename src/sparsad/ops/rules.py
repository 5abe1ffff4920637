"""Forward, VJP and JVP rules of the sparse ops on NumPy arrays (framework-neutral).

A sparse operand is a (CSRPattern, values) pair; its cotangent/tangent is a values array on the
same pattern (the masked convention). The PyTorch bridge builds the same rules from
differentiable pieces; a JAX bridge can wrap these directly.
"""
from __future__ import annotations

import numpy as np

from sparsad.ops.contract import contract, spmm_terms
from sparsad.ops.pattern import CSRPattern
from sparsad.ops.solve import LUFactor, triangular_solve


def _cols(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x[:, None] if x.ndim == 1 else x)


def _like(result: np.ndarray, x: np.ndarray) -> np.ndarray:
    return result[:, 0] if x.ndim == 1 else result


def masked_outer(p: CSRPattern, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """(left right^T) ⊙ mask(p), as values on p (left: rows side, right: columns side)."""
    return contract(spmm_terms(p), 0, {1: _cols(right), 2: _cols(left)})


# -- products -------------------------------------------------------------------------------------
def spmm(p: CSRPattern, a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A x for x of shape (n,) or (n, k)."""
    return _like(contract(spmm_terms(p), 2, {0: a, 1: _cols(x)}), x)


def spmm_vjp(p: CSRPattern, a: np.ndarray, x: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(V x^T ⊙ mask(A), A^T V)."""
    return masked_outer(p, v, x), _like(contract(spmm_terms(p), 1, {0: a, 2: _cols(v)}), v)


def spmm_jvp(p: CSRPattern, a: np.ndarray, x: np.ndarray, da: np.ndarray, dx: np.ndarray) -> np.ndarray:
    return spmm(p, da, x) + spmm(p, a, dx)


def spmv(p, a, x, alpha=1.0, beta=0.0, y=None) -> np.ndarray:
    """w = alpha A x + beta y."""
    w = alpha * spmm(p, a, x)
    return w if y is None else w + beta * y


def spmv_vjp(p, a, x, alpha, beta, y, v) -> dict:
    """Eqs. (16)-(20) of the derivation notes: gradients w.r.t. a, x, y, alpha and beta."""
    ax = spmm(p, a, x)
    ga, gx = spmm_vjp(p, a, x, v)
    return {"a": alpha * ga, "x": alpha * gx, "alpha": float(v @ ax),
            "y": None if y is None else beta * v, "beta": 0.0 if y is None else float(v @ y)}


def spmv_jvp(p, a, x, alpha, beta, y, da, dx, dalpha=0.0, dbeta=0.0, dy=None) -> np.ndarray:
    dw = alpha * spmm_jvp(p, a, x, da, dx) + dalpha * spmm(p, a, x)
    if y is not None:
        dw = dw + dbeta * y + (0.0 if dy is None else beta * dy)
    return dw


def spgemm(pa: CSRPattern, a: np.ndarray, pb: CSRPattern, b: np.ndarray) -> tuple[CSRPattern, np.ndarray]:
    pc, terms = pa.matmul(pb)
    return pc, contract(terms, 2, {0: a, 1: b[:, None]})[:, 0]


def spgemm_vjp(pa, a, pb, b, v) -> tuple[np.ndarray, np.ndarray]:
    """(V B^T ⊙ mask(A), A^T V ⊙ mask(B)) for V on the product's pattern."""
    _, terms = pa.matmul(pb)
    return (contract(terms, 0, {1: b[:, None], 2: v[:, None]}),
            contract(terms, 1, {0: a, 2: v[:, None]})[:, 0])


def spgemm_jvp(pa, a, pb, b, da, db) -> np.ndarray:
    return spgemm(pa, da, pb, b)[1] + spgemm(pa, a, pb, db)[1]


def add(pa, a, pb, b, alpha=1.0, beta=1.0) -> tuple[CSRPattern, np.ndarray]:
    pc, map_a, map_b = pa.union(pb)
    c = np.zeros(pc.nnz, dtype=np.result_type(a, b))
    np.add.at(c, map_a, alpha * a)
    np.add.at(c, map_b, beta * b)
    return pc, c


def add_vjp(pa, a, pb, b, alpha, beta, v) -> dict:
    """alpha V ⊙ mask(A), beta V ⊙ mask(B), <V, A>, <V, B> (not numml's sum of A's entries)."""
    _, map_a, map_b = pa.union(pb)
    return {"a": alpha * v[map_a], "b": beta * v[map_b], "alpha": float(v[map_a] @ a), "beta": float(v[map_b] @ b)}


def add_jvp(pa, a, pb, b, alpha, beta, da, db, dalpha=0.0, dbeta=0.0) -> np.ndarray:
    return (add(pa, da, pb, db, alpha, beta)[1] + add(pa, a, pb, b, dalpha, dbeta)[1])


# -- solves ---------------------------------------------------------------------------------------
def trisolve(p, a, b, lower=True, unit=False) -> np.ndarray:
    return triangular_solve(p, a, b, lower, unit)


def trisolve_vjp(p, a, b, lower, unit, v) -> tuple[np.ndarray, np.ndarray]:
    """(-(L^-T v) x^T ⊙ mask(L), L^-T v); the diagonal gets no gradient when unit."""
    x = trisolve(p, a, b, lower, unit)
    tp, perm = p.transpose
    gb = triangular_solve(tp, a[perm], v, not lower, unit)
    ga = -masked_outer(p, gb, x)
    if unit:
        ga = ga * (p.rows != p.indices)
    return ga, gb


def trisolve_jvp(p, a, b, lower, unit, da, db) -> np.ndarray:
    x = trisolve(p, a, b, lower, unit)
    if unit:
        da = da * (p.rows != p.indices)
    return trisolve(p, a, db - spmm(p, da, x), lower, unit)


def lu_solve_vjp(p, a, b, v, factor: LUFactor | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(-(A^-T v) x^T ⊙ mask(A), A^-T v), one factorisation for both solves."""
    factor = factor or LUFactor(p, a)
    x = factor.solve(b)
    gb = factor.solve(v, transpose=True)
    return -masked_outer(p, gb, x), gb


def lu_solve_jvp(p, a, b, da, db, factor: LUFactor | None = None) -> np.ndarray:
    factor = factor or LUFactor(p, a)
    return factor.solve(db - spmm(p, da, factor.solve(b)))
