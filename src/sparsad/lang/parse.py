"""Text -> syntax tree. Errors carry line and column.

>>> parse("sum(<i, a> in V) a * W(i)")
Sum(key='i', val='a', source=Var(name='V'), body=Binary(op='*', left=Var(name='a'), right=Lookup(dict=Var(name='W'), key=Var(name='i'))))
"""
from __future__ import annotations

import re
from typing import NamedTuple

from sparsad.errors import ProgramError, ProgramTypeError
from sparsad.lang.functions import FUNCTIONS, RESERVED_WORDS
from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, LetTuple, Lookup,
                                 Neg, Not, Range, Singleton, Span, SubArray, Sum, Unique, Var,
                                 children)


class Token(NamedTuple):
    kind: str  # "number", "name", "word" (reserved), "op", "end"
    text: str
    line: int
    column: int


_TOKEN = re.compile(r"""
    (?P<space>[ \t\r]+|\#[^\n]*)
  | (?P<newline>\n)
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*'*)
  | (?P<op>->|[-+*/=<>(){},:])
""", re.VERBOSE)


def tokenize(text: str) -> list[Token]:
    tokens, line, line_start, position = [], 1, 0, 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        column = position - line_start + 1
        if match is None:
            raise ProgramError(f"unexpected character {text[position]!r}", line, column, text)
        kind = match.lastgroup
        if kind == "newline":
            line, line_start = line + 1, match.end()
        elif kind != "space":
            word = match.group()
            if kind == "name" and word in RESERVED_WORDS:
                kind = "word"
            tokens.append(Token(kind, word, line, column))
        position = match.end()
    tokens.append(Token("end", "end of input", line, len(text) - line_start + 1))
    return tokens


#: deepest nesting a program may have (parentheses, calls, lets, sums, ...): every pass of the
#: compiler walks the tree recursively, so deeper trees are refused with a ProgramError here
MAX_DEPTH = 64
#: a chain of more terms of + - or * / is built as a balanced tree (same value, shallow)
BALANCE_FROM = 16


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0
        self.depth = 0

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"the program is nested deeper than {MAX_DEPTH} levels; bind inner parts "
                             f"with let, or build the program with sparsad.lang.build")

    # -- token helpers -------------------------------------------------------------------
    @property
    def token(self) -> Token:
        return self.tokens[self.index]

    def error(self, message: str, token: Token | None = None) -> ProgramError:
        token = token or self.token
        return ProgramError(message, token.line, token.column, self.text)

    def at(self, text: str) -> bool:
        return self.token.text == text and self.token.kind in ("op", "word")

    def advance(self) -> Token:
        token = self.token
        self.index += 1
        return token

    def expect(self, text: str, context: str = "") -> Token:
        if not self.at(text):
            where = f" {context}" if context else ""
            raise self.error(f"expected {text!r}{where}, found {self.token.text!r}")
        return self.advance()

    def binder(self) -> str:
        token = self.token
        if token.kind != "name":
            raise self.error(f"expected a variable name, found {token.text!r}")
        self.advance()
        return token.text

    @staticmethod
    def span(token: Token) -> Span:
        return Span(token.line, token.column)

    # -- grammar ---------------------------------------------------------------------------
    def program(self) -> Expr:
        if self.token.kind == "end":
            raise self.error("the program is empty")
        expr = self.expr()
        if self.token.kind != "end":
            raise self.error(f"unexpected {self.token.text!r} after the end of the expression")
        return expr

    def expr(self) -> Expr:
        self.enter()
        try:
            if self.at("let") or self.at("sum") or self.at("if"):
                return self.prefix()
            return self.comparison()
        finally:
            self.depth -= 1

    def prefix(self) -> Expr:
        start = self.advance()
        if start.text == "let":
            if self.at("<"):
                return self.let_tuple(start)
            name = self.binder()
            self.expect("=", "after the name bound by let")
            value = self.expr()
            self.expect("in", "after the value of let")
            return Let(name, value, self.expr(), span=self.span(start))
        if start.text == "sum":
            self.expect("(", "after sum")
            self.expect("<", "to open the <key, value> pair of sum")
            key = self.binder()
            self.expect(",", "between the key and value names of sum")
            val = self.binder()
            self.expect(">", "to close the <key, value> pair of sum")
            self.expect("in", "in the header of sum")
            source = self.expr()
            self.expect(")", "to close the header of sum")
            return Sum(key, val, source, self.expr(), span=self.span(start))
        cond = self.expr()
        self.expect("then", "after the condition of if")
        then = self.expr()
        orelse = None
        if self.at("else"):
            self.advance()
            orelse = self.expr()
        return If(cond, then, orelse, span=self.span(start))

    def let_tuple(self, start: Token) -> Expr:
        self.expect("<")
        names = [self.binder()]
        while self.at(","):
            self.advance()
            names.append(self.binder())
        self.expect(">", "to close the names of a tupled let")
        self.expect("=", "in a tupled let")
        self.expect("<", "to open the values of a tupled let")
        values = [self.additive()]
        while self.at(","):
            self.advance()
            values.append(self.additive())
        self.expect(">", "to close the values of a tupled let")
        if len(values) != len(names):
            raise self.error(f"tupled let binds {len(names)} names to {len(values)} values", start)
        self.expect("in", "after the values of a tupled let")
        return LetTuple(tuple(names), tuple(values), self.expr(), span=self.span(start))

    def comparison(self) -> Expr:
        left = self.additive()
        if self.at("=") or self.at("<"):
            op = self.advance()
            right = self.additive()
            if self.at("=") or self.at("<"):
                raise self.error("comparisons do not chain; add parentheses")
            return Binary(op.text, left, right, span=self.span(op))
        return left

    def additive(self) -> Expr:
        return self.chain(("+", "-"), self.multiplicative)

    def multiplicative(self) -> Expr:
        return self.chain(("*", "/"), self.unary)

    def chain(self, ops: tuple[str, str], operand) -> Expr:
        """`t0 op t1 op t2 ...`, left-associative; long chains become a balanced tree."""
        terms: list = [(None, operand())]
        while self.at(ops[0]) or self.at(ops[1]):
            op = self.advance()
            terms.append((op, operand()))
        if len(terms) < BALANCE_FROM:
            left = terms[0][1]
            for op, term in terms[1:]:
                left = Binary(op.text, left, term, span=self.span(op))
            return left
        return _balanced(terms, ops)

    def unary(self) -> Expr:
        if not (self.at("not") or self.at("-")):
            return self.postfix(self.atom())
        self.enter()
        try:
            start = self.advance()
            if start.text == "not":
                return Not(self.unary(), span=self.span(start))
            nxt = self.token
            if nxt.kind == "number" and (nxt.line, nxt.column) == (start.line, start.column + 1):
                self.advance()
                return self.postfix(Const(-_number(nxt.text), span=self.span(start)))
            return Neg(self.unary(), span=self.span(start))
        finally:
            self.depth -= 1

    def postfix(self, expr: Expr) -> Expr:
        while self.at("("):
            start = self.advance()
            first = self.expr()
            if self.at(":"):
                self.advance()
                end = self.expr()
                self.expect(")", "to close a sub-array arr(st:en)")
                expr = SubArray(expr, first, end, span=self.span(start))
            else:
                self.expect(")", "to close a lookup")
                expr = Lookup(expr, first, span=self.span(start))
        return expr

    def atom(self) -> Expr:
        token = self.token
        if token.kind == "number":
            self.advance()
            return Const(_number(token.text), span=self.span(token))
        if token.kind == "name":
            self.advance()
            return Var(token.text, span=self.span(token))
        if token.kind == "word":
            if token.text in ("true", "false"):
                self.advance()
                return Const(token.text == "true", span=self.span(token))
            if token.text in ("let", "sum", "if"):
                return self.prefix()
            if token.text == "unique":
                self.advance()
                self.expect("(", "after unique")
                operand = self.expr()
                self.expect(")", "to close unique(...)")
                return Unique(operand, span=self.span(token))
            if token.text in FUNCTIONS:
                return self.call()
            raise self.error(f"{token.text!r} cannot start an expression")
        if self.at("("):
            self.advance()
            first = self.expr()
            if self.at(":"):
                self.advance()
                end = self.expr()
                self.expect(")", "to close a range (st:en)")
                return Range(first, end, span=self.span(token))
            self.expect(")", "to close a parenthesis")
            return first
        if self.at("{"):
            self.advance()
            if self.at("}"):
                self.advance()
                return EmptyDict(span=self.span(token))
            key = self.expr()
            self.expect("->", "between the key and the value of a dictionary")
            value = self.expr()
            if self.at(","):
                raise self.error("a dictionary literal holds one entry; add singletons with +")
            self.expect("}", "to close a dictionary")
            return Singleton(key, value, span=self.span(token))
        if token.kind == "end":
            raise self.error("unexpected end of input; the expression is incomplete")
        raise self.error(f"unexpected {token.text!r}")

    def call(self) -> Expr:
        token = self.advance()
        arity = FUNCTIONS[token.text].arity
        self.expect("(", f"after the function {token.text}")
        args = [self.expr()]
        while self.at(","):
            self.advance()
            args.append(self.expr())
        self.expect(")", f"to close the call of {token.text}")
        if len(args) != arity:
            raise self.error(f"{token.text} takes {arity} argument(s), got {len(args)}", token)
        return Call(token.text, tuple(args), span=self.span(token))


def _balanced(terms: list, ops: tuple[str, str]) -> Expr:
    """A balanced tree for `t0 op1 t1 op2 t2 ...` (op0 is None), using a - (b + c) = a - b - c
    and a - (b - c) = a - b + c (likewise / and *): the depth is logarithmic in the length."""
    if len(terms) == 1:
        return terms[0][1]
    middle = len(terms) // 2
    op, first = terms[middle]
    inverse = op.text == ops[1]
    right = [(None, first)]
    for later_op, term in terms[middle + 1:]:
        if inverse:  # distribute the minus (or division) over the right group
            flipped = ops[0] if later_op.text == ops[1] else ops[1]
            later_op = later_op._replace(text=flipped)
        right.append((later_op, term))
    return Binary(op.text, _balanced(terms[:middle], ops), _balanced(right, ops),
                  span=Span(op.line, op.column))


def _number(text: str) -> float | int:
    if any(c in text for c in ".eE"):
        return float(text)
    return int(text)


def tree_depth(expr: Expr) -> int:
    """The depth of a syntax tree, computed without recursion (deep trees are what it guards)."""
    deepest, stack = 0, [(expr, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children(node))
    return deepest


def check_depth(expr: Expr) -> None:
    """ProgramError when a tree (parsed or built) is deeper than MAX_DEPTH, at its deepest node."""
    stack = [(expr, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            span = getattr(node, "span", None)
            raise ProgramError(f"the program is nested deeper than {MAX_DEPTH} levels; bind inner "
                               f"parts with let at the top level, or split the program",
                               span.line if span else None, span.column if span else None)
        stack.extend((child, depth + 1) for child in children(node))


def parse(text: str) -> Expr:
    """Parse program text; a syntax error is a ProgramError with line and column."""
    if not isinstance(text, str):
        raise ProgramTypeError(f"parse takes program text (a str), got {type(text).__name__}")
    expr = _Parser(text).program()
    check_depth(expr)
    return expr
