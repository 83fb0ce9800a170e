"""`python -m spark_app --flow FLOW.json [--once] [--checkpoint DIR] [--master local[*]]` (see spark_app.main)."""

import sys

from spark_app.main import main

if __name__ == "__main__":
    sys.exit(main())
