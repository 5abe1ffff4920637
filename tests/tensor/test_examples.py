"""The examples run at a small size and reach their references (tensorly, exact diagonalization)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from sparsad._data import real_tensors

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str):
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(EXAMPLES))


def test_cp_als_matches_tensorly_parafac():
    pytest.importorskip("tensorly")
    rows = load("cp_als").main(small=True)
    for row in rows:
        assert row["fit_sparsad"] == pytest.approx(row["fit_tensorly"], abs=1e-8), row["tensor"]
    assert rows[0]["fit_sparsad"] > 0.98


def test_cp_gauss_newton_reaches_the_optimum():
    pytest.importorskip("tensorly")
    result = load("cp_gn").main(small=True)
    assert result["fit_gn"] > 0.998
    assert result["fit_gn"] >= result["fit_tensorly"] - 1e-4
    assert np.all(np.diff(result["fits"]) >= -1e-12)     # accepted steps only decrease the loss


def test_tucker_hooi_matches_tensorly():
    pytest.importorskip("tensorly")
    result = load("tucker_hooi").main(small=True)
    assert result["error_sparsad"] == pytest.approx(result["error_tensorly"], abs=1e-8)


@pytest.mark.parametrize("example, rank, key", [
    ("cp_als", lambda shape: 2, "fit"),
    ("tucker_hooi", lambda shape: tuple(min(d, 3) for d in shape), "error"),
])
def test_examples_match_tensorly_on_real_tensors(data_dir, example, rank, key):
    pytest.importorskip("tensorly")
    module = load(example)
    found = list(real_tensors(limit_mb=4.0))
    if not found:
        pytest.skip("no real tensors under ../shared/data/tensors")
    for name, x in found:     # COVID19 (order 3) and Kinetic (order 4)
        row = module.compare_with_tensorly(x, rank(x.shape), 5)
        assert row[f"{key}_sparsad"] == pytest.approx(row[f"{key}_tensorly"], abs=1e-8), name


def test_dmrg_matches_exact_diagonalization():
    result = load("dmrg").main(small=True)
    assert result["energy"] == pytest.approx(result["exact"], abs=1e-8 * abs(result["exact"]))


def test_dmrg_matches_quimb():
    pytest.importorskip("quimb")
    result = load("dmrg").main(small=True)
    assert result["quimb"] == pytest.approx(result["energy"], abs=1e-8 * abs(result["energy"]))
