"""One calling convention for programs, compiled programs and derivatives: inputs by keyword or
by position in `prog.inputs` order, options keyword-only, `wrt`/`argnums` by name or position,
`tangent=`/`cotangent=`, `jvp` returning (primal, tangent), `value_and_grad`. Values are checked
against NumPy closed forms on random inputs."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import sparsad
from sparsad.errors import InputError, OptionError, ShapeError

SPMV = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"
LOSS = "sum(<i, r> in A) sum(<j, a> in r) a * x(j) * x(j) * s"


def _data(seed: int):
    rng = np.random.default_rng(seed)
    A = sp.random(6, 4, density=0.5, format="csr", random_state=seed)
    return A, rng.standard_normal(4), float(rng.uniform(0.5, 2.0)), rng


def _dense(value):
    return value.toarray() if sp.issparse(value) else np.asarray(value)


def test_programs_take_inputs_by_position_in_inputs_order():
    A, x, s, _ = _data(0)
    prog = sparsad.program(SPMV)
    assert prog.inputs == ["A", "x"]
    for run in (prog, sparsad.compile(SPMV)):
        np.testing.assert_allclose(run(A, x), A @ x, rtol=1e-12)
        np.testing.assert_allclose(run(A, x=x), A @ x, rtol=1e-12)
        np.testing.assert_allclose(run(A, x, out_format="dense"), A @ x, rtol=1e-12)  # options by keyword
        with pytest.raises(InputError, match=r"missing input\(s\) \['x'\]"):
            run(A)
        with pytest.raises(InputError, match="keyword-only"):
            run("dense", A=A, x=x)  # the old first positional parameter
        with pytest.raises(InputError, match="both by position and by keyword"):
            run(A, A=A, x=x)
        with pytest.raises(InputError, match="takes 2 input"):
            run(A, x, x)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_wrt_and_argnums_name_the_same_inputs(seed):
    A, x, s, _ = _data(seed)
    mask = (A != 0).toarray()
    dx = 2 * s * x * np.asarray(A.sum(axis=0)).ravel()
    dA = s * np.outer(np.ones(6), x * x) * mask
    ds = float(np.asarray(A.sum(axis=0)).ravel() @ (x * x))
    grad_x = sparsad.grad(LOSS, wrt="x", interpret=True)
    np.testing.assert_allclose(grad_x(A, s, x), dx, rtol=1e-12)  # inputs: ['A', 's', 'x']
    np.testing.assert_allclose(sparsad.grad(LOSS, wrt=2, interpret=True)(A, s, x), dx, rtol=1e-12)
    np.testing.assert_allclose(sparsad.grad(LOSS, argnums=-1, interpret=True)(A=A, s=s, x=x), dx, rtol=1e-12)
    g_A, g_x = sparsad.grad(LOSS, argnums=(0, "x"), interpret=True)(A, s, x)
    np.testing.assert_allclose(_dense(g_A), dA, rtol=1e-12)
    np.testing.assert_allclose(g_x, dx, rtol=1e-12)
    by_name = sparsad.grad(LOSS, wrt=["s", "x"], interpret=True)(A, s, x)
    assert list(by_name) == ["s", "x"]
    assert by_name["s"] == pytest.approx(ds, rel=1e-12)
    value, g = sparsad.value_and_grad(LOSS, argnums=2, interpret=True)(A, s, x)
    assert value == pytest.approx(s * ds, rel=1e-12)
    np.testing.assert_allclose(g, dx, rtol=1e-12)


def test_compiled_value_and_grad_and_jvp_match_the_closed_forms():
    A, x, s, rng = _data(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        value, g = sparsad.value_and_grad(LOSS, wrt="x")(A, s, x)
        direction = rng.standard_normal(4)
        y, dy = sparsad.jvp(SPMV, wrt="x")(A, x, tangent=direction)
    colsums = np.asarray(A.sum(axis=0)).ravel()
    assert value == pytest.approx(s * float(colsums @ (x * x)), rel=1e-12)
    np.testing.assert_allclose(g, 2 * s * x * colsums, rtol=1e-12)
    np.testing.assert_allclose(y, A @ x, rtol=1e-12)
    np.testing.assert_allclose(dy, A @ direction, rtol=1e-12)


@pytest.mark.parametrize("interpret", [True, False])
def test_jvp_with_several_inputs_sums_their_directions(interpret):
    A, x, _, rng = _data(5)
    dA = sp.csr_matrix((rng.standard_normal(A.nnz), A.indices, A.indptr), shape=A.shape)
    dx = rng.standard_normal(4)
    f = sparsad.jvp(SPMV, wrt=["A", "x"], interpret=interpret)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sparsad.FallbackWarning)
        y, both = f(A, x, tangent={"A": dA, "x": dx})
        _, only_x = f(A, x, tangent={"x": dx})
        _, ordered = f(A, x, tangent=(dA, dx))
    np.testing.assert_allclose(y, A @ x, rtol=1e-12)
    np.testing.assert_allclose(_dense(both), dA @ x + A @ dx, rtol=1e-12)
    np.testing.assert_allclose(_dense(ordered), dA @ x + A @ dx, rtol=1e-12)
    np.testing.assert_allclose(_dense(only_x), A @ dx, rtol=1e-12)
    with pytest.raises(InputError, match="tangent names"):
        f(A, x, tangent={"z": dx})
    with pytest.raises(InputError, match="needs the tangent"):
        f(A, x)


def test_vjp_takes_the_cotangent_by_keyword_and_the_old_names_are_deprecated():
    A, x, _, rng = _data(7)
    ct = rng.standard_normal(6)
    np.testing.assert_allclose(sparsad.vjp(SPMV, wrt="x", interpret=True)(A, x, cotangent=ct), A.T @ ct, rtol=1e-12)
    with pytest.warns(DeprecationWarning, match="cotangent="):
        old = sparsad.vjp(SPMV, "x", cotangent="ct", interpret=True)
    np.testing.assert_allclose(old(A=A, x=x, ct=ct), A.T @ ct, rtol=1e-12)
    with pytest.warns(DeprecationWarning, match="tangent="):
        old = sparsad.jvp(SPMV, "x", tangent="dx", interpret=True)
    primal, tangent = old(A=A, x=x, dx=np.ones(4))
    np.testing.assert_allclose(tangent, A @ np.ones(4), rtol=1e-12)
    assert sparsad.jvp(SPMV, "x").inputs == ["A", "x"]  # no primed default name (x') to pass


def test_wrong_wrt_and_argnums_raise_our_errors():
    with pytest.raises(OptionError, match="not both"):
        sparsad.grad(LOSS, wrt="x", argnums=0)
    with pytest.raises(InputError, match="name the input"):
        sparsad.grad(LOSS)
    with pytest.raises(InputError, match="out of range"):
        sparsad.jacobian(SPMV, argnums=2)
    with pytest.raises(InputError, match="did you mean 'x'|names no input"):
        sparsad.vjp(SPMV, wrt="xx")
    with pytest.raises(InputError, match="twice"):
        sparsad.grad(LOSS, argnums=(2, "x"))
    with pytest.raises(OptionError, match="input names or positions"):
        sparsad.grad(LOSS, wrt=[True])
    A, x, _, _ = _data(1)
    with pytest.raises(ShapeError, match="Use sparsad.jacobian"):
        sparsad.grad(SPMV, wrt="x", interpret=True)(A, x)
    J = sparsad.jacobian(SPMV, argnums=1, interpret=True)(A, x, out_format="dense")
    np.testing.assert_allclose(J, A.toarray(), rtol=1e-12)


def test_coarsen_grad_takes_parameter_names():
    torch = pytest.importorskip("torch")
    import sparsad.coarsen as coarsen

    def energy(x, w):
        return (w * torch.sin(x)).sum()

    x = torch.linspace(0.1, 1.0, 5, dtype=torch.float64)
    w = torch.linspace(1.0, 2.0, 5, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        by_name = coarsen.grad(energy, wrt=["w", "x"])(x, w)
        by_position = coarsen.grad(energy, argnums=(1, 0))(x, w)
        value, gx = coarsen.value_and_grad(energy, wrt="x")(x, w)
    torch.testing.assert_close(by_name["x"], w * torch.cos(x))
    torch.testing.assert_close(by_name["w"], torch.sin(x))
    torch.testing.assert_close(by_position[0], by_name["w"])
    torch.testing.assert_close(gx, w * torch.cos(x))
    torch.testing.assert_close(value, (w * torch.sin(x)).sum())
    with pytest.raises(InputError, match="names no positional parameter"):
        coarsen.grad(energy, wrt="y")
    with pytest.raises(InputError, match="not both"):
        coarsen.grad(energy, argnums=0, wrt="x")


def test_tensor_grad_takes_wrt():
    from sparsad import tensor as T

    x = T.Variable("x", (3,))
    y = T.einsum("i,i->", x, x)
    values = np.array([1.0, -2.0, 0.5])
    for g in (T.grad(y, x), T.grad(y, wrt=x), T.grad(y, wrt="x")):
        np.testing.assert_allclose(T.evaluate(g, {x: values})[0], 2 * values)
    with pytest.raises(InputError, match="names no Variable"):
        T.grad(y, wrt="z")


def test_framework_program_wrappers_take_inputs_by_position():
    torch = pytest.importorskip("torch")
    import sparsad.torch as st

    dot = st.compile_program("sum(<i, a> in u) a * v(i)")
    u = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    v = torch.tensor([3.0, 4.0], dtype=torch.float64)
    out = dot(u, v=v)
    out.backward()
    assert float(out) == 11.0
    torch.testing.assert_close(u.grad, v)
    with pytest.raises(InputError, match=r"missing input\(s\) \['v'\]"):
        dot(u.detach())
