"""Gustavson SpGEMM: pattern and values match SciPy; the masked gradients match dense products."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from sparsad.errors import DTypeError, ShapeError
from sparsad.ops.pattern import CSRPattern
from sparsad.ops.spgemm import SpGEMM, spgemm_symbolic


def pattern_of(matrix) -> CSRPattern:
    matrix = sp.csr_matrix(matrix)
    matrix.sum_duplicates()
    matrix.sort_indices()
    return CSRPattern(matrix.indptr, matrix.indices, matrix.shape)


def structural(a, b) -> sp.csr_matrix:
    ones = lambda m: sp.csr_matrix((np.ones(m.nnz), m.indices, m.indptr), shape=m.shape)
    product = (ones(a) @ ones(b)).tocsr()
    product.sort_indices()
    return product


pairs = st.builds(
    lambda m, k, n, da, db, seed: (sp.random(m, k, density=da, format="csr", random_state=seed),
                                   sp.random(k, n, density=db, format="csr", random_state=seed + 1)),
    st.integers(0, 12), st.integers(0, 12), st.integers(0, 12), st.floats(0.0, 1.0), st.floats(0.0, 1.0),
    st.integers(0, 2**30))


@settings(max_examples=60, deadline=None)
@given(pairs)
def test_pattern_values_and_gradients_match_dense(pair):
    a, b = pair
    a.sort_indices(), b.sort_indices()
    product = SpGEMM(pattern_of(a), pattern_of(b))
    expected = structural(a, b)
    assert np.array_equal(product.pattern.indptr, expected.indptr)
    assert np.array_equal(product.pattern.indices, expected.indices)
    c = product.values(a.data, b.data)
    assert np.allclose(product.pattern.to_scipy(c).toarray(), (a @ b).toarray())
    rng = np.random.default_rng(0)
    g = rng.standard_normal(product.pattern.nnz)
    dense_g = product.pattern.to_scipy(g).toarray()
    ga, gb = product.towards_a(b.data, g), product.towards_b(a.data, g)
    full_ga, full_gb = dense_g @ b.toarray().T, a.toarray().T @ dense_g
    assert np.allclose(ga, full_ga[pattern_of(a).rows, a.indices])
    assert np.allclose(gb, full_gb[pattern_of(b).rows, b.indices])
    fused, first = SpGEMM.with_values(pattern_of(a), pattern_of(b), a.data, b.data)
    assert np.array_equal(fused.pattern.indices, product.pattern.indices) and np.allclose(first, c)


def test_symbolic_phase_is_reused_for_new_values():
    a = sp.random(30, 20, density=0.2, format="csr", random_state=3)
    pa = pattern_of(a)
    pb = pattern_of(a.T)
    first = pa.product(pb)
    assert pa.product(pb) is first  # cached per partner pattern
    for seed in range(3):
        values = np.random.default_rng(seed).standard_normal(pa.nnz)
        at = sp.csr_matrix((values, a.indices, a.indptr), shape=a.shape)
        bt = at.T.tocsr()
        bt.sort_indices()
        c = first.values(values, bt.data)
        assert np.allclose(first.pattern.to_scipy(c).toarray(), (at @ bt).toarray())


def test_terms_agree_with_gustavson():
    a = sp.random(15, 9, density=0.3, format="csr", random_state=5)
    b = sp.random(9, 11, density=0.3, format="csr", random_state=6)
    c, terms = spgemm_symbolic(pattern_of(a), pattern_of(b))
    ta, tb, tc = terms.idx
    values = np.zeros(c.nnz)
    np.add.at(values, tc, a.data[ta] * b.data[tb])
    assert np.allclose(values, pattern_of(a).product(pattern_of(b)).values(a.data, b.data))


@pytest.mark.parametrize("name", ["HB/bcsstk13", "Bai/olm1000", "Pajek/GD06_theory"])
def test_real_matrix_square_matches_scipy(suitesparse, name):
    m = suitesparse(name)
    m.sum_duplicates(), m.sort_indices()
    product, values = SpGEMM.with_values(pattern_of(m), pattern_of(m), m.data, m.data)
    reference = (m @ m).tocsr()
    assert abs(product.pattern.to_scipy(values) - reference).max() <= 1e-12 * abs(reference).max()
    assert product.pattern.nnz == structural(m, m).nnz


def test_bad_arguments_raise_our_errors():
    pa = pattern_of(sp.eye(3, 4, format="csr"))
    with pytest.raises(ShapeError, match="A.shape\\[1\\] == B.shape\\[0\\]"):
        SpGEMM(pa, pa)
    product = SpGEMM(pa, pattern_of(sp.eye(4, 2, format="csr")))
    with pytest.raises(ShapeError, match="a must have shape"):
        product.values(np.ones(2), np.ones(2))
    with pytest.raises(DTypeError, match="float32 or float64"):
        product.values(np.ones(3, dtype=np.int64), np.ones(2))


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 40), k=st.integers(1, 6), seed=st.integers(0, 2**31))
def test_first_call_sorts_rows_made_of_many_runs(n, k, seed):
    """Outer-product-like products (output far beyond the inputs' size) with scattered columns (each
    row is k interleaved sorted runs): the first call's rows come out sorted."""
    rng = np.random.default_rng(seed)
    a = sp.random(n, k, density=1.0, format="csr", random_state=rng)
    b = sp.csr_matrix(sp.random(k, 50 * n, density=min(1.0, 3.0 / n), random_state=rng))
    a.sort_indices(), b.sort_indices()
    product, values = SpGEMM.with_values(pattern_of(a), pattern_of(b), a.data, b.data)
    expected = structural(a, b)
    assert np.array_equal(product.pattern.indptr, expected.indptr)
    assert np.array_equal(product.pattern.indices, expected.indices)  # sorted within rows
    dense = (a @ b).toarray()
    np.testing.assert_allclose(values, dense[product.pattern.rows, product.pattern.indices], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(product.values(a.data, b.data), values, rtol=1e-12, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 15), density=st.floats(0.0, 1.0), seed=st.integers(0, 2**31), cached=st.booleans())
def test_square_of_one_pattern_with_two_value_arrays(n, density, seed, cached):
    """A @ B where A and B share one pattern (one transpose serves both) but not their values, with
    and without the patterns' cached transposes; rows of the first call come out sorted."""
    rng = np.random.default_rng(seed)
    a = sp.random(n, n, density=density, format="csr", random_state=rng)
    a.sort_indices()
    b_values = rng.standard_normal(a.nnz)
    pattern = pattern_of(a)
    if cached:
        pattern.transpose  # noqa: B018 - the first call then reads the cached columns
    product, values = SpGEMM.with_values(pattern, pattern, a.data, b_values)
    b = sp.csr_matrix((b_values, a.indices, a.indptr), shape=a.shape)
    expected = structural(a, a)
    assert np.array_equal(product.pattern.indptr, expected.indptr)
    assert np.array_equal(product.pattern.indices, expected.indices)
    dense = (a @ b).toarray()
    np.testing.assert_allclose(values, dense[product.pattern.rows, product.pattern.indices], rtol=1e-12, atol=1e-12)
    same, squared = SpGEMM.with_values(pattern, pattern, a.data, a.data)
    np.testing.assert_allclose(squared, (a @ a).toarray()[same.pattern.rows, same.pattern.indices], rtol=1e-12,
                               atol=1e-12)
