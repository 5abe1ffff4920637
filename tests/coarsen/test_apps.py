"""Every benchmark application: generated derivatives equal PyTorch autograd and jax.grad (float64)."""
from __future__ import annotations

import pytest
import torch

from helpers_coarsen import no_fallback, rel_err, torch_reference  # noqa: F401
import sparsad.coarsen as coarsen
from sparsad.coarsen import apps

TOL = 1e-10
# small but structurally complete sizes (the benchmark runs the full Table 1 sizes)
CASES = [("BGDHyperOpt", c, None) for c in (1, 2, 3)] + [
    ("Brachistochrone", 1, None), ("Brachistochrone", 3, None),
    ("HMC", 1, None), ("HMC", 2, None), ("HMC", 3, None),
    ("HookeanSpring", 1, None), ("HookeanSpring", 2, None),
    ("CartPole", 1, 4),
]


@pytest.mark.parametrize("name, config, size", CASES)
def test_grad_matches_torch_autograd(name, config, size):
    fn, _, make, argnums = apps.APPS[name]
    tensors, static = make(config, size=size)
    args = tensors + static
    # Numba-compiled adjoints for configuration 1 (BGDHyperOpt's and HMC's run in the example
    # tests), generated torch code for the others
    numba = config == 1 and name not in ("BGDHyperOpt", "HMC")
    got = coarsen.grad(fn, argnums=argnums, numba=numba)(*args)
    got = got if isinstance(got, tuple) else (got,)
    for g, e in zip(got, torch_reference(fn, args, argnums)):
        assert rel_err(g, e) <= TOL


@pytest.mark.parametrize("name, config, size", [c for c in CASES if c[0] != "CartPole"] + [("CartPole", 1, 3)])
def test_symbolic_backward_matches_torch_autograd(name, config, size):
    fn, _, make, argnums = apps.APPS[name]
    tensors, static = make(config, size=size)
    wrapped = coarsen.symbolic(fn, numba=False)
    leaves = [t.clone().requires_grad_(i in argnums) for i, t in enumerate(tensors)]
    out = wrapped(*leaves, *static)
    assert torch.allclose(out.detach(), fn(*tensors, *static), rtol=1e-13, atol=0)
    assert out.grad_fn is not None and "Splice" in type(out.grad_fn).__name__
    (2.0 * out).backward()
    for i, e in zip(argnums, torch_reference(fn, tensors + static, argnums)):
        assert rel_err(leaves[i].grad, 2.0 * e) <= TOL


def test_bgd_loop_version_gets_closed_forms_and_matches():
    """Fig. 6(a) verbatim: C7 vectorises the inner sums, C6 closes the while loop."""
    (x, y, r), (T, tol) = apps.make_bgd(1, size=30)
    text = coarsen.explain(apps.bgd_hyperopt_loops, x, y, r, T, tol, print_it=False)
    assert "C6 affine recurrence" in text and "C7" in text
    assert "unrolled" not in text
    g = coarsen.grad(apps.bgd_hyperopt_loops, argnums=2, numba=False)(x, y, r, T, tol)
    (e,) = torch_reference(apps.bgd_hyperopt_loops, (x, y, r, T, tol), (2,))
    assert rel_err(g, e) <= TOL


def test_one_adjoint_serves_different_trip_counts_and_breaks():
    (x, y, r), (T, tol) = apps.make_bgd(1, size=40)
    wrapped = coarsen.symbolic(apps.bgd_hyperopt, numba=False)
    for r0, t_max in [(0.2, 60), (0.05, 60), (0.2, 7), (0.3, 80)]:
        rr = torch.tensor(r0, dtype=torch.float64, requires_grad=True)
        wrapped(x, y, rr, t_max, tol).backward()
        (e,) = torch_reference(apps.bgd_hyperopt, (x, y, rr.detach(), t_max, tol), (2,))
        assert rel_err(rr.grad, e) <= TOL
    (plan,) = next(iter(wrapped._plans.values()))  # one signature (t_max 60), one plan
    assert len(plan.elevations) == 1 and len(plan.compiled) == 1


def test_explain_on_bgd_shows_closed_form_of_its_loop():
    (x, y, r), (T, tol) = apps.make_bgd(1, size=20)
    text = coarsen.explain(apps.bgd_hyperopt, x, y, r, T, tol, print_it=False)
    assert "closed form by φ-calculus" in text
    assert "w_exit = " in text and "n0" in text
    assert "def adjoint_bgd_hyperopt" in text


def test_spring_gradient_is_vectorised_not_unrolled():
    (px, py), _ = apps.make_spring(2)
    text = coarsen.explain(apps.spring_energy, px, py, print_it=False)
    assert "C6 with a = 1" in text or "C7" in text
    assert "unrolled" not in text


def test_hmc_generated_code_is_stable_where_naive_autograd_overflows():
    (beta, Xt, y), _ = apps.make_hmc(1, size=20)
    Xt = Xt * 1000.0  # |z| in the hundreds: exp(z) overflows float64
    g = coarsen.grad(apps.hmc_potential, argnums=0)(beta, Xt, y)
    z = beta @ Xt
    expected = -(Xt * (y - torch.sigmoid(z))).sum(dim=1) + beta
    assert torch.isfinite(g).all()
    assert rel_err(g, expected) <= 1e-12
    (naive,) = torch_reference(apps.hmc_potential, (beta, Xt, y), (0,))
    assert not torch.isfinite(naive).all()


def test_tuple_outputs_and_elementwise_where_through_numba():
    def step(x, v, a):
        v2 = v + 0.1 * torch.where(x > 0, -torch.sin(x), x * x) + a
        x2 = x + 0.1 * v2
        return x2, torch.relu(v2) * 2.0

    wrapped = coarsen.symbolic(step)
    base = (torch.linspace(-1, 1, 5, dtype=torch.float64), torch.linspace(0.5, -0.7, 5, dtype=torch.float64),
            torch.tensor(0.3, dtype=torch.float64))
    mine = [t.clone().requires_grad_() for t in base]
    ref = [t.clone().requires_grad_() for t in base]
    o1, o2 = wrapped(*mine)
    (3.0 * o1.sum() + (o2 * o2).sum()).backward()
    p1, p2 = step(*ref)
    (3.0 * p1.sum() + (p2 * p2).sum()).backward()
    for m, r in zip(mine, ref):
        assert rel_err(m.grad, r.grad) <= TOL
