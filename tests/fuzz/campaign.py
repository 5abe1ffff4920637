"""The long fuzz campaign (`make fuzz`): every target of cases.py, crash-isolated, with a report.

    python tests/fuzz/campaign.py --minutes 60 --report fuzz-report.json

Cases run in batches inside worker subprocesses (this file with --worker). Before each case the
worker writes its seed to a progress file, so a worker that dies (a crash: a signal, or an exit
without its summary) or runs past the per-case timeout (a hang, then killed) is charged to that
seed, and the campaign goes on after it. The report lists counts per target and outcome, and every
crash, hang, foreign exception and disagreement with its seed (`--replay TARGET SEED` reruns one).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BAD = ("crash", "hang", "foreign", "disagree")


def worker(target: str, first: int, count: int, progress: str) -> None:
    sys.path.insert(0, str(HERE))
    import cases

    counts: collections.Counter = collections.Counter()
    findings = []
    for seed in range(first, first + count):
        with open(progress, "w") as handle:
            handle.write(str(seed))
        outcome, detail = cases.run_case(target, seed)
        counts[outcome] += 1
        if outcome in BAD:
            findings.append({"target": target, "seed": seed, "outcome": outcome, "detail": detail})
    print(json.dumps({"counts": counts, "findings": findings}))


def run_batch(target: str, first: int, count: int, case_timeout: float) -> tuple[dict, list, int]:
    """(counts, findings, next seed) for one worker run of up to `count` cases."""
    with tempfile.NamedTemporaryFile("w", suffix=".progress", delete=False) as handle:
        progress = Path(handle.name)
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", target, str(first), str(count),
               str(progress)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
        outcome = None
        while process.poll() is None:
            time.sleep(0.2)
            if time.time() - progress.stat().st_mtime > case_timeout:  # one case ran too long
                process.kill()
                process.wait()
                outcome, detail = "hang", f"one case ran past {case_timeout:.0f} s"
        out.seek(0)
        err.seek(0)
        lines = out.read().strip().splitlines()
        if outcome is None:
            if process.returncode == 0 and lines:
                summary = json.loads(lines[-1])
                progress.unlink(missing_ok=True)
                return collections.Counter(summary["counts"]), summary["findings"], first + count
            outcome, detail = "crash", f"exit status {process.returncode}: {_crash_site(err.read())}"
    try:
        seed = int(progress.read_text() or first)
    except (OSError, ValueError):
        seed = first
    progress.unlink(missing_ok=True)
    # the outcomes of the batch's earlier cases died with the worker: only the failure is counted
    return collections.Counter({outcome: 1}), [{"target": target, "seed": seed, "outcome": outcome,
                                                 "detail": detail}], seed + 1


def _crash_site(stderr: str) -> str:
    """The faulthandler lines that say where the worker died (not its list of loaded modules)."""
    lines = stderr.splitlines()
    keep = [line.strip() for line in lines if line.startswith(("Fatal Python", "  File", "Current thread"))]
    return " | ".join(keep[:10]) or stderr.strip()[-400:]


def campaign(minutes: float, targets: list[str], batch: int, case_timeout: float, report: Path,
             start_seed: int) -> dict:
    deadline = time.monotonic() + minutes * 60
    totals = {t: collections.Counter() for t in targets}
    findings: list = []
    next_seed = {t: start_seed for t in targets}
    size = {t: batch for t in targets}  # cases per worker, tuned so each target gets equal time
    rounds = 0
    while time.monotonic() < deadline:
        for target in targets:
            if time.monotonic() >= deadline:
                break
            started = time.monotonic()
            counts, found, next_seed[target] = run_batch(target, next_seed[target], size[target], case_timeout)
            totals[target].update(counts)
            findings.extend(found)
            spent = max(time.monotonic() - started, 1e-3)
            share = max(minutes * 60 / (4 * len(targets)), 20.0)  # about four rounds at least
            size[target] = int(min(max(size[target] * share / spent, 5), 5000))
        rounds += 1
        write_report(report, totals, findings, minutes, rounds)
    return write_report(report, totals, findings, minutes, rounds)


def write_report(path: Path, totals, findings, minutes, rounds) -> dict:
    cases = sum(sum(c.values()) for c in totals.values())
    bad = collections.Counter(f["outcome"] for f in findings)
    data = {"minutes": minutes, "rounds": rounds, "cases": cases,
            "summary": {k: bad.get(k, 0) for k in BAD},
            "per_target": {t: dict(c) for t, c in totals.items()}, "findings": findings}
    path.write_text(json.dumps(data, indent=1))
    return data


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return 0
    sys.path.insert(0, str(HERE))
    import cases

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--targets", default=",".join(cases.TARGETS))
    parser.add_argument("--batch", type=int, default=25, help="cases per worker process")
    parser.add_argument("--case-timeout", type=float, default=60.0, help="seconds one case may take")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 1_000_000 * 1000)
    parser.add_argument("--report", type=Path, default=Path("fuzz-report.json"))
    parser.add_argument("--replay", nargs=2, metavar=("TARGET", "SEED"))
    args = parser.parse_args()
    if args.replay:
        print(cases.run_case(args.replay[0], int(args.replay[1])))
        return 0
    targets = [t for t in args.targets.split(",") if t]
    unknown = [t for t in targets if t not in cases.TARGETS and t != "selftest"]
    if unknown:
        parser.error(f"unknown targets {unknown}; the targets are {list(cases.TARGETS)}")
    data = campaign(args.minutes, targets, args.batch, args.case_timeout, args.report, args.seed)
    print(f"{data['cases']} cases in {args.minutes} min (seeds from {args.seed}); report: {args.report}")
    for target, counts in data["per_target"].items():
        print(f"  {target:10s} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print("  bad: " + ", ".join(f"{k} {v}" for k, v in data["summary"].items()))
    return 1 if any(data["summary"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
