"""Parser and printer: the round trip on generated trees, the paper's programs, and error positions."""
from __future__ import annotations

import pytest
from hypothesis import given, settings

from sparsad.errors import ProgramError
from sparsad.lang.parse import parse, tokenize
from sparsad.lang.printer import to_text
from sparsad.lang.syntax import (Binary, Const, LetTuple, Lookup, Neg, Range, Singleton, SubArray,
                                 Sum, Unique, Var)
from sparsad.programs import PAPER_PROGRAMS

from reference.strategies import trees


@settings(max_examples=300, deadline=None)
@given(trees())
def test_printed_tree_parses_back_to_the_same_tree(tree):
    text = to_text(tree)
    assert parse(text) == tree, text


@pytest.mark.parametrize("name", sorted(PAPER_PROGRAMS))
def test_paper_programs_round_trip(name):
    tree = parse(PAPER_PROGRAMS[name].text)
    assert parse(to_text(tree)) == tree


def test_csr_definition_parses_to_the_expected_tree():
    text = "sum(<_, i> in (0:len)) { unique(i) -> sum(<p, j> in idx(pos(i):pos(i+1))) { unique(j) -> val(p) } }"
    i, p, j = Var("i"), Var("p"), Var("j")
    inner = Sum("p", "j", SubArray(Var("idx"), Lookup(Var("pos"), i), Lookup(Var("pos"), Binary("+", i, Const(1)))),
                Singleton(Unique(j), Lookup(Var("val"), p)))
    expected = Sum("_", "i", Range(Const(0), Var("len")), Singleton(Unique(i), inner))
    assert parse(text) == expected


def test_precedence_and_associativity():
    assert parse("a - b - c") == Binary("-", Binary("-", Var("a"), Var("b")), Var("c"))
    assert parse("a + b * c") == Binary("+", Var("a"), Binary("*", Var("b"), Var("c")))
    assert parse("-a * b") == Binary("*", Neg(Var("a")), Var("b"))
    assert parse("a * -2") == Binary("*", Var("a"), Const(-2))
    assert parse("a - 2") == Binary("-", Var("a"), Const(2))
    assert parse("1 + 2.0") == Binary("+", Const(1), Const(2.0))
    assert parse("V1'(i)") == Lookup(Var("V1'"), Var("i"))


def test_binder_bodies_reach_as_far_right_as_they_can():
    """docs/language.md: `sum(...) a - y` subtracts y per entry; parentheses close the sum."""
    per_entry = parse("sum(<j, a> in r) a * x(j) - y(i)")
    assert isinstance(per_entry, Sum) and per_entry.body.op == "-"
    closed = parse("(sum(<j, a> in r) a * x(j)) - y(i)")
    assert isinstance(closed, Binary) and isinstance(closed.left, Sum)
    assert parse(to_text(closed)) == closed and parse(to_text(per_entry)) == per_entry
    orelse = parse("if c then a else b + 1.0").orelse
    assert orelse == Binary("+", Var("b"), Const(1.0))


def test_tupled_let_and_comments():
    tree = parse("let <a, b'> = <1, x * 2> in # the pair\n a + b'")
    assert tree == LetTuple(("a", "b'"), (Const(1), Binary("*", Var("x"), Const(2))),
                            Binary("+", Var("a"), Var("b'")))


def test_spans_record_line_and_column():
    tree = parse("let x = 1 in\n  x + y")
    body = tree.body
    assert (body.span.line, body.span.column) == (2, 5)
    assert (body.right.span.line, body.right.span.column) == (2, 7)


@pytest.mark.parametrize("text, line, column, words", [
    ("let x = 1 in\n  x + * 2", 2, 7, "unexpected '*'"),
    ("sum(<i a> in V) a", 1, 8, "expected ','"),
    ("sum(<i, a> V) a", 1, 12, "expected 'in'"),
    ("{ 1 -> 2", 1, 9, "expected '}'"),
    ("(a + b", 1, 7, "expected ')'"),
    ("a < b < c", 1, 7, "do not chain"),
    ("x $ y", 1, 3, "unexpected character"),
    ("", 1, 1, "empty"),
    ("exp(1, 2)", 1, 1, "takes 1 argument"),
    ("let <a, b> = <1> in a", 1, 1, "binds 2 names to 1 values"),
    ("if a then", 1, 10, "incomplete"),
    ("{1 -> 2, 3 -> 4}", 1, 8, "one entry"),
    ("then", 1, 1, "cannot start"),
    ("a b", 1, 3, "after the end"),
])
def test_syntax_errors_carry_line_and_column(text, line, column, words):
    with pytest.raises(ProgramError) as caught:
        parse(text)
    error = caught.value
    assert (error.line, error.column) == (line, column), str(error)
    assert words in str(error)
    assert isinstance(error, ValueError)


def test_error_message_shows_the_line_with_a_caret():
    with pytest.raises(ProgramError) as caught:
        parse("let x = 1 in\n  x + * 2")
    assert "  x + * 2\n" in str(caught.value)
    assert str(caught.value).rstrip().endswith("^")


def test_tokenizer_keeps_primes_and_scientific_numbers():
    kinds = [(t.kind, t.text) for t in tokenize("V2' 1e-05 2.5E+3 sum")]
    assert kinds[:4] == [("name", "V2'"), ("number", "1e-05"), ("number", "2.5E+3"), ("word", "sum")]


def test_parse_rejects_non_text():
    with pytest.raises(TypeError):
        parse(42)
