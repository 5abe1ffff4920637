"""Every optimization pass keeps what the interpreter computes; the paper's worked reductions hold."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsad.ad.api import gradient
from sparsad.formats import as_format
from sparsad.lang.interpret import evaluate
from sparsad.lang.names import alpha_equal
from sparsad.lang.parse import parse
from sparsad.lang.printer import to_text
from sparsad.lang.syntax import Let, Singleton, Sum, walk
from sparsad.lang.typecheck import value_type
from sparsad.lang.types import REAL, tensor
from sparsad.lang.values import values_equal
from sparsad.opt.aggregate import aggregate
from sparsad.opt.anf import to_anf
from sparsad.opt.cse import eliminate_common_subexpressions
from sparsad.opt.dps import push_singletons_inward
from sparsad.opt.fuse import fuse
from sparsad.opt.normalize import normalize_products
from sparsad.opt.interchange import derived_inputs, interchange
from sparsad.opt.pipeline import optimize
from sparsad.opt.sparsity import propagate_sparsity
from sparsad.opt.storage import physical_inputs
from sparsad.programs import PAPER_PROGRAMS, random_inputs

LOGICAL_PASSES = {
    "anf": lambda e, t: to_anf(e),
    "aggregate": aggregate,
    "sparsity": propagate_sparsity,
    "fuse": fuse,
    "normalize": normalize_products,
    "dps": push_singletons_inward,
    "cse": eliminate_common_subexpressions,
}

KERNEL_WRT = {"batax": "x", "smmm": "B", "smvm": "X", "vva": "V1", "vvd": "V1", "vsm": "s",
              "dot_v2": "V1", "matmul": "M1", "trace": "M", "map": "V", "scalar_vector": "V"}


def _cases():
    for name, wrt in KERNEL_WRT.items():
        yield name, wrt


@pytest.mark.parametrize("pass_name", sorted(LOGICAL_PASSES))
@pytest.mark.parametrize("name, wrt", list(_cases()))
def test_pass_keeps_the_meaning_of_programs_and_their_derivatives(pass_name, name, wrt):
    entry = PAPER_PROGRAMS[name]
    inputs = random_inputs(entry, np.random.default_rng(1), n=4, density=0.5)
    types = {k: value_type(v) for k, v in inputs.items()}
    primal = parse(entry.text)
    derivative = gradient(primal, wrt, types)
    for expr in (primal, derivative):
        rewritten = LOGICAL_PASSES[pass_name](expr, types)
        assert values_equal(evaluate(rewritten, inputs), evaluate(expr, inputs), rtol=1e-12, atol=1e-12), \
            to_text(rewritten)


FORMATS = {
    "matrix": ["csr", "csc", "coo", "dense", "dcsr"],
    "square": ["csr", "csc", "coo", "dense"],
    "vector": ["dense", "coo"],
}


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(sorted(KERNEL_WRT)), seed=st.integers(0, 10**6), data=st.data())
def test_pipeline_on_storage_formats_keeps_the_meaning(name, seed, data):
    entry = PAPER_PROGRAMS[name]
    rng = np.random.default_rng(seed)
    inputs = random_inputs(entry, rng, n=3, density=0.5)
    types = {k: value_type(v) for k, v in inputs.items()}
    stored = {}
    for arg, kind in entry.kinds.items():
        if kind != "scalar":
            fmt = data.draw(st.sampled_from(FORMATS[kind]), label=f"format of {arg}")
            value = inputs[arg].toarray() if sp.issparse(inputs[arg]) and fmt == "dense" else inputs[arg]
            stored[arg] = as_format(value, fmt)
    arrays, array_types = physical_inputs(stored)
    scalars = {k: v for k, v in inputs.items() if k not in stored}
    # the reference reads the same stored tensors: a dense format's pattern is every entry
    logical = {**scalars, **stored}
    for expr in (parse(entry.text), gradient(parse(entry.text), KERNEL_WRT[name], types)):
        physical, stages = optimize(expr, types, stored)
        expected = evaluate(expr, logical)
        for stage, staged in stages.items():
            derived = derived_inputs(staged, arrays, array_types)  # the transposed index of `interchange`
            env = {**arrays, **derived, **scalars} if stage != "sparsity" else logical
            assert values_equal(evaluate(staged, env), expected, rtol=1e-12, atol=1e-12), (stage, to_text(staged))


def _no_intermediate_dictionaries(expr):
    """DPS form: no let binds a built dictionary, no sum iterates a computed sum, singletons nest
    only in singletons (so every write goes straight to the result)."""
    for node in walk(expr):
        if isinstance(node, Let):
            assert not isinstance(node.value, (Sum, Singleton)), to_text(node)
        if isinstance(node, Sum):
            assert not isinstance(node.source, Sum), to_text(node)
        if isinstance(node, Singleton):
            assert isinstance(node.value, Singleton) or not any(
                isinstance(n, (Sum, Let)) for n in walk(node.value)), to_text(node)
    return True


def test_vvd_with_dense_v1_and_coo_v2_reduces_to_the_single_loop_of_section_5_3():
    V1 = np.random.default_rng(0).standard_normal(8)
    V2 = np.zeros(8)
    V2[[1, 4, 6]] = [2.0, -1.0, 3.0]
    stored = {"V1": as_format(V1, "dense"), "V2": as_format(V2, "coo")}
    types = {"V1": tensor(1), "V2": tensor(1)}
    derivative = gradient(parse(PAPER_PROGRAMS["dot_v2"].text), "V1", types)
    physical, _ = optimize(derivative, types, stored)
    assert alpha_equal(physical, parse("sum(<_, i> in (0:V2_len)) { V2_row(i) -> V2_val(i) }")), to_text(physical)


def _batax_wrt_x_on_csr(A):
    """BATAx's Jacobian w.r.t. x optimized for a CSR A: (physical program, stages, stored inputs)."""
    stored = {"A": as_format(A, "csr"), "x": as_format(np.ones(A.shape[1]), "dense")}
    types = {"beta": REAL, "A": tensor(2), "x": tensor(1)}
    derivative = gradient(parse(PAPER_PROGRAMS["batax"].text), "x", types)
    physical, stages = optimize(derivative, types, stored)
    return physical, stages, stored


def test_batax_with_csr_reduces_to_the_section_5_5_loop_nest_without_temporaries():
    A = sp.random(6, 5, density=0.4, format="csr", random_state=3)
    _, stages, stored = _batax_wrt_x_on_csr(A)
    physical = stages["cse"]  # the last pass, `interchange`, then reorders the loops (below)
    expected = parse("""
        sum(<_, i> in (0:A_len))
          let row = A_idx(A_pos(i):A_pos(i + 1)) in
          sum(<p, j> in row)
            let v1 = A_val(p) in
            sum(<q, k> in row)
              { j -> { k -> beta * v1 * A_val(q) } }""")
    assert alpha_equal(physical, expected), to_text(physical)
    arrays, _ = physical_inputs(stored)
    _no_intermediate_dictionaries(physical)
    got = evaluate(physical, {**arrays, "beta": 1.5})
    dense = A.toarray()
    assert values_equal(got, 1.5 * dense.T @ dense, rtol=1e-12, atol=1e-12)


def test_batax_interchange_makes_the_outer_loop_fix_the_result_row():
    A = sp.random(7, 5, density=0.4, format="csr", random_state=4)
    physical, _, stored = _batax_wrt_x_on_csr(A)
    expected = parse("""
        sum(<_, j> in (0:A_T_tlen))
          sum(<q, i> in A_T_tidx(A_T_tpos(j):A_T_tpos(j + 1)))
            let p = A_T_tperm(q) in
            let row = A_idx(A_pos(i):A_pos(i + 1)) in
            let v1 = A_val(p) in
            sum(<r, k> in row)
              { j -> { k -> beta * v1 * A_val(r) } }""")
    assert alpha_equal(physical, expected), to_text(physical)
    arrays, array_types = physical_inputs(stored)
    derived = derived_inputs(physical, arrays, array_types)
    dense = A.toarray()
    assert list(derived["A_T_tpos"]) == list(np.concatenate([[0], np.cumsum((dense != 0).sum(axis=0))]))
    got = evaluate(physical, {**arrays, **derived, "beta": 1.5})
    assert values_equal(got, 1.5 * dense.T @ dense, rtol=1e-12, atol=1e-12)
    # a vector result keyed by the column, or a result keyed by the row, is left alone
    spmv_t = parse("sum(<_, i> in (0:A_len)) sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1))) { j -> A_val(p) }")
    assert interchange(spmv_t, array_types) == spmv_t
    by_row = parse("sum(<_, i> in (0:A_len)) sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1))) { i -> { j -> A_val(p) } }")
    assert interchange(by_row, array_types) == by_row


from reference.generated import real_expr  # noqa: E402
from sparsad.opt.egraph import saturate  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(expr=real_expr(reals=["s"], ints=[], depth=3), seed=st.integers(0, 2**31))
def test_equality_saturation_keeps_the_meaning_of_generated_programs(expr, seed):
    rng = np.random.default_rng(seed)
    inputs = {"x": rng.uniform(-1, 1, 3), "M": rng.uniform(-1, 1, (2, 3)), "s": float(rng.uniform(0.5, 1.5))}
    saturated = saturate(expr)
    assert values_equal(evaluate(saturated, inputs), evaluate(expr, inputs), rtol=1e-10, atol=1e-10), \
        f"{to_text(expr)}\n~>\n{to_text(saturated)}"


def test_equality_saturation_hoists_invariant_factors_and_lets():
    hoisted = saturate(parse("sum(<i, a> in V) beta * (a * 2.0)"), sizes={"V": 1000})
    assert isinstance(hoisted, type(parse("a * b"))) and "beta" in to_text(hoisted).split("(")[0]
    let_hoisted = saturate(parse("sum(<i, a> in V) let t = exp(beta) in t * a"), sizes={"V": 1000})
    assert isinstance(let_hoisted, Let), to_text(let_hoisted)
    # a factor that reads the loop's value stays inside
    kept = saturate(parse("sum(<i, a> in V) exp(a) * a"))
    assert isinstance(kept, Sum)


def test_equality_saturation_removes_singleton_lookups_and_leaves_singleton_sums_to_fusion():
    # a sum over a singleton whose value may be {} (no entry) needs a guard that only types can
    # tell: that elimination is opt.fuse's, not a rule of the e-graph
    program = parse("sum(<k, v> in { 3 -> a }) v * b")
    kept = saturate(program)
    for a in (2.0, {}):
        inputs = {"a": a, "b": 5.0}
        assert values_equal(evaluate(kept, inputs), evaluate(program, inputs))
    assert to_text(fuse(program, {"a": REAL, "b": REAL})) == "a * b"
    # a body that does not vanish on {} runs only when the value is an entry
    counted = parse("sum(<k, v> in { 3 -> sum(<i, x> in V) if i < 2 then { i -> x } }) 1.0")
    guarded = fuse(counted, {"V": tensor(1)})
    assert "sum(<k" not in to_text(guarded), to_text(guarded)
    for V in ({0: 1.0, 5: 2.0}, {5: 2.0}):
        expected = 1.0 if 0 in V else 0.0
        assert values_equal(evaluate(guarded, {"V": V}), expected) and values_equal(evaluate(counted, {"V": V}), expected)
    assert "if" in to_text(saturate(parse("{ i -> a }(j)")))
    moved = saturate(parse("sum(<i, a> in V) (if i = 2 then a) * beta"), sizes={"V": 100})
    inputs = {"V": {0: 1.0, 2: 5.0}, "beta": 3.0}
    assert values_equal(evaluate(moved, inputs), 15.0)
