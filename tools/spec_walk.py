"""Measures of issue 44's "views as the parameters": `python tools/spec_walk.py [--trace]`.

Static (AST only: nothing is imported or run), so it measures any checkout the same way.

1. Parameters: every function parameter in kmirror*, spark_app annotated `FlowSpec` (the whole
   spec) vs annotated with one of the views of `kmirror/flow/views.py` (`PlanningSettings`,
   `CopySettings`, `CheckpointSettings`, `HeartbeatSettings`, `TopicSyncSettings`, `FlowRoute`); the
   dataclass fields and `read()` of views.py itself are not parameters and are not counted.

2. The walk of a flow spec from `spark_app/main.py:run_flow`: starting with its `spec` parameter
   "carried", visit the body's calls in source order; a call is followed when it carries
   something (an argument, or the object a method is called on, mentions a carried name: the
   spec, a name assigned from an expression mentioning one, or an attribute of `self` assigned
   so in the class) and its callee resolves to a function or class (its `__init__`) of the
   project (module- or function-level `from x import y`, `import x`, names of the same module,
   methods of `self` and of names assigned from a project class call). In the callee the
   parameters receiving carried arguments are carried (all of them after a `*args`). Each
   function is walked once (the first time it is reached), depth first.
   - rooms: distinct modules the walk enters;
   - climbs: times the walk moves (by a call or by returning from one) into a module it was in
     before and had left, e.g. main.py after each call into the engine returns.
   `--trace` prints the path, one step a line, and the re-entries per module.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kmirror", "kmirror_engine", "kmirror_cli", "spark_app")
VIEWS = (
    "PlanningSettings",
    "CopySettings",
    "CheckpointSettings",
    "HeartbeatSettings",
    "TopicSyncSettings",
    "FlowRoute",
)
START = ("spark_app.main", "run_flow")
_ERRORS = ("Error", "Failure", "Exception")  # raising an error naming a spec value is not a walk


def _files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _annotation_name(node: ast.expr | None) -> str:
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split("[")[0].split(".")[-1].split("|")[0].strip()
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def count_parameters() -> tuple[int, int]:
    """(parameters typed FlowSpec, parameters typed as a view)."""
    whole = views = 0
    for path in _files():
        if path.relative_to(ROOT).as_posix() == "kmirror/flow/views.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                name = _annotation_name(arg.annotation)
                whole += name == "FlowSpec"
                views += name in VIEWS
    return whole, views


@dataclass
class Module:
    name: str
    tree: ast.Module
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)  # "f" or "Class.method"
    classes: set[str] = field(default_factory=set)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> "module" or "module:attr"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _load() -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for path in _files():
        mod = Module(_module_name(path), ast.parse(path.read_text()))
        for node in mod.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                mod.functions[node.name] = node  # type: ignore[assignment]
            elif isinstance(node, ast.ClassDef):
                mod.classes.add(node.name)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        mod.functions[f"{node.name}.{item.name}"] = item  # type: ignore[assignment]
        for node in ast.walk(mod.tree):  # module- and function-level imports alike
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    mod.imports[alias.asname or alias.name] = f"{node.module}:{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    mod.imports[alias.asname or alias.name.split(".")[0]] = alias.name
        modules[mod.name] = mod
    return modules


class Walk:
    def __init__(self, modules: dict[str, Module]) -> None:
        self.modules = modules
        self.seen: set[tuple[str, str]] = set()
        self.path: list[tuple[str, str]] = []  # (module, function) at each step

    def target(self, mod: Module, ref: str) -> tuple[str, str] | None:
        """(module, function key) a name of `mod` refers to, when it is the project's."""
        if ref in mod.functions:
            return mod.name, ref
        if ref in mod.classes:
            return mod.name, f"{ref}.__init__"
        found = mod.imports.get(ref)
        if found is None or ":" not in found:
            return None
        where, name = found.split(":")
        other = self.modules.get(where)
        if other is None:
            sub = self.modules.get(f"{where}.{name}")  # `from package import module`
            return None if sub is None else (sub.name, "")
        if name in other.functions:
            return other.name, name
        if name in other.classes:
            return other.name, f"{name}.__init__"
        if name in other.imports:  # re-exported
            return self.target(other, name)
        return None

    def resolve(self, mod: Module, cls: str | None, call: ast.Call, types: dict[str, str]) -> tuple[str, str] | None:
        f = call.func
        if isinstance(f, ast.Name):
            return self.target(mod, f.id)
        if not isinstance(f, ast.Attribute):
            return None
        owner = f.value
        if isinstance(owner, ast.Name) and owner.id == "self" and cls is not None:
            key = f"{cls}.{f.attr}"
            return (mod.name, key) if key in mod.functions else None
        if isinstance(owner, ast.Name) and self.target(mod, owner.id) is not None:  # Class.classmethod(...)
            made = self.target(mod, owner.id)
            if made is not None and made[1].endswith(".__init__"):
                key = f"{made[1].split('.')[0]}.{f.attr}"
                return (made[0], key) if key in self.modules[made[0]].functions else None
        owner_key = ast.unparse(owner)
        if owner_key in types:  # a name/attribute assigned from a project class call
            where, klass = types[owner_key].split(":")
            key = f"{klass}.{f.attr}"
            return (where, key) if key in self.modules[where].functions else None
        if isinstance(owner, ast.Call):  # Class(spec).start()
            made = self.resolve(mod, cls, owner, types)
            if made and made[1].endswith(".__init__"):
                key = f"{made[1].split('.')[0]}.{f.attr}"
                return (made[0], key) if key in self.modules[made[0]].functions else None
        if isinstance(owner, ast.Name) and owner.id in mod.imports and ":" not in mod.imports[owner.id]:
            other = self.modules.get(mod.imports[owner.id])
            if other is not None and f.attr in other.functions:
                return other.name, f.attr
        return None

    def made(self, mod: Module, cls: str | None, call: ast.Call, types: dict[str, str]) -> str | None:
        """ "module:Class" of the object a call returns: the class it builds, or the project class
        its callee's return annotation names (`Class.for_flow(spec)`)."""
        callee = self.resolve(mod, cls, call, types)
        if callee is None:
            return None
        if callee[1].endswith(".__init__"):
            return f"{callee[0]}:{callee[1].split('.')[0]}"
        fn = self.modules[callee[0]].functions.get(callee[1])
        name = _annotation_name(fn.returns) if fn is not None else ""
        home = self.modules[callee[0]]
        found = self.target(home, name) if name else None
        return f"{found[0]}:{found[1].split('.')[0]}" if found and found[1].endswith(".__init__") else None

    def step(self, where: tuple[str, str]) -> None:
        self.path.append(where)

    def visit(self, module: str, key: str, carried: set[str]) -> None:
        if (module, key) in self.seen:
            return
        self.seen.add((module, key))
        mod = self.modules[module]
        fn = mod.functions.get(key)
        self.step((module, key))
        if fn is None:
            return
        cls = key.split(".")[0] if "." in key else None
        carried = set(carried)
        types: dict[str, str] = {}
        if cls is not None and key != f"{cls}.__init__":  # self's carried attributes, set in __init__
            carried |= self.class_attrs(mod, cls, types)
        self.body(mod, cls, fn, carried, types)

    def class_attrs(self, mod: Module, cls: str, types: dict[str, str]) -> set[str]:
        init = mod.functions.get(f"{cls}.__init__")
        if init is None:
            return set()
        params = {a.arg for a in init.args.args[1:] + init.args.kwonlyargs}
        found: set[str] = set()
        for node in ast.walk(init):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and _mentions(node.value, params | found):
                        found.add(ast.unparse(t))
                    if isinstance(t, ast.Attribute) and isinstance(node.value, ast.Call):
                        made = self.resolve(mod, cls, node.value, types)
                        if made and made[1].endswith(".__init__"):
                            types[ast.unparse(t)] = f"{made[0]}:{made[1].split('.')[0]}"
        return found

    def body(self, mod: Module, cls: str | None, fn: ast.FunctionDef, carried: set[str], types: dict[str, str]) -> None:
        for node in _in_order(fn):
            if isinstance(node, ast.Assign) and _mentions(node.value, carried):
                for t in node.targets:
                    for n in ast.walk(t):
                        if isinstance(n, (ast.Name, ast.Attribute)):
                            carried.add(ast.unparse(n))
                if isinstance(node.value, ast.Call):
                    made = self.made(mod, cls, node.value, types)
                    if made is not None:
                        for t in node.targets:
                            types[ast.unparse(t)] = made
            if not isinstance(node, ast.Call):
                continue
            args = [*node.args, *(k.value for k in node.keywords)]
            owner = node.func.value if isinstance(node.func, ast.Attribute) else None
            if not any(_mentions(a, carried) for a in args) and not (owner is not None and _mentions(owner, carried)):
                continue
            callee = self.resolve(mod, cls, node, types)
            if callee is None or callee in self.seen or callee[1].split(".")[0].endswith(_ERRORS):
                continue
            here = (mod.name, fn.name if cls is None else f"{cls}.{fn.name}")
            self.visit(callee[0], callee[1], self.receiving(callee, node, carried))
            self.step(here)  # back in the caller

    def receiving(self, callee: tuple[str, str], call: ast.Call, carried: set[str]) -> set[str]:
        fn = self.modules[callee[0]].functions.get(callee[1])
        if fn is None:
            return set()
        a = fn.args
        names = [p.arg for p in [*a.posonlyargs, *a.args]]
        if "." in callee[1]:
            names = names[1:]  # self
        got: set[str] = set()
        for i, arg in enumerate(call.args):
            if not _mentions(arg, carried):
                continue
            if isinstance(arg, ast.Starred) or i >= len(names):
                return set(names) | {p.arg for p in a.kwonlyargs}
            got.add(names[i])
        for kw in call.keywords:
            if _mentions(kw.value, carried):
                if kw.arg is None:
                    return set(names) | {p.arg for p in a.kwonlyargs}
                got.add(kw.arg)
        return got


def _mentions(node: ast.AST, carried: set[str]) -> bool:
    """Whether `node` is (a part of) a carried object or built from one: `spec`, `spec.target`,
    `self.syncs.store`, `Thing(spec)`, `f(spec.source)`; a string or number computed from one
    (`spec.id` in an f-string, `spec.copy.trigger_interval_ms * 2`) is not."""
    if isinstance(node, ast.Starred):
        return _mentions(node.value, carried)
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id.endswith(("Error", "Failure", "Exception")):
            return False
        args = [*node.args, *(k.value for k in node.keywords)]
        owner = node.func.value if isinstance(node.func, ast.Attribute) else None
        return any(_mentions(a, carried) for a in args) or (owner is not None and _mentions(owner, carried))
    while isinstance(node, (ast.Name, ast.Attribute)):
        if ast.unparse(node) in carried:
            return True
        if isinstance(node, ast.Name):
            return False
        node = node.value
    return False


def _in_order(fn: ast.FunctionDef) -> list[ast.AST]:
    """The function's nodes in source order (nested functions and lambdas included): an
    assignment before the calls of its value's... after them (its value is evaluated first)."""
    out: list[ast.AST] = []

    def go(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            go(child)
        out.append(node)  # post-order: a call's arguments (inner calls) before the call itself

    for stmt in fn.body:
        go(stmt)
    return out


def walk() -> tuple[int, int, list[tuple[str, str]]]:
    w = Walk(_load())
    w.visit(START[0], START[1], {"spec"})
    modules = [m for m, _ in w.path]
    rooms = len(set(modules))
    climbs = 0
    left: set[str] = set()
    for prev, cur in pairwise(modules):
        if prev == cur:
            continue
        left.add(prev)
        climbs += cur in left
    return rooms, climbs, w.path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="store_true", help="print the walk's path")
    args = parser.parse_args(argv)
    whole, views = count_parameters()
    rooms, climbs, path = walk()
    print(f"parameters typed FlowSpec: {whole}; typed as a view: {views}")
    print(f"walk from {START[0]}:{START[1]}: {rooms} rooms, {climbs} climbs")
    if args.trace:
        for module, function in path:
            print(f"  {module}:{function}")
        modules = [m for m, _ in path]
        entries = Counter(cur for prev, cur in pairwise(modules) if prev != cur)
        left: set[str] = set()
        again: Counter[str] = Counter()
        for prev, cur in pairwise(modules):
            if prev != cur:
                left.add(prev)
                if cur in left:
                    again[cur] += 1
        print("re-entered: " + ", ".join(f"{m} {n}" for m, n in again.most_common()))
        print(f"entries: {sum(entries.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
