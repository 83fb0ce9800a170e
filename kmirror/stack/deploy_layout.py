"""Where a deployed mirror app finds its files and how its resources are marked: defined once.

The Pulumi components write these (`kafka_mirror.eks.specs`, `kafka_mirror.emr.specs`), the stack
config checks them (`kmirror.stack.config`) and the policy pack (`policy/kafka_mirror_policy`)
recognises resources by them. Pure constants: no I/O, no pulumi.
"""

from __future__ import annotations

import re

FLOW_FILE = "flow.json"  # the flow spec's file name: ConfigMap key (EKS), S3 object and `--files` name (EMR)
FLOW_MOUNT_DIR = "/etc/kmirror/flow"  # where the flow ConfigMap is mounted in the pods (EKS)
FLOW_VOLUME = "flow"  # the pods' volume of the flow ConfigMap (EKS)
FLOW_ANNOTATION = "kafka-mirror/flow"  # the flow id on an app's resources: label values cannot hold "->"
FLOWS_ANNOTATION = "kafka-mirror/flows"  # the flow ids (comma-separated) of an app running several (apps_per: target)
CHECKPOINT_MOUNT = "/var/lib/kmirror/checkpoints"  # where a checkpoint PersistentVolumeClaim is mounted
DEFAULT_NAMESPACE = "kafka-mirror"  # the one default namespace of the apps and of the Secrets they mount
DEFAULT_METRICS_PORT = 9404  # the drivers' Prometheus port on Kubernetes
# An image reference pinned by content: `repo@sha256:<64 hex>` or `repo:tag@sha256:<64 hex>`.
DIGEST_RE = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
