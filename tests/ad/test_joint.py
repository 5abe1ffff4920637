"""sparsad.ad.joint: one vjp (jvp) program for several inputs equals the per-input derivative
programs, and central finite differences of the program, on random inputs (interpreted: no
kernels to compile)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import sparsad
from sparsad.ad.joint import fit_dense, joint_jvp_expr, joint_vjp_expr
from sparsad.bridge import derivative_expr
from sparsad.errors import UnsupportedError
from sparsad.lang.typecheck import value_type

# (program, the inputs differentiated together, {input: shape or "A" for the sparse matrix})
PROGRAMS = [
    ("sum(<i, a> in u) { i -> a * v(i) * exp(w(i)) }", ("u", "v", "w"), {"u": (4,), "v": (4,), "w": (4,)}),
    ("sum(<i, a> in u) a * sin(v(i))", ("u", "v"), {"u": (3,), "v": (3,)}),
    ("""sum(<i, r> in A) { i ->
          let z = sum(<j, a> in r) exp(sum(<d, q> in Q(i)) q * K(j)(d)) in
          sum(<j, a> in r)
            let p = exp(sum(<d, q> in Q(i)) q * K(j)(d)) / z in
            sum(<c, v> in V(j)) { c -> p * v } }""", ("Q", "K", "V"),
     {"A": "A", "Q": (5, 2), "K": (5, 2), "V": (5, 3)}),
    ("""let XW = sum(<k, hr> in H) { k -> sum(<f, h> in hr) sum(<c, w> in W(f)) { c -> h * w } } in
        sum(<i, r> in A) { i -> sum(<k, a> in r) sum(<c, v> in XW(k)) { c -> a * v } }""", ("H", "W"),
     {"A": "A", "H": (5, 3), "W": (3, 2)}),
    ("sum(<i, r> in X) sum(<j, x> in r) if i = j then x * Y(i)(j) else x * x * Y(j)(i)", ("X", "Y"),
     {"X": (3, 3), "Y": (3, 3)}),
]


def _inputs(shapes, seed):
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        if shape == "A":
            matrix = sp.random(5, 5, density=0.4, random_state=seed % 97, format="csr") + sp.eye(5)
            out[name] = sp.csr_matrix(matrix)
        else:
            out[name] = rng.standard_normal(shape)
    return out


def _dense(value, shape):
    return fit_dense(value, shape)


@pytest.mark.parametrize("index", range(len(PROGRAMS)))
@settings(max_examples=3, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_joint_vjp_equals_each_vjp_and_finite_differences(index, seed):
    text, wrts, shapes = PROGRAMS[index]
    program = sparsad.program(text)
    inputs = _inputs(shapes, seed)
    types = {n: value_type(v) for n, v in inputs.items()}
    out = np.asarray(_dense(program(**inputs), None))
    seed_value = np.random.default_rng(seed + 1).standard_normal(out.shape) if out.ndim else 0.7
    joint = joint_vjp_expr(program.expr, wrts, types, "g")
    stacked = np.asarray(sparsad.Program(joint)(**inputs, g=seed_value, out_format="dense"))
    for t, name in enumerate(wrts):
        shape = inputs[name].shape
        block = _dense(stacked[t], shape) if t < stacked.shape[0] else np.zeros(shape)
        alone = sparsad.Program(derivative_expr(program, "vjp", name, types, "g"))
        np.testing.assert_allclose(block, _dense(alone(**inputs, g=seed_value, out_format="dense"), shape),
                                   rtol=1e-12, atol=1e-12)
        fd = np.zeros(shape)  # <seed, d out / d name[entry]> by central differences
        for entry in np.ndindex(*shape):
            moved = []
            for sign in (1.0, -1.0):
                changed = dict(inputs)
                changed[name] = inputs[name].copy()
                changed[name][entry] += sign * 1e-6
                moved.append(np.asarray(_dense(program(**changed), out.shape if out.ndim else None)))
            fd[entry] = np.sum(seed_value * (moved[0] - moved[1])) / 2e-6
        np.testing.assert_allclose(block, fd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("index", range(len(PROGRAMS)))
@settings(max_examples=2, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_joint_jvp_equals_the_sum_of_each_jvp(index, seed):
    text, wrts, shapes = PROGRAMS[index]
    program = sparsad.program(text)
    inputs = _inputs(shapes, seed)
    types = {n: value_type(v) for n, v in inputs.items()}
    rng = np.random.default_rng(seed + 2)
    tangents = {f"t{k}": rng.standard_normal(inputs[w].shape) for k, w in enumerate(wrts)}
    joint = joint_jvp_expr(program.expr, {w: f"t{k}" for k, w in enumerate(wrts)}, types)
    got = np.asarray(_dense(sparsad.Program(joint)(**inputs, **tangents, out_format="dense"), None))
    want = 0.0
    for k, name in enumerate(wrts):
        alone = sparsad.Program(derivative_expr(program, "jvp", name, types, "s"))
        want = want + np.asarray(_dense(alone(**inputs, s=tangents[f"t{k}"], out_format="dense"), got.shape or None))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_inputs_of_different_types_are_not_joined_and_fit_dense_refuses_lost_entries():
    types = {"u": value_type(np.ones(3)), "M": value_type(np.ones((3, 3)))}
    assert joint_vjp_expr(sparsad.program("sum(<i, r> in M) r(i) * u(i)").expr, ("u", "M"), types, "g") is None
    np.testing.assert_array_equal(fit_dense(np.ones((1, 2)), (2, 3)), [[1, 1, 0], [0, 0, 0]])
    with pytest.raises(UnsupportedError):
        fit_dense(np.ones((3, 3)), (2, 2))
