"""AutoHOOT's autodiff tests (tests/autodiff_test.py), as our own tests of the same behaviours:
values, gradients, VJPs, JVPs, J^T J v, HVPs and tensor inverses of small programs, on every
backend, against JAX in float64."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from sparsad import tensor as T
from sparsad.errors import InputError

# name -> (variable shapes, our program, the same program in jax.numpy); values stay positive
# where a program takes roots or odd powers of them.
PROGRAMS = {
    "identity": ([(3,)], lambda x: x, lambda x: x),
    "add_by_const": ([(3,)], lambda x: 5 + x, lambda x: 5 + x),
    "sub_by_const": ([(3,)], lambda x: x - 5, lambda x: x - 5),
    "sub_by_const_2": ([(3,)], lambda x: 5 - x, lambda x: 5 - x),
    "negative": ([(3,)], lambda x: -x, lambda x: -x),
    "mul_by_const": ([(3,)], lambda x: 5 * x, lambda x: 5 * x),
    "mul_by_const_float": ([(3,)], lambda x: 5.5 * x, lambda x: 5.5 * x),
    "power_3": ([(3,)], lambda x: T.einsum("i->", x ** 3), lambda x: (x ** 3).sum()),
    "power_fraction": ([(3,)], lambda x: x ** 1.7, lambda x: x ** 1.7),
    "power_negative": ([(3,)], lambda x: T.power(x, -2.5), lambda x: x ** -2.5),
    "add_two_vars": ([(3,), (3,)], lambda x, y: x + y, lambda x, y: x + y),
    "sub_two_vars": ([(3,), (3,)], lambda x, y: x - y, lambda x, y: x - y),
    "mul_two_vars": ([(3,), (3,)], lambda x, y: x * y, lambda x, y: x * y),
    "add_mul_mix_1": ([(3,), (3,), (3,)], lambda a, b, c: a + b * c * a, lambda a, b, c: a + b * c * a),
    "add_mul_mix_2": ([(3,), (3,), (3,), (3,)], lambda a, b, c, d: a + b * c * d,
                      lambda a, b, c, d: a + b * c * d),
    "add_mul_mix_3": ([(3,), (3,)], lambda x, y: x * y * x + 3 * x * y,
                      lambda x, y: x * y * x + 3 * x * y),
    "einsum": ([(3, 2), (2, 3)], lambda a, b: T.einsum("ik,kj->ij", a, b),
               lambda a, b: a @ b),
    "einsum_3op": ([(3, 2), (2, 3), (3, 2)], lambda a, b, c: T.einsum("ik,kj,jl->il", a, b, c),
                   lambda a, b, c: a @ b @ c),
    "norm": ([(3, 2)], lambda x: T.norm(x) ** 2, lambda x: jax.numpy.linalg.norm(x) ** 2),
    "norm_itself": ([(3, 2, 2)], lambda x: T.norm(x), lambda x: jax.numpy.sqrt((x ** 2).sum())),
    "sum": ([(3, 2)], lambda x: x.sum(), lambda x: x.sum()),
    "sum_axis": ([(3, 2)], lambda x: x.sum(1), lambda x: x.sum(1)),
    "transpose": ([(3, 2)], lambda x: T.transpose(x), lambda x: x.T),
    "transpose_einsum": ([(3, 2)], lambda x: T.einsum("ij->ji", x), lambda x: x.T),
    "tensor_transpose_einsum": ([(2, 3, 2)], lambda x: T.einsum("kij->jik", x),
                                lambda x: x.transpose(2, 1, 0)),
    "inner_product": ([(3,)], lambda x: x @ x, lambda x: x @ x),
    "inner_product_einsum": ([(3,)], lambda x: T.einsum("i,i->", x, x), lambda x: x @ x),
    "summation_einsum": ([(2, 2)], lambda x: T.einsum("ij->", x), lambda x: x.sum()),
    "summation_einsum_2": ([(2, 2), (2, 2)], lambda x, y: T.einsum("ij,ij->", x, y),
                           lambda x, y: (x * y).sum()),
    "trace_einsum": ([(2, 2)], lambda x: T.einsum("ii->", x), lambda x: jax.numpy.trace(x)),
    "quadratic_form": ([(2, 2), (2,)], lambda h, x: T.einsum("ab,a,b->", h, x, x), lambda h, x: x @ h @ x),
    "tensordot_lists": ([(3, 2, 3, 2), (2, 2, 3)], lambda a, b: T.tensordot(a, b, axes=[[1, 3], [0, 1]]),
                        lambda a, b: jax.numpy.tensordot(a, b, axes=[[1, 3], [0, 1]])),
    "tensorinv_matrix": ([(3, 3)], lambda a: T.tensorinv(a + T.Constant(4 * np.eye(3)), 1),
                         lambda a: jax.numpy.linalg.inv(a + 4 * jax.numpy.eye(3))),
    "tensorinv_tensor": ([(2, 2, 2, 2)], lambda a: T.tensorinv(a + T.Constant(4 * np.eye(4).reshape(2, 2, 2, 2))),
                         lambda a: jax.numpy.linalg.tensorinv(a + 4 * jax.numpy.eye(4).reshape(2, 2, 2, 2), 2)),
    "tensorinv_odd_dim": ([(2, 3, 6)], lambda a: T.tensorinv(a + T.Constant(4 * np.eye(6).reshape(2, 3, 6)), 2),
                          lambda a: jax.numpy.linalg.tensorinv(a + 4 * jax.numpy.eye(6).reshape(2, 3, 6), 2)),
}


def _inputs(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, s) for s in shapes]


# every program on NumPy; a spread of them on the other executors (each JAX program is jitted)
CASES = [(name, "numpy") for name in sorted(PROGRAMS)] + [
    (name, b) for b in ("torch", "jax") for name in ("add_mul_mix_3", "einsum_3op", "norm_itself", "power_fraction",
                                                     "tensordot_lists", "tensorinv_tensor", "trace_einsum")]


@pytest.mark.parametrize("name, backend", CASES)
def test_value_and_vjp_match_jax(name, backend, run, jnp):
    shapes, ours, theirs = PROGRAMS[name]
    xs = [T.Variable(f"x{k}", s) for k, s in enumerate(shapes)]
    vals = _inputs(shapes)
    y = ours(*xs)
    want, pullback = jax.vjp(theirs, *[jnp.asarray(v) for v in vals])
    cot = np.random.default_rng(1).standard_normal(np.shape(want))
    u = T.Variable("u", y.shape)
    grads = T.vjp(y, xs, u)
    feed = {**dict(zip(xs, vals)), u: cot}
    for nodes in ([y, *grads], T.optimize([y, *grads])):
        got = run(nodes, feed, backend)
        np.testing.assert_allclose(got[0], np.asarray(want), rtol=1e-10, atol=1e-12)
        for g, w in zip(got[1:], pullback(jnp.asarray(cot))):
            np.testing.assert_allclose(g, np.asarray(w), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", ["add_mul_mix_3", "einsum_3op", "norm_itself", "quadratic_form", "power_3",
                                  "tensorinv_matrix", "tensordot_lists"])
def test_jvp_and_scalar_hvp_match_jax(name, backend, run, jnp):
    shapes, ours, theirs = PROGRAMS[name]
    xs = [T.Variable(f"x{k}", s) for k, s in enumerate(shapes)]
    vs = [T.Variable(f"v{k}", s) for k, s in enumerate(shapes)]
    vals, dirs = _inputs(shapes), _inputs(shapes, seed=2)
    y = ours(*xs)
    feed = {**dict(zip(xs, vals)), **dict(zip(vs, dirs))}
    _, want = jax.jvp(theirs, tuple(map(jnp.asarray, vals)), tuple(map(jnp.asarray, dirs)))
    np.testing.assert_allclose(run(T.optimize(T.jvp(y, xs, vs)), feed, backend), np.asarray(want), rtol=1e-9)
    letters = "abcdefgh"[:y.ndim]
    scalar = T.einsum(f"{letters},{letters}->", y, y) if y.ndim else y * y
    got = run(T.optimize(T.hvp(scalar, xs, vs)), feed, backend)

    def f(*a):
        r = theirs(*a)
        return (r * r).sum()

    primals = tuple(map(jnp.asarray, vals))
    _, want = jax.jvp(jax.grad(f, argnums=tuple(range(len(xs)))), primals, tuple(map(jnp.asarray, dirs)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-8, atol=1e-10)


def test_jtjvps(backend, run):
    # J^T J v for y = A x: A^T A v, by a JVP then a VJP
    x, A, v = T.Variable("x", (2,)), T.Variable("A", (3, 2)), T.Variable("v", (2,))
    y = T.einsum("ab,b->a", A, x)
    jtjv = T.vjp(y, x, T.jvp(y, x, v))
    a, vv = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), np.array([3.0, 4.0])
    got = run(T.optimize(jtjv), {x: np.array([1.0, 2.0]), A: a, v: vv}, backend)
    np.testing.assert_allclose(got, a.T @ a @ vv)


def test_tensordot_lists_is_the_einsum():
    a, b = T.Variable("a", (3, 3, 3, 3)), T.Variable("b", (3, 3, 3, 3))
    from sparsad.tensor.cse import Canonicalizer

    canon = Canonicalizer()
    assert canon.id(T.tensordot(a, b, axes=[[1, 3], [0, 1]])) == canon.id(T.einsum("abcd,bdef->acef", a, b))


def test_power_rules_pick_cheap_nodes():
    x = T.Variable("x", (3,))
    assert x ** 1 is x
    assert isinstance(x ** 2, T.Einsum) and isinstance(x ** 0.5, T.Elementwise)
    assert isinstance(x ** 3, T.Power) and isinstance(T.power(x, -2.5), T.Power)
    with pytest.raises(InputError):
        T.power(x, float("nan"))
