"""Shared helpers of the coarsening tests: autograd references and relative errors."""
from __future__ import annotations

import importlib.util
import itertools
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import torch

_DIR = Path(tempfile.mkdtemp(prefix="sparsad_coarsen_tests_"))
_COUNTER = itertools.count()


def torch_reference(fn, args, argnums):
    """Gradients of ``fn`` by plain PyTorch autograd."""
    call = [a.detach().clone().requires_grad_(i in argnums) if isinstance(a, torch.Tensor) else a
            for i, a in enumerate(args)]
    out = fn(*call)
    grads = torch.autograd.grad(out, [call[i] for i in argnums], allow_unused=True)
    return [torch.zeros_like(call[i]) if g is None else g for g, i in zip(grads, argnums)]


def rel_err(got, expected) -> float:
    got, expected = torch.as_tensor(got), torch.as_tensor(expected)
    scale = max(expected.abs().max().item(), 1e-300)
    return (got - expected).abs().max().item() / scale


def load_function(source: str, name: str = "f"):
    """Write ``source`` to a real file (coarsening reads the source) and import ``name`` from it."""
    path = _DIR / f"generated_{next(_COUNTER)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


@pytest.fixture(autouse=True)
def no_fallback():
    """Imported by a test module: any CoarsenFallbackWarning there is an error."""
    from sparsad.coarsen.plan import CoarsenFallbackWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        yield


def bgd_args(size=40, r=0.2):
    """BGDHyperOpt's arguments (configuration 1 data at `size` points, learning rate r)."""
    from sparsad.coarsen import apps

    (x, y, _), static = apps.make_bgd(1, size=size)
    return (x, y, torch.tensor(r, dtype=torch.float64)) + static
