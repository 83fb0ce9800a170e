"""`python -m spark_app --self-check`: can the app start on this node's Spark and Python?

Needs no broker. It promises to have, in this order:
1. imported the Spark glue (`spark_app.source`, `spark_app.stream_readers`, `spark_app.sink`)
   against the installed pyspark, and picked the streaming API the reader will use;
2. built a local SparkSession, registered both data sources, and let the JVM resolve them the
   way a query start does (a Python worker unpickles each source and returns its schema);
3. built the stream reader and the stream writer a query would use (no Kafka call: their
   clients are made lazily, on the first batch);
4. probed the installed confluent-kafka for TLS, SCRAM, PLAIN, OAUTHBEARER (OIDC) and GSSAPI (Kerberos)
   support.
It prints one `name: value` line per fact and `self-check: ok`, exit 0; on a failure, the line
`self-check: FAILED: <step>: <error>`, exit 1. GSSAPI missing is reported, not a failure: only
Kerberos clusters need it, and `kmirror run` refuses those with the fix when it is missing.
"""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Callable
from typing import Any

# A flow that is never run: the reader and writer are built, not started.
PROBE_FLOW = {
    "id": "self-check-a->self-check-b",
    "topics": ["self-check"],
    "topics_exclude": [],
    "replication_policy": {"type": "default"},
    "source": {"alias": "self-check-a", "bootstrap_servers": "127.0.0.1:9", "config": {}},
    "target": {"alias": "self-check-b", "bootstrap_servers": "127.0.0.1:9", "config": {}},
    "checkpoint_location": "/nonexistent/kmirror-self-check",
}
CLIENT_PROBES = {
    "tls": {"security.protocol": "SSL"},
    "scram": {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512"},
    "plain": {"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN"},
    "oauthbearer oidc": {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
    },
    "gssapi": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI"},
}


def _supports(config: dict[str, str]) -> bool:
    from kmirror.errors import KmirrorError
    from kmirror_engine.clients import check_client_support

    try:
        check_client_support("self-check", config)
    except KmirrorError:
        return False
    return True


def _versions() -> dict[str, str]:
    import confluent_kafka
    import pyspark

    from spark_app.stream_readers import reader_class

    raw = [confluent_kafka.version(), confluent_kafka.libversion()]
    client, librdkafka = (v[0] if isinstance(v, tuple) else v for v in raw)
    return {
        "python": f"{platform.python_version()} ({sys.executable})",
        "pyspark": pyspark.__version__,
        "reader api": reader_class("auto").api,
        "confluent-kafka": f"{client} (librdkafka {librdkafka})",
    }


def _clients() -> dict[str, str]:
    return {f"client {name}": "yes" if _supports(config) else "no" for name, config in CLIENT_PROBES.items()}


def _spark(master: str | None) -> dict[str, str]:
    from spark_app.session import build_session
    from spark_app.sink import SINK_NAME, MirrorSink
    from spark_app.source import SOURCE_NAME, MirrorSource
    from spark_app.stream_readers import READER_SCHEMA

    spark = build_session(master or "local[1]", app_name="kmirror self-check")
    try:
        spark.dataSource.register(MirrorSource)
        spark.dataSource.register(MirrorSink)
        from kmirror.flow.spec import parse_flow_spec

        spec_json = json.dumps(parse_flow_spec(PROBE_FLOW).to_dict())
        frame = spark.readStream.format(SOURCE_NAME).option("flow_spec", spec_json).load()  # resolved by the JVM
        if [f.name for f in frame.schema.fields][:2] != ["source_topic", "partition"]:
            raise AssertionError(f"the JVM resolved an unexpected schema: {frame.schema.simpleString()}")
        frame.writeStream.format(SINK_NAME).option("flow_spec", spec_json)  # the sink's options take
        options = {"flow_spec": spec_json, "mode": "once"}
        reader = MirrorSource(options).streamReader(READER_SCHEMA)
        writer = MirrorSink({"flow_spec": spec_json}).streamWriter(READER_SCHEMA, False)
        return {
            "spark": spark.version,
            "data sources": f"{SOURCE_NAME}, {SINK_NAME} registered and resolved",
            "reader": type(reader).__name__,
            "writer": type(writer).__name__,
        }
    finally:
        spark.stop()


def self_check(master: str | None = None, out: Any = None) -> int:
    """Run the steps of the module doc, printing as it goes; returns the exit code."""
    out = out or sys.stdout
    steps: list[tuple[str, Callable[[], dict[str, str]]]] = [
        ("imports", _versions),
        ("spark", lambda: _spark(master)),
        ("clients", _clients),
    ]
    for step, run in steps:
        try:
            facts = run()
        except Exception as exc:  # any failure is the answer: report it, exit 1
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            print(f"self-check: FAILED: {step}: {type(exc).__name__}: {first}", file=out, flush=True)
            return 1
        for name, value in facts.items():
            print(f"{name}: {value}", file=out, flush=True)
    print("self-check: ok", file=out, flush=True)
    return 0
