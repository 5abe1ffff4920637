"""Every `>>>` example in a docstring of the package runs and prints what it says."""
from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import sparsad

# Modules whose import needs an optional framework are skipped when it is missing.
MODULES = sorted(info.name for info in pkgutil.walk_packages(sparsad.__path__, "sparsad.")
                 if not info.name.endswith("__main__"))


def module_examples(name: str) -> list[doctest.DocTest]:
    try:
        module = importlib.import_module(name)
    except ImportError as error:
        pytest.skip(f"{name} needs {error.name}")
    tests = doctest.DocTestFinder(exclude_empty=True).find(module, name)
    return [test for test in tests if test.examples]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    for test in module_examples(name):
        # globals kept, not cleared: torch.compile's guards hold an example's globals and delete
        # their own entries from them when collected (a KeyError at exit from a cleared dict)
        runner.run(test, out=report.append, clear_globs=False)
    assert runner.failures == 0, "".join(report)
