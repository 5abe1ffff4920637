"""Products, sums and structure ops: forward and masked gradients against dense torch autograd,
gradcheck/gradgradcheck in float64 on random and SuiteSparse matrices, forward mode, double
backward, and the PyTorch-kernel (device) path against the Numba path."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import sparsad.torch as sat
from sparsad.errors import DTypeError, InputError, ShapeError
from sparsad.torch import SparseMatrix, _autograd

f64 = torch.float64


def wrap(A: SparseMatrix, values: torch.Tensor) -> SparseMatrix:
    return SparseMatrix._wrap(A.pattern, values)


cases = st.tuples(st.integers(1, 8), st.integers(1, 8), st.floats(0.05, 0.8), st.integers(0, 10_000))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases)
def test_spmv_all_five_gradients_match_dense(case, random_sparse, dense_reference):
    m, n, density, seed = case
    A = random_sparse(m, n, density, seed)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dtype=f64, generator=gen, requires_grad=True)
    y = torch.randn(m, dtype=f64, generator=gen, requires_grad=True)
    alpha = torch.tensor(0.7, dtype=f64, requires_grad=True)
    beta = torch.tensor(-1.3, dtype=f64, requires_grad=True)
    g = torch.randn(m, dtype=f64, generator=gen)
    w = sat.spmv(A, x, alpha, beta, y)
    dense, masked = dense_reference(A)
    leaves = [dense, x, y, alpha, beta]
    w_ref = alpha * (dense @ x) + beta * y
    torch.testing.assert_close(w, w_ref)
    ours = torch.autograd.grad(w, [A.values, x, y, alpha, beta], g, allow_unused=True)
    ref = torch.autograd.grad(w_ref, leaves, g)
    torch.testing.assert_close(ours[0], masked(ref[0]))
    for a, b in zip(ours[1:], ref[1:]):
        torch.testing.assert_close(a, b)
    # the closed forms of the derivation notes, eqs. (16)-(20)
    Ad = A.to_dense().detach()
    torch.testing.assert_close(ours[3], g @ (Ad @ x.detach()))
    torch.testing.assert_close(ours[4], g @ y.detach())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases, channels=st.integers(1, 3), batch=st.sampled_from([(), (2,), (2, 3)]))
def test_spmm_batched_matches_dense(case, channels, batch, random_sparse, dense_reference):
    m, n, density, seed = case
    A = random_sparse(m, n, density, seed)
    X = torch.randn(*batch, n, channels, dtype=f64, requires_grad=True)
    out = A @ X
    dense, masked = dense_reference(A)
    ref = dense @ X
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(ref)
    ours = torch.autograd.grad(out, [A.values, X], g)
    theirs = torch.autograd.grad(ref, [dense, X], g)
    torch.testing.assert_close(ours[0], masked(theirs[0]))
    torch.testing.assert_close(ours[1], theirs[1])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases, p=st.integers(1, 8), density_b=st.floats(0.05, 0.8))
def test_spgemm_masked_gradients_for_both(case, p, density_b, random_sparse, dense_reference):
    m, n, density, seed = case
    A, B = random_sparse(m, n, density, seed), random_sparse(n, p, density_b, seed + 1)
    C = A @ B
    da, ma = dense_reference(A)
    db, mb = dense_reference(B)
    ref = da @ db
    torch.testing.assert_close(C.to_dense(), ref)
    V = torch.randn(C.nnz, dtype=f64)
    ours = torch.autograd.grad(C.values, [A.values, B.values], V)
    Vd = wrap(C, V).to_dense()  # gradient of the values = dense gradient on C's pattern
    theirs = torch.autograd.grad(ref, [da, db], Vd)
    torch.testing.assert_close(ours[0], ma(theirs[0]))
    torch.testing.assert_close(ours[1], mb(theirs[1]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases, seed_b=st.integers(0, 10_000))
def test_add_gradients_and_alpha_rule(case, seed_b, random_sparse, dense_reference):
    m, n, density, seed = case
    A, B = random_sparse(m, n, density, seed), random_sparse(m, n, 0.3, seed_b)
    alpha = torch.tensor(1.7, dtype=f64, requires_grad=True)
    beta = torch.tensor(-0.4, dtype=f64, requires_grad=True)
    C = sat.add(A, B, alpha, beta)
    da, ma = dense_reference(A)
    db, mb = dense_reference(B)
    ref = alpha * da + beta * db
    torch.testing.assert_close(C.to_dense(), ref)
    V = torch.randn(C.nnz, dtype=f64)
    ours = torch.autograd.grad(C.values, [A.values, B.values, alpha, beta], V)
    theirs = torch.autograd.grad(ref, [da, db, alpha, beta], wrap(C, V).to_dense())
    torch.testing.assert_close(ours[0], ma(theirs[0]))
    torch.testing.assert_close(ours[1], mb(theirs[1]))
    # d/d alpha = <V, A> on A's pattern, not numml's plain sum of A's entries
    Vd = wrap(C, V).to_dense()
    torch.testing.assert_close(ours[2], (Vd * A.to_dense().detach()).sum())
    torch.testing.assert_close(ours[3], (Vd * B.to_dense().detach()).sum())


def test_numml_alpha_rule_would_be_wrong(random_sparse):
    A, B = random_sparse(5, 5, 0.5, 1), random_sparse(5, 5, 0.5, 2)
    alpha = torch.tensor(2.0, dtype=f64, requires_grad=True)
    C = sat.add(A, B, alpha, 1.0)
    V = torch.randn(C.nnz, dtype=f64, generator=torch.Generator().manual_seed(0))
    (grad,) = torch.autograd.grad(C.values, alpha, V)
    assert not torch.isclose(grad, A.values.detach().sum())


def test_structure_ops_match_dense(random_sparse, dense_reference):
    A = random_sparse(6, 4, 0.5, 3)
    dense, masked = dense_reference(A)
    for ours, ref in [(sat.transpose(A).to_dense(), dense.T), (sat.diagonal(A), torch.diagonal(dense)),
                      (sat.row_sum(A), dense.sum(1))]:
        torch.testing.assert_close(ours, ref)
        g = torch.randn_like(ref)
        torch.testing.assert_close(torch.autograd.grad(ours, A.values, g)[0],
                                   masked(torch.autograd.grad(ref, dense, g)[0]))
    assert sat.transpose(sat.transpose(A)).pattern is A.pattern


OPS = {
    "spmv": (lambda A, B, x, X: sat.spmv(A, x, 0.5, 2.0, x[: A.shape[0]] * 0 + 1)),
    "spmm": (lambda A, B, x, X: A @ X),
    "spgemm": (lambda A, B, x, X: (A @ B).values),
    "add": (lambda A, B, x, X: (2.0 * A - B.T).values),
    "transpose": (lambda A, B, x, X: A.T.values),
    "diagonal": (lambda A, B, x, X: sat.diagonal(A)),
    "row_sum": (lambda A, B, x, X: sat.row_sum(A)),
    "gcn_norm": (lambda A, B, x, X: sat.gcn_norm(SparseMatrix._wrap(A.pattern, A.values ** 2 + 0.1)).values),
}


@pytest.mark.parametrize("name", list(OPS))
def test_gradcheck_and_gradgradcheck_random(name, random_sparse):
    A, B = random_sparse(5, 5, 0.5, 11), random_sparse(5, 5, 0.5, 12)
    x = torch.randn(5, dtype=f64, requires_grad=True)
    X = torch.randn(5, 2, dtype=f64, requires_grad=True)
    op = OPS[name]
    assert sat.gradcheck(op, [A, B, x, X])
    assert sat.gradgradcheck(op, [A, B, x, X])


@pytest.mark.parametrize("name", ["HB/bcsstk01", "HB/662_bus"])
def test_gradchecks_on_suitesparse_spd(name, suitesparse):
    matrix = suitesparse(name)
    A = SparseMatrix.from_scipy(matrix / abs(matrix).max(), requires_grad=True)
    n = A.shape[0]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, dtype=f64, generator=gen, requires_grad=True)
    X = torch.randn(n, 2, dtype=f64, generator=gen, requires_grad=True)
    torch.testing.assert_close(A @ x, torch.as_tensor(matrix / abs(matrix).max() @ x.detach().numpy()))
    for k, op in enumerate((lambda A, x, X: A @ x, lambda A, x, X: A @ X, lambda A, x, X: (A @ A).values,
                            lambda A, x, X: (A - 0.5 * A.T).values,
                            lambda A, x, X: sat.spmv(A.T, x, 2.0, -1.0, x) + sat.diagonal(A) + sat.row_sum(A),
                            lambda A, x, X: sat.gcn_norm(A.with_values(A.values ** 2)).values)):
        assert sat.gradcheck(op, [A, x, X], fast_mode=n > 100 or k > 0)
        assert sat.gradgradcheck(op, [A, x, X], fast_mode=True)


def test_double_backward_hessian_vector_product(random_sparse):
    A = random_sparse(6, 6, 0.5, 5)
    x = torch.randn(6, dtype=f64, requires_grad=True)
    loss = ((A @ A) @ x).pow(2).sum()
    (gx,) = torch.autograd.grad(loss, x, create_graph=True)
    v = torch.randn(6, dtype=f64)
    (hv,) = torch.autograd.grad(gx, x, v, retain_graph=True)
    M = (A.to_dense() @ A.to_dense()).detach()
    torch.testing.assert_close(hv, 2 * M.T @ M @ v)
    (ga,) = torch.autograd.grad(gx @ v, A.values)  # mixed second derivative reaches A's values
    dense = A.to_dense().detach().requires_grad_(True)
    gxd = torch.autograd.grad(((dense @ dense) @ x).pow(2).sum(), x, create_graph=True)[0]
    (gad,) = torch.autograd.grad(gxd @ v, dense)
    torch.testing.assert_close(ga, gad[torch.as_tensor(A.pattern.rows), torch.as_tensor(A.pattern.indices.astype(np.int64))])


def test_forward_mode_jvp(random_sparse):
    import torch.autograd.forward_ad as fwAD

    A, B = random_sparse(4, 5, 0.5, 1), random_sparse(5, 3, 0.5, 2)
    x = torch.randn(5, dtype=f64)
    dA, dB, dx = torch.randn(A.nnz, dtype=f64), torch.randn(B.nnz, dtype=f64), torch.randn(5, dtype=f64)
    with fwAD.dual_level():
        Ad = wrap(A, fwAD.make_dual(A.values.detach(), dA))
        Bd = wrap(B, fwAD.make_dual(B.values.detach(), dB))
        w = fwAD.unpack_dual(Ad @ fwAD.make_dual(x, dx)).tangent
        C = fwAD.unpack_dual((Ad @ Bd).values).tangent
        alpha = fwAD.make_dual(torch.tensor(0.5, dtype=f64), torch.tensor(2.0, dtype=f64))
        S = fwAD.unpack_dual(sat.add(Ad, Ad, alpha, 1.0).values).tangent
    a, b = A.to_dense().detach(), B.to_dense().detach()
    da, db = wrap(A, dA).to_dense(), wrap(B, dB).to_dense()
    torch.testing.assert_close(w, da @ x + a @ dx)
    C_pattern = (A @ B)
    torch.testing.assert_close(wrap(C_pattern, C).to_dense(), da @ b + a @ db)
    torch.testing.assert_close(wrap(A, S).to_dense(), 0.5 * da + 2.0 * a + da)  # d(alpha A + A)


def test_torch_kernel_path_matches_numba(random_sparse, monkeypatch):
    A, B = random_sparse(7, 6, 0.4, 21), random_sparse(6, 5, 0.4, 22)
    X = torch.randn(6, 3, dtype=f64, requires_grad=True)

    def run():
        out = ((A @ X).sum() + ((A @ B).values ** 2).sum() + (A.T @ torch.ones(7, dtype=f64)).sum()
               + ((B.T @ A.T).T - 0.5 * A @ B).values.square().sum())
        return [out] + list(torch.autograd.grad(out, [A.values, B.values, X]))

    expected = run()
    monkeypatch.setattr(_autograd, "FORCE_TORCH_KERNELS", True)
    got = run()
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
    assert sat.gradgradcheck(lambda A, B, X: A @ (B @ X[:5]) + (A @ B).values.sum(), [A, B, X])


def test_float32_and_errors(random_sparse):
    A = random_sparse(4, 3, 0.6, 0).to(dtype=torch.float32)
    x = torch.randn(3)
    torch.testing.assert_close(A @ x, A.to_dense() @ x)
    with pytest.raises(DTypeError, match="x has dtype torch.float64"):
        A @ x.double()
    with pytest.raises(ShapeError, match="length must be 3"):
        A @ torch.randn(4)
    with pytest.raises(InputError, match="beta is given but y is None"):
        sat.spmv(A, x, beta=2.0)
    with pytest.raises(ShapeError, match="A.shape\\[1\\] == B.shape\\[0\\]"):
        A @ A
    with pytest.raises(ShapeError, match="square"):
        sat.gcn_norm(A)


@pytest.mark.parametrize("want_a, want_x", [(True, True), (True, False), (False, True)])
def test_first_order_fast_paths_match_dense(want_a, want_x, random_sparse, dense_reference):
    """The first-order Numba paths (one fused pass for SpMV's two cotangents, gathers for A + B)
    give the dense-autograd gradients, whichever inputs require grad, in float64."""
    A, B = random_sparse(12, 9, 0.4, 1), random_sparse(12, 9, 0.3, 2)
    A.values.requires_grad_(want_a)
    B.values.requires_grad_(want_a)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(9, dtype=f64, generator=gen, requires_grad=want_x)
    w = torch.randn(12, dtype=f64, generator=gen)
    ((sat.add(A, B, 0.7, -1.3) @ x) * w).sum().backward()
    (dense_a, masked_a), (dense_b, masked_b) = dense_reference(A), dense_reference(B)
    x_ref = x.detach().clone().requires_grad_(True)
    (((0.7 * dense_a - 1.3 * dense_b) @ x_ref) * w).sum().backward()
    if want_a:
        torch.testing.assert_close(A.values.grad, masked_a(dense_a.grad), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(B.values.grad, masked_b(dense_b.grad), rtol=1e-12, atol=1e-12)
    else:
        assert A.values.grad is None and B.values.grad is None
    if want_x:
        torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-12, atol=1e-12)
    else:
        assert x.grad is None


@pytest.mark.parametrize("want_a, want_x", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("shape", [(9, 5), (3, 9, 4)])
def test_spmm_first_order_backward_matches_dense(want_a, want_x, shape, random_sparse, dense_reference):
    """SpMM's first-order backward (no graph kept), plain and batched, against dense autograd."""
    A = random_sparse(12, 9, 0.4, 3)
    A.values.requires_grad_(want_a)
    gen = torch.Generator().manual_seed(1)
    X = torch.randn(*shape, dtype=f64, generator=gen, requires_grad=want_x)
    W = torch.randn(*shape[:-2], 12, shape[-1], dtype=f64, generator=gen)
    ((A @ X) * W).sum().backward()
    dense, masked = dense_reference(A)
    X_ref = X.detach().clone().requires_grad_(True)
    ((dense @ X_ref) * W).sum().backward()
    if want_a:
        torch.testing.assert_close(A.values.grad, masked(dense.grad), rtol=1e-12, atol=1e-12)
    if want_x:
        torch.testing.assert_close(X.grad, X_ref.grad, rtol=1e-12, atol=1e-12)
