"""The kafka-mirror policy pack: `pulumi preview --policy-pack policy`.

Creating the PolicyPack serves it to the Pulumi engine. The engine runs this directory with it
first on `sys.path`, so the rules come from the `kafka_mirror_policy` package next to this file
(pure functions in `rules.py`, `estate.py`, `hygiene.py`; adapters in `pack.py`) and `kmirror` /
`kafka_mirror` from the installed `kafka-mirror` package (requirements.txt), as in a published pack.
"""

from kafka_mirror_policy.pack import PACK_NAME, build_policies
from pulumi_policy import PolicyPack

PolicyPack(name=PACK_NAME, policies=build_policies())
