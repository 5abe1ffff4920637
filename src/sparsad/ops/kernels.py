"""Numba kernels (CPU, parallel over output rows where it pays). Inputs are trusted: validate first.

Two scatter kernels cover every bilinear sparse product and all of their derivatives
(each writes every output entry, so `out` may be uninitialised):
`scale_scatter` (out[r, :] = sum_t u[iu[t]] * v[iv[t], :]) and `dot_scatter`
(out[r] = sum_t u[iu[t], :] . v[iv[t], :]), each over a term list grouped by output (`seg`).
"""
from __future__ import annotations

import types

import numpy as np
from numba import njit, prange


def _two_variants(fn):
    """Compile `fn` twice: parallel (`fn`) and serial (`fn.serial`, a renamed copy so that the two
    have separate on-disk caches). Small products use the serial one: a parallel launch costs
    more than it saves there, and starts a thread pool that competes with PyTorch's."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial", fn.__defaults__)
    copy.__qualname__ = fn.__qualname__ + "_serial"
    parallel = njit(parallel=True, cache=True, nogil=True)(fn)
    parallel.serial = njit(cache=True, nogil=True)(copy)
    return parallel


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _row_dot(u, i, v, j, channels):  # pragma: no cover - compiled
    """u[i, :] . v[j, :]. Reassociation lets LLVM vectorise the sum (several SIMD accumulators):
    a strict single-accumulator loop is latency-bound, and about 2x slower on rows of 1,000+
    channels (the SpDMM gradient of A). The result differs from a left-to-right sum by rounding only."""
    acc = 0.0
    for c in range(channels):
        acc += u[i, c] * v[j, c]
    return acc


@_two_variants
def scale_scatter(seg, iu, iv, u, v, out):  # pragma: no cover - compiled
    channels = v.shape[1]
    for r in prange(seg.shape[0] - 1):
        if channels == 1:
            acc = 0.0
            for t in range(seg[r], seg[r + 1]):
                acc += u[iu[t]] * v[iv[t], 0]
            out[r, 0] = acc
        else:
            for c in range(channels):
                out[r, c] = 0.0
            for t in range(seg[r], seg[r + 1]):
                s = u[iu[t]]
                j = iv[t]
                for c in range(channels):
                    out[r, c] += s * v[j, c]


@_two_variants
def csr_scale(indptr, indices, data, v, out):  # pragma: no cover - compiled
    """scale_scatter when terms are CSR entries in order (iu = arange): A @ V, one less indirection."""
    channels = v.shape[1]
    for r in prange(indptr.shape[0] - 1):
        if channels == 1:
            acc = 0.0
            for t in range(indptr[r], indptr[r + 1]):
                acc += data[t] * v[indices[t], 0]
            out[r, 0] = acc
        else:
            for c in range(channels):
                out[r, c] = 0.0
            for t in range(indptr[r], indptr[r + 1]):
                s = data[t]
                j = indices[t]
                for c in range(channels):
                    out[r, c] += s * v[j, c]


@_two_variants
def csr_vector(indptr, indices, data, v, out):  # pragma: no cover - compiled
    """csr_scale for one channel on 1-D arrays (SpMV): 2-D indexing costs ~15% here."""
    for r in prange(indptr.shape[0] - 1):
        acc = 0.0
        for t in range(indptr[r], indptr[r + 1]):
            acc += data[t] * v[indices[t]]
        out[r] = acc


@_two_variants
def scale_scatter_vector(seg, iu, iv, u, v, out):  # pragma: no cover - compiled
    """scale_scatter for one channel on 1-D arrays (the A^T v of SpMV's backward)."""
    for r in prange(seg.shape[0] - 1):
        acc = 0.0
        for t in range(seg[r], seg[r + 1]):
            acc += u[iu[t]] * v[iv[t]]
        out[r] = acc


@_two_variants
def dot_scatter(seg, iu, iv, u, v, out):  # pragma: no cover - compiled
    channels = u.shape[1]
    for r in prange(seg.shape[0] - 1):
        acc = 0.0
        for t in range(seg[r], seg[r + 1]):
            acc += _row_dot(u, iu[t], v, iv[t], channels)
        out[r] = acc


@_two_variants
def masked_dot(rows, cols, u, v, out):  # pragma: no cover - compiled
    """dot_scatter with one term per output: out[p] = u[rows[p], :] . v[cols[p], :] (SDDMM)."""
    channels = u.shape[1]
    if channels == 1:  # the SpMV case: a plain masked outer product
        for p in prange(rows.shape[0]):
            out[p] = u[rows[p], 0] * v[cols[p], 0]
        return
    for p in prange(rows.shape[0]):
        out[p] = _row_dot(u, rows[p], v, cols[p], channels)


@njit(cache=True, nogil=True)
def csr_trisolve(indptr, indices, data, b, lower, unit, out):  # pragma: no cover - compiled
    """Solve T out = b for triangular CSR T (rows in order for lower, reverse for upper).

    Entries on the wrong side of the diagonal must not be present (validated by the caller);
    with `unit`, stored diagonal entries are ignored and taken as 1.
    """
    n = indptr.shape[0] - 1
    channels = b.shape[1]
    acc = np.empty(channels, dtype=out.dtype)
    for step in range(n):
        i = step if lower else n - 1 - step
        for c in range(channels):
            acc[c] = b[i, c]
        diag = 1.0
        for t in range(indptr[i], indptr[i + 1]):
            j = indices[t]
            if j == i:
                if not unit:
                    diag = data[t]
            else:
                a = data[t]
                for c in range(channels):
                    acc[c] -= a * out[j, c]
        for c in range(channels):
            out[i, c] = acc[c] / diag


@njit(cache=True, nogil=True)
def spgemm_terms(a_indptr, a_indices, b_indptr, b_indices, c_indptr, c_indices, n_cols):  # pragma: no cover
    """Triplets (a-entry, b-entry, c-entry) of C = A B, grouped by row of C and sorted by c-entry."""
    m = a_indptr.shape[0] - 1
    total = 0
    for p in range(a_indptr[m]):
        k = a_indices[p]
        total += b_indptr[k + 1] - b_indptr[k]
    ta = np.empty(total, dtype=np.int64)
    tb = np.empty(total, dtype=np.int64)
    tc = np.empty(total, dtype=np.int64)
    where = np.full(n_cols, -1, dtype=np.int64)
    count = np.zeros(c_indptr[m] + 1, dtype=np.int64)  # terms per c-entry, then offsets
    for i in range(m):
        for q in range(c_indptr[i], c_indptr[i + 1]):
            where[c_indices[q]] = q
        for p in range(a_indptr[i], a_indptr[i + 1]):
            k = a_indices[p]
            for q in range(b_indptr[k], b_indptr[k + 1]):
                count[where[b_indices[q]] + 1] += 1
    for r in range(c_indptr[m]):
        count[r + 1] += count[r]
    fill = count[:-1].copy()
    for i in range(m):
        for q in range(c_indptr[i], c_indptr[i + 1]):
            where[c_indices[q]] = q
        for p in range(a_indptr[i], a_indptr[i + 1]):
            k = a_indices[p]
            for q in range(b_indptr[k], b_indptr[k + 1]):
                r = where[b_indices[q]]
                t = fill[r]
                ta[t] = p
                tb[t] = q
                tc[t] = r
                fill[r] = t + 1
    return ta, tb, tc, count


@njit(cache=True, nogil=True)
def scatter_sum(map_a, a, alpha, map_b, b, beta, out):  # pragma: no cover - compiled
    """out = alpha A + beta B on the union pattern, given injective position maps of A and B."""
    for k in range(map_a.shape[0]):
        out[map_a[k]] += alpha * a[k]
    for k in range(map_b.shape[0]):
        out[map_b[k]] += beta * b[k]


@njit(cache=True, nogil=True)
def gather_scale(index, g, alpha, out):  # pragma: no cover - compiled
    """out = alpha g[index] (the backward of scatter_sum towards one operand)."""
    for k in range(index.shape[0]):
        out[k] = alpha * g[index[k]]


@njit(cache=True, nogil=True)
def csr_vector_vjp(indptr, indices, data, x, g, want_data, want_x, g_data, g_x):  # pragma: no cover
    """Both cotangents of y = A x (CSR A, 1-D x) in one serial pass over A:
    g_data[t] = g[row t] x[col t] (masked outer product), g_x = A^T g (scattered, so serial only)."""
    if want_x:
        for j in range(g_x.shape[0]):
            g_x[j] = 0.0
    for i in range(indptr.shape[0] - 1):
        gi = g[i]
        for t in range(indptr[i], indptr[i + 1]):
            j = indices[t]
            if want_data:
                g_data[t] = gi * x[j]
            if want_x:
                g_x[j] += data[t] * gi
