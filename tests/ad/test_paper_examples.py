"""The derivative programs of the ∇SD paper (§4), reproduced up to renaming of bound variables."""
from __future__ import annotations

import pytest

import sparsad
from sparsad.ad.api import gradient, onehot
from sparsad.ad.forward import forward, tensorized
from sparsad.lang.names import alpha_equal
from sparsad.lang.parse import parse
from sparsad.lang.printer import to_text
from sparsad.lang.syntax import Var
from sparsad.lang.types import tensor
from sparsad.opt.anf import to_anf


def assert_alpha_equal(actual, expected_text):
    expected = parse(expected_text)
    assert alpha_equal(actual, expected), f"got\n{to_text(actual)}\nexpected\n{to_text(expected)}"


def test_example1_unrolled_dot_product_scalar_forward():
    anf = parse("let t1 = x1 * y1 in let t2 = x2 * y2 in let t3 = t1 + t2 in t3")
    derivative = forward(anf)
    # §4.1: the tangents refer to the let-bound primal names; the result is t3'
    assert_alpha_equal(derivative, """
        let <t1, t1'> = <x1 * y1, x1 * y1' + x1' * y1> in
        let <t2, t2'> = <x2 * y2, x2 * y2' + x2' * y2> in
        let <t3, t3'> = <t1 + t2, t1' + t2'> in
        t3'""")


def test_example1_dot_product_scalar_forward():
    assert_alpha_equal(forward(parse("sum(<i, a> in V2) V1(i) * a")), """
        sum(<i, a> in V2)
          let <i', a'> = <{}, V2'(i)> in
            V1(i) * a' + V1'(i) * a""")


def test_example1_dot_product_tensorized_forward_has_the_same_text():
    types = {"V1": tensor(1), "V2": tensor(1)}
    assert_alpha_equal(tensorized(parse("sum(<i, a> in V2) V1(i) * a"), tensor(1), types), """
        sum(<i, a> in V2)
          let <i', a'> = <{}, V2'(i)> in
            V1(i) * a' + V1'(i) * a""")


def test_example2_scalar_vector_product():
    assert_alpha_equal(forward(parse("s * V")), "s * V' + s' * V")


def test_example3_trace_tensorized():
    assert_alpha_equal(tensorized(parse("sum(<i, r> in M) r(i)"), tensor(2), {"M": tensor(2)}), """
        sum(<i, r> in M)
          let <i', r'> = <{}, M'(i)> in
            r'(i)""")


def test_section_4_3_gradient_expansion():
    expr = parse("sum(<i, a> in V1) a * V2(i)")
    expanded = gradient(expr, "V2", {"V1": tensor(1), "V2": tensor(1)})
    assert_alpha_equal(expanded, """
        let V1' = {} in
        let V2' = sum(<i, _> in V2) { i -> { i -> 1.0 } } in
        sum(<i, a> in V1)
          let <i', a'> = <{}, V1'(i)> in
            a * V2'(i) + a' * V2(i)""")


def test_public_api_shows_the_section_4_3_program():
    g = sparsad.grad("sum(<i, a> in V1) a * V2(i)", wrt="V2", mode="tensorized")
    assert_alpha_equal(parse(g.show("derivative")), """
        let V1' = {} in
        let V2' = sum(<i, _> in V2) { i -> { i -> 1.0 } } in
        sum(<i, a> in V1)
          let <i', a'> = <{}, V1'(i)> in
            a * V2'(i) + a' * V2(i)""")


@pytest.mark.parametrize("order, expected", [
    (0, "1.0"),
    (1, "sum(<i, _> in x) { i -> { i -> 1.0 } }"),
    (2, "sum(<i, v> in x) { i -> sum(<j, _> in v) { j -> { i -> { j -> 1.0 } } } }"),
    (3, "sum(<i, v> in x) { i -> sum(<j, w> in v) { j -> sum(<k, _> in w) { k -> { i -> { j -> { k -> 1.0 } } } } } }"),
])
def test_onehot_for_every_order(order, expected):
    assert_alpha_equal(onehot(order, Var("x")), expected)


def test_onehot_of_order_4_is_the_identity_tensor():
    import numpy as np

    from sparsad.lang.interpret import evaluate

    x = np.zeros((2, 1, 2, 3))
    value = evaluate(onehot(4, Var("x")), {"x": x})
    for index in np.ndindex(x.shape):
        inner = value
        for k in index:
            inner = inner[k]
        assert inner == {index[0]: {index[1]: {index[2]: {index[3]: 1.0}}}}


def test_anf_then_forward_keeps_sharing():
    anf = to_anf(parse("exp(a * b) * exp(a * b)"))
    derivative = forward(anf)
    assert "exp" in to_text(derivative)
