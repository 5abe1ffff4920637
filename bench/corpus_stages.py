"""Determinism of the optimizer on the corpus (issue 11, item 1): the same program, formats and
input types give the same printed stages and kernel source in every process.

Each worker process plans every case of the corpus (the value and each derivative kind for each
input differentiated) without running a kernel, prints every stage of the pipeline, the
generated kernel source (or why it is interpreted) and every warning the planning raised, and
reports one digest per case. The driver starts N fresh processes with different hash seeds and
compares them case by case. A failure is a case whose digests differ between processes, or
that raised, or whose planning warned that a pass failed (an internal fault made visible).

    python -m bench.corpus_stages --processes 25 [--tier core|full] [--only spmv,lsq] [--jobs 2]

Exit status 0 when every case agrees in every process without a failure (make determinism).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ("spmv", "lsq", "spmm_fro_loss", "spgemm", "sddmm", "hadamard_sum", "row_softmax", "softmax_xent",
        "gcn_tanh_sum", "gcn_two_layer", "mttkrp3_coo", "ttv3_csf", "multilinear4_coo", "attn_output",
        "laplacian_quad", "ridge", "logreg", "softmax_regression", "mf_sq", "conv1d", "window_sumsq",
        "row_block_spmv_sum", "cosine_similarity", "trace_of_product")


def names_of(tier: str, only: list[str] | None = None) -> list[str]:
    from bench.corpora.nablasd import ENTRIES

    if only:
        unknown = [n for n in only if n not in ENTRIES]
        if unknown:
            raise SystemExit(f"unknown corpus programs {unknown}")
        return list(only)
    return sorted(ENTRIES) if tier == "full" else list(CORE)


def _planned(entry, wrt: str, kind: str, args: dict):
    """The compiled program of one case and its arguments under its internal input names (a
    jvp's `tangent=` becomes the seed input the derivative program reads)."""
    import sparsad
    from bench import corpus as C

    if kind == "value":
        return sparsad.compile(entry.text), args
    derivative = C.make_derivative(entry, wrt, kind)
    args = dict(args)
    args.update(derivative._take_seeds(args))
    return derivative._compiled_for(wrt), args


def case_text(P, wrt: str, kind: str) -> str:
    """Every stage, the kernel source (or the reason it is interpreted) and the warnings of
    planning one case, printed."""
    from bench import corpus as C
    from sparsad.lang.printer import to_text

    args = dict(P.inputs) if kind == "value" else C.call_arguments(P, wrt, kind, C.direction(P, wrt, kind))
    compiled, args = _planned(P.entry, wrt, kind, args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = compiled.plan(args)
    out = [f"## derivative\n{to_text(plan['logical'])}"]
    out += [f"## {stage}\n{to_text(expr)}" for stage, expr in plan["stages"].items()]
    kernel = plan.get("kernel")
    out.append(f"## code\n{kernel.source if kernel is not None else '# interpreted: ' + str(plan['reason'])}")
    out += [f"## warning {w.category.__name__}: {w.message}" for w in caught]
    return "\n".join(out)


def worker(names: list[str], kinds: tuple[str, ...]) -> dict:
    """{case: {"digest", "failure"}} for every case of the named programs, in this process."""
    from bench import corpus as C
    from bench.corpora.nablasd import ENTRIES

    results: dict[str, dict] = {}
    for name in names:
        P = C.prepare(ENTRIES[name], real=False)
        cases = [("", "value")] if "value" in kinds else []
        cases += [(wrt, kind) for _, wrt, kind in C.cases([ENTRIES[name]], tuple(k for k in kinds if k != "value"))]
        for wrt, kind in cases:
            key = f"{name}/{wrt}/{kind}"
            try:
                text = case_text(P, wrt, kind)
            except Exception as error:  # noqa: BLE001 - recorded: a failure of this case
                results[key] = {"digest": "", "failure": f"{type(error).__name__}: {error}"[:500]}
                continue
            failure = ""
            for line in text.splitlines():
                if line.startswith("## warning OptimizationWarning"):  # a pass failed inside
                    failure = line[len("## warning "):][:500]
                    break
            results[key] = {"digest": hashlib.sha256(text.encode()).hexdigest(), "failure": failure}
    return results


def run(processes: int, names: list[str], kinds: tuple[str, ...], jobs: int = 1,
        timeout_s: float = 7200.0, progress: bool = False) -> dict:
    """Start `processes` fresh workers (hash seeds 0, 1, ...), `jobs` at a time; compare."""
    command = [sys.executable, "-m", "bench.corpus_stages", "--worker", "--only", ",".join(names),
               "--kinds", ",".join(kinds)]
    env_base = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT),
                                                                          os.environ.get("PYTHONPATH", "")])))
    runs: list[dict | str] = []
    begin = time.time()
    pending = list(range(processes))
    active: list[tuple[int, subprocess.Popen, float]] = []
    while pending or active:
        while pending and len(active) < jobs:
            seed = pending.pop(0)
            env = dict(env_base, PYTHONHASHSEED=str(seed))
            active.append((seed, subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE, text=True), time.time()))
        seed, proc, started = active.pop(0)
        try:
            out, err = proc.communicate(timeout=max(1.0, timeout_s - (time.time() - started)))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            runs.append(f"process {seed}: timed out")
            continue
        if proc.returncode != 0:
            runs.append(f"process {seed}: exit {proc.returncode}: {err[-1500:]}")
        else:
            runs.append(json.loads(out.strip().splitlines()[-1]))
        if progress:  # so far: a long run shows its state (and what it found) as it goes
            so_far = compare(runs)
            print(f"after {len(runs)} processes ({time.time() - begin:.0f} s): {len(so_far['differ'])} cases "
                  f"differ, {len(so_far['failed'])} failed, {len(so_far['crashed'])} crashed", flush=True)
    return compare(runs)


def compare(runs: list) -> dict:
    """Cases whose digests differ, cases that failed in some process, and crashed processes."""
    crashed = [r for r in runs if isinstance(r, str)]
    done = [r for r in runs if isinstance(r, dict)]
    cases = sorted({case for r in done for case in r})
    differ, failed = [], {}
    for case in cases:
        digests = {r[case]["digest"] for r in done if case in r}
        if len(digests) > 1 or any(case not in r for r in done):
            differ.append(case)
        causes = sorted({r[case]["failure"] for r in done if case in r and r[case]["failure"]})
        if causes:
            failed[case] = causes
    return {"processes": len(runs), "crashed": crashed, "cases": len(cases), "differ": differ, "failed": failed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=25)
    parser.add_argument("--tier", choices=("core", "full"), default="core")
    parser.add_argument("--only", default="")
    parser.add_argument("--kinds", default="value,grad,jacobian,jvp,vjp")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = names_of(args.tier, [n for n in args.only.split(",") if n] or None)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if args.worker:
        print(json.dumps(worker(names, kinds)))
        return 0
    started = time.time()
    report = run(args.processes, names, kinds, jobs=args.jobs, progress=True)
    print(f"{report['processes']} processes x {report['cases']} cases in {time.time() - started:.0f} s: "
          f"{len(report['differ'])} differ between processes, {len(report['failed'])} failed, "
          f"{len(report['crashed'])} processes crashed")
    for case in report["differ"]:
        print(f"  differs: {case}")
    for case, causes in report["failed"].items():
        print(f"  failed: {case}: {causes[0]}")
    for crash in report["crashed"]:
        print(f"  {crash}")
    return 0 if not (report["differ"] or report["failed"] or report["crashed"]) else 1


if __name__ == "__main__":
    sys.exit(main())
