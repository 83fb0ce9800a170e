"""A small evaluator of Pulumi YAML programs, enough to run examples/yaml/ against the component
provider without the Pulumi CLI.

It does what pulumi-yaml does for the parts the example uses: typed `config` (a `secret: true` key
stays secret), `fn::readFile` (a path relative to the program's directory, never outside it),
`${name}` / `${res.prop["key"].sub[0]}` interpolations (a whole-string `${...}` keeps the value's
type; text around it makes a string; `$${` is a literal `${`), resources ordered by what they
reference (`options.dependsOn` included), and `outputs`. Anything it does not implement, or that
components/schema.json does not have (a resource type, an input, a nested field, an output),
is refused before anything is constructed, with the path, the value and the fix.

Values travel in the engine's wire shape: a secret is `{SIG: SECRET, "value": ...}` (what a
Construct response's state holds and what a Construct request may send).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pulumi.runtime import rpc

SIG, SECRET = rpc._special_sig_key, rpc._special_secret_sig
TOP_LEVEL = {"name", "runtime", "description", "config", "packages", "resources", "outputs"}
RESOURCE_KEYS = {"type", "properties", "options"}
OPTIONS = {"dependsOn"}
CONFIG_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "boolean": bool,
    "number": (int, float),
}
ACCESS = re.compile(r'\.([A-Za-z_][\w-]*)|\["((?:[^"\\]|\\.)*)"\]|\[(\d+)\]')
ROOT_NAME = re.compile(r"[A-Za-z_][\w-]*")
PLACEHOLDER = re.compile(r"\$\$\{|\$\{([^}]*)\}")


class YamlProgramError(Exception):
    """The program uses something the schema or this evaluator does not have (the message says what)."""


@dataclass(frozen=True)
class Ref:
    """`${root.path...}`: `path` holds property names (str) and list indexes (int)."""

    root: str
    path: tuple[str | int, ...]
    where: str


@dataclass
class Value:
    """An evaluated input: its wire value, whether it is secret, and the URNs it depends on."""

    data: Any
    secret: bool = False
    deps: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Constructed:
    """What the provider's Construct answered for one resource."""

    urn: str
    state: dict[str, Any]


Construct = Callable[[str, str, dict[str, Value], list[str]], Constructed]


def parse_ref(text: str, where: str) -> Ref:
    """`estate.flowSpecs["west-1->east-1"]` -> Ref("estate", ("flowSpecs", "west-1->east-1"))."""
    head = ROOT_NAME.match(text.strip())
    if head is None:
        raise YamlProgramError(f"{where}: '${{{text}}}' is not a reference (expected ${{name.property...}})")
    rest, path, pos = text.strip(), [], head.end()
    while pos < len(rest):
        step = ACCESS.match(rest, pos)
        if step is None:
            raise YamlProgramError(
                f"{where}: cannot read '${{{text}}}' from {rest[pos:]!r} (use .name, [\"key\"] or [0])"
            )
        name, key, index = step.groups()
        path.append(name if name is not None else key if key is not None else int(index))
        pos = step.end()
    return Ref(head.group(0), tuple(path), where)


def refs_in(node: Any, where: str) -> Iterator[Ref]:
    """Every `${...}` reference in a property tree (fn::readFile's argument included)."""
    if isinstance(node, str):
        for found in PLACEHOLDER.finditer(node):
            if found.group(1) is not None:
                yield parse_ref(found.group(1), where)
    elif isinstance(node, dict):
        for key, item in node.items():
            yield from refs_in(item, f"{where}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from refs_in(item, f"{where}[{i}]")


def _suggest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean '{close[0]}'?)" if close else f" (known: {', '.join(sorted(known))})"


class Program:
    """A loaded, schema-checked Pulumi YAML program; `run` constructs it in dependency order."""

    def __init__(self, path: Path, schema: Mapping[str, Any]) -> None:
        self.path, self.directory, self.schema = path, path.parent, schema
        self.doc = yaml.safe_load(path.read_text()) or {}
        self.name: str = self.doc.get("name", "")
        self.resources: dict[str, dict[str, Any]] = dict(self.doc.get("resources") or {})
        self.config: dict[str, dict[str, Any]] = dict(self.doc.get("config") or {})
        self._check()
        self.order = self._order()

    # -- checks: before anything is constructed ------------------------------------------------
    def _check(self) -> None:
        for key in self.doc:
            if key not in TOP_LEVEL:
                hint = _suggest(key, [*TOP_LEVEL])
                raise YamlProgramError(f"{self.path}: top-level '{key}' is not supported here{hint}")
        for name, res in self.resources.items():
            where = f"resources.{name}"
            for key in res:
                if key not in RESOURCE_KEYS:
                    raise YamlProgramError(f"{where}.{key}: not supported here{_suggest(key, [*RESOURCE_KEYS])}")
            for key in res.get("options") or {}:
                if key not in OPTIONS:
                    raise YamlProgramError(f"{where}.options.{key}: not supported by this evaluator (only dependsOn)")
            resource = self._resource_schema(res.get("type"), f"{where}.type")
            props = res.get("properties") or {}
            self._check_object(resource["inputProperties"], props, f"{where}.properties", res["type"])
            missing = sorted(set(resource.get("requiredInputs", [])) - set(props))
            if missing:
                raise YamlProgramError(f"{where}.properties: {res['type']} requires {', '.join(missing)}: add them")
        for ref in self._all_refs():
            self._check_ref(ref)

    def _resource_schema(self, token: Any, where: str) -> dict[str, Any]:
        known = list(self.schema["resources"])
        if token not in self.schema["resources"]:
            raise YamlProgramError(
                f"{where}: unknown resource type {token!r}{_suggest(str(token), known)}; "
                "components/schema.json is what the provider serves"
            )
        return dict(self.schema["resources"][token])

    def _check_object(self, props: Mapping[str, Any], value: Any, where: str, owner: str) -> None:
        if not isinstance(value, dict) or "fn::readFile" in value:  # a `${...}` or a function: checked apart
            return
        for key, item in value.items():
            if key not in props:
                raise YamlProgramError(f"{where}.{key}: {owner} has no input '{key}'{_suggest(key, list(props))}")
            self._check_typed(props[key], item, f"{where}.{key}")

    def _check_typed(self, prop: Mapping[str, Any], item: Any, where: str) -> None:
        ref = prop.get("$ref", "")
        if ref.startswith("#/types/") and isinstance(item, dict):
            token = ref.removeprefix("#/types/")
            self._check_object(self.schema["types"][token]["properties"], item, where, token)
        elif prop.get("type") == "array" and isinstance(item, list):
            for i, element in enumerate(item):
                self._check_typed(prop.get("items", {}), element, f"{where}[{i}]")

    def _all_refs(self) -> Iterator[Ref]:
        for name, res in self.resources.items():
            yield from refs_in(res.get("properties") or {}, f"resources.{name}.properties")
            yield from refs_in((res.get("options") or {}).get("dependsOn") or [], f"resources.{name}.options.dependsOn")
        yield from refs_in(self.doc.get("outputs") or {}, "outputs")

    def _check_ref(self, ref: Ref) -> None:
        if ref.root in self.config:
            if ref.path:
                raise YamlProgramError(f"{ref.where}: config '{ref.root}' is a {self.config[ref.root].get('type')}")
            return
        if ref.root not in self.resources:
            raise YamlProgramError(
                f"{ref.where}: unknown name '{ref.root}'{_suggest(ref.root, [*self.resources, *self.config])}"
            )
        if not ref.path and ".options.dependsOn" not in ref.where:
            raise YamlProgramError(
                f"{ref.where}: '${{{ref.root}}}' passes the resource itself, which this evaluator "
                f"does not support; pass one of its outputs (${{{ref.root}.<output>}})"
            )
        if ref.path:
            token = self.resources[ref.root]["type"]
            outputs = [*self.schema["resources"][token]["properties"], "urn", "id"]
            first = ref.path[0]
            if not isinstance(first, str) or first not in outputs:
                raise YamlProgramError(f"{ref.where}: {token} has no output {first!r}{_suggest(str(first), outputs)}")

    def _order(self) -> list[str]:
        """Resources in an order where each comes after those it references; a cycle is an error."""
        needs = {name: {r.root for r in self._refs_of(name) if r.root in self.resources} for name in self.resources}
        order: list[str] = []
        while len(order) < len(needs):
            ready = [n for n in needs if n not in order and needs[n] <= set(order)]
            if not ready:
                stuck = sorted(set(needs) - set(order))
                raise YamlProgramError(f"resources {', '.join(stuck)} reference each other in a cycle")
            order.append(ready[0])  # file order among the ready ones, as a stable tie-break
        return order

    def _refs_of(self, name: str) -> Iterator[Ref]:
        res = self.resources[name]
        yield from refs_in(res.get("properties") or {}, name)
        yield from refs_in((res.get("options") or {}).get("dependsOn") or [], name)

    # -- evaluation ----------------------------------------------------------------------------
    def run(self, config: Mapping[str, str], secret_keys: set[str], construct: Construct) -> dict[str, Value]:
        """Construct every resource in order; return the program's outputs (secret ones marked).

        `config` holds the stack's values by bare key (as `pulumi config set` stores them under the
        project's namespace); keys in `secret_keys` are secret."""
        scope = Scope(self, self._config_values(config, secret_keys))
        for name in self.order:
            res = self.resources[name]
            inputs = {
                k: scope.evaluate(v, f"resources.{name}.properties.{k}")
                for k, v in (res.get("properties") or {}).items()
            }
            depends_on = [
                scope.resource_urn(parse_ref(_placeholder(d), name))
                for d in (res.get("options") or {}).get("dependsOn") or []
            ]
            scope.constructed[name] = construct(name, res["type"], inputs, depends_on)
        return {k: scope.evaluate(v, f"outputs.{k}") for k, v in (self.doc.get("outputs") or {}).items()}

    def _config_values(self, config: Mapping[str, str], secret_keys: set[str]) -> dict[str, Value]:
        values = {}
        for key, spec in self.config.items():
            declared = spec.get("type", "string")
            if key not in config and "default" not in spec:
                hint = " --secret" if spec.get("secret") else ""
                raise YamlProgramError(f"config.{key}: no value; set it: pulumi config set{hint} {key} <value>")
            raw = config.get(key, spec.get("default"))
            value = yaml.safe_load(raw) if declared != "string" and isinstance(raw, str) else raw
            if not isinstance(value, CONFIG_TYPES.get(declared, object)):
                raise YamlProgramError(f"config.{key}: {declared} expected, got {type(value).__name__}")
            values[key] = Value(value, secret=bool(spec.get("secret")) or key in secret_keys)
        return values


def _placeholder(text: Any) -> str:
    found = PLACEHOLDER.fullmatch(text) if isinstance(text, str) else None
    if found is None or found.group(1) is None:
        raise YamlProgramError(f"dependsOn entries are ${{resource}} references, not {text!r}")
    return str(found.group(1))


class Scope:
    """What `${...}` can see while the program runs: config values and constructed resources."""

    def __init__(self, program: Program, config: dict[str, Value]) -> None:
        self.program, self.config = program, config
        self.constructed: dict[str, Constructed] = {}

    def resource_urn(self, ref: Ref) -> str:
        if ref.path or ref.root not in self.constructed:
            raise YamlProgramError(f"{ref.where}: dependsOn takes a resource, not '{ref.root}{list(ref.path)}'")
        return self.constructed[ref.root].urn

    def evaluate(self, node: Any, where: str) -> Value:
        """A property tree with its placeholders and functions resolved."""
        if isinstance(node, str):
            return self._interpolate(node, where)
        if isinstance(node, dict) and set(node) == {"fn::readFile"}:
            return self._read_file(node["fn::readFile"], where)
        if isinstance(node, dict) and any(str(k).startswith("fn::") for k in node):
            raise YamlProgramError(f"{where}: {sorted(node)} is not supported by this evaluator (only fn::readFile)")
        if isinstance(node, (dict, list)):
            items = node.items() if isinstance(node, dict) else enumerate(node)
            parts = {k: self.evaluate(v, f"{where}.{k}") for k, v in items}
            data = {k: _wire(v) for k, v in parts.items()}
            deps = set().union(*(v.deps for v in parts.values())) if parts else set()
            return Value(data if isinstance(node, dict) else list(data.values()), False, deps)
        return Value(node)

    def _interpolate(self, text: str, where: str) -> Value:
        whole = PLACEHOLDER.fullmatch(text)
        if whole is not None and whole.group(1) is not None:
            return self._lookup(parse_ref(whole.group(1), where))
        pieces: list[str] = []
        secret, last = False, 0
        deps: set[str] = set()
        for found in PLACEHOLDER.finditer(text):
            pieces.append(text[last : found.start()])
            last = found.end()
            if found.group(1) is None:  # `$${`: a literal `${`
                pieces.append("${")
                continue
            part = self._lookup(parse_ref(found.group(1), where))
            if not isinstance(part.data, (str, int, float, bool)):
                raise YamlProgramError(f"{where}: '${{{found.group(1)}}}' is not text; it cannot be inside a string")
            pieces.append(str(part.data))
            secret, deps = secret or part.secret, deps | part.deps
        pieces.append(text[last:])
        return Value("".join(pieces), secret, deps)

    def _lookup(self, ref: Ref) -> Value:
        if ref.root in self.config:
            return self.config[ref.root]
        built = self.constructed[ref.root]
        current: Any = {"urn": built.urn, **built.state}
        secret = False
        for step in ref.path:
            current, was_secret = _unwrap_secret(current)
            secret = secret or was_secret
            try:
                current = current[step]
            except (KeyError, IndexError, TypeError):
                has = sorted(current) if isinstance(current, dict) else type(current).__name__
                raise YamlProgramError(
                    f"{ref.where}: {ref.root} has no {step!r} in its outputs (it has {has})"
                ) from None
        current, was_secret = _unwrap_secret(current)
        return Value(current, secret or was_secret, {built.urn})

    def _read_file(self, argument: Any, where: str) -> Value:
        name = self.evaluate(argument, where)
        path = (self.program.directory / str(name.data)).resolve()
        if not path.is_relative_to(self.program.directory.resolve()):
            raise YamlProgramError(f"{where}: fn::readFile {name.data!r} is outside the program's directory")
        if not path.is_file():
            raise YamlProgramError(f"{where}: fn::readFile {name.data!r}: no such file ({path})")
        return Value(path.read_text(), name.secret, name.deps)


def _unwrap_secret(value: Any) -> tuple[Any, bool]:
    if isinstance(value, dict) and value.get(SIG) == SECRET:
        inner, _ = _unwrap_secret(value["value"])
        return inner, True
    return value, False


def _wire(value: Value) -> Any:
    """A nested value as the engine sends it: secret parts wrapped, so secretness stays where it is."""
    return {SIG: SECRET, "value": value.data} if value.secret else value.data
