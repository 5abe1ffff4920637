"""Structure and value ops on SparseMatrix (numml parity): offset identities and diagonals,
triangular parts, elementwise maps of the stored values, reductions, and a COO export.

Every op maps stored values to stored values with plain torch ops (gathers, index_add), so
gradients of every order, forward mode and torch.func transforms work through them. Elementwise
maps act on the stored entries only (the masked convention): `A + 1.0` adds 1 to each stored
value, never densifies.

Example:
    >>> import torch
    >>> D = diag(torch.tensor([1.0, 2.0], dtype=torch.float64), 1)
    >>> D.to_dense()
    tensor([[0., 1., 0.],
            [0., 0., 2.],
            [0., 0., 0.]], dtype=torch.float64)
"""
from __future__ import annotations

import builtins
from typing import Any

import numpy as np
import torch

from sparsad.errors import InputError, ShapeError
from sparsad.ops.pattern import CSRPattern
from sparsad.torch import _traced
from sparsad.torch.linalg import pattern_index
from sparsad.torch.matrix import SparseMatrix, as_sparse_matrix


def _diagonal_pattern(n_rows: int, n_cols: int, k: int) -> tuple[CSRPattern, np.ndarray]:
    """Pattern of the k-th diagonal of an (n_rows, n_cols) matrix and its row indices."""
    rows = np.arange(max(0, -k), min(n_rows, n_cols - k), dtype=np.int64)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    indptr[rows + 1] = 1
    np.cumsum(indptr, out=indptr)
    return CSRPattern(indptr, rows + k, (n_rows, n_cols), check=False), rows


def eye(n: int, m: int | None = None, k: int = 0, *, dtype: torch.dtype = torch.float64,
        device: Any = None) -> SparseMatrix:
    """Ones on the k-th diagonal of an n x m matrix (k > 0 above the main diagonal), like scipy.sparse.eye.

    >>> import sparsad.torch as st
    >>> st.eye(2, 3, k=1).to_dense()
    tensor([[0., 1., 0.],
            [0., 0., 1.]], dtype=torch.float64)
    """
    m = n if m is None else m
    for name, value in (("n", n), ("m", m), ("k", k)):
        if not isinstance(value, (int, np.integer)):
            raise InputError(f"{name} must be an int, got {type(value).__name__}")
    if n < 0 or m < 0:
        raise ShapeError(f"eye needs non-negative sizes, got n={n}, m={m}")
    if _traced.tracing():  # under torch.compile: a graph constant
        pattern = _traced.PATTERNS.diagonal(*map(_traced.concrete, (n, m, k)))
        return SparseMatrix._wrap(pattern, torch.ones(pattern.nnz, dtype=dtype, device=device))
    pattern, rows = _diagonal_pattern(int(n), int(m), int(k))
    return SparseMatrix._wrap(pattern, torch.ones(rows.shape[0], dtype=dtype, device=device))


def diag(x: torch.Tensor, k: int = 0) -> SparseMatrix:
    """The square matrix with vector x on its k-th diagonal (differentiable in x), like torch.diag.

    >>> import torch, sparsad.torch as st
    >>> st.diag(torch.tensor([1.0, 2.0], dtype=torch.float64), k=1).to_dense()
    tensor([[0., 1., 0.],
            [0., 0., 2.],
            [0., 0., 0.]], dtype=torch.float64)
    """
    if not isinstance(x, torch.Tensor) or x.ndim != 1:
        raise InputError(f"x must be a 1-D torch.Tensor, got {type(x).__name__} "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else ''}")
    if x.dtype not in (torch.float32, torch.float64):
        raise InputError(f"x must be float32 or float64, got {x.dtype}")
    n = x.shape[0] + builtins.abs(int(k))  # the module defines its own abs
    if _traced.tracing():  # under torch.compile: a graph constant
        return SparseMatrix._wrap(_traced.PATTERNS.diagonal(*map(_traced.concrete, (n, n, k))), x)
    pattern, _ = _diagonal_pattern(n, n, int(k))
    return SparseMatrix._wrap(pattern, x)


def _selected(pattern: CSRPattern, keep: np.ndarray) -> tuple[CSRPattern, np.ndarray]:
    """(the pattern of the stored entries where `keep` is true, their positions)."""
    counts = np.bincount(pattern.rows[keep], minlength=pattern.shape[0])
    indptr = np.zeros(pattern.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    sub = CSRPattern(indptr, pattern.indices[keep].astype(np.int64), pattern.shape, check=False)
    return sub, np.flatnonzero(keep)


def _select(A: SparseMatrix, keep: np.ndarray) -> SparseMatrix:
    """The stored entries where `keep` is true (same shape); gradient flows to those entries."""
    sub, positions = _selected(A.pattern, keep)
    return SparseMatrix._wrap(sub, A.values[torch.as_tensor(positions, dtype=torch.int64, device=A.device)])


def _triangle(A: SparseMatrix, upper: bool, k: Any) -> SparseMatrix:
    if _traced.tracing():  # under torch.compile: the pattern at trace time, a gather in the graph
        sub, positions = _traced.as_static(A.pattern).select(upper, _traced.concrete(int(k)))
        return SparseMatrix._wrap(sub, A.values[_traced.index(positions, "positions", A.device)])
    offsets = A.pattern.indices - A.pattern.rows
    return _select(A, offsets >= int(k) if upper else offsets <= int(k))


def tril(A: SparseMatrix, k: int = 0) -> SparseMatrix:
    """Entries on and below the k-th diagonal (differentiable), like torch.tril.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.tril(A).to_dense()
    tensor([[4., 0.],
            [1., 3.]], dtype=torch.float64)
    """
    A = as_sparse_matrix(A, "A")
    return _triangle(A, False, k)


def triu(A: SparseMatrix, k: int = 0) -> SparseMatrix:
    """Entries on and above the k-th diagonal (differentiable), like torch.triu.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.triu(A, 1).to_dense()
    tensor([[0., 1.],
            [0., 0.]], dtype=torch.float64)
    """
    A = as_sparse_matrix(A, "A")
    return _triangle(A, True, k)


def add_scalar(A: SparseMatrix, value: Any) -> SparseMatrix:
    """A + value on the stored entries (the implicit zeros stay zero; masked convention).

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.add_scalar(st.tril(A), 1.0).to_dense()  # the implicit zero stays zero
    tensor([[5., 0.],
            [2., 4.]], dtype=torch.float64)
    """
    A = as_sparse_matrix(A, "A")
    if isinstance(value, torch.Tensor) and value.numel() != 1:
        raise ShapeError(f"value must be a scalar, got shape {tuple(value.shape)}")
    return SparseMatrix._wrap(A.pattern, A.values + (value.reshape(()) if isinstance(value, torch.Tensor) else value))


def power(A: SparseMatrix, p: Any) -> SparseMatrix:
    """Elementwise A ** p on the stored entries (numml's A ** p).

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.power(A, 2).values
    tensor([16.,  1.,  1.,  9.], dtype=torch.float64)
    """
    A = as_sparse_matrix(A, "A")
    return SparseMatrix._wrap(A.pattern, A.values ** p)


def abs(A: SparseMatrix) -> SparseMatrix:  # noqa: A001 - the numml name
    """Elementwise |A| on the stored entries.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.abs(st.scale(A, -1.0)).values
    tensor([4., 1., 1., 3.], dtype=torch.float64)
    """
    A = as_sparse_matrix(A, "A")
    return SparseMatrix._wrap(A.pattern, A.values.abs())


def sum(A: SparseMatrix, dim: int | None = None) -> torch.Tensor:  # noqa: A001 - the numml name
    """Sum of all entries (dim=None), of each column (dim=0) or of each row (dim=1), as dense tensors.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.sum(A), st.sum(A, dim=1)
    (tensor(9., dtype=torch.float64), tensor([5., 4.], dtype=torch.float64))
    """
    A = as_sparse_matrix(A, "A")
    if dim is None:
        return A.values.sum()
    if dim not in (0, 1, -1, -2):
        raise InputError(f"dim must be None, 0 or 1 for a matrix, got {dim!r}")
    axis = dim % 2
    index = pattern_index(A.pattern, "rows" if axis == 1 else "cols", A.device)
    size = A.shape[0] if axis == 1 else A.shape[1]
    return torch.zeros(size, dtype=A.dtype, device=A.device).index_add(0, index, A.values)


def trace(A: SparseMatrix) -> torch.Tensor:
    """Sum of the main diagonal (gradient to the stored diagonal entries).

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> st.trace(A)
    tensor(7., dtype=torch.float64)
    """
    A = as_sparse_matrix(A, "A")
    return A.values[pattern_index(A.pattern, "diag_pos", A.device)].sum()


@torch.compiler.disable  # a torch sparse tensor: a graph break at the call
def to_torch_coo(A: SparseMatrix) -> torch.Tensor:
    """A torch sparse COO tensor (coalesced) sharing the differentiable values.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> coo = st.to_torch_coo(st.tril(A))
    >>> coo.layout, coo.indices().tolist()
    (torch.sparse_coo, [[0, 1, 1], [0, 0, 1]])
    """
    A = as_sparse_matrix(A, "A")
    indices = torch.stack([torch.as_tensor(A.pattern.rows, device=A.device),
                           torch.as_tensor(A.pattern.indices.astype(np.int64), device=A.device)])
    return torch.sparse_coo_tensor(indices, A.values, A.shape, is_coalesced=True)
