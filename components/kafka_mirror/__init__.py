"""kafka-mirror's Pulumi components: Kafka cross-cluster replication as code.

Use them from a Python Pulumi program (`pip install kafka-mirror`) or, through the component
provider in this package (`python -m kafka_mirror`, `components/PulumiPlugin.yaml`), from any
Pulumi language with `pulumi package add`. Every component registers as
`kafka-mirror:index:<Name>`. Importing this package creates no resources.
"""

from kafka_mirror.eks.spark_platform import (
    CheckpointPvcArgs,
    EksClusterArgs,
    EksSparkPlatform,
    EksSparkPlatformArgs,
    OperatorArgs,
)
from kafka_mirror.emr.platform_args import EmrSparkPlatformArgs
from kafka_mirror.emr.spark_platform import EmrSparkPlatform
from kafka_mirror.kafka_cluster import KafkaCluster, KafkaClusterArgs
from kafka_mirror.mirror_deployment import MirrorDeployment, MirrorDeploymentArgs
from kafka_mirror.replication_topology import ReplicationTopology, ReplicationTopologyArgs
from kafka_mirror.secrets.kerberos import KerberosSecret, KerberosSecretArgs
from kafka_mirror.secrets.scram import ScramSecret, ScramSecretArgs
from kafka_mirror.secrets.store import SecretStoreArgs
from kafka_mirror.secrets.tls import TlsSecret, TlsSecretArgs

PACKAGE = "kafka-mirror"
# The components the provider hosts (and the schema lists), in schema order.
COMPONENTS = (
    KafkaCluster,
    ReplicationTopology,
    MirrorDeployment,
    EksSparkPlatform,
    EmrSparkPlatform,
    KerberosSecret,
    TlsSecret,
    ScramSecret,
)

__all__ = [
    "COMPONENTS",
    "PACKAGE",
    "CheckpointPvcArgs",
    "EksClusterArgs",
    "EksSparkPlatform",
    "EksSparkPlatformArgs",
    "EmrSparkPlatform",
    "EmrSparkPlatformArgs",
    "KafkaCluster",
    "KafkaClusterArgs",
    "KerberosSecret",
    "KerberosSecretArgs",
    "MirrorDeployment",
    "MirrorDeploymentArgs",
    "OperatorArgs",
    "ReplicationTopology",
    "ReplicationTopologyArgs",
    "ScramSecret",
    "ScramSecretArgs",
    "SecretStoreArgs",
    "TlsSecret",
    "TlsSecretArgs",
]
