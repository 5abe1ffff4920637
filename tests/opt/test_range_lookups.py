"""Lookups of range generators and sub-arrays at keys inside and outside their range.

`(sum(<_, i> in (lo:hi)) { i -> x(i) })(k)` has no entry unless lo <= k < hi: fusion must keep
that condition when it replaces the lookup by a direct read of x (it once read x(k) for every k).
Compiled programs, the interpreter and NumPy closed forms agree, values and gradients, float64.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sparsad

# f(x, V) = sum_j V[j] * G(j + off), G the entries x[k] (or the row sums of M) for lo <= k < hi
VECTOR_PROGRAMS = {
    "let-bound range generator": "let y = sum(<_, i> in (lo:hi)) { i -> x(i) } in sum(<j, a> in V) a * y(j + off)",
    "inline range generator": "sum(<j, a> in V) a * (sum(<_, i> in (lo:hi)) { i -> x(i) })(j + off)",
    "generator over the input's keys": "let y = sum(<i, b> in x) { i -> b } in "
                                       "sum(<j, a> in V) a * (sum(<_, i> in (lo:hi)) { i -> y(i) })(j + off)",
    "sub-array": "sum(<j, a> in V) a * x(lo:hi)(j + off)",
}
ROW_PROGRAM = ("let Y = sum(<_, i> in (lo:hi)) { i -> M(i) } in "
               "sum(<j, a> in V) a * (sum(<k, b> in Y(j + off)) b)")

N, PAD = 5, 4  # V has N entries; x and M have N + PAD, so j + off (0 <= off <= PAD) reads within them


def _selected(length: int, lo: int, hi: int, off: int) -> np.ndarray:
    """mask over j in [0, N): whether j + off lies in (lo:hi)."""
    keys = np.arange(N) + off
    return (keys >= lo) & (keys < hi) & (keys < length)


@pytest.fixture(scope="module")
def compiled():
    """Each program and gradient built once: hypothesis varies the int inputs lo, hi, off."""
    programs = {}
    for kind, text in {**VECTOR_PROGRAMS, "rows": ROW_PROGRAM}.items():
        programs[kind] = {"compiled": sparsad.compile(text), "interpreted": sparsad.program(text)}
        for wrt in (("M", "V") if kind == "rows" else ("x", "V")):
            for interpret in (False, True):
                programs[kind][wrt, interpret] = sparsad.grad(text, wrt=wrt, interpret=interpret)
    return programs


bounds = st.tuples(st.integers(0, N + PAD), st.integers(0, N + PAD)).map(sorted)


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(sorted(VECTOR_PROGRAMS)), lohi=bounds, off=st.integers(0, PAD), seed=st.integers(0, 2**31))
def test_vector_range_lookups_agree_with_numpy(compiled, kind, lohi, off, seed):
    rng = np.random.default_rng(seed)
    lo, hi = lohi
    x, V = rng.standard_normal(N + PAD), rng.standard_normal(N)
    inputs = dict(x=x, V=V, lo=lo, hi=hi, off=off)
    mask = _selected(N + PAD, lo, hi, off)
    expected = float(np.sum(V[mask] * x[np.arange(N)[mask] + off]))
    for how in ("compiled", "interpreted"):
        assert compiled[kind][how](**inputs) == pytest.approx(expected, rel=1e-12, abs=1e-12), how
    grad_x = np.zeros(N + PAD)
    grad_x[np.arange(N)[mask] + off] = V[mask]
    grad_V = np.where(mask, x[np.minimum(np.arange(N) + off, N + PAD - 1)], 0.0)
    for interpret in (False, True):
        gx = compiled[kind]["x", interpret](**inputs)
        gV = compiled[kind]["V", interpret](**inputs)
        np.testing.assert_allclose(np.asarray(gx, dtype=float), grad_x, err_msg=f"{interpret=}", rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(gV, dtype=float), grad_V, rtol=1e-12, atol=1e-12)


@settings(max_examples=15, deadline=None)
@given(lohi=bounds, off=st.integers(0, PAD), seed=st.integers(0, 2**31))
def test_row_range_lookups_agree_with_numpy(compiled, lohi, off, seed):
    rng = np.random.default_rng(seed)
    lo, hi = lohi
    M, V = rng.standard_normal((N + PAD, 3)), rng.standard_normal(N)
    inputs = dict(M=M, V=V, lo=lo, hi=hi, off=off)
    mask = _selected(N + PAD, lo, hi, off)
    expected = float(np.sum(V[mask] * M[np.arange(N)[mask] + off].sum(axis=1)))
    for how in ("compiled", "interpreted"):
        assert compiled["rows"][how](**inputs) == pytest.approx(expected, rel=1e-12, abs=1e-12), how
    grad_M = np.zeros_like(M)
    grad_M[np.arange(N)[mask] + off] = V[mask][:, None]
    for interpret in (False, True):
        gM = compiled["rows"]["M", interpret](**inputs)
        np.testing.assert_allclose(np.asarray(gM, dtype=float), grad_M, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("text, lo, hi", [
    # regression: fusion read x(j) for every key j of V, ignoring (2:5): 36.0 instead of 12.0
    ("let y = sum(<_, i> in (2:5)) { i -> x(i) } in sum(<j, a> in V) a * y(j)", 2, 5),
    ("sum(<j, a> in V) a * (sum(<_, i> in (2:5)) { i -> x(i) })(j)", 2, 5),
    ("sum(<j, a> in V) a * x(2:5)(j)", 2, 5),
    ("sum(<j, a> in V) a * (sum(<_, i> in (5:8)) { i -> x(i) })(j)", 5, 8),
    ("sum(<j, a> in V) a * x(3:3)(j)", 3, 3),
])
def test_constant_ranges_are_looked_up_only_inside(text, lo, hi):
    x, V = np.arange(1.0, 9.0), np.ones(8)
    inside = (np.arange(8) >= lo) & (np.arange(8) < hi)
    assert sparsad.compile(text)(x=x, V=V) == float(np.sum(x[inside]))
    assert sparsad.program(text)(x=x, V=V) == float(np.sum(x[inside]))
    for interpret, mode in ((False, "reverse"), (True, "reverse"), (True, "forward")):
        grad_V = sparsad.grad(text, wrt="V", interpret=interpret, mode=mode)(x=x, V=V)
        grad_x = sparsad.grad(text, wrt="x", interpret=interpret, mode=mode)(x=x, V=V)
        np.testing.assert_array_equal(np.asarray(grad_V, dtype=float), np.where(inside, x, 0.0))
        np.testing.assert_array_equal(np.asarray(grad_x, dtype=float), np.where(inside, 1.0, 0.0))


def test_a_guarded_read_at_a_negative_key_is_not_a_format_error():
    """The read x[j - 3] happens only where the fused range guard 2 <= j - 3 < 5 holds: its
    bounds check is on those keys (codegen narrows the key's interval under the guard)."""
    text = "sum(<j, b> in V) b * (sum(<_, i> in (2:5)) { i -> x(i) })(j - 3)"
    x, V = np.arange(1.0, 9.0), np.ones(8)
    assert sparsad.program(text)(x=x, V=V) == 12.0
    assert sparsad.compile(text)(x=x, V=V) == 12.0


def test_an_interpreted_gradient_wrt_a_dense_input_has_the_inputs_shape(monkeypatch):
    """When code generation declines, the interpreter's gradient comes back shaped like x, as a
    kernel's does (it was the hull of the keys written: length 3 for a window (1:3) of 9)."""
    import sparsad.codegen

    def decline(*args, **kwargs):
        raise sparsad.errors.UnsupportedError("simulated: code generation declines")

    monkeypatch.setattr(sparsad.codegen, "compile_physical", decline)
    x, V = np.arange(1.0, 10.0), np.ones(5)
    with pytest.warns(sparsad.errors.FallbackWarning, match="simulated"):
        g = sparsad.grad("sum(<j, a> in V) a * x(lo:hi)(j)", wrt="x")(x=x, V=V, lo=1, hi=3)
    np.testing.assert_array_equal(g, np.where((np.arange(9) >= 1) & (np.arange(9) < 3), 1.0, 0.0))
