"""Issue 11, items 2-4: the optimizer does not multiply work.

- a let-bound intermediate read inside a loop stays bound (materialised once per iteration of
  the loop that defines it) unless it is a view of stored levels (fusion would not raise the
  loop-nest cost);
- a derivative of a second sparse operand, built on the first operand's pattern and read on its
  own pattern, is built one row at a time (no hash map of rows, no search per entry);
- common-subexpression elimination does not share singletons (a shared one becomes a container).

Structure is checked on the optimized programs (loop depth at a read), values against the
interpreter and NumPy/SciPy closed forms in float64.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import sparsad
from sparsad.formats import as_format
from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import parse
from sparsad.lang.syntax import Let, Lookup, Singleton, Sum, Var, walk
from sparsad.lang.typecheck import value_type
from sparsad.lang.values import values_equal
from sparsad.opt.cse import eliminate_common_subexpressions
from sparsad.opt.fuse import fuse, is_view
from sparsad.opt.pipeline import optimize

SPMM_LOSS = "sum(<i, r> in A) let h = (sum(<k, a> in r) a * B(k)) - C(i) in sum(<j, e> in h) e * e"
GCN = """sum(<i, r> in A)
  let h = sum(<j, a> in r) a * X(j) in
  let z = sum(<f, hf> in h) hf * W(f) in
  sum(<o, zo> in z) tanh(zo)"""


def _loops_at_read(expr, array: str, depth: int = 0) -> int:
    """The deepest nesting of loops around a read of `array`."""
    deepest = -1
    if isinstance(expr, Lookup) and expr.dict == Var(array):
        deepest = depth
    children = []
    if isinstance(expr, Sum):
        children = [(expr.source, depth), (expr.body, depth + 1)]
    else:
        from sparsad.lang.rebuild import map_children

        map_children(expr, lambda c: children.append((c, depth)) or c)
    for child, d in children:
        deepest = max(deepest, _loops_at_read(child, array, d))
    return deepest


def _optimized_derivative(text: str, wrt: str, inputs: dict, formats: dict):
    derivative = sparsad.grad(text, wrt=wrt)
    types = {n: value_type(v) for n, v in inputs.items()}
    logical = derivative._build(wrt, types, True)
    stored = {n: as_format(v, formats.get(n, "dense"), name=n) for n, v in inputs.items()}
    physical, _ = optimize(logical, types, stored)
    arrays = {}
    for n, s in stored.items():
        arrays.update(s.physical_arrays(n))
    return physical, arrays


def _csr(rows, cols, density, seed):
    rng = np.random.default_rng(seed)
    A = sp.random(rows, cols, density=density, format="csr", random_state=rng)
    A.data = rng.standard_normal(A.nnz)
    return A


def test_spmm_loss_gradient_builds_the_residual_row_once_per_row():
    rng = np.random.default_rng(0)
    A, B, C = _csr(7, 6, 0.5, 1), rng.standard_normal((6, 3)), rng.standard_normal((7, 3))
    physical, arrays = _optimized_derivative(SPMM_LOSS, "B", dict(A=A, B=B, C=C), {"A": "csr"})
    # the residual reads B inside the row loop and one loop over the row's entries (and B's row);
    # inlined into the loop over the row's entries that scatters the gradient, it would be one deeper
    assert _loops_at_read(physical, "B_M") <= 3
    assert any(isinstance(n, Let) and any(isinstance(m, Sum) for m in walk(n.value)) for n in walk(physical))
    expected = 2 * A.T @ (A @ B - C)
    np.testing.assert_allclose(_dense(evaluate(physical, arrays), B.shape), expected, rtol=1e-12, atol=1e-12)


def test_gcn_weight_gradient_builds_the_hidden_layer_once_per_row():
    rng = np.random.default_rng(1)
    A = abs(_csr(8, 8, 0.35, 2))
    X, W = rng.standard_normal((8, 4)), rng.standard_normal((4, 3))
    physical, arrays = _optimized_derivative(GCN, "W", dict(A=A, X=X, W=W), {"A": "csr"})
    # z = h W reads W under the row loop, a loop over h and a loop over W's row: not under a
    # second loop over h (the outer product that scatters the gradient)
    assert _loops_at_read(physical, "W_M") <= 3
    H = A @ X
    expected = H.T @ (1 - np.tanh(H @ W) ** 2)
    np.testing.assert_allclose(_dense(evaluate(physical, arrays), W.shape), expected, rtol=1e-12, atol=1e-12)


def _dense(value, shape):
    out = np.zeros(shape)
    for i, row in value.items():
        for j, v in row.items():
            out[i, j] += v
    return out


def test_views_of_stored_levels_still_fuse_into_loops():
    """A dense row (a view) read inside a loop is still inlined: iterating it costs its entries."""
    view = parse("sum(<_, j> in (0:n)) { unique(j) -> M(i * n + j) }")
    assert is_view(view)
    costly = parse("sum(<j, e> in (sum(<_, q> in (0:n)) { unique(q) -> M(q) }) - x) { unique(j) -> e }")
    assert not is_view(costly)
    program = parse("let r = sum(<_, j> in (0:n)) { unique(j) -> M(j) } in "
                    "sum(<_, p> in (0:m)) sum(<j, v> in r) v * M(p)")
    fused = fuse(program, {})
    assert not any(isinstance(node, Let) for node in walk(fused))


def test_cse_does_not_share_a_singleton():
    program = parse("sum(<j, e> in x) { j -> e * 2.0 } + { j -> e * 2.0 }")
    x = {0: 1.5, 3: -2.0}
    types = {"x": value_type(x)}
    rewritten = eliminate_common_subexpressions(program, types)
    assert not any(isinstance(node, Let) and isinstance(node.value, Singleton) for node in walk(rewritten))
    assert values_equal(evaluate(rewritten, {"x": x}), evaluate(program, {"x": x}))


HADAMARD = "sum(<i, r> in A) sum(<j, a> in r) a * B(i)(j)"


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 9), cols=st.integers(1, 9), da=st.floats(0.0, 1.0), db=st.floats(0.0, 1.0),
       seed=st.integers(0, 2**16))
def test_gradient_of_the_second_sparse_operand_is_built_row_by_row(rows, cols, da, db, seed):
    A, B = _csr(rows, cols, da, seed), _csr(rows, cols, db, seed + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.errors.FallbackWarning)
        g = _hadamard_grad()(A=A, B=B)
    mask = B.copy()
    mask.data[:] = 1.0
    expected = A.multiply(mask).toarray()
    np.testing.assert_allclose(g.toarray(), expected, rtol=1e-12, atol=1e-12)
    assert g.shape == B.shape and g.nnz == B.nnz  # on B's pattern


_GRAD = {}


def _hadamard_grad():
    if "g" not in _GRAD:
        _GRAD["g"] = sparsad.grad(HADAMARD, wrt="B")
    return _GRAD["g"]


def test_gradient_of_the_second_sparse_operand_needs_no_hash_map():
    A, B = _csr(6, 5, 0.5, 3), _csr(6, 5, 0.5, 4)
    g = _hadamard_grad()
    g(A=A, B=B)
    code = g.show("code")
    assert "Dict.empty" not in code  # no hash map of rows: one workspace row at a time
    assert "# output: pattern" in code  # written in place on B's pattern
    physical = g.show("physical")
    assert "_tpos" not in physical


@pytest.mark.parametrize("interpret", [False, True])
def test_jacobian_of_a_scalar_program_wrt_a_dense_input_is_its_gradient_as_an_ndarray(interpret):
    rng = np.random.default_rng(5)
    S, U, V = _csr(6, 5, 0.5, 6), rng.standard_normal((6, 3)), rng.standard_normal((5, 3))
    text = "sum(<i, r> in S) sum(<j, s> in r) s * (sum(<k, u> in U(i)) u * V(j)(k))"
    J = sparsad.jacobian(text, wrt="U", interpret=interpret)(S=S, U=U, V=V)
    assert isinstance(J, np.ndarray) and J.shape == U.shape
    np.testing.assert_allclose(J, S @ V, rtol=1e-12, atol=1e-12)
    JS = sparsad.jacobian(text, wrt="S", interpret=interpret)(S=S, U=U, V=V)
    assert sp.issparse(JS)  # the Jacobian w.r.t. a sparse input stays on its pattern


def test_a_dense_result_is_not_interchanged_through_a_transposed_pattern():
    rng = np.random.default_rng(7)
    S, U, V = _csr(7, 6, 0.4, 8), rng.standard_normal((7, 3)), rng.standard_normal((6, 3))
    g = sparsad.grad("sum(<i, r> in S) sum(<j, s> in r) s * (sum(<k, u> in U(i)) u * V(j)(k))", wrt="V")
    result = g(S=S, U=U, V=V)
    assert isinstance(result, np.ndarray)
    np.testing.assert_allclose(result, S.T @ U, rtol=1e-12, atol=1e-12)
    assert "_tpos" not in g.show("physical")  # written at any row of the dense result, in place


def test_a_row_lookup_outside_the_generators_range_is_empty():
    """Rows of `sum(<_, i> in (lo:hi)) ...` exist only for lo <= i < hi."""
    program = parse("let X = sum(<_, i> in (2:5)) sum(<j, a> in M(i)) { i -> { j -> a * 2.0 } } in "
                    "sum(<_, m> in (0:n)) sum(<j, _> in M(m)) { m -> { j -> X(m)(j) } }")
    M = {i: {j: float(i + j + 1) for j in range(3)} for i in range(6)}
    env = {"M": M, "n": 6}
    types = {k: value_type(v) for k, v in env.items()}
    fused = fuse(program, types)
    assert not any(isinstance(node, Let) and node.name == "X" for node in walk(fused))
    assert values_equal(evaluate(fused, env), evaluate(program, env))


@pytest.mark.parametrize("interpret", [False, True])
def test_a_jacobian_reverse_mode_cannot_take_is_built_in_forward_mode(interpret):
    """pow with a computed exponent has no reverse rule: the Jacobian of the scalar program is
    then taken in tensorized forward mode, as before reverse mode was chosen for scalars."""
    x = np.random.default_rng(9).standard_normal(6)
    J = sparsad.jacobian("pow(sum(<i, v> in x) pow(abs(v), 3.0), 1.0 / 3.0)", wrt="x", interpret=interpret)(x=x)
    expected = np.sign(x) * np.abs(x) ** 2 * np.sum(np.abs(x) ** 3) ** (-2 / 3)
    np.testing.assert_allclose(np.asarray(J), expected, rtol=1e-12)


ATTENTION = """sum(<i, r> in A) { i ->
  let z = sum(<j, a> in r) exp(sum(<d, q> in Q(i)) q * K(j)(d)) in
  sum(<j, a> in r)
    let p = exp(sum(<d, q> in Q(i)) q * K(j)(d)) / z in
    sum(<c, v> in V(j)) { c -> p * v } }"""


def _loops_at_call(expr, name: str, depth: int = 0) -> int:
    """The deepest nesting of loops around a call of the function `name`."""
    from sparsad.lang.rebuild import map_children
    from sparsad.lang.syntax import Call

    deepest = depth if isinstance(expr, Call) and expr.func == name else -1
    children = [(expr.source, depth), (expr.body, depth + 1)] if isinstance(expr, Sum) else []
    if not isinstance(expr, Sum):
        map_children(expr, lambda c: children.append((c, depth)) or c)
    for child, d in children:
        deepest = max(deepest, _loops_at_call(child, name, d))
    return deepest


def test_a_scalar_factor_stays_outside_a_scalar_reduction():
    """(sum_c s(c) v(c)) * exp(q . k): normalization does not move the exp into the sum over c
    (it was evaluated once per c: the attention layer's vjp w.r.t. K and Q ran 5x slower)."""
    from sparsad.opt.normalize import normalize_products

    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(4), rng.standard_normal(4)
    program = parse("(sum(<c, v> in x) v * y(c)) * exp(sum(<d, w> in y) w)")
    types = {"x": value_type(x), "y": value_type(y)}
    normalized = normalize_products(program, types)
    assert _loops_at_call(normalized, "exp") == 0
    assert abs(evaluate(normalized, {"x": x, "y": y}) - (x @ y) * np.exp(y.sum())) < 1e-12

    A = abs(_csr(7, 7, 0.4, 5)) + sp.eye(7, format="csr")
    Q, K, V = (rng.standard_normal((7, 3)) for _ in range(3))
    for wrt in ("K", "Q"):
        physical, arrays = _optimized_derivative(f"sum(<i, row> in ({ATTENTION})) sum(<c, o> in row) o * o",
                                                 wrt, dict(A=A, Q=Q, K=K, V=V), {"A": "csr"})
        # exp(q_i . k_j) under the row loop and the neighbour loop (and its own dot product at
        # most), never under the loop over V's columns as well
        assert _loops_at_call(physical, "exp") <= 2, wrt
