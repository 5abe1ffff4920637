"""In-place updates seen through another name: ``t += v`` on a tensor that another variable, a list or a
view also refers to, and writes through a slice of a constant tensor (``z = torch.zeros(n)[1:]``).

Torch updates the one tensor in place, so every other reference sees the new value; coarsening rebinds a
name.  Where the two would differ the function falls back, naming its line.  These cases used to give
silently wrong gradients whenever the first call (the one checked against autograd) happened not to
expose the difference: a traced ``if`` not taken, a loop that ran no iteration, a written value of 0."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from helpers_coarsen import load_function, rel_err, torch_reference
import sparsad.coarsen as coarsen
from sparsad.coarsen.plan import CoarsenFallbackWarning


def _args(sign: float, n: int = 6, seed: int = 0):
    """x with sum(x) of the given sign, and a scalar a."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    x = x - x.mean() + sign * 0.5
    return torch.tensor(x, dtype=torch.float64), torch.tensor(rng.uniform(0.1, 0.9), dtype=torch.float64)


# (source, the line the fallback names): each is right for sum(x) < 0 and differs for sum(x) > 0
ALIASED = {
    "aug_assign_through_an_alias_in_a_traced_if": ("""
import torch

def f(x, a):
    y = x * 1.0
    z = y
    if torch.sum(x) > 0:
        z += a
    return torch.sum(y * y)
""", 8),
    "aug_assign_through_an_alias_in_a_while_loop": ("""
import torch

def f(x, a):
    y = x * 1.0
    z = y
    s = torch.sum(x)
    while s > 0:
        z *= a
        s = s - 1.0
    return torch.sum(y * y)
""", 9),
    "aug_assign_of_a_list_entry_alias": ("""
import torch

def f(x, a):
    y = x * 1.0
    kept = [y]
    if torch.sum(x) > 0:
        y -= a
    return torch.sum(kept[0] * kept[0]) + torch.sum(y)
""", 8),
    "write_through_a_slice_of_a_constant": ("""
import torch

def f(x, a):
    y = torch.zeros(6, dtype=x.dtype)
    z = y[1:]
    z[1] = torch.where(torch.sum(x) > 0, a * 3.0, 0.0)
    return torch.sum(y * y) + torch.sum(x * x)
""", 7),
    "write_into_a_constant_another_name_views": ("""
import torch

def f(x, a):
    m = torch.zeros(3, 6, dtype=x.dtype)
    row = m[1]
    m[1] = torch.where(torch.sum(x) > 0, a * x, 0.0 * x)
    return torch.sum(row * row) + torch.sum(x)
""", 7),
}


@pytest.mark.parametrize("name", sorted(ALIASED))
def test_in_place_updates_seen_through_another_name_fall_back_with_their_line(name):
    source, line = ALIASED[name]
    f = load_function(source)
    gradient = coarsen.grad(f, argnums=(0, 1), numba=False)
    with pytest.warns(CoarsenFallbackWarning, match=rf"generated_\d+\.py:{line}: .*in place"):
        for sign in (-1.0, 1.0, 1.0):   # the first call cannot tell; the later ones differ
            args = _args(sign)
            got = gradient(*args)
            for g, e in zip(got, torch_reference(f, args, (0, 1))):
                assert rel_err(g, e) <= 1e-12, (name, sign)


def test_an_argument_updated_in_place_falls_back():
    """``w += x`` changes the caller's tensor in torch (the next call sees it): never coarsened."""
    f = load_function("""
import torch

def f(x, w):
    w += x
    return torch.sum(w * w)
""")
    x, w = _args(1.0)[0], _args(-1.0, seed=1)[0]
    with pytest.warns(CoarsenFallbackWarning, match=r"generated_\d+\.py:5: .*'w' in place, which is an argument"):
        got = coarsen.grad(f, argnums=0, numba=False)(x, w.clone())
    assert rel_err(got, torch_reference(f, (x, w.clone()), (0,))[0]) <= 1e-12


UNSHARED = """
import torch

def f(x, a):
    acc = torch.zeros_like(x)
    s = a * 0.0
    for i in range({n}):
        acc += torch.sin(x * a + i)
        s += torch.sum(acc) * 0.1
    y = x * 1.0
    y *= a
    return torch.sum(acc * y) + s
"""


@settings(max_examples=4, deadline=None)
@given(st.integers(1, 80), st.integers(0, 2 ** 16))
def test_in_place_updates_nobody_else_sees_still_coarsen(n, seed):
    f = load_function(UNSHARED.format(n=n))
    args = _args(1.0, seed=seed)
    with __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("error", CoarsenFallbackWarning)
        got = coarsen.grad(f, argnums=(0, 1), numba=False)(*args)
    for g, e in zip(got, torch_reference(f, args, (0, 1))):
        assert rel_err(g, e) <= 1e-10
