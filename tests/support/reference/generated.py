"""Hypothesis strategy for well-typed real-valued programs over x: tensor 1, M: tensor 2, s: real,
with sums, lookups, lets, conditionals, unary functions and vector intermediates."""
from __future__ import annotations

from hypothesis import strategies as st

from sparsad.lang.build import call, if_, let, single, sum_over
from sparsad.lang.syntax import Const, Var

SMOOTH = ["sin", "cos", "tanh", "sigmoid", "atan", "softplus"]
N, ROWS = 3, 2
SHAPES = {"x": (N,), "M": (ROWS, N), "s": ()}


@st.composite
def real_expr(draw, reals, ints, depth):
    """A real-valued expression over the real variables `reals` and int variables `ints`."""
    leaves = [st.sampled_from([Var(r) for r in reals]),
              st.floats(-2, 2, allow_nan=False).map(lambda v: Const(round(v, 3)))]
    if ints:
        leaves.append(st.sampled_from([Var("x")(Var(i)) for i in ints]))
    if depth <= 0:
        return draw(st.one_of(leaves))
    sub = lambda **kw: real_expr(reals=kw.get("reals", reals), ints=kw.get("ints", ints), depth=depth - 1)  # noqa: E731
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return draw(st.one_of(leaves))
    if choice in (1, 2):
        op = draw(st.sampled_from(["+", "-", "*"]))
        a, b = draw(sub()), draw(sub())
        return {"+": a + b, "-": a - b, "*": a * b}[op]
    if choice == 3:
        return call(draw(st.sampled_from(SMOOTH)), draw(sub()))
    if choice == 4:  # a safe division
        a, b = draw(sub()), draw(sub())
        return a / (Const(2.0) + b * b)
    if choice == 5:
        value = draw(sub())
        name = f"t{depth}"
        body = draw(sub(reals=reals + [name]))
        return let(value, lambda t: body, name=name)
    if choice == 6 and ints:
        i, j = draw(st.sampled_from(ints)), draw(st.sampled_from(ints))
        cond = Var(i).lt(Var(j)) if draw(st.booleans()) else Var(i).eq(Const(1))
        return if_(cond, draw(sub()), draw(sub()) if draw(st.booleans()) else None)
    if choice == 7:
        k, v = f"i{depth}", f"v{depth}"
        body = draw(sub(reals=reals + [v], ints=ints + [k]))
        return sum_over(Var("x"), eval(f"lambda {k}, {v}: body", {"body": body}))
    if choice == 8:
        r, k, v = f"r{depth}", f"k{depth}", f"m{depth}"
        body = draw(sub(reals=reals + [v], ints=ints + [k]))
        inner = sum_over(Var(r), eval(f"lambda {k}, {v}: body", {"body": body}))
        return sum_over(Var("M"), eval(f"lambda ri{depth}, {r}: inner", {"inner": inner}))
    # a vector intermediate: map a function over x, then reduce it against x
    w, k, u = f"w{depth}", f"q{depth}", f"u{depth}"
    mapped = sum_over(Var("x"), lambda a, b: single(a, call(draw(st.sampled_from(SMOOTH)), b * Var("s"))))
    reduce = sum_over(Var(w), eval(f"lambda {k}, {u}: {u} * x({k})", {"x": Var("x")}))
    return let(mapped, lambda _w: reduce, name=w)
