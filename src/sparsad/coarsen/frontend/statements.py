"""Tracer part: straight-line statements (assignments, augmented assignments, imports, local defs, return)
and `if`."""
from __future__ import annotations

import ast
import copy

from sparsad.coarsen import budget, ssa
from sparsad.coarsen.source import CoarsenUnsupported
from sparsad.coarsen.frontend.values import (
    DYNAMIC,
    DynamicInTensorMath,
    _NeedsStaticLoop,
    _Detached,
    _traced,
    site_of,
    _broadcast,
    _Return,
    _counter_sites,
    _source_line,
    _walk_own_scope,
)


class StatementsMixin:
    """Methods of ``Tracer`` (see ``frontend/__init__.py``) for statements."""

    # ------------------------------------------------------------- statements
    def run(self, stmts: list[ast.stmt], env: dict) -> dict:
        for stmt in stmts:
            env = self.stmt(stmt, env)
        return env

    def stmt(self, node: ast.stmt, env: dict) -> dict:
        method = getattr(self, "st_" + type(node).__name__, None)
        if method is None:
            raise CoarsenUnsupported(f"line {node.lineno}: statement {type(node).__name__} is not supported")
        self.line = node.lineno
        budget.check()
        try:
            return method(node, env)
        except DynamicInTensorMath as why:
            if why.names:
                raise
            names = tuple(sorted({sub.id for sub in ast.walk(node)
                                  if isinstance(sub, ast.Name) and env.get(sub.id, None) is DYNAMIC}))
            listed = ", ".join(f"`{n}`" for n in names) or "a value"
            raise DynamicInTensorMath(
                f"line {node.lineno}: {listed} (a Python number that changes inside a loop) is used in tensor "
                f"arithmetic in `{_source_line(node)}`", names) from None

    def st_Expr(self, node, env):
        if isinstance(node.value, ast.Constant):
            return env  # docstring
        call = node.value
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
                and call.func.attr in ("append", "extend") and len(call.args) == 1 and not call.keywords):
            return self.grow_list(call.func.value.id, call.func.attr, self.ev(call.args[0], env), node, env)
        raise CoarsenUnsupported(f"line {node.lineno}: the expression statement `{_source_line(node)}` (a side "
                                 "effect) is not supported")

    def st_Pass(self, node, env):
        return env

    def st_FunctionDef(self, node, env):
        if node.decorator_list:
            raise CoarsenUnsupported(f"line {node.lineno}: a decorated local function {node.name}()")
        env = dict(env)
        env[node.name] = self.local_function(node, env)
        return env

    def st_Import(self, node, env):
        import importlib

        env = dict(env)
        for alias in node.names:
            module = importlib.import_module(alias.name)
            if alias.asname:
                env[alias.asname] = module
            else:
                env[alias.name.split(".")[0]] = importlib.import_module(alias.name.split(".")[0])
        return env

    def st_ImportFrom(self, node, env):
        import importlib

        if node.level:
            raise CoarsenUnsupported(f"line {node.lineno}: relative import inside a traced function")
        env = dict(env)
        module = importlib.import_module(node.module)
        for alias in node.names:
            env[alias.asname or alias.name] = getattr(module, alias.name)
        return env

    def st_Assign(self, node, env):
        value = self.ev(node.value, env)
        env = dict(env)
        for target in node.targets:
            self.bind(target, value, env)
        return env

    def st_AnnAssign(self, node, env):
        env = dict(env)
        if node.value is not None:
            self.bind(node.target, self.ev(node.value, env), env)
        return env

    def st_AugAssign(self, node, env):
        if isinstance(node.target, ast.Subscript) and isinstance(node.target.value, ast.Name):
            load = copy.copy(node.target)
            load.ctx = ast.Load()
            value = self.ev_BinOp(ast.BinOp(left=load, op=node.op, right=node.value, lineno=node.lineno), env)
            env = dict(env)
            self.assign_item(node.target, value, env)
            return env
        if not isinstance(node.target, ast.Name):
            raise CoarsenUnsupported(f"line {node.lineno}: in-place update of {type(node.target).__name__}")
        name = node.target.id
        value = self.ev_BinOp(ast.BinOp(left=ast.Name(name, ast.Load(), lineno=node.lineno),
                                        op=node.op, right=node.value, lineno=node.lineno), env)
        old = env.get(name)
        if _traced(old) and self.in_place_updates:  # torch's `t += v` updates t: every other reference sees it
            why = self.writable(old, name, env)
            if why:
                raise CoarsenUnsupported(f"line {node.lineno}: `{_source_line(node)}` updates {name!r} in place, "
                                         f"which {why}; autograd would see the update there too")
            if _traced(value) and tuple(value.shape) != tuple(old.shape):
                raise CoarsenUnsupported(f"line {node.lineno}: `{_source_line(node)}` would change the shape of "
                                         f"{name!r} from {list(old.shape)} to {list(value.shape)} in place")
        env = dict(env)
        env[name] = value
        return env

    def bind(self, target, value, env):
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if _traced(value):
                if not value.shape or len(value.shape) < 1:
                    raise CoarsenUnsupported(f"line {target.lineno}: unpacking a scalar")
                value = tuple(ssa.View(value.shape[1:], value, i) for i in range(value.shape[0]))
            if value is DYNAMIC:
                raise CoarsenUnsupported(f"line {target.lineno}: unpacking a dynamic value")
            value = tuple(value)
            if len(value) != len(target.elts):
                raise CoarsenUnsupported(f"line {target.lineno}: unpacking {len(value)} values into {len(target.elts)}")
            for t, v in zip(target.elts, value):
                self.bind(t, v, env)
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            self.assign_item(target, value, env)
        else:
            raise CoarsenUnsupported(f"line {target.lineno}: assignment to `{_source_line(target)}` "
                                     f"({type(target).__name__}) is not supported")

    def st_Return(self, node, env):
        raise _Return(self.ev(node.value, env) if node.value is not None else None)

    def st_If(self, node, env):
        test = self.ev(node.test, env)
        if isinstance(test, _Detached):
            test = self.op("ne", test, 0.0)
        if not _traced(test) and test is not DYNAMIC:
            return self.run(node.body if test else node.orelse, env)
        if _traced(test) and test.shape != ():
            raise CoarsenUnsupported(f"line {node.lineno}: `if` on a non-scalar tensor")
        counters = _counter_sites(test)
        if counters and all(self.short_loops.get(site) for site in counters):
            # `if i != j` on counters of short loops: unrolled, the test is a Python bool
            raise _NeedsStaticLoop(f"line {node.lineno}: `if` on loop counters", counters)
        for stmt in node.body + node.orelse:
            for sub in _walk_own_scope(stmt):
                if isinstance(sub, (ast.Return, ast.Break, ast.Continue)):
                    raise CoarsenUnsupported(f"line {sub.lineno}: {type(sub).__name__.lower()} inside a traced `if` "
                                             "(only `if ...: break` at the top of a loop body is supported)")
        if self.inlining:
            raise CoarsenUnsupported(f"line {node.lineno}: an `if` on a traced value inside helper "
                                     f"{self.fn_stack[-1].__name__}() (inline it by hand or move the `if` out)")
        site = site_of(node)
        if site not in self.branch_sites:
            self.branch_sites.append(site)
        entry = self.entry(site)
        then_env = self.run(node.body, dict(env))
        else_env = self.run(node.orelse, dict(env))
        merged = dict(env)
        for name in set(then_env) | set(else_env):
            a, b = then_env.get(name, else_env.get(name)), else_env.get(name, then_env.get(name))
            if a is b:
                merged[name] = a
            elif a is DYNAMIC or b is DYNAMIC:
                merged[name] = DYNAMIC
            elif _traced(a) or _traced(b):
                a, b = self.const(a), self.const(b)
                merged[name] = ssa.Phi(_broadcast(a.shape, b.shape), site, a, b, entry, tuple(self.loop_stack),
                                       test if isinstance(test, ssa.Node) else None)
            elif a == b:
                merged[name] = a
            else:
                merged[name] = DYNAMIC
        return merged
