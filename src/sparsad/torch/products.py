"""Differentiable sparse @ sparse values through the reusable Gustavson phases of `ops.spgemm`.

One autograd Function evaluates the trilinear form sum A[p] B[q] C[c] towards any of its three
roles (0 = A values, 1 = B values, 2 = C values); its VJP and JVP are evaluations of the same
form, so derivatives of every order (and torch.func's grad, jvp and vmap) reuse one symbolic phase.

Example:
    >>> import torch, scipy.sparse as sp
    >>> from sparsad.torch import SparseMatrix
    >>> A = SparseMatrix.from_scipy(sp.random(6, 6, density=0.4, random_state=0), requires_grad=True)
    >>> C = spgemm_values(A.pattern.product(A.pattern), A.values, A.values)
    >>> C.sum().backward(); A.values.grad.shape == A.values.shape
    True
"""
from __future__ import annotations

import torch

from sparsad.ops.pattern import CSRPattern
from sparsad.ops.spgemm import SpGEMM
from sparsad.torch import _autograd, _traced
from sparsad.torch._functorch import loop_vmap


def _wrapped(tensor: torch.Tensor) -> bool:
    """Inside a torch.func transform (no NumPy view): go through the Function, which unwraps."""
    return torch._C._functorch.is_functorch_wrapped_tensor(tensor)


def _other_roles(out_role: int) -> tuple[int, int]:
    return tuple(r for r in range(3) if r != out_role)  # type: ignore[return-value]


@torch.compiler.disable  # Numba kernels on NumPy views: a graph break under torch.compile, not a trace
def _evaluate(product: SpGEMM, out_role: int, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    if _traced.is_fake(u, v):  # meta or fake tensors: the custom op's shape, no kernel
        return _traced._gustavson_op(_traced.Static.of(product), out_role, u, v)
    if _autograd._use_numba(u):
        ru, rv = _other_roles(out_role)
        operands = {ru: u.contiguous().numpy(), rv: v.contiguous().numpy()}
        return torch.from_numpy(product.evaluate(out_role, operands))
    return _autograd._evaluate(product.terms, out_role, u, v)  # other devices: torch kernels on terms


class _Gustavson(torch.autograd.Function):
    """Values of role `out_role` from the values u, v of the two other roles (in role order)."""

    @staticmethod
    def forward(product, out_role, u, v, precomputed=None):
        if precomputed is not None:  # the first product, from the fused symbolic + numeric pass
            return precomputed
        return _evaluate(product, out_role, u.detach(), v.detach())

    @staticmethod
    def setup_context(ctx, inputs, output):
        product, out_role, u, v = inputs[:4]
        ctx.product, ctx.out_role = product, out_role
        ctx.save_for_backward(u, v)
        ctx.save_for_forward(u, v)

    @staticmethod
    def backward(ctx, grad):
        u, v = ctx.saved_tensors
        ru, rv = _other_roles(ctx.out_role)
        gu = gv = None
        if ctx.needs_input_grad[2]:
            gu = _apply(ctx.product, ru, {rv: v, ctx.out_role: grad})
        if ctx.needs_input_grad[3]:
            gv = _apply(ctx.product, rv, {ru: u, ctx.out_role: grad})
        return None, None, gu, gv, None

    @staticmethod
    def jvp(ctx, _product, _out_role, du, dv, _precomputed=None):
        u, v = ctx.saved_tensors
        tangent = None
        if du is not None:
            tangent = _Gustavson.apply(ctx.product, ctx.out_role, du, v)
        if dv is not None:
            part = _Gustavson.apply(ctx.product, ctx.out_role, u, dv)
            tangent = part if tangent is None else tangent + part
        return tangent

    @staticmethod
    def vmap(info, in_dims, product, out_role, u, v, _precomputed=None):
        return loop_vmap(_Gustavson, info, in_dims[:4], product, out_role, u, v)


def _apply(product: SpGEMM, out_role: int, operands: dict[int, torch.Tensor]) -> torch.Tensor:
    ru, rv = _other_roles(out_role)
    return _Gustavson.apply(product, out_role, operands[ru], operands[rv])


def spgemm_values(product: SpGEMM, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Values of A B on `product.pattern` (differentiable in a and b to any order)."""
    return _Gustavson.apply(product, 2, a, b)


@torch.compiler.disable  # the symbolic phase and a Numba kernel: a graph break, not a trace
def _first_product(a_pattern: CSRPattern, a: torch.Tensor, b_pattern: CSRPattern, b: torch.Tensor):
    """(SpGEMM, values of A B as a tensor): symbolic and numeric phases fused on a first call."""
    product, first = a_pattern.product_with_values(b_pattern, a.detach().numpy(), b.detach().numpy())
    return product, torch.from_numpy(first)


def spgemm(a_pattern: CSRPattern, a: torch.Tensor, b_pattern: CSRPattern, b: torch.Tensor):
    """(pattern of A B, its values): the first call for a pattern pair fuses both phases."""
    if _traced.tracing():  # under torch.compile: the symbolic phase at trace time, values by a custom op
        product, pattern = _traced.as_static(a_pattern).product(_traced.as_static(b_pattern))
        return pattern, _traced.gustavson(product, 2, a, b)
    if _autograd._use_numba(a) and not any(_wrapped(t) for t in (a, b)) and not _traced.is_fake(a, b):
        product, first = _first_product(a_pattern, a, b_pattern, b)
        return product.pattern, _Gustavson.apply(product, 2, a, b, first)
    product = a_pattern.product(b_pattern)
    return product.pattern, _Gustavson.apply(product, 2, a, b)
