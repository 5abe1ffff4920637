"""Nested loops without a closed form: the inner loop becomes a compiled loop called from the outer
loop's compiled iteration (or is unrolled there when short); gradients against autograd in float64."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from helpers_coarsen import load_function, no_fallback, torch_reference  # noqa: F401
import sparsad.coarsen as coarsen

DRAWS = [np.random.default_rng(seed) for seed in (11, 12, 13)]


def worst_error(got, expected) -> float:
    scale = max(max(float(torch.as_tensor(e).abs().max()) for e in expected), 1e-300)
    return max(float((torch.as_tensor(g) - torch.as_tensor(e)).abs().max()) for g, e in zip(got, expected)) / scale


def t64(value):
    return torch.tensor(value, dtype=torch.float64)


NESTED = {
    # time stepping over a per-step fixed-point relaxation
    "relaxation_per_step": ("""
def f(x, k, dt):
    v = torch.zeros_like(x)
    for step in range(40):
        y = x.clone()
        for it in range(15):
            y = y - 0.1 * (torch.sin(y) * k - x + 0.01 * y * y)
        v = v + dt * torch.tanh(y) * v + dt * y
        x = x + dt * v
    return (x ** 2).sum() + v.sum()
""", lambda rng: (t64(rng.uniform(0, 1, 4)), t64(rng.uniform(0.2, 0.9)), t64(rng.uniform(0.01, 0.05)))),
    # N-body style: a particle loop over sources inside the time loop
    "particles_in_time_loop": ("""
def f(p0, sources, dt):
    p = p0 * 1.0
    vel = torch.zeros_like(p0)
    for step in range(25):
        force = 0.0
        for j in range(sources.shape[0]):
            d = p - sources[j]
            force = force - d / (d * d + 0.5) ** 1.5
        vel = vel + dt * force
        p = p + dt * vel
    return torch.sum(p * p) + torch.sum(vel)
""", lambda rng: (t64(rng.uniform(-1, 1, 3)), t64(rng.uniform(-2, 2, 16)), t64(rng.uniform(0.01, 0.05)))),
    # the inner loop reads the outer counter's element and the outer counter itself
    "inner_reads_outer_counter": ("""
def f(xs, w):
    h = w * 0.0
    for t in range(xs.shape[0]):
        for k in range(16):
            h = torch.tanh(w * h + xs[t] + 0.01 * t)
        h = 0.9 * h
    return h * h + w
""", lambda rng: (t64(rng.standard_normal(30)), t64(rng.uniform(0.5, 1.5)))),
    # a short inner loop (unrolled in the compiled iteration) and a traced `if` in the inner loop
    "short_inner_and_if": ("""
def f(x, a):
    s = x * 1.0
    for i in range(30):
        for j in range(2):
            s = s + 0.05 * torch.sin(a * s)
        for j in range(20):
            if torch.sum(s) > 1.0:
                s = s * 0.99
            s = s + 0.001 * torch.cos(s)
    return torch.sum(s * x)
""", lambda rng: (t64(rng.uniform(-0.5, 0.5, 3)), t64(rng.uniform(0.5, 1.5)))),
}


@pytest.fixture
def in_process(monkeypatch):
    monkeypatch.setenv("SPARSAD_COARSEN_BACKGROUND", "0")


@pytest.mark.parametrize("name", sorted(NESTED))
@pytest.mark.parametrize("numba", [False, True])
def test_nested_loops_become_nested_compiled_loops(name, numba, in_process):
    source, make = NESTED[name]
    f = load_function("import torch\n" + source)
    text = coarsen.explain(f, *make(DRAWS[0]), print_it=False)
    assert "compiled as a loop" in text and "_loop_fwd_1" in text, text
    nums = tuple(range(len(make(DRAWS[0]))))
    gradient = coarsen.grad(f, argnums=nums, numba=numba)
    for rng in DRAWS:  # (fallback warnings are errors in this module)
        args = make(rng)
        for _ in range(2):
            got = gradient(*args)
        assert worst_error(got, torch_reference(f, args, nums)) <= 1e-10, name


def test_compile_time_does_not_depend_on_the_trip_counts():
    """The same generated program for 10x the inner and outer trip counts (one symbolic iteration each)."""
    template = """
import torch
def f(x, k):
    y = x * 1.0
    for step in range(OUTER):
        z = y * 1.0
        for it in range(INNER):
            z = z - 0.1 * (torch.sin(z) * k - y)
        y = 0.5 * y + 0.5 * torch.tanh(z)
    return torch.sum(y * y)
"""
    texts = []
    for outer, inner in ((20, 15), (200, 150)):
        f = load_function(template.replace("OUTER", str(outer)).replace("INNER", str(inner)))
        text = coarsen.explain(f, t64([0.1, 0.2]), t64(0.5), print_it=False)
        texts.append(text.split("generated")[-1].replace(f"{float(outer)}", "N").replace(f"{float(inner)}", "M"))
        assert "_loop_rev_1" in text
    assert len(texts[0]) == len(texts[1])


@settings(max_examples=6, deadline=None)
@given(st.lists(st.floats(-1.0, 1.0), min_size=2, max_size=5), st.floats(0.1, 1.5), st.integers(3, 25))
def test_nested_relaxation_matches_autograd_on_drawn_inputs(values, k, outer):
    f = load_function(f"""
import torch
def f(x, k):
    y = x * 1.0
    for step in range({outer}):
        z = y * 1.0
        for it in range(13):
            z = z - 0.2 * (torch.sin(z) * k - y + 0.1 * z * z)
        y = 0.8 * y + 0.1 * torch.tanh(z) * k
    return torch.sum(y * torch.exp(0.1 * y))
""")
    args = (t64(values), t64(k))
    got = coarsen.grad(f, argnums=(0, 1), numba=False)(*args)
    assert worst_error(got, torch_reference(f, args, (0, 1))) <= 1e-10


TRIANGULAR = {
    "pairs_below": """
def f(x, a):
    s = 0.0
    for i in range(len(x)):
        for j in range(i):
            s += x[i] * x[j] * a ** (i - j)
    return s
""",
    "stop_after_the_counter": """
def f(x, a):
    s = x[0] * 0.0
    for i in range(3, len(x)):
        for j in range(2, i + 1):
            s = torch.tanh(s * a + x[j] * x[i - 1])
    return s * s
""",
}


@pytest.mark.parametrize("name", sorted(TRIANGULAR))
@pytest.mark.parametrize("numba", [False, True])
def test_an_inner_bound_from_the_outer_counter_is_a_trip_count_argument(name, numba, in_process):
    f = load_function("import torch\n" + TRIANGULAR[name])
    make = lambda rng: (t64(rng.uniform(-1, 1, 40)), t64(rng.uniform(0.3, 0.9)))  # noqa: E731
    text = coarsen.explain(f, *make(DRAWS[0]), print_it=False)
    assert "_loop_fwd_1" in text, text
    gradient = coarsen.grad(f, argnums=(0, 1), numba=numba)
    for rng in DRAWS:
        args = make(rng)
        for _ in range(2):
            got = gradient(*args)
        assert worst_error(got, torch_reference(f, args, (0, 1))) <= 1e-10, name
