"""Generated programs: scalar forward, tensorized forward and reverse mode agree with each other
and with central differences."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparsad
from sparsad.lang.build import call, if_, let, single, sum_over
from sparsad.lang.syntax import Const, Var

from reference.dense_ad import central_difference, dict_to_dense, relative_error

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


def _as_dense(value, shape):
    return dict_to_dense(value, shape)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=real_expr(reals=["s"], ints=[], depth=3), seed=st.integers(0, 2**31))
def test_modes_agree_with_each_other_and_with_finite_differences(expr, seed):
    rng = np.random.default_rng(seed)
    inputs = {"x": rng.uniform(-1, 1, N), "M": rng.uniform(-1, 1, (ROWS, N)), "s": float(rng.uniform(0.5, 1.5))}
    prog = sparsad.program(expr)
    used = {k: v for k, v in inputs.items() if k in prog.inputs}
    if not used:
        return
    for wrt in prog.inputs:
        shape = SHAPES[wrt]
        results = {}
        for mode in ("reverse", "tensorized", "forward"):
            value = sparsad.grad(prog, wrt=wrt, mode=mode)(out_format="value", **used)
            results[mode] = _as_dense(value, shape)
        numeric = central_difference(lambda d: np.asarray(prog(**d)), used, wrt, step=1e-6)
        scale = 1.0 + np.max(np.abs(numeric), initial=0.0)
        for mode, got in results.items():
            assert np.max(np.abs(got - results["reverse"]), initial=0.0) <= 1e-10 * scale, (mode, str(expr))
            assert np.max(np.abs(got - numeric), initial=0.0) <= 2e-5 * scale, (mode, str(expr))


def test_relu_has_derivative_zero_at_zero_and_one_above():
    g = sparsad.grad("sum(<i, a> in x) relu(a)", wrt="x")
    np.testing.assert_array_equal(g(x=np.array([-1.0, 0.0, 2.0])), [0.0, 0.0, 1.0])


@pytest.mark.parametrize("func", ["exp", "log", "sin", "cos", "tan", "tanh", "sinh", "cosh", "atan",
                                  "sqrt", "abs", "sigmoid", "softplus", "log1p", "expm1"])
def test_every_unary_function_rule_matches_finite_differences(func):
    prog = sparsad.program(f"sum(<i, a> in x) {func}(a)")
    x = np.array([0.3, 0.7, 1.4])
    for mode in ("reverse", "forward"):
        got = sparsad.grad(prog, wrt="x", mode=mode)(x=x)
        numeric = central_difference(lambda d: np.asarray(prog(**d)), {"x": x}, "x")
        assert relative_error(got, numeric) < 1e-7


def test_pow_and_division_rules():
    prog = sparsad.program("sum(<i, a> in x) pow(a, 3) / (1.0 + a)")
    x = np.array([0.5, 1.5])
    got = sparsad.grad(prog, wrt="x")(x=x)
    expected = (3 * x**2 * (1 + x) - x**3) / (1 + x) ** 2
    np.testing.assert_allclose(got, expected, rtol=1e-13)


def test_missing_rule_is_an_error_naming_the_function(monkeypatch):
    from sparsad.ad import rules

    monkeypatch.delitem(rules.UNARY_DERIVATIVES, "tanh")
    with pytest.raises(sparsad.DerivativeRuleError, match="'tanh'"):
        sparsad.grad("tanh(s)", wrt="s", mode="reverse")(s=1.0)
