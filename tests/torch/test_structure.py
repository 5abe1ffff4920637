"""numml-parity ops against dense PyTorch (values and float64 gradchecks), the tensor-like
SparseMatrix methods, fixed-point implicit gradients and the TAGConv / GCNConv layers."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings, strategies as st

import sparsad.torch as sat
from sparsad.errors import InputError, UnsupportedError
from sparsad.torch import SparseMatrix
from sparsad.torch.layers import GCNConv, TAGConv

f64 = torch.float64


def random_matrix(m: int, n: int, seed: int) -> SparseMatrix:
    matrix = sp.random(m, n, density=0.5, format="csr", random_state=seed)
    matrix.data = np.random.default_rng(seed).standard_normal(matrix.nnz) + 0.1
    return SparseMatrix.from_scipy(matrix, requires_grad=True)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(-6, 6))
def test_eye_and_diag_match_torch(n, m, k):
    torch.testing.assert_close(sat.eye(n, m, k).to_dense(), torch.from_numpy(np.eye(n, m, k)))
    x = torch.randn(n, dtype=f64, requires_grad=True)
    torch.testing.assert_close(sat.diag(x, k).to_dense(), torch.diag(x, k))
    assert sat.gradcheck(lambda x: sat.diag(x, k).values, [x])


@pytest.mark.parametrize("k", [-2, 0, 1])
def test_tril_triu_and_value_maps_against_dense(k):
    A = random_matrix(5, 6, 1)
    dense = A.to_dense()
    torch.testing.assert_close(sat.tril(A, k).to_dense(), torch.tril(dense, k))
    torch.testing.assert_close(sat.triu(A, k).to_dense(), torch.triu(dense, k))
    for op in (lambda A: sat.tril(A, k), lambda A: sat.triu(A, k), lambda A: sat.add_scalar(A, 0.7),
               lambda A: sat.power(A, 3), lambda A: A ** 2, sat.abs, abs, lambda A: A.clone(), lambda A: A.t(),
               lambda A: A.mT):
        assert sat.gradcheck(op, [A])


def test_reductions_and_methods_against_dense_autograd():
    A = random_matrix(6, 6, 2)
    dense = A.to_dense().detach().requires_grad_(True)
    mask = (A.to_dense() != 0).to(f64).detach()
    pairs = [(sat.sum(A), dense.sum()), (A.sum(0), dense.sum(0)), (A.sum(1), dense.sum(1)),
             (sat.trace(A), torch.trace(dense))]
    for ours, theirs in pairs:
        torch.testing.assert_close(ours, theirs)
        weights = torch.randn_like(ours)
        g_ours = torch.autograd.grad((ours * weights).sum(), A.values)[0]
        g_dense = torch.autograd.grad((theirs * weights).sum(), dense)[0] * mask
        torch.testing.assert_close(SparseMatrix._wrap(A.pattern, g_ours).to_dense(), g_dense)
    assert A.size() == torch.Size([6, 6]) and A.size(1) == 6
    assert A.cpu().device.type == "cpu"
    coo = sat.to_torch_coo(A)
    assert coo.layout == torch.sparse_coo and coo.is_coalesced()
    torch.testing.assert_close(coo.to_dense(), A.to_dense())
    coo.to_dense().sum().backward()
    assert torch.equal(A.values.grad, torch.ones_like(A.values))


def test_fixed_point_implicit_gradient_matches_dense_solve():
    rng = np.random.default_rng(3)
    W = torch.tensor(rng.standard_normal((5, 5)) * 0.1, dtype=f64, requires_grad=True)
    c = torch.tensor(rng.standard_normal(5), dtype=f64, requires_grad=True)
    x = sat.fixed_point(lambda x, W, c: torch.tanh(W @ x + c), torch.zeros(5, dtype=f64), W, c)
    torch.testing.assert_close(x, torch.tanh(W @ x + c))
    assert sat.gradcheck(lambda W, c: sat.fixed_point(lambda x, W, c: torch.tanh(W @ x + c),
                                                      torch.zeros(5, dtype=f64), W, c), [W, c])
    # linear case against the closed form x = (I - M)^-1 c
    M = SparseMatrix.from_scipy(sp.random(5, 5, density=0.4, random_state=4) * 0.3, requires_grad=True)
    x = sat.fixed_point(lambda x, v, c: SparseMatrix._wrap(M.pattern, v) @ x + c, torch.zeros(5, dtype=f64),
                        M.values, c)
    dense = M.to_dense().detach().requires_grad_(True)
    ref = torch.linalg.solve(torch.eye(5, dtype=f64) - dense, c)
    torch.testing.assert_close(x, ref)
    g_ours = torch.autograd.grad(x.sum(), M.values)[0]
    g_ref = torch.autograd.grad(ref.sum(), dense)[0][torch.as_tensor(M.pattern.rows),
                                                      torch.as_tensor(M.pattern.indices.astype(np.int64))]
    torch.testing.assert_close(g_ours, g_ref)
    with pytest.raises(UnsupportedError, match="second derivatives"):
        (gc,) = torch.autograd.grad(x.sum(), c, create_graph=True)
    with pytest.raises(InputError):
        sat.fixed_point(lambda x: x, torch.zeros(2), 3.0)


def test_layers_against_dense_formulas():
    torch.manual_seed(0)
    A = SparseMatrix.from_scipy(sp.random(6, 6, density=0.4, random_state=5) + sp.random(6, 6, density=0.0),
                                requires_grad=True)
    X = torch.randn(6, 3, dtype=f64, requires_grad=True)
    dense = A.to_dense()
    gcn = GCNConv(3, 2).double()
    tilde = dense + torch.eye(6, dtype=f64)
    inv = tilde.sum(1).rsqrt()
    torch.testing.assert_close(gcn(A, X), (inv[:, None] * tilde * inv[None, :]) @ X @ gcn.weight + gcn.bias)
    tag = TAGConv(3, 2, K=2).double()
    deg = dense.sum(1)
    inv = torch.where(deg > 0, deg.clamp(min=1e-300).rsqrt(), torch.zeros_like(deg))
    hat = inv[:, None] * dense * inv[None, :]
    expected = X @ tag.weight[0] + hat @ X @ tag.weight[1] + hat @ hat @ X @ tag.weight[2] + tag.bias
    torch.testing.assert_close(tag(A, X), expected)
    assert sat.gradcheck(lambda A, X: tag(A, X), [A, X])
    assert sat.gradcheck(lambda A, X: gcn(A, X), [A, X])
