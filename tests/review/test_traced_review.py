"""Review of sparsad.torch._traced (the custom ops torch.compile sees): forward-mode derivatives
through a compiled function. A graph compiled on plain tensors is reused by dynamo for dual
tensors (no recompile), and a custom op has no forward-mode rule: torch then returns the op's
output without a tangent, a silent zero. The sparse part of the tangent went missing (the
trace-time refusal only fires when the first call is already dual)."""
from __future__ import annotations

import pytest
import scipy.sparse as sp
import torch
import torch.autograd.forward_ad as fwAD

import sparsad.torch as st
from sparsad.errors import UnsupportedError

f64 = torch.float64


def _matrix(n=6, seed=1):
    return st.SparseMatrix.from_scipy((sp.random(n, n, density=0.4, random_state=seed, format="csr")
                                       + sp.eye(n)).tocsr(), dtype=f64)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_dual_tensors_through_a_graph_compiled_on_plain_tensors_never_lose_the_sparse_tangent(backend):
    torch._dynamo.reset()
    A = _matrix()
    x, t = torch.randn(6, dtype=f64), torch.randn(6, dtype=f64)

    def f(x):
        return st.spmv(A, x) + x  # tangent A t + t

    compiled = torch.compile(f, fullgraph=True, backend=backend)
    torch.testing.assert_close(compiled(x), f(x))  # compiled for plain tensors
    want = A.to_dense() @ t + t
    with fwAD.dual_level():
        eager = fwAD.unpack_dual(f(fwAD.make_dual(x, t))).tangent
        torch.testing.assert_close(eager, want)  # eager ops: right
        try:
            got = fwAD.unpack_dual(compiled(fwAD.make_dual(x, t))).tangent
        except UnsupportedError:
            return  # refused: fine
    torch.testing.assert_close(got, want)  # it was t alone (A t dropped silently)


def _cases():
    M = sp.random(6, 6, density=0.4, random_state=1, format="csr") + 4 * sp.eye(6)
    A = st.SparseMatrix.from_scipy((M + M.T).tocsr())
    scaled = st.compile_program("sum(<i, a> in x) a * a * s")
    window = st.compile_program("sum(<i, _> in (0:n)) { i -> x(i) * x(i) }", out_format="dense")
    return {"compile_program float": lambda x, s: scaled(x=x, s=s),
            "compile_program int": lambda x, s: window(x=x, n=int(s) + 1),
            "cg rtol": lambda x, s: st.cg(A, x, rtol=s * 1e-10),
            "cg maxiter": lambda x, s: st.cg(A, x, maxiter=int(s) * 50),
            "tril k": lambda x, s: st.spmv(st.tril(A, int(s) - 2), x),
            "eye k": lambda x, s: st.spmv(st.eye(6, k=int(s) - 2), x),
            "identity n": lambda x, s: st.identity(int(s) + 2).to_dense().sum() * x}


@pytest.mark.parametrize("name", list(_cases()))
def test_a_python_number_argument_that_changes_between_calls_recompiles(name):
    """Dynamo makes a number argument that changed symbolic (automatic dynamic); the ops passed it to
    a graph constant's member, which dynamo refused with InternalTorchDynamoError on the second call."""
    torch._dynamo.reset()
    f = _cases()[name]
    compiled = torch.compile(f, fullgraph=True, backend="eager")
    x = torch.randn(6, dtype=f64)
    for s in (1.0, 2.0, 3.0, 2.0):
        torch.testing.assert_close(compiled(x, s), f(x, s), rtol=1e-10, atol=1e-10)


def test_a_matrix_returned_by_a_compiled_function_pickles_for_another_process(monkeypatch):
    """The result's pattern was the graph constant (`Static`), pickled as a key of this process:
    torch.save / pickle of the result loaded elsewhere raised "a compiled graph of another process"."""
    import io
    import pickle

    from sparsad.torch import _traced

    torch._dynamo.reset()
    A = _matrix()
    S = torch.compile(lambda A: st.add(A, A.T), fullgraph=True, backend="eager")(A)
    want = A.to_dense() + A.to_dense().T
    blob, buffer = pickle.dumps(S), io.BytesIO()
    torch.save(S, buffer)
    monkeypatch.setattr(_traced, "_SESSION", "another process")
    buffer.seek(0)
    for loaded in (pickle.loads(blob), torch.load(buffer, weights_only=False)):
        assert not isinstance(loaded._pattern, _traced.Static)
        torch.testing.assert_close(loaded.to_dense(), want)
