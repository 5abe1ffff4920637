"""The numml applications (examples/linalg_*.py) at small size: they train, and their sparse
losses and gradients equal the same computation on dense matrices."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["linalg_jacobi", "linalg_heavyball", "linalg_pcg", "linalg_domain_decomposition"])
def test_example_trains(name):
    result = load(name).main(small=True)
    history = result["history"]
    assert history[-1] < 0.9 * history[0]


def _params(problem):
    return [p for p in (getattr(problem, k, None) for k in ("omega", "alpha", "beta")) if p is not None]


@pytest.mark.parametrize("name, cls, kwargs", [
    ("linalg_jacobi", "JacobiProblem", {"n": 12}),
    ("linalg_heavyball", "HeavyballProblem", {"n": 12, "rounds": 5}),
])
def test_sparse_equals_dense(name, cls, kwargs):
    module = load(name)
    sparse, dense = getattr(module, cls)(dense=False, **kwargs), getattr(module, cls)(dense=True, **kwargs)
    ls, ld = sparse.loss(), dense.loss()
    torch.testing.assert_close(ls, ld)
    for gs, gd in zip(torch.autograd.grad(ls, _params(sparse)), torch.autograd.grad(ld, _params(dense))):
        torch.testing.assert_close(gs, gd)


def test_pcg_sparse_equals_dense():
    module = load("linalg_pcg")
    sparse, dense = module.PCGProblem(4, dense=False), module.PCGProblem(4, dense=True)
    ls, ld = sparse.loss(), dense.loss()
    torch.testing.assert_close(ls, ld)
    torch.testing.assert_close(torch.autograd.grad(ls, sparse.L.values)[0], torch.autograd.grad(ld, dense.L.values)[0])


def test_domain_decomposition_preconditioner_matches_dense():
    module = load("linalg_domain_decomposition")
    problem = module.DomainDecomposition(6, 2, vectors=3)
    gen = torch.Generator().manual_seed(0)
    for d in problem.subdomains:
        d["L"].values.data = 0.1 * torch.randn(d["L"].nnz, dtype=torch.float64, generator=gen)
    M = sum(d["Rt"].to_dense() @ torch.linalg.inv((d["A"].to_dense() + d["L"].to_dense()).detach()) @ d["R"].to_dense()
            for d in problem.subdomains)
    A = problem.A.to_dense()
    torch.testing.assert_close(problem.apply_M(problem.X), M @ problem.X)
    T = torch.eye(A.shape[0], dtype=torch.float64) - M @ A
    torch.testing.assert_close(problem.loss(), (T @ T @ problem.X).norm(dim=0).max())
    (grad,) = torch.autograd.grad(problem.loss(), problem.subdomains[0]["L"].values)
    assert grad.shape == (problem.subdomains[0]["L"].nnz,) and grad.abs().sum() > 0
