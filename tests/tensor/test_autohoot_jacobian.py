"""AutoHOOT's Jacobian tests (tests/jacobian_test.py) as our own: explicit Jacobians of sums,
differences, products (with scalars and constants), einsums, summations and traces, their chain
rule, and a quadratic Hessian, on every backend against jax.jacrev / jax.hessian."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from sparsad import tensor as T

PROGRAMS = {
    "add": ([(2, 2), (2, 2)], lambda x, y: x + y, lambda x, y: x + y),
    "add_scalar": ([(), ()], lambda x, y: x + y, lambda x, y: x + y),
    "sub": ([(2, 2), (2, 2)], lambda x, y: x - y, lambda x, y: x - y),
    "mul": ([(2, 2), (2, 2)], lambda x, y: x * y, lambda x, y: x * y),
    "three_mul": ([(2, 2), (2, 2), (2, 2)], lambda x, y, z: x * y * z, lambda x, y, z: x * y * z),
    "three_mul_scalars": ([(), (), ()], lambda x, y, z: x * y * z, lambda x, y, z: x * y * z),
    "mul_scalars": ([(), ()], lambda x, y: x * y, lambda x, y: x * y),
    "mul_one_scalar": ([(), (2, 2)], lambda x, y: x * y, lambda x, y: x * y),
    "mul_const": ([(2, 2)], lambda x: T.Constant(np.arange(4.0).reshape(2, 2)) * x,
                  lambda x: np.arange(4.0).reshape(2, 2) * x),
    "einsum": ([(2, 2), (2, 2)], lambda x, y: T.einsum("ik,kj->ij", x, y), lambda x, y: x @ y),
    "summation_einsum": ([(2, 2)], lambda x: T.einsum("ij->", x), lambda x: x.sum()),
    "summation_einsum_2": ([(2, 2), (2, 2)], lambda x, y: T.einsum("ij,ij->", x, y), lambda x, y: (x * y).sum()),
    "trace_einsum": ([(2, 2)], lambda x: T.einsum("ii->", x), lambda x: jax.numpy.trace(x)),
    "partial_trace": ([(2, 3, 2)], lambda x: T.einsum("iji->j", x), lambda x: jax.numpy.einsum("iji->j", x)),
    "tanh_chain": ([(3,), (3, 3)], lambda x, a: T.tanh(T.einsum("ij,j->i", a, x)), lambda x, a: jax.numpy.tanh(a @ x)),
}


CASES = [(name, "numpy") for name in sorted(PROGRAMS)] + [
    (name, b) for b in ("torch", "jax") for name in ("mul_one_scalar", "partial_trace", "tanh_chain", "einsum")]


@pytest.mark.parametrize("name, backend", CASES)
def test_jacobian_matches_jax(name, backend, run, jnp):
    shapes, ours, theirs = PROGRAMS[name]
    rng = np.random.default_rng(len(name))
    xs = [T.Variable(f"x{k}", s) for k, s in enumerate(shapes)]
    vals = [rng.standard_normal(s) for s in shapes]
    y = ours(*xs)
    jacs = [T.jacobian(y, x) for x in xs]
    want = jax.jacrev(theirs, argnums=tuple(range(len(xs))))(*map(jnp.asarray, vals))
    feed = dict(zip(xs, vals))
    for nodes in (jacs, T.optimize(jacs)):
        for got, w in zip(run(nodes, feed, backend), want):
            np.testing.assert_allclose(got, np.asarray(w), rtol=1e-10, atol=1e-12)


def test_chainjacobian_contracts_the_middle_axes(backend, run):
    a, b = T.Variable("a", (2, 2, 2)), T.Variable("b", (2, 2, 2))
    y = T.chainjacobian(a, b, 2)
    av, bv = np.ones((2, 2, 2)), np.arange(8.0).reshape(2, 2, 2)
    np.testing.assert_array_equal(run(y, {a: av, b: bv}, backend), np.einsum("abc,bcd->ad", av, bv))


@pytest.mark.parametrize("name", ["einsum", "mul", "tanh_chain"])
def test_chain_rule_of_explicit_jacobians_matches_jax(name, backend, run, jnp):
    # z = sum(y * y) over y = f(x): dz/dx = dz/dy . dy/dx
    shapes, ours, theirs = PROGRAMS[name]
    rng = np.random.default_rng(3)
    xs = [T.Variable(f"x{k}", s) for k, s in enumerate(shapes)]
    vals = [rng.standard_normal(s) for s in shapes]
    y = ours(*xs)
    letters = "abcd"[:y.ndim]
    yy = T.Variable("y", y.shape)
    z = T.einsum(f"{letters},{letters}->{letters}", yy, yy)
    dz_dy = T.jacobian(z, yy)
    dz_dx = T.chainjacobian(dz_dy, T.jacobian(y, xs[0]), y.ndim)
    # dz_dy depends on the value of y: feed it
    feed = dict(zip(xs, vals))
    y_val = run(y, feed, backend)
    got = run(T.optimize(dz_dx), {**feed, yy: y_val}, backend)
    want = jax.jacrev(lambda *a: theirs(*a) ** 2)(*map(jnp.asarray, vals))
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-10, atol=1e-12)


def test_hessian_of_a_quadratic_form(backend, run):
    x, H = T.Variable("x", (3,)), T.Variable("H", (3, 3))
    y = T.einsum("ab,a,b->", H, x, x)
    hxx = T.hessian(y, [x])[0][0]
    h = np.random.default_rng(0).standard_normal((3, 3))
    got = run(T.optimize(hxx), {x: np.ones(3), H: h}, backend)
    np.testing.assert_allclose(got, h + h.T)


def test_chainjacobian_checks_shapes():
    from sparsad.errors import SparsadError

    with pytest.raises(SparsadError):
        T.chainjacobian(T.Variable("a", (2, 3)), T.Variable("b", (2, 3)), 1)
