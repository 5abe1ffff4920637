"""Whether an SpMM-like result is assembled in full rows depends on the memory guard's threshold
(`pattern_outputs.full_rows_fit`): a kernel chosen under one threshold is never reused under
another, in one process (the kernel cache is keyed by it, and a plan made earlier asks again at
each run) or across processes sharing the on-disk kernel cache (SPARSAD_KERNEL_CACHE)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

import sparsad
from sparsad import memory
from sparsad.codegen.numba_backend import compile_physical

SPMM = "sum(<i, r> in A) { i -> sum(<k, a> in r) a * B(k) }"
ROWS = 40_000  # the full-rows buffer of A @ B takes 2.6 MB: over a 1 MB warning threshold


def _inputs():
    A = sp.csr_matrix((np.array([2.0, -1.0, 3.0]), (np.array([3, 17, ROWS - 1]), np.array([0, 2, 1]))),
                      shape=(ROWS, 3))
    return A, np.random.default_rng(5).standard_normal((3, 8))


def _run_quietly(compiled, A, B):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a full-rows buffer over the threshold would warn
        return compiled(A=A, B=B)


def test_a_kernel_made_under_one_threshold_is_not_reused_under_another():
    A, B = _inputs()
    try:
        made_first = sparsad.compile(SPMM)
        before = made_first(A=A, B=B)  # the default limits: full rows
        assert made_first._last["kernel"].plan.result_format == "rows"
        memory.set_memory_limit(None, warn="1MB")
        fresh = sparsad.compile(SPMM)
        after = _run_quietly(fresh, A, B)
        assert fresh._last["kernel"].plan.result_format != "rows"  # not the cached full-rows kernel
        again = _run_quietly(made_first, A, B)  # its plan, made under the old threshold, asks again
        memory.set_memory_limit(None)
        back = sparsad.compile(SPMM)
        back(A=A, B=B)
        assert back._last["kernel"].plan.result_format == "rows"
    finally:
        memory.set_memory_limit(None)
    for result in (before, after, again):
        assert isinstance(result, sp.csr_matrix) and result.shape == (ROWS, 8)
        np.testing.assert_allclose(result.toarray(), A @ B, rtol=1e-14)


def test_the_kernel_cache_key_holds_the_threshold():
    A, B = _inputs()
    compiled = sparsad.compile(SPMM)
    compiled(A=A, B=B)
    plan = compiled._last
    try:
        memory.set_memory_limit(None, warn="1MB")
        low = compile_physical(plan["physical"], plan["kernel"].input_types, shape=plan["shape"])
    finally:
        memory.set_memory_limit(None)
    high = compile_physical(plan["physical"], plan["kernel"].input_types, shape=plan["shape"])
    assert low is not high and low.plan.result_format != "rows" and high.plan.result_format == "rows"


CHILD = """
import json, sys, warnings
import numpy as np, scipy.sparse as sp
import sparsad
rows = int(sys.argv[1])
A = sp.csr_matrix((np.array([2.0, -1.0, 3.0]), (np.array([3, 17, rows - 1]), np.array([0, 2, 1]))), shape=(rows, 3))
B = np.random.default_rng(5).standard_normal((3, 8))
compiled = sparsad.compile(sys.argv[2])
with warnings.catch_warnings():
    warnings.simplefilter("error")
    result = compiled(A=A, B=B)
print(json.dumps({"format": compiled._last["kernel"].plan.result_format,
                  "error": float(abs(result.toarray() - A @ B).max())}))
"""


def test_processes_with_other_thresholds_share_the_disk_cache(tmp_path: Path):
    cache = tmp_path / "kernels"
    source = Path(sparsad.__file__).resolve().parents[1]

    def run(limit: str) -> dict:
        env = {**os.environ, "SPARSAD_KERNEL_CACHE": str(cache), "SPARSAD_MEMORY_LIMIT": limit,
               "PYTHONPATH": os.pathsep.join([str(source), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, "-c", CHILD, str(ROWS), SPMM], env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    high, low, high_again = run("4GB"), run("8MB"), run("4GB")  # 8 MB: a 1 MB warning threshold
    assert high["format"] == "rows" == high_again["format"] and low["format"] != "rows"
    assert max(high["error"], low["error"], high_again["error"]) < 1e-12
