"""A time budget for the symbolic stages of one plan (trace, elevation, differentiation, code).

The stages have size caps that keep their work independent of trip counts; the budget is the last
line of defence for what the caps miss.  The stages of one plan (``symbolic_stage`` with the plan's
account) may spend at most ``SYMBOLIC_BUDGET_S`` seconds of their thread's CPU time in all (other
processes' load does not count);
the machinery calls ``check`` at each node, statement or segment it handles, and past the budget
``check`` raises ``SymbolicBudgetExceeded``, a ``CoarsenUnsupported``: the function then falls back
to plain autograd with a warning that names it and says which stage overran.  Nested stages share
the outermost stage's budget.  ``SPARSAD_COARSEN_BUDGET_S`` overrides the budget (seconds).

CPU time does not bound what the user waits for on a loaded machine, so a call also has a *wall*
deadline (``call_deadline``: ``WAIT_S`` seconds from its start, ``SPARSAD_COARSEN_WAIT_S``).
Inside it, each expensive symbolic step (a trace, an elevation, an adjoint) runs through
``in_background``: in a worker thread the call waits for until its deadline.  If the step is not
done by then it goes on in the background, and the call raises ``Deferred``; the entry points
catch it and compute that call with plain autograd (a correct answer, not a fallback for good:
no warning).  A later call collects the step's result (or its error) once it is done, and does
not wait while it runs.  ``wait_background`` blocks until every step has finished (benchmarks
and tests use it through ``tiers.wait``).  Outside a call deadline (``explain``, direct use of
plans) steps run inline.

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

import atexit
import math
import os
import threading
import time
from contextlib import contextmanager
from typing import Callable, TypeVar

from sparsad.coarsen.source import CoarsenUnsupported

SYMBOLIC_BUDGET_S = 6.0    # CPU seconds of symbolic work per plan (the corpus's first calls take 0.05 s typically)
_CHECK_EVERY = 64          # calls of ``check`` between two reads of the clock
WAIT_S = 3.0               # wall seconds a call waits for symbolic work before using plain autograd

_state = threading.local()
_T = TypeVar("_T")


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
    if _exiting:  # the interpreter is shutting down: background steps end at their next check
        raise SymbolicBudgetExceeded("the interpreter is exiting")
    _state.calls += 1
    if _state.calls % _CHECK_EVERY != 1 and _state.limit > 0:
        return
    if time.thread_time() > deadline:
        raise SymbolicBudgetExceeded(
            f"the symbolic {_state.stage} took more than {_state.limit:.0f} s of CPU time (with the earlier "
            "stages); the program is too "
            "large to coarsen within the budget (SPARSAD_COARSEN_BUDGET_S), so plain autograd is used")


# --------------------------------------------------------------------------- wall-clock deadline of a call
class Deferred(Exception):
    """A symbolic step did not finish within the call's wall deadline and goes on in the
    background: this call is computed with plain autograd (not a fallback for good)."""


def _wait_s() -> float:
    text = os.environ.get("SPARSAD_COARSEN_WAIT_S")
    if text:
        try:
            value = float(text)
        except ValueError:
            return WAIT_S
        return math.inf if value < 0 or math.isnan(value) else value
    return WAIT_S


@contextmanager
def call_deadline(seconds: float | None = None):
    """The body is one user call: symbolic steps inside it (``in_background``) end within
    ``seconds`` of wall time from now (default ``SPARSAD_COARSEN_WAIT_S`` or ``WAIT_S``; infinite:
    no deadline).  Nested deadlines keep the outermost."""
    if getattr(_state, "wall_deadline", None) is not None:
        yield
        return
    limit = _wait_s() if seconds is None else seconds
    _state.wall_deadline = time.monotonic() + limit if math.isfinite(limit) else None
    try:
        yield
    finally:
        _state.wall_deadline = None


class _Step:
    """One symbolic step running in a daemon thread; ``result()`` returns its value or raises its error."""

    def __init__(self, work: Callable):
        self.work = work
        self.finished = threading.Event()
        self.value = self.error = None
        self.thread = threading.Thread(target=self._run, name="sparsad-coarsen-symbolic", daemon=True)

    def _run(self) -> None:
        try:
            self.value = self.work()
        except BaseException as why:  # (re-raised in the calling thread by result())
            self.error = why
        finally:
            self.work = None
            with _steps_lock:
                _steps.discard(self)
            self.finished.set()

    def result(self):
        if self.error is not None:
            raise self.error
        return self.value


_steps: set = set()
_steps_lock = threading.Lock()
_exiting = False
deferred_calls = 0   # calls that raised ``Deferred`` so far (benchmarks report it)


def in_background(pending: dict, key, work: Callable[[], _T]) -> _T:
    """``work()`` bounded by the calling thread's call deadline (see the module docstring).

    ``pending`` holds the steps of one owner (a plan, a coarsened function) by ``key``: a step
    started by an earlier call is collected here once done, or raises ``Deferred`` at once while
    it runs.  Without a call deadline ``work`` runs inline.
    """
    global deferred_calls
    step = pending.get(key)
    if step is None:
        deadline = getattr(_state, "wall_deadline", None)
        if deadline is None:
            return work()
        step = _Step(work)
        pending[key] = step
        with _steps_lock:
            _steps.add(step)
        step.thread.start()
        step.finished.wait(max(deadline - time.monotonic(), 0.0))
    if not step.finished.is_set():
        deferred_calls += 1
        raise Deferred(f"symbolic work ({key if isinstance(key, str) else key[0]}) goes on in the background")
    if pending.get(key) is step:  # (another thread may collect the same step at the same time)
        pending.pop(key, None)
    return step.result()


def wait_background(timeout: float | None = None) -> bool:
    """Block until every background symbolic step has finished (True) or ``timeout`` seconds passed."""
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        with _steps_lock:
            running = next(iter(_steps), None)
        if running is None:
            return True
        left = None if end is None else end - time.monotonic()
        if left is not None and left <= 0:
            return False
        running.finished.wait(None if left is None else min(left, 1.0))


@atexit.register
def _stop_background() -> None:
    global _exiting
    _exiting = True
