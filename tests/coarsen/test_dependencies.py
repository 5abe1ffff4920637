"""sparsad.coarsen.dependencies: the structural pattern of a traced value, rule by rule, against the
nonzeros of dense torch Jacobians; anything without a rule is "unknown" (None)."""
from __future__ import annotations

import numpy as np
import torch

from sparsad.coarsen import dependencies as deps_module, ssa
from sparsad.coarsen.dependencies import dependencies
from sparsad.coarsen.frontend import trace

f64 = torch.float64


def _structure_and_jacobian(f, n: int, seed: int = 0):
    graph = trace(f, (torch.zeros(n, dtype=f64),))
    structure = dependencies(graph.outputs[0], graph.inputs[0])
    x = torch.randn(n, dtype=f64, generator=torch.Generator().manual_seed(seed))
    return structure, torch.func.jacfwd(f)(x).reshape(-1, n).numpy()


def test_layouts_and_reductions_hold_exactly_the_dense_nonzeros():
    def stencil(x):
        grid = x.reshape(3, 4)
        padded = torch.nn.functional.pad(grid, (1, 1, 1, 1))
        return (padded[:-2, 1:-1] + padded[2:, 1:-1] ** 2 + torch.roll(grid, 1, 0)).reshape(-1) + x[-1:] * 0.5

    structure, dense = _structure_and_jacobian(stencil, 12)
    assert np.array_equal(structure.toarray() != 0, dense != 0)

    def total(x):
        return x * x.sum()

    structure, dense = _structure_and_jacobian(total, 5)
    assert structure.nnz == 25 and np.all(dense != 0)


def test_comparisons_and_where_conditions_contribute_nothing_both_branches_do():
    def gated(x):
        return torch.where(x[:-1] > 0.0, x[1:], 2.0 * x[:-1]) + (x[1:] > 1.0) * 1.0

    structure, dense = _structure_and_jacobian(gated, 6)
    expected = np.zeros((5, 6), dtype=bool)
    expected[np.arange(5), np.arange(5)] = expected[np.arange(5), np.arange(1, 6)] = True
    assert np.array_equal(structure.toarray() != 0, expected)
    assert not np.any((dense != 0) & ~expected)


def test_nodes_and_operations_without_a_rule_are_unknown(monkeypatch):
    x = ssa.Input((4,), "x", 0)
    assert dependencies(ssa.Op((4,), "mystery", (x,)), x) is None
    loop = ssa.Loop((), (1, 0), "for", ("s",), (x,), (x,), 3)
    assert dependencies(ssa.Op((4,), "sin", (ssa.LoopOut((4,), loop, 0),)), x) is None
    monkeypatch.delitem(deps_module.OP_RULES, "sin")
    assert dependencies(ssa.Op((4,), "sin", (x,)), x) is None


def test_an_intermediate_past_the_size_bound_is_unknown():
    x = ssa.Input((50,), "x", 0)
    dense = ssa.Op((50,), "mul", (x, ssa.Reduce((), x)))
    assert dependencies(dense, x).nnz == 2500
    assert dependencies(dense, x, max_entries=1000) is None
