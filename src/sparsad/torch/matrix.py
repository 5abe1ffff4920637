"""`SparseMatrix`: a CSR pattern without gradient plus a `values` tensor that carries autograd.

Gradient convention (masked): the gradient with respect to a SparseMatrix lives on its pattern,
`A.grad` is a SparseMatrix with A's pattern holding d loss / d A.values. See docs/torch.md.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from sparsad.errors import DTypeError, FormatError, InputError, ShapeError, UnsupportedError
from sparsad.ops.pattern import CSRPattern
from sparsad.torch._traced import Static

_FLOAT_DTYPES = (torch.float32, torch.float64)

#: from_dense warns (DenseResultWarning) above this density when the matrix has at least
#: DENSE_RESULT_MIN_SIZE entries: such a result takes more memory than the dense tensor.
DENSE_RESULT_DENSITY = 0.5
DENSE_RESULT_MIN_SIZE = 10_000


class DenseResultWarning(UserWarning):
    """A SparseMatrix built from a dense tensor is so full that it is dense-sized."""


def _check_values(values: Any, nnz: int, name: str = "values") -> torch.Tensor:
    if not isinstance(values, torch.Tensor):
        values = torch.as_tensor(np.asarray(values))
        if not values.is_floating_point():
            raise DTypeError(f"{name} must be float32 or float64, got {values.dtype}")
    if values.dtype not in _FLOAT_DTYPES:
        raise DTypeError(f"{name} must be float32 or float64, got {values.dtype}; convert with .double()")
    if values.layout != torch.strided:
        raise FormatError(f"{name} must be a dense (strided) 1-D tensor, got layout {values.layout}")
    if values.ndim != 1 or values.shape[0] != nnz:
        raise ShapeError(f"{name} must have shape ({nnz},) (one value per stored entry), got {tuple(values.shape)}")
    return values


def _index_numpy(array: Any, name: str) -> np.ndarray:
    if isinstance(array, torch.Tensor):
        if array.is_floating_point() or array.is_complex():
            raise DTypeError(f"{name} must hold integers (int32 or int64), got {array.dtype}")
        array = array.detach().cpu().numpy()
    return np.asarray(array)


class SparseMatrix:
    """A CSR sparse matrix whose `values` tensor is differentiable (masked gradient convention).

    Build with `SparseMatrix(values, indices, indptr, shape)` (canonical CSR: column indices sorted
    and unique within each row) or with `from_scipy`, `from_torch`, `from_dense`.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> A
    SparseMatrix(shape=(2, 2), nnz=4, density=1, dtype=torch.float64, device=cpu, index=int64)
    >>> A.values.requires_grad_(True); (A @ torch.ones(2, dtype=torch.float64)).sum().backward()
    tensor([4., 1., 1., 3.], dtype=torch.float64, requires_grad=True)
    >>> A.values.grad
    tensor([1., 1., 1., 1.], dtype=torch.float64)
    """

    __array_priority__ = 1000  # make numpy defer to our reflected operators
    __slots__ = ("_pattern", "values")

    def __init__(self, values: Any, indices: Any, indptr: Any, shape: tuple[int, int]):
        pattern = CSRPattern(_index_numpy(indptr, "indptr"), _index_numpy(indices, "indices"), shape, name="A")
        self._pattern = pattern
        self.values = _check_values(values, pattern.nnz)

    @classmethod
    def _wrap(cls, pattern: CSRPattern, values: torch.Tensor) -> "SparseMatrix":
        """Trusted constructor: pattern and values already checked."""
        matrix = object.__new__(cls)
        matrix._pattern = pattern
        matrix.values = values
        return matrix

    @property
    def pattern(self) -> CSRPattern:
        """The CSR pattern (no gradient). While dynamo traces, a matrix made in the graph holds its
        pattern as a graph constant (`sparsad.torch._traced.Static`); such a matrix that reaches
        eager code (a graph break, a compiled function's result) reads the pattern itself."""
        pattern = self._pattern
        if isinstance(pattern, Static) and not torch.compiler.is_compiling():
            return pattern.obj
        return pattern

    def __getstate__(self) -> tuple:  # (the pattern itself, not a graph constant of this process)
        return self.pattern, self.values

    def __setstate__(self, state: tuple) -> None:
        self._pattern, self.values = state

    # -- constructors --------------------------------------------------------------------------
    @classmethod
    def from_scipy(cls, matrix: Any, *, dtype: torch.dtype | None = None, device: Any = None,
                   requires_grad: bool = False) -> "SparseMatrix":
        """From any scipy.sparse matrix or array; duplicates are summed, explicit zeros kept."""
        import scipy.sparse

        if not scipy.sparse.issparse(matrix):
            raise FormatError(f"matrix must be a scipy.sparse matrix, got {type(matrix).__name__}; "
                              "use SparseMatrix.from_dense for dense arrays")
        from sparsad.formats.validate import check_scipy

        check_scipy(matrix, "matrix")  # before scipy converts or sums: its C++ code trusts the arrays
        csr = scipy.sparse.csr_matrix(matrix, copy=True)
        if csr.dtype.kind not in "fiub":
            raise DTypeError(f"matrix must be real, got dtype {csr.dtype}")
        csr.sum_duplicates()
        csr.sort_indices()
        values = torch.as_tensor(csr.data.astype(np.float64 if csr.dtype != np.float32 else np.float32))
        if dtype is not None:
            values = values.to(dtype)
        pattern = CSRPattern(csr.indptr, csr.indices, csr.shape, name="matrix")
        values = _check_values(values.to(device), pattern.nnz).requires_grad_(requires_grad)
        return cls._wrap(pattern, values)

    @classmethod
    def from_torch(cls, tensor: torch.Tensor) -> "SparseMatrix":
        """From a torch sparse COO or CSR tensor; gradients flow back to `tensor`'s values."""
        if not isinstance(tensor, torch.Tensor):
            raise FormatError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.ndim != 2:
            raise ShapeError(f"tensor must be 2-D, got shape {tuple(tensor.shape)}")
        shape = tuple(tensor.shape)
        if tensor.layout in (torch.sparse_coo, torch.sparse_csr):
            from sparsad.formats.validate import check_torch_sparse

            check_torch_sparse(tensor, "tensor")  # before coalesce, which trusts the indices
        if tensor.layout == torch.sparse_coo:
            tensor = tensor.coalesce()  # sorted row-major, duplicates summed
            rows, cols = (_index_numpy(i, "tensor.indices()") for i in tensor.indices())
            values = tensor.values()
            order = None
        elif tensor.layout == torch.sparse_csr:
            indptr = _index_numpy(tensor.crow_indices(), "tensor.crow_indices()")
            cols = _index_numpy(tensor.col_indices(), "tensor.col_indices()")
            rows = np.repeat(np.arange(shape[0]), np.diff(indptr))
            values = tensor.values()
            order = np.lexsort((cols, rows))  # torch does not require sorted columns
            if np.all(order == np.arange(order.shape[0])):
                order = None
            elif values.requires_grad:  # torch's backward of values() permutes such gradients
                raise FormatError("tensor is a CSR tensor whose column indices are not sorted within each "
                                  "row, and its values require grad: torch would send the gradients to "
                                  "the wrong entries. Sort the columns (and values) of each row before "
                                  "building it, or pass a COO tensor")
        elif tensor.layout == torch.strided:
            raise FormatError("tensor is dense; use SparseMatrix.from_dense to keep its nonzeros")
        else:
            raise UnsupportedError(f"tensor layout {tensor.layout} is not supported; convert to COO or CSR")
        if order is not None:
            rows, cols, values = rows[order], cols[order], values[torch.as_tensor(order, device=values.device)]
            keys = rows.astype(np.int64) * shape[1] + cols
            if np.any(np.diff(keys) == 0):
                raise FormatError("tensor has duplicate entries in a row; coalesce it first")
        indptr = np.zeros(shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows.astype(np.int64), minlength=shape[0]), out=indptr[1:])
        pattern = CSRPattern(indptr, cols.astype(np.int64), shape, name="tensor")
        return cls._wrap(pattern, _check_values(values, pattern.nnz, "tensor.values()"))

    @classmethod
    def from_dense(cls, tensor: Any) -> "SparseMatrix":
        """Keep the nonzeros of a dense 2-D tensor (differentiably: gradients flow to `tensor`)."""
        if not isinstance(tensor, torch.Tensor):
            tensor = torch.as_tensor(np.asarray(tensor))
        if tensor.layout != torch.strided:
            raise FormatError(f"tensor must be dense; for layout {tensor.layout} use SparseMatrix.from_torch")
        if tensor.ndim != 2:
            raise ShapeError(f"tensor must be 2-D, got shape {tuple(tensor.shape)}")
        if tensor.dtype not in _FLOAT_DTYPES:
            raise DTypeError(f"tensor must be float32 or float64, got {tensor.dtype}")
        rows, cols = torch.nonzero(tensor.detach(), as_tuple=True)  # row-major order: canonical CSR
        numel = tensor.shape[0] * tensor.shape[1]
        if numel >= DENSE_RESULT_MIN_SIZE and rows.shape[0] > DENSE_RESULT_DENSITY * numel:
            warnings.warn(
                f"from_dense: {rows.shape[0]} of {numel} entries are nonzero; the SparseMatrix takes more "
                f"memory than the dense tensor and its ops run slower than dense ones", DenseResultWarning,
                stacklevel=2)
        rows_np = rows.cpu().numpy()
        indptr = np.zeros(tensor.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows_np, minlength=tensor.shape[0]), out=indptr[1:])
        pattern = CSRPattern(indptr, cols.cpu().numpy(), tuple(tensor.shape), check=False)
        return cls._wrap(pattern, tensor[rows, cols])

    # -- conversions ---------------------------------------------------------------------------
    @torch.compiler.disable  # NumPy or a torch sparse tensor: a graph break at the call
    def to_scipy(self):
        """A scipy CSR matrix with a copy of the values (detached)."""
        return self.pattern.to_scipy(self.values.detach().cpu().numpy().copy())

    @torch.compiler.disable  # NumPy or a torch sparse tensor: a graph break at the call
    def to_torch(self) -> torch.Tensor:
        """A torch sparse CSR tensor sharing the (differentiable) values."""
        dev = self.values.device
        return torch.sparse_csr_tensor(torch.tensor(self.pattern.indptr, device=dev, dtype=torch.int64),
                                       torch.tensor(self.pattern.indices, device=dev, dtype=torch.int64),
                                       self.values, size=self.shape)

    def to_dense(self) -> torch.Tensor:
        """The dense matrix (explicit densification; differentiable in the values)."""
        from sparsad.torch.linalg import pattern_index

        dev = self.values.device
        rows, cols = pattern_index(self.pattern, "rows", dev), pattern_index(self.pattern, "cols", dev)
        dense = torch.zeros(self.shape, dtype=self.values.dtype, device=dev)
        return dense.index_put((rows, cols), self.values)

    def to(self, device: Any = None, dtype: torch.dtype | None = None) -> "SparseMatrix":
        if dtype is not None and dtype not in _FLOAT_DTYPES:
            raise DTypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        return SparseMatrix._wrap(self.pattern, self.values.to(device=device, dtype=dtype))

    def double(self) -> "SparseMatrix":
        return self.to(dtype=torch.float64)

    def float(self) -> "SparseMatrix":
        return self.to(dtype=torch.float32)

    def detach(self) -> "SparseMatrix":
        return SparseMatrix._wrap(self.pattern, self.values.detach())

    def requires_grad_(self, requires_grad: bool = True) -> "SparseMatrix":
        self.values.requires_grad_(requires_grad)
        return self

    def with_values(self, values: torch.Tensor) -> "SparseMatrix":
        """The same pattern with new values (checked)."""
        return SparseMatrix._wrap(self.pattern, _check_values(values, self.nnz))

    # -- properties ----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return self.pattern.shape

    @property
    def nnz(self) -> int:
        return self.pattern.nnz

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def requires_grad(self) -> bool:
        return self.values.requires_grad

    @property
    def indptr(self) -> torch.Tensor:
        return torch.tensor(self.pattern.indptr)

    @property
    def indices(self) -> torch.Tensor:
        return torch.tensor(self.pattern.indices)

    @property
    def grad(self) -> "SparseMatrix | None":
        """The masked gradient: a SparseMatrix on this pattern, or None before backward."""
        grad = self.values.grad
        return None if grad is None else SparseMatrix._wrap(self.pattern, grad)

    @property
    def T(self) -> "SparseMatrix":
        from sparsad.torch.linalg import transpose

        return transpose(self)

    def __repr__(self) -> str:
        rows, cols = self.shape
        density = self.nnz / (rows * cols) if rows * cols else 0.0
        grad = ", requires_grad=True" if self.requires_grad else ""
        return (f"SparseMatrix(shape=({rows}, {cols}), nnz={self.nnz}, density={density:.3g}, "
                f"dtype={self.dtype}, device={self.device}, index={self.pattern.indices.dtype}{grad})")

    def __len__(self) -> int:
        return self.shape[0]

    # -- operators -----------------------------------------------------------------------------
    def __matmul__(self, other: Any):
        from sparsad.torch import linalg

        if isinstance(other, torch.Tensor):
            return linalg.spmv(self, other) if other.ndim == 1 else linalg.spmm(self, other)
        if isinstance(other, SparseMatrix):
            return linalg.spgemm(self, other)
        return NotImplemented

    def __rmatmul__(self, other: Any):
        from sparsad.torch import linalg

        if isinstance(other, torch.Tensor):  # X A = (A^T X^T)^T
            if other.ndim == 1:
                return linalg.spmv(linalg.transpose(self), other)
            return linalg.spmm(linalg.transpose(self), other.transpose(-1, -2)).transpose(-1, -2)
        return NotImplemented

    def __add__(self, other: Any):
        from sparsad.torch import linalg

        if isinstance(other, SparseMatrix):
            return linalg.add(self, other)
        if isinstance(other, torch.Tensor) or np.isscalar(other):
            raise UnsupportedError("SparseMatrix + dense would densify the sparse operand; add "
                                   "A.to_dense() explicitly, or build the other operand as a SparseMatrix")
        return NotImplemented

    __radd__ = __add__

    def __sub__(self, other: Any):
        from sparsad.torch import linalg

        if isinstance(other, SparseMatrix):
            return linalg.add(self, other, 1.0, -1.0)
        return self.__add__(other)

    def __neg__(self) -> "SparseMatrix":
        return SparseMatrix._wrap(self.pattern, -self.values)

    def __mul__(self, other: Any) -> "SparseMatrix":
        if isinstance(other, SparseMatrix):
            raise UnsupportedError("elementwise SparseMatrix * SparseMatrix is not supported; use @ for products")
        if isinstance(other, torch.Tensor):
            if other.ndim != 0:
                raise UnsupportedError("SparseMatrix * tensor supports 0-d (scalar) tensors only")
            return SparseMatrix._wrap(self.pattern, self.values * other)
        if isinstance(other, (int, float, np.floating, np.integer)):
            return SparseMatrix._wrap(self.pattern, self.values * float(other))
        return NotImplemented

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> "SparseMatrix":
        if isinstance(other, (torch.Tensor, int, float, np.floating, np.integer)):
            return self * (1.0 / other)
        return NotImplemented

    # -- tensor-like methods (numml parity) -----------------------------------------------------
    def clone(self) -> "SparseMatrix":
        """A copy whose values are a differentiable clone (the immutable pattern is shared)."""
        return SparseMatrix._wrap(self.pattern, self.values.clone())

    def cpu(self) -> "SparseMatrix":
        return self.to("cpu")

    def size(self, dim: int | None = None):
        """torch.Size of the shape, or one of its sizes."""
        return torch.Size(self.shape) if dim is None else self.shape[dim]

    def t(self) -> "SparseMatrix":
        return self.T

    @property
    def mT(self) -> "SparseMatrix":  # noqa: N802 - torch's name
        return self.T

    def sum(self, dim: int | None = None) -> torch.Tensor:
        """Sum of all entries, or per column (dim=0) / per row (dim=1), as dense tensors."""
        from sparsad.torch.structure import sum as _sum

        return _sum(self, dim)

    def __pow__(self, p: Any) -> "SparseMatrix":
        """Elementwise power of the stored values."""
        return SparseMatrix._wrap(self.pattern, self.values ** p)

    def __abs__(self) -> "SparseMatrix":
        return SparseMatrix._wrap(self.pattern, self.values.abs())


def as_sparse_matrix(value: Any, name: str) -> SparseMatrix:
    if not isinstance(value, SparseMatrix):
        raise InputError(f"{name} must be a sparsad.torch.SparseMatrix, got {type(value).__name__}; "
                         f"build one with SparseMatrix.from_scipy / from_torch / from_dense")
    return value
