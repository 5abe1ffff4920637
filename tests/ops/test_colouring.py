"""Star colourings (checked by brute force on small graphs) and their direct recovery."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from sparsad.errors import InputError
from sparsad.ops.colouring import colour_columns, star_colouring, star_recovery, symmetric_pattern
from sparsad.ops.pattern import CSRPattern


def random_symmetric(n: int, density: float, seed: int) -> CSRPattern:
    rng = np.random.default_rng(seed)
    mask = rng.random((n, n)) < density
    mask = mask | mask.T | np.eye(n, dtype=bool)
    m = sp.csr_matrix(mask.astype(float))
    m.sort_indices()
    return CSRPattern(m.indptr, m.indices, m.shape)


def neighbours(pattern: CSRPattern) -> list[set[int]]:
    return [set(pattern.indices[pattern.indptr[i]:pattern.indptr[i + 1]].tolist()) - {i}
            for i in range(pattern.shape[0])]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 14), density=st.floats(0.0, 0.7), seed=st.integers(0, 2**31))
def test_star_colouring_has_no_two_coloured_path_on_four_vertices(n, density, seed):
    pattern = random_symmetric(n, density, seed)
    colours = star_colouring(pattern)
    adj = neighbours(pattern)
    for v in range(n):
        assert all(colours[v] != colours[w] for w in adj[v])
    for a in range(n):  # every path a-b-c-d (distinct vertices) uses at least three colours
        for b in adj[a]:
            for c in adj[b] - {a}:
                for d in adj[c] - {a, b}:
                    assert len({colours[a], colours[b], colours[c], colours[d]}) >= 3, (a, b, c, d)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 14), density=st.floats(0.0, 0.7), seed=st.integers(0, 2**31))
def test_star_recovery_reads_every_entry_from_the_compressed_products(n, density, seed):
    pattern = random_symmetric(n, density, seed)
    rng = np.random.default_rng(seed + 1)
    weights = rng.standard_normal((n, n))
    H = (weights + weights.T) * sp.csr_matrix((np.ones(pattern.nnz), pattern.indices, pattern.indptr),
                                              shape=(n, n)).toarray()
    colours = star_colouring(pattern)
    seeds = np.eye(int(colours.max()) + 1)[colours]  # (n, colours)
    compressed = H @ seeds
    row, colour = star_recovery(pattern, colours)
    np.testing.assert_array_equal(compressed[row, colour], H[pattern.rows, pattern.indices])


def test_star_needs_no_more_colours_than_distance1_on_grids_and_refuses_a_non_star_colouring():
    one = sp.diags([np.ones(29), np.ones(30), np.ones(29)], [-1, 0, 1])
    grid = sp.kronsum(one, one).tocsr()
    pattern = CSRPattern(grid.indptr, grid.indices, grid.shape)
    assert star_colouring(pattern).max() <= colour_columns(pattern).max()
    path = sp.diags([np.ones(3), np.ones(4), np.ones(3)], [-1, 0, 1]).tocsr()
    with pytest.raises(InputError, match="not a star colouring"):  # 0-1-0-1 on a path of four
        star_recovery(CSRPattern(path.indptr, path.indices, path.shape), np.array([0, 1, 0, 1]))


def test_symmetric_pattern_is_the_union_with_the_transpose():
    m = sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 1.0]]))
    pattern = symmetric_pattern(CSRPattern(m.indptr, m.indices, m.shape))
    dense = np.zeros((3, 3), dtype=bool)
    dense[pattern.rows, pattern.indices] = True
    np.testing.assert_array_equal(dense, (m.toarray() != 0) | (m.toarray() != 0).T)


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 12), n=st.integers(1, 12), density=st.floats(0.0, 0.7), seed=st.integers(0, 2**31))
def test_reverse_plan_colours_rows_and_reads_every_entry_from_the_compressed_vjps(m, n, density, seed):
    """Rows sharing a column get different colours, and the gather reads entry (i, j) off the
    product of its row colour's seed: S^T J at (colour(i), j), checked with a random J."""
    from sparsad.ops.colouring import compression_plan

    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < density
    matrix = sp.csr_matrix(mask.astype(float))
    matrix.sort_indices()
    pattern = CSRPattern(matrix.indptr, matrix.indices, matrix.shape)
    colours, gather = compression_plan(pattern, "reverse")
    assert colours.shape == (m,)
    for j in range(n):
        rows = np.flatnonzero(mask[:, j])
        assert len(set(colours[rows].tolist())) == len(rows)
    values = rng.standard_normal(pattern.nnz)
    dense = sp.csr_matrix((values, pattern.indices, pattern.indptr), shape=(m, n)).toarray()
    n_colours = int(colours.max()) + 1 if m else 0
    seeds = (colours[None, :] == np.arange(n_colours)[:, None]).astype(float)  # (colours, m)
    np.testing.assert_array_equal((seeds @ dense).reshape(-1)[gather], values)


def test_reverse_plan_of_a_symmetric_pattern_reuses_the_column_colouring():
    from sparsad.ops.colouring import compression_plan

    pattern = random_symmetric(9, 0.3, 11)
    colours, _ = compression_plan(pattern, "jacobian")
    row_colours, gather = compression_plan(pattern, "reverse")
    assert row_colours is colours
    rows = np.asarray(pattern.rows)
    np.testing.assert_array_equal(gather, colours[rows] * 9 + pattern.indices)


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 12), n=st.integers(1, 12), density=st.floats(0.0, 0.7), seed=st.integers(0, 2**31),
       wide=st.booleans())
def test_column_plan_reads_every_entry_from_the_compressed_jvps(m, n, density, seed, wide):
    """Columns sharing a row get different colours, and the gather reads entry (i, j) off the
    product with its column colour's seed: J S at (colour(j), i), for int32 and int64 patterns."""
    from sparsad.ops.colouring import compression_plan

    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < density
    matrix = sp.csr_matrix(mask.astype(float))
    matrix.sort_indices()
    dtype = np.int64 if wide else np.int32
    pattern = CSRPattern(matrix.indptr.astype(dtype), matrix.indices.astype(dtype), matrix.shape)
    colours, gather = compression_plan(pattern, "jacobian")
    assert colours.shape == (n,)
    for i in range(m):
        columns = np.flatnonzero(mask[i])
        assert len(set(colours[columns].tolist())) == len(columns)
    values = rng.standard_normal(pattern.nnz)
    dense = sp.csr_matrix((values, pattern.indices, pattern.indptr), shape=(m, n)).toarray()
    n_colours = int(colours.max()) + 1 if n else 0
    seeds = (colours[:, None] == np.arange(n_colours)[None, :]).astype(float)  # (n, colours)
    np.testing.assert_array_equal((dense @ seeds).T.reshape(-1)[gather], values)
    assert compression_plan(pattern, "distance1")[1] is gather  # the same plan under both names


def test_dsatur_finds_five_colours_on_the_five_point_stencil_and_greedy_takes_over_past_64():
    """The 5-point Laplacian's column intersection graph holds 5-cliques (a row's five columns),
    so 5 colours are optimal; greedy in natural order needs 7. A row with 70 columns needs 70
    colours: more than DSATUR's 64-bit colour sets hold, so greedy answers (still valid)."""
    from sparsad.ops.colouring import colour_rows, compression_plan

    one = sp.diags([np.ones(39), np.ones(40), np.ones(39)], [-1, 0, 1])
    grid = sp.kronsum(one, one).tocsr()
    pattern = CSRPattern(grid.indptr, grid.indices, grid.shape)
    assert colour_columns(pattern).max() + 1 == 5
    assert compression_plan(pattern, "reverse")[0].max() + 1 == 5
    wide = sp.csr_matrix(np.vstack([np.ones((1, 70)), np.eye(70)]))
    wide_pattern = CSRPattern(wide.indptr, wide.indices, wide.shape)
    colours = colour_columns(wide_pattern)
    assert sorted(colours.tolist()) == list(range(70))
    assert colour_rows(CSRPattern(wide.T.tocsr().indptr, wide.T.tocsr().indices, (70, 71))).max() + 1 == 70


@settings(max_examples=40, deadline=None)
@given(m=st.integers(0, 30), n=st.integers(0, 30), density=st.floats(0.0, 1.0), seed=st.integers(0, 2**31))
def test_column_and_row_colourings_are_valid_and_no_worse_than_greedy(m, n, density, seed):
    from sparsad.ops.colouring import _by_column, _by_row, _greedy_colouring, colour_rows

    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < density
    matrix = sp.csr_matrix(mask.astype(float), shape=(m, n))
    matrix.sort_indices()
    pattern = CSRPattern(matrix.indptr, matrix.indices, (m, n))
    columns, rows = colour_columns(pattern), colour_rows(pattern)
    for i in range(m):  # columns sharing a row differ
        assert len(set(columns[mask[i]].tolist())) == mask[i].sum()
    for j in range(n):  # rows sharing a column differ
        assert len(set(rows[mask[:, j]].tolist())) == mask[:, j].sum()
    greedy = _greedy_colouring(*_by_row(pattern), *_by_column(pattern), n)
    assert (columns.max() if n else -1) <= (greedy.max() if n else -1)
