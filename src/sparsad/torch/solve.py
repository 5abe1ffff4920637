"""Differentiable sparse direct solves: triangular, LU (SuperLU) and log-determinants.

For x = M^{-1} b the VJP is gb = M^{-T} g and gM = -(gb x^T) masked to M's pattern; the JVP is
dx = M^{-1}(db - dM x). For log|det M| the gradient is M^{-T} on M's pattern (a selected
inverse). Backward passes are built from the same Functions, so they differentiate again
(create_graph=True), and every Function has a jvp and a vmap rule (torch.func works).

A factorisation happens once, inside the first forward that needs it (where torch.func hands
over plain tensors), and is reused by every backward, jvp and later solve of the same matrix.

Example:
    >>> import torch, scipy.sparse as sp
    >>> from sparsad.torch import SparseMatrix
    >>> A = SparseMatrix.from_scipy(sp.eye(3, format="csr") * 2.0, requires_grad=True)
    >>> spsolve(A, torch.ones(3, dtype=torch.float64)).tolist()
    [0.5, 0.5, 0.5]
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from sparsad.errors import InputError, ShapeError, UnsupportedError
from sparsad.ops import solve as _solve
from sparsad.ops.pattern import CSRPattern
from sparsad.torch import _traced
from sparsad.torch._functorch import loop_vmap
from sparsad.torch.linalg import _index, check_dense
from sparsad.torch.matrix import SparseMatrix, as_sparse_matrix

#: Second derivatives of a log-determinant form the dense inverse; refused above this order.
SECOND_ORDER_LOGDET_MAX_N = 4096


def _rows_cols(pattern: CSRPattern, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    return _index(pattern.rows, device, pattern, "rows"), _index(pattern.indices, device, pattern, "cols")


def _masked_outer(pattern: CSRPattern, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """(left right^T) restricted to the pattern: one value per stored entry. Plain torch gathers,
    so it differentiates to any order and works under every torch.func transform."""
    rows, cols = _rows_cols(pattern, left.device)
    product = left[rows] * right[cols]
    return product if product.ndim == 1 else product.sum(1)


def _transposed(pattern: CSRPattern, values: torch.Tensor) -> tuple[CSRPattern, torch.Tensor]:
    tpattern, perm = pattern.transpose
    return tpattern, values[_index(perm, values.device, pattern, "perm")]


def _apply(pattern: CSRPattern, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """M x by plain torch gathers and index_add (differentiable, torch.func-safe; used by JVPs)."""
    rows, cols = _rows_cols(pattern, x.device)
    terms = (values * x[cols]) if x.ndim == 1 else values[:, None] * x[cols]
    return torch.zeros((pattern.shape[0],) + tuple(x.shape[1:]), dtype=terms.dtype, device=x.device).index_add(
        0, rows, terms)


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().contiguous().cpu().numpy()


def _as_columns(A: SparseMatrix, b: Any, name: str = "b") -> tuple[torch.Tensor, bool]:
    b = check_dense(A, b, name, A.shape[0], 0, "length (rows)")
    if b.ndim > 2:
        raise ShapeError(f"{name} must be 1-D or 2-D (n, k), got shape {tuple(b.shape)}")
    return (b[:, None], True) if b.ndim == 1 else (b, False)


# -- triangular -----------------------------------------------------------------------------------
def _offdiagonal_mask(pattern: CSRPattern, like: torch.Tensor) -> torch.Tensor:
    cache = pattern.__dict__.setdefault("_torch_index", {})
    key = ("offdiag", like.device, like.dtype)
    if key not in cache:
        cache[key] = torch.tensor(pattern.rows != pattern.indices, dtype=like.dtype, device=like.device)
    return cache[key]


def _tri_forward(pattern: CSRPattern, lower: bool, unit: bool, values: torch.Tensor, b: torch.Tensor):
    if values.device.type == "cpu":
        return torch.from_numpy(_solve.triangular_solve(pattern, _numpy(values), _numpy(b), lower, unit))
    # Other devices: PyTorch's own CSR triangular solve (not exercised by the CPU-only tests).
    vals = values.detach()
    if unit:
        vals = vals * _offdiagonal_mask(pattern, vals) + (1 - _offdiagonal_mask(pattern, vals))
    matrix = torch.sparse_csr_tensor(torch.tensor(pattern.indptr, device=vals.device),
                                     torch.tensor(pattern.indices, device=vals.device), vals, size=pattern.shape)
    return torch.triangular_solve(b.detach(), matrix, upper=not lower, unitriangular=unit).solution


class _TriSolve(torch.autograd.Function):
    @staticmethod
    def forward(pattern, lower, unit, values, b):
        if _traced.is_fake(values, b):  # meta or fake tensors: the custom op's shape
            return _traced._trisolve_op(_traced.Static.of(pattern), lower, unit, values, b)
        _solve.check_triangular(pattern, _numpy(values), lower, unit)
        return _tri_forward(pattern, lower, unit, values, b)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pattern, lower, unit, values, _ = inputs
        ctx.pattern, ctx.lower, ctx.unit = pattern, lower, unit
        ctx.save_for_backward(values, output)
        ctx.save_for_forward(values, output)

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
        return _TriSolve.apply(ctx.pattern, ctx.lower, ctx.unit, values, rhs)

    @staticmethod
    def vmap(info, in_dims, *args):
        return loop_vmap(_TriSolve, info, in_dims, *args)


def triangular_solve(L: SparseMatrix, b: torch.Tensor, lower: bool = True, unit_diagonal: bool = False,
                     transpose: bool = False) -> torch.Tensor:
    """x with op(L) x = b, op(L) = L or L^T; L lower (or upper) triangular CSR.

    With unit_diagonal the stored diagonal is ignored (taken as 1) and gets no gradient.
    The gradient w.r.t. L is masked: -(L^{-T} g) x^T on L's pattern.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> st.triangular_solve(st.tril(A), b)
    tensor([0.2500, 0.5833], dtype=torch.float64)
    """
    from sparsad.torch.linalg import transpose as _transpose

    L = as_sparse_matrix(L, "L")
    if L.shape[0] != L.shape[1]:
        raise ShapeError(f"L must be square for a triangular solve, got shape {L.shape}")
    matrix, low = (_transpose(L), not lower) if transpose else (L, lower)
    rhs, vector = _as_columns(matrix, b)
    if _traced.tracing():  # under torch.compile: the custom op
        x = _traced.trisolve(_traced.as_static(matrix.pattern), low, bool(unit_diagonal), matrix.values, rhs)
        return x[:, 0] if vector else x
    x = _TriSolve.apply(matrix.pattern, low, bool(unit_diagonal), matrix.values, rhs)
    return x[:, 0] if vector else x


# -- factorisations -------------------------------------------------------------------------------
class FactorHandle:
    """A factorisation of one matrix, built on first use from the values a forward receives.

    Every later use compares the values with those factored, entry by entry: a stale factor would
    give solves of the old matrix with gradients of the new one. The comparison is one pass over
    the values (about 1 ms per million entries), less than any solve with the factor. torch's
    in-place version counter would be O(1) but misses writes through `.data` (a separate counter)
    and through NumPy views, so it cannot replace the comparison.
    """

    def __init__(self, pattern: CSRPattern, build: Callable[[CSRPattern, np.ndarray], Any]):
        self.pattern, self._build, self.factor = pattern, build, None

    def get(self, values: torch.Tensor):
        if self.factor is None:
            if values.device.type != "cpu":
                raise UnsupportedError("sparse factorisations run on the CPU (SuperLU); move the matrix "
                                       "with .to('cpu'), or use an iterative solver (cg, minres, gmres)")
            self._factored = _numpy(values).copy()
            self.factor = self._build(self.pattern, self._factored)
        elif not np.array_equal(_numpy(values), self._factored):
            raise InputError("the matrix's values changed after it was factored (in place, for example by "
                             "an optimizer step); factor it again: splu(A) or cholesky(A)")
        return self.factor

    def current(self, values: torch.Tensor):
        """The factor of these values, factoring again when they differ from those factored (for
        a handle that outlives one call: a compiled graph's, reused by every step)."""
        if self.factor is not None and not np.array_equal(_numpy(values), self._factored):
            self.factor = None
        return self.get(values)

    def fresh(self) -> "FactorHandle":
        return FactorHandle(self.pattern, self._build)


class _FactorSolve(torch.autograd.Function):
    """Solve M x = b with M = A (transposed=False) or A^T, A the matrix of `handle` (values given)."""

    @staticmethod
    def forward(pattern, handle, transposed, values, b):
        return torch.from_numpy(handle.get(values).solve(_numpy(b), transpose=transposed))

    @staticmethod
    def setup_context(ctx, inputs, output):
        pattern, handle, transposed, values, _ = inputs
        ctx.pattern, ctx.handle, ctx.transposed = pattern, handle, transposed
        ctx.save_for_backward(values, output)
        ctx.save_for_forward(values, output)

    @staticmethod
    def backward(ctx, g):
        values, x = ctx.saved_tensors
        gb = _FactorSolve.apply(ctx.pattern, ctx.handle, not ctx.transposed, values, g)
        gvalues = None
        if ctx.needs_input_grad[3]:  # entry (i, j) of op(A) is entry (j, i) of A when transposed
            gvalues = -(_masked_outer(ctx.pattern, x, gb) if ctx.transposed else _masked_outer(ctx.pattern, gb, x))
        return None, None, None, gvalues, gb

    @staticmethod
    def jvp(ctx, _p, _h, _t, dvalues, db):
        values, x = ctx.saved_tensors
        rhs = torch.zeros_like(x) if db is None else db
        if dvalues is not None:
            if ctx.transposed:
                tpattern, tdvalues = _transposed(ctx.pattern, dvalues)
                rhs = rhs - _apply(tpattern, tdvalues, x)
            else:
                rhs = rhs - _apply(ctx.pattern, dvalues, x)
        return _FactorSolve.apply(ctx.pattern, ctx.handle, ctx.transposed, values, rhs)

    @staticmethod
    def vmap(info, in_dims, pattern, handle, transposed, values, b):
        results = []
        for index in range(info.batch_size):
            v = values if in_dims[3] is None else values.select(in_dims[3], index)
            rhs = b if in_dims[4] is None else b.select(in_dims[4], index)
            h = handle if in_dims[3] is None else handle.fresh()  # a batch of matrices: one factor each
            results.append(_FactorSolve.apply(pattern, h, transposed, v, rhs))
        return torch.stack(results), 0


def _per_matrix_vmap(function, in_dims, pattern: CSRPattern, handle: FactorHandle, values: torch.Tensor):
    """The vmap rule of a Function of one matrix's values: unbatched values share the factor; a
    batch of matrices gets one factor each (a fresh handle per batch element)."""
    if in_dims[2] is None:
        return function.apply(pattern, handle, values), None
    return torch.stack([function.apply(pattern, handle.fresh(), v) for v in values.unbind(in_dims[2])]), 0


def _sandwich(pattern: CSRPattern, handle: FactorHandle, values: torch.Tensor, middle: torch.Tensor):
    """(X S^T X) on the pattern, X = A^-T, S the sparse matrix of `middle` on the pattern
    (differentiable; dense in n, so refused beyond SECOND_ORDER_LOGDET_MAX_N)."""
    n = pattern.shape[0]
    if n > SECOND_ORDER_LOGDET_MAX_N:
        raise UnsupportedError(
            f"second derivatives of a log-determinant need the dense inverse of A ({n} x {n}), above the "
            f"limit sparsad.torch.solve.SECOND_ORDER_LOGDET_MAX_N = {SECOND_ORDER_LOGDET_MAX_N}; raise it "
            "knowingly, or use first-order gradients only")
    eye = torch.eye(n, dtype=values.dtype, device=values.device)
    inverse_t = _FactorSolve.apply(pattern, handle, True, values, eye)  # A^-T
    left = _apply(pattern, middle, inverse_t.T).T  # X S^T = (S X^T)^T
    return _masked_outer(pattern, left.contiguous(), inverse_t.T.contiguous())


class _SelectedInverse(torch.autograd.Function):
    """(A^-T)[i, j] on A's pattern: the gradient of log|det A|."""

    @staticmethod
    def forward(pattern, handle, values):
        return torch.from_numpy(handle.get(values).selected_inverse(transpose=True))

    @staticmethod
    def setup_context(ctx, inputs, output):
        pattern, handle, values = inputs
        ctx.pattern, ctx.handle = pattern, handle
        ctx.save_for_backward(values)
        ctx.save_for_forward(values)

    @staticmethod
    def backward(ctx, g):  # d(A^-T) = -A^-T dA^T A^-T, so the VJP is -(X G^T X) masked
        (values,) = ctx.saved_tensors
        return None, None, -_sandwich(ctx.pattern, ctx.handle, values, g)

    @staticmethod
    def jvp(ctx, _p, _h, dvalues):
        (values,) = ctx.saved_tensors
        return -_sandwich(ctx.pattern, ctx.handle, values, dvalues)

    @staticmethod
    def vmap(info, in_dims, pattern, handle, values):
        return _per_matrix_vmap(_SelectedInverse, in_dims, pattern, handle, values)


class _LogAbsDet(torch.autograd.Function):
    """log|det A| from the factor; gradient A^-T on A's pattern (computed when asked for)."""

    @staticmethod
    def forward(pattern, handle, values):
        factor = handle.get(values)
        logabs = factor.logdet() if hasattr(factor, "logdet") else factor.slogdet()[1]
        return torch.tensor(logabs, dtype=values.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pattern, handle, values = inputs
        ctx.pattern, ctx.handle = pattern, handle
        ctx.save_for_backward(values)
        ctx.save_for_forward(values)

    @staticmethod
    def backward(ctx, g):
        (values,) = ctx.saved_tensors
        return None, None, g * _SelectedInverse.apply(ctx.pattern, ctx.handle, values)

    @staticmethod
    def jvp(ctx, _p, _h, dvalues):
        (values,) = ctx.saved_tensors
        return (_SelectedInverse.apply(ctx.pattern, ctx.handle, values) * dvalues).sum()

    @staticmethod
    def vmap(info, in_dims, pattern, handle, values):
        return _per_matrix_vmap(_LogAbsDet, in_dims, pattern, handle, values)


class _Sign(torch.autograd.Function):
    """sign(det A) from the factor: piecewise constant, so its derivatives are zero."""

    @staticmethod
    def forward(pattern, handle, values):
        factor = handle.get(values)
        sign = factor.slogdet()[0] if hasattr(factor, "slogdet") else 1.0  # a Cholesky factor: SPD
        return torch.tensor(float(sign), dtype=values.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output)

    @staticmethod
    def backward(ctx, g):
        return None, None, None

    @staticmethod
    def jvp(ctx, _p, _h, dvalues):
        return None

    @staticmethod
    def vmap(info, in_dims, pattern, handle, values):
        return _per_matrix_vmap(_Sign, in_dims, pattern, handle, values)


def _lu_handle(A: SparseMatrix) -> FactorHandle:
    return _lu_handle_of(A.pattern)


def _lu_handle_of(pattern: CSRPattern) -> FactorHandle:
    return FactorHandle(pattern, lambda pattern, values: _solve.LUFactor(pattern, values))


def _eager(handle: FactorHandle, values: torch.Tensor) -> None:
    """Factor now (so bad input fails at the call) unless inside a torch.func transform."""
    if not torch._C._functorch.is_functorch_wrapped_tensor(values):
        handle.get(values)


class SparseLU:
    """The LU factorisation (SuperLU) of a square SparseMatrix, reusable for many solves.

    Solves and log-determinants are differentiable in A's values (masked) and in b; all reuse
    this one factorisation, backward passes included.

    Example:
        >>> import torch, scipy.sparse as sp
        >>> from sparsad.torch import SparseMatrix
        >>> lu = splu(SparseMatrix.from_scipy(sp.csr_matrix([[2.0, 1.0], [0.0, 4.0]])))
        >>> lu.solve(torch.tensor([3.0, 4.0], dtype=torch.float64))
        tensor([1., 1.], dtype=torch.float64)
    """

    def __init__(self, A: SparseMatrix, handle: FactorHandle | None = None):
        A = as_sparse_matrix(A, "A")
        if A.shape[0] != A.shape[1]:
            raise ShapeError(f"A must be square to factor it, got shape {A.shape}")
        self.A = A
        self.handle = _lu_handle(A) if handle is None else handle
        _eager(self.handle, A.values)

    def solve(self, b: torch.Tensor, transpose: bool = False) -> torch.Tensor:
        """x with A x = b (or A^T x = b), b of shape (n,) or (n, k)."""
        rhs, vector = _as_columns(self.A, b)
        x = _FactorSolve.apply(self.A.pattern, self.handle, bool(transpose), self.A.values, rhs)
        return x[:, 0] if vector else x

    def slogdet(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(sign, log|det A|); the second is differentiable (gradient A^-T on A's pattern).

        >>> import torch, sparsad.torch as st
        >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
        >>> st.slogdet(st.scale(A, -1.0))
        (tensor(1., dtype=torch.float64), tensor(2.3979, dtype=torch.float64))
        """
        sign = _Sign.apply(self.A.pattern, self.handle, self.A.values)  # read from the factor, also under torch.func
        return sign, _LogAbsDet.apply(self.A.pattern, self.handle, self.A.values)

    def logdet(self) -> torch.Tensor:
        """log det A; NaN when det A < 0 (like torch.logdet). See slogdet for the sign.

        >>> import torch, sparsad.torch as st
        >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
        >>> st.logdet(A)  # log 11
        tensor(2.3979, dtype=torch.float64)
        """
        sign, logabs = self.slogdet()
        return torch.where(sign > 0, logabs, torch.full_like(logabs, float("nan")))


@torch.compiler.disable  # no custom op yet: a graph break at the call, before any pattern is read
def splu(A: SparseMatrix) -> SparseLU:
    """Factor A = Pr^T L U Pc^T once (SuperLU) for repeated differentiable solves (numml's splu).

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> lu = st.splu(A)
    >>> st.splu_solve(lu, b), st.splu_solve(lu, b, transpose=True)
    (tensor([0.0909, 0.6364], dtype=torch.float64), tensor([0.0909, 0.6364], dtype=torch.float64))
    """
    return SparseLU(A)


@torch.compiler.disable  # no custom op yet: a graph break at the call, before any pattern is read
def splu_solve(lu: SparseLU, b: torch.Tensor, transpose: bool = False) -> torch.Tensor:
    """x = A^{-1} b (or A^{-T} b) with a factorisation from `splu` (numml's splu_solve).

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> st.splu_solve(st.splu(A), b)
    tensor([0.0909, 0.6364], dtype=torch.float64)
    """
    if not isinstance(lu, SparseLU):
        raise UnsupportedError(f"lu must come from sparsad.torch.splu, got {type(lu).__name__}")
    return lu.solve(b, transpose)


def spsolve(A: SparseMatrix, b: torch.Tensor) -> torch.Tensor:
    """x = A^{-1} b by SuperLU (with pivoting); the factorisation is reused for A^{-T} in backward.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> st.spsolve(A, b)
    tensor([0.0909, 0.6364], dtype=torch.float64)
    """
    A = as_sparse_matrix(A, "A")
    if A.device.type not in ("cpu", "meta"):
        raise UnsupportedError("spsolve runs SuperLU on the CPU; move A and b with .to('cpu') "
                               "(or use cg, which runs on any device)")
    if A.shape[0] != A.shape[1]:
        raise ShapeError(f"A must be square to solve with it, got shape {A.shape}")
    rhs, vector = _as_columns(A, b)
    if _traced.tracing() or _traced.is_fake(A.values, rhs):  # torch.compile, meta/fake tensors: the custom op
        handle = _traced.as_static(A.pattern).lu_handle() if _traced.tracing() else \
            _traced.Static(_lu_handle(A))
        x = _traced.lu_solve(handle, False, A.values, rhs)
        return x[:, 0] if vector else x
    handle = _lu_handle(A)
    _eager(handle, A.values)
    x = _FactorSolve.apply(A.pattern, handle, False, A.values, rhs)
    return x[:, 0] if vector else x


@torch.compiler.disable  # no custom op yet: a graph break at the call, before any pattern is read
def slogdet(A: SparseMatrix) -> tuple[torch.Tensor, torch.Tensor]:
    """(sign, log|det A|) of a general square matrix through its LU factor; differentiable in A.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[-4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.slogdet(A)  # det A = -13
    (tensor(-1., dtype=torch.float64), tensor(2.5649, dtype=torch.float64))
    """
    return SparseLU(A).slogdet()


@torch.compiler.disable  # no custom op yet: a graph break at the call, before any pattern is read
def logdet(A: SparseMatrix) -> torch.Tensor:
    """log det A of a general square matrix through its LU factor (NaN if det A < 0, as torch.logdet).

    For symmetric positive definite A, `cholesky(A).logdet()` is cheaper and checks definiteness.

    The gradient is A^-T on A's pattern (masked), computed by block solves with the same factor.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.logdet(A)  # log 11
    tensor(2.3979, dtype=torch.float64)
    """
    return SparseLU(A).logdet()


def cg(*args, **kwargs):
    """Conjugate gradients; see `sparsad.torch.krylov.cg`."""
    from sparsad.torch.krylov import cg as _cg

    return _cg(*args, **kwargs)
