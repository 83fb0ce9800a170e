"""The component provider's name mapping for typed object inputs (components/kafka_mirror/input_types.py).

Pulumi's `ComponentProvider` maps a typed object input's camelCase names to the Python names, but
(SDK 3.27x) it maps an object that arrives as an Output (another resource's output: a platform's
`deploymentTarget`, a topology's `flowSpark[<id>]`) to `{}`, and it leaves a map of typed objects
in the state unmapped. `KafkaMirrorProvider` maps both, accepts the Python (snake_case) names too
(what a program passing the topology file's own shape, or an earlier untyped version, sends),
and refuses a nested name that is neither, with the path, the name and the fix.
"""

import difflib
from functools import partial
from typing import Any

import pulumi
from pulumi.provider.experimental.analyzer import ComponentDefinition, PropertyDefinition, TypeDefinition
from pulumi.provider.experimental.component import ComponentProvider


class KafkaMirrorProvider(ComponentProvider):
    """ComponentProvider whose typed object inputs may be outputs and may use either name."""

    def map_input_properties(
        self,
        inputs: Any,
        properties: dict[str, PropertyDefinition],
        mapping: dict[str, str],
        component_name: str,
        property_path: str,
    ) -> Any:
        if isinstance(inputs, pulumi.Output):
            return inputs.apply(
                lambda v: self.map_input_properties(v, properties, mapping, component_name, property_path)
            )
        values = _by_schema_name(inputs, mapping, component_name, property_path) if isinstance(inputs, dict) else {}
        later = {k: v for k, v in values.items() if isinstance(v, pulumi.Output) and self._is_typed(properties[k])}
        now = {k: p for k, p in properties.items() if k not in later}
        mapped: dict[str, Any] = dict(super().map_input_properties(values, now, mapping, component_name, property_path))
        for schema_name, value in later.items():
            mapped[mapping[schema_name]] = value.apply(
                partial(self._map_one, schema_name, properties[schema_name], mapping, component_name, property_path)
            )
        return mapped

    def _map_one(
        self, schema_name: str, prop: PropertyDefinition, mapping: dict[str, str], component: str, path: str, value: Any
    ) -> Any:
        """One property's value (an output's, once known), mapped as the SDK maps a plain one."""
        one = super().map_input_properties({schema_name: value}, {schema_name: prop}, mapping, component, path)
        return one.get(mapping[schema_name])

    def get_state(self, instance: pulumi.ComponentResource, component_def: ComponentDefinition) -> dict[str, Any]:
        state = super().get_state(instance, component_def)
        for name, prop in component_def.outputs.items():
            value_type = self._type_of(prop.additional_properties)
            if name in state and value_type is not None:
                state[name] = pulumi.Output.from_input(state[name]).apply(partial(self._map_values, value_type))
        return state

    def _map_values(self, value_type: TypeDefinition, values: dict[str, Any] | None) -> dict[str, Any]:
        """A map output's values (objects of `value_type`) with their schema names."""
        return {k: self.map_complex_output(v, value_type) for k, v in (values or {}).items()}

    def _type_of(self, prop: PropertyDefinition | None) -> TypeDefinition | None:
        """The package's object type `prop` refers to (None: a scalar, Any, an enum, or no property)."""
        if prop is None or not prop.ref:
            return None
        found = self.get_type_definition(prop)
        return found if found is not None and not found.enum else None

    def _is_typed(self, prop: PropertyDefinition) -> bool:
        return any(self._type_of(p) is not None for p in (prop, prop.items, prop.additional_properties))


def _by_schema_name(given: dict[str, Any], mapping: dict[str, str], component: str, path: str) -> dict[str, Any]:
    """`given` keyed by schema names (a Python name is accepted for its schema name).

    Raises InputPropertyError for a nested name the type does not have."""
    python_names = {py: schema for schema, py in mapping.items()}
    values: dict[str, Any] = {}
    for key, value in given.items():
        schema_name = key if key in mapping else python_names.get(key)
        if schema_name is None:
            if not path:  # top-level inputs: the engine and the SDKs check them against the schema
                continue
            close = difflib.get_close_matches(key, list(mapping), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"the fields are {', '.join(sorted(mapping))}"
            raise pulumi.InputPropertyError(
                f"{path}.{key}", f"Unknown input '{path}.{key}' on '{component}' ({hint}); fix the name or remove it"
            )
        values.setdefault(schema_name, value)
    return values
