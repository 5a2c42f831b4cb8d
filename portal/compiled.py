"""Reads on the submit path whose SQL Django compiles once per process, not once per request (docs/decisions/0054).

Compiling a queryset (resolving lookups, joins, annotations, subqueries) costs 1–5 ms of CPU on this machine's cores
for the submit path's larger reads; running the resulting statement costs PostgreSQL a fraction of a millisecond.
A `CompiledRead` builds its queryset once with stand-in values, keeps the SQL Django made of it and where each value
sits among its parameters, and later sends that same SQL with the real values, building the model (its
`select_related` rows and annotations too) as Django's own iterator does. The statement is Django's: same joins,
same WHERE, same locks; only the compiling is saved. Anything the stand-ins cannot be found in (a lookup that
transforms its value, e.g. `__contains`) is refused when the read is first used, never silently wrong.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model, QuerySet
from django.db.models.query import get_related_populators

_STAND_IN_INT = -7_340_000_000  # a primary key no table holds: found again among the compiled parameters


class CompiledRead:
    """`read.first(**values)`: what `build(**values).first()` returns, compiled once per shape (which values are None changes the SQL: `IS NULL`) and per database connection."""

    def __init__(self, build: Callable[..., QuerySet], **kinds: type) -> None:
        self.build, self.kinds = build, kinds  # each value's type: int (a primary key) or str
        self._cache: dict[tuple, tuple] = {}
        self._lock = threading.Lock()

    def first(self, **values: Any) -> Model | None:
        connection = connections[DEFAULT_DB_ALIAS]
        shape = (id(connection), tuple(sorted(name for name, value in values.items() if value is None)))
        compiled = self._cache.get(shape)
        if compiled is None:
            compiled = self._compile(values)
            with self._lock:
                self._cache[shape] = compiled
        compiler, sql, slots, constants, converters = compiled
        params = [values[slot] if slot is not None else constant for slot, constant in zip(slots, constants, strict=True)]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchmany(1)
        if not rows:
            return None
        return self._model(compiler, connection.alias, rows[0], converters)

    def _compile(self, values: dict[str, Any]) -> tuple:
        stand_ins: dict[Any, str] = {}
        built: dict[str, Any] = {}
        for index, (name, value) in enumerate(sorted(values.items())):
            if value is None:
                built[name] = None
                continue
            stand_in = _STAND_IN_INT - index if self.kinds[name] is int else f"\x1fcompiled-read-{index}\x1f"
            stand_ins[stand_in] = name
            built[name] = stand_in
        queryset = self.build(**built)
        # As QuerySet.first(): the model's ordering, else the primary key; one row.
        queryset = (queryset if queryset.ordered else queryset.order_by("pk"))[:1]
        compiler = queryset.query.get_compiler(using=DEFAULT_DB_ALIAS)
        sql, params = compiler.as_sql()  # fills compiler.select, klass_info and annotation_col_map too
        slots = [stand_ins.get(p) if isinstance(p, int | str) and not isinstance(p, bool) else None for p in params]
        if set(slots) - {None} != set(stand_ins.values()):
            raise ValueError(f"a value of {sorted(stand_ins.values())} is not a plain parameter of the compiled SQL")
        # What turns the row's values into the fields' (as SQLCompiler.results_iter finds them for every row it reads).
        selected = [column[0] for column in compiler.select[0:compiler.col_count]]
        if compiler.has_composite_fields(selected):
            raise ValueError("a composite primary key is not read by a compiled read")
        return compiler, sql, slots, list(params), compiler.get_converters(selected)

    @staticmethod
    def _model(compiler, db: str, row: tuple, converters: dict) -> Model:
        """A row as a model, as django.db.models.query.ModelIterable builds it."""
        select, klass_info, annotation_col_map = compiler.select, compiler.klass_info, compiler.annotation_col_map
        model_cls = klass_info["model"]
        start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
        init_list = [f[0].target.attname for f in select[start:end]]
        if converters:
            row = next(compiler.apply_converters([row], converters))
        obj = model_cls.from_db(db, init_list, row[start:end])
        for populator in get_related_populators(klass_info, select, db):
            populator.populate(row, obj)
        for attr_name, col_pos in (annotation_col_map or {}).items():
            setattr(obj, attr_name, row[col_pos])
        return obj
