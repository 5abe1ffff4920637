"""Every public name of sparsad.tensor documents itself with a runnable example.

tests/test_doctests.py runs the examples; this checks that none is missing.
"""
from __future__ import annotations

import sparsad.tensor as T


def test_every_public_name_has_a_docstring_example():
    missing = [name for name in T.__all__ if ">>>" not in (getattr(T, name).__doc__ or "")]
    assert not missing, f"public names without a >>> example: {missing}"
