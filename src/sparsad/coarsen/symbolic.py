"""SymPy vocabulary of coarsening: reductions, stable special functions, shapes, stable rewrites.

``VSum(e, n)`` is the sum of the ``n`` elements of the elementwise expression ``e``; it stays
unevaluated so that loop-invariant factors can be hoisted out of it (``hoist_sum``).
``Softplus`` and ``Sigmoid`` carry their own derivatives, so that rewriting ``log(1+exp(u))``
before differentiation (§6) keeps the derivative stable too.
"""
from __future__ import annotations

import sympy as sp
from sympy.functions.elementary.hyperbolic import HyperbolicFunction
from sympy.functions.elementary.trigonometric import InverseTrigonometricFunction, TrigonometricFunction


class VSum(sp.Function):
    """Sum over the ``n`` elements of an elementwise expression."""
    nargs = 2
    is_real = True

    def _eval_derivative(self, s):  # d/ds of a sum is the sum of d/ds (s scalar)
        return VSum(sp.diff(self.args[0], s), self.args[1])


class Sigmoid(sp.Function):
    nargs = 1
    is_real = True

    def fdiff(self, argindex=1):
        u = self.args[0]
        return Sigmoid(u) * (1 - Sigmoid(u))


class Softplus(sp.Function):
    """``log(1 + exp(u))`` evaluated without overflow."""
    nargs = 1
    is_real = True

    def fdiff(self, argindex=1):
        return Sigmoid(self.args[0])


class Scatter(sp.Function):
    """Adjoint of a view: ``Scatter(v, k)`` puts ``v`` at view ``k``'s place in a zero base."""
    nargs = 2


class Relayout(sp.Function):
    """``Relayout(v, k, *shape)``: ``v`` rearranged by layout map ``k`` of the program (a reshape, a
    zero pad or a crop, `layouts.LayoutMap`) into ``shape``.  Linear: its adjoint is the transposed
    map (`layouts.transpose`), never a derivative of SymPy's."""
    is_real = True


def real_symbol(name: str) -> sp.Symbol:
    return sp.Symbol(name, real=True)


def tree_size(expr: sp.Basic, cache: dict | None = None) -> int:
    """Operation count of ``expr`` as a tree (shared sub-expressions counted each time)."""
    cache = {} if cache is None else cache
    if expr in cache:
        return cache[expr]
    for node in postorder(expr):
        if node not in cache:
            cache[node] = 1 + sum(cache[a] for a in node.args) if node.args else 0
    return cache[expr]


def shape_of(expr: sp.Basic, shapes: dict) -> tuple[int, ...]:
    """Broadcast shape of ``expr`` given the shapes of its symbols (unknown symbols are scalars)."""
    if isinstance(expr, VSum):
        return ()
    if isinstance(expr, (Pick, Relayout)):
        return tuple(int(d) for d in expr.args[2:])
    if isinstance(expr, (LoopFwd, LoopRev)):
        return ()
    if isinstance(expr, sp.Symbol):
        return shapes.get(expr, ())
    if isinstance(expr, Scatter):
        return shapes.get(("scatter", int(expr.args[1])), ())
    result: tuple[int, ...] = ()
    for arg in expr.args:
        if isinstance(arg, sp.Basic) and not isinstance(arg, (sp.logic.boolalg.BooleanAtom,)):
            sub = shape_of(arg, shapes)
            if len(sub) > len(result):
                result = sub
    return result


def hoist_sum(body: sp.Expr, length: int, shapes: dict, scalars: set) -> sp.Expr:
    """``VSum(body)`` with factors in the scalar symbols ``scalars`` pulled out (loop-invariant hoisting).

    ``Σ_i (2 x_i y_i - 2 x_i^2 w)`` becomes ``2 VSum(x y) - 2 w VSum(x^2)`` when ``w`` is in
    ``scalars``; sums of element-free terms become ``length * term``.  Non-polynomial bodies
    are left as one sum.
    """
    gens = [s for s in body.free_symbols if s in scalars]
    if not gens:
        return _plain_sum(body, length, shapes)
    if tree_size(body) > HOIST_MAX_SIZE or polynomial_degree_bound(body) > SIMPLIFY_MAX_DEGREE:
        return VSum(body, length)  # (expanding it could take longer than summing it as it is)
    try:
        poly = sp.Poly(sp.expand(body, power_base=False, power_exp=False, log=False), *gens)
    except sp.PolynomialError:
        return VSum(body, length)
    if any(c.free_symbols & set(gens) for c in poly.coeffs()) or len(poly.terms()) > 12:
        return VSum(body, length)
    total = sp.Integer(0)
    for monomial, coeff in poly.terms():
        factor = sp.Mul(*[g ** e for g, e in zip(gens, monomial)])
        total += factor * _plain_sum(coeff, length, shapes)
    return total


def _plain_sum(body: sp.Expr, length: int, shapes: dict) -> sp.Expr:
    if shape_of(body, shapes) == ():
        return body * length
    return VSum(body, length)


def _is_one_plus_exp(arg: sp.Expr):
    """``u`` when ``arg`` is ``1 + exp(u)``, else None."""
    if isinstance(arg, sp.Add) and len(arg.args) == 2:
        a, b = arg.args
        for one, other in ((a, b), (b, a)):
            if one == 1 and isinstance(other, sp.exp):
                return other.args[0]
    return None


def _cancels(u: sp.Expr, v: sp.Expr) -> bool:
    """Whether ``u + v == 0``: SymPy's automatic collection, then an expansion of small sums only
    (``simplify`` here ran trigsimp for minutes on a few dozen operations)."""
    total = u + v
    if total == 0:
        return True
    return tree_size(total) <= SIMPLIFY_MAX_SIZE and polynomial_degree_bound(total) <= SIMPLIFY_MAX_DEGREE \
        and sp.expand(total) == 0


HOIST_MAX_SIZE = 120      # operations of a sum's body expanded to hoist loop-invariant factors
SIMPLIFY_MAX_SIZE = 30    # operations of an expression handed to sympy.simplify / expand
SIMPLIFY_MAX_DEGREE = 8   # expansions beyond this degree can take minutes and gigabytes
_UNBOUNDED_SIMPLIFIERS = (TrigonometricFunction, InverseTrigonometricFunction, HyperbolicFunction)


def simplify_is_bounded(expr: sp.Expr) -> bool:
    """Whether ``sympy.simplify(expr)`` has a bounded cost: a small expression of bounded degree
    without trigonometric or hyperbolic functions.  (On those, simplify runs trigsimp, which factors
    polynomials whose Float coefficients became huge rationals: over a minute on 30 operations of an
    RK4 pendulum step.)"""
    if tree_size(expr) > SIMPLIFY_MAX_SIZE or not expr.has(sp.Symbol):
        return False
    if expr.atoms(*_UNBOUNDED_SIMPLIFIERS):
        return False
    return polynomial_degree_bound(expr) <= SIMPLIFY_MAX_DEGREE


def polynomial_degree_bound(expr: sp.Expr) -> int:
    """An upper bound of the degree ``expr`` reaches when fully expanded (function calls count as
    atoms, but their arguments are bounded too): what ``sympy.simplify``'s expansions cost."""
    memo: dict = {}

    def degree(e) -> int:
        if not e.args:
            return 1 if e.free_symbols else 0
        if isinstance(e, sp.Pow):
            base, expo = e.args
            if expo.is_Integer:
                return abs(int(expo)) * memo[base]
            return max(memo[base], memo[expo], 1)  # a symbolic or fractional power: not expanded
        if isinstance(e, sp.Mul):
            return sum(memo[a] for a in e.args)
        if isinstance(e, sp.Add):
            return max(memo[a] for a in e.args)
        return max([1] + [memo[a] for a in e.args])

    for node in postorder(expr):
        memo[node] = degree(node)
    return memo[expr]


def postorder(expr: sp.Basic) -> list:
    """The distinct sub-expressions of ``expr``, each after its arguments (iterative: deep expressions
    reach no recursion limit; shared sub-expressions are listed once)."""
    order, seen, stack = [], set(), [(expr, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        stack.extend((a, False) for a in reversed(node.args) if a not in seen)
    return order


def stabilize(expr: sp.Expr) -> sp.Expr:
    """Rewrite numerically unstable patterns (§6): ``log(1+e^u)`` → softplus, logistic → sigmoid."""
    if not expr.has(sp.exp):  # every pattern holds an exp (one walk instead of three rewrites)
        return expr
    def is_log_one_plus_exp(e):
        return isinstance(e, sp.log) and _is_one_plus_exp(e.args[0]) is not None

    expr = expr.replace(is_log_one_plus_exp, lambda e: Softplus(_is_one_plus_exp(e.args[0])))

    def is_logistic(e):
        return (isinstance(e, sp.Pow) and e.args[1] == -1 and _is_one_plus_exp(e.args[0]) is not None)

    expr = expr.replace(is_logistic, lambda e: Sigmoid(-_is_one_plus_exp(e.args[0])))

    def is_exp_over(e):  # exp(u) * Sigmoid(-u) == Sigmoid(u)
        if not isinstance(e, sp.Mul):
            return False
        exps = [a for a in e.args if isinstance(a, sp.exp)]
        sigs = [a for a in e.args if isinstance(a, Sigmoid)]
        return any(_cancels(x.args[0], s.args[0]) for x in exps for s in sigs)

    def fold(e):
        args = list(e.args)
        for x in [a for a in args if isinstance(a, sp.exp)]:
            for s in [a for a in args if isinstance(a, Sigmoid)]:
                if x in args and s in args and _cancels(x.args[0], s.args[0]):
                    args.remove(x)
                    args.remove(s)
                    args.append(Sigmoid(x.args[0]))
        return sp.Mul(*args)

    return expr.replace(is_exp_over, fold)


class GeomSum(sp.Function):
    """``(a^n - 1)/(a - 1)`` (``= 1 + a + ... + a^(n-1)``), evaluated without cancellation near a = 1.

    The C6/C8 closed forms divide by ``a - 1``; printed naively they lose every digit as a -> 1
    and give NaN at a = 1.  The generated code evaluates ``expm1(n log1p(a - 1)) / (a - 1)`` for
    a > 0 (exact to a few ulps for any a - 1 != 0) and ``n`` at a = 1 (``_geom``).
    """
    nargs = 2
    is_real = True

    def fdiff(self, argindex=1):
        a, n = self.args
        if argindex == 1:
            return GeomSumD(a, n)
        return a ** n * sp.log(a) / (a - 1)

    @classmethod
    def eval(cls, a, n):
        if a == 1:
            return n
        if n == 0:
            return sp.Integer(0)
        if n == 1:
            return sp.Integer(1)
        if a.is_Rational and n.is_Integer and 0 <= n <= 64:
            return sp.Add(*[a ** k for k in range(int(n))])
        if a.is_Number and n.is_Number:
            return sp.Float(geom_sum(float(a), float(n)))
        return None


class GeomSumD(sp.Function):
    """``d/da (a^n - 1)/(a - 1) = Σ_k k a^(k-1)``: a series in ``a - 1`` near 1, the quotient elsewhere."""
    nargs = 2
    is_real = True

    def fdiff(self, argindex=1):
        a, n = self.args
        if argindex == 1:  # second derivatives are not generated by the adjoint; kept exact anyway
            return sp.diff((n * a ** (n - 1) - GeomSum(a, n)) / (a - 1), a)
        return sp.diff((n * a ** (n - 1) - GeomSum(a, n)) / (a - 1), n)

    @classmethod
    def eval(cls, a, n):
        if a == 1:
            return n * (n - 1) / 2
        if n == 0 or n == 1:
            return sp.Integer(0)
        if a.is_Rational and n.is_Integer and 0 <= n <= 64:
            return sp.Add(*[k * a ** (k - 1) for k in range(1, int(n))])
        if a.is_Number and n.is_Number:
            return sp.Float(geom_sum_d(float(a), float(n)))
        return None


def geom_sum(a: float, n: float) -> float:
    """``(a^n - 1)/(a - 1)`` for scalars, stable near a = 1 (the reference of the generated helpers)."""
    import math

    d = a - 1.0
    if d == 0.0:
        return float(n)
    if a > 0.0:
        return math.expm1(n * math.log1p(d)) / d
    return (a ** n - 1.0) / d


def geom_sum_d(a: float, n: float) -> float:
    """``d/da (a^n - 1)/(a - 1)`` for scalars: a five-term series in ``a - 1`` where ``|n (a-1)|`` is small."""
    d = a - 1.0
    if abs(n * d) < 1e-3:
        # Σ_{k>=2} C(n, k) (k-1) d^(k-2)
        total, binom, power = 0.0, n * (n - 1.0) / 2.0, 1.0
        for k in range(2, 7):
            total += binom * (k - 1) * power
            binom *= (n - k) / (k + 1.0)
            power *= d
        return total
    return (n * a ** (n - 1.0) - geom_sum(a, n)) / d


class LoopFwd(sp.Function):
    """Exit values of the compiled loop ``args[0]`` (an id) from its inits, invariants and trip count (a tuple)."""
    is_real = True


class LoopRev(sp.Function):
    """Adjoints of the inits and invariants of loop ``args[0]`` given the exits' adjoints (a tuple)."""
    is_real = True


class Pick(sp.Function):
    """Component ``args[1]`` of a tuple-valued call; ``args[2:]`` is its shape."""
    is_real = True
