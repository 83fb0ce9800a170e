// Two clusters, one active-passive topology, mirrored on EKS: the generated SDK of the
// kafka-mirror plugin (`pulumi package add ../../components` writes it to sdks/kafka-mirror).
import * as fs from "fs";
import * as pulumi from "@pulumi/pulumi";
import * as kafkaMirror from "@pulumi/kafka-mirror";
import * as YAML from "yaml";

const config = new pulumi.Config();
const flow = "west-1->east-1";
// The east EKS cluster's kubeconfig: every Kubernetes object goes through it, never the ambient one.
const eastKubeconfig = config.requireSecret("eastKubeconfig");

// The topology file's own shape (snake_case keys): load it, or write the object inline.
const estate = new kafkaMirror.ReplicationTopology("estate", {
    datacenter: "east",
    checkpointRoot: "s3a://acme-kafka-mirror/checkpoints",
    topology: YAML.parse(fs.readFileSync("../yaml/topology.yaml", "utf8")),
});
const scram = new kafkaMirror.ScramSecret("east-1-scram", {
    username: "mirrormaker",
    password: config.requireSecret("eastScramPassword"),
    store: { secretName: "east-1-scram", namespace: "kafka-mirror" },
    kubeconfig: eastKubeconfig,
});
const platform = new kafkaMirror.EksSparkPlatform("east-eks", {
    namespace: "kafka-mirror",
    kubeconfig: eastKubeconfig,
    image: "ghcr.io/acme/kafka-mirror:0.1.0",
    sparkDefaults: { executors: 2, executorMemory: "2g" },   // a typed FlowSpark: a misspelt field fails tsc
});
const mirror = new kafkaMirror.MirrorDeployment("west-1-to-east-1", {
    flowSpec: estate.flowSpecs.apply(specs => specs[flow]),
    spark: estate.flowSpark.apply(spark => spark[flow]),
    secretNames: estate.secretNames.apply(names => names[flow]),
    eks: platform.deploymentTarget,
    kubeconfig: eastKubeconfig,
}, { dependsOn: [scram] });

export const flows = estate.flows;
export const app = mirror.appName;
export const metrics = mirror.metricsEndpoint;
