"""The plugin's entry: the engine runs `python <this directory> <engine address>` (PulumiPlugin.yaml).

`kafka_mirror` sits beside this file; `kmirror` and `spark_app` (the pure core and the app the
EMR bundle is made of) come from the installed package, or from the checkout around this folder.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # kafka_mirror; then a checkout's kmirror and spark_app

from kafka_mirror.provider import main  # noqa: E402  (needs the paths above)

main()
