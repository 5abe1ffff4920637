"""Colouring Jacobians and Hessians against dense torch.func.jacfwd / hessian (float64)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings, strategies as st

import sparsad.torch as sat
from sparsad.errors import FormatError, InputError, ShapeError
from sparsad.ops.pattern import CSRPattern
from sparsad.torch.jacobian import colour_columns

f64 = torch.float64


def poisson_residual(side: int):
    def residual(u):
        grid = u.reshape(side, side)
        padded = torch.nn.functional.pad(grid, (1, 1, 1, 1))
        lap = 4 * grid - padded[:-2, 1:-1] - padded[2:, 1:-1] - padded[1:-1, :-2] - padded[1:-1, 2:]
        return (lap + 0.1 * grid ** 3).reshape(-1)
    return residual


def poisson_pattern(side: int):
    one = sp.diags([np.ones(side - 1), np.ones(side), np.ones(side - 1)], [-1, 0, 1])
    return sp.kronsum(one, one).tocsr()


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 8), st.integers(1, 8), st.integers(0, 10_000))
def test_colouring_is_valid(m, n, seed):
    matrix = sp.random(m, n, density=0.4, format="csr", random_state=seed)
    matrix.sort_indices()
    pattern = CSRPattern(matrix.indptr, matrix.indices, matrix.shape)
    colours = colour_columns(pattern)
    for i in range(m):
        row = colours[pattern.indices[pattern.indptr[i]:pattern.indptr[i + 1]]]
        assert len(set(row.tolist())) == row.shape[0]


def test_jacobian_of_poisson_residual_matches_jacfwd():
    side = 6
    f = poisson_residual(side)
    u = torch.randn(side * side, dtype=f64, generator=torch.Generator().manual_seed(0))
    dense = torch.func.jacfwd(f)(u)
    for pattern in (None, poisson_pattern(side)):
        J = sat.jacobian(f, u, pattern=pattern)
        torch.testing.assert_close(J.to_dense(), dense)
    # greedy in natural order: at most (max columns sharing a row with one column) + 1 = 13 colours
    assert int(colour_columns(J.pattern).max()) + 1 <= 13


def test_jacobian_of_nonsquare_function_and_hessian():
    def f(x):
        return torch.stack([x[0] * x[2], torch.sin(x[1]), x[3] ** 2 + x[0], x[4] * x[1]])

    x = torch.randn(5, dtype=f64, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(sat.jacobian(f, x).to_dense(), torch.func.jacfwd(f)(x))

    def energy(u):
        return (u[1:] - u[:-1]).pow(4).sum() + torch.cos(u).sum()

    u = torch.randn(9, dtype=f64, generator=torch.Generator().manual_seed(2))
    H = sat.hessian(energy, u)
    torch.testing.assert_close(H.to_dense(), torch.func.hessian(energy)(u))
    tridiagonal = sp.diags([np.ones(8), np.ones(9), np.ones(8)], [-1, 0, 1]).tocsr()
    torch.testing.assert_close(sat.hessian(energy, u, pattern=tridiagonal).to_dense(), torch.func.hessian(energy)(u))


def test_errors():
    with pytest.raises(InputError, match="1-D"):
        sat.jacobian(lambda x: x, torch.zeros(2, 2, dtype=f64))
    with pytest.raises(ShapeError, match="pattern has shape"):
        sat.jacobian(lambda x: x, torch.zeros(3, dtype=f64), pattern=sp.eye(2).tocsr())
    bad = sp.eye(3, format="csr")
    bad.indices[2] = 5  # scipy's constructor let it through; its conversions would read out of bounds
    with pytest.raises(FormatError, match="pattern"):
        sat.jacobian(lambda x: x, torch.zeros(3, dtype=f64), pattern=bad)
    with pytest.raises(InputError, match="pass pattern"):
        import importlib

        jac = importlib.import_module("sparsad.torch.jacobian")

        old, jac.DETECT_MAX_ENTRIES = jac.DETECT_MAX_ENTRIES, 4
        try:
            sat.jacobian(lambda x: x, torch.zeros(3, dtype=f64))
        finally:
            jac.DETECT_MAX_ENTRIES = old


@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 12), density=st.floats(0.05, 0.6), seed=st.integers(0, 2**31))
def test_star_coloured_hessian_matches_dense_on_random_coupling_graphs(n, density, seed):
    """f couples x_i and x_j along random edges (both orders of a pair, self-loops on the
    diagonal); its Hessian by star colouring equals torch.func.hessian, and so does distance-1."""
    rng = np.random.default_rng(seed)
    edges = np.argwhere(np.triu(rng.random((n, n)) < density, 1))
    i, j = torch.as_tensor(edges[:, 0]), torch.as_tensor(edges[:, 1])
    w = torch.as_tensor(rng.standard_normal(len(edges)))

    def f(x):
        return (w * torch.sin(x[i] + 2 * x[j]) * x[j]).sum() + (x ** 3).sum()

    x = torch.as_tensor(rng.standard_normal(n))
    dense = torch.func.hessian(f)(x)
    mask = np.eye(n, dtype=bool)
    mask[edges[:, 0], edges[:, 1]] = True  # one triangle only: hessian() symmetrises the pattern
    for colouring in ("star", "distance1"):
        H = sat.hessian(f, x, pattern=sp.csr_matrix(mask.astype(float)), colouring=colouring)
        torch.testing.assert_close(H.to_dense(), dense)


def test_repeated_calls_with_a_function_that_updates_its_input_in_place():
    """The seeds kept on the pattern are handed out as copies: forward AD applies f's in-place
    update of its input to the tangent too, which must not leak into the next call."""
    def doubling(x):
        x.mul_(2.0)
        return x[1:] * x[:-1]

    x = torch.arange(1.0, 7.0, dtype=f64)
    expected = torch.func.jacfwd(lambda z: (2 * z)[1:] * (2 * z)[:-1])(x)
    pattern = sat.SparseMatrix.from_scipy(sp.diags([1.0, 1.0], [0, 1], shape=(5, 6)).tocsr()).pattern
    for _ in range(3):
        torch.testing.assert_close(sat.jacobian(doubling, x.clone(), pattern=pattern).to_dense(), expected)
