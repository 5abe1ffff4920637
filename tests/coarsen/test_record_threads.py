"""The eager recording primal in several threads: each call keeps its own record of trip counts and
decisions.  (The record used to live in one cell shared by every call of the plan: a call running in
another thread took over the cell, so trip counts landed in the wrong record, and the adjoint read
another call's trip counts, or the run failed with an internal IndexError and fell back for good.)"""
from __future__ import annotations

import threading

import numpy as np
import torch

from helpers_coarsen import load_function, rel_err, torch_reference  # noqa: F401
import sparsad.coarsen as coarsen
from sparsad.coarsen.frontend import trace
from sparsad.coarsen.record import instrument

SOURCE = """
import torch

def pause(k):
    return k

def f(x, a):
    s = a * 0.0
    k = 0
    while torch.sum(x) * 0.5 > s:
        s = s + a
        k = pause(k + 1)
    return s * torch.sum(x)
"""


def _records_side_by_side():
    """Call A stops inside its loop (in ``pause``) until call B, in another thread, ran from start to end."""
    module_f = load_function(SOURCE)
    module = __import__(module_f.__module__)
    x_a = torch.full((4,), 2.0, dtype=torch.float64)   # steps of 0.5 up to 4: 8 iterations
    x_b = torch.full((4,), 0.25, dtype=torch.float64)  # up to 0.5: 1 iteration
    a = torch.tensor(0.5, dtype=torch.float64)
    graph = trace(module_f, (x_a, a))
    run = instrument(module_f, [loop.site for loop in graph.loops] + list(graph.branch_sites))
    b_done, a_waiting = threading.Event(), threading.Event()
    records = {}

    def pause(k):
        if threading.current_thread().name == "A" and k == 2:
            a_waiting.set()
            assert b_done.wait(30)
        return k

    module.pause = pause

    def call(name, x):
        try:
            records[name] = run(x, a)[1]
        except Exception as why:  # (the other call took this one's record)
            records[name] = why
        finally:
            if name == "B":
                b_done.set()

    first = threading.Thread(target=call, args=("A", x_a), name="A")
    first.start()
    assert a_waiting.wait(30)
    second = threading.Thread(target=call, args=("B", x_b), name="B")
    second.start()
    second.join(30)
    first.join(30)
    site = graph.loops[0].site
    return tuple(r.completed(site)[0] if not isinstance(r, Exception) else repr(r)
                 for r in (records["A"], records["B"]))


def test_each_thread_records_its_own_trip_counts():
    assert _records_side_by_side() == (8, 1)


def test_gradients_from_many_threads_match_autograd(monkeypatch):
    monkeypatch.setenv("SPARSAD_COARSEN_BACKGROUND", "0")
    f = load_function(SOURCE.replace("k = pause(k + 1)", "k = k + 1"))
    gradient = coarsen.grad(f, argnums=(0, 1), numba=False)
    rng = np.random.default_rng(0)
    calls = [(torch.tensor(rng.uniform(0.1, 3.0, 4), dtype=torch.float64),
              torch.tensor(rng.uniform(0.2, 0.6), dtype=torch.float64)) for _ in range(24)]
    gradient(*calls[0])
    errors, failures = [], []

    def work(chunk):
        try:
            for args in chunk:
                got = gradient(*args)
                errors.append(max(rel_err(g, e) for g, e in zip(got, torch_reference(f, args, (0, 1)))))
        except Exception as why:  # (reported below: the assertion names it)
            failures.append(why)

    threads = [threading.Thread(target=work, args=(calls[k::3],)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures and len(errors) == len(calls) and max(errors) <= 1e-12
