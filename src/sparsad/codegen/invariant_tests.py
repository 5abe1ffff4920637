"""Entry tests hoisted out of the loops they do not depend on.

`loops.entry_test` emits a test where a value is used: for a let-bound intermediate it is a flag
loop (`nonempty = False; for k in z: nonempty = True`) placed inside every loop around the use.
When nothing in an enclosing loop refills, writes or rebinds what the test reads, the test gives
the same answer in every iteration: it moves before that loop (and out again while that holds),
and a loop whose whole body is a conditional on such an invariant flag becomes the conditional
around the loop (so a sum into one key is again a plain loop, which the backend keeps in a
register). Loops at the kernel's top level are left alone (the output plan reads their shape).

>>> from sparsad.codegen.ir import Accumulate, Assign, For, ForItems, IfThen, Num, Ref
>>> test = [Assign("ne", Num(False)), ForItems("k", "v", "z", (Assign("ne", Num(True)),))]
>>> inner = For("o", Num(0), Num(3), (*test, IfThen(Ref("ne"), (Accumulate("h", (Ref("o"),), Num(1.0)),))))
>>> [type(s).__name__ for s in hoist_entry_tests((For("i", Num(0), Num(2), (inner,)),))[0].body]
['Assign', 'ForItems', 'IfThen']
"""
from __future__ import annotations

from sparsad.codegen.ir import (Accumulate, Assign, Fill, For, ForItems, IfThen, Num, Ref, Stmt)
from sparsad.codegen.prefix import _bound_inside, index_names


def hoist_entry_tests(body: tuple[Stmt, ...], containers: dict | None = None) -> tuple[Stmt, ...]:
    """body with every loop-invariant flag-loop entry test moved out of the (non top-level)
    loops it does not depend on; `containers`: name -> Container (a row's parent is checked too)."""
    return tuple(_visit(list(body), containers or {}, top=True))


def _visit(stmts: list[Stmt], containers: dict, top: bool) -> list[Stmt]:
    out: list[Stmt] = []
    for stmt in stmts:
        match stmt:
            case For(body=b) | ForItems(body=b):
                inner = _visit(list(b), containers, top=False)
                stmt = _with_body(stmt, tuple(inner))
                if not top:
                    hoisted, stmt = _hoist_from(stmt, containers)
                    out += hoisted
                    stmt = _unswitch(stmt)
                out.append(stmt)
            case IfThen(cond=c, then=t, orelse=o):
                out.append(IfThen(c, tuple(_visit(list(t), containers, top)),
                                  tuple(_visit(list(o), containers, top))))
            case _:
                out.append(stmt)
    return out


def _with_body(loop: Stmt, body: tuple[Stmt, ...]) -> Stmt:
    if isinstance(loop, For):
        return For(loop.var, loop.start, loop.end, body)
    return ForItems(loop.key, loop.value, loop.container, body)


def _loop_names(loop: Stmt) -> set[str]:
    """Names the loop binds or changes in any iteration."""
    own = {loop.var} if isinstance(loop, For) else {loop.key, loop.value}
    return own | _bound_inside(loop.body)


def _changed_containers(stmts) -> set[str]:
    """Containers that stmts fill or write into."""
    names: set[str] = set()
    for stmt in stmts:
        match stmt:
            case Fill(container=c) | Accumulate(target=c):
                names.add(c)
            case For(body=b) | ForItems(body=b):
                names |= _changed_containers(b)
            case IfThen(then=t, orelse=o):
                names |= _changed_containers(t) | _changed_containers(o)
    return names


def _flag_test(first: Stmt, second: Stmt) -> str | None:
    """The flag of `flag = False; <loop whose body only sets flag = True>`, else None."""
    if not (isinstance(first, Assign) and first.value == Num(False) and isinstance(second, (For, ForItems))):
        return None
    flag = first.name
    if not second.body or any(s != Assign(flag, Num(True)) for s in second.body):
        return None
    return flag


def _reads(test_loop: Stmt, containers: dict) -> tuple[set[str], set[str]] | None:
    """(names, containers) a flag loop reads, or None when unknown."""
    if isinstance(test_loop, ForItems):
        read = {test_loop.container}
        parent = getattr(containers.get(test_loop.container), "parent", None)
        if parent is not None:
            read.add(parent)
        return {test_loop.container}, read
    names = set()
    for bound in (test_loop.start, test_loop.end):
        found = index_names(bound)
        if found is None:
            return None
        names |= found
    return names, set()


def _hoist_from(loop: Stmt, containers: dict) -> tuple[list[Stmt], Stmt]:
    """(tests moved before loop, loop without them)."""
    body = list(loop.body)
    changed_names, changed = _loop_names(loop), _changed_containers(loop.body)
    hoisted: list[Stmt] = []
    kept: list[Stmt] = []
    n = 0
    while n < len(body):
        flag = _flag_test(body[n], body[n + 1]) if n + 1 < len(body) else None
        if flag is not None:
            reads = _reads(body[n + 1], containers)
            others = _bound_inside(kept + body[n + 2:])
            if reads is not None and not (reads[0] & changed_names) and not (reads[1] & changed) \
                    and flag not in others:
                hoisted += body[n:n + 2]
                n += 2
                continue
        kept.append(body[n])
        n += 1
    if not hoisted:
        return [], loop
    return hoisted, _with_body(loop, tuple(kept))


def _unswitch(loop: Stmt) -> Stmt:
    """for ...: if c: S  ~>  if c: for ...: S, when c reads nothing the loop changes."""
    if len(loop.body) != 1 or not isinstance(loop.body[0], IfThen) or loop.body[0].orelse:
        return loop
    test = loop.body[0]
    names = index_names(test.cond)
    if names is None or not isinstance(test.cond, Ref) or names & _loop_names(loop):
        return loop
    return IfThen(test.cond, (_with_body(loop, test.then),))
