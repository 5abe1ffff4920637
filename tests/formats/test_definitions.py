"""Physical definitions: the exact trees of ∇SD Fig. 10, and their generalisation by levels."""
from __future__ import annotations

import numpy as np
import pytest

import sparsad.formats as F
from sparsad.lang.syntax import (Binary, Const, Lookup, Range, Singleton, SubArray, Sum, Unique,
                                 Var, free_vars)
from sparsad.lang.types import DENSE_INT, INT, REAL, Dict, Int


def v(name: str) -> Var:
    return Var(name)


# ----- hand-built trees of Fig. 10 (variables `A_{field}`) -----

def fig10_vector_coo():
    # sum(<_, i> in (0:len)) { unique(row(i)) -> val(i) }
    return Sum("_", "i", Range(Const(0), v("A_len")),
               Singleton(Unique(Lookup(v("A_row"), v("i"))), Lookup(v("A_val"), v("i"))))


def fig10_vector_dense():
    # sum(<_, i> in (0:len)) { unique(i) -> V(i) }
    return Sum("_", "i", Range(Const(0), v("A_len")),
               Singleton(Unique(v("i")), Lookup(v("A_V"), v("i"))))


def fig10_csr():
    # sum(<_, i> in (0:len)) { unique(i) -> sum(<p, j> in idx(pos(i):pos(i+1))) { unique(j) -> val(p) } }
    inner = Sum("p", "j", SubArray(v("A_idx"), Lookup(v("A_pos"), v("i")),
                                   Lookup(v("A_pos"), Binary("+", v("i"), Const(1)))),
                Singleton(Unique(v("j")), Lookup(v("A_val"), v("p"))))
    return Sum("_", "i", Range(Const(0), v("A_len")), Singleton(Unique(v("i")), inner))


def fig10_dense_row_major():
    # sum(<_, i> in (0:rows)) { unique(i) -> sum(<_, j> in (0:cols)) { unique(j) -> M(i*cols+j) } }
    flat = Binary("+", Binary("*", v("i"), v("A_cols")), v("j"))
    inner = Sum("_", "j", Range(Const(0), v("A_cols")), Singleton(Unique(v("j")), Lookup(v("A_M"), flat)))
    return Sum("_", "i", Range(Const(0), v("A_rows")), Singleton(Unique(v("i")), inner))


def csc_tree():
    # columns outermost; the [row][col] dictionary is a sum of singletons { i -> { j -> v } }
    inner = Sum("p", "i", SubArray(v("A_idx"), Lookup(v("A_pos"), v("j")),
                                   Lookup(v("A_pos"), Binary("+", v("j"), Const(1)))),
                Singleton(v("i"), Singleton(Unique(v("j")), Lookup(v("A_val"), v("p")))))
    return Sum("_", "j", Range(Const(0), v("A_len")), inner)


def dense_col_major_tree():
    flat = Binary("+", Binary("*", v("j"), v("A_rows")), v("i"))
    inner = Sum("_", "i", Range(Const(0), v("A_rows")),
                Singleton(v("i"), Singleton(Unique(v("j")), Lookup(v("A_M"), flat))))
    return Sum("_", "j", Range(Const(0), v("A_cols")), inner)


def coo_matrix_tree():
    # rows repeat: no unique on the row key; (row, col) pairs are distinct: unique on the col key
    return Sum("_", "i", Range(Const(0), v("A_len")),
               Singleton(Lookup(v("A_row"), v("i")),
                         Singleton(Unique(Lookup(v("A_col"), v("i"))), Lookup(v("A_val"), v("i")))))


@pytest.mark.parametrize("fmt, expected, fields", [
    (F.COO_VECTOR, fig10_vector_coo, ("len", "row", "val")),
    (F.DENSE_VECTOR, fig10_vector_dense, ("len", "V")),
    (F.CSR, fig10_csr, ("len", "pos", "idx", "val")),
    (F.DENSE_ROW_MAJOR, fig10_dense_row_major, ("rows", "cols", "M")),
    (F.CSC, csc_tree, ("len", "pos", "idx", "val")),
    (F.DENSE_COL_MAJOR, dense_col_major_tree, ("cols", "rows", "M")),
    (F.COO_MATRIX, coo_matrix_tree, ("len", "row", "col", "val")),
], ids=lambda x: getattr(x, "name", None) or getattr(x, "__name__", None) or "")
def test_named_formats_give_the_fig10_tree(fmt, expected, fields):
    assert fmt.physical_definition("A") == expected()
    assert fmt.fields() == fields
    assert free_vars(fmt.physical_definition("A")) == {f"A_{f}" for f in fields}


FIG10_TEXT = {
    "coo vector": "sum(<_, i> in (0:len)) { unique(row(i)) -> val(i) }",
    "dense vector": "sum(<_, i> in (0:len)) { unique(i) -> V(i) }",
    "csr": "sum(<_, i> in (0:len)) { unique(i) -> sum(<p, j> in idx(pos(i):pos(i+1))) "
           "{ unique(j) -> val(p) } }",
    "dense row-major": "sum(<_, i> in (0:rows)) { unique(i) -> sum(<_, j> in (0:cols)) "
                       "{ unique(j) -> M(i*cols+j) } }",
}


@pytest.mark.parametrize("fmt", [F.COO_VECTOR, F.DENSE_VECTOR, F.CSR, F.DENSE_ROW_MAJOR],
                         ids=lambda f: f.name)
def test_definitions_equal_the_parsed_fig10_text(fmt):
    parse = pytest.importorskip("sparsad.lang.parse").parse
    text = FIG10_TEXT[fmt.name]
    for field in sorted(fmt.fields(), key=len, reverse=True):
        text = _rename(text, field, f"X_{field}")
    assert fmt.physical_definition("X") == parse(text)


def _rename(text: str, word: str, new: str) -> str:
    import re

    return re.sub(rf"(?<![\w]){word}(?![\w])", new, text)


def test_definition_names_follow_the_tensor_name():
    definition = F.CSR.physical_definition("B")
    assert free_vars(definition) == {"B_len", "B_pos", "B_idx", "B_val"}
    with pytest.raises(ValueError):
        F.CSR.physical_definition("not a name")


def test_dcsr_and_csf_definitions_compose_levels():
    # DCSR: a compressed root (as vector COO) above the CSR inner level
    inner = Sum("p", "j", SubArray(v("A_idx"), Lookup(v("A_pos"), v("i")),
                                   Lookup(v("A_pos"), Binary("+", v("i"), Const(1)))),
                Singleton(Unique(v("j")), Lookup(v("A_val"), v("p"))))
    dcsr = Sum("_", "i", Range(Const(0), v("A_len")), Singleton(Unique(Lookup(v("A_row"), v("i"))), inner))
    assert F.DCSR.physical_definition("A") == dcsr

    # 3-d CSF: positions p then q name the two non-root compressed levels
    level2 = Sum("q", "k", SubArray(v("T_idx2"), Lookup(v("T_pos2"), v("p")),
                                    Lookup(v("T_pos2"), Binary("+", v("p"), Const(1)))),
                 Singleton(Unique(v("k")), Lookup(v("T_val"), v("q"))))
    level1 = Sum("p", "j", SubArray(v("T_idx1"), Lookup(v("T_pos1"), v("i")),
                                    Lookup(v("T_pos1"), Binary("+", v("i"), Const(1)))),
                 Singleton(Unique(v("j")), level2))
    csf = Sum("_", "i", Range(Const(0), v("T_len")), Singleton(Unique(Lookup(v("T_idx0"), v("i"))), level1))
    assert F.csf(3).physical_definition("T") == csf


def test_three_d_coo_and_dense_definitions():
    def at(field):
        return Lookup(v(f"T_{field}"), v("i"))

    coo3 = Sum("_", "i", Range(Const(0), v("T_len")),
               Singleton(at("idx0"), Singleton(at("idx1"), Singleton(Unique(at("idx2")), at("val")))))
    assert F.coo(3).physical_definition("T") == coo3

    flat = Binary("+", Binary("*", Binary("+", Binary("*", v("i"), v("T_dim1")), v("j")), v("T_dim2")), v("k"))
    level_k = Sum("_", "k", Range(Const(0), v("T_dim2")), Singleton(Unique(v("k")), Lookup(v("T_M"), flat)))
    level_j = Sum("_", "j", Range(Const(0), v("T_dim1")), Singleton(Unique(v("j")), level_k))
    dense3 = Sum("_", "i", Range(Const(0), v("T_dim0")), Singleton(Unique(v("i")), level_j))
    assert F.dense(3).physical_definition("T") == dense3


def test_key_plan_uniqueness():
    def flags(fmt):
        return [(k.mode, k.after_level, k.unique) for k in F.key_plan(fmt)]

    assert flags(F.CSR) == [(0, 0, True), (1, 1, True)]
    assert flags(F.CSC) == [(0, 1, False), (1, 1, True)]
    assert flags(F.COO_MATRIX) == [(0, 0, False), (1, 1, True)]
    assert flags(F.coo(3)) == [(0, 0, False), (1, 1, False), (2, 2, True)]
    # a COO whose last level admits duplicates claims no uniqueness at all
    dup_coo = F.Format((F.Compressed(unique=False), F.Singleton(unique=False)))
    assert flags(dup_coo) == [(0, 0, False), (1, 1, False)]


def test_physical_arrays_and_types_for_csr():
    matrix = np.array([[1.0, 0, 2.0], [0, 0, 0], [0, 3.0, 0], [4.0, 0, 0]])
    stored = F.as_format(matrix, "csr")
    arrays = stored.physical_arrays("A")
    assert set(arrays) == {"A_len", "A_pos", "A_idx", "A_val"}
    assert arrays["A_len"] == 4 and type(arrays["A_len"]) is int
    np.testing.assert_array_equal(arrays["A_pos"], [0, 2, 2, 3, 4])
    np.testing.assert_array_equal(arrays["A_idx"], [0, 2, 1, 0])
    np.testing.assert_array_equal(arrays["A_val"], [1.0, 2.0, 3.0, 4.0])
    types = stored.physical_types("A")
    assert types["A_len"] == INT
    assert types["A_pos"] == Dict(DENSE_INT, INT)
    assert types["A_pos"].key.extent == 5 and types["A_pos"].value.extent == 5
    assert types["A_idx"] == Dict(DENSE_INT, INT)
    assert types["A_idx"].key.extent == 4 and types["A_idx"].value.extent == 3  # column range
    assert types["A_val"] == Dict(DENSE_INT, REAL) and types["A_val"].key.extent == 4


def test_physical_types_of_coo_and_dense():
    matrix = np.array([[0, 5.0], [6.0, 7.0], [0, 0]])
    coo_types = F.as_format(matrix, "coo").physical_types("C")
    assert set(coo_types) == {"C_len", "C_row", "C_col", "C_val"}
    assert coo_types["C_row"].value.extent == 3 and coo_types["C_col"].value.extent == 2
    assert coo_types["C_val"].key.extent == 3
    dense_types = F.as_format(matrix).physical_types("D")
    assert dense_types == {"D_rows": Int(), "D_cols": Int(), "D_M": Dict(DENSE_INT, REAL)}
    assert dense_types["D_M"].key.extent == 6


ALL_FORMATS = [F.DENSE_VECTOR, F.COO_VECTOR, F.CSR, F.CSC, F.DCSR, F.DCSC, F.COO_MATRIX,
               F.DENSE_ROW_MAJOR, F.DENSE_COL_MAJOR, F.dense(3), F.dense(3, column_major=True),
               F.coo(3), F.csf(3), F.csf(4), F.coo(7)]


@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=lambda f: f.name)
def test_printed_definitions_parse_back(fmt):
    parse = pytest.importorskip("sparsad.lang.parse").parse
    printer = pytest.importorskip("sparsad.lang.printer")
    definition = fmt.physical_definition("X")
    assert parse(printer.to_text(definition)) == definition
    assert free_vars(definition) == {f"X_{f}" for f in fmt.fields()}
