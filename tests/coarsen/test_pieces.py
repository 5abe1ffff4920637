"""Tensors assembled from pieces and the other forms of issue 13 item 3: ``torch.stack``/``cat`` of traced
values, lists grown with ``append``, writes ``t[i] = v``, ``@`` of small tensors, vector max / softmax /
logsumexp, local ``def``/``lambda`` helpers, loop counters used as Python ints (``i % 2``, ``range(i + 1, n)``,
``math.factorial(k)``), constant vectors (``arange``), bound methods.  Each program is written as a user
writes it; it must coarsen (no fallback) and match torch autograd (and ``jax.grad`` for the JAX twins) in
float64 on several draws.  What cannot be coarsened faithfully (writes seen through another name, copies
out of the graph) must fall back with a warning naming the line, and still give autograd's gradient."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from helpers_coarsen import load_function, rel_err, torch_reference
import sparsad.coarsen as coarsen
from sparsad.coarsen.plan import CoarsenFallbackWarning

DRAWS = (21, 22, 23)

PROGRAMS = {
    "stack_of_outputs_appended_in_a_loop": """
def f(x, w):
    h = torch.zeros(())
    outs = []
    for t in range(x.shape[0]):
        h = torch.tanh(w * h + x[t])
        outs.append(h)
    return torch.stack(outs).pow(2).mean()
""",
    "cat_of_slices_as_loop_state": """
def f(x, w):
    v = torch.zeros_like(x)
    for _ in range(3):
        d = x[1:] - x[:-1]
        v = v + 0.1 * (torch.cat([w * d, torch.zeros(1, dtype=x.dtype)]) - torch.cat([torch.zeros(1, dtype=x.dtype), w * d]))
        x = x + 0.1 * v
    return (x ** 2).sum()
""",
    "stacked_state_vector_and_dot": """
def f(x, w):
    s = x[:2]
    cost = torch.tensor(0.0, dtype=x.dtype)
    for t in range(4):
        u = -torch.dot(x[2:4], s)
        s = torch.stack([s[0] + 0.1 * s[1], s[1] + 0.1 * (u - w * s[1])])
        cost = cost + torch.dot(s, s)
    return cost
""",
    "writes_into_a_cloned_buffer": """
def f(x, w):
    u = x.clone()
    for _ in range(3):
        new = u.clone()
        new[1:-1] = u[1:-1] + w * (u[2:] - 2 * u[1:-1] + u[:-2])
        new[0] = u[0] * 0.5
        u = new
    return (u ** 2).sum()
""",
    "running_sum_written_at_the_counter": """
def f(x, w):
    cs = torch.zeros_like(x)
    cs[0] = x[0]
    for i in range(1, len(x)):
        cs[i] = cs[i - 1] + w * x[i]
    return torch.sin(cs).sum()
""",
    "matmul_norm_power_iteration": """
def f(x, w):
    M = torch.stack([x[:3] * w, x[1:4], x[2:5] + w])
    v = x[:3]
    for _ in range(3):
        v = M @ v
        v = v / torch.linalg.norm(v)
    return v @ (M @ v)
""",
    "softmax_logsumexp_max_of_vectors": """
def f(x, w):
    p = torch.softmax(x * w, dim=0)
    lse = torch.logsumexp(x, dim=0)
    m = torch.max(x * w) + x.abs().max() - torch.min(x)
    return -(p * torch.nn.functional.log_softmax(x, dim=-1)).sum() + lse * m
""",
    "logsumexp_over_stacked_components": """
def f(x, w):
    comps = [x * w - 0.5 * k * x ** 2 for k in range(3)]
    return -torch.logsumexp(torch.stack(comps), dim=0).sum() + torch.stack(comps).sum(dim=0).mean()
""",
    "local_def_and_lambda_helpers": """
def f(x, w):
    def rhs(y, scale=0.1):
        return -w * y + scale * torch.sin(y)
    sq = lambda v: v * v
    y = x
    for _ in range(3):
        k1 = rhs(y)
        k2 = rhs(y + 0.05 * k1, scale=0.2)
        y = y + 0.05 * (k1 + k2)
    return sq(y).sum()
""",
    "local_helpers_calling_each_other": """
def f(x, w):
    def rhs(y):
        return -w * y + 0.1 * torch.sin(y)

    def step(y, h):
        k1 = rhs(y)
        k2 = rhs(y + h * k1)
        return y + 0.5 * h * (k1 + k2)

    y = x
    for _ in range(3):
        y = step(y, 0.1)
    return (y * y).sum()
""",
    "counters_as_python_ints": """
import math
def f(x, w):
    s = 0.0
    n = len(x)
    for i in range(n):
        if i % 2 == 1:
            continue
        s = s + w * x[i] / math.factorial(i)
    for i in range(n):
        for j in range(i + 1, n):
            if i != j:
                s = s + 1.0 / (torch.abs(x[i] - x[j]) + w)
    return s
""",
    "constant_vectors_from_arange_and_lists": """
def f(x, w):
    n = x.shape[0]
    weights = torch.arange(n, dtype=x.dtype) / n
    table = torch.tensor([0.5, -1.0, 2.0, 0.25, 3.0], dtype=x.dtype)
    return (weights * torch.tanh(w * x) + table * x).sum()
""",
    "builtin_max_over_a_list": """
def f(x, w):
    terms = [x[i] * w for i in range(len(x))]
    return max(terms) - min(x[0], x[1] * w) + sum(terms)
""",
}


def _args(rng):
    return (torch.tensor(rng.uniform(-1.0, 1.0, 5), dtype=torch.float64),
            torch.tensor(rng.uniform(0.3, 0.9), dtype=torch.float64))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_assembled_tensors_and_python_forms_coarsen_and_match_autograd(name):
    f = load_function("import torch\n" + PROGRAMS[name])
    wrapped = coarsen.symbolic(f, numba=False)
    gradient = coarsen.grad(wrapped, argnums=(0, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        for seed in DRAWS:
            args = _args(np.random.default_rng(seed))
            expected = torch_reference(f, args, (0, 1))
            for g, e in zip(gradient(*args), expected):
                assert rel_err(g, e) <= 1e-11
            leaves = [a.clone().requires_grad_() for a in args]
            out = wrapped(*leaves)
            assert torch.allclose(out.detach(), f(*args), rtol=1e-13, atol=1e-15)
            out.backward()
            for leaf, e in zip(leaves, expected):
                assert rel_err(leaf.grad, e) <= 1e-11
    assert wrapped._plans and not wrapped._disabled


FALLBACKS = {
    # the write is seen through another name: autograd differentiates the aliased tensor
    "write_through_an_alias": ("""
def f(x, w):
    a = x * w
    b = a
    b[0] = 0.0
    return (a * x).sum()
""", 6, "another variable"),
    "write_seen_through_a_row_read_before": ("""
def f(x, w):
    u = x * w
    row = u[0]
    u[0] = 2.0
    return (row * x).sum() + u.sum()
""", 6, "another variable"),
    "keyword_arguments_not_modelled": ("""
def f(x, w):
    return torch.add(x, x * w, alpha=2.0).pow(2).sum()
""", 4, "add()"),
    "local_function_called_from_a_module_helper": ("""
def apply(g, v):
    return g(v)

def f(x, w):
    def scale(v):
        return v * w
    return apply(scale, x).sum()
""", 4, "free variables"),
    "write_into_an_argument_view": ("""
def f(x, w):
    y = x * 1.0
    v = y[1:]
    v[0] = w
    return (y * y).sum()
""", 6, "view of another tensor"),
    "write_into_loop_state_aliased_before_the_loop": ("""
def f(x, w):
    a = x * 2.0
    b = a
    for i in range(3):
        b[1] = x[1] * w + i
    return (a * a).sum()
""", 7, "another variable"),
    "write_into_a_float32_buffer": ("""
def f(x, w):
    buf = torch.zeros(5)
    for i in range(5):
        buf[i] = x[i] * w
    return (buf.double() * x).sum()
""", 6, "dtype torch.float32"),
    "append_to_a_list_argument": ("""
def f(x, w, acc=[]):
    acc.append(x * w)
    return torch.stack(acc).sum()
""", 4, "did not create"),
    "tensor_of_traced_values": ("""
def f(x, w):
    return (torch.tensor([x[0] * w, x[1]], dtype=x.dtype) * x[:2]).sum() + w * x.sum()
""", 4, "torch.tensor"),
    "data_dependent_index": ("""
def f(x, w):
    i = int(x[0] > 0)
    return x[i] * w
""", 4, "int()"),
}


@pytest.mark.parametrize("name", sorted(FALLBACKS))
def test_what_cannot_be_faithful_falls_back_naming_the_line(name):
    source, line, words = FALLBACKS[name]
    f = load_function("import torch\n" + source)
    for seed in DRAWS[:2]:
        args = _args(np.random.default_rng(seed))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = coarsen.grad(f, argnums=1, numba=False)(*args)
        messages = [str(w.message) for w in caught if issubclass(w.category, CoarsenFallbackWarning)]
        assert messages and f"{f.__code__.co_filename}:{line}:" in messages[0] and words in messages[0], messages
        (expected,) = torch_reference(f, args, (1,))
        assert rel_err(got, expected) <= 1e-14


def test_max_at_ties_splits_the_gradient_as_torch_does_and_builtin_max_takes_the_first():
    f = load_function("import torch\ndef f(x, w):\n    return torch.max(x * w) + x.abs().amax() + torch.min(x)\n")
    g = load_function("import torch\ndef g(x, w):\n    return max([x[0] * w, x[1], x[2] * w]) * 2.0\n", "g")
    x = torch.tensor([2.0, -2.0, 2.0, 0.5, -2.0], dtype=torch.float64)
    w = torch.tensor(1.0, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        for fn in (f, g):
            got = coarsen.grad(fn, argnums=(0, 1), numba=False)(x, w)
            for a, e in zip(got, torch_reference(fn, (x, w), (0, 1))):
                assert rel_err(a, e) <= 1e-14


def test_a_long_loop_that_needs_its_counter_falls_back_instead_of_unrolling():
    f = load_function("import torch\ndef f(x, w):\n    s = 0.0\n    for i in range(200):\n"
                      "        if i % 3 == 0:\n            s = s + torch.sin(w * x[0] + i)\n    return s\n")
    args = _args(np.random.default_rng(0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = coarsen.grad(f, argnums=1, numba=False)(*args)
    messages = [str(w.message) for w in caught if issubclass(w.category, CoarsenFallbackWarning)]
    assert messages and ":5:" in messages[0] and "200 iterations" in messages[0]
    (expected,) = torch_reference(f, args, (1,))
    assert rel_err(got, expected) <= 1e-14


def test_bound_methods_by_grad_and_symbolic():
    cls = load_function("""
import torch

class Model:
    def __init__(self, decay):
        self.decay = decay

    def loss(self, xs, w):
        h = 0.0
        for t in range(len(xs)):
            h = self.decay * h + torch.tanh(w * xs[t])
        return h ** 2
""", "Model")
    model = cls(0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        for seed in DRAWS:
            xs, w = _args(np.random.default_rng(seed))
            model.decay = float(np.random.default_rng(seed).uniform(0.2, 0.8))  # read at each call
            (expected,) = torch_reference(model.loss, (xs, w), (1,))
            assert rel_err(coarsen.grad(model.loss, argnums=1, numba=False)(xs, w), expected) <= 1e-12
            leaf = w.clone().requires_grad_()
            coarsen.symbolic(model.loss, numba=False)(xs, leaf).backward()
            assert rel_err(leaf.grad, expected) <= 1e-12


def test_nan_arguments_of_other_sign_are_different_plans():
    f = load_function("import math\nimport torch\ndef f(x, c):\n    return (x * math.copysign(1.0, c)).sum()\n")
    x = torch.tensor([0.5, -0.25], dtype=torch.float64)
    gradient = coarsen.grad(f, numba=False)
    plus, minus = float("nan"), -float("nan")
    assert math_sign(plus) != math_sign(minus)
    for c in (plus, minus, plus, minus):
        (expected,) = torch_reference(f, (x, c), (0,))
        assert rel_err(gradient(x, c), expected) == 0.0


def math_sign(v: float) -> float:
    import math
    return math.copysign(1.0, v)


jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

JAX_PROGRAMS = {
    "stack_append_and_softmax": """
def f(x, w):
    outs = []
    h = 0.0
    for t in range(x.shape[0]):
        h = jnp.tanh(w * h + x[t])
        outs.append(h)
    p = jax.nn.softmax(jnp.stack(outs))
    return jnp.sum(p * x) + jax.scipy.special.logsumexp(x * w) + jnp.max(x)
""",
    "concatenate_matmul_and_local_def": """
def f(x, w):
    def step(v):
        return jnp.concatenate([v[1:] * w, v[:1]])
    M = jnp.stack([x[:3], x[1:4] * w, x[2:5]])
    v = x[:3]
    for _ in range(3):
        v = step(M @ v)
    return jnp.sum(v ** 2)
""",
}


@pytest.mark.parametrize("name", sorted(JAX_PROGRAMS))
def test_the_same_on_jax_arrays(name, x64):
    f = load_function("import jax\nimport jax.numpy as jnp\n" + JAX_PROGRAMS[name])
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        for seed in DRAWS:
            rng = np.random.default_rng(seed)
            x, w = jnp.asarray(rng.uniform(-1, 1, 5)), jnp.asarray(rng.uniform(0.3, 0.9))
            expected = jax.grad(f, argnums=(0, 1))(x, w)
            got = coarsen.grad(f, argnums=(0, 1))(x, w)
            for g, e in zip(got, expected):
                assert float(jnp.max(jnp.abs(g - e))) <= 1e-11 * max(1.0, float(jnp.max(jnp.abs(e))))


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# statements that rebuild the 5-vector `v` from pieces; each keeps its length
PIECE_STEPS = [
    "v = torch.cat([v[{k}:] * w, torch.sin(v[:{k}])])",
    "v = torch.stack([v[i] * v[(i + {k}) % 5] for i in range(5)])",
    "v[{k}] = torch.tanh(v[{k}] + w)",
    "v[:{k}] = v[5 - {k}:] * 0.5",
    "v = torch.softmax(v * w, dim=0) + v",
    "v = v + torch.logsumexp(v, dim=0) * 0.1 - torch.max(v) * 0.2",
    "v = torch.stack([v[{k} - 1] - v[0], v[1] * w, v[2], torch.min(v), v[4] + v[{k}]])",
]


@st.composite
def assembled_programs(draw):
    lines = ["import torch", "def f(x, w):", "    v = x * 1.0"]
    for _ in range(draw(st.integers(1, 3))):
        lines.append("    " + draw(st.sampled_from(PIECE_STEPS)).format(k=draw(st.integers(1, 4))))
    if draw(st.booleans()):  # the assembled vector as loop state
        body = draw(st.sampled_from(PIECE_STEPS)).format(k=draw(st.integers(1, 4)))
        lines += ["    for _ in range(2):", "        " + body]
    lines.append("    return (v * v).sum() + v[2]")
    return "\n".join(lines) + "\n"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(assembled_programs(), st.integers(0, 2 ** 31 - 1))
def test_generated_programs_on_assembled_tensors_match_autograd(source, seed):
    f = load_function(source)
    args = _args(np.random.default_rng(seed))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        got = coarsen.grad(f, argnums=(0, 1), numba=False)(*args)
    for g, e in zip(got, torch_reference(f, args, (0, 1))):
        assert rel_err(g, e) <= 1e-10, source
