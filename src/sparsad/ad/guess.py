"""Guess input types for a program given none: the smallest tensor orders that type-check.

Used to show derivatives of programs whose inputs are not known yet (the CLI, `.show()`).
"""
from __future__ import annotations

import itertools

from sparsad.errors import ProgramTypeError
from sparsad.lang.syntax import Expr, free_vars
from sparsad.lang.typecheck import infer
from sparsad.lang.types import Type, tensor

MAX_ORDER = 3
MAX_INPUTS = 6


def guess_types(expr: Expr, known: dict[str, Type] | None = None) -> dict[str, Type]:
    """Tensor types for the undeclared inputs, preferring the lowest total order that type-checks."""
    known = dict(known or {})
    unknown = sorted(free_vars(expr) - set(known))
    if len(unknown) > MAX_INPUTS:
        raise ProgramTypeError(f"cannot guess the types of {len(unknown)} inputs; declare them with types=")
    candidates = sorted(itertools.product(range(MAX_ORDER + 1), repeat=len(unknown)),
                        key=lambda orders: (sum(orders), orders))
    for orders in candidates:
        types = {**known, **{name: tensor(order) for name, order in zip(unknown, orders)}}
        try:
            infer(expr, types)
        except ProgramTypeError:
            continue
        return types
    raise ProgramTypeError(f"no tensor types up to order {MAX_ORDER} make the program type-check; "
                           f"declare the types of {unknown}")
