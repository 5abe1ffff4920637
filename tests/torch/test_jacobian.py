"""Colouring Jacobians and Hessians against dense torch.func.jacfwd / hessian (float64)."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings, strategies as st

import sparsad.torch as sat
from sparsad.errors import FormatError, InputError, ShapeError
from sparsad.ops.pattern import CSRPattern
from sparsad.torch.jacobian import colour_columns
from poisson import poisson_pattern, poisson_residual

f64 = torch.float64


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


MODES = ["auto", "forward", "reverse"]


def stored(J: sat.SparseMatrix, dense: torch.Tensor) -> torch.Tensor:
    """The entries of `dense` at J's stored positions, in J's order."""
    rows = torch.as_tensor(np.array(J.pattern.rows, dtype=np.int64))
    return dense[rows, torch.as_tensor(np.array(J.pattern.indices, dtype=np.int64))]


@pytest.mark.parametrize("mode", MODES)
def test_derivative_matrices_are_differentiable_in_x(mode):
    """x requiring grad: J's entries (and H's) carry their derivative in x (second order), as dense
    jacfwd's do; before, x was detached and that derivative was silently dropped."""
    side = 4
    residual = poisson_residual(side)
    u = torch.randn(side * side, dtype=f64, generator=torch.Generator().manual_seed(8), requires_grad=True)
    J = sat.jacobian(residual, u, pattern=poisson_pattern(side), mode=mode)
    probe = torch.randn(J.values.shape, dtype=f64, generator=torch.Generator().manual_seed(9))
    ours = torch.autograd.grad((J.values * probe).sum(), u)[0]
    theirs = torch.autograd.grad((stored(J, torch.func.jacfwd(residual)(u)) * probe).sum(), u)[0]
    torch.testing.assert_close(ours, theirs)
    if mode == "auto":
        def energy(z):
            return (z[1:] * z[:-1]).pow(3).sum()

        H = sat.hessian(energy, u)
        probe = torch.randn(H.values.shape, dtype=f64, generator=torch.Generator().manual_seed(10))
        ours = torch.autograd.grad((H.values * probe).sum(), u)[0]
        theirs = torch.autograd.grad((stored(H, torch.func.hessian(energy)(u)) * probe).sum(), u)[0]
        torch.testing.assert_close(ours, theirs)


@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 9), n=st.integers(1, 9), density=st.floats(0.1, 0.7), seed=st.integers(0, 2**31))
def test_every_mode_matches_jacfwd_on_random_sparse_functions(m, n, density, seed):
    """y_i = sum over the random edges (i, j) of w_ij sin(x_j) x_j + x_i-free terms: the colouring
    Jacobian in each mode (compressed JVPs, compressed VJPs, and the automatic choice) equals
    torch.func.jacfwd, with the pattern given and detected."""
    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < density
    rows, cols = (torch.as_tensor(a) for a in np.nonzero(mask))
    w = torch.as_tensor(rng.standard_normal(len(rows)))

    def f(x):
        terms = w * torch.sin(x[cols]) * x[cols]
        return torch.zeros(m, dtype=x.dtype).index_add(0, rows, terms) + 1.0

    x = torch.as_tensor(rng.standard_normal(n))
    dense = torch.func.jacfwd(f)(x)
    for mode in MODES:
        for pattern in (sp.csr_matrix(mask.astype(float)), None):
            torch.testing.assert_close(sat.jacobian(f, x, pattern=pattern, mode=mode).to_dense(), dense)


@pytest.mark.parametrize("mode", MODES)
def test_jacobian_is_differentiable_in_parameters_f_closes_over(mode):
    """J depends on a closed-over w: d(sum of J's entries)/dw agrees with dense autograd through
    jacfwd, in every mode (the compressed VJPs build their own graph when f reads such tensors)."""
    side = 5
    w = torch.randn(side * side, dtype=f64, generator=torch.Generator().manual_seed(3), requires_grad=True)
    residual = poisson_residual(side)

    def f(u):
        return residual(u) * w + torch.sin(u) * w ** 2

    u = torch.randn(side * side, dtype=f64, generator=torch.Generator().manual_seed(4))
    J = sat.jacobian(f, u, pattern=poisson_pattern(side), mode=mode)
    dense = torch.func.jacfwd(f)(u)
    torch.testing.assert_close(J.to_dense(), dense.detach())
    probe = torch.randn(J.values.shape, dtype=f64, generator=torch.Generator().manual_seed(5))
    ours = torch.autograd.grad((J.values * probe).sum(), w)[0]
    theirs = torch.autograd.grad((stored(J, dense) * probe).sum(), w)[0]
    torch.testing.assert_close(ours, theirs)
    with torch.no_grad():
        assert not sat.jacobian(f, u, pattern=poisson_pattern(side), mode=mode).values.requires_grad


def test_jacobian_inside_torch_func_transforms_and_of_constant_functions():
    side = 4
    residual = poisson_residual(side)
    pattern = poisson_pattern(side)
    u = torch.randn(side * side, dtype=f64, generator=torch.Generator().manual_seed(6))
    # d/du of the sum of J's entries: through torch.func.grad (auto picks forward mode there)
    ours = torch.func.grad(lambda z: sat.jacobian(residual, z, pattern=pattern).values.sum())(u)
    theirs = torch.func.grad(lambda z: torch.func.jacfwd(residual)(z).sum())(u)
    torch.testing.assert_close(ours, theirs)
    for mode in MODES:
        J = sat.jacobian(lambda z: torch.ones(3, dtype=f64), u, pattern=sp.csr_matrix(np.ones((3, 16))), mode=mode)
        assert torch.equal(J.values, torch.zeros(48, dtype=f64))
    with pytest.raises(InputError, match="mode"):
        sat.jacobian(residual, u, pattern=pattern, mode="sideways")
    with pytest.raises(ShapeError, match="rows"):
        sat.jacobian(residual, u, pattern=sp.eye(15, 16, format="csr"), mode="reverse")


@pytest.mark.parametrize("mode", MODES)
def test_in_place_update_of_the_input_in_every_mode(mode):
    def doubling(x):
        x.mul_(2.0)
        return x[1:] * x[:-1]

    x = torch.arange(1.0, 7.0, dtype=f64)
    expected = torch.func.jacfwd(lambda z: (2 * z)[1:] * (2 * z)[:-1])(x)
    pattern = sat.SparseMatrix.from_scipy(sp.diags([1.0, 1.0], [0, 1], shape=(5, 6)).tocsr()).pattern
    for _ in range(2):
        torch.testing.assert_close(sat.jacobian(doubling, x.clone(), pattern=pattern, mode=mode).to_dense(), expected)
        assert torch.equal(x, torch.arange(1.0, 7.0, dtype=f64))


def test_auto_mode_takes_the_fewer_colours_and_on_ties_reverse_only_for_small_products():
    import importlib

    jac = importlib.import_module("sparsad.torch.jacobian")
    x = torch.zeros(6, dtype=f64)
    dense_row = sat.SparseMatrix.from_scipy(sp.csr_matrix(np.ones((1, 6)))).pattern  # 6 column colours, 1 row colour
    dense_column = sat.SparseMatrix.from_scipy(sp.csr_matrix(np.ones((6, 1)))).pattern
    assert jac._mode(dense_row, "auto", x) == "reverse"
    assert jac._mode(dense_column, "auto", torch.zeros(1, dtype=f64)) == "forward"
    small = sat.SparseMatrix.from_scipy(poisson_pattern(4)).pattern
    assert jac._mode(small, "auto", torch.zeros(16, dtype=f64)) == "reverse"
    old, jac.REVERSE_TIE_MAX_ENTRIES = jac.REVERSE_TIE_MAX_ENTRIES, 10
    try:
        large = sat.SparseMatrix.from_scipy(poisson_pattern(4)).pattern  # a fresh pattern: nothing cached
        assert jac._mode(large, "auto", torch.zeros(16, dtype=f64)) == "forward"
    finally:
        jac.REVERSE_TIE_MAX_ENTRIES = old
    assert jac._mode(small, "forward", x) == "forward"


SCALAR_FORMS = [  # every spelling of arithmetic with a Python number, and some that must stay untouched
    lambda y, c: y * c, lambda y, c: c * y, lambda y, c: y + c, lambda y, c: c + y, lambda y, c: y - c,
    lambda y, c: c - y, lambda y, c: y / c, lambda y, c: c / (y * y + 1), lambda y, c: torch.mul(y, c),
    lambda y, c: y.mul(c), lambda y, c: torch.add(y, c, alpha=2), lambda y, c: torch.sub(y, c),
    lambda y, c: y.div(c), lambda y, c: torch.div(y, c, rounding_mode=None), lambda y, c: torch.true_divide(y, c),
    lambda y, c: y * np.float64(c), lambda y, c: y * torch.tensor(c, dtype=y.dtype), lambda y, c: y * int(c * 3 + 1),
    lambda y, c: y * 2**40 / 2**40, lambda y, c: y * True, lambda y, c: y.add(c), lambda y, c: torch.multiply(y, c),
]


@settings(max_examples=12, deadline=None)
@given(n=st.integers(2, 10), forms=st.lists(st.integers(0, len(SCALAR_FORMS) - 1), min_size=1, max_size=6),
       scalars=st.lists(st.floats(-3, 3).filter(lambda c: abs(c) > 0.1), min_size=6, max_size=6),
       seed=st.integers(0, 2**31))
def test_forward_mode_with_scalar_operands_matches_jacfwd_and_hessian(n, forms, scalars, seed):
    """Forward-mode products send tensor-and-number arithmetic to aten's .Scalar overloads (much
    faster in PyTorch's forward AD): random chains of every spelling of it, on a random coupling
    x_i with x_perm(i), with integer tensor arithmetic and an in-place update inside, give the
    Jacobian (every mode, pattern given or detected) and Hessian of dense autograd."""
    rng = np.random.default_rng(seed)
    perm = torch.as_tensor(rng.permutation(n))

    def f(x):
        index = (torch.arange(n) * 2) // 2  # integer arithmetic with numbers: must stay integer
        y = x[index] * x[perm] + torch.sin(x)
        for form, c in zip(forms, scalars):
            y = SCALAR_FORMS[form](y, c)
        y = y.clone()
        y *= 0.5
        return y

    x = torch.as_tensor(rng.standard_normal(n))
    dense = torch.func.jacfwd(f)(x)
    mask = np.eye(n, dtype=bool)
    mask[np.arange(n), perm.numpy()] = True
    for mode in MODES:
        for pattern in (sp.csr_matrix(mask.astype(float)), None):
            torch.testing.assert_close(sat.jacobian(f, x, pattern=pattern, mode=mode).to_dense(), dense,
                                       rtol=1e-12, atol=1e-12)
    energy = lambda z: (f(z) ** 2).sum()  # noqa: E731
    torch.testing.assert_close(sat.hessian(energy, x).to_dense(), torch.func.hessian(energy)(x), rtol=1e-10, atol=1e-10)


def test_scalar_operands_mode_keeps_values_and_dtypes():
    import importlib

    jac = importlib.import_module("sparsad.torch.jacobian")
    x = torch.tensor([1.0, 2.0], dtype=torch.float32)
    integers = torch.tensor([1, 2])
    fast = jac._with_scalar_operands(lambda: (x * 1e40, x + 3, integers * 0.5, integers / 2, integers + 1, x - 2**40))
    for ours, theirs in zip(fast(), (x * 1e40, x + 3, integers * 0.5, integers / 2, integers + 1, x - 2**40)):
        assert ours.dtype == theirs.dtype
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 8), n=st.integers(1, 8), density=st.floats(0.1, 0.8), seed=st.integers(0, 2**31))
def test_detection_sees_dependencies_whose_derivative_vanishes_at_x(m, n, density, seed):
    """y_i = sum over the random edges (i, j) of w_ij x_j^2, at an x with zeros: there the dense
    Jacobian at x misses those edges, the random points near x must not. The detected pattern is
    then reused at another point (where the edges are nonzero) and must still give jacfwd's answer."""
    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < density
    rows, cols = (torch.as_tensor(a) for a in np.nonzero(mask))
    w = torch.as_tensor(rng.uniform(0.5, 2.0, len(rows)))

    def f(x):
        return torch.zeros(m, dtype=x.dtype).index_add(0, rows, w * x[cols] ** 2)

    x = torch.as_tensor(rng.standard_normal(n))
    x[torch.as_tensor(rng.random(n) < 0.5)] = 0.0
    J = sat.jacobian(f, x)
    detected = np.zeros((m, n), dtype=bool)
    detected[J.pattern.rows, J.pattern.indices] = True
    np.testing.assert_array_equal(detected, mask)
    torch.testing.assert_close(J.to_dense(), torch.func.jacfwd(f)(x), rtol=1e-12, atol=1e-12)
    y = torch.as_tensor(rng.standard_normal(n))
    for mode in MODES:
        torch.testing.assert_close(sat.jacobian(f, y, pattern=J, mode=mode).to_dense(), torch.func.jacfwd(f)(y),
                                   rtol=1e-12, atol=1e-12)


@settings(max_examples=8, deadline=None)
@given(side=st.integers(2, 7), seed=st.integers(0, 2**31), grad_x=st.booleans())
def test_reverse_mode_batched_backward_equals_the_public_batched_grad(side, seed, grad_x):
    """The compressed VJPs call the autograd engine under PyTorch's batching directly: bit for bit what
    torch.autograd.grad(is_grads_batched=True) gives, with x requiring grad (differentiable result)
    or not, and the same Jacobian as dense jacfwd."""
    import sys

    jacobian_module = sys.modules["sparsad.torch.jacobian"]
    residual = poisson_residual(side)
    u = torch.randn(side * side, dtype=f64, generator=torch.Generator().manual_seed(seed), requires_grad=grad_x)
    pattern = sat.SparseMatrix.from_scipy(poisson_pattern(side)).pattern
    direct = sat.jacobian(residual, u, pattern=pattern, mode="reverse")
    saved, jacobian_module._ENGINE_BATCHING = jacobian_module._ENGINE_BATCHING, None
    try:
        public = sat.jacobian(residual, u, pattern=pattern, mode="reverse")
    finally:
        jacobian_module._ENGINE_BATCHING = saved
    assert saved is not None and torch.equal(direct.values, public.values)
    assert direct.values.requires_grad == grad_x
    torch.testing.assert_close(direct.to_dense().detach(), torch.func.jacfwd(residual)(u.detach()),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_function_returning_a_tensor_of_its_own_has_a_zero_jacobian(mode):
    """f ignores x and returns a closed-over leaf requiring grad (no graph node of its own): every
    entry is zero, in every mode, and nothing fails on the missing graph."""
    p = torch.randn(3, dtype=f64, requires_grad=True)
    J = sat.jacobian(lambda z: p, torch.randn(4, dtype=f64), pattern=sp.csr_matrix(np.ones((3, 4))), mode=mode)
    assert torch.equal(J.values.detach(), torch.zeros(12, dtype=f64))


# -- mode="coarsen": compressed VJPs from coarsening's compiled gradient -----------------------------

def _banded_pattern(m: int, n: int, offsets) -> sp.csr_matrix:
    return sp.diags([np.ones(m)] * len(offsets), list(offsets), shape=(m, n)).tocsr()


def _compiled_calls_only(f, x, pattern, monkeypatch, compile_first=True):
    """J from mode="coarsen" once coarsening's compiled code is ready, checking that neither plain
    autograd nor the batched backward pass was used for it."""
    from sparsad.coarsen import tiers

    if compile_first:
        sat.jacobian(f, x, pattern=pattern, mode="coarsen")
        tiers.wait()
        sat.jacobian(f, x, pattern=pattern, mode="coarsen")  # (the first call after the compile checks it)
    module = sys.modules["sparsad.torch.jacobian"]
    with monkeypatch.context() as patch:
        def refuse(*args, **kwargs):
            raise AssertionError("autograd was used")

        patch.setattr(torch.autograd, "grad", refuse)
        patch.setattr(module, "_batched_vjps", refuse)
        return sat.jacobian(f, x, pattern=pattern, mode="coarsen")


@settings(max_examples=4, deadline=None)
@given(n=st.integers(5, 40), a=st.floats(0.5, 3.0), seed=st.integers(0, 2**31))
def test_coarsen_mode_matches_jacfwd_on_banded_nonlinear_residuals(n, a, seed):
    """A 1-D residual of slices with nonlinear terms (coarsening accepts it): every call, during
    warm-up (autograd inside coarsening) and from the compiled code, equals dense jacfwd."""
    def residual(u):
        return a * u[1:-1] - u[:-2] * torch.sin(u[2:]) + 0.1 * torch.exp(u[1:-1]) * u[2:] ** 2

    x = torch.randn(n, dtype=f64, generator=torch.Generator().manual_seed(seed))
    pattern = _banded_pattern(n - 2, n, (0, 1, 2))
    for _ in range(2):
        torch.testing.assert_close(sat.jacobian(residual, x, pattern=pattern, mode="coarsen").to_dense(),
                                   torch.func.jacfwd(residual)(x), rtol=1e-12, atol=1e-12)


def test_coarsen_mode_uses_compiled_code_and_is_never_stale(monkeypatch):
    """Once compiled, the Jacobian comes from coarsening's code alone; and it follows every change
    of what f reads (a closure value, a global, a helper redefined, f's defaults, f's code) on the
    very next call, and the compiled code serves again once the change is undone."""
    n = 12
    x = torch.randn(n, dtype=f64, generator=torch.Generator().manual_seed(1))
    pattern = _banded_pattern(n - 2, n, (0, 1, 2))
    scale = 2.0

    def residual(u, power=3):
        return scale * u[1:-1] - _coarsen_helper(u[:-2]) * u[2:] + 0.1 * u[1:-1] ** power

    def other_code(u, power=3):
        return scale * u[1:-1] * u[2:] - u[:-2] ** power

    def cosine(v):
        return torch.cos(v)

    def check(J):
        torch.testing.assert_close(J.to_dense(), torch.func.jacfwd(residual)(x), rtol=1e-12, atol=1e-12)

    check(_compiled_calls_only(residual, x, pattern, monkeypatch))
    module, code = sys.modules[__name__], residual.__code__

    def set_scale(value):
        nonlocal scale
        scale = value

    changes = [(lambda: set_scale(-0.5), lambda: set_scale(2.0)),
               (lambda: setattr(module, "COARSEN_GAIN", 4.0), lambda: setattr(module, "COARSEN_GAIN", 1.5)),
               (lambda: setattr(module, "_coarsen_helper", cosine),
                lambda: setattr(module, "_coarsen_helper", _coarsen_helper)),
               (lambda: setattr(residual, "__defaults__", (2,)), lambda: setattr(residual, "__defaults__", (3,))),
               (lambda: setattr(residual, "__code__", other_code.__code__), lambda: setattr(residual, "__code__", code))]
    for change, undo in changes:
        change()
        check(sat.jacobian(residual, x, pattern=pattern, mode="coarsen"))
        undo()  # the first state's compiled code again, without a new trace
        check(_compiled_calls_only(residual, x, pattern, monkeypatch, compile_first=False))


COARSEN_GAIN = 1.5


def _coarsen_helper(v):
    return COARSEN_GAIN * torch.tanh(v)


def neumann_residual(side: int):
    """The Poisson residual with zero-flux boundaries (`replicate` padding: coarsening refuses it)."""
    def residual(u):
        grid = u.reshape(side, side)
        padded = torch.nn.functional.pad(grid[None], (1, 1, 1, 1), mode="replicate")[0]
        lap = 4 * grid - padded[:-2, 1:-1] - padded[2:, 1:-1] - padded[1:-1, :-2] - padded[1:-1, 2:]
        return (lap + 0.1 * grid ** 3).reshape(-1)
    return residual


def test_coarsen_mode_falls_back_with_a_warning_naming_the_users_line():
    """A residual padding in mode "replicate": coarsening refuses it; the warning names the line of
    f it refused, in f's file, and the Jacobian (from compressed autograd VJPs) is right."""
    from sparsad.coarsen import CoarsenFallbackWarning

    side = 5
    residual = neumann_residual(side)
    u = torch.randn(side * side, dtype=f64, generator=torch.Generator().manual_seed(2))
    with pytest.warns(CoarsenFallbackWarning, match="replicate") as caught:
        J = sat.jacobian(residual, u, pattern=poisson_pattern(side), mode="coarsen")
    assert caught[0].filename == __file__
    assert 'mode="replicate"' in open(__file__).read().splitlines()[caught[0].lineno - 1]
    torch.testing.assert_close(J.to_dense(), torch.func.jacfwd(residual)(u), rtol=1e-12, atol=1e-12)
    import warnings as warnings_module
    with warnings_module.catch_warnings():  # once per signature: the next call is quiet and right too
        warnings_module.simplefilter("error")
        J = sat.jacobian(residual, 2 * u, pattern=poisson_pattern(side), mode="coarsen")
    torch.testing.assert_close(J.to_dense(), torch.func.jacfwd(residual)(2 * u), rtol=1e-12, atol=1e-12)


def test_coarsen_mode_on_the_poisson_residual_runs_compiled_code_only(monkeypatch):
    """The bench's residual (reshape, pad, 2-D slices): once compiled, J and the pattern check come
    from coarsening's code alone (no autograd, no JVP) and equal dense jacfwd; a pattern missing
    an entry still raises, through the compiled probe product."""
    side = 6
    residual = poisson_residual(side)
    u = torch.randn(side * side, dtype=f64, generator=torch.Generator().manual_seed(5))
    pattern = sat.SparseMatrix.from_scipy(poisson_pattern(side)).pattern
    with monkeypatch.context() as patch:
        patch.setattr(torch.func, "jvp", None)  # the check's JVP is not taken either
        J = _compiled_calls_only(residual, u, pattern, monkeypatch)
    torch.testing.assert_close(J.to_dense(), torch.func.jacfwd(residual)(u), rtol=1e-12, atol=1e-12)
    v = torch.randn(side * side, dtype=f64, generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(_compiled_calls_only(residual, v, pattern, monkeypatch, compile_first=False).to_dense(),
                               torch.func.jacfwd(residual)(v), rtol=1e-12, atol=1e-12)
    short = poisson_pattern(side).tolil()
    short[7, 8] = 0  # one structural nonzero left out
    short = sat.SparseMatrix.from_scipy(short.tocsr()).pattern
    sat.jacobian(residual, u, pattern=short, mode="coarsen", check=False)
    from sparsad.coarsen import tiers
    tiers.wait()
    sat.jacobian(residual, u, pattern=short, mode="coarsen", check=False)
    with pytest.raises(InputError, match="outside `pattern`"):
        _compiled_calls_only(residual, u, short, monkeypatch, compile_first=False)


def test_auto_mode_coarsens_functions_called_repeatedly(monkeypatch):
    """mode "auto": the first calls of f take autograd's batched VJPs (no trace); from the
    (AUTO_COARSEN_AFTER + 1)-th call with one signature on, coarsening warms up behind them and then
    serves every call (no autograd); every call equals dense jacfwd, and a new shape starts over."""
    from sparsad.coarsen import tiers

    monkeypatch.setenv("SPARSAD_COARSEN_WAIT_S", "inf")  # (the symbolic work finishes inside the call)
    module = sys.modules["sparsad.torch.jacobian"]
    side = 5
    residual = poisson_residual(side)
    pattern = sat.SparseMatrix.from_scipy(poisson_pattern(side)).pattern
    u = torch.randn(side * side, dtype=f64, generator=torch.Generator().manual_seed(7))
    expected = torch.func.jacfwd(residual)(u)
    for call in range(module.AUTO_COARSEN_AFTER):
        torch.testing.assert_close(sat.jacobian(residual, u, pattern=pattern).to_dense(), expected)
        assert residual not in module._COARSENED  # one-off calls never trace
    for _ in range(3):  # traces and starts the compile; loads and checks the compiled code
        torch.testing.assert_close(sat.jacobian(residual, u, pattern=pattern).to_dense(), expected)
        tiers.wait()
    with monkeypatch.context() as patch:
        def refuse(*args, **kwargs):
            raise AssertionError("autograd was used")

        patch.setattr(torch.autograd, "grad", refuse)
        patch.setattr(module, "_batched_vjps", refuse)
        patch.setattr(module, "_reverse", refuse)
        torch.testing.assert_close(sat.jacobian(residual, u, pattern=pattern).to_dense(), expected,
                                   rtol=1e-12, atol=1e-12)
    other = neumann_residual(side)  # refused by coarsening: warned once (naming f), then autograd quietly
    for call in range(module.AUTO_COARSEN_AFTER + 3):
        if call == module.AUTO_COARSEN_AFTER:
            from sparsad.coarsen import CoarsenFallbackWarning
            with pytest.warns(CoarsenFallbackWarning, match="mode='auto'"):
                J = sat.jacobian(other, u, pattern=pattern)
        else:
            with _no_warning():
                J = sat.jacobian(other, u, pattern=pattern)
        torch.testing.assert_close(J.to_dense(), torch.func.jacfwd(other)(u), rtol=1e-12, atol=1e-12)


def _no_warning():
    import warnings as warnings_module

    context = warnings_module.catch_warnings()

    class _Strict:
        def __enter__(self):
            context.__enter__()
            warnings_module.simplefilter("error")

        def __exit__(self, *exc):
            return context.__exit__(*exc)
    return _Strict()


def test_coarsen_mode_keeps_derivatives_of_x_and_of_parameters_f_reads():
    """x requiring grad (reverse mode runs) and a closed-over parameter requiring grad (coarsening
    refuses it): J is differentiable in both, as dense jacfwd's entries are."""
    from sparsad.coarsen import CoarsenFallbackWarning

    n = 9
    pattern = _banded_pattern(n - 2, n, (0, 1, 2))
    x = torch.randn(n, dtype=f64, generator=torch.Generator().manual_seed(3), requires_grad=True)

    def cubic(u):
        return u[1:-1] ** 3 - u[:-2] * u[2:]

    J = sat.jacobian(cubic, x, pattern=pattern, mode="coarsen")
    ours = torch.autograd.grad(J.values.sum(), x)[0]
    theirs = torch.autograd.grad(stored(J, torch.func.jacfwd(cubic)(x)).sum(), x)[0]
    torch.testing.assert_close(ours, theirs)
    w = torch.randn(n - 2, dtype=f64, generator=torch.Generator().manual_seed(4), requires_grad=True)

    def weighted(u):
        return w * u[1:-1] ** 2 - u[2:]

    with pytest.warns(CoarsenFallbackWarning):
        J = sat.jacobian(weighted, x.detach(), pattern=pattern, mode="coarsen")
    ours = torch.autograd.grad(J.values.sum(), w)[0]
    theirs = torch.autograd.grad(stored(J, torch.func.jacfwd(weighted)(x.detach())).sum(), w)[0]
    torch.testing.assert_close(ours, theirs)


def test_coarsen_mode_in_place_update_and_non_function_callables():
    """f updating its input in place (coarsening refuses it; the caller's x is untouched) and a
    callable object (not a function: reverse mode, with a warning)."""
    from sparsad.coarsen import CoarsenFallbackWarning

    def doubling(x):
        x.mul_(2.0)
        return x[1:] * x[:-1]

    x = torch.arange(1.0, 7.0, dtype=f64)
    pattern = sp.diags([1.0, 1.0], [0, 1], shape=(5, 6)).tocsr()
    expected = torch.func.jacfwd(lambda z: (2 * z)[1:] * (2 * z)[:-1])(x)
    with pytest.warns(CoarsenFallbackWarning):
        J = sat.jacobian(doubling, x, pattern=pattern, mode="coarsen")
    torch.testing.assert_close(J.to_dense(), expected)
    assert torch.equal(x, torch.arange(1.0, 7.0, dtype=f64))

    class Product:
        def __call__(self, z):
            return z[1:] * z[:-1]

    with pytest.warns(CoarsenFallbackWarning, match="Python function"):
        J = sat.jacobian(Product(), x, pattern=pattern, mode="coarsen")
    torch.testing.assert_close(J.to_dense(), torch.func.jacfwd(Product())(x))


_WEIGHTS = torch.tensor([0.5, 2.0, -1.0], dtype=f64)


def test_coarsen_mode_sees_a_global_tensor_starting_to_require_grad():
    """f reads a small global tensor (coarsening bakes it in while it does not require grad); once
    it requires grad, J must be differentiable in it, as dense jacfwd's entries are."""
    from sparsad.coarsen import CoarsenFallbackWarning

    def f(x):
        return x[1:] * x[:-1] * _WEIGHTS[1]

    x = torch.arange(1.0, 7.0, dtype=f64)
    pattern = sp.diags([1.0, 1.0], [0, 1], shape=(5, 6)).tocsr()
    sat.jacobian(f, x, pattern=pattern, mode="coarsen")
    _WEIGHTS.requires_grad_(True)
    try:
        with pytest.warns(CoarsenFallbackWarning, match="requires grad"):
            J = sat.jacobian(f, x, pattern=pattern, mode="coarsen")
        ours = torch.autograd.grad(J.values.sum(), _WEIGHTS)[0]
        theirs = torch.autograd.grad(stored(J, torch.func.jacfwd(f)(x)).sum(), _WEIGHTS)[0]
        torch.testing.assert_close(ours, theirs)
    finally:
        _WEIGHTS.requires_grad_(False)


def test_coarsen_mode_reports_a_pattern_that_does_not_fit_f_as_reverse_mode_does():
    def f(u):
        return u[1:] * u[:-1]

    x = torch.arange(1.0, 7.0, dtype=f64)
    for mode in ("coarsen", "coarsen"):  # the second call: after a first one that failed
        with pytest.raises(ShapeError, match="rows"):
            sat.jacobian(f, x, pattern=sp.eye(4, 6, format="csr"), mode=mode)


def test_coarsen_mode_never_broadcasts_an_output_of_the_wrong_shape():
    """sum(w * f(x)) would broadcast a scalar or (1,)-shaped output against the seeds: refused, with
    reverse mode's ShapeError, also when f's code changes to such an output after a compiled call."""
    from sparsad.coarsen import tiers

    pattern = sp.diags([1.0, 1.0], [0, 1], shape=(5, 6)).tocsr()
    x = torch.arange(1.0, 7.0, dtype=f64)

    def f(u):
        return u[1:] * u[:-1]

    sat.jacobian(f, x, pattern=pattern, mode="coarsen")
    tiers.wait()
    torch.testing.assert_close(sat.jacobian(f, x, pattern=pattern, mode="coarsen").to_dense(),
                               torch.func.jacfwd(f)(x))
    for other in (lambda u: torch.sum(u[1:] * u[:-1]), lambda u: torch.sum(u[1:] * u[:-1]) * torch.ones(1, dtype=f64)):
        f.__code__ = other.__code__
        with pytest.raises(ShapeError, match="rows"):
            sat.jacobian(f, x, pattern=pattern, mode="coarsen")
