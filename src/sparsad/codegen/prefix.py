"""Workspaces whose written keys always form a prefix 0..n-1 of their range (dense vectors).

A workspace normally marks each key it is written at and lists the keys in order, so that
iterating it visits exactly the keys of the dictionary it holds. A let-bound dense row such
as GCN's `h = sum(<j, a> in r) a * X(j)` is written by loops over whole column ranges: after
any fill its keys are all of 0..n-1 or none. For such a workspace a count `n` replaces the
marks and the key list (iterating is `range(n)`, emptying zeroes the prefix), and the inner
write loop is a plain `val[k] += x` that the compiler can vectorise.

The test is on the loop IR. Every write `c[k] += x` must have its key k bound by a loop L
that visits a prefix: `for k in range(0, end)`, or the items of another prefix workspace d
(`end` is then d's count), and every statement between L and the write must be a range loop
whose bounds do not change inside L (so a write runs in every iteration of L, or in none).
Then, before L, `n = max(n, end)` when those inner loops are not empty keeps the count exact
and the key order (ascending, as the marks gave) unchanged.

    >>> from sparsad.codegen.ir import Accumulate, Container, Fill, For, Num, Ref
    >>> body = (Fill("h"), For("j", Num(0), Ref("N"), (Accumulate("h", (Ref("j"),), Num(1.0)),)))
    >>> sorted(prefix_workspaces(body, [Container("h", "workspace", None, "real")]).names)
    ['h']
"""
from __future__ import annotations

from dataclasses import dataclass

from sparsad.codegen.ir import (Accumulate, AddTo, Assign, Choose, Fill, Fn, For, ForItems, IfThen, IRExpr,
                                Length, Load, Num, Op, Ref, Stmt, Unary)


@dataclass(frozen=True)
class CountUpdate:
    """Before the loop over `loop_var`: `if all(start < end for the inner loops): n = max(n, end)`."""
    container: str
    end: IRExpr
    inner: tuple[tuple[IRExpr, IRExpr], ...]  # (start, end) of the range loops between


def index_names(e: IRExpr) -> set[str] | None:
    """The names an index expression reads, or None when it reads a local container."""
    match e:
        case Num() | Length():
            return set()
        case Ref(name=n):
            return {n}
        case Op(left=l, right=r):
            left, right = index_names(l), index_names(r)
            return None if left is None or right is None else left | right
        case Unary(operand=o):
            return index_names(o)
        case Load(index=i):
            return index_names(i)
        case Fn(args=args):
            return _union(args)
        case Choose(cond=c, then=t, orelse=o):
            return _union((c, t, o))
    return None


def _union(parts) -> set[str] | None:
    names: set[str] = set()
    for part in parts:
        inner = index_names(part)
        if inner is None:
            return None
        names |= inner
    return names


def _bound_inside(stmts) -> set[str]:
    """Every name assigned, accumulated into or bound by a loop anywhere in stmts."""
    names: set[str] = set()
    for stmt in stmts:
        match stmt:
            case Assign(name=n) | AddTo(name=n):
                names.add(n)
            case For(var=v, body=b):
                names.add(v)
                names |= _bound_inside(b)
            case ForItems(key=k, value=v, body=b):
                names |= {k, v}
                names |= _bound_inside(b)
            case IfThen(then=t, orelse=o):
                names |= _bound_inside(t) | _bound_inside(o)
    return names


def _touches(stmts, container: str) -> bool:
    """Whether stmts empty (Fill) or iterate the container anywhere."""
    for stmt in stmts:
        match stmt:
            case Fill(container=c) | ForItems(container=c) if c == container:
                return True
            case For(body=b) | ForItems(body=b):
                if _touches(b, container):
                    return True
            case IfThen(then=t, orelse=o):
                if _touches(t, container) or _touches(o, container):
                    return True
    return False


def _writes(stmts, path: tuple[Stmt, ...]):
    """(write, enclosing statements outermost first) for every Accumulate in stmts."""
    for stmt in stmts:
        match stmt:
            case Accumulate():
                yield stmt, path
            case For(body=b) | ForItems(body=b):
                yield from _writes(b, path + (stmt,))
            case IfThen(then=t, orelse=o):
                yield from _writes(t, path + (stmt,))
                yield from _writes(o, path + (stmt,))


def _loop_var(stmt: Stmt) -> str | None:
    if isinstance(stmt, For):
        return stmt.var
    if isinstance(stmt, ForItems):
        return stmt.key
    return None


def _covering(write: Accumulate, path: tuple[Stmt, ...], prefix: set[str]) -> tuple[str, CountUpdate] | None:
    """(loop var of L, the count update before L) when `write` writes a prefix (module doc)."""
    if len(write.keys) != 1 or not isinstance(write.keys[0], Ref):
        return None
    key = write.keys[0].name
    for depth in range(len(path) - 1, -1, -1):
        if _loop_var(path[depth]) == key:
            break
    else:
        return None
    loop, between = path[depth], path[depth + 1:]
    if isinstance(loop, For):
        if loop.start != Num(0) or index_names(loop.end) is None:
            return None
        end = loop.end
    elif loop.container in prefix and loop.container != write.target:
        end = Ref(f"{loop.container}_n")
    else:
        return None
    if _touches(loop.body, write.target):  # emptied or iterated while L writes it: not a prefix
        return None
    varying = _bound_inside(loop.body) | {key}
    inner = []
    for stmt in between:
        if not isinstance(stmt, For):
            return None
        reads = [index_names(stmt.start), index_names(stmt.end)]
        if any(r is None or r & varying for r in reads):
            return None
        inner.append((stmt.start, stmt.end))
    return key, CountUpdate(write.target, end, tuple(inner))


@dataclass(frozen=True)
class Prefixes:
    """The prefix workspaces of a loop program, and the count updates to emit before loops."""
    names: frozenset[str]
    updates: dict  # loop var -> tuple[CountUpdate, ...]


def prefix_workspaces(body, containers, exclude=frozenset()) -> Prefixes:
    """The iterated workspaces (depth 1, not in `exclude`) every write of which covers a prefix
    of keys, and the count updates before the covering loops. Deterministic (program order)."""
    candidates = [c.name for c in containers if c.kind == "workspace" and c.depth == 1
                  and c.name not in exclude]
    writes = [(w, path) for w, path in _writes(body, ()) if w.target in candidates]
    prefix = set(candidates)
    while True:  # the largest set closed under "covered by a loop over a prefix"
        updates: dict[str, list[CountUpdate]] = {}
        dropped = set()
        for write, path in writes:
            if write.target not in prefix:
                continue
            found = _covering(write, path, prefix)
            if found is None:
                dropped.add(write.target)
            else:
                loop_var, update = found
                if update not in updates.setdefault(loop_var, []):
                    updates[loop_var].append(update)
        if not dropped:
            break
        prefix -= dropped
    return Prefixes(frozenset(prefix), {var: tuple(u) for var, u in updates.items()})


__all__ = ["CountUpdate", "Prefixes", "prefix_workspaces", "index_names"]
