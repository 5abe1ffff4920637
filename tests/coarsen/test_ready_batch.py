"""`coarsen.grad(...).batch`: one guard check for many values of one argument; the compiled batch equals
one call per value, `ready_only` names the plan that served them or returns None (nothing runs)."""
from __future__ import annotations

import torch

from helpers_coarsen import load_function
import sparsad.coarsen as coarsen
from sparsad.coarsen import tiers

SOURCE = """
import torch

SCALE = 2.0

def f(x, w):
    return torch.sum(w * (SCALE * x[1:] * x[:-1] + torch.sin(x[1:])))
"""


def test_batch_of_weights_equals_single_calls_and_reports_its_plan():
    f = load_function(SOURCE)
    gradient = coarsen.grad(f)
    x = torch.randn(9, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    weights = [torch.randn(8, dtype=torch.float64, generator=torch.Generator().manual_seed(k)) for k in range(3)]
    for _ in range(4):  # trace, compile (in a child), load and check: then the ready-made call serves
        gradient(x, weights[0])
        tiers.wait()
    expected = [torch.autograd.functional.vjp(lambda z: f(z, w), x)[1] for w in weights]
    served = gradient.batch((x, weights[0]), 1, weights, ready_only=True)
    assert served is not None
    rows, plan = served
    assert plan.current() and plan.graph.inputs[0].name == "x"
    for got, want in zip(rows, expected):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert gradient.batch((x, weights[0]), 1, weights[:1] + [weights[1].float()], ready_only=True) is None
    module = f.__globals__
    module["SCALE"] = 3.0  # a guard misses: not served by the ready-made call, nothing runs
    assert gradient.batch((x, weights[0]), 1, weights, ready_only=True) is None
    for got, w in zip(gradient.batch((x, weights[0]), 1, weights), weights):  # the general path: the new f
        torch.testing.assert_close(got, torch.autograd.functional.vjp(lambda z: f(z, w), x)[1], rtol=1e-12, atol=1e-12)
