"""TypeScript declarations of the kafka-mirror package, generated from components/schema.json the
way Pulumi's Node.js SDK generator types a component package (no Pulumi CLI here to run
`pulumi package gen-sdk`): each resource a class extending `pulumi.ComponentResource` with
`pulumi.Output<T>` properties and a `<Name>Args` interface; an input not marked `plain` takes
`pulumi.Input<T>`, array elements and map values too; `$ref` types are interfaces; `pulumi.json#/Any`
is `any`; required inputs are not optional. Enough for `tsc --strict` to check a program's calls
against the schema (tests/pulumi/test_typescript_example.py)."""

from __future__ import annotations

from typing import Any

ANY = "pulumi.json#/Any"
SCALARS = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean"}


def short(token: str) -> str:
    return token.rsplit(":", 1)[-1]


def input_type(prop: dict[str, Any], top: bool = True) -> str:
    """The TS type an input property accepts (`top`: the property itself, not an element)."""
    if "$ref" in prop:
        ref = prop["$ref"]
        inner = "any" if ref == ANY else f"inputs.{short(ref)}"
    elif prop.get("type") == "array":
        inner = f"{input_type(prop['items'], top=False)}[]"
    elif prop.get("type") == "object":
        value = prop.get("additionalProperties", {"$ref": ANY})
        inner = f"{{[key: string]: {input_type(value, top=False)}}}"
    else:
        inner = SCALARS[prop["type"]]
    return inner if prop.get("plain") or inner == "any" else f"pulumi.Input<{inner}>"


def output_type(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return "any" if prop["$ref"] == ANY else f"outputs.{short(prop['$ref'])}"
    if prop.get("type") == "array":
        return f"{output_type(prop['items'])}[]"
    if prop.get("type") == "object":
        return f"{{[key: string]: {output_type(prop.get('additionalProperties', {'$ref': ANY}))}}}"
    return SCALARS[prop["type"]]


def _members(props: dict[str, Any], required: list[str], render: Any, indent: str) -> list[str]:
    return [f"{indent}{name}{'' if name in required else '?'}: {render(prop)};" for name, prop in sorted(props.items())]


def declarations(schema: dict[str, Any]) -> str:
    """index.d.ts of the package `@pulumi/<name>`."""
    lines = ['import * as pulumi from "@pulumi/pulumi";', "export declare namespace inputs {"]
    for token, typ in sorted(schema.get("types", {}).items()):
        lines.append(f"    interface {short(token)} {{")
        lines += _members(typ.get("properties", {}), typ.get("required", []), input_type, "        ")
        lines.append("    }")
    lines.append("}")
    lines.append("export declare namespace outputs {")
    for token, typ in sorted(schema.get("types", {}).items()):
        lines.append(f"    interface {short(token)} {{")
        lines += _members(typ.get("properties", {}), typ.get("required", []), output_type, "        ")
        lines.append("    }")
    lines.append("}")
    for token, res in sorted(schema["resources"].items()):
        name, required = short(token), res.get("requiredInputs", [])
        lines.append(f"export interface {name}Args {{")
        lines += _members(res.get("inputProperties", {}), required, input_type, "    ")
        lines.append("}")
        lines.append(f"export declare class {name} extends pulumi.ComponentResource {{")
        outputs = res.get("required", [])
        for prop_name, prop in sorted(res.get("properties", {}).items()):
            shape = output_type(prop) + ("" if prop_name in outputs else " | undefined")
            lines.append(f"    readonly {prop_name}: pulumi.Output<{shape}>;")
        args = "args" if required else "args?"
        lines.append(f"    constructor(name: string, {args}: {name}Args, opts?: pulumi.ComponentResourceOptions);")
        lines.append("}")
    return "\n".join(lines) + "\n"
