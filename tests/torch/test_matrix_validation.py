"""SparseMatrix.from_torch / from_scipy validate before touching, and never misroute gradients."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from sparsad.errors import FormatError
from sparsad.torch import SparseMatrix


def test_from_torch_refuses_negative_coo_index_before_coalesce():
    tensor = torch.sparse_coo_tensor(torch.tensor([[0, -1], [0, 1]]), torch.tensor([1.0, 2.0]), (3, 3))
    with pytest.raises(FormatError, match="negative index -1"):
        SparseMatrix.from_torch(tensor)


def test_from_torch_refuses_out_of_range_coo_index():
    tensor = torch.sparse_coo_tensor(torch.tensor([[0, 3], [0, 1]]), torch.tensor([1.0, 2.0]), (3, 3))
    with pytest.raises(FormatError, match="index 3 .* out of range"):
        SparseMatrix.from_torch(tensor)


def test_from_scipy_refuses_non_monotone_indptr():
    matrix = sp.csr_matrix((np.ones(3), np.array([0, 1, 2]), np.array([0, 3, 1, 3])), shape=(3, 3))
    with pytest.raises(FormatError, match="indptr must be non-decreasing"):
        SparseMatrix.from_scipy(matrix)


def _unsorted_csr(values):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.sparse_csr_tensor(torch.tensor([0, 2, 3]), torch.tensor([2, 0, 1]), values, (2, 3))


def test_unsorted_csr_is_sorted_without_grad():
    values = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    A = SparseMatrix.from_torch(_unsorted_csr(values))
    np.testing.assert_array_equal(A.to_dense().numpy(), [[2.0, 0.0, 1.0], [0.0, 3.0, 0.0]])


def test_unsorted_csr_with_grad_is_refused_not_misrouted():
    values = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    with pytest.raises(FormatError, match="not sorted.*require grad"):
        SparseMatrix.from_torch(_unsorted_csr(values))


def test_sorted_csr_gradients_reach_the_right_entries():
    values = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tensor = torch.sparse_csr_tensor(torch.tensor([0, 2, 3]), torch.tensor([0, 2, 1]), values, (2, 3))
    A = SparseMatrix.from_torch(tensor)
    x = torch.tensor([1.0, 10.0, 100.0], dtype=torch.float64)
    weights = torch.tensor([1.0, 1000.0], dtype=torch.float64)
    ((A @ x) * weights).sum().backward()
    # d/d value of entry (r, c) = weights[r] * x[c]
    np.testing.assert_allclose(values.grad.numpy(), [1.0, 100.0, 10000.0])
