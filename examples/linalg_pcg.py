"""Learned PCG preconditioner M = L L^T with lower-bidiagonal L (numml §3.3, Eqs. 18-20).

A is the 2-D Poisson matrix; M = L L^T is formed by sparse @ sparse (gradients to L's values
through SpGEMM), applied as z = M r inside N_it preconditioned CG steps; the loss is the
gamma-weighted sum of relative residual norms (Eq. 20).
"""
from __future__ import annotations

import sys

import numpy as np
import torch

import sparsad.torch as sat
from sparsad.ops.problems import poisson_2d


def bidiagonal(n: int, diagonal: np.ndarray, sub: np.ndarray) -> sat.SparseMatrix:
    """Lower bidiagonal SparseMatrix; the sub-diagonal stays in the pattern even where it is zero."""
    indptr = np.concatenate([[0], np.cumsum(np.r_[1, np.full(n - 1, 2)])])
    indices = np.concatenate([[0], np.stack([np.arange(n - 1), np.arange(1, n)], 1).ravel()])
    values = np.concatenate([[diagonal[0]], np.stack([sub, diagonal[1:]], 1).ravel()])
    return sat.SparseMatrix(torch.tensor(values), indices, indptr, (n, n))


class PCGProblem:
    def __init__(self, grid: int, iterations: int = 4, gamma: float = 0.6, rhs: int = 4, dense: bool = False,
                 seed: int = 0):
        matrix = poisson_2d(grid, grid)
        n = matrix.shape[0]
        self.n, self.iterations, self.dense = n, iterations, dense
        weights = gamma ** np.arange(iterations - 1, -1, -1.0)
        self.weights = torch.tensor(weights / weights.sum())
        self.A = torch.tensor(matrix.toarray()) if dense else sat.SparseMatrix.from_scipy(matrix)
        gen = np.random.default_rng(seed)
        self.L = bidiagonal(n, 1.0 / np.sqrt(matrix.diagonal()), 0.01 * gen.standard_normal(n - 1))
        self.L.requires_grad_()
        self.B = torch.tensor(gen.standard_normal((n, rhs)))

    def preconditioner(self):
        if self.dense:
            L = self.L.to_dense()
            return L @ L.T
        return self.L @ self.L.T  # SpGEMM

    def residual_history(self) -> torch.Tensor:
        M, A, B = self.preconditioner(), self.A, self.B
        x = torch.zeros_like(B)
        r = B
        z = M @ r
        p = z
        rz = (r * z).sum(0)
        norms = []
        for _ in range(self.iterations):
            Ap = A @ p
            alpha = rz / (p * Ap).sum(0)
            x = x + alpha * p
            r = r - alpha * Ap
            norms.append(r.norm(dim=0) / B.norm(dim=0))
            z = M @ r
            rz_new = (r * z).sum(0)
            p = z + (rz_new / rz) * p
            rz = rz_new
        return torch.stack(norms)  # (iterations, rhs)

    def loss(self) -> torch.Tensor:
        return (self.weights[:, None] * self.residual_history()).sum(0).mean()


def train(grid: int, epochs: int, dense: bool = False, lr: float = 0.01):
    problem = PCGProblem(grid, dense=dense)
    optimizer = torch.optim.Adam([problem.L.values], lr=lr)
    history = []
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = problem.loss()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
    return problem, history


def main(small: bool = False) -> dict:
    grid, epochs = (8, 40) if small else (8, 500)
    problem, history = train(grid, epochs)
    with torch.no_grad():
        final = problem.residual_history()[-1].mean().item()
    print(f"PCG {grid}x{grid} grid (N={problem.n}): loss {history[0]:.4f} -> {history[-1]:.4f}; "
          f"relative residual after {problem.iterations} iterations {final:.3e}")
    return {"n": problem.n, "history": history, "final_residual": final}


if __name__ == "__main__":
    main(small="--small" in sys.argv)
