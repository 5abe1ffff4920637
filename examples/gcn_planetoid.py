"""Two-layer GCN (Kipf & Welling 2017) on Cora and CiteSeer with sparsad's SparseMatrix.

Standard Planetoid split, row-normalised sparse features, A_hat = D^-1/2 (A + I) D^-1/2,
hidden 16, dropout 0.5, Adam (lr 0.01, weight decay 5e-4 on the first layer), 200 epochs;
reports the test accuracy of the epoch with the best validation accuracy, mean over seeds.

    python examples/gcn_planetoid.py            # Cora and CiteSeer, 10 seeds each
"""
from __future__ import annotations

import sys
import time

import numpy as np
import scipy.sparse as sp
import torch

import sparsad.torch as sat
from sparsad.torch.nn import GCNConv
from sparsad.torch.planetoid import Planetoid, load_planetoid


class GCN(torch.nn.Module):
    def __init__(self, features: int, hidden: int, classes: int, dropout: float = 0.5):
        super().__init__()
        self.conv1 = GCNConv(features, hidden)
        self.conv2 = GCNConv(hidden, classes)
        self.dropout = dropout

    def forward(self, adjacency: sat.SparseMatrix, features: sat.SparseMatrix) -> torch.Tensor:
        # dropout on the sparse input acts on its stored values only
        dropped = features.with_values(torch.nn.functional.dropout(features.values, self.dropout, self.training))
        hidden = torch.relu(self.conv1(adjacency, dropped))
        hidden = torch.nn.functional.dropout(hidden, self.dropout, self.training)
        return self.conv2(adjacency, hidden)


def prepare(data: Planetoid, dtype: torch.dtype = torch.float32):
    rowsum = np.asarray(data.features.sum(1)).ravel()
    scale = np.divide(1.0, rowsum, out=np.zeros_like(rowsum), where=rowsum > 0)
    features = sat.SparseMatrix.from_scipy(sp.diags(scale) @ data.features, dtype=dtype)
    adjacency = sat.gcn_norm(sat.SparseMatrix.from_scipy(data.adjacency, dtype=dtype))
    return adjacency, features, torch.as_tensor(data.labels)


def train_one(data: Planetoid, seed: int, epochs: int = 200, prepared=None) -> dict:
    torch.manual_seed(seed)
    adjacency, features, labels = prepared or prepare(data)
    model = GCN(features.shape[1], 16, data.num_classes)
    optimizer = torch.optim.Adam([
        {"params": model.conv1.parameters(), "weight_decay": 5e-4},
        {"params": model.conv2.parameters(), "weight_decay": 0.0},
    ], lr=0.01)
    train, val, test = (torch.as_tensor(i) for i in (data.train, data.val, data.test))
    best_val, best_test = -1.0, 0.0
    start = time.perf_counter()
    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(adjacency, features)[train], labels[train])
        loss.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            pred = model(adjacency, features).argmax(1)
        val_acc = (pred[val] == labels[val]).double().mean().item()
        if val_acc >= best_val:
            best_val, best_test = val_acc, (pred[test] == labels[test]).double().mean().item()
    return {"val": best_val, "test": best_test, "seconds_per_epoch": (time.perf_counter() - start) / epochs}


def run(name: str, seeds: int, epochs: int) -> dict:
    data = load_planetoid(name)
    prepared = prepare(data)
    results = [train_one(data, seed, epochs, prepared) for seed in range(seeds)]
    tests = np.array([r["test"] for r in results])
    summary = {"dataset": name, "seeds": seeds, "epochs": epochs, "test_mean": float(tests.mean()),
               "test_std": float(tests.std()),
               "seconds_per_epoch": float(np.mean([r["seconds_per_epoch"] for r in results]))}
    print(f"{name:9s} test accuracy {summary['test_mean']:.3f} +- {summary['test_std']:.3f} over {seeds} seeds "
          f"({epochs} epochs, {1e3 * summary['seconds_per_epoch']:.1f} ms/epoch incl. evaluation)")
    return summary


def main(small: bool = False) -> list[dict]:
    # Graphs this small run fastest on one thread (and the shared CI cores are oversubscribed).
    torch.set_num_threads(1)
    if small:
        return [run("cora", seeds=1, epochs=60)]
    return [run("cora", seeds=10, epochs=200), run("citeseer", seeds=10, epochs=200)]


if __name__ == "__main__":
    main(small="--small" in sys.argv)
