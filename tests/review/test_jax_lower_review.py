"""Review of sparsad.jax.lower: under jit, a lowered program must agree with the host call, which
raises our ShapeError when the program's index arithmetic reads outside a dense input."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

import sparsad.jax as sj  # noqa: E402


@pytest.mark.xfail(strict=True, reason="jax.lower.dense_lookup reads a static key outside a dense input as "
                   "zero (the host call raises ShapeError); owner: jaxattn")
@pytest.mark.parametrize("text, extra", [("sum(<i, b> in x) b * y((i + 1))", {}),
                                         ("sum(<i, _> in (2:n)) x(i) * y(i)", {"n": 9})])
def test_a_lookup_outside_a_dense_input_is_refused_under_jit_as_eagerly(text, extra):
    rng = np.random.default_rng(0)
    x, y = jnp.asarray(rng.standard_normal(6)), jnp.asarray(rng.standard_normal(6))
    with jax.enable_x64(True):
        with pytest.raises(ValueError):  # eagerly: ShapeError naming the input and the key
            sj.compile_program(text, lower=False)(x=x, y=y, **extra)
        with pytest.raises(Exception):  # under jit the lowered program gives a number instead
            jax.block_until_ready(jax.jit(lambda x, y: sj.compile_program(text)(x=x, y=y, **extra))(x, y))
