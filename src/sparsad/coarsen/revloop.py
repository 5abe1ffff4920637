"""Loops without a closed form as compiled loops: one symbolic iteration, a forward and a reverse loop.

Unrolling a loop symbolically costs time in proportion to its trip count (minutes for a few
hundred steps).  Instead the loop body is elevated and differentiated *once*, as a straight-line
program from the carried state (and the counter, the loop-invariant values and the elements
``x[i]`` it reads) to the next state.  The generated code then runs

* ``_loop_fwd_K``: the loop itself, giving the exit state (used where the adjoint needs it);
* ``_loop_rev_K``: the loop again, storing every state, then the iterations in reverse, each
  applying the body's adjoint to the state's cotangent and accumulating the invariants' and the
  read elements' cotangents.

The trip count is an argument (a recorded parameter for ``while`` loops and loops with a
``break``), so one compiled adjoint serves every trip count and compile time does not depend on it.
A ``break`` adds the partial iteration it ends: ``_loop_bfw_K`` (the state at the break, from the
same forward statements) and ``_loop_brk_K`` (its adjoint), run when the recorded "broke" flag is
set.  A traced ``if`` in the body becomes a select on its predicate, evaluated in each iteration
(both the forward and the reverse loop take the arm the state gives).  Eligible: a top-level loop
reading elements ``x[±i + c]`` of 1-d loop-invariant vectors.  A nested loop with the same trip count
in every iteration becomes a compiled loop of its own (numbered after the outer one), called from the
outer iteration: its ``_loop_fwd_K`` runs in the outer forward statements and its ``_loop_rev_K`` in
the outer iteration's adjoint; a short one is unrolled in the iteration instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from sparsad.coarsen import ssa
from sparsad.coarsen.symbolic import LoopFwd, Pick, Scatter, real_symbol, stabilize


def printer_for(body: LoopBody, backend: str, shapes: dict, program=None):
    """A printer of one iteration's statements: its scatters named per loop, no fused-sum helpers."""
    from sparsad.coarsen.codegen import Printer
    from sparsad.coarsen.numba_backend import NumbaPrinter

    program = program or body.adjoint
    prefix = body.scatter_prefix(program)

    def scatter(self, e):
        return f"{prefix}{int(e.args[1])}({self.p(e.args[0])})"

    if backend == "numba":  # (sums of elementwise terms fused into loops: helpers named per loop and program)
        return NumbaPrinter(set(), shapes, program.views, prefix, vsum_prefix=f"_vsum_{prefix[len('_scatter_'):]}")

    class TorchBodyPrinter(Printer):
        def p(self, e):
            return scatter(self, e) if isinstance(e, Scatter) else super().p(e)

    return TorchBodyPrinter(backend, set())


class NotReversible(Exception):
    """The loop cannot become a compiled reverse loop (the message says why)."""


@dataclass
class LoopBody:
    """One loop's symbolic iteration and its adjoint, with what the generated loops need."""
    ident: int
    start: int
    carried: list          # placeholder symbols c_k
    carried_shapes: list
    init_shapes: list
    invariants: list       # outer symbols read inside the body
    invariant_shapes: list
    counter: sp.Symbol
    elements: list         # (element symbol, base symbol, stride, offset)
    forward: list          # (symbol, expr | _ViewRef | ("reduce", expr, numel)) statements of one iteration
    updates: list          # expressions of the next state
    adjoint: object        # AdjointProgram of one iteration (inputs: carried, invariants, elements, counter)
    exit_syms: list = field(default_factory=list)
    before_break: list | None = None   # expressions of the state at a `break` (from the same forward statements)
    break_adjoint: object = None       # AdjointProgram of that partial iteration

    def scatter_prefix(self, program) -> str:
        return f"_scatter_L{self.ident}{'b' if program is self.break_adjoint else ''}_"

    def views(self) -> dict:
        """Scatter helper name -> (key, base shape), for both programs."""
        out = {}
        for program in (self.adjoint, self.break_adjoint):
            if program is not None:
                for index, (key, shape) in program.views.items():
                    out[f"{self.scatter_prefix(program)}{index}"] = (key, shape)
        return out


def eligible(loop: ssa.Loop) -> str | None:
    """None when ``loop`` can become a compiled reverse loop, else why not.

    A nested traced loop is allowed when its trip count is the same in every iteration (a ``for``
    over a static range without ``break``) and it is eligible itself: it then becomes a compiled
    loop called from this one's iteration (or is unrolled there when short)."""
    enclosing = set(loop.scope) | {loop.site}
    seen: set = set()
    stack = list(ssa.body_nodes(loop))
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, ssa.Phi) and loop.site in node.scope:
            if node.test is None or node.scope[-1] != loop.site:
                return f"it holds an `if` on a traced value (line {node.site[0]})"
            stack.append(node.test)  # (selected per iteration: its predicate is part of the body)
        if isinstance(node, ssa.Loop):
            if (node.trip is None and node.stop is None) or node.break_site is not None:
                return (f"it holds a nested traced loop whose trip count is recorded per iteration "
                        f"(line {node.site[0]}: a `while`, a `break` or a bound from the counter)")
            why = eligible(node)
            if why is not None:
                return f"its nested loop at line {node.site[0]} cannot be compiled ({why})"
        if isinstance(node, ssa.Layout):
            return f"it holds a {node.kind} of a tensor (layout maps are generated for straight-line code only)"
        if isinstance(node, ssa.Index) and node.site == loop.site and len(node.base.shape) != 1:
            return "it indexes the rows of a matrix with the counter"
        if isinstance(node, (ssa.LoopIndex, ssa.Index)) and node.site not in enclosing:
            return "it reads the counter of another loop"
        stack.extend(ssa.children(node))
    return None


def build(outer, loop: ssa.Loop, outer_ctx, ident: int) -> LoopBody:
    """Elevate and differentiate one iteration of ``loop`` (``outer`` is the enclosing ``Elevator``)."""
    from sparsad.coarsen.adjoint import _numel, differentiate
    from sparsad.coarsen.elevate import Elevation, Elevator, Segment, _Ctx, split_reductions

    class BodyElevator(Elevator):
        def __init__(self):
            super().__init__(ssa.Graph("body", (), (), False), None, outer.limit, closed_forms=False)
            self.counter_sym = real_symbol(f"ctr_L{ident}_")  # (no carried, element or cut name ends in "_")
            self.shapes[self.counter_sym] = ()
            self.placeholders = []
            for k, name in enumerate(loop.names):
                sym = real_symbol(f"{name}_L{ident}")
                self.shapes[sym] = loop.updates[k].shape
                self.placeholders.append(sym)
            self.invariant_syms: list = []
            self.element_list: list = []
            self.outer_memo: dict = {}
            self.loop_bodies = outer.loop_bodies   # (nested compiled loops: one numbering per program)
            self.deps = outer.deps
            self.outside = frozenset(loop.scope)   # sites of the loops around this one

        def _trips(self, inner, ctx, symbolic):
            if inner.break_site is None and inner.trip is None and inner.stop is not None and symbolic:
                # `range(start, i)`, `i` from this loop's counter: max(0, i - start) iterations
                return sp.Max(self.ev(inner.stop, ctx) - inner.start, 0), None
            if inner.trip is None or inner.break_site is not None:
                raise NotReversible(f"the nested loop at line {inner.site[0]} has a trip count recorded per "
                                    "iteration")
            return sp.Integer(inner.trip), None

        def fresh(self, prefix, shape=()):
            sym = super().fresh(f"{prefix}_L{ident}_", shape)
            return sym

        def ev(self, node, ctx):
            deps = ssa.loop_dependencies(node, outer.deps)
            if deps <= self.outside:  # (nothing of this loop's iteration or of loops nested in it)
                return self.invariant(node)
            key = id(node)
            if key in ctx.memo:
                return ctx.memo[key]
            value = self._ev(node, ctx)
            ctx.memo[key] = value
            return value

        def invariant(self, node):
            key = id(node)
            if key not in self.outer_memo:
                value = outer.ev(node, outer_ctx)
                if not value.free_symbols:
                    self.outer_memo[key] = value
                else:
                    sym = value if isinstance(value, sp.Symbol) else outer.bind(value, node.shape)
                    if sym not in self.invariant_syms:
                        self.invariant_syms.append(sym)
                        self.shapes[sym] = outer.shapes.get(sym, node.shape)
                    self.outer_memo[key] = sym
            return self.outer_memo[key]

        def _ev(self, node, ctx):
            if isinstance(node, ssa.Carried):
                if node.site != loop.site:
                    if (node.site, node.k) not in ctx.carried:
                        raise NotReversible("a value carried by another loop")
                    return ctx.carried[(node.site, node.k)]  # (a nested loop unrolled in the iteration)
                return self.placeholders[node.k]
            if isinstance(node, ssa.LoopIndex) and node.site == loop.site:
                return self.counter_sym
            if isinstance(node, (ssa.LoopIndex, ssa.Index)) and node.site != loop.site:
                if node.site not in ctx.index:
                    raise NotReversible("the counter of another loop")
                return super()._ev(node, ctx)  # (a nested loop unrolled in the iteration)
            if isinstance(node, ssa.Index):
                base = self.ev(node.base, ctx)
                if not isinstance(base, sp.Symbol) or base not in self.invariant_syms:
                    raise NotReversible("an element of a value that changes inside the loop")
                for sym, b, stride, offset in self.element_list:
                    if b == base and stride == node.stride and offset == node.offset:
                        return sym
                sym = real_symbol(f"{base}_at{len(self.element_list)}_L{ident}")
                self.shapes[sym] = ()
                self.element_list.append((sym, base, node.stride, node.offset))
                return sym
            if isinstance(node, ssa.Phi) and node.test is not None and node.scope[-1:] == (loop.site,):
                # an `if` in the body: both arms and the predicate, selected per iteration (the
                # derivative is the taken arm's; the predicate's own is zero almost everywhere)
                then, orelse = self.ev(node.then, ctx), self.ev(node.orelse, ctx)
                if then == orelse:
                    return then
                test = self.ev(node.test, ctx)
                if test is sp.true or test is True:
                    return then
                if test is sp.false or test is False:
                    return orelse
                if not isinstance(test, sp.logic.boolalg.Boolean):
                    test = sp.Ne(test, 0)
                return sp.Piecewise((then, test), (orelse, True))
            if isinstance(node, ssa.Phi):
                raise NotReversible(f"{type(node).__name__} inside the loop body")
            return super()._ev(node, ctx)  # (a nested loop: compiled as a loop of its own, or unrolled)

    body = BodyElevator()
    top = _Ctx("top")
    n_c = len(loop.updates)
    outs = [stabilize(body.ev(u, top)) for u in loop.updates]
    if loop.before_break is not None:
        outs += [stabilize(body.ev(b, top)) for b in loop.before_break]
    outer.notes.extend(f"(inside the loop at line {loop.site[0]}) {note}" for note in body.notes)
    body.segments = [Segment(s.sym, None if s.expr is None else stabilize(s.expr), s.shape, s.kind, s.base, s.key)
                     for s in body.segments]
    segments, outs = split_reductions(body.segments, outs, body)
    updates, before = outs[:n_c], (outs[n_c:] if loop.before_break is not None else None)
    inputs = (body.placeholders + body.invariant_syms + [e[0] for e in body.element_list] + [body.counter_sym])
    for sym in inputs:
        body.shapes.setdefault(sym, ())
    nested = {k: v for k, v in body.loop_bodies.items() if v is not None}
    elev = Elevation(inputs, segments, updates, body.shapes, [], dict(body.iotas), [], [], loops=nested)
    wrt = list(range(len(inputs) - 1))  # not the counter
    program = differentiate(elev, wrt, simplify=False)
    break_program = None
    if before is not None:
        break_elev = Elevation(inputs, segments, before, body.shapes, [], dict(body.iotas), [], [], loops=nested)
        break_program = differentiate(break_elev, wrt, simplify=False)
    forward = []
    from sparsad.coarsen.adjoint import _ViewRef
    for seg in segments:
        if seg.kind == "view":
            forward.append((seg.sym, _ViewRef(seg.base, seg.key)))
        elif seg.kind == "reduce":
            from sparsad.coarsen.symbolic import VSum, shape_of
            forward.append((seg.sym, VSum(seg.expr, _numel(shape_of(seg.expr, body.shapes)) or 1)))
        else:
            forward.append((seg.sym, seg.expr))
    inits_shapes = []
    return LoopBody(ident, loop.start, body.placeholders, [tuple(u.shape) for u in loop.updates], inits_shapes,
                    body.invariant_syms, [tuple(body.shapes[s]) for s in body.invariant_syms], body.counter_sym,
                    body.element_list, forward, updates, program, before_break=before, break_adjoint=break_program)


# ------------------------------------------------------------------------------------- code
def helper_source(body: LoopBody, printer_factory, backend: str) -> tuple[str, dict]:
    """Source of ``_loop_fwd_K`` and ``_loop_rev_K`` (and, for a loop with a ``break``, of the partial
    iteration ``_loop_bfw_K`` and its adjoint ``_loop_brk_K``), with the fused sums they call, and the
    scatter helpers they use."""
    from sparsad.coarsen.adjoint import _ViewRef
    from sparsad.coarsen.codegen import _key_text, identifier
    from sparsad.coarsen.symbolic import shape_of

    k = body.ident
    program = body.adjoint
    shapes = dict(program.shapes)  # (and the shared subexpressions' below)
    fresh: set = set()
    fwd_printer = rev_printer = printer_factory(body, backend, shapes)
    printers = [fwd_printer]
    names_c = [identifier(s) for s in body.carried]
    names_inv = [identifier(s) for s in body.invariants]
    n_c, n_inv = len(body.carried), len(body.invariants)

    def zeros(shape) -> str:
        if shape == ():
            return "0.0" if backend == "numba" else "_as_tensor(0.0)"
        return f"np.zeros({tuple(shape)!r})" if backend == "numba" else f"_zeros({tuple(shape)!r})"

    def fit(value: str, shape) -> str:
        """A value broadcast to the carried shape (so the loop variables keep one type)."""
        if backend == "numba":
            return f"({value} + np.zeros({tuple(shape)!r}))" if shape != () else f"({value} + 0.0)"
        return f"_fit({value}, {tuple(shape)!r})"

    def fit_expr(expr, printer, shape, known=None) -> str:
        """``fit`` of a printed expression, skipped where arithmetic already gives a fresh array of
        the carried shape (an allocation and a pass less per iteration; never a bare input)."""
        if known is not None:
            return fit(printer(expr), shape) if isinstance(expr, sp.Symbol) or tuple(
                shape_of(expr, known)) != tuple(shape) or backend != "numba" or shape == () else printer(expr)
        if (backend == "numba" and shape != () and (not isinstance(expr, sp.Symbol) or expr in fresh)
                and tuple(printer_shape(expr)) == tuple(shape)):
            return printer(expr)
        return fit(printer(expr), shape)

    def printer_shape(expr):
        return shape_of(expr, shapes)

    # carried values no statement reads (temporaries assigned in the body) need no history
    read: set = set()
    for prog in (program, body.break_adjoint):
        if prog is not None:
            for _, value in prog.statements:
                read |= set(getattr(value, "free_symbols", ()))
            for r in prog.results:
                if r is not None:
                    read |= r.free_symbols
    for _, value in body.forward:
        read |= set(getattr(value, "free_symbols", ()))
    for expr in list(body.updates) + list(body.before_break or []):
        read |= expr.free_symbols
    kept = [j for j in range(len(body.carried)) if body.carried[j] in read]

    def tup(items) -> str:
        return f"{', '.join(items)}{',' if len(items) == 1 else ''}"

    def step_prelude(indent: str) -> list[str]:
        lines = [f"{indent}i_int = {body.start} + t",
                 f"{indent}{identifier(body.counter)} = " + ("float(i_int)" if backend == "numba" else
                                                             "_as_tensor(float(i_int))")]
        for sym, base, stride, offset in body.elements:
            lines.append(f"{indent}{identifier(sym)} = {identifier(base)}[{stride} * i_int + {offset}]")
        return lines

    def statements(stmts, printer, indent):
        lines = []
        calls: dict = {}  # a nested compiled loop runs once per iteration, whatever number of its exits is used
        for sym, value in stmts:
            if isinstance(value, _ViewRef):
                lines.append(f"{indent}{identifier(sym)} = {identifier(value.base)}[{_key_text(value.key)}]")
            elif isinstance(value, Pick) and isinstance(value.args[0], LoopFwd):
                if value.args[0] not in calls:
                    calls[value.args[0]] = f"_exits_{identifier(sym)}"
                    lines.append(f"{indent}{calls[value.args[0]]} = {printer(value.args[0])}")
                lines.append(f"{indent}{identifier(sym)} = {calls[value.args[0]]}[{int(value.args[1])}]")
            else:
                lines.append(f"{indent}{identifier(sym)} = {printer(value)}")
        return lines

    def adjoint_lines(prog, printer, indent) -> tuple[list, list, list, list]:
        """(statements, new state cotangents, invariant cotangents by m, element cotangents (m, position, text))."""
        lines = [f"{indent}{identifier(seed)} = cb{j}" for j, seed in enumerate(prog.seeds)]
        lines += statements(prog.statements, printer, indent)
        results = prog.results
        new_cb = [fit_expr(results[j], printer, body.carried_shapes[j], prog.shapes) if results[j] is not None
                  else fit("0.0", body.carried_shapes[j]) for j in range(n_c)]
        inv = [(m, printer(results[n_c + m]), tuple(shape_of(results[n_c + m], prog.shapes))) for m in range(n_inv)
               if results[n_c + m] is not None and results[n_c + m] != 0]
        elems = []
        for e, (sym, base, stride, offset) in enumerate(body.elements):
            r = results[n_c + n_inv + e]
            if r is not None and r != 0:
                elems.append((body.invariants.index(base), f"{stride} * i_int + {offset}", printer(r)))
        return lines, new_cb, inv, elems

    def accumulate(m, text, shape) -> str:
        """``ib_m += text`` in place where the term has the invariant's own (array) shape, so no new
        array is made per iteration; otherwise (a broadcast term, scalars, torch) a new value."""
        if backend == "numba" and shape != () and shape == tuple(body.invariant_shapes[m]):
            return f"        ib{m} += {text}"
        return f"        ib{m} = ib{m} + {text}"

    def add_element(m, position, text, indent) -> str:
        if backend == "numba":
            return f"{indent}ib{m}[{position}] += {text}"
        return f"{indent}ib{m} = _add_at(ib{m}, {position}, {text})"

    inits = [f"init{j}" for j in range(n_c)]
    args = ", ".join(inits + names_inv + ["n", "broke"])
    # the next state's expressions share subexpressions (``y + a sin(y)`` in both ``y`` and ``acc``):
    # each is computed once per iteration (same operations, so the same rounding)
    shared, updates = sp.cse(list(body.updates), symbols=sp.numbered_symbols(f"cse__L{k}_", real=True))
    update_lines = []
    fresh.update(sym for sym, _ in shared)  # (arrays computed in the iteration: no copy needed)
    for sym, expr in shared:
        shapes[sym] = tuple(shape_of(expr, shapes))
        update_lines.append(f"{identifier(sym)} = {fwd_printer(expr)}")
    news = [fit_expr(u, fwd_printer, body.carried_shapes[j]) for j, u in enumerate(updates)]
    helpers = []
    if body.before_break is not None:
        # the partial iteration at a `break` (counter start + n) and its adjoint, as functions of their own
        brk_printer = printer_factory(body, backend, body.break_adjoint.shapes, body.break_adjoint)
        printers.append(brk_printer)
        state_args = ", ".join(names_c + names_inv + ["n"])
        bfw = [f"def _loop_bfw_{k}({state_args}):", "    t = int(n)"] + step_prelude("    ")
        bfw += statements(body.forward, brk_printer, "    ")
        bfw.append(f"    return ({tup([fit(brk_printer(b), body.carried_shapes[j]) for j, b in enumerate(body.before_break)])})")
        lines, new_cb, inv, elems = adjoint_lines(body.break_adjoint, brk_printer, "    ")
        brk = [f"def _loop_brk_{k}({', '.join(f'cb{j}' for j in range(n_c))}, {state_args}):", "    t = int(n)"]
        brk += step_prelude("    ") + lines
        outs = new_cb + [text for _, text, _ in inv] + [text for _, _, text in elems]
        brk.append(f"    return ({tup(outs)})")
        helpers = bfw + [""] + brk + [""]
        break_fwd = [f"    if broke > 0.5:", f"        {tup(names_c)} = _loop_bfw_{k}({state_args})"]
        break_rev = [f"    if broke > 0.5:", f"        r = _loop_brk_{k}({', '.join(f'cb{j}' for j in range(n_c))}, {state_args})",
                     f"        t = int(n)", f"        i_int = {body.start} + t"]
        break_rev += [f"        cb{j} = r[{j}]" for j in range(n_c)]
        break_rev += [f"        ib{m} = ib{m} + r[{n_c + q}]" for q, (m, _, _) in enumerate(inv)]
        break_rev += [add_element(m, position, f"r[{n_c + len(inv) + q}]", "        ")
                      for q, (m, position, _) in enumerate(elems)]
    else:
        break_fwd = break_rev = []
    # forward loop
    fwd = [f"def _loop_fwd_{k}({args}):"]
    for j in range(n_c):
        fwd.append(f"    {names_c[j]} = {fit(inits[j], body.carried_shapes[j])}")
    fwd.append("    for t in range(int(n)):")
    fwd += step_prelude("        ")
    fwd += statements(body.forward, fwd_printer, "        ")
    fwd += ["        " + line for line in update_lines]
    fwd.append(f"        {tup(names_c)} = {tup(news)}")
    fwd += break_fwd
    fwd.append(f"    return ({tup(names_c)})")
    # reverse loop
    seeds = [f"seed{j}" for j in range(n_c)]
    rev = [f"def _loop_rev_{k}({', '.join(seeds)}, {args}):"]
    for j in range(n_c):
        shape = body.carried_shapes[j]
        rev.append(f"    {names_c[j]} = {fit(inits[j], shape)}")
        if j not in kept:
            continue
        if backend == "numba":
            numel = 1
            for extent in shape:
                numel *= extent
            rev.append(f"    hist{j} = np.empty((int(n),))" if shape == () else f"    hist{j} = np.empty((int(n), {numel}))")
        else:
            rev.append(f"    hist{j} = []")
    rev.append("    for t in range(int(n)):")
    for j in kept:
        if backend != "numba":
            rev.append(f"        hist{j}.append({names_c[j]})")
        elif body.carried_shapes[j] == ():
            rev.append(f"        hist{j}[t] = {names_c[j]}")
        else:  # element by element (assigning a row compiles NumPy's fancy-indexing path: seconds)
            rev.append(f"        _store(hist{j}, t, {names_c[j]})")
    rev += step_prelude("        ")
    rev += statements(body.forward, fwd_printer, "        ")
    rev += ["        " + line for line in update_lines]
    rev.append(f"        {tup(names_c)} = {tup(news)}")
    for j in range(n_c):
        rev.append(f"    cb{j} = {fit(seeds[j], body.carried_shapes[j])}")
    for m, shape in enumerate(body.invariant_shapes):
        rev.append(f"    ib{m} = {zeros(shape)}")
    rev += break_rev
    rev.append("    for t in range(int(n) - 1, -1, -1):")
    for j in kept:
        shape = body.carried_shapes[j]
        if backend == "numba" and len(shape) > 1:
            rev.append(f"        {names_c[j]} = hist{j}[t].reshape({tuple(shape)!r})")
        else:
            rev.append(f"        {names_c[j]} = hist{j}[t]")
    rev += step_prelude("        ")
    lines, new_cb, inv, elems = adjoint_lines(program, rev_printer, "        ")
    rev += lines
    rev += [accumulate(m, text, shape) for m, text, shape in inv]
    rev += [add_element(m, position, text, "        ") for m, position, text in elems]
    rev.append(f"        {tup([f'cb{j}' for j in range(n_c)])} = {tup(new_cb)}")
    outs = [f"cb{j}" if body.init_shapes[j] == body.carried_shapes[j] else f"_total(cb{j})"
            for j in range(n_c)] + [f"ib{m}" for m in range(n_inv)]
    rev.append(f"    return ({tup(outs)})")
    fused = [source for printer in dict.fromkeys(printers) for _, source in getattr(printer, "helpers", [])]
    text = "\n".join(fused + helpers + fwd) + "\n\n" + "\n".join(rev) + "\n"
    return text, body.views()
