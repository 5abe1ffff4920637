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
import operator
import types
from typing import Any, Callable

import numpy as np

from sparsad.coarsen import budget, ssa
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


class _NeedsStaticLoop(CoarsenUnsupported):
    """A construct needs the counter of the traced loops at ``sites`` as a Python int (``i % 2``,
    ``math.factorial(k)``, ``range(i + 1, n)``, ``z[:, t]``) or grows a list inside them
    (``outs.append(h)``): those loops, when short, are unrolled while tracing instead."""

    def __init__(self, message: str, sites):
        super().__init__(message)
        self.sites = frozenset(sites)


class _Stacked:
    """A tensor assembled from traced pieces along its first axis: ``stack``/``cat`` of traced values,
    ``A @ x`` of small tensors, a tensor after ``t[i] = v``.  Operations act on the pieces (reductions
    over the first axis become elementwise over them); ``Tracer.materialize`` makes it one node
    (each entry selected by its position) where a single value is needed (loop state, ``if``, return).
    """

    def __init__(self, items, is_view: bool = False):
        self.items = tuple(items)
        self.shape = (len(self.items),) + tuple(self.items[0].shape)
        self.is_view = is_view   # a slice of another assembled tensor (writes would reach it)

    def __repr__(self) -> str:
        return f"<stacked {list(self.shape)}>"


class _Detached:
    """``float(t)`` / ``t.item()`` of a traced scalar: a Python number without gradient.  It may decide
    ``if``s and conditional expressions (comparisons carry no gradient); arithmetic with it is refused."""

    def __init__(self, node: ssa.Node):
        self.node = node

    def __bool__(self):
        raise CoarsenUnsupported("the truth value of a number taken from a traced tensor decides Python code "
                                 "(compare it, as in `if float(t) > 0:`)")


class _NormalDist:
    """``torch.distributions.Normal(loc, scale)`` made inside the traced function (loc/scale traced or not)."""

    def __init__(self, loc, scale):
        self.loc, self.scale = loc, scale


class _DistMethod:
    def __init__(self, dist: _NormalDist, name: str):
        self.dist, self.name = dist, name


def _is_torch_normal(func) -> bool:
    return (isinstance(func, type) and func.__name__ == "Normal"
            and (func.__module__ or "").startswith("torch.distributions"))


def _traced(value) -> bool:
    return isinstance(value, (ssa.Node, _Stacked))


MAX_PIECES = 256      # entries of a tensor assembled from pieces, or of a vector reduced entry by entry
INLINE_DEPTH = 8      # nested user helper functions inlined while tracing
STATIC_UNROLL = 64    # iterations of a non-range (or non-unit step) loop unrolled while tracing
_CONSTRUCTORS_LIKE = {"zeros_like": 0.0, "ones_like": 1.0, "full_like": None, "empty_like": 0.0}
_CONSTRUCTORS = {"zeros", "ones", "full", "tensor", "as_tensor", "asarray", "array", "arange", "linspace",
                 "empty", "eye", "scalar_tensor"}
_IDENTITY_METHODS = {"double", "float", "to", "type_as", "requires_grad_", "cpu"}

UNARY = {"exp", "log", "sin", "cos", "tan", "tanh", "sqrt", "abs", "sigmoid", "softplus", "relu",
         "log1p", "expm1", "square", "neg", "sinh", "cosh", "asin", "acos", "atan", "erf", "sign", "lgamma",
         "digamma", "log2", "log10", "exp2", "rsqrt", "reciprocal", "asinh", "acosh", "atanh"}
BINARY = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"}
_ALIASES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "fabs": "abs", "absolute": "abs",
            "multiply": "mul", "add": "add", "subtract": "sub", "divide": "div", "true_divide": "div",
            "power": "pow", "pow": "pow", "negative": "neg", "max": "maximum", "min": "minimum",
            "linalg_norm": "norm", "linalg_vector_norm": "norm", "concat": "cat", "gammaln": "lgamma",
            "psi": "digamma", "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh"}
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow"}
_PY_BINOPS = {ast.Mod: operator.mod, ast.FloorDiv: operator.floordiv, ast.MatMult: operator.matmul,
              ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitOr: operator.or_,
              ast.BitXor: operator.xor, ast.BitAnd: operator.and_}
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
        for node in _walk_own_scope(stmt):
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
        self.frames: list[int] = [0]     # ids of the function bodies being traced (innermost last)
        self.frame_derived: list[bool] = [False]  # whether a frame's names come from the frame below (local defs)
        self.frame_locals: list[frozenset] = [frozenset()]  # local names of each inlined body
        self.next_frame = 1
        self.notes: list[str] = []              # decisions worth explaining (see ``explain``)
        self.compiled_loops = True             # whether loops without closed form can become compiled loops
        self.short_loops: dict = {}             # site -> whether the traced `for` may be unrolled while tracing
        self.own_lists: dict[int, tuple] = {}   # id -> (list, traced-loop depth at its creation): lists made here
        self.narrow: dict[int, str] = {}         # id -> dtype of constant tensors made with another dtype
        self.origins: dict[int, tuple] = {}      # id of a Carried node -> (it, value before the loop, env there)

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
            if array.ndim == 1 and array.size <= MAX_PIECES and not np.any(np.isnan(flat)):
                return self.constant_vector(flat)
            raise CoarsenUnsupported(f"line {self.line}: a constant tensor with different entries "
                                     f"(shape {list(array.shape)}) enters tensor arithmetic; vectors of at most "
                                     f"{MAX_PIECES} entries are supported (pass it as an argument)")
        if isinstance(value, _Stacked):
            return self.materialize(value)
        if isinstance(value, (list, tuple)) and any(_traced(v) for v in value):
            raise CoarsenUnsupported(f"line {self.line}: a Python list or tuple of traced tensors used as a tensor "
                                     "(wrap it in torch.stack)")
        raise CoarsenUnsupported(f"line {self.line}: value {_short(value)} of type {type(value).__name__} "
                                 "cannot enter tensor arithmetic")

    def constant_vector(self, flat: np.ndarray) -> ssa.Node:
        """A constant vector with different entries: ``start + step * iota`` when that is exact, else
        each entry selected by its position."""
        n = flat.size
        iota = ssa.Iota((n,))
        step = flat[1] - flat[0]
        if np.array_equal(flat[0] + step * np.arange(n, dtype=np.float64), flat):
            return self.op("add", self.op("mul", iota, float(step)), float(flat[0]))
        return _select_by_position(iota, [ssa.Const((), float(v)) for v in flat])

    def materialize(self, stacked: _Stacked) -> ssa.Node:
        """One node for a tensor assembled from scalar pieces: entry k is selected where iota == k."""
        items = [self.const(v) for v in stacked.items]
        if any(item.shape != () for item in items):
            raise CoarsenUnsupported(f"line {self.line}: a tensor of shape {list(stacked.shape)} assembled from "
                                     "traced rows is used as a whole (only vectors assembled from scalars are; "
                                     "reductions over its first axis are supported)")
        n = len(items)
        if n == 1:
            return ssa.Op((1,), "add", (items[0], ssa.Const((1,), 0.0)))
        return _select_by_position(ssa.Iota((n,)), items)

    def op(self, name: str, *args) -> Any:
        if any(isinstance(a, _Detached) for a in args):
            if name not in _PYCMP:
                raise CoarsenUnsupported(f"line {self.line}: a Python number taken from a traced tensor (float(), "
                                         "int(), .item()) is used in arithmetic: autograd gives it no gradient")
            args = tuple(a.node if isinstance(a, _Detached) else a for a in args)  # comparisons carry none
        if any(a is DYNAMIC for a in args):
            if any(_traced(a) for a in args):
                raise DynamicInTensorMath("a Python value that changes inside a loop is used in tensor arithmetic")
            return DYNAMIC
        if any(isinstance(a, _Stacked) for a in args):
            return self.stacked_op(name, args)
        if not any(isinstance(a, ssa.Node) for a in args):
            return _static_apply(name, args)
        budget.check()
        nodes = tuple(self.const(a) for a in args)
        return ssa.Op(_broadcast(*(n.shape for n in nodes)), name, nodes)

    def stacked_op(self, name: str, args) -> "_Stacked":
        """An elementwise operation with an assembled tensor: applied piece by piece."""
        shapes = [a.shape if _traced(a) else () for a in args]
        full = _broadcast(*shapes)
        n = full[0]
        parts = []
        for a, shape in zip(args, shapes):
            if isinstance(a, _Stacked):
                parts.append(list(a.items) if len(a.items) == n else [a.items[0]] * n)
            elif isinstance(a, ssa.Node) and len(shape) == len(full):
                parts.append([_row(a, k if shape[0] == n else 0) for k in range(n)])
            else:
                parts.append([a] * n)  # fewer axes: broadcast against every piece
        return _Stacked([self.op(name, *column) for column in zip(*parts)])

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
        if node.id in self.frame_locals[-1]:
            raise CoarsenUnsupported(f"line {node.lineno}: local variable {node.id!r} is read before it is assigned")
        return self.lookup(node.id, node.lineno)

    def ev_Lambda(self, node, env):
        fdef = ast.FunctionDef(name="<lambda>", args=node.args, body=[ast.Return(node.body)], decorator_list=[],
                               returns=None, type_comment=None)
        ast.copy_location(fdef, node)
        ast.fix_missing_locations(fdef)
        return self.local_function(fdef, env)

    def local_function(self, fdef: ast.FunctionDef, env) -> "_LocalFunction":
        params = fdef.args
        if params.vararg or params.kwarg or params.kwonlyargs or params.posonlyargs:
            raise CoarsenUnsupported(f"line {fdef.lineno}: local function {fdef.name}() takes *args, **kwargs, "
                                     "keyword-only or positional-only parameters")
        defaults = tuple(self.ev(d, env) for d in params.defaults)  # evaluated once, at the def (as Python does)
        return _LocalFunction(fdef, self.fn_stack[-1], self.frames[-1], defaults)

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

    def ev_List(self, node, env):
        return self.new_list([self.ev(e, env) for e in node.elts])

    def new_list(self, items: list, depth: int | None = None) -> list:
        """A list made by the traced code (``append`` may grow it; loops it grows in are unrolled)."""
        self.own_lists[id(items)] = (items, len(self.loop_stack) if depth is None else depth)
        return items

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
            if _traced(iterable):
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
                if any(_traced(t) or t is DYNAMIC for t in tests):
                    raise CoarsenUnsupported(f"line {node.lineno}: a comprehension filtered on a traced value")
                if all(tests):
                    walk(k + 1, inner)

        walk(0, env)
        return self.new_list(items)

    ev_GeneratorExp = ev_ListComp

    def ev_BinOp(self, node, env):
        left, right = self.ev(node.left, env), self.ev(node.right, env)
        kind = _BINOPS.get(type(node.op))
        if kind is None:
            if not _traced(left) and not _traced(right):
                if left is DYNAMIC or right is DYNAMIC:
                    return DYNAMIC
                try:
                    return _PY_BINOPS[type(node.op)](left, right)
                except Exception as exc:
                    raise CoarsenUnsupported(f"line {node.lineno}: `{_source_line(node)}` failed while tracing: "
                                             f"{type(exc).__name__}: {exc}") from exc
            if isinstance(node.op, ast.MatMult):
                return self.matmul(left, right, node)
            counters = _counter_sites(left) | _counter_sites(right)
            if counters and all(_counter_sites(v) or not _traced(v) for v in (left, right)):
                raise _NeedsStaticLoop(f"line {node.lineno}: operator {type(node.op).__name__} on a loop counter",
                                       counters)
            raise CoarsenUnsupported(f"line {node.lineno}: operator {type(node.op).__name__} on tensors")
        return self.op(kind, left, right)

    def ev_UnaryOp(self, node, env):
        value = self.ev(node.operand, env)
        if isinstance(node.op, ast.USub):
            return self.op("neg", value)
        if isinstance(node.op, ast.UAdd):
            return value
        if isinstance(node.op, ast.Not) and not _traced(value):
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
        if any(_traced(v) for v in values):
            raise CoarsenUnsupported(f"line {node.lineno}: `and`/`or` on tensors")
        if any(v is DYNAMIC for v in values):
            return DYNAMIC
        result = values[0]
        for v in values[1:]:
            result = (result and v) if isinstance(node.op, ast.And) else (result or v)
        return result

    def ev_IfExp(self, node, env):
        test = self.ev(node.test, env)
        if isinstance(test, _Detached):
            test = self.op("ne", test, 0.0)
        if isinstance(test, ssa.Node) and test.shape == ():
            # `a if t else b` on a traced scalar: both arms are traced and the one taken is selected
            # elementwise (its derivative too), so the untaken arm never reaches the result
            return self.op("where", test, self.ev(node.body, env), self.ev(node.orelse, env))
        if _traced(test) or test is DYNAMIC:
            raise CoarsenUnsupported(f"line {node.lineno}: conditional expression on a changing or non-scalar value")
        return self.ev(node.body if test else node.orelse, env)

    def ev_Attribute(self, node, env):
        base = self.ev(node.value, env)
        if isinstance(base, _NormalDist):
            if node.attr in ("loc", "mean"):
                return base.loc
            if node.attr in ("scale", "stddev"):
                return base.scale
            if node.attr in ("cdf", "log_prob"):
                return _DistMethod(base, node.attr)
            raise CoarsenUnsupported(f"line {node.lineno}: Normal.{node.attr} is not supported (cdf, log_prob are)")
        if _traced(base):
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
        counters = _key_counters(key)
        if not _traced(base):
            if base is DYNAMIC or key is DYNAMIC:
                return DYNAMIC
            if counters:
                raise _NeedsStaticLoop(f"line {node.lineno}: a Python list/tuple or constant indexed by a loop "
                                       "counter", counters)
            if _holds_node(key):
                raise CoarsenUnsupported(f"line {node.lineno}: a Python list/tuple or constant indexed by a traced "
                                         "value (make it a tensor argument)")
            try:
                return base[key]
            except (IndexError, KeyError, TypeError) as exc:
                raise CoarsenUnsupported(f"line {node.lineno}: indexing failed while tracing: {exc}") from exc
        if isinstance(key, _IndexVar):
            if isinstance(base, _Stacked):
                base = self.materialize(base)
            if len(base.shape) < 1:
                raise CoarsenUnsupported(f"line {node.lineno}: indexing a scalar")
            if not -base.shape[0] <= key.offset + key.stride * key.first <= base.shape[0] - 1:
                raise CoarsenUnsupported(f"line {node.lineno}: index out of range at the loop's first iteration")
            return ssa.Index(base.shape[1:], base, key.site, key.offset, key.stride)
        if counters:
            raise _NeedsStaticLoop(f"line {node.lineno}: a tensor indexed by `{_source_line(node.slice)}` (a loop "
                                   "counter in a slice or a tuple index)", counters)
        if key is DYNAMIC or _holds_node(key):
            raise CoarsenUnsupported(f"line {node.lineno}: indexing with `{_source_line(node.slice)}`, a value "
                                     "unknown when tracing (a data-dependent index)")
        if any(isinstance(k, slice) and k.step is not None and k.step < 0
               for k in (key if isinstance(key, tuple) else (key,))):
            raise CoarsenUnsupported(f"line {node.lineno}: index {_short(key)} (negative steps in a subscript) "
                                     "is not supported")
        return self.take(base, key, node)

    def ev_key(self, node, env):
        if isinstance(node, ast.Slice):
            parts = [None if p is None else self.ev(p, env) for p in (node.lower, node.upper, node.step)]
            counters = frozenset().union(*[_key_counters(p) for p in parts])
            if counters:
                return _CounterKey(counters)
            if any(_traced(p) or p is DYNAMIC for p in parts):
                return DYNAMIC
            return slice(*parts)
        if isinstance(node, ast.Tuple):
            parts = tuple(self.ev_key(e, env) for e in node.elts)
            counters = frozenset().union(*[_key_counters(p) for p in parts])
            if counters:
                return _CounterKey(counters)
            if any(p is DYNAMIC or _traced(p) for p in parts):
                return DYNAMIC
            return parts
        value = self.ev(node, env)
        affine = _affine_in_counter(value) if isinstance(value, ssa.Node) else None
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
        if func is builtins.range and not kwargs and any(_traced(a) for a in args):
            start = args[0] if len(args) == 2 else 0
            if len(args) in (1, 2) and isinstance(start, int) and _traced(args[-1]) and \
                    _is_constant_node(args[-1]) and args[-1].shape == ():
                return _TracedRange(start)  # `range(i)` with `i` an outer counter: the trip count is recorded
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

    def rows(self, value, node) -> tuple:
        """A traced tensor iterated over: its rows, as views (unrolled while tracing, so kept short)."""
        if isinstance(value, _Stacked):
            return value.items
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

    def reduce(self, value):
        if isinstance(value, _Stacked):
            total = self.reduce(value.items[0])
            for item in value.items[1:]:
                total = self.op("add", total, self.reduce(item))
            return total
        value = self.const(value)
        if value.shape == ():
            return value
        return ssa.Reduce((), value)

    def entries(self, value, node) -> list:
        """Every entry of a traced tensor as a scalar node (vectors reduced entry by entry; kept short)."""
        if isinstance(value, _Stacked):
            return [e for item in value.items for e in self.entries(item, node)]
        value = self.const(value)
        count = int(np.prod(value.shape)) if value.shape else 1
        if count > MAX_PIECES:
            raise CoarsenUnsupported(f"line {node.lineno}: a reduction entry by entry over {count} entries "
                                     f"(at most {MAX_PIECES})")
        if value.shape == ():
            return [value]
        return [ssa.View((), value, tuple(int(i) for i in index) if len(value.shape) > 1 else int(index[0]))
                for index in np.ndindex(*value.shape)]

    def fold_max(self, values: list, largest: bool = True):
        """max (min) of traced values of one shape; the gradient goes to the selected one (the first of
        equal ones).  Scalars are gathered into a vector first, so that no comparison holds another."""
        values = [v if _traced(v) else self.const(v) for v in values]
        if len(values) == 1:
            return values[0]
        if all(v.shape == () for v in values):
            return self.vector_max(self.materialize(_Stacked(values)), largest)
        while len(values) > 1:
            half = (len(values) + 1) // 2
            firsts, seconds = values[:half], values[len(values) - half:]  # overlapping halves (max is idempotent)
            values = [_cut(self.op("where", self.op("ge" if largest else "le", a, b), a, b))
                      for a, b in zip(firsts, seconds)]
        return values[0]

    def tied_mean(self, values, m, largest: bool = True):
        """The mean of the entries equal to the extremum ``m`` (which is ``m``): the gradient is split
        evenly among tied entries, as torch's max/amax do (``m`` enters only conditions).  Entries are
        read through views, so that conditions compare symbols (never other selections)."""
        test = "ge" if largest else "le"
        if not isinstance(values, ssa.Node):
            if all(self.const(v).shape == () for v in values):
                values = self.materialize(_Stacked([self.const(v) for v in values]))
            else:
                values = [_cut(self.const(v)) for v in values]
        if isinstance(values, ssa.Node):
            values = _cut(values)
            hit = self.op(test, values, m)
            return self.op("div", self.reduce(self.op("where", hit, values, 0.0)),
                           self.reduce(self.op("where", hit, 1.0, 0.0)))
        total = count = None
        for v in values:
            hit = self.op(test, v, m)
            part, one = self.op("where", hit, v, 0.0), self.op("where", hit, 1.0, 0.0)
            total = part if total is None else self.op("add", total, part)
            count = one if count is None else self.op("add", count, one)
        return self.op("div", total, count)

    def first_max(self, values: list, largest: bool = True):
        """Python's ``max(list)`` of scalars: the first extremal item (its gradient goes to it only).
        Entry k is first when ``hit_k - (hits before k) > 0.5``: conditions on sums of symbols."""
        vector = self.materialize(_Stacked([self.const(v) for v in values]))
        n = vector.shape[0]
        items = [ssa.View((), vector, k) for k in range(n)]
        m = self.vector_max(vector, largest)
        test = "ge" if largest else "le"
        hits = self.materialize(_Stacked([self.op("where", self.op(test, item, m), 1.0, 0.0) for item in items]))
        total, before = None, 0.0
        for k in range(n):
            hit = ssa.View((), hits, k)
            term = self.op("where", self.op("gt", self.op("sub", hit, before), 0.5), items[k], 0.0)
            total = term if total is None else self.op("add", total, term)
            before = self.op("add", before, hit)
        return total

    def vector_max(self, vector: ssa.Node, largest: bool = True) -> ssa.Node:
        """max (min) of a vector by halving: ``where(a >= b, a, b)`` on its two (overlapping) halves."""
        while vector.shape[0] > 1:
            n = vector.shape[0]
            half = (n + 1) // 2
            a = ssa.View((half,), vector, slice(0, half))
            b = ssa.View((half,), vector, slice(n - half, n))
            vector = ssa.Op((half,), "where", (ssa.Op((half,), "ge" if largest else "le", (a, b)), a, b))
        return ssa.View((), vector, 0)

    def along_first(self, value, node, dim):
        """The pieces along the reduced axis (``dim`` None: every entry; 0: the first axis)."""
        shape = value.shape if _traced(value) else ()
        if dim is None or (len(shape) == 1 and dim in (0, -1)):
            return self.entries(value, node)
        if dim in (0, -len(shape)) and isinstance(value, _Stacked):
            return list(value.items)
        if dim in (0, -len(shape)) and len(shape) >= 1 and shape[0] <= MAX_PIECES:
            return [ssa.View(shape[1:], value, k) for k in range(shape[0])]
        raise CoarsenUnsupported(f"line {node.lineno}: a reduction over axis {dim} of a tensor of shape "
                                 f"{list(shape)} (only full reductions and the first axis are supported)")

    def call_named(self, name: str, args, kwargs, node):
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

    def reduction(self, name: str, value, kwargs, node):
        """Full reductions, reductions over the first axis, and softmax / logsumexp (max-shifted)."""
        known = {"dim", "axis", "keepdim", "keepdims", "dtype", "ord"}
        if set(kwargs) - known or kwargs.get("keepdim") or kwargs.get("keepdims") or kwargs.get("ord") is not None:
            raise CoarsenUnsupported(f"line {node.lineno}: {name}() with arguments {sorted(kwargs)}")
        if kwargs.get("dtype") is not None and self.dtype is not None and kwargs["dtype"] != self.dtype:
            raise CoarsenUnsupported(f"line {node.lineno}: {name}() in dtype {kwargs['dtype']} (it would round)")
        dim = kwargs.get("dim", kwargs.get("axis"))
        if isinstance(dim, (tuple, list)):
            dim = dim[0] if len(dim) == 1 else "many"
        if name in ("softmax", "log_softmax") and dim is None:
            dim = -1  # jax.nn.softmax's default axis (torch requires one)
        if dim is not None and not isinstance(dim, int):
            raise CoarsenUnsupported(f"line {node.lineno}: {name}() over axes {dim}")
        if name == "norm":
            if dim is not None:
                raise CoarsenUnsupported(f"line {node.lineno}: norm() over an axis")
            # (at an all-zero vector the gradient is NaN where torch's is 0: selecting 0 there with `where`
            # makes the elevated adjoint divide by zero symbolically, so it is left as is)
            return self.op("sqrt", self.reduce(self.op("mul", value, value)))
        if name in ("maximum", "minimum") and dim is not None:
            raise CoarsenUnsupported(f"line {node.lineno}: {name.replace('imum', '')}() with a dim returns values "
                                     "and indices (use amax/amin)")
        if name in ("sum", "mean") and dim is None:
            total = self.reduce(value)
            count = int(np.prod(value.shape)) if value.shape else 1
            return total if name == "sum" else self.op("div", total, float(count))
        shape = value.shape
        largest = name not in ("minimum", "amin")
        if isinstance(value, ssa.Node) and len(shape) == 1 and dim in (None, 0, -1):
            # a vector: vector arithmetic (its max by halving), whatever its length
            if name in ("sum", "mean"):
                return self.reduction(name, value, {}, node)
            m = self.vector_max(value, largest)
            if name in ("maximum", "amax", "minimum", "amin"):
                return self.tied_mean(value, m, largest)
            shifted = self.op("sub", value, m)
            lse = self.op("log", self.reduce(self.op("exp", shifted)))
            if name == "logsumexp":
                return self.op("add", m, lse)
            if name == "log_softmax":
                return self.op("sub", shifted, lse)
            return self.op("exp", self.op("sub", shifted, lse))
        pieces = self.along_first(value, node, dim)
        if name in ("sum", "mean"):
            total = pieces[0]
            for p in pieces[1:]:
                total = self.op("add", total, p)
            return total if name == "sum" else self.op("div", total, float(len(pieces)))
        m = self.fold_max(pieces, largest)
        if name in ("maximum", "amax", "minimum", "amin"):
            return self.tied_mean(pieces, m, largest)
        total = self.op("exp", self.op("sub", pieces[0], m))
        for p in pieces[1:]:
            total = self.op("add", total, self.op("exp", self.op("sub", p, m)))
        lse = self.op("add", m, self.op("log", total))
        if name == "logsumexp":
            return lse
        if dim is None:
            raise CoarsenUnsupported(f"line {node.lineno}: {name}() over every entry of a tensor of shape "
                                     f"{list(shape)}")
        logs = [self.op("sub", p, lse) for p in pieces]
        return _Stacked(logs if name == "log_softmax" else [self.op("exp", p) for p in logs])

    def stack(self, items, dim, node) -> _Stacked:
        if not items:
            raise CoarsenUnsupported(f"line {node.lineno}: stack of an empty list")
        if len(items) > MAX_PIECES:
            raise CoarsenUnsupported(f"line {node.lineno}: stack of {len(items)} pieces (at most {MAX_PIECES})")
        pieces = [v if isinstance(v, _Stacked) else self.const(v) for v in items]
        shapes = {p.shape for p in pieces}
        if len(shapes) != 1:
            raise CoarsenUnsupported(f"line {node.lineno}: stack of pieces of different shapes {sorted(shapes)}")
        ndim = len(pieces[0].shape)
        if dim not in (0, -ndim - 1):
            raise CoarsenUnsupported(f"line {node.lineno}: stack along axis {dim} (only the first axis)")
        return _Stacked([self.materialize(p) if isinstance(p, _Stacked) else p for p in pieces])

    def concatenate(self, items, dim, node) -> _Stacked:
        rows = []
        for v in items:
            shape = v.shape if _traced(v) else np.shape(v)
            if len(shape) == 0:
                raise CoarsenUnsupported(f"line {node.lineno}: cat of a 0-d tensor")
            if dim not in (0, -len(shape)):
                raise CoarsenUnsupported(f"line {node.lineno}: cat along axis {dim} (only the first axis)")
            if isinstance(v, _Stacked):
                rows.extend(v.items)
            else:
                v = self.const(v)
                rows.extend(_row(v, k) for k in range(v.shape[0]))
            if len(rows) > MAX_PIECES:
                raise CoarsenUnsupported(f"line {node.lineno}: cat of more than {MAX_PIECES} rows")
        if not rows or len({r.shape for r in rows}) != 1:
            raise CoarsenUnsupported(f"line {node.lineno}: cat of pieces whose trailing shapes differ")
        return _Stacked(rows)

    def matmul(self, a, b, node):
        """``a @ b`` of small tensors as sums of scaled rows/columns (the inner extent is kept short)."""
        sa, sb = (a.shape if _traced(a) else np.shape(a)), (b.shape if _traced(b) else np.shape(b))
        if not (1 <= len(sa) <= 2 and 1 <= len(sb) <= 2) or sa[-1] != sb[0]:
            raise CoarsenUnsupported(f"line {node.lineno}: matmul of shapes {list(sa)} and {list(sb)}")
        n = sa[-1]
        if n > MAX_PIECES:
            raise CoarsenUnsupported(f"line {node.lineno}: matmul with inner extent {n} (at most {MAX_PIECES})")
        if len(sa) == 1 and len(sb) == 1:
            return self.reduce(self.op("mul", a, b))
        a = a if isinstance(a, _Stacked) else self.const(a)
        b = b if isinstance(b, _Stacked) else self.const(b)
        total = None
        for j in range(n):
            left = self.take(a, j if len(sa) == 1 else (slice(None), slice(j, j + 1) if len(sb) == 2 else j), node)
            term = self.op("mul", left, self.take(b, j, node))
            total = term if total is None else self.op("add", total, term)
        return total

    def take(self, value, key, node):
        """``value[key]`` for a static int/slice key (tuples: leading int or full slice, then the rest)."""
        if isinstance(value, _Stacked):
            head, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
            if isinstance(head, int):
                item = value.items[head]
                return self.take(item, rest, node) if rest else item
            if isinstance(head, slice):
                items = value.items[head]
                if not items:
                    raise CoarsenUnsupported(f"line {node.lineno}: an empty slice")
                if not rest:
                    return _Stacked(items, is_view=True)
                return _Stacked([self.take(item, rest, node) for item in items], is_view=True)
            raise CoarsenUnsupported(f"line {node.lineno}: index {_short(key)} of an assembled tensor")
        if key == ():
            return value
        if any(not isinstance(k, (int, np.integer, slice, type(None), type(Ellipsis))) or isinstance(k, bool)
               for k in (key if isinstance(key, tuple) else (key,))):
            raise CoarsenUnsupported(f"line {node.lineno}: index {_short(key)} (a gather by a list, array or "
                                     "mask; only ints and slices)")
        try:
            shape = tuple(np.empty(value.shape, dtype=np.int8)[key].shape)
        except (IndexError, TypeError, ValueError) as exc:
            raise CoarsenUnsupported(f"line {node.lineno}: index {_short(key)} is not a static int/slice index") from exc
        if 0 in shape:
            raise CoarsenUnsupported(f"line {node.lineno}: an empty slice")
        if isinstance(value, ssa.Const):
            return ssa.Const(shape, value.value)
        return ssa.View(shape, value, key)

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
        if name in ("contiguous", "flatten", "ravel") and not args:
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
        budget.check()
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
        call = node.value
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
                and call.func.attr in ("append", "extend") and len(call.args) == 1 and not call.keywords):
            return self.grow_list(call.func.value.id, call.func.attr, self.ev(call.args[0], env), node, env)
        raise CoarsenUnsupported(f"line {node.lineno}: the expression statement `{_source_line(node)}` (a side "
                                 "effect) is not supported")

    def grow_list(self, name: str, how: str, item, node, env):
        """``name.append(item)`` as a new list bound to ``name`` (the list must be this function's own)."""
        current = env.get(name)
        owned = self.own_lists.get(id(current))
        if not isinstance(current, list) or owned is None or owned[0] is not current:
            raise CoarsenUnsupported(f"line {node.lineno}: `{name}.{how}(...)` changes a list the traced code did "
                                     "not create here (an argument, global or attribute)")
        if _aliased(current, name, env):
            raise CoarsenUnsupported(f"line {node.lineno}: `{name}.{how}(...)` changes a list that another "
                                     "variable also refers to")
        depth = owned[1]
        if len(self.loop_stack) > depth:
            raise _NeedsStaticLoop(f"line {node.lineno}: `{name}.{how}(...)` grows a list inside a loop",
                                   self.loop_stack[depth:])
        if how == "append":
            grown = current + [item]
        else:
            if item is DYNAMIC:
                raise CoarsenUnsupported(f"line {node.lineno}: extend() with a changing value")
            grown = current + list(self.rows(item, node) if _traced(item) else item)
        env = dict(env)
        env[name] = self.new_list(grown, depth)
        return env

    def st_Pass(self, node, env):
        return env

    def st_FunctionDef(self, node, env):
        if node.decorator_list:
            raise CoarsenUnsupported(f"line {node.lineno}: a decorated local function {node.name}()")
        env = dict(env)
        env[node.name] = self.local_function(node, env)
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
        if isinstance(node.target, ast.Subscript) and isinstance(node.target.value, ast.Name):
            load = copy.copy(node.target)
            load.ctx = ast.Load()
            value = self.ev_BinOp(ast.BinOp(left=load, op=node.op, right=node.value, lineno=node.lineno), env)
            env = dict(env)
            self.assign_item(node.target, value, env)
            return env
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
            if _traced(value):
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
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            self.assign_item(target, value, env)
        else:
            raise CoarsenUnsupported(f"line {target.lineno}: assignment to `{_source_line(target)}` "
                                     f"({type(target).__name__}) is not supported")

    def assign_item(self, target: ast.Subscript, value, env) -> None:
        """``t[key] = value`` as a new tensor bound to ``t`` (only when nothing else refers to ``t``)."""
        name, line = target.value.id, target.lineno
        base = env.get(name)
        if base is None:
            base = self.lookup(name, line)
        key = self.ev_key(target.slice, env)
        if not _traced(base):
            if isinstance(base, (list, dict)) or base is DYNAMIC:
                raise CoarsenUnsupported(f"line {line}: item assignment `{_source_line(target)} = ...` into a "
                                         f"Python {type(base).__name__}")
            raise CoarsenUnsupported(f"line {line}: item assignment into {type(base).__name__} {name!r}")
        counters = _key_counters(key)
        if counters:
            raise _NeedsStaticLoop(f"line {line}: `{_source_line(target)} = ...` writes at a loop counter", counters)
        why = self.writable(base, name, env)
        if why:
            raise CoarsenUnsupported(f"line {line}: `{_source_line(target)} = ...` writes in place into {name!r}, "
                                     f"which {why}; autograd would see the write there too")
        if key is DYNAMIC or _holds_node(key) or not base.shape:
            raise CoarsenUnsupported(f"line {line}: `{_source_line(target)} = ...` with an index unknown when tracing")
        head, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        n = base.shape[0]
        if rest or not isinstance(head, (int, slice)) or isinstance(head, bool) or n > MAX_PIECES:
            raise CoarsenUnsupported(f"line {line}: `{_source_line(target)} = ...`: only writes of rows "
                                     f"(t[i] = v, t[a:b] = v) of tensors of at most {MAX_PIECES} rows are supported")
        items = list(base.items) if isinstance(base, _Stacked) else [_row(base, k) for k in range(n)]
        positions = [head % n] if isinstance(head, int) and -n <= head < n else (
            list(range(n))[head] if isinstance(head, slice) else None)
        if not positions:
            raise CoarsenUnsupported(f"line {line}: `{_source_line(target)} = ...`: index out of range or empty")
        row_shape = base.shape[1:]
        vshape = value.shape if _traced(value) else np.shape(value)
        if isinstance(head, slice) and len(vshape) == len(row_shape) + 1:
            rows = self.rows(value, target) if _traced(value) else list(value)
            if len(rows) == 1:
                rows = list(rows) * len(positions)
            if len(rows) != len(positions):
                raise CoarsenUnsupported(f"line {line}: writing {len(rows)} rows into {len(positions)}")
        else:
            rows = [value] * len(positions)
        for k, row in zip(positions, rows):
            fitted = self.op("add", ssa.Const(row_shape, 0.0), row)  # the row's shape (broadcast as torch does)
            if fitted.shape != row_shape:
                raise CoarsenUnsupported(f"line {line}: a value of shape {list(fitted.shape)} written into a row "
                                         f"of shape {list(row_shape)}")
            items[k] = fitted
        env[name] = _Stacked(items)

    def writable(self, value, name: str, env) -> str | None:
        """Why an in-place write into ``value`` (bound to ``name``) would be seen elsewhere, or None."""
        while True:
            if isinstance(value, (ssa.Input,)):
                return "is an argument"
            if isinstance(value, (ssa.View, ssa.Index)) or getattr(value, "is_view", False):
                return "is a view of another tensor"
            if id(value) in self.narrow:
                return f"has dtype {self.narrow[id(value)]} (the write would round); create it with dtype=x.dtype"
            if _aliased(value, name, env):
                return "another variable (or a list) also refers to"
            origin = self.origins.get(id(value)) if isinstance(value, ssa.Carried) else None
            if origin is None or origin[0] is not value:
                return None
            _, value, env = origin  # loop state: the tensor it started from must be free too

    def st_Return(self, node, env):
        raise _Return(self.ev(node.value, env) if node.value is not None else None)

    def st_If(self, node, env):
        test = self.ev(node.test, env)
        if isinstance(test, _Detached):
            test = self.op("ne", test, 0.0)
        if not _traced(test) and test is not DYNAMIC:
            return self.run(node.body if test else node.orelse, env)
        if _traced(test) and test.shape != ():
            raise CoarsenUnsupported(f"line {node.lineno}: `if` on a non-scalar tensor")
        counters = _counter_sites(test)
        if counters and all(self.short_loops.get(site) for site in counters):
            # `if i != j` on counters of short loops: unrolled, the test is a Python bool
            raise _NeedsStaticLoop(f"line {node.lineno}: `if` on loop counters", counters)
        for stmt in node.body + node.orelse:
            for sub in _walk_own_scope(stmt):
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
            elif _traced(a) or _traced(b):
                a, b = self.const(a), self.const(b)
                merged[name] = ssa.Phi(_broadcast(a.shape, b.shape), site, a, b, entry, tuple(self.loop_stack),
                                       test if isinstance(test, ssa.Node) else None)
            elif a == b:
                merged[name] = a
            else:
                merged[name] = DYNAMIC
        return merged

    def st_For(self, node, env):
        if node.orelse:
            raise CoarsenUnsupported(f"line {node.lineno}: for-else")
        node = _without_continue(node)
        rows = self.row_sequence(node.iter, env, site_of(node))
        if isinstance(rows, _RowSequence):
            done = self.row_loop(node, env, rows)
            if done is not None:
                return done
            iterable = rows.unrolled(self, node)
        else:
            iterable = rows
        if isinstance(iterable, _TracedRange):
            if not isinstance(node.target, ast.Name):
                raise CoarsenUnsupported(f"line {node.lineno}: only `for name in range(...)` loops are traced")
            index = ssa.LoopIndex((), site_of(node), iterable.start)
            return self._loop(node, env, "for", None, iterable.start, {node.target.id: index})
        if _traced(iterable):
            iterable = self.rows(iterable, node)
        if iterable is DYNAMIC:
            raise CoarsenUnsupported(f"line {node.lineno}: iterating over a value that changes inside a loop")
        if not isinstance(iterable, range):
            env = dict(env)
            for item in iterable:  # a static collection: unroll while tracing
                self.bind(node.target, item, env)
                env = self.run(node.body, env)
            return env
        if len(iterable) == 0:
            return env  # the body never runs (and its target stays unbound)
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
        saved = (len(self.loops), len(self.branch_sites), dict(self.scopes[-1]))
        self.short_loops[site_of(node)] = len(iterable) <= STATIC_UNROLL
        try:
            return self._loop(node, env, "for", len(iterable), iterable.start, {node.target.id: index})
        except _NeedsStaticLoop as caught:
            why = caught
            if site_of(node) not in why.sites:
                raise
            if len(iterable) > STATIC_UNROLL:
                raise CoarsenUnsupported(f"{why} (the loop at line {node.lineno} would be unrolled while tracing, "
                                         f"but it has {len(iterable)} iterations, more than {STATIC_UNROLL})") from None
        # the counter is needed as a Python int: a short loop is unrolled while tracing
        note = (f"loop at line {node.lineno}: unrolled while tracing ({len(iterable)} iterations): "
                f"{str(why).split(': ', 1)[-1]}")
        if note not in self.notes:
            self.notes.append(note)
        del self.loops[saved[0]:]
        del self.branch_sites[saved[1]:]
        self.scopes[-1] = saved[2]
        env = dict(env)
        for i in iterable:
            env[node.target.id] = i
            env = self.run(node.body, env)
        return env

    def row_sequence(self, expr: ast.expr, env: dict, site: ssa.Site):
        """What a ``for`` at ``site`` iterates over: a ``_RowSequence`` when it walks the rows of traced
        tensors (``x``, ``zip(xs, ys)``, ``enumerate(x)``, ``reversed(x)``, with ranges beside them),
        else the evaluated iterable."""
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.args and \
                not any(isinstance(a, ast.Starred) for a in expr.args) and all(k.arg for k in expr.keywords):
            func = self.ev(expr.func, env)
            if func in (builtins.zip, builtins.enumerate, builtins.reversed):
                args = [self.row_sequence(a, env, site) for a in expr.args]
                kwargs = {k.arg: self.ev(k.value, env) for k in expr.keywords}
                combined = _RowSequence.combine(func, args, kwargs, self)
                if combined is not None:
                    return combined
                args = [a.unrolled(self, expr) if isinstance(a, _RowSequence) else a for a in args]
                values = args + list(kwargs.values())
                if any(_traced(a) or _holds_node(a) for a in values):
                    return self.call_builtin(func, args, kwargs, expr)
                if any(a is DYNAMIC for a in values):
                    return DYNAMIC
                try:
                    return func(*args, **kwargs)
                except Exception as exc:
                    raise CoarsenUnsupported(f"line {expr.lineno}: {func.__name__}() failed while tracing: {exc}") \
                        from exc
        value = self.ev(expr, env)
        if isinstance(value, ssa.Node) and value.shape and not isinstance(value, ssa.Const):
            return _RowSequence.of_tensor(value, site)
        return value

    def row_loop(self, node: ast.For, env: dict, rows: "_RowSequence"):
        """A ``for`` over the rows of traced tensors as a traced loop (its trip count is the number of
        rows), so that nothing grows with it; None when the body needs the rows as separate values
        (then it is unrolled while tracing, if short)."""
        if rows.length == 0:
            return env
        if not rows.has_tensor:
            return None
        if (rows.matrix_rows or not self.compiled_loops) and rows.length <= STATIC_UNROLL:
            return None  # compiled loops index only vectors by the counter, and exist for torch only
        site = site_of(node)
        counter = ssa.LoopIndex((), site, 0)
        extra: dict = {}
        try:
            self.bind(node.target, rows.at(self, counter), extra)
        except CoarsenUnsupported:
            return None
        saved = (len(self.loops), len(self.branch_sites), dict(self.scopes[-1]), len(self.notes))
        self.short_loops[site] = rows.length <= STATIC_UNROLL
        try:
            return self._loop(node, env, "for", rows.length, 0, extra)
        except CoarsenUnsupported as why:
            if rows.length > STATIC_UNROLL:
                raise
            note = (f"loop at line {node.lineno}: unrolled while tracing ({rows.length} rows): "
                    f"{str(why).split(': ', 1)[-1]}")
        del self.loops[saved[0]:]
        del self.branch_sites[saved[1]:]
        self.scopes[-1] = saved[2]
        del self.notes[saved[3]:]
        if note not in self.notes:
            self.notes.append(note)
        return None

    def st_While(self, node, env):
        if node.orelse:
            raise CoarsenUnsupported(f"line {node.lineno}: while-else")
        node = _without_continue(node)
        return self._loop(node, env, "while", None, 0, {})

    def _touches_tensors(self, body, env) -> bool:
        try:
            probe = self.scoped_run(body, {k: (DYNAMIC if not _traced(v) and k in _assigned_names(body) else v)
                                    for k, v in env.items()})
        except CoarsenUnsupported:
            return True
        return any(_traced(v) for k, v in probe.items() if k in _assigned_names(body))

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
            for sub in _walk_own_scope(stmt):
                if isinstance(sub, (ast.Break, ast.Continue, ast.Return)):
                    if isinstance(sub, ast.Return) or not _inside_inner_loop(stmt, sub):
                        raise CoarsenUnsupported(f"line {sub.lineno}: {type(sub).__name__.lower()} in a traced loop "
                                                 "(only `if ...: break` at the top level of the body is supported)")
        assigned = [n for n in _assigned_names(body) if n not in extra]
        env = {**env, **{n: self.const(env[n]) for n in promoted}}
        node_vars = [n for n in assigned if _traced(env.get(n))]
        shapes = {n: env[n].shape for n in node_vars}
        for _attempt in range(4):
            carried = {n: ssa.Carried(shapes[n], site, k) for k, n in enumerate(node_vars)}
            for n, c in carried.items():
                self.origins[id(c)] = (c, env.get(n), env)
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
                    if isinstance(test, _Detached):
                        test = self.op("ne", test, 0.0)
                    if not _traced(test) and test is not DYNAMIC:
                        raise CoarsenUnsupported(f"line {break_site[0]}: `break` on a static condition")
                after = self.run(post, after_pre)
            finally:
                self.scopes.pop()
                self.loop_stack.pop()
            promote = [n for n in assigned if n not in carried and _traced(after.get(n))]
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


class _LocalFunction:
    """A ``def`` or ``lambda`` inside the traced function: inlined where it is called.

    Its free names are read, as Python reads them, at call time from the defining function's
    variables; ``scope`` identifies the defining function's trace (calls from elsewhere are refused).
    """

    def __init__(self, fdef: ast.FunctionDef, owner: Callable, scope: int, defaults: tuple):
        self.fdef, self.owner, self.scope, self.defaults = fdef, owner, scope, defaults
        self.__name__ = fdef.name

    def __repr__(self) -> str:
        return f"<local function {self.fdef.name} at line {self.fdef.lineno}>"


class _BoundMethod:
    def __init__(self, base: ssa.Node, name: str):
        self.base, self.name = base, name


class _RowSequence:
    """What a ``for`` walks when it iterates over the rows of traced tensors: ``length`` items, item
    ``c`` (``c`` a counter expression) made by ``at``.  ``zip``/``enumerate``/``reversed`` compose."""

    def __init__(self, length: int, at: Callable, has_tensor: bool, unrolled: Callable, matrix_rows: bool = False):
        self.length, self._at, self.has_tensor, self._unrolled = length, at, has_tensor, unrolled
        self.matrix_rows = matrix_rows  # rows that are vectors (compiled loops take only scalars by the counter)

    def at(self, tracer: "Tracer", counter):
        return self._at(tracer, counter)

    def unrolled(self, tracer: "Tracer", node):
        """The items as Python values (the iteration unrolled while tracing)."""
        return self._unrolled(tracer, node)

    @staticmethod
    def of_tensor(value: ssa.Node, site: ssa.Site) -> "_RowSequence":
        def at(tracer, counter):
            affine = _affine_in_counter(counter)
            if affine is None or affine[0] is None:
                raise CoarsenUnsupported("a row taken at a position that is not affine in the loop counter")
            _, stride, offset = affine
            return ssa.Index(value.shape[1:], value, site, offset, stride)

        return _RowSequence(value.shape[0], at, True, lambda tracer, node: tracer.rows(value, node),
                            len(value.shape) > 1)

    @staticmethod
    def of_range(r: range) -> "_RowSequence":
        def at(tracer, counter):
            scaled = counter if r.step == 1 else tracer.op("mul", counter, r.step)
            return scaled if r.start == 0 else tracer.op("add", scaled, r.start)

        return _RowSequence(len(r), at, False, lambda tracer, node: r)

    @staticmethod
    def combine(func, args: list, kwargs: dict, tracer: "Tracer") -> "_RowSequence | None":
        """``zip``/``enumerate``/``reversed`` of row sequences and ranges (None for other arguments)."""
        if func is builtins.enumerate and len(args) == 2 and "start" not in kwargs:
            args, kwargs = args[:1], {"start": args[1]}
        seqs = [_RowSequence.of_range(a) if isinstance(a, range) else a for a in args]
        if not seqs or not all(isinstance(a, _RowSequence) for a in seqs):
            return None
        has_tensor = any(a.has_tensor for a in seqs)
        matrix_rows = any(a.matrix_rows for a in seqs)
        if func is builtins.reversed and len(seqs) == 1 and not kwargs:
            seq = seqs[0]
            last = seq.length - 1
            return _RowSequence(seq.length, lambda t, c: seq.at(t, t.op("sub", last, c)), has_tensor,
                                lambda t, node: tuple(reversed(tuple(seq.unrolled(t, node)))), matrix_rows)
        if func is builtins.enumerate and len(seqs) == 1 and set(kwargs) <= {"start"}:
            seq, start = seqs[0], kwargs.get("start", 0)
            if not isinstance(start, int) or isinstance(start, bool):
                return None
            return _RowSequence(seq.length, lambda t, c: (c if start == 0 else t.op("add", c, start), seq.at(t, c)),
                                has_tensor, lambda t, node: tuple(enumerate(seq.unrolled(t, node), start)), matrix_rows)
        if func is builtins.zip and not kwargs:
            length = min(a.length for a in seqs)
            return _RowSequence(length, lambda t, c: tuple(a.at(t, c) for a in seqs), has_tensor,
                                lambda t, node: tuple(zip(*[a.unrolled(t, node) for a in seqs])), matrix_rows)
        return None


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


class _CounterKey:
    """A subscript that needs loop counters as Python ints (``z[:, t]``, ``x[i:i + 3]``)."""

    def __init__(self, sites):
        self.sites = frozenset(sites)


def _counter_sites(value) -> frozenset:
    """Sites of the loop counters a value computed only from counters and constants depends on."""
    if not isinstance(value, ssa.Node) or not _is_constant_node(value):
        return frozenset()
    found, stack = set(), [value]
    while stack:
        n = stack.pop()
        if isinstance(n, ssa.LoopIndex):
            found.add(n.site)
        elif isinstance(n, ssa.Op):
            stack.extend(n.args)
    return frozenset(found)


def _key_counters(key) -> frozenset:
    if isinstance(key, _CounterKey):
        return key.sites
    if isinstance(key, _IndexVar):
        return frozenset([key.site])
    return _counter_sites(key)


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
    if _traced(value):
        return True
    if depth > 4:
        return False
    if isinstance(value, (list, tuple)):
        return any(_holds_node(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(_holds_node(v, depth + 1) for v in value.values())
    return False


def _axis(args, kwargs) -> int:
    """The ``dim``/``axis`` of stack/cat (positional or keyword; 0 by default)."""
    if args:
        return args[0]
    return kwargs.get("dim", kwargs.get("axis", 0))


def _select_by_position(iota: ssa.Node, items: list) -> ssa.Node:
    """The vector whose entry k is the scalar ``items[k]`` (conditions compare positions only, so the
    pieces' own expressions never enter a condition)."""
    n = iota.shape[0]
    value = items[-1]
    for k in range(n - 2, -1, -1):
        value = ssa.Op((n,), "where", (ssa.Op((n,), "lt", (iota, ssa.Const((), k + 0.5))), items[k], value))
    return value


def _aliased(value, name: str, env: dict) -> bool:
    """Whether a variable other than ``name``, or a list/tuple/dict held by one, refers to ``value`` or
    to a view of it (``row = t[0]`` sees a later ``t[0] = v``)."""
    parts = set(map(id, value.items)) if isinstance(value, _Stacked) else set()

    def views(v) -> bool:
        while isinstance(v, (ssa.View, ssa.Index)):
            v = v.base
        return v is value or id(v) in parts

    def holds(v, depth=0):
        if v is value or views(v):
            return True
        if depth > 4:
            return False
        if isinstance(v, (list, tuple)):
            return any(holds(x, depth + 1) for x in v)
        if isinstance(v, dict):
            return any(holds(x, depth + 1) for x in v.values())
        if isinstance(v, _Stacked):
            return any(x is value or (v.is_view and id(x) in parts) for x in v.items)
        return False

    return any(holds(v) for k, v in env.items() if k != name)


def _cut(value: ssa.Node) -> ssa.Node:
    """``value`` read through a full view: the elevator gives it a symbol of its own (so that later
    conditions compare symbols, not selections)."""
    if not value.shape:
        return value
    return ssa.View(value.shape, value, slice(None))


def _row(value: ssa.Node, k: int) -> ssa.Node:
    if isinstance(value, ssa.Const):
        return ssa.Const(value.shape[1:], value.value)
    return ssa.View(value.shape[1:], value, k)


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
    if any(_traced(a) or a is DYNAMIC for a in list(args) + list(kwargs.values())):
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
    tracer.compiled_loops = first is None or torch_first  # (loops compiled as loops: torch and Numba only)
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
    outs = tuple(tracer.const(o) if isinstance(o, _Stacked) else o for o in outs)
    if not all(isinstance(o, ssa.Node) for o in outs):
        raise CoarsenUnsupported(f"{fn.__name__}: every returned value must be a traced tensor")
    return ssa.Graph(fn.__name__, tuple(inputs), tuple(outs), tuple_output, tuple(tracer.loops),
                     tuple(tracer.branch_sites), tracer.guards, tuple(tracer.notes))


def _check_returns(fdef: ast.FunctionDef) -> None:
    body = fdef.body
    for stmt in body[:-1]:
        for sub in _walk_own_scope(stmt):
            if isinstance(sub, ast.Return):
                raise CoarsenUnsupported(f"line {sub.lineno}: return before the end of the function")


def _walk_own_scope_body(fdef: ast.FunctionDef):
    """The nodes of a function's own body (nested ``def``/``lambda`` bodies excluded)."""
    for stmt in fdef.body:
        yield from _walk_own_scope(stmt)


def _walk_own_scope(node: ast.AST):
    """``ast.walk`` that does not enter ``def``/``lambda`` bodies (their names and returns are their own)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(current))


def _tensor_shape(value) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None or isinstance(value, (np.generic,)):
        return None
    return tuple(int(s) for s in shape)
