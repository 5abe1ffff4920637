"""The autograd Functions of the bridge. Each backward is written with differentiable ops
(these Functions, gathers, index_add), so gradients of gradients work to any order.

CPU tensors run the Numba kernels of `sparsad.ops`; other devices run PyTorch's own kernels
(a CSR sparse tensor product for SpMM, gather + index_add otherwise) on the same term lists.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.autograd.forward_ad as _forward_ad

from sparsad.ops.contract import contract as _numpy_contract
from sparsad.ops.contract import Terms
from sparsad.ops.contract import vector_vjp as _vector_vjp

#: Run PyTorch's own kernels on the CPU too (used by the tests to exercise the device path).
FORCE_TORCH_KERNELS = False


def _forward_ad_active() -> bool:
    """Whether a forward-mode dual level is open (else no jvp can be requested of this call)."""
    return getattr(_forward_ad, "_current_level", 0) >= 0


def _use_numba(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cpu" and not FORCE_TORCH_KERNELS


def device_index(terms: Terms, key: str, array: np.ndarray, device: torch.device) -> torch.Tensor:
    cache = terms.torch_cache
    if (key, device) not in cache:
        cache[(key, device)] = torch.tensor(array.astype(np.int64), device=device)
    return cache[(key, device)]


def _evaluate_torch(terms: Terms, out: int, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    plan = terms.plan(out)
    dev = u.device
    iv = device_index(terms, f"iv{out}", plan.iv, dev)
    if plan.kind == "csr":  # A @ V with A in CSR order: torch's sparse CSR product
        seg = device_index(terms, f"seg{out}", plan.seg, dev)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "CSR support is in beta"
            matrix = torch.sparse_csr_tensor(seg, iv, u, size=(terms.sizes[out], v.shape[0]),
                                             check_invariants=False)
        return matrix @ v
    if plan.kind == "single":
        iout = torch.arange(terms.sizes[out], device=dev)
    else:
        seg = plan.seg.astype(np.int64)
        iout = device_index(terms, f"out{out}", np.repeat(np.arange(seg.shape[0] - 1), np.diff(seg)), dev)
    iu = iv if plan.iu is None else device_index(terms, f"iu{out}", plan.iu, dev)
    if out == terms.scalar:
        prod = (u[iu] * v[iv]).sum(1)
        return torch.zeros(terms.sizes[out], dtype=prod.dtype, device=dev).index_add_(0, iout, prod)
    prod = u[iu, None] * v[iv]
    return torch.zeros((terms.sizes[out], v.shape[1]), dtype=prod.dtype, device=dev).index_add_(0, iout, prod)


def _evaluate(terms: Terms, out: int, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Channel operands may be 1-D (one channel): the result of a channel role is then 1-D too."""
    if out == terms.scalar:
        u, v = (t[:, None] if t.ndim == 1 else t for t in (u, v))
    if _use_numba(u):  # NumPy views and the Numba kernels directly
        plan = terms.plan(out)
        operands = {plan.u_role: u.contiguous().numpy(), plan.v_role: v.contiguous().numpy()}
        return torch.from_numpy(_numpy_contract(terms, out, operands))
    flat = out != terms.scalar and v.ndim == 1
    if flat:
        v = v[:, None]
    result = _evaluate_torch(terms, out, u.contiguous(), v.contiguous())
    return result[:, 0] if flat else result


class _Contract(torch.autograd.Function):
    @staticmethod
    def forward(ctx, terms: Terms, out: int, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        ctx.terms, ctx.out = terms, out
        ctx.save_for_backward(u, v)
        if _forward_ad_active():  # a jvp can only be asked for inside a dual level
            ctx.save_for_forward(u, v)
        return _evaluate(terms, out, u.detach(), v.detach())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        u, v = ctx.saved_tensors
        terms, out = ctx.terms, ctx.out
        u_role, v_role = terms.roles_into(out)
        # create_graph=True: build the gradient from differentiable calls; otherwise skip the
        # Function machinery and evaluate directly
        run = contract if torch.is_grad_enabled() else _contract_now
        if run is _contract_now and out == 2 and _use_numba(grad) and grad.ndim == 1 and v.ndim == 1:
            fused = _vector_vjp(terms, u.detach().contiguous().numpy(), v.detach().contiguous().numpy(),
                                grad.contiguous().numpy(), ctx.needs_input_grad[2], ctx.needs_input_grad[3])
            if fused is not None:  # SpMV: both cotangents in one pass over A
                return (None, None) + tuple(None if g is None else torch.from_numpy(g) for g in fused)
        gu = gv = None
        if ctx.needs_input_grad[2]:
            gu = run(terms, u_role, {v_role: v, out: grad})
        if ctx.needs_input_grad[3]:
            gv = run(terms, v_role, {u_role: u, out: grad})
        return None, None, gu, gv

    @staticmethod
    def jvp(ctx, _terms, _out, du, dv):
        u, v = ctx.saved_tensors
        terms, out = ctx.terms, ctx.out
        u_role, v_role = terms.roles_into(out)
        tangent = None
        if du is not None:
            tangent = _evaluate(terms, out, du, v)
        if dv is not None:
            part = _evaluate(terms, out, u, dv)
            tangent = part if tangent is None else tangent + part
        return tangent


def _contract_now(terms: Terms, out: int, operands: dict[int, torch.Tensor]) -> torch.Tensor:
    u_role, v_role = terms.roles_into(out)
    return _evaluate(terms, out, operands[u_role].detach(), operands[v_role].detach())


def contract(terms: Terms, out: int, operands: dict[int, torch.Tensor]) -> torch.Tensor:
    """Differentiable evaluation of `terms` towards role `out` (see `sparsad.ops.contract`)."""
    u_role, v_role = terms.roles_into(out)
    return _Contract.apply(terms, out, operands[u_role], operands[v_role])
