"""sparsad.jax.batching: vmap of compile_program is one call of the batched program (a sum over
the batch) instead of one call per element, lowered or as a host call; values and derivatives
under vmap, jacfwd and jacrev equal dense JAX autodiff in float64. A mapped sparse input keeps
the per-element map."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax")
jnp = jax.numpy

import sparsad.jax as sj  # noqa: E402
from sparsad.jax.batching import batched_expr  # noqa: E402
from sparsad.lang.parse import parse  # noqa: E402

GCN = """
let XW = sum(<k, hr> in H) { k -> sum(<f, h> in hr) sum(<c, w> in W(f)) { c -> h * w } } in
sum(<i, r> in A) { i -> sum(<k, a> in r) sum(<c, v> in XW(k)) { c -> a * v } }"""
ENERGY = "sum(<i, r> in A) sum(<j, a> in r) a * exp(s * x(i)) * sin(x(j))"
_PROGRAMS: dict = {}


def _program(text, lower):
    if (text, lower) not in _PROGRAMS:  # one program per text: its batched programs compile once
        _PROGRAMS[(text, lower)] = sj.compile_program(text, lower=lower)
    return _PROGRAMS[(text, lower)]


def _close(ours, reference):
    np.testing.assert_allclose(np.asarray(ours), np.asarray(reference), rtol=1e-10, atol=1e-10)


def _hlo(fn, *args) -> str:
    return jax.jit(fn).lower(*args).as_text()


def test_the_batched_program_binds_the_stacked_inputs():
    expr, stacked = batched_expr(parse("x(0) * y(1) + z"), ["x", "y"], ["x", "y", "z", "b"])
    assert stacked == {"x": "x_batch", "y": "y_batch"}
    assert str(expr).replace("\n", " ").split() == \
        "sum(<b_, x> in x_batch) { b_ -> let y = y_batch(b_) in x(0) * y(1) + z }".split()


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from(["auto", False]))
def test_vmap_is_one_call_and_matches_dense_autodiff(seed, lower):
    rng = np.random.default_rng(seed)
    csr = sp.csr_matrix(sp.random(6, 6, density=0.4, random_state=seed % 101, format="csr") + sp.eye(6))
    with jax.enable_x64(True):
        A, D = sj.SparseMatrix.from_scipy(csr), jnp.asarray(csr.toarray())
        H, W = jnp.asarray(rng.standard_normal((6, 4))), jnp.asarray(rng.standard_normal((4, 3)))
        gcn = _program(GCN, lower)
        f = lambda a, H, W: gcn(A=A.with_values(a), H=H, W=W)  # noqa: E731
        dense = lambda a, H, W: A.with_values(a).to_dense() @ (H @ W)  # noqa: E731
        Hb, Wb = jnp.stack([H, -2.0 * H]), jnp.stack([W, 0.5 * W])
        for axes, args in [((None, None, 0), (A.values, H, Wb)), ((None, 0, 0), (A.values, Hb, Wb))]:
            mapped = jax.vmap(f, axes)
            text = _hlo(mapped, *args)
            assert "while" not in text and text.count("callback") == (0 if lower == "auto" else 1)
            _close(jax.jit(mapped)(*args), jax.vmap(dense, axes)(*args))
        for transform in (jax.jacfwd, jax.jacrev):  # vmap of jvp / of vjp
            for ours, want in zip(jax.jit(transform(f, (1, 2)))(A.values, H, W), transform(dense, (1, 2))(A.values, H, W)):
                _close(ours, want)
        # grad of a vmapped call: the batched program's own derivative programs
        loss = lambda g: (lambda W: jnp.sum(jnp.sin(jax.vmap(g, (None, None, 0))(A.values, H, jnp.stack([W, 3 * W])))))  # noqa: E731
        _close(jax.jit(jax.grad(loss(f)))(W), jax.grad(loss(dense))(W))

        # a mapped number, a scalar result; and the Hessian (jacfwd of jacrev) in x
        energy = _program(ENERGY, lower)
        x, s = jnp.asarray(rng.standard_normal(6)), jnp.asarray([0.5, 1.0, -1.0])
        g = lambda s, x: energy(A=A, x=x, s=s)  # noqa: E731
        gd = lambda s, x: jnp.sum(D * jnp.outer(jnp.exp(s * x), jnp.sin(x)))  # noqa: E731
        _close(jax.jit(jax.vmap(g, (0, None)))(s, x), jax.vmap(gd, (0, None))(s, x))
        _close(jax.hessian(g, 1)(1.0, x), jax.hessian(gd, 1)(1.0, x))


def test_a_mapped_sparse_input_keeps_the_per_element_map():
    csr = sp.csr_matrix(sp.random(5, 5, density=0.5, random_state=3, format="csr") + sp.eye(5))
    with jax.enable_x64(True):
        A = sj.SparseMatrix.from_scipy(csr)
        x = jnp.arange(1.0, 6.0)
        spmv = _program("sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }", False)
        values = jnp.stack([A.values, -2.0 * A.values])
        mapped = jax.vmap(lambda v: spmv(A=A.with_values(v), x=x))
        assert "while" in _hlo(mapped, values)
        _close(jax.jit(mapped)(values), jnp.stack([csr @ np.asarray(x), -2.0 * (csr @ np.asarray(x))]))
