"""Compiled reverse loops with `break`, the Numba tier compiled in a child process, and bounded SymPy work."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import sympy as sp
import torch

from helpers_coarsen import load_function, no_fallback, rel_err, torch_reference  # noqa: F401
import sparsad.coarsen as coarsen
from sparsad.coarsen import tiers
from sparsad.coarsen.adjoint import SIMPLIFY_MAX_DEGREE, polynomial_degree_bound

DRAWS = [np.random.default_rng(seed) for seed in (3, 4, 5, 6)]


def worst_error(got, expected) -> float:
    """Largest error relative to the largest gradient entry (a converged loop forgets its start:
    that gradient is ~1e-9 and its own relative rounding error says nothing)."""
    scale = max(max(float(torch.as_tensor(e).abs().max()) for e in expected), 1e-300)
    return max(float((torch.as_tensor(g) - torch.as_tensor(e)).abs().max()) for g, e in zip(got, expected)) / scale

# loops without a closed form that leave through a `break` on some inputs and run out on others
BREAKING_LOOPS = {
    "for_newton_break": ("""
def f(c, x0):
    x = x0 * 1.0
    for i in range(40):
        step = (x * x * x - c) / (3.0 * x * x)
        if torch.abs(step) < 1e-6:
            break
        x = x - step
    return x * c
""", lambda rng: (torch.tensor(rng.uniform(0.5, 3.0), dtype=torch.float64),
                  torch.tensor(rng.uniform(0.8, 1.5), dtype=torch.float64))),
    "while_vector_state_break": ("""
def f(x, a):
    s = x * 1.0
    k = 0
    while k < 60:
        k += 1
        s = torch.sin(s) * a + x * 0.5
        if torch.sum(s * s) > LIMIT:
            break
        s = s + 0.01 * torch.tanh(s)
    return torch.sum(s * x) + torch.sum(torch.exp(0.1 * s))
""", lambda rng: (torch.tensor(rng.uniform(-1.0, 1.0, 3), dtype=torch.float64),
                  torch.tensor(rng.uniform(0.5, 1.5), dtype=torch.float64))),
    "for_counter_elements_and_break": ("""
def f(xs, w):
    h = w * 0.0
    for t in range(xs.shape[0]):
        h = torch.tanh(w * h + xs[t] * float(t) * 0.1)
        if h > LIMIT:
            break
    return h * h + w
""", lambda rng: (torch.tensor(rng.standard_normal(30), dtype=torch.float64),
                  torch.tensor(rng.uniform(0.5, 1.5), dtype=torch.float64))),
}


@pytest.fixture
def in_process(monkeypatch):
    """Numba compiles at the first call in this process (deterministic, no child)."""
    monkeypatch.setenv("SPARSAD_COARSEN_BACKGROUND", "0")


@pytest.mark.parametrize("name", sorted(BREAKING_LOOPS))
@pytest.mark.parametrize("numba", [False, True])
def test_loops_with_break_become_compiled_loops(name, numba, in_process):
    source, make = BREAKING_LOOPS[name]
    for limit in ("0.6", "1e9"):  # leaves early (some draws) / never breaks
        f = load_function("import torch\nLIMIT = " + limit + "\n" + source)
        text = coarsen.explain(f, *make(DRAWS[0]), print_it=False)
        assert "compiled as a loop" in text, text
        nums = (0, 1)
        gradient = coarsen.grad(f, argnums=nums, numba=numba)
        for rng in DRAWS:
            args = make(rng)
            assert worst_error(gradient(*args), torch_reference(f, args, nums)) <= 1e-10, (name, limit)


def test_a_for_loop_with_break_and_a_closed_form_uses_the_recorded_trip_count():
    """The static range bound is not the trip count when the loop can break (was a silent wrong gradient)."""
    f = load_function("""
import torch
def f(xs, ys, lr, steps=100, tol=1e-6):
    w = 0.0
    for step in range(steps):
        g = (2 * xs * (w * xs - ys)).mean()
        if g.abs() < tol:
            break
        w = w - lr * g
    return ((w * xs - ys) ** 2).mean() + w
""")
    gradient = coarsen.grad(f, argnums=(0, 1, 2))
    for rng in DRAWS:
        args = (torch.tensor(rng.uniform(0, 1, 8), dtype=torch.float64),
                torch.tensor(rng.uniform(1, 2, 8), dtype=torch.float64),
                torch.tensor(rng.uniform(0.2, 0.5), dtype=torch.float64))
        for g, e in zip(gradient(*args), torch_reference(f, args, (0, 1, 2))):
            assert rel_err(g, e) <= 1e-8


def test_a_carried_variable_named_like_the_loop_counter_symbol(in_process):
    """The compiled loop's counter symbol never coincides with a carried variable (`i` here)."""
    f = load_function("""
import torch
def f(x, w):
    i = x * 0.0
    for t in range(25):
        i = torch.sin(w * i + x) + 0.01 * t * i
    return i * i
""")
    args = (torch.tensor(0.3, dtype=torch.float64), torch.tensor(0.7, dtype=torch.float64))
    assert "compiled as a loop" in coarsen.explain(f, *args, print_it=False)
    for numba in (False, True):
        got = coarsen.grad(f, argnums=(0, 1), numba=numba)(*args)
        for g, e in zip(got, torch_reference(f, args, (0, 1))):
            assert rel_err(g, e) <= 1e-12


def test_the_numba_tier_compiles_in_a_child_process_and_is_checked_before_use(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARSAD_COARSEN_BACKGROUND", "1")
    monkeypatch.setenv("SPARSAD_KERNEL_CACHE", str(tmp_path / "kernels"))
    f = load_function("""
import torch
def f(x, a):
    s = x * 1.0
    for k in range(30):
        s = torch.sin(s) * a + x
    return torch.sum(s * s)
""")
    wrapped = coarsen.symbolic(f)
    gradient = coarsen.grad(wrapped, argnums=(0, 1))
    rng = DRAWS[0]
    args = (torch.tensor(rng.uniform(-1, 1, 4), dtype=torch.float64), torch.tensor(0.8, dtype=torch.float64))
    first = gradient(*args)   # the generated torch code; Numba compiles in a child process
    compiled = next(iter(wrapped.plan(args).compiled.values()))
    assert tiers.wait(timeout=600)
    assert list((tmp_path / "kernels").glob("coarsen_*.py"))
    for rng in DRAWS:
        args = (torch.tensor(rng.uniform(-1, 1, 4), dtype=torch.float64),
                torch.tensor(rng.uniform(0.5, 1.0), dtype=torch.float64))
        got = gradient(*args)
        for g, e in zip(got, torch_reference(f, args, (0, 1))):
            assert rel_err(g, e) <= 1e-12
    assert compiled.fn.settled() and compiled.fn.direct() is not None  # the Numba tier is in use
    assert all(g.shape == e.shape for g, e in zip(first, got))


def test_simplify_is_skipped_where_its_expansions_blow_up():
    x, c = sp.symbols("x c", real=True)
    newton = x - (x ** 3 - c) / (3 * x ** 2)
    twice = newton - (newton ** 3 - c) / (3 * newton ** 2)
    assert polynomial_degree_bound(x * c + sp.sin(x) ** 2) <= SIMPLIFY_MAX_DEGREE
    assert polynomial_degree_bound(twice) > SIMPLIFY_MAX_DEGREE
    assert polynomial_degree_bound(sp.sqrt(x ** 2 + c ** 2)) <= SIMPLIFY_MAX_DEGREE


# loops without a closed form whose body holds an `if` on a traced value: compiled as loops that
# select the arm per iteration (scalar and vector state, elements read with the counter, an `if`
# without `else`, and a `break` beside the `if`)
BRANCHING_LOOPS = {
    "bounce": ("""
def f(h0, e, steps=150):
    y, v = h0, torch.zeros_like(h0)
    for _ in range(steps):
        v = v - 0.1962
        y = y + 0.02 * v
        if y < 0:
            y = -y
            v = -e * v
    return y + 0.1 * v
""", lambda rng: (torch.tensor(rng.uniform(0.5, 2.0), dtype=torch.float64),
                  torch.tensor(rng.uniform(0.6, 0.9), dtype=torch.float64))),
    "penalty_on_elements": ("""
def f(u, x0, limit):
    x = x0
    cost = 0.0
    for t in range(len(u)):
        x = x + 0.1 * (u[t] - 0.5 * x)
        cost = cost + 0.5 * u[t] ** 2
        if x > limit:
            cost = cost + 10.0 * (x - limit) ** 2
    return cost
""", lambda rng: (torch.tensor(rng.uniform(-1.0, 2.0, 90), dtype=torch.float64),
                  torch.tensor(rng.uniform(0.0, 0.5), dtype=torch.float64),
                  torch.tensor(rng.uniform(0.3, 0.8), dtype=torch.float64))),
    "vector_state_branch_and_break": ("""
def f(x, a):
    s = x * 1.0
    for k in range(70):
        if torch.sum(s) > 0.5:
            s = 0.9 * s - a * torch.sin(s)
        else:
            s = s + a * torch.cos(s) * x
        if torch.sum(s * s) > 50.0:
            break
    return torch.sum(s * x)
""", lambda rng: (torch.tensor(rng.uniform(-1.0, 1.0, 3), dtype=torch.float64),
                  torch.tensor(rng.uniform(0.2, 0.6), dtype=torch.float64))),
}


@pytest.mark.parametrize("name", sorted(BRANCHING_LOOPS))
@pytest.mark.parametrize("numba", [False, True])
def test_loops_with_a_traced_if_become_compiled_loops_that_select(name, numba, in_process):
    source, make = BRANCHING_LOOPS[name]
    f = load_function("import torch\n" + source)
    text = coarsen.explain(f, *make(DRAWS[0]), print_it=False)
    assert "compiled as a loop" in text and "unrolled" not in text.split("closed forms and loop handling")[1].split(
        "compiled as a loop")[1], text
    nums = tuple(range(len(make(DRAWS[0]))))
    gradient = coarsen.grad(f, argnums=nums, numba=numba)
    for rng in DRAWS:  # (fallback warnings are errors in this module: no_fallback)
        args = make(rng)
        for _ in range(2):  # (the second call: the Numba primal and the ready-made call)
            got = gradient(*args)
        assert worst_error(got, torch_reference(f, args, nums)) <= 1e-10, name


def test_an_if_inside_a_nested_loop_is_eligible_and_right():
    """The nested loop (with its own `if`) is compiled or unrolled inside the outer iteration."""
    from sparsad.coarsen import revloop
    from sparsad.coarsen.frontend import trace

    f = load_function("""
import torch
def f(x):
    s = x * 1.0
    for i in range(20):
        for j in range(3):
            if s > 1.0:
                s = s * 0.5
            s = s + torch.sin(s)
    return s
""")
    graph = trace(f, (torch.tensor(0.3, dtype=torch.float64),))
    assert revloop.eligible(graph.loops[-1]) is None
    for x in (0.3, 1.2, -0.7):
        args = (torch.tensor(x, dtype=torch.float64),)
        with warnings.catch_warnings():  # (a short inner loop with an `if` is unrolled: over budget, falls back)
            warnings.simplefilter("ignore")
            got = coarsen.grad(f, argnums=0, numba=False)(*args)
        assert worst_error([got], torch_reference(f, args, (0,))) <= 1e-10


def test_an_if_only_inside_a_compiled_loop_needs_no_primal_run(in_process, monkeypatch):
    """The select replaces the recorded decisions: after the first call, grad runs no primal at all."""
    source, make = BRANCHING_LOOPS["penalty_on_elements"]
    f = load_function("import torch\n" + source)
    fn = coarsen.Coarsened(f)
    gradient = coarsen.grad(fn, argnums=(0, 1, 2))
    args = make(DRAWS[0])
    for _ in range(2):
        gradient(*args)
    plan = fn.plan(args)
    assert plan.needs_record and not plan.elevations[0].params

    def no_primal(*a):
        raise AssertionError("the primal ran")

    monkeypatch.setattr(plan, "run", no_primal)
    monkeypatch.setattr(plan, "fast_primal", no_primal)
    for rng in DRAWS[1:]:
        args = make(rng)
        assert worst_error(gradient(*args), torch_reference(f, args, (0, 1, 2))) <= 1e-10
