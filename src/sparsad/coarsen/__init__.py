"""Coarsening: symbolic differentiation of whole code regions, spliced into PyTorch/JAX autograd.

>>> import torch, sparsad.coarsen as coarsen
>>> @coarsen.symbolic
... def f(x):
...     return torch.log(1 + torch.exp(x)).sum()
>>> x = torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True)
>>> f(x).backward(); [round(v, 6) for v in x.grad.tolist()]
[0.622459, 0.268941]

Pipeline: ``source`` (the function's own source, verified against its bytecode) → ``frontend``
(AST → SSA graph with loops and branches; helpers inlined; every global, closure value and
attribute read is guarded by ``guards`` and re-checked at each call) → ``record`` (trip counts and
decisions at run time) → ``elevate`` (SymPy closed forms by φ-calculus, ``phi``; segments of
interest, ``soi``; loops without closed form as compiled forward/reverse loops, ``revloop``) →
``adjoint`` (symbolic differentiation, CSE) → ``codegen`` (torch / jax code, numerically stable
forms) → ``torch_splice`` / ``jax_splice`` (custom adjoints).  Anything the machinery cannot do,
or any failure inside it, falls back to plain autograd with a ``CoarsenFallbackWarning`` naming
the file and line.
"""
from sparsad.coarsen.api import Coarsened, grad, symbolic, value_and_grad
from sparsad.coarsen.explain import explain
from sparsad.coarsen.frontend import CoarsenUnsupported
from sparsad.coarsen.plan import CoarsenFallbackWarning

__all__ = ["symbolic", "grad", "value_and_grad", "explain", "Coarsened", "CoarsenUnsupported", "CoarsenFallbackWarning"]
