"""The coarsening examples run at a small size and produce sensible results."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bgd_hyperopt_example_lowers_the_error():
    result = _load("coarsen_bgd_hyperopt").main(small=True)
    errors = [err for _, err in result["history"]]
    assert errors[-1] < errors[0]


def test_hmc_example_samples():
    result = _load("coarsen_hmc").main(small=True)
    assert torch.isfinite(result["chain"]).all() and 0.0 <= result["acceptance"] <= 1.0
