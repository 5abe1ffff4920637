"""Never a stale or wrong gradient: live globals, content-keyed arguments, verified source, stable closed forms,
internal failures as fallbacks, our own errors at the boundary."""
from __future__ import annotations

import contextlib
import math
import types
import importlib
import sys
import warnings

import numpy as np
import pytest
import torch

from helpers_coarsen import load_function, rel_err, torch_reference
import sparsad.coarsen as coarsen
from sparsad.coarsen.api import CoarsenInputError
from sparsad.coarsen.plan import CoarsenFallbackWarning
from sparsad.coarsen.symbolic import geom_sum, geom_sum_d

DRAWS = [np.random.default_rng(seed) for seed in range(3)]


def _vec(rng, n=4):
    return torch.tensor(rng.uniform(-1.0, 1.0, n), dtype=torch.float64)


@contextlib.contextmanager
def _strict():
    """Any fallback in the block is an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        yield


MODULE = '''
import torch
SCALE = 2.0
TABLE = {"a": 1.5, "b": -0.5}

class Config:
    rate = 0.3

def by_global(x):
    return torch.sum(torch.sin(x) * SCALE)

def by_dict(x):
    return torch.sum(x * x * TABLE["a"] + x * TABLE["b"])

def by_class_attribute(x):
    s = x * 1.0
    for i in range(5):
        s = s * (1.0 - Config.rate) + x
    return torch.sum(s)

def make_closure(c):
    def inner(x):
        return torch.sum(torch.exp(x * c))
    return inner
'''


@pytest.mark.parametrize("how", ["grad", "symbolic"])
def test_changed_globals_are_read_at_call_time(how):
    mod = sys.modules[load_function(MODULE, "by_global").__module__]
    cases = [(mod.by_global, lambda v: setattr(mod, "SCALE", v)),
             (mod.by_dict, lambda v: mod.TABLE.__setitem__("a", v)),
             (mod.by_class_attribute, lambda v: setattr(mod.Config, "rate", v))]
    for fn, change in cases:
        wrapped = coarsen.symbolic(fn)
        gradient = coarsen.grad(wrapped)
        for value, rng in zip((0.7, -1.25, 0.7), DRAWS):
            change(value)
            x = _vec(rng)
            (expected,) = torch_reference(fn, (x,), (0,))
            with _strict():
                if how == "grad":
                    got = gradient(x)
                else:
                    leaf = x.clone().requires_grad_()
                    out = wrapped(leaf)
                    assert torch.allclose(out.detach(), fn(x), rtol=1e-14, atol=0)
                    out.backward()
                    got = leaf.grad
            assert rel_err(got, expected) <= 1e-12, (fn.__name__, value)


def test_changed_closure_cell_is_read_at_call_time():
    mod = sys.modules[load_function(MODULE, "make_closure").__module__]
    fn = mod.make_closure(0.5)
    gradient = coarsen.grad(fn)
    for value, rng in zip((0.5, -0.25, 1.5), DRAWS):
        fn.__closure__[0].cell_contents = value
        x = _vec(rng)
        with _strict():
            got = gradient(x)
        (expected,) = torch_reference(fn, (x,), (0,))
        assert rel_err(got, expected) <= 1e-12


def test_fresh_list_argument_is_keyed_by_content_never_by_identity():
    f = load_function("import torch\n"
                      "def f(x, coefs):\n"
                      "    s = x * 0.0\n"
                      "    for c in coefs:\n"
                      "        s = s * x + c\n"
                      "    return torch.sum(s)\n")
    wrapped = coarsen.symbolic(f)
    gradient = coarsen.grad(wrapped)
    rng = np.random.default_rng(7)
    wrong = 0
    for k in range(40):
        coefs = [float(v) for v in rng.uniform(-2, 2, 3)] if k % 2 else [1.0, -0.5, 0.25]
        x = _vec(rng)
        with _strict():
            got = gradient(x, list(coefs))
        (expected,) = torch_reference(f, (x, coefs), (0,))
        wrong += rel_err(got, expected) > 1e-12
    assert wrong == 0
    from sparsad.coarsen.guards import fingerprint
    same = [key for key in wrapped._plans if key[1][1] == fingerprint([1.0, -0.5, 0.25])]
    assert len(same) == 1 and len(wrapped._plans[same[0]]) == 1  # equal content: one plan, reused


def test_source_edited_after_import_falls_back_to_the_function_object(tmp_path):
    path = tmp_path / "edited_module.py"
    path.write_text("import torch\ndef f(x):\n    return torch.sum(x * x)\n")
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("edited_module")
        path.write_text("import torch\ndef f(x):\n    return torch.sum(x * x * x)\n")  # no reload
        import linecache
        linecache.checkcache(str(path))
        x = _vec(DRAWS[0])
        with pytest.warns(CoarsenFallbackWarning, match="edited after import"):
            got = coarsen.grad(module.f)(x)
        assert rel_err(got, 2 * x) <= 1e-15
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("edited_module", None)


GEOMETRIC = ("import torch\n"
             "def f(x, a):\n"
             "    s = x * 1.0\n"
             "    for i in range(40):\n"
             "        s = a * s + 0.5 * x\n"
             "    return torch.sum(s * s)\n")


@pytest.mark.parametrize("numba", [True, False])
def test_affine_closed_form_is_stable_across_a_equals_one(numba):
    """One compiled adjoint (verified once, at a = 0.7) serves every later a, including a = 1 exactly."""
    f = load_function(GEOMETRIC)
    gradient = coarsen.grad(f, argnums=(0, 1), numba=numba)
    x0 = _vec(DRAWS[0])
    text = coarsen.explain(f, x0, torch.tensor(0.7, dtype=torch.float64), print_it=False)
    assert "C6 affine recurrence" in text and "unrolled" not in text
    for offset in [-0.3, -1e-5, -1e-10, -1e-14, 0.0, 1e-16, 1e-12, 1e-8, 1e-3, 0.2]:
        for rng in DRAWS:
            x = _vec(rng)
            a = torch.tensor(1.0 + offset, dtype=torch.float64)
            with _strict():
                gx, ga = gradient(x, a)
            ex, ea = torch_reference(f, (x, a), (0, 1))
            assert rel_err(gx, ex) <= 1e-11 and rel_err(ga, ea) <= 1e-11, offset


def test_vector_factor_closed_form_across_one():
    f = load_function("import torch\n"
                      "def f(x, a):\n"
                      "    s = x * 1.0\n"
                      "    for i in range(25):\n"
                      "        s = a * s + 1.0\n"
                      "    return torch.sum(torch.sin(s))\n")
    a = torch.tensor([1.0 - 1e-9, 1.0, 1.0 + 1e-13, 0.5, 1.2, -0.7], dtype=torch.float64)
    for numba in (True, False):
        for rng in DRAWS:
            x = _vec(rng, 6) * 0.1
            with _strict():
                gx, ga = coarsen.grad(f, argnums=(0, 1), numba=numba)(x, a)
            ex, ea = torch_reference(f, (x, a), (0, 1))
            assert rel_err(gx, ex) <= 1e-11 and rel_err(ga, ea) <= 1e-11


@pytest.mark.parametrize("n", [0, 1, 2, 7, 60])
def test_geometric_helpers_against_exact_rational_sums(n):
    from fractions import Fraction
    for a in [1.0, 1.0 + 2.0 ** -40, 1.0 - 2.0 ** -30, 1.0 + 1e-5, 0.999, 1.5, 0.25, -0.8, -1.0, 3.0]:
        q = Fraction(a)
        exact = sum((q ** k for k in range(n)), Fraction(0))
        exact_d = sum((k * q ** (k - 1) for k in range(1, n)), Fraction(0))
        assert abs(geom_sum(a, n) - float(exact)) <= 1e-13 * max(1.0, abs(float(exact)))
        assert abs(geom_sum_d(a, n) - float(exact_d)) <= 1e-11 * max(1.0, abs(float(exact_d)))


def test_an_internal_failure_becomes_a_fallback_naming_the_line(monkeypatch):
    from sparsad.coarsen import plan as plan_module

    def broken(*args, **kwargs):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(plan_module, "elevate", broken)
    f = load_function("import torch\ndef f(x):\n    return torch.sum(torch.exp(x))\n")
    x = _vec(DRAWS[0])
    with pytest.warns(CoarsenFallbackWarning) as caught:
        got = coarsen.grad(f)(x)
    message = str(caught[0].message)
    assert "internal error RuntimeError" in message and f.__code__.co_filename in message
    assert rel_err(got, torch.exp(x)) <= 1e-15
    with pytest.warns(CoarsenFallbackWarning):
        leaf = x.clone().requires_grad_()
        coarsen.symbolic(f)(leaf).backward()
    assert rel_err(leaf.grad, torch.exp(x)) <= 1e-15


def test_errors_of_the_users_own_code_propagate_unchanged():
    f = load_function("import torch\ndef f(x):\n    return torch.sum(x @ torch.ones(7, dtype=x.dtype))\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CoarsenFallbackWarning)
        with pytest.raises(RuntimeError):
            coarsen.symbolic(f)(_vec(DRAWS[0]).requires_grad_())


def test_fallback_message_names_file_line_variable_and_code():
    f = load_function("import torch\n"
                      "def f(x):\n"
                      "    k = 0\n"
                      "    s = x * 1.0\n"
                      "    while torch.sum(s) < 10.0:\n"
                      "        k = k + 1\n"
                      "        s = s * 1.5 + x * k\n"
                      "    return torch.sum(s)\n")
    # `k` is promoted to a traced scalar: this one coarsens
    x = torch.tensor([0.5, 0.25], dtype=torch.float64)
    with _strict():
        got = coarsen.grad(f)(x)
    (expected,) = torch_reference(f, (x,), (0,))
    assert rel_err(got, expected) <= 1e-12
    g = load_function("import torch\n"
                      "def g(x):\n"
                      "    k = 0\n"
                      "    s = x * 1.0\n"
                      "    while k < 4:\n"
                      "        k = k + 1\n"
                      "        s = s * 1.5 + x\n"
                      "    return torch.sum(s * k)\n", "g")
    with pytest.warns(CoarsenFallbackWarning) as caught:
        got = coarsen.grad(g)(x)
    message = str(caught[0].message)
    assert f"{g.__code__.co_filename}:8" in message and "`k`" in message and "s * k" in message
    (expected,) = torch_reference(g, (x,), (0,))
    assert rel_err(got, expected) <= 1e-15


def test_stack_cat_and_tensor_of_traced_values_fall_back_without_crashing():
    sources = ["import torch\ndef f(x):\n    return torch.sum(torch.stack([x[0] * 2.0, x[1]]) ** 2)\n",
               "import torch\ndef f(x):\n    return torch.sum(torch.cat([x, x * 3.0]) ** 2)\n",
               "import torch\ndef f(x):\n    return torch.sum(torch.tensor([1.0, 2.0]) * x[:2])\n"]
    for source in sources:
        f = load_function(source)
        for rng in DRAWS[:2]:
            x = _vec(rng)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CoarsenFallbackWarning)
                got = coarsen.grad(f)(x)
            (expected,) = torch_reference(f, (x,), (0,))
            assert rel_err(got, expected) <= 1e-15


def test_bad_arguments_raise_our_errors():
    f = load_function("import torch\ndef f(x, y):\n    return (x * y).sum()\n")
    x, y = _vec(DRAWS[0]), _vec(DRAWS[1])
    with pytest.raises(CoarsenInputError, match="argnums 2 is out of range"):
        coarsen.grad(f, argnums=2)(x, y)
    with pytest.raises(CoarsenInputError, match="NumPy array"):
        coarsen.grad(f)(x.numpy(), y.numpy())
    with pytest.raises(CoarsenInputError, match="not a tensor"):
        coarsen.grad(f)(1.0, y)
    with pytest.raises(CoarsenInputError, match="argnums must be"):
        coarsen.grad(f, argnums="x")
    assert isinstance(CoarsenInputError("m"), ValueError) and isinstance(CoarsenInputError("m"), TypeError)
    # negative argnums count from the end, as in jax.grad
    assert rel_err(coarsen.grad(f, argnums=-1)(x, y), x) == 0.0
    # NumPy arrays have no autograd: the wrapped function just runs
    assert np.isclose(coarsen.symbolic(f)(x.numpy(), y.numpy()), float(torch.sum(x * y)))


def test_empty_tensor_falls_back_to_autograd():
    f = load_function("import torch\ndef f(x):\n    return torch.sum(torch.exp(x))\n")
    empty = torch.zeros(0, dtype=torch.float64)
    with pytest.warns(CoarsenFallbackWarning, match="empty"):
        got = coarsen.grad(f)(empty)
    assert got.shape == (0,)


def test_a_generated_adjoint_failing_inside_backward_is_rescued_by_autograd():
    f = load_function("import torch\ndef f(x):\n    return torch.sum(torch.sin(x) * x)\n")
    wrapped = coarsen.symbolic(f, numba=False)
    first = _vec(DRAWS[0]).requires_grad_()
    wrapped(first).backward()  # compiled and verified
    (plans,) = wrapped._plans.values()

    def boom(*args):
        raise FloatingPointError("simulated failure of generated code")

    for compiled in plans[-1].compiled.values():
        compiled.fn = boom
    x = _vec(DRAWS[1])
    leaf = x.clone().requires_grad_()
    with pytest.warns(CoarsenFallbackWarning, match="internal error FloatingPointError"):
        wrapped(leaf).backward()
    assert rel_err(leaf.grad, torch.sin(x) + x * torch.cos(x)) <= 1e-15


# --- guards keyed by content and by what is guarded (review B) -----------------------------------

def _reference_gradient(fn, x, *rest):
    leaf = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(leaf, *rest), leaf)
    return g


def _x64():
    return torch.linspace(0.5, 1.5, 4, dtype=torch.float64)


import collections as _collections

_P = _collections.namedtuple("_P", "scale")
_PRM = _P(2.0)


def _by_named_tuple(x):
    return (x * _PRM.scale).sin().sum()


def test_named_tuple_global_and_argument_are_keyed_by_content():
    global _PRM
    _PRM = _P(2.0)
    x = _x64()
    gradient = coarsen.grad(_by_named_tuple, 0)
    with _strict():
        gradient(x)
        _PRM = _P(3.0)
        assert torch.allclose(gradient(x), _reference_gradient(_by_named_tuple, x), rtol=1e-12, atol=0)

    def g(x, p):
        return (x * p.scale).sin().sum()
    gradient = coarsen.grad(g, 0)
    gradient(x, _P(2.0))
    assert torch.allclose(gradient(x, _P(3.0)), _reference_gradient(g, x, _P(3.0)), rtol=1e-12, atol=0)


def test_closures_of_one_factory_are_guarded_separately():
    def make(k):
        def scale(x):
            return (x * k).sin()

        def setk(v):
            nonlocal k
            k = v
        return scale, setk
    s2, set2 = make(2.0)
    s5, set5 = make(5.0)

    def f(x):
        return (s2(x) + s5(x)).sum()
    x = _x64()
    gradient = coarsen.grad(f, 0)
    gradient(x)
    set5(3.0)
    assert torch.allclose(gradient(x), _reference_gradient(f, x), rtol=1e-12, atol=0)
    set2(7.0)
    assert torch.allclose(gradient(x), _reference_gradient(f, x), rtol=1e-12, atol=0)


def _by_sign_of_zero(x, c):
    return (x * math.atan2(c, -1.0)).sum()


def test_fast_key_tells_minus_zero_from_zero():
    x = _x64()
    gradient = coarsen.grad(_by_sign_of_zero, 0)
    with _strict():
        for c in (0.0, 0.0, -0.0, -0.0, 0.0):
            assert torch.allclose(gradient(x, c), _reference_gradient(_by_sign_of_zero, x, c), rtol=1e-12, atol=0)


def _by_default(x, c=2.0):
    return (x * c).sin().sum()


def _by_list_default(x, w=[2.0]):
    return (x * w[0]).sin().sum()


def _helper_with_list_default(x, w=[2.0]):
    return (x * w[0]).sin()


def _by_helper_default(x):
    return _helper_with_list_default(x).sum()


def test_defaults_are_guarded_by_content():
    x = _x64()
    cases = [(_by_default, lambda: setattr(_by_default, "__defaults__", (3.0,))),
             (_by_list_default, lambda: _by_list_default.__defaults__[0].__setitem__(0, 3.0)),
             (_by_helper_default, lambda: _helper_with_list_default.__defaults__[0].__setitem__(0, 3.0))]
    for fn, change in cases:
        gradient = coarsen.grad(fn, 0)
        with _strict():
            gradient(x)
            gradient(x)
            change()
            assert torch.allclose(gradient(x), _reference_gradient(fn, x), rtol=1e-12, atol=0), fn.__name__


def _h2(x):
    return (x * 2.0).sin()


def _h3(x):
    return (x * 3.0).sin()


_HELPMOD = types.ModuleType("_trust_helpers")
_HELPMOD.h = _h2


def _by_module_helper(x):
    return _HELPMOD.h(x).sum()


def test_a_helper_read_from_a_module_attribute_is_guarded_by_identity():
    x = _x64()
    _HELPMOD.h = _h2
    gradient = coarsen.grad(_by_module_helper, 0)
    with _strict():
        gradient(x)
        _HELPMOD.h = _h3
        assert torch.allclose(gradient(x), _reference_gradient(_by_module_helper, x), rtol=1e-12, atol=0)


class _Cfg:
    scale = 2.0


_CFG = _Cfg()


def _by_class_attribute_via_instance(x):
    return (x * _CFG.scale).sin().sum()


def test_a_class_attribute_read_through_an_instance_is_guarded():
    x = _x64()
    _Cfg.scale = 2.0
    fn = _by_class_attribute_via_instance
    gradient = coarsen.grad(fn, 0)
    with _strict():
        gradient(x)
        _Cfg.scale = 3.0
        assert torch.allclose(gradient(x), _reference_gradient(fn, x), rtol=1e-12, atol=0)


def test_partial_objects_fingerprint_by_their_function_and_arguments():
    import functools

    from sparsad.coarsen.guards import fingerprint

    def base(x, c):
        return x * c
    assert fingerprint(functools.partial(base, c=2.0)) == fingerprint(functools.partial(base, c=2.0))
    assert fingerprint(functools.partial(base, c=2.0)) != fingerprint(functools.partial(base, c=3.0))
    assert fingerprint(functools.partial(base, 2.0)) != fingerprint(functools.partial(base, 3.0))


_SCALE = torch.tensor([1.5, -2.0], dtype=torch.float64)


def _scaled_energy(x):
    return torch.sum(x * x) * _SCALE[1]


def test_a_global_tensor_starting_to_require_grad_is_not_baked_in():
    """A plan traced while a global tensor did not require grad baked it in as a constant; once it
    requires grad, the plan must not serve (its gradient would be silently lost): the call falls back
    to autograd with the usual warning, and the gradient reaches the tensor."""
    global _SCALE
    saved = _SCALE
    _SCALE = saved.clone()
    try:
        energy = coarsen.symbolic(_scaled_energy)
        x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
        energy(x).backward()
        _SCALE.requires_grad_(True)
        with pytest.warns(CoarsenFallbackWarning, match="requires grad"):
            energy(x).backward()
        assert _SCALE.grad is not None and torch.allclose(_SCALE.grad, torch.tensor([0.0, 5.25], dtype=torch.float64))
    finally:
        _SCALE = saved
