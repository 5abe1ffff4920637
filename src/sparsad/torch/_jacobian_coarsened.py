"""The coarsened half of `sparsad.torch.jacobian`: compressed VJPs from coarsening's compiled gradient of
sum(w * f(x)) (one call per row colour), and the structural pattern of f read off coarsening's graph.

Coarsening traces f into a graph that holds while its guards do (every value the trace read is
unchanged), and serves compiled code for exactly that graph. `sparsad.coarsen.dependencies` reads
from the graph, for every output, the inputs it can depend on: a superset of the Jacobian's
nonzeros at every x while the guards hold. So

* a given pattern that holds that structure needs no probe product: the fact is worked out once
  per (plan, pattern) and asked of the plan that served each call (a guard miss serves another plan,
  whose structure is worked out anew: a stale "proven" is never reused);
* pattern=None takes that structure as the pattern (no dense Jacobians: it works at n = 10^6).

A call whose products come from one plan's ready-made compiled call takes the steady path
(`Steady`): everything that depends only on (f, pattern, x's signature) is kept, so the call checks
x, runs the compiled gradient once per colour and gathers the entries.

Example:
    >>> import torch, sparsad.torch as st
    >>> def f(x):
    ...     return x[1:] * x[:-1]
    >>> st.jacobian(f, torch.arange(1.0, 5.0, dtype=torch.float64), mode="coarsen").to_dense()
    tensor([[2., 1., 0., 0.],
            [0., 3., 2., 0.],
            [0., 0., 4., 3.]], dtype=torch.float64)
"""
from __future__ import annotations

import math
import os
import re
import types
import warnings
import weakref
from typing import Callable

import numpy as np
import torch

from sparsad.errors import ShapeError
from sparsad.ops.colouring import compression_plan
from sparsad.ops.pattern import CSRPattern
from sparsad.torch.matrix import SparseMatrix

#: mode="auto" takes coarsening's compiled products for a Python function f from this many earlier
#: calls with the same f, x's shape/dtype/device and pattern rows on (see `hot`).
AUTO_COARSEN_AFTER = 2

#: mode="auto": wall seconds a call waits for coarsening's symbolic work (tracing, differentiating)
#: before it goes on in the background; that call's products come from autograd meanwhile.
AUTO_COARSEN_WAIT_S = 0.05

AUTO_TABLE = 64
COARSENED_FUNCTIONS = 16
STRUCTURES_KEPT = 16  # (a structure at n = 10^6 holds 5M entries: about 40 MB)

NOT_READY = object()  # `products` in mode "auto": coarsening's compiled code is not ready yet

_CALLS: dict = {}  # (f, signature) -> calls seen in mode "auto" (the AUTO_TABLE used last)

#: f -> its `State`, for the COARSENED_FUNCTIONS functions used last. Held strongly (the wrapper
#: refers to f anyway, so weak keys would never be dropped), hence the bound.
_COARSENED: dict = {}

#: id(plan) -> (weak reference to the plan, its structure (scipy CSR) or None, its CSRPattern or None)
_STRUCTURES: dict = {}

#: (f, id(pattern)) -> Steady, for calls served by one plan's compiled code (pattern None: detected)
_STEADY: dict = {}


class State:
    """Coarsening of one f: its weighted sum sum(w * f(x)), that sum's gradient function, and the
    signatures coarsening refused or served."""

    def __init__(self, f: Callable):
        import sparsad.coarsen as coarsen

        def weighted_sum(x, w):
            y = f(1 * x)  # f gets a tensor of its own (autograd's leaf stays unchanged)
            if y.shape != w.shape:  # (static while tracing: a traced f whose y would broadcast is refused)
                raise ShapeError("f's output does not have the pattern's rows")
            return torch.sum(w * y)

        weighted_sum.__name__ = weighted_sum.__qualname__ = f"weighted_sum_of_{f.__name__}"
        self.coarse = coarsen.Coarsened(weighted_sum)
        self.gradient = coarsen.grad(self.coarse, argnums=0)
        self.refused: set = set()
        self.served: set = set()
        self.untold: dict = {}  # signature -> why coarsening refused f while detecting its pattern (not told yet)


def state_of(f: Callable) -> State:
    state = _COARSENED.pop(f, None) or State(f)
    _COARSENED[f] = state  # (the most recently used last)
    if len(_COARSENED) > COARSENED_FUNCTIONS:
        _COARSENED.pop(next(iter(_COARSENED)), None)
    return state


def signature(x: torch.Tensor, rows: int) -> tuple:
    return (x.shape, x.dtype, x.device, rows)


def hot(f: Callable, x: torch.Tensor, pattern: CSRPattern) -> bool:
    """Whether mode "auto" coarsens f: a plain Python function on CPU, called with this signature more
    than AUTO_COARSEN_AFTER times (one-off calls never pay for tracing and compiling), and not
    refused by coarsening before (it warned once, naming f's line)."""
    if not isinstance(f, types.FunctionType) or x.device.type != "cpu":
        return False
    key = signature(x, pattern.shape[0])
    state = _COARSENED.get(f)
    if state is not None:
        if key in state.refused:
            return False
        if key in state.served:
            return True
    seen = _CALLS.pop((f, key), 0) + 1
    _CALLS[(f, key)] = seen  # (the most recently used last)
    if len(_CALLS) > AUTO_TABLE:
        _CALLS.pop(next(iter(_CALLS)), None)
    return seen > AUTO_COARSEN_AFTER


# -- the structure of f from coarsening's graph ----------------------------------------------------

def _weighted_output(graph):
    """(f's output node, x's input node) of the traced sum(w * f(x)), or None for any other form."""
    from sparsad.coarsen import ssa

    if graph.tuple_output or len(graph.outputs) != 1 or not isinstance(graph.outputs[0], ssa.Reduce):
        return None
    product = graph.outputs[0].arg
    if not isinstance(product, ssa.Op) or product.op != "mul" or len(product.args) != 2:
        return None
    inputs = {node.index: node for node in graph.inputs}
    x, w = inputs.get(0), inputs.get(1)
    if x is None or w is None:
        return None
    first, second = product.args
    y = second if first is w else first if second is w else None
    if y is None or len(y.shape) != 1 or y.shape != w.shape:
        return None
    return y, x


def _structure_entry(plan) -> tuple:
    entry = _STRUCTURES.get(id(plan))
    if entry is not None and entry[0]() is plan:
        return entry
    from sparsad.coarsen.dependencies import dependencies

    found = _weighted_output(plan.graph)
    structure = None if found is None else dependencies(*found)
    if len(_STRUCTURES) >= STRUCTURES_KEPT:
        _STRUCTURES.clear()
    key = id(plan)

    def forget(ref):  # the plan is gone (coarsening keeps a few per signature): so is its structure
        if _STRUCTURES.get(key, (None,))[0] is ref:
            _STRUCTURES.pop(key, None)

    entry = _STRUCTURES[key] = (weakref.ref(plan, forget), structure, None)
    return entry


def plan_pattern(plan) -> CSRPattern | None:
    """The structural pattern (rows of f's output x entries of x) of the graph `plan` serves, or
    None where the analysis has no rule for some operation; worked out once per plan, one
    CSRPattern object per plan (its colourings are kept on it)."""
    entry = _structure_entry(plan)
    if entry[2] is None and entry[1] is not None:
        entry = _STRUCTURES[id(plan)] = (entry[0], entry[1], CSRPattern.from_scipy(entry[1], name="structure"))
    return entry[2]


def proven(plan, pattern: CSRPattern) -> bool:
    """Whether `pattern` holds every structural nonzero of the graph `plan` serves (kept on the
    pattern per plan; a plan that is gone never answers for its successor)."""
    cache = pattern.__dict__.setdefault("_structure_proofs", {})
    entry = cache.get(id(plan))
    if entry is not None and entry[0]() is plan:
        return entry[1]
    structure = plan_pattern(plan)
    verdict = structure is not None and pattern.holds(structure)
    if len(cache) >= STRUCTURES_KEPT:
        cache.clear()
    cache[id(plan)] = (weakref.ref(plan), verdict)
    return verdict


def structural_pattern(f: Callable, x: torch.Tensor, rows: int, mode: str, dense_refused: bool) -> CSRPattern | None:
    """pattern=None: the structure of f's coarsened graph for x's signature (traced now if needed), or
    None where coarsening refuses f, its graph has an operation without a rule, or the trace is still
    going on after the call's wait (then the caller detects densely). `dense_refused`: dense detection
    is too large here, so the trace is waited for."""
    from sparsad.coarsen import CoarsenFallbackWarning, budget
    from sparsad.coarsen.budget import Deferred

    if (not isinstance(f, types.FunctionType) or x.device.type != "cpu" or x.layout != torch.strided
            or torch._C._functorch.is_functorch_wrapped_tensor(x)):
        return None
    state = state_of(f)
    key = signature(x, rows)
    if key in state.refused or key in state.untold:
        return None
    wait = math.inf if dense_refused else (None if os.environ.get("SPARSAD_COARSEN_WAIT_S") else AUTO_COARSEN_WAIT_S)
    point = x.detach()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CoarsenFallbackWarning)
        with budget.call_deadline(wait):
            try:
                plan = state.coarse.plan((point, torch.zeros(rows, dtype=x.dtype, device=x.device)))
            except Deferred:
                plan = False
            except Exception:  # (the machinery failed: dense detection as before)
                plan = False
    for warning in caught:
        if issubclass(warning.category, CoarsenFallbackWarning):  # told when f would be coarsened (`products`)
            state.untold.setdefault(key, str(warning.message))
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    if plan is None:
        state.untold.setdefault(key, "coarsening refused it")
    if not plan:
        return None
    pattern = plan_pattern(plan)
    if pattern is None or pattern.shape != (rows, x.shape[0]):
        return None
    return pattern


# -- the compressed products -----------------------------------------------------------------------

def refused(f: Callable, message: str, mode: str = "coarsen") -> None:
    """Coarsening's fallback warning, attributed to f's line: coarsening names the wrapper it traced
    (in this file) with the line number of the construct it refused, which is f's when it lies in
    f's source, else (a construct of the wrapper, or of a helper elsewhere) f's first line is named."""
    from sparsad.coarsen import CoarsenFallbackWarning

    code = getattr(f, "__code__", None)
    filename = code.co_filename if code is not None else "<unknown>"
    first = code.co_firstlineno if code is not None else 0
    last = max((line for _, _, line in code.co_lines() if line is not None), default=first) if code else first
    match = re.search(r":(\d+): (.*)$", message)
    line, reason = (int(match.group(1)), match.group(2)) if match else (first, message)
    if not first <= line <= last:
        line = first
    warnings.warn_explicit(f"sparsad.torch.jacobian(mode={mode!r}): {getattr(f, '__name__', 'f')} is not coarsened "
                           f"({filename}:{line}: {reason}); compressed autograd VJPs instead",
                           CoarsenFallbackWarning, filename, line)


def colour_seeds(pattern: CSRPattern, colours: np.ndarray, x: torch.Tensor) -> list[torch.Tensor]:
    """Each row colour's seed as a tensor of its own (a row of the stacked seeds would be a new view
    object per call, which coarsening's calls convert to NumPy again); never handed to user code."""
    cache = pattern.__dict__.setdefault("_torch_colour_seeds", {})
    key = (x.dtype, x.device)
    if key not in cache:
        n_colours = int(colours.max()) + 1 if colours.size else 0
        colour_t = torch.as_tensor(colours, device=x.device)
        seeds = (colour_t[None, :] == torch.arange(n_colours, device=x.device)[:, None]).to(x.dtype)
        cache[key] = [seed.clone() for seed in seeds]
    return cache[key]


def _assembled(pattern: CSRPattern, rows: list, positions: torch.Tensor) -> SparseMatrix:
    """The stored entries read off the compressed VJPs (rows: one per colour, laid out colour-major)."""
    # index_select, not `flat[index]`: advanced indexing enters a parallel region even for a few
    # thousand entries, which under load waits for a descheduled worker thread (measured 20 ms per call)
    return SparseMatrix._wrap(pattern, torch.cat(rows).index_select(0, positions))


def _positions(pattern: CSRPattern, gather: np.ndarray, x: torch.Tensor) -> torch.Tensor:
    from sparsad.torch.linalg import _index

    return _index(gather, x.device, pattern, "gather_reverse")


class Steady:
    """A call served by one plan's ready-made compiled gradient, kept for (f, pattern): the next call
    with the same pattern object and x's shape/dtype on CPU runs the compiled gradient once per colour
    (and the probe's only while the serving plan's structure is not proven inside the pattern)."""

    __slots__ = ("pattern", "shape", "dtype", "check", "detected", "gradient", "seeds", "probing_seeds",
                 "probe", "positions", "proven_last")

    def __init__(self, pattern, x, check, detected, gradient, seeds, probe, positions, proven_last):
        self.pattern, self.shape, self.dtype = pattern, x.shape, x.dtype
        self.check, self.detected, self.gradient = check, detected, gradient
        self.seeds, self.probe, self.positions = seeds, probe, positions
        self.probing_seeds = seeds + [probe] if probe is not None else seeds
        self.proven_last = proven_last

    def __call__(self, x: torch.Tensor, check: bool) -> SparseMatrix | None:
        """J, or None where this call is not the steady state (the general path then runs)."""
        if (x.shape != self.shape or x.dtype is not self.dtype or not x.is_cpu or check is not self.check
                or x.layout is not torch.strided or (x.requires_grad and torch.is_grad_enabled())
                or torch._C._functorch.is_functorch_wrapped_tensor(x)):
            return None
        point = x.detach() if x.requires_grad else x
        probing = check and not self.proven_last
        seeds = self.probing_seeds if probing else self.seeds
        served = self.gradient.batch((point, seeds[0]), 1, seeds, ready_only=True)
        if served is None:
            return None
        rows, plan = served
        pattern = self.pattern
        proof = proven(plan, pattern) if (check or self.detected) else True
        self.proven_last = proof
        if self.detected and not proof:  # another graph serves now: its structure is detected afresh
            return None
        J = _assembled(pattern, rows[:len(self.seeds)], self.positions)
        if proof:
            return J
        if not probing:  # another plan serves now, its structure not inside the pattern: probe it
            served = self.gradient.batch((point, self.probe), 1, [self.probe], ready_only=True)
            if served is None:
                return None
            rows = served[0]
        from sparsad.torch._probe import checked

        return checked(J, lambda _: rows[-1], self.probe, False, "column")


def steady(f: Callable, pattern_arg) -> Steady | None:
    """The steady state kept for f with this pattern argument (a CSRPattern, SparseMatrix or None)."""
    if type(f) is not types.FunctionType:  # (only functions are coarsened; other callables may not hash)
        return None
    if type(pattern_arg) is SparseMatrix:
        pattern_arg = pattern_arg._pattern
    elif pattern_arg is not None and type(pattern_arg) is not CSRPattern:
        return None  # (SciPy matrices and dense tensors may change in place: converted every call)
    entry = _STEADY.get((f, id(pattern_arg)))
    if entry is None or (pattern_arg is not None and entry.pattern is not pattern_arg):
        return None
    return entry


def _keep_steady(f: Callable, pattern_arg, entry: Steady) -> None:
    if type(pattern_arg) is SparseMatrix:
        pattern_arg = pattern_arg._pattern
    elif pattern_arg is not None and type(pattern_arg) is not CSRPattern:
        return
    if len(_STEADY) >= AUTO_TABLE:
        _STEADY.pop(next(iter(_STEADY)), None)
    _STEADY[(f, id(pattern_arg))] = entry


def products(f: Callable, x: torch.Tensor, pattern: CSRPattern, check: bool, mode: str = "coarsen",
             pattern_arg=None, detected: bool = False):
    """J from compressed VJPs of coarsening's gradient of sum(w * f(x)), generated symbolically and
    compiled once per signature, called once per row colour with that colour's seed as w. Coarsening
    guards every value the trace read (f's code and defaults, its globals and closure cells, by
    content or identity), so a changed f or a changed value it reads gives a new trace, never a
    stale result. None when coarsening refuses f (after a warning naming f's line): the caller takes
    compressed autograd VJPs instead. With `check`, J is checked by one more call with a probe vector
    (`_probe.checked`) unless the serving plan's structure is proven inside the pattern.

    mode "auto" takes only the compiled products: until coarsening's code is ready for this
    signature, each call makes one gradient call (which traces, starts the compile, or checks the
    compiled code) and returns NOT_READY, and the caller takes its own batched VJPs."""
    from sparsad.coarsen import CoarsenFallbackWarning
    from sparsad.torch._probe import checked, probe_vector

    if not isinstance(f, types.FunctionType):
        refused(f, f"mode='coarsen' needs a Python function, got {type(f).__name__}", mode)
        return None
    state = state_of(f)
    key = signature(x, pattern.shape[0])
    if key in state.refused:
        return None
    if key in state.untold:  # refused while its pattern was detected: said now, once
        refused(f, state.untold.pop(key), mode)
        state.refused.add(key)
        return None
    colours, gather = compression_plan(pattern, "reverse")
    seeds = colour_seeds(pattern, colours, x)
    probe = probe_vector(pattern, pattern.shape[0], x, "rows") if check else None
    every = seeds + [probe] if check else seeds
    # x itself: the wrapper hands f a copy (`1 * x`) wherever f runs, and coarsening keeps a NumPy
    # view per tensor object (a fresh detached tensor per call would need a new one)
    point = x.detach() if x.requires_grad else x
    coarse, gradient = state.coarse, state.gradient
    served = gradient.batch((point, seeds[0]), 1, every, ready_only=True) if key in state.served else None
    plan = None
    if served is not None:
        rows, plan = served
    else:
        disabled = len(coarse._disabled)
        warming = mode == "auto" and not gradient.ready((point, seeds[0]))
        rows = []
        with warnings.catch_warnings(record=True) as caught:  # (coarsening warns once per signature it refuses)
            warnings.simplefilter("always", CoarsenFallbackWarning)
            try:
                for seed in every[:1] if warming else every:
                    rows.append(gradient(point, seed))
                    if len(coarse._disabled) > disabled:  # refused: its gradients came from plain autograd
                        break
            except Exception:  # f failed under autograd (e.g. its output does not fit the pattern's rows):
                return None    # reverse mode runs it again and raises the error in full
        for warning in caught:
            if issubclass(warning.category, CoarsenFallbackWarning):
                refused(f, str(warning.message), mode)
            else:
                warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        if len(coarse._disabled) > disabled:  # refused now, or the machinery failed later (it warned)
            state.refused.add(key)
            return None
        state.served.add(key)
        if warming:
            return NOT_READY
    positions = _positions(pattern, gather, x)
    J = _assembled(pattern, rows[:len(seeds)], positions)
    proof = plan is not None and (check or detected) and proven(plan, pattern)
    if plan is not None and (proof or not detected):
        _keep_steady(f, pattern_arg, Steady(pattern, x, check, detected, gradient, seeds, probe, positions, proof))
    if not check or proof:
        return J
    return checked(J, lambda _: rows[-1], probe, False, "column")
