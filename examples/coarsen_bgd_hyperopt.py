"""Learning-rate search by gradient descent on BGDHyperOpt (paper Fig. 6) with coarsened derivatives.

The inner training loop (a ``while`` with a data-dependent ``break``) gets a φ-calculus closed
form in its recorded trip count, so d(err)/dr costs a handful of sums instead of a backward
pass through every training step.  Run: ``python examples/coarsen_bgd_hyperopt.py``.
"""
from __future__ import annotations

import torch

import sparsad.coarsen as coarsen
from sparsad.coarsen.apps import bgd_hyperopt, make_bgd


def main(small: bool = False) -> dict:
    (x, y, r), (T, tol) = make_bgd(1, size=50 if small else None)
    r = torch.tensor(0.05, dtype=torch.float64)
    if not small:
        coarsen.explain(bgd_hyperopt, x, y, r, T, tol)
    d_err = coarsen.grad(bgd_hyperopt, argnums=2)
    history = []
    for _ in range(5 if small else 25):
        g = d_err(x, y, r, T, tol)
        r = torch.clamp(r - 0.02 * torch.sign(g), 1e-4, 0.9)  # sign descent: d(err)/dr spans decades
        history.append((float(r), float(bgd_hyperopt(x, y, r, T, tol))))
    for lr, err in history[-3:]:
        print(f"learning rate {lr:.4f}  training error {err:.6f}")
    return {"history": history}


if __name__ == "__main__":
    main()
