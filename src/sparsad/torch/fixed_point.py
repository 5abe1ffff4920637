"""Fixed-point iteration x = f(x, *params) with implicit gradients (numml parity).

The forward iterates without recording a graph; the backward solves the adjoint fixed point
u = g + (df/dx)^T u by the same iteration (VJPs of f at the solution), then returns
(df/dparams)^T u. Exact at convergence, whatever the number of forward iterations, and memory
does not grow with them. Needs f to be a contraction near the solution.

Example:
    >>> import torch
    >>> a = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    >>> x = fixed_point(lambda x, a: a * x + 1.0, torch.zeros((), dtype=torch.float64), a)
    >>> round(float(x), 6), round(float(torch.autograd.grad(x, a)[0]), 6)  # x = 1/(1-a)
    (2.0, 4.0)
"""
from __future__ import annotations

import warnings
from typing import Callable

import torch

from sparsad.errors import InputError, UnsupportedError
from sparsad.ops.solve import ConvergenceWarning


def _iterate(step: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, tol: float, maxiter: int, what: str):
    for _ in range(maxiter):
        new = step(x)
        if not isinstance(new, torch.Tensor) or new.shape != x.shape:
            raise InputError(f"f must return a tensor of x's shape {tuple(x.shape)}, got "
                             f"{tuple(new.shape) if isinstance(new, torch.Tensor) else type(new).__name__}")
        gap = float((new - x).abs().max()) if new.numel() else 0.0
        x = new
        if gap <= tol * max(1.0, float(x.abs().max()) if x.numel() else 0.0):
            return x
    warnings.warn(f"fixed_point: the {what} did not converge in {maxiter} iterations (last change {gap:.2e}); "
                  "raise maxiter or check that f is a contraction", ConvergenceWarning, stacklevel=4)
    return x


class _FixedPoint(torch.autograd.Function):
    @staticmethod
    def forward(f, tol, maxiter, x0, *params):
        with torch.no_grad():
            return _iterate(lambda x: f(x, *params), x0.detach(), tol, maxiter, "forward iteration")

    @staticmethod
    def setup_context(ctx, inputs, output):
        f, tol, maxiter, _x0, *params = inputs
        ctx.f, ctx.tol, ctx.maxiter = f, tol, maxiter
        ctx.save_for_backward(output, *params)

    @staticmethod
    def backward(ctx, g):
        if torch.is_grad_enabled():
            raise UnsupportedError("second derivatives through fixed_point are not supported (create_graph=True)")
        x, *params = ctx.saved_tensors
        with torch.enable_grad():
            xr = x.detach().requires_grad_(True)
            detached = [p.detach().requires_grad_(p.requires_grad) for p in params]
            y = ctx.f(xr, *detached)

            def adjoint_step(u):
                (jtu,) = torch.autograd.grad(y, xr, u, retain_graph=True, allow_unused=True)
                return g + (0 if jtu is None else jtu)

            u = _iterate(adjoint_step, g, ctx.tol, ctx.maxiter, "adjoint (gradient) iteration")
            wanted = [p for p in detached if p.requires_grad]
            grads = iter(torch.autograd.grad(y, wanted, u, allow_unused=True) if wanted else ())
        return (None, None, None, None) + tuple(next(grads) if p.requires_grad else None for p in detached)


def fixed_point(f: Callable[..., torch.Tensor], x0: torch.Tensor, *params: torch.Tensor, tol: float = 1e-12,
                maxiter: int = 1000) -> torch.Tensor:
    """The x with x = f(x, *params), from x0; differentiable in params (implicitly, first order).

    >>> import torch, sparsad.torch as st
    >>> c = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    >>> x = st.fixed_point(lambda z, c: 0.5 * z + c, torch.zeros(2, dtype=torch.float64), c)
    >>> [round(v, 9) for v in x.detach().tolist()]  # x = 2 c
    [2.0, 4.0]
    >>> x.sum().backward(); [round(v, 9) for v in c.grad.tolist()]
    [2.0, 2.0]
    """
    if not callable(f):
        raise InputError(f"f must be callable, got {type(f).__name__}")
    if not isinstance(x0, torch.Tensor):
        raise InputError(f"x0 must be a torch.Tensor, got {type(x0).__name__}")
    for index, p in enumerate(params):
        if not isinstance(p, torch.Tensor):
            raise InputError(f"params[{index}] must be a torch.Tensor (wrap constants in the closure), "
                             f"got {type(p).__name__}")
    return _FixedPoint.apply(f, float(tol), int(maxiter), x0, *params)
