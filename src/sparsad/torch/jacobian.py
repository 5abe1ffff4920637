"""Sparse Jacobians and Hessians of user functions by column colouring and compressed
forward-mode products (Curtis-Powell-Reid).

Columns that share no row of the Jacobian get one colour; one JVP with the sum of a colour's
unit vectors yields all of those columns at once, so the cost is (number of colours) JVPs
instead of n. The Hessian is recovered from Hessian-vector products (forward over reverse) with a star
colouring of its (symmetrised) pattern: every entry is read directly from one of the two
compressed products that hold it alone, so fewer products than a distance-1 colouring of the
columns need (`colouring="distance1"` keeps that one). Colourings: `sparsad.ops.colouring`.

Example:
    >>> import torch
    >>> f = lambda x: x[1:] * x[:-1]
    >>> J = jacobian(f, torch.arange(1.0, 5.0, dtype=torch.float64))
    >>> J.to_dense()
    tensor([[2., 1., 0., 0.],
            [0., 3., 2., 0.],
            [0., 0., 4., 3.]], dtype=torch.float64)
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from sparsad.errors import InputError, ShapeError
from sparsad.ops.colouring import colour_columns, compression_plan, symmetric_pattern
from sparsad.ops.pattern import CSRPattern
from sparsad.torch.matrix import SparseMatrix

#: Without a pattern, detection evaluates the dense Jacobian; refused above this many entries.
DETECT_MAX_ENTRIES = 10_000_000

#: Compressed products are batched with vmap up to this many seed entries (colours x n), one by one
#: above: vmap saves per-call overhead on small inputs, but some batching rules (pad, measured 2x at
#: n = 10^6) cost more than a loop of plain JVPs on large ones.
VMAP_MAX_ENTRIES = 1 << 20


def _as_pattern(pattern: Any, shape: tuple[int | None, int]) -> CSRPattern:
    """A CSRPattern from the accepted forms; `shape` (rows may be None: f's output length, checked
    against the products later) must match."""
    import scipy.sparse

    if isinstance(pattern, SparseMatrix):
        pattern = pattern.pattern
    elif scipy.sparse.issparse(pattern):
        pattern = CSRPattern.from_scipy(pattern, name="pattern")
    elif isinstance(pattern, torch.Tensor) and pattern.layout == torch.strided:
        pattern = SparseMatrix.from_dense((pattern != 0).to(torch.float64)).pattern
    if not isinstance(pattern, CSRPattern):
        raise InputError(f"pattern must be a SparseMatrix, CSRPattern, scipy sparse matrix or dense 0/1 tensor, "
                         f"got {type(pattern).__name__}")
    if pattern.shape[1] != shape[1] or (shape[0] is not None and pattern.shape[0] != shape[0]):
        wanted = f"({'m' if shape[0] is None else shape[0]}, {shape[1]})"
        raise ShapeError(f"pattern has shape {pattern.shape} but the derivative has shape {wanted}")
    return pattern


def _detect(dense_at: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, shape: tuple[int, int]) -> CSRPattern:
    """Union of the nonzeros of the dense derivative at x and at two random points near it."""
    if shape[0] * shape[1] > DETECT_MAX_ENTRIES:
        raise InputError(f"detecting the sparsity pattern evaluates a dense {shape[0]} x {shape[1]} derivative, "
                         f"above DETECT_MAX_ENTRIES = {DETECT_MAX_ENTRIES}; pass pattern=... (a SparseMatrix, "
                         "CSRPattern or scipy matrix of the structural nonzeros)")
    generator = torch.Generator().manual_seed(0)
    mask = dense_at(x) != 0
    for _ in range(2):
        point = x + torch.randn(x.shape, dtype=x.dtype, generator=generator) * (1 + x.abs())
        mask |= dense_at(point) != 0
    return SparseMatrix.from_dense(mask.to(torch.float64)).pattern


def _seeds(pattern: CSRPattern, kind: str, colours: np.ndarray, x: torch.Tensor) -> torch.Tensor:
    """(colours, n): each colour's seed, the sum of its unit vectors; kept on the pattern per
    (kind, dtype, device), as its colouring is. Handed out as a copy: f may update its input in
    place, which forward AD applies to the tangent too."""
    cache = pattern.__dict__.setdefault("_torch_seeds", {})
    key = (kind, x.dtype, x.device)
    if key not in cache:
        n_colours = int(colours.max()) + 1 if colours.size else 0
        colour_t = torch.as_tensor(colours, device=x.device)
        cache[key] = (colour_t[None, :] == torch.arange(n_colours, device=x.device)[:, None]).to(x.dtype)
    return cache[key].clone()


def _compressed(seeds: torch.Tensor, products: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """(colours, m): the product with each colour's seed."""
    if seeds.numel() <= VMAP_MAX_ENTRIES:
        try:
            return torch.func.vmap(products)(seeds)  # all compressed products in one call
        except (RuntimeError, NotImplementedError):  # f uses an op without a batching rule
            pass
    return torch.stack([products(seed) for seed in seeds])


def _recover(pattern: CSRPattern, kind: str, products: Callable[[torch.Tensor], torch.Tensor],
             x: torch.Tensor) -> SparseMatrix:
    """Colour (once per pattern), compress, and read every stored entry off the products."""
    from sparsad.torch.linalg import _index

    if pattern.nnz == 0:
        return SparseMatrix._wrap(pattern, torch.zeros(0, dtype=x.dtype, device=x.device))
    colours, gather = compression_plan(pattern, kind)
    stacked = _compressed(_seeds(pattern, kind, colours, x), products)
    if stacked.ndim != 2 or stacked.shape[1] != pattern.shape[0]:
        raise ShapeError(f"f returned {tuple(stacked.shape[1:])} per product, but the pattern has "
                         f"{pattern.shape[0]} rows; f must return a 1-D tensor of that length")
    return SparseMatrix._wrap(pattern, stacked.reshape(-1)[_index(gather, x.device, pattern, f"gather_{kind}")])


def _check_x(x: Any) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.ndim != 1:
        raise InputError(f"x must be a 1-D torch.Tensor, got {type(x).__name__} "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else ''}")
    if not x.is_floating_point():
        raise InputError(f"x must be a floating-point tensor, got {x.dtype}")
    return x.detach()


def jacobian(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, pattern: Any = None) -> SparseMatrix:
    """The Jacobian of f: R^n -> R^m at x as a SparseMatrix, by colouring and compressed JVPs.

    `pattern` gives the structural nonzeros (recommended; required for large n); without it the
    pattern is detected from dense Jacobians at x and two random points (guarded by size). Entries
    outside the given pattern are assumed zero: a pattern that misses a nonzero gives a wrong result.
    Pass the same SparseMatrix or CSRPattern again to reuse its colouring.

    >>> import torch, sparsad.torch as st
    >>> x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> st.jacobian(lambda z: z * z, x).to_dense()
    tensor([[2., 0.],
            [0., 4.]], dtype=torch.float64)
    """
    x = _check_x(x)
    if pattern is None:
        y = f(x)
        if not isinstance(y, torch.Tensor) or y.ndim != 1:
            raise InputError("f must return a 1-D tensor")
        pattern = _detect(lambda p: torch.func.jacfwd(f)(p), x, (y.shape[0], x.shape[0]))
    pattern = _as_pattern(pattern, (None, x.shape[0]))
    return _recover(pattern, "jacobian", lambda v: torch.func.jvp(f, (x,), (v,))[1], x)


def hessian(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, pattern: Any = None,
            colouring: str = "star") -> SparseMatrix:
    """The Hessian of scalar f at x as a SparseMatrix, by colouring and compressed Hessian-vector
    products (forward over reverse). `pattern` as in `jacobian` (square, n x n; symmetrised).

    `colouring="star"` (default) needs fewer products than `"distance1"` (columns sharing a row
    differ), both recover each entry directly (no solves).

    >>> import torch, sparsad.torch as st
    >>> x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> st.hessian(lambda z: (z ** 3).sum(), x).to_dense()
    tensor([[ 6.,  0.],
            [ 0., 12.]], dtype=torch.float64)
    """
    x = _check_x(x)
    if colouring not in ("star", "distance1"):
        raise InputError(f"colouring must be 'star' or 'distance1', got {colouring!r}")
    gradient = torch.func.grad(f)
    shape = (x.shape[0], x.shape[0])
    if pattern is None:
        pattern = _detect(lambda p: torch.func.jacfwd(gradient)(p), x, shape)
    pattern = symmetric_pattern(_as_pattern(pattern, shape))
    return _recover(pattern, colouring, lambda v: torch.func.jvp(gradient, (x,), (v,))[1], x)
