"""Tracer part: expressions (names, operators, comparisons, attributes, subscripts, list comprehensions)
and the elementwise operations they build."""
from __future__ import annotations

import ast
import builtins
import types
from typing import Any

import numpy as np

from sparsad.coarsen import budget, ssa
from sparsad.coarsen.source import CoarsenUnsupported
from sparsad.coarsen.frontend.values import (
    DYNAMIC,
    DynamicInTensorMath,
    _NeedsStaticLoop,
    _Stacked,
    _Detached,
    _NormalDist,
    _DistMethod,
    _traced,
    MAX_PIECES,
    STATIC_UNROLL,
    _BINOPS,
    _PY_BINOPS,
    _CMPOPS,
    _PYCMP,
    _broadcast,
    _LocalFunction,
    _BoundMethod,
    _CounterKey,
    _counter_sites,
    _key_counters,
    _IndexVar,
    _affine_in_counter,
    _holds_node,
    _select_by_position,
    _row,
    _short,
    _constant_array,
    _source_line,
    _static_apply,
    _method_parts,
)


#: Rows of an assembled tensor whose rows are not scalars that `materialize` joins (one pad per row).
MATERIALIZED_ROWS = 64


class ExpressionsMixin:
    """Methods of ``Tracer`` (see ``frontend/__init__.py``) for expressions."""

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
        if any(item.shape != () for item in items) and len(items) <= MATERIALIZED_ROWS:
            # rows of a matrix (or higher): each row padded to its place, summed (`layouts`)
            at = types.SimpleNamespace(lineno=self.line)  # (for messages: the line being traced)
            return self.joined([self.reshape(item, (1,) + item.shape, at) for item in items], 0, at)
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
            if key.site in self.masked and len(base.shape) == 1 and key.site in ssa.loop_dependencies(base, {}):
                return self.masked_read(base, key, node)
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
