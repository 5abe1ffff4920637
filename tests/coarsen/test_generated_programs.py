"""Hypothesis-generated programs (straight-line code, traced ifs, for and while loops with break):
coarsened derivatives equal PyTorch autograd in float64."""
from __future__ import annotations

import warnings

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers_coarsen import load_function, rel_err, torch_reference
import sparsad.coarsen as coarsen
from sparsad.coarsen.plan import CoarsenFallbackWarning

SCALARS = ["a", "b"]
UNARY = ["torch.sin({})", "torch.cos({})", "torch.tanh({})", "torch.sigmoid({})", "torch.sqrt(1.0 + {0} * {0})",
         "torch.log(1.0 + {0} * {0})", "torch.log(1.0 + torch.exp({}))", "0.5 * {}", "torch.abs({})"]
BINARY = ["({} + {})", "({} - {})", "({} * {})", "({} / (1.5 + torch.sin({})))"]


@st.composite
def expressions(draw, names, depth=2):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(names))
    if draw(st.booleans()):
        return draw(st.sampled_from(UNARY)).format(draw(expressions(names, depth - 1)))
    template = draw(st.sampled_from(BINARY))
    left, right = draw(expressions(names, depth - 1)), draw(expressions(names, depth - 1))
    return template.format(left, right)


@st.composite
def programs(draw):
    names = list(SCALARS)
    lines = ["import torch", "def f(a, b, v):"]
    for k in range(draw(st.integers(1, 3))):
        lines.append(f"    t{k} = {draw(expressions(names))}")
        names.append(f"t{k}")
    if draw(st.booleans()):  # a traced if-else: φ on the recorded decision
        cond = draw(st.sampled_from(names))
        lines += [f"    if {cond} > {draw(st.floats(-0.5, 0.5)):.3f}:",
                  f"        u = {draw(expressions(names))}",
                  "    else:",
                  f"        u = {draw(expressions(names))}"]
        names.append("u")
    loop = draw(st.sampled_from(["affine", "indexed", "nonlinear", "while", "none"]))
    seed = draw(st.sampled_from(names))
    if loop == "affine":  # C6: closed form in the trip count
        lines += [f"    s = {seed}", "    for i in range(5):",
                  f"        s = 0.7 * s + {draw(expressions(SCALARS, 1))}"]
    elif loop == "indexed":  # C7: vectorised over v[i]
        lines += [f"    s = {seed}", "    for i in range(v.shape[0]):",
                  f"        s = s + v[i] * {draw(expressions(SCALARS, 1))} + torch.sin(v[i])"]
    elif loop == "nonlinear":  # no closed form: unrolled with the recorded trip count
        lines += [f"    s = {seed}", "    for i in range(3):",
                  f"        s = torch.sin(s) * v[i] + {draw(expressions(SCALARS, 1))}"]
    elif loop == "while":  # break on a traced value
        lines += [f"    s = {seed}", "    k = 0", "    while k < 8:", "        k += 1",
                  "        if torch.abs(s) > 2.5:", "            break",
                  f"        s = 1.3 * s + 0.1 * {draw(expressions(SCALARS, 1))}"]
    else:
        lines.append(f"    s = {seed}")
    lines.append(f"    return s + {draw(st.sampled_from(names))} * torch.sum(v * v)")
    return "\n".join(lines) + "\n"


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=programs(), values=st.lists(st.floats(-1.5, 1.5), min_size=2, max_size=2),
       vector=st.lists(st.floats(-1.0, 1.0), min_size=4, max_size=4))
def test_generated_program_derivatives_equal_autograd(source, values, vector):
    f = load_function(source)
    a, b = (torch.tensor(x, dtype=torch.float64) for x in values)
    v = torch.tensor(vector, dtype=torch.float64)
    expected = torch_reference(f, (a, b, v), (0, 1, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        got = coarsen.grad(f, argnums=(0, 1, 2), numba=False)(a, b, v)
    for g, e in zip(got, expected):
        scale = max(e.abs().max().item(), 1.0)
        assert (g - e).abs().max().item() <= 1e-10 * scale, source
