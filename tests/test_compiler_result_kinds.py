"""A program's result has one type compiled and interpreted: a matrix result with every entry
stored is an ndarray (the interpreter's natural rule), whatever output plan the kernel took
(full rows, a pattern, a workspace), on the first call and on repeated calls."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import sparsad

PROGRAMS = {
    "spmm": "sum(<i, r> in A) { i -> sum(<k, a> in r) a * B(k) }",
    "spmm_entries": "sum(<i, r> in A) { i -> sum(<j, a> in r) sum(<k, b> in B(j)) { k -> a * b } }",
    "scale_rows": "sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> a * x(j) } }",
}
COMPILED = {name: sparsad.compile(text) for name, text in PROGRAMS.items()}
INTERPRETED = {name: sparsad.program(text) for name, text in PROGRAMS.items()}


def inputs(rows: int, columns: int, density: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    A = sp.random(rows, columns, density=density, format="csr", random_state=seed)
    return dict(A=A, B=rng.standard_normal((columns, 3)), x=rng.standard_normal(columns))


def dense(value):
    return value.toarray() if sp.issparse(value) else np.asarray(value)


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(PROGRAMS)), rows=st.integers(1, 6), columns=st.integers(1, 5),
       density=st.sampled_from([0.0, 0.3, 0.7, 1.0]), seed=st.integers(0, 10_000))
def test_compiled_and_interpreted_results_have_one_type(name, rows, columns, density, seed):
    data = inputs(rows, columns, density, seed)
    program_inputs = {k: v for k, v in data.items() if k in INTERPRETED[name].inputs}
    expected = INTERPRETED[name](**program_inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        first = COMPILED[name](**program_inputs)
        again = COMPILED[name](**program_inputs)  # the repeat path
    for got in (first, again):
        assert type(got) is type(expected), (name, type(got), type(expected))
        assert np.allclose(dense(got), dense(expected), rtol=1e-12, atol=1e-14)


def test_spmm_over_a_matrix_without_empty_rows_is_an_ndarray_like_scipy():
    data = inputs(8, 5, 1.0, 3)
    got = COMPILED["spmm"](A=data["A"], B=data["B"])
    assert isinstance(got, np.ndarray) and np.allclose(got, data["A"] @ data["B"], rtol=1e-12)


@settings(max_examples=10, deadline=None)
@given(density=st.sampled_from([0.0, 0.4, 1.0]), seed=st.integers(0, 10_000), wrt=st.sampled_from(["A", "B"]))
def test_a_jvp_gives_the_interpreters_types_for_value_and_tangent(density, seed, wrt):
    data = inputs(5, 4, density, seed)
    tangent = data["A"].copy() if wrt == "A" else np.random.default_rng(seed).standard_normal(data["B"].shape)
    args = dict(A=data["A"], B=data["B"], tangent=tangent)
    expected = sparsad.jvp(PROGRAMS["spmm"], wrt, interpret=True)(**args)
    compiled = sparsad.jvp(PROGRAMS["spmm"], wrt)
    for got in (compiled(**args), compiled(**args)):
        for part, reference in zip(got, expected):
            assert type(part) is type(reference)
            assert np.allclose(dense(part), dense(reference), rtol=1e-12, atol=1e-14)
