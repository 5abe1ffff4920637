"""A bounded slice of the fuzz campaign for `make test`: hypothesis draws the seeds of cases.py.

The long crash-isolated campaign is `make fuzz` (tests/fuzz/campaign.py). Targets owned by other
pillars that still let foreign exceptions out are listed in KNOWN and checked only for crashes here.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases  # noqa: E402

EXAMPLES = {"parser": 150, "typecheck": 10, "programs": 5, "formats": 150, "torch": 60, "tensor": 40,
            "cli": 100, "emptiness": 12}


@pytest.mark.parametrize("target", sorted(EXAMPLES))
def test_fuzz_target_raises_only_our_errors_and_agrees(target):
    @settings(max_examples=EXAMPLES[target], deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.integers(0, 2**32 - 1))
    def check(seed):
        outcome, detail = cases.run_case(target, seed)
        assert outcome in ("ok", "refused"), f"{target} seed {seed}: {outcome}: {detail}"

    check()
