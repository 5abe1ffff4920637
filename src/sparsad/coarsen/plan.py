"""Per-signature plans: trace once, record every call, elevate/differentiate/compile once per record shape.

A ``Plan`` belongs to one call signature (tensor shapes and dtypes, values of the other
arguments).  It holds the SSA graph and the recording primal.  Elevations depend on the record
only through their ``assumptions`` (trip counts of unrolled loops); closed forms read trip
counts and decisions as run-time parameters, so one compiled adjoint serves every run.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Callable

from sparsad.coarsen.budget import in_background, symbolic_stage
from sparsad.coarsen import ssa
from sparsad.coarsen.adjoint import AdjointProgram, differentiate
from sparsad.coarsen.codegen import compile_source, generate_source, jax_namespace, torch_namespace
from sparsad.coarsen.elevate import Elevation, elevate
from sparsad.coarsen.frontend import CoarsenUnsupported, trace
from sparsad.coarsen.guards import Unkeyable, fingerprint
from sparsad.coarsen.record import Record, instrument


MAX_UNROLLED_VARIANTS = 8  # distinct recorded trip counts of unrolled loops before giving up
FAST_PRIMAL_AFTER = 2      # without background compilation, the Numba primal is compiled at this call


class CoarsenFallbackWarning(UserWarning):
    """Coarsening could not handle a function; plain autograd is used (the message says why)."""


@dataclass
class Compiled:
    program: AdjointProgram
    source: str
    fn: Callable
    verified: bool = False


@dataclass
class Plan:
    fn: Callable
    graph: ssa.Graph
    run: Callable                       # recording primal: args -> (outputs, record)
    max_segment: int
    closed_forms: bool
    elevations: list = field(default_factory=list)
    compiled: dict = field(default_factory=dict)
    use_numba: bool = True
    sites: list = field(default_factory=list)   # the recorded sites (loops, then traced ifs)
    primal_calls: int = 0
    symbolic_cpu: list = field(default_factory=lambda: [0.0])  # CPU seconds spent on symbolic work (budget.py)
    fast_primal: object = None  # NumbaPrimal once compiled and checked; a str saying why not; None: not yet
    pending_primal: object = None  # NumbaPrimal being compiled (by a child process), not checked yet
    pending: dict = field(default_factory=dict)  # symbolic steps running in the background (budget.in_background)

    def current(self) -> bool:
        """Whether every global, closure value and attribute the trace read still has its content."""
        guards = self.graph.guards
        return guards is None or guards.hold()

    @property
    def needs_record(self) -> bool:
        """Trip counts of ``while`` loops and decisions of traced ``if``s only exist at run time."""
        return bool(self.graph.branch_sites) or any(loop.trip is None or loop.break_site is not None
                                                    for loop in self.graph.loops)

    def recorded(self, args: tuple, backend: str) -> Record:
        """The record of one run of the primal on ``args`` (its outputs are not needed).

        On CPU float64 torch tensors the primal is compiled with Numba (``numba_primal``): by a
        child process started at the first call (``tiers``; meanwhile the eager recording primal
        runs under ``no_grad``), or in this process at the ``FAST_PRIMAL_AFTER``-th call when
        compiling in the background is switched off.  Either way it is checked once against the
        eager recording primal before any call uses it.
        """
        if backend != "torch":
            return self.run(*args)[1]
        import torch

        self.primal_calls += 1
        fast = self.fast_primal
        if fast is None and self.use_numba:
            fast, record = self._tier_up(args)
            self.fast_primal = fast
            if record is not None:
                return record
        if fast is not None and not isinstance(fast, str):
            if all(a.device.type == "cpu" for a in args if isinstance(a, torch.Tensor)):
                result = fast(args)
                if result is not None:
                    return result[1]
        with torch.no_grad():
            return self.run(*[a.detach() if isinstance(a, torch.Tensor) else a for a in args])[1]

    def _tier_up(self, args: tuple):
        """(NumbaPrimal, eager record) when the Numba primal is ready and agrees with the eager one on
        ``args``; (reason, None) when it cannot be; (None, None) while it is not ready yet."""
        import numpy as np
        import torch

        from sparsad.coarsen import numba_primal, tiers

        fast = self.pending_primal
        if fast is None:
            background = tiers.background()
            if not background and self.primal_calls < FAST_PRIMAL_AFTER:
                return None, None
            reason = numba_primal.eligible(args)
            if reason is not None:
                return reason, None
            try:
                fast = numba_primal.NumbaPrimal(self.fn, self.sites, background=args if background else None)
            except ImportError as why:
                return f"Numba is not available ({why})", None
            except Exception as why:  # translation failed: keep the eager primal
                return _not_compiled(why), None
            self.pending_primal = fast
        ready = fast.ready()
        if ready is None:
            return None, None          # (the child is still compiling)
        self.pending_primal = None
        if not ready:
            return "not compiled with Numba: the compilation failed", None
        try:
            result = fast(args)
        except Exception as why:  # Numba typing failed: keep the eager primal
            return _not_compiled(why), None
        with torch.no_grad():
            outputs, record = self.run(*[a.detach() if isinstance(a, torch.Tensor) else a for a in args])
        if result is None:
            return "the Numba primal's event log overflowed", record
        got, fast_record = result
        if fast_record.loops != record.loops or fast_record.branches != record.branches:
            return "the Numba primal recorded other trip counts or decisions than the eager primal", record
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        gots = got if isinstance(got, tuple) else (got,)
        for o, g in zip(outs, gots):
            o = o.detach().numpy()
            g = np.asarray(g, dtype=np.float64)
            if o.shape != g.shape or not np.allclose(g, o, rtol=1e-9, atol=1e-12 * max(1.0, float(np.nanmax(np.abs(o), initial=0.0))),
                                                     equal_nan=True):
                return "the Numba primal's outputs differ from the eager primal's", record
        return fast, record

    def elevation(self, record: Record | None) -> Elevation:
        """The first elevation whose assumptions the record meets; a new one (``budget.in_background``:
        bounded by the call's wall deadline) when none does."""
        while True:
            for elev in self.elevations:
                if record is not None and all(_holds(record, a) for a in elev.assumptions):
                    return elev
                if record is None and not elev.assumptions:
                    return elev
            if len(self.elevations) >= MAX_UNROLLED_VARIANTS:
                raise CoarsenUnsupported(
                    f"a loop without closed form changes its trip count from call to call "
                    f"({MAX_UNROLLED_VARIANTS} unrolled variants compiled already)")
            started = "elevation" in self.pending  # (made for an earlier call's record: check it again)
            elev = in_background(self.pending, "elevation", lambda: self._elevate(record))
            self.elevations.append(elev)
            if not started:
                return elev

    def _elevate(self, record: Record | None) -> Elevation:
        with symbolic_stage("elevation", account=self.symbolic_cpu):
            return elevate(self.graph, record, self.max_segment, self.closed_forms)

    def adjoint(self, elev: Elevation, wrt: tuple[int, ...], backend: str, like) -> Compiled:
        key = (id(elev), wrt, backend, str(getattr(like, "dtype", "")), str(getattr(like, "device", "")))
        if key not in self.compiled:
            self.compiled[key] = in_background(self.pending, key,
                                               lambda: self._compile_adjoint(elev, wrt, backend, like))
        return self.compiled[key]

    def _compile_adjoint(self, elev: Elevation, wrt: tuple[int, ...], backend: str, like) -> Compiled:
        with symbolic_stage("differentiation", account=self.symbolic_cpu):
            program = differentiate(elev, list(wrt))
            name = f"adjoint_{self.graph.name}"
            source = generate_source(program, name, backend)
        ns = torch_namespace(program, like) if backend == "torch" else jax_namespace(program, like.dtype)
        fn = compile_source(source, name, ns)
        if backend == "torch" and getattr(like.device, "type", "cpu") == "cpu" and self.use_numba:
            fn = _numba_or(fn, program, name, wrt)
        return Compiled(program, source, fn)


def _numba_or(torch_fn: Callable, program: AdjointProgram, name: str, wrt) -> Callable:
    """The adjoint with torch in and out: the generated torch code until the Numba-compiled adjoint is
    ready and checked against it (compiled by a child process, ``tiers``), then the Numba one."""
    try:
        import numpy as np
        import torch

        from sparsad.coarsen import numba_backend, tiers
        from sparsad.coarsen.numba_primal import numba_value as value
    except ImportError:
        return torch_fn
    n_in, n_par = len(program.inputs), len(program.params)
    state = {"fn": None, "jitted": None, "child": None, "check": None}
    Tensor, from_numpy, contiguous, ndarray = torch.Tensor, torch.from_numpy, np.ascontiguousarray, np.ndarray

    def adopt(jitted, values: list, expected: list) -> None:
        """Use ``jitted`` from now on if it gives one call's torch-code gradients on that call's arguments."""
        try:
            result = jitted(*values)
            agree = len(result) == len(expected) and all(_close(np.asarray(r, dtype=np.float64), e)
                                                          for r, e in zip(result, expected))
        except Exception:  # Numba cannot type the program (or the cache is unusable): the torch code stays
            agree = False
        state["jitted"] = jitted if agree else None
        state["fn"] = jitted if agree else torch_fn

    def start(args, grads) -> None:
        """At the first call: compile tier 1, in a child process (or here when that is switched off)."""
        values = [np.array(v, copy=True) if isinstance(v, ndarray) else v
                  for v in numba_backend.to_numba_args(args[:n_in], args[n_in:n_in + n_par], args[n_in + n_par:])]
        expected = [grads[i].detach().numpy().copy() if isinstance(grads[i], Tensor) else np.asarray(grads[i])
                    for i in wrt]
        state["check"] = (values, expected)
        try:
            _source, path, module_name = numba_backend.numba_module(program, name, list(wrt))
        except Exception:  # no private cache directory: compile in memory, here
            adopt(numba_backend.compile_numba(program, name, list(wrt))[1], values, expected)
            return
        if not tiers.background():
            adopt(getattr(numba_backend.load_module(path, module_name), name), values, expected)
            return
        try:
            state["child"] = (tiers.start(path, module_name, name, values), path, module_name)
        except Exception:  # (no child process possible) compile here
            adopt(getattr(numba_backend.load_module(path, module_name), name), values, expected)

    def poll() -> None:
        """When the child has finished: load the compiled code from its cache and check it."""
        child, path, module_name = state["child"]
        if not child.done():
            return
        child.finish()
        state["child"] = None
        if not child.succeeded() or child.warm_failed:  # (loading it here would compile it in this call)
            state["fn"] = torch_fn
            return
        try:
            jitted = getattr(numba_backend.load_module(path, module_name), name)
        except Exception:
            state["fn"] = torch_fn
            return
        adopt(jitted, *state["check"])

    def run(*args):
        if state["fn"] is None and state["child"] is not None:
            poll()
        fn = state["fn"]
        jitted = state["jitted"]
        if fn is jitted and jitted is not None:
            # the steady state, inlined: tensors as NumPy views (0-d ones and seeds as floats)
            values = []
            for k, a in enumerate(args):
                if isinstance(a, Tensor):
                    values.append(value(a, a.dim() == 0))
                elif n_in <= k < n_in + n_par and type(a) is bool:
                    values.append(float(a))
                else:
                    values.append(a)
            result = jitted(*values)
            out = [None] * n_in
            for i, r in zip(wrt, result):
                out[i] = from_numpy(contiguous(r)) if isinstance(r, ndarray) else r
            return tuple(out)
        grads = torch_fn(*args)
        if fn is None and state["child"] is None and state["check"] is None and all(
                a.device.type == "cpu" for a in args if isinstance(a, Tensor)):
            start(args, grads)
            if state["jitted"] is not None:  # compiled here (not in a child) and checked: use it already
                return run(*args)
        return grads

    def direct():
        """The jitted adjoint (NumPy/float arguments, the wanted gradients out) once it is in use."""
        if state["fn"] is None and state["child"] is not None:
            poll()
        return state["jitted"]

    def settled() -> bool:
        """Whether the tier is decided (the Numba adjoint in use, or the torch code for good)."""
        if state["fn"] is None and state["child"] is not None:
            poll()
        return state["fn"] is not None

    run.direct = direct
    run.settled = settled
    return run


def _close(got, expected) -> bool:
    """Two tiers' gradients agree (to rounding) in shape and values (float32 ones as the check
    against autograd accepts them)."""
    import numpy as np

    single = np.asarray(expected).dtype == np.float32
    expected = np.asarray(expected, dtype=np.float64)
    try:  # (either tier may return a broadcastable scalar; calls fit gradients to their argument)
        np.broadcast_shapes(got.shape, expected.shape)
    except ValueError:
        return False
    scale = max(1.0, float(np.nanmax(np.abs(expected), initial=0.0)))
    if single:
        return bool(np.allclose(got, expected, rtol=0.0, atol=1e-3 * scale, equal_nan=True))
    return bool(np.allclose(got, expected, rtol=1e-9, atol=1e-12 * scale, equal_nan=True))


def _not_compiled(why: Exception) -> str:
    text = str(why).splitlines()[0] if str(why) else ""
    return f"not compiled with Numba: {type(why).__name__}: {text}"


def param_values(elev: Elevation, record: Record | None) -> list:
    """Run-time values of the elevation's parameters, read from the record."""
    values = []
    for p in elev.params:
        if p.kind == "branch":
            values.append(record.decision(p.site, p.path, p.entry))
        else:
            n, broke = record.completed(p.site, p.path, p.entry)
            values.append(n if p.kind == "trips" else broke)
    return values


def _holds(record: Record, assumption) -> bool:
    kind, (site, path, entry), value = assumption
    try:
        return record.completed(site, path, entry) == value
    except KeyError:
        return False


def signature(args: tuple) -> tuple:
    """Tensor shapes and dtypes, and the *content* of every other argument (never its identity).

    Raises ``Unkeyable`` for an argument whose content cannot be fingerprinted.
    """
    sig = []
    for a in args:
        shape = getattr(a, "shape", None)
        if shape is not None and hasattr(a, "dtype") and not _is_numpy_scalar(a):
            library = type(a).__module__.split(".")[0]
            sig.append(("T", library, tuple(shape), str(a.dtype), str(a.device) if library == "torch" else ""))
        else:
            sig.append(("S", fingerprint(a)))
    return tuple(sig)


def _is_numpy_scalar(a) -> bool:
    import numpy as np
    return isinstance(a, np.generic)


def build_plan(fn: Callable, args: tuple, max_segment: int, closed_forms: bool) -> Plan:
    spent = [0.0]  # CPU seconds of symbolic work on this plan (trace, elevations, adjoints): budget.py
    with symbolic_stage("trace", account=spent):
        graph = trace(fn, args)
    sites = [loop.site for loop in graph.loops] + list(graph.branch_sites)
    return Plan(fn, graph, instrument(fn, sites), max_segment, closed_forms, sites=sites, symbolic_cpu=spent)


def fallback_warning(fn: Callable, why: Exception | str) -> None:
    """One-line warning naming the user's file and line (the warning is attributed to that line)."""
    text = str(why).splitlines()[0] if str(why) else type(why).__name__
    if isinstance(why, Exception) and not isinstance(why, (CoarsenUnsupported, NotImplementedError)):
        text = f"internal error {type(why).__name__}: {text} (please report it)"
    code = getattr(fn, "__code__", None)
    filename = code.co_filename if code is not None else "<unknown>"
    match = re.match(r"line (\d+): ", text)
    line = int(match.group(1)) if match else (code.co_firstlineno if code is not None else 0)
    text = text[match.end():] if match else text
    message = (f"sparsad.coarsen: {getattr(fn, '__name__', fn)} falls back to plain autograd: "
               f"{filename}:{line}: {text}")
    module = getattr(fn, "__module__", None) or "sparsad.coarsen"
    warnings.warn_explicit(message, CoarsenFallbackWarning, filename, line, module=module)
