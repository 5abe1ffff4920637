"""The public Program API: construction, natural results, output formats, input errors."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsad
from sparsad.errors import InputError, ProgramError
from sparsad.lang.build import exp, if_, let, single, sum_over, var


def test_program_from_text_and_builder_are_equal():
    A, x = var("A"), var("x")
    built = sum_over(A, lambda i, row: single(i, sum_over(row, lambda j, a: a * x(j))))
    text = "sum(<i, row> in A) { i -> sum(<j, a> in row) a * x(j) }"
    assert sparsad.program(built).expr == sparsad.program(text).expr
    assert sparsad.program(text).inputs == ["A", "x"]


def test_builder_covers_let_if_and_functions():
    e = let(var("x") * 2.0, lambda y: if_(var("b"), exp(y), 0.0))
    assert str(e).startswith("let y = x * 2.0 in")
    assert sparsad.program(e)(x=0.0, b=True) == 1.0


def test_natural_results():
    A = sp.random(5, 4, density=0.3, format="csr", random_state=1)
    x = np.arange(4.0)
    spmv = sparsad.program("sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }")
    y = spmv(A=A, x=x)
    assert isinstance(y, np.ndarray) and y.shape == (5,)
    np.testing.assert_allclose(y, A @ x, rtol=1e-14)
    copy = sparsad.program("sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> 2.0 * a } }")(A=A)
    assert sp.issparse(copy) and copy.shape == (5, 4)
    np.testing.assert_allclose(copy.toarray(), 2 * A.toarray())
    dense = sparsad.program("M * 1.0")(M=np.ones((2, 3)))
    assert isinstance(dense, np.ndarray) and dense.shape == (2, 3)
    assert sparsad.program("sum(<i, a> in V) a")(V=np.zeros(0)) == 0.0


def test_requested_output_formats():
    A = sp.random(4, 4, density=0.5, format="csr", random_state=2)
    prog = sparsad.program("A * 3.0")
    assert isinstance(prog(A=A, out_format="dense"), np.ndarray)
    assert prog(A=A, out_format="csc").format == "csc"
    assert prog(A=A, out_format="coo").format == "coo"
    assert isinstance(prog(A=A, out_format="dict"), dict)
    with pytest.raises(ValueError, match="out_format"):
        prog(A=A, out_format="xml")


def test_trailing_empty_rows_keep_the_input_shape():
    A = sp.csr_matrix(np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    result = sparsad.program("A * 2.0")(A=A)
    assert result.shape == (3, 3)


def test_input_errors_name_the_inputs():
    prog = sparsad.program("a * b")
    with pytest.raises(InputError, match=r"missing input\(s\) \['b'\]"):
        prog(a=1.0)
    with pytest.raises(InputError, match=r"unexpected input\(s\) \['c'\]"):
        prog(a=1.0, b=2.0, c=3.0)
    with pytest.raises(InputError, match="does not use"):
        sparsad.program("a", types={"z": "real"})
    with pytest.raises(TypeError):
        sparsad.program(3)


def test_declared_types_are_checked_eagerly():
    with pytest.raises(sparsad.ProgramTypeError, match="sum iterates"):
        sparsad.program("sum(<i, a> in x) a", types={"x": "real"})
    assert sparsad.program("x * 2.0", types={"x": "real"}).infer_type() == sparsad.lang.types.REAL


def test_repr_and_show():
    prog = sparsad.program("s * V")
    assert "inputs=['V', 's']" in repr(prog)
    assert prog.show() == "s * V"
    with pytest.raises(ValueError, match="unknown stage"):
        prog.show("code")


def test_syntax_error_surfaces_from_program():
    with pytest.raises(ProgramError) as caught:
        sparsad.program("sum(<i, a> in V)\n  a *")
    assert caught.value.line == 2
