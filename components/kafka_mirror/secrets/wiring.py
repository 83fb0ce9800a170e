"""Which secrets each flow's pods must mount (EKS) or its nodes must fetch (EMR): pure.

The topology's clusters name secrets by reference (`kmirror.security.secret_refs`); the app reads them
at `ref_location(ref)`. This module turns a flow's references into what the platform must
provide there, and reports references a platform cannot honour, each with the fix.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kmirror.errors import Problem
from kmirror.security.secret_refs import Materialisation, aws_secret_local_name, pulumi_config_secret_name


@dataclass(frozen=True)
class FlowSecrets:
    """`secret_names`: directories under /etc/kmirror/secrets the flow reads (= Kubernetes Secret
    names on EKS); `config_keys`: Pulumi secret config keys to materialise as `kmirror-cfg-<key>`;
    `aws_entries`: (ARN, directory) of Secrets Manager secrets given by ARN (EMR)."""

    secret_names: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()
    aws_entries: tuple[tuple[str, str], ...] = ()


def flow_secrets(
    flow_id: str, needs: Iterable[Materialisation], platform: str, stack_secret_names: set[str]
) -> tuple[FlowSecrets, list[Problem]]:
    """What `platform` (eks | emr) must provide for the references of one flow's two clusters.

    `stack_secret_names` are the Secrets the stack creates from `kafka-mirror:secrets`: on EMR a
    `{k8s_secret: NAME}` reference is served from the Secrets Manager copy of such a Secret.
    """
    names: set[str] = set()
    keys: set[str] = set()
    aws: set[tuple[str, str]] = set()
    problems = []
    for need in needs:
        if need.kind == "pulumi_config":
            keys.add(need.source)
            names.add(pulumi_config_secret_name(need.source))
        elif need.kind == "k8s_secret":
            names.add(need.source)
            if platform == "emr" and need.source not in stack_secret_names:
                problems.append(
                    Problem(
                        f"flows.{flow_id}",
                        f"secret {need.source!r} (a {{k8s_secret}} reference) is "
                        "not created by this stack, so EMR nodes cannot fetch it; declare it under "
                        "kafka-mirror:secrets or reference {aws_secret: ARN, key: ...}",
                    )
                )
        elif need.kind == "aws_secret":
            if platform == "eks":
                problems.append(
                    Problem(
                        f"flows.{flow_id}",
                        f"{{aws_secret: {need.source}}} cannot be mounted by "
                        "Kubernetes; use {k8s_secret: NAME, key: ...} (e.g. a kafka-mirror:secrets "
                        "entry) or {pulumi_config: KEY}",
                    )
                )
            directory = aws_secret_local_name(need.source)
            names.add(directory)
            aws.add((need.source, directory))
    return FlowSecrets(tuple(sorted(names)), tuple(sorted(keys)), tuple(sorted(aws))), problems
