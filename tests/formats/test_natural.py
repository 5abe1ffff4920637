"""Results come back in the kind of the inputs, on the interpreter path and the compiled path
alike (sparsad.formats.natural), and torch tensors that require grad are refused, not detached."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import sparsad
from sparsad.errors import InputError

MAP = "sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> s * exp(a) } }"  # sparse result on A's pattern
SPMV = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"  # dense vector result
DOT = "sum(<i, r> in A) sum(<j, a> in r) a * a"  # a number

PATHS = {"interpreter": sparsad.program, "compiled": sparsad.compile}
_MADE: dict = {}


def run(path, text, **inputs):
    key = (path, text)
    if key not in _MADE:
        _MADE[key] = PATHS[path](text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _MADE[key](**inputs)


def matrix(seed=0):
    A = sp.random(5, 4, density=0.4, random_state=seed, format="csr")
    A.data[:] = np.random.default_rng(seed).standard_normal(A.nnz)
    return A


def expected_map(A, s=2.0):
    want = A.tocsr().copy()
    want.data = s * np.exp(want.data)
    return want.toarray()


def dense_of(result):
    if sp.issparse(result):
        return result.toarray()
    if type(result).__module__.startswith("torch"):
        return (result.to_dense() if result.layout != __import__("torch").strided else result).numpy()
    return np.asarray(result)


SCIPY_CASES = [  # (constructor, expected type of a sparse result)
    (sp.csr_matrix, sp.csr_matrix), (sp.csc_matrix, sp.csr_matrix), (sp.coo_matrix, sp.csr_matrix),
    (sp.csr_array, sp.csr_array), (sp.csc_array, sp.csr_array), (sp.coo_array, sp.csr_array),
]


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("make,out_type", SCIPY_CASES, ids=lambda c: getattr(c, "__name__", str(c)))
def test_scipy_arrays_in_arrays_out_matrices_in_matrices_out(path, make, out_type):
    A = matrix()
    out = run(path, MAP, A=make(A), s=2.0)
    assert type(out) is out_type
    np.testing.assert_allclose(out.toarray(), expected_map(A), rtol=1e-12)
    vector = run(path, SPMV, A=make(A), x=np.arange(4.0))
    assert type(vector) is np.ndarray
    np.testing.assert_allclose(vector, A @ np.arange(4.0), rtol=1e-12)
    assert isinstance(run(path, DOT, A=make(A)), float)


@pytest.mark.parametrize("path", list(PATHS))
def test_explicit_scipy_format_follows_array_or_matrix(path):
    A = matrix(1)
    assert type(PATHS[path](MAP)(A=sp.csr_array(A), s=1.0, out_format="coo")) is sp.coo_array
    assert type(PATHS[path](MAP)(A=A, s=1.0, out_format="coo")) is sp.coo_matrix


@pytest.mark.parametrize("path", list(PATHS))
def test_numpy_in_numpy_out(path):
    A = matrix(2).toarray()
    out = run(path, MAP, A=A, s=2.0)  # every entry of a dense input is stored: dense out on both paths
    assert type(out) is np.ndarray
    np.testing.assert_allclose(out, 2.0 * np.exp(A), rtol=1e-12)
    assert type(run(path, SPMV, A=A, x=np.ones(4))) is np.ndarray


@pytest.mark.parametrize("path", list(PATHS))
def test_torch_in_torch_out(path):
    torch = pytest.importorskip("torch")
    A = matrix(3)
    dense = torch.tensor(A.toarray())
    out = run(path, MAP, A=dense, s=2.0)
    assert isinstance(out, torch.Tensor) and out.layout == torch.strided and out.dtype == torch.float64
    np.testing.assert_allclose(out.numpy(), 2.0 * np.exp(A.toarray()), rtol=1e-12)
    sparse = dense.to_sparse_csr()
    out = run(path, MAP, A=sparse, s=2.0)
    assert isinstance(out, torch.Tensor) and out.layout == torch.sparse_csr
    np.testing.assert_allclose(dense_of(out), expected_map(A), rtol=1e-12)
    x = torch.arange(4.0, dtype=torch.float32)
    vector = run(path, SPMV, A=sparse.to(torch.float32), x=x)
    assert isinstance(vector, torch.Tensor) and vector.dtype == torch.float32  # float32 in, float32 out
    np.testing.assert_allclose(vector.numpy(), (A @ np.arange(4.0)).astype(np.float32), rtol=1e-5)
    number = run(path, DOT, A=sparse)
    assert isinstance(number, torch.Tensor) and number.ndim == 0
    assert float(number) == pytest.approx(float((A.data ** 2).sum()), rel=1e-12)


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("layout", ["dense", "sparse_csr", "sparse_coo"])
def test_torch_tensors_that_require_grad_are_refused_not_detached(path, layout):
    torch = pytest.importorskip("torch")
    A = torch.tensor(matrix(4).toarray())
    A = A if layout == "dense" else A.to_sparse_csr() if layout == "sparse_csr" else A.to_sparse()
    A.requires_grad_(True)
    with pytest.raises(InputError, match="compile_program"):
        run(path, SPMV, A=A, x=torch.ones(4, dtype=torch.float64))
    with pytest.raises(InputError, match="compile_program"):
        run(path, SPMV, A=A.detach(), x=torch.ones(4, dtype=torch.float64, requires_grad=True))
    with torch.no_grad():  # no graph is being recorded: nothing is dropped
        out = run(path, SPMV, A=A, x=torch.ones(4, dtype=torch.float64))
    assert isinstance(out, torch.Tensor)


@pytest.mark.parametrize("path", list(PATHS))
def test_jax_in_jax_out(path):
    jax = pytest.importorskip("jax")
    A = matrix(5)
    with jax.enable_x64(True):
        vector = run(path, SPMV, A=A, x=jax.numpy.arange(4.0))
        assert isinstance(vector, jax.Array)
        np.testing.assert_allclose(np.asarray(vector), A @ np.arange(4.0), rtol=1e-12)
        from jax.experimental.sparse import BCSR

        out = run(path, MAP, A=BCSR.from_scipy_sparse(A), s=2.0)
        assert isinstance(out, BCSR)
        np.testing.assert_allclose(np.asarray(out.todense()), expected_map(A), rtol=1e-12)


@pytest.mark.parametrize("path", list(PATHS))
def test_derivatives_follow_the_inputs_kind(path):
    A = matrix(6)
    grad = sparsad.grad(DOT, wrt="A", interpret=(path == "interpreter"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = grad(A=sp.csr_array(A))
        assert type(out) is sp.csr_array
        np.testing.assert_allclose(out.toarray(), 2 * A.toarray(), rtol=1e-12)
        assert type(grad(A=A)) is sp.csr_matrix
