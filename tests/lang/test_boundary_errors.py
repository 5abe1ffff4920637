"""Deep programs, misspelt functions and bad options end in sparsad's own errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import sparsad
from sparsad.errors import OptionError, ProgramError, SparsadError
from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import MAX_DEPTH, parse, tree_depth


@pytest.mark.parametrize("text", [
    "(" * 165 + "a" + ")" * 165,
    "-" * 500 + "a",
    "sin(" * 300 + "a" + ")" * 300,
    "".join(f"let t{k} = a in " for k in range(200)) + "a",
    "V" + "(0)" * 300,
])
def test_deep_programs_raise_program_error_not_recursion_error(text):
    with pytest.raises(ProgramError, match=f"nested deeper than {MAX_DEPTH}"):
        parse(text)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("+-*/"), st.sampled_from(["a", "b", "2.0", "0.5"])),
                min_size=1, max_size=1200))
def test_long_operator_chains_parse_shallow_and_keep_their_value(terms):
    """A chain of any length parses (balanced beyond a few terms) and evaluates as Python does."""
    text = "a" + "".join(f" {op} {term}" for op, term in terms)
    expr = parse(text)
    assert tree_depth(expr) <= MAX_DEPTH
    env = {"a": 1.25, "b": -0.75}
    expected = eval(text, {}, env)  # noqa: S307 - the text is built above from a fixed alphabet
    assert np.isclose(evaluate(expr, env), expected, rtol=1e-9, atol=1e-9)


def test_a_994_term_sum_runs():
    text = " + ".join(["a"] * 994)
    assert sparsad.program(text)(a=1.0) == 994.0


def test_misspelt_function_is_named_with_a_suggestion():
    with pytest.raises(ProgramError, match=r"unknown function 'expp'; did you mean 'exp'\?"):
        sparsad.program("sum(<i, a> in V) expp(a)")(V=np.ones(2))
    with pytest.raises(ProgramError, match=r"unknown function 'sinn'"):
        sparsad.compile("sum(<i, a> in V) sinn(a)")(V=np.ones(2))


def test_a_lookup_into_a_real_input_is_still_a_lookup():
    assert sparsad.program("sum(<i, a> in V) a * expo(i)")(V=np.ones(2), expo=np.ones(2)) == 2.0


@pytest.mark.parametrize("call", [
    lambda: sparsad.program("a")(out_format="dence", a=1.0),
    lambda: sparsad.compile("sum(<i, a> in V) a")(out_format="nope", V=np.ones(2)),
    lambda: sparsad.program("a").show("optimised"),
    lambda: sparsad.grad("a * a", wrt="a", mode="revers"),
])
def test_bad_options_raise_option_error(call):
    with pytest.raises(OptionError) as caught:
        call()
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, SparsadError)


def test_option_error_suggests_the_nearest_value():
    with pytest.raises(OptionError, match=r"did you mean 'dense'\?"):
        sparsad.program("a")(out_format="dence", a=1.0)
