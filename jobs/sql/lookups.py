"""`field__any=values`: `field = ANY(%s::<type>[])`, the values sent as one array parameter.

Django's `__in` writes one placeholder per value, and psycopg parses again, on every execution,
a statement of more than 50 parameters (it caches only short ones): the agents' batches name
hundreds of jobs, placements and nodes at a time, and that parsing was a third of their cost.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Field, ForeignObject, Lookup


class AnyOf(Lookup):
    lookup_name = "any"
    prepare_rhs = False

    def get_db_prep_lookup(self, value: Any, connection: Any) -> tuple[str, list[Any]]:
        return "%s", [list(value)]

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        # typed like the column, or an index on it would not be used (ints would be numeric[])
        return f"{lhs} = ANY({rhs}::{self.lhs.output_field.db_type(connection)}[])", [*lhs_params, *rhs_params]


Field.register_lookup(AnyOf)
ForeignObject.register_lookup(AnyOf)  # relations keep lookups of their own (`node_id__any`, by id)
