"""torch.func support shared by the solver Functions: a vmap rule that maps the Function over
the batch one slice at a time (the kernels behind them take one right-hand side set per call)."""
from __future__ import annotations

from typing import Any

import torch


def loop_vmap(function: type[torch.autograd.Function], info: Any, in_dims: tuple, *args: Any):
    """Apply `function` to each batch slice of the batched tensor arguments and stack the results
    (output batch dimension 0), so that `torch.vmap` works over any Function input."""
    results = []
    for index in range(info.batch_size):
        sliced = [arg.select(dim, index) if dim is not None else arg for arg, dim in zip(args, in_dims)]
        results.append(function.apply(*sliced))
    if isinstance(results[0], tuple):
        return tuple(torch.stack(parts) for parts in zip(*results)), tuple(0 for _ in results[0])
    return torch.stack(results), 0
