"""Tracer part: calls (torch/NumPy/math functions, builtins, methods, distributions) and inlining of user
helper functions."""
from __future__ import annotations

import ast
import builtins
import inspect
import math
from typing import Callable

from sparsad.coarsen import ssa
from sparsad.coarsen.source import CoarsenUnsupported, function_ast
from sparsad.coarsen.frontend.layouts import LAYOUT_CALLS
from sparsad.coarsen.frontend.values import (
    DYNAMIC,
    _NeedsStaticLoop,
    _Stacked,
    _Detached,
    _NormalDist,
    _DistMethod,
    _is_torch_normal,
    _traced,
    INLINE_DEPTH,
    _CONSTRUCTORS_LIKE,
    _CONSTRUCTORS,
    _IDENTITY_METHODS,
    UNARY,
    BINARY,
    _ALIASES,
    _assigned_names,
    _Return,
    _LocalFunction,
    _BoundMethod,
    _counter_sites,
    _holds_node,
    _axis,
    _is_constant_node,
    _is_user_function,
    _static_constructor,
    _tensor_function_name,
    _walk_own_scope_body,
)
from sparsad.coarsen.frontend.loops import _TracedRange


class CallsMixin:
    """Methods of ``Tracer`` (see ``frontend/__init__.py``) for calls."""

    def ev_Call(self, node, env):
        if node.keywords and any(k.arg is None for k in node.keywords):
            raise CoarsenUnsupported(f"line {node.lineno}: **kwargs in calls")
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise CoarsenUnsupported(f"line {node.lineno}: *args in calls")
        func = self.ev(node.func, env)
        args = [self.ev(a, env) for a in node.args]
        kwargs = {k.arg: self.ev(k.value, env) for k in node.keywords}
        if isinstance(func, _BoundMethod):
            return self.call_method(func, args, kwargs, node)
        values = args + list(kwargs.values())
        traced = any(_traced(a) for a in values)
        nested = not traced and any(_holds_node(a) for a in values)
        if isinstance(func, _LocalFunction):
            return self.inline_local(func, args, kwargs, node, env)
        if isinstance(func, _DistMethod):
            return self.distribution_method(func, args, kwargs, node)
        if _is_torch_normal(func):
            bound = {"loc": args[0] if args else kwargs.get("loc"),
                     "scale": args[1] if len(args) > 1 else kwargs.get("scale")}
            if len(args) > 2 or set(kwargs) - {"loc", "scale", "validate_args"} or any(
                    v is None or v is DYNAMIC or _holds_node(v) and not _traced(v) for v in bound.values()):
                raise CoarsenUnsupported(f"line {node.lineno}: Normal() with these arguments")
            return _NormalDist(bound["loc"], bound["scale"])
        if _is_user_function(func):
            return self.inline(func, args, kwargs, node)
        name = _tensor_function_name(func)
        if name in ("tensor", "as_tensor") and (traced and name == "tensor" or nested) and \
                (getattr(func, "__module__", "") or "").startswith("torch"):
            raise CoarsenUnsupported(f"line {node.lineno}: torch.{name}() of traced values copies them out of the "
                                     "graph (autograd gives them no gradient); use torch.stack or clone()")
        if name == "pad" and not (getattr(func, "__module__", "") or "").startswith("torch"):
            name = "pad_numpy"  # np.pad / jnp.pad: widths per axis from the first, `constant_values`
        if name is not None and (traced or nested or name in ("sum", "mean", "where", "dot")):
            return self.call_named(name, args, kwargs, node)
        if name in _CONSTRUCTORS and not any(a is DYNAMIC for a in values):
            try:
                made = func(*args, **kwargs)  # a constant tensor: real dtype and device args
                value = self.const(made)
            except CoarsenUnsupported:
                raise
            except Exception as exc:
                raise CoarsenUnsupported(f"line {node.lineno}: {name}() failed while tracing: {exc}") from exc
            dtype = str(getattr(made, "dtype", ""))
            if self.dtype is not None and dtype and dtype != str(self.dtype):
                self.narrow[id(value)] = dtype  # writes into it would round (or truncate) in the user's code
            return value
        if traced or nested:
            return self.call_builtin(func, args, kwargs, node)
        if any(a is DYNAMIC for a in values):
            return DYNAMIC
        if func is builtins.range:
            return range(*args)
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            fname = getattr(func, "__name__", type(func).__name__)
            raise CoarsenUnsupported(f"line {node.lineno}: calling {fname}() while tracing failed: "
                                     f"{type(exc).__name__}: {exc}") from exc

    def call_builtin(self, func, args, kwargs, node):
        """Python builtins applied to traced tensors (or lists of them)."""
        if func is builtins.abs and len(args) == 1:
            return self.op("abs", args[0])
        if func in (builtins.max, builtins.min) and len(args) == 2 and not kwargs:
            return self.op("maximum" if func is builtins.max else "minimum", *args)
        if func in (builtins.max, builtins.min) and len(args) == 1 and not kwargs:
            items = args[0]
            if _traced(items):
                items = list(items.items) if isinstance(items, _Stacked) else self.rows(items, node)
            items = list(items)
            if not items or any(v is DYNAMIC for v in items):
                raise CoarsenUnsupported(f"line {node.lineno}: {func.__name__}() of an empty or changing sequence")
            if any(_traced(v) and v.shape != () for v in items):
                raise CoarsenUnsupported(f"line {node.lineno}: {func.__name__}() comparing tensors that are not scalars")
            if not any(_traced(v) for v in items):
                return func(items)
            return self.first_max(items, largest=func is builtins.max)
        if func is builtins.sum and len(args) in (1, 2):
            items = args[0]
            if isinstance(items, _Stacked):
                items = list(items.items)
            elif _traced(items):
                if len(items.shape) != 1:
                    raise CoarsenUnsupported(f"line {node.lineno}: sum() over the rows of a matrix")
                total = self.reduce(items)
                return total if len(args) == 1 else self.op("add", total, args[1])
            total = args[1] if len(args) == 2 else 0
            for item in items:
                total = self.op("add", total, item)
            return total
        if func is builtins.len and _traced(args[0]):
            return args[0].shape[0]
        if func is builtins.len and len(args) == 1 and isinstance(args[0], (list, tuple)):
            return len(args[0])  # (a list or tuple holding traced values: its length is known)
        if func is builtins.range and not kwargs and any(_traced(a) for a in args):
            start = args[0] if len(args) == 2 else 0
            if len(args) in (1, 2) and isinstance(start, int) and _traced(args[-1]) and \
                    _is_constant_node(args[-1]) and args[-1].shape == ():
                return _TracedRange(start, args[-1])  # `range(i)`, `i` an outer counter: the trip count is recorded
            counters = frozenset().union(*[_counter_sites(a) for a in args])
            if counters and all(_counter_sites(a) or not _traced(a) for a in args):
                raise _NeedsStaticLoop(f"line {node.lineno}: range() bounds from a loop counter other than "
                                       "`range(i)` / `range(start, i)`", counters)
            raise CoarsenUnsupported(f"line {node.lineno}: range() bounds must be Python ints or `range(start, i)` "
                                     "with `i` an enclosing loop's counter")
        if func in (builtins.float, builtins.int) and len(args) == 1 and _traced(args[0]):
            if _is_constant_node(args[0]):
                return args[0]  # a loop counter or a constant: no gradient flows either way
            if func is builtins.float and isinstance(args[0], ssa.Node) and args[0].shape in ((), (1,)):
                return _Detached(args[0] if args[0].shape == () else ssa.View((), args[0], 0))
            raise CoarsenUnsupported(f"line {node.lineno}: {func.__name__}() of a traced tensor leaves the graph "
                                     "(its gradient would be lost; a data-dependent index or count)")
        if func in (builtins.zip, builtins.enumerate, builtins.reversed, builtins.list, builtins.tuple,
                    builtins.iter):
            parts = [self.rows(a, node) if _traced(a) else a for a in args]
            if any(a is DYNAMIC for a in parts):
                return DYNAMIC
            return func(*parts, **kwargs)
        fname = getattr(func, "__name__", repr(func))
        raise CoarsenUnsupported(f"line {node.lineno}: call to {fname}() on traced tensors is not supported")

    def inline(self, func, args, kwargs, node):
        """A user helper function: its body is traced in place (its names read from its own scope)."""
        if len(self.fn_stack) > INLINE_DEPTH:
            raise CoarsenUnsupported(f"line {node.lineno}: helper functions nested deeper than {INLINE_DEPTH} "
                                     f"(recursion in {func.__name__}?)")
        try:
            fdef, _ = function_ast(func)
        except CoarsenUnsupported as why:
            raise CoarsenUnsupported(f"line {node.lineno}: helper {func.__name__}() cannot be inlined: {why}") from None
        try:
            bound = inspect.signature(func).bind(*args, **kwargs)
        except TypeError as exc:
            raise CoarsenUnsupported(f"line {node.lineno}: calling {func.__name__}(): {exc}") from exc
        bound.apply_defaults()
        params = fdef.args
        if params.vararg or params.kwarg:
            raise CoarsenUnsupported(f"line {node.lineno}: helper {func.__name__}() takes *args/**kwargs")
        self.guards.add(f"helper function {func.__module__}.{func.__qualname__}",
                        lambda: func.__code__, func.__code__, func)
        guard_defaults(self.guards, func, node.lineno)
        env = dict(bound.arguments)
        return self.run_inlined(func, fdef, env)

    def run_inlined(self, owner: Callable, fdef: ast.FunctionDef, env: dict, derived: bool = False):
        """The body of an inlined function in its own frame; names not in ``env`` are read from ``owner``
        (``derived``: ``env`` is the calling frame's, as for a local function)."""
        local_names = frozenset(_assigned_names(fdef.body)) | {a.arg for a in fdef.args.args}
        self.fn_stack.append(owner)
        self.frames.append(self.next_frame)
        self.frame_derived.append(derived)
        self.frame_locals.append(local_names)
        self.next_frame += 1
        self.inlining += 1
        try:
            self.run(fdef.body, env)
        except _Return as ret:
            return ret.value
        finally:
            self.fn_stack.pop()
            self.frames.pop()
            self.frame_derived.pop()
            self.frame_locals.pop()
            self.inlining -= 1
        return None

    def inline_local(self, func: "_LocalFunction", args, kwargs, node, env):
        """A ``def``/``lambda`` of the traced function called from the body that defined it."""
        fdef = func.fdef
        names = [a.arg for a in fdef.args.args]
        local_names = set(_assigned_names(fdef.body)) | set(names)
        free = {sub.id for sub in _walk_own_scope_body(fdef) if isinstance(sub, ast.Name)} - local_names
        # its free names are read from the current variables: right when it is called from the body that
        # defines it, or from local functions of that body that do not rebind any of those names
        between = range(self.frames.index(func.scope) + 1, len(self.frames)) if func.scope in self.frames else None
        if between is None or any(not self.frame_derived[j] or free & self.frame_locals[j] for j in between):
            raise CoarsenUnsupported(f"line {node.lineno}: local function {fdef.name}() (line {fdef.lineno}) is "
                                     "called where its free variables are not the defining function's")
        if len(self.fn_stack) > INLINE_DEPTH:
            raise CoarsenUnsupported(f"line {node.lineno}: helper functions nested deeper than {INLINE_DEPTH} "
                                     f"(recursion in {fdef.name}?)")
        if len(args) > len(names):
            raise CoarsenUnsupported(f"line {node.lineno}: {fdef.name}() takes {len(names)} arguments, "
                                     f"{len(args)} given")
        bound = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names or key in bound:
                raise CoarsenUnsupported(f"line {node.lineno}: {fdef.name}() got an unexpected or repeated "
                                         f"keyword argument {key!r}")
            bound[key] = value
        for name, default in zip(names[len(names) - len(func.defaults):], func.defaults):
            bound.setdefault(name, default)
        missing = [n for n in names if n not in bound]
        if missing:
            raise CoarsenUnsupported(f"line {node.lineno}: {fdef.name}() is missing argument(s) {missing}")
        captured = set(getattr(func.owner.__code__, "co_cellvars", ()))
        for sub in ast.walk(fdef):
            if (isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in local_names
                    and sub.id not in env and sub.id in captured):
                raise CoarsenUnsupported(f"line {sub.lineno}: {fdef.name}() reads {sub.id!r} before the enclosing "
                                         "function assigns it")
        inner = {k: v for k, v in env.items() if k not in local_names}
        inner.update(bound)
        return self.run_inlined(func.owner, fdef, inner, derived=True)

    def call_named(self, name: str, args, kwargs, node):
        if name in LAYOUT_CALLS and args and _traced(args[0]):
            return self.layout_call(name, args[0], list(args[1:]), dict(kwargs), node)
        if name in _CONSTRUCTORS_LIKE and args and _traced(args[0]):
            fill = _CONSTRUCTORS_LIKE[name]
            if fill is None:
                fill = kwargs.get("fill_value", args[1] if len(args) > 1 else None)
            if _traced(fill) or fill is DYNAMIC or fill is None:
                raise CoarsenUnsupported(f"line {node.lineno}: {name}() with a traced fill value")
            return ssa.Const(args[0].shape, float(fill))
        if name in ("as_tensor", "asarray", "array") and args and _traced(args[0]):
            return args[0]  # an existing tensor: same values (dtype/device arguments do not change them here)
        if name in ("stack", "asarray", "array") and args and isinstance(args[0], (list, tuple)):
            return self.stack(args[0], _axis(args[1:], kwargs), node)
        if name in ("cat", "concatenate", "concat") and args and isinstance(args[0], (list, tuple)):
            return self.concatenate(args[0], _axis(args[1:], kwargs), node)
        if any(_holds_node(a) for a in args) and not any(_traced(a) for a in args):
            raise CoarsenUnsupported(f"line {node.lineno}: {name}() of a list of traced tensors is not supported")
        if name in ("matmul", "mm", "mv") and len(args) == 2:
            return self.matmul(args[0], args[1], node)
        if name in ("sum", "mean", "maximum", "minimum", "amax", "amin", "logsumexp", "softmax", "log_softmax",
                    "norm") and len(args) == 1 and _traced(args[0]):
            return self.reduction(name, args[0], kwargs, node)
        if name in ("sum", "mean", "amax", "amin", "logsumexp", "softmax", "log_softmax") and len(args) == 2 \
                and _traced(args[0]) and isinstance(args[1], int) and not kwargs:
            return self.reduction(name, args[0], {"dim": args[1]}, node)
        if name in ("sum", "mean"):
            raise CoarsenUnsupported(f"line {node.lineno}: {name}() with these arguments")
        if name == "dot":
            return self.reduce(self.op("mul", args[0], args[1]))
        if name == "where":
            return self.op("where", *args)
        if name in ("clamp", "clip"):
            low = kwargs.get("min", args[1] if len(args) > 1 else None)
            high = kwargs.get("max", args[2] if len(args) > 2 else None)
            value = args[0]
            if low is not None:
                value = self.op("maximum", value, low)
            if high is not None:
                value = self.op("minimum", value, high)
            return value
        if name in UNARY and len(args) == 1 and not kwargs:
            return self.op(name, args[0])
        if name in BINARY and len(args) == 2 and not kwargs:
            return self.op(name, *args)
        if name == "atan2" and len(args) == 2:
            return self.op("atan2", *args)
        counters = frozenset().union(*[_counter_sites(a) for a in args])
        if counters and all(_counter_sites(a) or not _traced(a) for a in args):
            raise _NeedsStaticLoop(f"line {node.lineno}: {name}() of a loop counter", counters)
        raise CoarsenUnsupported(f"line {node.lineno}: {name}() with these arguments is not supported")

    def distribution_method(self, method: "_DistMethod", args, kwargs, node):
        """``Normal(loc, scale).cdf(x)`` / ``.log_prob(x)`` with the formulas torch.distributions uses."""
        if len(args) != 1 or kwargs:
            raise CoarsenUnsupported(f"line {node.lineno}: Normal.{method.name}() takes one value")
        dist, x = method.dist, args[0]
        z = self.op("div", self.op("sub", x, dist.loc), dist.scale)
        if method.name == "cdf":
            return self.op("mul", 0.5, self.op("add", 1.0, self.op("erf", self.op("div", z, math.sqrt(2.0)))))
        log_scale = self.op("log", dist.scale)
        return self.op("sub", self.op("sub", self.op("mul", -0.5, self.op("mul", z, z)), log_scale),
                       math.log(math.sqrt(2.0 * math.pi)))

    def call_method(self, method: "_BoundMethod", args, kwargs, node):
        name = _ALIASES.get(method.name, method.name)
        if name == "item" and not args and isinstance(method.base, ssa.Node) and method.base.shape in ((), (1,)):
            base = method.base
            return _Detached(base if base.shape == () else ssa.View((), base, 0))
        if name in ("item", "detach", "numpy", "tolist"):
            raise CoarsenUnsupported(f"line {node.lineno}: .{method.name}() leaves the traced graph")
        if name in _IDENTITY_METHODS and not any(_traced(a) for a in args):
            return method.base  # dtype/device conversions: the traced computation is float64 throughout
        if name in ("new_zeros", "new_ones", "new_full", "new_tensor", "new_empty") and args:
            return self.const(_static_constructor(name, args, kwargs, node))
        if name == "clone" and not args:
            base = method.base
            if isinstance(base, _Stacked):
                return _Stacked(base.items)
            return ssa.Op(base.shape, "mul", (base, ssa.Const((), 1.0)))  # a new tensor with the same values
        if name == "contiguous" and not args:
            return method.base
        if name in LAYOUT_CALLS:
            return self.layout_call(name, method.base, list(args), dict(kwargs), node)
        if name == "size" and not kwargs:
            return method.base.shape if not args else method.base.shape[args[0]]
        if name in ("pow",):
            return self.op("pow", method.base, args[0])
        return self.call_named(name, [method.base, *args], kwargs, node)


def guard_defaults(guards, func, line: int) -> None:
    """The content of a function's defaults (reassigned, or a mutable default mutated) is guarded."""
    from sparsad.coarsen.guards import Unkeyable
    try:
        guards.add(f"defaults of {func.__qualname__}", lambda: func.__defaults__, func.__defaults__, func)
        guards.add(f"keyword defaults of {func.__qualname__}", lambda: func.__kwdefaults__, func.__kwdefaults__,
                   func)
    except Unkeyable as why:
        raise CoarsenUnsupported(f"line {line}: a default value of {func.__qualname__}() is {why}; its content "
                                 "cannot be checked between calls") from None
