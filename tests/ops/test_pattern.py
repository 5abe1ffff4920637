"""CSR patterns: validation errors name the argument; transpose, union and product patterns match SciPy."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from sparsad.errors import DTypeError, FormatError, ShapeError
from sparsad.ops.pattern import CSRPattern


def pattern_of(matrix) -> CSRPattern:
    matrix = sp.csr_matrix(matrix)
    matrix.sort_indices()
    return CSRPattern(matrix.indptr, matrix.indices, matrix.shape)


def dense_mask(pattern: CSRPattern) -> np.ndarray:
    mask = np.zeros(pattern.shape, dtype=bool)
    mask[pattern.rows, pattern.indices] = True
    return mask


matrices = st.builds(
    lambda m, n, density, seed: sp.random(m, n, density=density, format="csr", random_state=seed),
    st.integers(1, 9), st.integers(1, 9), st.floats(0.0, 0.8), st.integers(0, 2**31 - 1))


@pytest.mark.parametrize("indptr, indices, shape, error, fragment", [
    ([0, 1], [0], (2, 2), FormatError, "A.indptr must have rows + 1"),
    ([1, 1, 1], [], (2, 2), FormatError, "A.indptr must start at 0"),
    ([0, 2, 1], [0, 1], (2, 2), FormatError, "non-decreasing"),
    ([0, 1, 3], [0, 1], (2, 2), FormatError, "A.indptr[-1]"),
    ([0, 1, 2], [0, 2], (2, 2), FormatError, "A.indices holds column 2"),
    ([0, 2, 2], [1, 0], (2, 2), FormatError, "strictly increasing within each row"),
    ([0, 2, 2], [1, 1], (2, 2), FormatError, "no duplicates"),
    ([0, 1, 2], [0.0, 1.0], (2, 2), DTypeError, "A.indices must hold integers"),
    ([0, 1, 2], [0, 1], (2, -1), ShapeError, "A.shape must be non-negative"),
    ([0, 1, 2], [0, 1], (2,), ShapeError, "A.shape must be a pair"),
])
def test_invalid_patterns_raise_naming_the_argument(indptr, indices, shape, error, fragment):
    with pytest.raises(error, match=None) as info:
        CSRPattern(np.array(indptr), np.array(indices), shape)
    assert fragment in str(info.value)


def test_row_boundaries_allow_decreasing_columns():
    pattern = CSRPattern(np.array([0, 2, 3]), np.array([1, 2, 0]), (2, 3))
    assert pattern.nnz == 3 and list(pattern.rows) == [0, 0, 1]


@settings(max_examples=40, deadline=None)
@given(matrices)
def test_transpose_matches_scipy(matrix):
    pattern = pattern_of(matrix)
    values = np.random.default_rng(0).standard_normal(pattern.nnz)
    transposed, perm = pattern.transpose
    got = transposed.to_scipy(values[perm]).toarray()
    np.testing.assert_array_equal(got, pattern.to_scipy(values).toarray().T)
    back, inverse = transposed.transpose
    assert back is pattern
    np.testing.assert_array_equal(values[perm][inverse], values)


@settings(max_examples=40, deadline=None)
@given(matrices, st.integers(0, 2**31 - 1))
def test_union_and_positions(matrix, seed):
    other = sp.random(*matrix.shape, density=0.3, format="csr", random_state=seed)
    a, b = pattern_of(matrix), pattern_of(other)
    union, map_a, map_b = a.union(b)
    np.testing.assert_array_equal(dense_mask(union), dense_mask(a) | dense_mask(b))
    np.testing.assert_array_equal(union.keys[map_a], a.keys)
    np.testing.assert_array_equal(union.keys[map_b], b.keys)
    assert a.union(b)[0] is union  # cached per partner


@settings(max_examples=40, deadline=None)
@given(matrices, st.integers(1, 9), st.integers(0, 2**31 - 1))
def test_product_pattern_is_structural(matrix, cols, seed):
    other = sp.random(matrix.shape[1], cols, density=0.4, format="csr", random_state=seed)
    a, b = pattern_of(matrix), pattern_of(other)
    c, terms = a.matmul(b)
    structural = (dense_mask(a).astype(int) @ dense_mask(b).astype(int)) > 0
    np.testing.assert_array_equal(dense_mask(c), structural)
    assert terms.n_terms == int((dense_mask(a).astype(int) @ dense_mask(b).astype(int)).sum())


def test_product_shape_mismatch():
    a = pattern_of(sp.eye(3))
    with pytest.raises(ShapeError, match="A.shape\\[1\\] == B.shape\\[0\\]"):
        a.matmul(pattern_of(sp.eye(4)))
    with pytest.raises(ShapeError, match="equal shapes"):
        a.union(pattern_of(sp.eye(4)))


def test_diagonal_positions():
    pattern = pattern_of(np.array([[1.0, 2, 0], [0, 0, 3], [4, 0, 5]]))
    np.testing.assert_array_equal(pattern.diagonal_positions, [0, -1, 4])


def _malformed_scipy():
    """scipy matrices whose arrays scipy's constructors let through (they check little) but whose
    conversion or sum_duplicates would read out of bounds."""
    out_of_range = sp.csr_matrix((np.ones(2), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 2))
    out_of_range.indices[1] = 7
    negative = sp.csr_matrix((np.ones(2), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 2))
    negative.indices[0] = -3
    decreasing = sp.csr_matrix((np.ones(2), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 2))
    decreasing.indptr[1] = 5
    coo = sp.coo_matrix((np.ones(2), (np.array([0, 1]), np.array([0, 1]))), shape=(2, 2))
    coo.row[1] = 9
    csc = sp.csc_matrix((np.ones(2), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 2))
    csc.indices[0] = 2
    return [(out_of_range, "column|indices"), (negative, "negative|indices"), (decreasing, "non-decreasing"),
            (coo, "mode 0"), (csc, "indices")]


@pytest.mark.parametrize("matrix, fragment", _malformed_scipy())
def test_from_scipy_validates_before_scipy_reads_the_arrays(matrix, fragment):
    with pytest.raises(FormatError, match="pattern") as info:
        CSRPattern.from_scipy(matrix)
    assert any(word in str(info.value) for word in fragment.split("|")), str(info.value)


@settings(max_examples=30, deadline=None)
@given(m=st.integers(0, 8), n=st.integers(0, 8), entries=st.integers(0, 30), seed=st.integers(0, 2**31),
       fmt=st.sampled_from(["coo", "csr", "csc", "lil", "dok", "bsr"]))
def test_from_scipy_has_one_entry_per_stored_coordinate(m, n, entries, seed, fmt):
    """Duplicates (even cancelling ones) merge to one entry, explicit zeros stay, rows sorted."""
    rng = np.random.default_rng(seed)
    rows, cols = rng.integers(0, max(m, 1), entries), rng.integers(0, max(n, 1), entries)
    if m == 0 or n == 0:
        rows, cols = rows[:0], cols[:0]
    values = rng.choice([-1.0, 0.0, 1.0], rows.shape[0])
    matrix = sp.coo_matrix((values, (rows, cols)), shape=(m, n)).asformat(fmt)
    pattern = CSRPattern.from_scipy(matrix)
    if fmt in ("coo", "csr", "csc", "bsr"):  # these formats keep every stored coordinate
        expected = np.zeros((m, n), dtype=bool)
        expected[rows, cols] = True
        if fmt == "bsr":  # a block is stored whole: its zeros are stored coordinates too
            stored = matrix.tocoo()
            expected[stored.row, stored.col] = True
        assert pattern.nnz == int(expected.sum())
        np.testing.assert_array_equal(dense_mask(pattern), expected)
    else:  # lil and dok store each coordinate once (the last assignment)
        assert pattern.nnz == matrix.nnz
    assert pattern.shape == (m, n)


def test_from_scipy_refuses_what_is_not_scipy():
    with pytest.raises(FormatError, match="scipy.sparse"):
        CSRPattern.from_scipy(np.eye(2))
