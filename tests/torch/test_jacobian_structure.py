"""sparsad.torch.jacobian with the structural pattern read off coarsening's graph of f: a superset of
the nonzeros of dense jacfwd at every point, used for pattern=None (no dense Jacobians) and to prove a
given pattern once per coarsened version (then no probe product per call); never stale after a
guard miss; a graph with an operation that has no rule keeps today's detection and probe."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import sparsad.torch as sat
from helpers_coarsen import load_function
from poisson import poisson_pattern, poisson_residual
from sparsad.errors import InputError

f64 = torch.float64
coarsened = sys.modules["sparsad.torch._jacobian_coarsened"]
jacobian_module = sys.modules["sparsad.torch.jacobian"]


def _no_dense_detection(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the pattern was detected from dense Jacobians")
    monkeypatch.setattr(jacobian_module, "_detect", refuse)


def _warm(f, x, pattern, mode="coarsen"):
    """Calls until the compiled code serves f (trace, compile, load, check), as users' repeated calls do."""
    from sparsad.coarsen import tiers

    for _ in range(4):
        sat.jacobian(f, x, pattern=pattern, mode=mode)
        tiers.wait()


# -- generated stencil-like functions ----------------------------------------------------------------

UNARY = ["torch.sin({a})", "torch.exp(0.3 * {a})", "{a} ** 2", "torch.tanh({a})", "C * {a}"]
BINARY = ["{a} * {b}", "({a} + 2.0 * {b})", "({a} - {b})", "torch.where({a} > 0.0, {b}, {a})"]
LAYOUT = ["torch.roll({a}, {s})", "F.pad({a}[{k}:], (0, {k}))", "F.pad({a}[:-{k}], ({k}, 0))",
          "torch.cat([{a}.reshape(R, W)[:, 1:], {a}.reshape(R, W)[:, :1]], 1).reshape(-1)", "F.pad({a}.reshape(R, W)[1:, :], (0, 0, 0, 1)).reshape(-1)",
          "F.pad({a}.reshape(R, W)[:, :-1], (1, 0)).reshape(-1)"]
OUTPUTS = ["{a}", "{a}[{k}:]", "{a}.reshape(R, W)[1:, :].reshape(-1)", "({a} + {b})[:-{k}]"]


@st.composite
def stencils(draw):
    rows, width = draw(st.integers(2, 5)), draw(st.integers(2, 5))
    n = rows * width
    values = draw(st.lists(st.floats(-2.0, 2.0), min_size=n, max_size=n))
    lines = ["import torch", "import torch.nn.functional as F", f"R, W = {rows}, {width}",
             f"C = torch.tensor({[round(v, 3) for v in values]}, dtype=torch.float64)", "def f(x):", "    v0 = x"]
    names = ["v0"]
    for k in range(1, draw(st.integers(2, 6))):
        kind = draw(st.sampled_from(["unary", "binary", "layout", "layout"]))
        a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        table = {"unary": UNARY, "binary": BINARY, "layout": LAYOUT}[kind]
        shift = draw(st.integers(1, n - 1))
        lines.append(f"    v{k} = " + draw(st.sampled_from(table)).format(a=a, b=b, s=shift, k=min(shift, n - 1)))
        names.append(f"v{k}")
    last, other = names[-1], draw(st.sampled_from(names))
    lines.append("    return " + draw(st.sampled_from(OUTPUTS)).format(a=last, b=other, k=draw(st.integers(1, n - 1))))
    return "\n".join(lines) + "\n", n


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # (a context per example)
@given(program=stencils(), seed=st.integers(0, 2**31 - 1))
def test_structural_pattern_holds_every_nonzero_of_jacfwd_at_random_points(program, seed, monkeypatch):
    """pattern=None on generated stencils (slices, pads, roll, cat, reshape, elementwise ops, a
    closed-over tensor): the pattern comes from coarsening's graph (no dense Jacobians), holds dense
    jacfwd's nonzeros at random points, and the Jacobian equals jacfwd to 1e-12; given back, the
    pattern is proven for coarsening's plan (no probe product per compiled call; the compiled calls
    themselves: the tests below, which compile once each)."""
    source, n = program
    f = load_function(source)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dtype=f64, generator=generator)
    with monkeypatch.context() as patch:
        _no_dense_detection(patch)
        J = sat.jacobian(f, x, mode="reverse")
    structure = J.pattern.to_scipy(np.ones(J.nnz)).toarray() != 0
    for point in [x] + [3 * torch.randn(n, dtype=f64, generator=generator) for _ in range(3)]:
        dense = torch.func.jacfwd(f)(point)
        assert not np.any((dense.numpy() != 0) & ~structure), source
    torch.testing.assert_close(J.to_dense(), torch.func.jacfwd(f)(x), rtol=1e-12, atol=1e-12)
    plan = coarsened.state_of(f).coarse.plan((x, torch.zeros(J.shape[0], dtype=f64)))
    assert coarsened.proven(plan, J.pattern)  # given back, the pattern needs no probe while this plan serves
    y = torch.randn(n, dtype=f64, generator=generator)  # (reused at another point: still exact)
    torch.testing.assert_close(sat.jacobian(f, y, pattern=J.pattern, mode="reverse").to_dense(),
                               torch.func.jacfwd(f)(y), rtol=1e-12, atol=1e-12)


# -- the probe where the structure is not inside the pattern ------------------------------------------

def test_a_pattern_missing_an_entry_still_raises_from_the_compiled_code(monkeypatch):
    """The structure is not inside a pattern missing one entry: the probe stays, and raises our
    InputError on every compiled call; the full pattern is proven and skips it."""
    side = 5
    residual = poisson_residual(side)
    u = torch.randn(side * side, dtype=f64, generator=torch.Generator().manual_seed(1))
    short = poisson_pattern(side).tolil()
    short[7, 8] = 0
    short = sat.SparseMatrix.from_scipy(short.tocsr()).pattern
    full = sat.SparseMatrix.from_scipy(poisson_pattern(side)).pattern
    _warm(residual, u, full)
    with monkeypatch.context() as patch:
        def refuse(*args, **kwargs):
            raise AssertionError("autograd was used")
        patch.setattr(torch.autograd, "grad", refuse)
        patch.setattr(jacobian_module, "_reverse", refuse)
        torch.testing.assert_close(sat.jacobian(residual, u, pattern=full, mode="coarsen").to_dense(),
                                   torch.func.jacfwd(residual)(u), rtol=1e-12, atol=1e-12)
        assert coarsened.steady(residual, full).proven_last
        for _ in range(3):  # the first call from the general path, then the steady one
            with pytest.raises(InputError, match="outside `pattern`"):
                sat.jacobian(residual, u, pattern=short, mode="coarsen")
        assert not coarsened.steady(residual, short).proven_last
        wrong = sat.jacobian(residual, u, pattern=short, mode="coarsen", check=False)  # as asked
        assert wrong.nnz == short.nnz


# -- guards: a changed f is a new graph, never a stale proof ----------------------------------------------

def test_a_guard_miss_never_reuses_a_stale_proof_or_pattern():
    """f's shift (a closure value) and a closed-over tensor change between calls: each change is a
    new graph whose structure is worked out anew; a given pattern proven for the old shift raises
    for the new one, pattern=None follows it, and an in-place change of the tensor gives the new
    values on the very next call."""
    n = 9
    shift = 1
    weights = torch.linspace(0.5, 2.0, n, dtype=f64)

    def f(x):
        return weights * torch.roll(x, shift) * x + torch.sin(x)

    x = torch.randn(n, dtype=f64, generator=torch.Generator().manual_seed(2))
    detected = sat.jacobian(f, x)
    pattern = detected.pattern
    for _ in range(2):
        _warm(f, x, pattern)
        _warm(f, x, None)
        for given_pattern in (pattern, None):
            torch.testing.assert_close(sat.jacobian(f, x, pattern=given_pattern, mode="coarsen").to_dense(),
                                       torch.func.jacfwd(f)(x), rtol=1e-12, atol=1e-12)
        assert coarsened.steady(f, pattern).proven_last and coarsened.steady(f, None) is not None
        weights.mul_(-3.0)  # in place: the very next call has the new values
        for given_pattern in (pattern, None):
            torch.testing.assert_close(sat.jacobian(f, x, pattern=given_pattern, mode="coarsen").to_dense(),
                                       torch.func.jacfwd(f)(x), rtol=1e-12, atol=1e-12)
    shift = 2  # another structure: the old proof must not serve it
    with pytest.raises(InputError, match="outside `pattern`"):
        sat.jacobian(f, x, pattern=pattern, mode="coarsen")
    for _ in range(3):
        J = sat.jacobian(f, x, mode="coarsen")
        torch.testing.assert_close(J.to_dense(), torch.func.jacfwd(f)(x), rtol=1e-12, atol=1e-12)
    assert J.pattern is not pattern


# -- no rule: today's behaviour ---------------------------------------------------------------------------

def test_an_operation_without_a_rule_keeps_dense_detection_and_the_probe(monkeypatch):
    """An operation without a dependency rule (here: sin, its rule taken away), and a traced form
    the analysis does not read (a short cat, assembled entry by entry): pattern=None detects
    densely, and a given pattern keeps its probe on every compiled call (a missing entry raises)."""
    from sparsad.coarsen import dependencies

    n = 8
    monkeypatch.delitem(dependencies.OP_RULES, "sin")

    def wavy(x):
        return torch.sin(x[1:] * x[:-1]) + 0.5 * x[1:]

    def rotated(x):
        return torch.cat([x[1:], x[:1]]) * x

    x = torch.randn(n, dtype=f64, generator=torch.Generator().manual_seed(3))
    diagonal = sat.SparseMatrix.from_scipy(sp.eye(n - 1, n, format="csr")).pattern
    for f, short in ((wavy, diagonal), (rotated, sat.SparseMatrix.from_scipy(sp.eye(n, format="csr")).pattern)):
        calls = []
        detect = jacobian_module._detect
        with monkeypatch.context() as patch:
            patch.setattr(jacobian_module, "_detect", lambda *args: calls.append(1) or detect(*args))
            J = sat.jacobian(f, x)
        assert calls
        torch.testing.assert_close(J.to_dense(), torch.func.jacfwd(f)(x), rtol=1e-12, atol=1e-12)
        _warm(f, x, J.pattern)
        torch.testing.assert_close(sat.jacobian(f, x, pattern=J.pattern, mode="coarsen").to_dense(),
                                   torch.func.jacfwd(f)(x), rtol=1e-12, atol=1e-12)
        assert not coarsened.steady(f, J.pattern).proven_last  # served by the compiled code, probed
        for _ in range(2):
            with pytest.raises(InputError, match="outside `pattern`"):
                sat.jacobian(f, x, pattern=short, mode="coarsen")


def test_pattern_none_where_dense_detection_is_refused():
    """n = 4096: dense detection would need a 4096 x 4096 Jacobian (above DETECT_MAX_ENTRIES); the
    structure needs none."""
    side = 64
    residual = poisson_residual(side)
    u = torch.randn(side * side, dtype=f64, generator=torch.Generator().manual_seed(4))
    assert (side * side) ** 2 > jacobian_module.DETECT_MAX_ENTRIES
    J = sat.jacobian(residual, u, mode="reverse")
    expected = sat.jacobian(residual, u, pattern=poisson_pattern(side), mode="reverse")
    assert J.nnz == expected.nnz
    torch.testing.assert_close(J.to_dense(), expected.to_dense(), rtol=1e-12, atol=1e-12)
