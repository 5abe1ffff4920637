"""Bad input to sparsad.tensor gets sparsad's own errors, on every backend."""
from __future__ import annotations

import numpy as np
import pytest

from sparsad import tensor as T
from sparsad.errors import DTypeError, InputError, ShapeError, SparsadError

BACKENDS = ["numpy", "torch", "jax", "dask"]


def solve_graph():
    A, x = T.Variable("A", (3, 3)), T.Variable("x", (3,))
    return A, x, T.einsum("ij,j->i", T.tensorinv(A, 1), x)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("matrix", [np.ones((3, 3)), np.zeros((3, 3)), np.diag([1.0, 0.0, 2.0])])
def test_a_singular_inverse_is_our_error_on_every_backend(backend, matrix):
    A, x, y = solve_graph()
    with pytest.raises(InputError, match="singular"):
        T.Executor([y], backend).run({A: matrix, x: np.ones(3)}, to_numpy=True)
    # and a regular one still works
    got = T.Executor([y], backend).run({A: matrix + 3 * np.eye(3), x: np.ones(3)}, to_numpy=True)[0]
    np.testing.assert_allclose(np.asarray(got), np.linalg.solve(matrix + 3 * np.eye(3), np.ones(3)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_complex_feeds_are_refused_not_truncated(backend):
    A, x, y = solve_graph()
    with pytest.raises(DTypeError, match="complex"):
        T.Executor([y], backend).run({A: np.eye(3) * (1 + 1j), x: np.ones(3)})
    with pytest.raises(DTypeError, match="non-numeric"):
        T.Executor([y], backend).run({A: np.eye(3), x: np.array(["a", "b", "c"])})


def test_complex_torch_feed_is_refused():
    torch = pytest.importorskip("torch")
    A, x, y = solve_graph()
    with pytest.raises(DTypeError, match="complex"):
        T.Executor([y], "torch").run({A: torch.eye(3, dtype=torch.complex128), x: torch.ones(3)})


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")    # dask's threads ignore errstate
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_feeds_checked_on_request(backend, bad):
    A, x, y = solve_graph()
    feed = {A: 2 * np.eye(3), x: np.array([1.0, bad, 2.0])}
    with pytest.raises(InputError, match="'x'.*NaN or infinite"):
        T.Executor([y], backend, check_finite=True).run(feed)
    with np.errstate(invalid="ignore"):
        T.Executor([y], backend).run(feed)          # not checked unless asked


@pytest.mark.parametrize("value", ["abc", np.array(["a", "b"]), np.eye(2) * 1j, [object()]])
def test_non_real_constants_are_refused_at_construction(value):
    with pytest.raises(DTypeError):
        T.Constant(value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_half_precision_runs_and_bad_dtypes_are_refused(backend):
    A, x, y = solve_graph()
    got = T.Executor([y], backend, dtype=np.float16).run({A: 2 * np.eye(3), x: np.ones(3)}, to_numpy=True)[0]
    assert np.asarray(got).dtype == np.float16
    np.testing.assert_allclose(np.asarray(got, dtype=float), 0.5)
    for dtype in (np.int32, np.complex128, "no-such-type"):
        with pytest.raises(DTypeError, match="dtype"):
            T.Executor([y], backend, dtype=dtype)


def test_tensordot_takes_numpy_style_axes():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 3, 5))
    A, B = T.Variable("A", a.shape), T.Variable("B", b.shape)
    for axes in (1, 0, [[2], [0]], ([1, 2], [1, 0]), (2, 0), [[-1], [0]]):
        got = T.evaluate(T.tensordot(A, B, axes), {A: a, B: b})[0]
        np.testing.assert_allclose(got, np.tensordot(a, b, axes))
    for axes in ([[1], [0, 1]], [[5], [0]], "x", [[2, 2], [0, 0]], 4):
        with pytest.raises(SparsadError):
            T.tensordot(A, B, axes)


def test_ambiguous_feed_names_are_refused():
    a1, a2 = T.Variable("a", (2,)), T.Variable("a", (2,))
    y = T.einsum("i,i->", a1, a2)
    with pytest.raises(InputError, match="ambiguous"):
        T.Executor([y]).run({"a": np.ones(2)})
    assert T.Executor([y]).run({a1: np.ones(2), a2: 2 * np.ones(2)})[0] == 4.0


def test_einsum_subscripts_beyond_the_alphabet_and_reserved_characters():
    x = T.Variable("x", (2, 3))
    e = T.einsum("À×,×->À", x, T.Variable("v", (3,)))
    assert e.shape == (2,)
    for bad in ("a.,a->", "a,,a->", "a-,a->"):
        with pytest.raises(SparsadError):
            T.einsum(bad, x, T.Variable("w", (2,)))
    with pytest.raises(ShapeError):
        T.einsum("ab,b->a", x, T.Variable("u", (4,)))
