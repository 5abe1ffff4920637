"""Values the front end traces with (assembled tensors, dynamic ints, helpers' stand-ins), the operator
tables, and small helpers shared by the tracer's parts."""
from __future__ import annotations

import ast
import builtins
import math
import operator
import types
from typing import Callable

import numpy as np

from sparsad.coarsen import ssa
from sparsad.coarsen.source import CoarsenUnsupported


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


def _aliased(value, name: str, env: dict, const_views: dict | None = None) -> bool:
    """Whether a variable other than ``name``, or a list/tuple/dict held by one, refers to ``value`` or
    to a view of it (``row = t[0]`` sees a later ``t[0] = v``).  ``const_views``: id -> (part, base) of
    constants taken from constants by indexing (``z = zeros(n)[1:]``: views, though folded to constants)."""
    parts = set(map(id, value.items)) if isinstance(value, _Stacked) else set()
    const_views = const_views or {}

    def views(v) -> bool:
        while True:
            if isinstance(v, (ssa.View, ssa.Index)) or (isinstance(v, ssa.Layout) and v.kind == "reshape"):
                v = v.base  # (torch's reshape/view/flatten/squeeze/unsqueeze are views too)
                continue
            entry = const_views.get(id(v))
            if entry is None or entry[0] is not v:
                break
            v = entry[1]
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
