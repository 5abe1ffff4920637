"""Differentiable sparse solves: triangular, direct (SuperLU, factorisation reused in backward), CG.

For x = M^{-1} b the VJP is gb = M^{-T} g and gM = -(gb x^T) masked to M's pattern; the JVP is
dx = M^{-1}(db - dM x). Backward passes are built from the same Functions, so they differentiate
again (create_graph=True).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sparsad.errors import ShapeError, UnsupportedError
from sparsad.ops import solve as _solve
from sparsad.ops.contract import spmm_terms
from sparsad.ops.pattern import CSRPattern
from sparsad.torch._autograd import _evaluate, contract
from sparsad.torch.linalg import _index, check_dense, transpose
from sparsad.torch.matrix import SparseMatrix, as_sparse_matrix


def _masked_outer(pattern: CSRPattern, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """(left right^T) restricted to the pattern: one value per stored entry (differentiable)."""
    return contract(spmm_terms(pattern), 0, {1: right, 2: left})


def _transposed(pattern: CSRPattern, values: torch.Tensor) -> tuple[CSRPattern, torch.Tensor]:
    tpattern, perm = pattern.transpose
    return tpattern, values[_index(perm, values.device, pattern, "perm")]


def _apply(pattern: CSRPattern, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """M x without autograd (for JVPs and iterations)."""
    return _evaluate(spmm_terms(pattern), 2, values, x)


# -- triangular -----------------------------------------------------------------------------------
def _offdiagonal_mask(pattern: CSRPattern, like: torch.Tensor) -> torch.Tensor:
    cache = pattern.__dict__.setdefault("_torch_index", {})
    key = ("offdiag", like.device, like.dtype)
    if key not in cache:
        cache[key] = torch.tensor(pattern.rows != pattern.indices, dtype=like.dtype, device=like.device)
    return cache[key]


def _tri_forward(pattern: CSRPattern, lower: bool, unit: bool, values: torch.Tensor, b: torch.Tensor):
    if values.device.type == "cpu":
        out = _solve.triangular_solve(pattern, values.detach().numpy(), b.detach().contiguous().numpy(), lower, unit)
        return torch.from_numpy(out)
    # Other devices: PyTorch's own CSR triangular solve (not exercised by the CPU-only tests).
    vals = values.detach()
    if unit:
        vals = vals * _offdiagonal_mask(pattern, vals) + (1 - _offdiagonal_mask(pattern, vals))
    matrix = torch.sparse_csr_tensor(torch.tensor(pattern.indptr, device=vals.device),
                                     torch.tensor(pattern.indices, device=vals.device), vals, size=pattern.shape)
    return torch.triangular_solve(b.detach(), matrix, upper=not lower, unitriangular=unit).solution


class _TriSolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pattern, lower, unit, values, b):
        x = _tri_forward(pattern, lower, unit, values, b)
        ctx.pattern, ctx.lower, ctx.unit = pattern, lower, unit
        ctx.save_for_backward(values, x)
        ctx.save_for_forward(values, x)
        return x

    @staticmethod
    def backward(ctx, g):
        values, x = ctx.saved_tensors
        tpattern, tvalues = _transposed(ctx.pattern, values)
        gb = _TriSolve.apply(tpattern, not ctx.lower, ctx.unit, tvalues, g)
        gvalues = None
        if ctx.needs_input_grad[3]:
            gvalues = -_masked_outer(ctx.pattern, gb, x)
            if ctx.unit:
                gvalues = gvalues * _offdiagonal_mask(ctx.pattern, gvalues)
        return None, None, None, gvalues, gb

    @staticmethod
    def jvp(ctx, _p, _l, _u, dvalues, db):
        values, x = ctx.saved_tensors
        rhs = torch.zeros_like(x) if db is None else db
        if dvalues is not None:
            if ctx.unit:
                dvalues = dvalues * _offdiagonal_mask(ctx.pattern, dvalues)
            rhs = rhs - _apply(ctx.pattern, dvalues, x)
        return _tri_forward(ctx.pattern, ctx.lower, ctx.unit, values, rhs)


def _as_columns(A: SparseMatrix, b: Any, name: str = "b") -> tuple[torch.Tensor, bool]:
    b = check_dense(A, b, name, A.shape[0], 0, "length (rows)")
    if b.ndim > 2:
        raise ShapeError(f"{name} must be 1-D or 2-D (n, k), got shape {tuple(b.shape)}")
    return (b[:, None], True) if b.ndim == 1 else (b, False)


def triangular_solve(L: SparseMatrix, b: torch.Tensor, lower: bool = True, unit_diagonal: bool = False,
                     transpose: bool = False) -> torch.Tensor:
    """x with op(L) x = b, op(L) = L or L^T; L lower (or upper) triangular CSR.

    With unit_diagonal the stored diagonal is ignored (taken as 1) and gets no gradient.
    The gradient w.r.t. L is masked: -(L^{-T} g) x^T on L's pattern.
    """
    L = as_sparse_matrix(L, "L")
    _solve.check_triangular(L.pattern, L.values.detach().cpu().numpy(), lower, unit_diagonal)
    matrix, low = (globals()["transpose"](L), not lower) if transpose else (L, lower)
    rhs, vector = _as_columns(matrix, b)
    x = _TriSolve.apply(matrix.pattern, low, bool(unit_diagonal), matrix.values, rhs)
    return x[:, 0] if vector else x


# -- direct ---------------------------------------------------------------------------------------
class _LUSolve(torch.autograd.Function):
    """Solve M x = b where `factor` is the LU of M (transposed=False) or of M^T (transposed=True)."""

    @staticmethod
    def forward(ctx, pattern, factor, transposed, values, b):
        x = torch.from_numpy(factor.solve(b.detach().contiguous().numpy(), transpose=transposed))
        ctx.pattern, ctx.factor, ctx.transposed = pattern, factor, transposed
        ctx.save_for_backward(values, x)
        ctx.save_for_forward(values, x)
        return x

    @staticmethod
    def backward(ctx, g):
        values, x = ctx.saved_tensors
        tpattern, tvalues = _transposed(ctx.pattern, values)
        gb = _LUSolve.apply(tpattern, ctx.factor, not ctx.transposed, tvalues, g)
        gvalues = -_masked_outer(ctx.pattern, gb, x) if ctx.needs_input_grad[3] else None
        return None, None, None, gvalues, gb

    @staticmethod
    def jvp(ctx, _p, _f, _t, dvalues, db):
        values, x = ctx.saved_tensors
        rhs = torch.zeros_like(x) if db is None else db
        if dvalues is not None:
            rhs = rhs - _apply(ctx.pattern, dvalues, x)
        return torch.from_numpy(ctx.factor.solve(rhs.detach().contiguous().numpy(), transpose=ctx.transposed))


def spsolve(A: SparseMatrix, b: torch.Tensor) -> torch.Tensor:
    """x = A^{-1} b by SuperLU (with pivoting); the factorisation is reused for A^{-T} in backward."""
    A = as_sparse_matrix(A, "A")
    if A.device.type != "cpu":
        raise UnsupportedError("spsolve runs SuperLU on the CPU; move A and b with .to('cpu') "
                               "(or use cg, which runs on any device)")
    rhs, vector = _as_columns(A, b)
    factor = _solve.LUFactor(A.pattern, A.values.detach().numpy())
    x = _LUSolve.apply(A.pattern, factor, False, A.values, rhs)
    return x[:, 0] if vector else x


# -- conjugate gradients --------------------------------------------------------------------------
def _cg_forward(pattern, values, b, tol, maxiter):
    with torch.no_grad():
        x, _ = _solve.cg(lambda v: _apply(pattern, values, v), b.detach(), tol=tol, maxiter=maxiter)
    return x


class _CGSolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pattern, tol, maxiter, values, b):
        x = _cg_forward(pattern, values.detach(), b, tol, maxiter)
        ctx.pattern, ctx.tol, ctx.maxiter = pattern, tol, maxiter
        ctx.save_for_backward(values, x)
        ctx.save_for_forward(values, x)
        return x

    @staticmethod
    def backward(ctx, g):
        values, x = ctx.saved_tensors
        tpattern, tvalues = _transposed(ctx.pattern, values)
        gb = _CGSolve.apply(tpattern, ctx.tol, ctx.maxiter, tvalues, g)  # implicit: one more solve
        gvalues = -_masked_outer(ctx.pattern, gb, x) if ctx.needs_input_grad[3] else None
        return None, None, None, gvalues, gb

    @staticmethod
    def jvp(ctx, _p, _t, _m, dvalues, db):
        values, x = ctx.saved_tensors
        rhs = torch.zeros_like(x) if db is None else db
        if dvalues is not None:
            rhs = rhs - _apply(ctx.pattern, dvalues, x)
        return _cg_forward(ctx.pattern, values.detach(), rhs, ctx.tol, ctx.maxiter)


def cg(A: SparseMatrix, b: torch.Tensor, tol: float = 1e-10, maxiter: int | None = None) -> torch.Tensor:
    """x = A^{-1} b by conjugate gradients (A symmetric positive definite), any device.

    Differentiated implicitly: the backward is one more CG solve with A^T, not backpropagation
    through the iterations, so gradients are exact up to the solver tolerance.
    """
    A = as_sparse_matrix(A, "A")
    if A.shape[0] != A.shape[1]:
        raise ShapeError(f"A must be square for cg, got shape {A.shape}")
    rhs, vector = _as_columns(A, b)
    x = _CGSolve.apply(A.pattern, float(tol), maxiter, A.values, rhs)
    return x[:, 0] if vector else x
