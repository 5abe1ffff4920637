"""`coarsen.grad`'s recording primal compiled with Numba: used, equal to the eager record, and refused safely."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers_coarsen import bgd_args, load_function, no_fallback, rel_err, torch_reference  # noqa: F401
import sparsad.coarsen as coarsen
from sparsad.coarsen import apps, numba_primal
from sparsad.coarsen.plan import FAST_PRIMAL_AFTER

TOL = 1e-10

# nested recorded sites: a traced `if` inside a `while` with a break, and a static `for` inside it
NESTED = """
import torch

def f(x, a, T=6):
    s = 0.0 * a
    k = 0
    while k < T:
        k += 1
        if torch.sum(x * s) > 1.5:
            s = s - 0.5 * a
        else:
            s = s + a * torch.sigmoid(s)
        t = 0.0 * a
        for j in range(2):
            t = t + x[j] * s
        if torch.abs(t) > 4.0:
            break
    return torch.sum(torch.exp(0.1 * x * s)) + torch.clamp(s, min=0.0) * t
"""


# only top-level sites (the event log replays without per-iteration events), a loop run twice
TOPLEVEL = """
import torch

def f(x, a):
    if torch.sum(x) > a:
        z = x * a
    else:
        z = x - a
    for rep in (0, 1):
        k = 0
        while k < 8:
            k += 1
            if torch.sum(z * z) > 3.0:
                break
            z = z * 1.5
    if a > 0.5:
        z = z + 1.0
    return torch.sum(z * x)
"""



@pytest.fixture(autouse=True)
def numba_in_process(monkeypatch):
    """These tests look at the Numba tiers right after the calls that build them: compile in-process."""
    monkeypatch.setenv("SPARSAD_COARSEN_BACKGROUND", "0")

def test_bgd_grad_runs_the_numba_primal_and_matches_autograd(monkeypatch):
    fn = coarsen.symbolic(apps.bgd_hyperopt)
    grad = coarsen.grad(fn, argnums=2)
    args = bgd_args()
    expected = torch_reference(apps.bgd_hyperopt, args, (2,))[0]
    for _ in range(FAST_PRIMAL_AFTER):          # eager record, then compile and check the Numba primal
        assert rel_err(grad(*args), expected) <= TOL
    plan = fn.plan(args)
    assert isinstance(plan.fast_primal, numba_primal.NumbaPrimal), plan.fast_primal
    assert "_sparsad_reduce_" in plan.fast_primal.source           # the training loop's sum is fused
    from sparsad.coarsen.numba_backend import generate_numba_source
    compiled = next(iter(plan.compiled.values()))
    assert "_vsum_" in generate_numba_source(compiled.program, "adjoint", [2])   # so are the adjoint's

    def no_eager(*a):
        raise AssertionError("the eager primal ran")

    monkeypatch.setattr(plan, "run", no_eager)
    calls = plan.fast_primal.calls
    for r in (0.2, 0.05, 0.9):                  # other learning rates: other trip counts, same compiled code
        args = bgd_args(r=r)
        assert rel_err(grad(*args), torch_reference(apps.bgd_hyperopt, args, (2,))[0]) <= TOL
    assert plan.fast_primal.calls == calls + 3


def test_nested_sites_record_like_the_eager_primal():
    f = load_function(NESTED)
    fn = coarsen.symbolic(f)
    x = torch.tensor([0.7, -0.3, 1.1], dtype=torch.float64)
    grad = coarsen.grad(fn, argnums=(0, 1))
    for a in (0.4, 2.5):
        args = (x, torch.tensor(a, dtype=torch.float64))
        for _ in range(2):
            got = grad(*args)
            for g, e in zip(got, torch_reference(f, args, (0, 1))):
                assert rel_err(g, e) <= TOL
    plan = fn.plan(args)
    assert isinstance(plan.fast_primal, numba_primal.NumbaPrimal), plan.fast_primal
    assert plan.fast_primal.calls >= 3
    primal = numba_primal.NumbaPrimal(f, plan.sites)
    for a in (0.4, 0.9, 2.5, -1.0):
        args = (x, torch.tensor(a, dtype=torch.float64))
        out, record = primal(args)
        with torch.no_grad():
            eager_out, eager = plan.run(*args)
        assert record.loops == eager.loops and record.branches == eager.branches
        assert len(record.branches) > 1 and np.isclose(out, eager_out.item(), rtol=1e-12)


def test_float32_keeps_the_eager_primal():
    fn = coarsen.symbolic(apps.bgd_hyperopt)
    args = tuple(a.float() if isinstance(a, torch.Tensor) else a for a in bgd_args())
    grad = coarsen.grad(fn, argnums=2)
    for _ in range(FAST_PRIMAL_AFTER + 1):
        got = grad(*args)
    assert "float64" in fn.plan(args).fast_primal
    assert rel_err(got, torch_reference(apps.bgd_hyperopt, args, (2,))[0]) <= 1e-4


def test_untranslatable_function_keeps_the_eager_primal():
    f = load_function("import torch\nW = (0.5, 2.0)\n\ndef f(x, r):\n    w = 0.0 * r\n    k = 0\n"
                      "    while k < 5:\n        k += 1\n        if torch.sum(x * w) > W[1]:\n            break\n"
                      "        w = w + W[0] * r\n    return torch.sum(x * w * w)\n")
    fn = coarsen.symbolic(f)
    args = (torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor(0.3, dtype=torch.float64))
    grad = coarsen.grad(fn, argnums=1)
    for _ in range(FAST_PRIMAL_AFTER + 1):
        got = grad(*args)
    assert "not compiled with Numba" in fn.plan(args).fast_primal
    assert rel_err(got, torch_reference(f, args, (1,))[0]) <= TOL


def test_disagreeing_numba_primal_is_refused(monkeypatch):
    original = numba_primal.NumbaPrimal.__call__

    def wrong(self, args):
        out, record = original(self, args)
        for key in record.loops:
            record.loops[key][0] += 1   # one iteration too many
        return out, record

    monkeypatch.setattr(numba_primal.NumbaPrimal, "__call__", wrong)
    fn = coarsen.symbolic(apps.bgd_hyperopt)
    grad = coarsen.grad(fn, argnums=2)
    args = bgd_args()
    expected = torch_reference(apps.bgd_hyperopt, args, (2,))[0]
    for _ in range(FAST_PRIMAL_AFTER + 1):
        assert rel_err(grad(*args), expected) <= TOL
    assert "other trip counts" in fn.plan(args).fast_primal


def test_event_log_overflow_reruns_eagerly(monkeypatch):
    fn = coarsen.symbolic(apps.bgd_hyperopt)
    grad = coarsen.grad(fn, argnums=2)
    args = bgd_args()
    expected = torch_reference(apps.bgd_hyperopt, args, (2,))[0]
    for _ in range(FAST_PRIMAL_AFTER):
        grad(*args)
    assert isinstance(fn.plan(args).fast_primal, numba_primal.NumbaPrimal)
    monkeypatch.setattr(numba_primal, "CAPACITY", 1)   # BGDHyperOpt logs three events
    assert fn.plan(args).fast_primal(args) is None
    assert rel_err(grad(*args), expected) <= TOL


def test_numba_false_never_compiles_the_primal():
    fn = coarsen.symbolic(apps.bgd_hyperopt, numba=False)
    grad = coarsen.grad(fn, argnums=2)
    args = bgd_args()
    for _ in range(FAST_PRIMAL_AFTER + 1):
        grad(*args)
    assert fn.plan(args).fast_primal is None


def test_straight_line_ready_call_on_new_inputs_and_leaves():
    """grad of straight-line code calls the jitted adjoint directly after the first call."""
    grad = coarsen.grad(apps.spring_energy, argnums=(0, 1))
    for seed in range(3):
        (px, py), _ = apps.make_spring(1, seed=seed)
        px.requires_grad_(seed == 2)            # leaves that require grad work too
        got = grad(px, py)
        for g, e in zip(got, torch_reference(apps.spring_energy, (px.detach(), py), (0, 1))):
            assert rel_err(g, e) <= TOL and g.shape == e.shape and g.dtype == e.dtype


def test_explain_names_the_recording_primal():
    text = coarsen.explain(apps.bgd_hyperopt, *bgd_args(), print_it=False)
    assert "recording primal: compiled with Numba" in text


def test_top_level_sites_record_like_the_eager_primal():
    f = load_function(TOPLEVEL)
    x = torch.tensor([0.7, -0.3, 0.4], dtype=torch.float64)
    plan = coarsen.Coarsened(f).plan((x, torch.tensor(0.1, dtype=torch.float64)))
    primal = numba_primal.NumbaPrimal(f, plan.sites)
    for a in (0.1, 0.9, 2.0):
        args = (x, torch.tensor(a, dtype=torch.float64))
        _, record = primal(args)
        with torch.no_grad():
            _, eager = plan.run(*args)
        assert record.loops == eager.loops and record.branches == eager.branches
        assert len(record.loops) == 2 and len(record.branches) == 2


def test_parameters_after_plain_tensors_in_grad_and_backward():
    """nn.Parameter shares the signature of a plain tensor: the ready-made paths must take it too."""
    fn = coarsen.symbolic(apps.bgd_hyperopt)
    grad = coarsen.grad(fn, argnums=2)
    args = bgd_args()
    for _ in range(FAST_PRIMAL_AFTER + 1):
        grad(*args)
    x, y, r = (torch.nn.Parameter(t.clone()) for t in args[:3])
    expected = torch_reference(apps.bgd_hyperopt, args, (2,))[0]
    assert rel_err(grad(x, y, r, *args[3:]), expected) <= TOL
    for _ in range(2):
        r.grad = None
        fn(x.detach(), y.detach(), r, *args[3:]).backward()
        assert rel_err(r.grad, expected) <= TOL
    (px, py), _ = apps.make_spring(1)
    sgrad = coarsen.grad(apps.spring_energy, argnums=(0, 1))
    for _ in range(2):
        sgrad(px, py)
    got = sgrad(torch.nn.Parameter(px.clone()), torch.nn.Parameter(py.clone()))
    for g, e in zip(got, torch_reference(apps.spring_energy, (px, py), (0, 1))):
        assert rel_err(g, e) <= TOL


# `*_like` constructors (with the keywords users pass) and a helper defined inside the function
LIKE_AND_INNER = """
import torch

def f(x, c, steps=40, tol=1e-3):
    def relax(z):
        return 0.9 * z + 0.05 * torch.sin(c * z)

    z = torch.ones_like(c, dtype=c.dtype)
    acc = torch.zeros_like(x, device=x.device)
    bias = torch.full_like(x, 0.25)
    for _ in range(steps):
        nz = relax(z)
        if torch.abs(nz - z) < tol:
            break
        z = nz
        acc = acc + bias * torch.cos(z)
    return torch.sum(acc * x) + z
"""


def test_like_constructors_and_inner_helpers_run_under_numba():
    f = load_function(LIKE_AND_INNER)
    fn = coarsen.symbolic(f)
    grad = coarsen.grad(fn, argnums=(0, 1))
    rng = np.random.default_rng(3)
    for _ in range(3):
        args = (torch.tensor(rng.uniform(-1, 1, 4)), torch.tensor(rng.uniform(0.5, 3), dtype=torch.float64))
        for _ in range(FAST_PRIMAL_AFTER + 1):
            got = grad(*args)
        for g, e in zip(got, torch_reference(f, args, (0, 1))):
            assert rel_err(g, e) <= TOL
    assert isinstance(fn.plan(args).fast_primal, numba_primal.NumbaPrimal), fn.plan(args).fast_primal


@pytest.mark.parametrize("keyword", ["dtype=torch.float32", "dtype=torch.int64", "device='meta'"])
def test_like_constructor_changing_dtype_or_device_is_not_translated(keyword):
    f = load_function(LIKE_AND_INNER.replace("torch.full_like(x, 0.25)", f"torch.full_like(x, 0.25, {keyword})"))
    x, c = torch.tensor([0.5, -0.2]), torch.tensor(8.0)
    plan = coarsen.Coarsened(f).plan((x.double(), c.double()))
    with pytest.raises(numba_primal.NumbaPrimalUnsupported, match="keyword"):
        numba_primal.NumbaPrimal(f, plan.sites)


def test_background_compilation_never_compiles_in_the_calling_process(monkeypatch):
    """With the child-process tier on, the first call starts the compilation and returns at once;
    the compiled primal is loaded from Numba's cache and checked at the first call after it is done."""
    from sparsad.coarsen import tiers

    monkeypatch.setenv("SPARSAD_COARSEN_BACKGROUND", "1")
    f = load_function(LIKE_AND_INNER.replace("0.25", "0.375"))  # (a module no other test compiled here)
    compiled_here = []
    original = numba_primal.load

    def spy(source, name, path, module_name):
        compiled_here.append(path is None)
        return original(source, name, path, module_name)

    monkeypatch.setattr(numba_primal, "load", spy)
    fn = coarsen.symbolic(f)
    grad = coarsen.grad(fn, argnums=0)
    args = (torch.tensor([0.3, 0.9, -0.4], dtype=torch.float64), torch.tensor(1.5, dtype=torch.float64))
    expected = torch_reference(f, args, (0,))[0]
    assert rel_err(grad(*args), expected) <= TOL
    plan = fn.plan(args)
    assert isinstance(plan.pending_primal, numba_primal.NumbaPrimal) and plan.fast_primal is None
    assert plan.pending_primal.jitted is None            # compiling in the child, not here
    assert tiers.wait(timeout=600)
    assert rel_err(grad(*args), expected) <= TOL
    assert isinstance(plan.fast_primal, numba_primal.NumbaPrimal), plan.fast_primal
    assert compiled_here == [False]                      # loaded from the module file the child compiled
    stats = plan.fast_primal.jitted.stats
    assert stats.cache_hits and not stats.cache_misses, stats


def test_kernel_cache_keeps_the_most_recently_used_modules(tmp_path):
    import os

    from sparsad.coarsen.numba_backend import prune_cache

    (tmp_path / "__pycache__").mkdir()
    for k in range(6):
        (tmp_path / f"coarsen_{k:02d}.py").write_text("x = 1\n")
        (tmp_path / "__pycache__" / f"coarsen_{k:02d}.f-3.py311.nbi").write_text("")
        (tmp_path / "__pycache__" / f"coarsen_{k:02d}.f-3.py311.1.nbc").write_text("")
        os.utime(tmp_path / f"coarsen_{k:02d}.py", (1000 + k, 1000 + k))
    os.utime(tmp_path / "coarsen_00.py", (5000, 5000))   # used recently
    (tmp_path / "k_other.py").write_text("")             # not ours to prune
    assert prune_cache(tmp_path, keep=3) == 3
    left = sorted(p.name for p in tmp_path.glob("coarsen_*.py"))
    assert left == ["coarsen_00.py", "coarsen_04.py", "coarsen_05.py"]
    cached = {p.name.split(".")[0] for p in (tmp_path / "__pycache__").iterdir()}
    assert cached == {"coarsen_00", "coarsen_04", "coarsen_05"} and (tmp_path / "k_other.py").exists()
    assert prune_cache(tmp_path, keep=3) == 0


def test_reusing_a_module_keeps_its_modification_time(tmp_path, monkeypatch):
    """Numba's on-disk cache is stamped with the module file's modification time: marking a reused
    module as recently used must not change it (it did: every later process compiled it again)."""
    import os

    from sparsad.coarsen.numba_backend import prune_cache, write_module

    directory = tmp_path / "kernels"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv("SPARSAD_KERNEL_CACHE", str(directory))
    paths = [write_module(f"x = {k}\n")[0] for k in range(4)]
    for k, path in enumerate(paths):
        os.utime(path, (1000 + k, 1000 + k))
    assert write_module("x = 0\n")[0] == paths[0]          # reused
    stat = os.stat(paths[0])
    assert stat.st_mtime == 1000 and stat.st_atime > 5000
    assert prune_cache(directory, keep=2) == 2                # ... and counted as the most recently used
    assert sorted(p.name for p in directory.glob("coarsen_*.py")) == sorted(
        os.path.basename(p) for p in (paths[0], paths[3]))


def test_inner_helper_reading_a_reassigned_variable_is_not_translated():
    f = load_function("""
import torch

def f(x, steps=5):
    a = 0.5
    def g(z):
        return a * z
    s = x * 1.0
    k = 0
    while k < steps:
        k += 1
        s = s + g(s)
        if torch.sum(s) > 100.0:
            break
    a = 2.0
    return torch.sum(g(s))
""")
    x = torch.tensor([0.2, 0.4], dtype=torch.float64)
    plan = coarsen.Coarsened(f).plan((x,))
    with pytest.raises(numba_primal.NumbaPrimalUnsupported, match="assigned more than once"):
        numba_primal.NumbaPrimal(f, plan.sites)


def test_erf_of_a_vector_runs_in_the_numba_adjoint():
    """math.erf takes floats only: a vector's erf goes element by element (was: the Numba tier failed
    to type it and every call ran the generated torch code)."""
    f = load_function("import torch\n\ndef f(x, s):\n    return torch.sum(torch.erf(x * s) * x) + torch.erf(s)\n")
    fn = coarsen.Coarsened(f)
    grad = coarsen.grad(fn, argnums=(0, 1))
    rng = np.random.default_rng(7)
    for _ in range(3):
        args = (torch.tensor(rng.uniform(-2, 2, 6), dtype=torch.float64),
                torch.tensor(rng.uniform(0.2, 2.0), dtype=torch.float64))
        for g, e in zip(grad(*args), torch_reference(f, args, (0, 1))):
            assert rel_err(g, e) <= TOL
    compiled = next(iter(fn.plan(args).compiled.values()))
    assert compiled.fn.direct() is not None, "the Numba adjoint is not in use"
