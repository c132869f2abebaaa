"""One UPDATE or INSERT for many rows with a value each, the rows sent as one JSON parameter.

Django's `Case(When(...))` works too, but PostgreSQL evaluates it row by row against every
branch: for the hundreds of jobs a scheduler run touches that is quadratic. A row set stays
linear. An INSERT from it skips what bulk_create spends per row in Python (a model instance,
every field prepared one by one): a scheduler run inserts thousands of placements and history
rows, and a batch of agents' reports hundreds.

The rows travel as one JSON array of arrays, not one array parameter per column: Django's
psycopg cursor binds on the client, and quoting an array walks its elements in Python (a regular
expression each, 6–15 µs per row of a placement's eight columns), while `json.dumps` is C and
PostgreSQL casts each element back to its column's type (`rows_from`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

from django.db import connection, models

# types whose rows hold JSON itself (taken with ->, not as text with ->>)
_JSON_KINDS = frozenset({"json", "jsonb"})


def rows_from(kinds: Mapping[str, str]) -> str:
    """SQL for a row set with one column per name (→ its PostgreSQL type), read from the next
    `%s` parameter, a rows_param: use it as `FROM <this> AS v`."""
    # quoted here, not by connection.ops: modules build their statements at import
    columns = ", ".join(
        f'(r->{"" if kind in _JSON_KINDS else ">"}{i})::{kind} AS "{name}"' for i, (name, kind) in enumerate(kinds.items())
    )
    return f"(SELECT {columns} FROM json_array_elements(%s::json) AS r)"


def rows_param(columns: Sequence[Sequence[Any]]) -> str:
    """The parameter of rows_from: the columns' values (equally long) as one row each.
    Times go as ISO 8601 with their offset; a float that is not finite is refused here (JSON
    has no NaN), not by PostgreSQL."""
    return json.dumps(list(zip(*columns, strict=True)), default=_json_value, allow_nan=False, ensure_ascii=False)


def _json_value(value: Any) -> Any:
    if isinstance(value, date):  # a datetime too
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not a value bulk writes send: {value!r}")


def update_each(
    model: type[models.Model],
    ids: Sequence[int],
    columns: Mapping[str, tuple[str, Sequence[Any]]],
    same: Mapping[str, Any] | None = None,
    where: str = "",
    where_params: Sequence[Any] = (),
) -> int:
    """Set, for row `ids[i]`, each column to `columns[name][1][i]` (cast to `columns[name][0]`,
    a PostgreSQL type), and every column of `same` to one value; `where` narrows the rows (SQL
    on `t`). Returns how many rows changed."""
    if not ids:
        return 0
    sql, params = _update_sql(model, ids, columns, same or {}, where, where_params)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def update_each_returning(
    model: type[models.Model],
    ids: Sequence[int],
    columns: Mapping[str, tuple[str, Sequence[Any]]],
    returning: Sequence[str],
    same: Mapping[str, Any] | None = None,
    where: str = "",
    where_params: Sequence[Any] = (),
) -> list[tuple[Any, ...]]:
    """update_each, returning (id, *returning columns) of each row it changed: who to tell."""
    if not ids:
        return []
    sql, params = _update_sql(model, ids, columns, same or {}, where, where_params)
    q = connection.ops.quote_name
    sql += " RETURNING " + ", ".join(["t.id", *(f"t.{q(name)}" for name in returning)])
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [tuple(row) for row in cursor.fetchall()]


def _update_sql(
    model: type[models.Model], ids: Sequence[int], columns: Mapping[str, tuple[str, Sequence[Any]]],
    same: Mapping[str, Any], where: str, where_params: Sequence[Any],
) -> tuple[str, list[Any]]:
    if "id" in columns:
        raise ValueError("the rows' ids go in `ids`, not in `columns`")
    q = connection.ops.quote_name
    assigns = [f"{q(name)} = %s" for name in same] + [f"{q(name)} = v.{q(name)}" for name in columns]
    rows = rows_from({"id": "bigint", **{name: kind for name, (kind, _) in columns.items()}})
    sql = (
        f"UPDATE {q(model._meta.db_table)} AS t SET {', '.join(assigns)} "
        f"FROM {rows} AS v WHERE t.id = v.id" + (f" AND ({where})" if where else "")
    )
    return sql, [*same.values(), rows_param([ids, *(values for _, values in columns.values())]), *where_params]


def insert_each(
    model: type[models.Model],
    columns: Mapping[str, tuple[str, Sequence[Any]]],
    same: Mapping[str, Any] | None = None,
) -> int:
    """Insert one row per position of the `columns` arrays (name → (PostgreSQL type, values)),
    with every column of `same` set to one value. Columns left out take their database
    default (none here: name every column without one). Returns how many rows were inserted."""
    lengths = {len(values) for _, values in columns.values()}
    if len(lengths) != 1:
        raise ValueError(f"columns of different lengths: {sorted(lengths)}")
    if not lengths.pop():
        return 0
    same = same or {}
    q = connection.ops.quote_name
    names = [*same, *columns]
    sql = (
        f"INSERT INTO {q(model._meta.db_table)} ({', '.join(q(name) for name in names)}) "
        f"SELECT {', '.join(['%s'] * len(same) + [f'v.{q(name)}' for name in columns])} "
        f"FROM {rows_from({name: kind for name, (kind, _) in columns.items()})} AS v"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*same.values(), rows_param([values for _, values in columns.values()])])
        return cursor.rowcount
