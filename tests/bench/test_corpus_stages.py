"""The optimizer plans corpus programs identically in fresh processes (issue 11, item 1), here on a
few programs and derivative kinds in two processes with different hash seeds; `make determinism`
runs the whole core tier in 25 processes (bench/corpus_stages.py)."""
from __future__ import annotations

from bench import corpus_stages as S


def test_a_few_corpus_programs_plan_identically_in_fresh_processes():
    # deep loop nests, a let-bound row, an n-d COO tensor, a depth-3 Jacobian tangent; every kind
    names = ["sddmm", "row_softmax", "mttkrp3_coo", "gcn_tanh_sum"]
    report = S.run(2, names, ("value", "grad", "jacobian", "jvp", "vjp"), jobs=2, timeout_s=900)
    assert report["processes"] == 2 and not report["crashed"], report["crashed"]
    assert report["cases"] >= 10
    assert report["differ"] == [] and report["failed"] == {}, report


def test_the_comparison_reports_differences_failures_and_crashes():
    same = {"a/x/grad": {"digest": "1", "failure": ""}, "b//value": {"digest": "2", "failure": ""}}
    other = {"a/x/grad": {"digest": "1", "failure": ""}, "b//value": {"digest": "3", "failure": ""}}
    failing = {"a/x/grad": {"digest": "", "failure": "InternalError: stage"}, "b//value": {"digest": "2", "failure": ""}}
    assert S.compare([same, same]) == {"processes": 2, "crashed": [], "cases": 2, "differ": [], "failed": {}}
    assert S.compare([same, other])["differ"] == ["b//value"]
    report = S.compare([same, failing, "process 2: exit 1: Segmentation fault"])
    assert report["differ"] == ["a/x/grad"] and report["failed"] == {"a/x/grad": ["InternalError: stage"]}
    assert report["crashed"] == ["process 2: exit 1: Segmentation fault"]
