"""The pull request comment stays under GitHub's 65536-character limit (issue 43, first review: "PR comment size
limit"). Runs the workflow's own github-script (.github/workflows/preview.yml, job `comment`) under node with a
stand-in `github`/`context` and the job's downloaded files."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 65536
MARKER = "<!-- kmirror-diff -->"
RUN_URL = "https://github.com/acme/kafka-mirror/actions/runs/42"
RUNNER = """
const fs = require('fs');
const context = {repo: {owner: 'acme', repo: 'kafka-mirror'}, issue: {number: 7}, serverUrl: 'https://github.com',
                 runId: 42};
const calls = [];
const github = {paginate: async () => [], rest: {issues: {listComments: () => null,
  createComment: async (a) => calls.push(a), updateComment: async (a) => calls.push(a)}}};
(async () => { %s
})().then(() => fs.writeFileSync('calls.json', JSON.stringify(calls)));
"""
NODE = shutil.which("node")


def comment_script() -> str:
    workflow = yaml.safe_load((ROOT / ".github/workflows/preview.yml").read_text())
    [step] = [s for s in workflow["jobs"]["comment"]["steps"] if s.get("name") == "post or update the one comment"]
    return str(step["with"]["script"])


def post(tmp_path: Path, diff: str, previews: dict[str, str]) -> str:
    if NODE is None:
        pytest.fail("node is needed to run the workflow's github-script (it is on this machine and CI's)")
    (tmp_path / "diff.md").write_text(diff)
    for stack, text in previews.items():
        (tmp_path / f"preview-{stack}.md").write_text(text)
    (tmp_path / "run.js").write_text(RUNNER % comment_script())
    subprocess.run([NODE, "run.js"], cwd=tmp_path, check=True, timeout=60)
    [call] = json.loads((tmp_path / "calls.json").read_text())
    assert call["issue_number"] == 7 and call["owner"] == "acme"
    return str(call["body"])


def preview(stack: str, lines: int) -> str:
    body = "\n".join(f"    ~ kubernetes:core/v1:ConfigMap {stack}-flow-{i} update [diff: ~data]" for i in range(lines))
    return f"<details><summary>pulumi preview: {stack}</summary>\n\n```\n{body}\n```\n</details>\n"


def test_small_parts_are_posted_whole(tmp_path: Path) -> None:
    diff = f"{MARKER}\n### kmirror diff\n- flow a-1->b-1 added\n"
    previews = {"central": preview("central", 3), "west": preview("west", 2)}
    body = post(tmp_path, diff, previews)
    assert body == "\n\n".join([diff, "#### Pulumi previews", previews["central"], previews["west"]])


def test_a_huge_diff_and_previews_are_cut_to_fit_with_fences_closed_and_a_pointer(tmp_path: Path) -> None:
    diff = f"{MARKER}\n### kmirror diff\n```diff\n" + "\n".join(f"+ topic t{i}" for i in range(20000)) + "\n```\n"
    previews = {s: preview(s, 400) for s in ("central", "east", "west")}
    assert len(diff) + sum(map(len, previews.values())) > 2 * LIMIT
    body = post(tmp_path, diff, previews)
    assert len(body) <= LIMIT
    assert body.startswith(MARKER)  # the next run finds and updates this comment
    for stack in previews:
        assert f"pulumi preview: {stack}</summary>" in body
    assert body.count("```") % 2 == 0 and body.count("<details>") == body.count("</details>") == 3
    assert body.count(f"the whole text is in the artifacts of {RUN_URL}") == 4


def test_short_parts_keep_their_text_and_leave_room_to_the_long_one(tmp_path: Path) -> None:
    diff = f"{MARKER}\n" + "x" * 200000
    previews = {"central": preview("central", 5), "west": preview("west", 5)}
    body = post(tmp_path, diff, previews)
    assert len(body) <= LIMIT and body.count("the whole text is in the artifacts") == 1
    assert previews["central"] in body and previews["west"] in body
    assert body.count("x") > 60000  # the diff got what the short previews did not use
