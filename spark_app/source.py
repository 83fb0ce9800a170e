"""The "kmirror-source" Python data source: a stream reader that plans offset ranges on the driver.

It never reads records: each micro-batch is a set of rows (`READER_SCHEMA`, in
`spark_app.stream_readers`), one per source partition range, grouped into writer tasks; the
"kmirror-sink" copies them. The planning itself (discovery, target topics, admission control,
data loss) is the engine's `kmirror_engine.planning.range_planner.RangePlanner`; how Spark asks
for each batch depends on its version: the two stream readers in `spark_app.stream_readers`.

Options: "flow_spec" (FlowSpec.to_dict() as JSON), "mode" ("once" bounds the retries of an
unreachable cluster to ~30 s; "stream" retries forever with backoff), "task_count",
"reader_api", "until_offsets" (`MirrorSource.streamReader`).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader

from kmirror.errors import KmirrorError
from spark_app.stream_readers import READER_SCHEMA, reader_class

SOURCE_NAME = "kmirror-source"


class MirrorSource(DataSource):
    """`spark.readStream.format("kmirror-source").option("flow_spec", json)`."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return READER_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        """The reader this pyspark's streaming API calls for (`spark_app.stream_readers`).

        Options: "flow_spec", "mode", "task_count" (module doc), "reader_api" ("auto", or one
        API forced, for tests), "until_offsets" (--once without admission control: the end
        offsets frozen by the driver, as offset JSON)."""
        spec_json = self.options.get("flow_spec")
        if not spec_json:
            raise KmirrorError(f'the {SOURCE_NAME} data source needs option "flow_spec" (FlowSpec.to_dict() as JSON)')
        mode = self.options.get("mode", "stream")
        if mode not in ("once", "stream"):
            raise KmirrorError(f'option "mode" of {SOURCE_NAME} must be "once" or "stream", got {mode!r}')
        reader = reader_class(self.options.get("reader_api", "auto"))
        return reader(
            spec_json, mode == "once", int(self.options.get("task_count", "2")), self.options.get("until_offsets")
        )
