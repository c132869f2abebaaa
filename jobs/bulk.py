"""One UPDATE or INSERT for many rows with a value each (PostgreSQL: … FROM unnest(arrays)).

Django's `Case(When(...))` works too, but PostgreSQL evaluates it row by row against every
branch: for the hundreds of jobs a scheduler run touches that is quadratic. Arrays stay linear.
An INSERT from arrays skips what bulk_create spends per row in Python (a model instance, every
field prepared one by one): a scheduler run inserts thousands of placements and history rows,
and a batch of agents' reports hundreds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, models


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
    q = connection.ops.quote_name
    assigns = [f"{q(name)} = %s" for name in same] + [f"{q(name)} = v.{q(name)}" for name in columns]
    arrays = ", ".join(["%s::bigint[]", *(f"%s::{kind}[]" for kind, _ in columns.values())])
    names = ", ".join(["id", *(q(name) for name in columns)])
    sql = (
        f"UPDATE {q(model._meta.db_table)} AS t SET {', '.join(assigns)} "
        f"FROM unnest({arrays}) AS v({names}) WHERE t.id = v.id" + (f" AND ({where})" if where else "")
    )
    return sql, [*same.values(), list(ids), *(list(values) for _, values in columns.values()), *where_params]


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
    arrays = ", ".join(f"%s::{kind}[]" for kind, _ in columns.values())
    sql = (
        f"INSERT INTO {q(model._meta.db_table)} ({', '.join(q(name) for name in names)}) "
        f"SELECT {', '.join(['%s'] * len(same) + [f'v.{q(name)}' for name in columns])} "
        f"FROM unnest({arrays}) AS v({', '.join(q(name) for name in columns)})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*same.values(), *(list(values) for _, values in columns.values())])
        return cursor.rowcount
