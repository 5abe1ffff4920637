"""AST front end: a Python function on tensors becomes an SSA graph (``ssa.Graph``).

The function's source is walked once per call signature (argument shapes, dtypes and the values
of non-tensor arguments).  Python values known while tracing (ints, floats, shapes, ``len``) are
computed on the spot; tensor values become SSA nodes.  ``if`` on a tensor keeps both arms and
merges them with ``Phi``; ``for``/``while`` whose body touches tensors become ``Loop`` nodes whose
trip counts and decisions are recorded when the primal runs (see ``record.py``).  Python ints
that change inside a loop (``k += 1``) are *dynamic*: they may steer control flow but may not
enter tensor arithmetic.

Anything outside this subset raises ``CoarsenUnsupported``; callers fall back to autograd.
"""
from __future__ import annotations

import ast
import builtins
import copy
import inspect
import math
import types
from typing import Any, Callable

import numpy as np

from sparsad.coarsen import ssa
from sparsad.coarsen.source import CoarsenUnsupported, function_ast


class _Dynamic:
    """A Python value that changes from iteration to iteration (only for control flow)."""

    def __repr__(self) -> str:
        return "<dynamic>"


DYNAMIC = _Dynamic()


class DynamicInTensorMath(CoarsenUnsupported):
    """A Python value that changes inside a loop meets a tensor; ``names`` are the variables involved."""

    def __init__(self, message: str, names: tuple[str, ...] = ()):
        super().__init__(message)
        self.names = names


INLINE_DEPTH = 8      # nested user helper functions inlined while tracing
STATIC_UNROLL = 64    # iterations of a non-range (or non-unit step) loop unrolled while tracing
_CONSTRUCTORS_LIKE = {"zeros_like": 0.0, "ones_like": 1.0, "full_like": None, "empty_like": 0.0}
_CONSTRUCTORS = {"zeros", "ones", "full", "tensor", "as_tensor", "asarray", "array", "arange", "linspace",
                 "empty", "eye", "scalar_tensor"}
_IDENTITY_METHODS = {"double", "float", "to", "type_as", "requires_grad_", "cpu"}

UNARY = {"exp", "log", "sin", "cos", "tan", "tanh", "sqrt", "abs", "sigmoid", "softplus", "relu",
         "log1p", "expm1", "square", "neg", "sinh", "cosh", "asin", "acos", "atan", "erf", "sign"}
BINARY = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"}
_ALIASES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "fabs": "abs", "absolute": "abs",
            "multiply": "mul", "add": "add", "subtract": "sub", "divide": "div", "true_divide": "div",
            "power": "pow", "pow": "pow", "negative": "neg", "max": "maximum", "min": "minimum"}
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow"}
_CMPOPS = {ast.Gt: "gt", ast.GtE: "ge", ast.Lt: "lt", ast.LtE: "le", ast.Eq: "eq", ast.NotEq: "ne"}
_PYCMP = {"gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b,
          "le": lambda a, b: a <= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


def site_of(node: ast.AST) -> ssa.Site:
    return (node.lineno, node.col_offset)


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError as exc:
        raise CoarsenUnsupported(f"shapes {shapes} do not broadcast") from exc


def _assigned_names(stmts: list[ast.stmt]) -> list[str]:
    names: list[str] = []
    for stmt in stmts:
        for node in ast.walk(stmt):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, ast.For):
                targets = [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name) and sub.id not in names:
                        names.append(sub.id)
    return names


class _Return(Exception):
    def __init__(self, value):
        self.value = value


class Tracer:
    """Walks a function body, building SSA nodes.  ``trace`` is the entry point."""

    def __init__(self, fn: Callable, dtype=None, device=None):
        from sparsad.coarsen.guards import Guards

        self.fn = fn
        self.fn_stack: list[Callable] = [fn]   # the function whose names are being read (helpers inlined)
        self.guards = Guards()
        self.dtype, self.device = dtype, device
        self.line = getattr(getattr(fn, "__code__", None), "co_firstlineno", 0)
        self.inlining = 0   # > 0 while tracing the body of an inlined helper
        self.loops: list[ssa.Loop] = []
        self.branch_sites: list[ssa.Site] = []
        self.loop_stack: list = []
        self.scopes: list[dict] = [{}]  # per traced-loop body: executions of each site so far

    def entry(self, site) -> int:
        counts = self.scopes[-1]
        counts[site] = counts.get(site, 0) + 1
        return counts[site] - 1

    def scoped_run(self, stmts, env):
        self.scopes.append({})
        try:
            return self.run(stmts, env)
        finally:
            self.scopes.pop()

    # ---------------------------------------------------------------- values
    def const(self, value) -> ssa.Node:
        if isinstance(value, ssa.Node):
            return value
        if value is DYNAMIC:
            raise DynamicInTensorMath("a Python value that changes inside a loop is used in tensor arithmetic")
        if isinstance(value, (bool, int, float, np.floating, np.integer)):
            return ssa.Const((), float(value))
        array = _constant_array(value)
        if array is not None:
            if array.size == 0 or not np.issubdtype(array.dtype, np.number) and array.dtype != bool:
                raise CoarsenUnsupported(f"line {self.line}: an empty or non-numeric constant tensor")
            flat = array.reshape(-1).astype(np.float64)
            if np.all(flat == flat[0]) and not np.isnan(flat[0]):
                return ssa.Const(tuple(int(d) for d in array.shape), float(flat[0]))
            raise CoarsenUnsupported(f"line {self.line}: a constant tensor with different entries enters "
                                     "tensor arithmetic (pass it as an argument)")
        if isinstance(value, (list, tuple)) and any(isinstance(v, ssa.Node) for v in value):
            raise CoarsenUnsupported(f"line {self.line}: a list or tuple of traced tensors used as a tensor "
                                     "(stack/cat/tensor of traced values are not supported)")
        raise CoarsenUnsupported(f"line {self.line}: value {_short(value)} of type {type(value).__name__} "
                                 "cannot enter tensor arithmetic")

    def op(self, name: str, *args) -> Any:
        if any(a is DYNAMIC for a in args):
            if any(isinstance(a, ssa.Node) for a in args):
                raise DynamicInTensorMath("a Python value that changes inside a loop is used in tensor arithmetic")
            return DYNAMIC
        if not any(isinstance(a, ssa.Node) for a in args):
            return _static_apply(name, args)
        nodes = tuple(self.const(a) for a in args)
        return ssa.Op(_broadcast(*(n.shape for n in nodes)), name, nodes)

    # ------------------------------------------------------------ expressions
    def ev(self, node: ast.expr, env: dict) -> Any:
        method = getattr(self, "ev_" + type(node).__name__, None)
        if method is None:
            raise CoarsenUnsupported(f"line {node.lineno}: Python expression {type(node).__name__} is not supported")
        return method(node, env)

    def ev_Constant(self, node, env):
        return node.value

    def ev_Name(self, node, env):
        if node.id in env:
            return env[node.id]
        return self.lookup(node.id, node.lineno)

    def lookup(self, name: str, line: int):
        """A closure cell, module global or builtin of the function being traced, guarded for later calls."""
        from sparsad.coarsen.guards import Unkeyable

        fn = self.fn_stack[-1]
        code = fn.__code__
        if name in code.co_freevars:
            cell = fn.__closure__[code.co_freevars.index(name)]
            try:
                value = cell.cell_contents
            except ValueError as exc:
                raise CoarsenUnsupported(f"line {line}: closure variable {name!r} is not bound yet") from exc
            reader, where = (lambda: cell.cell_contents), f"closure variable {name!r} of {code.co_name}"
        elif name in fn.__globals__:
            module_globals = fn.__globals__
            value = module_globals[name]
            reader, where = (lambda: module_globals[name]), f"global {name!r} of {fn.__module__}"
        elif hasattr(builtins, name):
            return getattr(builtins, name)
        else:
            raise CoarsenUnsupported(f"line {line}: name {name!r} is not defined")
        try:
            self.guards.add(where, reader, value, cell if name in code.co_freevars else fn.__globals__)
        except Unkeyable as why:
            raise CoarsenUnsupported(f"line {line}: {where} is {why}; its content cannot be checked between "
                                     "calls (pass it as an argument)") from None
        return value

    def ev_Tuple(self, node, env):
        return tuple(self.ev(e, env) for e in node.elts)

    ev_List = ev_Tuple

    def ev_ListComp(self, node, env):
        """``[expr for i in range(n) if ...]`` over static iterables: unrolled while tracing (kept short)."""
        items: list = []

        def walk(k, scope):
            if k == len(node.generators):
                items.append(self.ev(node.elt, scope))
                return
            gen = node.generators[k]
            if gen.is_async:
                raise CoarsenUnsupported(f"line {node.lineno}: async comprehension")
            iterable = self.ev(gen.iter, scope)
            if isinstance(iterable, ssa.Node):
                iterable = self.rows(iterable, node)
            if iterable is DYNAMIC:
                raise CoarsenUnsupported(f"line {node.lineno}: a comprehension over a value that changes inside a loop")
            for count, item in enumerate(iterable):
                if count >= STATIC_UNROLL * 16:
                    raise CoarsenUnsupported(f"line {node.lineno}: a comprehension of more than "
                                             f"{STATIC_UNROLL * 16} items")
                inner = dict(scope)
                self.bind(gen.target, item, inner)
                tests = [self.ev(t, inner) for t in gen.ifs]
                if any(isinstance(t, ssa.Node) or t is DYNAMIC for t in tests):
                    raise CoarsenUnsupported(f"line {node.lineno}: a comprehension filtered on a traced value")
                if all(tests):
                    walk(k + 1, inner)

        walk(0, env)
        return items

    ev_GeneratorExp = ev_ListComp

    def ev_BinOp(self, node, env):
        left, right = self.ev(node.left, env), self.ev(node.right, env)
        kind = _BINOPS.get(type(node.op))
        if kind is None:
            if not isinstance(left, ssa.Node) and not isinstance(right, ssa.Node):
                if left is DYNAMIC or right is DYNAMIC:
                    return DYNAMIC
                return eval(compile(ast.Expression(ast.BinOp(ast.Constant(left), node.op, ast.Constant(right))),
                                    "<static>", "eval"))
            raise CoarsenUnsupported(f"line {node.lineno}: operator {type(node.op).__name__} on tensors")
        return self.op(kind, left, right)

    def ev_UnaryOp(self, node, env):
        value = self.ev(node.operand, env)
        if isinstance(node.op, ast.USub):
            return self.op("neg", value)
        if isinstance(node.op, ast.UAdd):
            return value
        if isinstance(node.op, ast.Not) and not isinstance(value, ssa.Node):
            return DYNAMIC if value is DYNAMIC else (not value)
        raise CoarsenUnsupported(f"line {node.lineno}: unary {type(node.op).__name__} on tensors")

    def ev_Compare(self, node, env):
        if len(node.ops) != 1:
            raise CoarsenUnsupported(f"line {node.lineno}: chained comparisons")
        kind = _CMPOPS.get(type(node.ops[0]))
        if kind is None:
            raise CoarsenUnsupported(f"line {node.lineno}: comparison {type(node.ops[0]).__name__}")
        return self.op(kind, self.ev(node.left, env), self.ev(node.comparators[0], env))

    def ev_BoolOp(self, node, env):
        values = [self.ev(v, env) for v in node.values]
        if any(isinstance(v, ssa.Node) for v in values):
            raise CoarsenUnsupported(f"line {node.lineno}: `and`/`or` on tensors")
        if any(v is DYNAMIC for v in values):
            return DYNAMIC
        result = values[0]
        for v in values[1:]:
            result = (result and v) if isinstance(node.op, ast.And) else (result or v)
        return result

    def ev_IfExp(self, node, env):
        test = self.ev(node.test, env)
        if isinstance(test, ssa.Node) or test is DYNAMIC:
            raise CoarsenUnsupported(f"line {node.lineno}: conditional expression on a traced value (use an if statement)")
        return self.ev(node.body if test else node.orelse, env)

    def ev_Attribute(self, node, env):
        base = self.ev(node.value, env)
        if isinstance(base, ssa.Node):
            if node.attr == "shape":
                return base.shape
            if node.attr == "dtype" and self.dtype is not None:
                return self.dtype
            if node.attr == "device" and self.device is not None:
                return self.device
            if node.attr in ("T",) and len(base.shape) <= 1:
                return base
            if node.attr == "ndim":
                return len(base.shape)
            return _BoundMethod(base, node.attr)
        if base is DYNAMIC:
            return DYNAMIC
        try:
            value = getattr(base, node.attr)
        except AttributeError as exc:
            raise CoarsenUnsupported(f"line {node.lineno}: no attribute {node.attr!r}") from exc
        if not isinstance(value, (types.MethodWrapperType, types.BuiltinMethodType)) or \
                isinstance(base, types.ModuleType):
            # module, class and object attributes are data (or code) the plan depends on: the value
            # as read (also a class attribute read through an instance) is re-read at every call
            from sparsad.coarsen.guards import Unkeyable
            if isinstance(base, (type, types.ModuleType)):
                name = f"{getattr(base, '__name__', '?')}.{node.attr}"
            else:
                name = f"{type(base).__name__}.{node.attr} of an object"
            attr = node.attr
            if isinstance(value, types.MethodType):  # a fresh bound method at each read
                reader, guarded = (lambda: _method_parts(getattr(base, attr))), _method_parts(value)
            else:
                reader, guarded = (lambda: getattr(base, attr)), value
            try:
                self.guards.add(f"attribute {name}", reader, guarded, base)
            except Unkeyable as why:
                raise CoarsenUnsupported(f"line {node.lineno}: {name} is {why}; its content cannot be checked "
                                         "between calls") from None
        return value

    def ev_Subscript(self, node, env):
        base = self.ev(node.value, env)
        key = self.ev_key(node.slice, env)
        if not isinstance(base, ssa.Node):
            if base is DYNAMIC or key is DYNAMIC:
                return DYNAMIC
            if isinstance(key, (ssa.Node, _IndexVar)) or _holds_node(key):
                raise CoarsenUnsupported(f"line {node.lineno}: a Python list/tuple or constant indexed by a loop "
                                         "counter or a traced value (make it a tensor argument)")
            try:
                return base[key]
            except (IndexError, KeyError, TypeError) as exc:
                raise CoarsenUnsupported(f"line {node.lineno}: indexing failed while tracing: {exc}") from exc
        if isinstance(key, _IndexVar):
            if len(base.shape) < 1:
                raise CoarsenUnsupported(f"line {node.lineno}: indexing a scalar")
            if not -base.shape[0] <= key.offset + key.stride * key.first <= base.shape[0] - 1:
                raise CoarsenUnsupported(f"line {node.lineno}: index out of range at the loop's first iteration")
            return ssa.Index(base.shape[1:], base, key.site, key.offset, key.stride)
        if key is DYNAMIC or isinstance(key, ssa.Node):
            raise CoarsenUnsupported(f"line {node.lineno}: indexing with a value unknown when tracing")
        if _holds_node(key) or any(isinstance(k, slice) and k.step is not None and k.step < 0
                                   for k in (key if isinstance(key, tuple) else (key,))):
            raise CoarsenUnsupported(f"line {node.lineno}: index {_short(key)} (traced values or negative steps "
                                     "in a subscript) is not supported")
        try:
            shape = tuple(np.empty(base.shape, dtype=np.int8)[key].shape)
        except (IndexError, TypeError, ValueError) as exc:
            raise CoarsenUnsupported(f"line {node.lineno}: index {_short(key)} is not a static int/slice index") from exc
        if 0 in shape:
            raise CoarsenUnsupported(f"line {node.lineno}: an empty slice")
        return ssa.View(shape, base, key)

    def ev_key(self, node, env):
        if isinstance(node, ast.Slice):
            parts = [None if p is None else self.ev(p, env) for p in (node.lower, node.upper, node.step)]
            if any(isinstance(p, ssa.Node) or p is DYNAMIC for p in parts):
                return DYNAMIC
            return slice(*parts)
        if isinstance(node, ast.Tuple):
            parts = tuple(self.ev_key(e, env) for e in node.elts)
            if any(p is DYNAMIC or isinstance(p, (ssa.Node, _IndexVar)) for p in parts):
                return DYNAMIC
            return parts
        value = self.ev(node, env)
        affine = _affine_in_counter(value)
        if affine is not None:
            counter, stride, offset = affine
            if stride in (1, -1):
                return _IndexVar(counter.site, offset, stride, counter.start)
        return value

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
        traced = any(isinstance(a, ssa.Node) for a in values)
        nested = not traced and any(_holds_node(a) for a in values)
        if _is_user_function(func):
            return self.inline(func, args, kwargs, node)
        name = _tensor_function_name(func)
        if name is not None and (traced or nested or name in ("sum", "mean", "where", "dot")):
            return self.call_named(name, args, kwargs, node)
        if name in _CONSTRUCTORS and not any(a is DYNAMIC for a in values):
            try:
                return self.const(func(*args, **kwargs))  # a constant tensor: real dtype and device args
            except CoarsenUnsupported:
                raise
            except Exception as exc:
                raise CoarsenUnsupported(f"line {node.lineno}: {name}() failed while tracing: {exc}") from exc
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
        if func in (builtins.max, builtins.min) and len(args) == 2:
            return self.op("maximum" if func is builtins.max else "minimum", *args)
        if func is builtins.sum and len(args) in (1, 2):
            items = args[0]
            if isinstance(items, ssa.Node):
                if len(items.shape) != 1:
                    raise CoarsenUnsupported(f"line {node.lineno}: sum() over the rows of a matrix")
                total = self.reduce(items)
                return total if len(args) == 1 else self.op("add", total, args[1])
            total = args[1] if len(args) == 2 else 0
            for item in items:
                total = self.op("add", total, item)
            return total
        if func is builtins.len and isinstance(args[0], ssa.Node):
            return args[0].shape[0]
        if func is builtins.range and not kwargs and len(args) in (1, 2) and isinstance(args[-1], ssa.Node):
            start = args[0] if len(args) == 2 else 0
            if isinstance(start, int) and _is_constant_node(args[-1]) and args[-1].shape == ():
                return _TracedRange(start)  # `range(i)` with `i` an outer counter: the trip count is recorded
            raise CoarsenUnsupported(f"line {node.lineno}: range() bounds must be Python ints or `range(start, i)` "
                                     "with `i` an enclosing loop's counter")
        if func in (builtins.float, builtins.int) and len(args) == 1 and isinstance(args[0], ssa.Node):
            if _is_constant_node(args[0]):
                return args[0]  # a loop counter or a constant: no gradient flows either way
            raise CoarsenUnsupported(f"line {node.lineno}: {func.__name__}() of a traced tensor leaves the graph "
                                     "(its gradient would be lost)")
        if func in (builtins.zip, builtins.enumerate, builtins.reversed, builtins.list, builtins.tuple,
                    builtins.iter):
            parts = [self.rows(a, node) if isinstance(a, ssa.Node) else a for a in args]
            if any(a is DYNAMIC for a in parts):
                return DYNAMIC
            return func(*parts, **kwargs)
        fname = getattr(func, "__name__", repr(func))
        raise CoarsenUnsupported(f"line {node.lineno}: call to {fname}() on traced tensors is not supported")

    def rows(self, value: ssa.Node, node) -> tuple:
        """A traced tensor iterated over: its rows, as views (unrolled while tracing, so kept short)."""
        if not value.shape:
            raise CoarsenUnsupported(f"line {node.lineno}: iterating over a 0-d tensor")
        if value.shape[0] > STATIC_UNROLL:
            raise CoarsenUnsupported(f"line {node.lineno}: iterating over the {value.shape[0]} rows of a traced "
                                     f"tensor (more than {STATIC_UNROLL}; index it with range(len(x)))")
        return tuple(ssa.View(value.shape[1:], value, i) for i in range(value.shape[0]))

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
        self.fn_stack.append(func)
        self.inlining += 1
        try:
            self.run(fdef.body, env)
        except _Return as ret:
            return ret.value
        finally:
            self.fn_stack.pop()
            self.inlining -= 1
        return None

    def reduce(self, value):
        value = self.const(value)
        if value.shape == ():
            return value
        return ssa.Reduce((), value)

    def call_named(self, name: str, args, kwargs, node):
        if name in _CONSTRUCTORS_LIKE and args and isinstance(args[0], ssa.Node):
            fill = _CONSTRUCTORS_LIKE[name]
            if fill is None:
                fill = kwargs.get("fill_value", args[1] if len(args) > 1 else None)
            if isinstance(fill, ssa.Node) or fill is DYNAMIC or fill is None:
                raise CoarsenUnsupported(f"line {node.lineno}: {name}() with a traced fill value")
            return ssa.Const(args[0].shape, float(fill))
        if name in ("tensor", "as_tensor", "asarray", "array") and args and isinstance(args[0], ssa.Node):
            return args[0]  # an existing tensor: same values (dtype/device arguments do not change them here)
        if any(_holds_node(a) for a in args) and not any(isinstance(a, ssa.Node) for a in args):
            raise CoarsenUnsupported(f"line {node.lineno}: {name}() of a list of traced tensors is not supported "
                                     "(stack/cat/tensor of traced values)")
        if name in ("sum", "mean"):
            if len(args) != 1 or kwargs.get("dim", kwargs.get("axis")) is not None:
                raise CoarsenUnsupported(f"line {node.lineno}: {name} over an axis (only full sums are supported)")
            total = self.reduce(args[0])
            if name == "mean":
                count = int(np.prod(self.const(args[0]).shape))
                return self.op("div", total, float(count))
            return total
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
        if name in BINARY and len(args) == 2:
            return self.op(name, *args)
        if name == "atan2" and len(args) == 2:
            return self.op("atan2", *args)
        raise CoarsenUnsupported(f"line {node.lineno}: {name}() with these arguments is not supported")

    def call_method(self, method: "_BoundMethod", args, kwargs, node):
        name = _ALIASES.get(method.name, method.name)
        if name in ("item", "detach", "numpy", "tolist"):
            raise CoarsenUnsupported(f"line {node.lineno}: .{method.name}() leaves the traced graph")
        if name in _IDENTITY_METHODS and not any(isinstance(a, ssa.Node) for a in args):
            return method.base  # dtype/device conversions: the traced computation is float64 throughout
        if name in ("new_zeros", "new_ones", "new_full", "new_tensor", "new_empty") and args:
            return self.const(_static_constructor(name, args, kwargs, node))
        if name in ("clone", "contiguous", "flatten", "ravel") and not args:
            if name in ("flatten", "ravel") and len(method.base.shape) > 1:
                raise CoarsenUnsupported(f"line {node.lineno}: .{method.name}() of a matrix")
            return method.base
        if name == "size" and not kwargs:
            return method.base.shape if not args else method.base.shape[args[0]]
        if name in ("pow",):
            return self.op("pow", method.base, args[0])
        return self.call_named(name, [method.base, *args], kwargs, node)

    # ------------------------------------------------------------- statements
    def run(self, stmts: list[ast.stmt], env: dict) -> dict:
        for stmt in stmts:
            env = self.stmt(stmt, env)
        return env

    def stmt(self, node: ast.stmt, env: dict) -> dict:
        method = getattr(self, "st_" + type(node).__name__, None)
        if method is None:
            raise CoarsenUnsupported(f"line {node.lineno}: statement {type(node).__name__} is not supported")
        self.line = node.lineno
        try:
            return method(node, env)
        except DynamicInTensorMath as why:
            if why.names:
                raise
            names = tuple(sorted({sub.id for sub in ast.walk(node)
                                  if isinstance(sub, ast.Name) and env.get(sub.id, None) is DYNAMIC}))
            listed = ", ".join(f"`{n}`" for n in names) or "a value"
            raise DynamicInTensorMath(
                f"line {node.lineno}: {listed} (a Python number that changes inside a loop) is used in tensor "
                f"arithmetic in `{_source_line(node)}`", names) from None

    def st_Expr(self, node, env):
        if isinstance(node.value, ast.Constant):
            return env  # docstring
        raise CoarsenUnsupported(f"line {node.lineno}: expression statements (side effects) are not supported")

    def st_Pass(self, node, env):
        return env

    def st_Import(self, node, env):
        import importlib

        env = dict(env)
        for alias in node.names:
            module = importlib.import_module(alias.name)
            if alias.asname:
                env[alias.asname] = module
            else:
                env[alias.name.split(".")[0]] = importlib.import_module(alias.name.split(".")[0])
        return env

    def st_ImportFrom(self, node, env):
        import importlib

        if node.level:
            raise CoarsenUnsupported(f"line {node.lineno}: relative import inside a traced function")
        env = dict(env)
        module = importlib.import_module(node.module)
        for alias in node.names:
            env[alias.asname or alias.name] = getattr(module, alias.name)
        return env

    def st_Assign(self, node, env):
        value = self.ev(node.value, env)
        env = dict(env)
        for target in node.targets:
            self.bind(target, value, env)
        return env

    def st_AnnAssign(self, node, env):
        env = dict(env)
        if node.value is not None:
            self.bind(node.target, self.ev(node.value, env), env)
        return env

    def st_AugAssign(self, node, env):
        if not isinstance(node.target, ast.Name):
            raise CoarsenUnsupported(f"line {node.lineno}: in-place update of {type(node.target).__name__}")
        value = self.ev_BinOp(ast.BinOp(left=ast.Name(node.target.id, ast.Load(), lineno=node.lineno),
                                        op=node.op, right=node.value, lineno=node.lineno), env)
        env = dict(env)
        env[node.target.id] = value
        return env

    def bind(self, target, value, env):
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, ssa.Node):
                if not value.shape or len(value.shape) < 1:
                    raise CoarsenUnsupported(f"line {target.lineno}: unpacking a scalar")
                value = tuple(ssa.View(value.shape[1:], value, i) for i in range(value.shape[0]))
            if value is DYNAMIC:
                raise CoarsenUnsupported(f"line {target.lineno}: unpacking a dynamic value")
            value = tuple(value)
            if len(value) != len(target.elts):
                raise CoarsenUnsupported(f"line {target.lineno}: unpacking {len(value)} values into {len(target.elts)}")
            for t, v in zip(target.elts, value):
                self.bind(t, v, env)
        else:
            raise CoarsenUnsupported(f"line {target.lineno}: assignment to {type(target).__name__} "
                                     "(in-place updates of tensors are not supported)")

    def st_Return(self, node, env):
        raise _Return(self.ev(node.value, env) if node.value is not None else None)

    def st_If(self, node, env):
        test = self.ev(node.test, env)
        if not isinstance(test, ssa.Node) and test is not DYNAMIC:
            return self.run(node.body if test else node.orelse, env)
        if isinstance(test, ssa.Node) and test.shape != ():
            raise CoarsenUnsupported(f"line {node.lineno}: `if` on a non-scalar tensor")
        for stmt in node.body + node.orelse:
            for sub in ast.walk(stmt):
                if isinstance(sub, (ast.Return, ast.Break, ast.Continue)):
                    raise CoarsenUnsupported(f"line {sub.lineno}: {type(sub).__name__.lower()} inside a traced `if` "
                                             "(only `if ...: break` at the top of a loop body is supported)")
        if self.inlining:
            raise CoarsenUnsupported(f"line {node.lineno}: an `if` on a traced value inside helper "
                                     f"{self.fn_stack[-1].__name__}() (inline it by hand or move the `if` out)")
        site = site_of(node)
        if site not in self.branch_sites:
            self.branch_sites.append(site)
        entry = self.entry(site)
        then_env = self.run(node.body, dict(env))
        else_env = self.run(node.orelse, dict(env))
        merged = dict(env)
        for name in set(then_env) | set(else_env):
            a, b = then_env.get(name, else_env.get(name)), else_env.get(name, then_env.get(name))
            if a is b:
                merged[name] = a
            elif a is DYNAMIC or b is DYNAMIC:
                merged[name] = DYNAMIC
            elif isinstance(a, ssa.Node) or isinstance(b, ssa.Node):
                a, b = self.const(a), self.const(b)
                merged[name] = ssa.Phi(_broadcast(a.shape, b.shape), site, a, b, entry, tuple(self.loop_stack))
            elif a == b:
                merged[name] = a
            else:
                merged[name] = DYNAMIC
        return merged

    def st_For(self, node, env):
        if node.orelse:
            raise CoarsenUnsupported(f"line {node.lineno}: for-else")
        node = _without_continue(node)
        iterable = self.ev(node.iter, env)
        if isinstance(iterable, _TracedRange):
            if not isinstance(node.target, ast.Name):
                raise CoarsenUnsupported(f"line {node.lineno}: only `for name in range(...)` loops are traced")
            index = ssa.LoopIndex((), site_of(node), iterable.start)
            return self._loop(node, env, "for", None, iterable.start, {node.target.id: index})
        if isinstance(iterable, ssa.Node):
            iterable = self.rows(iterable, node)
        if iterable is DYNAMIC:
            raise CoarsenUnsupported(f"line {node.lineno}: iterating over a value that changes inside a loop")
        if not isinstance(iterable, range):
            env = dict(env)
            for item in iterable:  # a static collection: unroll while tracing
                self.bind(node.target, item, env)
                env = self.run(node.body, env)
            return env
        if iterable.step != 1 or not isinstance(node.target, ast.Name):
            if len(iterable) > STATIC_UNROLL:
                raise CoarsenUnsupported(f"line {node.lineno}: a `for` over {iterable} with more than {STATIC_UNROLL} "
                                         "iterations (only unit steps become traced loops)")
            env = dict(env)
            for item in iterable:  # short: unroll while tracing
                self.bind(node.target, item, env)
                env = self.run(node.body, env)
            return env
        if not self._touches_tensors(node.body, {**env, node.target.id: DYNAMIC}):
            env = dict(env)
            for i in iterable:
                env[node.target.id] = i
                env = self.run(node.body, env)
            return env
        index = ssa.LoopIndex((), site_of(node), iterable.start)
        return self._loop(node, env, "for", len(iterable), iterable.start, {node.target.id: index})

    def st_While(self, node, env):
        if node.orelse:
            raise CoarsenUnsupported(f"line {node.lineno}: while-else")
        node = _without_continue(node)
        return self._loop(node, env, "while", None, 0, {})

    def _touches_tensors(self, body, env) -> bool:
        try:
            probe = self.scoped_run(body, {k: (DYNAMIC if not isinstance(v, ssa.Node) and k in _assigned_names(body) else v)
                                    for k, v in env.items()})
        except CoarsenUnsupported:
            return True
        return any(isinstance(v, ssa.Node) for k, v in probe.items() if k in _assigned_names(body))

    def _loop(self, node, env, kind, trip, start, extra):
        if self.inlining:
            raise CoarsenUnsupported(f"line {node.lineno}: a loop over traced values inside helper "
                                     f"{self.fn_stack[-1].__name__}() (write the loop in the decorated function)")
        promoted: list[str] = []
        while True:
            try:
                return self._loop_once(node, env, kind, trip, start, extra, promoted)
            except DynamicInTensorMath as why:
                # state initialised from a Python number (`s = 0.0`) that meets tensors inside the loop:
                # carry it as a traced scalar from its initial value
                assigned = _assigned_names(list(node.body))
                fresh = [n for n in why.names if n in assigned and n not in promoted and n not in extra
                         and isinstance(env.get(n), (bool, int, float, np.floating, np.integer))]
                if not fresh:
                    raise
                promoted.extend(fresh)

    def _loop_once(self, node, env, kind, trip, start, extra, promoted):
        site = site_of(node)
        body = list(node.body)
        pre, post, break_site = body, [], None
        for pos, stmt in enumerate(body):
            if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[0], ast.Break):
                if len(stmt.body) != 1:
                    raise CoarsenUnsupported(f"line {stmt.lineno}: statements before `break` inside its `if`")
                pre, post, break_site = body[:pos], list(stmt.orelse) + body[pos + 1:], site_of(stmt)
                break_test = stmt.test
                break
        for stmt in pre + post:
            for sub in ast.walk(stmt):
                if isinstance(sub, (ast.Break, ast.Continue, ast.Return)):
                    if isinstance(sub, ast.Return) or not _inside_inner_loop(stmt, sub):
                        raise CoarsenUnsupported(f"line {sub.lineno}: {type(sub).__name__.lower()} in a traced loop "
                                                 "(only `if ...: break` at the top level of the body is supported)")
        assigned = [n for n in _assigned_names(body) if n not in extra]
        env = {**env, **{n: self.const(env[n]) for n in promoted}}
        node_vars = [n for n in assigned if isinstance(env.get(n), ssa.Node)]
        shapes = {n: env[n].shape for n in node_vars}
        for _attempt in range(4):
            carried = {n: ssa.Carried(shapes[n], site, k) for k, n in enumerate(node_vars)}
            inner = dict(env)
            for n in assigned:
                if n not in carried:
                    inner[n] = DYNAMIC if n in env else inner.get(n, None)
                    if inner[n] is None:
                        inner.pop(n)
            inner.update(carried)
            inner.update(extra)
            self.scopes.append({})
            self.loop_stack.append(site)
            try:
                after_pre = self.run(pre, inner)
                if break_site is not None:
                    test = self.ev(break_test, after_pre)
                    if not isinstance(test, ssa.Node) and test is not DYNAMIC:
                        raise CoarsenUnsupported(f"line {break_site[0]}: `break` on a static condition")
                after = self.run(post, after_pre)
            finally:
                self.scopes.pop()
                self.loop_stack.pop()
            promote = [n for n in assigned if n not in carried and isinstance(after.get(n), ssa.Node)]
            reshape = [n for n in node_vars if after[n].shape != shapes[n]]
            if not promote and not reshape:
                break
            for n in promote:
                node_vars.append(n)
                shapes[n] = after[n].shape
            for n in reshape:
                shapes[n] = _broadcast(shapes[n], after[n].shape)
        else:
            raise CoarsenUnsupported(f"line {node.lineno}: loop-carried shapes do not settle")
        inits = []
        for n in node_vars:
            value = env.get(n)
            if value is None or value is DYNAMIC:
                inits.append(None)
            else:
                inits.append(self.const(value))
        updates = tuple(self.const(after[n]) for n in node_vars)
        before = tuple(self.const(after_pre[n]) if n in after_pre else inits[k]
                       for k, n in enumerate(node_vars)) if break_site else None
        if before is not None and any(b is None for b in before):
            raise CoarsenUnsupported(f"line {node.lineno}: a variable first defined after the break is used")
        loop = ssa.Loop((), site, kind, tuple(node_vars), tuple(inits), updates, trip, start, before, break_site,
                        self.entry(site), tuple(self.loop_stack))
        self.loops.append(loop)
        out = dict(env)
        for k, n in enumerate(node_vars):
            out[n] = ssa.LoopOut(shapes[n], loop, k)
        for n in assigned:
            if n not in carried and n in env:
                out[n] = DYNAMIC
        for n, v in extra.items():
            out[n] = DYNAMIC
        return out


class _BoundMethod:
    def __init__(self, base: ssa.Node, name: str):
        self.base, self.name = base, name


class _TracedRange:
    """``range(start, stop)`` whose stop is an enclosing loop's counter (trip count recorded per run)."""

    def __init__(self, start: int):
        self.start = start


def _without_continue(loop):
    """``loop`` with ``if t: A; continue`` + rest of the body rewritten as ``if t: A else: rest``.

    Only a ``continue`` that ends an ``if`` at the top level of the body is rewritten (the meaning
    is the same); other ``continue``s stay and are refused later.
    """
    def rewrite(stmts):
        for pos, stmt in enumerate(stmts):
            if (isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], ast.Continue)
                    and not any(isinstance(s, ast.Continue) for b in stmt.body[:-1] for s in ast.walk(b))):
                rest = rewrite(list(stmts[pos + 1:]))
                orelse = list(stmt.orelse) + rest
                new = ast.If(test=stmt.test, body=list(stmt.body[:-1]) or [ast.Pass()], orelse=orelse)
                ast.copy_location(new, stmt)
                ast.fix_missing_locations(new)
                return list(stmts[:pos]) + [new]
        return list(stmts)

    if not any(isinstance(s, ast.Continue) for s in ast.walk(loop)):
        return loop
    new = copy.copy(loop)
    new.body = rewrite(list(loop.body))
    return new


class _IndexVar:
    """``stride * i + offset`` inside a subscript, ``i`` a loop counter starting at ``first``."""

    def __init__(self, site, offset, stride=1, first=0):
        self.site, self.offset, self.stride, self.first = site, offset, stride, first


def _affine_in_counter(value):
    """(counter, stride, offset) when ``value`` is ``stride * i + offset`` in one loop counter with
    integer constants (``i``, ``i + 1``, ``n - 1 - i``, ``-i + k``), else None."""
    if isinstance(value, ssa.LoopIndex):
        return value, 1, 0
    if isinstance(value, ssa.Const) and float(value.value).is_integer() and value.shape == ():
        return None, 0, int(value.value)
    if not isinstance(value, ssa.Op) or value.op not in ("add", "sub", "neg"):
        return None
    parts = [_affine_in_counter(a) for a in value.args]
    if any(p is None for p in parts):
        return None
    if value.op == "neg":
        counter, stride, offset = parts[0]
        return (counter, -stride, -offset) if counter is not None else None
    (ca, sa, oa), (cb, sb, ob) = parts
    if ca is not None and cb is not None and ca is not cb:
        return None
    sign = 1 if value.op == "add" else -1
    counter = ca if ca is not None else cb
    stride = sa + sign * sb
    if counter is None or stride == 0:
        return None
    return counter, stride, oa + sign * ob

def _inside_inner_loop(outer: ast.stmt, target: ast.AST) -> bool:
    for node in ast.walk(outer):
        if isinstance(node, (ast.For, ast.While)) and node is not outer:
            if any(sub is target for sub in ast.walk(node)):
                return True
    if isinstance(outer, (ast.For, ast.While)):
        return True
    return False


_CODE_LIKE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)
_LIBRARIES = ("torch", "jax", "jaxlib", "numpy", "math", "builtins", "sparsad", "scipy", "functools")


def _holds_node(value, depth: int = 0) -> bool:
    """Whether a list/tuple/dict (nested) holds traced tensors."""
    if isinstance(value, ssa.Node):
        return True
    if depth > 4:
        return False
    if isinstance(value, (list, tuple)):
        return any(_holds_node(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(_holds_node(v, depth + 1) for v in value.values())
    return False


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_constant_node(node: ssa.Node) -> bool:
    """True for expressions of loop counters and constants only (no value a gradient can flow through)."""
    if isinstance(node, (ssa.Const, ssa.LoopIndex)):
        return True
    if isinstance(node, ssa.Op):
        return all(_is_constant_node(a) for a in node.args)
    return False


def _is_user_function(func) -> bool:
    """A plain Python function written by the user (not a library's): traced by inlining."""
    target = func.__func__ if isinstance(func, types.MethodType) else func
    if not isinstance(target, types.FunctionType):
        return False
    module = (getattr(target, "__module__", None) or "").split(".")[0]
    return module not in _LIBRARIES


def _constant_array(value):
    """A NumPy copy of a constant torch / NumPy / JAX array, or None for other values."""
    module = (type(value).__module__ or "").split(".")[0]
    if module == "torch":
        import torch
        if isinstance(value, torch.Tensor):
            if value.requires_grad:
                raise CoarsenUnsupported("a tensor that requires grad is read from a global, closure or container; "
                                         "its gradient would be lost (pass it as an argument)")
            if value.layout != torch.strided:
                return None
            return value.detach().cpu().numpy()
        return None
    if module == "numpy" and isinstance(value, np.ndarray):
        return value
    if module in ("jax", "jaxlib") and hasattr(value, "shape") and hasattr(value, "dtype"):
        try:
            return np.asarray(value)
        except Exception as exc:  # an abstract tracer: not a constant
            raise CoarsenUnsupported("a JAX tracer from an enclosing transformation is used as a constant") from exc
    return None


def _static_constructor(name: str, args, kwargs, node):
    """``x.new_zeros(...)`` and friends as a NumPy constant (shape and fill value are static)."""
    if any(isinstance(a, ssa.Node) or a is DYNAMIC for a in list(args) + list(kwargs.values())):
        raise CoarsenUnsupported(f"line {node.lineno}: {name}() with traced arguments")
    if name == "new_tensor":
        return np.asarray(args[0], dtype=np.float64)
    fill = {"new_zeros": 0.0, "new_ones": 1.0, "new_empty": 0.0}.get(name)
    shape_args = args[:-1] if name == "new_full" else args
    if name == "new_full":
        fill = args[-1] if len(args) > 1 else kwargs.get("fill_value")
    shape = shape_args[0] if len(shape_args) == 1 and isinstance(shape_args[0], (tuple, list)) else shape_args
    return np.full(tuple(int(d) for d in shape), float(fill))


def _source_line(node: ast.AST) -> str:
    try:
        text = ast.unparse(node).splitlines()[0]
    except Exception:  # unparse of a hand-built node
        return type(node).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _tensor_function_name(func) -> str | None:
    """``exp`` for ``torch.exp``, ``jnp.exp``, ``np.exp``, ``math.exp`` ...; None for other callables."""
    module = getattr(func, "__module__", None) or ""
    name = getattr(func, "__name__", None)
    if name is None:
        return None
    if module.split(".")[0] in ("torch", "jax", "jaxlib", "numpy", "math") or isinstance(func, np.ufunc):
        return _ALIASES.get(name, name)
    return None


def _static_apply(name: str, args):
    if name in _PYCMP:
        return _PYCMP[name](*args)
    table = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
             "div": lambda a, b: a / b, "pow": lambda a, b: a ** b, "neg": lambda a: -a,
             "maximum": max, "minimum": min, "abs": abs}
    if name in table:
        return table[name](*args)
    fn = getattr(math, name, None)
    if fn is not None:
        return fn(*args)
    raise CoarsenUnsupported(f"static {name}() is not supported")


def _method_parts(method):
    """A bound method by what it is made of (a new method object is made at every attribute read)."""
    if isinstance(method, types.MethodType):
        return (method.__func__, method.__self__)
    return method


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


def trace(fn: Callable, args: tuple) -> ssa.Graph:
    """Trace ``fn`` applied to ``args`` (tensors become inputs; other values are static)."""
    fdef, _ = function_ast(fn)
    params = fdef.args
    if params.vararg or params.kwarg or params.kwonlyargs:
        raise CoarsenUnsupported(f"{fn.__name__}: *args, **kwargs and keyword-only parameters are not supported")
    names = [a.arg for a in params.args]
    if len(args) > len(names):
        raise CoarsenUnsupported(f"{fn.__name__}: too many arguments")
    defaults = list(fn.__defaults__ or ())
    full = list(args) + defaults[len(defaults) - (len(names) - len(args)):] if len(args) < len(names) else list(args)
    if len(full) != len(names):
        raise CoarsenUnsupported(f"{fn.__name__}: missing arguments")
    tensors = [v for v in full if _tensor_shape(v) is not None]
    first = tensors[0] if tensors else None
    torch_first = first is not None and type(first).__module__.startswith("torch")
    tracer = Tracer(fn, getattr(first, "dtype", None), first.device if torch_first else None)
    guard_defaults(tracer.guards, fn, fn.__code__.co_firstlineno)
    env: dict[str, Any] = {}
    inputs = []
    for position, (name, value) in enumerate(zip(names, full)):
        shape = _tensor_shape(value)
        if shape is None:
            env[name] = value
        elif 0 in shape:
            raise CoarsenUnsupported(f"{fn.__name__}: argument {name!r} is an empty tensor (shape {list(shape)})")
        else:
            node = ssa.Input(shape, name, position)
            inputs.append(node)
            env[name] = node
    try:
        tracer.run(fdef.body, env)
    except _Return as ret:
        value = ret.value
    else:
        raise CoarsenUnsupported(f"{fn.__name__}: no return statement at the top level")
    _check_returns(fdef)
    tuple_output = isinstance(value, tuple)
    outs = value if tuple_output else (value,)
    if not all(isinstance(o, ssa.Node) for o in outs):
        raise CoarsenUnsupported(f"{fn.__name__}: every returned value must be a traced tensor")
    return ssa.Graph(fn.__name__, tuple(inputs), tuple(outs), tuple_output, tuple(tracer.loops),
                     tuple(tracer.branch_sites), tracer.guards)


def _check_returns(fdef: ast.FunctionDef) -> None:
    body = fdef.body
    for stmt in body[:-1]:
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Return):
                raise CoarsenUnsupported(f"line {sub.lineno}: return before the end of the function")


def _tensor_shape(value) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None or isinstance(value, (np.generic,)):
        return None
    return tuple(int(s) for s in shape)
