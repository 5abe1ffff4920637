"""CSR sparsity patterns: validation, and the symbolic phase of every op (computed once, cached).

A pattern is the structure of a sparse matrix without its values: `indptr`, `indices`, `shape`.
Stored entries define the mask of the masked-gradient convention, explicit zeros included.
Everything that depends only on structure (transpose permutation, product and sum patterns,
diagonal positions) is computed here once per pattern and cached on the immutable object.
"""
from __future__ import annotations

import weakref
from functools import cached_property
from typing import Any

import numpy as np

from sparsad.errors import DTypeError, FormatError, ShapeError

_INDEX_DTYPES = (np.int32, np.int64)


def _as_index_array(array, name: str) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim != 1:
        raise FormatError(f"{name} must be a 1-D array, got {array.ndim}-D with shape {array.shape}")
    if array.size == 0 and array.dtype.kind == "f":  # np.array([]) is float64
        array = array.astype(np.int64)
    if array.dtype.kind not in "iu":
        raise DTypeError(f"{name} must hold integers (int32 or int64), got dtype {array.dtype}")
    if array.dtype not in _INDEX_DTYPES:
        array = array.astype(np.int64)
    return array


def _as_shape(shape, name: str = "shape") -> tuple[int, int]:
    try:
        rows, cols = (int(s) for s in shape)
    except (TypeError, ValueError):
        raise ShapeError(f"{name} must be a pair (rows, cols) of integers, got {shape!r}") from None
    if rows < 0 or cols < 0:
        raise ShapeError(f"{name} must be non-negative, got {shape!r}")
    return rows, cols


class CSRPattern:
    """Immutable CSR structure (row pointers, sorted unique column indices per row, shape).

    >>> import numpy as np
    >>> pattern = CSRPattern(np.array([0, 2, 3]), np.array([0, 1, 1]), (2, 2))
    >>> pattern, pattern.nnz
    (CSRPattern(shape=(2, 2), nnz=3), 3)
    """

    __slots__ = ("indptr", "indices", "shape", "__dict__", "__weakref__")

    def __init__(self, indptr, indices, shape, *, check: bool = True, name: str = "A"):
        self.shape = _as_shape(shape, f"{name}.shape")
        self.indptr = _as_index_array(indptr, f"{name}.indptr")
        self.indices = _as_index_array(indices, f"{name}.indices")
        if check:
            self._validate(name)
        self.indptr.flags.writeable = False
        self.indices.flags.writeable = False

    def _validate(self, name: str) -> None:
        rows, cols = self.shape
        indptr, indices = self.indptr, self.indices
        if indptr.shape[0] != rows + 1:
            raise FormatError(f"{name}.indptr must have rows + 1 = {rows + 1} entries, got {indptr.shape[0]}")
        if indptr[0] != 0:
            raise FormatError(f"{name}.indptr must start at 0, got {indptr[0]}")
        if np.any(np.diff(indptr) < 0):
            row = int(np.argmax(np.diff(indptr) < 0))
            raise FormatError(f"{name}.indptr must be non-decreasing; it decreases after row {row}")
        if indptr[-1] != indices.shape[0]:
            raise FormatError(
                f"{name}.indptr[-1] = {indptr[-1]} must equal len({name}.indices) = {indices.shape[0]}")
        if indices.size:
            low, high = indices.min(), indices.max()
            if low < 0 or high >= cols:
                bad = low if low < 0 else high
                raise FormatError(f"{name}.indices holds column {bad}, outside [0, {cols}) for shape {self.shape}")
            starts = np.zeros(indices.shape[0], dtype=bool)
            starts[indptr[:-1][indptr[:-1] < indices.shape[0]]] = True
            unsorted = (np.diff(indices) <= 0) & ~starts[1:]
            if unsorted.any():
                pos = int(np.argmax(unsorted)) + 1
                row = int(np.searchsorted(indptr, pos, side="right") - 1)
                raise FormatError(
                    f"{name}.indices must be strictly increasing within each row (sorted, no duplicates); "
                    f"row {row} is not. Canonicalise with scipy (sum_duplicates(), sort_indices()) or "
                    f"build with SparseMatrix.from_scipy")

    @classmethod
    def from_scipy(cls, matrix: Any, name: str = "pattern") -> "CSRPattern":
        """The structure of a scipy.sparse matrix or array of any format: one entry per stored
        coordinate (duplicates merged, explicit zeros kept: they are part of the mask), rows sorted.

        Its index arrays are validated in O(nnz) first, naming `name`: scipy's constructors check
        little and its C++ routines (conversion, sum_duplicates) trust the rest and may crash.

        >>> import scipy.sparse as sp
        >>> CSRPattern.from_scipy(sp.coo_matrix(([1.0, 2.0, 0.0], ([0, 0, 1], [1, 1, 0])), shape=(2, 2)))
        CSRPattern(shape=(2, 2), nnz=2)
        """
        import scipy.sparse

        from sparsad.formats.validate import check_scipy

        if not scipy.sparse.issparse(matrix):
            raise FormatError(f"{name} must be a scipy.sparse matrix or array, got {type(matrix).__name__}")
        check_scipy(matrix, name)
        # values do not matter for a structure: booleans (merged duplicates OR together, never cancel)
        csr = scipy.sparse.csr_matrix(matrix.astype(np.bool_, copy=True))
        csr.sum_duplicates()
        csr.sort_indices()
        return cls(csr.indptr, csr.indices, csr.shape, name=name)

    # -- basic facts ---------------------------------------------------------------------------
    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    def __repr__(self) -> str:
        return f"CSRPattern(shape={self.shape}, nnz={self.nnz})"

    @cached_property
    def rows(self) -> np.ndarray:
        """Row index of every stored entry (the COO row array)."""
        counts = np.diff(self.indptr)
        return np.repeat(np.arange(self.shape[0], dtype=np.int64), counts)

    @cached_property
    def keys(self) -> np.ndarray:
        """row * cols + col for every entry: sorted, so membership is a binary search."""
        return self.rows * np.int64(self.shape[1]) + self.indices.astype(np.int64)

    def to_scipy(self, values: np.ndarray):
        import scipy.sparse

        return scipy.sparse.csr_matrix((values, self.indices, self.indptr), shape=self.shape)

    # -- transpose -----------------------------------------------------------------------------
    @cached_property
    def transpose(self) -> tuple["CSRPattern", np.ndarray]:
        """(pattern of A^T, perm) with values(A^T) = values(A)[perm]; A.T.T shares this pattern."""
        from sparsad.ops.spgemm import csr_transpose  # one counting sort, O(nnz + rows + cols)

        indptr, indices, perm, _ = csr_transpose(self.indptr, self.indices, self.shape)
        transposed = CSRPattern(indptr, indices, (self.shape[1], self.shape[0]), check=False)
        inverse = np.empty_like(perm)
        inverse[perm] = np.arange(perm.shape[0])
        transposed.__dict__["transpose"] = (self, inverse)
        return transposed, perm

    # -- diagonal ------------------------------------------------------------------------------
    @cached_property
    def diagonal_positions(self) -> np.ndarray:
        """Position of entry (i, i) for i < min(shape), or -1 where the diagonal is not stored."""
        n = min(self.shape)
        wanted = np.arange(n, dtype=np.int64) * (self.shape[1] + 1)
        pos = np.searchsorted(self.keys, wanted)
        found = pos < self.nnz
        found[found] = self.keys[pos[found]] == wanted[found]
        return np.where(found, pos, -1)

    def holds(self, other: "CSRPattern") -> bool:
        """Whether every entry of `other`, a pattern of the same shape, is an entry of self.

        >>> import scipy.sparse as sp
        >>> CSRPattern.from_scipy(sp.eye(3, format="csr")).holds(CSRPattern.from_scipy(sp.eye(3, k=1, format="csr")))
        False
        """
        if tuple(other.shape) != tuple(self.shape) or other.nnz > self.nnz:
            return False
        if other.nnz == 0:
            return True
        position = np.minimum(np.searchsorted(self.keys, other.keys), self.nnz - 1)
        return bool(np.array_equal(self.keys[position], other.keys))

    def positions_of(self, other: "CSRPattern") -> np.ndarray:
        """Position in self of each entry of `other` (whose entries must be a subset of self's)."""
        pos = np.searchsorted(self.keys, other.keys)
        return pos

    # -- symbolic phases of binary ops, cached per partner pattern -----------------------------
    @cached_property
    def _partners(self) -> dict:
        return {"add": weakref.WeakKeyDictionary(), "product": weakref.WeakKeyDictionary()}

    def union(self, other: "CSRPattern") -> tuple["CSRPattern", np.ndarray, np.ndarray]:
        """Pattern of A + B and the position of each entry of A and of B in it."""
        if self.shape != other.shape:
            raise ShapeError(f"A + B needs equal shapes, got A {self.shape} and B {other.shape}")
        cache = self._partners["add"]
        if other not in cache:
            keys = np.union1d(self.keys, other.keys)
            cols = self.shape[1] if self.shape[1] else 1
            rows, indices = np.divmod(keys, cols)
            indptr = np.zeros(self.shape[0] + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=self.shape[0]), out=indptr[1:])
            union = CSRPattern(indptr, indices, self.shape, check=False)
            cache[other] = (union, np.searchsorted(keys, self.keys), np.searchsorted(keys, other.keys))
        return cache[other]

    def product(self, other: "CSRPattern"):
        """The reusable symbolic phase of A @ B (`ops.spgemm.SpGEMM`), computed once per partner."""
        if self.shape[1] != other.shape[0]:
            raise ShapeError(f"A @ B needs A.shape[1] == B.shape[0], got A {self.shape} and B {other.shape}")
        cache = self._partners["product"]
        if other not in cache:
            from sparsad.ops.spgemm import SpGEMM

            cache[other] = SpGEMM(self, other)
        return cache[other]

    def product_with_values(self, other: "CSRPattern", values, other_values):
        """(SpGEMM, values of A @ B): on a first call the symbolic and numeric phases run as one pass."""
        cache = self._partners["product"]
        if other in cache:
            product = cache[other]
            return product, product.values(values, other_values)
        from sparsad.ops.spgemm import SpGEMM

        product, result = SpGEMM.with_values(self, other, values, other_values)
        cache[other] = product
        return product, result

    def matmul(self, other: "CSRPattern"):
        """Pattern of A @ B and its explicit term list (a-entry, b-entry, c-entry): O(flops) memory,
        for consumers that need terms; `product` evaluates without them."""
        product = self.product(other)
        return product.pattern, product.terms
