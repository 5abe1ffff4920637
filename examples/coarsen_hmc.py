"""Hamiltonian Monte Carlo for Bayesian logistic regression with a coarsened grad U (paper §7, HMC).

``sparsad.coarsen.grad`` turns the potential U(β) into generated gradient code that never
builds an autograd graph and evaluates log(1 + e^z) as a stable softplus (§6).
Run: ``python examples/coarsen_hmc.py``.
"""
from __future__ import annotations

import torch

import sparsad.coarsen as coarsen
from sparsad.coarsen.apps import hmc_potential, make_hmc


def hmc(beta, Xt, y, samples: int, leapfrog: int = 10, eps: float = 0.02, seed: int = 0):
    grad_u = coarsen.grad(hmc_potential, argnums=0)
    gen = torch.Generator().manual_seed(seed)
    chain, accepted = [], 0
    for _ in range(samples):
        p = torch.randn(beta.shape, dtype=beta.dtype, generator=gen)
        b, q = beta.clone(), p.clone()
        q = q - 0.5 * eps * grad_u(b, Xt, y)
        for step in range(leapfrog):
            b = b + eps * q
            if step != leapfrog - 1:
                q = q - eps * grad_u(b, Xt, y)
        q = q - 0.5 * eps * grad_u(b, Xt, y)
        current = hmc_potential(beta, Xt, y) + 0.5 * (p * p).sum()
        proposed = hmc_potential(b, Xt, y) + 0.5 * (q * q).sum()
        if torch.rand((), generator=gen) < torch.exp(current - proposed):
            beta, accepted = b, accepted + 1
        chain.append(beta)
    return torch.stack(chain), accepted / samples


def main(small: bool = False) -> dict:
    (beta, Xt, y), _ = make_hmc(2, size=200 if small else None)
    chain, rate = hmc(beta, Xt, y, samples=5 if small else 300)
    mean = chain[len(chain) // 2:].mean(dim=0)
    print(f"acceptance rate {rate:.2f}, posterior mean of beta {mean.tolist()}")
    return {"chain": chain, "acceptance": rate}


if __name__ == "__main__":
    main()
