"""Which TensorRT / pycuda / cuda-python names cosyedge uses, on which TensorRT version's code path.

Test helper of ``test_api_conformance.py`` (no TensorRT, pycuda or GPU needed). It reads cosyedge's source
with :mod:`ast`, never a hand-written list:

* **taint**: an expression is an API object when it is rooted at an ``import tensorrt`` / ``import
  pycuda.driver`` / ``importlib.import_module("cuda.bindings.runtime")`` binding, or at a value derived from
  one (assignments, tuple unpacking, loops, ``self.`` attributes of the class, arguments passed to cosyedge
  functions, values returned by them, e.g. ``trt, cuda = require_stack(...)``). Every attribute read or
  written on such an object, every keyword argument of a TensorRT call and every ``getattr``/``hasattr`` name
  is a *use*; a ``getattr`` whose name is a variable is resolved from the values that variable can take
  (``for flag in plan.builder_flags: getattr(trt.BuilderFlag, flag)``: the flags of the real
  :func:`cosyedge.runtime.trt_compat.plan_build` plus the literals cosyedge appends to that list).
* **guards**: each use keeps the ``if`` / ``x if c else y`` / ``and`` / ``or`` conditions around it and the
  call sites of its function. Per TensorRT version a condition is evaluated with cosyedge's real decision
  functions (:func:`~cosyedge.runtime.trt_compat.features`, :func:`~cosyedge.runtime.trt_compat.plan_build`, and
  any cosyedge function the condition's values come from) on a stand-in ``tensorrt`` module whose attributes
  are the names of that version's compiled bindings, for every build configuration (precision, sparse, DLA,
  GPU fallback) that version accepts. A condition that cannot be evaluated counts as both ways (the names
  under it count as used on every version): the check errs towards flagging, never towards hiding.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib
import itertools
import types
from collections.abc import Iterable
from typing import Any

STACK_MODULES = {"tensorrt": "tensorrt", "pycuda.driver": "pycuda", "cuda.bindings.runtime": "cudart",
                 "cuda.cudart": "cudart"}
"""dict[str, str]: importable module -> the API stack its names belong to."""
NON_API_RESULTS = {("tensorrt", "__version__"), ("tensorrt", "get_engine_information"),
                   ("tensorrt", "get_tensor_name"), ("tensorrt", "get_binding_name"), ("tensorrt", "nptype"),
                   ("pycuda", "pagelocked_empty")}
"""set[tuple[str, str]]: API members whose value is a plain Python/numpy object (str, numpy array, numpy type),
not an API object: attributes read on it afterwards are not API names."""
SAFE_BUILTINS = {"int", "len", "str", "bool", "isinstance", "getattr", "hasattr", "list", "tuple", "set", "dict",
                 "any", "all", "sorted", "min", "max", "frozenset"}
"""set[str]: builtins a condition may call while it is evaluated."""

UNKNOWN = object()
_BUSY = object()


@dataclasses.dataclass(frozen=True)
class Stack:
    """An API object: ``stack`` (tensorrt | pycuda | cudart) and the attribute path from its module."""

    stack: str
    chain: tuple = ()


@dataclasses.dataclass(frozen=True)
class Tup:
    """A tuple whose items are resolved separately (for unpacking)."""

    items: tuple


@dataclasses.dataclass(frozen=True)
class Val:
    """A concrete Python value (only while evaluating for one version)."""

    v: Any


class StandIn:
    """A stand-in ``tensorrt`` module: an attribute exists iff its name is in ``names`` (any depth).

    Args:
        names (frozenset[str]): The names of one version's compiled bindings.
        version (str): ``__version__``.
        path (tuple): Attribute path from the module (for repr).
    """

    def __init__(self, names: frozenset, version: str, path: tuple = (), _sorted: list | None = None):
        self._names, self._version, self._path = names, version, path
        self._sorted = sorted(names) if _sorted is None else _sorted

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") and name != "__version__":
            raise AttributeError(name)
        if name == "__version__" and not self._path:
            return self._version
        if name in self._names:
            return StandIn(self._names, self._version, self._path + (name,), self._sorted)
        raise AttributeError(name)

    def __dir__(self) -> list:
        return self._sorted

    def __repr__(self) -> str:
        return f"<tensorrt {self._version} {'.'.join(self._path) or 'module'}>"


@dataclasses.dataclass
class Use:
    """One API name used by cosyedge.

    Attributes:
        stack (str): tensorrt | pycuda | cudart.
        chain (tuple): Attribute path of the object the name is read on (``("BuilderFlag",)``).
        name (str | None): The name; None for a dynamic ``getattr`` (see ``name_expr``).
        where (str): ``file:line``.
        fn (FuncInfo): Enclosing function.
        guards (tuple): ``(condition, polarity)`` pairs around the use.
        probe (bool): ``hasattr`` / ``getattr(..., default)``: feature detection, may be absent.
        nargs (int | None): Positional argument count when the name is called (None: not a call / ``*args``).
        keywords (tuple): Keyword argument names of that call.
        alt (int | None): Id of a ``try ... except TypeError`` group: calls of one group are alternatives.
        name_expr (ast.expr | None): The name expression of a dynamic ``getattr``.
    """

    stack: str
    chain: tuple
    name: str | None
    where: str
    fn: Any
    guards: tuple
    probe: bool = False
    nargs: int | None = None
    keywords: tuple = ()
    alt: int | None = None
    name_expr: Any = None

    @property
    def label(self) -> str:
        """str: ``tensorrt: BuilderFlag.FP16 (cosyedge/builders/trt.py:123)``."""
        path = ".".join(c for c in self.chain if c != "()") or self.stack
        return f"{self.stack}: {path}.{self.name or '<dynamic>'} ({self.where})"


class FuncInfo:
    """A function (or method) of an analysed module: its bindings, parameters and call sites."""

    def __init__(self, node: ast.AST, mod: ModInfo, cls: str | None, parent: FuncInfo | None):
        self.node, self.mod, self.cls, self.parent = node, mod, cls, parent
        a = node.args
        self.params = [p.arg for p in (*a.posonlyargs, *a.args)]
        self.kwonly = [p.arg for p in a.kwonlyargs]
        defaults = a.defaults
        self.defaults = dict(zip(self.params[len(self.params) - len(defaults):], defaults))
        self.defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
        self.bindings: dict[str, list] = {}
        self.returns: list[ast.expr] = []
        self.sites: list = []  # (caller FuncInfo, ast.Call, guards)
        self.is_method = cls is not None

    @property
    def name(self) -> str:
        """str: the function's name."""
        return self.node.name

    @property
    def public(self) -> bool:
        """bool: called from outside the analysed code (no leading underscore, or a dunder)."""
        n = self.name
        return not n.startswith("_") or (n.startswith("__") and n.endswith("__"))

    def lookup(self, name: str) -> tuple[FuncInfo | None, list | None]:
        """The innermost function binding ``name`` and its bindings, or (None, None) for globals."""
        f = self
        while f is not None:
            if name in f.params or name in f.kwonly:
                return f, [("param", name)]
            if name in f.bindings:
                return f, f.bindings[name]
            f = f.parent
        return None, None


class ModInfo:
    """A parsed module: ``path`` for messages, ``ns`` the namespace its globals are read from."""

    def __init__(self, path: str, source: str, ns: Any):
        self.path, self.ns = path, ns
        self.tree = ast.parse(source)
        self.funcs: list[FuncInfo] = []
        self.defs: dict[str, FuncInfo] = {}
        self.imports: dict[str, tuple] = {}  # module-level name -> ("module", mod) | ("from", mod, name)
        self.assigns: dict[str, ast.expr] = {}  # module-level ``name = value``
        self.self_bindings: dict[tuple, list] = {}  # (class, attr) -> [(FuncInfo, value expr, index, guards)]


def _enclosing(binds: list, e: ast.AST) -> list:
    """Of several bindings of a name, the ``for`` loops around ``e`` when there are any (a loop variable
    reused by two loops means the innermost loop around the use), else all."""
    line = getattr(e, "lineno", None)
    inside = [k for k in binds if k[0] == "for" and k[2] is not None and line is not None
              and k[2].lineno <= line <= k[2].end_lineno]
    if inside:
        return [max(inside, key=lambda k: k[2].lineno)]
    return binds


def _bind_target(target: ast.expr, kind: tuple, out: dict, index: tuple = ()) -> None:
    if isinstance(target, ast.Name):
        out.setdefault(target.id, []).append(kind + (index,))
    elif isinstance(target, (ast.Tuple, ast.List)):
        for i, t in enumerate(target.elts):
            _bind_target(t, kind, out, index + (i,))


class Analysis:
    """Uses of API names in a set of modules, with per-version liveness.

    Args:
        modules (Iterable[tuple[str, str, Any]]): ``(path, source, namespace)``; the namespace (a module or
            an object with the module's globals as attributes) is where global names are evaluated.
    """

    def __init__(self, modules: Iterable[tuple[str, str, Any]]):
        self.mods = [ModInfo(p, s, ns) for p, s, ns in modules]
        self.uses: list[Use] = []
        self.appends: list = []  # (FuncInfo, target expr dump, [str], guards)
        self._alt = itertools.count(1)
        self._memo: dict = {}
        self._cycles = 0
        self._live_memo: dict = {}
        for m in self.mods:
            self._index(m)
        for m in self.mods:
            for f in m.funcs:
                self._bindings(f)
        # pass 1: call sites, self.<attr> bindings and list appends (with their guards); pass 2: the uses,
        # resolved with every call site and binding known
        for self._pass in (1, 2):
            self._memo.clear()
            for m in self.mods:
                for f in m.funcs:
                    self._walk_body(f, f.node.body, (), None)
        self._memo.clear()

    # ---------------------------------------------------------------- indexing
    def _index(self, m: ModInfo) -> None:
        # methods keep their class: visit class bodies with cls set, function bodies with cls reset
        def _visit(node, cls, parent):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    fi = FuncInfo(child, m, cls, parent)
                    m.funcs.append(fi)
                    if parent is None and cls is None:
                        m.defs[child.name] = fi
                    _visit(child, None, fi)
                elif isinstance(child, ast.ClassDef):
                    _visit(child, child.name, parent)
                else:
                    _visit(child, cls, parent)

        _visit(m.tree, None, None)
        top = ast.parse("def _module_level_(): pass").body[0]
        m.top = FuncInfo(top, m, None, None)
        for node in m.tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                m.assigns[node.targets[0].id] = node.value
            if isinstance(node, ast.Import):
                for a in node.names:
                    m.imports[a.asname or a.name.split(".")[0]] = ("module", a.name if a.asname else a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    m.imports[a.asname or a.name] = ("from", node.module, a.name)

    def _own_nodes(self, f: FuncInfo):
        """Nodes of ``f``'s body, not descending into nested functions/lambdas (class bodies included)."""
        stack = list(f.node.body)
        while stack:
            n = stack.pop()
            yield n
            for c in ast.iter_child_nodes(n):
                if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    stack.append(c)

    def _bindings(self, f: FuncInfo) -> None:
        b = f.bindings
        for n in self._own_nodes(f):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    _bind_target(t, ("assign", n.value), b)
            elif isinstance(n, ast.AugAssign | ast.AnnAssign) and n.value is not None:
                _bind_target(n.target, ("assign", n.value), b)
            elif isinstance(n, ast.For):
                _bind_target(n.target, ("for", n.iter, n), b)
            elif isinstance(n, ast.comprehension):
                _bind_target(n.target, ("for", n.iter, None), b)
            elif isinstance(n, ast.withitem) and n.optional_vars is not None:
                _bind_target(n.optional_vars, ("with", n.context_expr), b)
            elif isinstance(n, ast.Import):
                for a in n.names:
                    if a.asname:
                        b.setdefault(a.asname, []).append(("module", a.name, ()))
                    else:
                        b.setdefault(a.name.split(".")[0], []).append(("module", a.name.split(".")[0], ()))
            elif isinstance(n, ast.ImportFrom) and n.module:
                for a in n.names:
                    b.setdefault(a.asname or a.name, []).append(("from", n.module, a.name, ()))
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                b.setdefault(n.name, []).append(("def", n, ()))
            elif isinstance(n, ast.Return) and n.value is not None:
                f.returns.append(n.value)

    # ---------------------------------------------------------------- walking (uses, call sites)
    def _walk_body(self, f: FuncInfo, stmts: list, guards: tuple, alt: int | None) -> None:
        for s in stmts:
            self._walk_stmt(f, s, guards, alt)

    def _walk_stmt(self, f: FuncInfo, s: ast.stmt, guards: tuple, alt: int | None) -> None:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in s.decorator_list:
                self._walk_expr(f, d, guards, alt)
            return
        if isinstance(s, ast.ClassDef):
            for e in (*s.bases, *s.decorator_list):
                self._walk_expr(f, e, guards, alt)
            self._walk_body(f, [c for c in s.body if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef))],
                            guards, alt)
            return
        if isinstance(s, ast.If):
            self._walk_expr(f, s.test, guards, alt)
            self._walk_body(f, s.body, guards + ((s.test, True),), alt)
            self._walk_body(f, s.orelse, guards + ((s.test, False),), alt)
            return
        if isinstance(s, ast.Try):
            catches_type_error = any(h.type is not None and "TypeError" in ast.unparse(h.type) for h in s.handlers)
            group = next(self._alt) if catches_type_error else alt
            self._walk_body(f, s.body, guards, group)
            for h in s.handlers:
                self._walk_body(f, h.body, guards, group)
            self._walk_body(f, s.orelse + s.finalbody, guards, alt)
            return
        if self._pass == 2:
            pass
        elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):  # X.append("LIT") / X.extend([...])
            c = s.value
            if isinstance(c.func, ast.Attribute) and c.func.attr in ("append", "extend") and c.args:
                lits = _str_literals(c.args[0])
                if lits:
                    self.appends.append((f, ast.dump(c.func.value), lits, guards))
        if self._pass == 1 and isinstance(s, ast.AugAssign) and isinstance(s.op, ast.Add):
            lits = _str_literals(s.value)
            if lits:
                self.appends.append((f, ast.dump(_load(s.target)), lits, guards))
        if self._pass == 1 and isinstance(s, ast.Assign):
            for t in s.targets:
                self._self_binding(f, t, s.value, (), guards)
        for field, value in ast.iter_fields(s):
            if isinstance(value, list):
                for v in value:
                    if isinstance(v, ast.stmt):
                        self._walk_stmt(f, v, guards, alt)
                    elif isinstance(v, ast.AST):
                        self._walk_expr(f, v, guards, alt)
            elif isinstance(value, ast.AST):
                if isinstance(value, ast.stmt):
                    self._walk_stmt(f, value, guards, alt)
                else:
                    self._walk_expr(f, value, guards, alt)

    def _self_binding(self, f: FuncInfo, target: ast.expr, value: ast.expr, index: tuple, guards: tuple) -> None:
        cls = self._class_of(f)
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self" \
                and cls is not None:
            f.mod.self_bindings.setdefault((cls, target.attr), []).append((f, value, index, guards))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for i, t in enumerate(target.elts):
                self._self_binding(f, t, value, index + (i,), guards)

    @staticmethod
    def _class_of(f: FuncInfo) -> str | None:
        return f.cls or (f.parent.cls if f.parent is not None else None)

    def _walk_expr(self, f: FuncInfo, e: ast.AST, guards: tuple, alt: int | None) -> None:
        if isinstance(e, ast.IfExp):
            self._walk_expr(f, e.test, guards, alt)
            self._walk_expr(f, e.body, guards + ((e.test, True),), alt)
            self._walk_expr(f, e.orelse, guards + ((e.test, False),), alt)
            return
        if isinstance(e, ast.BoolOp):
            g = guards
            for v in e.values:
                self._walk_expr(f, v, g, alt)
                g = g + ((v, isinstance(e.op, ast.And)),)
            return
        if isinstance(e, ast.Lambda):
            return
        if isinstance(e, ast.Call):
            if self._pass == 1:
                self._call_site(f, e, guards)
            else:
                self._api_call(f, e, guards, alt)
            if isinstance(e.func, ast.Attribute):  # the callee's attribute is recorded with the call's arguments
                self._walk_expr(f, e.func.value, guards, alt)
                for a in (*e.args, *[k.value for k in e.keywords]):
                    self._walk_expr(f, a, guards, alt)
                return
        if isinstance(e, ast.Attribute) and self._pass == 2:
            self._attr_use(f, e, guards, alt, None)
        for child in ast.iter_child_nodes(e):
            self._walk_expr(f, child, guards, alt)

    def _where(self, f: FuncInfo, node: ast.AST) -> str:
        return f"{f.mod.path}:{getattr(node, 'lineno', '?')}"

    def _attr_use(self, f: FuncInfo, e: ast.Attribute, guards: tuple, alt: int | None, call: ast.Call | None):
        r = self.resolve(e.value, f)
        if isinstance(r, Stack):
            nargs = keywords = None
            if call is not None:
                nargs = None if any(isinstance(a, ast.Starred) for a in call.args) else len(call.args)
                keywords = tuple(k.arg for k in call.keywords if k.arg)
            self.uses.append(Use(r.stack, r.chain, e.attr, self._where(f, e), f, guards, nargs=nargs,
                                 keywords=keywords or (), alt=alt if call is not None else None))
            if call is not None and r.stack == "tensorrt":
                for k in keywords or ():
                    self.uses.append(Use(r.stack, r.chain + (e.attr, "()"), k, self._where(f, e), f, guards))

    def _api_call(self, f: FuncInfo, c: ast.Call, guards: tuple, alt: int | None) -> None:
        if isinstance(c.func, ast.Attribute):
            self._attr_use(f, c.func, guards, alt, c)
        elif isinstance(c.func, ast.Name) and c.func.id in ("getattr", "hasattr") and len(c.args) >= 2:
            r = self.resolve(c.args[0], f)
            if isinstance(r, Stack):
                probe = c.func.id == "hasattr" or len(c.args) > 2
                name = c.args[1].value if isinstance(c.args[1], ast.Constant) else None
                self.uses.append(Use(r.stack, r.chain, name, self._where(f, c), f, guards, probe=probe,
                                     name_expr=None if name else c.args[1]))

    def _call_site(self, f: FuncInfo, c: ast.Call, guards: tuple) -> None:
        callee = self._callee(f, c.func)
        if callee is not None:
            callee.sites.append((f, c, guards))

    def _callee(self, f: FuncInfo, func: ast.expr) -> FuncInfo | None:
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            cls = f.cls if f.cls else (f.parent.cls if f.parent else None)
            for g in f.mod.funcs:
                if g.cls == cls and g.name == func.attr and cls is not None:
                    return g
            return None
        if not isinstance(func, ast.Name):
            return None
        owner, binds = f.lookup(func.id)
        if binds:
            for kind in binds:
                if kind[0] == "def":
                    return next((g for g in owner.mod.funcs if g.node is kind[1]), None)
                if kind[0] == "from":
                    return self._imported_def(kind[1], kind[2])
            return None
        if func.id in f.mod.defs:
            return f.mod.defs[func.id]
        imp = f.mod.imports.get(func.id)
        if imp and imp[0] == "from":
            return self._imported_def(imp[1], imp[2])
        return None

    def _imported_def(self, module: str, name: str) -> FuncInfo | None:
        path = module.replace(".", "/") + ".py"
        for m in self.mods:
            if m.path == path or m.path.endswith("/" + path):
                return m.defs.get(name)
        return None

    # ---------------------------------------------------------------- resolution
    def resolve(self, e: ast.expr, f: FuncInfo, vc: Any = None, sites: tuple = (), depth: int = 0) -> Any:
        """Resolve ``e`` in ``f``: a :class:`Stack`, :class:`Tup`, :class:`Val` (only with ``vc``) or UNKNOWN.

        Args:
            e (ast.expr): Expression.
            f (FuncInfo): Function it appears in.
            vc (VersionConfig | None): Version and build configuration to evaluate values for; None: taint only.
            sites (tuple): ``(FuncInfo, site)`` pairs fixing which call site binds a function's parameters.
            depth (int): Recursion depth (cycles give UNKNOWN).
        """
        key = (id(e), id(f), id(vc), sites)
        if key in self._memo:
            r = self._memo[key]
            if r is _BUSY:
                self._cycles += 1
                return UNKNOWN
            return r
        if depth > 60:
            self._cycles += 1
            return UNKNOWN
        self._memo[key] = _BUSY  # cycle guard
        before = self._cycles
        try:
            r = self._resolve(e, f, vc, sites, depth + 1)
        except Exception:  # noqa: BLE001 - evaluating a condition failed: unknown
            r = UNKNOWN
        if self._cycles == before:
            self._memo[key] = r
        else:  # computed while a cycle was cut short: correct here, but not reusable
            del self._memo[key]
        return r

    def value(self, e: ast.expr, f: FuncInfo, vc: Any, sites: tuple = (), depth: int = 0) -> Any:
        """Resolve ``e`` to a concrete value for ``vc`` (tensorrt objects become the stand-in), or UNKNOWN."""
        return self._to_val(self.resolve(e, f, vc, sites, depth), vc)

    @staticmethod
    def _to_val(r: Any, vc: Any) -> Any:
        if isinstance(r, Val):
            return r.v
        if isinstance(r, Stack) and r.stack == "tensorrt" and vc is not None and "()" not in r.chain:
            obj = vc.standin
            try:
                for c in r.chain:
                    obj = getattr(obj, c)
            except AttributeError:
                return UNKNOWN
            return obj
        if isinstance(r, Tup) and vc is not None:
            vals = tuple(Analysis._to_val(i, vc) for i in r.items)
            return UNKNOWN if any(v is UNKNOWN for v in vals) else vals
        return UNKNOWN

    def _resolve(self, e, f, vc, sites, depth):
        R = lambda x, g=f: self.resolve(x, g, vc, sites, depth)  # noqa: E731
        V = lambda x, g=f: self._to_val(self.resolve(x, g, vc, sites, depth), vc)  # noqa: E731
        if isinstance(e, ast.Constant):
            return Val(e.value)
        if isinstance(e, ast.Name):
            return self._resolve_name(e.id, f, vc, sites, depth, e)
        if isinstance(e, ast.Attribute):
            if isinstance(e.value, ast.Name) and e.value.id == "self" and f.lookup("self")[0] is not None:
                return self._resolve_self(e.attr, f, vc, sites, depth)
            base = R(e.value)
            if isinstance(base, Stack):
                return Stack(base.stack, base.chain + (e.attr,))
            v = self._to_val(base, vc)
            return UNKNOWN if v is UNKNOWN else Val(getattr(v, e.attr))
        if isinstance(e, ast.Call):
            return self._resolve_call(e, f, vc, sites, depth)
        if isinstance(e, (ast.Tuple, ast.List)):
            items = tuple(R(x) for x in e.elts)
            if any(isinstance(i, (Stack, Tup)) for i in items):
                return Tup(items)
            vals = [self._to_val(i, vc) for i in items]
            if vc is None or any(v is UNKNOWN for v in vals):
                return UNKNOWN
            return Val(tuple(vals) if isinstance(e, ast.Tuple) else list(vals))
        if isinstance(e, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            r = R(e.elt)
            return r if isinstance(r, Stack) else UNKNOWN
        if isinstance(e, ast.Subscript):
            base = R(e.value)
            if isinstance(base, Stack):
                return Stack(base.stack, base.chain + ("[]",))
            if isinstance(base, Tup) and isinstance(e.slice, ast.Constant) and isinstance(e.slice.value, int):
                return base.items[e.slice.value]
            if isinstance(base, Tup):
                return next((i for i in base.items if isinstance(i, Stack)), UNKNOWN)
            b, k = self._to_val(base, vc), V(e.slice)
            return UNKNOWN if UNKNOWN in (b, k) else Val(b[k])
        if isinstance(e, ast.IfExp):
            t = V(e.test)
            if t is not UNKNOWN:
                return R(e.body if t else e.orelse)
            a, b = R(e.body), R(e.orelse)
            if isinstance(a, Stack) or isinstance(b, Stack):
                return a if isinstance(a, Stack) else b
            return a if isinstance(a, Val) and isinstance(b, Val) and a == b else UNKNOWN
        if isinstance(e, ast.BoolOp):
            rs = [R(v) for v in e.values]
            st = next((r for r in rs if isinstance(r, (Stack, Tup))), None)
            if st is not None and vc is None:
                return st
            out = UNKNOWN
            for r in rs:
                v = self._to_val(r, vc)
                if v is UNKNOWN:
                    return UNKNOWN
                out = v
                if isinstance(e.op, ast.And) and not v or isinstance(e.op, ast.Or) and v:
                    return Val(v)
            return Val(out)
        if vc is None:
            return UNKNOWN
        if isinstance(e, ast.UnaryOp):
            v = V(e.operand)
            if v is UNKNOWN:
                return UNKNOWN
            ops = {ast.Not: lambda x: not x, ast.USub: lambda x: -x, ast.UAdd: lambda x: +x, ast.Invert: lambda x: ~x}
            return Val(ops[type(e.op)](v))
        if isinstance(e, ast.Compare):
            left = V(e.left)
            if left is UNKNOWN:
                return UNKNOWN
            import operator as o

            ops = {ast.Eq: o.eq, ast.NotEq: o.ne, ast.Lt: o.lt, ast.LtE: o.le, ast.Gt: o.gt, ast.GtE: o.ge,
                   ast.Is: o.is_, ast.IsNot: o.is_not, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
            for op, comp in zip(e.ops, e.comparators):
                right = V(comp)
                if right is UNKNOWN:
                    return UNKNOWN
                if not ops[type(op)](left, right):
                    return Val(False)
                left = right
            return Val(True)
        if isinstance(e, ast.BinOp):
            a, b = V(e.left), V(e.right)
            if UNKNOWN in (a, b):
                return UNKNOWN
            return Val(eval(compile(ast.Expression(ast.BinOp(ast.Name("a", ast.Load()), e.op, ast.Name("b", ast.Load()))),
                                    "<binop>", "eval"), {}, {"a": a, "b": b}))
        return UNKNOWN

    def _resolve_name(self, name, f, vc, sites, depth, node=None):
        owner, binds = f.lookup(name)
        if binds and node is not None:
            binds = _enclosing(binds, node)
        if owner is None:
            m = f.mod
            if name in m.imports and m.imports[name][0] == "module" and m.imports[name][1] in STACK_MODULES:
                return Stack(STACK_MODULES[m.imports[name][1]])
            if name in m.assigns:  # module level: trt = lazy_import("tensorrt")
                r = self.resolve(m.assigns[name], m.top, None, (), depth)
                if isinstance(r, Stack):
                    return r
            if hasattr(m.ns, name):
                return Val(getattr(m.ns, name))
            if name in SAFE_BUILTINS:
                return Val(getattr(builtins, name))
            return UNKNOWN
        results = []
        for kind in binds:
            results.append(self._resolve_binding(kind, owner, name, vc, sites, depth))
        st = next((r for r in results if isinstance(r, (Stack, Tup))), None)
        if st is not None:
            return st
        if len(results) == 1:
            return results[0]
        return UNKNOWN

    def _resolve_binding(self, kind, owner, name, vc, sites, depth):
        if kind[0] == "param":
            return self._resolve_param(owner, name, vc, sites, depth)
        index = kind[-1]
        if kind[0] == "module":
            return Stack(STACK_MODULES[kind[1]]) if kind[1] in STACK_MODULES else (
                Val(importlib.import_module(kind[1])) if vc is not None else UNKNOWN)
        if kind[0] == "from":
            full = f"{kind[1]}.{kind[2]}"
            if full in STACK_MODULES:
                return Stack(STACK_MODULES[full])
            if vc is None:
                return UNKNOWN
            return Val(getattr(importlib.import_module(kind[1]), kind[2]))
        if kind[0] == "def":
            return UNKNOWN
        expr = kind[1]
        if kind[0] == "for":
            return self._element(expr, owner, vc, sites, depth, index)
        if kind[0] == "with":
            return UNKNOWN
        r = self.resolve(expr, owner, vc, sites, depth)
        return self._index_into(r, index, vc)

    def _index_into(self, r, index, vc):
        for i in index:
            if isinstance(r, Tup):
                r = r.items[i] if i < len(r.items) else UNKNOWN
            elif isinstance(r, Stack):
                r = Stack(r.stack, r.chain + ("[]",))
            elif isinstance(r, Val):
                r = Val(r.v[i])
            else:
                return UNKNOWN
        return r

    def _element(self, it, f, vc, sites, depth, index):
        """The loop variable of ``for ... in it`` (``zip``/``enumerate`` handled item-wise); values unknown."""
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in ("zip", "enumerate") and index:
            if it.func.id == "zip" and index[0] < len(it.args):
                return self._index_into(self._element(it.args[index[0]], f, vc, sites, depth, ()), index[1:], vc)
            if it.func.id == "enumerate" and index[0] == 1 and it.args:
                return self._index_into(self._element(it.args[0], f, vc, sites, depth, ()), index[1:], vc)
            return UNKNOWN
        r = self.resolve(it, f, vc, sites, depth)
        if isinstance(r, Stack):
            return self._index_into(Stack(r.stack, r.chain + ("[]",)), index, vc)
        if isinstance(r, Tup):
            return self._index_into(next((i for i in r.items if isinstance(i, Stack)), UNKNOWN), index, vc)
        return UNKNOWN

    def _site_args(self, fn: FuncInfo, site) -> dict:
        """Parameter name -> (caller FuncInfo, argument expr) of one call site."""
        caller, call, _ = site
        params = list(fn.params)
        if params and params[0] == "self" and isinstance(call.func, ast.Attribute):
            params = params[1:]
        out = {}
        for p, a in zip(params, call.args):
            if isinstance(a, ast.Starred):
                break
            out[p] = (caller, a)
        for k in call.keywords:
            if k.arg:
                out[k.arg] = (caller, k.value)
        return out

    def _resolve_param(self, fn, name, vc, sites, depth):
        chosen = dict(sites).get(fn)
        if vc is None or chosen is None:
            # taint: any call site passing an API object taints the parameter
            for site in fn.sites:
                args = self._site_args(fn, site)
                if name in args:
                    r = self.resolve(args[name][1], args[name][0], None, (), depth)
                    if isinstance(r, (Stack, Tup)):
                        return r
            if vc is None:
                return UNKNOWN
        if chosen is None and self._site_options(fn) not in (["external"], ["nested"]):
            rs = [self._resolve_param(fn, name, vc, sites + ((fn, site),), depth) for site in fn.sites]
            vals = [r for r in rs if isinstance(r, Val)]
            if rs and len(vals) == len(rs) and all(v.v == vals[0].v for v in vals):
                return vals[0]
            return UNKNOWN
        if chosen == "external" or chosen is None:
            if name in vc.config:
                return Val(vc.config[name])
            return UNKNOWN
        args = self._site_args(fn, chosen)
        if name in args:
            caller, expr = args[name]
            return self.resolve(expr, caller, vc, sites, depth)
        if name in fn.defaults:
            return self.resolve(fn.defaults[name], fn.parent or fn, vc, sites, depth) if fn.parent else \
                self.resolve(fn.defaults[name], fn, vc, sites, depth)
        return UNKNOWN

    def _resolve_self(self, attr, f, vc, sites, depth):
        cls = f.cls or (f.parent.cls if f.parent else None)
        binds = f.mod.self_bindings.get((cls, attr), [])
        results = []
        for g, expr, index, guards in binds:
            if vc is not None and not self._guards_hold(g, guards, vc, sites, depth):
                continue
            results.append(self._index_into(self.resolve(expr, g, vc, sites, depth), index, vc))
        st = next((r for r in results if isinstance(r, (Stack, Tup))), None)
        if st is not None:
            return st
        vals = [r for r in results if isinstance(r, Val)]
        if vc is not None and results and len(vals) == len(results) and all(v.v == vals[0].v for v in vals):
            return vals[0]
        return UNKNOWN

    def _resolve_call(self, e, f, vc, sites, depth):
        fn = e.func
        fname = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
        if fname in ("import_module", "lazy_import") and e.args:  # importlib / cosyedge._lazy imports
            names = self.names_of(e.args[0], f, vc, sites, depth)
            if names and all(n in STACK_MODULES for n in names):
                return Stack(STACK_MODULES[sorted(names)[0]])
        if isinstance(fn, ast.Name) and fn.id == "getattr" and len(e.args) >= 2 and isinstance(e.args[0], ast.Name) \
                and e.args[0].id == "self":  # getattr(self, "_x") / getattr(self, name) over literal names
            names = self.names_of(e.args[1], f, vc, sites, depth)
            rs = [self._resolve_self(n, f, vc, sites, depth) for n in sorted(names or ())]
            st = next((r for r in rs if isinstance(r, (Stack, Tup))), None)
            if st is not None:
                return st
        if fname == "getattr" and isinstance(fn, ast.Name) and len(e.args) >= 2:  # getattr(trt, name[, default])
            obj = self.resolve(e.args[0], f, vc, sites, depth)
            if isinstance(obj, Stack):
                const = e.args[1].value if isinstance(e.args[1], ast.Constant) else "?"
                return Stack(obj.stack, obj.chain + (const,))
        base = self.resolve(fn, f, vc, sites, depth)
        if isinstance(base, Stack):
            leaf = base.chain[-1] if base.chain else ""
            if (base.stack, leaf) in NON_API_RESULTS:
                return UNKNOWN
            return Stack(base.stack, base.chain + ("()",))
        callee = self._callee(f, fn)
        if callee is not None:
            for r in callee.returns:
                rr = self.resolve(r, callee, None, (), depth)
                if isinstance(rr, (Stack, Tup)):
                    return rr
        if vc is None:
            return UNKNOWN
        func = self._to_val(base, vc)
        if func is UNKNOWN or not callable(func):
            return UNKNOWN
        mod = getattr(func, "__module__", "") or ""
        if not (func in (getattr(builtins, n) for n in SAFE_BUILTINS) or mod.startswith("cosyedge")
                or isinstance(func, types.BuiltinMethodType) and isinstance(getattr(func, "__self__", None),
                                                                          (str, list, dict, tuple))):
            return UNKNOWN
        args = [self.value(a, f, vc, sites, depth) for a in e.args]
        kw = {k.arg: self.value(k.value, f, vc, sites, depth) for k in e.keywords if k.arg}
        if any(a is UNKNOWN for a in args) or any(v is UNKNOWN for v in kw.values()) or \
                any(isinstance(a, ast.Starred) for a in e.args) or any(k.arg is None for k in e.keywords):
            return UNKNOWN
        return Val(func(*args, **kw))

    # ---------------------------------------------------------------- names of a dynamic getattr
    def names_of(self, e: ast.expr, f: FuncInfo, vc: Any, sites: tuple = (), depth: int = 0) -> set | None:
        """The strings ``e`` can be (a loop variable: every item; a parameter: every call site), or None."""
        if depth > 40:
            return None
        if isinstance(e, ast.Constant):
            return {e.value} if isinstance(e.value, str) else None
        if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
            out = set()
            for x in e.elts:
                n = self.names_of(x, f, vc, sites, depth + 1)
                if n is None:
                    return None
                out |= n
            return out
        if isinstance(e, ast.Name):
            owner, binds = f.lookup(e.id)
            if binds:
                binds = _enclosing(binds, e)
                out = set()
                for kind in binds:
                    if kind[0] == "for":
                        n = self.names_of(kind[1], owner, vc, sites, depth + 1)
                    elif kind[0] == "param":
                        n = self._param_names(owner, e.id, vc, sites, depth + 1)
                    elif kind[0] == "assign":
                        n = self.names_of(kind[1], owner, vc, sites, depth + 1)
                    else:
                        n = None
                    if n is None:
                        return None
                    out |= n
                return out
        if vc is None:
            return None
        v = self.value(e, f, vc, sites, depth + 1)
        if isinstance(v, str):
            out = {v}
        elif isinstance(v, (list, tuple, set, frozenset)) and all(isinstance(x, str) for x in v):
            out = set(v)
        else:
            return None
        dump = ast.dump(e)  # literals the analysed code appends to this same expression, where live
        for g, target, lits, guards in self.appends:
            if target == dump and self.live(g, guards, vc):
                out |= set(lits)
        return out

    def _param_names(self, fn, name, vc, sites, depth):
        chosen = dict(sites).get(fn)
        site_list = [chosen] if chosen not in (None, "external") else [s for s in fn.sites]
        if chosen == "external" or not site_list:
            return {vc.config[name]} if vc is not None and isinstance(vc.config.get(name), str) else None
        out = set()
        for site in site_list:
            if vc is not None and not self._site_live(fn, site, vc, sites, depth):
                continue
            args = self._site_args(fn, site)
            if name not in args:
                return None
            n = self.names_of(args[name][1], args[name][0], vc, sites + ((fn, site),), depth + 1)
            if n is None:
                return None
            out |= n
        return out

    # ---------------------------------------------------------------- liveness
    def _guards_hold(self, f: FuncInfo, guards: tuple, vc: Any, sites: tuple, depth: int = 0) -> bool:
        for test, polarity in guards:
            v = self.value(test, f, vc, sites, depth)
            if v is not UNKNOWN and bool(v) != polarity:
                return False
        return True

    def _site_options(self, f: FuncInfo) -> list:
        if f.parent is not None and not f.is_method:
            return ["nested"]
        if f.public or not f.sites:
            return ["external"]
        return list(f.sites)

    def _site_live(self, fn, site, vc, sites, depth=0) -> bool:
        caller, _, guards = site
        return self._live_in(caller, guards, vc, sites + ((fn, site),), depth + 1)

    def _live_in(self, f: FuncInfo, guards: tuple, vc: Any, sites: tuple, depth: int = 0) -> bool:
        if depth > 20:
            return True
        chosen = dict(sites)
        if f in chosen or f.parent is not None and not f.is_method:
            if not self._guards_hold(f, guards, vc, sites, depth):
                return False
            if f.parent is not None and not f.is_method:  # nested def: live where its enclosing function is
                return self._live_in(f.parent, (), vc, sites, depth + 1)
            site = chosen[f]
            return site == "external" or self._live_in(site[0], site[2], vc, sites, depth + 1)
        for site in self._site_options(f):
            if self._live_in(f, guards, vc, sites + ((f, site),), depth + 1):
                return True
        return False

    def live(self, f: FuncInfo, guards: tuple, vc: Any) -> bool:
        """bool: code in ``f`` under ``guards`` runs for version/configuration ``vc`` (unknown: True)."""
        key = (id(f), tuple((id(t), p) for t, p in guards), id(vc))
        if key not in self._live_memo:
            self._live_memo[key] = self._live_in(f, guards, vc, ())
        return self._live_memo[key]

    def use_names(self, use: Use, vc: Any) -> set | None:
        """The names ``use`` reads for ``vc`` (one, or a dynamic getattr's), None when unresolved, empty when
        the use does not run."""
        if use.name is not None:
            return {use.name}
        out: set = set()
        if use.fn.parent is not None and not use.fn.is_method:
            options = ["nested"]
        else:  # cosyedge's own calls say which names it passes (an outside caller of a public function is not ours)
            options = list(use.fn.sites) or ["external"]
        for site in options:
            s = () if site == "nested" else ((use.fn, site),)
            if site not in ("external", "nested") and not self._site_live(use.fn, site, vc, ()):
                continue
            n = self.names_of(use.name_expr, use.fn, vc, s)
            if n is None:
                return None
            out |= n
        return out


def _load(e: ast.expr) -> ast.expr:
    """A copy of a Store-context target as a Load expression (for comparing dumps)."""
    return ast.parse(ast.unparse(e), mode="eval").body


def _str_literals(e: ast.expr) -> list[str]:
    if isinstance(e, ast.Constant) and isinstance(e.value, str):
        return [e.value]
    if isinstance(e, (ast.List, ast.Tuple)) and e.elts and all(isinstance(x, ast.Constant) and
                                                              isinstance(x.value, str) for x in e.elts):
        return [x.value for x in e.elts]
    return []
