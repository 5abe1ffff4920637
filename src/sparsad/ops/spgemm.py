"""Sparse @ sparse by Gustavson's algorithm: a symbolic phase computed once per pattern pair, and
numeric phases (product, and both masked gradients) that reuse it for new values.

The symbolic phase (and the first product, fused with it) runs over the columns of C, in
O(flops + output + rows) time and O(output + rows) memory: a marker per row remembers the last
output column that reached it, and each new entry (i, j) takes the next free slot of row i, so
rows come out sorted with no sort (the columns of A and B are one counting sort each). The
three numeric phases walk the row-wise triple loop

    for i, for p in A[i, :] (column k), for q in B[k, :] (column j), c = position of C[i, j]:
        C[c] += A[p] B[q]        (product)
        gA[p] += G[c] B[q]       (gradient towards A, masked to A's pattern; row-parallel)
        gB[q] += A[p] G[c]       (gradient towards B, masked to B's pattern; scatters)

which is the trilinear form sum A[p] B[q] C[c] evaluated towards each of its three roles: the
derivative of any one evaluation is another evaluation, so every order of derivative reuses it.

Example:
    >>> import numpy as np, scipy.sparse as sp
    >>> from sparsad.ops.pattern import CSRPattern
    >>> a = sp.random(5, 4, density=0.5, format="csr", random_state=0)
    >>> b = sp.random(4, 3, density=0.5, format="csr", random_state=1)
    >>> pa, pb = (CSRPattern(m.indptr, m.indices, m.shape) for m in (a, b))
    >>> product = SpGEMM(pa, pb)
    >>> bool(np.allclose(product.pattern.to_scipy(product.values(a.data, b.data)).toarray(), (a @ b).toarray()))
    True
"""
from __future__ import annotations

from functools import cached_property

import numpy as np
from numba import njit

from sparsad.errors import DTypeError, ShapeError
from sparsad.ops.pattern import CSRPattern

# The kernels below write into arrays the caller allocates with NumPy, and index arrays are
# passed as unsigned views (no negative-index test on each access) of the narrowest integer type
# that holds them: this halves the memory traffic and the heap footprint of a first call, whose
# freed large arrays glibc otherwise returns to the system and page-faults back in on the next
# call (measured 700 faults a call, 1.5x the kernel's time, on Gaertner/nopoly).

def _narrow(bound: int) -> type:
    """The index dtype for values below `bound`: int32 when it fits (as SciPy does), else int64."""
    return np.int32 if bound <= np.iinfo(np.int32).max else np.int64


def _kernel_view(index: np.ndarray) -> np.ndarray:
    """An index array as the kernels take it: an unsigned view (indices are validated non-negative)
    when it is contiguous int32 or int64, a uint64 copy otherwise."""
    if index.dtype in (np.int32, np.int64) and index.flags.c_contiguous:
        return index.view(np.uint32 if index.dtype == np.int32 else np.uint64)
    return np.ascontiguousarray(index, dtype=np.uint64)


@njit(cache=True, nogil=True)
def _transpose_into(indptr, indices, values, t_indptr, t_indices, t_values, perm):  # pragma: no cover
    """Counting sort of the entries by column (t_indptr arrives zeroed, one longer than columns);
    values are moved along when `t_values` is not empty, positions recorded when `perm` is not."""
    n_cols = t_indptr.shape[0] - 1
    move, record = t_values.shape[0] > 0, perm.shape[0] > 0
    for p in range(indices.shape[0]):
        t_indptr[indices[p]] += 1
    total = 0
    for j in range(n_cols):  # exclusive scan: t_indptr[j] = start of row j of the transpose
        count = t_indptr[j]
        t_indptr[j] = total
        total += count
    for i in range(indptr.shape[0] - 1):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            pos = t_indptr[j]
            t_indptr[j] = pos + 1
            t_indices[pos] = i
            if move:
                t_values[pos] = values[p]
            if record:
                perm[pos] = p
    for j in range(n_cols, 0, -1):  # each start has moved on to the next row's: shift back by one
        t_indptr[j] = t_indptr[j - 1]
    t_indptr[0] = 0


def csr_transpose(indptr: np.ndarray, indices: np.ndarray, shape: tuple[int, int], values: np.ndarray | None = None,
                  perm: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(indptr, indices, perm, values) of the transpose by one counting sort, O(nnz + rows + cols).

    The rows of the input are visited in order, so every row of the transpose comes out sorted;
    values(A^T) = values(A)[perm]. `perm` (when asked) and the moved `values` (when given) are
    None otherwise. Indices come back int32 when the row count fits."""
    nnz = indices.shape[0]
    t_indptr = np.zeros(shape[1] + 1, dtype=np.int64)
    t_indices = np.empty(nnz, dtype=_narrow(shape[0]))
    t_perm = np.empty(nnz if perm else 0, dtype=np.int64)
    t_values = np.empty(0 if values is None else nnz, dtype=np.float64 if values is None else values.dtype)
    _transpose_into(_kernel_view(indptr), _kernel_view(indices), t_values if values is None else values,
                    t_indptr.view(np.uint64), _kernel_view(t_indices), t_values, t_perm)
    return t_indptr, t_indices, (t_perm if perm else None), (None if values is None else t_values)


@njit(cache=True, nogil=True)
def _row_pointers(at_indptr, at_indices, bt_indptr, bt_indices, marker, indptr):  # pragma: no cover - compiled
    """Row pointers of C = A B (into indptr, zeroed) from the columns of A and B: output column j
    reaches the rows i of A's columns k over B's column j; a marker (the last j that reached row i)
    counts each (i, j) once."""
    m = indptr.shape[0] - 1
    marker[:] = -1
    for j in range(bt_indptr.shape[0] - 1):
        for p in range(bt_indptr[j], bt_indptr[j + 1]):
            k = bt_indices[p]
            for q in range(at_indptr[k], at_indptr[k + 1]):
                i = at_indices[q]
                if marker[i] != j:
                    marker[i] = j
                    indptr[i] += 1
    total = 0
    for i in range(m):  # exclusive scan
        count = indptr[i]
        indptr[i] = total
        total += count
    indptr[m] = total


@njit(cache=True, nogil=True)
def _fill_pattern(at_indptr, at_indices, bt_indptr, bt_indices, marker, fill, indices):  # pragma: no cover
    """The column indices of C = A B, rows sorted (see `_fill_product`)."""
    marker[:] = -1
    for j in range(bt_indptr.shape[0] - 1):
        for p in range(bt_indptr[j], bt_indptr[j + 1]):
            k = bt_indices[p]
            for q in range(at_indptr[k], at_indptr[k + 1]):
                i = at_indices[q]
                if marker[i] != j:
                    marker[i] = j
                    indices[fill[i]] = j
                    fill[i] += 1


@njit(cache=True, nogil=True)
def _fill_product(at_indptr, at_indices, at, bt_indptr, bt_indices, bt, marker, fill, indices, values):  # pragma: no cover
    """Column indices and values of C = A B, rows sorted, from A^T and B^T (values `at`, `bt`).

    Gustavson's algorithm over the columns of C (C^T = B^T A^T row by row) puts each new entry
    (i, j) in the next free slot of row i (`fill`, from the row pointers); columns are visited in
    increasing j, so every row is filled already sorted. (Row-wise Gustavson needs a sort per row,
    O(count log count), which cost 3-10x SciPy's unsorted product on some matrices.)"""
    marker[:] = -1  # marker[i]: the last output column that reached row i
    for j in range(bt_indptr.shape[0] - 1):
        for p in range(bt_indptr[j], bt_indptr[j + 1]):
            k = bt_indices[p]
            bv = bt[p]
            for q in range(at_indptr[k], at_indptr[k + 1]):
                i = at_indices[q]
                if marker[i] != j:
                    marker[i] = j
                    slot = fill[i]
                    fill[i] = slot + 1
                    indices[slot] = j
                    values[slot] = at[q] * bv
                else:  # (i, j) is row i's last entry so far
                    values[fill[i] - 1] += at[q] * bv


def _column_gustavson(at_indptr, at_indices, bt_indptr, bt_indices, shape: tuple[int, int], at=None, bt=None):
    """(indptr, indices, values or None) of C = A B (shape `shape`) with sorted rows, from the
    columns of A and B as kernel views (and their values, when given): O(flops + output + rows)
    time, O(output + rows) memory."""
    m = shape[0]
    marker = np.empty(m, dtype=np.int64)
    indptr = np.zeros(m + 1, dtype=np.int64)
    _row_pointers(at_indptr, at_indices, bt_indptr, bt_indices, marker, indptr)
    indices = np.empty(indptr[m], dtype=_narrow(shape[1]))
    fill = indptr[:m].copy()  # next free slot of each row
    if at is None:
        _fill_pattern(at_indptr, at_indices, bt_indptr, bt_indices, marker, fill, _kernel_view(indices))
        return indptr, indices, None
    values = np.empty(indptr[m], dtype=at.dtype)
    _fill_product(at_indptr, at_indices, at, bt_indptr, bt_indices, bt, marker, fill, _kernel_view(indices), values)
    return indptr, indices, values


@njit(cache=True, nogil=True)
def _product(a_indptr, a_indices, a, b_indptr, b_indices, b, c_indptr, c_indices, where, out):  # pragma: no cover
    """out[c] = sum A[p] B[q] over the terms of output entry c (`where`: column -> position scratch)."""
    for i in range(a_indptr.shape[0] - 1):
        for c in range(c_indptr[i], c_indptr[i + 1]):
            where[c_indices[c]] = c
            out[c] = 0.0
        for p in range(a_indptr[i], a_indptr[i + 1]):
            k = a_indices[p]
            ap = a[p]
            for q in range(b_indptr[k], b_indptr[k + 1]):
                out[where[b_indices[q]]] += ap * b[q]


@njit(cache=True, nogil=True)
def _towards_a(a_indptr, a_indices, b_indptr, b_indices, b, c_indptr, c_indices, g, where, out):  # pragma: no cover
    """out[p] = sum G[c] B[q] over the terms of A-entry p: (G B^T) masked to A's pattern."""
    for i in range(a_indptr.shape[0] - 1):
        for c in range(c_indptr[i], c_indptr[i + 1]):
            where[c_indices[c]] = c
        for p in range(a_indptr[i], a_indptr[i + 1]):
            k = a_indices[p]
            acc = 0.0
            for q in range(b_indptr[k], b_indptr[k + 1]):
                acc += g[where[b_indices[q]]] * b[q]
            out[p] = acc


@njit(cache=True, nogil=True)
def _towards_b(a_indptr, a_indices, a, b_indptr, b_indices, c_indptr, c_indices, g, where, out):  # pragma: no cover
    """out[q] = sum A[p] G[c] over the terms of B-entry q: (A^T G) masked to B's pattern."""
    out[:] = 0.0
    for i in range(a_indptr.shape[0] - 1):
        for c in range(c_indptr[i], c_indptr[i + 1]):
            where[c_indices[c]] = c
        for p in range(a_indptr[i], a_indptr[i + 1]):
            k = a_indices[p]
            ap = a[p]
            for q in range(b_indptr[k], b_indptr[k + 1]):
                out[q] += ap * g[where[b_indices[q]]]


def _as_values(array, size: int, name: str) -> np.ndarray:
    array = np.ascontiguousarray(array)
    if array.dtype not in (np.float32, np.float64):
        raise DTypeError(f"{name} must be float32 or float64, got {array.dtype}")
    if array.shape != (size,):
        raise ShapeError(f"{name} must have shape ({size},) (one value per stored entry), got {array.shape}")
    return array


def _same_array(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether two contiguous arrays are views of the same memory with the same dtype and length."""
    return x.dtype == y.dtype and x.shape == y.shape and x.ctypes.data == y.ctypes.data


def _columns(a: CSRPattern, b: CSRPattern, a_values=None, b_values=None):
    """The columns of A and of B (their transposes) as kernel views, with their values when given:
    ((indptr, indices, values), (indptr, indices, values)). A pattern's cached transpose is used
    when it has one; else one counting sort (not cached: a first call's cost), shared by A @ A."""
    def columns(pattern, values):
        cached = pattern.__dict__.get("transpose")
        if cached is not None:
            transposed, perm = cached
            indptr, indices, moved = transposed.indptr, transposed.indices, None if values is None else values[perm]
        else:
            indptr, indices, _, moved = csr_transpose(pattern.indptr, pattern.indices, pattern.shape, values, perm=False)
        return _kernel_view(indptr), _kernel_view(indices), moved

    first = columns(a, a_values)
    same = a is b or (a.shape == b.shape and a.indptr is b.indptr and a.indices is b.indices)
    if same and (b_values is None or _same_array(a_values, b_values)):
        return first, first
    return first, columns(b, b_values)


class SpGEMM:
    """The reusable symbolic phase of C = A B: build once per pattern pair, evaluate for new values.

    `pattern` is the structural product pattern (an entry wherever some A[i, k] B[k, j] exists, even
    if the values cancel, so that gradients reach every contributing entry). `values(a, b)` is the
    product, `towards_a(b, g)` and `towards_b(a, g)` its masked gradients (NumPy arrays in and out).
    Holds the operands' index arrays, not the operand patterns (so pattern caches can be weak).
    """

    def __init__(self, a: CSRPattern, b: CSRPattern, indptr: np.ndarray | None = None,
                 indices: np.ndarray | None = None):
        if a.shape[1] != b.shape[0]:
            raise ShapeError(f"A @ B needs A.shape[1] == B.shape[0], got A {a.shape} and B {b.shape}")
        self.a_shape, self.b_shape = a.shape, b.shape
        self._operands = (a.indptr, a.indices, b.indptr, b.indices)
        if indptr is None:
            (at_indptr, at_indices, _), (bt_indptr, bt_indices, _) = _columns(a, b)
            indptr, indices, _ = _column_gustavson(at_indptr, at_indices, bt_indptr, bt_indices,
                                                   (a.shape[0], b.shape[1]))
        self.pattern = CSRPattern(indptr, indices, (a.shape[0], b.shape[1]), check=False)

    @classmethod
    def with_values(cls, a: CSRPattern, b: CSRPattern, a_values, b_values) -> tuple["SpGEMM", np.ndarray]:
        """The symbolic phase and the first product in one pass over the terms: (SpGEMM, values of C)."""
        a_values, b_values = _as_values(a_values, a.nnz, "a"), _as_values(b_values, b.nnz, "b")
        dtype = np.result_type(a_values, b_values)
        if a.shape[1] != b.shape[0]:
            raise ShapeError(f"A @ B needs A.shape[1] == B.shape[0], got A {a.shape} and B {b.shape}")
        columns = _columns(a, b, a_values.astype(dtype, copy=False), b_values.astype(dtype, copy=False))
        (at_indptr, at_indices, at), (bt_indptr, bt_indices, bt) = columns
        indptr, indices, values = _column_gustavson(at_indptr, at_indices, bt_indptr, bt_indices,
                                                    (a.shape[0], b.shape[1]), at, bt)
        return cls(a, b, indptr, indices), values

    @cached_property
    def _index_arrays(self) -> tuple[np.ndarray, ...]:
        """A's, B's and C's (indptr, indices) as kernel views (made on first use)."""
        return tuple(_kernel_view(x) for x in (*self._operands, self.pattern.indptr, self.pattern.indices))

    def __repr__(self) -> str:
        return f"SpGEMM({self.a_shape} @ {self.b_shape} -> nnz {self.pattern.nnz})"

    @property
    def a_nnz(self) -> int:
        return int(self._operands[1].shape[0])

    @property
    def b_nnz(self) -> int:
        return int(self._operands[3].shape[0])

    def _where(self) -> np.ndarray:
        return np.empty(max(self.b_shape[1], 1), dtype=np.int64)

    def values(self, a, b) -> np.ndarray:
        """Values of C = A B on `pattern`, given A's and B's values."""
        a, b = _as_values(a, self.a_nnz, "a"), _as_values(b, self.b_nnz, "b")
        out = np.empty(self.pattern.nnz, dtype=np.result_type(a, b))
        a_indptr, a_indices, b_indptr, b_indices, c_indptr, c_indices = self._index_arrays
        _product(a_indptr, a_indices, a, b_indptr, b_indices, b, c_indptr, c_indices, self._where(), out)
        return out

    def towards_a(self, b, g) -> np.ndarray:
        """(G B^T) on A's pattern, for G given on C's pattern (the gradient of <G, A B> in A)."""
        b, g = _as_values(b, self.b_nnz, "b"), _as_values(g, self.pattern.nnz, "g")
        out = np.empty(self.a_nnz, dtype=np.result_type(b, g))
        a_indptr, a_indices, b_indptr, b_indices, c_indptr, c_indices = self._index_arrays
        _towards_a(a_indptr, a_indices, b_indptr, b_indices, b, c_indptr, c_indices, g, self._where(), out)
        return out

    def towards_b(self, a, g) -> np.ndarray:
        """(A^T G) on B's pattern, for G given on C's pattern (the gradient of <G, A B> in B)."""
        a, g = _as_values(a, self.a_nnz, "a"), _as_values(g, self.pattern.nnz, "g")
        out = np.empty(self.b_nnz, dtype=np.result_type(a, g))
        a_indptr, a_indices, b_indptr, b_indices, c_indptr, c_indices = self._index_arrays
        _towards_b(a_indptr, a_indices, a, b_indptr, b_indices, c_indptr, c_indices, g, self._where(), out)
        return out

    def evaluate(self, out_role: int, operands: dict[int, np.ndarray]) -> np.ndarray:
        """The trilinear form towards role 0 (A), 1 (B) or 2 (C) from the other two roles' values."""
        if out_role == 2:
            return self.values(operands[0], operands[1])
        if out_role == 0:
            return self.towards_a(operands[1], operands[2])
        return self.towards_b(operands[0], operands[2])

    @cached_property
    def terms(self):
        """The explicit term list (O(flops) memory) for consumers that need one (other devices)."""
        from sparsad.ops import kernels
        from sparsad.ops.contract import Plan, Terms

        c = self.pattern
        as_i64 = (np.asarray(x, dtype=np.int64) for x in (*self._operands, c.indptr, c.indices))
        ta, tb, tc, seg = kernels.spgemm_terms(*as_i64, self.b_shape[1])
        return Terms((ta, tb, tc), (self.a_nnz, self.b_nnz, c.nnz), scalar=0,
                     plans={2: Plan("generic", 0, 1, seg, ta, tb)})


def spgemm_symbolic(a: CSRPattern, b: CSRPattern):
    """Pattern of C = A B and its term list (role 0 = A values, 1 = B values, 2 = C values)."""
    product = a.product(b)
    return product.pattern, product.terms
