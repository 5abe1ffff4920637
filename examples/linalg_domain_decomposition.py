"""Learned interface conditions for restricted additive Schwarz (numml §3.5, Eqs. 22-27).

The 2-D Poisson grid is cut into s x s square subdomains, each grown by one layer of overlap.
The preconditioner M = sum_i Rt_i^T (A_i + L_i)^-1 R_i uses sparse direct solves (SuperLU, the
factorisation reused in backward) of the subdomain matrices A_i = R_i A R_i^T plus learned
interface matrices L_i, whose entries sit only between boundary nodes of each subdomain.
The loss is max_x ||(I - M A)^k x|| over random unit test vectors (Eq. 27).

Simplification (stated): the paper produces L_i with a graph neural network; here the entries of
each L_i are learned directly, which exercises the same sparse kernels (add, SpGEMM, spsolve).
"""
from __future__ import annotations

import sys

import numpy as np
import scipy.sparse as sp
import torch

import sparsad.torch as sat
from sparsad.ops.problems import poisson_2d


def _selector(rows: np.ndarray, n: int, keep: np.ndarray | None = None) -> sp.csr_matrix:
    """R with R[k, rows[k]] = 1 (rows not in `keep` zeroed when keep is given)."""
    data = np.ones(rows.shape[0]) if keep is None else np.isin(rows, keep).astype(float)
    return sp.csr_matrix((data, (np.arange(rows.shape[0]), rows)), shape=(rows.shape[0], n))


class DomainDecomposition:
    def __init__(self, grid: int, parts: int, power: int = 2, vectors: int = 8, seed: int = 0):
        matrix = poisson_2d(grid, grid)
        n = matrix.shape[0]
        self.power = power
        self.A = sat.SparseMatrix.from_scipy(matrix)
        coords = np.stack(np.unravel_index(np.arange(n), (grid, grid)), 1)
        owner = (coords[:, 0] * parts // grid) * parts + coords[:, 1] * parts // grid
        adjacency = (matrix != 0).astype(int)
        self.subdomains = []
        for part in range(parts * parts):
            core = np.flatnonzero(owner == part)
            grown = np.flatnonzero(adjacency[core].sum(0).A.ravel() > 0)  # overlap of one layer
            R = _selector(grown, n)
            R_tilde = _selector(grown, n, keep=core)  # same rows, zero outside the core
            local = (R @ matrix @ R.T).tocsr()
            outer = ~np.isin(grown, core) | (adjacency[grown][:, np.setdiff1d(np.arange(n), grown)].sum(1).A.ravel() > 0)
            boundary = np.flatnonzero(outer)
            interface = local[boundary][:, boundary].tocoo()
            pattern = sp.csr_matrix((np.zeros(interface.nnz), (boundary[interface.row], boundary[interface.col])),
                                    shape=local.shape)
            pattern.sort_indices()
            L = sat.SparseMatrix(torch.zeros(pattern.nnz, dtype=torch.float64), pattern.indices, pattern.indptr,
                                 pattern.shape)
            self.subdomains.append({"R": sat.SparseMatrix.from_scipy(R), "Rt": sat.SparseMatrix.from_scipy(R_tilde.T.tocsr()),
                                    "A": sat.SparseMatrix.from_scipy(local), "L": L.requires_grad_()})
        gen = np.random.default_rng(seed)
        X = gen.random((n, vectors))
        self.X = torch.tensor(X / np.linalg.norm(X, axis=0))

    def parameters(self) -> list[torch.Tensor]:
        return [d["L"].values for d in self.subdomains]

    def apply_M(self, V: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(V)
        for d in self.subdomains:
            out = out + d["Rt"] @ sat.spsolve(d["A"] + d["L"], d["R"] @ V)
        return out

    def loss(self) -> torch.Tensor:
        E = self.X
        for _ in range(self.power):
            E = E - self.apply_M(self.A @ E)  # (I - M A) E
        return E.norm(dim=0).max()


def train(grid: int, parts: int, epochs: int, lr: float = 0.05):
    problem = DomainDecomposition(grid, parts)
    optimizer = torch.optim.Adam(problem.parameters(), lr=lr)
    history = []
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = problem.loss()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
    return problem, history


def main(small: bool = False) -> dict:
    grid, parts, epochs = (8, 2, 15) if small else (24, 3, 200)
    problem, history = train(grid, parts, epochs)
    print(f"domain decomposition {grid}x{grid} grid, {parts * parts} subdomains: loss (error reduction after "
          f"{problem.power} RAS steps) {history[0]:.4f} with L = 0 -> {history[-1]:.4f} learned")
    return {"history": history}


if __name__ == "__main__":
    main(small="--small" in sys.argv)
