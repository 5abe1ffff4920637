"""Symbolic differentiation of the segments: a reverse sweep at segment granularity, then CSE.

Inside a segment the derivative is SymPy's ``diff`` of the closed form (φ of branches
differentiates arm by arm, C2); between segments adjoints are chained as reverse-mode AD does,
so a segment's derivative is computed once and reused by all its users.  The output is a
straight-line ``AdjointProgram`` of ``symbol = expression`` statements after ``sympy.cse``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import sympy as sp

from sparsad.coarsen import budget
from sparsad.coarsen.elevate import Elevation, Segment
from sparsad.coarsen.frontend import CoarsenUnsupported
from sparsad.coarsen.symbolic import (SIMPLIFY_MAX_DEGREE, LoopFwd, LoopRev, Pick, Relayout, Scatter, VSum,  # noqa: F401
                                      polynomial_degree_bound, real_symbol, shape_of, simplify_is_bounded, stabilize,
                                      tree_size)


@dataclass
class AdjointProgram:
    inputs: list[sp.Symbol]
    params: list[sp.Symbol]
    seeds: list[sp.Symbol]
    statements: list[tuple[sp.Symbol, sp.Expr]]
    results: list[sp.Expr | None]       # one per input: its gradient (None when not requested)
    shapes: dict
    views: dict                          # scatter id -> (key, base shape)
    iotas: dict
    loops: dict = None                   # id -> revloop.LoopBody of the compiled loops used
    layouts: dict = None                 # k -> layouts.LayoutMap of the Relayout(., k) calls


def _numel(shape) -> int:
    count = 1
    for extent in shape:
        count *= extent
    return count


def differentiate(elev: Elevation, wrt: list[int], simplify: bool = True,
                  simplify_budget_s: float = 0.5) -> AdjointProgram:
    """Gradient program of the outputs (with seed cotangents) with respect to inputs ``wrt``."""
    shapes = dict(elev.shapes)
    segments: list[Segment] = list(elev.segments)
    out_syms, seeds = [], []
    taken = {str(s) for s in elev.inputs}
    mark = "_" if any(n.startswith(("out", "seed")) for n in taken) else ""  # (a parameter called seed0)
    for j, expr in enumerate(elev.outputs):
        shape = shape_of(expr, shapes)
        if not isinstance(expr, sp.Symbol):
            sym = real_symbol(f"out{j}{mark}")
            shapes[sym] = shape
            segments.append(Segment(sym, expr, shape, "value"))
            expr = sym
        out_syms.append(expr)
        seed = real_symbol(f"seed{j}{mark}")
        shapes[seed] = shape
        seeds.append(seed)

    active_inputs = {elev.inputs[i] for i in wrt}
    active = set(active_inputs)
    for seg in segments:
        deps = {seg.base} if seg.kind == "view" else seg.expr.free_symbols
        if deps & active:
            active.add(seg.sym)

    adjoint_terms: dict = {}
    for sym, seed in zip(out_syms, seeds):
        adjoint_terms.setdefault(sym, []).append(seed)
    statements: list[tuple[sp.Symbol, sp.Expr]] = []
    views: dict = {}
    deadline = time.perf_counter() + simplify_budget_s
    sizes: dict = {}

    def tidy(d):
        if simplify and time.perf_counter() < deadline and simplify_is_bounded(d):
            try:
                candidate = sp.simplify(d)
                if tree_size(candidate, sizes) < tree_size(d, sizes):
                    d = candidate
            except Exception:  # simplification is an optimisation only
                pass
        return stabilize(d)

    def adjoint_of(sym) -> sp.Expr | None:
        terms = adjoint_terms.get(sym)
        if not terms:
            return None
        total = sp.Add(*terms)
        if isinstance(total, sp.Symbol):
            return total
        name = real_symbol(f"adj_{sym}")
        shapes[name] = shapes.get(sym, ())
        statements.append((name, total))
        return name

    layouts = dict(getattr(elev, "layouts", {}) or {})
    handled_loops: set = set()
    for seg in reversed(segments):
        budget.check()
        if seg.sym not in active:
            continue
        if isinstance(seg.expr, Pick) and isinstance(seg.expr.args[0], LoopFwd):
            _loop_adjoint(seg.expr.args[0], elev.loops, handled_loops, adjoint_of, adjoint_terms, active, shapes)
            continue
        adj = adjoint_of(seg.sym)
        if adj is None:
            continue
        if seg.kind == "view":
            index = len(views)
            views[index] = (seg.key, shapes[seg.base])
            shapes[("scatter", index)] = shapes[seg.base]
            adjoint_terms.setdefault(seg.base, []).append(Scatter(adj, sp.Integer(index)))
            continue
        if isinstance(seg.expr, Relayout):  # linear: the transposed map carries the cotangent back
            _relayout_adjoint(seg.expr, adj, layouts, active, adjoint_terms)
            continue
        body_shape = shape_of(seg.expr, shapes) if seg.kind == "reduce" else seg.shape
        partials = segment_gradient(seg.expr, seg.expr.free_symbols & active)
        for u in sorted(partials, key=str):
            d = tidy(partials[u])
            if d == 0:
                continue
            contribution = adj * d
            u_shape = shapes.get(u, ())
            if u_shape == () and body_shape != ():
                contribution = VSum(contribution, _numel(body_shape))
            elif u_shape != body_shape and u_shape != ():
                raise CoarsenUnsupported(f"broadcasting {u} of shape {u_shape} to {body_shape} in a segment")
            adjoint_terms.setdefault(u, []).append(contribution)

    results: list[sp.Expr | None] = []
    for position, sym in enumerate(elev.inputs):
        if position not in wrt:
            results.append(None)
            continue
        terms = adjoint_terms.get(sym, [])
        results.append(sp.Add(*terms) if terms else sp.Integer(0))

    program = _assemble(segments, statements, results, shapes)
    params = [p.sym for p in elev.params]
    return AdjointProgram(list(elev.inputs), params, seeds, program[0], program[1], shapes, views,
                          dict(elev.iotas), dict(getattr(elev, "loops", {}) or {}), layouts)


def _relayout_adjoint(expr: Relayout, adj, layouts: dict, active: set, adjoint_terms: dict) -> None:
    """The cotangent of a layout segment's base: the transposed map applied to the segment's (a new
    map of the program when it is not one already)."""
    from sparsad.coarsen.layouts import transpose

    base = expr.args[0]
    if not (isinstance(base, sp.Symbol) and base in active):
        return
    back = transpose(layouts[int(expr.args[1])])
    for index, known in layouts.items():
        if known == back:
            break
    else:
        index = len(layouts)
        layouts[index] = back
    adjoint_terms.setdefault(base, []).append(
        Relayout(adj, sp.Integer(index), *[sp.Integer(d) for d in back.out_shape]))


def _loop_adjoint(call, loops: dict, handled: set, adjoint_of, adjoint_terms: dict, active: set, shapes) -> None:
    """Cotangents of a compiled loop's inits and invariants from its exits' (all users come later)."""
    ident = int(call.args[0])
    if ident in handled:
        return
    handled.add(ident)
    body = loops[ident]
    seeds = []
    for sym, shape in zip(body.exit_syms, body.carried_shapes):
        adj = adjoint_of(sym)
        seeds.append(adj if adj is not None else sp.Integer(0))
    if all(s == 0 for s in seeds):
        return
    rev = LoopRev(call.args[0], *seeds, *call.args[1:])
    operands = list(call.args[1:-2])  # inits, then invariants (the last two: the trip count, whether it broke)
    for m, u in enumerate(operands):
        if isinstance(u, sp.Symbol) and u in active:
            shape = tuple(shapes.get(u, ()))
            adjoint_terms.setdefault(u, []).append(Pick(rev, sp.Integer(m), *[sp.Integer(d) for d in shape]))


def segment_gradient(expr: sp.Expr, targets: set) -> dict:
    """All partial derivatives of ``expr`` w.r.t. ``targets`` in one reverse sweep over its DAG.

    Local rules for sums, products, powers and functions with ``fdiff``; a ``Piecewise`` (φ) is
    differentiated by ``sympy.diff`` so each arm keeps its own derivative (C2) and an arm that is
    not taken never multiplies a NaN by zero.
    """
    targets = set(targets)
    if not targets:
        return {}
    order: list = []
    seen: set = set()
    depends: dict = {}

    def visit(node):
        if node in seen:
            return
        seen.add(node)
        if isinstance(node, sp.Piecewise) or not node.args:
            order.append(node)
            return
        for arg in node.args:
            visit(arg)
        order.append(node)

    visit(expr)
    for node in order:
        depends[node] = bool(node.free_symbols & targets) if node.args or node in targets else False
    terms: dict = {expr: [sp.Integer(1)]}
    grads: dict = {}
    for node in reversed(order):
        if node not in terms or not depends.get(node, node in targets):
            continue
        adj = sp.Add(*terms.pop(node))
        if node in targets:
            grads[node] = adj
            continue

        def push(arg, factor):
            if depends.get(arg, arg in targets):
                terms.setdefault(arg, []).append(adj * factor)

        if isinstance(node, sp.Add):
            for arg in node.args:
                push(arg, sp.Integer(1))
        elif isinstance(node, sp.Mul):
            args = node.args
            for i, arg in enumerate(args):
                if depends.get(arg, arg in targets):
                    push(arg, sp.Mul(*(args[:i] + args[i + 1:])))
        elif isinstance(node, sp.Pow):
            base, expo = node.args
            push(base, expo * base ** (expo - 1))
            if depends.get(expo, expo in targets):
                push(expo, sp.log(base) * node)
        elif isinstance(node, Relayout):
            raise CoarsenUnsupported("a layout map (reshape/pad/slice) inside an expression: it is differentiated "
                                     "only as a segment of its own")
        elif isinstance(node, sp.Function) and not isinstance(node, (sp.Piecewise, VSum, Scatter)):
            for i, arg in enumerate(node.args):
                if depends.get(arg, arg in targets):
                    push(arg, node.fdiff(i + 1))
        else:  # Piecewise and anything without a local rule: SymPy differentiates it whole
            for u in node.free_symbols & targets:
                d = sp.diff(node, u)
                if d != 0:
                    grads.setdefault(u, sp.Integer(0))
                    terms.setdefault(u, []).append(adj * d)
    for u, rest in terms.items():
        if u in targets:
            grads[u] = grads.get(u, sp.Integer(0)) + sp.Add(*rest)
    return {u: g for u, g in grads.items() if g != 0}


def _assemble(segments, adjoint_statements, results, shapes):
    """Forward segment definitions needed by the adjoint, the adjoint itself, dead code removed, CSE'd."""
    defs: list[tuple[sp.Symbol, sp.Expr]] = []
    for seg in segments:
        if seg.kind == "view":
            defs.append((seg.sym, _ViewRef(seg.base, seg.key)))
        elif seg.kind == "reduce":
            defs.append((seg.sym, VSum(seg.expr, _numel(shape_of(seg.expr, shapes)) or 1)))
        else:
            defs.append((seg.sym, seg.expr))
    statements = defs + list(adjoint_statements)
    # dead-code elimination from the results backwards
    needed: set = set()
    for r in results:
        if r is not None:
            needed |= r.free_symbols
    kept = []
    for sym, expr in reversed(statements):
        if sym in needed:
            kept.append((sym, expr))
            needed |= expr.free_symbols if not isinstance(expr, _ViewRef) else {expr.base}
    kept.reverse()
    plain = [(s, e) for s, e in kept if not isinstance(e, _ViewRef)]
    exprs = [e for _, e in plain] + [r for r in results if r is not None]
    replacements, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("c", real=True), order="none")
    reduced_iter = iter(reduced)
    new_plain = {s: next(reduced_iter) for s, _ in plain}
    new_results = [None if r is None else next(reduced_iter) for r in results]
    # schedule each CSE temporary right before its first user
    pending = list(replacements)
    emitted: set = set()
    program: list = []

    def emit_needed(expr_syms):
        changed = True
        while changed:
            changed = False
            for item in list(pending):
                sym, value = item
                if sym in expr_syms and sym not in emitted:
                    emit_needed(value.free_symbols)
                    program.append((sym, value))
                    emitted.add(sym)
                    pending.remove(item)
                    changed = True

    for sym, expr in kept:
        if isinstance(expr, _ViewRef):
            program.append((sym, expr))
            continue
        value = new_plain[sym]
        emit_needed(value.free_symbols)
        program.append((sym, value))
    for r in new_results:
        if r is not None:
            emit_needed(r.free_symbols)
    for sym, value in program:
        if not isinstance(value, _ViewRef):
            shapes.setdefault(sym, shape_of(value, shapes))
    return program, new_results


class _ViewRef:
    """Statement right-hand side ``base[key]`` (kept out of SymPy: keys hold slices)."""

    def __init__(self, base, key):
        self.base, self.key = base, key
        self.free_symbols = {base}
