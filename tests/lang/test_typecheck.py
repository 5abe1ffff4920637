"""Type inference: the paper's programs get their expected types; ill-typed programs are refused."""
from __future__ import annotations

import pytest

from sparsad.errors import ProgramError, ProgramTypeError
from sparsad.lang.parse import parse
from sparsad.lang.typecheck import infer
from sparsad.lang.types import (BOOL, INT, REAL, Dict, Int, parse_type, tensor, tensor_order,
                                type_to_text)
from sparsad.programs import PAPER_PROGRAMS

T1, T2 = tensor(1), tensor(2)

EXPECTED = {
    "dot": ({"V1": T1, "V2": T1}, REAL),
    "scalar_vector": ({"s": REAL, "V": T1}, T1),
    "trace": ({"M": T2}, REAL),
    "matmul": ({"M1": T2, "M2": T2}, T2),
    "map": ({"V": T1}, T1),
    "batax": ({"beta": REAL, "A": T2, "x": T1}, T1),
    "smmm": ({"A": T2, "B": T2}, REAL),
    "smvm": ({"A": T2, "X": T1}, REAL),
    "vva": ({"V1": T1, "V2": T1}, T1),
    "vsm": ({"V": T1, "s": REAL}, T1),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_paper_programs_have_their_types(name):
    inputs, expected = EXPECTED[name]
    assert infer(parse(PAPER_PROGRAMS[name].text), inputs) == expected


def test_outer_product_type_and_extents():
    t = infer(parse("u * v"), {"u": tensor(1, (3,)), "v": tensor(1, (4,))})
    assert t == T2 and tensor_order(t) == 2
    assert t.key.extent == 3 and t.value.key.extent == 4


def test_extents_flow_through_sums_and_singletons():
    t = infer(parse(PAPER_PROGRAMS["batax"].text), {"beta": REAL, "A": tensor(2, (5, 7)), "x": tensor(1, (7,))})
    assert t.key.extent == 7


def test_physical_types():
    csr = parse("sum(<_, i> in (0:len)) { unique(i) -> sum(<p, j> in idx(pos(i):pos(i+1))) { unique(j) -> val(p) } }")
    arr_int, arr_real = Dict(Int(dense=True), INT), Dict(Int(dense=True), REAL)
    t = infer(csr, {"len": INT, "pos": arr_int, "idx": arr_int, "val": arr_real})
    assert t == T2


@pytest.mark.parametrize("text, inputs, words, column", [
    ("sum(<i, a> in x) a", {"x": REAL}, "sum iterates over a dictionary", 1),
    ("x + V", {"x": REAL, "V": T1}, "incompatible types real and tensor 1", 3),
    ("if x then 1.0", {"x": REAL}, "condition of if must be a bool", 4),
    ("V(i)", {"V": T1, "i": REAL}, "a lookup key must be an int", 3),
    ("exp(V)", {"V": T1}, "exp takes a real", 5),
    ("x < y", {"x": REAL, "y": REAL}, "compares discrete values", 3),
    ("y", {}, "unbound variable 'y'", 1),
    ("{ x -> 1.0 }", {"x": REAL}, "keys must be int", 3),
    ("b * 2", {"b": BOOL}, "does not take bool", 3),
    ("sum(<i, a> in V) B", {"V": T1, "B": Dict(INT, BOOL)}, "dictionary of numbers, got {int -> bool}", 18),
    ("pow(x, y)", {"x": REAL, "y": REAL}, "constant exponent", 8),
    ("V / 2.0", {"V": T1}, "/ divides reals", 3),
])
def test_type_errors_name_the_problem_and_position(text, inputs, words, column):
    with pytest.raises(ProgramTypeError) as caught:
        infer(parse(text), inputs)
    assert words in str(caught.value)
    assert caught.value.column == column
    assert isinstance(caught.value, TypeError)


def test_type_text_round_trip():
    for text in ["real", "int", "bool", "dense_int", "tensor 2", "{dense_int -> real}", "{int -> {dense_int -> int}}"]:
        assert type_to_text(parse_type(text)) == text
    assert parse_type("{int -> {int -> real}}") == T2
    with pytest.raises(ProgramError, match="keys must be int"):
        parse_type("{real -> real}")
    with pytest.raises(ProgramError, match="unknown type word"):
        parse_type("matrix")
