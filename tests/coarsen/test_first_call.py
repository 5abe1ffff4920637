"""First-call cost independent of the trip count: loops over tensor rows stay loops, SymPy's
simplifier runs only where its cost is bounded, deep chains reach no recursion limit, and a
symbolic stage that overruns its budget falls back with a warning (never hangs, never a wrong
gradient).  Costs are checked structurally (sizes of the traced and symbolic programs), not timed."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers_coarsen import load_function, rel_err, torch_reference
import sparsad.coarsen as coarsen
from sparsad.coarsen import budget, ssa
from sparsad.coarsen.plan import CoarsenFallbackWarning, build_plan
from sparsad.coarsen.symbolic import polynomial_degree_bound, simplify_is_bounded, tree_size

ROW_LOOPS = {
    "rows": """
import torch

def f(xs, w):
    h = 0.0
    for x in xs:
        h = torch.tanh(w * h + x)
    return h * h
""",
    "zip_rows": """
import torch

def f(xs, ys, w):
    h = torch.zeros_like(w)
    loss = 0.0
    for x, y in zip(xs, ys):
        h = torch.tanh(w * h + 0.5 * x)
        loss = loss + (h.sum() - y) ** 2
    return loss
""",
    "enumerate_reversed": """
import torch

def f(xs, w):
    s = 0.0
    for i, x in enumerate(reversed(xs), 1):
        s = torch.sin(s * w) + x / i
    return s
""",
    "zip_range": """
import torch

def f(xs, w):
    acc = 0.0
    for k, x in zip(range(2, 1000), xs):
        acc = acc * 0.9 + w * x * torch.sin(x) + 0.01 * k
    return acc
""",
}


def _args(name: str, n: int, rng) -> tuple:
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    if name == "zip_rows":
        return t(rng.standard_normal(n)), t(rng.standard_normal(n)), t(rng.uniform(0.2, 0.9, 3))
    return t(rng.standard_normal(n)), t(rng.uniform(0.2, 0.9))


def _argnums(name: str) -> tuple:
    return (0, 1, 2) if name == "zip_rows" else (0, 1)


@pytest.mark.parametrize("name", sorted(ROW_LOOPS))
def test_iterating_over_rows_is_one_traced_loop_whatever_the_length(name):
    fn = load_function(ROW_LOOPS[name])
    rng = np.random.default_rng(0)
    sizes = []
    for n in (30, 150):
        plan = build_plan(fn, _args(name, n, rng), 30, True)
        assert len(plan.graph.loops) == 1 and plan.graph.loops[0].trip == n  # not unrolled while tracing
        elev = plan.elevation(None)
        sizes.append(len(elev.segments))
    assert sizes[0] == sizes[1]  # the symbolic program does not grow with the trip count


@settings(max_examples=6, deadline=None)
@given(name=st.sampled_from(sorted(ROW_LOOPS)), n=st.integers(1, 90), seed=st.integers(0, 2 ** 16))
def test_row_loops_match_autograd(name, n, seed):
    fn = load_function(ROW_LOOPS[name])
    args = _args(name, n, np.random.default_rng(seed))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        got = coarsen.grad(fn, _argnums(name), numba=False)(*args)
    for g, e in zip(got, torch_reference(fn, args, _argnums(name))):
        assert rel_err(g, e) < 1e-10


def test_a_row_loop_the_body_cannot_trace_as_a_loop_is_unrolled_while_tracing():
    fn = load_function("""
import torch

def f(xs):
    total = 0.0
    partial = []
    for v in xs:
        total = total + v
        partial.append(total)
    return torch.sin(torch.stack(partial)).sum()
""")
    xs = torch.tensor(np.random.default_rng(1).standard_normal(12), dtype=torch.float64)
    plan = build_plan(fn, (xs,), 30, True)
    assert not plan.graph.loops and any("unrolled while tracing" in n for n in plan.graph.notes)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        got = coarsen.grad(fn, 0, numba=False)(xs)
    assert rel_err(got, torch_reference(fn, (xs,), (0,))[0]) < 1e-12


def test_rows_of_a_matrix_are_unrolled_while_tracing_when_short():
    fn = load_function("""
import torch

def f(m, w):
    acc = 0.0
    for a, b in m:
        acc = acc * 0.9 + w * a * b
    return acc
""")
    m = torch.tensor(np.random.default_rng(4).standard_normal((20, 2)), dtype=torch.float64)
    w = torch.tensor(0.7, dtype=torch.float64)
    assert not build_plan(fn, (m, w), 30, True).graph.loops
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        got = coarsen.grad(fn, (0, 1), numba=False)(m, w)
    for g, e in zip(got, torch_reference(fn, (m, w), (0, 1))):
        assert rel_err(g, e) < 1e-12


def test_simplify_is_skipped_on_trigonometric_and_large_expressions():
    x, y = sp.symbols("x y", real=True)
    assert simplify_is_bounded(x * y + x ** 2)
    assert not simplify_is_bounded(0.05 * sp.sin(x) * sp.cos(y) + x)   # trigsimp: unbounded
    assert not simplify_is_bounded(sp.tanh(x) * y)
    assert not simplify_is_bounded(sum(sp.Symbol(f"a{k}") * x ** k for k in range(20)))  # too large
    assert not simplify_is_bounded((x + y) ** 9)                                          # too high a degree


def test_sizes_of_deep_expressions_reach_no_recursion_limit():
    x = sp.Symbol("x", real=True)
    deep = x
    for k in range(3000):  # a chain 3000 deep (sympy keeps exp(exp(...)) nested)
        deep = sp.exp(deep)
    assert tree_size(deep) == 3000
    assert polynomial_degree_bound(deep) == 1


def test_loop_dependencies_of_a_long_chain_reach_no_recursion_limit():
    node = ssa.Input((), "x", 0)
    for _ in range(20000):
        node = ssa.Op((), "sin", (node,))
    assert ssa.loop_dependencies(node, {}) == frozenset()


def test_a_deep_chain_unrolled_while_tracing_elevates_without_recursion_error():
    fn = load_function("""
import torch

def f(x, w):
    h = 0.0
    outs = []
    for v in x:
        a = torch.sigmoid(w * v + h)
        b = torch.tanh(a * h + v)
        h = (1 - a) * h + a * b
        outs.append(h)
    return torch.stack(outs).sum()
""")
    rng = np.random.default_rng(2)
    args = (torch.tensor(rng.standard_normal(60), dtype=torch.float64), torch.tensor(0.4, dtype=torch.float64))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        got = coarsen.grad(fn, (0, 1), numba=False)(*args)
    for g, e in zip(got, torch_reference(fn, args, (0, 1))):
        assert rel_err(g, e) < 1e-10


def test_budget_overrun_falls_back_with_a_warning_naming_the_function(monkeypatch):
    monkeypatch.setenv("SPARSAD_COARSEN_BUDGET_S", "0")
    fn = load_function(ROW_LOOPS["rows"])
    args = _args("rows", 20, np.random.default_rng(3))
    with pytest.warns(CoarsenFallbackWarning, match=r"f falls back to plain autograd: .*symbolic trace took more "
                                                    r"than 0 s of CPU time"):
        got = coarsen.grad(fn, (0, 1), numba=False)(*args)
    for g, e in zip(got, torch_reference(fn, args, (0, 1))):
        assert rel_err(g, e) < 1e-14  # plain autograd's gradient


def test_budget_stages_nest_and_reset():
    with budget.symbolic_stage("outer", seconds=100.0):
        with budget.symbolic_stage("inner", seconds=0.0):  # inside: the outer budget applies
            budget.check()
    budget.check()  # outside any stage: never raises
    with pytest.raises(budget.SymbolicBudgetExceeded, match="elevation"):
        with budget.symbolic_stage("elevation", seconds=0.0):
            budget.check()
    budget.check()


def test_row_loops_on_jax_arrays_stay_unrolled_while_tracing_when_short():
    jax = pytest.importorskip("jax")
    fn = load_function("""
import jax.numpy as jnp

def f(xs, w):
    h = 0.0
    for i, x in enumerate(xs):
        h = jnp.tanh(w * h + x * (i + 1) * 0.1)
    return h * h
""")
    with jax.enable_x64(True):
        xs = jax.numpy.asarray(np.random.default_rng(5).standard_normal(30))
        w = jax.numpy.asarray(0.7)
        assert not build_plan(fn, (xs, w), 30, True).graph.loops  # (JAX has no compiled loops)
        with warnings.catch_warnings():
            warnings.simplefilter("error", CoarsenFallbackWarning)
            got = coarsen.grad(fn, (0, 1))(xs, w)
        expected = jax.grad(fn, (0, 1))(xs, w)
    for g, e in zip(got, expected):
        assert rel_err(torch.as_tensor(np.array(g)), torch.as_tensor(np.array(e))) < 1e-12
