"""Most coarsening tests look at what a call built right after it, so their calls finish their
symbolic work whatever the machine's load (no wall deadline, ``budget.call_deadline``); a test
that sets ``SPARSAD_COARSEN_WAIT_S`` itself (monkeypatch) overrides this."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_wall_deadline(monkeypatch):
    monkeypatch.setenv("SPARSAD_COARSEN_WAIT_S", "inf")
