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


@torch.compiler.disable  # Numba kernels on NumPy views: a graph break under torch.compile, not a trace
def _evaluate(terms: Terms, out: int, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Channel operands may be 1-D (one channel): the result of a channel role is then 1-D too."""
    from sparsad.torch import _traced

    if _traced.is_fake(u, v):  # meta or fake tensors: the custom op's shape, no kernel
        return _traced._contract_op(_traced.Static.of(terms), out, u, v)
    if out == terms.scalar:
        u, v = (t[:, None] if t.ndim == 1 else t for t in (u, v))
    if _use_numba(u):  # NumPy views and the Numba kernels directly
        plan = terms.plan(out)
        operands = {plan.u_role: u.detach().contiguous().numpy(), plan.v_role: v.detach().contiguous().numpy()}
        return torch.from_numpy(_numpy_contract(terms, out, operands))
    flat = out != terms.scalar and v.ndim == 1
    if flat:
        v = v[:, None]
    result = _evaluate_torch(terms, out, u.contiguous(), v.contiguous())
    return result[:, 0] if flat else result


def plain(*tensors: torch.Tensor) -> bool:
    """True when no transform can be watching these tensors: no forward-mode dual level is open
    and none is a torch.func wrapper. Only then may a backward skip the differentiable path
    (a NumPy shortcut there would silently drop a tangent or a batch dimension)."""
    if _forward_ad_active() or torch.is_grad_enabled():
        return False
    return not any(_is_wrapped(t) for t in tensors if t is not None)


def _is_wrapped(tensor: torch.Tensor) -> bool:
    return torch._C._functorch.is_functorch_wrapped_tensor(tensor)


def batch_first(tensor: torch.Tensor, dim: int | None, size: int) -> torch.Tensor:
    """`tensor` with its vmap batch dimension at 0 (broadcast when it has none)."""
    if dim is None:
        return tensor.unsqueeze(0).expand(size, *tensor.shape)
    return tensor.movedim(dim, 0)


class _Contract(torch.autograd.Function):
    """out = terms evaluated towards role `out` from operands u, v (see sparsad.ops.contract).

    setup_context style with jvp and vmap rules, so torch.func (grad, vjp, jvp, jacrev, jacfwd,
    vmap) composes with it; every rule is built from this Function again, so any order works.
    """

    @staticmethod
    def forward(terms: Terms, out: int, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return _evaluate(terms, out, u.detach(), v.detach())

    @staticmethod
    def setup_context(ctx, inputs, output):
        terms, out, u, v = inputs
        ctx.terms, ctx.out = terms, out
        ctx.save_for_backward(u, v)
        ctx.save_for_forward(u, v)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        u, v = ctx.saved_tensors
        terms, out = ctx.terms, ctx.out
        u_role, v_role = terms.roles_into(out)
        fast = plain(grad, u, v)
        if fast and out == 2 and _use_numba(grad) and grad.ndim == 1 and v.ndim == 1:
            fused = _vector_vjp(terms, u.detach().contiguous().numpy(), v.detach().contiguous().numpy(),
                                grad.contiguous().numpy(), ctx.needs_input_grad[2], ctx.needs_input_grad[3])
            if fused is not None:  # SpMV: both cotangents in one pass over A
                return (None, None) + tuple(None if g is None else torch.from_numpy(g) for g in fused)
        # otherwise build the gradient from differentiable calls (create_graph, torch.func, dual
        # tensors), or evaluate directly when nothing watches
        run = _contract_now if fast else contract
        gu = gv = None
        if ctx.needs_input_grad[2]:
            gu = run(terms, u_role, {v_role: v, out: grad})
        if ctx.needs_input_grad[3]:
            gv = run(terms, v_role, {u_role: u, out: grad})
        return None, None, gu, gv

    @staticmethod
    def jvp(ctx, _terms, _out, du, dv):
        # product rule, through this Function so the tangent is itself differentiable
        u, v = ctx.saved_tensors
        terms, out = ctx.terms, ctx.out
        tangent = None
        if du is not None:
            tangent = _Contract.apply(terms, out, du, v)
        if dv is not None:
            part = _Contract.apply(terms, out, u, dv)
            tangent = part if tangent is None else tangent + part
        return tangent

    @staticmethod
    def vmap(info, in_dims, terms: Terms, out: int, u: torch.Tensor, v: torch.Tensor):
        _, _, u_dim, v_dim = in_dims
        if u_dim is None and v_dim is None:
            return _Contract.apply(terms, out, u, v), None
        if u_dim is None and out != terms.scalar:
            # only the channel operand is batched: the batch becomes more channels (one call)
            wide = v.movedim(v_dim, 1)
            channels = wide.shape[1:]
            result = _Contract.apply(terms, out, u, wide.reshape(wide.shape[0], -1))
            return result.reshape(result.shape[0], *channels), 1
        size = info.batch_size
        u, v = batch_first(u, u_dim, size), batch_first(v, v_dim, size)
        return torch.stack([_Contract.apply(terms, out, u[b], v[b]) for b in range(size)]), 0


def _contract_now(terms: Terms, out: int, operands: dict[int, torch.Tensor]) -> torch.Tensor:
    u_role, v_role = terms.roles_into(out)
    return _evaluate(terms, out, operands[u_role].detach(), operands[v_role].detach())


def contract(terms: Terms, out: int, operands: dict[int, torch.Tensor]) -> torch.Tensor:
    """Differentiable evaluation of `terms` towards role `out` (see `sparsad.ops.contract`)."""
    from sparsad.torch import _traced

    if isinstance(terms, _traced.Static):  # under torch.compile: the custom op
        return _traced.contract(terms, out, operands)
    u_role, v_role = terms.roles_into(out)
    return _Contract.apply(terms, out, operands[u_role], operands[v_role])
