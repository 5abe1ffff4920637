"""A time budget for the symbolic stages of one plan (trace, elevation, differentiation, code).

The stages have size caps that keep their work independent of trip counts; the budget is the last
line of defence for what the caps miss.  The stages of one plan (``symbolic_stage`` with the plan's
account) may spend at most ``SYMBOLIC_BUDGET_S`` seconds of their thread's CPU time in all (other
processes' load does not count);
the machinery calls ``check`` at each node, statement or segment it handles, and past the budget
``check`` raises ``SymbolicBudgetExceeded``, a ``CoarsenUnsupported``: the function then falls back
to plain autograd with a warning that names it and says which stage overran.  Nested stages share
the outermost stage's budget.  ``SPARSAD_COARSEN_BUDGET_S`` overrides the budget (seconds).

>>> from sparsad.coarsen import budget
>>> with budget.symbolic_stage("elevation", seconds=60.0):
...     budget.check()  # well within the budget: nothing happens
>>> try:
...     with budget.symbolic_stage("elevation", seconds=0.0):
...         budget.check()
... except budget.SymbolicBudgetExceeded as why:
...     print(str(why).split(";")[0])
the symbolic elevation took more than 0 s of CPU time (with the earlier stages)
"""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

from sparsad.coarsen.source import CoarsenUnsupported

SYMBOLIC_BUDGET_S = 6.0    # CPU seconds of symbolic work per plan (the corpus's first calls take 0.05 s typically)
_CHECK_EVERY = 64          # calls of ``check`` between two reads of the clock

_state = threading.local()


class SymbolicBudgetExceeded(CoarsenUnsupported):
    """A symbolic stage of coarsening overran its budget: the function falls back to plain autograd."""


def _budget_s() -> float:
    text = os.environ.get("SPARSAD_COARSEN_BUDGET_S")
    if text:
        try:
            return max(float(text), 0.0)
        except ValueError:
            pass
    return SYMBOLIC_BUDGET_S


@contextmanager
def symbolic_stage(name: str, seconds: float | None = None, account: list | None = None):
    """Run the body under a budget of ``seconds`` of this thread's CPU time (default: the module's),
    less what ``account[0]`` says earlier stages of the same plan spent (the body's time is added to
    it); inside another stage, the outer stage's budget applies."""
    if getattr(_state, "deadline", None) is not None:
        yield
        return
    limit = _budget_s() if seconds is None else seconds
    start = time.thread_time()
    left = limit - (account[0] if account else 0.0)
    _state.deadline, _state.stage, _state.limit, _state.calls = start + left, name, limit, 0
    try:
        yield
    finally:
        _state.deadline = None
        if account is not None:
            account[0] += time.thread_time() - start


def check() -> None:
    """Raise ``SymbolicBudgetExceeded`` when the current stage has used up its budget."""
    deadline = getattr(_state, "deadline", None)
    if deadline is None:
        return
    _state.calls += 1
    if _state.calls % _CHECK_EVERY != 1 and _state.limit > 0:
        return
    if time.thread_time() > deadline:
        raise SymbolicBudgetExceeded(
            f"the symbolic {_state.stage} took more than {_state.limit:.0f} s of CPU time (with the earlier "
            "stages); the program is too "
            "large to coarsen within the budget (SPARSAD_COARSEN_BUDGET_S), so plain autograd is used")
