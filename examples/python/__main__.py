"""Two clusters, one active-passive topology (west-1 -> east-1), run in datacenter `east` on EKS.

Uses only the installed `kafka_mirror` package; the topology is inline data in the shape of
stacks/topology.yaml, and east-1's bootstrap servers could be any output (e.g. an MSK cluster's).
East-1's SCRAM password is a required stack secret: `pulumi config set --secret eastScramPassword ...`
(no fallback: a default password would end up on a production cluster). So is the east EKS cluster's
kubeconfig: `pulumi config set --secret eastKubeconfig "$(aws eks update-kubeconfig --name east --dry-run)"`;
every Kubernetes object goes through it, never through the ambient ~/.kube/config, whose current context
may be another cluster.
"""

import pulumi

from kafka_mirror import EksSparkPlatform, MirrorDeployment, ReplicationTopology, ScramSecret

config = pulumi.Config()
east_kubeconfig = config.require_secret("eastKubeconfig")
east_brokers = pulumi.Output.from_input(config.get("eastBrokers") or "b-1.east-1.kafka.us-east-1.amazonaws.com:9096")

topology = ReplicationTopology(
    "estate",
    {
        "datacenter": "east",
        "checkpoint_root": "s3a://acme-kafka-mirror/checkpoints",
        "topology": {
            "clusters": {
                "west-1": {"bootstrap_servers": "b1.west-1.example.com:9092", "datacenter": "west"},
                "east-1": {
                    "bootstrap_servers": east_brokers,
                    "datacenter": "east",
                    "security": {
                        "protocol": "SASL_SSL",
                        "scram": {
                            "mechanism": "SCRAM-SHA-512",
                            "username": "mirrormaker",
                            "password": {"k8s_secret": "east-1-scram", "key": "password"},
                        },
                    },
                },
            },
            "topologies": [
                {
                    "name": "dr",
                    "pattern": "active-passive",
                    "primary": "west-1",
                    "standby": "east-1",
                    "topics": ["orders.*", "payments.*"],
                },
            ],
        },
    },
)
scram = ScramSecret(
    "east-1-scram",
    {
        "username": "mirrormaker",
        "password": config.require_secret("eastScramPassword"),
        "store": {"secret_name": "east-1-scram", "namespace": "kafka-mirror"},
        "kubeconfig": east_kubeconfig,
    },
)
platform = EksSparkPlatform(
    "east-eks", {"namespace": "kafka-mirror", "kubeconfig": east_kubeconfig, "image": "ghcr.io/acme/kafka-mirror:0.1.0"}
)
flow = "west-1->east-1"
mirror = MirrorDeployment(
    "west-1-to-east-1",
    {
        "flow_spec": topology.flow_specs.apply(lambda specs: specs[flow]),
        "spark": topology.flow_spark.apply(lambda spark: spark[flow]),
        "secret_names": topology.secret_names.apply(lambda names: names[flow]),
        "eks": platform.deployment_target,
        "kubeconfig": east_kubeconfig,
    },
    pulumi.ResourceOptions(depends_on=[scram]),
)
pulumi.export("flows", topology.flows)
pulumi.export("app", mirror.app_name)
pulumi.export("metrics", mirror.metrics_endpoint)
