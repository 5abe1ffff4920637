"""bench/nablasd.py in quick mode: it runs end to end, writes its CSV with the expected columns,
and sparsad's derivatives agree with the hand-written SciPy closed forms on every case it ran."""
from __future__ import annotations

import csv
import importlib

import pytest

pytest.importorskip("torch")
pytest.importorskip("jax")


def test_quick_run_writes_csv(capsys, monkeypatch, tmp_path):
    import bench.common

    monkeypatch.setattr(bench.common, "RESULTS_DIR", tmp_path)  # leave a full run's results alone
    nablasd = importlib.import_module("bench.nablasd")
    nablasd.main(quick=True)
    out = capsys.readouterr().out
    assert "== targets (issue 4, part 6) ==" in out
    path = tmp_path / "nablasd.csv"
    assert list(tmp_path.glob("nablasd_*.png"))
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    expected = {"kernel", "group", "matrix", "n", "nnz", "density", "tool", "status", "compile_s", "run_s",
                "ratio", "run_raw_s", "max_rel_err", "note"}
    assert expected <= set(rows[0])
    assert {r["kernel"] for r in rows} == set(nablasd.KERNELS)
    ours = [r for r in rows if r["tool"] == "sparsad"]
    assert ours and all(r["status"] in ("ok", "interpreted") for r in ours), [r["note"] for r in ours]
    # every sparsad derivative was checked against the SciPy closed form, and matched
    checked = [float(r["max_rel_err"]) for r in ours if r["max_rel_err"] != ""]
    assert len(checked) == len(ours)
    assert max(checked) <= 1e-9
    # SciPy and PyTorch dense ran on every case (small sizes), with a ratio against sparsad
    for tool in ("scipy", "torch-dense"):
        mine = [r for r in rows if r["tool"] == tool and r["group"] != "ablation"]
        assert mine and all(r["status"] == "ok" and float(r["ratio"]) > 0 for r in mine)
    assert any(r["group"] == "ablation" for r in rows)


def test_closed_forms_match_dense_reference():
    """The SciPy closed forms the benchmark compares against are themselves right (dense NumPy)."""
    import numpy as np

    nablasd = importlib.import_module("bench.nablasd")
    A = nablasd.random_matrix(30, 0.2, seed=1)
    B = nablasd.random_matrix(30, 0.2, seed=2)
    dense_a, dense_b = A.toarray(), B.toarray()
    case = nablasd.matrix_case("smmm", "t", "t", A, B)
    got = nablasd.scipy_closed_form(case, nablasd.raw_inputs(case))().toarray()
    # d/dB sum(A B) = A^T 1 1^T, read on B's pattern
    np.testing.assert_allclose(got, (dense_a.sum(axis=0)[:, None] * np.ones(30)) * (dense_b != 0), rtol=1e-12)
    case = nablasd.matrix_case("batax", "t", "t", A, None)
    inputs = nablasd.raw_inputs(case)
    got = nablasd.scipy_closed_form(case, inputs)().toarray()
    np.testing.assert_allclose(got, inputs["beta"] * dense_a.T @ dense_a, rtol=1e-12, atol=1e-14)
    case = nablasd.vector_case("vvd", "t", "t", 50, 10, seed=3)
    v1, v2 = (nablasd._dense_vector(v, 50) for v in (case.v1, case.v2))
    got = nablasd.scipy_closed_form(case, nablasd.raw_inputs(case))().toarray().ravel()
    np.testing.assert_allclose(got, v2 * (v1 != 0), rtol=1e-12)
    case = nablasd.vector_case("vva", "t", "t", 50, 10, seed=4)
    got = nablasd.scipy_closed_form(case, nablasd.raw_inputs(case))().toarray()
    np.testing.assert_allclose(got, np.diag((nablasd._dense_vector(case.v1, 50) != 0).astype(float)))
