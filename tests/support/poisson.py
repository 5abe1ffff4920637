"""The 2-D Poisson residual with a cubic term, as a user writes it in PyTorch (pad and slices),
and its Jacobian's pattern: the stencil test case of the colouring Jacobian tests."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def poisson_residual(side: int):
    import torch

    def residual(u):
        grid = u.reshape(side, side)
        padded = torch.nn.functional.pad(grid, (1, 1, 1, 1))
        lap = 4 * grid - padded[:-2, 1:-1] - padded[2:, 1:-1] - padded[1:-1, :-2] - padded[1:-1, 2:]
        return (lap + 0.1 * grid ** 3).reshape(-1)
    return residual


def poisson_pattern(side: int) -> sp.csr_matrix:
    one = sp.diags([np.ones(side - 1), np.ones(side), np.ones(side - 1)], [-1, 0, 1])
    return sp.kronsum(one, one).tocsr()
