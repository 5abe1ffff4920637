"""Aggregation by key before expansion keeps the interpreter's value and makes SMMM's gradient O(nnz)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsad.ad.api import grad
from sparsad.formats import as_format
from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import parse
from sparsad.lang.printer import to_text
from sparsad.lang.syntax import Lookup, Sum, SubArray, Var, walk
from sparsad.lang.typecheck import value_type
from sparsad.lang.values import values_equal
from sparsad.opt.aggregate import aggregate, loop_depth
from sparsad.opt.interchange import derived_inputs
from sparsad.opt.pipeline import optimize
from sparsad.opt.storage import physical_inputs
from sparsad.programs import PAPER_PROGRAMS

# {k -> V} with V linear in one scalar (rewritten), and near misses (kept): a nonlinear body, a
# body reading the outer loop's key, a filtered generator, a generator then looked up.
TEMPLATES = {
    "linear": ("sum(<i, r> in M) sum(<k, a> in r) { k -> sum(<j, b> in N(k)) { j -> a * b } }", True),
    "let-scaled": ("sum(<i, r> in M) sum(<k, a> in r) let t = a * s in "
                   "{ k -> sum(<j, b> in N(k)) { j -> t * exp(b) } }", True),
    "filtered": ("sum(<i, r> in M) sum(<k, a> in r) if i < k then "
                 "{ k -> sum(<j, b> in N(k)) { j -> a * b + a } }", True),
    "nonlinear": ("sum(<i, r> in M) sum(<k, a> in r) { k -> sum(<j, b> in N(k)) { j -> a * a * b } }", False),
    "reads-row": ("sum(<i, r> in M) sum(<k, a> in r) { k -> sum(<j, b> in N(k)) { j -> a * x(i) } }", False),
    "looked-up": ("let G = sum(<i, r> in M) sum(<k, a> in r) { k -> sum(<j, b> in N(k)) { j -> a * b } } in "
                  "sum(<m1, mv1> in N) { m1 -> sum(<m2, _> in mv1) { m2 -> G(m1)(m2) } }", None),
}


def _inputs(seed: int, n: int = 5):
    rng = np.random.default_rng(seed)
    M = sp.random(n, n, density=0.5, format="csr", random_state=rng)
    N = sp.random(n, n, density=0.5, format="csr", random_state=rng)
    return {"M": M, "N": N, "x": rng.standard_normal(n), "s": float(rng.uniform(0.5, 2.0))}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_aggregation_keeps_the_meaning_of_logical_programs(name, seed):
    text, rewritten = TEMPLATES[name]
    inputs = _inputs(seed)
    types = {k: value_type(v) for k, v in inputs.items()}
    expr = parse(text)
    result = aggregate(expr, types)
    assert values_equal(evaluate(result, inputs), evaluate(expr, inputs), rtol=1e-12, atol=1e-12), to_text(result)
    if rewritten is not None:
        assert (result != expr) == rewritten, to_text(result)
    if result != expr:
        assert loop_depth(result) < loop_depth(expr)


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(TEMPLATES)), seed=st.integers(0, 10**6),
       fmt_m=st.sampled_from(["csr", "csc", "coo", "dense", "dcsr"]), fmt_n=st.sampled_from(["csr", "dcsr", "dense"]))
def test_pipeline_with_aggregation_keeps_the_meaning_in_every_format(name, seed, fmt_m, fmt_n):
    inputs = _inputs(seed, n=4)
    types = {k: value_type(v) for k, v in inputs.items()}
    stored = {}
    for arg, fmt in (("M", fmt_m), ("N", fmt_n)):
        stored[arg] = as_format(inputs[arg].toarray() if fmt == "dense" else inputs[arg], fmt)
    stored["x"] = as_format(inputs["x"], "dense")
    arrays, array_types = physical_inputs(stored)
    expr = parse(TEMPLATES[name][0])
    expected = evaluate(expr, {**stored, "s": inputs["s"]})
    _, stages = optimize(expr, types, stored)
    for stage, staged in stages.items():
        derived = derived_inputs(staged, arrays, array_types)  # the transposed index of `interchange`
        env = {**arrays, **derived, "s": inputs["s"]} if stage != "sparsity" else {**stored, "s": inputs["s"]}
        assert values_equal(evaluate(staged, env), expected, rtol=1e-12, atol=1e-12), (stage, to_text(staged))


def _smmm_gradient(A, B):
    stored = {"A": as_format(A, "csr"), "B": as_format(B, "csr")}
    types = {"A": value_type(A), "B": value_type(B)}
    derivative = grad(PAPER_PROGRAMS["smmm"].text, wrt="B")._build("B", types)  # reverse mode, masked
    physical, stages = optimize(derivative, types, stored)
    return physical, stages, stored


def _reads(node, array: str) -> bool:
    return isinstance(node.source, SubArray) and node.source.array == Var(array)


def test_smmm_gradient_has_no_loop_over_rows_of_b_inside_the_entries_of_a():
    A = sp.random(6, 6, density=0.4, format="csr", random_state=0)
    B = sp.random(6, 6, density=0.4, format="csr", random_state=1)
    physical, stages, stored = _smmm_gradient(A, B)
    for outer in walk(physical):
        if isinstance(outer, Sum) and _reads(outer, "A_idx"):
            assert not any(isinstance(n, Sum) and _reads(n, "B_idx") for n in walk(outer.body)), to_text(physical)
    # A's column sums are aggregated once, then read on B's pattern: two loop nests of depth 2
    assert loop_depth(physical) == 2, to_text(physical)
    assert any(isinstance(n, Lookup) for n in walk(physical))
    arrays, _ = physical_inputs(stored)
    got = evaluate(physical, arrays)
    colsums = np.asarray(A.sum(axis=0)).ravel()
    Bc = B.tocoo()
    expected = {}
    for i, j in zip(Bc.row, Bc.col):
        expected.setdefault(int(i), {})[int(j)] = float(colsums[i])
    assert values_equal(got, expected, rtol=1e-12, atol=1e-12)


def test_smmm_gradient_compiles_to_an_o_nnz_kernel_equal_to_the_closed_form():
    import sparsad

    A = sp.random(40, 40, density=0.1, format="csr", random_state=2)
    B = sp.random(40, 40, density=0.1, format="csr", random_state=3)
    g = sparsad.grad(PAPER_PROGRAMS["smmm"].text, wrt="B")
    got = g(A=A, B=B)
    colsums = np.asarray(A.sum(axis=0)).ravel()
    Bc = B.tocoo()
    expected = sp.csr_matrix((colsums[Bc.row], (Bc.row, Bc.col)), shape=B.shape)
    assert abs(got - expected).max() < 1e-12
    code = g.show("code")
    assert "Dict.empty" not in code, code  # no hash of rows: a dense accumulator


def test_later_fusion_does_not_undo_the_aggregation():
    inputs = _inputs(3)
    types = {k: value_type(v) for k, v in inputs.items()}
    stored = {k: as_format(inputs[k], "csr") for k in ("M", "N")}
    expr = parse(TEMPLATES["linear"][0])
    physical, stages = optimize(expr, types, stored)
    assert loop_depth(stages["fuse"]) == 3
    assert loop_depth(physical) == 2, to_text(physical)  # one pass over M's entries, one per key
