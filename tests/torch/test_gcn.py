"""GCN normalisation and layer against dense formulas; Planetoid loader; the GCN example at small size."""
from __future__ import annotations

import importlib.util
import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import sparsad.torch as sat
from sparsad.errors import FormatError
from sparsad.torch import SparseMatrix
from sparsad.torch.nn import GCNConv

ROOT = Path(__file__).resolve().parents[2]


def dense_gcn_norm(A: torch.Tensor) -> torch.Tensor:
    tilde = A + torch.eye(A.shape[0], dtype=A.dtype)
    d = tilde.sum(1).rsqrt()
    return d[:, None] * tilde * d[None, :]


def test_gcn_norm_matches_dense_and_gradients():
    adjacency = sp.random(7, 7, density=0.3, random_state=2)
    adjacency = ((adjacency + adjacency.T) > 0).astype(float).tocsr()
    weights = torch.rand(adjacency.nnz, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) + 0.5
    A = SparseMatrix(weights.clone().requires_grad_(True), adjacency.indices, adjacency.indptr, adjacency.shape)
    norm = sat.gcn_norm(A)
    dense = A.to_dense().detach().requires_grad_(True)
    ref = dense_gcn_norm(dense)
    torch.testing.assert_close(norm.to_dense(), ref)
    V = torch.randn(norm.nnz, dtype=torch.float64)
    (ours,) = torch.autograd.grad(norm.values, A.values, V)
    (theirs,) = torch.autograd.grad(ref, dense, SparseMatrix._wrap(norm.pattern, V).to_dense())
    torch.testing.assert_close(ours, theirs[torch.as_tensor(A.pattern.rows), torch.as_tensor(A.pattern.indices.astype(np.int64))])
    assert sat.gradcheck(lambda A: sat.gcn_norm(A).values, [A])


def test_gcn_layer_matches_dense():
    torch.manual_seed(0)
    adjacency = sat.gcn_norm(SparseMatrix.from_scipy(sp.random(6, 6, density=0.4, random_state=1), dtype=torch.float32))
    features = torch.randn(6, 5)
    layer = GCNConv(5, 3)
    out = layer(adjacency, features)
    torch.testing.assert_close(out, adjacency.to_dense() @ features @ layer.weight + layer.bias)
    sparse_features = SparseMatrix.from_dense(features * (features > 0))
    torch.testing.assert_close(layer(adjacency, sparse_features),
                               adjacency.to_dense() @ sparse_features.to_dense() @ layer.weight + layer.bias)
    out.sum().backward()
    assert layer.weight.grad is not None and layer.bias.grad is not None


def test_planetoid_loader_and_allow_list(data_dir, tmp_path):
    from sparsad.torch.planetoid import load_pickle, load_planetoid

    if not (data_dir / "planetoid" / "ind.cora.graph").is_file():
        pytest.skip("Planetoid files absent")
    cora = load_planetoid("cora")
    assert cora.adjacency.shape == (2708, 2708) and cora.adjacency.nnz == 10556
    assert (cora.adjacency != cora.adjacency.T).nnz == 0
    assert cora.features.shape == (2708, 1433) and cora.num_classes == 7
    assert (len(cora.train), len(cora.val), len(cora.test)) == (140, 500, 1000)
    assert (cora.labels[cora.test] >= 0).all()
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps(print))
    with pytest.raises(FormatError, match="allow-list"):
        load_pickle(evil)


def test_gcn_example_small(data_dir):
    if not (data_dir / "planetoid" / "ind.cora.graph").is_file():
        pytest.skip("Planetoid files absent")
    spec = importlib.util.spec_from_file_location("gcn_planetoid", ROOT / "examples" / "gcn_planetoid.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    try:
        (summary,) = module.main(small=True)
    finally:
        torch.set_num_threads(threads)
    assert summary["dataset"] == "cora" and summary["test_mean"] > 0.6  # chance is ~0.3


def test_demo_trains():
    from sparsad.torch import demo

    result = demo.main(n=12, epochs=40)
    assert result["gradcheck"] and result["history"][-1] < result["history"][0]
