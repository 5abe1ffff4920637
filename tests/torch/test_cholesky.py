"""Cholesky factor, LU log-determinants and splu against dense PyTorch autograd (float64)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings, strategies as st

import sparsad.torch as sat
from sparsad.errors import InputError, ShapeError
from sparsad.torch import SparseMatrix

f64 = torch.float64


def spd(n: int, seed: int, density: float = 0.4) -> SparseMatrix:
    m = sp.random(n, n, density=density, random_state=seed)
    m.data = np.random.default_rng(seed).standard_normal(m.nnz)
    return SparseMatrix.from_scipy((m @ m.T + n * sp.eye(n)).tocsr(), requires_grad=True)


def general(n: int, seed: int) -> SparseMatrix:
    m = sp.random(n, n, density=0.5, random_state=seed)
    m.data = np.random.default_rng(seed).standard_normal(m.nnz)
    return SparseMatrix.from_scipy((m + 3 * sp.diags(np.sign(np.random.default_rng(seed).standard_normal(n)))).tocsr(),
                                   requires_grad=True)


def masked(A: SparseMatrix, dense_grad: torch.Tensor) -> torch.Tensor:
    return dense_grad[torch.as_tensor(A.pattern.rows), torch.as_tensor(A.pattern.indices.astype(np.int64))]


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 9), st.integers(0, 10_000))
def test_solve_and_logdet_match_dense_autograd(n, seed):
    A = spd(n, seed)
    b = torch.randn(n, 2, dtype=f64, generator=torch.Generator().manual_seed(seed), requires_grad=True)
    factor = sat.cholesky(A)
    x, logdet = factor.solve(b), factor.logdet()
    dense = A.to_dense().detach().requires_grad_(True)
    ref_x, ref_logdet = torch.linalg.solve(dense, b), torch.logdet(dense)
    torch.testing.assert_close(x, ref_x)
    torch.testing.assert_close(logdet, ref_logdet)
    weights = torch.randn_like(x)
    ours = torch.autograd.grad((x * weights).sum() + 0.3 * logdet, [A.values, b])
    theirs = torch.autograd.grad((ref_x * weights).sum() + 0.3 * ref_logdet, [dense, b])
    torch.testing.assert_close(ours[0], masked(A, theirs[0]))
    torch.testing.assert_close(ours[1], theirs[1])


def test_gradchecks_first_and_second_order():
    A = spd(6, 3)
    b = torch.randn(6, dtype=f64, requires_grad=True)
    assert sat.gradcheck(lambda A, b: sat.cholesky(A).solve(b), [A, b])
    assert sat.gradgradcheck(lambda A, b: sat.cholesky(A).solve(b), [A, b])
    assert sat.gradcheck(lambda A: sat.cholesky(A).logdet(), [A])
    assert sat.gradgradcheck(lambda A: sat.cholesky(A).logdet(), [A])


def test_one_factorisation_serves_solves_logdet_and_backward(monkeypatch):
    from sparsad.ops import solve as ops_solve

    calls = []
    original = ops_solve.LUFactor.__init__

    def counting(self, *args, **kwargs):
        calls.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(ops_solve.LUFactor, "__init__", counting)
    A = spd(7, 4)
    factor = sat.cholesky(A)
    b = torch.randn(7, dtype=f64, requires_grad=True)
    loss = factor.solve(b).square().sum() + factor.logdet() + factor.solve(2 * b).sum()
    (gb,) = torch.autograd.grad(loss, b, create_graph=True)
    torch.autograd.grad(gb.sum(), A.values)
    assert len(calls) == 1


def test_forward_mode_and_vmap():
    A = spd(5, 8)
    factor = sat.cholesky(A)
    b = torch.randn(5, dtype=f64)
    dA, db = torch.randn(A.nnz, dtype=f64), torch.randn(5, dtype=f64)
    dense, ddense = A.to_dense().detach(), SparseMatrix._wrap(A.pattern, dA).to_dense()
    x = torch.linalg.solve(dense, b)
    _, tangent = torch.func.jvp(lambda v, r: sat.cholesky(SparseMatrix._wrap(A.pattern, v)).solve(r),
                                (A.values.detach(), b), (dA, db))
    torch.testing.assert_close(tangent, torch.linalg.solve(dense, db - ddense @ x))
    _, dlogdet = torch.func.jvp(lambda v: sat.cholesky(SparseMatrix._wrap(A.pattern, v)).logdet(),
                                (A.values.detach(),), (dA,))
    torch.testing.assert_close(dlogdet, torch.trace(torch.linalg.solve(dense, ddense)))
    batch = torch.randn(3, 5, dtype=f64)
    torch.testing.assert_close(torch.vmap(factor.solve)(batch), torch.linalg.solve(dense, batch.T).T)


def test_sampling_covariances():
    A = spd(4, 2)
    factor = sat.cholesky(A)
    draws = factor.sample(40_000, generator=1)
    dense = A.to_dense().detach()
    precision_cov = draws @ draws.T / draws.shape[1]
    inverse = torch.linalg.inv(dense)
    assert (precision_cov - inverse).abs().max() < 0.05 * inverse.abs().max()
    draws = factor.sample(40_000, covariance=True, generator=2)
    assert (draws @ draws.T / draws.shape[1] - dense).abs().max() < 0.05 * dense.abs().max()
    assert factor.sample(3, generator=5).shape == (4, 3)


def test_real_spd_matrix(suitesparse):
    matrix = suitesparse("HB/bcsstk01")
    matrix = (matrix / abs(matrix).max() + sp.eye(matrix.shape[0])).tocsr()
    A = SparseMatrix.from_scipy(matrix, requires_grad=True)
    factor = sat.cholesky(A)
    dense = A.to_dense().detach().requires_grad_(True)
    logdet, ref = factor.logdet(), torch.logdet(dense)
    torch.testing.assert_close(logdet, ref)
    torch.testing.assert_close(torch.autograd.grad(logdet, A.values)[0],
                               masked(A, torch.autograd.grad(ref, dense)[0]))


def test_bad_matrices_raise_our_errors():
    nonsymmetric = SparseMatrix.from_dense(torch.tensor([[2.0, 1.0], [0.5, 2.0]], dtype=f64))
    with pytest.raises(InputError, match="not symmetric"):
        sat.cholesky(nonsymmetric)
    structural = SparseMatrix.from_dense(torch.tensor([[2.0, 1.0], [0.0, 2.0]], dtype=f64))
    with pytest.raises(InputError, match="structurally symmetric"):
        sat.cholesky(structural)
    indefinite = SparseMatrix.from_dense(torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=f64))
    with pytest.raises(InputError, match="not positive definite"):
        sat.cholesky(indefinite)
    with pytest.raises(ShapeError):
        sat.cholesky(SparseMatrix.from_dense(torch.ones(2, 3, dtype=f64)))
    with pytest.raises(InputError):
        sat.cholesky(torch.eye(2))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_general_logdet_and_slogdet_through_lu(seed):
    A = general(6, seed)
    dense = A.to_dense().detach().requires_grad_(True)
    sign, logabs = sat.slogdet(A)
    ref_sign, ref_logabs = torch.linalg.slogdet(dense)
    assert sign.item() == ref_sign.item()
    torch.testing.assert_close(logabs, ref_logabs)
    torch.testing.assert_close(torch.autograd.grad(logabs, A.values)[0],
                               masked(A, torch.autograd.grad(ref_logabs, dense)[0]))
    logdet = sat.logdet(A)
    assert torch.isnan(logdet) if ref_sign < 0 else torch.allclose(logdet, ref_logabs)
    assert sat.gradcheck(lambda A: sat.slogdet(A)[1], [A])
    assert sat.gradgradcheck(lambda A: sat.slogdet(A)[1], [A])


def test_splu_reused_for_solves_both_ways():
    A = general(5, 7)
    b = torch.randn(5, dtype=f64, requires_grad=True)
    lu = sat.splu(A)
    dense = A.to_dense().detach()
    torch.testing.assert_close(sat.splu_solve(lu, b), torch.linalg.solve(dense, b))
    torch.testing.assert_close(lu.solve(b, transpose=True), torch.linalg.solve(dense.T, b))
    assert sat.gradcheck(lambda A, b: sat.splu_solve(sat.splu(A), b, transpose=True), [A, b])
    assert sat.gradgradcheck(lambda A, b: sat.splu(A).solve(b), [A, b])


@pytest.mark.parametrize("write", ["inplace", "data", "numpy"])
def test_a_factor_whose_matrix_changed_in_place_is_refused(write):
    """Every way of writing the values in place (torch in-place op, .data, a NumPy view, none of
    the last two bumping torch's version counter) makes the factor refuse a backward."""
    matrix = sp.diags([[-1.0] * 5, [4.0] * 6, [-1.0] * 5], [-1, 0, 1]).tocsr()
    A = SparseMatrix.from_scipy(matrix, requires_grad=True)
    factor = sat.cholesky(A)
    x = factor.solve(torch.ones(6, dtype=torch.float64))
    with torch.no_grad():
        if write == "inplace":
            A.values.mul_(2.0)
        elif write == "data":
            A.values.data[0] += 1.0
        else:
            A.values.detach().numpy()[-1] += 1.0
    with pytest.raises(InputError, match="changed after it was factored"):  # a new solve with the factor
        factor.solve(torch.ones(6, dtype=torch.float64))
    # the backward of the earlier solve: torch's own saved-tensor check refuses a torch in-place op
    refusal = (RuntimeError, "modified by an inplace operation") if write == "inplace" else \
        (InputError, "changed after it was factored")
    with pytest.raises(refusal[0], match=refusal[1]):
        x.sum().backward()
