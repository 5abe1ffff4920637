"""Adversarial cases of sparsad.torch.jacobian / hessian (review of the colouring): patterns
that are too small or stale never give a wrong matrix; errors are our own."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import sparsad.torch as st
from sparsad.errors import InputError

f64 = torch.float64


def tridiagonal(x):
    return 2 * x + torch.nn.functional.pad(x[1:] ** 2, (0, 1)) - torch.nn.functional.pad(x[:-1], (1, 0))


def chain(x):
    return (x[1:] ** 2 * x[:-1]).sum() + (x ** 3).sum()


@pytest.mark.parametrize("mode", ["auto", "forward", "reverse"])
@pytest.mark.parametrize("dtype", [torch.float32, f64])
def test_a_pattern_missing_nonzeros_raises_instead_of_a_wrong_matrix(mode, dtype):
    x = torch.randn(7, dtype=dtype, generator=torch.Generator().manual_seed(0))
    diagonal = sp.eye(7, format="csr")  # the tridiagonal Jacobian's off-diagonals are missing
    with pytest.raises(InputError, match="outside `pattern`"):
        st.jacobian(tridiagonal, x, pattern=diagonal, mode=mode)
    with pytest.raises(InputError, match="outside `pattern`"):  # nothing stored at all
        st.jacobian(tridiagonal, x, pattern=sp.csr_matrix((7, 7)), mode=mode)
    full = sp.diags([1.0, 1.0, 1.0], [-1, 0, 1], shape=(7, 7)).tocsr()
    J = st.jacobian(tridiagonal, x, pattern=full, mode=mode)  # the exact pattern passes the check
    torch.testing.assert_close(J.to_dense(), torch.func.jacfwd(tridiagonal)(x))
    wrong = st.jacobian(tridiagonal, x, pattern=diagonal, mode=mode, check=False)  # as asked
    assert wrong.nnz == 7


def test_a_detected_pattern_reused_for_a_changed_function_or_point_raises():
    x = torch.randn(6, dtype=f64, generator=torch.Generator().manual_seed(1))
    J = st.jacobian(tridiagonal, x)
    with pytest.raises(InputError, match="outside `pattern`"):  # f changed, pattern kept
        st.jacobian(lambda z: tridiagonal(z) + z.roll(2), x, pattern=J)

    def gated(z):  # z[i + 1] enters row i only where z[i] > 1000 (a gather: coarsening refuses it,
        # so the pattern is detected from dense Jacobians)
        return z * z + torch.nn.functional.pad(torch.where(z[:-1] > 1000, z[_NEXT], 0.0), (0, 1))
    detected = st.jacobian(gated, -torch.ones(6, dtype=f64))  # no gate opens at or near x = -1
    assert detected.nnz == 6
    with pytest.raises(InputError, match="outside `pattern`"):  # all open at 2000
        st.jacobian(gated, torch.full((6,), 2000.0, dtype=f64), pattern=detected)

    def gated_slices(z):  # the same with slices: the pattern is read off coarsening's graph, both arms
        return z * z + torch.nn.functional.pad(torch.where(z[:-1] > 1000, z[1:], 0.0), (0, 1))
    structural = st.jacobian(gated_slices, -torch.ones(6, dtype=f64))
    assert structural.nnz == 11  # the gates' entries included: a superset at every point
    at = torch.full((6,), 2000.0, dtype=f64)
    torch.testing.assert_close(st.jacobian(gated_slices, at, pattern=structural).to_dense(),
                               torch.func.jacfwd(gated_slices)(at))


_NEXT = torch.arange(1, 6)


def test_hessian_checks_its_pattern_and_wants_a_scalar_function():
    x = torch.randn(6, dtype=f64, generator=torch.Generator().manual_seed(2))
    with pytest.raises(InputError, match="outside `pattern`"):
        st.hessian(chain, x, pattern=sp.eye(6, format="csr"))
    banded = sp.diags([1.0, 1.0, 1.0], [-1, 0, 1], shape=(6, 6)).tocsr()
    for colouring in ("star", "distance1"):
        H = st.hessian(chain, x, pattern=sp.triu(banded).tocsr(), colouring=colouring)
        torch.testing.assert_close(H.to_dense(), torch.func.hessian(chain)(x))
    for vector_valued in (lambda z: z * z, lambda z: chain(z).reshape(1)):
        with pytest.raises(InputError, match="scalar"):  # (was torch.func's RuntimeError)
            st.hessian(vector_valued, x)


def test_inside_vmap_a_pattern_missing_nonzeros_gives_nan_not_a_wrong_matrix():
    X = torch.randn(3, 5, dtype=f64, generator=torch.Generator().manual_seed(3))
    full = sp.diags([1.0, 1.0, 1.0], [-1, 0, 1], shape=(5, 5)).tocsr()
    pattern = st.SparseMatrix.from_scipy(full).pattern
    rows, cols = torch.as_tensor(pattern.rows), torch.as_tensor(np.asarray(pattern.indices, dtype=np.int64))
    got = torch.func.vmap(lambda x: st.jacobian(tridiagonal, x, pattern=full).values)(X)
    want = torch.func.vmap(torch.func.jacfwd(tridiagonal))(X)[:, rows, cols]
    torch.testing.assert_close(got, want)
    poisoned = torch.func.vmap(lambda x: st.jacobian(tridiagonal, x, pattern=sp.eye(5, format="csr")).values)(X)
    assert torch.isnan(poisoned).all()


class _Square(torch.autograd.Function):
    """An autograd Function without setup_context or jvp: reverse mode only, no torch.func."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def test_the_check_of_a_reverse_mode_only_function_uses_autograd():
    def f(x):
        return _Square.apply(x) + torch.nn.functional.pad(x[1:], (0, 1))
    x = torch.randn(6, dtype=f64, generator=torch.Generator().manual_seed(4))
    upper = sp.diags([1.0, 1.0], [0, 1], shape=(6, 6)).tocsr()
    J = st.jacobian(f, x, pattern=upper, mode="reverse")
    torch.testing.assert_close(J.to_dense(), torch.diag(2 * x) + torch.diag(torch.ones(5, dtype=f64), 1))
    with pytest.raises(InputError, match="outside `pattern`"):
        st.jacobian(f, x, pattern=sp.eye(6, format="csr"), mode="reverse")
