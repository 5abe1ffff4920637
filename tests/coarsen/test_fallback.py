"""Unsupported functions fall back to plain autograd with a one-line warning; never a wrong derivative."""
from __future__ import annotations

import warnings

import pytest
import torch

from helpers_coarsen import load_function, rel_err, torch_reference
import sparsad.coarsen as coarsen
from sparsad.coarsen import apps
from sparsad.coarsen.plan import CoarsenFallbackWarning


def _x():
    return torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)


def test_unsupported_op_warns_once_in_one_line_and_uses_autograd():
    f = load_function("import torch\ndef f(x):\n    return torch.cumsum(x, 0).pow(2).sum()\n")
    wrapped = coarsen.symbolic(f)
    x = _x().requires_grad_()
    with pytest.warns(CoarsenFallbackWarning) as caught:
        wrapped(x).backward()
    message = str(caught[0].message)
    assert "\n" not in message and "cumsum" in message and "f falls back" in message
    (expected,) = torch_reference(f, (_x(),), (0,))
    assert rel_err(x.grad, expected) == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)  # no second warning for the same signature
        wrapped(_x().requires_grad_()).backward()


def test_grad_falls_back_too():
    f = load_function("import torch\ndef f(x):\n    y = x * 1.0\n    z = y\n    z[1] = 0.0\n    return (y * x).sum()\n")
    with pytest.warns(CoarsenFallbackWarning, match="writes in place"):
        g = coarsen.grad(f)(_x())
    (expected,) = torch_reference(f, (_x(),), (0,))
    assert rel_err(g, expected) == 0.0


def test_wrong_generated_adjoint_is_caught_by_the_check(monkeypatch):
    """If code generation ever produced a wrong derivative, the one-time check against autograd refuses it."""
    from sparsad.coarsen import plan as plan_module

    original = plan_module.Plan.adjoint

    def corrupted(self, *args, **kwargs):
        compiled = original(self, *args, **kwargs)
        good = compiled.fn
        compiled.fn = lambda *a: tuple(None if g is None else 1.01 * g for g in good(*a))
        return compiled

    monkeypatch.setattr(plan_module.Plan, "adjoint", corrupted)
    (px, py), _ = apps.make_spring(1)
    with pytest.warns(CoarsenFallbackWarning, match="differs from autograd"):
        g = coarsen.grad(apps.spring_energy, argnums=(0, 1), numba=False)(px, py)
    for got, expected in zip(g, torch_reference(apps.spring_energy, (px, py), (0, 1))):
        assert rel_err(got, expected) == 0.0


def test_no_grad_and_no_requires_grad_just_run_the_primal():
    wrapped = coarsen.symbolic(apps.spring_energy)
    (px, py), _ = apps.make_spring(1)
    out = wrapped(px, py)
    assert out.grad_fn is None
    assert torch.equal(out, apps.spring_energy(px, py))


def test_float32_inputs_are_supported():
    (px, py), _ = apps.make_spring(1)
    px32, py32 = px.float(), py.float()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        g = coarsen.grad(apps.spring_energy, argnums=(0, 1))(px32, py32)
    assert g[0].dtype == torch.float32
    for got, expected in zip(g, torch_reference(apps.spring_energy, (px, py), (0, 1))):
        assert rel_err(got.double(), expected) <= 1e-5


def test_unrolled_loop_with_ever_changing_trip_count_gives_up_after_a_few_variants(monkeypatch):
    from sparsad.coarsen import plan as plan_module, revloop

    monkeypatch.setattr(plan_module, "MAX_UNROLLED_VARIANTS", 2)
    # (such a loop is compiled as a loop; unrolling is what this test is about)
    monkeypatch.setattr(revloop, "eligible", lambda loop: "compiled loops switched off by the test")
    f = load_function(
        "import torch\n"
        "def f(x, limit):\n"
        "    s = x * 1.0\n"
        "    k = 0\n"
        "    while k < 50:\n"
        "        k += 1\n"
        "        if torch.sum(s) > limit:\n"
        "            break\n"
        "        s = torch.sin(s) + s * 1.2\n"  # no closed form: unrolled per trip count
        "    return torch.sum(s * s)\n")
    wrapped = coarsen.symbolic(f, numba=False)
    x = torch.tensor([0.2, 0.3], dtype=torch.float64)
    with pytest.warns(CoarsenFallbackWarning, match="trip count"):
        for value in range(1, 14):
            limit = torch.tensor(float(value), dtype=torch.float64)  # a tensor: same call signature
            leaf = x.clone().requires_grad_()
            wrapped(leaf, limit).backward()
            (expected,) = torch_reference(f, (x, limit), (0,))
            assert rel_err(leaf.grad, expected) <= 1e-10
