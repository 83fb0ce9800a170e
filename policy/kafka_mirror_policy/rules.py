"""The policy pack's rules as pure functions over (resource type, props): no engine needed.

Each function returns violation messages (empty when the resource or stack complies);
`__main__.py` only adapts them to `pulumi_policy`. Rules:

- `restart-policy-always`: every SparkApplication has `spec.restartPolicy.type: Always`
  (a mirror is a streaming job: a stopped one silently stops replicating).
- `no-plaintext-secrets`: password-like keys (kmirror.security.config.is_sensitive) of a
  SparkApplication's `sparkConf` and of the flow spec (`flow.json`) in a ConfigMap (EKS) or an
  S3 object (EMR) hold a `${file:..}`/`${env:..}` reference, never the secret; messages never
  echo the value.
- `one-app-per-flow` (stack): no flow id is run by two apps of the stack: SparkApplications
  (EKS) and EMR steps (a flow's `aws.lambda_.Invocation` of the platform's step function) alike.
- `no-identity-cycles` (stack): the flows deployed in the stack, checked by the planner's
  own identity-cycle validation (MirrorMaker cannot stop such a loop).
Estate-wide and hygiene rules: `estate.py`, `hygiene.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from kmirror.security.config import is_sensitive
from kmirror.security.secret_refs import SECRETS_ROOT, is_reference
from kmirror.stack.deploy_layout import FLOW_ANNOTATION, FLOW_FILE, FLOW_VOLUME, FLOWS_ANNOTATION

SPARK_APPLICATION = "kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
BUCKET_OBJECT = "aws:s3/bucketObjectv2:BucketObjectv2"  # EMR: the flow spec at flows/<app>/<sha>/flow.json
LAMBDA_INVOCATION = "aws:lambda/invocation:Invocation"  # EMR: a flow's step, the step function's JSON input
EMR_STEP_KEYS = ("cluster_id", "name", "args")  # what tells a step's input from other invocations' inputs

Resource = tuple[str, Mapping[str, Any]]  # (resource type, props)


def _name(props: Mapping[str, Any]) -> str:
    return str((props.get("metadata") or {}).get("name") or "<unnamed>")


def restart_policy_violations(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """`spec.restartPolicy.type` must be Always on a SparkApplication."""
    if resource_type != SPARK_APPLICATION:
        return []
    found = ((props.get("spec") or {}).get("restartPolicy") or {}).get("type")
    if found == "Always":
        return []
    return [
        f"SparkApplication {_name(props)}: spec.restartPolicy.type is {found!r}; set it to 'Always' "
        "so the operator restarts a failed mirror instead of leaving the flow stopped"
    ]


def _secret_violations(where: str, value: Any, path: str = "") -> list[str]:
    """Password-like keys under `value` (nested mappings/lists) that hold a literal secret."""
    if isinstance(value, Mapping):
        out: list[str] = []
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            if (
                is_sensitive(str(key))
                and item is not None
                and not isinstance(item, Mapping | list)
                and not is_reference(item)
            ):
                out.append(
                    f"{where}: {child} holds a plaintext secret; use a reference such as "
                    f"${{file:{SECRETS_ROOT}/NAME/KEY}} or ${{env:VAR}} (topology: {{k8s_secret: NAME, key: KEY}})"
                )
            else:
                out += _secret_violations(where, item, child)
        return out
    if isinstance(value, list):
        return [v for index, item in enumerate(value) for v in _secret_violations(where, item, f"{path}[{index}]")]
    return []


def emr_step(resource_type: str, props: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """An EMR step's input (kafka_mirror.emr.step_lambda): a Lambda invocation whose JSON input
    has a cluster, name and args; None for any other resource."""
    text = props.get("input") if resource_type == LAMBDA_INVOCATION else None
    try:
        step = json.loads(text) if isinstance(text, str) else None
    except json.JSONDecodeError:
        return None
    return step if isinstance(step, dict) and all(key in step for key in EMR_STEP_KEYS) else None


def flow_spec_of(resource_type: str, props: Mapping[str, Any]) -> dict[str, Any] | None:
    """The flow spec held by a flow ConfigMap (`data["flow.json"]`) or an EMR flow object
    (`key` ending in `/flow.json`, `content`), or None."""
    if resource_type == CONFIG_MAP:
        text = (props.get("data") or {}).get(FLOW_FILE)
    elif resource_type == BUCKET_OBJECT and str(props.get("key") or "").endswith("/" + FLOW_FILE):
        text = props.get("content")
    else:
        return None
    if not isinstance(text, str):
        return None
    try:
        spec = json.loads(text)
    except json.JSONDecodeError:
        return None
    return spec if isinstance(spec, dict) else None


def plaintext_secret_violations(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Literal secrets in a SparkApplication's sparkConf or in a ConfigMap's flow spec."""
    if resource_type == SPARK_APPLICATION:
        conf = (props.get("spec") or {}).get("sparkConf") or {}
        return _secret_violations(f"SparkApplication {_name(props)} sparkConf", conf)
    if resource_type == CONFIG_MAP:
        spec = flow_spec_of(resource_type, props)
        if spec is None:
            return _secret_violations(f"ConfigMap {_name(props)} data", props.get("data") or {})
        return _secret_violations(f"ConfigMap {_name(props)} {FLOW_FILE}", spec)
    if resource_type == BUCKET_OBJECT and (spec := flow_spec_of(resource_type, props)) is not None:
        return _secret_violations(f"S3 object {props.get('key')}", spec)
    return []


def _flow_config_map_name(props: Mapping[str, Any]) -> str | None:
    for volume in (props.get("spec") or {}).get("volumes") or []:
        if isinstance(volume, Mapping) and volume.get("name") == FLOW_VOLUME:
            return (volume.get("configMap") or {}).get("name")
    return None


def _step_flow_ids(props: Mapping[str, Any], flows_by_key: Mapping[str, str]) -> list[str]:
    """An EMR step's flows: the flow objects its args name (`--files s3://bucket/<key>#flow.json,...`:
    several with `apps_per: target`), else its name."""
    found = [
        flow_id
        for key, flow_id in flows_by_key.items()
        if any(isinstance(arg, str) and f"/{key}#" in arg for arg in props.get("args") or [])
    ]
    return sorted(found) or [str(props.get("name"))]


def app_flow_ids(resources: Iterable[Resource]) -> list[tuple[str, str]]:
    """(app name, flow id) pairs of the stack's SparkApplications and EMR steps.

    An app running several flows (`apps_per: target`) gives a pair per flow: a SparkApplication's
    `kafka-mirror/flows` annotation, the flow objects an EMR step's args name.
    A SparkApplication's flow id comes from the `kafka-mirror/flow` annotation, else the flow
    spec in the ConfigMap the app mounts, else the app's name; an EMR step's from the flow object
    its args name, else the step's name (the app name, which the estate rule maps back to a flow)."""
    resources = list(resources)
    flows_by_map = {
        _name(props): str(spec.get("id"))
        for rtype, props in resources
        if rtype == CONFIG_MAP and (spec := flow_spec_of(rtype, props)) is not None
    }
    flows_by_key = {
        str(props.get("key")): str(spec.get("id"))
        for rtype, props in resources
        if rtype == BUCKET_OBJECT and (spec := flow_spec_of(rtype, props)) is not None
    }
    pairs = []
    for rtype, props in resources:
        if (step := emr_step(rtype, props)) is not None:
            pairs += [(str(step.get("name")), flow_id) for flow_id in _step_flow_ids(step, flows_by_key)]
        if rtype != SPARK_APPLICATION:
            continue
        annotations = (props.get("metadata") or {}).get("annotations") or {}
        if several := annotations.get(FLOWS_ANNOTATION):  # one app for every flow of a target cluster
            pairs += [(_name(props), flow_id) for flow_id in str(several).split(",")]
            continue
        annotated = annotations.get(FLOW_ANNOTATION)
        flow_id = annotated or flows_by_map.get(_flow_config_map_name(props) or "") or _name(props)
        pairs.append((_name(props), str(flow_id)))
    return pairs


def duplicate_flow_violations(resources: Iterable[Resource]) -> list[str]:
    """A flow run by more than one app (SparkApplication or EMR step) of the stack (two writers, two checkpoints)."""
    apps: dict[str, list[str]] = {}
    for app, flow_id in app_flow_ids(resources):
        apps.setdefault(flow_id, []).append(app)
    return [
        f"flow {flow_id} is run by {len(names)} apps ({', '.join(sorted(names))}); "
        "deploy exactly one application per flow"
        for flow_id, names in sorted(apps.items())
        if len(names) > 1
    ]


def _stack_topology(flow_specs: list[dict[str, Any]]) -> dict[str, Any]:
    """A topology file equivalent to the stack's flows, so the planner validates them."""
    clusters: dict[str, Any] = {}
    for spec in flow_specs:
        for side in ("source", "target"):
            endpoint = spec.get(side) or {}
            alias = str(endpoint.get("alias"))
            clusters[alias] = {
                "bootstrap_servers": str(endpoint.get("bootstrap_servers") or alias),
                "datacenter": "stack",
            }
    ids = sorted({str(spec["id"]) for spec in flow_specs})
    policies = {str(s["id"]): {"replication_policy": s.get("replication_policy") or {}} for s in flow_specs}
    return {
        "clusters": clusters,
        "topologies": [{"name": "stack", "pattern": "custom", "flows": ids}],
        "flows": policies,
    }


def identity_cycle_violations(resources: Iterable[Resource]) -> list[str]:
    """Identity-policy cycles among the flows of the stack's flow-spec ConfigMaps, as the
    planner (`kmirror.estate.topology.parse_topology`) reports them."""
    from kmirror.errors import ValidationError
    from kmirror.estate.topology import parse_topology

    specs = [s for rtype, props in resources if (s := flow_spec_of(rtype, props)) is not None and "id" in s]
    if not specs:
        return []
    try:
        parse_topology(_stack_topology(specs), "flow specs of the stack")
    except ValidationError as exc:
        return [str(p) for p in exc.problems if "cycle" in p.message.lower()]
    return []
