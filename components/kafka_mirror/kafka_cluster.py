"""KafkaCluster: one cluster of the topology as the app connects to it.

It holds the alias, bootstrap servers, datacenter and the `security` mapping, which contains
references to secrets (`{k8s_secret: ...}`, `{pulumi_config: ...}`, ...), never their values.
Its outputs are the librdkafka client config the app gets (secret values appear only as
`${file:...}`/`${env:...}` reference strings) and the secrets a deployment must mount.
(No `from __future__ import annotations`: Pulumi's component analyzer reads these annotations.)
"""

from typing import TypedDict

import pulumi
from typing_extensions import NotRequired

from kafka_mirror.input_types import ClusterSecurity
from kmirror.errors import ValidationError
from kmirror.security.config import client_config, security_materialisations
from kmirror.security.secret_refs import Materialisation
from kmirror.security.security_checks import security_problems

TOKEN = "kafka-mirror:index:KafkaCluster"


class KafkaClusterArgs(TypedDict):
    """Arguments of KafkaCluster: one entry of the topology's `clusters` section."""

    alias: str
    """The cluster's alias in the topology (flow ids are `<alias>-><alias>`)."""
    bootstrap_servers: pulumi.Input[str]
    """`host:port[,host:port...]`; may be another resource's output (e.g. an MSK cluster's brokers)."""
    datacenter: str
    """The datacenter the cluster lives in (where flows writing to it run by default)."""
    security: NotRequired[ClusterSecurity]
    """The cluster's `security` section as in the topology file (protocol, tls, scram, kerberos; camelCase names
    in other languages, e.g. `keyPassword`, `k8sSecret`): references to secrets, never their values."""


class KafkaCluster(pulumi.ComponentResource):
    """One Kafka cluster as the mirror connects to it: its client config (secret references only) and the secrets
    a deployment must mount.

    Raises ValidationError (every problem of `security`) before registering anything.
    """

    alias: pulumi.Output[str]
    """The cluster's alias."""
    bootstrap_servers: pulumi.Output[str]
    """The bootstrap servers."""
    datacenter: pulumi.Output[str]
    """The cluster's datacenter."""
    client_config: pulumi.Output[dict[str, str]]
    """The librdkafka properties the app uses (`bootstrap.servers` plus security; secrets as `${file:...}`)."""
    secret_paths: pulumi.Output[list[str]]
    """Files the app reads secrets from (what a deployment must mount)."""

    def __init__(self, name: str, args: KafkaClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        security = args.get("security")
        problems = security_problems(security, f"clusters.{args['alias']}.security") if security else []
        if problems:
            raise ValidationError(problems, f"KafkaCluster {name}")
        super().__init__(TOKEN, name, {}, opts)
        self.config: dict[str, str] = client_config(security)
        self.materialisations: list[Materialisation] = security_materialisations(security)
        self.alias = pulumi.Output.from_input(args["alias"])
        self.datacenter = pulumi.Output.from_input(args["datacenter"])
        self.bootstrap_servers = pulumi.Output.from_input(args["bootstrap_servers"])
        self.client_config = self.bootstrap_servers.apply(lambda servers: {"bootstrap.servers": servers, **self.config})
        self.secret_paths = pulumi.Output.from_input(sorted({m.path for m in self.materialisations}))
        self.register_outputs(
            {
                "alias": self.alias,
                "bootstrap_servers": self.bootstrap_servers,
                "datacenter": self.datacenter,
                "client_config": self.client_config,
                "secret_paths": self.secret_paths,
            }
        )
