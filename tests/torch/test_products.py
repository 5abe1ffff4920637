"""SpGEMM through the Gustavson Function: gradients of every order and torch.func transforms
against dense autograd (float64)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from hypothesis import given, settings, strategies as st

from sparsad.torch import SparseMatrix, gradcheck, gradgradcheck, spgemm
from sparsad.torch.products import spgemm_values


def _pair(seed: int, m: int = 5, k: int = 4, n: int = 6):
    rng = np.random.default_rng(seed)
    a = sp.random(m, k, density=0.5, format="csr", random_state=seed)
    b = sp.random(k, n, density=0.5, format="csr", random_state=seed + 7)
    a.data, b.data = rng.standard_normal(a.nnz), rng.standard_normal(b.nnz)
    return SparseMatrix.from_scipy(a, requires_grad=True), SparseMatrix.from_scipy(b, requires_grad=True)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000))
def test_gradients_first_and_second_order(seed):
    A, B = _pair(seed)
    assert gradcheck(lambda a, b: spgemm(a, b), [A, B])
    assert gradgradcheck(lambda a, b: spgemm(a, b), [A, B])


def test_first_and_cached_calls_agree_with_dense_autograd(dense_reference):
    A, B = _pair(3)
    for _ in range(2):  # fused first call, then the cached symbolic phase
        C = spgemm(A, B)
        weights = torch.linspace(-1, 1, C.nnz, dtype=torch.float64)
        (C.values * weights).sum().backward()
        dense_a, masked_a = dense_reference(A)
        dense_b, masked_b = dense_reference(B)
        out = (dense_a @ dense_b)[torch.as_tensor(C.pattern.rows), torch.as_tensor(C.pattern.indices)]
        (out * weights).sum().backward()
        assert torch.allclose(A.values.grad, masked_a(dense_a.grad))
        assert torch.allclose(B.values.grad, masked_b(dense_b.grad))
        A.values.grad = B.values.grad = None


def test_torch_func_jvp_grad_and_vmap():
    A, B = _pair(11)
    product = A.pattern.product(B.pattern)
    a, b = A.values.detach(), B.values.detach()
    da, db = torch.randn_like(a), torch.randn_like(b)
    _, tangent = torch.func.jvp(lambda x, y: spgemm_values(product, x, y), (a, b), (da, db))
    expected = spgemm_values(product, da, b) + spgemm_values(product, a, db)
    assert torch.allclose(tangent, expected)
    grad = torch.func.grad(lambda x: spgemm_values(product, x, b).square().sum())(a)
    ref = torch.autograd.grad(spgemm_values(product, a.requires_grad_(), b).square().sum(), a)[0]
    assert torch.allclose(grad, ref)
    batch = torch.randn(3, a.shape[0], dtype=torch.float64)
    mapped = torch.vmap(lambda x: spgemm_values(product, x, b))(batch)
    assert torch.allclose(mapped, torch.stack([spgemm_values(product, x, b) for x in batch]))
