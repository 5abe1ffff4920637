"""Splicing the generated adjoint into PyTorch autograd as a ``torch.autograd.Function`` (Fig. 8).

The primal runs as the user wrote it (with recording, without building an autograd graph); the
outputs are attached to the inputs through one ``autograd.Function`` whose backward is the
generated adjoint.  The first backward of every compiled adjoint is checked against plain
autograd; a disagreement switches the signature to plain autograd with a warning, so a wrong
derivative is never returned.
"""
from __future__ import annotations

import numpy as np
import torch

from sparsad.coarsen.budget import Deferred
from sparsad.coarsen.frontend import CoarsenUnsupported
from sparsad.coarsen.plan import Compiled, Plan, param_values


_NUMPY_DTYPES = {torch.float64: np.float64, torch.float32: np.float32}


def fit_gradient(value, like: torch.Tensor) -> torch.Tensor:
    """A generated gradient as a tensor of ``like``'s shape, dtype and device."""
    if type(value) is torch.Tensor and value.shape == like.shape and value.dtype == like.dtype:
        return value
    if not isinstance(value, torch.Tensor):
        if like.dim() == 0:
            np_dtype = _NUMPY_DTYPES.get(like.dtype)
            if np_dtype is not None and like.is_cpu:  # ~2x cheaper than torch.tensor
                return torch.from_numpy(np.array(value, dtype=np_dtype))
            return torch.tensor(float(value), dtype=like.dtype, device=like.device)
        return torch.full(like.shape, float(value), dtype=like.dtype, device=like.device)
    if value.shape != like.shape:
        value = value.expand(like.shape) if value.dim() <= like.dim() else value.reshape(like.shape)
    return value.to(like.dtype)


class _Splice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, adjoint, params, outputs, *inputs):
        (ctx.adjoint, ctx.rescue), ctx.params = adjoint, params
        ctx.save_for_backward(*inputs)
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *cotangents):
        if torch.is_grad_enabled():
            raise CoarsenUnsupported("double backward through a coarsened function (create_graph=True) "
                                     "is not supported; call the function without sparsad.coarsen.symbolic")
        inputs = ctx.saved_tensors
        if any(g is None for g in cotangents):
            cotangents = [torch.zeros((), dtype=inputs[0].dtype) if g is None else g for g in cotangents]
        try:
            grads = ctx.adjoint(*inputs, *ctx.params, *cotangents)
        except Exception as why:  # the generated adjoint failed: autograd through the user's function
            grads = ctx.rescue(why, inputs, cotangents)
        needs = ctx.needs_input_grad
        return (None, None, None, *[None if g is None or not needs[3 + i] else fit_gradient(g, inputs[i])
                                    for i, g in enumerate(grads)])


def tensor_inputs(plan: Plan, args: tuple) -> list[torch.Tensor]:
    return [args[node.index] for node in plan.graph.inputs]


def check_against_autograd(plan: Plan, args: tuple, compiled: Compiled, params: list, wrt: tuple,
                           tensors: list[torch.Tensor]) -> str | None:
    """None when the generated adjoint matches autograd on random cotangents, else the reason."""
    fn = plan.fn
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(i in wrt) for i, t in enumerate(tensors)]
        call = list(args)
        for node, leaf in zip(plan.graph.inputs, leaves):
            call[node.index] = leaf
        out = fn(*call)
        outs = out if isinstance(out, tuple) else (out,)
        gen = torch.Generator().manual_seed(0)
        seeds = [torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in outs]
        targets = [leaves[i] for i in wrt]
        pairs = [(o, s) for o, s in zip(outs, seeds) if o.requires_grad]
        if pairs:
            expected = torch.autograd.grad([o for o, _ in pairs], targets, [s for _, s in pairs], allow_unused=True)
        else:
            expected = [None] * len(targets)
    with torch.no_grad():
        got = compiled.fn(*[t.detach() for t in tensors], *params, *seeds)
    tol = 1e-7 if all(t.dtype == torch.float64 for t in tensors) else 1e-3  # (one float32 input rounds them all)
    for i, exp in zip(wrt, expected):
        exp = torch.zeros_like(tensors[i]) if exp is None else exp
        g = fit_gradient(got[i], tensors[i])
        if not torch.isfinite(exp).all():
            continue
        err = (g - exp).abs().max().item()
        scale = max(exp.abs().max().item(), 1.0)
        if not err <= tol * scale:
            return f"generated derivative differs from autograd by {err:.3g} (input {i})"
    return None


def apply(coarsened, plan: Plan, args: tuple):
    """Run the primal, attach the generated adjoint, return the outputs."""
    tensors = tensor_inputs(plan, args)
    detached = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    with torch.no_grad():
        outputs, record = plan.run(*detached)
    if not torch.is_grad_enabled():
        return outputs
    wrt = tuple(i for i, t in enumerate(tensors) if t.requires_grad)
    if not wrt:
        return outputs
    outs = outputs if isinstance(outputs, tuple) else (outputs,)
    try:
        elev = plan.elevation(record)
        compiled = plan.adjoint(elev, wrt, "torch", tensors[wrt[0]])
        params = param_values(elev, record)
        if coarsened.verify and not compiled.verified:
            problem = check_against_autograd(plan, args, compiled, params, wrt, tensors)
            if problem is not None:
                raise CoarsenUnsupported(problem)
            compiled.verified = True
    except Deferred:  # the symbolic work goes on in the background: this call uses plain autograd
        return coarsened.fn(*args)
    except (CoarsenUnsupported, NotImplementedError, RecursionError) as why:
        coarsened.disable(args, why)
        return coarsened.fn(*args)
    def rescue(why, inputs, cotangents):
        coarsened.disable(args, why)
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(True) for t in inputs]
            call = list(args)
            for node, leaf in zip(plan.graph.inputs, leaves):
                call[node.index] = leaf
            out = plan.fn(*call)
            outs_again = out if isinstance(out, tuple) else (out,)
            pairs = [(o, c) for o, c in zip(outs_again, cotangents) if o.requires_grad]
            if not pairs:
                return [None] * len(leaves)
            return torch.autograd.grad([o for o, _ in pairs], leaves, [c for _, c in pairs], allow_unused=True)

    result = _Splice.apply((compiled.fn, rescue), params, [o.detach() for o in outs], *tensors)
    return result if isinstance(outputs, tuple) else result[0]
