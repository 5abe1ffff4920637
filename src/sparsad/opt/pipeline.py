"""The order of the passes (∇SD Fig. 8): each a pure function Program -> Program.

    sparsity -> storage -> fuse -> aggregate -> eqsat -> normalize -> fuse -> dps -> cse -> interchange

`optimize` records every stage so that each can be shown and checked by the interpreter.
"""
from __future__ import annotations

from typing import Any, Mapping

from sparsad.lang.syntax import Expr
from sparsad.lang.types import Type
from sparsad.opt.aggregate import aggregate
from sparsad.opt.cse import eliminate_common_subexpressions
from sparsad.opt.dps import push_singletons_inward
from sparsad.opt.fuse import fuse
from sparsad.opt.interchange import interchange
from sparsad.opt.normalize import normalize_products
from sparsad.opt.sparsity import propagate_sparsity
from sparsad.opt.storage import compose_storage, loop_sizes, physical_inputs


OPTIONAL_PASSES = frozenset({"aggregate", "eqsat", "normalize", "dps", "cse", "interchange"})


def optimize(expr: Expr, types: Mapping[str, Type], stored: Mapping[str, Any],
             passes: frozenset[str] = OPTIONAL_PASSES) -> tuple[Expr, dict[str, Expr]]:
    """Optimize a logical program for inputs held in storage formats.

    `types`: logical types of every input; `stored`: name -> StoredTensor for the inputs that
    are tensors; `passes`: which optional passes run (for ablations). Returns the physical
    program and every stage by name.
    """
    unknown = set(passes) - OPTIONAL_PASSES
    if unknown:
        raise ValueError(f"unknown passes {sorted(unknown)}; optional passes are {sorted(OPTIONAL_PASSES)}")
    _, array_types = physical_inputs(stored)
    physical_types = {n: t for n, t in types.items() if n not in stored}
    physical_types.update(array_types)
    stages: dict[str, Expr] = {}
    expr = stages["sparsity"] = propagate_sparsity(expr, dict(types))
    expr = stages["storage"] = compose_storage(expr, stored)
    expr = stages["fuse"] = fuse(expr, physical_types)
    if "aggregate" in passes:
        expr = stages["aggregate"] = aggregate(expr, physical_types)
    if "eqsat" in passes:
        from sparsad.opt.egraph import saturate  # egglog is heavy: import it only when a program is compiled

        expr = stages["eqsat"] = saturate(expr, physical_types, loop_sizes(stored))
    if "normalize" in passes:
        expr = stages["normalize"] = normalize_products(expr, physical_types)
        expr = stages["fuse-normalized"] = fuse(expr, physical_types)
    if "dps" in passes:
        expr = stages["dps"] = push_singletons_inward(expr, physical_types)
    if "cse" in passes:
        expr = stages["cse"] = eliminate_common_subexpressions(expr, physical_types)
    if "interchange" in passes:
        expr = stages["interchange"] = interchange(expr, physical_types)
    return expr, stages
