"""Symbolic elevation: the SSA graph becomes SymPy segments of interest (SOIs).

Nodes are substituted into their users (the closed form of straight-line code); ``Phi`` becomes
``Piecewise`` on a recorded predicate symbol; loops get φ-calculus closed forms (``phi.solve``) or,
failing that, are unrolled with the recorded trip count.  Whenever an expression outgrows the
SOI size limit ``L``, the operand with the most uses in the program (then the largest) is cut
out as its own segment — the reuse-aware split of Fig. 7 (``soi.py`` holds the policy).  Sums
become segments of their own at the end (``split_reductions``).

The result, ``Elevation``, is a straight-line list of segments ``sym = expr`` over input,
view, parameter (trip counts, predicates) and earlier segment symbols.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy as sp

from sparsad.coarsen import budget, ssa
from sparsad.coarsen.frontend import CoarsenUnsupported
from sparsad.coarsen.phi import LoopSpec, NoClosedForm, solve
from sparsad.coarsen.record import Record
from sparsad.coarsen.soi import choose_cut, use_counts
from sparsad.coarsen.symbolic import VSum, Sigmoid, Softplus, hoist_sum, real_symbol, shape_of, stabilize, tree_size


@dataclass
class Segment:
    sym: sp.Symbol
    expr: sp.Expr | None       # value, or the summand of a reduction; None for views
    shape: tuple[int, ...]
    kind: str                  # "value" | "reduce" | "view"
    base: sp.Symbol | None = None
    key: Any = None


@dataclass
class Param:
    """A run-time value read from the record: a trip count or a branch/break decision."""
    sym: sp.Symbol
    kind: str                  # "trips" | "branch" | "broke"
    site: ssa.Site
    path: tuple
    entry: int


@dataclass
class Elevation:
    inputs: list[sp.Symbol]
    segments: list[Segment]
    outputs: list[sp.Expr]
    shapes: dict
    params: list[Param]
    iotas: dict                # symbol -> length
    assumptions: list          # (kind, key, value) record facts the elevation depends on
    notes: list[str] = field(default_factory=list)
    loops: dict = field(default_factory=dict)   # id -> revloop.LoopBody (loops compiled as loops)
    layouts: dict = field(default_factory=dict)  # k -> layouts.LayoutMap of the Relayout(., k) segments

    def segment(self, sym) -> Segment | None:
        for seg in self.segments:
            if seg.sym == sym:
                return seg
        return None


class _Ctx:
    """Where a node is being evaluated: top level, one unrolled iteration, or a closed-form analysis."""

    def __init__(self, mode: str, path: tuple = (), carried: dict | None = None, index: dict | None = None,
                 parent: "_Ctx | None" = None, site=None):
        self.mode, self.path, self.parent, self.site = mode, path, parent, site
        self.carried = dict(parent.carried) if parent else {}
        self.index = dict(parent.index) if parent else {}
        self.carried.update(carried or {})
        self.index.update(index or {})
        self.memo: dict[int, Any] = {}
        self.analysis = mode == "analysis" or (parent is not None and parent.analysis)


def _unevaluated(cls):
    """``cls(a, b)`` evaluated only between numbers: SymPy otherwise decides comparisons and
    ``Max``/``Min`` from assumptions, which cost seconds per call on a binomial tree's sums."""
    def make(a, b):
        if getattr(a, "is_number", False) and getattr(b, "is_number", False):
            return cls(a, b)
        if cls in (sp.Max, sp.Min) and a == b:
            return a
        return cls(a, b, evaluate=False)

    return make


_UNARY = {"exp": sp.exp, "log": sp.log, "sin": sp.sin, "cos": sp.cos, "tan": sp.tan, "tanh": sp.tanh,
          "sqrt": sp.sqrt, "abs": sp.Abs, "sigmoid": Sigmoid, "softplus": Softplus, "sinh": sp.sinh,
          "cosh": sp.cosh, "asin": sp.asin, "acos": sp.acos, "atan": sp.atan, "erf": sp.erf, "sign": sp.sign,
          "relu": lambda x: _unevaluated(sp.Max)(sp.Integer(0), x), "log1p": lambda x: sp.log(1 + x), "expm1": lambda x: sp.exp(x) - 1,
          "square": lambda x: x ** 2, "neg": lambda x: -x, "lgamma": sp.loggamma,
          "digamma": lambda x: sp.polygamma(0, x), "log2": lambda x: sp.log(x) / sp.log(2), "log10": lambda x: sp.log(x) / sp.log(10),
          "exp2": lambda x: sp.exp(x * sp.log(2)), "rsqrt": lambda x: 1 / sp.sqrt(x), "reciprocal": lambda x: 1 / x,
          "asinh": sp.asinh, "acosh": sp.acosh, "atanh": sp.atanh}
_BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b, "pow": lambda a, b: a ** b,
           "maximum": _unevaluated(sp.Max), "minimum": _unevaluated(sp.Min), "atan2": sp.atan2,
           "gt": _unevaluated(sp.StrictGreaterThan), "ge": _unevaluated(sp.GreaterThan),
           "lt": _unevaluated(sp.StrictLessThan), "le": _unevaluated(sp.LessThan), "eq": _unevaluated(sp.Eq),
           "ne": _unevaluated(sp.Ne)}


DEEP_EVALUATION = 100  # nesting of ``ev`` from which operands are evaluated first, iteratively
UNROLL_BUDGET = 400   # SSA operations unrolled per elevation (iterations x body size) before giving up
UNROLL_SHORT = 400    # a loop without closed form this small (iterations x body size) is unrolled, not looped
UNROLL_SHORT_TRIPS = 12  # ... and with at most this many iterations (expressions grow with every one)


def body_size(loop: ssa.Loop) -> int:
    """SSA operations of one iteration of ``loop`` (nested loops counted with their static trip counts)."""
    total = 0
    for node in ssa.walk_body(loop):
        if isinstance(node, ssa.Loop):
            total += body_size(node) * (node.trip if node.trip is not None else 1)
        elif isinstance(node, (ssa.Op, ssa.Reduce, ssa.Phi)):
            total += 1
    return max(total, 1)


def holds_loop(loop: ssa.Loop) -> bool:
    """Whether a traced loop is nested in ``loop``'s body."""
    return any(isinstance(node, ssa.Loop) for node in ssa.walk_body(loop))


class Elevator:
    def __init__(self, graph: ssa.Graph, record: Record | None, max_segment: int = 30,
                 closed_forms: bool = True, symbolic_trips: bool = True):
        self.graph, self.record = graph, record
        self.limit = max_segment
        self.closed_forms = closed_forms
        self.symbolic_trips = symbolic_trips
        self.shapes: dict = {}
        self.segments: list[Segment] = []
        self.params: dict = {}
        self.iotas: dict = {}
        self.views: dict = {}
        self.layouts: dict = {}
        self.assumptions: list = []
        self.notes: list[str] = []
        self.sizes: dict = {}
        self.uses = use_counts(graph)
        self.counter = 0
        self.depth = 0      # nesting of ``ev`` (deep chains are evaluated operands first)
        self.unrolled = 0   # operations unrolled so far (bounded by UNROLL_BUDGET)
        self.loop_bodies: dict = {}
        self.reverse_loops = True
        self.carried_syms: set = set()   # scalar loop-state placeholders (factors kept out of sums)
        self.loop_syms: set = set()      # every loop-state placeholder of a closed-form analysis
        self.deps: dict = {}
        self.inputs = []
        self.input_names = {node.name for node in graph.inputs}
        for node in graph.inputs:
            sym = real_symbol(node.name)
            self.shapes[sym] = node.shape
            self.inputs.append(sym)
        self.input_of = {id(node): sym for node, sym in zip(graph.inputs, self.inputs)}

    # ------------------------------------------------------------------ symbols
    def fresh(self, prefix: str, shape=()) -> sp.Symbol:
        self.counter += 1
        while f"{prefix}{self.counter}" in self.input_names:  # (a parameter may be called t1 or s2)
            self.counter += 1
        sym = real_symbol(f"{prefix}{self.counter}")
        self.shapes[sym] = shape
        return sym

    def bind(self, expr: sp.Expr, shape, prefix="t") -> sp.Symbol:
        if isinstance(expr, sp.Symbol):
            return expr
        sym = self.fresh(prefix, shape)
        self.segments.append(Segment(sym, expr, shape, "value"))
        return sym

    def view(self, base: sp.Symbol, key, shape) -> sp.Symbol:
        marker = (base, repr(key))
        if marker not in self.views:
            sym = self.fresh(f"{base}_v", shape)
            self.views[marker] = sym
            self.segments.append(Segment(sym, None, shape, "view", base, key))
        return self.views[marker]

    def relayout(self, base: sp.Symbol, kind: str, key, in_shape, out_shape) -> sp.Symbol:
        """A segment ``Relayout(base, k, *out_shape)`` (one per map and base)."""
        from sparsad.coarsen.layouts import LayoutMap
        from sparsad.coarsen.symbolic import Relayout

        layout = LayoutMap(kind, key, tuple(in_shape), tuple(out_shape))
        for index, known in self.layouts.items():
            if known == layout:
                break
        else:
            index = len(self.layouts)
            self.layouts[index] = layout
        marker = (base, "layout", index)
        if marker not in self.views:
            sym = self.fresh(f"{base}_l", tuple(out_shape))
            self.views[marker] = sym
            self.segments.append(Segment(sym, Relayout(base, sp.Integer(index), *[sp.Integer(d) for d in out_shape]),
                                         tuple(out_shape), "value"))
        return self.views[marker]

    def param(self, kind, site, path, entry) -> sp.Symbol:
        marker = (kind, site, path, entry)
        if marker not in self.params:
            number = len(self.params)
            while {f"n{number}", f"p{number}"} & self.input_names:  # (a parameter may be called p0 or n0)
                number += 1000
            if kind == "trips":
                sym = sp.Symbol(f"n{number}", integer=True, nonnegative=True)
            else:
                sym = real_symbol(f"p{number}")
            self.shapes[sym] = ()
            self.params[marker] = Param(sym, kind, site, path, entry)
        return self.params[marker].sym

    def iota(self, length: int) -> sp.Symbol:
        for sym, n in self.iotas.items():
            if n == length:
                return sym
        sym = self.fresh("iota", (length,))
        self.iotas[sym] = length
        return sym

    def size(self, expr) -> int:
        return tree_size(expr, self.sizes)

    def vsum(self, body: sp.Expr, length: int) -> sp.Expr:
        return hoist_sum(body, length, self.shapes, self.carried_syms)

    # --------------------------------------------------------------- evaluation
    def ev(self, node: ssa.Node, ctx: _Ctx):
        ctx = self._home(node, ctx)
        key = id(node)
        if key in ctx.memo:
            return ctx.memo[key]
        budget.check()
        if self.depth >= DEEP_EVALUATION:
            self._operands_first(node, ctx)
        self.depth += 1
        try:
            value = self._ev(node, ctx)
        finally:
            self.depth -= 1
        ctx.memo[key] = value
        return value

    def _home(self, node: ssa.Node, ctx: _Ctx) -> _Ctx:
        deps = ssa.loop_dependencies(node, self.deps)
        while ctx.parent is not None and ctx.site not in deps:
            ctx = ctx.parent  # loop-invariant: evaluate (and cut) once, outside the loop
        return ctx

    def _operands_first(self, node: ssa.Node, ctx: _Ctx) -> None:
        """Evaluate the not yet evaluated operands of ``node`` bottom-up, iteratively: on a long chain
        (a loop unrolled while tracing) the recursion of ``ev`` then stays shallow."""
        order, seen, stack = [], set(), [(node, False)]
        while stack:
            current, expanded = stack.pop()
            if expanded:
                order.append(current)
                continue
            if id(current) in seen or id(current) in self._home(current, ctx).memo:
                continue
            seen.add(id(current))
            stack.append((current, True))
            stack.extend((c, False) for c in reversed(ssa.children(current)))
        saved, self.depth = self.depth, 0
        try:
            for operand in order[:-1]:  # (the last one is ``node`` itself)
                self.ev(operand, ctx)
        finally:
            self.depth = saved

    def _ev(self, node, ctx):
        if isinstance(node, ssa.Input):
            return self.input_of[id(node)]
        if isinstance(node, ssa.Const):
            v = node.value
            return sp.Integer(int(v)) if float(v).is_integer() and abs(v) < 2 ** 53 else sp.Float(v)
        if isinstance(node, ssa.Iota):
            return self.iota(node.shape[0])
        if isinstance(node, ssa.Op):
            return self._op(node, ctx)
        if isinstance(node, ssa.Reduce):
            body = self.ev(node.arg, ctx)
            length = 1
            for extent in node.arg.shape:
                length *= extent
            return self.vsum(body, length)
        if isinstance(node, ssa.View):
            base = self.ev(node.base, ctx)
            if ctx.analysis and base.free_symbols & self.loop_syms:
                raise NoClosedForm("a view of a value that changes inside the loop")
            if not base.free_symbols:  # constants are uniform: every view of one is the same number
                return base
            if not isinstance(base, sp.Symbol):
                base = self.bind(base, node.base.shape)
            return self.view(base, node.key, node.shape)
        if isinstance(node, ssa.Layout):
            return self._layout(node, ctx)
        if isinstance(node, ssa.LoopIndex):
            value = ctx.index[node.site]
            return sp.Integer(value) if isinstance(value, int) else value[0]
        if isinstance(node, ssa.Index):
            return self._index(node, ctx)
        if isinstance(node, ssa.Carried):
            return ctx.carried[(node.site, node.k)]
        if isinstance(node, ssa.Phi):
            if ctx.analysis:
                raise NoClosedForm(f"an `if` on a traced value inside the loop (line {node.site[0]})")
            pred = self.param("branch", node.site, ctx.path, node.entry)
            then, orelse = self.ev(node.then, ctx), self.ev(node.orelse, ctx)
            if then == orelse:  # F1
                return then
            return sp.Piecewise((then, pred > 0), (orelse, True))
        if isinstance(node, ssa.Loop):
            return self._loop(node, ctx)
        if isinstance(node, ssa.LoopOut):
            value = self.ev(node.loop, ctx)[node.k]
            if value is None:
                raise CoarsenUnsupported(f"line {node.loop.site[0]}: a variable defined only inside a loop "
                                         "that ran zero times is used")
            return value
        raise CoarsenUnsupported(f"cannot elevate {type(node).__name__}")

    def _layout(self, node: ssa.Layout, ctx):
        base = self.ev(node.base, ctx)
        if ctx.analysis and base.free_symbols & self.loop_syms:
            raise NoClosedForm(f"a {node.kind} of a value that changes inside the loop")
        if not base.free_symbols:  # a uniform constant: reshaped it stays one, padded with zeros only if 0
            if node.kind == "reshape" or base == 0:
                return base
            return self.relayout(base, node.kind, node.key, node.base.shape, node.shape)  # (the map broadcasts it)
        if not isinstance(base, sp.Symbol):
            base = self.bind(base, node.base.shape)  # (a scalar symbol is broadcast by the map's code)
        return self.relayout(base, node.kind, node.key, node.base.shape, node.shape)

    def _op(self, node: ssa.Op, ctx):
        args = [self.ev(a, ctx) for a in node.args]
        expr = self._apply(node.op, args)
        if ctx.analysis:
            return expr
        for _ in range(len(args) + 1):
            if self.size(expr) <= self.limit:
                break
            pick = choose_cut(node.args, args, self.uses, self.size)
            if pick is None:
                break
            child, value = node.args[pick], args[pick]
            sym = self.bind(value, child.shape)
            ctx.memo[id(child)] = sym
            args[pick] = sym
            expr = self._apply(node.op, args)
        return expr

    def _apply(self, op, args):
        if op in _UNARY:
            return _UNARY[op](args[0])
        if op in _BINARY:
            return _BINARY[op](args[0], args[1])
        if op == "where":
            cond, a, b = args
            if cond is sp.true or cond is True:
                return a
            if cond is sp.false or cond is False:
                return b
            return sp.Piecewise((a, cond), (b, True))
        raise CoarsenUnsupported(f"operation {op!r} has no symbolic form")

    def _index(self, node: ssa.Index, ctx):
        base = self.ev(node.base, ctx)
        if base.free_symbols & self.loop_syms:
            raise NoClosedForm("indexing a value that changes inside the loop")
        if not isinstance(base, sp.Symbol):
            base = self.bind(base, node.base.shape)
        where = ctx.index[node.site]
        if isinstance(where, int):
            position = node.stride * where + node.offset
            if not -node.base.shape[0] <= position < node.base.shape[0]:
                raise CoarsenUnsupported(f"index {position} out of range for length {node.base.shape[0]}")
            return self.view(base, position, node.shape)
        if node.shape != ():
            raise NoClosedForm("loop-indexed rows of a matrix are not vectorised")
        if node.stride != 1:
            raise NoClosedForm("an index running backwards (x[n - 1 - i]) is not vectorised")
        _counter, elements = where
        for elem, (b, off) in elements.items():
            if b == base and off == node.offset:
                return elem
        elem = self.fresh(f"{base}_at", ())
        elements[elem] = (base, node.offset)
        return elem

    # -------------------------------------------------------------------- loops
    def _loop(self, loop: ssa.Loop, ctx: _Ctx):
        inits = [None if n is None else self.ev(n, ctx) for n in loop.inits]
        if self.closed_forms:
            params_before = dict(self.params)
            try:
                return self._closed_form(loop, ctx, inits)
            except NoClosedForm as why:
                self.params = params_before  # the trip-count symbol of the failed attempt is not used
                if ctx.analysis:
                    raise
                self.notes.append(f"loop at line {loop.site[0]}: no closed form ({why}); "
                                  "unrolled with the recorded trip count (C9)")
        if ctx.analysis:
            raise NoClosedForm("nested loop without a closed form")
        short = (loop.trip is not None and loop.trip <= UNROLL_SHORT_TRIPS and loop.trip * body_size(loop) <= UNROLL_SHORT
                 and not holds_loop(loop))  # (unrolling it would unroll its nested loops too: their budget)
        if self.reverse_loops and ctx.mode == "top" and not ctx.path and not short:
            from sparsad.coarsen import revloop
            why = revloop.eligible(loop)
            if why is None:
                try:
                    return self._compiled_loop(loop, ctx, inits)
                except (revloop.NotReversible, CoarsenUnsupported, NotImplementedError) as exc:
                    why = str(exc)
            self.notes.append(f"loop at line {loop.site[0]}: not a compiled loop ({why})")
        return self._unroll(loop, ctx, inits)

    def _compiled_loop(self, loop: ssa.Loop, ctx: _Ctx, inits):
        """The loop as generated forward/reverse loops over one symbolic iteration (``revloop``)."""
        ident = len(self.loop_bodies)
        self.loop_bodies[ident] = None  # (reserved: loops nested in this one are numbered after it)
        try:
            return self._compiled_loop_numbered(loop, ctx, inits, ident)
        except BaseException:
            for key in [key for key in self.loop_bodies if key >= ident]:
                del self.loop_bodies[key]
            raise

    def _compiled_loop_numbered(self, loop: ssa.Loop, ctx: _Ctx, inits, ident: int):
        from sparsad.coarsen import revloop
        from sparsad.coarsen.symbolic import LoopFwd, Pick

        body = revloop.build(self, loop, ctx, ident)
        n, broke = self._trips(loop, ctx, True)
        values = []
        for init in inits:
            if init is None:
                values.append(sp.Integer(0))
            elif init.free_symbols:
                values.append(self.bind(init, shape_of(init, self.shapes)))
            else:
                values.append(init)
        body.init_shapes = [tuple(shape_of(v, self.shapes)) for v in values]
        for init_shape, shape in zip(body.init_shapes, body.carried_shapes):
            if init_shape != shape and init_shape != ():
                raise revloop.NotReversible(f"an initial value of shape {init_shape} broadcast to {shape}")
        call = LoopFwd(sp.Integer(ident), *values, *body.invariants, n, sp.Integer(0) if broke is None else broke)
        exits = []
        for k, shape in enumerate(body.carried_shapes):
            sym = self.fresh(f"{loop.names[k]}_exit", shape)
            self.segments.append(Segment(sym, Pick(call, sp.Integer(k), *[sp.Integer(d) for d in shape]), shape,
                                         "value"))
            exits.append(sym)
        body.exit_syms = exits
        self.loop_bodies[ident] = body
        self.notes.append(f"loop at line {loop.site[0]} ({loop.kind}, trips {n}): no closed form; compiled as a "
                          f"loop: one symbolic iteration ({len(body.forward)} segments) and its adjoint, run "
                          "forward then in reverse (compile time independent of the trip count)")
        return exits

    def _trips(self, loop: ssa.Loop, ctx: _Ctx, symbolic: bool):
        """(completed iterations, broke) as symbols (closed forms) or recorded values (unrolling)."""
        if loop.trip is not None and loop.break_site is None:  # (a `break` makes the count a run-time value)
            return sp.Integer(loop.trip), None
        if symbolic and not ctx.analysis:
            n = self.param("trips", loop.site, ctx.path, loop.entry)
            broke = self.param("broke", loop.site, ctx.path, loop.entry) if loop.break_site else None
            return n, broke
        if self.record is None:
            raise CoarsenUnsupported("a loop needs its recorded trip count")
        if ctx.analysis:
            raise NoClosedForm("a while loop nested in a loop being closed")
        try:
            n, broke = self.record.completed(loop.site, ctx.path, loop.entry)
        except KeyError as exc:
            raise CoarsenUnsupported(f"line {loop.site[0]}: no recorded trip count") from exc
        self.assumptions.append(("trips", (loop.site, ctx.path, loop.entry), (n, broke)))
        return sp.Integer(n), (sp.Integer(1) if broke else sp.Integer(0)) if loop.break_site else None

    def _closed_form(self, loop: ssa.Loop, ctx: _Ctx, inits):
        placeholders = []
        for k, name in enumerate(loop.names):
            shape = loop.updates[k].shape
            sym = self.fresh(f"{name}_phi", shape)
            placeholders.append(sym)
        self.carried_syms |= {s for s in placeholders if self.shapes[s] == ()}
        self.loop_syms |= set(placeholders)
        counter = real_symbol(f"i{self.counter}") if loop.kind == "for" else None
        elements: dict = {}
        index = {loop.site: (counter, elements)} if counter is not None else {}
        inner = _Ctx("analysis", ctx.path, {(loop.site, k): s for k, s in enumerate(placeholders)}, index, ctx,
                     loop.site)
        updates = [self.ev(u, inner) for u in loop.updates]
        before = [self.ev(b, inner) for b in loop.before_break] if loop.before_break else None
        n, broke = self._trips(loop, ctx, self.symbolic_trips)

        def view_slice(elem, lo, length):
            base, off = elements[elem]
            first = lo + off
            extent = self.shapes[base][0]
            if first < 0 or first + length > extent:
                raise NoClosedForm("loop-indexed access runs outside the vector (negative or wrapped index)")
            if first == 0 and length == extent:
                return base
            return self.view(base, slice(first, first + length), (length,))

        def view_item(elem, position):
            base, off = elements[elem]
            return self.view(base, position + off, ())

        spec = LoopSpec(placeholders, inits, updates, before, n, broke, counter, loop.start, elements,
                        view_slice, view_item, self.iota, self.vsum,
                        lambda e: shape_of(e, self.shapes) == ())
        exits, notes = solve(spec)
        self.notes.append(f"loop at line {loop.site[0]} ({loop.kind}, trips {n}): closed form by φ-calculus")
        for k, (name, value) in enumerate(zip(loop.names, exits)):
            if value is not None:
                self.notes.append(f"    {name}_exit = {sp.sstr(value)}")
        self.notes.extend("    " + note for note in notes)
        return [None if v is None else (v if ctx.analysis else self._fit(v, loop.updates[k].shape))
                for k, v in enumerate(exits)]

    def _fit(self, expr, shape):
        """Cut an over-long closed form into its own segment."""
        if self.size(expr) > self.limit:
            return self.bind(expr, shape)
        return expr

    def _unroll(self, loop: ssa.Loop, ctx: _Ctx, inits):
        n, broke = self._trips(loop, ctx, symbolic=False)
        n = int(n)
        self.unrolled += n * body_size(loop)
        if self.unrolled > UNROLL_BUDGET:
            about = [note for note in self.notes if note.startswith(f"loop at line {loop.site[0]}: ")]
            why = "; ".join(note.split(": ", 1)[1] for note in about[-2:]) or "no closed form"
            raise CoarsenUnsupported(
                f"line {loop.site[0]}: {why}; unrolling its {n} iterations would "
                f"take {self.unrolled} symbolic operations (budget {UNROLL_BUDGET}), so plain autograd is used")
        state = list(inits)
        for it in range(n):
            index = {loop.site: loop.start + it} if loop.kind == "for" else {}
            path = ctx.path + ((loop.site, loop.entry, it),)
            step = _Ctx("unroll", path, {(loop.site, k): v for k, v in enumerate(state)}, index, ctx, loop.site)
            state = [self._fit(self.ev(u, step), u.shape) for u in loop.updates]
        if broke is not None and int(broke):
            index = {loop.site: loop.start + n} if loop.kind == "for" else {}
            path = ctx.path + ((loop.site, loop.entry, n),)
            step = _Ctx("unroll", path, {(loop.site, k): v for k, v in enumerate(state)}, index, ctx, loop.site)
            state = [self.ev(b, step) for b in loop.before_break]
        return state

    # ------------------------------------------------------------------- driver
    def run(self) -> Elevation:
        top = _Ctx("top")
        outputs = [self.ev(out, top) for out in self.graph.outputs]
        outputs = [stabilize(o) for o in outputs]
        self.segments = [Segment(s.sym, None if s.expr is None else stabilize(s.expr), s.shape, s.kind, s.base, s.key)
                         for s in self.segments]
        segments, outputs = split_reductions(self.segments, outputs, self)
        params = list(self.params.values())
        return Elevation(self.inputs, segments, outputs, self.shapes, params, dict(self.iotas),
                         self.assumptions, self.notes, dict(self.loop_bodies), dict(self.layouts))


def split_reductions(segments: list[Segment], outputs: list[sp.Expr], elev: Elevator):
    """Every ``VSum`` becomes a reduction segment (inner sums first), so the rest is elementwise."""
    memo: dict = {}
    result: list[Segment] = []

    def lift(expr):
        if expr is None or not expr.has(VSum):
            return expr

        def replace(e):
            if isinstance(e, VSum):
                if e in memo:
                    return memo[e]
                body = lift(e.args[0])
                sym = elev.fresh("s", ())
                result.append(Segment(sym, body, (), "reduce"))
                memo[e] = sym
                return sym
            if not e.args:
                return e
            new_args = [replace(a) for a in e.args]
            return e.func(*new_args) if any(a is not b for a, b in zip(new_args, e.args)) else e

        return replace(expr)

    for seg in segments:
        expr = lift(seg.expr)
        result.append(Segment(seg.sym, expr, seg.shape, seg.kind, seg.base, seg.key))
    outputs = [lift(o) for o in outputs]
    return result, outputs


def elevate(graph: ssa.Graph, record: Record | None, max_segment: int = 30, closed_forms: bool = True) -> Elevation:
    """SSA graph → SymPy segments (see the module docstring)."""
    return Elevator(graph, record, max_segment, closed_forms).run()
