"""Nests of loops over compressed levels whose body reads only the innermost position: one loop.

A sum over every leaf of a CSF tensor (or every entry of a CSR matrix) lowers to one loop per
level, each over its parent's run of positions: `for i < len: for p in pos1[i]..pos1[i+1]: for q
in pos2[p]..pos2[p+1]: for r in pos3[q]..pos3[q+1]: body(r)`. When the body reads nothing of the
outer loops (no key, no outer position: `sum ... t * t`, or a gradient written on the input's
own entries), the nest visits the positions r of one contiguous range in increasing order, each
once, provided every pointer array is non-decreasing over the part the nest reads. Short inner
runs (an order-4 tensor's fibres hold a handful of entries) then cost a loop start each; one
flat loop over the range costs one, and vectorizes (for `sum t * t`, `codegen.dense_loops` then
makes it a dot product).

Pointer arrays are non-decreasing in every valid tensor, but an input's arrays may have been
written in place since they were validated: the rewrite keeps the nest and chooses at run time.
The kernel first checks, level by level, that each pointer array is non-decreasing over the
range the nest would read (one vectorized pass over the pointers, fewer than the entries), with
every end point in bounds, and runs the flat loop only then; otherwise the original nest runs,
exactly as before. The flat loop reads the same positions as the nest, so the kernel's bounds
guard covers it.

Only output plans whose writes the body makes by position or into one number are rewritten
(`scalar`, `entries`), and only kernels without local containers (their fill counts and rows
follow loop variables): everything else is left as lowered.

>>> from sparsad.codegen.ir import Accumulate, For, Load, Num, Op, Ref
>>> body = (Accumulate("out", (), Load("v", Ref("r"))),)
>>> inner = For("r", Load("pos", Ref("i")), Load("pos", Op("+", Ref("i"), Num(1))), body)
>>> nest = (For("i", Num(0), Ref("n"), (inner,)),)
>>> [type(s).__name__ for s in flat_nests(nest, "scalar", {})]
['Assign', 'IfThen', 'IfThen']
"""
from __future__ import annotations

from dataclasses import replace
from itertools import count
from typing import Iterable

from sparsad.codegen import outputs as O
from sparsad.codegen.ir import (OUTPUT, Accumulate, AddTo, Assign, For, IfThen, IRExpr, Length, Load,
                                LoopProgram, Num, Op, Ref, Stmt, Unary)
from sparsad.codegen.ir_reads import UNKNOWN, reads

PLAN_KINDS = ("scalar", "entries")  # writes by position or into one number: no key of an outer loop


def flatten_position_nests(loops: LoopProgram, plan: O.OutputPlan) -> LoopProgram:
    """`loops` with every nest of compressed-level loops whose body reads only the innermost
    position run as one loop when its pointers are non-decreasing (see the module docstring)."""
    if plan.kind not in PLAN_KINDS or loops.containers:
        return loops
    leaves = dict(plan.entries.leaves) if plan.kind == "entries" and plan.entries is not None else {}
    body = flat_nests(loops.body, plan.kind, leaves)
    return loops if body == loops.body else replace(loops, body=body)


def flat_nests(program: tuple[Stmt, ...], kind: str, leaves: dict) -> tuple[Stmt, ...]:
    """The statements of a kernel with each flattenable nest rewritten (`leaves`: an entries
    plan's key name -> position variable)."""
    names = (f"_fl{n}" for n in count())

    def visit(stmts: Iterable[Stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for stmt in stmts:
            if isinstance(stmt, For):
                rewritten = _flatten(stmt, leaves, _reads_outside(program, stmt, leaves), names)
                if rewritten is not None:
                    out += rewritten
                    continue
                stmt = replace(stmt, body=tuple(visit(stmt.body)))
            elif isinstance(stmt, IfThen):
                stmt = replace(stmt, then=tuple(visit(stmt.then)), orelse=tuple(visit(stmt.orelse)))
            out.append(stmt)
        return out

    return tuple(visit(program))


def _reads_outside(stmts: Iterable[Stmt], nest: For, leaves: dict) -> frozenset[str]:
    """Every name the statements read, but for the statement `nest` (by identity) and inside it."""
    found: set[str] = set()
    for stmt in stmts:
        if stmt is nest:
            continue
        match stmt:
            case For(start=s, end=e, body=b):
                found |= reads(s) | reads(e) | _reads_outside(b, nest, leaves)
            case IfThen(cond=c, then=t, orelse=o):
                found |= reads(c) | _reads_outside(t + o, nest, leaves)
            case _:
                found |= _reads(stmt, leaves)
    return frozenset(found)


def _child(loop: For) -> tuple[tuple[Assign, ...], For, str] | None:
    """(the assignments before it, the one loop, its pointer array) when `loop`'s body is
    assignments then one loop over `pos[v]..pos[v + 1]` (v = `loop.var`), else None."""
    if not loop.body:
        return None
    *assigns, last = loop.body
    if not isinstance(last, For) or not all(isinstance(a, Assign) for a in assigns):
        return None
    start, end, var = last.start, last.end, Ref(loop.var)
    if isinstance(start, Load) and isinstance(end, Load) and start.array == end.array and \
            start.index == var and end.index in (Op("+", var, Num(1)), Op("+", Num(1), var)) and \
            not start.guarded and not end.guarded:
        return tuple(assigns), last, start.array
    return None


def _flatten(top: For, leaves: dict, outside: frozenset, names) -> list[Stmt] | None:
    """The statements replacing the nest at `top`, or None when it is not one or its body reads
    an outer loop (`outside`: what the rest of the kernel reads)."""
    if UNKNOWN in outside:
        return None
    chain, pointers, dropped = [top], [], set()
    loop = top
    while (found := _child(loop)) is not None:
        assigns, loop, pointer = found
        dropped.update(a.name for a in assigns)
        chain.append(loop)
        pointers.append(pointer)
    if len(chain) < 2:
        return None
    inner = chain[-1]
    body = _live(inner.body, leaves, outside, dropped)
    outer_names = {loop.var for loop in chain[:-1]} | dropped
    if outer_names & outside:  # read after the nest (never, as lowered: names are unique)
        return None
    body_reads = frozenset().union(*(_reads(s, leaves) for s in body))
    if UNKNOWN in body_reads or body_reads & outer_names or any(p in outer_names for p in pointers):
        return None
    return _checked_flat(top, pointers, replace(inner, body=tuple(body)), next(names))


def _live(body: tuple[Stmt, ...], leaves: dict, outside: frozenset, dropped: set) -> list[Stmt]:
    """The innermost body without the assignments that no other statement of it (in any
    iteration) nor the rest of the kernel reads, as emitted (an entries write reads its
    position, not its keys); their names join `dropped`."""
    kept = list(body)
    while True:
        read = [_reads(s, leaves) for s in kept]
        dead = [k for k, s in enumerate(kept) if isinstance(s, Assign) and s.name not in outside
                and not any(s.name in r for j, r in enumerate(read) if j != k)]
        if not dead:
            return kept
        dropped.update(kept[k].name for k in dead)
        kept = [s for k, s in enumerate(kept) if k not in dead]


def _checked_flat(top: For, pointers: list[str], inner: For, prefix: str) -> list[Stmt]:
    """`ok = False`, the level-by-level checks ending in `ok = True` and the flat loop, then
    the original nest when not `ok`."""
    ok = f"{prefix}_ok"
    lo, hi = top.start, top.end
    # innermost first: built from the inside out, each level wrapping the next
    levels = []
    for depth, pointer in enumerate(pointers):
        levels.append((depth, pointer, lo, hi))
        lo, hi = Ref(f"{prefix}_lo{depth}"), Ref(f"{prefix}_hi{depth}")
    flat = replace(inner, start=lo, end=hi)
    nested: tuple[Stmt, ...] = (Assign(ok, Num(True)), flat)
    for depth, pointer, start, end in reversed(levels):
        bad, m = f"{prefix}_bad{depth}", f"{prefix}_m{depth}"
        new_lo, new_hi = f"{prefix}_lo{depth}", f"{prefix}_hi{depth}"
        # pointer[start..end] is read by the nest when start < end (its bounds guard checked it)
        monotone = For(m, start, end, (AddTo(bad, Op("<", Load(pointer, Op("+", Ref(m), Num(1))),
                                                          Load(pointer, Ref(m)))),))
        fine = _all(Op("==", Ref(bad), Num(0)), Op("<=", Num(0), Ref(new_lo)), Op("<=", Ref(new_lo), Ref(new_hi)))
        if depth + 1 < len(levels):  # the next level reads the next pointer array at new_lo..new_hi
            fine = _all(fine, Op("<", Ref(new_lo), Ref(new_hi)), Op("<", Ref(new_hi), Length(levels[depth + 1][1])))
        nested = (Assign(bad, Num(0)), monotone, Assign(new_lo, Load(pointer, start)),
                  Assign(new_hi, Load(pointer, end)), IfThen(fine, nested))
        nested = (IfThen(Op("<", start, end), nested),)
    return [Assign(ok, Num(False)), *nested, IfThen(Unary("not", Ref(ok)), (top,))]


def _all(*conditions: IRExpr) -> IRExpr:
    result = conditions[0]
    for condition in conditions[1:]:
        result = Op("and", result, condition)
    return result


def _reads(stmt: Stmt, leaves: dict) -> frozenset[str]:
    """Every name the statement reads as the backend emits it (UNKNOWN for statements it does
    not know). An entries write reads its position and value (its keys only when they are not
    plain names: the backend evaluates those)."""
    match stmt:
        case Assign(value=v):
            return reads(v)
        case AddTo(name=n, value=v):
            return reads(v) | {n}
        case Accumulate(target=t, keys=keys, value=v) if t == OUTPUT:
            if leaves and keys and isinstance(keys[-1], Ref) and keys[-1].name in leaves:
                evaluated = [k for k in keys if not isinstance(k, (Ref, Num))]
                return reads(v) | {leaves[keys[-1].name]} | frozenset().union(*map(reads, evaluated))
            return reads(v).union(*map(reads, keys))
        case Accumulate(target=t, keys=keys, value=v):
            return reads(v).union(*map(reads, keys)) | {t}
        case For(start=s, end=e, body=b):
            return reads(s) | reads(e) | frozenset().union(*(_reads(x, leaves) for x in b))
        case IfThen(cond=c, then=t, orelse=o):
            return reads(c) | frozenset().union(*(_reads(x, leaves) for x in t + o))
    return frozenset({UNKNOWN})


__all__ = ["flatten_position_nests", "flat_nests", "PLAN_KINDS"]
