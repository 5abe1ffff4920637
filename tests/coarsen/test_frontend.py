"""The AST front end: SSA structure, recorded trip counts and decisions, refusals."""
from __future__ import annotations

import pytest
import torch

from helpers_coarsen import load_function
import sparsad.coarsen as coarsen
from sparsad.coarsen import ssa
from sparsad.coarsen.apps import bgd_hyperopt, bgd_hyperopt_loops, make_bgd
from sparsad.coarsen.frontend import CoarsenUnsupported, trace
from sparsad.coarsen.plan import build_plan


def _t(*values):
    return tuple(torch.tensor(v, dtype=torch.float64) for v in values)


def test_bgd_graph_keeps_while_with_break_and_inner_for():
    (x, y, r), (T, tol) = make_bgd(1, size=8)
    graph = trace(bgd_hyperopt_loops, (x, y, r, T, tol))
    kinds = sorted((loop.kind, loop.trip) for loop in graph.loops if not loop.scope)
    assert ("while", None) in kinds and ("for", 8) in kinds
    outer = [loop for loop in graph.loops if loop.kind == "while"][-1]
    assert outer.break_site is not None
    assert set(outer.names) >= {"w", "d"}
    assert any(loop.scope == (outer.site,) and loop.kind == "for" for loop in graph.loops)


def test_record_counts_iterations_break_and_decisions():
    f = load_function(
        "import torch\n"
        "def f(x, n):\n"
        "    s = x * 0.0\n"
        "    for i in range(n):\n"
        "        if x[i] > 0:\n"
        "            s = s + x[i]\n"
        "        else:\n"
        "            s = s - x[i]\n"
        "    k = 0\n"
        "    while k < 10:\n"
        "        k += 1\n"
        "        if torch.sum(s) > 3.0:\n"
        "            break\n"
        "        s = s * 1.5\n"
        "    return torch.sum(s)\n")
    x = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    plan = build_plan(f, (x, 3), 30, True)
    _, record = plan.run(x, 3)
    trips = sorted(record.loops.values())
    assert [3, False] in trips
    # s = |1| + |-2| + |0.5| per element is a vector: sum grows by 1.5 until above 3
    decisions = [v for (site, path, entry), v in sorted(record.branches.items(), key=lambda kv: kv[0][1])]
    assert decisions == [True, False, True]
    broke = [v for v in trips if v[1]]
    assert broke and broke[0][0] >= 1


def test_phi_node_for_traced_if():
    f = load_function(
        "import torch\n"
        "def f(a):\n"
        "    if a > 0:\n"
        "        z = torch.sqrt(a)\n"
        "    else:\n"
        "        z = torch.log(1 + torch.exp(a))\n"
        "    return z * 2\n")
    graph = trace(f, _t(0.5))
    out = graph.outputs[0]
    assert isinstance(out, ssa.Op) and isinstance(out.args[0], ssa.Phi)


@pytest.mark.parametrize("body, reason", [
    ("    y = x * 1.0\n    z = y\n    z[0] = 1.0\n    return y.sum()\n", "another variable"),
    ("    y = x[1:]\n    y[0] = 1.0\n    return x.sum()\n", "view of another tensor"),
    ("    return x.sum(dim=0, keepdim=True).sum()\n", "keepdim"),
    ("    return float(x.sum()) * x.sum()\n", "float()"),
    ("    for i in range(3):\n        if x[i] > 0:\n            return x.sum()\n    return x.sum()\n", "return"),
    ("    return torch.cumsum(x, 0).sum()\n", "cumsum"),
    ("    return x[x > 0].sum()\n", "unknown when tracing"),  # data-dependent shape
])
def test_unsupported_constructs_are_refused_with_a_reason(body, reason):
    f = load_function("import torch\ndef f(x):\n" + body)
    with pytest.raises(CoarsenUnsupported) as info:
        trace(f, _t([1.0, 2.0, 3.0]))
    assert reason in str(info.value)


def test_python_int_changed_in_a_loop_and_used_in_arithmetic_is_carried_as_a_traced_scalar():
    f = load_function(
        "def f(x):\n"
        "    k = 0\n"
        "    s = x * 1.0\n"
        "    while k < 3:\n"
        "        k += 1\n"
        "        s = s * k\n"
        "    return s.sum()\n")
    graph = trace(f, _t([1.0, 2.0]))
    (loop,) = {id(l): l for l in graph.loops if l.names}.values()
    assert set(loop.names) == {"s", "k"}
    (x,) = _t([1.0, 2.0])
    assert torch.allclose(coarsen.grad(f)(x), torch.full((2,), 6.0, dtype=torch.float64), rtol=1e-14)


def test_python_int_that_only_steers_control_flow_but_is_used_after_the_loop_is_refused_with_its_name():
    f = load_function(
        "def f(x):\n"
        "    k = 0\n"
        "    s = x * 1.0\n"
        "    while k < 3:\n"
        "        k += 1\n"
        "        s = s * 2.0\n"
        "    return (s * k).sum()\n")
    with pytest.raises(CoarsenUnsupported, match="`k`.*changes inside a loop"):
        trace(f, _t([1.0, 2.0]))
