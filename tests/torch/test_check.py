"""The public sparse gradcheck: passes right gradients, catches wrong ones, names the input."""
from __future__ import annotations

import pytest
import scipy.sparse as sp
import torch
from torch.autograd.gradcheck import GradcheckError

import sparsad.torch as sat
from sparsad.errors import DTypeError, InputError
from sparsad.torch import SparseMatrix


class _WrongScale(torch.autograd.Function):
    """2 * values with a deliberately wrong backward (3 * g)."""

    @staticmethod
    def forward(ctx, values):
        return 2 * values

    @staticmethod
    def backward(ctx, g):
        return 3 * g


def test_passes_and_catches_wrong_masked_gradient():
    A = SparseMatrix.from_scipy(sp.random(4, 4, density=0.5, format="csr", random_state=0), requires_grad=True)
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert sat.gradcheck(lambda A, x: A @ x, [A, x])

    def wrong(A, x):
        return SparseMatrix._wrap(A.pattern, _WrongScale.apply(A.values)) @ x

    assert sat.gradcheck(wrong, [A, x], raise_exception=False) is False
    with pytest.raises(GradcheckError, match="SparseMatrix \\(4, 4\\), values on its"):
        sat.gradcheck(wrong, [A, x])


def test_only_pattern_entries_are_perturbed():
    A = SparseMatrix.from_scipy(sp.eye(3, format="csr"), requires_grad=True)
    seen = []

    def record(A):
        seen.append(A.values.shape)
        return A.to_dense()

    assert sat.gradcheck(record, [A])
    assert all(shape == (3,) for shape in seen)


def test_input_errors():
    A = SparseMatrix.from_scipy(sp.eye(3, format="csr"))
    with pytest.raises(InputError, match="no input requires grad"):
        sat.gradcheck(lambda A: A.values, [A])
    with pytest.raises(DTypeError, match="float64"):
        sat.gradcheck(lambda A: A.values, [A.float().requires_grad_()])
