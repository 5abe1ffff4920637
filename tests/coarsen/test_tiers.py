"""Background compilation children are bounded: at most ``max_running()`` compile at once, the
rest wait in a queue and start as earlier ones finish (a suite coarsening many functions used to
start dozens of compilers side by side)."""
from __future__ import annotations

import textwrap

from sparsad.coarsen import tiers


def _module(tmp_path, name: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent("""
        import time
        def work(seconds):
            time.sleep(seconds)
    """))
    return str(path)


def test_children_beyond_the_bound_wait_in_a_queue_and_all_finish(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSAD_COARSEN_CHILDREN", "2")
    children = [tiers.start(_module(tmp_path, f"m{k}"), f"m{k}", "work", [0.3]) for k in range(5)]
    assert sum(c.running() for c in children) <= 2
    assert sum(c.process is None for c in children) >= 3  # queued, not started
    assert tiers.wait(timeout=120)
    assert all(c.succeeded() for c in children)
    for child in children:
        child.finish()


def test_a_queued_child_that_is_stopped_never_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSAD_COARSEN_CHILDREN", "1")
    first = tiers.start(_module(tmp_path, "a"), "a", "work", [0.5])
    second = tiers.start(_module(tmp_path, "b"), "b", "work", [0.0])
    assert second.process is None
    second.stop()
    assert second.done() and not second.succeeded() and second.process is None
    assert tiers.wait(timeout=120) and first.succeeded()
    first.finish()


def test_the_bound_defaults_to_half_the_cpus_and_ignores_nonsense(monkeypatch):
    monkeypatch.setenv("SPARSAD_COARSEN_CHILDREN", "many")
    assert tiers.max_running() >= 1
    monkeypatch.setenv("SPARSAD_COARSEN_CHILDREN", "0")
    assert tiers.max_running() == 1
