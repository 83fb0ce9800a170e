"""spark-submit entry of the mirror app (EKS image: /opt/kmirror/kmirror_main.py; EMR: S3).

It sits outside the `spark_app` package on purpose: running a file from inside the package
would put `spark_app/` first on sys.path, where `kmirror_engine/copying/range_copy.py` would shadow stdlib `copy`.
"""

import sys

from spark_app.main import main

if __name__ == "__main__":
    sys.exit(main())
