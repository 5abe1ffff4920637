"""NumPy-level solves against SciPy, on random and SuiteSparse SPD matrices."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsad.errors import InputError, ShapeError
from sparsad.ops.pattern import CSRPattern
from sparsad.ops.solve import ConvergenceWarning, LUFactor, cg, check_triangular, triangular_solve


def csr_parts(matrix):
    matrix = sp.csr_matrix(matrix)
    matrix.sort_indices()
    return CSRPattern(matrix.indptr, matrix.indices, matrix.shape), matrix.data


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [True, False])
@pytest.mark.parametrize("columns", [None, 3])
def test_triangular_solve_matches_scipy(lower, unit, columns):
    rng = np.random.default_rng(1)
    dense = rng.standard_normal((9, 9)) * (rng.random((9, 9)) < 0.4) + 4 * np.eye(9)
    tri = np.tril(dense) if lower else np.triu(dense)
    pattern, values = csr_parts(tri)
    b = rng.standard_normal(9 if columns is None else (9, columns))
    check_triangular(pattern, values, lower, unit)
    x = triangular_solve(pattern, values, b, lower, unit)
    np.testing.assert_allclose(x, scipy.linalg.solve_triangular(tri, b, lower=lower, unit_diagonal=unit), rtol=1e-12)


def test_triangular_checks():
    pattern, values = csr_parts(np.array([[1.0, 2.0], [0.0, 1.0]]))
    with pytest.raises(InputError, match="above the diagonal at \\(0, 1\\)"):
        check_triangular(pattern, values, lower=True, unit=False)
    pattern, values = csr_parts(np.array([[1.0, 0.0], [2.0, 0.0]]))
    with pytest.raises(InputError, match="singular: diagonal entry \\(1, 1\\)"):
        check_triangular(pattern, values, lower=True, unit=False)
    check_triangular(pattern, values, lower=True, unit=True)
    with pytest.raises(ShapeError):
        check_triangular(*csr_parts(np.ones((2, 3))), lower=True, unit=False)


def test_lu_factor_both_ways(suitesparse):
    matrix = suitesparse("HB/bcsstk01")
    pattern, values = csr_parts(matrix)
    factor = LUFactor(pattern, values)
    b = np.random.default_rng(2).standard_normal((matrix.shape[0], 2))
    dense = matrix.toarray()
    np.testing.assert_allclose(dense @ factor.solve(b), b, atol=1e-6 * np.abs(b).max())
    np.testing.assert_allclose(dense.T @ factor.solve(b, transpose=True), b, atol=1e-6 * np.abs(b).max())


def test_lu_singular():
    pattern, values = csr_parts(np.array([[1.0, 2.0], [2.0, 4.0]]))
    with pytest.raises(InputError, match="singular"):
        LUFactor(pattern, values)


def test_cg_on_spd_data(suitesparse):
    matrix = suitesparse("HB/662_bus")
    b = np.random.default_rng(3).standard_normal((matrix.shape[0], 2))
    x, info = cg(lambda v: matrix @ v, b, rtol=1e-10)
    np.testing.assert_allclose(x, scipy.sparse.linalg.spsolve(matrix.tocsc(), b), rtol=1e-6, atol=1e-8)
    assert info.converged and 0 < info.iterations < 10 * matrix.shape[0] and info.info == 0


def test_cg_warns_without_convergence():
    matrix = sp.diags([np.linspace(1, 1e4, 50)], [0]).tocsr()
    with pytest.warns(ConvergenceWarning, match="no convergence in 3 iterations"):
        cg(lambda v: matrix @ v, np.ones(50), rtol=1e-12, maxiter=3)


@pytest.mark.parametrize("name", ["HB/bcsstk01", "HB/662_bus", "HB/bcsstk09"])
def test_cholesky_selected_inverse_and_logdet_match_dense(suitesparse, name):
    from sparsad.ops.solve import CholeskyFactor

    matrix = suitesparse(name)
    matrix = (matrix / abs(matrix).max() + 1e-2 * sp.eye(matrix.shape[0])).tocsr()
    pattern, values = csr_parts(matrix)
    factor = CholeskyFactor(pattern, values)
    dense_inverse = np.linalg.inv(matrix.toarray())
    expected = dense_inverse[pattern.rows, pattern.indices]
    np.testing.assert_allclose(factor.selected_inverse(), expected, rtol=1e-8, atol=1e-10 * abs(expected).max())
    np.testing.assert_allclose(LUFactor.selected_inverse(factor), expected, rtol=1e-8, atol=1e-10 * abs(expected).max())
    np.testing.assert_allclose(factor.logdet(), np.linalg.slogdet(matrix.toarray())[1], rtol=1e-10)


def test_lu_slogdet_sign_and_empty_matrices():
    dense = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -3.0]])
    factor = LUFactor(*csr_parts(dense))
    sign, logabs = factor.slogdet()
    assert (sign, round(logabs, 12)) == tuple(np.round(np.linalg.slogdet(dense), 12))
    empty = LUFactor(CSRPattern(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64), (0, 0)), np.zeros(0))
    assert empty.slogdet() == (1.0, 0.0) and empty.solve(np.zeros(0)).shape == (0,)
    pattern = CSRPattern(np.zeros(4, dtype=np.int64), np.zeros(0, dtype=np.int64), (3, 3))
    with pytest.raises(InputError, match="singular"):  # no stored diagonal: our error, not IndexError
        check_triangular(pattern, np.zeros(0), lower=True, unit=False)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 60), density=st.floats(0.0, 0.6), blocks=st.integers(0, 3), seed=st.integers(0, 2**31))
def test_supernodal_selected_inverse_matches_dense_and_reuses_its_pattern(n, density, blocks, seed):
    """Random SPD patterns with dense diagonal blocks (wide supernodes) and explicit zeros; the
    symbolic phase kept on the pattern must serve a second factor of new values exactly."""
    from sparsad.ops.solve import CholeskyFactor

    rng = np.random.default_rng(seed)
    mask = rng.random((n, n)) < density
    for _ in range(blocks):
        start, width = rng.integers(0, n), rng.integers(1, max(2, n // 3))
        mask[start:start + width, start:start + width] = True
    mask = mask | mask.T | np.eye(n, dtype=bool)
    rows, cols = np.nonzero(mask)
    pattern = csr_parts(sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n)))[0]
    for trial in range(2):
        weights = np.where(rng.random((n, n)) < 0.1, 0.0, rng.standard_normal((n, n))) * mask
        dense = (weights + weights.T) / 2 + np.diag(np.abs(weights).sum(1) + 1.0)  # diagonally dominant
        values = dense[pattern.rows, pattern.indices]
        factor = CholeskyFactor(pattern, values)
        expected = np.linalg.inv(dense)[pattern.indices, pattern.rows]
        np.testing.assert_allclose(factor.selected_inverse(), expected, rtol=1e-9, atol=1e-12 * abs(expected).max())
