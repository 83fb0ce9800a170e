"""Issue 25 item 6: a transform that could reorder records within a partition or run code is
refused at validation, on sqlglot's parse of the query (kmirror/flow/transform_sql.py), by the
flow spec, `kmirror validate` (exit 2) and a Pulumi preview; record-by-record queries, including
every query of tests/e2e/test_transform_e2e.py, still pass."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kmirror.errors import ValidationError
from kmirror.flow.spec import parse_flow_spec
from kmirror.flow.transform_sql import transform_sql_problems
from kmirror_cli.cli import main
from tests.planner_fakes import raw_spec

ROOT = Path(__file__).resolve().parents[1]
REORDERS = "would reorder records within a partition; remove it: a transform works record by record"
RUNS_CODE = "would run commands or load code on the cluster; remove it: a transform is one SELECT"
NOT_RECORDS = ": a transform reads only the view records; write SELECT"

# (query, what the problem names first, why): each query is refused with exactly one problem.
REFUSED = [
    ("SELECT r1.* FROM records r1 JOIN records r2 ON r1.offset = r2.offset", "a JOIN", REORDERS),
    ("SELECT * FROM records, records", "a CROSS JOIN", REORDERS),
    ("SELECT * FROM records LEFT ANTI JOIN records r2 ON true", "a LEFT ANTI JOIN", REORDERS),
    (
        "SELECT * FROM records WHERE key IN (SELECT key FROM records)",
        "an IN subquery (Spark plans it as a join)",
        REORDERS,
    ),
    (
        "SELECT * FROM records WHERE EXISTS (SELECT 1 FROM records r2 WHERE r2.offset > 1)",
        "an EXISTS subquery (Spark plans it as a join)",
        REORDERS,
    ),
    (
        "SELECT * FROM records WHERE offset > (SELECT max(offset) FROM records)",
        "a scalar subquery (Spark plans it as a join)",
        REORDERS,
    ),
    ("SELECT * FROM records WHERE key = ANY (SELECT key FROM records)", "an ANY subquery", REORDERS),
    ("SELECT * FROM records, LATERAL (SELECT 1)", "a CROSS JOIN", REORDERS),
    ("SELECT max(offset) AS offset FROM records", "the aggregate function max()", REORDERS),
    ("SELECT count(*) AS n FROM records", "the aggregate function count()", REORDERS),
    ("SELECT * FROM records GROUP BY ALL", "a GROUP BY", REORDERS),
    ("SELECT try_sum(offset) FROM records", "the aggregate function try_sum()", REORDERS),
    ("SELECT DISTINCT * FROM records", "a DISTINCT", REORDERS),
    (
        "SELECT *, row_number() OVER (PARTITION BY partition ORDER BY offset) AS n FROM records",
        "the window function row_number()",
        REORDERS,
    ),
    ("SELECT *, lag(value) OVER (ORDER BY offset) AS prev FROM records", "the window function lag()", REORDERS),
    ("SELECT * FROM records WINDOW w AS (ORDER BY offset)", "a WINDOW clause (w)", REORDERS),
    ("SELECT * FROM records ORDER BY key", "an ORDER BY", REORDERS),
    ("SELECT * FROM (SELECT * FROM records ORDER BY timestamp)", "an ORDER BY", REORDERS),
    ("SELECT * FROM records SORT BY key", "a SORT BY", REORDERS),
    ("SELECT * FROM records DISTRIBUTE BY key", "a DISTRIBUTE BY", REORDERS),
    ("SELECT * FROM records CLUSTER BY key", "a CLUSTER BY", REORDERS),
    ("SELECT /*+ REPARTITION(3) */ * FROM records", "the hint /*+ REPARTITION(3) */", REORDERS),
    ("SELECT * FROM records UNION ALL SELECT * FROM records", "the set operation UNION", REORDERS),
    ("SELECT * FROM records INTERSECT SELECT * FROM records", "the set operation INTERSECT", REORDERS),
    ("SELECT * FROM records EXCEPT SELECT * FROM records", "the set operation EXCEPT", REORDERS),
    ("SELECT * FROM records LIMIT 10", "a LIMIT", REORDERS),
    ("SELECT * FROM records TABLESAMPLE (10 PERCENT)", "a TABLESAMPLE", REORDERS),
    ("SELECT * FROM records PIVOT (count(*) FOR key IN (1))", "a PIVOT", REORDERS),
    ("ADD JAR 's3://bucket/evil.jar'", "the statement `ADD JAR 's3://bucket/evil.jar'`", RUNS_CODE),
    ("ADD FILE '/etc/passwd'", "the statement `ADD FILE '/etc/passwd'`", RUNS_CODE),
    ("CREATE TEMPORARY FUNCTION f AS 'com.example.Evil'", "the statement `CREATE TEMPORARY FUNCTION`", RUNS_CODE),
    (
        "SELECT reflect('java.lang.Runtime', 'getRuntime') AS key, value FROM records",
        "the function reflect() (it calls any JVM method)",
        RUNS_CODE,
    ),
    (
        "SELECT *, java_method('java.lang.System', 'exit', 0) AS x FROM records",
        "the function java_method() (it calls any JVM method)",
        RUNS_CODE,
    ),
    (
        "SELECT TRANSFORM(key, value) USING 'sh -c id' AS (key, value) FROM records",
        "TRANSFORM ... USING (it runs a script on the executors)",
        RUNS_CODE,
    ),
    ("SELECT mydb.my_udf(value) AS value FROM records", "the catalog function mydb.my_udf()", RUNS_CODE),
    (
        "SELECT * FROM records LATERAL VIEW explode(array(reflect('a', 'b'))) t AS x",
        "the function reflect() (it calls any JVM method)",
        RUNS_CODE,
    ),
    ("SET spark.sql.ansi.enabled=false", "the statement `SET", RUNS_CODE),
    ("SELECT * FROM other_topic", "the table other_topic", NOT_RECORDS),
    ("SELECT * FROM global_temp.records", "the table global_temp.records", NOT_RECORDS),
    ("SELECT * FROM parquet.`/data/x`", "the table parquet.`/data/x`", NOT_RECORDS),
    ("SELECT * FROM range(10)", "the table function RANGE(10)", NOT_RECORDS),
    ("SELECT 1 AS offset", "a SELECT without FROM", NOT_RECORDS),
]


@pytest.mark.parametrize(("sql", "what", "why"), REFUSED, ids=[r[0][:60] for r in REFUSED])
def test_a_query_that_reorders_or_runs_code_is_refused_naming_what_and_why(sql: str, what: str, why: str) -> None:
    [problem] = transform_sql_problems(sql)
    assert problem.startswith(what), problem
    assert why in problem, problem


def test_the_message_names_the_construct_the_reason_and_the_fix() -> None:
    assert transform_sql_problems("SELECT *, row_number() OVER (ORDER BY offset) AS n FROM records") == [
        "the window function row_number() would reorder records within a partition; remove it: a transform "
        "works record by record (SELECT <columns, functions, CASE, casts> FROM records [WHERE ...], "
        "LATERAL VIEW explode)"
    ]
    assert transform_sql_problems("ADD JAR 'x.jar'") == [
        "the statement `ADD JAR 'x.jar'` would run commands or load code on the cluster; remove it: a "
        "transform is one SELECT using Spark's built-in functions"
    ]


def test_every_construct_is_reported_once_and_the_window_not_also_as_its_order_by() -> None:
    sql = (
        "SELECT *, rank() OVER (ORDER BY offset) AS r, reflect('a', 'b') AS x FROM records r1 "
        "JOIN records r2 USING (offset) ORDER BY key LIMIT 3"
    )
    found = [p.split(" would ")[0] for p in transform_sql_problems(sql)]
    assert sorted(found) == [
        "a JOIN",
        "a LIMIT",
        "an ORDER BY",
        "the function reflect() (it calls any JVM method)",
        "the window function rank()",
    ]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1; SELECT * FROM records",
        "SELECT * FROM records; ADD JAR 'x.jar'",
        "SELECT * FROM records; SELECT * FROM records",
    ],
)
def test_more_than_one_statement_is_refused(sql: str) -> None:
    assert transform_sql_problems(sql) == [
        "has 2 statements: more than one could run commands or load code on the cluster; a transform is "
        "exactly one query (SELECT <columns, functions, CASE, casts> FROM records [WHERE ...])"
    ]


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("SELEC * FROM records", "at line 1, column 12 (near 'FROM')"),
        ("SELECT * FROM records WHERE", "at line 1, column 27 (near 'WHERE')"),
        ("SELECT 'unterminated FROM records", "Error tokenizing"),
        ("SELECT value:a.b FROM records", "at line 1, column"),  # variant shorthand: sqlglot cannot parse it
    ],
)
def test_what_the_parser_cannot_parse_is_refused_naming_the_parse_error(sql: str, error: str) -> None:
    [problem] = transform_sql_problems(sql)
    assert problem.startswith("could not be parsed as Spark SQL: "), problem
    assert error in problem and problem.endswith(
        "; fix the syntax (SELECT <columns, functions, CASE, casts> FROM records [WHERE ...])"
    ), problem


@pytest.mark.parametrize("sql", [";", "-- nothing but a comment"])
def test_no_statement_is_refused(sql: str) -> None:
    assert transform_sql_problems(sql) == [
        "has no statement; write SELECT <columns, functions, CASE, casts> FROM records [WHERE ...]"
    ]


E2E_QUERIES = [  # tests/e2e/test_transform_e2e.py, verbatim
    "SELECT * FROM records WHERE CAST(key AS STRING) NOT LIKE 'drop-%' AND NOT exists(headers, h -> h.key = 'pii')",
    "SELECT topic, partition, offset, key, CAST(to_json(named_struct('name', v.name, 'card', "
    "concat('****-', substr(v.card, -4)))) AS BINARY) AS value, headers, timestamp "
    "FROM (SELECT *, from_json(CAST(value AS STRING), 'name STRING, card STRING') AS v FROM records)",
    "SELECT CASE WHEN CAST(key AS STRING) LIKE 'eu-%' THEN concat(topic, '-eu') ELSE topic END AS topic, "
    "partition, offset, key, value, headers, timestamp FROM records",
    "SELECT topic, partition, offset, key, value, headers FROM records",
    "SELECT topic, partition, offset, key, to_json(named_struct('a', 1)) AS value, headers, timestamp FROM records",
    "SELECT * FROM records WHERE nokey = 1",
    "SELECT topic, partition, offset + 1 AS offset, key, value, headers, timestamp FROM records",
]
ACCEPTED = [
    *E2E_QUERIES,
    "SELECT * FROM records",
    "select * from RECORDS r where r.key is not null;",
    "SELECT * FROM `records`",
    # keywords inside string literals, comments and column names are not constructs
    "SELECT * FROM records WHERE CAST(value AS STRING) NOT LIKE '%ORDER BY%' AND CAST(key AS STRING) <> 'JOIN x'",
    "SELECT * FROM records /* ORDER BY key */ WHERE value IS NOT NULL -- UNION SELECT",
    "SELECT topic, partition, offset, key AS join_key, value AS order_by, headers, timestamp FROM records",
    "SELECT topic, partition, offset, upper(CAST(key AS STRING)) AS key, value, headers, timestamp FROM records",
    "SELECT topic, partition, offset, CAST(sha2(CAST(key AS STRING), 256) AS BINARY) AS key, value, headers, "
    "timestamp FROM records",
    "SELECT topic, CASE WHEN partition < 0 THEN 0 ELSE partition END AS partition, offset, key, value, "
    "filter(headers, h -> h.key != 'pii') AS headers, timestamp FROM records",
    "SELECT * FROM records WHERE exists(headers, h -> h.key = 'trace' AND CAST(h.value AS STRING) = 'drop')",
    "SELECT * FROM records WHERE element_at(headers, 1).key = 'a' OR headers[0].key = 'b'",
    "SELECT * FROM records WHERE key IN (X'00', X'01') AND timestamp > TIMESTAMP '2024-01-01 00:00:00'",
    "SELECT *, aggregate(transform(headers, h -> length(h.value)), 0, (acc, n) -> acc + n) AS header_bytes "
    "FROM records",
    "WITH kept AS (SELECT * FROM records WHERE value IS NOT NULL) SELECT * FROM kept",
    "SELECT * FROM (records)",
    "SELECT * FROM records LATERAL VIEW explode(headers) h AS header",
    "SELECT topic, partition, offset, key, value, headers, timestamp, explode(array(1, 2)) AS copy FROM records",
]


@pytest.mark.parametrize("sql", ACCEPTED, ids=[s[:60] for s in ACCEPTED])
def test_a_record_by_record_query_is_accepted(sql: str) -> None:
    assert transform_sql_problems(sql) == []


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80) | st.sampled_from([s[:n] for s in ACCEPTED[:3] for n in range(0, 120, 7)]))
def test_any_text_gives_a_list_of_messages_and_never_raises(sql: str) -> None:
    assert all(isinstance(p, str) and p for p in transform_sql_problems(sql))


def flow(sql: str) -> dict[str, Any]:
    return raw_spec(transform={"sql": sql})


def test_the_flow_spec_refuses_it_at_transform_sql_with_every_problem() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_flow_spec(flow("SELECT DISTINCT reflect('a', 'b') AS key FROM records"))
    assert caught.value.exit_code == 2
    assert [(p.path, p.message.split(" would ")[0]) for p in caught.value.problems] == [
        ("transform.sql", "a DISTINCT"),
        ("transform.sql", "the function reflect() (it calls any JVM method)"),
    ]
    assert parse_flow_spec(flow(E2E_QUERIES[0])).copy.transform_sql == E2E_QUERIES[0]


def _topology_with(tmp_path: Path, sql: str) -> Path:
    topology = copy.deepcopy(yaml.safe_load((ROOT / "stacks" / "topology.yaml").read_text()))
    topology["topologies"][0]["transform"] = {"sql": sql}
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(topology))
    return path


def test_kmirror_validate_exits_2_naming_transform_sql(tmp_path: Path, capsys: Any, caplog: Any) -> None:
    path = _topology_with(tmp_path, "ADD JAR 's3://bucket/evil.jar'")
    with caplog.at_level(logging.WARNING):
        code = main(["validate", "--topology", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == (
        f"kmirror validate: 1 problem(s) in {path}:\n"
        "  - topologies[0].transform.sql: the statement `ADD JAR 's3://bucket/evil.jar'` would run commands or "
        "load code on the cluster; remove it: a transform is one SELECT using Spark's built-in functions\n"
    )
    assert not [r for r in caplog.records if r.name.startswith("sqlglot")]  # no parser warning besides it
    ok = _topology_with(tmp_path, "SELECT * FROM records WHERE CAST(value AS STRING) NOT LIKE '%ORDER BY%'")
    assert main(["validate", "--topology", str(ok)]) == 0, capsys.readouterr()


def test_a_pulumi_preview_refuses_it_before_creating_anything(tmp_path: Path) -> None:
    from tests.pulumi.harness import run_program, stack_config

    path = _topology_with(tmp_path, "SELECT * FROM records WHERE key IN (SELECT key FROM records)")
    with pytest.raises(Exception) as info:  # the SDK may wrap the program's ValidationError
        run_program("east", stack_config("east", topology=str(path)))
    assert type(info.value).__name__ == "ValidationError"
    assert (
        "topologies[0].transform.sql: an IN subquery (Spark plans it as a join) would reorder records within "
        "a partition" in str(info.value)
    )
