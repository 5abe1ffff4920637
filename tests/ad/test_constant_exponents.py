"""A constant arithmetic exponent of pow (`1.0 / 3.0`, `-(1 + 1) / 4.0`) counts as a constant in
every derivative: reverse mode's A-normal form once bound it to a name, which the type checker
rejects ("pow takes a constant exponent"). Checked against the closed form, compiled and interpreted."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import sparsad
from sparsad.lang.fold import fold_exponents
from sparsad.lang.parse import parse
from sparsad.lang.syntax import Call, Const, walk


def constant_texts(depth: int = 3):
    leaf = st.sampled_from(["0.5", "1.0", "1.5", "2.0", "3.0", "1", "2", "3"])
    return st.recursive(leaf, lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda t: f"(-{t})")), max_leaves=depth + 2)


def python_value(text: str) -> float:
    return float(eval(text, {"__builtins__": {}}))  # the same IEEE float64 operations


@settings(max_examples=40, deadline=None)
@given(text=constant_texts())
def test_a_folded_exponent_is_the_value_of_the_constant_expression(text):
    try:
        expected = python_value(text)
    except ZeroDivisionError:  # numpy's inf or nan: not what this test is about
        return
    folded = fold_exponents(parse(f"pow(x, {text})"))
    assert isinstance(folded, Call) and isinstance(folded.args[1], Const)
    value = folded.args[1].value
    assert value == expected and type(value) is (int if isinstance(eval(text, {"__builtins__": {}}), int) else float)


@pytest.mark.parametrize("exponent_text", ["1.0 / 3.0", "-(1 + 1) / 4.0", "2 * 1.5 - 0.5", "(1 + 2)"])
@pytest.mark.parametrize("kind", ["grad", "vjp", "jvp"])
@pytest.mark.parametrize("interpret", [False, True])
def test_norm_like_derivatives_with_constant_expression_exponents(exponent_text, kind, interpret):
    e = python_value(exponent_text)
    x = np.random.default_rng(3).uniform(0.5, 2.0, 7)
    text = f"pow(sum(<i, v> in x) v * v, {exponent_text})"
    s = float(x @ x)
    gradient = e * s ** (e - 1.0) * 2.0 * x
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        warnings.simplefilter("error", sparsad.OptimizationWarning)
        if kind == "grad":
            got = sparsad.grad(text, wrt="x", interpret=interpret)(x=x)
            np.testing.assert_allclose(got, gradient, rtol=1e-12)
        elif kind == "vjp":
            got = sparsad.vjp(text, wrt="x", cotangent="ct", interpret=interpret)(x=x, ct=0.75)
            np.testing.assert_allclose(got, 0.75 * gradient, rtol=1e-12)
        else:
            direction = np.linspace(-1.0, 1.0, 7)
            got = sparsad.jvp(text, wrt="x", tangent="dx", interpret=interpret)(x=x, dx=direction)
            tangent = got[1] if isinstance(got, tuple) else got  # (primal, tangent) or the tangent
            np.testing.assert_allclose(float(tangent), float(gradient @ direction), rtol=1e-12)


def test_exponents_that_read_a_variable_are_left_for_the_type_checker():
    program = parse("pow(x, y / 2.0)")
    assert fold_exponents(program) == program
    assert not any(isinstance(n, Const) and n.value == 0.5 for n in walk(fold_exponents(parse("pow(x, y)"))))
