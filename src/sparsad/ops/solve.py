"""Sparse solves on NumPy arrays: triangular (Numba), direct (SuperLU via SciPy), and CG.

`cg` is written against the array protocol only (arithmetic, `.sum(0)`, comparisons), so the
same loop runs on NumPy arrays and on PyTorch tensors on any device.
"""
from __future__ import annotations

import warnings
from typing import Callable

import numpy as np
from numba import njit

from sparsad.errors import InputError, ShapeError, UnsupportedError
from sparsad.ops import kernels
from sparsad.ops.pattern import CSRPattern


@njit(cache=True, nogil=True)
def _permuted_rows(indptr, indices, perm):  # pragma: no cover - compiled
    """CSR of P A P^T (entry (i, j) moved to (perm[i], perm[j])), rows left unsorted."""
    n = indptr.shape[0] - 1
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        out_ptr[perm[i] + 1] = indptr[i + 1] - indptr[i]
    for i in range(n):
        out_ptr[i + 1] += out_ptr[i]
    out_cols = np.empty(indices.shape[0], dtype=np.int64)
    for i in range(n):
        start = out_ptr[perm[i]]
        for p in range(indptr[i], indptr[i + 1]):
            out_cols[start + p - indptr[i]] = perm[indices[p]]
    return out_ptr, out_cols


@njit(cache=True, nogil=True)
def _cholesky_columns(indptr, indices, n):  # pragma: no cover - compiled
    """The strictly lower pattern of the Cholesky factor of a symmetric pattern (CSR, rows in any
    order) as CSC with sorted rows: the elimination tree, then row k's pattern as the etree paths
    from the entries A[k, i < k]; rows arrive in increasing k, so every column comes out sorted."""
    parent = np.full(n, -1, dtype=np.int64)
    ancestor = np.full(n, -1, dtype=np.int64)
    for k in range(n):
        for p in range(indptr[k], indptr[k + 1]):
            i = indices[p]
            while i != -1 and i < k:
                following = ancestor[i]
                ancestor[i] = k
                if following == -1:
                    parent[i] = k
                i = following
    mark = np.full(n, -1, dtype=np.int64)
    col_ptr = np.zeros(n + 1, dtype=np.int64)
    for k in range(n):  # first pass: column counts
        mark[k] = k
        for p in range(indptr[k], indptr[k + 1]):
            i = indices[p]
            while i < k and mark[i] != k:
                mark[i] = k
                col_ptr[i + 1] += 1
                i = parent[i]
    for k in range(n):
        col_ptr[k + 1] += col_ptr[k]
    fill = col_ptr[:n].copy()
    col_rows = np.empty(col_ptr[n], dtype=np.int64)
    mark[:] = -1
    for k in range(n):
        mark[k] = k
        for p in range(indptr[k], indptr[k + 1]):
            i = indices[p]
            while i < k and mark[i] != k:
                mark[i] = k
                col_rows[fill[i]] = k
                fill[i] += 1
                i = parent[i]
    return col_ptr, col_rows


@njit(cache=True, nogil=True)
def _supernodes(col_ptr, col_rows):  # pragma: no cover - compiled
    """Starts of the fundamental supernodes of a closed lower pattern: column j + 1 joins column
    j's supernode when column j's rows are exactly {j + 1} and column j + 1's rows."""
    n = col_ptr.shape[0] - 1
    starts = [0]
    for j in range(n - 1):
        count = col_ptr[j + 1] - col_ptr[j]
        if not (count >= 1 and col_rows[col_ptr[j]] == j + 1 and count == col_ptr[j + 2] - col_ptr[j + 1] + 1):
            starts.append(j + 1)
    starts.append(n)
    return np.array(starts, dtype=np.int64)


# The dense block loops of the selected inverse may reassociate sums (LLVM then vectorises the
# dot products and contracts multiply-adds): 1.3-1.45x faster on bcsstk16/25, results equal to
# 3e-16 relative.
_BLOCK_MATH = {"reassoc", "contract"}


@njit(cache=True, nogil=True, fastmath=_BLOCK_MATH)
def _unit_lower_solve_rows(XT, L):  # pragma: no cover - compiled
    """XT <- (X L^-1)^T in place for XT = X^T (rows contiguous), L unit lower triangular."""
    w = L.shape[0]
    for c in range(w - 1, -1, -1):
        for r in range(c + 1, w):
            lrc = L[r, c]
            if lrc != 0.0:
                for i in range(XT.shape[1]):
                    XT[c, i] -= XT[r, i] * lrc


@njit(cache=True, nogil=True, fastmath=_BLOCK_MATH)
def _takahashi(col_ptr, col_rows, lvals, d):  # pragma: no cover - compiled
    """Entries of Z = (L D L^T)^-1 on the pattern of the strictly lower unit factor L (CSC, sorted
    rows, closed under fill), from the last supernode to the first (Takahashi / Erisman-Tinney).

    Z L = L^-T D^-1 is upper triangular, so for a supernode J with below-rows S:
        Z_SJ = -Z_SS L_SJ L_JJ^-1,    Z_JJ = (L_JJ^-T D_J^-1 - Z_SJ^T L_SJ) L_JJ^-1.
    Z_SS is gathered from columns already done (stored in column min(i, k) by closure) through a
    row -> slot map. The dense products are plain loops with contiguous inner loops: BLAS calls
    here would be tiny and, on a loaded machine, its threads cost more than they save.
    Returns (values on L's pattern, diagonal)."""
    n = d.shape[0]
    z = np.zeros(lvals.shape[0], dtype=d.dtype)
    zdiag = np.zeros(n, dtype=d.dtype)
    where = np.full(n, -1, dtype=np.int64)
    starts = _supernodes(col_ptr, col_rows)
    for block in range(starts.shape[0] - 2, -1, -1):
        first, last = starts[block], starts[block + 1] - 1
        w = last - first + 1
        below = col_ptr[last] + 0  # S: the rows of the supernode's last column
        s = col_ptr[last + 1] - below
        for a in range(s):
            where[col_rows[below + a]] = a
        zss = np.empty((s, s), dtype=d.dtype)
        for a in range(s):
            k = col_rows[below + a]
            zss[a, a] = zdiag[k]
            for q in range(col_ptr[k], col_ptr[k + 1]):
                slot = where[col_rows[q]]
                if slot >= 0:
                    zss[slot, a] = z[q]
                    zss[a, slot] = z[q]
        for a in range(s):
            where[col_rows[below + a]] = -1
        ljj = np.zeros((w, w), dtype=d.dtype)
        lsjT = np.empty((w, s), dtype=d.dtype)  # L_SJ transposed: column c of the supernode, rows S
        for c in range(w):
            base = col_ptr[first + c]
            for r in range(c + 1, w):
                ljj[r, c] = lvals[base + r - c - 1]
            for a in range(s):
                lsjT[c, a] = lvals[base + w - c - 1 + a]
        zsjT = np.zeros((w, s), dtype=d.dtype)  # (Z_SJ)^T = -(L_JJ^-T) L_SJ^T Z_SS
        for c in range(w):
            for b in range(s):
                coefficient = lsjT[c, b]
                if coefficient != 0.0:
                    for a in range(s):
                        zsjT[c, a] -= coefficient * zss[b, a]
        _unit_lower_solve_rows(zsjT, ljj)
        # T = L_JJ^-T D^-1 (upper triangular, back substitution) - Z_SJ^T L_SJ; Z_JJ = T L_JJ^-1
        zjjT = np.zeros((w, w), dtype=d.dtype)
        for c in range(w):
            zjjT[c, c] = 1.0 / d[first + c]
            for r in range(c - 1, -1, -1):
                acc = 0.0
                for t in range(r + 1, c + 1):
                    acc += ljj[t, r] * zjjT[c, t]
                zjjT[c, r] = -acc
        for c1 in range(w):
            for c2 in range(w):
                acc = 0.0
                for a in range(s):
                    acc += zsjT[c1, a] * lsjT[c2, a]
                zjjT[c2, c1] -= acc
        _unit_lower_solve_rows(zjjT, ljj)
        for c in range(w):
            j = first + c
            zdiag[j] = zjjT[c, c]
            base = col_ptr[j]
            for r in range(c + 1, w):
                z[base + r - c - 1] = zjjT[c, r]
            for a in range(s):
                z[base + w - c - 1 + a] = zsjT[c, a]
    return z, zdiag


@njit(cache=True, nogil=True)
def _entry_slots(indptr, indices, perm, mirror, col_ptr, col_rows):  # pragma: no cover - compiled
    """Slot of each stored entry of a symmetric A in the closed lower pattern of its factor (CSC of
    P A P^T), -1 on the diagonal: entry (i, j) sits at (max, min) of (perm[i], perm[j]), and its
    mirror (j, i) (`mirror`: positions of the transposed entries) in the same slot. One stamp of
    each factor column: O(n + nnz(A) + nnz(L)), no search."""
    n = perm.shape[0]
    original = np.empty(n, dtype=np.int64)
    for i in range(n):
        original[perm[i]] = i
    where = np.empty(n, dtype=np.int64)
    mark = np.full(n, -1, dtype=np.int64)
    slots = np.full(indices.shape[0], -1, dtype=np.int64)
    for c in range(n):
        for q in range(col_ptr[c], col_ptr[c + 1]):
            mark[col_rows[q]] = c
            where[col_rows[q]] = q
        i = original[c]
        for p in range(indptr[i], indptr[i + 1]):
            h = perm[indices[p]]
            if h > c:  # closure: every entry of A lies in its factor's pattern
                slot = where[h] if mark[h] == c else -1
                slots[p] = slot
                slots[mirror[p]] = slot
    return slots


@njit(cache=True, nogil=True)
def _scatter_lower(l_ptr, l_rows, l_data, col_ptr, col_rows, out):  # pragma: no cover - compiled
    """Values of a unit lower factor (CSC, rows in any order) on the closed pattern (col_ptr,
    col_rows): entries the factor stores beyond it are dropped, missing ones stay zero (out arrives
    zeroed). O(n + nnz), no sort."""
    n = col_ptr.shape[0] - 1
    where = np.empty(n, dtype=np.int64)
    mark = np.full(n, -1, dtype=np.int64)
    for c in range(n):
        for q in range(col_ptr[c], col_ptr[c + 1]):
            mark[col_rows[q]] = c
            where[col_rows[q]] = q
        for p in range(l_ptr[c], l_ptr[c + 1]):
            r = l_rows[p]
            if r != c and mark[r] == c:
                out[where[r]] = l_data[p]


class ConvergenceWarning(RuntimeWarning):
    """An iterative solver stopped at maxiter before reaching its tolerance."""


def check_triangular(pattern: CSRPattern, values: np.ndarray, lower: bool, unit: bool, name: str = "L") -> None:
    """Raise unless `pattern` is square, triangular on the given side, with a usable diagonal."""
    n, m = pattern.shape
    if n != m:
        raise ShapeError(f"{name} must be square for a triangular solve, got shape {pattern.shape}")
    wrong = pattern.indices > pattern.rows if lower else pattern.indices < pattern.rows
    if wrong.any():
        p = int(np.argmax(wrong))
        side = "above" if lower else "below"
        raise InputError(f"{name} has an entry {side} the diagonal at ({pattern.rows[p]}, {pattern.indices[p]}); "
                         f"pass lower={not lower} or drop those entries")
    if not unit:
        pos = pattern.diagonal_positions
        stored = pos >= 0
        diagonal = np.zeros(pos.shape[0], dtype=values.dtype)
        diagonal[stored] = values[pos[stored]]
        missing = np.flatnonzero(diagonal == 0)
        if missing.size:
            raise InputError(f"{name} is singular: diagonal entry ({missing[0]}, {missing[0]}) is zero or not "
                             "stored; pass unit_diagonal=True if the diagonal is implicitly 1")


def triangular_solve(pattern: CSRPattern, values: np.ndarray, b: np.ndarray, lower: bool = True,
                     unit: bool = False) -> np.ndarray:
    """x with T x = b, T triangular in CSR (b of shape (n,) or (n, C)); inputs validated by the caller.

    >>> import numpy as np
    >>> from sparsad.ops import CSRPattern
    >>> pattern = CSRPattern(np.array([0, 1, 3]), np.array([0, 0, 1]), (2, 2))
    >>> triangular_solve(pattern, np.array([2.0, 1.0, 4.0]), np.array([1.0, 2.0]))  # [[2, 0], [1, 4]]
    array([0.5  , 0.375])
    """
    rhs = b[:, None] if b.ndim == 1 else b
    out = np.zeros(rhs.shape, dtype=np.result_type(values, rhs))
    kernels.csr_trisolve(pattern.indptr, pattern.indices, values, np.ascontiguousarray(rhs), lower, unit, out)
    return out[:, 0] if b.ndim == 1 else out


class LUFactor:
    """SuperLU factorisation of a square CSR matrix, solving with A or A^T (reused by the backward).

    >>> import numpy as np
    >>> from sparsad.ops import CSRPattern
    >>> pattern = CSRPattern(np.array([0, 2, 4]), np.array([0, 1, 0, 1]), (2, 2))
    >>> lu = LUFactor(pattern, np.array([4.0, 1.0, 2.0, 3.0]))  # [[4, 1], [2, 3]]
    >>> lu.solve(np.array([5.0, 5.0])), lu.solve(np.array([6.0, 4.0]), transpose=True)
    (array([1., 1.]), array([1., 1.]))
    """

    def __init__(self, pattern: CSRPattern, values: np.ndarray, name: str = "A", **splu_options):
        import scipy.sparse.linalg

        if pattern.shape[0] != pattern.shape[1]:
            raise ShapeError(f"{name} must be square to solve with it, got shape {pattern.shape}")
        if values.dtype not in (np.float32, np.float64):
            raise UnsupportedError(f"{name} must be float32 or float64 for SuperLU, got {values.dtype}")
        if not np.isfinite(values).all():
            raise InputError(f"{name} holds NaN or inf values; a factorisation needs finite entries")
        self.pattern, self.n = pattern, pattern.shape[0]
        self.dtype = values.dtype
        if self.n == 0:
            self.lu = None
            return
        matrix = pattern.to_scipy(values).tocsc()
        try:
            self.lu = scipy.sparse.linalg.splu(matrix, **splu_options)
        except RuntimeError as exc:  # SuperLU reports exact singularity this way
            raise InputError(f"{name} is singular (SuperLU: {exc}); a direct solve needs an invertible matrix") from None

    def solve(self, b: np.ndarray, transpose: bool = False) -> np.ndarray:
        b = np.asarray(b, dtype=self.dtype)
        if self.lu is None or b.size == 0:
            return np.zeros(b.shape, dtype=self.dtype)
        out = self.lu.solve(b, trans="T" if transpose else "N")
        return np.ascontiguousarray(out)

    def slogdet(self) -> tuple[float, float]:
        """(sign, log|det A|) from the triangular factors: det A = det(Pr) det(Pc) prod diag(U)."""
        if self.lu is None:
            return 1.0, 0.0
        diagonal = self.lu.U.diagonal()
        sign = np.prod(np.sign(diagonal)) * _permutation_sign(self.lu.perm_r) * _permutation_sign(self.lu.perm_c)
        return float(sign), float(np.sum(np.log(np.abs(diagonal))))

    def selected_inverse(self, transpose: bool = True, block: int = 128) -> np.ndarray:
        """(A^-T)[i, j] (or (A^-1)[i, j]) for every stored entry (i, j) of A's pattern.

        Columns of the inverse are solved `block` at a time and only the pattern's entries kept:
        O(n * block) memory, n / block multi-column solves."""
        pattern = self.pattern
        out = np.empty(pattern.nnz, dtype=self.dtype)
        for start in range(0, self.n, block):
            stop = min(start + block, self.n)
            unit = np.zeros((self.n, stop - start), dtype=self.dtype)
            unit[np.arange(start, stop), np.arange(stop - start)] = 1.0
            # (A^-T)[i, j] = (A^-1)[j, i]: column i of A^-1, read at the row's columns j
            columns = self.solve(unit, transpose=not transpose)
            lo, hi = pattern.indptr[start], pattern.indptr[stop]
            out[lo:hi] = columns[pattern.indices[lo:hi], pattern.rows[lo:hi] - start]
        return out


def _permutation_sign(perm: np.ndarray) -> int:
    """+1 or -1: the parity of a permutation, from its cycle decomposition (O(n))."""
    seen = np.zeros(perm.shape[0], dtype=bool)
    transpositions = 0
    for start in range(perm.shape[0]):
        if seen[start]:
            continue
        length, node = 0, start
        while not seen[node]:
            seen[node] = True
            node = perm[node]
            length += 1
        transpositions += length - 1
    return -1 if transpositions % 2 else 1


def check_symmetric(pattern: CSRPattern, values: np.ndarray, rtol: float, name: str = "A") -> None:
    """Raise unless A is square, structurally symmetric and |A - A^T| <= rtol max|A| entrywise."""
    if pattern.shape[0] != pattern.shape[1]:
        raise ShapeError(f"{name} must be square, got shape {pattern.shape}")
    transposed, perm = pattern.transpose
    if not (np.array_equal(transposed.indptr, pattern.indptr) and np.array_equal(transposed.indices, pattern.indices)):
        missing = np.setdiff1d(transposed.keys, pattern.keys)[:1]
        i, j = divmod(int(missing[0]), pattern.shape[1]) if missing.size else (0, 0)
        raise InputError(f"{name} is not structurally symmetric: ({i}, {j}) is stored but ({j}, {i}) is not; "
                         f"this method needs a symmetric matrix (store both triangles, or use a method for "
                         f"general matrices: spsolve, gmres, bicgstab)")
    if values.size:
        gap = np.abs(values - values[perm])
        scale = np.abs(values).max()
        worst = int(np.argmax(gap))
        if gap[worst] > rtol * scale:
            raise InputError(
                f"{name} is not symmetric: |{name}[{pattern.rows[worst]}, {pattern.indices[worst]}] - "
                f"{name}[{pattern.indices[worst]}, {pattern.rows[worst]}]| = {gap[worst]:.3g} > "
                f"{rtol:g} * max|{name}|; symmetrise with (A + A.T) / 2 or use a method for general matrices")


class CholeskyFactor(LUFactor):
    """Sparse Cholesky A = P L D L^T P^T of a symmetric positive definite matrix.

    SuperLU (SciPy) factors in symmetric mode: a fill-reducing symmetric ordering (minimum degree
    on A + A^T) and diagonal pivots only, so its U is D L^T. Positive definiteness is checked
    on D. Solves run with the full stored matrix, so they are exact for every stored value.

    Example:
        >>> import numpy as np, scipy.sparse as sp
        >>> m = sp.csr_matrix(np.array([[4.0, 1.0], [1.0, 3.0]]))
        >>> f = CholeskyFactor(CSRPattern(m.indptr, m.indices, m.shape), m.data)
        >>> round(f.logdet(), 6) == round(float(np.log(11.0)), 6)
        True
    """

    def __init__(self, pattern: CSRPattern, values: np.ndarray, name: str = "A", symmetry_rtol: float = 1e-6):
        check_symmetric(pattern, values, symmetry_rtol, name)
        self._values = np.array(values, copy=True)
        super().__init__(pattern, values, name, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                         options={"SymmetricMode": True})
        if self.lu is None:
            self.perm, self.d = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=self.dtype)
            return
        if not np.array_equal(self.lu.perm_r, self.lu.perm_c):
            raise InputError(f"{name} is not positive definite: SuperLU had to pivot off the diagonal "
                             "(use spsolve or logdet for indefinite matrices)")
        self.d = self.lu.U.diagonal()
        bad = np.flatnonzero(~(self.d > 0))
        if bad.size:
            raise InputError(f"{name} is not positive definite: pivot {int(bad[0])} of its Cholesky factor is "
                             f"{self.d[bad[0]]:.3g}; use spsolve or logdet for indefinite matrices")
        self.perm = self.lu.perm_c  # original index i sits at position perm[i] of the factor

    def selected_inverse(self, transpose: bool = True, block: int = 128) -> np.ndarray:
        """(A^-1)[i, j] on A's pattern by Takahashi's recurrences on the factor (cost of the order of
        the factorisation); block solves (the LU route) when A is not exactly symmetric."""
        pattern = self.pattern
        if self.lu is None or pattern.nnz == 0:
            return np.zeros(pattern.nnz, dtype=self.dtype)
        _, perm = pattern.transpose
        if not np.array_equal(self._values, self._values[perm]):
            return super().selected_inverse(transpose, block)
        col_ptr, col_rows, slots = self._symbolic()
        z, zdiag = _takahashi(col_ptr, col_rows, self._strict_lower(col_ptr, col_rows), self.d.astype(self.dtype))
        out = np.empty(pattern.nnz, dtype=self.dtype)
        off = slots >= 0
        out[off] = z[slots[off]]
        out[~off] = zdiag[self.perm[pattern.rows[~off]]]
        return out

    def _symbolic(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The factor's strictly lower pattern (CSC, closed under fill) and, for each stored entry of
        A, its slot there (-1 on the diagonal). Depends on the pattern and ordering only, so it is
        kept on the pattern and reused by every factor of new values with the same ordering."""
        cache = self.pattern.__dict__.setdefault("_takahashi_symbolic", {})
        key = self.perm.tobytes()
        if key not in cache:
            pattern, n = self.pattern, self.n
            perm = self.perm.astype(np.int64)
            row_ptr, row_cols = _permuted_rows(pattern.indptr.astype(np.int64), pattern.indices.astype(np.int64), perm)
            col_ptr, col_rows = _cholesky_columns(row_ptr, row_cols, n)
            _, mirror = pattern.transpose  # the pattern is symmetric (checked): (j, i) of each (i, j)
            slots = _entry_slots(pattern.indptr, pattern.indices, perm, mirror, col_ptr, col_rows)
            cache.clear()  # one ordering kept per pattern
            cache[key] = (col_ptr, col_rows, slots)
        return cache[key]

    def _strict_lower(self, col_ptr: np.ndarray, col_rows: np.ndarray) -> np.ndarray:
        """SuperLU's unit lower factor's values on the closed pattern (entries SuperLU keeps beyond it,
        from relaxed supernodes, are structural zeros and are dropped; missing ones are zero)."""
        factor = self.lu.L
        out = np.zeros(col_rows.shape[0], dtype=self.dtype)
        _scatter_lower(factor.indptr, factor.indices, factor.data.astype(self.dtype, copy=False), col_ptr, col_rows, out)
        return out

    def logdet(self) -> float:
        """log det A = sum log D."""
        return float(np.sum(np.log(self.d)))

    def _lower(self):
        lower = self.lu.L.tocsr()
        lower.sort_indices()
        return lower

    def sample(self, count: int, rng: np.random.Generator, covariance: bool = False) -> np.ndarray:
        """`count` draws (n, count) from N(0, A^-1) (A a precision matrix), or N(0, A) if covariance.

        With C = L D^1/2 and A = P C C^T P^T: x = P C^-T z has covariance A^-1, x = P C z has A."""
        import scipy.sparse.linalg

        z = rng.standard_normal((self.n, count)).astype(self.dtype, copy=False)
        if self.n == 0:
            return z
        lower = self._lower()
        root = np.sqrt(self.d)[:, None]
        if covariance:
            y = lower @ (root * z)
        else:
            y = scipy.sparse.linalg.spsolve_triangular(lower.T.tocsr(), z / root, lower=False, unit_diagonal=True)
        return np.ascontiguousarray(y[self.perm])


class ConvergenceInfo:
    """What an iterative solve did: iterations, final relative residual, and scipy's info code
    (0 converged, > 0 the iteration count at which it stopped unconverged).

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> _, info = st.cg(A, b, return_info=True)
    >>> info
    ConvergenceInfo(converged, iterations=2, relative residual=...)
    >>> info.info
    0
    """

    __slots__ = ("iterations", "residual", "converged")

    def __init__(self, iterations: int, residual: float, converged: bool):
        self.iterations, self.residual, self.converged = int(iterations), float(residual), bool(converged)

    @property
    def info(self) -> int:
        return 0 if self.converged else max(self.iterations, 1)

    def __repr__(self) -> str:
        state = "converged" if self.converged else "NOT converged"
        return f"ConvergenceInfo({state}, iterations={self.iterations}, relative residual={self.residual:.3g})"


def cg(matvec: Callable, b, *, rtol: float = 1e-10, atol: float = 0.0, maxiter: int | None = None, x0=None,
       M: Callable | None = None, name: str = "cg", tol: float | None = None, warn: bool = True):
    """Preconditioned conjugate gradients for SPD systems, the columns of b solved together.

    Stops when every column's residual norm is at most max(rtol * ||b column||, atol) (SciPy's
    rule; `tol` is the deprecated name of rtol). Returns (x, ConvergenceInfo). Warns
    ConvergenceWarning at maxiter (default 10 n).
    Raises InputError when a search direction has p^T A p <= 0 (A is not positive definite).
    Written against the array protocol, so it runs on NumPy arrays and on torch tensors alike.

    >>> import numpy as np
    >>> A = np.array([[4.0, 1.0], [1.0, 3.0]])
    >>> x, info = cg(lambda v: A @ v, np.array([5.0, 4.0]), rtol=1e-12)
    >>> x.round(12), info.converged
    (array([1., 1.]), True)
    """
    if tol is not None:
        warnings.warn(f"{name}(tol=...) is deprecated; use rtol=... (and atol=...) as in SciPy", DeprecationWarning,
                      stacklevel=2)
        rtol = tol
    n = b.shape[0]
    maxiter = 10 * n if maxiter is None else int(maxiter)
    precondition = (lambda r: r * 1) if M is None else M
    x = b * 0 if x0 is None else x0 * 1
    r = b - matvec(x) if x0 is not None else b * 1
    bnorm2 = (b * b).sum(0)
    target = np.maximum(rtol * rtol * bnorm2, atol * atol) if not hasattr(bnorm2, "clamp") else \
        (rtol * rtol * bnorm2).clamp(min=atol * atol)
    z = precondition(r)
    p = z * 1
    rz = (r * z).sum(0)
    rr = (r * r).sum(0)
    for it in range(maxiter + 1):
        if bool((rr <= target).all()):
            return x, ConvergenceInfo(it, _relative(rr, bnorm2), True)
        if it == maxiter:
            break
        ap = matvec(p)
        pap = (p * ap).sum(0)
        active = rr > target
        if bool(((pap <= 0) & active).any()):
            raise InputError(f"{name}: A is not positive definite (p^T A p = {float(pap.min()):.3g} <= 0 at "
                             f"iteration {it}); CG needs a symmetric positive definite matrix (and "
                             f"preconditioner): use minres for symmetric indefinite, gmres otherwise")
        alpha = rz / (pap + (pap == 0))
        alpha = alpha * active  # converged columns stop moving
        x = x + alpha * p
        r = r - alpha * ap
        z = precondition(r)
        rz_new = (r * z).sum(0)
        rr = (r * r).sum(0)
        p = z + (rz_new / (rz + (rz == 0))) * p
        rz = rz_new
    info = ConvergenceInfo(maxiter, _relative(rr, bnorm2), False)
    if warn:
        warnings.warn(f"{name}: no convergence in {maxiter} iterations (relative residual {info.residual:.2e} > "
                      f"rtol {rtol:g}); raise maxiter or precondition the system (M=...)", ConvergenceWarning,
                      stacklevel=3)
    return x, info


def _relative(rr, bnorm2) -> float:
    ratio = rr / (bnorm2 + (bnorm2 == 0))
    if ratio.ndim and ratio.shape[0] == 0:
        return 0.0
    return float(ratio.max()) ** 0.5
