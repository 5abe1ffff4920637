"""Differentiable sparse linear algebra on SparseMatrix: products, sums, structure ops, GCN norm.

All ops follow the masked gradient convention: a SparseMatrix operand receives its gradient on
its own pattern. Gradients of gradients work (the backward passes are built from the same ops).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sparsad.errors import DTypeError, InputError, ShapeError, UnsupportedError
from sparsad.ops.contract import spmm_terms
from sparsad.ops import kernels
from sparsad.torch import _autograd, _traced
from sparsad.torch._autograd import contract
from sparsad.torch.matrix import SparseMatrix, as_sparse_matrix

Scalar = Any  # float or 0-d tensor


def _index(pattern_array: np.ndarray, device: torch.device, cache_owner, key: str) -> torch.Tensor:
    cache = cache_owner.__dict__.setdefault("_torch_index", {})
    if (key, device) not in cache:
        cache[(key, device)] = torch.tensor(pattern_array, dtype=torch.int64, device=device)
    return cache[(key, device)]


def _pattern_arrays(pattern, key: str) -> np.ndarray:
    if key == "rows":
        return pattern.rows
    if key == "cols":
        return pattern.indices
    if key == "perm":
        return pattern.transpose[1]
    pos = pattern.diagonal_positions
    return np.flatnonzero(pos >= 0) if key == "diag_rows" else pos[pos >= 0]


# Pattern-level work (NumPy on index arrays) never enters a torch.compile graph: while dynamo
# traces, patterns are graph constants (`_traced.Static`) and these helpers derive them at trace
# time; index tensors come from a custom op.
def pattern_index(pattern, key: str, device: torch.device) -> torch.Tensor:
    """A cached int64 index tensor of `pattern`: rows, cols, perm (of the transpose), diag_rows, diag_pos."""
    if _traced.tracing() or isinstance(pattern, _traced.Static):
        return _traced.index(_traced.as_static(pattern), key, device)
    return _index(_pattern_arrays(pattern, key), device, pattern, key)


def _terms_of(pattern):
    if _traced.tracing():
        return _traced.as_static(pattern).terms()
    return spmm_terms(pattern)


def _transposed_pattern(pattern):
    if _traced.tracing():
        return _traced.as_static(pattern).transposed()
    return pattern.transpose[0]


def _union(pa, pb, device):
    if _traced.tracing():
        return _traced.as_static(pa).union(_traced.as_static(pb))
    pattern, map_a, map_b = pa.union(pb)
    return pattern, _add_maps(pattern, pa, pb, map_a, map_b, device)


def _identity_pattern(n: int):
    if _traced.tracing():
        return _traced.identity_pattern(n)
    return _make_identity_pattern(n)


def _make_identity_pattern(n: int):
    from sparsad.ops.pattern import CSRPattern

    return CSRPattern(np.arange(n + 1), np.arange(n), (n, n), check=False)


def check_dense(A: SparseMatrix, x: Any, name: str, length: int, axis: int, what: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.layout != torch.strided:
        raise UnsupportedError(f"{name} must be a dense tensor, got layout {x.layout}; wrap sparse operands "
                               "in SparseMatrix")
    if x.dtype != A.dtype:
        raise DTypeError(f"{name} has dtype {x.dtype} but the matrix has {A.dtype}; convert one of them")
    if x.device != A.device:
        raise InputError(f"{name} is on {x.device} but the matrix is on {A.device}; move one with .to()")
    if x.ndim == 0 or x.shape[axis] != length:
        raise ShapeError(f"{name} has shape {tuple(x.shape)}; its {what} must be {length}")
    return x


def _check_scalar(value: Scalar, name: str, A: SparseMatrix) -> Scalar:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ShapeError(f"{name} must be a scalar (0-d tensor or float), got shape {tuple(value.shape)}")
        return value.reshape(())
    if isinstance(value, (int, float, np.floating, np.integer)):
        return float(value)
    raise InputError(f"{name} must be a float or a 0-d tensor, got {type(value).__name__}")


def _matmul_2d(A: SparseMatrix, X: torch.Tensor) -> torch.Tensor:
    """A @ X for 2-D X (cols, C)."""
    return contract(_terms_of(A.pattern), 2, {0: A.values, 1: X})


def spmm(A: SparseMatrix, X: torch.Tensor) -> torch.Tensor:
    """Sparse @ dense: X of shape (n,), (n, C) or batched (..., n, C); result has m rows in place of n.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.spmm(A, torch.eye(2, dtype=torch.float64))
    tensor([[4., 1.],
            [1., 3.]], dtype=torch.float64)
    """
    A = as_sparse_matrix(A, "A")
    if isinstance(X, torch.Tensor) and X.ndim == 1:
        return spmv(A, X)
    axis = -2 if isinstance(X, torch.Tensor) and X.ndim >= 2 else 0
    X = check_dense(A, X, "X", A.shape[1], axis, "row count (second-to-last dimension)")
    if X.ndim == 2:
        return _matmul_2d(A, X)
    batch = X.shape[:-2]
    flat = X.movedim(-2, 0).reshape(A.shape[1], -1)
    out = _matmul_2d(A, flat).reshape(A.shape[0], *batch, X.shape[-1])
    return out.movedim(0, -2)


def spmv(A: SparseMatrix, x: torch.Tensor, alpha: Scalar = 1.0, beta: Scalar = 0.0,
         y: torch.Tensor | None = None) -> torch.Tensor:
    """w = alpha A x + beta y, differentiable in A's values (masked), x, y, alpha and beta.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> st.spmv(A, b)
    tensor([6., 7.], dtype=torch.float64)
    >>> st.spmv(A, b, alpha=2.0, beta=1.0, y=b)
    tensor([13., 16.], dtype=torch.float64)
    """
    A = as_sparse_matrix(A, "A")
    x = check_dense(A, x, "x", A.shape[1], 0, "length")
    if x.ndim != 1:
        raise ShapeError(f"x must be 1-D for spmv, got shape {tuple(x.shape)}; use spmm for matrices")
    if y is None and alpha.__class__ is float and alpha == 1.0 and beta.__class__ is float and beta == 0.0 \
            and not _traced.tracing():
        return _autograd._Contract.apply(_terms_of(A.pattern), 2, A.values, x)  # plain A x: the short path
    alpha = _check_scalar(alpha, "alpha", A)
    beta = _check_scalar(beta, "beta", A)
    w = contract(_terms_of(A.pattern), 2, {0: A.values, 1: x})
    if not (isinstance(alpha, float) and alpha == 1.0):
        w = alpha * w
    if y is not None:
        y = check_dense(A, y, "y", A.shape[0], 0, "length")
        if y.ndim != 1:
            raise ShapeError(f"y must be 1-D, got shape {tuple(y.shape)}")
        w = w + beta * y
    elif isinstance(beta, torch.Tensor) or beta != 0.0:
        raise InputError("beta is given but y is None; pass y (the vector beta scales) or drop beta")
    return w


def spgemm(A: SparseMatrix, B: SparseMatrix) -> SparseMatrix:
    """Sparse @ sparse with masked gradients for both operands (structural output pattern, cached).

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.spgemm(A, A).to_dense()
    tensor([[17.,  7.],
            [ 7., 10.]], dtype=torch.float64)
    """
    A, B = as_sparse_matrix(A, "A"), as_sparse_matrix(B, "B")
    _same_kind(A, B)
    from sparsad.torch import products

    pattern, values = products.spgemm(A.pattern, A.values, B.pattern, B.values)  # symbolic phase cached
    return SparseMatrix._wrap(pattern, values)


def _same_kind(A: SparseMatrix, B: SparseMatrix) -> None:
    if A.dtype != B.dtype:
        raise DTypeError(f"A has dtype {A.dtype} but B has {B.dtype}; convert one with .to(dtype=...)")
    if A.device != B.device:
        raise InputError(f"A is on {A.device} but B is on {B.device}; move one with .to(device)")


def add(A: SparseMatrix, B: SparseMatrix, alpha: Scalar = 1.0, beta: Scalar = 1.0) -> SparseMatrix:
    """alpha A + beta B on the union pattern; gradients to both patterns and to alpha and beta.

    d/d alpha = <V, A> summed over A's pattern (not the plain sum of A's entries).

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.add(A, st.identity(2), beta=-4.0).to_dense()
    tensor([[ 0.,  1.],
            [ 1., -1.]], dtype=torch.float64)
    """
    A, B = as_sparse_matrix(A, "A"), as_sparse_matrix(B, "B")
    _same_kind(A, B)
    alpha, beta = _check_scalar(alpha, "alpha", A), _check_scalar(beta, "beta", A)
    pattern, maps = _union(A.pattern, B.pattern, A.device)
    as_tensor = [s if isinstance(s, torch.Tensor) else torch.tensor(s, dtype=A.dtype, device=A.device)
                 for s in (alpha, beta)]
    if isinstance(maps, _traced.Static):  # under torch.compile: two scatters in the graph
        out = torch.zeros(pattern.nnz, dtype=A.dtype, device=A.device)
        out = out.index_add(0, _traced.index(maps, "a", A.device), as_tensor[0] * A.values)
        out = out.index_add(0, _traced.index(maps, "b", A.device), as_tensor[1] * B.values)
        return SparseMatrix._wrap(pattern, out)
    return SparseMatrix._wrap(pattern, _Add.apply(maps, A.values, B.values, *as_tensor))


def _add_maps(pattern, pa, pb, map_a, map_b, device) -> dict:
    cache = pattern.__dict__.setdefault("_add_maps", {})
    key = (id(pa), id(pb), device)
    if key not in cache:
        cache[key] = {"nnz": pattern.nnz, "a": map_a.astype(np.uint64), "b": map_b.astype(np.uint64),
                      "ta": torch.tensor(map_a, dtype=torch.int64, device=device),
                      "tb": torch.tensor(map_b, dtype=torch.int64, device=device)}
    return cache[key]


@torch.compiler.disable  # a Numba kernel: a graph break under torch.compile, not a trace
def _add_values(maps: dict, a, b, alpha, beta) -> torch.Tensor:
    if _autograd._use_numba(a) and not _traced.is_fake(a, b, alpha, beta):
        out = np.zeros(maps["nnz"], dtype=np.result_type(a.numpy(), b.numpy()))
        kernels.scatter_sum(maps["a"], a.numpy(), float(alpha), maps["b"], b.numpy(), float(beta), out)
        return torch.from_numpy(out)
    out = torch.zeros(maps["nnz"], dtype=a.dtype, device=a.device)
    return out.index_add_(0, maps["ta"], alpha * a).index_add_(0, maps["tb"], beta * b)


class _Add(torch.autograd.Function):
    """alpha A + beta B on the union pattern; backward by gathers, so it differentiates again.

    setup_context style with jvp and vmap rules (torch.func composes with it)."""

    @staticmethod
    def forward(maps, a, b, alpha, beta):
        return _add_values(maps, a.detach(), b.detach(), alpha.detach(), beta.detach())

    @staticmethod
    def setup_context(ctx, inputs, output):
        maps, a, b, alpha, beta = inputs
        ctx.maps = maps
        ctx.save_for_backward(a, b, alpha, beta)
        ctx.save_for_forward(a, b, alpha, beta)

    @staticmethod
    def backward(ctx, g):
        a, b, alpha, beta = ctx.saved_tensors
        need = ctx.needs_input_grad
        if _autograd.plain(g, a, b, alpha, beta) and _autograd._use_numba(g) \
                and not need[3] and not need[4]:  # first order, constant scalars: two Numba gathers
            maps, gn = ctx.maps, g.contiguous().numpy()
            grads = []
            for wanted, key, scalar in ((need[1], "a", alpha), (need[2], "b", beta)):
                out = None
                if wanted:
                    out = np.empty(maps[key].shape[0], dtype=gn.dtype)
                    kernels.gather_scale(maps[key], gn, float(scalar), out)
                    out = torch.from_numpy(out)
                grads.append(out)
            return None, grads[0], grads[1], None, None
        ga, gb = g[ctx.maps["ta"]], g[ctx.maps["tb"]]
        return (None, alpha * ga if need[1] else None, beta * gb if need[2] else None,
                (ga * a).sum() if need[3] else None, (gb * b).sum() if need[4] else None)

    @staticmethod
    def jvp(ctx, _maps, da, db, dalpha, dbeta):
        # through this Function again, so the tangent is differentiable too
        a, b, alpha, beta = ctx.saved_tensors
        maps = ctx.maps
        tangent = _Add.apply(maps, torch.zeros_like(a) if da is None else da,
                             torch.zeros_like(b) if db is None else db, alpha, beta)
        if dalpha is not None or dbeta is not None:
            tangent = tangent + _Add.apply(maps, a, b, torch.zeros_like(alpha) if dalpha is None else dalpha,
                                           torch.zeros_like(beta) if dbeta is None else dbeta)
        return tangent

    @staticmethod
    def vmap(info, in_dims, maps, a, b, alpha, beta):
        size = info.batch_size
        a, b, alpha, beta = (_autograd.batch_first(t, d, size) for t, d in zip((a, b, alpha, beta), in_dims[1:]))
        out = torch.zeros((size, maps["nnz"]), dtype=a.dtype, device=a.device)
        out = out.index_add(1, maps["ta"], alpha[:, None] * a)
        return out.index_add(1, maps["tb"], beta[:, None] * b), 0


def scale(A: SparseMatrix, alpha: Scalar) -> SparseMatrix:
    """alpha A (same pattern).

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.scale(A, 0.5).to_dense()
    tensor([[2.0000, 0.5000],
            [0.5000, 1.5000]], dtype=torch.float64)
    """
    A = as_sparse_matrix(A, "A")
    return SparseMatrix._wrap(A.pattern, _check_scalar(alpha, "alpha", A) * A.values)


def transpose(A: SparseMatrix) -> SparseMatrix:
    """A^T as CSR: a differentiable permutation of the values (A.T.T shares A's pattern).

    >>> import torch, sparsad.torch as st
    >>> U = st.SparseMatrix.from_dense(torch.tensor([[1.0, 2.0], [0.0, 3.0]], dtype=torch.float64))
    >>> st.transpose(U).to_dense()
    tensor([[1., 0.],
            [2., 3.]], dtype=torch.float64)
    """
    A = as_sparse_matrix(A, "A")
    pattern = _transposed_pattern(A.pattern)
    return SparseMatrix._wrap(pattern, A.values[pattern_index(A.pattern, "perm", A.device)])


def diagonal(A: SparseMatrix) -> torch.Tensor:
    """The main diagonal as a dense vector (zero where not stored); gradient to the diagonal entries.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.diagonal(A)
    tensor([4., 3.], dtype=torch.float64)
    """
    A = as_sparse_matrix(A, "A")
    found = pattern_index(A.pattern, "diag_rows", A.device)
    where = pattern_index(A.pattern, "diag_pos", A.device)
    out = torch.zeros(min(A.shape), dtype=A.dtype, device=A.device)
    return out.index_put((found,), A.values[where])


def coo_indices(A: SparseMatrix) -> tuple[torch.Tensor, torch.Tensor]:
    """(row index, column index) of each stored entry as int64 tensors on A's device, in the
    values' order: gathers and scatters over the pattern in plain torch (also inside
    torch.compile graphs).

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 0.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.coo_indices(A)
    (tensor([0, 1, 1]), tensor([0, 0, 1]))
    """
    A = as_sparse_matrix(A, "A")
    rows, cols = pattern_index(A.pattern, "rows", A.device), pattern_index(A.pattern, "cols", A.device)
    return (rows, cols) if _traced.tracing() else (rows.clone(), cols.clone())  # (the eager ones are cached)


def row_sum(A: SparseMatrix) -> torch.Tensor:
    """Sum of each row (A 1) as a dense vector.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.row_sum(A)
    tensor([5., 4.], dtype=torch.float64)
    """
    A = as_sparse_matrix(A, "A")
    rows = pattern_index(A.pattern, "rows", A.device)
    return torch.zeros(A.shape[0], dtype=A.dtype, device=A.device).index_add(0, rows, A.values)


def identity(n: int, *, dtype: torch.dtype = torch.float64, device: Any = None) -> SparseMatrix:
    """The n x n identity as a SparseMatrix.

    >>> import sparsad.torch as st
    >>> st.identity(3).nnz
    3
    """
    return SparseMatrix._wrap(_identity_pattern(n), torch.ones(n, dtype=dtype, device=device))


def scale_rows_cols(A: SparseMatrix, left: torch.Tensor | None, right: torch.Tensor | None) -> SparseMatrix:
    """diag(left) A diag(right), differentiable in A's values and both scalings.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> st.scale_rows_cols(A, b, None).to_dense()
    tensor([[4., 1.],
            [2., 6.]], dtype=torch.float64)
    """
    A = as_sparse_matrix(A, "A")
    values = A.values
    if left is not None:
        left = check_dense(A, left, "left", A.shape[0], 0, "length")
        values = values * left[pattern_index(A.pattern, "rows", A.device)]
    if right is not None:
        right = check_dense(A, right, "right", A.shape[1], 0, "length")
        values = values * right[pattern_index(A.pattern, "cols", A.device)]
    return SparseMatrix._wrap(A.pattern, values)


def gcn_norm(A: SparseMatrix, add_self_loops: bool = True) -> SparseMatrix:
    """D^-1/2 (A + I) D^-1/2 with D the row sums of A + I (Kipf & Welling), differentiable in A.

    Rows whose degree is zero (possible only without self loops) are left at zero.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.gcn_norm(A).to_dense()
    tensor([[0.8333, 0.1826],
            [0.1826, 0.8000]], dtype=torch.float64)
    """
    A = as_sparse_matrix(A, "A")
    if A.shape[0] != A.shape[1]:
        raise ShapeError(f"gcn_norm needs a square adjacency matrix, got shape {A.shape}")
    if add_self_loops:
        A = add(A, identity(A.shape[0], dtype=A.dtype, device=A.device))
    degree = row_sum(A)
    safe = torch.where(degree > 0, degree, torch.ones_like(degree))
    inv_sqrt = torch.where(degree > 0, safe.rsqrt(), torch.zeros_like(degree))
    return scale_rows_cols(A, inv_sqrt, inv_sqrt)
