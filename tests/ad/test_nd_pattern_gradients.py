"""Derivatives w.r.t. an order-3/4 sparse tensor (COO or CSF) live on its entries: a StoredTensor in
the input's format that shares its index arrays, one value per stored entry in storage order, the
same type from the interpreter and from compiled code, and values equal to a NumPy closed form."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparsad
from sparsad.errors import FallbackWarning
from sparsad.formats import StoredTensor, from_coordinates

LEVELS = {3: "sum(<i, ti> in T) sum(<j, tj> in ti) sum(<k, t> in tj) ",
          4: "sum(<i, ti> in T) sum(<j, tj> in ti) sum(<k, tk> in tj) sum(<l, t> in tk) "}


def _factors(coords, vectors):
    """prod over modes of vectors[m][coords[m]]: the multilinear weight of every entry."""
    weight = np.ones(coords.shape[1])
    for m, v in enumerate(vectors):
        weight = weight * v[coords[m]]
    return weight


# (name, body over t and mode keys i j k [l], scalar program's value, gradient closed form)
SCALAR = [
    ("squares", "t * t", lambda c, v, vec: 2 * v),
    ("multilinear", "t * a(i) * b(j) * c(k)", lambda c, v, vec: _factors(c[:3], vec[:3])),
    ("exp", "exp(t) * a(i) + t * t * t", lambda c, v, vec: np.exp(v) * vec[0][c[0]] + 3 * v * v),
]


@st.composite
def tensors(draw):
    """A random order-3/4 tensor built from unsorted coordinates with repeats (summed by
    from_coordinates), possibly empty, in COO or CSF, and one vector per mode."""
    order = draw(st.sampled_from([3, 4]))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(order))
    count = draw(st.integers(0, 25))
    seed = draw(st.integers(0, 2**32 - 1))
    fmt = draw(st.sampled_from(["coo", "csf"]))
    rng = np.random.default_rng(seed)
    coords = np.stack([rng.integers(0, n, count) for n in shape]) if count else np.zeros((order, 0), np.int64)
    T = from_coordinates(coords, rng.standard_normal(count), shape, fmt)
    vectors = [rng.standard_normal(n) for n in shape]
    return T, vectors


def _check_on_pattern(result, T: StoredTensor, expected: np.ndarray, compiled: bool) -> None:
    assert type(result) is StoredTensor
    assert result.format == T.format and result.shape == T.shape
    coords, _ = T.coordinates()
    np.testing.assert_array_equal(result.coordinates()[0], coords)  # the input's entries, in its order
    if compiled:  # its own index arrays, not copies
        assert all(result[f] is T[f] for f in T.format.fields() if f != T.format.values)
    np.testing.assert_allclose(result.values, expected, rtol=1e-12, atol=1e-12)


def _quiet(call):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # every call here compiles
        return call()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tensors(), st.sampled_from(SCALAR), st.sampled_from(["grad", "jacobian", "vjp"]))
def test_scalar_program_derivatives_on_the_entries_of_nd_tensors(case, program, kind):
    T, vectors = case
    _, body, closed = program
    text = LEVELS[T.ndim] + body
    inputs = dict(T=T, a=vectors[0], b=vectors[1], c=vectors[2])
    inputs = {n: v for n, v in inputs.items() if n == "T" or f"{n}(" in body}
    seed = {"cotangent": 1.75} if kind == "vjp" else {}
    make = getattr(sparsad, kind)
    coords, values = T.coordinates()
    expected = closed(coords, values, vectors) * (1.75 if kind == "vjp" else 1.0)
    compiled = _quiet(lambda: make(text, wrt="T")(**inputs, **seed))
    interpreted = make(text, wrt="T", interpret=True)(**inputs, **seed)
    _check_on_pattern(compiled, T, expected, compiled=True)
    _check_on_pattern(interpreted, T, expected, compiled=False)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tensors())
def test_vjp_of_a_vector_program_is_on_the_entries(case):
    """MTTKRP-like: out(i) = sum_jk t * t * b(j); vjp w.r.t. T with cotangent u is 2 t u(i) b(j)."""
    T, vectors = case
    if T.ndim != 3:
        return
    text = "sum(<i, ti> in T) { i -> sum(<j, tj> in ti) sum(<k, t> in tj) t * t * b(j) }"
    u = np.linspace(-1.0, 2.0, T.shape[0])
    coords, values = T.coordinates()
    expected = 2 * values * u[coords[0]] * vectors[1][coords[1]]
    compiled = _quiet(lambda: sparsad.vjp(text, wrt="T")(T=T, b=vectors[1], cotangent=u))
    interpreted = sparsad.vjp(text, wrt="T", interpret=True)(T=T, b=vectors[1], cotangent=u)
    _check_on_pattern(compiled, T, expected, compiled=True)
    _check_on_pattern(interpreted, T, expected, compiled=False)


@pytest.mark.parametrize("fmt", ["coo", "csf"])
@pytest.mark.parametrize("text, closed", [
    # T read by lookup too (the masked gradient: read back on T's pattern)
    (LEVELS[3] + "t * T(i)(j)(k)", lambda c, v: 2 * v),
    # only some slices written: the other entries hold zeros
    ("sum(<i, ti> in T) if i < 2 then " + LEVELS[3][len("sum(<i, ti> in T) "):] + "t * t",
     lambda c, v: np.where(c[0] < 2, 2 * v, 0.0)),
    # a program constant in T: a zero gradient, still on T's pattern
    (LEVELS[3] + "1.0", lambda c, v: np.zeros_like(v)),
])
def test_gradients_that_do_not_write_every_entry_in_order(fmt, text, closed):
    rng = np.random.default_rng(11)
    coords = np.stack([rng.integers(0, n, 30) for n in (4, 3, 5)])
    T = from_coordinates(coords, rng.standard_normal(30), (4, 3, 5), fmt)
    stored, values = T.coordinates()
    expected = closed(stored, values)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        compiled = sparsad.grad(text, wrt="T")(T=T)
    interpreted = sparsad.grad(text, wrt="T", interpret=True)(T=T)
    for result in (compiled, interpreted):
        _check_on_pattern(result, T, expected, compiled=False)


def test_dense_and_other_out_formats_are_unchanged():
    """Only the natural output changes: a dense input still gets an ndarray, out_format='dense' too."""
    rng = np.random.default_rng(5)
    dense = np.where(rng.random((3, 4, 2)) < 0.5, rng.standard_normal((3, 4, 2)), 0.0)
    text = LEVELS[3] + "t * t"
    grad = sparsad.grad(text, wrt="T")
    got = grad(T=dense)
    assert isinstance(got, np.ndarray) and np.allclose(got, 2 * dense)
    T = sparsad.as_format(dense, "coo")
    got = grad(T=T, out_format="dense")
    assert isinstance(got, np.ndarray) and np.allclose(got, 2 * dense)


@pytest.mark.parametrize("fmt", ["coo", "csf"])
def test_the_kernel_writes_one_value_per_entry(fmt):
    """The mechanism, not only the values: the compiled gradient adds into a values array indexed
    by the entry's position (output "entries"), with no dense buffer and no hash map."""
    rng = np.random.default_rng(2)
    coords = np.stack([rng.integers(0, n, 40) for n in (5, 4, 3, 6)])
    T = from_coordinates(coords, rng.standard_normal(40), (5, 4, 3, 6), fmt)
    grad = sparsad.grad(LEVELS[4] + "t * t", wrt="T")
    got = _quiet(lambda: grad(T=T))
    code = grad.show("code")
    assert "# output: entries" in code and "Dict.empty" not in code
    np.testing.assert_allclose(got.values, 2 * T.values, rtol=1e-15)


@pytest.mark.parametrize("fmt", ["coo", "csf"])
@pytest.mark.parametrize("dense_cotangent", [False, True])
def test_vjp_of_a_result_on_the_pattern_with_a_cotangent_on_that_pattern(fmt, dense_cotangent):
    """out = T ⊙ T on T's own pattern; the cotangent U shares T's pattern (or is dense): vjp = 2 t u."""
    rng = np.random.default_rng(4)
    coords = np.stack([rng.integers(0, n, 30) for n in (4, 3, 5)])
    T = from_coordinates(coords, rng.standard_normal(30), (4, 3, 5), fmt)
    U = from_coordinates(T.coordinates()[0], rng.standard_normal(T.nnz), T.shape, fmt)
    cotangent = U.to_numpy() if dense_cotangent else U
    text = "sum(<i, ti> in T) { i -> sum(<j, tj> in ti) { j -> sum(<k, t> in tj) { k -> t * t } } }"
    expected = 2 * T.values * U.values
    compiled = _quiet(lambda: sparsad.vjp(text, wrt="T")(T=T, cotangent=cotangent))
    interpreted = sparsad.vjp(text, wrt="T", interpret=True)(T=T, cotangent=cotangent)
    _check_on_pattern(compiled, T, expected, compiled=True)
    _check_on_pattern(interpreted, T, expected, compiled=False)
