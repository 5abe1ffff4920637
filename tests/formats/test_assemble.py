"""formats.assemble: sorting coordinates into storage order and summing duplicates, against a
dictionary summing each coordinate's values (an independent reference)."""
import numpy as np
from hypothesis import given, settings, strategies as st

from sparsad.formats import from_coordinates
from sparsad.formats.assemble import sort_and_sum


def reference(rows, values):
    sums: dict = {}
    for position, key in enumerate(zip(*(r.tolist() for r in rows))):
        sums[key] = sums.get(key, 0.0) + values[position]
    keys = sorted(sums)
    return keys, [sums[k] for k in keys]


@st.composite
def coordinates(draw):
    order = draw(st.integers(1, 4))
    extents = draw(st.lists(st.integers(1, 6), min_size=order, max_size=order))
    count = draw(st.integers(0, 60))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    rows = [rng.integers(0, n, count) for n in extents]
    if draw(st.booleans()):  # emitted in order, as a kernel's outer loop does
        order_of = np.lexsort(rows[::-1])
        rows = [r[order_of] for r in rows]
    return rows, extents, rng.standard_normal(count)


@settings(max_examples=150, deadline=None)
@given(coordinates())
def test_sorted_unique_and_summed(case):
    rows, extents, values = case
    out_rows, out_values = sort_and_sum(rows, extents, values)
    keys, sums = reference(rows, values)
    assert [tuple(k) for k in zip(*(r.tolist() for r in out_rows))] == keys
    assert np.allclose(out_values, sums, rtol=1e-12, atol=1e-12 * (np.abs(values).sum() + 1))
    assert all(r.dtype == np.int64 for r in out_rows)


def test_more_cells_than_an_int64_key_holds_sorts_mode_by_mode():
    rng = np.random.default_rng(1)
    extents = [2**21] * 3 + [7]  # 2**63 * 7 cells
    rows = [rng.integers(0, 3, 50) * (n // 3) for n in extents]
    values = rng.standard_normal(50)
    out_rows, out_values = sort_and_sum(rows, extents, values)
    keys, sums = reference(rows, values)
    assert [tuple(k) for k in zip(*(r.tolist() for r in out_rows))] == keys
    assert np.allclose(out_values, sums, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(coordinates(), st.sampled_from(["coo", "csf"]))
def test_stored_tensor_from_coordinates_equals_dense_sum(case, name):
    rows, extents, values = case
    stored = from_coordinates(np.array(rows).reshape(len(rows), -1), values, tuple(extents), name)
    dense = np.zeros(extents)
    np.add.at(dense, tuple(rows), values)
    assert np.allclose(stored.to_numpy(), dense, rtol=0, atol=1e-12)
