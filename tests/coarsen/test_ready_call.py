"""`coarsen.grad`'s ready-made call for recorded control flow: event logs looked up, never a wrong gradient."""
from __future__ import annotations

import threading
import warnings

import pytest
import torch

from helpers_coarsen import bgd_args, load_function, no_fallback, rel_err, torch_reference  # noqa: F401
import sparsad.coarsen as coarsen
from sparsad.coarsen import api, apps, numba_primal, ready
from sparsad.coarsen.plan import FAST_PRIMAL_AFTER, CoarsenFallbackWarning

TOL = 1e-10

# a traced `if` inside a `while` whose trip count depends on the data: the event log's length varies
VARYING = """
import torch

def f(x, a):
    s = 0.0 * a
    k = 0
    while k < 40:
        k += 1
        if torch.sum(x * s) > 1.5:
            s = s - 0.5 * a
        else:
            s = s + a * torch.sigmoid(s)
        if torch.abs(torch.sum(x * s)) > 4.0:
            break
    return torch.sum(torch.exp(0.1 * x * s)) + s * a
"""


def _warm(grad, args):
    for _ in range(FAST_PRIMAL_AFTER + 1):   # eager record, Numba primal compiled and checked, ready call built
        grad(*args)



@pytest.fixture(autouse=True)
def numba_in_process(monkeypatch):
    """These tests look at the Numba tiers right after the calls that build them: compile in-process."""
    monkeypatch.setenv("SPARSAD_COARSEN_BACKGROUND", "0")

def test_steady_state_builds_no_record_and_replays_each_log_once(monkeypatch):
    fn = coarsen.symbolic(apps.bgd_hyperopt)
    grad = coarsen.grad(fn, argnums=2)
    _warm(grad, bgd_args())
    replays = []
    original = numba_primal.replay

    def counting(*a):
        replays.append(1)
        return original(*a)

    monkeypatch.setattr(numba_primal, "replay", counting)
    monkeypatch.setattr(fn.plan(bgd_args()), "run", lambda *a: pytest.fail("the eager primal ran"))
    for r in (0.2, 0.05, 0.9, 0.2, 0.05, 0.9):      # three trip counts, each seen twice
        args = bgd_args(r=r)
        got = grad(*args)
        assert rel_err(got, torch_reference(apps.bgd_hyperopt, args, (2,))[0]) <= TOL
        assert got.shape == () and got.dtype == torch.float64
    assert len(replays) <= 3   # the first call's log was known already; each new log replays once


def test_several_arguments_vector_and_scalar_gradients():
    fn = coarsen.symbolic(apps.bgd_hyperopt)
    grad = coarsen.grad(fn, argnums=(0, 2, 1))
    for r in (0.2, 0.2, 0.2, 0.6, 0.6):
        args = bgd_args(r=r)
        got = grad(*args)
        expected = torch_reference(apps.bgd_hyperopt, args, (0, 2, 1))
        assert len(got) == 3
        for g, e in zip(got, expected):
            assert rel_err(g, e) <= TOL and g.shape == e.shape and g.dtype == e.dtype


def test_log_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(ready, "READY_LOG_CACHE", 2)
    fn = coarsen.symbolic(apps.bgd_hyperopt)
    grad = coarsen.grad(fn, argnums=2)
    _warm(grad, bgd_args())
    for r in (0.05, 0.1, 0.3, 0.6, 0.9, 0.05, 0.3):
        args = bgd_args(r=r)
        assert rel_err(grad(*args), torch_reference(apps.bgd_hyperopt, args, (2,))[0]) <= TOL


def test_a_longer_event_log_than_the_buffer_takes_the_eager_primal(monkeypatch):
    monkeypatch.setattr(numba_primal, "CAPACITY", 24)
    f = load_function(VARYING)
    fn = coarsen.symbolic(f)
    grad = coarsen.grad(fn, argnums=(0, 1))
    x = torch.tensor([0.5, 0.2, 0.3], dtype=torch.float64)
    short = (x, torch.tensor(10.0, dtype=torch.float64))   # breaks in the first iteration: 5 events
    long = (x, torch.tensor(0.5, dtype=torch.float64))     # all 40 iterations: 82 events
    _warm(grad, short)
    assert isinstance(fn.plan(short).fast_primal, numba_primal.NumbaPrimal)
    assert fn.plan(long).fast_primal(long) is None          # overflows
    for args in (long, short, long):
        for g, e in zip(grad(*args), torch_reference(f, args, (0, 1))):
            assert rel_err(g, e) <= TOL


def test_tensor_off_the_signature_takes_the_general_path():
    """A NumPy array of the tensor's shape and dtype has the same cheap key: the ready call refuses it."""
    fn = coarsen.symbolic(apps.bgd_hyperopt)
    grad = coarsen.grad(fn, argnums=2)
    args = bgd_args()
    _warm(grad, args)
    x, y, r, *static = args
    expected = torch_reference(apps.bgd_hyperopt, args, (2,))[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CoarsenFallbackWarning)
        try:
            got = grad(x.numpy(), y, r, *static)
        except Exception:   # NumPy input is not supported by the function itself: any error is fine
            return
    assert rel_err(got, expected) <= TOL


def test_defaults_and_non_contiguous_tensors():
    fn = coarsen.symbolic(apps.bgd_hyperopt)
    grad = coarsen.grad(fn, argnums=(0, 2))
    x, y, r, T, tol = bgd_args()
    _warm(grad, (x, y, r))                          # T and tol from the function's defaults
    wide = torch.stack([x, torch.zeros_like(x)], 1)[:, 0]   # a strided view of x's values
    assert not wide.is_contiguous()
    for args in ((x, y, r), (wide, y, r), (x, y, r)):
        got = grad(*args)
        for g, e in zip(got, torch_reference(apps.bgd_hyperopt, args, (0, 2))):
            assert rel_err(g, e) <= TOL and g.shape == e.shape


def test_threads_share_the_ready_call():
    fn = coarsen.symbolic(apps.bgd_hyperopt)
    grad = coarsen.grad(fn, argnums=2)
    _warm(grad, bgd_args())
    cases = [bgd_args(r=r) for r in (0.05, 0.2, 0.6, 0.9)]
    expected = [torch_reference(apps.bgd_hyperopt, args, (2,))[0] for args in cases]
    errors = []

    def work(k):
        for _ in range(200):
            for j in range(len(cases)):
                args = cases[(j + k) % len(cases)]
                if not rel_err(grad(*args), expected[(j + k) % len(cases)]) <= TOL:
                    errors.append((k, j))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
