"""Public entry points: ``symbolic``, ``grad``, ``explain``."""
from __future__ import annotations

import functools
import inspect
import struct
import types
from typing import Callable, Sequence

import numpy as np

from sparsad.coarsen import budget, numba_primal, ready
from sparsad.coarsen.budget import Deferred
from sparsad.coarsen.frontend import CoarsenUnsupported
from sparsad.coarsen.guards import Unkeyable, fingerprint
from sparsad.coarsen.plan import Plan, build_plan, fallback_warning, param_values, signature
from sparsad.errors import InputError

PLANS_PER_SIGNATURE = 8  # plans kept for one call signature (one per state of the globals they read)


class CoarsenInputError(InputError, TypeError):
    """Arguments ``coarsen.grad`` cannot differentiate (the message names the argument and the fix)."""


def _backend(args) -> str:
    """``torch`` or ``jax`` from the arguments' array types; ``numpy`` when only NumPy arrays are given."""
    numpy = False
    for a in args:
        module = type(a).__module__
        if module.startswith("torch"):
            return "torch"
        if module.startswith("jax") or module.startswith("jaxlib"):
            return "jax"
        if module.startswith("numpy") and hasattr(a, "shape") and getattr(a, "ndim", 0) > 0:
            numpy = True
    return "numpy" if numpy else "torch"


class Coarsened:
    """A function whose derivatives come from coarsening (see ``symbolic``, which makes one).

    >>> import torch
    >>> from sparsad.coarsen import Coarsened
    >>> def square_sum(x):
    ...     return (x * x).sum()
    >>> square_sum = Coarsened(square_sum)
    >>> x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    >>> square_sum(x).backward(); x.grad
    tensor([2., 4.], dtype=torch.float64)
    """

    def __init__(self, fn: Callable, max_segment: int = 30, closed_forms: bool = True, verify: bool = True,
                 numba: bool = True):
        self.fn = fn
        self.numba = numba
        self.max_segment = max_segment
        self.closed_forms = closed_forms
        self.verify = verify
        self._plans: dict = {}      # signature -> plans (newest last), each valid while its guards hold
        self._disabled: dict = {}
        self._unkeyable: set = set()
        self._pending: dict = {}    # traces running in the background (budget.in_background)
        functools.update_wrapper(self, fn)

    def __get__(self, obj, objtype=None):
        """Methods: ``obj.method(x)`` calls the coarsened function with ``obj`` first."""
        if obj is None:
            return self
        return types.MethodType(self, obj)

    def with_defaults(self, args: tuple) -> tuple:
        """``args`` followed by the defaults of the positional parameters not passed (read now: a plan's
        tensor inputs include tensors given as defaults, and its guards check the defaults' values)."""
        code = getattr(self.fn, "__code__", None)
        missing = code.co_argcount - len(args) if code is not None else 0
        defaults = getattr(self.fn, "__defaults__", None) or ()
        if missing <= 0 or missing > len(defaults):
            return args  # (a call missing arguments raises in the function itself)
        return tuple(args) + tuple(defaults[len(defaults) - missing:])

    def positional(self, args: tuple, kwargs: dict) -> tuple:
        """The call's arguments in parameter order (keywords and defaults filled in)."""
        if not kwargs:
            return self.with_defaults(args)
        try:
            bound = inspect.signature(self.fn).bind(*args, **kwargs)
        except TypeError as exc:
            raise CoarsenInputError(f"{getattr(self.fn, '__name__', 'f')}(): {exc}") from None
        bound.apply_defaults()
        if bound.kwargs:
            raise CoarsenUnsupported("keyword-only or **kwargs parameters are not supported")
        return tuple(bound.args)

    def plan(self, args: tuple) -> Plan | None:
        """The plan for ``args``' signature (traced now if none is current); None when the signature
        falls back.  Raises ``budget.Deferred`` while a trace goes on in the background."""
        args = self.with_defaults(args)
        try:
            sig = signature(args)
        except Unkeyable as why:
            reason = f"an argument is {why}; its content cannot be checked between calls"
            if reason not in self._unkeyable:
                self._unkeyable.add(reason)
                fallback_warning(self.fn, reason)
            return None
        if sig in self._disabled:
            return None
        plans = self._plans.setdefault(sig, [])
        for plan in reversed(plans):
            if plan.current():
                return plan
        try:
            plan = budget.in_background(self._pending, sig, lambda: build_plan(self.fn, args, self.max_segment,
                                                                                self.closed_forms))
            if not plan.current():  # traced in the background, and a value it read has changed since: again
                plan = budget.in_background(self._pending, sig, lambda: build_plan(self.fn, args, self.max_segment,
                                                                                    self.closed_forms))
                if not plan.current():
                    raise Deferred("the values the trace read keep changing")
        except Deferred:
            raise
        except Exception as why:  # unsupported constructs, and any failure of the machinery itself
            self.disable(args, why)
            return None
        plan.use_numba = self.numba
        plans.append(plan)
        if len(plans) > PLANS_PER_SIGNATURE:
            plans.pop(0)
        return plan

    def disable(self, args: tuple, why) -> None:
        sig = signature(self.with_defaults(args))
        if sig not in self._disabled:
            fallback_warning(self.fn, why)
        self._disabled[sig] = str(why)
        self._plans.pop(sig, None)

    def __call__(self, *args, **kwargs):
        backend = _backend(args + tuple(kwargs.values()))
        if backend == "numpy":
            return self.fn(*args, **kwargs)  # NumPy has no autograd to splice into
        try:
            call = self.positional(args, kwargs)
        except CoarsenUnsupported as why:
            fallback_warning(self.fn, why)
            return self.fn(*args, **kwargs)
        if backend == "torch" and not _strided(call):
            return self.fn(*call)
        with budget.call_deadline():
            try:
                plan = self.plan(call)
            except Deferred:  # (traced in the background meanwhile)
                return self.fn(*call)
            if plan is None:
                return self.fn(*call)
            try:
                if backend == "jax":
                    from sparsad.coarsen import jax_splice
                    return jax_splice.apply(self, plan, call)
                from sparsad.coarsen import torch_splice
                return torch_splice.apply(self, plan, call)
            except Deferred:
                return self.fn(*call)
            except Exception as why:  # the machinery failed: the user's function with plain autograd
                result = self.fn(*call)  # (an error of the user's own code propagates from here)
                self.disable(call, why)
                return result


def symbolic(fn: Callable | None = None, *, max_segment: int = 30, closed_forms: bool = True,
             verify: bool = True, numba: bool = True):
    """Decorator: ``.backward()`` / ``jax.grad`` of ``fn`` use its generated symbolic adjoint.

    ``max_segment`` is the SOI size limit L (operations per segment).  ``verify`` checks each
    newly compiled adjoint once against plain autograd.  ``numba`` compiles CPU torch adjoints
    with Numba (else they run as generated torch code).  Usable bare or with arguments.

    >>> import torch, sparsad.coarsen as coarsen
    >>> @coarsen.symbolic(max_segment=10)
    ... def energy(x):
    ...     return (x * torch.sin(x)).sum()
    >>> x = torch.tensor([0.0, 1.0], dtype=torch.float64, requires_grad=True)
    >>> energy(x).backward()
    >>> torch.allclose(x.grad, torch.sin(x) + x * torch.cos(x))
    True
    """
    if fn is None:
        return lambda f: symbolic(f, max_segment=max_segment, closed_forms=closed_forms, verify=verify, numba=numba)
    if isinstance(fn, types.MethodType) and not isinstance(fn.__func__, Coarsened):
        return types.MethodType(Coarsened(fn.__func__, max_segment, closed_forms, verify, numba), fn.__self__)
    return Coarsened(fn, max_segment, closed_forms, verify, numba)


def grad(fn: Callable, argnums: int | Sequence[int] | None = None, *, wrt: str | Sequence[str] | None = None,
         max_segment: int = 30, numba: bool = True) -> Callable:
    """Gradient function of a scalar-valued ``fn``; the primal runs only to record control flow.

    The arguments to differentiate are named by ``argnums`` (positions; default 0) or ``wrt``
    (parameter names), as in ``sparsad.grad``: an int or a name gives one gradient, a sequence of
    ``argnums`` a tuple in that order, a sequence of ``wrt`` names a dict by name.
    Straight-line functions skip the primal entirely (§3); functions with traced loops or
    branches run a recording primal without autograd.  Unsupported functions fall back to autograd.

    >>> import torch, sparsad.coarsen as coarsen
    >>> def f(x, w):
    ...     return (w * torch.exp(x)).sum()
    >>> x, w = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    >>> coarsen.grad(f, wrt="x")(x, w)
    tensor([1., 1.], dtype=torch.float64)
    >>> sorted(coarsen.grad(f, wrt=["x", "w"])(x, w))
    ['w', 'x']
    """
    if not callable(fn):
        raise CoarsenInputError(f"coarsen.grad needs a function, got {type(fn).__name__}")
    if isinstance(fn, types.MethodType):  # obj.method: the function, with the instance as its first argument
        return _bound_gradient(fn, argnums, max_segment, numba)
    coarse = fn if isinstance(fn, Coarsened) else Coarsened(fn, max_segment, numba=numba)
    by_name = None
    if wrt is not None:
        if argnums is not None:
            raise CoarsenInputError("coarsen.grad: give argnums= or wrt=, not both (both name the arguments "
                                    "to differentiate)")
        by_name = (wrt,) if isinstance(wrt, str) else tuple(wrt)
        argnums = _positions(coarse.fn, wrt)
    elif argnums is None:
        argnums = 0
    single = isinstance(argnums, int) and not isinstance(argnums, bool)
    try:
        nums = (argnums,) if single else tuple(argnums)
    except TypeError:
        raise CoarsenInputError(f"argnums must be an int or a sequence of ints, got {argnums!r}") from None
    if not nums or not all(isinstance(n, int) and not isinstance(n, bool) for n in nums):
        raise CoarsenInputError(f"argnums must be an int or a non-empty sequence of ints, got {argnums!r}")
    gradient = _gradient_function(fn, coarse, nums, single)
    if by_name is None or single:
        return gradient

    def gradient_by_name(*args, **kwargs):
        return dict(zip(by_name, gradient(*args, **kwargs)))

    gradient_by_name.__name__ = gradient.__name__
    return gradient_by_name


def value_and_grad(fn: Callable, argnums: int | Sequence[int] | None = None, *,
                   wrt: str | Sequence[str] | None = None, max_segment: int = 30, numba: bool = True) -> Callable:
    """Like ``grad``, but the function returns ``(fn(*args), gradient)``.

    The value comes from calling ``fn`` itself (the gradient's recording primal is not reused).

    >>> import torch, sparsad.coarsen as coarsen
    >>> def square_sum(x):
    ...     return (x * x).sum()
    >>> value, g = coarsen.value_and_grad(square_sum)(torch.tensor([1.0, 2.0], dtype=torch.float64))
    >>> float(value), g
    (5.0, tensor([2., 4.], dtype=torch.float64))
    """
    gradient = grad(fn, argnums, wrt=wrt, max_segment=max_segment, numba=numba)
    primal = fn.fn if isinstance(fn, Coarsened) else fn

    def value_and_gradient(*args, **kwargs):
        return primal(*args, **kwargs), gradient(*args, **kwargs)

    value_and_gradient.__name__ = f"value_and_grad_{getattr(fn, '__name__', 'f')}"
    return value_and_gradient


def _positions(fn: Callable, wrt: str | Sequence[str]) -> int | tuple[int, ...]:
    """``wrt`` parameter names as positions in ``fn``'s signature (an int for one name)."""
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        raise CoarsenInputError(f"coarsen.grad: wrt= needs a function with a signature; use argnums=") from None
    names = (wrt,) if isinstance(wrt, str) else tuple(wrt)
    if not names or not all(isinstance(n, str) for n in names):
        raise CoarsenInputError(f"wrt must be a parameter name or a non-empty sequence of names, got {wrt!r}")
    unknown = [n for n in names if n not in params]
    if unknown:
        raise CoarsenInputError(f"coarsen.grad: wrt={unknown} names no positional parameter of "
                                f"{getattr(fn, '__name__', 'f')}; its parameters are {params}")
    positions = tuple(params.index(n) for n in names)
    return positions[0] if isinstance(wrt, str) else positions


def _gradient_function(fn: Callable, coarse: "Coarsened", nums: tuple, single: bool) -> Callable:
    """The gradient function of ``grad`` for the argument positions ``nums`` (negative ones count from the end)."""
    fast: dict = {}  # signature -> (plan, ready-made call) (torch; straight-line code, or a Numba-recorded primal)
    n_params = getattr(getattr(coarse.fn, "__code__", None), "co_argcount", 0)  # (fewer passed: defaults fill in)

    def gradient(*args, **kwargs):
        if kwargs:
            try:
                args = coarse.positional(args, kwargs)
            except CoarsenUnsupported as why:
                raise CoarsenInputError(f"coarsen.grad: {why}; pass the arguments by position") from None
        key = _fast_key(args) if fast else None
        entry = fast.get(key) if key is not None else None
        if entry is not None and entry[0].current():  # (arguments like these were validated already)
            result = entry[1](args if len(args) >= n_params else coarse.with_defaults(args))
            if result is not _MISS:
                return result
        wanted = _check_argnums(args, nums, getattr(coarse.fn, "__name__", "f"))
        backend = _backend(args)
        if backend == "torch" and not _strided(args):  # (plans are for strided tensors: leave them alone)
            return _autodiff_gradient(coarse.fn, args, wanted, single, backend)
        full = coarse.with_defaults(args)  # (argnums count the arguments passed; the key, too)
        with budget.call_deadline():  # symbolic work past it goes on in the background: autograd meanwhile
            try:
                plan = coarse.plan(full)
                if plan is not None:
                    return _symbolic_gradient(coarse, plan, full, wanted, single, backend, fast, _fast_key(args))
            except Deferred:
                pass
            except Exception as why:  # unsupported, or the machinery failed: plain autograd
                result = _autodiff_gradient(coarse.fn, args, wanted, single, backend)
                coarse.disable(full, why)
                return result
        return _autodiff_gradient(coarse.fn, args, wanted, single, backend)

    def batch(args: tuple, position: int, values, ready_only: bool = False):
        """``[gradient(*args with args[position] = v) for v in values]`` (positional arguments; each v
        of the shape and dtype of ``args[position]``), the guards checked once for the whole batch:
        no user code runs between its calls (the ready-made call runs generated code only).

        ``ready_only``: ``(gradients, plan)`` when the ready-made call of one plan, whose guards hold,
        served every value (callers may rely on facts about that plan's graph), else None (nothing
        else runs)."""
        key = _fast_key(args) if fast else None
        entry = fast.get(key) if key is not None else None
        ready_call = entry[1] if entry is not None and len(args) >= n_params and entry[0].current() else None
        if ready_only and ready_call is None:
            return None
        many = getattr(ready_call, "many", None)
        calls = many(position) if many is not None and 0 <= position < len(args) else None
        if calls is not None:  # (the other arguments converted once for all values)
            out = calls(args, values)
            if out is not _MISS:
                return (out, entry[0]) if ready_only else out
        out, like = [], args[position]
        for value in values:
            call = args[:position] + (value,) + args[position + 1:]
            same = type(value) is type(like) and getattr(value, "shape", None) == getattr(like, "shape", None) \
                and getattr(value, "dtype", None) == getattr(like, "dtype", None)
            result = ready_call(call) if ready_call is not None and same else _MISS
            if result is _MISS and ready_only:
                return None
            out.append(gradient(*call) if result is _MISS else result)
        return (out, entry[0]) if ready_only else out

    def ready(args: tuple) -> bool:
        """Whether a call with ``args`` (positional) would run compiled code only: its signature has a
        ready-made call and every value the trace read is unchanged (a call may still go the general
        path, e.g. a tensor off the CPU)."""
        key = _fast_key(args) if fast else None
        entry = fast.get(key) if key is not None else None
        return entry is not None and len(args) >= n_params and entry[0].current()

    gradient.__name__ = f"grad_{getattr(fn, '__name__', 'f')}"
    gradient.batch = batch
    gradient.ready = ready
    return gradient


def _bound_gradient(method: types.MethodType, argnums, max_segment: int, numba: bool) -> Callable:
    """``grad`` of a bound method: the gradient of its function, called with the instance first
    (argument numbers count the method's own parameters, as the user sees them)."""
    def shift(n):
        return n + 1 if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else n

    shifted = shift(argnums) if isinstance(argnums, int) else tuple(shift(n) for n in argnums)
    inner = grad(method.__func__, shifted, max_segment=max_segment, numba=numba)
    owner = method.__self__

    def gradient(*args, **kwargs):
        return inner(owner, *args, **kwargs)

    gradient.__name__ = f"grad_{getattr(method, '__name__', 'f')}"
    return gradient


def _check_argnums(args: tuple, nums: tuple, name: str) -> tuple:
    """``argnums`` made non-negative, each naming a floating-point torch tensor or JAX array."""
    out = []
    for n in nums:
        k = n + len(args) if n < 0 else n
        if not 0 <= k < len(args):
            raise CoarsenInputError(f"coarsen.grad of {name}: argnums {n} is out of range for a call with "
                                    f"{len(args)} argument(s); use 0..{len(args) - 1}")
        a = args[k]
        module = type(a).__module__.split(".")[0]
        if module == "numpy":
            raise CoarsenInputError(f"coarsen.grad of {name}: argument {k} is a NumPy array, which has no autograd; "
                                    "pass torch.from_numpy(a) or jnp.asarray(a)")
        if module not in ("torch", "jax", "jaxlib") or not hasattr(a, "dtype"):
            raise CoarsenInputError(f"coarsen.grad of {name}: argument {k} is a {type(a).__name__}, not a tensor; "
                                    "gradients are taken with respect to floating-point torch tensors or JAX arrays")
        if "float" not in str(a.dtype) and "complex" not in str(a.dtype):
            raise CoarsenInputError(f"coarsen.grad of {name}: argument {k} has dtype {a.dtype}; gradients need a "
                                    "floating-point tensor (convert it with .double())")
        out.append(k)
    return tuple(out)


def _symbolic_gradient(coarse: Coarsened, plan: Plan, args, nums, single, backend, fast: dict, key):
    """The gradient from ``plan`` for ``args`` (defaults filled in); a ready-made call for later calls goes
    into ``fast`` under ``key`` (that of the arguments as passed: the fast path fills in the defaults)."""
    positions = {node.index: k for k, node in enumerate(plan.graph.inputs)}
    for n in nums:
        if n not in positions:
            raise CoarsenUnsupported(f"argument {n} is not a tensor")
    wrt = tuple(sorted(positions[n] for n in nums))
    tensors = [args[node.index] for node in plan.graph.inputs]
    first = plan.elevations[0] if plan.elevations else None
    needed = plan.needs_record and not (first is not None and _record_free(plan, first))
    record = plan.recorded(args, backend) if needed else None
    elev = plan.elevation(record)
    if len(elev.outputs) != 1 or plan.graph.outputs[0].shape != ():
        raise CoarsenUnsupported("grad needs a function with one scalar output")
    compiled = plan.adjoint(elev, wrt, backend, tensors[wrt[0]])
    params = param_values(elev, record)
    if backend == "torch":
        import torch
        from sparsad.coarsen.torch_splice import check_against_autograd, fit_gradient
        if coarse.verify and not compiled.verified:
            problem = check_against_autograd(plan, args, compiled, params, wrt, tensors)
            if problem is not None:
                raise CoarsenUnsupported(problem)
            compiled.verified = True
        global _Tensor
        _Tensor = torch.Tensor
        one = torch.ones((), dtype=tensors[wrt[0]].dtype)
        with torch.no_grad():
            grads = compiled.fn(*tensors, *params, one)
        out = tuple(fit_gradient(grads[positions[n]], args[n]) for n in nums)
        if key is None or not getattr(compiled.fn, "settled", lambda: True)():
            pass  # (while the Numba adjoint compiles, calls take this path and find it once it is ready)
        elif compiled.verified and (not plan.needs_record or _record_free(plan, elev)):
            fast[key] = plan, _ready_call(compiled.fn, [node.index for node in plan.graph.inputs],
                                                [(positions[n], n) for n in nums], one, single, args)
        elif (compiled.verified and isinstance(plan.fast_primal, numba_primal.NumbaPrimal)
              and getattr(compiled.fn, "direct", lambda: None)() is not None):
            fast[key] = plan, _ready_recorded_call(plan, wrt, nums, positions, single, args)
    else:
        from sparsad.coarsen.jax_splice import run_adjoint
        out = tuple(run_adjoint(compiled, tensors, params, [1.0])[positions[n]] for n in nums)
    return out[0] if single else out


def _strided(args: tuple) -> bool:
    """Whether every torch tensor among ``args`` is a plain strided one, as plans and their compiled code
    take them (a sparse layout, or a negative or conjugate bit, goes to plain autograd instead: such a
    tensor has the signature of a dense one, so it must never reach, nor switch off, the dense one's plan)."""
    for a in args:
        if type(a).__module__.startswith("torch") and hasattr(a, "layout") and hasattr(a, "is_neg"):
            if a.layout is not _torch_strided() or a.is_neg() or a.is_conj():
                return False
    return True


def _torch_strided():
    import torch

    return torch.strided


def _record_free(plan: Plan, elev) -> bool:
    """Whether every call of the plan's signature uses ``elev`` with no run-time parameter, so the
    record (and the primal that makes it) changes nothing: the first elevation, with no trip-count
    assumption (elevations are only appended, so it is picked for every record) and no parameter
    read from the record (e.g. an `if` only inside a loop compiled as a loop, which selects itself)."""
    return bool(plan.elevations) and elev is plan.elevations[0] and not elev.assumptions and not elev.params


_PLAIN = (int, float, bool, str, type(None))
_float_bits = struct.Struct("<d").pack


_Tensor = None  # torch.Tensor once a torch gradient was taken (the key's common case, checked first)


def _fast_key(args: tuple):
    """A cheaper stand-in for ``signature`` to find ready-made calls (no strings built for tensors);
    None when an argument's content cannot be keyed (then the general path runs)."""
    key = []
    for a in args:  # plain tensors and Python scalars (the usual calls), keyed as the loop below keys them
        kind = type(a)
        if kind is _Tensor:
            key.append((a.shape, a.dtype))
        elif kind is float:
            key.append((float, _float_bits(a)))
        elif kind is int or kind is bool:
            key.append((kind, a))
        else:
            return _general_key(args)
    return tuple(key)


def _general_key(args: tuple):
    key = []
    for a in args:
        shape = getattr(a, "shape", None)
        if isinstance(a, np.generic):  # a NumPy scalar (shape () and a dtype, too) is keyed by its value
            key.append(("np", a.dtype.str, a.tobytes()))
        elif shape is not None and hasattr(a, "dtype"):
            key.append((shape, a.dtype))  # (ready-made calls refuse tensors off the CPU themselves)
        elif type(a) is float:
            key.append((float, _float_bits(a)))  # -0.0 and 0.0, and NaNs of other sign or payload, differ
        elif type(a) in _PLAIN:
            key.append((type(a), a))
        else:
            try:
                key.append(fingerprint(a))
            except Unkeyable:
                return None
    return tuple(key)


def _ready_call(adjoint, tensor_positions, picks, one, single, args):
    """Gradient call with every per-signature decision taken: straight to the generated code
    (``args`` is the call it is made for: the signature fixes which tensors are 0-d)."""
    import torch

    from sparsad.coarsen.torch_splice import fit_gradient

    direct = getattr(adjoint, "direct", lambda: None)()
    if direct is not None:  # the jitted adjoint: NumPy views in, the wanted gradients out
        wanted = sorted({k for k, _ in picks})
        order = tuple((wanted.index(k), n, args[n].dim() == 0) for k, n in picks)
        return ready.straight_call(direct, tuple(tensor_positions), order, single, args)

    def call(args):
        with torch.no_grad():
            grads = adjoint(*[args[i] for i in tensor_positions], one)
        out = tuple(fit_gradient(grads[k], args[n]) for k, n in picks)
        return out[0] if single else out

    return call


_MISS = ready.MISS  # a ready-made call could not serve these arguments: take the general path


def _ready_recorded_call(plan: Plan, wrt, nums, positions, single, args):
    """Gradient call for code with recorded control flow whose primal runs under Numba (``ready``)."""
    picks = tuple((wrt.index(positions[n]), n, args[n].dim() == 0) for n in nums)
    return ready.recorded_call(plan, plan.fast_primal, wrt, picks, single, args)


def _autodiff_gradient(fn, args, nums, single, backend):
    if backend == "jax":
        import jax
        g = jax.grad(fn, argnums=nums[0] if single else tuple(nums))(*args)
        return g
    import torch
    with torch.enable_grad():
        call = list(args)
        leaves = []
        for n in nums:
            call[n] = args[n].detach().requires_grad_(True)
            leaves.append(call[n])
        out = fn(*call)
        grads = torch.autograd.grad(out, leaves, allow_unused=True)
    grads = tuple(torch.zeros_like(l) if g is None else g for g, l in zip(grads, leaves))
    return grads[0] if single else grads
