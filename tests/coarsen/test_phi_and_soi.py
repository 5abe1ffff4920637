"""φ-calculus closed forms (C6–C8, F5 at a break) and reuse-aware SOI splitting with limit L."""
from __future__ import annotations

import warnings

import pytest
import sympy as sp
import torch

from helpers_coarsen import load_function, rel_err, torch_reference
import sparsad.coarsen as coarsen
from sparsad.coarsen.apps import cartpole_loss, make_cartpole
from sparsad.coarsen.elevate import elevate
from sparsad.coarsen.phi import LoopSpec, NoClosedForm, solve
from sparsad.coarsen.plan import CoarsenFallbackWarning, build_plan


def _spec(updates, inits, trips, carried, counter=None, elements=None, before=None, broke=None):
    return LoopSpec(carried, inits, updates, before, trips, broke, counter, 0, elements or {},
                    view_slice=None, view_item=None, iota=None, vsum=None)


def _iterate(update, init, n):
    value = init
    for _ in range(n):
        value = update(value)
    return value


@pytest.mark.parametrize("n", [0, 1, 7])
def test_c6_affine_recurrence_matches_iteration(n):
    d, a, b, p = sp.symbols("d a b p", real=True)
    (exit_value,), notes = solve(_spec([a * d + b], [p], n, [d]))
    values = {a: 0.9, b: 0.3, p: 2.0}
    expected = _iterate(lambda v: 0.9 * v + 0.3, 2.0, n)
    assert abs(float(exit_value.subs(values)) - expected) < 1e-12
    assert "C6" in notes[0]


def test_c6_with_symbolic_trip_count_and_sum_case():
    d, b, p = sp.symbols("d b p", real=True)
    n = sp.Symbol("n", integer=True, nonnegative=True)
    (exit_value,), notes = solve(_spec([d + b], [p], n, [d]))
    assert sp.simplify(exit_value - (p + n * b)) == 0 and "a = 1" in notes[0]


def test_c8_power_recurrence():
    d, c, p = sp.symbols("d c p", positive=True)
    (exit_value,), notes = solve(_spec([c * d ** 2], [p], 4, [d]))
    expected = _iterate(lambda v: 1.1 * v ** 2, 0.7, 4)
    assert abs(float(exit_value.subs({c: 1.1, p: 0.7})) - expected) < 1e-12
    assert "C8" in notes[0]


def test_break_uses_the_exit_phi():
    w, d, r = sp.symbols("w d r", real=True)
    broke = sp.Symbol("broke", real=True)
    # pre-part computes d from w, the post-part updates w; at a break only d is fresh
    (w_exit, d_exit), _ = solve(_spec([w - r * (2 * w - 1), 2 * w - 1], [sp.Integer(0), None], 3, [w, d],
                                      before=[w, 2 * w - 1], broke=broke))
    w3 = _iterate(lambda v: v - 0.1 * (2 * v - 1), 0.0, 3)
    assert abs(float(w_exit.subs(r, 0.1)) - w3) < 1e-12
    assert abs(float(d_exit.subs({r: 0.1, broke: 1})) - (2 * w3 - 1)) < 1e-12
    w2 = _iterate(lambda v: v - 0.1 * (2 * v - 1), 0.0, 2)
    assert abs(float(d_exit.subs({r: 0.1, broke: 0})) - (2 * w2 - 1)) < 1e-12


def test_coupled_updates_have_no_closed_form():
    x, v = sp.symbols("x v", real=True)
    with pytest.raises(NoClosedForm, match="coupled"):
        solve(_spec([x + v, v - x], [sp.Integer(1), sp.Integer(0)], 5, [x, v]))


def test_unrolling_and_closed_forms_agree():
    f = load_function(
        "import torch\n"
        "def f(a, v):\n"
        "    s = a * 1.0\n"
        "    for i in range(v.shape[0]):\n"
        "        s = 0.5 * s + torch.sin(v[i]) * a\n"
        "    return s * s\n")
    a, v = torch.tensor(0.7, dtype=torch.float64), torch.linspace(-1, 1, 6, dtype=torch.float64)
    expected = torch_reference(f, (a, v), (0, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        for closed in (True, False):
            wrapped = coarsen.symbolic(f, closed_forms=closed, numba=False)
            got = coarsen.grad(wrapped, argnums=(0, 1))(a, v)
            for g, e in zip(got, expected):
                assert rel_err(g, e) <= 1e-12
    text = coarsen.explain(f, a, v, print_it=False)
    assert "C7" in text and "iota" in text


@pytest.mark.parametrize("limit", [4, 12, 200])
def test_segment_limit_changes_segments_not_derivatives(limit):
    (state, actions), _ = make_cartpole(1, size=2)
    plan = build_plan(cartpole_loss, (state, actions), limit, True)
    elev = elevate(plan.graph, None, limit)
    values = [s for s in elev.segments if s.kind == "value"]
    assert values or limit >= 200
    wrapped = coarsen.symbolic(cartpole_loss, max_segment=limit, numba=False)
    got = coarsen.grad(wrapped, argnums=(0, 1))(state, actions)
    for g, e in zip(got, torch_reference(cartpole_loss, (state, actions), (0, 1))):
        assert rel_err(g, e) <= 1e-10


def test_split_prefers_the_most_reused_operand():
    f = load_function(
        "import torch\n"
        "def f(a, b):\n"
        "    shared = torch.sin(a * b + a) * torch.cos(a - b)\n"
        "    once = torch.exp(b * b - a) + torch.tanh(a * a)\n"
        "    return (shared * once + shared * shared + torch.sqrt(1 + shared * shared)) * (once + 1.0)\n")
    a, b = torch.tensor(0.3, dtype=torch.float64), torch.tensor(-0.4, dtype=torch.float64)
    plan = build_plan(f, (a, b), 8, True)
    elev = elevate(plan.graph, None, 8)
    first = next(s for s in elev.segments if s.kind == "value")
    assert first.expr.has(sp.sin) and first.expr.has(sp.cos)  # `shared` (4 uses) is cut first


def test_double_backward_is_refused():
    (state, actions), _ = make_cartpole(1, size=2)
    wrapped = coarsen.symbolic(cartpole_loss, numba=False)
    s = state.clone().requires_grad_()
    out = wrapped(s, actions)
    with pytest.raises(coarsen.CoarsenUnsupported, match="double backward"):
        torch.autograd.grad(out, s, create_graph=True)
