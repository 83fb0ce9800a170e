"""spark_app.lazy_pandas: Spark's arrow calls in a task no longer import pandas, and pyarrow's
pandas integration is whole again the moment anything imports pandas.

Each case runs in a fresh interpreter: the test process may have imported pandas already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark40

ROOT = Path(__file__).resolve().parent.parent

# what Spark's workers do with pyarrow around a task: the reader's rows into a record batch, the
# writer's rows out of one, the commit message into an array
SPARK_ARROW_CALLS = """
import pyarrow as pa
batch = pa.RecordBatch.from_arrays([pa.array(["t"]), pa.array([0]), pa.array([b"k"])], names=["a", "b", "c"])
rows = [column.to_pylist() for column in batch.columns]
message = pa.record_batch([pa.array([b"pickled"])], names=["message"])
"""


def _run(script: str, **env: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_spark_arrow_calls_import_pandas_without_it() -> None:
    """The baseline the module exists for: without it the same calls import pandas (if this ever
    fails, pyarrow stopped importing pandas by itself and the module can go)."""
    got = _run(SPARK_ARROW_CALLS + "import json, sys; print(json.dumps({'pandas': 'pandas' in sys.modules}))")
    assert got == {"pandas": True}


def test_deferred_pandas_is_not_imported_by_spark_arrow_calls() -> None:
    script = (
        "import json, sys\nfrom spark_app.lazy_pandas import defer_pandas_import\n"
        "import pyarrow\nfirst = defer_pandas_import()\nsecond = defer_pandas_import()\n"
        + SPARK_ARROW_CALLS
        + "print(json.dumps({'first': first, 'second': second, 'pandas': 'pandas' in sys.modules}))"
    )
    assert _run(script) == {"first": True, "second": False, "pandas": False}


def test_pandas_imported_later_gets_pyarrow_whole() -> None:
    """Deferred, then pandas imported (as a pandas UDF would): pyarrow converts pandas' Series,
    categoricals and frames as it would have. The one difference, stated in the module doc: pandas
    scalars inside plain Python lists (pd.NaT here) are no longer recognised, because pyarrow's
    converter looks for pandas once per process, and that look found none."""
    use = (
        "import pandas as pd, pyarrow as pa\n"
        "tz = pa.array(pd.Series(pd.to_datetime(['2024-01-01T00:00:00Z', None]))).to_pylist()\n"
        "cat = str(pa.array(pd.Categorical(['a', 'b', 'a'])).type)\n"
        "frame = pa.Table.from_pandas(pd.DataFrame({'x': [1, 2]})).to_pandas()['x'].tolist()\n"
        "try:\n    nat = pa.array([pd.NaT, 1], type=pa.timestamp('ns'), from_pandas=True).null_count\n"
        "except ValueError:\n    nat = 'refused'\n"
        "import json\nprint(json.dumps({'tz': str(tz), 'cat': cat, 'frame': frame, 'nat': nat,"
        " 'have': pa.lib._pandas_api.have_pandas}))\n"
    )
    deferred = _run(
        "from spark_app.lazy_pandas import defer_pandas_import\nimport pyarrow\n"
        "assert defer_pandas_import()\n" + SPARK_ARROW_CALLS + use
    )
    plain = _run(SPARK_ARROW_CALLS + use)
    assert plain["nat"] == 1 and deferred["nat"] == "refused"
    assert {**deferred, "nat": 1} == plain
    assert deferred["have"] is True and deferred["cat"].startswith("dictionary")


def test_nothing_deferred_where_pandas_is_there_or_switched_off() -> None:
    script = (
        "import json, sys, pandas, pyarrow\nfrom spark_app.lazy_pandas import defer_pandas_import\n"
        "print(json.dumps({'deferred': defer_pandas_import(), 'finders': len(sys.meta_path)}))"
    )
    assert _run(script)["deferred"] is False
    off = _run(
        "import json, sys\nfrom spark_app.lazy_pandas import defer_pandas_import\n"
        "import pyarrow\nd = defer_pandas_import()\n"
        + SPARK_ARROW_CALLS
        + "print(json.dumps({'deferred': d, 'pandas': 'pandas' in sys.modules}))",
        KMIRROR_DEFER_PANDAS="0",
    )
    assert off == {"deferred": False, "pandas": True}
