"""The order of the passes (∇SD Fig. 8): each a pure function Program -> Program.

    sparsity -> storage -> fuse -> aggregate -> eqsat -> normalize -> fuse -> dps -> cse -> hoist -> stored_rows
    -> positions -> interchange -> transposed_lets

`optimize` records every stage so that each can be shown and checked by the interpreter.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping

from sparsad.errors import InternalError, OptimizationWarning, SparsadError
from sparsad.lang.syntax import Expr
from sparsad.lang.typecheck import infer
from sparsad.lang.types import Int, Type
from sparsad.opt.aggregate import aggregate
from sparsad.opt.cse import eliminate_common_subexpressions
from sparsad.opt.dps import push_singletons_inward
from sparsad.opt.fuse import fuse
from sparsad.opt.hoist import hoist_invariant_dictionaries
from sparsad.opt.interchange import derived_types, interchange
from sparsad.opt.normalize import normalize_products
from sparsad.opt.positions import index_by_position
from sparsad.opt.sparsity import propagate_sparsity
from sparsad.opt.stored_rows import read_stored_rows
from sparsad.opt.transposed_lets import read_transposed_lets
from sparsad.opt.storage import compose_storage, loop_sizes, physical_inputs


OPTIONAL_PASSES = frozenset({"aggregate", "eqsat", "normalize", "dps", "cse", "hoist", "stored_rows", "positions",
                             "interchange"})


def checked_stage(name: str, expr: Expr, types: Mapping[str, Type]) -> Expr:
    """`expr` if it type-checks against the physical input types (and the arrays `interchange`
    derives from them), else an InternalError naming the stage."""
    try:
        infer(expr, {**types, **derived_types(expr, dict(types))})
    except SparsadError as error:
        raise InternalError(f"the {name!r} stage of the optimizer produced an ill-typed program ({error})") \
            from error
    return expr


def optional_pass(name: str, run: Callable[[Expr], Expr], expr: Expr, types: Mapping[str, Type],
                  where: str = "") -> Expr:
    """`run(expr)`, type-checked; if the pass fails inside, `expr` unchanged with an OptimizationWarning."""
    try:
        return checked_stage(name, run(expr), types)
    except RecursionError:
        reason = "recursion too deep"
    except Exception as error:  # an optional pass must never fail the user's program
        reason = f"{type(error).__name__}: {error}"
    warnings.warn(f"sparsad: optimization pass {name!r} failed{where} and was skipped ({reason[:300]}); "
                  "the result is unchanged, perhaps slower", OptimizationWarning, stacklevel=4)
    return expr


def _saturate(expr: Expr, types, sizes) -> Expr:
    from sparsad.opt.egraph import saturate  # egglog is heavy: imported when a program is first compiled

    return saturate(expr, types, sizes)


def optimize(expr: Expr, types: Mapping[str, Type], stored: Mapping[str, Any],
             passes: frozenset[str] = OPTIONAL_PASSES, where: str = "") -> tuple[Expr, dict[str, Expr]]:
    """Optimize a logical program for inputs held in storage formats.

    `types`: logical types of every input; `stored`: name -> StoredTensor for the inputs that
    are tensors; `passes`: which optional passes run (for ablations); `where` names the program in
    warnings. Returns the physical program and every stage by name. Every stage type-checks: a
    required stage that does not raises InternalError; an optional pass that fails inside is
    skipped with an OptimizationWarning naming it.
    """
    unknown = set(passes) - OPTIONAL_PASSES
    if unknown:
        raise ValueError(f"unknown passes {sorted(unknown)}; optional passes are {sorted(OPTIONAL_PASSES)}")
    _, array_types = physical_inputs(stored)
    physical_types = {n: t for n, t in types.items() if n not in stored}
    physical_types.update(array_types)
    # a dense level's range (0:e) over one of these needs no key guard (keys into inputs are checked)
    extents = frozenset(n for n, t in array_types.items() if isinstance(t, Int))
    stages: dict[str, Expr] = {}
    expr = stages["sparsity"] = propagate_sparsity(expr, dict(types))
    expr = stages["storage"] = checked_stage("storage", compose_storage(expr, stored), physical_types)
    expr = stages["fuse"] = checked_stage("fuse", fuse(expr, physical_types, extents), physical_types)
    optional = [
        ("aggregate", "aggregate", lambda e: aggregate(e, physical_types)),
        ("eqsat", "eqsat", lambda e: _saturate(e, physical_types, loop_sizes(stored))),
        ("normalize", "normalize", lambda e: normalize_products(e, physical_types)),
        ("normalize", "fuse-normalized", lambda e: fuse(e, physical_types, extents)),
        ("dps", "dps", lambda e: push_singletons_inward(e, physical_types)),
        ("cse", "cse", lambda e: eliminate_common_subexpressions(e, physical_types)),
        ("hoist", "hoist", lambda e: hoist_invariant_dictionaries(e, physical_types)),
        ("stored_rows", "stored_rows", lambda e: read_stored_rows(e, physical_types)),
        ("positions", "positions", lambda e: index_by_position(e, physical_types)),
        ("interchange", "interchange", lambda e: interchange(e, physical_types)),
        ("interchange", "transposed_lets", lambda e: read_transposed_lets(e, physical_types)),
    ]
    for switch, stage, run in optional:
        if switch in passes:
            expr = stages[stage] = optional_pass(stage, run, expr, physical_types, where)
    return expr, stages
