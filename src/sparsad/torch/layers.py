"""Graph convolution layers over a SparseMatrix adjacency: GCNConv with built-in normalisation
and TAGConv (numml parity). The adjacency's values are differentiable like any other input.

Example:
    >>> import torch, scipy.sparse as sp
    >>> from sparsad.torch import SparseMatrix
    >>> A = SparseMatrix.from_scipy(sp.random(5, 5, density=0.4, random_state=0), dtype=torch.float32)
    >>> TAGConv(3, 2, K=2)(A, torch.randn(5, 3)).shape
    torch.Size([5, 2])
"""
from __future__ import annotations

import math

import torch

from sparsad.errors import InputError
from sparsad.torch.linalg import gcn_norm, spmm
from sparsad.torch.matrix import SparseMatrix, as_sparse_matrix


def _glorot(weight: torch.Tensor) -> None:
    bound = math.sqrt(6.0 / (weight.shape[-2] + weight.shape[-1]))
    torch.nn.init.uniform_(weight, -bound, bound)


class GCNConv(torch.nn.Module):
    """X' = Â X W + b with Â = D^-1/2 (A + I) D^-1/2 computed from A when normalize=True
    (Kipf & Welling), or Â = A as given when normalize=False."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, normalize: bool = True,
                 add_self_loops: bool = True):
        super().__init__()
        self.normalize, self.add_self_loops = normalize, add_self_loops
        self.weight = torch.nn.Parameter(torch.empty(in_features, out_features))
        self.bias = torch.nn.Parameter(torch.zeros(out_features)) if bias else None
        _glorot(self.weight)

    def forward(self, adjacency: SparseMatrix, features: torch.Tensor | SparseMatrix) -> torch.Tensor:
        adjacency = as_sparse_matrix(adjacency, "adjacency")
        if self.normalize:
            adjacency = gcn_norm(adjacency, add_self_loops=self.add_self_loops)
        # (spmm, not @: under torch.compile dynamo sends `SparseMatrix @ tensor` to torch's matmul)
        support = spmm(features, self.weight) if isinstance(features, SparseMatrix) else features @ self.weight
        out = spmm(adjacency, support)
        return out if self.bias is None else out + self.bias


class TAGConv(torch.nn.Module):
    """Topology adaptive graph convolution (Du et al.): X' = sum_{k=0..K} Â^k X W_k + b, with Â
    the GCN-normalised adjacency without self loops when normalize=True (as in PyG's TAGConv).

    >>> import torch, sparsad.torch as st
    >>> ring = st.SparseMatrix.from_dense(torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 1.0], [1.0, 1.0, 0.0]]))
    >>> layer = st.TAGConv(4, 2, K=2)
    >>> layer(ring, torch.randn(3, 4)).shape
    torch.Size([3, 2])
    """

    def __init__(self, in_features: int, out_features: int, K: int = 3, bias: bool = True, normalize: bool = True):
        super().__init__()
        if not isinstance(K, int) or K < 0:
            raise InputError(f"K must be a non-negative int, got {K!r}")
        self.K, self.normalize = K, normalize
        self.weight = torch.nn.Parameter(torch.empty(K + 1, in_features, out_features))
        self.bias = torch.nn.Parameter(torch.zeros(out_features)) if bias else None
        for k in range(K + 1):
            _glorot(self.weight.data[k])

    def forward(self, adjacency: SparseMatrix, features: torch.Tensor) -> torch.Tensor:
        adjacency = as_sparse_matrix(adjacency, "adjacency")
        if self.normalize:
            adjacency = gcn_norm(adjacency, add_self_loops=False)
        hop = features
        out = hop @ self.weight[0]
        for k in range(1, self.K + 1):
            hop = spmm(adjacency, hop)
            out = out + hop @ self.weight[k]
        return out if self.bias is None else out + self.bias
