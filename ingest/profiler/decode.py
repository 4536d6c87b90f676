"""Kernel strings: the STRING_IDS keys of TASK / COMPUTE_TASK_INFO decoded for the ``kernels`` table.

Every name-like column of a torch_npu profiler DB is an INTEGER id into ``STRING_IDS(id, value)``
(``reference/ascend-profiler-format.md`` §2.2). A kernel row carries ten of them. :class:`KernelStrings`
builds, once per capture, what the kernel query needs to turn them into strings fast and in little
memory:

- temp table ``ksid``: the ``sid`` rows (decoded STRING_IDS, see
  :func:`tilake.ingest.profiler.db.load_db`) that kernels point at; a few thousand, where the whole
  table holds millions of unrelated host strings in big captures (ten hash tables of it ran out of
  memory under a few hundred MB: BR-22). :mod:`.hostmatch` reads kernel names from it.
- one ENUM type per output column, of the strings that column takes: DuckDB's Parquet writer writes an
  ENUM column as its dictionary plus indexes instead of hashing every string value (2 M kernels, 29
  columns: 0.33 s vs 1.0 s; bench/README.md). The file holds plain UTF-8 strings either way (Parquet
  logical type String; DuckDB, pyarrow and pandas read VARCHAR / string).
- per column, a lookup list indexed by ``id - lowest id + 1`` held in a DuckDB variable (``list[i]``
  is a gather: 9 columns × 2 M rows in 0.09 s vs 0.20 s for nine LEFT JOINs), or a lookup table
  joined by id when the ids span more than :data:`LUT_MAX_SPAN`.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Dict, List

from tilake.lake.duck import sql_str

ENUM_MAX_VALUES = 65_536
"""Most distinct strings a column is written through an ENUM for (else VARCHAR): DuckDB's Parquet writer
stores an ENUM column's whole dictionary in every row group."""

LUT_MAX_SPAN = 1 << 22
"""Widest id span (highest − lowest id a column uses) decoded through a lookup list (else a join)."""

DECODED = {
    # alias: (dump file key, id column, {field: SQL over a sid row}, ENUM type key per field)
    "kernel_name": ("cti", "c_kernel_name", {"v": "value", "derived": "derived"}, {"v": "kernel_name", "derived": "op"}),
    # the op type is the opType string unless it cleans to nothing, then the name-derived one (coalesce)
    "raw_op": ("cti", "c_raw_op", {"op": "CASE WHEN clean IS NULL THEN NULL ELSE value END"}, {"op": "op"}),
    "accel": ("cti", "c_accel", {"v": "clean"}, {"v": "accel"}),
    **{a: ("cti", f"c_{a}", {"v": "clean"}, {"v": a}) for a in ("i_sh", "i_dt", "i_fm", "o_sh", "o_dt", "o_fm", "hf32")},
    "tt": ("task", "t_tt", {"v": "value"}, {"v": "tt"}),
}
"""How each STRING_IDS key of a kernel is decoded (the kernel query reads ``expr["<alias>.<field>"]``)."""

ENUM_COLUMNS = frozenset({"capture_id", "source_kind", "kernel_name", "op_type", "accelerator", "device_task_type",
                          "input_shapes", "input_dtypes", "input_formats", "output_shapes", "output_dtypes",
                          "output_formats", "hf32_eligible"})
"""``kernels`` columns the compute query may yield as an ENUM of their strings (written as they come)."""


class KernelStrings:
    """Decoders for one capture's kernel string columns; the temp names carry a tag unique in the process.

    After :meth:`build`, ``expr["<alias>.<field>"]`` is the SQL expression of a decoded string over the
    dumped row ``b`` (the kernel query's CTE) and ``joins`` the LEFT JOIN clauses it needs (only for
    columns whose ids span more than :data:`LUT_MAX_SPAN`). :meth:`drop` removes every object made.
    """

    _tags = itertools.count()

    def __init__(self):
        self.tag = f"_kx{next(self._tags)}"
        self.expr: Dict[str, str] = {}
        self.joins = ""
        self._undo: List[str] = []

    def build(self, con, files: Dict[str, Path]) -> None:
        """Create ``ksid``, the ENUM types, lookup tables and lists from the dumped Parquet ``files``
        (keys ``cti``, ``task``: :func:`tilake.ingest.profiler.kernels.write_kernels`)."""
        t = self.tag
        for a, (key, col, _, _) in DECODED.items():
            con.execute(f'CREATE OR REPLACE TEMP TABLE "{t}_i_{a}" AS SELECT DISTINCT "{col}" AS id '
                        f'FROM read_parquet({sql_str(files[key])}, hive_partitioning=false) WHERE "{col}" IS NOT NULL')
            self._undo.append(f'DROP TABLE IF EXISTS "{t}_i_{a}"')
        ids = " UNION ".join(f'SELECT id FROM "{t}_i_{a}"' for a in DECODED)
        con.execute(f"CREATE OR REPLACE TEMP TABLE ksid AS SELECT * FROM sid WHERE id IN ({ids})")
        values: Dict[str, List[str]] = {}
        for a, (_, _, fields, enums) in DECODED.items():
            for f, sql in fields.items():
                values.setdefault(enums[f], []).append(f'SELECT {sql} AS s FROM ksid WHERE id IN (SELECT id FROM "{t}_i_{a}")')
        types: Dict[str, str] = {}
        for key, parts in values.items():
            src = " UNION ".join(parts)
            n = con.execute(f"SELECT count(DISTINCT s) FROM ({src})").fetchone()[0]
            if 0 < n <= ENUM_MAX_VALUES:
                con.execute(f'CREATE TYPE "{t}_e_{key}" AS ENUM (SELECT DISTINCT s FROM ({src}) WHERE s IS NOT NULL)')
                types[key] = f'"{t}_e_{key}"'
        joins = []
        for a, (_, col, fields, enums) in DECODED.items():
            cols = ", ".join(f"CAST({sql} AS {types.get(enums[f], 'VARCHAR')}) AS {f}" for f, sql in fields.items())
            table = f'"{t}_k_{a}"'
            con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT id, {cols} FROM ksid "
                        f'WHERE id IN (SELECT id FROM "{t}_i_{a}")')
            self._undo.insert(0, f"DROP TABLE IF EXISTS {table}")
            lo, hi = con.execute(f'SELECT min(id), max(id) FROM "{t}_i_{a}"').fetchone()
            if lo is None:  # the column is NULL in every row
                self.expr.update({f"{a}.{f}": f"CAST(NULL AS {types.get(enums[f], 'VARCHAR')})" for f in fields})
            elif hi - lo < LUT_MAX_SPAN:
                for f in fields:
                    var = f"{t}_l_{a}_{f}"
                    con.execute(f"SET VARIABLE {var} = (SELECT list(x.{f} ORDER BY g.r) FROM range({int(lo)}, {int(hi) + 1}) "
                                f"g(r) LEFT JOIN {table} x ON x.id = g.r)")
                    self._undo.insert(0, f"RESET VARIABLE {var}")
                    # every id of the column lies in [lo, hi]: the index is 1 … span, never 0 or negative
                    self.expr[f"{a}.{f}"] = f"getvariable('{var}')[b.{col} - {int(lo) - 1}]"
            else:
                joins.append(f"LEFT JOIN {table} j_{a} ON j_{a}.id = b.{col}")
                self.expr.update({f"{a}.{f}": f"j_{a}.{f}" for f in fields})
        self._undo += [f"DROP TYPE IF EXISTS {ty}" for ty in types.values()]
        self.joins = "\n".join(joins)

    #: (alias, source table, column) of the ids whose dangling rows are counted (:meth:`dangling`)
    COUNTED = (("kernel_name", "COMPUTE_TASK_INFO", "name"), ("raw_op", "COMPUTE_TASK_INFO", "opType"),
               ("accel", "COMPUTE_TASK_INFO", "taskType"), ("tt", "TASK", "taskType"))

    def dangling(self, con, files: Dict[str, Path]) -> Dict[str, int]:
        """``{"COMPUTE_TASK_INFO.name id not in STRING_IDS": kernels, …}``: kernels whose name, op type or
        task type id has no ``STRING_IDS`` row (the kernel would show op type ``None`` with capture
        health "ok"). Call after :meth:`build`; columns with no dangling id are left out."""
        out: Dict[str, int] = {}
        for a, table, col in self.COUNTED:
            key, idcol = DECODED[a][0], DECODED[a][1]
            n = con.execute(f'SELECT count(*) FROM read_parquet({sql_str(files[key])}, hive_partitioning=false) b '
                            f'WHERE b."{idcol}" IS NOT NULL AND b."{idcol}" NOT IN (SELECT id FROM ksid)').fetchone()[0]
            if n:
                out[f"{table}.{col} id not in STRING_IDS"] = int(n)
            if col == "name":   # no id at all: the kernel has no name (kept for the counts, named here)
                n = con.execute(f'SELECT count(*) FROM read_parquet({sql_str(files[key])}, hive_partitioning=false) b '
                                f'WHERE b."{idcol}" IS NULL').fetchone()[0]
                if n:
                    out[f"{table}.{col} NULL (kernel name unknown)"] = int(n)
        return out

    def drop(self, con) -> None:
        """Drop the lookup tables, variables and ENUM types (tables and variables before the types)."""
        for stmt in self._undo:
            try:
                con.execute(stmt)
            except Exception:  # a connection invalidated by an earlier DuckDB error: nothing left to drop
                return
        self._undo = []
