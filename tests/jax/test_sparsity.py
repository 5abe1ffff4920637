"""sparsad.jax.sparsity: the structural pattern read from a jaxpr holds every nonzero of dense
jax.jacfwd / jax.hessian at random points (float64), on generated compositions of the supported
primitives; what it cannot bound answers "unknown" (never a guess); and sparsad.jax.jacobian /
hessian built on it equal the dense derivatives."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import sparsad.jax as sj  # noqa: E402
from sparsad.errors import InputError  # noqa: E402
jacobian_module = importlib.import_module("sparsad.jax.jacobian")
from sparsad.jax.sparsity import hessian_sparsity, jacobian_sparsity  # noqa: E402

TOL = dict(rtol=1e-12, atol=1e-12)
N = 12


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


# Each step maps the current list of arrays (all depending on x) to a new array appended to it;
# `rng` draws the step's constants (slice bounds, sparse matrices, indices), so a program is a
# list of (step name, seed): generated, shrinkable and deterministic.


def _last(arrays, rng, ndim=None):
    candidates = [a for a in arrays if ndim is None or a.ndim == ndim]
    return candidates[rng.integers(len(candidates))] if candidates else None


def _flat(a):
    return a.reshape(-1)


def _slice(arrays, rng):
    a = _flat(_last(arrays, rng))
    start = int(rng.integers(0, max(a.shape[0] - 1, 1)))
    stop = int(rng.integers(start + 1, a.shape[0] + 1))
    return a[start:stop:int(rng.integers(1, 3))]


def _pad(arrays, rng):
    a = _last(arrays, rng)
    widths = [(int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in range(a.ndim)]
    return jnp.pad(a, widths, constant_values=float(rng.integers(-1, 2)))


def _reshape(arrays, rng):
    a = _flat(_last(arrays, rng))
    size = a.shape[0]
    divisors = [d for d in range(2, size) if size % d == 0]
    return a.reshape(int(rng.choice(divisors)), -1) if divisors else a[::-1]


def _unary(arrays, rng):
    a = _last(arrays, rng)
    # (no float32 round trip: compressed sums of columns would round where single columns do not)
    ops = [jnp.sin, jnp.exp, jnp.tanh, lambda z: z ** 3, lambda z: jnp.log1p(z * z), jax.nn.relu,
           jax.nn.softplus, lambda z: jnp.sqrt(z * z + 1.0), lambda z: jax.lax.stop_gradient(z) * z,
           lambda z: jax.jit(lambda w: jnp.cos(w) * w)(z), lambda z: (z > 0).astype(z.dtype) * z,
           lambda z: jax.checkpoint(lambda w: jnp.sin(w[::-1]) * w)(z)]
    return ops[rng.integers(len(ops))](a)


def _binary(arrays, rng):
    a = _last(arrays, rng)
    same = [b for b in arrays if b.shape == a.shape]
    b = same[rng.integers(len(same))]
    op = [jnp.add, jnp.subtract, jnp.multiply, lambda u, v: u / (1.5 + jnp.cos(v)), jnp.maximum,
          lambda u, v: jnp.where(u > v, u, 2 * v)][rng.integers(6)]
    return op(a, b)


def _broadcast(arrays, rng):
    a = _last(arrays, rng, ndim=2)
    if a is None:
        a = _reshape(arrays, rng)
    if a.ndim != 2:
        return a * 2.0
    row = _flat(_last(arrays, rng))[: a.shape[1]]
    if row.shape[0] != a.shape[1]:
        return a * a.sum(axis=0, keepdims=True)
    return a * row[None, :] + jnp.sin(a[:, :1])


def _reduce(arrays, rng):
    a = _last(arrays, rng)
    axis = int(rng.integers(a.ndim))
    return [jnp.sum, jnp.max, jnp.prod, jnp.cumsum][rng.integers(4)](a, axis=axis)


def _concatenate(arrays, rng):
    return jnp.concatenate([_flat(_last(arrays, rng)), _flat(_last(arrays, rng))])


def _sparse_dot(arrays, rng):
    a = _flat(_last(arrays, rng))
    rows = int(rng.integers(1, 8))
    matrix = np.where(rng.random((rows, a.shape[0])) < 0.3, rng.standard_normal((rows, a.shape[0])), 0.0)
    return jnp.asarray(matrix) @ a


def _move(arrays, rng):
    a = _last(arrays, rng)
    kind = int(rng.integers(6))
    if kind == 5:  # a scatter at constant indices (repeated ones too)
        flat = _flat(a)
        idx = jnp.asarray(rng.integers(0, flat.shape[0], size=3))
        update = jnp.sin(_flat(_last(arrays, rng))[:3])
        return flat.at[idx].set(update) if update.shape[0] == 3 else flat.at[idx].add(update[0])
    if kind == 0:
        return a.T
    if kind == 1:
        return jnp.flip(a, axis=int(rng.integers(a.ndim)))
    if kind == 2:
        return jnp.roll(_flat(a), int(rng.integers(1, 5)))
    if kind == 3:
        flat = _flat(a)
        return flat[jnp.asarray(rng.integers(0, flat.shape[0], size=int(rng.integers(1, 10))))]
    mask = jnp.asarray(rng.random(a.shape) < 0.5)
    return jnp.where(mask, a, jnp.cos(a))  # a constant predicate picks the case per element


def _control(arrays, rng):
    a = _flat(_last(arrays, rng))
    if rng.integers(2):
        return jax.lax.cond(a.sum() > 0, lambda z: z[::-1] * 2, lambda z: jnp.sin(z), a)
    return jax.lax.dynamic_slice(a, (int(rng.integers(a.shape[0])) // 2,), (a.shape[0] - a.shape[0] // 2,)) * 3


def _sort(arrays, rng):  # (its gradient scatters by the sorting permutation: no structural Hessian)
    return jnp.sort(_flat(_last(arrays, rng)))


STEPS = {"slice": _slice, "pad": _pad, "reshape": _reshape, "unary": _unary, "binary": _binary,
         "broadcast": _broadcast, "reduce": _reduce, "concatenate": _concatenate, "sparse_dot": _sparse_dot,
         "move": _move, "control": _control, "sort": _sort}


def build(program):
    def f(x):
        arrays = [x]
        for name, seed in program:
            arrays.append(jnp.atleast_1d(STEPS[name](arrays, np.random.default_rng(seed))))
        picked = [_flat(a) for a in arrays[-2:]]
        return jnp.concatenate(picked)
    return f


programs = st.lists(st.tuples(st.sampled_from(sorted(STEPS)), st.integers(0, 2**16)), min_size=1, max_size=6)
twice_differentiable = st.lists(st.tuples(st.sampled_from(sorted(set(STEPS) - {"sort"})), st.integers(0, 2**16)),
                                min_size=1, max_size=5)


def mask_of(pattern):
    return pattern.toarray().astype(bool)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs, seed=st.integers(0, 2**16))
def test_structural_pattern_holds_every_nonzero_and_the_colouring_jacobian_is_exact(program, seed):
    f = build(program)
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.standard_normal(N))
    analysis = jacobian_sparsity(f, x)
    assert analysis.pattern is not None, analysis.reason
    structural = mask_of(analysis.pattern)
    dense_at = jax.jit(jax.jacfwd(f))  # (jitted: one compile, not one per eager op and shape)
    for point in (x, jnp.asarray(rng.standard_normal(N) * 3)):
        dense = np.asarray(dense_at(point))
        assert structural.shape == dense.shape
        assert not (dense != 0)[~structural].any(), "a nonzero outside the structural pattern"
    J = jax.jit(lambda v: sj.jacobian(f, v).to_dense())(x)  # pattern=None: the structural pattern
    np.testing.assert_allclose(np.asarray(J), np.asarray(dense_at(x)), **TOL)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=twice_differentiable, seed=st.integers(0, 2**16))
def test_structural_hessian_pattern_holds_every_nonzero(program, seed):
    inner = build(program)
    rng = np.random.default_rng(seed)

    def f(x):
        y = inner(x)
        return jnp.sum(jnp.sin(y) * y) + jnp.sum(y[1:] * y[:-1])

    x = jnp.asarray(rng.standard_normal(N))
    analysis = hessian_sparsity(f, x)
    assert analysis.pattern is not None, analysis.reason
    structural = mask_of(analysis.pattern)
    dense = np.asarray(jax.jit(jax.hessian(f))(x))
    assert not (dense != 0)[~structural].any(), "a Hessian nonzero outside the structural pattern"
    np.testing.assert_allclose(np.asarray(jax.jit(lambda v: sj.hessian(f, v).to_dense())(x)), dense, **TOL)


def test_patterns_are_tight_on_stencils_and_sparse_constants():
    side = 5

    def residual(u):
        grid = u.reshape(side, side)
        padded = jnp.pad(grid, 1)
        lap = 4 * grid - padded[:-2, 1:-1] - padded[2:, 1:-1] - padded[1:-1, :-2] - padded[1:-1, 2:]
        return (lap + 0.1 * grid ** 3).reshape(-1)

    u = jnp.asarray(np.random.default_rng(3).standard_normal(side * side))
    exact = np.asarray(jax.jacfwd(residual)(u)) != 0
    np.testing.assert_array_equal(mask_of(jacobian_sparsity(residual, u).pattern), exact)
    energy = lambda v: jnp.sum(residual(v) ** 2)  # noqa: E731 - Hessian: the stencil applied twice
    np.testing.assert_array_equal(mask_of(hessian_sparsity(energy, u).pattern),
                                  np.asarray(jax.hessian(energy)(u)) != 0)
    A = np.diag(np.arange(1.0, 7.0)) + np.diag(np.ones(5), 1)
    np.testing.assert_array_equal(mask_of(jacobian_sparsity(lambda z: jnp.asarray(A) @ z, jnp.ones(6)).pattern),
                                  A != 0)


@pytest.mark.parametrize("f, reason", [
    (lambda x: jax.lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, jnp.sin(s[1])), (0, x))[1], "while"),
    (lambda x: x[jnp.argsort(x)] * x, "indices that depend on the input"),
    (lambda x: x * x[jnp.argmax(x)], "indices that depend on the input"),
    (lambda x: jax.lax.fori_loop(0, 2, lambda i, v: jnp.roll(v, 1) * v, x), "scan"),
    (lambda x: jax.pure_callback(lambda v: v, jax.ShapeDtypeStruct((N,), jnp.float64), x), "callback"),
])
def test_what_cannot_be_bounded_is_unknown_and_falls_back_to_detection(f, reason):
    x = jnp.asarray(np.random.default_rng(5).standard_normal(N))
    analysis = jacobian_sparsity(f, x)
    assert analysis.pattern is None and reason in analysis.reason
    if "callback" not in reason:  # (no JVP rule: no Jacobian at all)
        np.testing.assert_allclose(np.asarray(sj.jacobian(f, x).to_dense()), np.asarray(jax.jacfwd(f)(x)), **TOL)
    with pytest.raises(InputError, match="concrete x"):
        jax.jit(lambda v: sj.jacobian(f, v).values)(x)


def test_custom_jvp_follows_the_custom_rule_not_the_primal():
    """A straight-through estimator: the primal (round) has a zero derivative, the rule says
    identity shifted by one element; the pattern must follow the rule, as jax.jvp does."""
    @jax.custom_jvp
    def shifted_round(z):
        return jnp.round(z)

    @shifted_round.defjvp
    def _(primals, tangents):
        return jnp.round(primals[0]), jnp.roll(tangents[0], 1)

    f = lambda x: shifted_round(x[:6] * 2) + x[6:]  # noqa: E731
    x = jnp.asarray(np.random.default_rng(2).standard_normal(N))
    structural = mask_of(jacobian_sparsity(f, x).pattern)
    dense = np.asarray(jax.jacfwd(f)(x))
    assert not (dense != 0)[~structural].any()
    np.testing.assert_allclose(np.asarray(sj.jacobian(f, x).to_dense()), dense, **TOL)


def count_probes(monkeypatch):
    calls = []
    original = jacobian_module._checked

    def counted(*args):
        calls.append(1)
        return original(*args)
    monkeypatch.setattr(jacobian_module, "_checked", counted)
    return calls


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(program=programs, extra=st.floats(0.0, 0.3), seed=st.integers(0, 2**16))
def test_a_given_superset_of_the_structural_pattern_is_proven_and_not_probed(monkeypatch, program, extra, seed):
    import scipy.sparse as sp

    f = build(program)
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.standard_normal(N))
    structural = mask_of(jacobian_sparsity(f, x).pattern)
    given_mask = structural | (rng.random(structural.shape) < extra)
    calls = count_probes(monkeypatch)
    J = jax.jit(lambda v: sj.jacobian(f, v, pattern=sp.csr_matrix(given_mask.astype(float))).to_dense())(x)
    assert not calls, "a proven pattern was probed"
    np.testing.assert_allclose(np.asarray(J), np.asarray(jax.jit(jax.jacfwd(f))(x)), **TOL)


def test_a_pattern_missing_structural_entries_is_probed_and_accepted_when_right(monkeypatch):
    import scipy.sparse as sp

    f = lambda x: x * 2 + x[::-1] * jnp.zeros(N) + jax.lax.stop_gradient(x) * x  # noqa: E731
    x = jnp.asarray(np.random.default_rng(4).standard_normal(N))
    structural = mask_of(jacobian_sparsity(f, x).pattern)
    assert structural.sum() > N  # the reversed term is structural, its derivative is zero at every x
    calls = count_probes(monkeypatch)
    J = sj.jacobian(f, x, pattern=sp.eye(N, format="csr"))  # right, though not proven: the probe accepts it
    assert calls
    np.testing.assert_allclose(np.asarray(J.to_dense()), np.asarray(jax.jacfwd(f)(x)), **TOL)
    calls.clear()
    with pytest.raises(InputError, match="outside `pattern`"):
        sj.jacobian(lambda z: f(z) + z[::-1], x, pattern=sp.eye(N, format="csr"))
    sj.jacobian(lambda z: f(z) + z[::-1], x, pattern=sp.eye(N, format="csr"), check=False)
    assert len(calls) == 1  # check=False: no probe
    H = sj.hessian(lambda z: jnp.sum(z ** 3), x, pattern=sp.eye(N, format="csr"))
    assert len(calls) == 1  # the diagonal holds the structural Hessian: proven
    np.testing.assert_allclose(np.asarray(H.to_dense()), np.diag(6 * np.asarray(x)), **TOL)


@settings(max_examples=30, deadline=None)
@given(config=st.lists(st.tuples(st.integers(-2, 2), st.integers(-2, 2), st.integers(0, 2)), min_size=3, max_size=3),
       strides=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)))
def test_element_moves_in_numpy_match_lax(config, strides):
    """The NumPy versions of pad and slice applied to element numbers say what lax does."""
    from sparsad.jax import sparsity

    numbers = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    try:
        expected = np.asarray(jax.lax.pad(jnp.asarray(numbers, jnp.int32), jnp.int32(-1), config))
    except (TypeError, ValueError):  # a negative size: lax refuses, the rule is never asked
        return
    np.testing.assert_array_equal(sparsity._np_pad({"padding_config": config}, numbers, -1), expected)
    params = {"start_indices": (0, 1, 0), "limit_indices": (2, 3, 4), "strides": strides}
    np.testing.assert_array_equal(sparsity._np_slice(params, numbers),
                                  np.asarray(jax.lax.slice(jnp.asarray(numbers), (0, 1, 0), (2, 3, 4), strides)))


def test_under_vmap_and_with_a_closed_over_traced_matrix():
    """Inside vmap, x is a batch tracer: the analysis sees its per-example shape. A matrix closed
    over from an outer jit is a tracer, its zeros unknown: every entry it may reach is kept."""
    rng = np.random.default_rng(6)
    A = np.where(rng.random((5, N)) < 0.4, rng.standard_normal((5, N)), 0.0)
    batch = jnp.asarray(rng.standard_normal((2, N)))
    f = lambda z: jnp.asarray(A) @ jnp.sin(z)  # noqa: E731
    values = jax.vmap(lambda v: sj.jacobian(f, v).to_dense())(batch)
    for k in range(2):
        np.testing.assert_allclose(np.asarray(values[k]), np.asarray(jax.jacfwd(f)(batch[k])), **TOL)
    traced = jax.jit(lambda v, matrix: sj.jacobian(lambda z: matrix @ jnp.sin(z), v).to_dense())(batch[0],
                                                                                                 jnp.asarray(A))
    np.testing.assert_allclose(np.asarray(traced), np.asarray(jax.jacfwd(f)(batch[0])), **TOL)
    assert mask_of(jacobian_sparsity(f, batch[0]).pattern).sum() == (A != 0).sum()  # a concrete A: its zeros
