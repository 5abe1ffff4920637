"""Helpers for the PyTorch bridge tests: random SparseMatrix inputs and dense masked references."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from sparsad.torch import SparseMatrix


@pytest.fixture
def random_sparse():
    def make(m: int, n: int, density: float = 0.4, seed: int = 0, spd: bool = False) -> SparseMatrix:
        matrix = sp.random(m, n, density=density, format="csr", random_state=seed)
        matrix.data = np.random.default_rng(seed).standard_normal(matrix.nnz)
        if spd:
            matrix = (matrix @ matrix.T + m * sp.eye(m)).tocsr()
        return SparseMatrix.from_scipy(matrix, requires_grad=True)

    return make


@pytest.fixture
def dense_reference():
    """(dense leaf, masked gradient getter): run f on A's dense copy, read its grad on A's pattern."""

    def make(A: SparseMatrix):
        dense = A.to_dense().detach().clone().requires_grad_(True)
        rows = torch.as_tensor(A.pattern.rows)
        cols = torch.as_tensor(np.asarray(A.pattern.indices, dtype=np.int64))

        def masked(grad: torch.Tensor) -> torch.Tensor:
            return grad[rows, cols]

        return dense, masked

    return make
