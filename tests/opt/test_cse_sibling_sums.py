"""CSE merges sibling sums over one source and shares work up to bound-variable names.

`(sum(<k, v> in s) b1) + (sum(<k2, v2> in s) b2)` becomes one sum whose body is `b1 + b2`, and a
binding equal to an earlier one up to the names it binds reuses it. Values are checked against
the interpreter on the unoptimized program (random inputs, float64); structure on the programs.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import parse
from sparsad.lang.syntax import Call, Sum, walk
from sparsad.lang.typecheck import value_type
from sparsad.lang.values import values_equal
from sparsad.opt.cse import eliminate_common_subexpressions, merge_sibling_sums


def _exps(expr) -> int:
    return sum(1 for node in walk(expr) if isinstance(node, Call) and node.func == "exp")


def _top_sums(expr) -> int:
    return sum(1 for node in walk(expr) if isinstance(node, Sum) and node.source == parse("x"))


def test_sibling_sums_merge_and_share_their_common_work():
    program = parse("(sum(<i, a> in x) a * exp(sum(<d, q> in y) q * i)) + "
                    "(sum(<j, b> in x) exp(sum(<e, w> in y) w * j) / b)")
    merged = merge_sibling_sums(program)
    assert _top_sums(merged) == 1
    x, y = {0: 1.5, 2: -0.5, 3: 2.0}, {0: 0.1, 1: -0.2}
    types = {"x": value_type(x), "y": value_type(y)}
    shared = eliminate_common_subexpressions(program, types)
    assert _exps(shared) == 1  # the two exponentials differ only in their bound names
    reference = evaluate(program, {"x": x, "y": y})
    assert values_equal(evaluate(merged, {"x": x, "y": y}), reference)
    assert values_equal(evaluate(shared, {"x": x, "y": y}), reference)


def test_sums_over_different_sources_stay_apart():
    program = parse("(sum(<i, a> in x) a) + (sum(<j, b> in y) b) + (sum(<k, c> in x) { k -> c })(0)")
    assert merge_sibling_sums(program) == program


def test_sibling_sums_sharing_no_work_stay_apart():
    """Merged, they would do the same work in one loop, and later passes (loop interchange) would
    see one loop nest instead of two."""
    program = parse("(sum(<i, a> in x) a * exp(y(i))) + (sum(<j, b> in x) b * sin(y(j)))")
    assert merge_sibling_sums(program) == program


def test_wildcard_binders_take_the_other_sums_names():
    program = parse("(sum(<_, a> in x) exp(a) * a) + (sum(<j, _> in x) { j -> 1.0 })(2) + (sum(<k, b> in x) exp(b) * k)")
    merged = merge_sibling_sums(program)
    assert _top_sums(merged) == 2
    x = {0: 1.5, 2: -0.5, 5: 2.0}
    assert values_equal(evaluate(merged, {"x": x}), evaluate(program, {"x": x}))


ATTENTION = """
sum(<i, r> in A) { i ->
  let z = sum(<j, a> in r) exp((sum(<d, q> in Q(i)) q * K(j)(d)) - M(i)) in
  sum(<j, a> in r)
    let p = exp((sum(<d, q> in Q(i)) q * K(j)(d)) - M(i)) / z in
    sum(<c, v> in V(j)) { c -> p * v } }"""


def _attention_inputs(n: int, density: float, hidden: int, seed: int):
    rng = np.random.default_rng(seed)
    A = sp.random(n, n, density=density, format="csr", random_state=rng) + sp.eye(n, format="csr")
    A = sp.csr_matrix(A)
    Q, K, V = (rng.standard_normal((n, hidden)) for _ in range(3))
    M = np.zeros(n)
    return dict(A=A, Q=Q, K=K, V=V, M=M)


def test_attention_joint_vjp_computes_each_score_three_times_not_four():
    """The adjoint terms of the softmax weights and of its normaliser are one loop over a row."""
    from sparsad.ad.joint import joint_vjp_expr
    from sparsad.formats import as_format
    from sparsad.opt.pipeline import optimize

    inputs = _attention_inputs(6, 0.4, 3, 0)
    types = {n: value_type(v) for n, v in inputs.items()}
    expr = joint_vjp_expr(parse(ATTENTION), ("K", "Q", "V"), types, "g")
    stored = {n: as_format(v, "csr" if n == "A" else "dense", name=n) for n, v in inputs.items()}
    rng = np.random.default_rng(1)
    seed = rng.standard_normal((6, 3))
    types["g"] = value_type(seed)
    stored["g"] = as_format(seed, "dense", name="g")
    _, stages = optimize(expr, types, stored)
    # the normaliser, its adjoint, and one loop for every adjoint term (was: two)
    assert _exps(stages["cse"]) == 3


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 9), density=st.floats(0.0, 0.6), hidden=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_attention_gradients_after_merging_match_dense_autograd(n, density, hidden, seed):
    import torch

    import sparsad.torch as sparsad_torch

    inputs = _attention_inputs(n, density, hidden, seed)
    layer = sparsad_torch.compile_program(ATTENTION, wrt=("Q", "K", "V"), out_format="dense")
    tensors = {k: torch.tensor(inputs[k], requires_grad=True) for k in ("Q", "K", "V")}
    out = layer(A=sparsad_torch.SparseMatrix.from_scipy(inputs["A"]), M=torch.tensor(inputs["M"]), **tensors)
    weights = torch.tensor(np.random.default_rng(seed + 1).standard_normal((n, hidden)))
    grads = torch.autograd.grad((out * weights).sum(), tuple(tensors.values()))
    dense = torch.tensor(inputs["A"].toarray())
    reference = {k: torch.tensor(inputs[k], requires_grad=True) for k in ("Q", "K", "V")}
    scores = (reference["Q"] @ reference["K"].T).masked_fill(dense == 0, float("-inf"))
    expected_out = torch.softmax(scores, 1) @ reference["V"]
    expected = torch.autograd.grad((expected_out * weights).sum(), tuple(reference.values()))
    np.testing.assert_allclose(out.detach().numpy(), expected_out.detach().numpy(), rtol=1e-10, atol=1e-10)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-10)
