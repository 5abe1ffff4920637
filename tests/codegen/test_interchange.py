"""BATAx through the interchanged loops (transposed index + row workspace) and SMMM's aggregated
gradient (a plain dense accumulator), against SciPy, on awkward shapes and dtypes."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsad
from sparsad.errors import FormatError
from sparsad.opt._transpose_kernel import transpose_pattern
from sparsad.opt.interchange import _transpose
from sparsad.programs import PAPER_PROGRAMS


def _sorted_rows(m: sp.csr_matrix) -> bool:
    return all(np.all(np.diff(m.indices[m.indptr[i]:m.indptr[i + 1]]) > 0) for i in range(m.shape[0]))


@pytest.mark.parametrize("shape, density", [((7, 5), 0.4), ((5, 9), 0.3), ((1, 1), 1.0), ((6, 4), 0.0),
                                            ((40, 300), 0.05), ((300, 40), 0.2)])
def test_batax_jacobian_uses_the_row_workspace_and_equals_scipy(make_csr, shape, density):
    A = make_csr(*shape, density, seed=sum(shape))
    jac = sparsad.jacobian(PAPER_PROGRAMS["batax"].text, wrt="x")
    got = jac(beta=1.5, A=A, x=np.ones(shape[1]))
    expected = (1.5 * (A.T @ A)).tocsr()
    assert got.shape == expected.shape
    assert np.allclose(got.toarray(), expected.toarray(), rtol=1e-12, atol=1e-12)
    assert _sorted_rows(got)
    if A.nnz:
        assert "output: workspace" in jac.show("code")


def test_batax_banded_and_scattered_rows_both_come_out_sorted():
    n = 400
    banded = sp.diags([np.ones(n - abs(k)) * (k + 2) for k in range(-3, 4)], list(range(-3, 4)), format="csr")
    rng = np.random.default_rng(0)
    scattered = sp.random(n, n, density=0.02, format="csr", random_state=rng)
    jac = sparsad.jacobian(PAPER_PROGRAMS["batax"].text, wrt="x")
    for A in (banded, scattered, sp.vstack([banded, scattered]).tocsr()):
        got = jac(beta=0.5, A=A, x=np.ones(n))
        expected = (0.5 * (A.T @ A)).tocsr()
        assert abs(got - expected).max() <= 1e-12 * abs(expected).max()
        assert _sorted_rows(got)


def test_batax_float32_and_int64_indices(make_csr):
    A = make_csr(30, 20, 0.2, seed=5)
    A64 = sp.csr_matrix((A.data.astype(np.float32), A.indices.astype(np.int64), A.indptr.astype(np.int64)),
                        shape=A.shape)
    jac = sparsad.jacobian(PAPER_PROGRAMS["batax"].text, wrt="x")
    got = jac(beta=2.0, A=A64, x=np.ones(20, dtype=np.float32))
    expected = (2.0 * (A.T @ A)).tocsr()
    assert abs(got - expected).max() <= 1e-5 * abs(expected).max()


def test_transpose_pattern_is_the_csc_index():
    A = sp.random(9, 6, density=0.4, format="csr", random_state=2)
    tpos, tidx, tperm = transpose_pattern(A.indptr.astype(np.int64), A.indices.astype(np.int64), 6)
    C = A.tocsc()
    C.sort_indices()
    assert list(tpos) == list(C.indptr)
    assert list(tidx) == list(C.indices)
    assert np.array_equal(A.data[tperm], C.data)


def test_transpose_rejects_overlapping_rows_and_columns_out_of_range():
    with pytest.raises(FormatError):
        _transpose(np.array([0, 3, 1], np.int64), np.array([0, 1, 2], np.int64), 3)
    with pytest.raises(FormatError):
        _transpose(np.array([0, 2, 3], np.int64), np.array([0, 5, 2], np.int64), 3)


def test_smmm_gradient_on_rectangular_and_empty_operands(make_csr):
    grad = sparsad.grad(PAPER_PROGRAMS["smmm"].text, wrt="B")
    for (m, k, n), density in [((5, 7, 4), 0.4), ((3, 3, 3), 0.0), ((8, 2, 9), 0.5)]:
        A = make_csr(m, k, density, seed=m)
        B = make_csr(k, n, density, seed=n)
        got = grad(A=A, B=B)
        colsums = np.asarray(A.sum(axis=0)).ravel()
        expected = B.copy()
        expected.data = np.repeat(colsums, np.diff(B.indptr))
        assert got.shape == B.shape
        assert np.allclose(got.toarray(), expected.toarray(), rtol=1e-12, atol=1e-12)
    assert "_mark" not in grad.show("code")  # looked up only: a plain dense accumulator
