"""Krylov solvers: solutions and implicit gradients against dense PyTorch, preconditioners,
convergence reports, symmetry checks and matrix-free operators (float64)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import sparsad.torch as sat
from sparsad.errors import InputError, UnsupportedError
from sparsad.torch import ConvergenceWarning, LinearOperator, SparseMatrix

f64 = torch.float64
METHODS = ["cg", "minres", "gmres", "bicgstab"]


def spd(n: int, seed: int) -> SparseMatrix:
    m = sp.random(n, n, density=0.4, random_state=seed)
    m.data = np.random.default_rng(seed).standard_normal(m.nnz)
    return SparseMatrix.from_scipy((m @ m.T + n * sp.eye(n)).tocsr(), requires_grad=True)


def nonsymmetric(n: int, seed: int) -> SparseMatrix:
    m = sp.random(n, n, density=0.4, random_state=seed)
    m.data = np.random.default_rng(seed).standard_normal(m.nnz)
    return SparseMatrix.from_scipy((m + n * sp.eye(n)).tocsr(), requires_grad=True)


def masked(A: SparseMatrix, dense_grad: torch.Tensor) -> torch.Tensor:
    return dense_grad[torch.as_tensor(A.pattern.rows), torch.as_tensor(A.pattern.indices.astype(np.int64))]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed", [0, 1])
def test_solution_and_gradients_match_dense(method, seed):
    A = spd(7, seed) if method in ("cg", "minres") else nonsymmetric(7, seed)
    b = torch.randn(7, dtype=f64, generator=torch.Generator().manual_seed(seed), requires_grad=True)
    solve = getattr(sat, method)
    x, info = solve(A, b, rtol=1e-13, return_info=True)
    assert info.converged and info.info == 0
    dense = A.to_dense().detach().requires_grad_(True)
    ref = torch.linalg.solve(dense, b)
    torch.testing.assert_close(x, ref)
    g = torch.randn(7, dtype=f64)
    ours, theirs = torch.autograd.grad(x, [A.values, b], g), torch.autograd.grad(ref, [dense, b], g)
    torch.testing.assert_close(ours[0], masked(A, theirs[0]))
    torch.testing.assert_close(ours[1], theirs[1])


@pytest.mark.parametrize("method", METHODS)
def test_gradchecks_first_and_second_order(method):
    A = spd(5, 3) if method in ("cg", "minres") else nonsymmetric(5, 3)
    b = torch.randn(5, 2 if method == "cg" else 1, dtype=f64, requires_grad=True)
    solve = getattr(sat, method)
    assert sat.gradcheck(lambda A, b: solve(A, b, rtol=1e-14), [A, b])
    assert sat.gradgradcheck(lambda A, b: solve(A, b, rtol=1e-14), [A, b], fast_mode=True)


@pytest.mark.parametrize("method, M", [("cg", "jacobi"), ("cg", "amg"), ("gmres", "ilu"), ("cg", "ilu")])
def test_preconditioners_on_real_spd_matrix(suitesparse, method, M):
    matrix = suitesparse("HB/bcsstk13")
    matrix = (matrix / abs(matrix).max() + (1e-3 * sp.eye(matrix.shape[0]) if M == "ilu" else 0)).tocsr()
    A = SparseMatrix.from_scipy(matrix, requires_grad=True)
    b = torch.randn(A.shape[0], dtype=f64, generator=torch.Generator().manual_seed(0))
    solve = getattr(sat, method)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        _, plain = solve(A, b, rtol=1e-12, maxiter=30, return_info=True)
        _, preconditioned = solve(A, b, rtol=1e-12, maxiter=30, M=M, return_info=True)
    if M != "jacobi":  # CG's residual is not monotone: compare the strong preconditioners only
        assert preconditioned.residual < plain.residual
    x, info = solve(A, b, rtol=1e-8, maxiter=3000, M=M, return_info=True)
    assert info.converged
    residual = (A.detach() @ x - b).norm() / b.norm()
    assert residual < 1e-7
    gb = torch.autograd.grad((x * b).sum(), A.values)[0]  # the adjoint solve is preconditioned too
    assert torch.isfinite(gb).all()


def test_x0_maxiter_and_convergence_report():
    A = spd(30, 5)
    b = torch.randn(30, dtype=f64)
    exact = sat.cg(A, b, rtol=1e-14)
    x, info = sat.cg(A, b, x0=exact, return_info=True)
    assert info.iterations == 0 and info.converged
    with pytest.warns(ConvergenceWarning, match="did not converge in 2 iterations"):
        _, info = sat.cg(A, b, rtol=1e-14, maxiter=2, return_info=True)
    assert not info.converged and info.info == 2 and info.residual > 1e-14
    with pytest.warns(DeprecationWarning, match="use rtol"):
        torch.testing.assert_close(sat.cg(A, b, tol=1e-14), exact)


def test_symmetric_methods_refuse_nonsymmetric_input():
    A = nonsymmetric(6, 2)
    b = torch.ones(6, dtype=f64)
    for method in ("cg", "minres"):
        with pytest.raises(InputError, match="not (structurally )?symmetric"):
            getattr(sat, method)(A, b)
    operator = LinearOperator((6, 6), lambda v: A.detach() @ v)
    with pytest.raises(InputError, match="symmetric operator"):
        sat.cg(operator, b)
    indefinite = SparseMatrix.from_dense(torch.diag(torch.tensor([1.0, -2.0, 3.0], dtype=f64)))
    with pytest.raises(InputError, match="not positive definite"):
        sat.cg(indefinite, torch.ones(3, dtype=f64))
    x = sat.minres(indefinite, torch.ones(3, dtype=f64))  # MINRES handles symmetric indefinite
    torch.testing.assert_close(x, torch.tensor([1.0, -0.5, 1 / 3], dtype=f64))


def test_matrix_free_operator_with_parameters():
    A = nonsymmetric(6, 4).detach()
    scale = torch.tensor(1.5, dtype=f64, requires_grad=True)
    operator = LinearOperator((6, 6), lambda v: scale * (A @ v) + v, lambda v: scale * (A.T @ v) + v,
                              parameters=[scale])
    b = torch.randn(6, dtype=f64, requires_grad=True)
    for method in ("gmres", "bicgstab"):
        x = getattr(sat, method)(operator, b, rtol=1e-13)
        dense_scale = scale.detach().clone().requires_grad_(True)
        ref = torch.linalg.solve(dense_scale * A.to_dense() + torch.eye(6, dtype=f64), b)
        torch.testing.assert_close(x, ref)
        g = torch.randn(6, dtype=f64)
        ours = torch.autograd.grad(x, [scale, b], g)
        theirs = torch.autograd.grad(ref, [dense_scale, b], g)
        torch.testing.assert_close(ours[0], theirs[0])
        torch.testing.assert_close(ours[1], theirs[1])
    no_transpose = LinearOperator((6, 6), lambda v: A @ v + 7 * v)
    x = sat.gmres(no_transpose, b)
    with pytest.raises(UnsupportedError, match="rmatvec"):
        x.sum().backward()


def test_forward_mode_and_vmap_over_right_hand_sides():
    A = spd(5, 6)
    b = torch.randn(5, dtype=f64)
    dA, db = torch.randn(A.nnz, dtype=f64), torch.randn(5, dtype=f64)
    dense, ddense = A.to_dense().detach(), SparseMatrix._wrap(A.pattern, dA).to_dense()
    x = torch.linalg.solve(dense, b)
    for method in METHODS:
        solve = getattr(sat, method)
        _, tangent = torch.func.jvp(lambda v, r: solve(SparseMatrix._wrap(A.pattern, v), r, rtol=1e-13),
                                    (A.values.detach(), b), (dA, db))
        torch.testing.assert_close(tangent, torch.linalg.solve(dense, db - ddense @ x))
    batch = torch.randn(3, 5, dtype=f64)
    mapped = torch.vmap(lambda r: sat.cg(A.detach(), r, rtol=1e-13))(batch)
    torch.testing.assert_close(mapped, torch.linalg.solve(dense, batch.T).T)


def test_bad_arguments():
    A = spd(4, 1)
    with pytest.raises(InputError, match="rtol"):
        sat.cg(A, torch.ones(4, dtype=f64), rtol=-1)
    with pytest.raises(InputError, match="unknown preconditioner"):
        sat.cg(A, torch.ones(4, dtype=f64), M="multigrid")
    with pytest.raises(InputError, match="SparseMatrix or a sparsad.torch.LinearOperator"):
        sat.gmres(torch.eye(4, dtype=f64), torch.ones(4, dtype=f64))


@pytest.mark.parametrize("method", ["cg", "minres"])
def test_adjoint_report_matches_forward_for_the_same_right_hand_side(method):
    """A symmetric A and g = b: the adjoint solve is the forward solve again, so it reports the same
    iteration count (the benchmark's backward/forward ratio relies on comparing like with like)."""
    A = spd(12, 4)
    b = torch.randn(12, dtype=f64, generator=torch.Generator().manual_seed(4))
    x, info = getattr(sat, method)(A, b, rtol=1e-12, M="jacobi", return_info=True)
    assert info.adjoint is None
    x.backward(b)
    assert info.adjoint is not None and info.adjoint.converged
    assert info.adjoint.iterations == info.iterations


@pytest.mark.parametrize("method", ["gmres", "bicgstab"])
@pytest.mark.parametrize("M", ["jacobi", "ilu"])
def test_nonsymmetric_adjoint_reuses_the_preconditioner_transposed(method, M):
    """The adjoint solve applies M^T from the forward's own Jacobi/ILU setup; gradients still match
    dense autograd (first order, and second order through the adjoint of the adjoint)."""
    A = nonsymmetric(9, 5)
    b = torch.randn(9, dtype=f64, generator=torch.Generator().manual_seed(5), requires_grad=True)
    solve = getattr(sat, method)
    x, info = solve(A, b, rtol=1e-13, M=M, return_info=True)
    dense = A.to_dense().detach().requires_grad_(True)
    ref = torch.linalg.solve(dense, b)
    g = torch.randn(9, dtype=f64, generator=torch.Generator().manual_seed(6))
    ours = torch.autograd.grad(x, [A.values, b], g, create_graph=True)
    theirs = torch.autograd.grad(ref, [dense, b], g, create_graph=True)
    torch.testing.assert_close(ours[0], masked(A, theirs[0]))
    torch.testing.assert_close(ours[1], theirs[1])
    assert info.adjoint is not None and info.adjoint.converged
    h = torch.randn(9, dtype=f64, generator=torch.Generator().manual_seed(7))
    second_ours = torch.autograd.grad((ours[1] * h).sum(), A.values)[0]
    second_theirs = torch.autograd.grad((theirs[1] * h).sum(), dense)[0]
    torch.testing.assert_close(second_ours, masked(A, second_theirs))


def test_forward_mode_keeps_the_forward_report_and_matches_dense():
    """Under forward-mode AD the tangent solve runs inside the same call: the returned report is
    still the forward solve's, and the tangent equals dense autograd's."""
    import torch.autograd.forward_ad as fwAD

    A = spd(10, 6)
    b = torch.randn(10, dtype=f64, generator=torch.Generator().manual_seed(6))
    db = torch.randn(10, dtype=f64, generator=torch.Generator().manual_seed(7))
    _, plain = sat.cg(A.detach(), b, rtol=1e-12, return_info=True)
    with fwAD.dual_level():
        x, info = sat.cg(A.detach(), fwAD.make_dual(b, db), rtol=1e-12, return_info=True)
        tangent = fwAD.unpack_dual(x).tangent
    assert info.iterations == plain.iterations and info.residual == pytest.approx(plain.residual, rel=1e-6)
    torch.testing.assert_close(tangent, torch.linalg.solve(A.to_dense().detach(), db))
