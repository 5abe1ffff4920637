"""A let-bound matrix whose rows are written whole over a range of columns, filled once and then
read by key, is a dense grid in the kernel (not a hash map of hash-map rows): the values are
those of the interpreter and of NumPy, and reads outside what was written are zero."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsad.codegen import compile_physical
from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import parse
from sparsad.lang.values import values_equal

# G = A^T S (scattered by A's column indices), then copied onto an R-shaped dense range that may
# be larger (reads past G's written keys) or smaller (G's entries dropped) than G
SCATTER_THEN_COPY = parse("""
let G = sum(<_, i> in (0:A_len))
    sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1)))
      sum(<_, c> in (0:S_cols)) { j -> { c -> A_val(p) * S_M(i * S_cols + c) } } in
sum(<_, r> in (0:R_rows)) sum(<_, c> in (0:R_cols)) { r -> { c -> G(r)(c) } }
""")

shapes = st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 5), st.integers(0, 11),
                   st.integers(0, 7), st.sampled_from([0.0, 0.2, 0.6]), st.integers(0, 2**16))


@settings(max_examples=25, deadline=None)
@given(shapes)
def test_a_scattered_intermediate_copied_onto_a_dense_range_is_a_grid(make_physical, make_csr, shape):
    rows, cols, k, r_rows, r_cols, density, seed = shape
    a = make_csr(rows, cols, density, seed)
    s = np.random.default_rng(seed + 1).standard_normal((rows, k))
    extents = np.zeros((r_rows, r_cols))
    types, arrays, _ = make_physical({"A": (a, "csr"), "S": (s, "dense"), "R": (extents, "dense")})
    kernel = compile_physical(SCATTER_THEN_COPY, types, output="dense", shape=(r_rows, r_cols))
    assert "Dict.empty" not in kernel.source and "np.zeros((" in kernel.source
    result = kernel(**arrays)
    full = np.zeros((max(cols, r_rows), max(k, r_cols)))
    full[:cols, :k] = a.T @ s
    np.testing.assert_allclose(result, full[:r_rows, :r_cols], rtol=1e-12, atol=1e-12)
    assert values_equal(result, evaluate(SCATTER_THEN_COPY, arrays), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("hidden", [1, 4])
def test_the_aggregation_vjp_needs_no_hash_map_and_matches_dense_autograd(hidden, make_csr):
    torch = pytest.importorskip("torch")
    import sparsad.torch as sat

    a = make_csr(13, 13, 0.25, hidden)
    program = sat.compile_program("sum(<i, r> in A) { i -> sum(<k, a> in r) sum(<c, v> in H(k)) "
                                  "{ c -> a * v } }", wrt=("H",), out_format="dense")
    H = torch.randn(13, hidden, dtype=torch.float64, requires_grad=True)
    A = sat.SparseMatrix.from_scipy(a)
    out = program(A=A, H=H)
    weight = torch.randn(out.shape, dtype=torch.float64)
    grad, = torch.autograd.grad((out * weight).sum(), H)
    dense = torch.as_tensor(a.toarray())
    expected, = torch.autograd.grad(((dense @ H) * weight).sum(), H)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-12)
    (derived,) = program._derived.values()
    assert "Dict.empty" not in derived._compiled.show("code")


# rows written over a range of columns, but only below the diagonal (row 0 not at all): iterating
# the rows of the grid must see exactly the written keys (a count is not linear in absent zeros)
POSITIVE_PART = """
let G = sum(<_, i> in (0:S_rows)) sum(<_, j> in (0:S_cols))
    if j < i then { i -> { j -> S_M(i * S_cols + j) } } in
"""
ROWS_BY_KEY = parse(POSITIVE_PART + "sum(<_, r> in (0:R_rows)) { r -> sum(<c, v> in G(r)) 1.0 + v * v }")
ROWS_ITERATED = parse(POSITIVE_PART + "sum(<r, row> in G) { r -> sum(<c, v> in row) 1.0 + G(r)(c) }")


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 8), st.integers(1, 6), st.integers(0, 10), st.integers(0, 2**16))
def test_the_rows_of_an_iterated_grid_hold_exactly_the_written_keys(make_physical, rows, cols, r_rows,
                                                                     seed):
    s = np.random.default_rng(seed).standard_normal((rows, cols))
    s[rows - 1, 0] = 0.0  # written when rows > 1 (column 0 < row rows - 1): an entry all the same
    types, arrays, _ = make_physical({"S": (s, "dense"), "R": (np.zeros((r_rows, 1)), "dense")})
    positive = np.tri(rows, cols, -1, dtype=bool)

    by_key = compile_physical(ROWS_BY_KEY, types, output="dense", shape=(r_rows,))
    iterated = compile_physical(ROWS_ITERATED, types, output="dense", shape=(rows,))
    for kernel, program, n in ((by_key, ROWS_BY_KEY, r_rows), (iterated, ROWS_ITERATED, rows)):
        assert "Dict.empty" not in kernel.source
        expected = np.zeros(max(n, rows))
        expected[:rows] = positive.sum(1) + (np.where(positive, s, 0.0).sum(1) if program is ROWS_ITERATED
                                              else np.where(positive, s * s, 0.0).sum(1))
        result = kernel(**arrays)
        np.testing.assert_allclose(result, expected[:n], rtol=1e-12, atol=1e-12)
        assert values_equal(result, evaluate(program, arrays), rtol=1e-12, atol=1e-12)


# a hidden layer H = tanh(A X W1) read by row in a second layer: each row of H is written whole
# (its columns come from a loop over a vector that a dense matrix wrote whole), so H and the
# adjoint of H are grids, and the rows of an empty row of A stay absent (the marks say so)
TWO_LAYERS = """
let H = sum(<i, r> in A) {
          i -> let h = sum(<j, a> in r) a * X(j) in
               let z = sum(<f, hf> in h) hf * W1(f) in
               sum(<o, zo> in z) { o -> tanh(zo) } } in
sum(<i, r> in A)
  let g = sum(<j, a> in r) a * H(j) in
  let z2 = sum(<o, go> in g) go * W2(o) in
  (sum(<c, zc> in z2) zc * zc) + 0.5 * (sum(<k, _> in H(i)) 1.0)"""


def _two_layer_closed_form(a, x, w1, w2):
    """(value, d/dW1, d/dW2) with NumPy; the count term is the width of H's nonempty rows."""
    ax = a @ x
    h = np.tanh(ax @ w1)
    z2 = a @ h @ w2
    nonempty = np.diff(a.indptr) > 0
    value = float(np.sum(z2 ** 2)) + 0.5 * w1.shape[1] * nonempty.sum()
    g2 = 2 * z2
    dh = a.T @ (g2 @ w2.T)
    return value, ax.T @ (dh * (1 - h ** 2)), (a @ h).T @ g2


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 9), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3),
       st.sampled_from([0.0, 0.2, 0.5]), st.integers(0, 2**16))
def test_a_hidden_layer_read_by_rows_is_a_grid_in_value_and_gradients(make_csr, n, f, hidden, out, density,
                                                                      seed):
    import warnings

    import sparsad

    rng = np.random.default_rng(seed)
    a = make_csr(n, n, density, seed)
    inputs = dict(A=a, X=rng.standard_normal((n, f)), W1=rng.standard_normal((f, hidden)),
                  W2=rng.standard_normal((hidden, out)))
    value, d_w1, d_w2 = _two_layer_closed_form(a, inputs["X"], inputs["W1"], inputs["W2"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        compiled = sparsad.compile(TWO_LAYERS)
        assert np.isclose(compiled(**inputs), value, rtol=1e-12, atol=1e-12)
        assert "Dict.empty" not in compiled.show("code")
        for wrt, expected in (("W1", d_w1), ("W2", d_w2)):
            got = sparsad.grad(TWO_LAYERS, wrt)(**inputs)
            assert isinstance(got, np.ndarray)
            np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
            reference = sparsad.grad(TWO_LAYERS, wrt, interpret=True)(**inputs)
            np.testing.assert_allclose(got, np.asarray(reference), rtol=1e-12, atol=1e-12)
