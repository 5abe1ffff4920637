"""Generated programs: scalar forward, tensorized forward and reverse mode agree with each other
and with central differences."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st  # noqa: F401

import sparsad
from reference.dense_ad import central_difference, dict_to_dense, relative_error
from reference.generated import N, ROWS, SHAPES, real_expr

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
            value = sparsad.grad(prog, wrt=wrt, mode=mode, interpret=True)(out_format="value", **used)
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
