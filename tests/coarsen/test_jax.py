"""The JAX path: jax.custom_vjp splice and coarsen.grad on jax arrays equal jax.grad (float64)."""
from __future__ import annotations

import warnings

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import sparsad.coarsen as coarsen  # noqa: E402
from sparsad.coarsen import apps  # noqa: E402
from sparsad.coarsen.plan import CoarsenFallbackWarning  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def x64():
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", previous)


def _rel(a, b):
    return float(jnp.max(jnp.abs(a - b)) / max(float(jnp.max(jnp.abs(b))), 1e-300))


@pytest.mark.parametrize("name, config, size", [("BGDHyperOpt", 1, 50), ("Brachistochrone", 1, None),
                                                ("HMC", 2, None), ("HookeanSpring", 1, None), ("CartPole", 1, 2)])
def test_grad_and_custom_vjp_match_jax_grad(name, config, size):
    _, fj, make, argnums = apps.APPS[name]
    tensors, static = make(config, size=size, backend="jax")
    args = tensors + static
    expected = jax.grad(fj, argnums=argnums)(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        wrapped = coarsen.symbolic(fj)
        got = coarsen.grad(wrapped, argnums=argnums)(*args)
        spliced = jax.grad(lambda *a: wrapped(*a), argnums=argnums)(*args)
    for g, s, e in zip(got, spliced, expected):
        assert _rel(g, e) <= 1e-10
        assert _rel(s, e) <= 1e-10


def test_under_jit_straight_line_code_keeps_the_symbolic_adjoint():
    _, fj, make, argnums = apps.APPS["Brachistochrone"]
    (h,), (dx,) = make(1, size=30, backend="jax")
    wrapped = coarsen.symbolic(fj)
    got = jax.jit(jax.grad(lambda v: wrapped(v, dx)))(h)
    assert _rel(got, jax.grad(fj)(h, dx)) <= 1e-12


def test_under_jit_recorded_control_flow_falls_back_to_jax_vjp():
    _, fj, make, _ = apps.APPS["BGDHyperOpt"]
    (x, y, r), (T, tol) = make(1, size=20, backend="jax")
    wrapped = coarsen.symbolic(fj)
    # jit cannot run Python control flow on tracers at all, so the whole call must be eager;
    # inside jax.grad (eager) the recorded adjoint is used
    got = jax.grad(lambda rr: wrapped(x, y, rr, T, tol))(r)
    expected = jax.grad(apps.bgd_hyperopt_scan, argnums=2)(x, y, r, T, tol)
    assert _rel(got, expected) <= 1e-10


def test_augmented_assignment_rebinds_jax_arrays():
    """JAX arrays are immutable: `x += a` rebinds x (no other name sees it), so it coarsens, unlike on a
    torch tensor that another name refers to."""
    from helpers_coarsen import load_function

    f = load_function("""
import jax.numpy as jnp

def f(x, a):
    y = x
    x += a * x
    y *= 2.0
    return jnp.sum(x * y)
""")
    x, a = jnp.linspace(-1.0, 1.0, 5), jnp.asarray(0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        got = coarsen.grad(f, argnums=(0, 1))(x, a)
    for g, e in zip(got, jax.grad(f, argnums=(0, 1))(x, a)):
        assert _rel(g, e) <= 1e-12
