"""What a topology change does to every datacenter: a pure diff of two plans.

Input: two plan dicts as `kmirror plan --format json` prints them (`{"flows": [...],
"datacenters": {dc: [ids]}}`). Output: a `PlanDiff` grouped per datacenter (= stack):

- **added**: flow ids only in HEAD, listed under HEAD's `run_in`;
- **removed**: flow ids only in BASE, listed under BASE's `run_in`;
- **moved**: flows whose `run_in` changed, listed once, under the NEW datacenter, as
  `{"id", "from", "to"}` (the old datacenter's stack loses the flow; the entry says so);
- **changed**: flows in both plans whose settings differ, listed under HEAD's `run_in`, each
  change `{"field", "old", "new"}`. A moved flow with other edits is both moved and changed.
  Settings mappings (producer, consumer, spark, source/target security) are compared per key
  (`producer.compression.type`); other fields (topics, replication_policy, options) as a whole.

Secret values never leave this module: under `*_security` only references
(`{env: VAR}`, `{file: PATH}`, ...) and a few non-secret settings (protocol, mechanism,
username, ...) are shown; every other value there, and any password-like key that does not
hold a `${file:..}`/`${env:..}` reference, is rendered `<redacted>`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kmirror.flow.filters import NameSelection, should_replicate_topic
from kmirror.flow.replication_policy import ReplicationPolicy, policy_from_config
from kmirror.security.config import REDACTED, is_sensitive
from kmirror.security.secret_refs import REF_KINDS, is_reference

IDENTITY_FIELDS = ("id", "source", "target", "run_in")
SETTINGS_FIELDS = ("producer", "consumer", "spark", "source_security", "target_security")
SECURITY_FIELDS = ("source_security", "target_security")
# Non-secret scalars of a `security` mapping (kmirror.security.config); everything else there is hidden.
SECURITY_PLAIN_KEYS = frozenset(
    {"protocol", "mechanism", "username", "principal", "verify_hostname", "realm", "kdcs", "service_name"}
)
# Fields shown first, in this order; the rest follow alphabetically.
FIELD_ORDER = ("topology", "topics", "topics_exclude", "groups", "groups_exclude", "replication_policy")


@dataclass(frozen=True)
class Change:
    """One field of one flow: `field: old -> new` (values already redacted; None = absent)."""

    field: str
    old: Any
    new: Any

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "old": self.old, "new": self.new}


@dataclass(frozen=True)
class Move:
    id: str
    from_dc: str
    to_dc: str

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "from": self.from_dc, "to": self.to_dc}


@dataclass(frozen=True)
class TopicChange:
    """Concrete source topics that start/stop replicating on a flow (needs a topics file)."""

    id: str
    start: tuple[str, ...]
    stop: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "start": list(self.start), "stop": list(self.stop)}


@dataclass
class DatacenterDiff:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    moved: list[Move] = field(default_factory=list)
    changed: dict[str, list[Change]] = field(default_factory=dict)
    topics: list[TopicChange] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (self.added or self.removed or self.moved or self.changed)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "added": list(self.added),
            "removed": list(self.removed),
            "moved": [m.to_dict() for m in self.moved],
            "changed": [{"id": i, "changes": [c.to_dict() for c in cs]} for i, cs in self.changed.items()],
        }
        if self.topics:
            out["topics"] = [t.to_dict() for t in self.topics]
        return out


@dataclass(frozen=True)
class Edge:
    """One flow of the union of both plans, for the graph: status is added, removed, moved,
    changed or unchanged."""

    id: str
    source: str
    target: str
    status: str


@dataclass
class PlanDiff:
    """The whole diff; `datacenters` holds only datacenters with a change, sorted by name."""

    datacenters: dict[str, DatacenterDiff]
    warnings: list[str]
    edges: list[Edge]

    @property
    def changed(self) -> bool:
        return bool(self.datacenters)

    def to_dict(self) -> dict[str, Any]:
        """The `kmirror diff --format json` contract."""
        return {
            "datacenters": {dc: d.to_dict() for dc, d in self.datacenters.items()},
            "warnings": list(self.warnings),
        }


def is_ref_mapping(value: Any) -> bool:
    """True for a secret REF mapping such as `{env: VAR}` or `{k8s_secret: NAME, key: K}`."""
    return isinstance(value, Mapping) and len(value) in (1, 2) and any(kind in value for kind in REF_KINDS)


def shown_value(path: str, value: Any) -> Any:
    """`value` of the field at dotted `path` as it may be displayed (secrets -> `<redacted>`)."""
    if value is None or is_ref_mapping(value) or is_reference(value):
        return value
    top, _, rest = path.partition(".")
    last = rest.rsplit(".", 1)[-1] if rest else top
    if top in SECURITY_FIELDS and last not in SECURITY_PLAIN_KEYS:
        return REDACTED
    if any(is_sensitive(part) for part in (path, rest, last) if part):
        return REDACTED
    if isinstance(value, Mapping):
        return {k: shown_value(f"{path}.{k}", v) for k, v in value.items()}
    if isinstance(value, list):
        return [shown_value(path, v) for v in value]
    return value


def _flatten(prefix: str, value: Any) -> dict[str, Any]:
    """Leaves of nested settings as dotted paths; references are leaves."""
    if isinstance(value, Mapping) and value and not is_ref_mapping(value):
        out: dict[str, Any] = {}
        for key in value:
            out.update(_flatten(f"{prefix}.{key}", value[key]))
        return out
    return {prefix: value}


def _fields(flow: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flow.items():
        if key in IDENTITY_FIELDS:
            continue
        if key in SETTINGS_FIELDS and isinstance(value, Mapping):
            out.update(_flatten(key, value) if value else {})
        else:
            out[key] = value
    return out


def _field_key(name: str) -> tuple[int, str]:
    top = name.split(".", 1)[0]
    return (FIELD_ORDER.index(top) if top in FIELD_ORDER else len(FIELD_ORDER), name)


def flow_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    """Every differing field of one flow (run_in excluded: that is a move), secrets redacted."""
    before, after = _fields(old), _fields(new)
    names = sorted(set(before) | set(after), key=_field_key)
    return [
        Change(name, shown_value(name, before.get(name)), shown_value(name, after.get(name)))
        for name in names
        if before.get(name) != after.get(name)
    ]


def policy_label(config: Mapping[str, Any] | None) -> str:
    """`default('.')` or `identity`: how the warnings name a replication policy."""
    config = config or {}
    if config.get("type", "default") == "identity":
        return "identity"
    return f"default({config.get('separator', '.')!r})"


def _policy(flow: Mapping[str, Any]) -> ReplicationPolicy:
    return policy_from_config(dict(flow.get("replication_policy") or {}), source_alias=str(flow["source"]))


def _selection(flow: Mapping[str, Any]) -> NameSelection:
    return NameSelection(
        tuple(flow.get("topics") or ()),
        tuple(flow.get("topics_exclude") or ()),
        heartbeats=flow.get("heartbeats_replication_enabled", True) is not False,
    )


def _sample_topic(flow: Mapping[str, Any], topics: Iterable[str]) -> str:
    """A topic the flow replicates, to make the rename warning concrete."""
    selection = _selection(flow)
    for topic in topics:
        if selection.matches(topic):
            return topic
    for pattern in flow.get("topics") or ():
        candidate = re.sub(r"\.\*|\.\+|[\\^$*+?()\[\]{}|]", "", str(pattern).split(",")[0]).strip(".")
        if candidate and selection.matches(candidate):
            return candidate
    return "<topic>"


def rename_warning(old: Mapping[str, Any], new: Mapping[str, Any], topics: Iterable[str] = ()) -> str | None:
    """A warning when HEAD's replication policy names this flow's remote topics differently."""
    topic = _sample_topic(new, topics)
    source = str(new["source"])
    before, after = _policy(old).format_remote_topic(source, topic), _policy(new).format_remote_topic(source, topic)
    if before == after:
        return None
    return (
        f"{new['id']}: replication_policy {policy_label(old.get('replication_policy'))} -> "
        f"{policy_label(new.get('replication_policy'))} renames remote topics on {new['target']} "
        f"({before} -> {after}): consumers on the target will see new topic names"
    )


def replicated_topics(flow: Mapping[str, Any] | None, topics_by_cluster: Mapping[str, list[str]]) -> set[str]:
    """The concrete topics of the flow's source cluster (from a topics file) the flow copies."""
    if flow is None:
        return set()
    selection, policy = _selection(flow), _policy(flow)
    source, target = str(flow["source"]), str(flow["target"])
    return {t for t in topics_by_cluster.get(source, []) if should_replicate_topic(selection, policy, t, target)}


def _flows_by_id(plan: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(f["id"]): f for f in plan.get("flows", [])}


def _edge(flow: Mapping[str, Any], status: str) -> Edge:
    return Edge(str(flow["id"]), str(flow["source"]), str(flow["target"]), status)


def diff_plans(
    base: Mapping[str, Any], head: Mapping[str, Any], topics_by_cluster: Mapping[str, list[str]] | None = None
) -> PlanDiff:
    """Compare two plan dicts. With `topics_by_cluster` ({alias: [topic names]}) each changed,
    added or removed flow also lists the concrete topics that start/stop replicating."""
    old, new = _flows_by_id(base), _flows_by_id(head)
    dcs: dict[str, DatacenterDiff] = {}
    warnings: list[str] = []
    edges: list[Edge] = []
    topic_names = [t for names in (topics_by_cluster or {}).values() for t in names]

    def at(dc: Any) -> DatacenterDiff:
        return dcs.setdefault(str(dc), DatacenterDiff())

    for flow_id in sorted(set(old) | set(new)):
        before, after = old.get(flow_id), new.get(flow_id)
        if before is None and after is not None:
            at(after["run_in"]).added.append(flow_id)
            edges.append(_edge(after, "added"))
        elif after is None and before is not None:
            at(before["run_in"]).removed.append(flow_id)
            edges.append(_edge(before, "removed"))
        elif before is not None and after is not None:
            status = "unchanged"
            if before["run_in"] != after["run_in"]:
                at(after["run_in"]).moved.append(Move(flow_id, str(before["run_in"]), str(after["run_in"])))
                status = "moved"
            changes = flow_changes(before, after)
            if changes:
                at(after["run_in"]).changed[flow_id] = changes
                status = "changed" if status == "unchanged" else status
                if before.get("replication_policy") != after.get("replication_policy"):
                    warning = rename_warning(before, after, topic_names)
                    warnings += [warning] if warning else []
            edges.append(_edge(after, status))
        if topics_by_cluster is not None:
            _add_topic_change(dcs, flow_id, before, after, topics_by_cluster)
    return PlanDiff({dc: dcs[dc] for dc in sorted(dcs)}, warnings, edges)


def _add_topic_change(
    dcs: dict[str, DatacenterDiff],
    flow_id: str,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    topics_by_cluster: Mapping[str, list[str]],
) -> None:
    was, now = replicated_topics(before, topics_by_cluster), replicated_topics(after, topics_by_cluster)
    if was == now:
        return
    dc = str((after or before or {})["run_in"])
    if dc in dcs:  # a different topic set implies a flow change, so the datacenter is listed
        dcs[dc].topics.append(TopicChange(flow_id, tuple(sorted(now - was)), tuple(sorted(was - now))))
