"""The recording primal compiled with Numba: outputs plus trip counts and decisions, no torch.

``coarsen.grad`` of a function with ``while`` loops or traced ``if``s must run the primal to learn
the trip counts and branch decisions its adjoint reads (``record.py``).  Run eagerly on torch
tensors, that primal pays torch's per-operation dispatch, about a millisecond for BGDHyperOpt's
60 training steps.  This module translates the function's source into a Numba function instead:

* calls of torch / numpy / math functions become NumPy calls or small helpers that accept both
  floats and arrays (``torch.sum`` -> ``_sum``, ``torch.sigmoid`` -> ``_sigmoid``, ...);
  ``import`` statements inside the function are dropped;
* each recorded site writes an event ``(kind, site, value)`` into an int64 array instead of
  calling a ``Record``: loop entries and exits, ``break``s and ``if`` decisions.  A loop whose
  body holds no other recorded site counts its iterations in a local variable and reports the
  count once at its exit, so BGDHyperOpt's 60 steps cost three events;
* 0-d tensors travel as floats, other tensors as NumPy views, non-tensor arguments as they are.

Python then replays the events into a ``Record`` identical to the eager one.  Only CPU float64
torch tensors and int/float/bool static arguments are eligible; anything the translation or
Numba cannot handle raises ``NumbaPrimalUnsupported`` (the caller keeps the eager primal).
"""
from __future__ import annotations

import ast
import builtins
import copy
import math
from typing import Callable

import numpy as np

from sparsad.coarsen.frontend import _tensor_function_name, function_ast, site_of
from sparsad.coarsen.record import Record

ENTER, STEP, STEPS, BRK, LEAVE, BRANCH = range(6)
CAPACITY = 4096          # events per call; a longer log reruns the eager primal
_EV = "__sparsad_ev__"

# canonical function name (frontend._tensor_function_name) -> name in the generated module
_FUNCTIONS = {
    "exp": "np.exp", "log": "np.log", "sin": "np.sin", "cos": "np.cos", "tan": "np.tan", "tanh": "np.tanh",
    "sinh": "np.sinh", "cosh": "np.cosh", "asin": "np.arcsin", "acos": "np.arccos", "atan": "np.arctan",
    "sqrt": "np.sqrt", "log1p": "np.log1p", "expm1": "np.expm1", "abs": "np.abs", "sign": "np.sign",
    "maximum": "np.maximum", "minimum": "np.minimum", "atan2": "np.arctan2", "arctan2": "np.arctan2",
    "sigmoid": "_sigmoid", "softplus": "_softplus", "relu": "_relu", "square": "_square", "neg": "_neg",
    "sum": "_sum", "mean": "_mean", "dot": "_dot", "where": "_where", "clamp": "_clamp", "clip": "_clamp",
    "erf": "_erf", "zeros_like": "_zeros_like", "ones_like": "_ones_like", "empty_like": "_zeros_like",
    "full_like": "_full_like",
}
# keyword arguments of the ``*_like`` constructors that change nothing for float64 CPU tensors
# (the only ones compiled): ``dtype=x.dtype``/``torch.float64``, ``device=x.device``/"cpu"
_LIKE = {"_zeros_like", "_ones_like", "_full_like"}
_NEUTRAL = ("dtype", "device", "requires_grad")


def _as_list(stmt) -> list:
    return stmt if isinstance(stmt, list) else [stmt]
_METHODS = {"sum", "mean", "dot", "exp", "log", "sin", "cos", "tan", "tanh", "sqrt", "abs", "sigmoid",
            "square", "relu", "log1p", "expm1", "neg", "sign", "clamp", "clip"}
_BUILTINS = {"range", "len", "min", "max", "float", "int", "bool"}


class NumbaPrimalUnsupported(Exception):
    """The function cannot run as a Numba primal (the eager primal is used instead)."""


# ----------------------------------------------------------------------------- helpers
# Numba helpers of every generated primal, written into its module (which imports only NumPy, math
# and Numba, so a child process compiles it quickly and Numba caches it beside the file): stubs
# with ``overload``s that accept floats and arrays alike, and small jitted functions.
_HELPER_SOURCE = '''
_OPTS = dict(nogil=True, error_model="numpy")


def _sum(a):
    raise NotImplementedError


def _mean(a):
    raise NotImplementedError


def _dot(a, b):
    raise NotImplementedError


def _where(c, a, b):
    raise NotImplementedError


def _erf(a):
    raise NotImplementedError


def _clamp(u, lo, hi):
    raise NotImplementedError


def _len1(a):
    raise NotImplementedError


def _at(a, i):
    raise NotImplementedError


def _zeros_like(a):
    raise NotImplementedError


def _ones_like(a):
    raise NotImplementedError


def _full_like(a, v):
    raise NotImplementedError


@overload(_sum, jit_options=_OPTS)
def _sum_impl(a):
    if isinstance(a, types.Array):
        return lambda a: np.sum(a)
    if isinstance(a, (types.Float, types.Integer, types.Boolean)):
        return lambda a: float(a)


@overload(_mean, jit_options=_OPTS)
def _mean_impl(a):
    if isinstance(a, types.Array):
        return lambda a: np.sum(a) / a.size
    if isinstance(a, (types.Float, types.Integer, types.Boolean)):
        return lambda a: float(a)


@overload(_dot, jit_options=_OPTS)
def _dot_impl(a, b):
    return lambda a, b: _sum(a * b)


@overload(_where, jit_options=_OPTS)
def _where_impl(c, a, b):
    if any(isinstance(t, types.Array) for t in (c, a, b)):
        return lambda c, a, b: np.where(c, a, b)
    return lambda c, a, b: (a if c else b) * 1.0


@overload(_erf, jit_options=_OPTS)
def _erf_impl(a):
    if isinstance(a, types.Array):
        def impl(a):
            out = np.empty(a.shape)
            flat, src = out.ravel(), a.ravel()
            for i in range(src.size):
                flat[i] = math.erf(src[i])
            return out
        return impl
    return lambda a: math.erf(a)


@overload(_clamp, jit_options=_OPTS)
def _clamp_impl(u, lo, hi):
    no_lo = isinstance(lo, (types.NoneType, types.Omitted))
    no_hi = isinstance(hi, (types.NoneType, types.Omitted))
    if no_lo and no_hi:
        return lambda u, lo, hi: u * 1.0
    if no_lo:
        return lambda u, lo, hi: np.minimum(u, hi)
    if no_hi:
        return lambda u, lo, hi: np.maximum(u, lo)
    return lambda u, lo, hi: np.minimum(np.maximum(u, lo), hi)


@overload(_len1, jit_options=_OPTS)
def _len1_impl(a):
    if isinstance(a, types.Array):
        if a.ndim == 1:
            return lambda a: a.shape[0]
        return lambda a: -2
    return lambda a: -1


@overload(_at, jit_options=_OPTS)
def _at_impl(a, i):
    if isinstance(a, types.Array):
        if a.ndim == 1:
            return lambda a, i: a[i]
        return lambda a, i: a.ravel()[i]
    return lambda a, i: a


@overload(_zeros_like, jit_options=_OPTS)
def _zeros_like_impl(a):
    if isinstance(a, types.Array):
        return lambda a: np.zeros(a.shape)
    return lambda a: 0.0


@overload(_ones_like, jit_options=_OPTS)
def _ones_like_impl(a):
    if isinstance(a, types.Array):
        return lambda a: np.ones(a.shape)
    return lambda a: 1.0


@overload(_full_like, jit_options=_OPTS)
def _full_like_impl(a, v):
    if isinstance(a, types.Array):
        return lambda a, v: np.full(a.shape, float(v))
    return lambda a, v: float(v)


def _emit(ev, kind, site, value):
    n = ev[0]
    if n < ev[1]:
        ev[2 + 3 * n] = kind
        ev[3 + 3 * n] = site
        ev[4 + 3 * n] = value
    ev[0] = n + 1


def _branch(ev, site, test):
    decision = bool(test)
    _emit(ev, BRANCH, site, 1 if decision else 0)
    return decision


def _sigmoid(u):
    return 1.0 / (1.0 + np.exp(-u))


def _softplus(u):
    return np.maximum(u, 0.0) + np.log1p(np.exp(-np.abs(u)))


def _relu(u):
    return np.maximum(u, 0.0)


def _square(u):
    return u * u


def _neg(u):
    return -u
'''
_JITTED_HELPERS = ("_emit", "_branch", "_sigmoid", "_softplus", "_relu", "_square", "_neg")

# the module's tail: every plain function jitted (cached beside the file when it is one), the
# accumulations of fused sums allowed to reassociate, everything else strict IEEE
_MODULE_FOOTER = """

def _jit_all():
    space = globals()
    for key in JITTED:
        space[key] = numba.njit(cache=CACHE, **_OPTS)(space[key])
    for key in REASSOC:
        space[key] = numba.njit(cache=CACHE, fastmath={"reassoc"}, **_OPTS)(space[key])


_jit_all()
"""


# ----------------------------------------------------------------------------- source translation
def _call(name: str, *args: ast.expr) -> ast.expr:
    return ast.Call(func=ast.Name(name, ast.Load()), args=list(args), keywords=[])


def _emit_stmt(kind: int, site_id: int, value: ast.expr | None = None) -> ast.stmt:
    return ast.Expr(_call("_emit", ast.Name(_EV, ast.Load()), ast.Constant(kind), ast.Constant(site_id),
                          value if value is not None else ast.Constant(0)))


def _name_expr(dotted: str) -> ast.expr:
    parts = dotted.split(".")
    expr: ast.expr = ast.Name(parts[0], ast.Load())
    for part in parts[1:]:
        expr = ast.Attribute(expr, part, ast.Load())
    return expr


class _Translate(ast.NodeTransformer):
    """Rewrites the function body for Numba, with event emission at the recorded sites."""

    def __init__(self, fn: Callable, fdef: ast.FunctionDef, sites: list):
        self.sites = {s: k for k, s in enumerate(sites)}
        self.globals = dict(fn.__globals__)
        if fn.__closure__:
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
                self.globals[name] = cell.cell_contents
        self.modules: dict = {}            # names bound by `import` inside the function
        self.locals = {a.arg for a in fdef.args.args}
        self.inner: set = set()            # helper functions defined inside the function
        self.assignments: dict = {}        # local name -> how many statements assign it
        for node in ast.walk(fdef):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.locals.add(node.id)
                self.assignments[node.id] = self.assignments.get(node.id, 0) + 1
            elif isinstance(node, ast.arg):
                self.locals.add(node.arg)
            elif isinstance(node, ast.FunctionDef) and node is not fdef:
                self.locals.add(node.name)
                self.inner.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self._bind_import(node)
        self.loop_stack: list = []
        self.counters = 0
        self.helpers: list = []            # (name, source) of fused reductions

    def _bind_import(self, node):
        import importlib

        for alias in node.names:
            if isinstance(node, ast.Import):
                if alias.asname:
                    self.modules[alias.asname] = importlib.import_module(alias.name)
                else:
                    top = alias.name.split(".")[0]
                    self.modules[top] = importlib.import_module(top)
            else:
                if node.level:
                    raise NumbaPrimalUnsupported("relative import")
                self.modules[alias.asname or alias.name] = getattr(importlib.import_module(node.module), alias.name)

    # -------------------------------------------------------------- static resolution
    def resolve(self, expr: ast.expr):
        """The object a name / attribute chain denotes when it does not involve local variables."""
        if isinstance(expr, ast.Name):
            if expr.id in self.modules:
                return self.modules[expr.id]
            if expr.id in self.locals:
                raise KeyError(expr.id)
            if expr.id in self.globals:
                return self.globals[expr.id]
            if hasattr(builtins, expr.id):
                return getattr(builtins, expr.id)
            raise KeyError(expr.id)
        if isinstance(expr, ast.Attribute):
            return getattr(self.resolve(expr.value), expr.attr)
        raise KeyError(type(expr).__name__)

    def _resolvable(self, expr):
        try:
            return True, self.resolve(expr)
        except (KeyError, AttributeError):
            return False, None

    # -------------------------------------------------------------- statements
    def visit_Import(self, node):
        return ast.Pass()

    visit_ImportFrom = visit_Import

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant):
            return ast.Pass()  # docstring
        return self.generic_visit(node)

    def visit_If(self, node):
        self.generic_visit(node)
        site = site_of(node)
        if site in self.sites:
            node.test = _call("_branch", ast.Name(_EV, ast.Load()), ast.Constant(self.sites[site]), node.test)
        return node

    def _loop(self, node):
        site = site_of(node)
        sid = self.sites.get(site)
        nested = any(site_of(sub) in self.sites for stmt in node.body for sub in ast.walk(stmt)
                     if isinstance(sub, (ast.If, ast.For, ast.While)))
        self.loop_stack.append(sid)
        self.generic_visit(node)
        self.loop_stack.pop()
        if sid is None:
            return node
        if nested:
            node.body.insert(0, _emit_stmt(STEP, sid))
            return [_emit_stmt(ENTER, sid), node, _emit_stmt(LEAVE, sid)]
        counter = f"__sparsad_trips_{self.counters}"
        self.counters += 1
        node.body.insert(0, ast.AugAssign(ast.Name(counter, ast.Store()), ast.Add(), ast.Constant(1)))
        return [_emit_stmt(ENTER, sid), ast.Assign([ast.Name(counter, ast.Store())], ast.Constant(0)), node,
                _emit_stmt(STEPS, sid, ast.Name(counter, ast.Load())), _emit_stmt(LEAVE, sid)]

    visit_For = _loop
    visit_While = _loop

    def visit_Break(self, node):
        if not self.loop_stack or self.loop_stack[-1] is None:
            return node
        return [_emit_stmt(BRK, self.loop_stack[-1]), node]

    def visit_FunctionDef(self, node):
        """A helper defined inside the function: compiled with it (Numba inlines inner functions)."""
        if node.decorator_list or node.args.vararg or node.args.kwarg or node.args.kwonlyargs:
            raise NumbaPrimalUnsupported(f"line {node.lineno}: inner function {node.name} with decorators "
                                         "or variable arguments")
        if any(site_of(sub) in self.sites for sub in ast.walk(node) if isinstance(sub, (ast.If, ast.For, ast.While))):
            raise NumbaPrimalUnsupported(f"line {node.lineno}: a recorded loop or `if` inside {node.name}()")
        # Python reads an outer variable when the helper runs; a variable assigned more than once
        # could then differ from what a compiled closure sees: only single assignments are taken
        own = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)} | {
            n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        free = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - own
        for name in sorted(free & self.locals):
            if self.assignments.get(name, 0) > 1:
                raise NumbaPrimalUnsupported(f"line {node.lineno}: {node.name}() reads {name!r}, which is "
                                             "assigned more than once")
        outer_stack, self.loop_stack = self.loop_stack, []
        try:
            node.body = [new for stmt in node.body for new in _as_list(self.visit(stmt))]
            node.args.defaults = [self.visit(d) for d in node.args.defaults]
        finally:
            self.loop_stack = outer_stack
        return node

    def visit_Lambda(self, node):
        raise NumbaPrimalUnsupported(f"line {node.lineno}: lambda")

    # -------------------------------------------------------------- expressions
    def visit_Attribute(self, node):
        ok, value = self._resolvable(node)
        if ok:
            if isinstance(value, (bool, int, float)):
                return ast.copy_location(ast.Constant(value), node)
            raise NumbaPrimalUnsupported(f"line {node.lineno}: attribute {ast.unparse(node)} outside a call")
        return self.generic_visit(node)

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load) and node.id not in self.locals and node.id != _EV:
            ok, value = self._resolvable(node)
            if ok and not isinstance(value, (bool, int, float)) and node.id not in _BUILTINS:
                raise NumbaPrimalUnsupported(f"line {node.lineno}: global {node.id!r} of type {type(value).__name__}")
        return node

    def visit_Call(self, node):
        func = node.func
        ok, target = self._resolvable(func)
        args = [self.visit(a) for a in node.args]
        # (dtype=/device= stay as written: ``_neutral_keyword`` judges them, they are not compiled)
        keywords = [ast.keyword(k.arg, k.value if k.arg in _NEUTRAL else self.visit(k.value)) for k in node.keywords]
        if isinstance(func, ast.Name) and func.id in self.inner:
            if any(k.arg in _NEUTRAL for k in keywords):
                raise NumbaPrimalUnsupported(f"line {node.lineno}: keyword {func.id}(...)")
            return ast.copy_location(ast.Call(func=func, args=args, keywords=keywords), node)
        if ok:
            if target in (getattr(builtins, b) for b in _BUILTINS):
                name = func.id if isinstance(func, ast.Name) else None
                if name is None or keywords:
                    raise NumbaPrimalUnsupported(f"line {node.lineno}: call {ast.unparse(func)}")
                return ast.copy_location(ast.Call(func=func, args=args, keywords=[]), node)
            canonical = "abs" if target is builtins.abs else _tensor_function_name(target)
            if canonical not in _FUNCTIONS:
                raise NumbaPrimalUnsupported(f"line {node.lineno}: function {ast.unparse(func)}")
            return ast.copy_location(self._mapped(canonical, args, keywords, node), node)
        if isinstance(func, ast.Attribute) and func.attr in _METHODS:
            receiver = self.visit(func.value)
            return ast.copy_location(self._mapped(func.attr, [receiver] + args, keywords, node), node)
        raise NumbaPrimalUnsupported(f"line {node.lineno}: call {ast.unparse(func)}")

    def _mapped(self, canonical: str, args: list, keywords: list, node) -> ast.expr:
        target = _FUNCTIONS.get(canonical)
        if target is None:
            raise NumbaPrimalUnsupported(f"line {node.lineno}: {canonical}")
        if target == "_clamp":
            if any(k.arg not in ("min", "max") for k in keywords) or len(args) > 3:
                raise NumbaPrimalUnsupported(f"line {node.lineno}: arguments of {canonical}")
            args = args + [ast.Constant(None)] * (3 - len(args))
            for k in keywords:
                args[1 if k.arg == "min" else 2] = k.value
        elif target in _LIKE:
            if any(not self._neutral_keyword(k) for k in keywords):
                raise NumbaPrimalUnsupported(f"line {node.lineno}: keyword arguments of {canonical}")
        elif keywords:
            raise NumbaPrimalUnsupported(f"line {node.lineno}: keyword arguments of {canonical}")
        if target in ("_sum", "_mean") and len(args) == 1 and _elementwise(args[0]):
            return self._fused(target, args[0])
        return ast.Call(func=_name_expr(target), args=args, keywords=[])

    def _neutral_keyword(self, keyword: ast.keyword) -> bool:
        """A ``dtype=``/``device=`` keyword that keeps float64 on the CPU (``x.dtype``, ``torch.float64``,
        ``x.device``, ``"cpu"``); the float64 CPU tensors of an eligible call have no other."""
        value = keyword.value
        if keyword.arg in ("dtype", "device") and isinstance(value, ast.Attribute) and value.attr == keyword.arg:
            ok, _ = self._resolvable(value)
            return not ok  # (``x.dtype`` of a local tensor; a resolvable one is checked below)
        ok, resolved = self._resolvable(value) if not isinstance(value, ast.Constant) else (True, value.value)
        if not ok:
            return False
        if keyword.arg == "dtype":
            return resolved in (float, np.float64) or str(resolved) == "torch.float64"
        if keyword.arg == "device":
            return str(resolved) == "cpu"
        return keyword.arg == "requires_grad" and resolved is False

    def _fused(self, target: str, expr: ast.expr) -> ast.expr:
        """``sum(elementwise expression)`` as one loop over the operands, no temporaries.

        The generated helper takes the expression's leaves (names, subscripts, other calls) as
        arguments; when they are all 1-d arrays of one length or scalars it sums element by
        element in order, otherwise (broadcasting, higher ranks) it evaluates the expression and
        sums the array.
        """
        leaves: dict = {}

        def lift(e):
            if isinstance(e, ast.Constant):
                return e
            if isinstance(e, ast.BinOp):
                return ast.BinOp(lift(e.left), e.op, lift(e.right))
            if isinstance(e, ast.UnaryOp):
                return ast.UnaryOp(e.op, lift(e.operand))
            if isinstance(e, ast.Compare):
                return ast.Compare(lift(e.left), e.ops, [lift(c) for c in e.comparators])
            if isinstance(e, ast.Call) and _is_elementwise_call(e):
                return ast.Call(func=e.func, args=[lift(a) for a in e.args], keywords=[])
            key = ast.unparse(e)
            if key not in leaves:
                leaves[key] = (f"a{len(leaves)}", e)
            return ast.Name(leaves[key][0], ast.Load())

        body = lift(expr)
        names = [n for n, _ in leaves.values()]
        if not names:
            return ast.Call(func=ast.Name(target, ast.Load()), args=[expr], keywords=[])

        def at(e):
            if isinstance(e, ast.Name) and e.id in names:
                return ast.Call(func=ast.Name("_at", ast.Load()), args=[e, ast.Name("i", ast.Load())], keywords=[])
            for field_name, value in ast.iter_fields(e):
                if isinstance(value, ast.expr):
                    setattr(e, field_name, at(value))
                elif isinstance(value, list):
                    setattr(e, field_name, [at(v) if isinstance(v, ast.expr) else v for v in value])
            return e

        whole = ast.unparse(body)
        element = ast.unparse(at(copy.deepcopy(body)))
        helper = f"__sparsad_reduce_{len(self.helpers) // 3}"
        lines = [f"def {helper}({', '.join(names)}):", "    n = -1", "    ok = True"]
        for n in names:
            lines += [f"    m = _len1({n})", "    if m == -2:", "        ok = False", "    elif m >= 0:",
                      "        if n < 0:", "            n = m", "        elif m != n:", "            ok = False"]
        # the element and the whole-array fallback are strict IEEE functions; only the loop that
        # adds the elements may reassociate (fastmath 'reassoc'), so the sum is vectorised like
        # torch's own sum while every element is computed exactly as written
        args = ", ".join(names)
        lines += ["    if ok and n >= 0:", "        acc = 0.0", "        for i in range(n):",
                  f"            acc += {helper}_at({args}, i)",
                  "        return acc" + (" / n" if target == "_mean" else ""),
                  f"    return {helper}_all({args})"]
        self.helpers.append((f"{helper}_at", f"def {helper}_at({args}, i):\n    return {element}\n"))
        self.helpers.append((f"{helper}_all", f"def {helper}_all({args}):\n    return {target}({whole})\n"))
        self.helpers.append((helper, "\n".join(lines) + "\n"))
        return ast.Call(func=ast.Name(helper, ast.Load()), args=[e for _, e in leaves.values()], keywords=[])


_ELEMENTWISE = {"np.exp", "np.log", "np.sin", "np.cos", "np.tan", "np.tanh", "np.sinh", "np.cosh", "np.arcsin",
                "np.arccos", "np.arctan", "np.sqrt", "np.log1p", "np.expm1", "np.abs", "np.sign", "np.maximum",
                "np.minimum", "np.arctan2", "_sigmoid", "_softplus", "_relu", "_square", "_neg", "_where"}


def _is_elementwise_call(e: ast.Call) -> bool:
    return ast.unparse(e.func) in _ELEMENTWISE and not e.keywords


def _elementwise(e: ast.expr) -> bool:
    """An expression worth fusing: arithmetic or elementwise functions above its leaves."""
    return isinstance(e, (ast.BinOp, ast.UnaryOp)) or (isinstance(e, ast.Call) and _is_elementwise_call(e))


def translate(fn: Callable, sites: list) -> tuple[str, str]:
    """(source of the Numba primal's module, name of the primal in it); the event array is the
    primal's first argument.  The module imports only NumPy, math and Numba; ``CACHE`` switches
    Numba's on-disk cache (on when it is loaded from a file)."""
    fdef, _ = function_ast(fn)
    fdef = copy.deepcopy(fdef)
    for stmt in fdef.body[:-1]:
        if isinstance(stmt, ast.FunctionDef):
            continue  # (an inner helper's own returns)
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Return):
                raise NumbaPrimalUnsupported("return before the end of the function")
    translator = _Translate(fn, fdef, sites)
    body = []
    for stmt in fdef.body:
        new = translator.visit(stmt)
        body.extend(new if isinstance(new, list) else [new])
    name = f"primal_{fdef.name}"
    args = ast.arguments(posonlyargs=[], args=[ast.arg(_EV)] + [ast.arg(a.arg) for a in fdef.args.args],
                         vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
    new_def = ast.FunctionDef(name=name, args=args, body=body, decorator_list=[], returns=None, type_params=[])
    module = ast.fix_missing_locations(ast.Module(body=[new_def], type_ignores=[]))
    code = "".join(text + "\n" for _, text in translator.helpers) + ast.unparse(module) + "\n"
    # numbers read from globals and closures become the module's constants (Numba freezes them;
    # the plan's guards rebuild the plan when one changes)
    used = {node.id for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Name)}
    constants = []
    for gname in sorted(used - _RESERVED):
        value = translator.globals.get(gname)
        if type(value) is bool or type(value) is int:
            constants.append(f"{gname} = {value!r}")
        elif type(value) is float:
            constants.append(f"{gname} = float.fromhex({value.hex()!r})")
    strict = list(_JITTED_HELPERS) + [h for h, _ in translator.helpers if h.endswith(("_at", "_all"))] + [name]
    reassoc = [h for h, _ in translator.helpers if not h.endswith(("_at", "_all"))]
    source = ("import math\n\nimport numba\nimport numpy as np\nfrom numba import types\n"
              "from numba.extending import overload\n\nCACHE = True\n"
              f"BRANCH = {BRANCH}\nJITTED = {tuple(strict)!r}\nREASSOC = {tuple(reassoc)!r}\n"
              + "\n".join(constants) + "\n" + _HELPER_SOURCE + "\n\n" + code + _MODULE_FOOTER)
    return source, name


_RESERVED = {"np", "math", "numba", "types", "overload", "CACHE", "BRANCH", "JITTED", "REASSOC", "_OPTS"} | {
    node.name for node in ast.parse(_HELPER_SOURCE).body if isinstance(node, ast.FunctionDef)}


def load(source: str, name: str, path: str | None, module_name: str | None) -> Callable:
    """The jitted primal: from its module file (Numba's cache on), else from the source in memory."""
    if path is not None:
        from sparsad.coarsen.numba_backend import load_module
        return getattr(load_module(path, module_name), name)
    namespace: dict = {"__name__": "sparsad_coarsen_primal"}
    exec(compile(source.replace("\nCACHE = True\n", "\nCACHE = False\n", 1),
                 f"<sparsad.coarsen.numba_primal:{name}>", "exec"), namespace)
    return namespace[name]


# ----------------------------------------------------------------------------- running it
def eligible(args: tuple) -> str | None:
    """None when every argument can travel to Numba, else the reason it cannot."""
    import torch

    for a in args:
        if isinstance(a, torch.Tensor):
            if type(a) is not torch.Tensor or a.dtype != torch.float64 or a.device.type != "cpu" or a.layout != torch.strided:
                return "only CPU float64 torch tensors are compiled"
        elif not isinstance(a, (bool, int, float, np.integer, np.floating)):
            return f"argument of type {type(a).__name__}"
    return None


_Tensor = None  # torch.Tensor, set when the first NumbaPrimal is built


class NumbaPrimal:
    """A function's recording primal compiled with Numba (one per plan, i.e. per call signature).

    ``NumbaPrimal(fn, sites)`` translates and compiles in this process (at the first call).
    ``NumbaPrimal(fn, sites, background=args)`` starts a child process compiling it for ``args``'
    types (``tiers``); ``ready()`` says when it is done and loads it from Numba's cache.
    """

    def __init__(self, fn: Callable, sites: list, background: tuple | None = None):
        global _Tensor
        import torch

        _Tensor = torch.Tensor

        self.sites = list(sites)
        self.source, self.name = translate(fn, self.sites)
        names = fn.__code__.co_varnames[:fn.__code__.co_argcount]
        self.n_params = len(names)
        self.defaults = tuple(fn.__defaults__ or ())
        self.calls = 0
        self.child = None
        self.jitted = None
        try:
            from sparsad.coarsen.numba_backend import write_module

            self.path, self.module_name = write_module(self.source)
        except Exception:  # no private cache directory: compiled in memory, here
            self.path = self.module_name = None
        if background is not None and self.path is not None:
            from sparsad.coarsen import tiers
            ev = np.zeros(2 + 3 * CAPACITY, dtype=np.int64)
            ev[1] = CAPACITY
            values = [np.array(v, copy=True) if isinstance(v, np.ndarray) else v for v in self.values(background)]
            self.child = tiers.start(self.path, self.module_name, self.name, [ev, *values])
        else:
            self.jitted = load(self.source, self.name, self.path, self.module_name)

    def ready(self) -> bool | None:
        """None while the child compiles; then True once the compiled primal is loaded, False if it failed."""
        if self.jitted is not None:
            return True
        if self.child is None:
            return False
        if not self.child.done():
            return None
        self.child.finish()
        ok = self.child.succeeded() and not self.child.warm_failed  # (else loading would compile it here)
        self.child = None
        if ok:
            try:
                self.jitted = load(self.source, self.name, self.path, self.module_name)
            except Exception:
                return False
        return self.jitted is not None

    def full_args(self, args: tuple) -> tuple:
        missing = self.n_params - len(args)
        if missing > 0:
            if missing > len(self.defaults):
                raise NumbaPrimalUnsupported("missing arguments")
            args = tuple(args) + self.defaults[len(self.defaults) - missing:]
        return args

    def values(self, args: tuple) -> list:
        return [numba_value(a, a.dim() == 0) if isinstance(a, _Tensor) else a
                for a in (args if len(args) == self.n_params else self.full_args(args))]

    def __call__(self, args: tuple):
        """(outputs as Numba returned them, Record), or None when the event log overflowed."""
        values = self.values(args)
        ev = np.empty(2 + 3 * CAPACITY, dtype=np.int64)
        ev[0], ev[1] = 0, CAPACITY
        out = self.jitted(ev, *values)
        self.calls += 1
        n = int(ev[0])
        if n > CAPACITY:
            return None
        return out, replay(ev, n, self.sites)


def numba_value(a, scalar: bool):
    """A CPU tensor as jitted code takes it: a float when 0-d (`scalar`), else a NumPy view."""
    return a.item() if scalar else (a.detach().numpy() if a.requires_grad else a.numpy())


def replay(ev: np.ndarray, n: int, sites: list) -> Record:
    """The ``Record`` the eager instrumented primal would have left, from the event log."""
    record = Record()
    data = ev[2:2 + 3 * n].tolist()
    if STEP not in data[0::3]:
        # no per-iteration events, so no recorded site ran inside a recorded loop's iteration:
        # every event is at the top level (path ()), and the dictionaries are filled directly
        loops, branches, counters = record.loops, record.branches, record._counters
        current = None
        for k in range(0, 3 * n, 3):
            kind, value = data[k], data[k + 2]
            site = sites[data[k + 1]]
            if kind == STEPS:
                current[0] += value
            elif kind == ENTER:
                entry = counters.get((site, ()), 0)
                counters[(site, ())] = entry + 1
                current = loops[(site, (), entry)] = [0, False]
            elif kind == BRK:
                current[1] = True
            elif kind == BRANCH:
                entry = counters.get((site, ()), 0)
                counters[(site, ())] = entry + 1
                branches[(site, (), entry)] = bool(value)
        return record
    for k in range(0, 3 * n, 3):
        kind, sid, value = data[k], data[k + 1], data[k + 2]
        site = sites[sid]
        if kind == STEPS:
            record.steps(site, value)
        elif kind == ENTER:
            record.enter(site)
        elif kind == LEAVE:
            record.leave(site)
        elif kind == BRK:
            record.brk(site)
        elif kind == BRANCH:
            record.branch(site, bool(value))
        else:
            record.step(site)
    return record
