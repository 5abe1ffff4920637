"""Neural-network layers on SparseMatrix: the GCN convolution of Kipf & Welling."""
from __future__ import annotations

import math

import torch

from sparsad.torch.linalg import spmm
from sparsad.torch.matrix import SparseMatrix


class GCNConv(torch.nn.Module):
    """X' = A_hat (X W) + b, with A_hat typically `gcn_norm(A)`; X dense or a SparseMatrix."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(in_features, out_features))
        self.bias = torch.nn.Parameter(torch.empty(out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = math.sqrt(6.0 / (self.weight.shape[0] + self.weight.shape[1]))  # Glorot, as in the paper
        torch.nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def forward(self, adjacency: SparseMatrix, features: torch.Tensor | SparseMatrix) -> torch.Tensor:
        # (spmm, not @: under torch.compile dynamo sends `SparseMatrix @ tensor` to torch's matmul)
        support = spmm(features, self.weight) if isinstance(features, SparseMatrix) else features @ self.weight
        out = spmm(adjacency, support)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.weight.shape[0]}, out_features={self.weight.shape[1]}, bias={self.bias is not None}"
