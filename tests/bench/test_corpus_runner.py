"""The corpus benchmark's runner (bench/corpus.py): a case past its time is stopped and recorded
as a timeout (never a hang), rows are appended as they come, and a resumed run measures only the
cases not measured yet. The cases themselves are stubbed where the runner alone is under test."""
from __future__ import annotations

import csv
import json

import pytest

pytest.importorskip("jax")

from bench import corpus as C  # noqa: E402


@pytest.fixture
def results(monkeypatch, tmp_path):
    import bench.common

    monkeypatch.setattr(bench.common, "RESULTS_DIR", tmp_path)
    return tmp_path


def _rows(path):
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_a_case_past_its_time_is_stopped_and_recorded(results, capsys):
    # a real worker process, stopped by its pid: the value and first grad time out, and the
    # program's other cases are then not run at all
    C.main(quick=True, only=["lsq"], kinds=("grad",), isolate=True, case_timeout_s=0.01)
    rows = _rows(results / "corpus.csv")
    assert [(r["wrt"], r["kind"]) for r in rows] == [("", "value"), ("x", "grad"), ("A", "grad"), ("y", "grad")]
    assert {r["status"] for r in rows} == {"timeout"}
    assert "no result within 0.01 s" in rows[0]["cause"] and "earlier cases" in rows[-1]["cause"]
    out = capsys.readouterr().out
    assert "timeouts 3" in out and "load average" in out


def test_rows_are_appended_as_they_come_and_a_resumed_run_skips_them(results, monkeypatch):
    measured = []

    def fake(cfg, task, loaded):
        measured.append(task)
        name, wrt, kind = task
        return C._base_row(name, wrt, kind, status="compiled", sparsad_s=2e-3, closed_s=1e-3, ratio=2.0)

    monkeypatch.setattr(C, "run_task", fake)
    C.main(quick=True, only=["lsq"], kinds=("grad",), isolate=False)
    assert len(measured) == 4
    lines = (results / "corpus_partial.jsonl").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["value", "grad", "grad", "grad"]
    C.main(quick=True, only=["lsq", "hadamard_sum"], kinds=("grad",), isolate=False, resume=True)
    assert all(name == "hadamard_sum" for name, _, _ in measured[4:]) and len(measured) > 4
    rows = _rows(results / "corpus.csv")
    assert {r["program"] for r in rows} == {"lsq", "hadamard_sum"} and {r["status"] for r in rows} == {"compiled"}
    C.main(quick=True, only=["lsq"], kinds=("grad",), isolate=False)  # not resumed: measured again
    assert len((results / "corpus_partial.jsonl").read_text().splitlines()) == 4
    summary = C.summary_from_csv(results / "corpus.csv")  # the summary again, from the CSV alone
    assert any("median 2x" in line for line in summary)


def test_the_scalar_jvp_closed_form_never_densifies():
    import numpy as np
    import scipy.sparse as sp

    from bench.corpora.nablasd import SparseTensor

    A = sp.random(50, 40, density=0.1, format="csr", random_state=0)
    B = A.copy()
    B.data = np.arange(B.nnz, dtype=float)
    assert C.inner(A, B) == pytest.approx(float(np.sum(A.toarray() * B.toarray())))
    assert C.inner(A, B.toarray()) == pytest.approx(float(np.sum(A.toarray() * B.toarray())))
    coo = A.tocoo()
    T = SparseTensor(np.vstack([coo.row, coo.col]), coo.data, A.shape)
    U = SparseTensor(T.coords[:, ::2], np.ones(T.coords.shape[1])[::2], A.shape)
    assert C.inner(T, U) == pytest.approx(float(np.sum(T.dense() * U.dense())))
    assert C.inner(T, B.toarray()) == pytest.approx(float(np.sum(T.dense() * B.toarray())))
    assert C.inner(2.0, 3.0) == 6.0


def test_the_command_line_prints_usage_and_rejects_unknown_options(capsys):
    with pytest.raises(SystemExit) as done:  # --help prints the usage, runs nothing
        C.parse_arguments(["--help"])
    assert done.value.code == 0 and "--only" in capsys.readouterr().out
    arguments = C.parse_arguments(["--quick", "--only=ridge,spmv", "--kinds=grad,vjp", "--resume"])
    assert (arguments.quick, arguments.only, arguments.kinds, arguments.resume) == \
        (True, ["ridge", "spmv"], ("grad", "vjp"), True)
    defaults = C.parse_arguments([])
    assert (defaults.quick, defaults.only, defaults.kinds, defaults.resume, defaults.summary) == \
        (False, None, C.KINDS, None, False)
    for wrong in (["--only=no_such_program"], ["--kinds=hessian"], ["--quik"]):
        with pytest.raises(SystemExit) as done:
            C.parse_arguments(wrong)
        assert done.value.code == 2
