"""Repeated calls on n-d COO tensors (codegen.reuse): a COO is walked through a CSF conversion
that is reused while the tensor is unchanged. Every change between calls — index contents
written in place (one entry, one axis, or the whole pattern), values written in place, a new
shape, the same arrays in another tensor object — gives the fresh answer: checked against
closed forms in float64 and the interpreter, on tensors drawn by hypothesis."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparsad
from sparsad.codegen.reuse import ConversionCache
from sparsad.formats import from_arrays, from_coordinates

LEVELS = {3: "sum(<i, ti> in T) sum(<j, tj> in ti) sum(<k, t> in tj) ",
          4: "sum(<i, ti> in T) sum(<j, tj> in ti) sum(<k, tk> in tj) sum(<l, t> in tk) "}
FACTORS = {3: "t * a(i) * b(j) * c(k)", 4: "t * a(i) * b(j) * c(k) * d(l)"}
VECTORS = "abcd"


def sqnorm(order: int) -> str:
    return LEVELS[order] + "t * t"


def multilinear(order: int) -> str:
    return LEVELS[order] + FACTORS[order]


def own_arrays(tensor) -> sparsad.formats.StoredTensor:
    """`tensor` over index arrays of the caller's own (writeable copies, validated by from_arrays):
    the index arrays of a tensor sparsad builds are frozen (formats.immutable), so the writes in
    place these tests make are made on a tensor of the caller's arrays, which the cache checksums."""
    fields = {f: (np.array(a) if isinstance(a, np.ndarray) else a) for f, a in tensor.fields.items()}
    return from_arrays(tensor.format, tensor.shape, **fields)


def coo(coords: np.ndarray, values: np.ndarray, shape: tuple) -> sparsad.formats.StoredTensor:
    return own_arrays(from_coordinates(coords, values, shape, "coo"))


def random_coo(rng, shape: tuple, nnz: int):
    """Sorted unique coordinates (order x nnz), values, with every coordinate below shape - 1 on
    every axis (so that adding one to an axis keeps the tensor valid)."""
    inner = tuple(n - 1 for n in shape)
    flat = np.sort(rng.choice(int(np.prod(inner)), size=min(nnz, int(np.prod(inner))), replace=False))
    coords = np.array(np.unravel_index(flat, inner), dtype=np.int64)
    return coords, rng.standard_normal(coords.shape[1])


def coords_of(T) -> np.ndarray:
    return np.asarray(T.coordinates()[0])


def multilinear_value(T, vectors) -> float:
    coords = coords_of(T)
    product = T.values.copy()
    for d in range(T.ndim):
        product = product * vectors[d][coords[d]]
    return float(product.sum())


def multilinear_grad_a(T, vectors) -> np.ndarray:
    coords = coords_of(T)
    weights = T.values.copy()
    for d in range(1, T.ndim):
        weights = weights * vectors[d][coords[d]]
    return np.bincount(coords[0], weights=weights, minlength=T.shape[0])


def vectors_for(rng, shape):
    return [rng.standard_normal(n) for n in shape]


def named(vectors) -> dict:
    return dict(zip(VECTORS, vectors))


@pytest.mark.parametrize("order", [3, 4])
def test_indices_written_in_place_on_each_axis_are_seen(order):
    rng = np.random.default_rng(order)
    shape = (5, 4, 6) if order == 3 else (4, 3, 3, 5)
    coords, values = random_coo(rng, shape, 25)
    T = coo(coords, values, shape)
    vectors = vectors_for(rng, shape)
    value = sparsad.compile(multilinear(order))
    grad_a = sparsad.grad(multilinear(order), wrt="a")
    for _ in range(2):  # the second call takes the repeat path
        assert value(T=T, **named(vectors)) == pytest.approx(multilinear_value(T, vectors), rel=1e-12)
        np.testing.assert_allclose(grad_a(T=T, **named(vectors)), multilinear_grad_a(T, vectors), rtol=1e-12)
    for d in range(order):
        T[f"idx{d}"][:] += 1  # in place: still sorted and unique, every key moved on axis d
        assert value(T=T, **named(vectors)) == pytest.approx(multilinear_value(T, vectors), rel=1e-12)
        np.testing.assert_allclose(grad_a(T=T, **named(vectors)), multilinear_grad_a(T, vectors), rtol=1e-12)
        T[f"idx{d}"][:] -= 1
        assert value(T=T, **named(vectors)) == pytest.approx(multilinear_value(T, vectors), rel=1e-12)


@pytest.mark.parametrize("order", [3, 4])
def test_a_whole_new_pattern_written_in_place_is_seen(order):
    # other coordinates of the same count: the CSF levels (pointers included) change shape
    rng = np.random.default_rng(10 + order)
    shape = (5, 4, 6) if order == 3 else (4, 3, 3, 5)
    coords, values = random_coo(rng, shape, 20)
    T = coo(coords, values, shape)
    vectors = vectors_for(rng, shape)
    grad_a = sparsad.grad(multilinear(order), wrt="a")
    grad_T = sparsad.grad(sqnorm(order), wrt="T")
    for _ in range(2):
        np.testing.assert_allclose(grad_a(T=T, **named(vectors)), multilinear_grad_a(T, vectors), rtol=1e-12)
        np.testing.assert_array_equal(grad_T(T=T).values, 2 * T.values)
    other, _ = random_coo(np.random.default_rng(99 + order), shape, 20)
    assert not np.array_equal(other, coords)
    for d in range(order):
        T[f"idx{d}"][:] = other[d]
    np.testing.assert_allclose(grad_a(T=T, **named(vectors)), multilinear_grad_a(T, vectors), rtol=1e-12)
    result = grad_T(T=T)
    np.testing.assert_array_equal(coords_of(result), other)
    np.testing.assert_array_equal(result.values, 2 * T.values)


def test_an_index_written_in_place_to_an_invalid_one_raises():
    rng = np.random.default_rng(3)
    shape = (4, 3, 3, 5)
    coords, values = random_coo(rng, shape, 15)
    T = coo(coords, values, shape)
    vectors = vectors_for(rng, shape)
    grad_a = sparsad.grad(multilinear(4), wrt="a")
    grad_a(T=T, **named(vectors))
    grad_a(T=T, **named(vectors))
    T["idx3"][-1] = shape[3] + 7  # outside its axis
    with pytest.raises(sparsad.errors.SparsadError):
        grad_a(T=T, **named(vectors))


@pytest.mark.parametrize("order", [3, 4])
def test_values_written_in_place_are_read_fresh(order):
    rng = np.random.default_rng(20 + order)
    shape = (5, 4, 6) if order == 3 else (4, 3, 3, 5)
    coords, values = random_coo(rng, shape, 22)
    T = coo(coords, values, shape)
    grad_T = sparsad.grad(sqnorm(order), wrt="T")
    value = sparsad.compile(sqnorm(order))
    for _ in range(3):
        np.testing.assert_array_equal(grad_T(T=T).values, 2 * T.values)
        assert value(T=T) == pytest.approx(float(T.values @ T.values), rel=1e-12)
        T.values[:] = rng.standard_normal(T.nnz)


def test_other_shapes_and_the_same_arrays_in_another_tensor_are_not_confused():
    rng = np.random.default_rng(5)
    shape = (4, 3, 3, 5)
    coords, values = random_coo(rng, shape, 18)
    T = coo(coords, values, shape)
    vectors = vectors_for(rng, shape)
    grad_a = sparsad.grad(multilinear(4), wrt="a")
    for _ in range(2):
        np.testing.assert_allclose(grad_a(T=T, **named(vectors)), multilinear_grad_a(T, vectors), rtol=1e-12)
    # the same index and value arrays in a new tensor object: converted again, the same answer
    twin = sparsad.formats.StoredTensor(T.format, T.shape, T.fields)
    np.testing.assert_allclose(grad_a(T=twin, **named(vectors)), multilinear_grad_a(T, vectors), rtol=1e-12)
    # a larger first axis, the same entries: the gradient has the new length
    wide = coo(coords, values, (7,) + shape[1:])
    wide_vectors = [rng.standard_normal(7)] + vectors[1:]
    for _ in range(2):
        got = grad_a(T=wide, **named(wide_vectors))
        assert got.shape == (7,)
        np.testing.assert_allclose(got, multilinear_grad_a(wide, wide_vectors), rtol=1e-12)
    np.testing.assert_allclose(grad_a(T=T, **named(vectors)), multilinear_grad_a(T, vectors), rtol=1e-12)


def test_a_field_swapped_for_another_array_is_seen():
    rng = np.random.default_rng(6)
    shape = (5, 4, 6)
    coords, values = random_coo(rng, shape, 20)
    T = coo(coords, values, shape)
    vectors = vectors_for(rng, shape)
    grad_a = sparsad.grad(multilinear(3), wrt="a")
    grad_a(T=T, **named(vectors))
    grad_a(T=T, **named(vectors))
    T._fields["idx0"] = T["idx0"] + 1  # another object in the tensor's own field dict
    np.testing.assert_allclose(grad_a(T=T, **named(vectors)), multilinear_grad_a(T, vectors), rtol=1e-12)


def test_the_cache_converts_an_nd_coo_once_and_again_after_any_index_write():
    rng = np.random.default_rng(7)
    coords, values = random_coo(rng, (4, 3, 3, 5), 15)
    T = coo(coords, values, (4, 3, 3, 5))
    cache = ConversionCache()
    calls = []
    convert = lambda: calls.append(1) or sparsad.formats.as_format(T, "csf")  # noqa: E731
    first = cache.stored("T", T, None, convert)
    assert cache.reused("T", T, None) is first and len(calls) == 1
    T.values[0] += 1.0  # shared by the CSF form (read live): no conversion
    assert cache.stored("T", T, None, convert) is first and len(calls) == 1
    for d in range(4):
        for position in (0, T.nnz // 2, T.nnz - 1):
            T[f"idx{d}"][position] += 1
            assert cache.reused("T", T, None) is None
            T[f"idx{d}"][position] -= 1
            assert cache.reused("T", T, None) is first  # the same contents again
    assert cache.stored("T", T, "csf", convert) is not first  # another key


@st.composite
def coo_cases(draw):
    order = draw(st.sampled_from([3, 4]))
    shape = tuple(draw(st.integers(2, 5)) for _ in range(order))
    seed = draw(st.integers(0, 2**32 - 1))
    nnz = draw(st.integers(1, 30))
    writes = draw(st.lists(st.tuples(st.integers(0, order - 1), st.integers(0, 10**6), st.booleans()),
                           min_size=1, max_size=4))
    return order, shape, seed, nnz, writes


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(coo_cases())
def test_compiled_repeats_match_the_interpreter_and_closed_forms_after_in_place_writes(case):
    order, shape, seed, nnz, writes = case
    rng = np.random.default_rng(seed)
    coords, values = random_coo(rng, tuple(n + 1 for n in shape), nnz)
    shape = tuple(n + 1 for n in shape)
    T = coo(coords, values, shape)
    vectors = vectors_for(rng, shape)
    compiled = sparsad.grad(multilinear(order), wrt="a")
    interpreted = sparsad.grad(multilinear(order), wrt="a", interpret=True)
    grad_T = sparsad.grad(sqnorm(order), wrt="T")
    for d, where, move_axis in [(0, 0, False)] + writes:
        expected = multilinear_grad_a(T, vectors)
        for _ in range(2):
            got = compiled(T=T, **named(vectors))
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(interpreted(T=T, **named(vectors)), expected, rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(grad_T(T=T).values, 2 * T.values)
        # the next write, in place: a whole axis moved by one (still a valid tensor), or a value
        if move_axis and T[f"idx{d}"].max() + 1 < shape[d]:
            T[f"idx{d}"][:] += 1
        else:
            T.values[where % T.nnz] = rng.standard_normal()


@pytest.mark.parametrize("declared", [False, True])
def test_a_csf_tensor_written_in_place_out_of_range_raises_on_repeated_calls(declared):
    # a CSF is read as it is (or, declared, "converted" to itself): the kernel's guard answer
    # of an earlier call must not be reused for index arrays the caller can write
    rng = np.random.default_rng(8)
    shape = (5, 4, 6)
    coords, values = random_coo(rng, shape, 20)
    T = own_arrays(from_coordinates(coords, values, shape, "csf"))
    vectors = vectors_for(rng, shape)
    grad_a = sparsad.grad(multilinear(3), wrt="a")
    if declared:
        grad_a = grad_a.compiled(formats={"T": "csf"})
    for _ in range(3):
        np.testing.assert_allclose(grad_a(T=T, **named(vectors)), multilinear_grad_a(T, vectors), rtol=1e-12)
    T["pos1"][-1] = T["pos1"][-1] + 50  # past the end of idx1
    with pytest.raises(sparsad.errors.SparsadError):
        grad_a(T=T, **named(vectors))


# -- tensors sparsad built: frozen index arrays (formats.immutable) certified without reading them --

def counting_fingerprints(monkeypatch) -> list:
    """Every call of the cache's fingerprint pass over some array's contents, recorded."""
    import sparsad.codegen.reuse as reuse

    calls: list = []
    original = reuse._fingerprint

    def counted(*arguments):
        calls.append(len(arguments) - 1)
        return original(*arguments)

    monkeypatch.setattr(reuse, "_fingerprint", counted)
    return calls


@pytest.mark.parametrize("order", [3, 4])
def test_frozen_index_arrays_are_never_read_again_and_values_are_read_fresh(order, monkeypatch):
    rng = np.random.default_rng(40 + order)
    shape = (5, 4, 6) if order == 3 else (4, 3, 3, 5)
    coords, values = random_coo(rng, shape, 22)
    T = from_coordinates(coords, values, shape, "coo")  # sparsad's own: frozen index arrays
    vectors = vectors_for(rng, shape)
    grad_T = sparsad.grad(sqnorm(order), wrt="T")
    grad_a = sparsad.grad(multilinear(order), wrt="a")
    value = sparsad.compile(sqnorm(order))
    for f in (grad_T, value):
        f(T=T)
    grad_a(T=T, **named(vectors))
    calls = counting_fingerprints(monkeypatch)
    for _ in range(3):
        np.testing.assert_array_equal(grad_T(T=T).values, 2 * T.values)
        assert value(T=T) == pytest.approx(float(T.values @ T.values), rel=1e-12)
        np.testing.assert_allclose(grad_a(T=T, **named(vectors)), multilinear_grad_a(T, vectors), rtol=1e-12)
        T.values[:] = rng.standard_normal(T.nnz)  # in place: the values are not frozen
    assert calls == []
    # the caller's own index arrays (the same entries): fingerprinted on every repeated call
    own = coo(coords, T.values.copy(), shape)
    for _ in range(2):
        np.testing.assert_array_equal(grad_T(T=own).values, 2 * own.values)
    assert calls and all(n > 0 for n in calls)


def test_a_frozen_tensor_refuses_index_writes_and_its_answers_stay_right():
    rng = np.random.default_rng(9)
    shape = (4, 3, 3, 5)
    coords, values = random_coo(rng, shape, 16)
    T = from_coordinates(coords, values, shape, "coo")
    vectors = vectors_for(rng, shape)
    grad_a = sparsad.grad(multilinear(4), wrt="a")
    for _ in range(2):
        np.testing.assert_allclose(grad_a(T=T, **named(vectors)), multilinear_grad_a(T, vectors), rtol=1e-12)
    for d in range(4):
        with pytest.raises(ValueError):
            T[f"idx{d}"][0] = 0
        with pytest.raises(ValueError):
            T[f"idx{d}"].flags.writeable = True
        with pytest.raises(ValueError):
            T[f"idx{d}"].resize(T.nnz + 1, refcheck=False)
    np.testing.assert_array_equal(coords_of(T), coords)
    np.testing.assert_allclose(grad_a(T=T, **named(vectors)), multilinear_grad_a(T, vectors), rtol=1e-12)
    # a field replaced by a writeable array of other contents: another object, converted again
    T._fields["idx3"] = np.array(T["idx3"]) + 1
    np.testing.assert_allclose(grad_a(T=T, **named(vectors)), multilinear_grad_a(T, vectors), rtol=1e-12)
    T["idx3"][:] -= 1  # ... and now the caller's to write in place: seen by checksum
    np.testing.assert_allclose(grad_a(T=T, **named(vectors)), multilinear_grad_a(T, vectors), rtol=1e-12)


def test_new_tensors_over_the_same_frozen_arrays_are_converted_again():
    from sparsad.formats.pattern import with_values

    rng = np.random.default_rng(10)
    shape = (4, 3, 3, 5)
    coords, values = random_coo(rng, shape, 18)
    T = from_coordinates(coords, values, shape, "coo")
    grad_T = sparsad.grad(sqnorm(4), wrt="T")
    value = sparsad.compile(sqnorm(4))
    for _ in range(2):
        assert value(T=T) == pytest.approx(float(T.values @ T.values), rel=1e-12)
    for other in (with_values(T, 3 * T.values), sparsad.formats.StoredTensor(T.format, T.shape, T.fields)):
        for _ in range(2):
            assert value(T=other) == pytest.approx(float(other.values @ other.values), rel=1e-12)
            result = grad_T(T=other)
            np.testing.assert_array_equal(result.values, 2 * other.values)
            np.testing.assert_array_equal(coords_of(result), coords)
        assert value(T=T) == pytest.approx(float(T.values @ T.values), rel=1e-12)
