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
import inspect
import math
import textwrap
from typing import Any, Callable

import numpy as np

from sparsad.coarsen import ssa
from sparsad.errors import UnsupportedError


class CoarsenUnsupported(UnsupportedError):
    """The function uses a construct coarsening cannot differentiate symbolically."""


class _Dynamic:
    """A Python value that changes from iteration to iteration (only for control flow)."""

    def __repr__(self) -> str:
        return "<dynamic>"


DYNAMIC = _Dynamic()

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


def function_ast(fn: Callable) -> tuple[ast.FunctionDef, int]:
    """The ``FunctionDef`` of ``fn`` with line numbers of its source file."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise CoarsenUnsupported(f"the source of {getattr(fn, '__name__', fn)!r} is not available") from exc
    tree = ast.parse(source)
    first = inspect.getsourcelines(fn)[1]
    ast.increment_lineno(tree, first - 1)
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef,))]
    if not defs:
        raise CoarsenUnsupported(f"{fn!r} is not a plain `def` function")
    return defs[0], first


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

    def __init__(self, fn: Callable):
        self.fn = fn
        self.globals = dict(fn.__globals__)
        if fn.__closure__:
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
                self.globals[name] = cell.cell_contents
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
            raise CoarsenUnsupported("a Python value that changes inside a loop is used in tensor arithmetic")
        if isinstance(value, (bool, int, float, np.floating, np.integer)):
            return ssa.Const((), float(value))
        raise CoarsenUnsupported(f"value {value!r} of type {type(value).__name__} cannot enter tensor arithmetic")

    def op(self, name: str, *args) -> Any:
        if any(a is DYNAMIC for a in args):
            if any(isinstance(a, ssa.Node) for a in args):
                raise CoarsenUnsupported("a Python value that changes inside a loop is used in tensor arithmetic")
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
        if node.id in self.globals:
            return self.globals[node.id]
        if hasattr(builtins, node.id):
            return getattr(builtins, node.id)
        raise CoarsenUnsupported(f"line {node.lineno}: name {node.id!r} is not defined")

    def ev_Tuple(self, node, env):
        return tuple(self.ev(e, env) for e in node.elts)

    ev_List = ev_Tuple

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
            if node.attr in ("T",) and len(base.shape) <= 1:
                return base
            if node.attr == "ndim":
                return len(base.shape)
            return _BoundMethod(base, node.attr)
        if base is DYNAMIC:
            return DYNAMIC
        try:
            return getattr(base, node.attr)
        except AttributeError as exc:
            raise CoarsenUnsupported(f"line {node.lineno}: no attribute {node.attr!r}") from exc

    def ev_Subscript(self, node, env):
        base = self.ev(node.value, env)
        key = self.ev_key(node.slice, env)
        if not isinstance(base, ssa.Node):
            if base is DYNAMIC or key is DYNAMIC:
                return DYNAMIC
            return base[key]
        if isinstance(key, _IndexVar):
            if len(base.shape) < 1:
                raise CoarsenUnsupported(f"line {node.lineno}: indexing a scalar")
            return ssa.Index(base.shape[1:], base, key.site, key.offset)
        if key is DYNAMIC or isinstance(key, ssa.Node):
            raise CoarsenUnsupported(f"line {node.lineno}: indexing with a value unknown when tracing")
        try:
            shape = tuple(np.empty(base.shape, dtype=np.int8)[key].shape)
        except (IndexError, TypeError) as exc:
            raise CoarsenUnsupported(f"line {node.lineno}: index {key!r} is not a static int/slice index") from exc
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
        if isinstance(value, ssa.LoopIndex):
            return _IndexVar(value.site, 0)
        if isinstance(value, ssa.Op) and value.op in ("add", "sub"):
            a, b = value.args
            if isinstance(a, ssa.LoopIndex) and isinstance(b, ssa.Const) and float(b.value).is_integer():
                return _IndexVar(a.site, int(b.value) * (1 if value.op == "add" else -1))
        return value

    def ev_Call(self, node, env):
        if node.keywords and any(k.arg is None for k in node.keywords):
            raise CoarsenUnsupported(f"line {node.lineno}: **kwargs in calls")
        func = self.ev(node.func, env)
        args = [self.ev(a, env) for a in node.args]
        kwargs = {k.arg: self.ev(k.value, env) for k in node.keywords}
        if isinstance(func, _BoundMethod):
            return self.call_method(func, args, kwargs, node)
        name = _tensor_function_name(func)
        if name is not None and (any(isinstance(a, ssa.Node) for a in args + list(kwargs.values()))
                                 or name in ("sum", "mean", "where", "dot")):
            return self.call_named(name, args, kwargs, node)
        if any(isinstance(a, ssa.Node) for a in args + list(kwargs.values())):
            if func in (builtins.abs,):
                return self.op("abs", args[0])
            if func in (builtins.max, builtins.min) and len(args) == 2:
                return self.op("maximum" if func is builtins.max else "minimum", *args)
            if func is builtins.sum and len(args) == 1 and isinstance(args[0], ssa.Node):
                return self.reduce(args[0])
            if func is builtins.len and isinstance(args[0], ssa.Node):
                return args[0].shape[0]
            if func is builtins.float and isinstance(args[0], ssa.Node):
                raise CoarsenUnsupported(f"line {node.lineno}: float() of a traced tensor leaves the graph")
            fname = getattr(func, "__name__", repr(func))
            raise CoarsenUnsupported(f"line {node.lineno}: call to {fname}() on traced tensors is not supported")
        if any(a is DYNAMIC for a in args + list(kwargs.values())):
            return DYNAMIC
        if func is builtins.range:
            return range(*args)
        return func(*args, **kwargs)

    def reduce(self, value):
        value = self.const(value)
        if value.shape == ():
            return value
        return ssa.Reduce((), value)

    def call_named(self, name: str, args, kwargs, node):
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
        if name in UNARY and len(args) == 1:
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
        return method(node, env)

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
        iterable = self.ev(node.iter, env)
        if isinstance(iterable, ssa.Node) or iterable is DYNAMIC:
            raise CoarsenUnsupported(f"line {node.lineno}: iterating over a traced tensor or a dynamic value")
        if not isinstance(iterable, range):
            env = dict(env)
            for item in iterable:  # a static collection: unroll while tracing
                self.bind(node.target, item, env)
                env = self.run(node.body, env)
            return env
        if iterable.step != 1 or not isinstance(node.target, ast.Name):
            raise CoarsenUnsupported(f"line {node.lineno}: only `for name in range(start, stop)` loops are traced")
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
        return self._loop(node, env, "while", None, 0, {})

    def _touches_tensors(self, body, env) -> bool:
        try:
            probe = self.scoped_run(body, {k: (DYNAMIC if not isinstance(v, ssa.Node) and k in _assigned_names(body) else v)
                                    for k, v in env.items()})
        except CoarsenUnsupported:
            return True
        return any(isinstance(v, ssa.Node) for k, v in probe.items() if k in _assigned_names(body))

    def _loop(self, node, env, kind, trip, start, extra):
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


class _IndexVar:
    """``i + offset`` inside a subscript, ``i`` a loop counter."""

    def __init__(self, site, offset):
        self.site, self.offset = site, offset


def _inside_inner_loop(outer: ast.stmt, target: ast.AST) -> bool:
    for node in ast.walk(outer):
        if isinstance(node, (ast.For, ast.While)) and node is not outer:
            if any(sub is target for sub in ast.walk(node)):
                return True
    if isinstance(outer, (ast.For, ast.While)):
        return True
    return False


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
    tracer = Tracer(fn)
    env: dict[str, Any] = {}
    inputs = []
    for position, (name, value) in enumerate(zip(names, full)):
        shape = _tensor_shape(value)
        if shape is None:
            env[name] = value
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
                     tuple(tracer.branch_sites))


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
