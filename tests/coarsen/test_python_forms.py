"""The Python people write: loop state from Python numbers and constant tensors, constructors with dtype/device,
helpers, keywords, methods, comprehensions, iteration forms.  Each coarsens (no fallback) and matches autograd
(and jax.grad for the JAX versions) in float64 on several input draws."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers_coarsen import load_function, no_fallback, rel_err, torch_reference  # noqa: F401
import sparsad.coarsen as coarsen

DRAWS = [np.random.default_rng(seed) for seed in (11, 12, 13)]

PROGRAMS = {
    "python_float_state": """
def f(x):
    s = 0.0
    t = 1.0
    for i in range(x.shape[0]):
        s = s + x[i] * t
        t = t * 0.5
    return s * s
""",
    "python_int_state_in_while": """
def f(x):
    total = 0
    k = 0
    while k < 6:
        total = total + torch.sum(torch.sin(x * k))
        k += 1
    return total
""",
    "constant_tensor_state": """
def f(x):
    s = torch.tensor(0.0, dtype=x.dtype, device=x.device)
    for i in range(5):
        s = s + torch.sum(torch.exp(-x * i))
    return s
""",
    "zeros_like_and_dtype_constructors": """
def f(x):
    acc = torch.zeros_like(x)
    ones = torch.ones(x.shape[0], dtype=x.dtype, device=x.device)
    base = torch.full((x.shape[0],), 0.5, dtype=x.dtype)
    for i in range(4):
        acc = acc + torch.tanh(x) * base + ones * 0.1
    return torch.sum(acc * acc)
""",
    "new_zeros_and_float_counter": """
def f(x):
    v = x.new_zeros(x.shape)
    for i in range(3):
        v = v * 0.9 + x * float(i + 1)
    return (v ** 2).sum()
""",
    "helpers_inlined_recursively": """
def square(u):
    return u * u

def energy(u, k=2.0):
    return k * torch.sum(square(u))

def f(x):
    return energy(torch.sin(x), k=3.0) + energy(x)
""",
    "list_comprehension_and_generator": """
def f(x):
    terms = [x[i] * x[i + 1] for i in range(x.shape[0] - 1)]
    return sum(terms) + sum(torch.exp(x[i]) for i in range(2))
""",
    "zip_enumerate_reversed": """
def f(x, w):
    s = 0.0
    for k, (a, b) in enumerate(zip(x, w)):
        s = s + a * b * (k + 1)
    for i in reversed(range(3)):
        s = s + x[i] * i
    for i in range(3, 0, -1):
        s = s * 0.5 + w[i]
    return s
""",
    "continue_on_a_traced_test": """
def f(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] < 0:
            continue
        s = s + x[i] ** 2
    return s
""",
    "triangular_inner_bound": """
def f(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(i):
            s = s + x[i] * x[j]
    return s
""",
    "computed_reversed_index_horner": """
def f(x):
    n = x.shape[0]
    acc = torch.zeros((), dtype=x.dtype)
    for i in range(n):
        acc = acc * 0.7 + x[n - 1 - i] * (i + 1)
    return acc
""",
    "ifs_on_python_values_and_clamp_where": """
def f(x, mode='soft'):
    if mode == 'soft':
        y = torch.clamp(x, min=-0.5, max=0.5)
    else:
        y = x
    return torch.sum(torch.where(y > 0, y * y, -y))
""",
}


def _load(name):
    return load_function("import torch\n" + PROGRAMS[name])


def _args(name, rng):
    x = torch.tensor(rng.uniform(-1.0, 1.0, 5), dtype=torch.float64)
    if name == "zip_enumerate_reversed":
        return (x, torch.tensor(rng.uniform(-1.0, 1.0, 5), dtype=torch.float64))
    return (x,)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_written_as_people_write_it_coarsens_and_matches_autograd(name):
    f = _load(name)
    wrapped = coarsen.symbolic(f)
    gradient = coarsen.grad(wrapped, argnums=0)
    for rng in DRAWS:
        args = _args(name, rng)
        (expected,) = torch_reference(f, args, (0,))
        assert rel_err(gradient(*args), expected) <= 1e-11
        leaves = [a.clone().requires_grad_(i == 0) for i, a in enumerate(args)]
        out = wrapped(*leaves)
        assert torch.allclose(out.detach(), f(*args), rtol=1e-13, atol=1e-15)
        out.backward()
        assert rel_err(leaves[0].grad, expected) <= 1e-11
    assert wrapped._plans and not wrapped._disabled


LOOPS_WITHOUT_CLOSED_FORM = {
    "logistic_map": ("""
def f(x, r):
    for i in range(100):
        x = r * x * (1.0 - x)
    return torch.sum(x)
""", lambda rng: (torch.tensor(rng.uniform(0.1, 0.9, 3), dtype=torch.float64),
                  torch.tensor(rng.uniform(2.5, 3.5), dtype=torch.float64))),
    "rnn_reading_inputs_by_counter": ("""
def f(x, w, h0):
    h = h0 * 1.0
    for t in range(x.shape[0]):
        h = torch.tanh(w * h + x[t] + 0.1 * x[x.shape[0] - 1 - t])
    return h * h
""", lambda rng: (torch.tensor(rng.standard_normal(40), dtype=torch.float64),
                  torch.tensor(rng.uniform(0.3, 0.9), dtype=torch.float64),
                  torch.tensor(rng.uniform(-0.5, 0.5), dtype=torch.float64))),
    "while_with_python_counter_and_vector_state": ("""
def f(x, a):
    s = x * 1.0
    v = torch.zeros_like(x)
    k = 0
    while k < 70:
        v = 0.9 * v + torch.sin(s) * a
        s = s + 0.05 * v + 0.01 * torch.tanh(torch.sum(s * s))
        k += 1
    return torch.sum(s * v)
""", lambda rng: (torch.tensor(rng.uniform(-0.5, 0.5, 3), dtype=torch.float64),
                  torch.tensor(rng.uniform(0.2, 0.8), dtype=torch.float64))),
}


@pytest.mark.parametrize("name", sorted(LOOPS_WITHOUT_CLOSED_FORM))
def test_loops_without_closed_form_become_compiled_loops_not_unrolled(name):
    source, make = LOOPS_WITHOUT_CLOSED_FORM[name]
    f = load_function("import torch\n" + source)
    args = make(DRAWS[0])
    text = coarsen.explain(f, *args, print_it=False)
    assert "compiled as a loop" in text and "unrolled" not in text.split("compiled as a loop")[-1]
    nums = tuple(range(len(args)))
    for numba in (False, True) if name == "logistic_map" else (False,):
        gradient = coarsen.grad(f, argnums=nums, numba=numba)
        for rng in DRAWS:
            args = make(rng)
            got = gradient(*args)
            for g, e in zip(got, torch_reference(f, args, nums)):
                assert rel_err(g, e) <= 1e-10


def test_a_long_loop_with_break_and_no_closed_form_is_not_unrolled_for_minutes():
    f = load_function("import torch\n"
                      "def f(x, a):\n"
                      "    s = x * 1.0\n"
                      "    for i in range(300):\n"
                      "        if torch.sum(s * s) > 100.0:\n"
                      "            break\n"
                      "        s = torch.sin(s) * a + x\n"
                      "    return s.sum()\n")
    x, a = torch.tensor([0.3, -0.4], dtype=torch.float64), torch.tensor(0.5, dtype=torch.float64)
    assert "compiled as a loop" in coarsen.explain(f, x, a, print_it=False)  # one symbolic iteration
    got = coarsen.grad(f)(x, a)
    (expected,) = torch_reference(f, (x, a), (0,))
    assert rel_err(got, expected) <= 1e-12


def test_keyword_arguments_and_defaults():
    f = load_function("import torch\ndef f(x, scale=1.0, *, unused=None):\n    return torch.sum(torch.sin(x) * scale)\n")
    g = load_function("import torch\ndef g(x, scale=1.0):\n    return torch.sum(torch.sin(x) * scale)\n", "g")
    for rng in DRAWS:
        x = torch.tensor(rng.uniform(-1, 1, 4), dtype=torch.float64)
        got = coarsen.grad(g)(x, scale=2.5)
        assert rel_err(got, 2.5 * torch.cos(x)) <= 1e-14
        leaf = x.clone().requires_grad_()
        coarsen.symbolic(g)(x=leaf, scale=-1.5).backward()
        assert rel_err(leaf.grad, -1.5 * torch.cos(x)) <= 1e-14
    del f


def test_methods_are_coarsened_with_the_instance_state_as_part_of_the_key():
    module = load_function("""
import torch
import sparsad.coarsen as coarsen

class Spring:
    def __init__(self, k):
        self.k = k

    @coarsen.symbolic
    def energy(self, x):
        e = 0.0
        for i in range(x.shape[0] - 1):
            e = e + self.k * (x[i + 1] - x[i]) ** 2
        return e
""", "Spring")
    spring = module(2.0)
    for rng in DRAWS:
        x = torch.tensor(rng.uniform(-1, 1, 5), dtype=torch.float64)
        spring.k = float(rng.uniform(0.5, 3.0))  # an attribute changed between calls: a new plan
        leaf = x.clone().requires_grad_()
        spring.energy(leaf).backward()
        (expected,) = torch_reference(lambda v: spring.energy.fn(spring, v), (x,), (0,))
        assert rel_err(leaf.grad, expected) <= 1e-12
        got = coarsen.grad(spring.energy.fn, argnums=1)(spring, x)
        assert rel_err(got, expected) <= 1e-12


jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

JAX_PROGRAMS = {
    "python_float_state": """
def f(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = s + jnp.sin(x[i]) * (i + 1)
    return s
""",
    "zeros_like_and_helper": """
def step(v, x):
    return v * 0.8 + jnp.tanh(x)

def f(x):
    v = jnp.zeros_like(x)
    for i in range(4):
        v = step(v, x)
    return jnp.sum(v * v)
""",
}


@pytest.mark.parametrize("name", sorted(JAX_PROGRAMS))
def test_the_same_forms_on_jax_arrays(name, x64):
    f = load_function("import jax.numpy as jnp\n" + JAX_PROGRAMS[name])
    wrapped = coarsen.symbolic(f)
    for rng in DRAWS:
        x = jnp.asarray(rng.uniform(-1, 1, 5))
        expected = jax.grad(f)(x)
        got = coarsen.grad(wrapped)(x)
        spliced = jax.grad(lambda v: wrapped(v))(x)
        for g in (got, spliced):
            assert float(jnp.max(jnp.abs(g - expected))) <= 1e-12 * max(1.0, float(jnp.max(jnp.abs(expected))))
    assert wrapped._plans and not wrapped._disabled
