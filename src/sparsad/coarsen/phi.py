"""φ-calculus closed forms of loops (§4, Fig. 5, corollaries C5–C9).

A loop is given as its carried variables' one-iteration updates, written in placeholder symbols
``c_k`` (the loop-entry φ ``φ_L(init_k, d_k)``) and, inside ``for i in range(start, start+n)``,
the counter ``i`` and element symbols standing for ``x[i + offset]``.  ``solve`` returns each
variable's value at the loop exit (the exit φ, formula F5) or raises ``NoClosedForm``:

* C6, ``d = a·φ + b`` with ``a, b`` loop-invariant:  ``a^n p + b (a^n − 1)/(a − 1)``  (``p + n b`` if a = 1)
* C7, ``d = a·φ + b[i]``:                             ``a^n p + Σ_i a^(n−1−i) b[i]``, vectorised over i
* C8 (power form), ``d = a·φ^b``:                    ``a^((b^n − 1)/(b − 1)) p^(b^n)``
* a variable not read through its own φ is its last iteration's value, ``u(state_{n−1})``;
* loop-invariant factors of sums are hoisted (``symbolic.hoist_sum``) before matching.

C5/C9 (``d = f(φ)`` for general f, i.e. ``f^[n](p)``) is what unrolling computes; the caller
falls back to it when ``solve`` fails.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import sympy as sp

from sparsad.coarsen.symbolic import GeomSum, VSum


class NoClosedForm(Exception):
    """The loop does not match C6–C8 (the reason is the message)."""


@dataclass
class LoopSpec:
    carried: list[sp.Symbol]            # placeholders c_k
    inits: list[sp.Expr | None]         # initial values (None: first defined inside the loop)
    updates: list[sp.Expr]              # c_k after one iteration
    before_break: list[sp.Expr] | None  # c_k at a break, or None
    trips: sp.Expr                      # completed iterations: an int or a symbol
    broke: sp.Expr | None               # recorded break predicate symbol (None: no break)
    counter: sp.Symbol | None           # i
    start: int
    elements: dict                      # element symbol x[i+off] -> (base symbol, off)
    view_slice: Callable                # (element symbol, first index, length) -> vector symbol
    view_item: Callable                 # (element symbol, index) -> scalar symbol
    iota: Callable                      # length -> the vector 0, 1, ..., length-1
    vsum: Callable                      # (elementwise body, length) -> hoisted sum
    is_scalar: Callable = lambda e: True  # e has shape () (one value per iteration)


def _depends(expr: sp.Expr, symbols) -> set:
    return set(expr.free_symbols) & set(symbols)


def solve(spec: LoopSpec) -> tuple[list[sp.Expr | None], list[str]]:
    """Exit values of the carried variables and the corollaries used (for ``explain``)."""
    c = spec.carried
    index_syms = set(spec.elements) | ({spec.counter} if spec.counter is not None else set())
    forms: dict[int, Callable[[sp.Expr], sp.Expr]] = {}
    notes: list[str] = []
    pending = list(range(len(c)))
    n = spec.trips
    concrete = isinstance(n, (int, sp.Integer))

    def at_index(expr: sp.Expr, m: sp.Expr) -> sp.Expr:
        """``expr`` with the counter at iteration ``m`` (0-based), for a concrete m."""
        if not (_depends(expr, index_syms)):
            return expr
        if not isinstance(m, (int, sp.Integer)):
            raise NoClosedForm("a last-iteration value depends on the loop counter and the trip count is not static")
        m = int(m)
        subs = {e: spec.view_item(e, spec.start + m) for e in spec.elements if e in expr.free_symbols}
        if spec.counter is not None:
            subs[spec.counter] = spec.start + m
        return expr.xreplace(subs)

    progress = True
    while pending and progress:
        progress = False
        for k in list(pending):
            u = spec.updates[k]
            deps = {j for j in range(len(c)) if c[j] in u.free_symbols}
            if k not in deps and deps <= set(forms):
                def form(m, u=u, k=k, deps=tuple(deps)):
                    prev = {c[j]: forms[j](m - 1) for j in deps}
                    value = at_index(u.xreplace(prev), m - 1)
                    init = spec.inits[k]
                    if isinstance(m, (int, sp.Integer)):
                        return value if int(m) >= 1 or init is None else init
                    return value if init is None else sp.Piecewise((value, m >= 1), (init, True))
                forms[k] = form
                notes.append(f"{c[k]}: last-iteration value u(state_(n-1)) (F4/F5)")
            elif deps == {k}:
                forms[k] = _self_recurrence(spec, k, u, index_syms, notes)
            else:
                continue
            pending.remove(k)
            progress = True
    if pending:
        names = ", ".join(str(c[k]) for k in pending)
        raise NoClosedForm(f"the updates of {names} are coupled or not affine/power in themselves")
    exits: list[sp.Expr | None] = []
    for k in range(len(c)):
        value = forms[k](n) if (spec.inits[k] is not None or not concrete or int(n) >= 1) else None
        if spec.before_break is not None and spec.broke is not None and spec.before_break[k] != c[k]:
            state = {c[j]: forms[j](n) for j in range(len(c)) if spec.inits[j] is not None or not concrete or int(n) >= 1}
            at_break = at_index(spec.before_break[k].xreplace(state), n) if _depends(spec.before_break[k], index_syms) \
                else spec.before_break[k].xreplace(state)
            value = at_break if value is None else sp.Piecewise((at_break, spec.broke > 0), (value, True))
        exits.append(value)
    return exits, notes


def _self_recurrence(spec: LoopSpec, k: int, u: sp.Expr, index_syms: set, notes: list[str]):
    ck = spec.carried[k]
    init = spec.inits[k]
    if init is None:
        raise NoClosedForm(f"{ck} is read before it is first assigned")
    a = sp.diff(u, ck)
    affine = not a.has(ck)
    if affine:
        b = u.xreplace({ck: sp.Integer(0)})
    if affine:
        if _depends(a, spec.carried) or _depends(b, spec.carried):
            raise NoClosedForm(f"the update of {ck} mixes carried variables")
        if _depends(a, index_syms):
            raise NoClosedForm(f"the factor of {ck} varies with the loop counter (C8 products are not generated)")
        if not _depends(b, index_syms):
            if a == 1:
                notes.append(f"{ck}: C6 with a = 1 (sum of a loop invariant): p + n*b")
                return lambda m: init + m * b
            notes.append(f"{ck}: C6 affine recurrence: a^n p + b (a^n - 1)/(a - 1) (evaluated stably near a = 1)")
            return lambda m: a ** m * init + b * GeomSum(a, m)
        inner_sums = [s for s in (a.atoms(VSum) | b.atoms(VSum)) if _depends(s, index_syms)]
        if not spec.is_scalar(b) or not spec.is_scalar(a) or inner_sums:
            # vectorising over the iterations needs one scalar per iteration: a vector (or a sum over
            # a vector) that changes with the counter would be confused with the iteration axis
            raise NoClosedForm(f"the counter-dependent term of {ck} is a vector or a sum")
        notes.append(f"{ck}: C7 with index-dependent b[i]: a^n p + sum_i a^(n-1-i) b[i] (vectorised)")
        return lambda m: _vector_sum(spec, a, b, m, init)
    # C8: d = a * φ^e  (a, e invariant)
    if isinstance(u, (sp.Mul, sp.Pow)):
        a_part, e = sp.Integer(1), None
        for factor in sp.Mul.make_args(u):
            base, expo = factor.as_base_exp()
            if base == ck and not _depends(expo, spec.carried) and not _depends(expo, index_syms):
                e = expo
            elif _depends(factor, spec.carried) or _depends(factor, index_syms):
                e = None
                break
            else:
                a_part *= factor
        if e is not None and e != 1:
            notes.append(f"{ck}: C8 power recurrence: a^((b^n - 1)/(b - 1)) p^(b^n)")
            return lambda m: a_part ** GeomSum(e, m) * init ** (e ** m)
    raise NoClosedForm(f"the update of {ck} is neither affine nor a power of itself")


def _vector_sum(spec: LoopSpec, a, b, m, init):
    if not isinstance(m, (int, sp.Integer)):
        raise NoClosedForm("an index-dependent sum needs a static trip count")
    m = int(m)
    if m == 0:
        return init
    body = b.xreplace({e: spec.view_slice(e, spec.start, m) for e in spec.elements})
    if spec.counter is not None and spec.counter in body.free_symbols:
        body = body.xreplace({spec.counter: spec.iota(m) + spec.start})
    if a != 1:
        body = body * a ** (m - 1 - spec.iota(m))
        return a ** m * init + spec.vsum(body, m)
    return init + spec.vsum(body, m)
