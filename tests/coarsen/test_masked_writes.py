"""Writes at the loop counter (``x[i] = v``) and reads back (``x[i - 1]``) in loops too long to unroll
while tracing: the vector is carried whole and each access is a select on the counter, so the loop stays
one traced loop (compiled as a loop).  Gradients against autograd in float64 on drawn inputs."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from helpers_coarsen import load_function, no_fallback, torch_reference  # noqa: F401
import sparsad.coarsen as coarsen
from sparsad.coarsen.plan import CoarsenFallbackWarning


def t64(value):
    return torch.tensor(value, dtype=torch.float64)


def worst_error(got, expected) -> float:
    scale = max(max(float(torch.as_tensor(e).abs().max()) for e in expected), 1e-300)
    return max(float((torch.as_tensor(g) - torch.as_tensor(e)).abs().max()) for g, e in zip(got, expected)) / scale


WRITES = {
    "write_only_buffer": ("""
def f(a, b):
    out = torch.zeros(N, dtype=torch.float64)
    h = a * 1.0
    for i in range(N):
        h = torch.tanh(h * b + 0.1)
        out[i] = h * h
    return (out * torch.arange(N)).sum() / N
""", lambda rng: (t64(rng.uniform(-1, 1)), t64(rng.uniform(0.5, 1.5)))),
    "read_previous_entry": ("""
def f(x0, k, dt):
    xs = torch.zeros(N, dtype=x0.dtype)
    xs[0] = x0
    for i in range(1, N):
        prev = xs[i - 1].clone()
        xs[i] = prev + dt * (-k * prev + torch.sin(prev))
    return torch.sum(xs ** 2) / N
""", lambda rng: (t64(rng.uniform(0.2, 1)), t64(rng.uniform(0.2, 1)), t64(rng.uniform(0.01, 0.1)))),
    "smoothing_with_input_entries": ("""
def f(x, alpha):
    out = torch.zeros_like(x)
    out[0] = x[0]
    for i in range(1, x.shape[0]):
        out[i] = alpha * out[i - 1].clone() + (1 - alpha) * torch.tanh(x[i])
    return torch.sum((out - x) ** 2)
""", lambda rng: (t64(rng.standard_normal(90)), t64(rng.uniform(0.1, 0.9)))),
}



@pytest.mark.parametrize("name", sorted(WRITES))
def test_writes_at_the_counter_in_long_loops_coarsen_without_unrolling(name):
    source, make = WRITES[name]
    f = load_function("import torch\nN = 90\n" + source)
    args = make(np.random.default_rng(0))
    text = coarsen.explain(f, *args, print_it=False)
    assert "compiled as a loop" in text and "unrolled while tracing" not in text, text
    nums = tuple(range(len(args)))
    gradient = coarsen.grad(f, argnums=nums, numba=False)
    for seed in (1, 2, 3):
        args = make(np.random.default_rng(seed))
        assert worst_error(gradient(*args), torch_reference(f, args, nums)) <= 1e-10, name


def test_writes_at_the_counter_with_numba(monkeypatch):
    monkeypatch.setenv("SPARSAD_COARSEN_BACKGROUND", "0")
    source, make = WRITES["smoothing_with_input_entries"]
    f = load_function("import torch\nN = 90\n" + source)
    gradient = coarsen.grad(f, argnums=(0, 1), numba=True)
    for seed in (4, 5):
        args = make(np.random.default_rng(seed))
        for _ in range(2):
            got = gradient(*args)
        assert worst_error(got, torch_reference(f, args, (0, 1))) <= 1e-10


@settings(max_examples=5, deadline=None)
@given(st.integers(65, 120), st.integers(-3, 2), st.floats(0.1, 0.9))
def test_positions_shifted_from_the_counter(n, shift, a):
    """``x[i + c]`` for several c (negative Python indices included when every one is negative)."""
    f = load_function(f"""
import torch
def f(x, a):
    y = torch.zeros({n + 8}, dtype=torch.float64)
    h = x * 1.0
    for i in range(3, {n}):
        h = torch.sin(h) * a + 0.1
        y[i + ({shift})] = h
    return torch.sum(y * torch.cos(torch.arange({n + 8}, dtype=torch.float64) * 0.1))
""")
    args = (t64(0.3), t64(a))
    got = coarsen.grad(f, argnums=(0, 1), numba=False)(*args)
    assert worst_error(got, torch_reference(f, args, (0, 1))) <= 1e-10


def test_wrapping_positions_fall_back_with_the_line():
    f = load_function("""
import torch
def f(x):
    y = torch.zeros(100, dtype=torch.float64)
    for i in range(100):
        y[i - 50] = torch.sin(x) * i
    return y.sum()
""")
    with pytest.warns(CoarsenFallbackWarning, match=r"generated_\d+\.py:\d+: .*wrapping"):
        got = coarsen.grad(f, argnums=0, numba=False)(t64(0.4))
    assert abs(float(got) - float(torch_reference(f, (t64(0.4),), (0,))[0])) <= 1e-9 * abs(float(got))


APPENDS = {
    "trajectory_list": ("""
def f(x0, k, dt):
    x = x0
    v = torch.tensor(0.0, dtype=torch.float64)
    traj = []
    for t in range(150):
        a = -k * torch.sin(x) - 0.1 * v
        v = v + dt * a
        x = x + dt * v
        traj.append(x)
    traj = torch.stack(traj)
    return ((traj - 0.5) ** 2).mean()
""", lambda rng: (t64(rng.uniform(0.2, 1)), t64(rng.uniform(0.2, 1)), t64(rng.uniform(0.01, 0.1)))),
    "losses_after_a_first_item": ("""
def f(w, xs, ys):
    losses = [w * 0.0]
    for i in range(1, xs.shape[0]):
        w = w - 0.05 * (w * xs[i] - ys[i]) * xs[i]
        losses.append((w * xs[i] - ys[i]) ** 2)
    return torch.stack(losses).sum() / len(losses)
""", lambda rng: (t64(rng.uniform(-1, 1)), t64(rng.standard_normal(80)), t64(rng.standard_normal(80)))),
}


@pytest.mark.parametrize("name", sorted(APPENDS))
def test_appends_in_long_loops_become_a_preallocated_buffer(name):
    source, make = APPENDS[name]
    f = load_function("import torch\n" + source)
    args = make(np.random.default_rng(0))
    text = coarsen.explain(f, *args, print_it=False)
    assert "compiled as a loop" in text and "unrolled while tracing" not in text, text
    nums = tuple(range(len(args)))
    gradient = coarsen.grad(f, argnums=nums, numba=False)
    for seed in (1, 2):
        args = make(np.random.default_rng(seed))
        assert worst_error(gradient(*args), torch_reference(f, args, nums)) <= 1e-10, name


def test_a_list_read_inside_the_loop_is_not_rewritten():
    """``xs[-1]`` inside the loop would read the buffer's unfilled end: the loop falls back instead."""
    f = load_function("""
import torch
def f(x):
    xs = [x]
    h = x * 1.0
    for i in range(100):
        h = torch.sin(h) + 0.01 * xs[-1]
        xs.append(h)
    return torch.stack(xs).sum()
""")
    with pytest.warns(CoarsenFallbackWarning, match=r"generated_\d+\.py:\d+: .*more than 64"):
        got = coarsen.grad(f, argnums=0, numba=False)(t64(0.4))
    assert abs(float(got) - float(torch_reference(f, (t64(0.4),), (0,))[0])) <= 1e-9 * abs(float(got))
