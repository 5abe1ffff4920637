"""Lowering of a physical program into the loop IR (`codegen.ir`, re-exported here) (∇SD §5.5).

Lowering is destination-passing: `emit(expr, keys, scale, sink)` produces statements that add
`scale * expr` into a destination at the key path `keys`, where `sink(keys, value)` says what
"add into the destination" means (the kernel's output, a local container, a scalar accumulator,
or, for an outer product, emitting the right operand). So

- `sum(<k, v> in src) body`  becomes a loop over src whose body is emitted in place;
- `{ k -> v }`               extends the key path by k;
- `a + b`                    emits both sides into the same destination;
- `s * d` (s a scalar)       emits d with the scale multiplied by s;
- `d1 * d2` (outer product)  emits d2 at every leaf of d1;
- scalar subexpressions are computed as values; a scalar `sum` becomes a local accumulator
  (so SpMV's row sum is accumulated in a register and written once);
- `let x = e` binds a scalar local, aliases a range, sub-array or array, or fills a local
  container (a dense workspace when its keys have a known range, else a hash map) that the
  body then iterates or looks up.

Every integer value carries a symbolic interval (`bounds`), so array reads can run unchecked
after a cheap check of the inputs; reads whose index has no interval are guarded and read zero
outside the array, as the language says. Whatever cannot be lowered raises UnsupportedError
naming the construct, and the caller falls back to the interpreter.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from sparsad.codegen import bounds as B
from sparsad.codegen.ir import (OUTPUT, Accumulate, AddTo, Assign, Choose, Container, Fill, Fn,
                                For, ForItems, HasKey, IfThen, IRExpr, Length, Load, LocalGet,
                                LoopProgram, Num, Op, Ref, RowGet, RowOf, Stmt, Unary,
                                accumulates)
from sparsad.errors import UnsupportedError
from sparsad.lang.names import desugar_let_tuples
from sparsad.lang.printer import to_text
from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, LetTuple, Lookup,
                                 Neg, Not, Range, Singleton, SubArray, Sum, Unique, Var, children,
                                 free_vars, has_loop, walk)
from sparsad.lang.typecheck import infer
from sparsad.lang.types import Bool, Dict, Int, Real, Type, Zero
from sparsad.codegen.invariant_tests import hoist_entry_tests
from sparsad.opt.emptiness import TRUE, entry_condition, may_be_empty, vanishes_on_empty

Sink = Callable[[tuple, IRExpr], list]

# ----------------------------------------------------------------------------------------
# Bindings of language names during lowering


@dataclass(frozen=True)
class _Scalar:
    expr: IRExpr
    iv: B.IV | None
    # a let's number that may be {} (an else-less if, a sum over nothing): whether it is an
    # entry, computed where it is bound (`entry`), or (value, env, tenv) to test where it becomes
    # an entry's value (`source`); see `entry_test`
    source: tuple | None = field(default=None, compare=False)
    entry: IRExpr | None = field(default=None, compare=False)


@dataclass(frozen=True)
class _Array:
    name: str


@dataclass(frozen=True)
class _Local:
    name: str


@dataclass(frozen=True)
class _RangeSrc:
    start: IRExpr
    end: IRExpr
    start_iv: B.IV | None
    end_iv: B.IV | None


@dataclass(frozen=True)
class _SubSrc:
    array: str
    start: IRExpr
    end: IRExpr
    start_iv: B.IV | None
    end_iv: B.IV | None


@dataclass(frozen=True)
class _Empty:
    pass


@dataclass(frozen=True, eq=False)
class _Body:
    """A loop body, `emit(env', tenv')`, and whether it vanishes (adds nothing) when the loop's
    value is the empty dictionary: else a source's empty entries must not reach it."""
    emit: Callable[[dict, dict], list]
    vanishes: bool = False

    def __call__(self, env: dict, tenv: dict) -> list:
        return self.emit(env, tenv)


@dataclass(frozen=True, eq=False)
class _Lazy:
    """A dictionary with distinct keys (`unique`), lowered where it is used: iterating it fuses
    its loops into the consumer's (vertical fusion), so `let A = <format definition> in ...`
    builds no intermediate."""
    expr: Expr
    env: dict
    tenv: dict


def _in_entry_value(name: str, body: Expr) -> bool:
    """Whether name may become an entry's value in body: it occurs in the source of a sum or in
    the value of a singleton. Only a guide to where its entry test is made: once at its let (at
    most the cost of computing the let's value again), or at each use that needs it."""
    return any((isinstance(node, Sum) and name in free_vars(node.source))
               or (isinstance(node, Singleton) and name in free_vars(node.value))
               for node in walk(body))


def _unique_entries(e: Expr):
    """(lets, key, value) when e is `sum ... let ... { unique(key) -> value }` (or such a
    singleton itself): each entry of e is produced exactly once, so it can be iterated lazily."""
    lets = []
    while isinstance(e, Let):
        lets.append(e)
        e = e.body
    if isinstance(e, Singleton) and isinstance(e.key, Unique):
        return lets, e.key.operand, e.value
    return None


def _fusable(e: Expr) -> bool:
    return isinstance(e, Sum) and _unique_entries(e.body) is not None


def _cheap_to_repeat(name: str, value: Expr, body: Expr) -> bool:
    """Whether lowering `value` at each use costs no more than filling it once: it is used once
    outside loops, or it is a view of stored levels (iterating it is as cheap as iterating a copy)."""
    from sparsad.opt.fuse import is_view, used_inside_loop

    if is_view(value):
        return True
    uses = sum(1 for node in walk(body) if isinstance(node, Var) and node.name == name)
    return uses <= 1 and not used_inside_loop(name, body)


def _materializable(t: Type) -> bool:
    """Whether `materialize` builds a container of this type (vectors and matrices of numbers)."""
    return _depth(t) in (1, 2) and _leaf_of(t) in ("real", "int")


def _looked_up(name: str, body: Expr) -> bool:
    return any(isinstance(node, Lookup) and node.dict == Var(name) for node in walk(body))


def _unsupported(what: str, expr: Expr) -> UnsupportedError:
    text = to_text(expr).replace("\n", " ")
    if len(text) > 120:
        text = text[:117] + "..."
    return UnsupportedError(f"code generation does not support {what}: {text}; "
                            f"run the program with the interpreter (sparsad.lang.interpret.evaluate)")


def _within(iv: B.IV | None, hull: B.IV | None) -> bool:
    """Whether every value of iv is one of hull's (structurally: iv is hull or one of the
    intervals joined into it). A workspace's size covers its hull, and the hull is checked
    to start at 0 or above before the kernel runs, so a read at such a key needs no guard."""
    if iv is None or hull is None:
        return False
    if iv == hull:
        return True
    return isinstance(hull, B.IJoin) and (_within(iv, hull.left) or _within(iv, hull.right))


def _leaf_of(t: Type) -> str:
    while isinstance(t, Dict):
        t = t.value
    if isinstance(t, Real):
        return "real"
    if isinstance(t, Int):
        return "int"
    return "bool" if isinstance(t, Bool) else "zero"


def _depth(t: Type) -> int:
    depth = 0
    while isinstance(t, Dict):
        depth += 1
        t = t.value
    return depth


def _zero(t: Type) -> Num:
    return Num(0) if _leaf_of(t) == "int" else Num(0.0)


_IDENT = re.compile(r"[^A-Za-z0-9_]")


class _Lowerer:
    def __init__(self, input_types: Mapping[str, Type]):
        self.input_types = dict(input_types)
        self.used = set(input_types) | {OUTPUT}
        self.counter = 0
        self.containers: dict[str, Container] = {}
        self.grid_candidates: set[str] = set()
        self.container_ivs: dict[str, B.IV | None] = {}
        self.row_ivs: dict[str, B.IV | None] = {}
        self.level_ivs: dict[str, list] = {}  # per level of a nested container, its keys' hull
        self.checks: list[B.Check] = []
        self.out_ivs: list[list[B.IV | None]] = []
        self.filling = 0  # > 0 while emitting into a local container (whose keys are iterated)

    # -- names -------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        base = _IDENT.sub("", hint.replace("'", "p")).strip("_") or "t"
        if base[0].isdigit():
            base = "t" + base
        while True:
            self.counter += 1
            name = f"{base}_{self.counter}"
            if name not in self.used:
                self.used.add(name)
                return name

    def check(self, iv: B.IV, array: str, what: str = "reads") -> None:
        item = B.Check(iv, array, what)
        if item not in self.checks:
            self.checks.append(item)

    @staticmethod
    def typeof(expr: Expr, tenv: dict) -> Type:
        return infer(expr, tenv)

    def bind_local_value(self, stmts: list, ir: IRExpr, hint: str) -> IRExpr:
        """ir itself when it is cheap to repeat, else a fresh local assigned once."""
        if isinstance(ir, (Num, Ref)):
            return ir
        name = self.fresh(hint)
        stmts.append(Assign(name, ir))
        return Ref(name)

    # -- scalars -------------------------------------------------------------------------
    def scalar(self, e: Expr, env: dict, tenv: dict) -> tuple[list, IRExpr, B.IV | None]:
        """Statements to run first, the value, and (for ints) its interval."""
        match e:
            case Const(value=v):
                iv = B.IConst(v) if isinstance(v, int) and not isinstance(v, bool) else None
                return [], Num(v), iv
            case Var(name=n):
                binding = env.get(n)
                if isinstance(binding, _Scalar):
                    return [], binding.expr, binding.iv
                if isinstance(binding, _Empty):
                    return [], Num(0.0), B.IConst(0)
                raise _unsupported("a dictionary where a number is expected", e)
            case EmptyDict():
                return [], Num(0.0), B.IConst(0)
            case Unique(operand=o):
                return self.scalar(o, env, tenv)
            case Binary(op=op, left=l, right=r):
                pl, el, il = self.scalar(l, env, tenv)
                pr, er, ir_ = self.scalar(r, env, tenv)
                code = {"=": "==", "<": "<"}.get(op, op)
                return pl + pr, Op(code, el, er), B.arith(op, il, ir_)
            case Neg(operand=o):
                pre, value, iv = self.scalar(o, env, tenv)
                return pre, Unary("-", value), B.arith("-", B.IConst(0), iv)
            case Not(operand=o):
                pre, value, _ = self.scalar(o, env, tenv)
                return pre, Unary("not", value), None
            case Call(func=f, args=args):
                pre, values = [], []
                for arg in args:
                    p, v, _ = self.scalar(arg, env, tenv)
                    pre += p
                    values.append(v)
                return pre, Fn(f, tuple(values)), None
            case Lookup(dict=d, key=k):
                return self.lookup(e, d, k, env, tenv)
            case If(cond=c, then=t, orelse=o):
                pre, cond, _ = self.scalar(c, env, tenv)
                result_type = self.typeof(e, tenv)
                then_env, else_env = self.narrowed(c, env, tenv)
                pt, vt, it = self.scalar(t, then_env, tenv)
                if o is None:
                    po, vo, io = [], _zero(result_type), B.IConst(0)
                else:
                    po, vo, io = self.scalar(o, else_env, tenv)
                if not pt and not po:
                    return pre, Choose(cond, vt, vo), B.join(it, io)
                name = self.fresh("c")
                stmt = IfThen(cond, tuple(pt + [Assign(name, vt)]), tuple(po + [Assign(name, vo)]))
                return pre + [stmt], Ref(name), B.join(it, io)
            case Let(name=n, value=v, body=b):
                pre, env2, tenv2 = self.bind(n, v, env, tenv, b)
                more, value, iv = self.scalar(b, env2, tenv2)
                return pre + more, value, iv
            case Sum():
                result_type = self.typeof(e, tenv)
                name = self.fresh("acc")

                def into_accumulator(keys, value):
                    return [AddTo(name, value)]

                body = self.emit(e, (), None, into_accumulator, env, tenv)
                return [Assign(name, _zero(result_type)), *body], Ref(name), None
        raise _unsupported("this construct as a number", e)

    def lookup(self, e: Lookup, d: Expr, k: Expr, env: dict, tenv: dict):
        if isinstance(d, Lookup):
            found = self.nested(d.dict, env, tenv)
            if found is not None and self.containers[found[1]].depth == 2:
                # c(i)(j) = c[i].get(j) when row i exists, else zero
                pre, container = found
                more, row_key, _ = self.scalar(d.key, env, tenv)
                pre += more
                row_key = self.bind_local_value(pre, row_key, "key")
                more, key, _ = self.scalar(k, env, tenv)
                pre += more
                leaf = self.containers[container].leaf
                zero = Num(0) if leaf == "int" else Num(0.0)
                get = RowGet(container, row_key, key)
                return pre, Choose(HasKey(container, row_key), get, zero), None
            # c(i)...(j)(k) of a deeper container: walk its rows, zero where one is missing
            pre, key, _ = self.scalar(k, env, tenv)
            key = self.bind_local_value(pre, key, "key")
            got = self.fresh("got")
            result_type = self.typeof(e, tenv)
            walk_rows = self.with_row(d, env, tenv, lambda row: [Assign(got, LocalGet(row, key))])
            if walk_rows is not None:
                return pre + [Assign(got, _zero(result_type)), *walk_rows], Ref(got), None
        if not isinstance(d, Var):
            # bind the dictionary first (a range, sub-array or materialized container)
            name = self.fresh("d")
            pre, env2, tenv2 = self.bind(name, d, env, tenv)
            more, value, iv = self.lookup(Lookup(Var(name), k), Var(name), k, env2, tenv2)
            return pre + more, value, iv
        pre, key, key_iv = self.scalar(k, env, tenv)
        binding = env.get(d.name)
        match binding:
            case _Array(name=array):
                int_valued = _leaf_of(self.input_types[array]) == "int"
                value_iv = B.IArray(array) if int_valued else None
                if key_iv is None:
                    return pre, Load(array, key, guarded=True), value_iv
                self.check(key_iv, array)
                return pre, Load(array, key), value_iv
            case _Local(name=container):
                proven = _within(key_iv, self.container_ivs.get(container))
                return pre, LocalGet(container, key, proven), None
            case _RangeSrc(start=s, end=en):
                key = self.bind_local_value(pre, key, "k")
                inside = Op("and", Op("<=", s, key), Op("<", key, en))
                return pre, Choose(inside, key, Num(0)), key_iv
            case _SubSrc(array=array, start=s, end=en):
                key = self.bind_local_value(pre, key, "k")
                inside = Op("and", Op("<=", s, key), Op("<", key, en))
                int_valued = _leaf_of(self.input_types[array]) == "int"
                zero = Num(0) if int_valued else Num(0.0)
                value_iv = B.IArray(array) if int_valued else None
                return pre, Choose(inside, Load(array, key, guarded=True), zero), value_iv
            case _Empty():
                return pre, Num(0.0), B.IConst(0)
            case _Lazy(expr=x, env=lenv, tenv=ltenv):
                more, container = self.materialize(d.name, x, lenv, ltenv)
                return pre + more, LocalGet(container, key), None
            case _Scalar():
                raise _unsupported("a lookup into a number", e)
        raise _unsupported(f"a lookup into the unbound name {d.name!r}", e)

    # -- rows of nested containers -----------------------------------------------------
    def nested(self, d: Expr, env: dict, tenv: dict) -> tuple[list, str] | None:
        """(statements, name) when d names a local container of rows (depth >= 2; built if lazy)."""
        if not isinstance(d, Var):
            return None
        binding = env.get(d.name)
        if isinstance(binding, _Local) and self.containers[binding.name].depth >= 2:
            return [], binding.name
        if isinstance(binding, _Lazy) and _depth(self.typeof(binding.expr, binding.tenv)) >= 2:
            return self.materialize(d.name, binding.expr, binding.env, binding.tenv)
        return None

    def row_container(self, parent: str, row: str) -> None:
        """Register `row`, a row of the nested container `parent` (one level less deep)."""
        outer = self.containers[parent]
        levels = self.level_ivs.get(parent) or [self.container_ivs.get(parent), self.row_ivs.get(parent)]
        self.containers[row] = Container(row, "row", levels[1], outer.leaf, outer.depth - 1, parent=parent)
        self.container_ivs[row] = levels[1]
        self.row_ivs[row] = levels[2] if outer.depth > 2 and len(levels) > 2 else None
        self.level_ivs[row] = list(levels[1:])

    def with_row(self, e: Lookup, env: dict, tenv: dict, inner) -> list | None:
        """`if key in c: row = c[key]; inner(row)` for a lookup e = c(key) of a nested container,
        c a name or itself such a lookup (a row of a row); a dictionary expression that is
        neither is bound first. None when e.dict is not a container of rows."""
        if isinstance(e.dict, Lookup):  # c(i)(j): j's row inside i's row, when both exist
            def in_outer_row(outer_row: str) -> list:
                if self.containers[outer_row].depth < 2:
                    raise _unsupported("a lookup into a number", e)
                return self.enter_row(outer_row, e.key, env, tenv, inner)
            return self.with_row(e.dict, env, tenv, in_outer_row)
        pre: list = []
        if not isinstance(e.dict, Var) and isinstance(self.typeof(e.dict, tenv), Dict) \
                and _depth(self.typeof(e.dict, tenv)) >= 2:
            name = self.fresh("d")
            pre, env, tenv = self.bind(name, e.dict, env, tenv)
            e = Lookup(Var(name), e.key)
        found = self.nested(e.dict, env, tenv)
        if found is None:
            return None
        more, container = found
        return pre + more + self.enter_row(container, e.key, env, tenv, inner)

    def enter_row(self, container: str, key_expr: Expr, env: dict, tenv: dict, inner) -> list:
        """`if key in container: row = container[key]; inner(row)`."""
        pre, key, _ = self.scalar(key_expr, env, tenv)
        key = self.bind_local_value(pre, key, "key")
        row = self.fresh("row")
        self.row_container(container, row)
        body = [Assign(row, RowOf(container, key)), *inner(row)]
        return pre + [IfThen(HasKey(container, key), tuple(body))]

    # -- let -----------------------------------------------------------------------------
    def bind(self, name: str, value: Expr, env: dict, tenv: dict,
             body: Expr | None = None) -> tuple[list, dict, dict]:
        """Statements, and the environments with `name` bound to value (used in `body`)."""
        value_type = self.typeof(value, tenv)
        env2, tenv2 = dict(env), dict(tenv)
        tenv2[name] = value_type
        if isinstance(value_type, Zero):
            env2[name] = _Empty()
            return [], env2, tenv2
        if not isinstance(value_type, Dict):
            pre, ir, iv = self.scalar(value, env, tenv)
            bound = _Scalar(self.bind_local_value(pre, ir, name), iv)
            if may_be_empty(value) and (body is None or not _in_entry_value(name, body)):
                bound = replace(bound, source=(value, env, tenv))
            elif may_be_empty(value):
                # tested once here, not in the loops of body that make it an entry's value
                more, test = self.entry_test(value, env, tenv)
                pre += more
                if test is not None:
                    bound = replace(bound, entry=self.bind_local_value(pre, test, f"{name}_entry"))
            env2[name] = bound
            return pre, env2, tenv2
        while isinstance(value, Unique):
            value = value.operand
        if isinstance(value, Var):
            if value.name not in env:
                raise _unsupported(f"the unbound name {value.name!r}", value)
            env2[name] = env[value.name]
            return [], env2, tenv2
        if isinstance(value, Range):
            pre, s, si = self.scalar(value.start, env, tenv)
            p2, en, ei = self.scalar(value.end, env, tenv)
            pre += p2
            s, en = self.bind_local_value(pre, s, "st"), self.bind_local_value(pre, en, "en")
            env2[name] = _RangeSrc(s, en, si, ei)
            return pre, env2, tenv2
        if isinstance(value, SubArray) and isinstance(value.array, Var) \
                and isinstance(env.get(value.array.name), _Array):
            pre, s, si = self.scalar(value.start, env, tenv)
            p2, en, ei = self.scalar(value.end, env, tenv)
            pre += p2
            s, en = self.bind_local_value(pre, s, "st"), self.bind_local_value(pre, en, "en")
            env2[name] = _SubSrc(env[value.array.name].name, s, en, si, ei)
            return pre, env2, tenv2
        if _fusable(value) and (body is None or not _looked_up(name, body)) and (
                body is None or _cheap_to_repeat(name, value, body) or not _materializable(value_type)):
            env2[name] = _Lazy(value, env, tenv)
            return [], env2, tenv2
        pre, container = self.materialize(name, value, env, tenv)
        env2[name] = _Local(container)
        return pre, env2, tenv2

    def materialize(self, hint: str, value: Expr, env: dict, tenv: dict) -> tuple[list, str]:
        """Fill a local container with a `{int -> num}`, `{int -> {int -> num}}`, ... value.

        Vectors become a dense workspace when their keys have a known range, else a hash
        map; nested values (e.g. a COO matrix's definition, whose row keys repeat, or a
        Jacobian's tangent of a vector w.r.t. a matrix) become a hash map of hash-map rows,
        nested as deep as the value. Returns (statements, name)."""
        value_type = self.typeof(value, tenv)
        depth = _depth(value_type)
        if depth < 1 or _leaf_of(value_type) not in ("real", "int"):
            raise _unsupported("an intermediate dictionary that is not numeric (only dictionaries "
                               "of numbers are built)", value)
        name = self.fresh(hint)
        level_ivs: list[list] = [[] for _ in range(depth)]

        def into_container(keys, v):
            for level, (_, iv) in enumerate(keys):
                level_ivs[level].append(iv)
            return [Accumulate(name, tuple(k for k, _ in keys), v, tuple(iv for _, iv in keys))]

        self.filling += 1
        try:
            body = self.emit(value, (), None, into_container, env, tenv)
        finally:
            self.filling -= 1
        hulls = []
        for ivs in level_ivs:
            hull = ivs[0] if ivs else None
            for iv in ivs[1:]:
                hull = B.join(hull, iv)
            hulls.append(hull)
        self.container_ivs[name] = hulls[0]
        self.row_ivs[name] = hulls[1] if depth >= 2 else None
        self.level_ivs[name] = hulls
        kind = "workspace" if depth == 1 and hulls[0] is not None else "hash"
        def outside(source: Expr) -> str | None:
            if isinstance(source, Var):
                return "range" if isinstance(env.get(source.name), _RangeSrc) else None
            if isinstance(source, Lookup) and isinstance(source.dict, Var):
                binding = env.get(source.dict.name)
                if isinstance(binding, _Local) and binding.name in self.grid_candidates:
                    return "row"
            return None

        if depth == 2 and None not in hulls and _writes_whole_rows(value, outside):
            # every write fills a row over a range of columns: a dense grid holds about the
            # entries of hash rows, without hashing (see `_grids`)
            self.grid_candidates.add(name)
        self.containers[name] = Container(name, kind, hulls[0], _leaf_of(value_type), depth)
        if kind == "workspace":
            self.check(hulls[0], name, "writes the intermediate")
        return [Fill(name), *body], name

    # -- loops ---------------------------------------------------------------------------
    def loop(self, source: Expr, k: str, v: str, env: dict, tenv: dict, body_fn,
             senv: dict | None = None, stenv: dict | None = None) -> list:
        """A loop over the entries of source binding k and v, with body_fn(env', tenv') inside.

        The source is read in (senv, stenv) (default: env, tenv); k and v extend (env, tenv)."""
        if senv is not None:
            return self._loop(source, k, v, env, tenv, body_fn, senv, stenv)
        return self._loop(source, k, v, env, tenv, body_fn, env, tenv)

    def _loop(self, source, k, v, cenv, ctenv, body_fn, env, tenv) -> list:
        source_type = self.typeof(source, tenv)
        if isinstance(source_type, Zero):
            return []
        if not isinstance(source_type, Dict):
            raise _unsupported("a sum over a number", source)
        ctenv2 = dict(ctenv)
        if k != "_":
            ctenv2[k] = source_type.key
        if v != "_":
            ctenv2[v] = source_type.value
        while isinstance(source, Unique):
            source = source.operand
        binding = env.get(source.name) if isinstance(source, Var) else None
        if isinstance(source, Var) and binding is None:
            raise _unsupported(f"the unbound name {source.name!r}", source)
        if isinstance(source, EmptyDict) or isinstance(binding, _Empty):
            return []
        if isinstance(source, Range) or isinstance(binding, _RangeSrc):
            pre = []
            if isinstance(source, Range):
                p1, s, si = self.scalar(source.start, env, tenv)
                p2, en, ei = self.scalar(source.end, env, tenv)
                pre = p1 + p2
            else:
                s, en, si, ei = binding.start, binding.end, binding.start_iv, binding.end_iv
            var = self.fresh(k if k != "_" else v)
            iv = B.IRange(si, ei) if si is not None and ei is not None else None
            cenv2 = dict(cenv)
            for name in (k, v):
                if name != "_":
                    cenv2[name] = _Scalar(Ref(var), iv)
            return pre + [For(var, s, en, tuple(body_fn(cenv2, ctenv2)))]
        if (isinstance(source, SubArray) and isinstance(source.array, Var)
                and isinstance(env.get(source.array.name), _Array)) or isinstance(binding, _SubSrc):
            pre = []
            if isinstance(source, SubArray):
                array = env[source.array.name].name
                p1, s, si = self.scalar(source.start, env, tenv)
                p2, en, ei = self.scalar(source.end, env, tenv)
                pre = p1 + p2
            else:
                array, s, en = binding.array, binding.start, binding.end
                si, ei = binding.start_iv, binding.end_iv
            return pre + self.array_loop(array, s, en, si, ei, k, v, cenv, ctenv2, body_fn)
        if isinstance(binding, _Array):
            array = binding.name
            return self.array_loop(array, Num(0), Length(array), B.IConst(0), B.ILen(array),
                                   k, v, cenv, ctenv2, body_fn)
        if isinstance(binding, _Local):
            return self.items_loop(binding.name, k, v, cenv, ctenv2, body_fn)
        if isinstance(binding, _Lazy):
            return self._loop(binding.expr, k, v, cenv, ctenv, body_fn, binding.env, binding.tenv)
        if isinstance(binding, _Scalar):
            raise _unsupported("a sum over a number", source)
        if isinstance(source, Lookup):
            stmts = self.with_row(source, env, tenv, lambda row: self.items_loop(
                row, k, v, cenv, ctenv2, body_fn))
            if stmts is not None:
                return stmts
            raise _unsupported("a lookup that yields a dictionary (only rows of nested "
                               "intermediates are looked up)", source)
        if isinstance(source, Singleton):
            return self.bind_entry(source.key, source.value, k, v, env, tenv, cenv, ctenv, body_fn)
        if isinstance(source, Let):
            pre, env2, tenv2 = self.bind(source.name, source.value, env, tenv)
            return pre + self._loop(source.body, k, v, cenv, ctenv, body_fn, env2, tenv2)
        if isinstance(source, SubArray):  # a window of a dictionary that is not an input array:
            return self.window_loop(source, k, v, cenv, ctenv, body_fn, env, tenv)  # its keys, filtered
        if isinstance(source, Sum) and _unique_entries(source.body) is not None:
            # vertical fusion: each entry is produced once, so the consumer runs where it is made
            lets, key, value = _unique_entries(source.body)

            def at_entry(senv, stenv):
                pre = []
                for let in lets:
                    more, senv, stenv = self.bind(let.name, let.value, senv, stenv, let.body)
                    pre += more
                return pre + self.bind_entry(key, value, k, v, senv, stenv, cenv, ctenv, body_fn)

            return self.loop(source.source, source.key, source.val, env, tenv, at_entry)
        pre, container = self.materialize("tmp", source, env, tenv)
        return pre + self.items_loop(container, k, v, cenv, ctenv2, body_fn)

    def window_loop(self, source: SubArray, k, v, cenv, ctenv, body_fn, env, tenv) -> list:
        """`sum(<k, v> in d(lo:hi))` for a dictionary d that is not an input array: the entries
        of d whose key lies in [lo, hi), as the interpreter reads a sub-array."""
        pre, start, _ = self.scalar(source.start, env, tenv)
        more, end, _ = self.scalar(source.end, env, tenv)
        pre += more
        start, end = self.bind_local_value(pre, start, "st"), self.bind_local_value(pre, end, "en")
        key = k if k != "_" else self.fresh("k")

        def within(cenv2, ctenv2):
            at = cenv2[key].expr
            return [IfThen(Op("and", Op("<=", start, at), Op("<", at, end)), tuple(body_fn(cenv2, ctenv2)))]

        inside = _Body(within, vanishes=getattr(body_fn, "vanishes", False))

        return pre + self._loop(source.array, key, v, cenv, ctenv, inside, env, tenv)

    def bind_entry(self, key, value, k, v, senv, stenv, cenv, ctenv, body_fn, tested: bool = False) -> list:
        """Bind k and v of the consumer to key and value read in the source's environment.

        A key whose value is the empty dictionary is no entry: unless the body vanishes on an
        empty value (`_Body.vanishes`), it runs only when value has an entry."""
        if not getattr(body_fn, "vanishes", False):
            test, nonempty = self.entry_test(value, senv, stenv)
            unguarded = _Body(body_fn, vanishes=True)
            inner = self.bind_entry(key, value, k, v, senv, stenv, cenv, ctenv, unguarded, tested=True)
            if nonempty is None:
                return inner
            return test + [IfThen(nonempty, tuple(inner))]
        pre: list = []
        cenv2, ctenv2 = dict(cenv), dict(ctenv)
        for name, expr in ((k, key), (v, value)):
            if name == "_":
                continue
            temporary = self.fresh("entry")
            more, senv2, stenv2 = self.bind(temporary, expr, senv, stenv)
            pre += more
            binding = senv2[temporary]
            if tested and name == v and isinstance(binding, _Scalar):
                binding = replace(binding, source=None)  # tested above: it is an entry
            cenv2[name], ctenv2[name] = binding, stenv2[temporary]
        return pre + body_fn(cenv2, ctenv2)

    def entry_test(self, value: Expr, env: dict, tenv: dict) -> tuple[list, IRExpr | None]:
        """(statements, condition): whether value is an entry, i.e. not the empty dictionary
        (None: always). Stored levels and ranges need a comparison of bounds (`emptiness`);
        anything else is tested by running its loops once more, only to raise a flag."""
        suspects = frozenset(n for n, b in env.items()
                             if isinstance(b, _Scalar) and (b.source is not None or b.entry is not None))
        condition = entry_condition(value, tenv, lambda name: isinstance(env.get(name), _Array), suspects)
        if condition == TRUE:
            return [], None
        if condition is not None:
            pre, test, _ = self.scalar(condition, env, tenv)
            return pre, test
        value_type = self.typeof(value, tenv)
        match value:
            case Unique(operand=o) | Neg(operand=o) | Singleton(value=o):
                return self.entry_test(o, env, tenv)
            case If(cond=c, then=t, orelse=o):
                pre, cond, _ = self.scalar(c, env, tenv)
                then_env, else_env = self.narrowed(c, env, tenv)
                pt, ct = self.entry_test(t, then_env, tenv)
                po, co = ([], Num(False)) if o is None else self.entry_test(o, else_env, tenv)
                name = self.fresh("entry")
                then = pt + [Assign(name, Num(True) if ct is None else ct)]
                orelse = po + [Assign(name, Num(True) if co is None else co)]
                return pre + [IfThen(cond, tuple(then), tuple(orelse))], Ref(name)
            case Binary(op="+" | "-" | "*", left=l, right=r):
                pl, cl = self.entry_test(l, env, tenv)
                pr, cr = self.entry_test(r, env, tenv)
                if value.op == "*":  # {} when either factor is
                    if cl is None or cr is None:
                        return pl + pr, cr if cl is None else cl
                    return pl + pr, Op("and", cl, cr)
                if cl is None or cr is None:
                    return pl + pr, None
                return pl + pr, Unary("not", Op("and", Unary("not", cl), Unary("not", cr)))
            case Sum(key=k, val=v, source=src, body=b) if not isinstance(value_type, Dict):
                flag = self.fresh("entry")

                def raise_flag(env2, tenv2):
                    pre, test = self.entry_test(b, env2, tenv2)
                    mark = [Assign(flag, Num(True))]
                    return pre + (mark if test is None else [IfThen(test, tuple(mark))])

                loop = self.loop(src, k, v, env, tenv, _Body(raise_flag, vanishes_on_empty(b, v)))
                return [Assign(flag, Num(False)), *loop], Ref(flag)
            case Lookup(dict=d) if not isinstance(value_type, Dict):
                return self.entry_test(d, env, tenv)  # a missing key reads {} only in an empty dictionary
            case Var(name=n) if isinstance(env.get(n), _Scalar) and env[n].entry is not None:
                return [], env[n].entry
            case Var(name=n) if isinstance(env.get(n), _Scalar) and env[n].source is not None:
                return self.entry_test(*env[n].source)  # the let's value, tested where it is used
            case Let(name=n, value=x, body=b):
                pre, env2, tenv2 = self.bind(n, x, env, tenv, b)
                more, test = self.entry_test(b, env2, tenv2)
                return pre + more, test
        if isinstance(value_type, Dict):
            flag = self.fresh("nonempty")
            mark = _Body(lambda env2, tenv2: [Assign(flag, Num(True))])
            return [Assign(flag, Num(False)), *self.loop(value, "_", "_", env, tenv, mark)], Ref(flag)
        return [], None

    def array_loop(self, array, start, end, start_iv, end_iv, k, v, env, tenv2, body_fn) -> list:
        """Positions start..end-1 of an input array (clamped to the array when unprovable)."""
        position = self.fresh(k if k != "_" else "p")
        pre: list = []
        if start_iv is not None and end_iv is not None:
            iv = B.IRange(start_iv, end_iv)
            if not (start == Num(0) and end == Length(array)):
                self.check(iv, array)
        else:  # read only existing keys: the sub-array semantics, at no cost per iteration
            start, end = Fn("max", (start, Num(0))), Fn("min", (end, Length(array)))
            iv = B.IRange(B.IConst(0), B.ILen(array))
        env2 = dict(env)
        inner: list = []
        if k != "_":
            env2[k] = _Scalar(Ref(position), iv)
        if v != "_":
            int_valued = _leaf_of(self.input_types[array]) == "int"
            value = self.fresh(v)
            inner.append(Assign(value, Load(array, Ref(position))))
            env2[v] = _Scalar(Ref(value), B.IArray(array) if int_valued else None)
        return pre + [For(position, start, end, tuple(inner + body_fn(env2, tenv2)))]

    def items_loop(self, container, k, v, env, tenv2, body_fn) -> list:
        key, value = self.fresh(k if k != "_" else "k"), self.fresh(v if v != "_" else "v")
        env2 = dict(env)
        if k != "_":
            env2[k] = _Scalar(Ref(key), self.container_ivs.get(container))
        outer = self.containers[container]
        if outer.depth >= 2:  # each value is a row: a hash map the body iterates or looks up
            self.row_container(container, value)
            env2[v] = _Local(value)
        elif v != "_":
            env2[v] = _Scalar(Ref(value), None)
        return [ForItems(key, value, container, tuple(body_fn(env2, tenv2)))]

    # -- destination-passing emission -------------------------------------------------
    def scaled(self, value: IRExpr, scale: IRExpr | None) -> IRExpr:
        return value if scale is None else Op("*", scale, value)

    def times(self, stmts: list, scale: IRExpr | None, factor: IRExpr) -> IRExpr:
        combined = factor if scale is None else Op("*", scale, factor)
        return self.bind_local_value(stmts, combined, "s")

    def emit(self, e: Expr, keys: tuple, scale: IRExpr | None, sink: Sink, env: dict,
             tenv: dict) -> list:
        """Statements adding scale * e into the destination at keys (see the module doc)."""
        t = self.typeof(e, tenv)
        if isinstance(t, Zero):
            return []
        if not isinstance(t, Dict):
            if isinstance(e, Sum) and not keys and scale is None:
                # already accumulating a scalar: add every term straight into it
                return self.loop(e.source, e.key, e.val, env, tenv, _Body(
                    lambda env2, tenv2: self.emit(e.body, keys, scale, sink, env2, tenv2),
                    vanishes_on_empty(e.body, e.val)))
            if isinstance(e, If):
                return self.emit_if(e, keys, scale, sink, env, tenv)
            pre, value, _ = self.scalar(e, env, tenv)
            if value == Num(0) or value == Num(0.0):
                return pre
            return pre + sink(keys, self.scaled(value, scale))
        match e:
            case Unique(operand=o):
                return self.emit(o, keys, scale, sink, env, tenv)
            case Singleton(key=k, value=v):
                pre, key, key_iv = self.scalar(k, env, tenv)
                key = self.bind_local_value(pre, key, "key")
                writes = self.emit(v, keys + ((key, key_iv),), scale, sink, env, tenv)
                if self.filling and writes and not isinstance(t.value, Dict):
                    # an intermediate's keys are iterated: a number that is {} makes no entry
                    test, is_entry = self.entry_test(v, env, tenv)
                    if is_entry is not None:
                        return pre + test + [IfThen(is_entry, tuple(writes))]
                return pre + writes
            case Sum(key=k, val=v, source=s, body=b):
                return self.loop(s, k, v, env, tenv, _Body(
                    lambda env2, tenv2: self.emit(b, keys, scale, sink, env2, tenv2), vanishes_on_empty(b, v)))
            case Let(name=n, value=v, body=b):
                pre, env2, tenv2 = self.bind(n, v, env, tenv, b)
                return pre + self.emit(b, keys, scale, sink, env2, tenv2)
            case If():
                return self.emit_if(e, keys, scale, sink, env, tenv)
            case Binary(op="+", left=l, right=r):
                return (self.emit(l, keys, scale, sink, env, tenv)
                        + self.emit(r, keys, scale, sink, env, tenv))
            case Binary(op="-", left=l, right=r):
                pre: list = []
                negated = self.times(pre, scale, Num(-1))
                return (self.emit(l, keys, scale, sink, env, tenv)
                        + pre + self.emit(r, keys, negated, sink, env, tenv))
            case Neg(operand=o):
                pre = []
                negated = self.times(pre, scale, Num(-1))
                return pre + self.emit(o, keys, negated, sink, env, tenv)
            case Binary(op="*", left=l, right=r):
                return self.emit_product(e, l, r, keys, scale, sink, env, tenv)
            case Var() | Range() | SubArray():
                k, v = self.fresh("k"), self.fresh("v")
                return self.loop(e, k, v, env, tenv, _Body(lambda env2, tenv2: self.emit(
                    Singleton(Var(k), Var(v)), keys, scale, sink, env2, tenv2), vanishes=True))
            case Lookup():
                k, v = self.fresh("k"), self.fresh("v")
                return self.loop(e, k, v, env, tenv, _Body(lambda env2, tenv2: self.emit(
                    Singleton(Var(k), Var(v)), keys, scale, sink, env2, tenv2), vanishes=True))
        raise _unsupported("this dictionary expression", e)

    def narrowed(self, cond: Expr, env: dict, tenv: dict) -> tuple[dict, dict]:
        """The environments of the two branches of `if cond`: an int name that cond compares
        (`k < e`, `e < k`, `k = e`, under `not`s) has its interval narrowed to the keys for which
        the branch runs, so a read the comparison guards is checked only on those keys."""
        holds = True
        while isinstance(cond, Not):
            cond, holds = cond.operand, not holds
        if not (isinstance(cond, Binary) and cond.op in ("<", "=")):
            return env, env
        if any(has_loop(side) for side in (cond.left, cond.right)):
            return env, env
        left, right = (self.scalar(side, env, tenv)[2] for side in (cond.left, cond.right))
        plus_one = lambda iv: B.arith("+", iv, B.IConst(1))  # noqa: E731
        if cond.op == "<":  # true: left < right (left <= right - 1); false: right <= left
            true = {cond.left: (None, right), cond.right: (plus_one(left), None)}
            false = {cond.left: (right, None), cond.right: (None, plus_one(left))}
        else:
            true = {cond.left: (right, plus_one(right)), cond.right: (left, plus_one(left))}
            false = {}
        if not holds:
            true, false = false, true
        return self._with_bounds(env, true), self._with_bounds(env, false)

    @staticmethod
    def _with_bounds(env: dict, bounds: dict) -> dict:
        narrowed = env
        for side, (at_least, below) in bounds.items():
            binding = env.get(side.name) if isinstance(side, Var) else None
            if isinstance(binding, _Scalar) and binding.iv is not None and (at_least or below):
                if narrowed is env:
                    narrowed = dict(env)
                narrowed[side.name] = replace(binding, iv=B.clamp(binding.iv, at_least, below))
        return narrowed

    def emit_if(self, e: If, keys, scale, sink, env, tenv) -> list:
        pre, cond, _ = self.scalar(e.cond, env, tenv)
        then_env, else_env = self.narrowed(e.cond, env, tenv)
        then = self.emit(e.then, keys, scale, sink, then_env, tenv)
        orelse = [] if e.orelse is None else self.emit(e.orelse, keys, scale, sink, else_env, tenv)
        if not then and not orelse:
            return pre
        return pre + [IfThen(cond, tuple(then), tuple(orelse))]

    def emit_product(self, e, l, r, keys, scale, sink, env, tenv) -> list:
        lt, rt = self.typeof(l, tenv), self.typeof(r, tenv)
        if isinstance(lt, Zero) or isinstance(rt, Zero):
            return []
        if not isinstance(lt, Dict) or not isinstance(rt, Dict):
            factor_expr, dict_expr = (l, r) if not isinstance(lt, Dict) else (r, l)
            pre, factor, _ = self.scalar(factor_expr, env, tenv)
            combined = self.times(pre, scale, factor)
            return pre + self.emit(dict_expr, keys, combined, sink, env, tenv)
        # outer product: the right operand is added at every leaf of the left one, scaled by
        # the left leaf; a costly right operand is built once, before the loops of the left.
        pre: list = []
        env2, tenv2 = env, tenv
        if has_loop(r) and not isinstance(r, Var):
            name = self.fresh("rhs")
            pre, env2, tenv2 = self.bind(name, r, env, tenv)
            r = Var(name)

        def right_at_leaf(leaf_keys, value):
            stmts: list = []
            leaf_scale = self.bind_local_value(stmts, value, "s")
            return stmts + self.emit(r, leaf_keys, leaf_scale, sink, env2, tenv2)

        return pre + self.emit(l, keys, scale, right_at_leaf, env2, tenv2)


def _writes_whole_rows(value: Expr, outside: Callable[[Expr], str | None] = lambda source: None) -> bool:
    """Whether every entry `{row -> {col -> x}}` of value has its column drawn from a loop over
    a range that the row key does not vary in (`sum(<_, col> in (lo:hi))` inside the binding of
    every name of the row key): each row written is then written over a whole range of
    columns, so its dense row costs no more than its hash row. A CSC definition (the column
    loop outside the row key's loop) writes one entry per row and column: not so.
    `outside(source)` says what a name bound outside value is: "range", or "row" for a lookup
    of a row of a matrix itself written by whole rows (its keys are then such a range).
    A loop over a vector that is itself written whole (`sum(<col, x> in h)` where every entry of
    h has its key drawn from such a loop, as a dense row times a dense matrix) counts as a
    loop over its range: a hidden layer `tanh(A X W)` is a grid, not hash rows."""
    return _whole_keyed(value, 2, outside, frozenset())


def _whole_keyed(value: Expr, depth: int, outside: Callable[[Expr], str | None],
                 whole: frozenset[str]) -> bool:
    """Whether every entry of value (at key depth `depth`, 1 or 2) has its last key drawn from
    a loop over a range or over a vector written whole, a loop the earlier key does not vary in.
    `whole`: names bound outside value to vectors written whole."""
    entries, verdicts = 0, []
    ranges: set[str] = set()  # names let-bound to a range inside value
    wholes: set[str] = set(whole)  # names let-bound to a vector written whole

    def kind_of(src: Expr) -> str | None:
        if isinstance(src, Range) or (isinstance(src, Var) and src.name in ranges):
            return "range"
        if isinstance(src, Var) and src.name in wholes:
            return "row"
        if isinstance(src, (Sum, Let)) and _whole_keyed(src, 1, outside, frozenset(wholes)):
            return "row"
        return outside(src)

    def visit(e: Expr, bound: tuple[str, ...], column_loops: dict[str, int], result: bool) -> None:
        """`result`: e is on the path of the entries of value (not a let's value, a source...)."""
        nonlocal entries
        match e:
            case Sum(key=k, val=v, source=src, body=b):
                visit(src, bound, column_loops, False)
                inner = dict(column_loops)
                inner.pop(k, None)
                inner.pop(v, None)
                kind = kind_of(src) if result else None
                if kind == "range" and v != "_":
                    inner[v] = len(bound)  # the names bound from here on vary in this loop
                elif kind == "row" and k != "_":
                    inner[k] = len(bound)
                visit(b, bound + (k, v), inner, result)
            case Let(name=n, value=x, body=b):
                visit(x, bound, column_loops, False)
                inner = dict(column_loops)
                inner.pop(n, None)
                ranges.discard(n)
                wholes.discard(n)
                if isinstance(x, Range):
                    ranges.add(n)
                elif isinstance(x, (Sum, Let)) and _whole_keyed(x, 1, outside, frozenset(wholes)):
                    wholes.add(n)
                visit(b, bound + (n,), inner, result)
            case LetTuple():
                verdicts.append(False)
            case Singleton(key=row, value=Singleton(key=column)) if result and depth == 2:
                entries += 1
                while isinstance(row, Unique):
                    row = row.operand
                while isinstance(column, Unique):
                    column = column.operand
                start = column_loops.get(column.name) if isinstance(column, Var) else None
                verdicts.append(start is not None and not (free_vars(row) & set(bound[start:])))
                visit(e.value.value, bound, column_loops, False)
            case Singleton(key=column) if result and depth == 1:
                entries += 1
                while isinstance(column, Unique):
                    column = column.operand
                verdicts.append(isinstance(column, Var) and column.name in column_loops)
                visit(e.value, bound, column_loops, False)
            case Singleton() if result:
                verdicts.append(False)  # a row built some other way: not known to be whole
            case If(cond=c, then=t, orelse=o) if result and depth == 1:
                visit(c, bound, column_loops, False)
                for branch in (t, o):
                    if branch is not None:
                        visit(branch, bound, column_loops, True)
            case Var(name=n) if result and depth == 1 and n in wholes:
                entries += 1  # a vector written whole, as it is
            case Lookup() if result and depth == 1 and outside(e) == "row":
                entries += 1  # a row of a matrix written by whole rows
            case Lookup() | Call() if result and depth == 1:
                # a number (a scale: the physical inputs are arrays of numbers) or a vector of
                # unknown keys: only a guide to cost, as the grid marks what it holds either way
                for child in children(e):
                    visit(child, bound, column_loops, False)
            case Binary() | Neg() if result and depth == 1:
                for child in children(e):  # a sum, difference or scaling of vectors
                    visit(child, bound, column_loops, True)
            case _:
                for child in children(e):
                    visit(child, bound, column_loops, result)

    visit(value, (), {}, True)
    return entries > 0 and all(verdicts)


def _grids(body, candidates: set[str]) -> dict[str, bool]:
    """{name: marked} of the depth-2 containers that become dense grids: rows written whole
    over a range of columns (`materialize` decides), filled once at the top level. A grid that
    is only read by key needs nothing else (an absent key reads zero either way); one whose
    entries or rows are iterated also marks which keys were written (`marked`)."""
    fills: dict[str, int] = {}
    disqualified: set[str] = set()
    iterated: set[str] = set()

    def expressions(node):
        if isinstance(node, RowOf):
            iterated.add(node.container)
        if isinstance(node, LocalGet) and node.container in candidates:
            disqualified.add(node.container)  # a depth-2 container read as a vector: not ours
        for value in vars(node).values() if hasattr(node, "__dict__") else ():
            if isinstance(value, IRExpr):
                expressions(value)
            elif isinstance(value, tuple):
                for item in value:
                    if isinstance(item, IRExpr):
                        expressions(item)

    def visit(stmts, top: bool) -> None:
        for stmt in stmts:
            if isinstance(stmt, Fill):
                fills[stmt.container] = fills.get(stmt.container, 0) + 1
                if not top:
                    disqualified.add(stmt.container)
            if isinstance(stmt, ForItems):
                iterated.add(stmt.container)
            expressions(stmt)
            for field_name in ("body", "then", "orelse"):
                inner = getattr(stmt, field_name, None)
                if inner:
                    visit(inner, False)

    visit(body, True)
    return {c: c in iterated for c in sorted(candidates)
            if fills.get(c, 0) == 1 and c not in disqualified}


def _refilled(body) -> list[str]:
    """The containers filled inside a loop (a row's intermediate, refilled per row), in order.
    Nested ones become tries (`runtime.trie_*`): a typed dict per row and level cost 25 ns per
    operation and an allocation per row (a Jacobian's tangents: 80% of the kernel); those filled
    once at the top level (a COO definition's rows, as large as the input) stay typed dicts,
    as a trie reserves a bounded number of nodes (`runtime.TRIE_NODES`)."""
    found: list[str] = []

    def visit(stmts, top: bool) -> None:
        for stmt in stmts:
            if isinstance(stmt, Fill) and not top and stmt.container not in found:
                found.append(stmt.container)
            for field_name in ("body", "then", "orelse"):
                inner = getattr(stmt, field_name, None)
                if inner:
                    visit(inner, top and field_name != "body")

    visit(body, True)
    return found


def lower(expr: Expr, input_types: Mapping[str, Type]) -> LoopProgram:
    """The loop program of a physical program whose inputs are ints, reals and 1-D arrays.

    Inputs the program does not use are left out of the kernel's parameters (whatever their
    type), so callers may pass every input they have."""
    used = free_vars(expr)
    input_types = {n: t for n, t in input_types.items() if n in used}
    for name, t in input_types.items():
        if not name.isidentifier():
            raise UnsupportedError(f"input name {name!r} is not an identifier; rename it "
                                   f"(compile_physical does so itself)")
        if isinstance(t, Dict) and (isinstance(t.value, Dict) or not isinstance(t.value, (Real, Int))):
            raise UnsupportedError(f"input {name!r} has type {t}; compiled kernels take ints, reals "
                                   f"and 1-D arrays {{dense_int -> int|real}} (bind nested inputs "
                                   f"to their physical definitions first)")
    expr = desugar_let_tuples(expr)
    result_type = infer(expr, input_types)
    leaf = _leaf_of(result_type)
    if leaf not in ("real", "int"):
        if isinstance(result_type, Zero):
            raise UnsupportedError("the program is the empty dictionary {}: there is nothing to compile")
        raise UnsupportedError(f"a program whose result is {result_type}; compiled kernels return "
                               f"numbers or dictionaries of numbers")
    depth = _depth(result_type)
    lowerer = _Lowerer(input_types)
    env: dict = {}
    for name, t in input_types.items():
        if isinstance(t, Dict):
            env[name] = _Array(name)
        else:
            env[name] = _Scalar(Ref(name), B.IScalar(name) if isinstance(t, Int) else None)
    out_ivs: list[list] = [[] for _ in range(depth)]

    def into_output(keys, value):
        if len(keys) != depth:
            raise UnsupportedError(f"code generation reached a value at key depth {len(keys)} of "
                                   f"an output of depth {depth}")
        for level, (_, iv) in enumerate(keys):
            out_ivs[level].append(iv)
        return [Accumulate(OUTPUT, tuple(k for k, _ in keys), value, tuple(iv for _, iv in keys))]

    body = lowerer.emit(expr, (), None, into_output, env, dict(input_types))
    body = list(hoist_entry_tests(tuple(body), lowerer.containers))  # out of loops they do not depend on
    for name, marked in _grids(body, lowerer.grid_candidates).items():
        container = lowerer.containers[name]
        lowerer.containers[name] = Container(name, "grid", container.key_iv, container.leaf, 2,
                                             lowerer.row_ivs[name], marked=marked)
        lowerer.check(container.key_iv, name, "writes the intermediate")
        lowerer.check(lowerer.row_ivs[name], f"{name}__cols", "writes the intermediate")
    for name in _refilled(body):
        container = lowerer.containers[name]
        if container.kind == "hash" and container.depth >= 2:
            lowerer.containers[name] = replace(container, kind="trie")
    key_ivs = []
    for ivs in out_ivs:
        hull = ivs[0] if ivs else B.IConst(0)
        for iv in ivs[1:]:
            hull = B.join(hull, iv)
        key_ivs.append(hull)
    return LoopProgram(params=tuple(input_types), param_types=tuple(input_types.values()),
                       body=tuple(body), containers=tuple(lowerer.containers.values()),
                       depth=depth, leaf=leaf, result_type=result_type, key_ivs=tuple(key_ivs),
                       checks=tuple(lowerer.checks), program=expr)


__all__ = ["lower", "LoopProgram", "Container", "IRExpr", "Stmt", "OUTPUT", "accumulates", "Num",
           "Ref", "Op", "Unary", "Fn", "Load", "Length", "LocalGet", "HasKey", "RowOf", "RowGet",
           "Choose", "Assign", "AddTo", "For", "ForItems", "Accumulate", "IfThen", "Fill"]
