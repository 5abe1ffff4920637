"""Triangular, direct and CG solves: forward vs SciPy/torch dense, masked gradients vs dense
autograd, gradcheck/gradgradcheck, forward mode, and SuiteSparse SPD matrices."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import sparsad.torch as sat
from sparsad.errors import InputError, ShapeError
from sparsad.torch import SparseMatrix

f64 = torch.float64


def triangular(n: int, lower: bool, seed: int) -> SparseMatrix:
    rng = np.random.default_rng(seed)
    dense = rng.standard_normal((n, n)) * (rng.random((n, n)) < 0.5) + 3 * np.eye(n)
    dense = np.tril(dense) if lower else np.triu(dense)
    return SparseMatrix.from_scipy(sp.csr_matrix(dense), requires_grad=True)


def dense_tri(L: SparseMatrix, unit: bool) -> torch.Tensor:
    dense = L.to_dense().detach().clone()
    if unit:
        dense.fill_diagonal_(1.0)
    return dense.requires_grad_(True)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [False, True])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("columns", [None, 2])
def test_triangular_solve_values_and_masked_gradient(lower, unit, transpose, columns):
    L = triangular(7, lower, seed=3)
    b = torch.randn(7 if columns is None else (7, columns), dtype=f64, requires_grad=True)
    x = sat.triangular_solve(L, b, lower=lower, unit_diagonal=unit, transpose=transpose)
    dense = dense_tri(L, unit)
    op = dense.T if transpose else dense
    rhs = b if columns else b[:, None]
    ref = torch.linalg.solve_triangular(op, rhs, upper=(lower == transpose), unitriangular=unit)
    ref = ref if columns else ref[:, 0]
    torch.testing.assert_close(x, ref)
    g = torch.randn_like(x)
    ours = torch.autograd.grad(x, [L.values, b], g)
    theirs = torch.autograd.grad(ref, [dense, b], g)
    expected = theirs[0][torch.as_tensor(L.pattern.rows), torch.as_tensor(L.pattern.indices.astype(np.int64))]
    if unit:
        expected = expected * torch.as_tensor(L.pattern.rows != L.pattern.indices, dtype=f64)
    torch.testing.assert_close(ours[0], expected)
    torch.testing.assert_close(ours[1], theirs[1])


@pytest.mark.parametrize("lower, unit, transpose", [(True, False, False), (False, True, True)])
def test_triangular_gradchecks(lower, unit, transpose):
    L = triangular(6, lower, seed=4)
    b = torch.randn(6, 2, dtype=f64, requires_grad=True)

    def op(L, b):
        return sat.triangular_solve(L, b, lower=lower, unit_diagonal=unit, transpose=transpose)

    assert sat.gradcheck(op, [L, b])
    assert sat.gradgradcheck(op, [L, b])


def test_triangular_errors():
    L = triangular(4, True, seed=0)
    with pytest.raises(InputError, match="above the diagonal"):
        sat.triangular_solve(L.T, torch.ones(4, dtype=f64))
    singular = SparseMatrix.from_scipy(sp.csr_matrix(np.tril(np.ones((3, 3)), -1)))
    with pytest.raises(InputError, match="singular"):
        sat.triangular_solve(singular, torch.ones(3, dtype=f64))
    torch.testing.assert_close(sat.triangular_solve(singular, torch.ones(3, dtype=f64), unit_diagonal=True),
                               torch.tensor([1.0, 0.0, 0.0], dtype=f64))
    with pytest.raises(ShapeError, match="length \\(rows\\) must be 4"):
        sat.triangular_solve(L, torch.ones(5, dtype=f64))


def spd(n: int, seed: int) -> SparseMatrix:
    m = sp.random(n, n, density=0.3, format="csr", random_state=seed)
    return SparseMatrix.from_scipy((m @ m.T + n * sp.eye(n)).tocsr(), requires_grad=True)


@pytest.mark.parametrize("solver", ["spsolve", "cg"])
def test_solves_masked_gradient_vs_dense(solver):
    A = spd(8, 1) if solver == "cg" else SparseMatrix.from_scipy(
        (sp.random(8, 8, density=0.4, random_state=2) + 2 * sp.eye(8)).tocsr(), requires_grad=True)
    b = torch.randn(8, dtype=f64, requires_grad=True)
    x = sat.spsolve(A, b) if solver == "spsolve" else sat.cg(A, b, rtol=1e-13)
    dense = A.to_dense().detach().requires_grad_(True)
    ref = torch.linalg.solve(dense, b)
    torch.testing.assert_close(x, ref)
    g = torch.randn(8, dtype=f64)
    ours = torch.autograd.grad(x, [A.values, b], g)
    theirs = torch.autograd.grad(ref, [dense, b], g)
    torch.testing.assert_close(ours[0], theirs[0][torch.as_tensor(A.pattern.rows),
                                                  torch.as_tensor(A.pattern.indices.astype(np.int64))])
    torch.testing.assert_close(ours[1], theirs[1])


def test_spsolve_and_cg_gradchecks():
    A = spd(6, 5)
    b = torch.randn(6, 2, dtype=f64, requires_grad=True)
    assert sat.gradcheck(sat.spsolve, [A, b])
    assert sat.gradgradcheck(sat.spsolve, [A, b])
    assert sat.gradcheck(lambda A, b: sat.cg(A, b, rtol=1e-14), [A, b])
    assert sat.gradgradcheck(lambda A, b: sat.cg(A, b, rtol=1e-14), [A, b], fast_mode=True)


def test_spsolve_reuses_one_factorisation(monkeypatch):
    from sparsad.ops import solve as ops_solve

    calls = []
    original = ops_solve.LUFactor.__init__

    def counting(self, *args, **kwargs):
        calls.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(ops_solve.LUFactor, "__init__", counting)
    A = spd(6, 7)
    b = torch.randn(6, dtype=f64, requires_grad=True)
    x = sat.spsolve(A, b)
    (gb,) = torch.autograd.grad(x.sum(), b, create_graph=True)
    torch.autograd.grad(gb.sum(), A.values)
    assert len(calls) == 1


def _masked(A: SparseMatrix, dense_grad: torch.Tensor) -> torch.Tensor:
    return dense_grad[torch.as_tensor(A.pattern.rows), torch.as_tensor(A.pattern.indices.astype(np.int64))]


@pytest.mark.parametrize("name", ["HB/bcsstk01", "HB/662_bus"])
def test_solves_on_suitesparse_spd_vs_dense_autograd(name, suitesparse):
    matrix = suitesparse(name)
    matrix = matrix / abs(matrix).max()
    A = SparseMatrix.from_scipy(matrix, requires_grad=True)
    L = SparseMatrix.from_scipy(sp.tril(matrix).tocsr(), requires_grad=True)  # positive diagonal
    n = A.shape[0]
    gen = torch.Generator().manual_seed(1)
    b = torch.randn(n, dtype=f64, generator=gen, requires_grad=True)
    g = torch.randn(n, dtype=f64, generator=gen)
    for M, solve, dense_solve in [
        (A, sat.spsolve, torch.linalg.solve),
        (L, sat.triangular_solve, lambda D, b: torch.linalg.solve_triangular(D, b[:, None], upper=False)[:, 0]),
    ]:
        x = solve(M, b)
        dense = M.to_dense().detach().requires_grad_(True)
        ref = dense_solve(dense, b)
        scale = ref.abs().max()
        torch.testing.assert_close(x / scale, ref / scale, rtol=1e-7, atol=1e-9)
        ours = torch.autograd.grad(x, [M.values, b], g)
        theirs = torch.autograd.grad(ref, [dense, b], g)
        for a, c in zip(ours, (_masked(M, theirs[0]), theirs[1])):
            torch.testing.assert_close(a / c.abs().max(), c / c.abs().max(), rtol=1e-6, atol=1e-8)


def test_solve_gradchecks_and_cg_on_662_bus(suitesparse):
    # 662_bus has condition number ~8e5, too large for finite differences; the unit shift keeps
    # the real pattern and makes the check meaningful (the raw matrix is checked vs dense above)
    matrix = suitesparse("HB/662_bus")
    matrix = (matrix / abs(matrix).max() + sp.eye(matrix.shape[0])).tocsr()
    A = SparseMatrix.from_scipy(matrix, requires_grad=True)
    n = A.shape[0]
    b = torch.randn(n, dtype=f64, generator=torch.Generator().manual_seed(2), requires_grad=True)
    assert sat.gradcheck(sat.spsolve, [A, b], fast_mode=True, rtol=1e-4)
    L = SparseMatrix.from_scipy(sp.tril(matrix).tocsr(), requires_grad=True)
    assert sat.gradcheck(lambda L, b: sat.triangular_solve(L, b), [L, b], fast_mode=True, rtol=1e-4)
    x = sat.spsolve(A, b)
    xc = sat.cg(A, b, rtol=1e-12)  # implicit CG gradient equals the direct solve's
    torch.testing.assert_close(xc, x, rtol=1e-7, atol=1e-8)
    g = torch.randn(n, dtype=f64)
    torch.testing.assert_close(torch.autograd.grad(xc, A.values, g)[0],
                               torch.autograd.grad(x, A.values, g)[0], rtol=1e-6, atol=1e-8)


def test_solve_forward_mode():
    import torch.autograd.forward_ad as fwAD

    A = spd(5, 9)
    b = torch.randn(5, dtype=f64)
    dA, db = torch.randn(A.nnz, dtype=f64), torch.randn(5, dtype=f64)
    dense, ddense = A.to_dense().detach(), SparseMatrix._wrap(A.pattern, dA).to_dense()
    x = torch.linalg.solve(dense, b)
    expected = torch.linalg.solve(dense, db - ddense @ x)
    for solve in (sat.spsolve, lambda A, b: sat.cg(A, b, rtol=1e-14)):
        with fwAD.dual_level():
            Ad = SparseMatrix._wrap(A.pattern, fwAD.make_dual(A.values.detach(), dA))
            tangent = fwAD.unpack_dual(solve(Ad, fwAD.make_dual(b, db))).tangent
        torch.testing.assert_close(tangent, expected)


def test_solve_gradgradchecks_on_bcsstk01(suitesparse):
    matrix = suitesparse("HB/bcsstk01")
    matrix = (matrix / abs(matrix).max() + sp.eye(matrix.shape[0])).tocsr()  # SPD, well conditioned
    A = SparseMatrix.from_scipy(matrix, requires_grad=True)
    L = SparseMatrix.from_scipy(sp.tril(matrix).tocsr(), requires_grad=True)
    b = torch.randn(matrix.shape[0], dtype=f64, generator=torch.Generator().manual_seed(3), requires_grad=True)
    for op, M in [(sat.spsolve, A), (lambda A, b: sat.cg(A, b, rtol=1e-13), A),
                  (lambda L, b: sat.triangular_solve(L, b, transpose=True), L)]:
        assert sat.gradcheck(op, [M, b], fast_mode=True)
        assert sat.gradgradcheck(op, [M, b], fast_mode=True)


def test_logdet_under_torch_func_matches_dense_and_a_changed_matrix_is_refused():
    """log|det| and its gradient under grad/vmap (the sign was NaN there), and no stale factor."""
    import scipy.sparse as sp_

    import sparsad.torch as st_
    from sparsad.errors import InputError
    from sparsad.torch import SparseMatrix as SM

    N0 = sp_.csr_matrix(sp_.random(6, 6, density=0.3, random_state=3) + 3 * sp_.eye(6))
    N0.sort_indices()
    A = SM.from_scipy(N0, requires_grad=True)
    pattern, values = A.pattern, A.values.detach()

    def logdet(w):
        return st_.logdet(SM._wrap(pattern, w))

    dense = torch.tensor(N0.toarray(), requires_grad=True)
    torch.logdet(dense).backward()
    rows = np.repeat(np.arange(6), np.diff(N0.indptr))
    expected = dense.grad.numpy()[rows, N0.indices]
    np.testing.assert_allclose(torch.func.grad(logdet)(values).numpy(), expected, rtol=1e-10, atol=1e-12)
    batched = torch.func.vmap(logdet)(torch.stack([values, 2 * values]))
    reference = [torch.logdet(torch.tensor(N0.toarray())), torch.logdet(2 * torch.tensor(N0.toarray()))]
    np.testing.assert_allclose(batched.numpy(), torch.stack(reference).numpy(), rtol=1e-12)
    flipped = values.clone()
    flipped[N0.indptr[0]:N0.indptr[1]] *= -1  # one row negated: the determinant changes sign
    signs, _ = torch.func.vmap(lambda w: st_.slogdet(SM._wrap(pattern, w)))(torch.stack([values, flipped]))
    assert signs.tolist() == [float(np.sign(np.linalg.det(N0.toarray()))),
                              -float(np.sign(np.linalg.det(N0.toarray())))]

    lu = st_.splu(A)
    with torch.no_grad():
        A.values.mul_(2.0)  # an optimizer step after factoring
    with pytest.raises(InputError, match="factor it again"):
        lu.solve(torch.ones(6, dtype=torch.float64))
