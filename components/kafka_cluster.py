"""KafkaCluster: one cluster of the topology as the app connects to it.

It holds the alias, bootstrap servers, datacenter and the `security` mapping, which contains
references to secrets (`{k8s_secret: ...}`, `{pulumi_config: ...}`, ...), never their values.
Its outputs are the librdkafka client config the app gets (secret values appear only as
`${file:...}`/`${env:...}` reference strings) and the secrets a deployment must mount.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from kmirror.errors import ValidationError
from kmirror.secret_refs import Materialisation
from kmirror.security import client_config, security_materialisations, security_problems

TOKEN = "kafka-mirror:index:KafkaCluster"


@dataclass
class KafkaClusterArgs:
    alias: str
    bootstrap_servers: str
    datacenter: str
    security: dict[str, Any] | None = None


class KafkaCluster(pulumi.ComponentResource):
    """Outputs: `alias`, `bootstrap_servers`, `datacenter`, `client_config`, `secret_paths`.

    Raises ValidationError (every problem of `security`) before registering anything.
    """

    def __init__(self, name: str, args: KafkaClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        problems = security_problems(args.security, f"clusters.{args.alias}.security") if args.security else []
        if problems:
            raise ValidationError(problems, f"KafkaCluster {name}")
        super().__init__(TOKEN, name, {}, opts)
        self.alias = args.alias
        self.datacenter = args.datacenter
        self.bootstrap_servers = args.bootstrap_servers
        self.config: dict[str, str] = client_config(args.security)
        self.materialisations: list[Materialisation] = security_materialisations(args.security)
        self.client_config = pulumi.Output.from_input({"bootstrap.servers": args.bootstrap_servers, **self.config})
        self.register_outputs(
            {
                "alias": args.alias,
                "bootstrap_servers": args.bootstrap_servers,
                "datacenter": args.datacenter,
                "client_config": self.client_config,
                "secret_paths": sorted({m.path for m in self.materialisations}),
            }
        )
