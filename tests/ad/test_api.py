"""grad / jacobian / jvp / vjp: several wrt names, directional derivatives, cost, errors."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsad
import sparsad.lang.interpret as interpret
from sparsad.programs import PAPER_PROGRAMS

from reference.dense_ad import jax_numpy

SPMV = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"


def test_several_wrt_names_give_results_per_name():
    V1, V2 = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    g = sparsad.grad(PAPER_PROGRAMS["vvd"].text, wrt=["V1", "V2"])
    result = g(V1=V1, V2=V2)
    assert set(result) == {"V1", "V2"}
    np.testing.assert_array_equal(result["V1"], V2)
    np.testing.assert_array_equal(result["V2"], V1)
    assert "# d/dV1" in g.show("derivative")


def test_jvp_matches_jax():
    jax, jnp = jax_numpy()
    rng = np.random.default_rng(0)
    A, x, dx = rng.standard_normal((4, 3)), rng.standard_normal(3), rng.standard_normal(3)
    prog = "sum(<i, r> in A) { i -> sum(<j, a> in r) tanh(a * x(j)) }"
    primal, ours = sparsad.jvp(prog, wrt="x")(A=A, x=x, tangent=dx)
    value, expected = jax.jvp(lambda v: jnp.tanh(A * v[None, :]).sum(axis=1), (x,), (dx,))
    np.testing.assert_allclose(ours, np.asarray(expected), rtol=1e-12)
    np.testing.assert_allclose(primal, np.asarray(value), rtol=1e-12)


def test_vjp_matches_jax_and_is_masked_on_sparse_operands():
    jax, jnp = jax_numpy()
    A = sp.random(5, 4, density=0.4, format="csr", random_state=3)
    x, ct = np.arange(1.0, 5.0), np.linspace(-1, 1, 5)
    ours_x = sparsad.vjp(SPMV, wrt="x")(A=A, x=x, cotangent=ct)
    _, pullback = jax.vjp(lambda v: jnp.asarray(A.toarray()) @ v, jnp.asarray(x))
    np.testing.assert_allclose(ours_x, np.asarray(pullback(jnp.asarray(ct))[0]), rtol=1e-13)
    ours_A = sparsad.vjp(SPMV, wrt="A")(A=A, x=x, cotangent=ct)
    assert sp.issparse(ours_A) and ours_A.nnz == A.nnz
    np.testing.assert_allclose(ours_A.toarray(), np.outer(ct, x) * (A.toarray() != 0), rtol=1e-13)


def _count_evaluations(monkeypatch):
    counter = {"n": 0}
    original = interpret._eval

    def counting(expr, env):
        counter["n"] += 1
        return original(expr, env)

    monkeypatch.setattr(interpret, "_eval", counting)
    return counter


@pytest.mark.parametrize("name, wrt", [("smvm", "A"), ("smvm", "X"), ("vvd", "V1"), ("smmm", "B")])
def test_reverse_mode_costs_a_constant_factor_of_the_primal(monkeypatch, name, wrt):
    """Counting evaluated nodes: the ratio gradient/primal does not grow with the input size."""
    entry = PAPER_PROGRAMS[name]
    prog, derivative = sparsad.program(entry.text), sparsad.grad(entry.text, wrt=wrt, mode="reverse", interpret=True)
    ratios = []
    for n in (20, 80):
        rng = np.random.default_rng(n)
        inputs = {}
        for arg, kind in entry.kinds.items():
            inputs[arg] = (rng.standard_normal(n) if kind == "vector"
                           else sp.random(n, n, density=0.1, format="csr", random_state=n))
        counter = _count_evaluations(monkeypatch)
        prog(out_format="value", **inputs)
        primal = counter["n"]
        counter["n"] = 0
        derivative(out_format="value", **inputs)
        ratios.append(counter["n"] / primal)
        monkeypatch.undo()
    print(name, wrt, ratios)
    assert ratios[1] <= 1.25 * ratios[0] and ratios[1] < 12, ratios


def test_errors_name_the_problem():
    with pytest.raises(sparsad.InputError, match=r"wrt='y' names no input"):
        sparsad.grad("x * 2.0", wrt="y")
    for mode in ("auto", "reverse", "forward"):  # grad of a vector-valued program points to jacobian
        with pytest.raises(sparsad.ShapeError, match="scalar output.*jacobian"):
            sparsad.grad(SPMV, wrt="x", mode=mode)(A=np.ones((2, 2)), x=np.ones(2))
    with pytest.raises(ValueError, match="mode"):
        sparsad.grad("x * 2.0", wrt="x", mode="sideways")


def test_derivative_is_a_program_and_auto_picks_the_mode():
    g = sparsad.grad(PAPER_PROGRAMS["smvm"].text, wrt="X")
    assert isinstance(g, sparsad.Program)
    assert g.resolved_mode() == "reverse"
    assert sparsad.jacobian(SPMV, wrt="x").resolved_mode() == "tensorized"
    assert "Derivative(grad" in repr(g)
    assert g.show("source") == sparsad.program(PAPER_PROGRAMS["smvm"].text).text()
