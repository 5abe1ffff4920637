"""Derivatives of einsum graphs against JAX's dense autodiff on the same computation (float64)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsad import tensor as T
from sparsad.errors import ShapeError
from sparsad.tensor.graph import topological

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

RTOL, ATOL = 1e-10, 1e-11


def run(nodes, feed):
    return T.Executor(nodes).run(feed)


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL)


# ----- a fixed model with every node type --------------------------------------------------
def model_graph():
    A = T.Variable("A", (3, 4))
    B = T.Variable("B", (4, 5))
    x = T.Variable("x", (5,))
    y = T.einsum("ij,jk,k->i", A, B, x)
    z = T.tanh(y) * y + T.exp(0.1 * y) - T.sin(y)
    w = T.einsum("i,ij->j", z, A) + T.transpose(B).sum(0) + T.log(T.square(B.sum(1)) + 1.0)
    loss = T.einsum("j,j->", w, w) + T.sqrt(T.einsum("k,k->", x, x)) * 0.5
    return (A, B, x), y, loss


def model_jax(a, b, x):
    y = jnp.einsum("ij,jk,k->i", a, b, x)
    z = jnp.tanh(y) * y + jnp.exp(0.1 * y) - jnp.sin(y)
    w = jnp.einsum("i,ij->j", z, a) + b.T.sum(0) + jnp.log(b.sum(1) ** 2 + 1.0)
    return jnp.dot(w, w) + jnp.sqrt(jnp.dot(x, x)) * 0.5


@pytest.fixture
def model():
    xs, y, loss = model_graph()
    rng = np.random.default_rng(1)
    vals = [rng.standard_normal(v.shape) * 0.5 for v in xs]
    return xs, y, loss, vals


def test_grad_matches_jax(model):
    xs, _, loss, vals = model
    got = run(T.grad(loss, list(xs)), dict(zip(xs, vals)))
    want = jax.jit(jax.grad(model_jax, argnums=(0, 1, 2)))(*vals)
    for g, w in zip(got, want):
        close(g, w)


def test_vjp_and_jvp_match_jax(model):
    (A, B, x), y, _, vals = model
    rng = np.random.default_rng(2)
    v = T.Variable("v", y.shape)
    tA, tB = T.Variable("tA", A.shape), T.Variable("tB", B.shape)
    v_val, tA_val, tB_val = rng.standard_normal(y.shape), rng.standard_normal(A.shape), rng.standard_normal(B.shape)
    f = lambda a, b: jnp.einsum("ij,jk,k->i", a, b, vals[2])  # noqa: E731
    _, pullback = jax.vjp(f, vals[0], vals[1])
    feed = {A: vals[0], B: vals[1], x: vals[2], v: v_val, tA: tA_val, tB: tB_val}
    got = run(T.vjp(y, [A, B], v) + [T.jvp(y, [A, B], [tA, tB])], feed)
    want_vjp = pullback(v_val)
    close(got[0], want_vjp[0])
    close(got[1], want_vjp[1])
    close(got[2], jax.jvp(f, (vals[0], vals[1]), (tA_val, tB_val))[1])


def test_hvp_matches_jax(model):
    xs, _, loss, vals = model
    rng = np.random.default_rng(3)
    vs = [T.Variable(f"v{i}", x.shape) for i, x in enumerate(xs)]
    v_vals = [rng.standard_normal(x.shape) for x in xs]
    got = run(T.hvp(loss, list(xs), vs), {**dict(zip(xs, vals)), **dict(zip(vs, v_vals))})
    g = lambda *a: jax.grad(model_jax, argnums=(0, 1, 2))(*a)  # noqa: E731
    want = jax.jit(lambda a, t: jax.jvp(g, a, t)[1])(tuple(vals), tuple(v_vals))
    for a, b in zip(got, want):
        close(a, b)


def test_explicit_jacobian_and_hessian_match_jax(model):
    (A, B, x), y, loss, vals = model
    feed = dict(zip((A, B, x), vals))
    J = T.jacobian(y, B)
    assert J.shape == y.shape + B.shape
    # §4.2: the explicit Jacobian is an einsum graph built from identity nodes, not VJP loops.
    assert any(isinstance(n, T.Identity) for n in topological([J]))
    H = T.hessian(loss, [A, x])
    got = run([J, H[0][0], H[0][1], H[1][0], H[1][1]], feed)
    f = lambda b: jnp.einsum("ij,jk,k->i", vals[0], b, vals[2])  # noqa: E731
    close(got[0], jax.jit(jax.jacobian(f))(vals[1]))
    hess = jax.jit(jax.hessian(model_jax, argnums=(0, 2)))(*vals)
    close(got[1], hess[0][0])
    close(got[2], hess[0][1])
    close(got[3], hess[1][0])
    close(got[4], hess[1][1])


def test_tensorinv_derivative_matches_jax():
    M = T.Variable("M", (2, 3, 2, 3))
    b = T.Variable("b", (2, 3))
    y = T.einsum("ijkl,kl,ij->", T.tensorinv(M), b, b)
    rng = np.random.default_rng(4)
    m = rng.standard_normal((6, 6)) + 6 * np.eye(6)
    m = m.reshape(2, 3, 2, 3)
    bv = rng.standard_normal((2, 3))
    f = lambda m_, b_: jnp.einsum("ijkl,kl,ij->", jnp.linalg.tensorinv(m_, 2), b_, b_)  # noqa: E731
    got = run(T.grad(y, [M, b]) + [T.hessian(y, [M])[0][0]], {M: m, b: bv})
    refs = jax.jit(lambda m_, b_: (jax.grad(f, (0, 1))(m_, b_), jax.hessian(f, 0)(m_, b_)))(m, bv)
    close(got[0], refs[0][0])
    close(got[1], refs[0][1])
    close(got[2], refs[1])


def test_diagonal_and_broadcast_subscripts():
    A = T.Variable("A", (3, 3))
    v = T.Variable("v", (4,))
    y = T.einsum("ii,k->ik", A, v)
    loss = T.einsum("ik,ik->", y, y)
    rng = np.random.default_rng(5)
    a, vv = rng.standard_normal((3, 3)), rng.standard_normal(4)
    f = lambda a_, v_: jnp.sum(jnp.einsum("ii,k->ik", a_, v_) ** 2)  # noqa: E731
    got = run(T.grad(loss, [A, v]) + [T.jacobian(y, A), T.hessian(loss, [A])[0][0]], {A: a, v: vv})
    refs = jax.jit(lambda a_, v_: (jax.grad(f, (0, 1))(a_, v_),
                                   jax.jacobian(lambda t: jnp.einsum("ii,k->ik", t, v_))(a_),
                                   jax.hessian(f, 0)(a_, v_)))(a, vv)
    close(got[0], refs[0][0])
    close(got[1], refs[0][1])
    close(got[2], refs[1])
    close(got[3], refs[2])


def test_unreached_variable_has_zero_derivative():
    A, B = T.Variable("A", (2, 2)), T.Variable("B", (3,))
    y = T.einsum("ij,ij->", A, A)
    gB, JB = T.grad(y, B), T.jacobian(y, B)
    out = run([gB, JB], {A: np.ones((2, 2)), B: np.ones(3)})
    assert out[0].shape == (3,) and not out[0].any() and not out[1].any()


def test_derivative_errors_name_the_problem():
    A = T.Variable("A", (2, 3))
    y = T.einsum("ij->i", A)
    with pytest.raises(ShapeError, match="not a scalar"):
        T.grad(y, A)
    with pytest.raises(ShapeError, match="cotangent"):
        T.vjp(y, A, T.Variable("v", (3,)))
    with pytest.raises(ShapeError, match="tangent"):
        T.jvp(y, A, T.Variable("t", (3, 2)))


# ----- hypothesis: random small einsum expressions -------------------------------------------
LETTERS = "abcd"
SIZES = {"a": 2, "b": 3, "c": 2, "d": 3}


@st.composite
def einsum_problems(draw):
    n_ops = draw(st.integers(1, 3))
    subs = [draw(st.text(alphabet=LETTERS, min_size=1, max_size=3)) for _ in range(n_ops)]
    present = sorted(set("".join(subs)))
    out = draw(st.lists(st.sampled_from(present), unique=True, max_size=3))
    fn = draw(st.sampled_from(["tanh", "sin", "square", "none"]))
    seed = draw(st.integers(0, 2**16))
    return subs, "".join(out), fn, seed


@settings(max_examples=15, deadline=None)
@given(einsum_problems())
def test_generated_einsums_match_jax(problem):
    subs, out, fn, seed = problem
    spec = ",".join(subs) + "->" + out
    rng = np.random.default_rng(seed)
    xs = [T.Variable(f"x{k}", [SIZES[c] for c in s]) for k, s in enumerate(subs)]
    vals = [rng.standard_normal(x.shape) for x in xs]
    y = T.einsum(spec, *xs)
    if fn != "none":
        y = T.Elementwise(fn, y)
    loss = T.einsum(f"{out},{out}->", y, y)

    def f(*a):
        z = jnp.einsum(spec, *a)
        z = {"tanh": jnp.tanh, "sin": jnp.sin, "square": jnp.square, "none": lambda t: t}[fn](z)
        return jnp.sum(z * z)

    ts = [T.Variable(f"t{k}", x.shape) for k, x in enumerate(xs)]
    t_vals = [rng.standard_normal(x.shape) for x in xs]
    feed = {**dict(zip(xs, vals)), **dict(zip(ts, t_vals))}
    nodes = T.grad(loss, xs) + T.hvp(loss, xs, ts) + [T.hessian(loss, [xs[0]])[0][0], T.jacobian(y, xs[-1])]
    got = run(nodes, feed)
    n = len(xs)
    argnums = tuple(range(n))
    act = {"tanh": jnp.tanh, "sin": jnp.sin, "square": jnp.square, "none": lambda t: t}[fn]

    @jax.jit
    def references(vals, t_vals):
        # One compiled function for every reference keeps the test fast.
        grads = jax.grad(f, argnums=argnums)(*vals)
        hvps = jax.jvp(lambda *a: jax.grad(f, argnums=argnums)(*a), tuple(vals), tuple(t_vals))[1]
        hess = jax.hessian(f, 0)(*vals)
        jac = jax.jacobian(lambda last: act(jnp.einsum(spec, *vals[:-1], last)))(vals[-1])
        return grads, hvps, hess, jac

    want_g, want_h, want_hess, want_jac = references(tuple(vals), tuple(t_vals))
    for k in range(n):
        close(got[k], want_g[k])
        close(got[n + k], want_h[k])
    close(got[2 * n], want_hess)
    close(got[2 * n + 1], want_jac)
