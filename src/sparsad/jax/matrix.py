"""`SparseMatrix` for JAX: a CSR pattern (static, NumPy) plus a `values` array (a pytree leaf).

Because the pattern is static auxiliary data, every JAX transform (jit, grad, jvp, vmap,
jacfwd, jacrev) sees only the values: gradients follow the masked convention (one number per
stored entry), and a vmap over matrices batches their values on one shared pattern.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sparsad.errors import DTypeError, FormatError, InputError, ShapeError
from sparsad.ops.pattern import CSRPattern


def _jnp():
    import jax.numpy as jnp

    return jnp


class SparseMatrix:
    """CSR matrix with differentiable `values` (masked gradients). Build with `from_scipy`,
    `from_bcoo`/`from_bcsr` (concrete indices), or `with_values` on an existing pattern.

    >>> import numpy as np, scipy.sparse as sp, jax.numpy as jnp, sparsad.jax as sj
    >>> A = sj.SparseMatrix.from_scipy(sp.csr_matrix(np.array([[4.0, 1.0], [1.0, 3.0]], np.float32)))
    >>> A
    sparsad.jax.SparseMatrix(shape=(2, 2), nnz=4, dtype=float32)
    >>> A.to_dense().tolist()
    [[4.0, 1.0], [1.0, 3.0]]
    """

    __slots__ = ("pattern", "values")

    def __init__(self, pattern: CSRPattern, values: Any):
        self.pattern = pattern
        self.values = values

    # pytree protocol: the values are the only leaf
    def tree_flatten(self):
        return (self.values,), self.pattern

    @classmethod
    def tree_unflatten(cls, pattern, children):
        return cls(pattern, children[0])

    @classmethod
    def from_scipy(cls, matrix: Any, dtype: Any = None) -> "SparseMatrix":
        """From any scipy.sparse matrix or array (duplicates summed, columns sorted)."""
        import scipy.sparse

        if not scipy.sparse.issparse(matrix):
            raise FormatError(f"matrix must be a scipy.sparse matrix, got {type(matrix).__name__}")
        if matrix.dtype.kind not in "fiu":
            raise DTypeError(f"matrix must be real, got dtype {matrix.dtype}")
        csr = scipy.sparse.csr_matrix(matrix, copy=True)
        csr.sum_duplicates()
        csr.sort_indices()
        pattern = CSRPattern(csr.indptr, csr.indices, csr.shape, name="matrix")
        return cls(pattern, _jnp().asarray(csr.data, dtype=dtype or _default_float(csr.dtype)))

    @classmethod
    def from_bcoo(cls, matrix: Any) -> "SparseMatrix":
        """From a 2-D jax.experimental.sparse BCOO with concrete indices; its data stays differentiable
        (entries are reordered to CSR order and duplicates summed, differentiably)."""
        indices = _concrete(matrix.indices, "BCOO indices")
        if indices.ndim != 2 or indices.shape[1] != 2 or matrix.data.ndim != 1:
            raise ShapeError("from_bcoo takes an unbatched 2-D BCOO with scalar entries (n_batch = n_dense = 0)")
        shape = tuple(int(s) for s in matrix.shape)
        rows, cols = indices[:, 0].astype(np.int64), indices[:, 1].astype(np.int64)
        inside = (rows >= 0) & (rows < shape[0]) & (cols >= 0) & (cols < shape[1])
        if not np.all(inside):
            raise FormatError(f"BCOO has indices outside its shape {shape}")
        keys = rows * max(shape[1], 1) + cols
        unique, slot = np.unique(keys, return_inverse=True)
        urows, ucols = np.divmod(unique, max(shape[1], 1))
        indptr = np.zeros(shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(urows, minlength=shape[0]), out=indptr[1:])
        pattern = CSRPattern(indptr, ucols, shape, check=False)
        import jax

        values = jax.ops.segment_sum(matrix.data, slot.reshape(-1), num_segments=unique.shape[0])
        return cls(pattern, values)

    @classmethod
    def from_bcsr(cls, matrix: Any) -> "SparseMatrix":
        return cls.from_bcoo(matrix.to_bcoo())

    def to_bcoo(self):
        """A jax.experimental.sparse.BCOO sharing the (differentiable) values."""
        from jax.experimental import sparse as jsparse

        indices = np.stack([self.pattern.rows, self.pattern.indices.astype(np.int64)], axis=1)
        return jsparse.BCOO((self.values, _jnp().asarray(indices, dtype=_jnp().int32)), shape=self.shape)

    def to_scipy(self):
        return self.pattern.to_scipy(np.asarray(self.values))

    def to_dense(self):
        jnp = _jnp()
        dense = jnp.zeros(self.shape, dtype=self.values.dtype)
        return dense.at[self.pattern.rows, self.pattern.indices.astype(np.int64)].set(self.values)

    def with_values(self, values: Any) -> "SparseMatrix":
        if getattr(values, "shape", None) != (self.nnz,):
            raise ShapeError(f"values must have shape ({self.nnz},), got {getattr(values, 'shape', None)}")
        return SparseMatrix(self.pattern, values)

    @property
    def shape(self) -> tuple[int, int]:
        return self.pattern.shape

    @property
    def nnz(self) -> int:
        return self.pattern.nnz

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def T(self) -> "SparseMatrix":
        from sparsad.jax.linalg import transpose

        return transpose(self)

    def __matmul__(self, other: Any):
        from sparsad.jax import linalg

        if isinstance(other, SparseMatrix):
            return linalg.spgemm(self, other)
        return linalg.spmm(self, other)

    def __add__(self, other: Any):
        from sparsad.jax import linalg

        if isinstance(other, SparseMatrix):
            return linalg.add(self, other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"sparsad.jax.SparseMatrix(shape={self.shape}, nnz={self.nnz}, dtype={self.values.dtype})"


def _default_float(dtype) -> Any:
    import jax

    if np.dtype(dtype) == np.float32 or not jax.config.jax_enable_x64:
        return np.float32
    return np.float64


def _concrete(array: Any, what: str) -> np.ndarray:
    import jax

    if isinstance(array, jax.core.Tracer):
        raise InputError(f"{what} are traced (inside jit/vmap); build the SparseMatrix outside the transform "
                         "(the pattern is static) and pass it in")
    return np.asarray(array)


def as_sparse(value: Any, name: str) -> SparseMatrix:
    """SparseMatrix, BCOO or BCSR -> SparseMatrix (our own error otherwise)."""
    if isinstance(value, SparseMatrix):
        return value
    kind = type(value).__name__
    if kind == "BCOO":
        return SparseMatrix.from_bcoo(value)
    if kind == "BCSR":
        return SparseMatrix.from_bcsr(value)
    raise InputError(f"{name} must be a sparsad.jax.SparseMatrix or a jax.experimental.sparse BCOO/BCSR, "
                     f"got {kind}; build one with SparseMatrix.from_scipy")


def _register() -> None:
    import jax

    jax.tree_util.register_pytree_node(SparseMatrix, lambda m: m.tree_flatten(),
                                       SparseMatrix.tree_unflatten)


_register()
