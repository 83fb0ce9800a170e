"""Issue 45: `kmirror import mm2|mm1|strimzi` carries each cluster's security settings onto its
topology `security` section (secrets as references, never values); what has no equivalent is
refused by name unless --allow-lossy. Samples follow the shapes of Strimzi's examples and docs
(tls trustedCertificates, tls/scram-sha-512/plain/oauth authentication) and Kafka's and AWS's
client properties (SASL/PLAIN, SCRAM, OAUTHBEARER OIDC, AWS_MSK_IAM)."""

from __future__ import annotations

from pathlib import Path

import yaml

from kmirror.estate.planner import plan_topology
from kmirror.estate.topology import parse_topology
from kmirror_cli.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "mm2"

# Strimzi's KafkaMirrorMaker2 with scram-sha-512 on both clusters and TLS to the target (the shape of
# the RHTE 2023 edge lab's and Strimzi docs' examples), tls client certificates, plain and oauth.
STRIMZI = """
apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaMirrorMaker2
metadata: {name: mm2}
spec:
  connectCluster: hq
  clusters:
    - alias: warehouse
      bootstrapServers: warehouse-kafka-bootstrap:9092
      authentication:
        type: scram-sha-512
        username: camel
        passwordSecret: {secretName: camel-user, password: password}
    - alias: hq
      bootstrapServers: hq-kafka-bootstrap:443
      tls:
        trustedCertificates:
          - {secretName: hq-ca, certificate: ca.crt}
      authentication:
        type: tls
        certificateAndKey: {secretName: mirror-maker-user, certificate: user.crt, key: user.key}
    - alias: cloud
      bootstrapServers: pkc-1.eu-west-1.aws.confluent.cloud:9092
      tls: {trustedCertificates: []}
      authentication:
        type: plain
        username: APIKEY1
        passwordSecret: {secretName: cc-api-key, password: secret}
    - alias: oidc
      bootstrapServers: oidc-kafka:9094
      tls:
        trustedCertificates:
          - {secretName: oidc-ca, certificate: ca.crt}
      authentication:
        type: oauth
        clientId: mirror
        clientSecret: {secretName: mirror-oauth, key: secret}
        tokenEndpointUri: https://sso.example.com/realms/kafka/protocol/openid-connect/token
        scope: kafka
  mirrors:
    - {sourceCluster: warehouse, targetCluster: hq, sourceConnector: {}, topicsPattern: "orders.*"}
    - {sourceCluster: cloud, targetCluster: oidc, sourceConnector: {}, topicsPattern: "clicks.*"}
"""


def _run(tmp_path: Path, capsys, *argv: str) -> tuple[int, str, Path]:
    out = tmp_path / "topology.yaml"
    code = main(["import", *argv, "-o", str(out)])
    return code, capsys.readouterr().err, out


def _import(tmp_path: Path, capsys, kind: str, text: str, *flags: str) -> tuple[int, str, Path]:
    """`kmirror import strimzi|mm2` of a file holding `text`; its exit code, stderr and output path."""
    src = tmp_path / ("mm2.yaml" if kind == "strimzi" else "mm2.properties")
    src.write_text(text)
    return _run(tmp_path, capsys, kind, str(src), *flags)


def _imported(tmp_path: Path, capsys, kind: str, text: str) -> tuple[dict, str, Path]:
    """The clusters of a `_import` that must succeed (what it wrote validates and plans), its stderr and output path."""
    code, err, out = _import(tmp_path, capsys, kind, text)
    assert code == 0, err
    return _clusters(out), err, out


def _clusters(out: Path) -> dict:
    raw = yaml.safe_load(out.read_text())
    topo = parse_topology(raw)  # what is written validates (security sections included) and plans
    assert plan_topology(topo).flows
    return raw["clusters"]


def test_strimzi_authentication_types_become_security_sections_with_k8s_secret_references(tmp_path, capsys):
    clusters, err, _ = _imported(tmp_path, capsys, "strimzi", STRIMZI)
    assert clusters["warehouse"]["security"] == {
        "protocol": "SASL_PLAINTEXT",
        "scram": {
            "mechanism": "SCRAM-SHA-512",
            "username": "camel",
            "password": {"k8s_secret": "camel-user", "key": "password"},
        },
    }
    assert clusters["hq"]["security"] == {
        "protocol": "SSL",
        "tls": {
            "ca": {"k8s_secret": "hq-ca", "key": "ca.crt"},
            "cert": {"k8s_secret": "mirror-maker-user", "key": "user.crt"},
            "key": {"k8s_secret": "mirror-maker-user", "key": "user.key"},
        },
    }
    assert clusters["cloud"]["security"] == {
        "protocol": "SASL_SSL",
        "plain": {"username": "APIKEY1", "password": {"k8s_secret": "cc-api-key", "key": "secret"}},
    }
    assert clusters["oidc"]["security"] == {
        "protocol": "SASL_SSL",
        "oauthbearer": {
            "token_endpoint": "https://sso.example.com/realms/kafka/protocol/openid-connect/token",
            "client_id": "mirror",
            "client_secret": {"k8s_secret": "mirror-oauth", "key": "secret"},
            "scope": "kafka",
        },
        "tls": {"ca": {"k8s_secret": "oidc-ca", "key": "ca.crt"}},
    }
    assert "refused" not in err


def test_strimzi_tls_sample_carries_each_clusters_ca(tmp_path, capsys):
    code, err, out = _run(tmp_path, capsys, "strimzi", str(DATA / "strimzi-mm2-tls.yaml"), "--allow-lossy")
    assert code == 0
    clusters = _clusters(out)
    for alias in ("cluster-a", "cluster-b"):
        assert clusters[alias]["security"] == {
            "protocol": "SSL",
            "tls": {"ca": {"k8s_secret": f"{alias}-cluster-ca-cert", "key": "ca.crt"}},
        }
    assert "spec.clusters[0].tls" not in err


def test_strimzi_oauth_fields_without_equivalent_are_refused_by_name_and_never_shown(tmp_path, capsys):
    text = STRIMZI.replace(
        "        scope: kafka\n", "        scope: kafka\n        refreshToken: {secretName: r, key: t}\n"
    )
    code, err, out = _import(tmp_path, capsys, "strimzi", text)
    assert code == 1 and not out.exists()
    assert "refused: spec.clusters[3].authentication.refreshToken=<redacted>: lossy" in err


MM2 = """clusters = onprem, msk, cc
onprem.bootstrap.servers = kafka-1.dc:9093
onprem.security.protocol = SASL_SSL
onprem.sasl.mechanism = SCRAM-SHA-512
onprem.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="mirror" password="hunter2";
onprem.ssl.truststore.location = /etc/kafka/ca.pem
onprem.ssl.truststore.type = PEM
msk.bootstrap.servers = b-1.prod.abc123.c2.kafka.eu-west-1.amazonaws.com:9098
msk.security.protocol = SASL_SSL
msk.sasl.mechanism = AWS_MSK_IAM
msk.sasl.jaas.config = software.amazon.msk.auth.iam.IAMLoginModule required \\
    awsRoleArn="arn:aws:iam::123456789012:role/mirror";
msk.sasl.client.callback.handler.class = software.amazon.msk.auth.iam.IAMClientCallbackHandler
cc.bootstrap.servers = pkc-1.eu-west-1.aws.confluent.cloud:9092
cc.security.protocol = SASL_SSL
cc.sasl.mechanism = PLAIN
cc.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required \\
    username="KEY1" password="${env:CC_SECRET}";
onprem->msk.enabled = true
msk->cc.enabled = true
"""


def test_mm2_properties_security_per_cluster_secrets_as_references_never_values(tmp_path, capsys):
    clusters, err, out = _imported(tmp_path, capsys, "mm2", MM2)
    assert clusters["onprem"]["security"] == {
        "protocol": "SASL_SSL",
        "tls": {"ca": {"file": "/etc/kafka/ca.pem"}},
        "scram": {"mechanism": "SCRAM-SHA-512", "username": "mirror", "password": {"env": "ONPREM_SASL_PASSWORD"}},
    }
    assert clusters["msk"]["security"] == {
        "protocol": "SASL_SSL",
        "msk_iam": {"region": "eu-west-1", "role_arn": "arn:aws:iam::123456789012:role/mirror"},
    }
    assert clusters["cc"]["security"] == {
        "protocol": "SASL_SSL",
        "plain": {"username": "KEY1", "password": {"env": "CC_SECRET"}},
    }
    # the plaintext password is named (set the variable), never written or printed
    assert "not carried over: onprem.sasl.jaas.config=<redacted>: not applicable: not written: set the" in err
    assert "hunter2" not in err + out.read_text()


def test_mm2_security_without_equivalent_is_refused_by_name(tmp_path, capsys):
    text = (
        "clusters = a, b\na.bootstrap.servers = a:9093\nb.bootstrap.servers = b:9092\na->b.enabled = true\n"
        "a.security.protocol = SSL\na.ssl.truststore.location = /etc/kafka/truststore.jks\n"
        "a.ssl.truststore.password = changeit\nb.security.protocol = SASL_PLAINTEXT\nb.sasl.mechanism = NTLM\n"
    )
    code, err, out = _import(tmp_path, capsys, "mm2", text)
    assert code == 1 and not out.exists()
    refused = {line.split(": ", 1)[1].split("=", 1)[0] for line in err.splitlines() if line.startswith("refused")}
    assert refused == {"a.ssl.truststore.location", "a.ssl.truststore.password", "b.sasl.mechanism"}
    assert "changeit" not in err
    code, err, out = _import(tmp_path, capsys, "mm2", text, "--allow-lossy")
    assert code == 0 and yaml.safe_load(out.read_text())["clusters"]["a"]["security"] == {"protocol": "SSL"}


def test_mm1_consumer_and_producer_security_go_to_source_and_target(tmp_path, capsys):
    consumer = tmp_path / "consumer.properties"
    consumer.write_text(
        "bootstrap.servers = src:9093\ngroup.id = mm1\nsecurity.protocol = SASL_SSL\nsasl.mechanism = OAUTHBEARER\n"
        "sasl.oauthbearer.token.endpoint.url = https://idp.example.com/oauth2/token\n"
        "sasl.login.callback.handler.class = "
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
        "sasl.jaas.config = org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'clientId="mirror" clientSecret="s3cr3t" scope="kafka";\n'
    )
    producer = tmp_path / "producer.properties"
    producer.write_text("bootstrap.servers = dst:9092\n")
    argv = ["mm1", "--consumer.config", str(consumer), "--producer.config", str(producer), "--whitelist", "a.*"]
    code, err, out = _run(tmp_path, capsys, *argv)
    assert code == 0, err
    clusters = _clusters(out)
    assert clusters["source"]["security"] == {
        "protocol": "SASL_SSL",
        "oauthbearer": {
            "token_endpoint": "https://idp.example.com/oauth2/token",
            "client_id": "mirror",
            "client_secret": {"env": "SOURCE_CLIENT_SECRET"},
            "scope": "kafka",
        },
    }
    assert "security" not in clusters["target"]
    assert "s3cr3t" not in err + out.read_text()
