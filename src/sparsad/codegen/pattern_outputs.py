"""Recognising a result on the pattern of a sparse input when lowering bound the row's limits to locals.

A ``pattern`` output (`codegen.outputs`) writes the value at key (i, idx[p]) into ``values[p]``
and returns a CSR matrix with the input's row pointers and column indices: the masked gradient
of a sparse operand in O(nnz), with no marks, sort or hashing. `outputs.input_pattern` sees
that shape when the loop over a row's positions reads its limits from the row pointers
directly, `for p in range(pos[i], pos[i + 1])`. When a row's slice is read twice (once for a
forward row sum, once for the writes of the gradient, as in a logistic regression's gradient
with respect to its design matrix), common-subexpression elimination binds the limits once::

    st = pos[i]
    en = pos[i + 1]
    for p in range(st, en): acc += val[p] * w[idx[p]]
    for q in range(st, en): out[i, idx[q]] += g * w[idx[q]]

and the writes looked like arbitrary keys (a row workspace with marks and a sort per row,
4-10x the closed form). `loop_limits_inlined` puts such limits back into the loops (for
recognition only; the kernel keeps its locals) so that the same recognition applies.

Sound because a local is replaced only when it is assigned exactly once in the whole kernel,
is never accumulated into, and holds a read of an input array (inputs are not written by a
kernel), at an index made of loop variables and such locals: every loop that reads it sees
the value of that read in the same iteration of the enclosing loops.

>>> from sparsad.codegen.ir import Assign, For, Load, Num, Ref
>>> rows = For("i", Num(0), Num(4), (Assign("st", Load("pos", Ref("i"))), For("p", Ref("st"), Num(3), ())))
>>> loop_limits_inlined_in((rows,))[0].body[1].start
Load(array='pos', index=Ref(name='i'), guarded=False)
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

from sparsad.codegen.ir import (AddTo, Assign, For, ForItems, IfThen, IRExpr, Load, LoopProgram, Num, Op, Ref,
                                Stmt)


def loop_limits_inlined(program: LoopProgram) -> LoopProgram:
    """`program` with loop limits that are once-assigned locals holding input reads replaced by
    those reads (see the module docstring); the program itself when nothing changes."""
    body = loop_limits_inlined_in(program.body)
    return program if body == program.body else replace(program, body=body)


def loop_limits_inlined_in(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    """The statements with the limits of their loops inlined (`loop_limits_inlined`)."""
    assigned: Counter = Counter()
    values: dict[str, IRExpr] = {}
    loop_vars: set[str] = set()
    for stmt in _statements(body):
        match stmt:
            case Assign(name=name, value=value):
                assigned[name] += 1
                values[name] = value
            case AddTo(name=name):
                assigned[name] += 2  # accumulated into: not a fixed value
            case For(var=var):
                loop_vars.add(var)
                assigned[var] += 2
            case ForItems(key=key, value=value):
                assigned[key] += 2
                assigned[value] += 2
    fixed = {name for name, count in assigned.items() if count == 1}

    def steady(e: IRExpr) -> bool:
        """Whether e has one value within an iteration of the loops around its uses."""
        match e:
            case Num():
                return True
            case Ref(name=name):
                return name in loop_vars or (name in fixed and _index_like(values[name], steady))
            case Op(op=op, left=left, right=right) if op in ("+", "-"):
                return steady(left) and steady(right)
        return False

    def limit(e: IRExpr) -> IRExpr:
        if isinstance(e, Ref) and e.name in fixed:
            value = values[e.name]
            if isinstance(value, Load) and not value.guarded and steady(value.index):
                return replace(value, index=_index_inlined(value.index, fixed, values))
        return e

    def rewrite(stmts: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
        out = []
        for stmt in stmts:
            match stmt:
                case For():
                    stmt = replace(stmt, start=limit(stmt.start), end=limit(stmt.end), body=rewrite(stmt.body))
                case ForItems():
                    stmt = replace(stmt, body=rewrite(stmt.body))
                case IfThen():
                    stmt = replace(stmt, then=rewrite(stmt.then), orelse=rewrite(stmt.orelse))
            out.append(stmt)
        return tuple(out)

    return rewrite(body)


def _index_like(value: IRExpr, steady) -> bool:
    """A local usable inside an inlined index: an integer sum of loop variables and constants."""
    return isinstance(value, Op) and value.op in ("+", "-") and steady(value)


def _index_inlined(index: IRExpr, fixed: set, values: dict) -> IRExpr:
    """The index with its once-assigned locals spelled out (`i + 1` rather than `t13`), the
    form `outputs.input_pattern` compares with."""
    match index:
        case Ref(name=name) if name in fixed:
            return _index_inlined(values[name], fixed, values)
        case Op(op=op, left=left, right=right):
            return Op(op, _index_inlined(left, fixed, values), _index_inlined(right, fixed, values))
    return index


def _statements(body: tuple[Stmt, ...]):
    for stmt in body:
        yield stmt
        match stmt:
            case For(body=inner) | ForItems(body=inner):
                yield from _statements(inner)
            case IfThen(then=then, orelse=orelse):
                yield from _statements(then)
                yield from _statements(orelse)


__all__ = ["loop_limits_inlined", "loop_limits_inlined_in"]
