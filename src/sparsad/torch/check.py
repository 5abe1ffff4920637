"""Sparse-aware gradient checks: masked gradients against finite differences on the pattern.

`gradcheck(fn, inputs)` perturbs each stored value of every SparseMatrix input (never the
implicit zeros, which have no gradient under the masked convention) and each entry of every
dense input that requires grad, and compares with the analytical (autograd) gradient.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch.autograd.gradcheck import GradcheckError

from sparsad.errors import DTypeError, InputError
from sparsad.torch.matrix import SparseMatrix


def _flatten(inputs: Sequence[Any]) -> tuple[list[torch.Tensor], list[str], Callable]:
    if not isinstance(inputs, (list, tuple)):
        raise InputError(f"gradcheck: inputs must be a list or tuple of the arguments of fn, got "
                         f"{type(inputs).__name__}; wrap a single input as (A,)")
    leaves, names, slots = [], [], []
    for i, item in enumerate(inputs):
        if isinstance(item, SparseMatrix) and item.values.requires_grad:
            slots.append(i)
            leaves.append(item.values)
            names.append(f"input {i} (SparseMatrix {item.shape}, values on its {item.nnz}-entry pattern)")
        elif isinstance(item, torch.Tensor) and item.requires_grad:
            slots.append(i)
            leaves.append(item)
            names.append(f"input {i} (tensor {tuple(item.shape)})")
    for leaf, name in zip(leaves, names):
        if leaf.dtype != torch.float64:
            raise DTypeError(f"gradcheck needs float64 inputs for reliable finite differences; {name} is "
                             f"{leaf.dtype}: convert with .double()")
    if not leaves:
        raise InputError("gradcheck: no input requires grad; call requires_grad_() on the SparseMatrix "
                         "or tensor inputs to check")

    def rebuild(*tensors: torch.Tensor) -> list[Any]:
        args = list(inputs)
        for slot, tensor in zip(slots, tensors):
            item = inputs[slot]
            args[slot] = SparseMatrix._wrap(item.pattern, tensor) if isinstance(item, SparseMatrix) else tensor
        return args

    return leaves, names, rebuild


def _outputs(result: Any) -> tuple[torch.Tensor, ...]:
    if isinstance(result, SparseMatrix):
        return (result.values,)
    if isinstance(result, torch.Tensor):
        return (result,)
    if isinstance(result, (tuple, list)):
        return tuple(t for r in result for t in _outputs(r))
    raise InputError(f"gradcheck: fn must return tensors or SparseMatrix objects, got {type(result).__name__}")


def _run(check, fn, inputs, raise_exception, **kwargs) -> bool:
    leaves, names, rebuild = _flatten(inputs)

    def flat(*tensors):
        return _outputs(fn(*rebuild(*tensors)))

    try:
        return check(flat, tuple(leaves), raise_exception=raise_exception, **kwargs)
    except GradcheckError as exc:
        legend = "; ".join(f"checked input {k} = {name}" for k, name in enumerate(names))
        raise GradcheckError(f"{exc}\n(where {legend})") from None


def gradcheck(fn: Callable[..., Any], inputs: Sequence[Any], *, eps: float = 1e-6, atol: float = 1e-5,
              rtol: float = 1e-3, raise_exception: bool = True, fast_mode: bool = False) -> bool:
    """Check masked gradients of `fn(*inputs)` against central finite differences on the pattern.

    SparseMatrix inputs whose values require grad are perturbed entry by entry on their pattern;
    dense tensors that require grad likewise. Inputs must be float64. Returns True, or raises
    GradcheckError naming the input whose gradient is wrong (False if raise_exception=False).

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> A.values.requires_grad_(True)
    tensor([4., 1., 1., 3.], dtype=torch.float64, requires_grad=True)
    >>> st.gradcheck(lambda M, v: st.spmv(M, v), [A, b.requires_grad_(True)])
    True
    """
    return _run(torch.autograd.gradcheck, fn, inputs, raise_exception, eps=eps, atol=atol, rtol=rtol,
                fast_mode=fast_mode)


def gradgradcheck(fn: Callable[..., Any], inputs: Sequence[Any], *, eps: float = 1e-6, atol: float = 1e-5,
                  rtol: float = 1e-3, raise_exception: bool = True, fast_mode: bool = False) -> bool:
    """Second-order version of `gradcheck` (gradients of the gradients, on the patterns).

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> A.values.requires_grad_(True)
    tensor([4., 1., 1., 3.], dtype=torch.float64, requires_grad=True)
    >>> st.gradgradcheck(lambda M: (st.spmv(M, b) ** 2).sum(), [A])
    True
    """
    return _run(torch.autograd.gradgradcheck, fn, inputs, raise_exception, eps=eps, atol=atol, rtol=rtol,
                fast_mode=fast_mode)
