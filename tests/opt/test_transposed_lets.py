"""opt.transposed_lets: a let-bound transpose of a CSR input read through its transposed pattern
gives the interpreter's and SciPy's derivative, on random shapes and patterns."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings, strategies as st

import sparsad
import sparsad.errors

TRACE = "sum(<i, r> in A) sum(<j, a> in r) a * B(j)(i)"
_DERIVATIVES: dict = {}


def _derivative(kind: str, interpret: bool, wrt: str = "B"):
    key = (kind, interpret, wrt)
    if key not in _DERIVATIVES:
        _DERIVATIVES[key] = getattr(sparsad, kind)(TRACE, wrt=wrt, interpret=interpret)
    return _DERIVATIVES[key]


def _csr(rng, rows, cols, density):
    m = sp.random(rows, cols, density=density, format="csr", random_state=rng)
    m.data = rng.standard_normal(m.nnz)
    m.sum_duplicates()
    m.sort_indices()
    return m


def _masked(values: sp.csr_matrix, pattern: sp.csr_matrix) -> np.ndarray:
    """values at the stored entries of pattern, in pattern's order."""
    dense = values.toarray()
    rows = np.repeat(np.arange(pattern.shape[0]), np.diff(pattern.indptr))
    return dense[rows, pattern.indices]


def _values_on(result, pattern: sp.csr_matrix) -> np.ndarray:
    result = sp.csr_matrix(result)
    return _masked(result, pattern) if pattern.nnz else np.zeros(0)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from([(1, 1), (4, 7), (9, 3), (8, 8)]), density=st.floats(0.0, 1.0),
       seed=st.integers(0, 2**16), kind=st.sampled_from(["grad", "vjp"]))
def test_gradient_of_a_trace_with_respect_to_the_transposed_operand(shape, density, seed, kind):
    rng = np.random.default_rng(seed)
    n, m = shape
    A = _csr(rng, n, m, density)
    B = _csr(rng, m, n, density)
    args = dict(A=A, B=B) if kind == "grad" else dict(A=A, B=B, cotangent=1.5)
    scale = 1.0 if kind == "grad" else 1.5
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.errors.FallbackWarning)
        got = _derivative(kind, False)(**args)
    reference = _derivative(kind, True)(**args)
    # d trace(A B) / dB = A^T, masked to B's pattern (rows of B beyond A's columns get zero)
    closed = scale * _masked(A.T.tocsr(), B) if B.nnz else np.zeros(0)
    assert np.allclose(_values_on(got, B), closed, rtol=1e-13, atol=1e-13)
    assert np.allclose(_values_on(reference, B), closed, rtol=1e-13, atol=1e-13)


def test_square_trace_gradient_reads_the_transposed_pattern_not_hash_maps():
    rng = np.random.default_rng(3)
    A, B = _csr(rng, 40, 40, 0.2), _csr(rng, 40, 40, 0.2)
    grad = sparsad.grad(TRACE, wrt="B")
    got = grad(A=A, B=B)
    assert np.allclose(_values_on(got, B), _masked(A.T.tocsr(), B), rtol=1e-13)
    code = grad.show("code")
    assert "A_T_tpos" in code and "Dict.empty" not in code
    grad_a = sparsad.grad(TRACE, wrt="A")
    assert np.allclose(_values_on(grad_a(A=A, B=B), A), _masked(B.T.tocsr(), A), rtol=1e-13)
    assert "B_T_tpos" in grad_a.show("code")


def test_the_rule_keeps_the_let_when_the_reader_may_pass_the_columns_or_iterates_it():
    from sparsad.lang.parse import parse
    from sparsad.lang.types import REAL, Dict, Int
    from sparsad.opt.transposed_lets import read_transposed_lets

    def types(reader_rows):
        return {"A_len": Int(), "A_pos": Dict(Int(dense=True, extent=4), Int()),
                "A_idx": Dict(Int(dense=True, extent=5), Int(extent=3)), "A_val": Dict(Int(dense=True, extent=5), REAL),
                "B_len": Int(), "B_pos": Dict(Int(dense=True, extent=reader_rows + 1), Int())}
    let = ("let T = sum(<_, i> in (0:A_len)) sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1))) "
           "{ unique(j) -> { i -> A_val(p) } } in ")
    looked_up = parse(let + "sum(<_, x> in (0:B_len)) { unique(x) -> T(x) }")
    assert read_transposed_lets(looked_up, types(3)) != looked_up
    assert read_transposed_lets(looked_up, types(4)) == looked_up  # row 3 lies beyond A's 3 columns
    iterated = parse(let + "sum(<x, row> in T) { x -> row }")
    assert read_transposed_lets(iterated, types(3)) == iterated
    nested = parse(let + "sum(<_, y> in (0:B_len)) sum(<_, x> in (0:B_len)) { x -> T(x) }")
    assert read_transposed_lets(nested, types(3)) == nested  # each x many times: the hash map stays


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from([(1, 1), (4, 7), (9, 3), (8, 8)]), density=st.floats(0.0, 1.0),
       seed=st.integers(0, 2**16), kind=st.sampled_from(["grad", "vjp"]))
def test_value_and_gradient_with_respect_to_the_row_operand(shape, density, seed, kind):
    """d trace(A B) / dA = B^T on A's pattern: B's rows looked up at A's row keys, read by columns."""
    rng = np.random.default_rng(seed)
    n, m = shape
    A, B = _csr(rng, n, m, density), _csr(rng, m, n, density)
    args = dict(A=A, B=B) if kind == "grad" else dict(A=A, B=B, cotangent=-0.5)
    scale = 1.0 if kind == "grad" else -0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.errors.FallbackWarning)
        got = _derivative(kind, False, "A")(**args)
        value = sparsad.compile(TRACE)(A=A, B=B)
    reference = _derivative(kind, True, "A")(**args)
    closed = scale * _masked(B.T.tocsr(), A) if A.nnz else np.zeros(0)
    assert np.allclose(_values_on(got, A), closed, rtol=1e-13, atol=1e-13)
    assert np.allclose(_values_on(reference, A), closed, rtol=1e-13, atol=1e-13)
    assert np.isclose(value, (A @ B).diagonal().sum(), rtol=1e-12, atol=1e-12)
