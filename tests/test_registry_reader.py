"""The two one-partition registries on a real broker, read through their one shared reader
(`kmirror_engine.planning.keyed_reader`): the created-topics registry returns every recorded
remote topic, the synced-ACL record keeps the newest state per ACL (a tombstone forgets it) and
only this flow's ACLs; a registry that does not exist yet reads as empty."""

from __future__ import annotations

from typing import Any

from kmirror.flow.spec import ClusterEndpoint
from kmirror.security.acls import TopicAcl
from kmirror_engine.planning.created_topics import CreatedTopics
from kmirror_engine.planning.keyed_reader import read_keyed_to_end
from kmirror_engine.topic_sync.acls import SyncedAcls


def test_both_registries_read_back_what_was_recorded(clusters: Any, unique: str) -> None:
    target = ClusterEndpoint("east", clusters.target)
    source_alias = f"w{unique}"  # the registries are named by source alias: a fresh pair per run
    created = CreatedTopics(target, source_alias, f"{source_alias}->east")
    assert created.load(timeout_s=20) == set()  # not created yet: empty, no error
    created.record([(f"{source_alias}.orders", "orders"), (f"{source_alias}.pay", "pay")])
    created.record([(f"{source_alias}.orders", "orders")])  # recorded twice: one name
    assert created.load(timeout_s=20) == {f"{source_alias}.orders", f"{source_alias}.pay"}

    kept = TopicAcl(f"{source_alias}.orders", "User:app", "*", "READ", "ALLOW", "LITERAL")
    revoked = TopicAcl(f"{source_alias}.pay", "User:app", "*", "READ", "ALLOW", "LITERAL")
    mine = SyncedAcls(target, source_alias, f"{source_alias}->east")
    other_flow = SyncedAcls(target, source_alias, f"{source_alias}->other")
    assert mine.load(timeout_s=20) == set()
    mine.record([kept, revoked], synced=True)
    other_flow.record([revoked], synced=True)
    mine.record([revoked], synced=False)  # a tombstone: deleted since
    assert mine.load(timeout_s=20) == {kept}
    assert other_flow.load(timeout_s=20) == {revoked}
    records = read_keyed_to_end(target, mine.topic, role="registry-test-reader", timeout_s=20)
    assert len(records) == 4 and records[-1][1] is None  # every keyed record, in log order
