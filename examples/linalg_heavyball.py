"""Learned heavyball iteration (numml §3.2, Eqs. 14-17) on a sparse 1-D Poisson matrix.

x_{k+1} = x_k - alpha (A x_k - b) + beta (x_k - x_{k-1}) with b = 0, run for L rounds from
random x_k; alpha and beta are learned by minimising sum_k h_L(x_k)^T A h_L(x_k).
"""
from __future__ import annotations

import sys

import torch

import sparsad.torch as sat
from sparsad.ops.problems import poisson_1d


class HeavyballProblem:
    def __init__(self, n: int, rounds: int | None = None, vectors: int = 8, dense: bool = False, seed: int = 0):
        matrix = poisson_1d(n)
        self.A = torch.tensor(matrix.toarray()) if dense else sat.SparseMatrix.from_scipy(matrix)
        self.rounds = rounds if rounds is not None else max(1, (3 * n) // 4)
        self.X = torch.randn(n, vectors, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
        self.alpha = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
        self.beta = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)

    def loss(self) -> torch.Tensor:
        previous, x = self.X, self.X
        for _ in range(self.rounds):
            previous, x = x, x - self.alpha * (self.A @ x) + self.beta * (x - previous)
        return (x * (self.A @ x)).sum() / self.X.shape[1]


def train(n: int, epochs: int, dense: bool = False, rounds: int | None = 12, lr: float = 0.01):
    problem = HeavyballProblem(n, rounds=rounds, dense=dense)
    optimizer = torch.optim.Adam([problem.alpha, problem.beta], lr=lr)
    history = []
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = problem.loss()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
    return problem, history


def main(small: bool = False) -> dict:
    n, epochs = (16, 60) if small else (16, 500)
    problem, history = train(n, epochs)
    print(f"heavyball n={n}, {problem.rounds} rounds: loss {history[0]:.3e} -> {history[-1]:.3e}; "
          f"alpha {problem.alpha.item():.3f}, beta {problem.beta.item():.3f}")
    return {"n": n, "history": history, "alpha": problem.alpha.item(), "beta": problem.beta.item()}


if __name__ == "__main__":
    main(small="--small" in sys.argv)
