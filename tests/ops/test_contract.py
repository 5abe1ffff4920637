"""Term-list products against dense NumPy: every role of SpMM and SpGEMM (forward and both VJPs)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from sparsad.ops.contract import Terms, contract, spmm_terms
from sparsad.ops.pattern import CSRPattern


def pattern_of(matrix) -> CSRPattern:
    matrix = sp.csr_matrix(matrix)
    matrix.sort_indices()
    return CSRPattern(matrix.indptr, matrix.indices, matrix.shape)


shapes = st.tuples(st.integers(1, 10), st.integers(1, 10), st.integers(1, 4),
                   st.floats(0.0, 0.7), st.integers(0, 2**31 - 1))


@settings(max_examples=40, deadline=None)
@given(shapes, st.sampled_from([np.float64, np.float32]))
def test_spmm_terms_all_roles(case, dtype):
    m, n, c, density, seed = case
    rng = np.random.default_rng(seed)
    matrix = sp.random(m, n, density=density, format="csr", random_state=seed, dtype=dtype)
    pattern = pattern_of(matrix)
    values = matrix.data.astype(dtype)
    dense = matrix.toarray()
    x = rng.standard_normal((n, c)).astype(dtype)
    g = rng.standard_normal((m, c)).astype(dtype)
    terms = spmm_terms(pattern)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(contract(terms, 2, {0: values, 1: x}), dense @ x, **tol)
    np.testing.assert_allclose(contract(terms, 1, {0: values, 2: g}), dense.T @ g, **tol)
    np.testing.assert_allclose(contract(terms, 0, {1: x, 2: g}), (g @ x.T)[pattern.rows, pattern.indices], **tol)
    assert contract(terms, 2, {0: values, 1: x}).dtype == dtype


@settings(max_examples=40, deadline=None)
@given(shapes, st.integers(1, 10))
def test_spgemm_terms_all_roles(case, p):
    m, n, _, density, seed = case
    rng = np.random.default_rng(seed)
    a = sp.random(m, n, density=density, format="csr", random_state=seed)
    b = sp.random(n, p, density=0.5, format="csr", random_state=seed + 1)
    pa, pb = pattern_of(a), pattern_of(b)
    pc, terms = pa.matmul(pb)
    c_values = contract(terms, 2, {0: a.data, 1: b.data[:, None]})[:, 0]
    np.testing.assert_allclose(pc.to_scipy(c_values).toarray(), a.toarray() @ b.toarray(), atol=1e-12)
    v = rng.standard_normal(pc.nnz)
    vd = pc.to_scipy(v).toarray()
    ga = contract(terms, 0, {1: b.data[:, None], 2: v[:, None]})
    gb = contract(terms, 1, {0: a.data, 2: v[:, None]})[:, 0]
    np.testing.assert_allclose(ga, (vd @ b.toarray().T)[pa.rows, pa.indices], atol=1e-12)
    np.testing.assert_allclose(gb, (a.toarray().T @ vd)[pb.rows, pb.indices], atol=1e-12)


def test_generic_terms_with_repeated_outputs():
    # out[r] += u[i] * v[j] with several terms per output, unsorted
    idx = (np.array([0, 1, 0, 2]), np.array([1, 0, 1, 2]), np.array([1, 0, 1, 1]))
    terms = Terms(idx, (3, 3, 2), scalar=0)
    u = np.array([1.0, 2.0, 3.0])
    v = np.arange(6.0).reshape(3, 2)
    expected = np.zeros((2, 2))
    for i, j, r in zip(*idx):
        expected[r] += u[i] * v[j]
    np.testing.assert_allclose(contract(terms, 2, {0: u, 1: v}), expected)
