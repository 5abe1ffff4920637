"""Every public function and class (the `__all__` of each public module) has a docstring with a
runnable example; tests/test_doctests.py runs the examples."""
from __future__ import annotations

import importlib
import inspect

import pytest

# module -> whether it needs an optional dependency (the module is skipped without it)
PUBLIC_MODULES = {
    "sparsad": None,
    "sparsad.formats": None,
    "sparsad.tensor": None,
    "sparsad.ops": None,
    "sparsad.torch": "torch",
    "sparsad.coarsen": "torch",
    "sparsad.jax": "jax",
}


def _public_callables(module_name: str):
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    assert names, f"{module_name} has no __all__: its public names are not listed"
    for name in names:
        obj = getattr(module, name)
        if inspect.ismodule(obj) or name.startswith("__") or not callable(obj):
            continue  # submodules, __version__, constants (formats, name tables)
        yield name, obj


@pytest.mark.parametrize("module_name", sorted(PUBLIC_MODULES))
def test_every_public_name_has_a_docstring_example(module_name):
    dependency = PUBLIC_MODULES[module_name]
    if dependency:
        pytest.importorskip(dependency)
    lacking, undocumented = [], []
    for name, obj in _public_callables(module_name):
        doc = inspect.getdoc(obj) or ""
        if isinstance(obj, type) and issubclass(obj, (BaseException, Warning)):
            if not doc:  # an error class says when it is raised; an example adds nothing
                undocumented.append(name)
            continue
        if ">>>" not in doc:
            lacking.append(name)
    assert not undocumented, f"{module_name}: no docstring for {undocumented}"
    assert not lacking, f"{module_name}: no runnable example (>>>) in the docstring of {lacking}"

