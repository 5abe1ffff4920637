"""Sparse @ sparse by row-wise Gustavson: a symbolic phase computed once per pattern pair, and
numeric phases (product, and both masked gradients) that reuse it for new values.

The symbolic phase runs in O(output + flops) time and O(output + columns) memory: one marker
array of length `columns` remembers which output columns a row has already produced. No list
of multiply terms is kept. The three numeric phases walk the same triple loop

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

_INSERTION_SORT_MAX = 32  # rows up to this long are insertion-sorted in place


@njit(cache=True, nogil=True)
def _sort_row(indices, start, stop, marker, row, low, high, bounds, runs, src, dst):  # pragma: no cover
    """Sort indices[start:stop], the distinct columns of one output row (marked marker[j] == row).

    The row was filled as `runs` sorted runs (the new columns of each B row, B's rows being
    sorted), starting at bounds[0 .. runs - 1]. A dense scan of [low, high] when the columns fill
    that span closely (no comparisons), insertion sort for short rows (no copies), and otherwise
    the runs are merged pairwise, O(count log runs)."""
    count = stop - start
    if count <= 1 or runs <= 1:
        return
    if high - low < 4 * count:
        pos = start
        for j in range(low, high + 1):
            if marker[j] == row:
                indices[pos] = j
                pos += 1
        return
    if count <= _INSERTION_SORT_MAX:  # short rows: insertion sort, near-linear on runs, no copies
        for t in range(start + 1, stop):
            value = indices[t]
            s = t - 1
            while s >= start and indices[s] > value:
                indices[s + 1] = indices[s]
                s -= 1
            indices[s + 1] = value
        return
    for t in range(count):
        src[t] = indices[start + t]
    for r in range(runs):
        bounds[r] -= start
    bounds[runs] = count
    while runs > 1:
        merged = 0
        for r in range(0, runs, 2):
            lo, mid = bounds[r], bounds[r + 1]
            hi = bounds[r + 2] if r + 2 <= runs else mid
            a, b, out = lo, mid, lo
            while a < mid and b < hi:
                if src[a] < src[b]:
                    dst[out] = src[a]
                    a += 1
                else:
                    dst[out] = src[b]
                    b += 1
                out += 1
            while a < mid:
                dst[out] = src[a]
                a += 1
                out += 1
            while b < hi:
                dst[out] = src[b]
                b += 1
                out += 1
            bounds[merged] = lo
            merged += 1
        bounds[merged] = count
        runs = merged
        src, dst = dst, src
    for t in range(count):
        indices[start + t] = src[t]


@njit(cache=True, nogil=True)
def _scratch(a_indptr, indptr):  # pragma: no cover - compiled
    """Run bounds (one per A entry of a row, plus one) and two merge buffers (longest output row)."""
    longest_a, longest_c = 0, 0
    for i in range(a_indptr.shape[0] - 1):
        longest_a = max(longest_a, np.int64(a_indptr[i + 1]) - np.int64(a_indptr[i]))
        longest_c = max(longest_c, np.int64(indptr[i + 1]) - np.int64(indptr[i]))
    return (np.empty(longest_a + 1, dtype=np.int64), np.empty(longest_c, dtype=np.int64),
            np.empty(longest_c, dtype=np.int64))


@njit(cache=True, nogil=True)
def _row_counts(a_indptr, a_indices, b_indptr, b_indices, n_cols):  # pragma: no cover - compiled
    """Row pointers of the structural product: distinct output columns per row, by marker."""
    m = a_indptr.shape[0] - 1
    marker = np.full(n_cols, -1, dtype=np.int64)
    indptr = np.zeros(m + 1, dtype=np.int64)
    for i in range(m):
        count = 0
        for p in range(a_indptr[i], a_indptr[i + 1]):
            k = a_indices[p]
            for q in range(b_indptr[k], b_indptr[k + 1]):
                j = b_indices[q]
                if marker[j] != i:
                    marker[j] = i
                    count += 1
        indptr[i + 1] = indptr[i] + count
    return indptr


@njit(cache=True, nogil=True)
def _symbolic(a_indptr, a_indices, b_indptr, b_indices, n_cols):  # pragma: no cover - compiled
    """(indptr, indices) of the structural product pattern, columns sorted within each row."""
    indptr = _row_counts(a_indptr, a_indices, b_indptr, b_indices, n_cols)
    indices = np.empty(indptr[-1], dtype=np.int64)
    marker = np.full(n_cols, -1, dtype=np.int64)
    bounds, src, dst = _scratch(a_indptr, indptr)
    for i in range(indptr.shape[0] - 1):
        pos = indptr[i]
        low, high = n_cols, -1
        runs = 0
        for p in range(a_indptr[i], a_indptr[i + 1]):
            k = a_indices[p]
            bounds[runs] = pos
            for q in range(b_indptr[k], b_indptr[k + 1]):
                j = b_indices[q]
                if marker[j] != i:
                    marker[j] = i
                    indices[pos] = j
                    pos += 1
                    low, high = min(low, j), max(high, j)
            if pos > bounds[runs]:
                runs += 1
        _sort_row(indices, indptr[i], indptr[i + 1], marker, i, low, high, bounds, runs, src, dst)
    return indptr, indices


@njit(cache=True, nogil=True)
def _symbolic_numeric(a_indptr, a_indices, a, b_indptr, b_indices, b, n_cols):  # pragma: no cover - compiled
    """`_symbolic` and `_product` fused in one pass (the first call): values accumulate in a dense
    row buffer; the output arrays grow by doubling (O(output) memory, no counting pass)."""
    m = a_indptr.shape[0] - 1
    indptr = np.zeros(m + 1, dtype=np.int64)
    capacity = max(16, 2 * (a_indices.shape[0] + b_indices.shape[0]))
    indices = np.empty(capacity, dtype=np.int64)
    values = np.empty(capacity, dtype=a.dtype)
    marker = np.full(n_cols, -1, dtype=np.int64)
    acc = np.zeros(n_cols, dtype=a.dtype)
    longest_a, longest_c = 1, 0
    for i in range(m):
        longest_a = max(longest_a, np.int64(a_indptr[i + 1]) - np.int64(a_indptr[i]))
    bounds = np.empty(longest_a + 1, dtype=np.int64)
    src = np.empty(0, dtype=np.int64)
    dst = np.empty(0, dtype=np.int64)
    for i in range(m):
        pos = indptr[i]
        bound = 0  # this row has at most min(its terms, n_cols) entries
        for p in range(a_indptr[i], a_indptr[i + 1]):
            k = a_indices[p]
            bound += np.int64(b_indptr[k + 1]) - np.int64(b_indptr[k])
        bound = min(bound, n_cols)
        if pos + bound > capacity:
            capacity = max(2 * capacity, pos + bound)
            grown_indices = np.empty(capacity, dtype=np.int64)
            grown_indices[:pos] = indices[:pos]
            grown_values = np.empty(capacity, dtype=a.dtype)
            grown_values[:pos] = values[:pos]
            indices, values = grown_indices, grown_values
        low, high = n_cols, -1
        runs = 0
        for p in range(a_indptr[i], a_indptr[i + 1]):
            k = a_indices[p]
            ap = a[p]
            bounds[runs] = pos
            for q in range(b_indptr[k], b_indptr[k + 1]):
                j = b_indices[q]
                if marker[j] != i:
                    marker[j] = i
                    indices[pos] = j
                    pos += 1
                    acc[j] = ap * b[q]
                    low, high = min(low, j), max(high, j)
                else:
                    acc[j] += ap * b[q]
            if pos > bounds[runs]:
                runs += 1
        indptr[i + 1] = pos
        if pos - indptr[i] > longest_c:
            longest_c = pos - indptr[i]
            src = np.empty(longest_c, dtype=np.int64)
            dst = np.empty(longest_c, dtype=np.int64)
        _sort_row(indices, indptr[i], pos, marker, i, low, high, bounds, runs, src, dst)
        for c in range(indptr[i], pos):
            values[c] = acc[indices[c]]
    return indptr, indices[:indptr[m]], values[:indptr[m]]


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


def _unsigned(index: np.ndarray) -> np.ndarray:
    """The index array as uint64 (spares Numba's negative-index test): a view when it is int64
    (indices are validated non-negative), a copy otherwise."""
    if index.dtype == np.int64 and index.flags.c_contiguous:
        return index.view(np.uint64)
    return np.ascontiguousarray(index, dtype=np.uint64)


def _as_values(array, size: int, name: str) -> np.ndarray:
    array = np.ascontiguousarray(array)
    if array.dtype not in (np.float32, np.float64):
        raise DTypeError(f"{name} must be float32 or float64, got {array.dtype}")
    if array.shape != (size,):
        raise ShapeError(f"{name} must have shape ({size},) (one value per stored entry), got {array.shape}")
    return array


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
        # unsigned indices spare Numba's negative-index test on every access
        self.a_indptr, self.a_indices = (_unsigned(x) for x in (a.indptr, a.indices))
        self.b_indptr, self.b_indices = (_unsigned(x) for x in (b.indptr, b.indices))
        if indptr is None:
            indptr, indices = _symbolic(self.a_indptr, self.a_indices, self.b_indptr, self.b_indices, b.shape[1])
        self.pattern = CSRPattern(indptr, indices, (a.shape[0], b.shape[1]), check=False)
        self._c_indptr, self._c_indices = (_unsigned(x) for x in (self.pattern.indptr, self.pattern.indices))

    @classmethod
    def with_values(cls, a: CSRPattern, b: CSRPattern, a_values, b_values) -> tuple["SpGEMM", np.ndarray]:
        """The symbolic phase and the first product in one pass over the terms: (SpGEMM, values of C)."""
        a_values, b_values = _as_values(a_values, a.nnz, "a"), _as_values(b_values, b.nnz, "b")
        dtype = np.result_type(a_values, b_values)
        if a.shape[1] != b.shape[0]:
            raise ShapeError(f"A @ B needs A.shape[1] == B.shape[0], got A {a.shape} and B {b.shape}")
        as_u64 = (_unsigned(x) for x in (a.indptr, a.indices, b.indptr, b.indices))
        ap, ai, bp, bi = as_u64
        indptr, indices, values = _symbolic_numeric(ap, ai, a_values.astype(dtype, copy=False), bp, bi,
                                                    b_values.astype(dtype, copy=False), b.shape[1])
        return cls(a, b, indptr, indices), values

    def __repr__(self) -> str:
        return f"SpGEMM({self.a_shape} @ {self.b_shape} -> nnz {self.pattern.nnz})"

    @property
    def a_nnz(self) -> int:
        return int(self.a_indices.shape[0])

    @property
    def b_nnz(self) -> int:
        return int(self.b_indices.shape[0])

    def _where(self) -> np.ndarray:
        return np.empty(max(self.b_shape[1], 1), dtype=np.int64)

    def values(self, a, b) -> np.ndarray:
        """Values of C = A B on `pattern`, given A's and B's values."""
        a, b = _as_values(a, self.a_nnz, "a"), _as_values(b, self.b_nnz, "b")
        out = np.empty(self.pattern.nnz, dtype=np.result_type(a, b))
        _product(self.a_indptr, self.a_indices, a, self.b_indptr, self.b_indices, b,
                 self._c_indptr, self._c_indices, self._where(), out)
        return out

    def towards_a(self, b, g) -> np.ndarray:
        """(G B^T) on A's pattern, for G given on C's pattern (the gradient of <G, A B> in A)."""
        b, g = _as_values(b, self.b_nnz, "b"), _as_values(g, self.pattern.nnz, "g")
        out = np.empty(self.a_nnz, dtype=np.result_type(b, g))
        _towards_a(self.a_indptr, self.a_indices, self.b_indptr, self.b_indices, b,
                   self._c_indptr, self._c_indices, g, self._where(), out)
        return out

    def towards_b(self, a, g) -> np.ndarray:
        """(A^T G) on B's pattern, for G given on C's pattern (the gradient of <G, A B> in B)."""
        a, g = _as_values(a, self.a_nnz, "a"), _as_values(g, self.pattern.nnz, "g")
        out = np.empty(self.b_nnz, dtype=np.result_type(a, g))
        _towards_b(self.a_indptr, self.a_indices, a, self.b_indptr, self.b_indices,
                   self._c_indptr, self._c_indices, g, self._where(), out)
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
        as_i64 = (np.asarray(x, dtype=np.int64) for x in (self.a_indptr, self.a_indices, self.b_indptr,
                                                          self.b_indices, c.indptr, c.indices))
        ta, tb, tc, seg = kernels.spgemm_terms(*as_i64, self.b_shape[1])
        return Terms((ta, tb, tc), (self.a_nnz, self.b_nnz, c.nnz), scalar=0,
                     plans={2: Plan("generic", 0, 1, seg, ta, tb)})


def spgemm_symbolic(a: CSRPattern, b: CSRPattern):
    """Pattern of C = A B and its term list (role 0 = A values, 1 = B values, 2 = C values)."""
    product = a.product(b)
    return product.pattern, product.terms
