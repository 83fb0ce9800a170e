"""`kmirror diff BASE HEAD [--format markdown|json|text] [--exit-code] [--topics-file FILE]`
and `kmirror diff --git-base REF [--topology FILE]`.

BASE and HEAD are each a topology YAML file, a plan JSON file (`kmirror plan --format json`
output, recognised by content: a mapping with "flows" and "datacenters"), or `git:REF`
(`stacks/topology.yaml` as committed at REF) / `git:REF:PATH`, read with `git show` in the
repository of the current directory. `--git-base REF` compares the working tree's topology
file (default `stacks/topology.yaml`, or `--topology FILE`) with the same file at REF.

Exit codes (git's convention): 0 success (with `--exit-code`: nothing changed), 1 with
`--exit-code` when something changed, 2 when the inputs cannot be compared: invalid topology
(same message as `kmirror validate`), missing file, git failure. A CI job can tell "changed"
(1) from "broken" (2).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kmirror.errors import EXIT_INVALID_INPUT, KmirrorError, Problem, ValidationError
from kmirror.estate.diff import diff_plans
from kmirror.estate.diff_render import render_json, render_markdown, render_text
from kmirror.stack.config import DEFAULT_TOPOLOGY, available_stacks, read_stack_config
from kmirror.stack.order import stack_order

EXIT_CHANGED = 1


@dataclass(frozen=True)
class LoadedPlan:
    """A plan dict plus, when it came from a topology, each cluster's datacenter."""

    plan: dict[str, Any]
    cluster_datacenters: dict[str, str]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="Show what a topology change does to every datacenter.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("base", nargs="?", metavar="BASE", help="topology file, plan JSON file or git:REF[:PATH]")
    parser.add_argument("head", nargs="?", metavar="HEAD", help="topology file, plan JSON file or git:REF[:PATH]")
    parser.add_argument("--git-base", metavar="REF", help="compare the working tree's topology with REF")
    parser.add_argument("--topology", metavar="FILE", help=f"topology for --git-base (default {DEFAULT_TOPOLOGY})")
    parser.add_argument(
        "--format",
        choices=("markdown", "json", "text", "stack-order"),
        default="text",
        help="stack-order: a JSON list of every stack (stacks/Pulumi.*.yaml), each stack "
        "losing a moved flow before the one gaining it; the order CI runs `pulumi up` in",
    )
    parser.add_argument("--stacks-dir", default="stacks", help="where the stack configs are (stack-order)")
    parser.add_argument("--exit-code", action="store_true", help="exit 1 when changed, 0 when not (2: invalid input)")
    parser.add_argument("--topics-file", metavar="FILE", help="YAML/JSON {cluster: [topic names]}")
    parser.set_defaults(func=run)


def _git(args: list[str]) -> str:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise KmirrorError("git is not installed; install git or pass topology/plan files instead") from None
    if done.returncode != 0:
        raise KmirrorError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def git_file(ref: str, path: str) -> str:
    """The text of `path` (relative to the repository root) as committed at `ref`."""
    return _git(["show", f"{ref}:{path}"])


def repo_relative(path: str) -> str:
    """`path` (relative to the cwd or absolute) relative to the root of the cwd's repository."""
    root = _git(["rev-parse", "--show-toplevel"]).strip()
    return Path(os.path.relpath(Path(path).resolve(), Path(root).resolve())).as_posix()


def _parse_text(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError([Problem("", f"not valid YAML or JSON: {exc}")], source) from None


def is_plan(raw: Any) -> bool:
    """A plan dict (`kmirror plan --format json`): a mapping with "flows" and "datacenters"."""
    return isinstance(raw, dict) and "flows" in raw and "datacenters" in raw


def _plan_problems(raw: dict[str, Any]) -> list[Problem]:
    flows = raw["flows"]
    if not isinstance(flows, list):
        return [Problem("flows", f"must be a list of flow entries, got {type(flows).__name__}")]
    problems = []
    for index, flow in enumerate(flows):
        missing = [k for k in ("id", "source", "target", "run_in") if not isinstance(flow, dict) or k not in flow]
        problems += [Problem(f"flows[{index}].{k}", "required key is missing") for k in missing]
    return problems


def plan_from_text(text: str, source: str) -> LoadedPlan:
    """Parse a plan JSON or a topology YAML; a topology is validated and planned.

    Raises ValidationError (exit 2) for invalid input, naming `source`.
    """
    raw = _parse_text(text, source)
    if is_plan(raw):
        problems = _plan_problems(raw)
        if problems:
            raise ValidationError(problems, source)
        return LoadedPlan(raw, {})
    from kmirror.estate.planner import plan_topology
    from kmirror.estate.topology import parse_topology

    topology = parse_topology(raw, source)
    return LoadedPlan(plan_topology(topology).to_dict(), cluster_datacenters(topology))


def cluster_datacenters(topology: Any) -> dict[str, str]:
    """{cluster alias: datacenter} of a parsed topology (clusters as a mapping or a list)."""
    clusters = getattr(topology, "clusters", None) or {}
    pairs = clusters.items() if isinstance(clusters, Mapping) else ((getattr(c, "alias", ""), c) for c in clusters)
    found = {str(alias): getattr(c, "datacenter", None) for alias, c in pairs}
    return {alias: str(dc) for alias, dc in found.items() if alias and dc}


def load_input(spec: str) -> LoadedPlan:
    """BASE/HEAD argument: `git:REF`, `git:REF:PATH` or a file path."""
    if spec.startswith("git:"):
        ref, _, path = spec[len("git:") :].partition(":")
        if not ref:
            raise KmirrorError(f"{spec!r}: give a ref, as in git:origin/main or git:HEAD~1:stacks/topology.yaml")
        return plan_from_text(git_file(ref, path or DEFAULT_TOPOLOGY), spec)
    try:
        text = Path(spec).read_text(encoding="utf-8")
    except OSError as exc:
        raise KmirrorError(f"cannot read {spec}: {exc.strerror}; pass a topology file, plan JSON or git:REF") from None
    return plan_from_text(text, spec)


def load_topics_file(path: str) -> dict[str, list[str]]:
    """`{cluster_alias: [topic names]}` from YAML or JSON; raises ValidationError when malformed."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise KmirrorError(f"cannot read topics file {path}: {exc.strerror}") from None
    raw = _parse_text(text, path)
    if not isinstance(raw, dict):
        raise ValidationError([Problem("", "must be a mapping {cluster alias: [topic names]}")], path)
    problems = [
        Problem(str(alias), f"must be a list of topic names, got {topics!r}")
        for alias, topics in raw.items()
        if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics)
    ]
    if problems:
        raise ValidationError(problems, path)
    return {str(alias): list(topics) for alias, topics in raw.items()}


def _inputs(args: argparse.Namespace) -> tuple[LoadedPlan, LoadedPlan]:
    if args.git_base:
        if args.base or args.head:
            raise KmirrorError("give either BASE HEAD or --git-base REF, not both")
        path = args.topology or DEFAULT_TOPOLOGY
        base = plan_from_text(git_file(args.git_base, repo_relative(path)), f"git:{args.git_base}:{path}")
        return base, load_input(path)
    if not (args.base and args.head):
        raise KmirrorError("give BASE and HEAD (topology files, plan JSON files or git:REF), or --git-base REF")
    return load_input(args.base), load_input(args.head)


def run(args: argparse.Namespace) -> int:
    try:
        base, head = _inputs(args)
        topics = load_topics_file(args.topics_file) if args.topics_file else None
    except KmirrorError as exc:
        # Any input that cannot be compared is 2, never 1: 1 means "changed" under --exit-code.
        exc.exit_code = EXIT_INVALID_INPUT
        raise
    diff = diff_plans(base.plan, head.plan, topics)
    clusters = {**base.cluster_datacenters, **head.cluster_datacenters}
    if args.format == "stack-order":
        stacks = available_stacks(args.stacks_dir)
        by_dc = {read_stack_config(name, args.stacks_dir).datacenter: name for name in stacks}
        sys.stdout.write(json.dumps(stack_order(diff, stacks, by_dc)) + "\n")
    elif args.format == "json":
        sys.stdout.write(render_json(diff))
    elif args.format == "markdown":
        sys.stdout.write(render_markdown(diff, clusters))
    else:
        sys.stdout.write(render_text(diff))
    return EXIT_CHANGED if args.exit_code and diff.changed else 0
