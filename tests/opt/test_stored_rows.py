"""A backward loop reads the rows a forward loop stored instead of recomputing them (opt.stored_rows).

Structure on the optimized programs (how many times the activation is evaluated), values of the
optimized physical program under the interpreter, of compiled kernels and of the interpreter on
the logical program, all against NumPy closed forms in float64, on hypothesis-drawn CSR matrices
(empty rows, all-zero feature rows so that activations are exactly zero, one-column weights).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparsad
from sparsad.formats import as_format
from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import parse
from sparsad.lang.printer import to_text
from sparsad.lang.syntax import Call, Let, walk
from sparsad.lang.typecheck import value_type
from sparsad.lang.values import values_equal
from sparsad.opt.pipeline import OPTIONAL_PASSES, optimize
from sparsad.opt.stored_rows import read_stored_rows

TWO_LAYER = """
let H = sum(<i, r> in A) {
          i -> let h = sum(<j, a> in r) a * X(j) in
               let z = sum(<f, hf> in h) hf * W1(f) in
               sum(<o, zo> in z) { o -> tanh(zo) } } in
sum(<i, r> in A)
  let g = sum(<j, a> in r) a * H(j) in
  let z2 = sum(<o, go> in g) go * W2(o) in
  sum(<c, zc> in z2) zc * zc"""

# another activation and another second layer: the weighted sum <A H, C>
SIGMOID_READOUT = """
let H = sum(<i, r> in A) {
          i -> let z = sum(<f, hf> in sum(<j, a> in r) a * X(j)) hf * W1(f) in
               sum(<o, zo> in z) { o -> sigmoid(zo) } } in
sum(<i, r> in A) sum(<j, a> in r) sum(<o, v> in H(j)) a * v * C(i)(o)"""


def _two_layer_closed_form(A, X, W1, W2, wrt):
    H = np.tanh(A @ X @ W1)
    G2 = 2 * (A @ H @ W2)
    if wrt == "W2":
        return (A @ H).T @ G2
    G1 = (A.T @ (G2 @ W2.T)) * (1 - H ** 2)
    return (A @ X).T @ G1 if wrt == "W1" else A.T @ (G1 @ W1.T)


def _sigmoid_closed_form(A, X, W1, C, wrt):
    H = 1 / (1 + np.exp(-(A @ X @ W1)))
    G1 = (A.T @ C) * H * (1 - H)
    return (A @ X).T @ G1 if wrt == "W1" else A.T @ (G1 @ W1.T)


def _inputs(rows, features, hidden, outputs, density, zero_rows, seed):
    rng = np.random.default_rng(seed)
    A = sp.random(rows, rows, density=density, format="csr", random_state=rng)
    A.data = rng.uniform(0.2, 1.0, A.nnz)
    X = rng.standard_normal((rows, features))
    X[rng.random(rows) < zero_rows] = 0.0  # rows whose hidden activations are exactly 0
    return dict(A=A, X=X, W1=rng.standard_normal((features, hidden)) * 0.5,
                W2=rng.standard_normal((hidden, outputs)) * 0.5, C=rng.standard_normal((rows, hidden)))


def _physical(text, wrt, inputs, passes=OPTIONAL_PASSES):
    """The optimized physical program of the gradient and its physical input arrays."""
    derivative = sparsad.grad(text, wrt=wrt)
    types = {n: value_type(v) for n, v in inputs.items()}
    stored = {n: as_format(v, "csr" if n == "A" else "dense", name=n) for n, v in inputs.items()}
    physical, stages = optimize(derivative._build(wrt, types, True), types, stored, passes)
    arrays = {}
    for n, s in stored.items():
        arrays.update(s.physical_arrays(n))
    return physical, stages, arrays


def _dense(value, shape):
    out = np.zeros(shape)
    for i, row in value.items():
        for j, v in row.items():
            out[i, j] += v
    return out


def _calls(expr, name):
    return sum(1 for node in walk(expr) if isinstance(node, Call) and node.func == name)


@pytest.mark.parametrize("text, function, names", [(TWO_LAYER, "tanh", ("X", "W1", "W2")),
                                                    (SIGMOID_READOUT, "sigmoid", ("X", "W1", "C"))])
def test_the_backward_loop_reads_the_stored_activations(text, function, names):
    inputs = {k: v for k, v in _inputs(6, 3, 2, 2, 0.4, 0.2, 0).items() if k in ("A",) + names}
    physical, stages, _ = _physical(text, "W1", inputs)
    # evaluated once, where H is built; without the pass the backward loop evaluates it again
    assert _calls(stages["hoist"], function) >= 2
    assert _calls(physical, function) == 1, to_text(physical)
    without, _, _ = _physical(text, "W1", inputs, OPTIONAL_PASSES - {"stored_rows"})
    assert _calls(without, function) >= 2


_GRADS: dict = {}


def _grad(text, wrt, interpret=False):
    """One derivative object per program and input (its plans are kept across examples)."""
    key = (text, wrt, interpret)
    if key not in _GRADS:
        _GRADS[key] = sparsad.grad(text, wrt=wrt, interpret=interpret)
    return _GRADS[key]


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.integers(1, 7), features=st.integers(1, 4), hidden=st.integers(1, 3), outputs=st.integers(1, 3),
       density=st.floats(0.0, 0.8), zero_rows=st.sampled_from([0.0, 0.5, 1.0]), seed=st.integers(0, 2**16))
def test_optimized_two_layer_gradients_match_closed_forms(rows, features, hidden, outputs, density, zero_rows,
                                                          seed):
    inputs = _inputs(rows, features, hidden, outputs, density, zero_rows, seed)
    A, X, W1, W2 = (inputs[k] for k in ("A", "X", "W1", "W2"))
    two_layer = {k: inputs[k] for k in ("A", "X", "W1", "W2")}
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.errors.FallbackWarning)
        for wrt in ("W1", "W2", "X"):
            expected = _two_layer_closed_form(A, X, W1, W2, wrt)
            if wrt == "W1":  # the rewritten physical program's meaning (the pass fires for W1)
                physical, _, arrays = _physical(TWO_LAYER, wrt, two_layer)
                interpreted = _dense(evaluate(physical, arrays), expected.shape)
                np.testing.assert_allclose(interpreted, expected, rtol=1e-10, atol=1e-12)
            compiled = np.asarray(_grad(TWO_LAYER, wrt)(**two_layer, out_format="dense"))
            np.testing.assert_allclose(compiled, expected, rtol=1e-10, atol=1e-12)
        readout = {k: inputs[k] for k in ("A", "X", "W1", "C")}
        for wrt in ("W1", "X"):
            expected = _sigmoid_closed_form(A, X, W1, inputs["C"], wrt)
            compiled = np.asarray(_grad(SIGMOID_READOUT, wrt)(**readout, out_format="dense"))
            np.testing.assert_allclose(compiled, expected, rtol=1e-10, atol=1e-12)
            reference = _grad(SIGMOID_READOUT, wrt, interpret=True)(**readout, out_format="dense")
            np.testing.assert_allclose(compiled, np.asarray(reference), rtol=1e-10, atol=1e-12)


ROWS = "let H = sum(<_, i> in (0:n)) sum(<o, z> in M(i)) { unique(i) -> { unique(o) -> tanh(z) } } in "


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.dictionaries(st.integers(0, 4), st.sampled_from([0.0, -1.5, 0.25, 2.0]), max_size=4),
                     min_size=1, max_size=4),
       weights=st.lists(st.floats(-2, 2), min_size=5, max_size=5))
def test_the_rewrite_keeps_the_interpreters_meaning_with_zero_activations_and_empty_rows(rows, weights):
    """tanh(0) = 0 is stored in H (a function's value is an entry even when zero), so iterating
    H's row visits the same keys as iterating M's; an empty row of M is an empty row of H."""
    inputs = {"M": {i: row for i, row in enumerate(rows)}, "n": len(rows), "w": np.array(weights)}
    for backward in (
            "sum(<_, i2> in (0:n)) sum(<o2, z2> in M(i2)) { o2 -> w(o2) * (1.0 - tanh(z2) * tanh(z2)) }",
            # the names H binds, bound again by the backward loop
            "sum(<_, i> in (0:n)) sum(<o, z> in M(i)) { o -> w(o) * (1.0 - tanh(z) * tanh(z)) }",
            # the row of an outer loop over the same rows, under an inner one
            "sum(<_, i2> in (0:n)) sum(<_, i3> in (0:n)) sum(<o2, z2> in M(i2)) w(i3) * tanh(z2)"):
        program = parse(ROWS + backward)
        rewritten = read_stored_rows(program)
        assert _calls(rewritten, "tanh") == 1, backward
        assert values_equal(evaluate(rewritten, inputs), evaluate(program, inputs), rtol=1e-14, atol=0)


@pytest.mark.parametrize("later", [
    # another source: M's rows are not what H stored
    "sum(<_, i2> in (0:n)) sum(<o2, z2> in N(i2)) tanh(z2)",
    # another row: H(i2) holds M(i2), not M(i2 + 1)
    "sum(<_, i2> in (0:n)) sum(<o2, z2> in M(i2 + 1)) tanh(z2)",
    # another function of the entry
    "sum(<_, i2> in (0:n)) sum(<o2, z2> in M(i2)) exp(z2)",
    # another range of rows
    "sum(<_, i2> in (0:m)) sum(<o2, z2> in M(i2)) tanh(z2)",
    # M rebound between H and the loop: the same text reads another dictionary
    "let M = N in sum(<_, i2> in (0:n)) sum(<o2, z2> in M(i2)) tanh(z2)",
])
def test_loops_that_do_not_recompute_a_stored_row_are_left_alone(later):
    program = parse(ROWS + later)
    assert read_stored_rows(program) == program


def test_a_loop_that_still_needs_the_entry_looks_the_function_up():
    program = parse(ROWS + "sum(<_, i2> in (0:n)) sum(<o2, z2> in M(i2)) z2 * tanh(z2)")
    rewritten = read_stored_rows(program)
    assert _calls(rewritten, "tanh") == 1
    inputs = {"M": {0: {0: 0.5, 2: -1.0}, 1: {}, 2: {1: 0.0, 3: 3.0}}, "n": 3}
    assert values_equal(evaluate(rewritten, inputs), evaluate(program, inputs), rtol=1e-14, atol=0)
    assert isinstance(rewritten, Let)


STILL_READS_THE_ENTRY = """
let H = sum(<i, r> in A) { i -> sum(<o, zo> in sum(<j, a> in r) a * X(j)) { o -> tanh(zo) } } in
(sum(<i, r> in A) sum(<j, a> in r) sum(<o, v> in H(j)) a * v) +
(sum(<i, r> in A) sum(<o, zo> in sum(<j, a> in r) a * X(j)) zo * tanh(zo))"""


def test_compiled_lookups_of_stored_values_where_the_entry_is_still_read():
    inputs = {k: v for k, v in _inputs(9, 3, 2, 2, 0.3, 0.3, 5).items() if k in ("A", "X")}
    A, X = inputs["A"], inputs["X"]
    value_program, _ = optimize(parse(STILL_READS_THE_ENTRY),
                                {n: value_type(v) for n, v in inputs.items()},
                                {"A": as_format(A, "csr", name="A"), "X": as_format(X, "dense", name="X")})
    assert _calls(value_program, "tanh") == 1, to_text(value_program)
    Z = A @ X
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.errors.FallbackWarning)
        value = sparsad.compile(STILL_READS_THE_ENTRY)(**inputs)
        grad = np.asarray(sparsad.grad(STILL_READS_THE_ENTRY, wrt="X")(**inputs, out_format="dense"))
    T = np.tanh(Z)
    assert value == pytest.approx(float(np.sum(A @ T) + np.sum(Z * T)), rel=1e-12)
    column_sums = np.asarray(A.sum(axis=0)).ravel()
    expected = A.T @ (column_sums[:, None] * (1 - T ** 2) + T + Z * (1 - T ** 2))
    np.testing.assert_allclose(grad, expected, rtol=1e-10, atol=1e-12)
