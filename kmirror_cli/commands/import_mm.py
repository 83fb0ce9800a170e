"""`kmirror import mm2 FILE` / `kmirror import strimzi FILE.yaml` /
`kmirror import mm1 --consumer.config F --producer.config F --whitelist RE`:
write a topology file planning the same flows, policies, filters and client settings as a
MirrorMaker configuration (issues 23, 45). Faithful or loud: a setting with no equivalent (a custom
replication policy or filter class, security, ...) is *lossy*: the import refuses, naming each on
stderr, and writes nothing, unless `--allow-lossy`; then each is listed on stderr and as a comment at
the top of the file. Settings of Kafka Connect itself (its storage topics, tasks.max) are listed as
not applicable. Exit 0 written, 1 refused (lossy), 2 invalid input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kmirror.errors import Problem, ValidationError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("import", help="Write a topology file from a MirrorMaker 2/1 configuration.")
    kinds = parser.add_subparsers(dest="kind", metavar="KIND", required=True)
    mm2 = kinds.add_parser("mm2", help="from an mm2.properties (dedicated mode)")
    mm2.add_argument("properties", help="the mm2.properties file")
    strimzi = kinds.add_parser("strimzi", help="from a Strimzi KafkaMirrorMaker2 custom resource (YAML)")
    strimzi.add_argument("resource", help="the KafkaMirrorMaker2 YAML (the first document of that kind is used)")
    mm1 = kinds.add_parser("mm1", help="from MirrorMaker 1's command line")
    mm1.add_argument("--consumer.config", dest="consumer_config", required=True)
    mm1.add_argument("--producer.config", dest="producer_config", required=True)
    mm1.add_argument("--whitelist", "--include", dest="whitelist")
    mm1.add_argument("--blacklist", dest="blacklist")
    for sub in (mm2, strimzi, mm1):
        sub.add_argument("-o", "--output", default="topology.yaml", help="topology file to write ('-' for stdout)")
        sub.add_argument(
            "--allow-lossy", action="store_true", help="write the topology even if some settings have no equivalent"
        )
    parser.set_defaults(func=run)


def _read(path: str, flag: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ValidationError(
            [Problem(flag, f"cannot read '{path}' ({exc.strerror}); give an existing properties file")]
        ) from exc


def run(args: argparse.Namespace) -> int:
    import yaml

    from kmirror.estate.topology import parse_topology
    from kmirror.mm2.config_import import import_mm1, import_mm2, parse_properties

    if args.kind == "mm2":
        topology, dropped = import_mm2(parse_properties(_read(args.properties, "properties")))
    elif args.kind == "strimzi":
        topology, dropped = _strimzi(_read(args.resource, "resource"))
    else:
        topology, dropped = import_mm1(
            parse_properties(_read(args.consumer_config, "--consumer.config")),
            parse_properties(_read(args.producer_config, "--producer.config")),
            args.whitelist,
            args.blacklist,
        )
    lossy = [d for d in dropped if d.lossy]
    if lossy and not args.allow_lossy:
        for d in dropped:
            print(f"{'refused' if d.lossy else 'not carried over'}: {d.line()}", file=sys.stderr)
        print(
            f"kmirror import {args.kind}: {len(lossy)} setting(s) above have no kafka-mirror equivalent; nothing "
            "written. Change them, or give --allow-lossy to write the topology without them.",
            file=sys.stderr,
        )
        return 1
    parse_topology(topology, source=f"imported {args.kind}")  # what we write must plan
    header = "".join(f"# not carried over: {d.line()}\n" for d in dropped)
    text = f"# imported by `kmirror import {args.kind}`\n{header}" + yaml.safe_dump(topology, sort_keys=False)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
        print(f"{args.output}: {len(topology['topologies'][0]['flows'])} flow(s) written")
    for d in dropped:
        print(f"not carried over: {d.line()}", file=sys.stderr)
    return 0


def _strimzi(text: str) -> tuple[dict[str, Any], list[Any]]:
    import yaml

    from kmirror.mm2.strimzi_import import strimzi_import

    try:
        docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    except yaml.YAMLError as exc:
        raise ValidationError([Problem("resource", f"not YAML ({exc}); give a KafkaMirrorMaker2 resource")]) from exc
    resource = next((d for d in docs if d.get("kind") == "KafkaMirrorMaker2"), docs[0] if docs else None)
    return strimzi_import(resource)
