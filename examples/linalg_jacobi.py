"""Learned node-wise Jacobi weights (numml §3.1, Eqs. 12-13) with a sparse 1-D Poisson matrix.

One weighted Jacobi step on A x = 0 is j(x) = x - Omega D^-1 A x; we learn the diagonal Omega
by minimising sum_k j(x_k)^T A j(x_k) over random test vectors x_k, with Adam. The same loss on a
dense A is the reference (and the dense competitor in bench/numml.py).
"""
from __future__ import annotations

import sys

import torch

import sparsad.torch as sat
from sparsad.ops.problems import poisson_1d


class JacobiProblem:
    def __init__(self, n: int, vectors: int = 16, dense: bool = False, seed: int = 0):
        matrix = poisson_1d(n)
        self.A = torch.tensor(matrix.toarray()) if dense else sat.SparseMatrix.from_scipy(matrix)
        self.inv_diag = torch.tensor(1.0 / matrix.diagonal())
        self.X = torch.randn(n, vectors, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
        self.omega = torch.full((n,), 0.5, dtype=torch.float64, requires_grad=True)

    def loss(self) -> torch.Tensor:
        J = self.X - (self.omega * self.inv_diag)[:, None] * (self.A @ self.X)
        return (J * (self.A @ J)).sum() / self.X.shape[1]


def train(n: int, epochs: int, dense: bool = False, lr: float = 0.01) -> tuple[JacobiProblem, list[float]]:
    problem = JacobiProblem(n, dense=dense)
    optimizer = torch.optim.Adam([problem.omega], lr=lr)
    history = []
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = problem.loss()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
    return problem, history


def main(small: bool = False) -> dict:
    n, epochs = (16, 100) if small else (16, 1000)
    problem, history = train(n, epochs)
    omega = problem.omega.detach()
    print(f"Jacobi n={n}: loss {history[0]:.4f} -> {history[-1]:.4f}; weights at the ends "
          f"{omega[0]:.3f}, {omega[-1]:.3f}, in the middle {omega[n // 2]:.3f}")
    return {"n": n, "history": history, "omega": omega}


if __name__ == "__main__":
    main(small="--small" in sys.argv)
