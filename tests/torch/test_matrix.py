"""SparseMatrix construction, validation, conversions, properties and operators."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from sparsad.errors import DTypeError, FormatError, InputError, ShapeError, UnsupportedError
from sparsad.torch import DenseResultWarning, SparseMatrix


def test_from_scipy_sums_duplicates_keeps_explicit_zeros():
    coo = sp.coo_matrix(([1.0, 2.0, 0.0, 5.0], ([0, 0, 1, 2], [1, 1, 0, 2])), shape=(3, 3))
    A = SparseMatrix.from_scipy(coo)
    assert A.nnz == 3 and A.shape == (3, 3)
    np.testing.assert_array_equal(A.to_dense().numpy(), coo.toarray())
    assert A.values.tolist() == [3.0, 0.0, 5.0]  # the explicit zero stays in the pattern


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_raw_constructor_and_round_trips(index_dtype, dtype):
    matrix = sp.random(5, 4, density=0.5, format="csr", random_state=1)
    A = SparseMatrix(torch.tensor(matrix.data, dtype=dtype), matrix.indices.astype(index_dtype),
                     matrix.indptr.astype(index_dtype), matrix.shape)
    assert A.pattern.indices.dtype == index_dtype and A.dtype == dtype
    np.testing.assert_allclose(A.to_scipy().toarray(), matrix.toarray(), rtol=1e-6)
    np.testing.assert_allclose(A.to_torch().to_dense().numpy(), matrix.toarray(), rtol=1e-6)
    np.testing.assert_allclose(SparseMatrix.from_torch(A.to_torch()).to_dense().numpy(), matrix.toarray(), rtol=1e-6)
    coo = torch.tensor(matrix.toarray(), dtype=dtype).to_sparse()
    assert torch.equal(SparseMatrix.from_torch(coo).to_dense(), coo.to_dense())
    assert torch.equal(SparseMatrix.from_dense(coo.to_dense()).to_dense(), coo.to_dense())


def test_from_torch_csr_unsorted_columns_and_gradient_flow():
    unsorted = torch.sparse_csr_tensor(torch.tensor([0, 2, 3]), torch.tensor([2, 0, 1]),
                                       torch.tensor([2.0, 1.0, 3.0], dtype=torch.float64), size=(2, 3))
    A = SparseMatrix.from_torch(unsorted)
    assert A.values.tolist() == [1.0, 2.0, 3.0] and A.pattern.indices.tolist() == [0, 2, 1]
    # (torch's own CSR values() backward re-sorts columns, so gradient flow is checked on sorted input)
    values = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    csr = torch.sparse_csr_tensor(torch.tensor([0, 2, 3]), torch.tensor([0, 2, 1]), values, size=(2, 3))
    (SparseMatrix.from_torch(csr).values * torch.tensor([10.0, 20.0, 30.0], dtype=torch.float64)).sum().backward()
    assert values.grad.tolist() == [10.0, 20.0, 30.0]


def test_from_dense_is_differentiable_and_warns_when_full():
    dense = torch.tensor([[0.0, 2.0], [3.0, 0.0]], dtype=torch.float64, requires_grad=True)
    A = SparseMatrix.from_dense(dense)
    assert A.nnz == 2
    A.values.sum().backward()
    assert dense.grad.tolist() == [[0.0, 1.0], [1.0, 0.0]]
    with pytest.warns(DenseResultWarning, match="nonzero"):
        SparseMatrix.from_dense(torch.ones(200, 100, dtype=torch.float64))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SparseMatrix.from_dense(torch.eye(200, dtype=torch.float64))


@pytest.mark.parametrize("args, error, fragment", [
    (([1.0], [0], [0, 1], (1, 1, 1)), ShapeError, "A.shape must be a pair"),
    (([1.0, 2.0], [0], [0, 1], (1, 1)), ShapeError, "values must have shape (1,)"),
    ((torch.tensor([1], dtype=torch.int64), [0], [0, 1], (1, 1)), DTypeError, "values must be float32 or float64"),
    (([1.0], [3], [0, 1], (1, 2)), FormatError, "A.indices holds column 3"),
    (([1.0], [0.5], [0, 1], (1, 2)), DTypeError, "indices must hold integers"),
    (([1.0], [0], [0, 2], (1, 2)), FormatError, "A.indptr[-1]"),
])
def test_constructor_validation(args, error, fragment):
    with pytest.raises(error) as info:
        SparseMatrix(*args)
    assert fragment in str(info.value)


def test_constructor_errors_for_other_inputs():
    with pytest.raises(FormatError, match="scipy.sparse"):
        SparseMatrix.from_scipy(np.eye(2))
    with pytest.raises(FormatError, match="from_dense"):
        SparseMatrix.from_torch(torch.eye(2))
    with pytest.raises(FormatError, match="from_torch"):
        SparseMatrix.from_dense(torch.eye(2).to_sparse())
    with pytest.raises(DTypeError):
        SparseMatrix.from_dense(torch.eye(2, dtype=torch.int64))


def test_properties_repr_grad_and_to():
    A = SparseMatrix.from_scipy(sp.eye(3, format="csr") * 2.0, requires_grad=True)
    text = repr(A)
    assert "shape=(3, 3)" in text and "nnz=3" in text and "float64" in text and "requires_grad=True" in text
    assert A.grad is None
    (A @ torch.ones(3, dtype=torch.float64)).sum().backward()
    assert isinstance(A.grad, SparseMatrix) and A.grad.pattern is A.pattern
    assert A.grad.values.tolist() == [1.0, 1.0, 1.0]
    B = A.to(dtype=torch.float32)
    assert B.dtype == torch.float32 and B.pattern is A.pattern
    with pytest.raises(DTypeError):
        A.to(dtype=torch.int32)


def test_operators_match_dense():
    a = sp.random(4, 4, density=0.5, format="csr", random_state=3)
    b = sp.random(4, 4, density=0.5, format="csr", random_state=4)
    A, B = SparseMatrix.from_scipy(a), SparseMatrix.from_scipy(b)
    Ad, Bd = A.to_dense(), B.to_dense()
    x = torch.randn(4, dtype=torch.float64)
    X = torch.randn(3, 4, dtype=torch.float64)
    torch.testing.assert_close((A @ B).to_dense(), Ad @ Bd)
    torch.testing.assert_close((A + B).to_dense(), Ad + Bd)
    torch.testing.assert_close((A - B).to_dense(), Ad - Bd)
    torch.testing.assert_close((2.5 * A).to_dense(), 2.5 * Ad)
    torch.testing.assert_close((A * torch.tensor(3.0, dtype=torch.float64)).to_dense(), 3 * Ad)
    torch.testing.assert_close((-A / 2).to_dense(), -Ad / 2)
    torch.testing.assert_close(A.T.to_dense(), Ad.T)
    torch.testing.assert_close(A @ x, Ad @ x)
    torch.testing.assert_close(x @ A, x @ Ad)
    torch.testing.assert_close(X @ A, X @ Ad)
    with pytest.raises(UnsupportedError, match="densify"):
        A + Ad
    with pytest.raises(UnsupportedError):
        A * B
    with pytest.raises(InputError, match="SparseMatrix"):
        from sparsad.torch import spmv
        spmv(a, x)
