"""torch.compile(fullgraph=True) and meta/fake tensors on sparsad.torch ops and compile_program
layers (the custom ops of sparsad.torch._traced): values and gradients equal eager (and dense
autograd) to 1e-10 in float64; a new pattern recompiles rather than reusing a stale graph; meta
and fake tensors give the eager output's shape or our own error.

torch.compile is slow (seconds per graph): a handful of compiled functions, not a matrix; the
per-op compiled cases are in test_func.py (test_torch_compile_values_and_gradients).
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import sparsad.torch as st
from sparsad.errors import UnsupportedError
from sparsad.torch.layers import GCNConv

TOL = dict(rtol=1e-10, atol=1e-10)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "frameworks_layers.py"
AGGREGATE = "sum(<i, r> in A) { i -> sum(<k, a> in r) sum(<c, h> in H(k)) { c -> a * h } }"
SCALED = "sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> s * a } }"  # a sparse (natural) result


def _example():
    """examples/frameworks_layers.py as a module (registered: dynamo looks functions' modules up)."""
    if "frameworks_layers" not in sys.modules:
        spec = importlib.util.spec_from_file_location("frameworks_layers", EXAMPLE)
        module = importlib.util.module_from_spec(spec)
        sys.modules["frameworks_layers"] = module
        spec.loader.exec_module(module)
    return sys.modules["frameworks_layers"]


def _random_matrix(n, density, seed, requires_grad=False):
    matrix = sp.random(n, n, density=density, format="csr", random_state=seed)
    matrix.data = np.random.default_rng(seed).uniform(0.5, 1.5, matrix.nnz)
    return st.SparseMatrix.from_scipy(matrix, requires_grad=requires_grad)


def _grads(loss, tensors):
    return torch.autograd.grad(loss, tensors)


def test_fullgraph_model_of_compile_program_layers_equals_eager_and_dense():
    """The example's GCN + sparse attention model (both layers compile_program ops), compiled
    whole with fullgraph=True: loss and parameter gradients equal eager's and dense autograd's."""
    torch._dynamo.reset()
    ex = _example()
    a_hat, features, labels, classes = ex.graph(small=True, seed=3)
    A, X, y = st.SparseMatrix.from_scipy(a_hat), st.SparseMatrix.from_scipy(features), torch.as_tensor(labels)
    base = ex.init(X.shape[1], 16, 8, classes, seed=2)
    forward = ex.torch_model()

    def loss(A, X, params):
        return torch.nn.functional.cross_entropy(forward(A, X, params), y)

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    results = []
    for run, adjacency in ((compiled, A), (loss, A)):
        params = {k: torch.tensor(v, requires_grad=True) for k, v in base.items()}
        value = run(adjacency, X, params)
        results.append((value, _grads(value, list(params.values()))))
    params = {k: torch.tensor(v, requires_grad=True) for k, v in base.items()}
    dense = torch.nn.functional.cross_entropy(
        ex.torch_dense_model()(torch.as_tensor(a_hat.toarray()), torch.as_tensor(features.toarray()), params), y)
    results.append((dense, _grads(dense, list(params.values()))))
    (got, got_grads), *references = results
    for want, want_grads in references:
        torch.testing.assert_close(got, want, **TOL)
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w, **TOL)


def test_fullgraph_inductor_gcn_layer_with_learned_adjacency_equals_eager():
    """GCNConv (gcn_norm: add, identity, row sums, scaling; then SpMM) and a compile_program
    layer differentiated in the adjacency's values too, under inductor with fullgraph=True."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    conv = GCNConv(4, 3).double()
    aggregate = st.compile_program(AGGREGATE, wrt=("A", "H"), out_format="dense")

    def model(A, X):
        hidden = torch.tanh(conv(A, X))
        return (aggregate(A=A, H=hidden) ** 2).sum() + st.spmv(A.T, hidden[:, 0]).sum()

    compiled = torch.compile(model, fullgraph=True, backend="inductor")
    X = torch.randn(9, 4, dtype=torch.float64)
    outcomes = []
    for run in (compiled, model):
        A = _random_matrix(9, 0.3, 5, requires_grad=True)
        conv.zero_grad()
        value = run(A, X)
        value.backward()
        outcomes.append((value, A.values.grad, conv.weight.grad.clone(), conv.bias.grad.clone()))
    for got, want in zip(*outcomes):
        torch.testing.assert_close(got, want, **TOL)


def test_a_new_pattern_recompiles_instead_of_reusing_a_stale_graph():
    """Two adjacencies of the same shape and the same number of entries (so no shape guard
    tells them apart), one with more entries, and back: every call equals eager on its own
    pattern."""
    torch._dynamo.reset()
    aggregate = st.compile_program(AGGREGATE, wrt=("H",), out_format="dense")

    def model(A, X):
        return st.spmm(st.gcn_norm(A), X) + aggregate(A=A, H=X) + st.spmm(st.spgemm(A, A.T), X)

    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    X = torch.randn(8, 2, dtype=torch.float64)
    first = _random_matrix(8, 0.3, 1)
    rows, cols = first.pattern.rows, first.pattern.indices
    moved = sp.csr_matrix((first.values.numpy(), ((rows + 1) % 8, cols)), shape=(8, 8))
    second = st.SparseMatrix.from_scipy(moved)
    assert second.nnz == first.nnz and not np.array_equal(second.pattern.indices, first.pattern.indices)
    third = _random_matrix(8, 0.5, 7)  # another nnz (dynamo then makes the values' length symbolic)
    assert third.nnz != first.nnz
    for A in (first, second, third, first):
        torch.testing.assert_close(compiled(A, X), model(A, X), **TOL)


def test_fullgraph_solves_and_structure_ops_follow_changing_values():
    """Triangular, LU and Krylov solves (their adjoint solves in backward) and the triangle,
    trace and sum ops in one fullgraph function; a second step with new matrix values (an
    optimizer's) is solved afresh, not with the first step's factor or preconditioner."""
    torch._dynamo.reset()
    sym = sp.random(8, 8, density=0.3, random_state=0, format="csr")
    S = st.SparseMatrix.from_scipy(sym + sym.T + 8 * sp.eye(8))
    U = st.SparseMatrix.from_scipy(sp.random(8, 8, density=0.3, random_state=1, format="csr") + 8 * sp.eye(8))

    def f(s, u, b):
        A, N = S.with_values(s), U.with_values(u)
        x = st.cg(A, b, M="jacobi")
        y = st.gmres(N, torch.stack([b, x], 1), rtol=1e-12)
        z = st.triangular_solve(st.tril(N), x) + st.triangular_solve(st.triu(N), b, lower=False, transpose=True)
        w = st.spsolve(N, z)
        return (x ** 2).sum() + y.sum() + w.sin().sum() + st.trace(st.triu(A, 1)) + st.sum(st.tril(A), 1).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    b = torch.randn(8, dtype=torch.float64)
    for step in range(2):
        args = [S.values.detach() * (1 + step), U.values.detach() * (2 - 0.5 * step), b]
        outcomes = []
        for run in (compiled, f):
            leaves = [t.clone().requires_grad_(True) for t in args]
            value = run(*leaves)
            outcomes.append((value, *_grads(value, leaves)))
        for got, want in zip(*outcomes):
            torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("strict", [True, False])
def test_torch_export_of_a_gcn_module_runs_like_eager(strict):
    """A module holding its adjacency, exported (strict: through dynamo; non-strict: fake tensors
    through the Python code); the exported program equals eager."""
    aggregate = st.compile_program(AGGREGATE, wrt=("H",), out_format="dense")
    A = _random_matrix(9, 0.3, 0)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = GCNConv(4, 3).double()

        def forward(self, X):
            return aggregate(A=A, H=torch.relu(self.conv(A, X)))

    torch.manual_seed(0)
    model, X = Model(), torch.randn(9, 4, dtype=torch.float64)
    want = model(X)  # (also the process's Numba kernels: non-strict export patches max and min)
    exported = torch.export.export(model, (X,), strict=strict)
    torch.testing.assert_close(exported.module()(X), want, **TOL)


def test_forward_mode_and_func_grad_inside_a_compiled_region_are_right_or_refused():
    """Custom ops have no forward-mode rule (torch would return zero tangents silently) and
    torch.func.grad cannot run them: with fullgraph=True our UnsupportedError says so; without,
    dynamo falls back to the eager ops, whose jvp and grad are right."""
    from torch.func import grad, jvp

    A = _random_matrix(6, 0.5, 0)
    X = torch.randn(6, 3, dtype=torch.float64)
    f = lambda X: st.spmm(A, X).square().sum()  # noqa: E731
    cases = {"forward-mode": lambda X: jvp(f, (X,), (X,))[1], "torch.func.grad": lambda X: grad(f)(X)}
    for message, transformed in cases.items():
        torch._dynamo.reset()
        with pytest.raises(Exception, match=message):
            torch.compile(transformed, fullgraph=True, backend="aot_eager")(X)
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(transformed, backend="aot_eager")(X), transformed(X), **TOL)


def test_ops_without_a_custom_op_graph_break_on_matrices_made_in_the_graph():
    """Without fullgraph, a matrix made in the graph (its pattern a graph constant) reaches the
    eager code behind a graph break (logdet, cholesky, splu, to_torch_coo; a compiled function's
    result): it reads its real pattern there, and every value equals eager's."""
    sym = sp.random(6, 6, density=0.4, random_state=0, format="csr")
    S = st.SparseMatrix.from_scipy(sym + sym.T + 6 * sp.eye(6))
    ones = torch.ones(6, dtype=torch.float64)
    cases = [lambda a: st.logdet(st.add(S.with_values(a), st.identity(6))),
             lambda a: st.cholesky(st.add(S.with_values(a), st.identity(6))).solve(ones).sum(),
             lambda a: st.splu(S.with_values(a).T).solve(ones).sum() + S.with_values(a).T.to_dense().sum(),
             lambda a: st.to_torch_coo(st.tril(S.with_values(a))).to_dense().sum(),
             lambda a: st.add(S.with_values(a), S.with_values(a).T)]
    a = S.values.detach().clone()
    for f in cases:
        torch._dynamo.reset()
        got, want = torch.compile(f, backend="aot_eager")(a), f(a)
        if isinstance(want, st.SparseMatrix):
            assert np.array_equal(got.pattern.indices, want.pattern.indices)
            got, want = got.values, want.values
        torch.testing.assert_close(got, want, **TOL)


def _ops(A, B, X, aggregate):
    """Each op's result on A, B (square), X."""
    return {
        "spmm": lambda: st.spmm(A, X),
        "spmv": lambda: st.spmv(A, X[:, 0], 2.0, 0.5, X[:, 1]),
        "spgemm": lambda: st.spgemm(A, B).values,
        "add": lambda: st.add(A, B, 2.0).values,
        "transpose": lambda: A.T.values,
        "gcn_norm": lambda: st.gcn_norm(A).values,
        "rmatmul": lambda: X.T @ A,  # (eager only: under dynamo write spmm, see docs/torch.md)
        "program": lambda: aggregate(A=A, H=X),
        "triangular_solve": lambda: st.triangular_solve(st.tril(st.add(A, st.identity(7, device=A.device))), X),
        "spsolve": lambda: st.spsolve(st.add(A, st.identity(7, device=A.device), 1.0, 9.0), X[:, 0]),
        "cg": lambda: st.cg(st.add(A, A.T, 1.0, 1.0) + st.scale(st.identity(7, device=A.device), 9.0), X),
        "tril_trace": lambda: st.trace(st.tril(A)),
    }


@pytest.mark.parametrize("mode", ["meta", "fake"])
def test_meta_and_fake_tensors_give_the_eager_shapes(mode):
    aggregate = st.compile_program(AGGREGATE, out_format="dense")
    A, B = _random_matrix(7, 0.4, 1), _random_matrix(7, 0.4, 2)
    X = torch.randn(7, 3, dtype=torch.float64)
    eager = {name: op() for name, op in _ops(A, B, X, aggregate).items()}
    if mode == "meta":
        shaped = {name: op() for name, op in _ops(A.to("meta"), B.to("meta"), X.to("meta"), aggregate).items()}
    else:
        with FakeTensorMode(allow_non_fake_inputs=True):
            fake = [torch.empty_like(t) for t in (A.values, B.values, X)]
            ops = _ops(A.with_values(fake[0]), B.with_values(fake[1]), fake[2], aggregate)
            shaped = {name: op() for name, op in ops.items()}
    for name, want in eager.items():
        assert shaped[name].shape == want.shape, name
        assert shaped[name].is_meta == (mode == "meta"), name


def test_meta_tensors_raise_our_errors_where_no_shape_can_be_known():
    """A sparse program result has a data-dependent pattern: our UnsupportedError names the fix."""
    scaled = st.compile_program(SCALED)
    A = _random_matrix(5, 0.5, 0)
    with pytest.raises(UnsupportedError, match="out_format='dense'"):
        scaled(A=A.to("meta"), s=torch.tensor(2.0, dtype=torch.float64, device="meta"))
