"""What a flow's `transform: {sql: ...}` may do, checked on the parsed query before anything deploys.

The app runs the query over the view `records` once per micro-batch and writes its rows in the
order each task produces them (spark_app/transform.py). That keeps per-partition order only while
the query works record by record: a join, a subquery (Spark plans IN/EXISTS/scalar subqueries as
joins), an aggregation, a window function, a sort, a set operation, a LIMIT or a TABLESAMPLE
shuffles, merges or cuts the stream. Commands (`ADD JAR`, `CREATE FUNCTION`), `reflect`/`java_method`
and `TRANSFORM ... USING 'script'` run code of the user's choosing on the cluster with the mirror's
credentials. Both are refused here, on the syntax tree of sqlglot's Spark dialect, so
`kmirror validate`, `plan`, `diff` and the Pulumi program refuse them without a JVM, and a
string literal 'ORDER BY' or a column `join_key` is never mistaken for one.

Accepted: one SELECT of columns, functions, CASE, casts and lambdas FROM records (or a
subquery or CTE over it), a WHERE, and generators (`explode`, LATERAL VIEW), which the app
handles (rows of one record share its offset; docs/spark-app.md). The app still checks the
analysed plan, columns and types with Spark at start (`spark_app.transform.validate_transform`);
this check cannot see functions a catalog defines under a plain name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError

VIEW = "records"
DIALECT = "spark"
SHAPE = "SELECT <columns, functions, CASE, casts> FROM records [WHERE ...]"
# Spark aggregate functions sqlglot has no class for (it parses them as anonymous calls); any
# `*_agg` name is an aggregate too (hll_sketch_agg, theta_union_agg, ...).
SPARK_AGGREGATES = frozenset(
    {
        "any",
        "any_value",
        "approx_count_distinct",
        "approx_percentile",
        "approx_top_k",
        "array_agg",
        "avg",
        "bit_and",
        "bit_or",
        "bit_xor",
        "bool_and",
        "bool_or",
        "collect_list",
        "collect_set",
        "corr",
        "count",
        "count_if",
        "count_min_sketch",
        "covar_pop",
        "covar_samp",
        "every",
        "first",
        "first_value",
        "grouping",
        "grouping_id",
        "histogram_numeric",
        "kurtosis",
        "last",
        "last_value",
        "listagg",
        "max",
        "max_by",
        "mean",
        "median",
        "min",
        "min_by",
        "mode",
        "percentile",
        "percentile_approx",
        "percentile_cont",
        "percentile_disc",
        "regr_avgx",
        "regr_avgy",
        "regr_count",
        "regr_intercept",
        "regr_r2",
        "regr_slope",
        "regr_sxx",
        "regr_sxy",
        "regr_syy",
        "skewness",
        "some",
        "std",
        "stddev",
        "stddev_pop",
        "stddev_samp",
        "string_agg",
        "sum",
        "try_avg",
        "try_sum",
        "var_pop",
        "var_samp",
        "variance",
    }
)
CODE_FUNCTIONS = frozenset({"reflect", "java_method", "try_reflect"})  # call any static JVM method
# Parts of a SELECT and of a table reference that are fine or refused by their own node below
# (`_reordering`); any other part sqlglot knows (INTO, CONNECT BY, time travel, ...) is refused by name.
SELECT_PARTS = frozenset(
    {
        "with_",
        "expressions",
        "from_",
        "where",
        "laterals",
        "hint",
        "distinct",
        "joins",
        "pivots",
        "group",
        "having",
        "qualify",
        "windows",
        "distribute",
        "sort",
        "cluster",
        "order",
        "limit",
        "offset",
        "sample",
    }
)
TABLE_PARTS = frozenset({"this", "alias", "joins", "laterals", "pivots", "sample", "hints"})
_TABLE_PART_NAMES = {"version": "time travel (TIMESTAMP/VERSION AS OF)", "when": "time travel (AT/BEFORE)"}

_REORDER_FIX = f"remove it: a transform works record by record ({SHAPE}, LATERAL VIEW explode)"
_CODE_FIX = "remove it: a transform is one SELECT using Spark's built-in functions"


def _reorders(what: str) -> str:
    return f"{what} would reorder records within a partition; {_REORDER_FIX}"


def _runs_code(what: str) -> str:
    return f"{what} would run commands or load code on the cluster; {_CODE_FIX}"


def _not_records(what: str) -> str:
    return f"{what}: a transform reads only the view records; write {SHAPE}"


def transform_sql_problems(sql: str) -> list[str]:
    """Why `sql` cannot be a flow's transform (messages without the path), [] when it can.

    Never raises for any text: a query sqlglot cannot parse is one problem naming the parse error."""
    try:
        statements = _parse(sql)
    except ParseError as exc:
        return [_parse_problem(exc)]
    except SqlglotError as exc:  # a tokenizer error: an unterminated string or comment
        return [f"could not be parsed as Spark SQL: {_first_line(exc)}; fix the syntax ({SHAPE})"]
    except RecursionError:
        return [f"is nested too deeply to check; simplify it ({SHAPE})"]
    if not statements:
        return [f"has no statement; write {SHAPE}"]
    if len(statements) > 1:
        return [
            f"has {len(statements)} statements: more than one could run commands or load code on the cluster; "
            f"a transform is exactly one query ({SHAPE})"
        ]
    [root] = statements
    if isinstance(root, exp.Values):
        return [_not_records("VALUES")]
    if not isinstance(root, exp.Query):
        return [_runs_code(f"the statement `{_head(root)}`")]
    ctes = frozenset(cte.alias_or_name.lower() for cte in root.find_all(exp.CTE))
    return list(dict.fromkeys(_findings(root, ctes)))  # each construct once


@contextmanager
def _quiet_fallback() -> Iterator[None]:
    """sqlglot logs a warning before parsing an unknown statement (ADD JAR) as a Command; the
    problem this module reports says it better, and `kmirror validate` prints nothing else."""

    def drop(record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()

    logger = logging.getLogger("sqlglot")
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def _parse(sql: str) -> list[exp.Expr]:
    with _quiet_fallback():
        return [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]  # `;;` parses as None


def _parse_problem(exc: ParseError) -> str:
    if exc.errors:
        error = exc.errors[0]
        where = f" at line {error.get('line')}, column {error.get('col')}"
        near = f" (near {error['highlight']!r})" if error.get("highlight") else ""
        return f"could not be parsed as Spark SQL: {error.get('description')}{where}{near}; fix the syntax ({SHAPE})"
    return f"could not be parsed as Spark SQL: {_first_line(exc)}; fix the syntax ({SHAPE})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _head(node: exp.Expr, words: int = 3) -> str:
    """The first words of a statement as sqlglot writes it back (`ADD JAR 's3://...'`)."""
    return " ".join(node.sql(dialect=DIALECT).split()[:words])


def _findings(node: exp.Expr, ctes: frozenset[str]) -> Iterator[str]:
    """The problems in `node`'s tree; a refused node's insides are not looked at (one problem for
    `row_number() OVER (ORDER BY offset)`, not one more for its ORDER BY)."""
    problem = _problem(node, ctes)
    if problem is not None:
        yield problem
        return
    for child in node.iter_expressions():
        yield from _findings(child, ctes)


def _problem(node: exp.Expr, ctes: frozenset[str]) -> str | None:
    for check in (_reordering, _running_code, _source):
        if (problem := check(node, ctes)) is not None:
            return problem
    return None


def _reordering(node: exp.Expr, ctes: frozenset[str]) -> str | None:
    """Constructs that shuffle, merge, sort or cut the records of a partition."""
    del ctes
    if isinstance(node, exp.Join):
        kind = " ".join(str(node.args.get(k) or "").upper() for k in ("method", "side", "kind")).split()
        return _reorders(f"a {' '.join([*kind, 'JOIN'])}")
    if isinstance(node, exp.SetOperation):
        return _reorders(f"the set operation {node.key.upper()}")
    if isinstance(node, exp.Window):
        if node.arg_key == "windows":
            return _reorders(f"a WINDOW clause ({node.alias_or_name})")
        return _reorders(f"the window function {_call(node.this)}")
    if isinstance(node, exp.Select) and (subquery := _subquery_kind(node)) is not None:
        return _reorders(f"{subquery} (Spark plans it as a join)")
    if _is_aggregate(node):
        return _reorders(f"the aggregate function {_call(node)}")
    clause = _CLAUSES.get(type(node))
    if clause is not None:
        return _reorders(clause(node) if callable(clause) else clause)
    if isinstance(node, exp.Lateral) and not (node.args.get("view") and isinstance(node.this, exp.Func)):
        return _reorders("a LATERAL subquery (Spark plans it as a join)")
    return None


_CLAUSES: dict[type[exp.Expr], str | Callable[[exp.Expr], str]] = {
    exp.Group: "a GROUP BY",
    exp.Having: "a HAVING",
    exp.Qualify: "a QUALIFY",
    exp.Distinct: "a DISTINCT",
    exp.Order: "an ORDER BY",
    exp.Sort: "a SORT BY",
    exp.Distribute: "a DISTRIBUTE BY",
    exp.Cluster: "a CLUSTER BY",
    exp.Limit: "a LIMIT",
    exp.Fetch: "a FETCH",
    exp.Offset: "an OFFSET",
    exp.TableSample: "a TABLESAMPLE",
    exp.Pivot: lambda node: "an UNPIVOT" if node.args.get("unpivot") else "a PIVOT",
    exp.Hint: lambda node: f"the hint /*+ {', '.join(e.sql(dialect=DIALECT) for e in node.expressions)} */",
}


def _subquery_kind(select: exp.Select) -> str | None:
    """None for a SELECT that is the query, a derived table in FROM or a CTE; else which subquery."""
    context = select.parent
    while isinstance(context, (exp.Subquery, exp.Paren)):
        context = context.parent
    if context is None or isinstance(context, (exp.From, exp.CTE, exp.With)):
        return None
    if isinstance(context, exp.Exists):
        return "an EXISTS subquery"
    if isinstance(context, exp.In):
        return "an IN subquery"
    if isinstance(context, (exp.Any, exp.All)):
        return f"an {context.key.upper()} subquery"
    return "a scalar subquery"


def _function_name(node: exp.Expr) -> str:
    """The name of a call as Spark spells it (sqlglot's own class names differ: ArrayUniqueAgg)."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    if isinstance(node, exp.WithinGroup):  # percentile_cont(...) WITHIN GROUP: Spark's generator renames it
        return node.this.sql_name().lower()
    return node.sql(dialect=DIALECT).split("(", 1)[0].strip().lower()


def _call(node: exp.Expr) -> str:
    return f"{_function_name(node)}()"


def _is_aggregate(node: exp.Expr) -> bool:
    if isinstance(node, (exp.AggFunc, exp.WithinGroup)):
        return True
    if isinstance(node, exp.Anonymous):
        name = _function_name(node)
        return name in SPARK_AGGREGATES or name.endswith("_agg")
    return False


def _running_code(node: exp.Expr, ctes: frozenset[str]) -> str | None:
    """Calls that run code the query names: scripts, JVM reflection, catalog functions."""
    del ctes
    if isinstance(node, exp.QueryTransform):
        return _runs_code("TRANSFORM ... USING (it runs a script on the executors)")
    if isinstance(node, exp.Anonymous) and _function_name(node) in CODE_FUNCTIONS:
        return _runs_code(f"the function {_call(node)} (it calls any JVM method)")
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
        return _runs_code(f"the catalog function {node.sql(dialect=DIALECT).split('(', 1)[0]}()")
    return None


def _source(node: exp.Expr, ctes: frozenset[str]) -> str | None:
    """What a query reads: only the view records (or a CTE or subquery over it), in one SELECT."""
    if isinstance(node, exp.Select):
        extra = sorted(k for k, v in node.args.items() if v not in (None, [], False) and k not in SELECT_PARTS)
        if extra:
            return _not_records(f"the {extra[0].strip('_').upper()} clause")
        if node.args.get("from_") is None:
            return _not_records("a SELECT without FROM")
        return None
    if isinstance(node, exp.From) and not isinstance(node.this, (exp.Table, exp.Subquery)):
        return _not_records(f"FROM {_head(node.this, 2)}")
    if isinstance(node, exp.Table):
        return _table_problem(node, ctes)
    return None


def _table_problem(table: exp.Table, ctes: frozenset[str]) -> str | None:
    if not isinstance(table.this, exp.Identifier):
        return _not_records(f"the table function {_head(table.this, 1)}")
    extra = sorted(k for k, v in table.args.items() if v not in (None, [], False) and k not in TABLE_PARTS)
    name = table.sql(dialect=DIALECT) if table.args.get("db") or table.args.get("catalog") else table.name
    if name.lower() != VIEW and name.lower() not in ctes:
        return _not_records(f"the table {name}")
    if extra:
        part = _TABLE_PART_NAMES.get(extra[0], extra[0].strip("_").upper())
        return _not_records(f"{part} on {name}")
    return None
