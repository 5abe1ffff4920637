"""Ready-made gradient calls reuse each tensor's NumPy view: never stale, and tensors without a view
(sparse layout, negative bit) go to plain autograd instead of raising or switching coarsening off."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from helpers_coarsen import load_function, rel_err, torch_reference
import sparsad.coarsen as coarsen
from sparsad.coarsen.plan import FAST_PRIMAL_AFTER, CoarsenFallbackWarning

SOURCE = """
import torch

def linear(x, w):
    return torch.sum(w * x) + torch.sum(w * w)

def scaled(x, w, c):
    return torch.sum(w * torch.sin(x) * c)

def looped(x, w):
    s = torch.sum(w) * 0.0
    k = 0
    while k < 6:
        s = torch.sin(s) * 0.5 + torch.sum(w * x) * 0.1
        k += 1
        if s > 2.0:
            break
    return s * s + torch.sum(x * w)
"""


@pytest.fixture(autouse=True)
def numba_in_process(monkeypatch):
    monkeypatch.setenv("SPARSAD_COARSEN_BACKGROUND", "0")


def _vec(seed, n=5):
    return torch.tensor(np.random.default_rng(seed).standard_normal(n), dtype=torch.float64)


_BUILT: dict = {}


def _ready(name):
    """The gradient of ``name`` with its ready-made call built for float64 vectors of 5 (built once for
    this module's tests: the Numba compilation is what costs)."""
    if name not in _BUILT:
        f = load_function(SOURCE, name)
        gradient = coarsen.grad(f, argnums=(0, 1))
        x, w = _vec(0), _vec(1)
        for _ in range(FAST_PRIMAL_AFTER + 2):
            gradient(x, w)
        _BUILT[name] = f, gradient
    return _BUILT[name]


def _agrees(f, gradient, x, w):
    got = gradient(x, w)
    expected = torch_reference(f, (x, w), (0, 1))
    return max(rel_err(g, e) for g, e in zip(got, expected)) <= 1e-12


@pytest.mark.parametrize("name", ["linear", "looped"])
def test_tensors_changed_between_calls_are_read_again(name):
    f, gradient = _ready(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        x, w = _vec(2), _vec(3)
        assert _agrees(f, gradient, x, w)
        x.add_(0.25)                                   # in place
        assert _agrees(f, gradient, x, w)
        with torch.no_grad():
            x[0] = 1.5                                 # an entry
        assert _agrees(f, gradient, x, w)
        x.copy_(_vec(4))
        assert _agrees(f, gradient, x, w)
        x.data = _vec(5)                               # other memory, same tensor object
        assert _agrees(f, gradient, x, w)
        p = torch.nn.Parameter(_vec(6))
        step = torch.optim.SGD([p], lr=0.1)
        for _ in range(3):                             # an optimizer updating it between calls
            p.grad = gradient(p, w)[0].clone()
            step.step()
            assert _agrees(f, gradient, p, w)
        for seed in range(7, 12):                      # fresh tensors, possibly in freed memory
            assert _agrees(f, gradient, _vec(seed), w)
        base = _vec(12, 16)
        views = (base[3:8], base[2:7]) + ((base[::3][:5],) if name == "linear" else ())  # (strides: a compile)
        for view in views:
            assert _agrees(f, gradient, view, w)      # offsets and strides of the same shape
            with torch.no_grad():
                base.mul_(-1.1)
            assert _agrees(f, gradient, view, w)


@pytest.mark.parametrize("name", ["linear", "looped"])
def test_tensors_without_a_numpy_view_use_autograd_and_leave_the_plan_alone(name):
    f, gradient = _ready(name)
    x, w = _vec(2), _vec(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        got = gradient(torch._neg_view(x), w)          # the ready call used to raise RuntimeError here
        expected = torch_reference(f, (-x, w), (0, 1))
        assert max(rel_err(g, e) for g, e in zip(got, expected)) <= 1e-12
        assert _agrees(f, gradient, x, w)


def test_sparse_tensors_use_autograd_after_the_ready_call_is_built():
    f, gradient = _ready("linear")
    x, w = _vec(2), _vec(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        got = gradient(x.to_sparse(), w)              # the ready call used to raise TypeError here
        expected = torch_reference(f, (x, w), (0, 1))
        assert rel_err(got[0].to_dense(), expected[0]) <= 1e-12 and rel_err(got[1], expected[1]) <= 1e-12
        assert _agrees(f, gradient, x, w)


def test_a_first_call_with_a_sparse_tensor_does_not_switch_coarsening_off():
    f = load_function(SOURCE, "linear")
    gradient = coarsen.grad(f, argnums=(0, 1))
    x, w = _vec(0), _vec(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)  # (it used to warn of an internal error)
        got = gradient(x.to_sparse(), w)
        assert rel_err(got[1], torch_reference(f, (x, w), (0, 1))[1]) <= 1e-12
        for _ in range(FAST_PRIMAL_AFTER + 1):
            assert _agrees(f, gradient, x, w)
    coarse = next(c.cell_contents for c in gradient.__closure__ if type(c.cell_contents).__name__ == "Coarsened")
    assert not coarse._disabled


def test_numpy_scalar_arguments_are_keyed_by_value():
    """``np.float64`` has a shape and a dtype: the ready call's key took it for a 0-d tensor (shape and
    dtype only) and reused the gradient traced for another value of it."""
    f = load_function(SOURCE, "scaled")
    gradient = coarsen.grad(f, argnums=(0, 1))
    x, w = _vec(0), _vec(1)
    for _ in range(FAST_PRIMAL_AFTER + 2):
        gradient(x, w, np.float64(0.5))
    for c in (np.float64(2.0), np.float64(-1.0), np.float64(0.5), np.int64(3), np.float32(0.25)):
        got = gradient(x, w, c)
        for g, e in zip(got, torch_reference(f, (x, w, c), (0, 1))):
            assert rel_err(g, e) <= 1e-6 if c.dtype == np.float32 else rel_err(g, e) <= 1e-12, c


DEFAULTS = """
import torch

W = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64)

def weighted(x, w=W, c=0.5):
    return torch.sum(w * torch.sin(x) * c)
"""


def test_a_tensor_given_as_a_default_is_an_input_read_at_each_call():
    """Both entry points used to fail with an internal IndexError (and fall back for good) when a tensor
    parameter was left to its default."""
    f = load_function(DEFAULTS, "weighted")
    module = __import__(f.__module__)
    x = _vec(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        gradient = coarsen.grad(f, argnums=0)
        for scale in (1.0, 1.0, -2.0, 3.0):
            with torch.no_grad():
                module.W.mul_(scale)        # the default, changed in place between calls
            assert rel_err(gradient(x), torch_reference(f, (x,), (0,))[0]) <= 1e-12
        other = -module.W
        for _ in range(FAST_PRIMAL_AFTER + 1):   # ready-made calls for each way of calling: never mixed up
            for args in ((x,), (x, other), (x, other, 2.0), (x,)):
                assert rel_err(gradient(*args), torch_reference(f, args, (0,))[0]) <= 1e-12
        f.__defaults__ = (other, -3.0)
        assert rel_err(gradient(x), torch_reference(f, (x,), (0,))[0]) <= 1e-12
        fast = next(c.cell_contents for c in gradient.__closure__ if isinstance(c.cell_contents, dict))
        assert len(fast) == 3
        decorated = coarsen.symbolic(f)
        for _ in range(2):
            leaf = x.clone().requires_grad_(True)
            decorated(leaf).backward()
            assert rel_err(leaf.grad, torch_reference(f, (x,), (0,))[0]) <= 1e-12


def test_mixed_precision_arguments_are_checked_at_float32_tolerance():
    """A float32 argument next to float64 ones made the first call's check demand float64 agreement:
    a false "generated derivative differs" and a fallback for good."""
    f = load_function(SOURCE, "looped")
    for seed in (6, 9):   # (draws whose float32 gradients round one unit apart from autograd's)
        rng = np.random.default_rng(seed)
        x = torch.tensor(rng.standard_normal(40), dtype=torch.float64)
        w = torch.tensor(rng.standard_normal(40), dtype=torch.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("error", CoarsenFallbackWarning)
            got = coarsen.grad(f, argnums=(0, 1), numba=False)(x, w)
        for g, e in zip(got, torch_reference(f, (x, w), (0, 1))):
            assert g.dtype == e.dtype and rel_err(g, e) <= 1e-6
