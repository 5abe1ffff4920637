"""Text -> syntax tree. Errors carry line and column.

>>> parse("sum(<i, a> in V) a * W(i)")
Sum(key='i', val='a', source=Var(name='V'), body=Binary(op='*', left=Var(name='a'), right=Lookup(dict=Var(name='W'), key=Var(name='i'))))
"""
from __future__ import annotations

import re
from typing import NamedTuple

from sparsad.errors import ProgramError
from sparsad.lang.functions import FUNCTIONS, RESERVED_WORDS
from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, LetTuple, Lookup,
                                 Neg, Not, Range, Singleton, Span, SubArray, Sum, Unique, Var)


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


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0

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
        if self.at("let") or self.at("sum") or self.at("if"):
            return self.prefix()
        return self.comparison()

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
        left = self.multiplicative()
        while self.at("+") or self.at("-"):
            op = self.advance()
            left = Binary(op.text, left, self.multiplicative(), span=self.span(op))
        return left

    def multiplicative(self) -> Expr:
        left = self.unary()
        while self.at("*") or self.at("/"):
            op = self.advance()
            left = Binary(op.text, left, self.unary(), span=self.span(op))
        return left

    def unary(self) -> Expr:
        if self.at("not"):
            start = self.advance()
            return Not(self.unary(), span=self.span(start))
        if self.at("-"):
            start = self.advance()
            nxt = self.token
            if nxt.kind == "number" and (nxt.line, nxt.column) == (start.line, start.column + 1):
                self.advance()
                return self.postfix(Const(-_number(nxt.text), span=self.span(start)))
            return Neg(self.unary(), span=self.span(start))
        return self.postfix(self.atom())

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


def _number(text: str) -> float | int:
    if any(c in text for c in ".eE"):
        return float(text)
    return int(text)


def parse(text: str) -> Expr:
    """Parse program text; a syntax error is a ProgramError with line and column."""
    if not isinstance(text, str):
        raise TypeError(f"parse takes program text, got {type(text).__name__}")
    return _Parser(text).program()
