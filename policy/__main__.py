"""The kafka-mirror policy pack: `pulumi preview --policy-pack policy`.

Creating the PolicyPack serves it to the Pulumi engine; the rules live in `rules.py`
(pure, unit-tested) and their adapters in `pack.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The engine runs this file directly: make `policy` and `kmirror` importable from the repo root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import PolicyPack

from policy.pack import PACK_NAME, build_policies

PolicyPack(name=PACK_NAME, policies=build_policies())
