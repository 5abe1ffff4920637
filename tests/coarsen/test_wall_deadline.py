"""A call never waits past its wall deadline for symbolic work (``budget.call_deadline``): the
work goes on in the background and the call is computed with plain autograd, right and without a
warning; a later call uses the coarsened gradient, or falls back with the warning if the work
failed.  Ready-made calls reuse a tensor's NumPy view only while its memory and strides are the same."""
from __future__ import annotations

import threading
import time
import warnings

import numpy as np
import pytest
import torch

from helpers_coarsen import load_function, rel_err, torch_reference
import sparsad.coarsen as coarsen
from sparsad.coarsen import budget, ready, tiers
from sparsad.coarsen.plan import CoarsenFallbackWarning

LOOP = """
import torch

def f(xs, w):
    h = 0.0
    for x in xs:
        h = torch.tanh(w * h + x)
    return h * h + torch.sin(w) * xs.sum()
"""


def _args(seed: int, n: int = 12):
    rng = np.random.default_rng(seed)
    return (torch.tensor(rng.standard_normal(n), dtype=torch.float64),
            torch.tensor(rng.uniform(0.2, 0.9), dtype=torch.float64))


def _plans(gradient_or_coarsened):
    coarse = gradient_or_coarsened
    return [plan for plans in coarse._plans.values() for plan in plans]


def test_a_call_past_its_deadline_is_plain_autograd_then_the_work_is_used(monkeypatch):
    monkeypatch.setenv("SPARSAD_COARSEN_WAIT_S", "0")   # every symbolic step misses the deadline
    fn = coarsen.symbolic(load_function(LOOP))
    gradient = coarsen.grad(fn, (0, 1))
    before = budget.deferred_calls
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        for seed in range(6):
            args = _args(seed)
            for g, e in zip(gradient(*args), torch_reference(fn.fn, args, (0, 1))):
                assert rel_err(g, e) < 1e-12
            assert tiers.wait(timeout=600)
    assert budget.deferred_calls > before                     # (the trace, the elevation, the adjoint)
    (plan,) = _plans(fn)
    assert plan.elevations and any(c.verified for c in plan.compiled.values())   # coarsened in the end
    assert not plan.pending


def test_work_that_fails_in_the_background_falls_back_with_the_warning_at_a_later_call(monkeypatch):
    monkeypatch.setenv("SPARSAD_COARSEN_WAIT_S", "0")
    monkeypatch.setenv("SPARSAD_COARSEN_BUDGET_S", "0")  # the trace overruns its CPU budget
    f = load_function(LOOP)
    gradient = coarsen.grad(f, (0, 1), numba=False)
    args = _args(1)
    expected = torch_reference(f, args, (0, 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = gradient(*args)      # deferred (no warning yet), unless the trace failed before the wait ended
        assert tiers.wait(timeout=600)
        second = gradient(*args)
        third = gradient(*args)
    messages = [str(w.message) for w in caught if issubclass(w.category, CoarsenFallbackWarning)]
    assert len(messages) == 1 and "symbolic trace took more than 0 s" in messages[0]
    assert "internal error" not in messages[0]
    for got in (first, second, third):
        for g, e in zip(got, expected):
            assert rel_err(g, e) < 1e-14


def test_backward_through_a_deferred_symbolic_function_is_autograd(monkeypatch):
    monkeypatch.setenv("SPARSAD_COARSEN_WAIT_S", "0")
    fn = coarsen.symbolic(load_function(LOOP), numba=False)
    for seed in range(4):
        xs, w = _args(seed)
        leaf = w.clone().requires_grad_(True)
        fn(xs, leaf).backward()
        assert rel_err(leaf.grad, torch_reference(fn.fn, (xs, w), (1,))[0]) < 1e-12
        assert tiers.wait(timeout=600)
    (plan,) = _plans(fn)
    assert any(c.verified for c in plan.compiled.values())


def test_a_deadline_bounds_the_wait_not_the_work():
    started = time.monotonic()
    release = threading.Event()
    pending: dict = {}
    with budget.call_deadline(0.05):
        with pytest.raises(budget.Deferred):
            budget.in_background(pending, "step", lambda: release.wait(60) and 42)
    assert time.monotonic() - started < 30
    with budget.call_deadline(0.05):
        with pytest.raises(budget.Deferred):      # still running: a later call does not wait again
            budget.in_background(pending, "step", lambda: pytest.fail("started twice"))
    release.set()
    assert budget.wait_background(timeout=60)
    with budget.call_deadline(0.05):
        assert budget.in_background(pending, "step", lambda: pytest.fail("started twice")) == 42
    assert not pending
    assert budget.in_background({}, "inline", lambda: 7) == 7   # outside a call deadline: inline


def test_nested_deadlines_keep_the_outermost():
    pending: dict = {}
    with budget.call_deadline(60.0):
        with budget.call_deadline(0.0):   # (ignored: the outer call's deadline applies)
            assert budget.in_background(pending, "quick", lambda: 5) == 5


def test_tensor_views_follow_memory_and_strides():
    views = ready.TensorViews()

    def value(a):
        e = views.lookup(id(a))
        if e is not None and e[0]() is a and e[1] == a.data_ptr() and e[2] == a.stride():
            return e[3]
        return views.get(a)

    a = torch.arange(6, dtype=torch.float64)
    first = value(a)
    assert value(a) is first
    a.mul_(2.0)                                   # in place: the same memory, the view sees it
    assert value(a) is first and first[1] == 2.0
    a.set_(torch.ones(6, dtype=torch.float64))    # other memory: a new view
    second = value(a)
    assert second is not first and second[1] == 1.0
    m = torch.arange(4, dtype=torch.float64).reshape(2, 2)
    before = value(m)
    m.t_()                                        # same memory and shape, other strides
    after = value(m)
    assert after is not before and after[0, 1] == 2.0
    key = id(a)
    del a
    assert key not in views.entries               # dropped with its tensor


def test_ready_call_sees_in_place_updates_and_new_tensors():
    f = load_function(LOOP)
    gradient = coarsen.grad(f, (0, 1))
    xs, w = _args(3)
    for _ in range(4):
        gradient(xs, w)
        tiers.wait(timeout=600)
    for step in range(5):
        with torch.no_grad():
            w.mul_(0.9)                                       # a training step updates in place
            xs.add_(0.01 * step)
        fresh = (xs.clone(), w.clone())                       # and a new batch is a new tensor
        for args in ((xs, w), fresh):
            for g, e in zip(gradient(*args), torch_reference(f, args, (0, 1))):
                assert rel_err(g, e) < 1e-10


SCALE = 2.0


def _scaled(x, w):
    return (SCALE * w * torch.sin(x)).sum()


def test_a_global_changed_while_tracing_in_the_background_is_read_again(monkeypatch):
    monkeypatch.setenv("SPARSAD_COARSEN_WAIT_S", "0")
    global SCALE
    x = torch.linspace(0.1, 1.0, 5, dtype=torch.float64)
    w = torch.tensor(0.7, dtype=torch.float64)
    gradient = coarsen.grad(_scaled, (0, 1), numba=False)
    try:
        for scale in (2.0, 3.0, 3.0, 5.0, 5.0, 5.0):
            SCALE = scale
            for g, e in zip(gradient(x, w), torch_reference(_scaled, (x, w), (0, 1))):
                assert rel_err(g, e) < 1e-12
            if scale == 3.0:
                SCALE = 4.0          # changed after the call: the next call must not use a plan for 3.0
                SCALE = 3.0
    finally:
        SCALE = 2.0


def test_two_threads_collecting_one_finished_step_both_get_its_result():
    """Another thread collects the step between this one's check and its removal (simulated by a
    table that lets the step go at that moment): this one used to raise KeyError, an internal error
    that switched coarsening off for the signature."""
    class Collected(dict):
        reads = 0

        def get(self, key, default=None):
            found = super().get(key, default)
            self.reads += 1
            if self.reads == self.pop_at:
                self.pop(key, None)   # the other thread's removal, right after this read
            return found

    pending = Collected()
    pending.pop_at = 0
    with budget.call_deadline(0.0):
        with pytest.raises(budget.Deferred):
            budget.in_background(pending, "step", lambda: (time.sleep(0.2), 42)[1])
    budget.wait_background(30)
    pending.reads, pending.pop_at = 0, 2   # (the first read finds the step, the second checks it is the same)
    with budget.call_deadline(0.0):
        assert budget.in_background(pending, "step", lambda: pytest.fail("started again")) == 42
