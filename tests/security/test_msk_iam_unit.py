"""AWS MSK IAM (issue 45): the `security.msk_iam` section, the token callback the engine attaches to
every confluent-kafka client, and the IAM policy `kmirror acls` renders. No broker: the token is
signed with fake (env or moto STS) credentials and checked by decoding it and re-computing its SigV4
signature with the test's secret key, as MSK's brokers do."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import pytest

from kmirror.errors import KmirrorError
from kmirror.security.acls import AclGrant
from kmirror.security.config import client_config
from kmirror.security.msk_iam import grant_actions, iam_policy, msk_iam_config_problems, resource_arn
from kmirror.security.security_checks import security_problems
from kmirror_engine.clients.msk_iam import with_msk_iam

ACCESS_KEY, SECRET_KEY = "AKIAMSKIAMTEST000001", "mskiam/test/secret+key"
CLUSTER = "arn:aws:kafka:eu-west-1:123456789012:cluster/prod-east/0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0-2"


def msk(**over: Any) -> dict[str, Any]:
    return {"protocol": "SASL_SSL", "msk_iam": {"region": "eu-west-1", **over}}


@pytest.fixture()
def fake_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def decode(token: str) -> tuple[str, dict[str, str]]:
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    parts = urlsplit(url)
    return url, dict(parse_qsl(parts.query, keep_blank_values=True))


def sigv4_valid(url: str, secret_key: str) -> bool:
    """Re-compute a presigned GET's SigV4 signature (what an MSK broker checks). User-Agent is
    added by the signer after signing, so it is not part of the canonical query."""
    parts = urlsplit(url)
    params = [
        (k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in ("X-Amz-Signature", "User-Agent")
    ]
    signature = dict(parse_qsl(parts.query))["X-Amz-Signature"]
    query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(params))
    canonical = "\n".join(
        ["GET", parts.path or "/", query, f"host:{parts.netloc}\n", "host", hashlib.sha256(b"").hexdigest()]
    )
    fields = dict(params)
    date, scope = fields["X-Amz-Date"], fields["X-Amz-Credential"].split("/", 1)[1]
    to_sign = "\n".join(["AWS4-HMAC-SHA256", date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret_key).encode()
    for part in scope.split("/"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.compare_digest(hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest(), signature)


# --- the section ----------------------------------------------------------------------------------


def test_msk_iam_renders_oauthbearer_and_kmirror_properties_only() -> None:
    config = client_config(msk(role_arn="arn:aws:iam::123456789012:role/mirror", cluster_arn=CLUSTER))
    assert config == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "OAUTHBEARER",
        "kmirror.msk_iam.region": "eu-west-1",
        "kmirror.msk_iam.role_arn": "arn:aws:iam::123456789012:role/mirror",
        "kmirror.msk_iam.cluster_arn": CLUSTER,
    }
    assert security_problems(msk(), "clusters.east.security") == []


@pytest.mark.parametrize(
    ("security", "field", "words"),
    [
        ({"protocol": "SASL_SSL", "msk_iam": {}}, "clusters.east.security.msk_iam.region", "required key is missing"),
        (msk(region="Ireland"), "clusters.east.security.msk_iam.region", "got 'Ireland'"),
        (msk(role_arn="mirror"), "clusters.east.security.msk_iam.role_arn", "arn:aws:iam::ACCOUNT:role/NAME"),
        (msk(role_arn="arn:aws:iam::123456789012:role/m", profile="p"), "clusters.east.security.msk_iam", "not both"),
        (
            msk(cluster_arn=CLUSTER.replace("eu-west-1", "us-east-1")),
            "clusters.east.security.msk_iam.cluster_arn",
            "make them agree",
        ),
        (
            msk(cluster_arn="arn:aws:kafka:eu-west-1:1:topic/x"),
            "clusters.east.security.msk_iam.cluster_arn",
            "cluster/NAME/UUID",
        ),
        ({**msk(), "protocol": "SASL_PLAINTEXT"}, "clusters.east.security.protocol", "MSK IAM needs SASL_SSL"),
        (
            {**msk(), "plain": {"username": "u", "password": {"env": "P"}}},
            "clusters.east.security",
            "not plain and msk_iam",
        ),
        (msk(regoin="x"), "clusters.east.security.msk_iam.regoin", ""),
    ],
)
def test_msk_iam_problems_name_field_value_and_fix(security: dict[str, Any], field: str, words: str) -> None:
    problems = security_problems(security, "clusters.east.security")
    assert any(p.path == field and words in p.message for p in problems), problems


def test_flow_spec_config_with_msk_iam_is_checked_as_the_section_is() -> None:
    bad = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "kmirror.msk_iam.regoin": "x"}
    paths = {p.path for p in msk_iam_config_problems(bad, "source.config")}
    assert paths == {
        "source.config.kmirror.msk_iam.regoin",
        "source.config.kmirror.msk_iam.region",
        "source.config.security.protocol",
        "source.config.sasl.mechanisms",
    }
    assert msk_iam_config_problems(client_config(msk()), "source.config") == []


def test_start_up_check_names_a_missing_region() -> None:
    from kmirror_engine.clients.security_check import check_client_support

    config = {"security.protocol": "SASL_SSL", "sasl.mechanisms": "OAUTHBEARER", "kmirror.msk_iam.profile": "p"}
    with pytest.raises(KmirrorError, match=r"cluster 'east'.*kmirror\.msk_iam\.region: required key is missing"):
        check_client_support("east", config)
    check_client_support("east", client_config(msk()))  # librdkafka has OAUTHBEARER; the signer is installed


# --- the token ------------------------------------------------------------------------------------


def test_token_is_a_presigned_connect_url_for_the_region_with_the_right_expiry(fake_credentials: None) -> None:
    config = with_msk_iam(client_config(msk()))
    assert not [k for k in config if k.startswith("kmirror.")] and config["sasl.mechanisms"] == "OAUTHBEARER"
    before = time.time()
    token, expiry = config["oauth_cb"]("")
    url, params = decode(token)
    assert url.startswith("https://kafka.eu-west-1.amazonaws.com/?")
    assert params["Action"] == "kafka-cluster:Connect"
    assert params["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert params["X-Amz-Credential"].startswith(f"{ACCESS_KEY}/") and params["X-Amz-Credential"].endswith(
        "/eu-west-1/kafka-cluster/aws4_request"
    )
    signed = datetime.strptime(params["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()
    # librdkafka wants seconds since the epoch (the signer says milliseconds): 15 minutes after signing
    assert expiry == signed + int(params["X-Amz-Expires"]) and params["X-Amz-Expires"] == "900"
    assert before - 1 < signed <= time.time() and 800 < expiry - time.time() <= 900
    assert sigv4_valid(url, SECRET_KEY)
    assert not sigv4_valid(url, SECRET_KEY + "x")  # the check can fail
    assert SECRET_KEY not in url


def test_role_arn_is_assumed_through_sts_with_moto(fake_credentials: None) -> None:
    from moto import mock_aws

    with mock_aws():
        config = with_msk_iam(client_config(msk(role_arn="arn:aws:iam::123456789012:role/mirror")))
        _, params = decode(config["oauth_cb"]("")[0])
    assert params["X-Amz-Credential"].startswith("ASIA")  # moto's temporary key, not the env's
    assert params["X-Amz-Security-Token"]


def test_a_credential_failure_names_region_and_source_never_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_credentials() -> tuple[str, int]:
        raise ValueError("AWS Credentials can not be empty")

    oauth_cb = with_msk_iam(client_config(msk(profile="mirror")), signer=no_credentials)["oauth_cb"]
    with pytest.raises(KmirrorError, match=r"region eu-west-1 from profile 'mirror'.*IRSA"):
        oauth_cb("")


def test_librdkafka_refreshes_the_token_before_it_expires() -> None:
    """A real confluent-kafka client: a token that expires in 2 s is asked for again (librdkafka
    refreshes at 80% of the lifetime the callback returned, so the expiry must be in seconds)."""
    from kmirror_engine.clients.factory import Producer

    calls: list[float] = []

    def short_lived() -> tuple[str, int]:
        calls.append(time.time())
        return "token", int((time.time() + 2) * 1000)

    config = with_msk_iam(
        {**client_config(msk()), "bootstrap.servers": "127.0.0.1:9", "log_level": 0}, signer=short_lived
    )
    producer = Producer(config)
    deadline = time.time() + 20
    while len(calls) < 3 and time.time() < deadline:
        producer.poll(0.2)
    assert len(calls) >= 3, calls
    assert 1.0 < calls[2] - calls[1] < 2.5  # refreshed before the 2 s expiry, not in a loop


def test_every_client_the_factory_makes_gets_the_callback(fake_credentials: None) -> None:
    from kmirror_engine.clients.factory import AdminClient, Consumer

    seen: list[str] = []
    signer = lambda: (seen.append("x"), ("t", int((time.time() + 900) * 1000)))[1]  # noqa: E731
    base = {**client_config(msk()), "bootstrap.servers": "127.0.0.1:9", "log_level": 0}
    for make in (lambda c: Consumer({**c, "group.id": "g"}), AdminClient):
        before = len(seen)
        client = make(with_msk_iam(base, signer=signer))  # the callback may run during creation
        deadline = time.time() + 10
        while len(seen) == before and time.time() < deadline:
            client.poll(0.2)
        assert len(seen) > before
    # without a signer given, the factory's own Consumer builds the callback from the config
    consumer = Consumer({**base, "group.id": "g"})
    consumer.poll(0.5)
    consumer.close()


def test_the_batch_path_falls_back_to_the_record_loop_by_rule() -> None:
    from kmirror_engine.copying.batch_settings import link_config

    _, reasons = link_config(client_config(msk()))
    assert reasons == ["SASL mechanism OAUTHBEARER is not supported on the batch path (PLAIN and SCRAM are)"]


# --- the IAM policy -------------------------------------------------------------------------------

# The Kafka API calls the app makes, by resource, and the MSK IAM actions AWS documents for them
# ("IAM access control: semantics of actions and resources").
API_ACTIONS = {
    ("TOPIC", "Metadata"): {"DescribeTopic"},
    ("TOPIC", "Fetch"): {"ReadData"},
    ("TOPIC", "ListOffsets"): {"DescribeTopic"},
    ("TOPIC", "Produce"): {"WriteData"},
    ("TOPIC", "CreateTopics"): {"CreateTopic"},
    ("TOPIC", "CreatePartitions"): {"AlterTopic"},
    ("TOPIC", "DescribeConfigs"): {"DescribeTopicDynamicConfiguration"},
    ("TOPIC", "IncrementalAlterConfigs"): {"AlterTopicDynamicConfiguration"},
    ("GROUP", "FindCoordinator"): {"DescribeGroup"},
    ("GROUP", "OffsetFetch"): {"DescribeGroup"},
    ("GROUP", "OffsetCommit"): {"AlterGroup"},
    ("GROUP", "TxnOffsetCommit"): {"AlterGroup"},
    ("TRANSACTIONAL_ID", "InitProducerId"): {"AlterTransactionalId"},
    ("TRANSACTIONAL_ID", "AddPartitionsToTxn"): {"AlterTransactionalId"},
    ("TRANSACTIONAL_ID", "EndTxn"): {"AlterTransactionalId"},
    ("TRANSACTIONAL_ID", "FindCoordinator"): {"DescribeTransactionalId"},
}
# The Kafka ACL operation that authorises each call (Kafka's own table, KIP-11/AclAuthorizer).
API_OPERATION = {
    "Metadata": "Describe",
    "Fetch": "Read",
    "ListOffsets": "Describe",
    "Produce": "Write",
    "CreateTopics": "Create",
    "CreatePartitions": "Alter",
    "DescribeConfigs": "DescribeConfigs",
    "IncrementalAlterConfigs": "AlterConfigs",
    "FindCoordinator": "Describe",
    "OffsetFetch": "Describe",
    "OffsetCommit": "Read",
    "TxnOffsetCommit": "Read",
    "InitProducerId": "Write",
    "AddPartitionsToTxn": "Write",
    "EndTxn": "Write",
}


def flow(tmp_path: Any, target_security: dict[str, Any], exactly_once: bool) -> Any:
    path = tmp_path / "flow.json"
    path.write_text(
        json.dumps(
            {
                "id": "west->east",
                "checkpoint_location": "/tmp/cp",
                "topics": ["orders"],
                "topics_exclude": [],
                "exactly_once": exactly_once,
                "source": {
                    "alias": "west",
                    "bootstrap_servers": "src:9098",
                    "config": client_config(msk(cluster_arn=CLUSTER)),
                },
                "target": {"alias": "east", "bootstrap_servers": "dst:9092", "config": client_config(target_security)},
                "replication_policy": {"type": "default"},
            }
        )
    )
    return path


@pytest.mark.parametrize("exactly_once", [False, True])
def test_iam_policy_allows_every_api_call_each_grant_stands_for(tmp_path: Any, exactly_once: bool) -> None:
    """Statement by statement: each grant's Kafka operations -> the API calls they authorise -> the
    IAM actions AWS checks for those calls, all in the grant's own statement on the grant's ARN."""
    from kmirror.flow.spec import load_flow_spec
    from kmirror_engine.planning.internal_topics import mirror_acls

    spec = load_flow_spec(flow(tmp_path, msk(), exactly_once))
    grants = mirror_acls(spec, ["orders"])
    config = spec.target.config
    policy = iam_policy(config, [g for g in grants if g.side == "target"])
    statements = policy["Statement"]
    assert statements[0]["Action"] == ["kafka-cluster:Connect", "kafka-cluster:DescribeCluster"]
    assert statements[0]["Resource"] == ["arn:aws:kafka:eu-west-1:*:cluster/*/*"]  # no cluster_arn: the region's
    for grant, statement in zip([g for g in grants if g.side == "target"], statements[1:], strict=True):
        allowed = {a.removeprefix("kafka-cluster:") for a in statement["Action"]}
        for (kind, api), actions in API_ACTIONS.items():
            if kind == grant.resource_type and API_OPERATION[api] in grant.operations:
                assert actions <= allowed, (grant, api, allowed)
        assert statement["Resource"] == [resource_arn(config, grant)]
    kinds = {g.resource_type for g in grants if g.side == "target"}
    assert ("TRANSACTIONAL_ID" in kinds) == exactly_once
    if exactly_once:
        txn = [s for s in statements if ":transactional-id/" in s["Resource"][0]]
        assert txn and set(txn[0]["Action"]) == {
            "kafka-cluster:AlterTransactionalId",
            "kafka-cluster:DescribeTransactionalId",
        }


def test_arn_shapes_follow_the_cluster_arn() -> None:
    config = client_config(msk(cluster_arn=CLUSTER))
    base = "arn:aws:kafka:eu-west-1:123456789012"
    uuid = "prod-east/0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0-2"
    cases = {
        AclGrant("target", "TOPIC", "west.", "PREFIXED", ("Write",), ""): f"{base}:topic/{uuid}/west.*",
        AclGrant("source", "GROUP", "g1", "LITERAL", ("Read",), ""): f"{base}:group/{uuid}/g1",
        AclGrant("target", "TRANSACTIONAL_ID", "t-", "PREFIXED", ("Write",), ""): f"{base}:transactional-id/{uuid}/t-*",
        AclGrant("source", "CLUSTER", "kafka-cluster", "LITERAL", ("Describe",), ""): f"{base}:cluster/{uuid}",
    }
    for grant, arn in cases.items():
        assert resource_arn(config, grant) == arn
    with pytest.raises(KmirrorError, match="TOPIC Frobnicate has no MSK IAM action"):
        grant_actions(AclGrant("target", "TOPIC", "x", "LITERAL", ("Frobnicate",), ""))


def test_kmirror_acls_renders_the_iam_side_as_a_policy_and_the_other_as_commands(tmp_path: Any, capsys: Any) -> None:
    from kmirror_cli.cli import main

    path = flow(tmp_path, {"protocol": "SASL_SSL", "plain": {"username": "APIKEY1", "password": {"env": "P"}}}, False)
    assert main(["acls", "--flow", str(path), "--topic", "orders"]) == 0
    out = capsys.readouterr().out
    commands = [line for line in out.splitlines() if line.startswith("kafka-acls.sh")]
    assert commands and all("--bootstrap-server dst:9092" in c and "User:APIKEY1" in c for c in commands)
    assert "# source cluster: IAM policy for the app's role" in out
    policy = json.loads(out.split("IAM policy for the app's role (MSK IAM; no Kafka ACLs)\n", 1)[1])
    arns = [r for s in policy["Statement"] for r in s["Resource"]]
    assert "arn:aws:kafka:eu-west-1:123456789012:topic/prod-east/0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0-2/orders" in arns
    read = next(s for s in policy["Statement"] if s["Resource"][0].endswith("/orders"))
    assert set(read["Action"]) >= {"kafka-cluster:ReadData", "kafka-cluster:DescribeTopic"}
    assert main(["acls", "--flow", str(path), "--topic", "orders", "--format", "json"]) == 0
    items = json.loads(capsys.readouterr().out)
    assert all(("iam_statement" in i) == (i.get("side") == "source") for i in items if "operations" in i)
    assert [i["side"] for i in items if "iam_policy" in i] == ["source"]


def test_kmirror_validate_names_the_msk_iam_field_and_passes_a_good_section(tmp_path: Any, capsys: Any) -> None:
    """The topology path: `kmirror validate` on the project's own topology with one cluster on MSK IAM."""
    from pathlib import Path

    import yaml

    from kmirror_cli.cli import main

    topology = yaml.safe_load((Path(__file__).parents[2] / "stacks" / "topology.yaml").read_text())
    path = tmp_path / "topology.yaml"
    topology["clusters"]["east-1"]["security"] = {"protocol": "SASL_SSL", "msk_iam": {"region": "eu-west-1"}}
    path.write_text(yaml.safe_dump(topology))
    assert main(["validate", "--topology", str(path)]) == 0, capsys.readouterr()
    topology["clusters"]["east-1"]["security"] = {"protocol": "SASL_SSL", "msk_iam": {"region": "Frankfurt"}}
    path.write_text(yaml.safe_dump(topology))
    assert main(["validate", "--topology", str(path)]) != 0
    out = capsys.readouterr()
    assert "clusters.east-1.security.msk_iam.region" in out.out + out.err and "'Frankfurt'" in out.out + out.err
