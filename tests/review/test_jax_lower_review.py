"""Review of sparsad.jax.lower: under jit, a lowered program agrees with the host call, which
raises our ShapeError when the program's index arithmetic reads outside a dense input (lowered
code read zero there); a lookup guarded by a condition that keeps it inside stays lowered."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

import sparsad.errors  # noqa: E402
import sparsad.jax as sj  # noqa: E402


@pytest.mark.parametrize("text, extra", [("sum(<i, b> in x) b * y((i + 1))", {}),
                                         ("sum(<i, _> in (2:n)) x(i) * y(i)", {"n": 9})])
def test_a_lookup_outside_a_dense_input_is_refused_under_jit_as_eagerly(text, extra):
    rng = np.random.default_rng(0)
    x, y = jnp.asarray(rng.standard_normal(6)), jnp.asarray(rng.standard_normal(6))
    with jax.enable_x64(True):
        with pytest.raises(sparsad.errors.ShapeError):  # eagerly: ShapeError naming the input and the key
            sj.compile_program(text, lower=False)(x=x, y=y, **extra)
        program = sj.compile_program(text)
        with pytest.raises(sparsad.errors.ShapeError):  # under jit it gave a number instead
            jax.block_until_ready(jax.jit(lambda x, y: program(x=x, y=y, **extra))(x, y))
        with pytest.raises(sparsad.errors.ShapeError):
            jax.jit(jax.grad(lambda x, y: program(x=x, y=y, **extra)))(x, y)


def test_a_guarded_shifted_lookup_stays_lowered_and_right():
    text = "sum(<i, b> in x) if i < 5 then b * y((i + 1))"
    rng = np.random.default_rng(1)
    x, y = jnp.asarray(rng.standard_normal(6)), jnp.asarray(rng.standard_normal(6))
    with jax.enable_x64(True):
        program = sj.compile_program(text)
        jitted = jax.jit(lambda x, y: program(x=x, y=y))
        assert "callback" not in jitted.lower(x, y).as_text()
        assert np.isclose(float(jitted(x, y)), float(np.asarray(x)[:5] @ np.asarray(y)[1:]), rtol=1e-12)
        grad = jax.jit(jax.grad(lambda x, y: program(x=x, y=y), argnums=1))(x, y)
        expected = np.zeros(6)
        expected[1:] = np.asarray(x)[:5]
        assert np.allclose(grad, expected, rtol=1e-12, atol=1e-12)
