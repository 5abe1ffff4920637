"""Sparse Jacobians and Hessians of user functions by column colouring and compressed
forward-mode products (Curtis-Powell-Reid).

Columns that share no row of the Jacobian get one colour; one JVP with the sum of a colour's
unit vectors yields all of those columns at once, so the cost is (number of colours) JVPs
instead of n. Symmetrically, rows that share no column get one colour and one vector-Jacobian
product per colour (reverse mode, one batched backward pass) yields all of their rows. The Hessian is recovered from Hessian-vector products (forward over reverse) with a star
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

import os
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

#: With as many row colours as column colours, mode="auto" takes reverse mode up to this many
#: entries in the compressed products (colours x n), forward mode above (see `_mode`).
REVERSE_TIE_MAX_ENTRIES = 1 << 18


def _scalar_overloads() -> dict:
    aten, T = torch.ops.aten, torch.Tensor
    table = {}
    for overload, functions in ((aten.mul.Scalar, (T.__mul__, T.__rmul__, T.mul, torch.mul, torch.multiply)),
                                (aten.add.Scalar, (T.__add__, T.__radd__, T.add, torch.add)),
                                (aten.sub.Scalar, (T.__sub__, T.sub, torch.sub, torch.subtract)),
                                (aten.div.Scalar, (T.__truediv__, T.div, torch.div, torch.true_divide))):
        table.update(dict.fromkeys(functions, overload))
    return table


class _ScalarOperands(torch.overrides.TorchFunctionMode):
    """While f runs under forward-mode AD: `tensor * 0.1`, `+`, `-`, `/` with a Python number go to
    the aten `.Scalar` overloads. The `.Tensor` overloads wrap the number in a tensor without a
    tangent, and PyTorch 2.13's forward formula then multiplies by an efficient zero tensor whose
    result shape comes from the operator's Python meta kernel: about 0.1 ms per operation (a JVP
    of the Poisson residual cost 23 evaluations of f, 8 with this mode; the values are the same
    bit for bit). The commutative forms only, without keywords, on plain float/complex tensors."""

    OVERLOADS: dict = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        overload = self.OVERLOADS.get(func)
        if overload is not None and not kwargs and len(args) == 2:
            tensor, number = args
            if (type(tensor) is torch.Tensor and (tensor.is_floating_point() or tensor.is_complex())
                    and (type(number) is float or (type(number) is int and -2**63 <= number < 2**63))):
                return overload(tensor, number)
        return func(*args, **(kwargs or {}))


def _with_scalar_operands(f: Callable) -> Callable:
    if not _ScalarOperands.OVERLOADS:
        _ScalarOperands.OVERLOADS = _scalar_overloads()

    def f_under_forward_mode(*args):
        with _ScalarOperands():
            return f(*args)
    return f_under_forward_mode


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


def _compressed(pattern: CSRPattern, kind: str, colours: np.ndarray, x: torch.Tensor,
                products: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """(colours, m): the product with each colour's seed."""
    n_colours = int(colours.max()) + 1 if colours.size else 0
    if n_colours * x.shape[0] <= VMAP_MAX_ENTRIES:
        try:
            return torch.func.vmap(products)(_seeds(pattern, kind, colours, x))  # all products in one call
        except (RuntimeError, NotImplementedError):  # f uses an op without a batching rule
            pass
    # one product at a time, each seed built on its own: a row of the stacked seeds would be a view
    # that forward AD copies (its storage differs from x's), and the stack's copy is (colours, n)
    from sparsad.torch.linalg import _index

    colour_of = _index(colours, x.device, pattern, f"colours_{kind}")
    return torch.stack([products((colour_of == colour).to(x.dtype)) for colour in range(n_colours)])


def _recover(pattern: CSRPattern, kind: str, products: Callable[[torch.Tensor], torch.Tensor],
             x: torch.Tensor) -> SparseMatrix:
    """Colour (once per pattern), compress, and read every stored entry off the products."""
    if pattern.nnz == 0:
        return SparseMatrix._wrap(pattern, torch.zeros(0, dtype=x.dtype, device=x.device))
    colours, gather = compression_plan(pattern, kind)
    stacked = _compressed(pattern, kind, colours, x, products)
    if stacked.ndim != 2 or stacked.shape[1] != pattern.shape[0]:
        raise ShapeError(f"f returned {tuple(stacked.shape[1:])} per product, but the pattern has "
                         f"{pattern.shape[0]} rows; f must return a 1-D tensor of that length")
    return _gathered(pattern, kind, stacked, gather, x)


def _gathered(pattern: CSRPattern, kind: str, stacked: torch.Tensor, gather: np.ndarray,
              x: torch.Tensor) -> SparseMatrix:
    from sparsad.torch.linalg import _index

    # index_select, not `flat[index]`: advanced indexing enters a parallel region even for a few
    # thousand entries, which under load waits for a descheduled worker thread (measured 20 ms per call)
    positions = _index(gather, x.device, pattern, f"gather_{kind}")
    return SparseMatrix._wrap(pattern, stacked.reshape(-1).index_select(0, positions))


def _reaches_other_leaves(y: torch.Tensor, leaf: torch.Tensor) -> bool:
    """Whether y's autograd graph reads a tensor that requires grad other than `leaf` (f closes over
    parameters, or `leaf` is itself computed from x requiring grad): then the compressed VJPs must
    be differentiable themselves (create_graph)."""
    global _ACCUMULATE_GRAD
    if _ACCUMULATE_GRAD is None:  # the node type of a leaf's gradient accumulator
        probe = torch.zeros(1, requires_grad=True)
        _ACCUMULATE_GRAD = type(probe.view_as(probe).grad_fn.next_functions[0][0])
    if y.grad_fn is None:  # y is a leaf itself (f returned a tensor of its own requiring grad)
        return y is not leaf
    seen, stack = {y.grad_fn}, [y.grad_fn]
    while stack:
        node = stack.pop()
        if type(node) is _ACCUMULATE_GRAD:
            if node.variable is not leaf:
                return True
            continue
        for next_node, _ in node.next_functions:
            if next_node is not None and next_node not in seen:
                seen.add(next_node)
                stack.append(next_node)
    return False


_ACCUMULATE_GRAD = None


def _batched_vjps(y: torch.Tensor, leaf: torch.Tensor, seeds: torch.Tensor, create_graph: bool):
    """(colours, n) VJPs of y with each row of `seeds`, in one batched backward pass (None when y does
    not reach `leaf`). What `torch.autograd.grad(..., is_grads_batched=True)` does, without its
    per-call Python (argument normalisation, pytree flattening: 10% of a call at n = 1024); plain
    tensors only (a subclass may override `grad`), and the public call whenever PyTorch's internals
    differ from those of the versions this was written against."""
    if type(y) is torch.Tensor and type(leaf) is torch.Tensor and _ENGINE_BATCHING is not None:
        increment, decrement, add_batch_dim, remove_batch_dim, run_backward = _ENGINE_BATCHING
        level = increment()
        try:
            grad = run_backward((y,), (add_batch_dim(seeds, 0, level),), True, create_graph, (leaf,), True,
                                accumulate_grad=False)[0]
            return None if grad is None else remove_batch_dim(grad, level, seeds.shape[0], 0)
        finally:
            decrement()
    return torch.autograd.grad(y, leaf, seeds, retain_graph=True, create_graph=create_graph,
                               is_grads_batched=True, allow_unused=True)[0]


def _engine_batching():
    try:
        from torch.autograd.graph import _engine_run_backward

        return (torch._C._vmapmode_increment_nesting, torch._C._vmapmode_decrement_nesting,
                torch._add_batch_dim, torch._remove_batch_dim, _engine_run_backward)
    except (ImportError, AttributeError):  # pragma: no cover - another PyTorch: the public call
        return None


_ENGINE_BATCHING = _engine_batching()


# the coarsened products, the structural pattern and the steady state: `_jacobian_coarsened` (names
# kept here for callers that reach them through this module)
from sparsad.torch._jacobian_coarsened import (  # noqa: E402
    AUTO_COARSEN_AFTER, AUTO_COARSEN_WAIT_S, COARSENED_FUNCTIONS, NOT_READY, _COARSENED)


def _reverse(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, pattern: CSRPattern,
             probe: torch.Tensor | None = None):
    """Row colouring and compressed VJPs: one evaluation of f with its graph, then one batched
    backward pass with every row colour's seed (rows sharing a column get different colours).
    With `probe` (a vector over the rows), its VJP rides in the same batch as one more seed and
    (matrix, probe @ J) is returned, for the pattern check (`_probe.checked`)."""
    colours, gather = compression_plan(pattern, "reverse")
    outer_grad_mode = torch.is_grad_enabled()
    with torch.enable_grad():
        # differentiate with respect to a copy of x: a leaf of its own, or (when x itself requires grad)
        # a node on x's graph, so that the products stay differentiable in x
        leaf = x.clone() if outer_grad_mode and x.requires_grad else x.detach().requires_grad_(True)
        y = f(leaf.clone())  # a copy: f may update its input in place (a leaf may not be)
        if not isinstance(y, torch.Tensor) or y.ndim != 1 or y.shape[0] != pattern.shape[0]:
            got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
            raise ShapeError(f"f returned {got}, but the pattern has {pattern.shape[0]} rows; f must return a "
                             "1-D tensor of that length")
        seeds = _seeds(pattern, "reverse", colours, y)
        if not y.requires_grad:  # f does not depend on x through autograd: every entry is zero
            zero = SparseMatrix._wrap(pattern, torch.zeros(pattern.nnz, dtype=y.dtype, device=y.device))
            return zero if probe is None else (zero, torch.zeros_like(x))
        if probe is not None:
            seeds = torch.cat([seeds, probe.to(seeds.dtype).unsqueeze(0)])
        create_graph = outer_grad_mode and _reaches_other_leaves(y, leaf)
        stacked = None
        if seeds.numel() <= VMAP_MAX_ENTRIES:
            try:  # all compressed products in one batched backward pass
                stacked = _batched_vjps(y, leaf, seeds, create_graph)
            except (RuntimeError, NotImplementedError):  # a backward formula without a batching rule
                stacked = None
        if stacked is None:  # large, unbatchable, or x unused (None): one product at a time
            rows = []
            for seed in seeds:
                grad = torch.autograd.grad(y, leaf, seed, retain_graph=True, create_graph=create_graph,
                                           allow_unused=True)[0]
                rows.append(torch.zeros_like(x) if grad is None else grad)
            stacked = torch.stack(rows)
    if probe is None:
        return _gathered(pattern, "reverse", stacked, gather, x)
    return _gathered(pattern, "reverse", stacked[:-1], gather, x), stacked[-1].detach()


def _mode(pattern: CSRPattern, mode: str, x: torch.Tensor) -> str:
    """Forward (JVPs, column colours) or reverse (VJPs, row colours): the fewer products. On a tie,
    reverse while the products are small (up to REVERSE_TIE_MAX_ENTRIES): there PyTorch's per-
    operation overhead dominates, and its batched backward pass pays less of it than batched
    forward mode (Poisson residual, 5 products: 0.21-0.42 ms against 0.36-0.61 ms at n = 256-4096,
    forward mode with `_ScalarOperands`); above, memory traffic dominates, and a backward pass
    materialises the gradients of views (slices, padding) that forward mode keeps as views
    (n = 65536, 7 products: 33 ms against 22 ms). Inside
    torch.func transforms always forward (torch.func.jvp composes with them). Cached on the pattern."""
    if mode in ("forward", "reverse"):
        return mode
    if torch._C._functorch.is_functorch_wrapped_tensor(x):
        return "forward"
    cache = pattern.__dict__.setdefault("_torch_jacobian_mode", {})
    if "auto" not in cache:
        column_colours, _ = compression_plan(pattern, "jacobian")
        row_colours, _ = compression_plan(pattern, "reverse")
        n_columns = int(column_colours.max()) + 1 if column_colours.size else 0
        n_rows = int(row_colours.max()) + 1 if row_colours.size else 0
        if n_rows != n_columns:
            cache["auto"] = "reverse" if n_rows < n_columns else "forward"
        else:
            small = n_rows * pattern.shape[1] <= REVERSE_TIE_MAX_ENTRIES
            cache["auto"] = "reverse" if small else "forward"
    return cache["auto"]


def _check_x(x: Any) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.ndim != 1:
        raise InputError(f"x must be a 1-D torch.Tensor, got {type(x).__name__} "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else ''}")
    if not x.is_floating_point():
        raise InputError(f"x must be a floating-point tensor, got {x.dtype}")
    if x.is_meta:  # (f runs at x: a meta tensor has no values to colour or check with)
        raise InputError("x is a meta tensor; the Jacobian is computed from f's values at x: pass a real tensor")
    return x  # not detached: the derivative matrix stays differentiable in x (second order)


def jacobian(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, pattern: Any = None,
             mode: str = "auto", check: bool = True) -> SparseMatrix:
    """The Jacobian of f: R^n -> R^m at x as a SparseMatrix, by colouring and compressed products.

    `pattern` gives the structural nonzeros. Without it, for a Python function coarsening can trace
    on CPU, the pattern is f's structure read off coarsening's graph (`sparsad.coarsen.dependencies`:
    for each output, every input it can depend on, whatever x; no dense Jacobian, so any n);
    otherwise it is detected from dense Jacobians at x and two random points (guarded by size),
    exact at x only. A given pattern is checked (`check=True`, the default) by one more product
    with a fixed probe vector: a nonzero outside it raises InputError (inside torch.func.vmap: NaN
    entries) rather than giving a wrong matrix; where coarsening's compiled code serves the call and
    the pattern holds f's structure (proven once per traced version of f), the probe is skipped.
    Pass the same SparseMatrix or CSRPattern again to reuse its colourings (and the proof). A
    densely detected pattern reused at another point where f's sparsity differs (a relu, `where` or
    branch inactive at all three detection points) makes the check raise.

    `mode`: "forward" (JVPs, one per colour of the columns), "reverse" (VJPs, one per colour of the
    rows, after one evaluation of f), or "auto" (default): the one with fewer colours; on a tie
    reverse for small products (cheaper per operation in PyTorch) and forward for large ones;
    forward inside torch.func transforms. Both modes give
    derivatives that autograd can differentiate further (f may close over tensors requiring grad).
    "coarsen": the reverse mode's products from `sparsad.coarsen`, which differentiates f
    symbolically into compiled code (one call per row colour, no autograd graph, f never runs in
    PyTorch): for functions it accepts (elementwise arithmetic, static slices, reshape/view/flatten,
    constant pads, roll, cat; see docs/coarsen.md), called many times with the same f (its first
    call traces and compiles, up to seconds; plain autograd serves the calls until the compiled
    code is ready). The pattern check's probe product is one more call of the compiled code. Where
    coarsening refuses f it warns once, naming f's line, and reverse mode runs; reverse mode also
    runs when x requires grad under grad mode (the compiled gradient is not differentiable) and
    forward mode inside torch.func transforms. "auto" takes coarsening for a Python function on
    CPU from its (AUTO_COARSEN_AFTER + 1)-th call with one signature on (one-off calls never pay
    for tracing): it waits at most AUTO_COARSEN_WAIT_S for the symbolic work, and its own batched
    products serve the calls until the compiled code is ready; where coarsening refuses f it warns
    once (naming f's line) and stays with autograd.

    >>> import torch, sparsad.torch as st
    >>> x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> st.jacobian(lambda z: z * z, x).to_dense()
    tensor([[2., 0.],
            [0., 4.]], dtype=torch.float64)
    """
    probing = bool(check) and pattern is not None  # (a detected pattern is not probed)
    if mode == "auto" or mode == "coarsen":  # the steady state: one compiled call per colour, no f in PyTorch
        from sparsad.torch._jacobian_coarsened import steady

        entry = steady(f, pattern)
        if entry is not None and type(x) is torch.Tensor:
            J = entry(x, probing)
            if J is not None:
                return J
    elif mode not in ("forward", "reverse"):
        raise InputError(f"mode must be 'auto', 'forward', 'reverse' or 'coarsen', got {mode!r}")
    wrapped = isinstance(x, torch.Tensor) and torch._C._functorch.is_functorch_wrapped_tensor(x)
    x = _check_x(x)
    pattern_arg, detected = pattern, False
    if pattern is None:
        y = f(x)
        if not isinstance(y, torch.Tensor) or y.ndim != 1:
            raise InputError("f must return a 1-D tensor")
        from sparsad.torch._jacobian_coarsened import structural_pattern

        shape = (y.shape[0], x.shape[0])
        pattern = structural_pattern(f, x, shape[0], mode, shape[0] * shape[1] > DETECT_MAX_ENTRIES)
        detected = pattern is not None
        if pattern is None:
            pattern = _detect(lambda p: torch.func.jacfwd(f)(p), x, shape)
    pattern = _as_pattern(pattern, (None, x.shape[0]))
    J = None
    if (mode == "coarsen" or mode == "auto") and not wrapped and pattern.nnz \
            and not (x.requires_grad and torch.is_grad_enabled()):
        from sparsad.coarsen import budget
        from sparsad.torch._jacobian_coarsened import hot, products

        if mode == "coarsen" or hot(f, x, pattern):
            # auto: a short wall deadline for coarsening's symbolic work (it goes on in the background)
            wait = None if mode == "coarsen" or os.environ.get("SPARSAD_COARSEN_WAIT_S") else AUTO_COARSEN_WAIT_S
            with budget.call_deadline(wait):  # (the probe's VJP is one more call of the compiled gradient)
                J = products(f, x, pattern, probing, mode, pattern_arg, detected)
            if J is not None and J is not NOT_READY:
                return J
            J = None
    if mode == "coarsen":
        mode = "reverse"  # where coarsening refused f (it warned, naming f's line)
    if pattern.nnz and _mode(pattern, "forward" if wrapped else mode, x) == "reverse":
        if not probing:
            return _reverse(f, x, pattern)
        from sparsad.torch._probe import checked, probe_vector

        probe = probe_vector(pattern, pattern.shape[0], x, "rows")  # its VJP rides in the batch
        J, probed = _reverse(f, x, pattern, probe)
        return checked(J, lambda _: probed, probe, False, "column")
    point = x.detach().clone() if probing else None  # (f may update x in place)
    fast_f = _with_scalar_operands(f)
    J = _recover(pattern, "jacobian", lambda v: torch.func.jvp(fast_f, (x,), (v,))[1], x)
    return _probed_jacobian(J, f, fast_f, point) if point is not None else J


def hessian(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, pattern: Any = None,
            colouring: str = "star", check: bool = True) -> SparseMatrix:
    """The Hessian of scalar f at x as a SparseMatrix, by colouring and compressed Hessian-vector
    products (forward over reverse). `pattern` and `check` as in `jacobian` (square, n x n;
    symmetrised).

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
    gradient = torch.func.grad(_scalar_valued(_with_scalar_operands(f)))
    shape = (x.shape[0], x.shape[0])
    given = pattern is not None
    if pattern is None:
        pattern = _detect(lambda p: torch.func.jacfwd(gradient)(p), x, shape)
    pattern = symmetric_pattern(_as_pattern(pattern, shape))
    point = x.detach().clone() if given and check else None  # (f may update x in place)
    H = _recover(pattern, colouring, lambda v: torch.func.jvp(gradient, (x,), (v,))[1], x)
    if point is None:
        return H
    from sparsad.torch._probe import checked, probe_vector

    probe = probe_vector(pattern, x.shape[0], x, "columns")
    return checked(H, lambda v: torch.func.jvp(gradient, (point,), (v,))[1], probe, True, "row")


# -- the probe check of a given pattern (sparsad.torch._probe) ------------------------------------

def _probed_jacobian(J: SparseMatrix, f: Callable, fast_f: Callable, point: torch.Tensor) -> SparseMatrix:
    """J after the probe check at `point` (x before f ran): a JVP, or a VJP where f has no
    forward-mode derivative."""
    from sparsad.torch._probe import checked, probe_vector

    pattern, x = J.pattern, point
    probe = probe_vector(pattern, pattern.shape[1], x, "columns")
    try:
        return checked(J, lambda v: torch.func.jvp(fast_f, (point,), (v,))[1], probe, True, "row")
    except (RuntimeError, NotImplementedError):  # an operation of f without a forward-mode formula
        probe = probe_vector(pattern, pattern.shape[0], x, "rows")
        return checked(J, lambda w: _vjp_by_autograd(f, point, w), probe, False, "column")


def _vjp_by_autograd(f: Callable, point: torch.Tensor, cotangent: torch.Tensor) -> torch.Tensor:
    """w^T J at `point` by torch.autograd (as `_reverse`; torch.func.vjp refuses autograd Functions
    written without setup_context)."""
    with torch.enable_grad():
        leaf = point.detach().clone().requires_grad_(True)
        y = f(leaf.clone())  # a copy: f may update its input in place (a leaf may not be)
        if not y.requires_grad:
            return torch.zeros_like(point)
        grad = torch.autograd.grad(y, leaf, cotangent, allow_unused=True)[0]
    return torch.zeros_like(point) if grad is None else grad


def _scalar_valued(f: Callable) -> Callable:
    """f, raising our own error when it returns no scalar (torch.func.grad's would be foreign)."""
    def scalar_f(*args):
        y = f(*args)
        if not isinstance(y, torch.Tensor) or y.ndim != 0:
            got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
            raise InputError(f"the Hessian needs f to return a scalar (0-d) tensor, got {got}")
        return y
    return scalar_f
