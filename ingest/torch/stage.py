"""Stage a trace's events with DuckDB's JSON reader: the fast read of :mod:`tilake.ingest.torch.load`.

The part files of :func:`tilake.ingest.torch.parts.split_events` are read, a batch at a time, by one
``read_json(format='array')`` scan on one thread (so ``row_number()``, continued across batches, is the event's
index in ``traceEvents``, 1-based, as the streaming reader counts it) and written to Parquet files in the
staging folder; the six tables the loader joins
(``ops``, ``device``, ``runtime``, ``ranges``, ``py``; ``other`` is only timed) are temp *views* over it, so no
event row sits in DuckDB's memory (in-memory temp tables took 27 MiB for the V100 trace's 13 MiB of CSV).

The routing, the category spellings and the value rules are those of
:func:`tilake.ingest.torch.events.stream_events`, which stays the reference reader: the same rows come out
(tests/ingest/torch/test_trace_stage.py compares both readers on every real trace), and whenever DuckDB
refuses a part (a wrong cut, a value of another JSON type, a time that is not a number) the loader reads the
trace with it instead, so its error names the event.

Format facts: see :mod:`tilake.ingest.torch.events` (Kineto's Chrome-trace writer, torch 2.13).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import duckdb

from tilake.errors import TilakeError
from tilake.ingest.torch.events import CATEGORY, DEVICE_CATS, MAX_TRACE_NS, TraceScan, bad_time_event
from tilake.lake.duck import sql_str

# args keys read (Kineto names) → staged column, DuckDB type; any other args key is ignored by the reader
ARGS = (
    ("External id", "ext_id", "BIGINT"), ("correlation", "corr", "BIGINT"),
    ("Sequence number", "seq", "BIGINT"), ("Fwd thread id", "fwd_tid", "BIGINT"),
    ("Input Dims", "dims", "JSON"), ("Input type", "types", "JSON"),
    ("device", "device", "VARCHAR"), ("stream", "stream", "VARCHAR"),
    ("grid", "grid", "JSON"), ("block", "block", "JSON"), ("bytes", "bytes", "BIGINT"),
    ("Python id", "py_id", "BIGINT"), ("Python parent id", "parent_id", "BIGINT"),
)
# the streaming reader's CSV files (tilake.ingest.torch.events.FILES) as DuckDB types
_TYPES = {
    "ops": "idx BIGINT, name VARCHAR, pid VARCHAR, tid VARCHAR, ts BIGINT, dur BIGINT, ext_id BIGINT, "
           "seq BIGINT, fwd_tid BIGINT, dims VARCHAR, types VARCHAR",
    "device": "idx BIGINT, cat VARCHAR, name VARCHAR, pid VARCHAR, tid VARCHAR, ts BIGINT, dur BIGINT, "
              "ext_id BIGINT, corr BIGINT, device VARCHAR, stream VARCHAR, grid VARCHAR, block VARCHAR, "
              "bytes BIGINT",
    "runtime": "corr BIGINT, ext_id BIGINT, name VARCHAR, tid VARCHAR, ts BIGINT, dur BIGINT, pid VARCHAR",
    "ranges": "cat VARCHAR, name VARCHAR, tid VARCHAR, ts BIGINT, dur BIGINT",
    "py": "py_id BIGINT, parent_id BIGINT, name VARCHAR, pid VARCHAR, tid VARCHAR, ts BIGINT, dur BIGINT",
    "other": "ts BIGINT, dur BIGINT",
}

VIEWS = {
    "ops": "idx, name, pid, tid, ts, dur, ext_id, seq, fwd_tid, dims, types",
    "device": "idx, cat, name, pid, tid, ts, dur, ext_id, corr, device, stream, grid, block, bytes",
    "runtime": "corr, ext_id, name, tid, ts, dur, pid",
    "ranges": "cat, name, tid, ts, dur",
    "py": "py_id, parent_id, name, pid, tid, ts, dur",
}


@dataclass
class StagedViews:
    """The fast read's result: ``views`` = ``{table: temp view name}`` (``ops``, ``device``, ``runtime``,
    ``ranges``, ``py``) over the staged Parquet file, ``tag`` their name suffix, ``bytes`` the JSON read."""

    tag: str
    views: Dict[str, str] = field(default_factory=dict)
    bytes: int = 0


def drop_views(con, staged: "StagedViews") -> None:
    """Drop the temp views of ``staged`` (the staged file goes with the staging folder)."""
    for name in staged.views.values():
        con.execute(f'DROP VIEW IF EXISTS "{name}"')


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _columns() -> str:
    args = ", ".join(f"{_ident(k)} {t}" for k, _, t in ARGS)
    cols = {"ph": "VARCHAR", "cat": "VARCHAR", "name": "VARCHAR", "pid": "VARCHAR", "tid": "VARCHAR",
            "ts": "DOUBLE", "dur": "DOUBLE", "args": f"STRUCT({args})"}
    return "{" + ", ".join(f"{sql_str(c)}: {sql_str(t)}" for c, t in cols.items()) + "}"


def _ns(col: str) -> str:
    """µs (DOUBLE) → exact integer ns, the streaming loader's rule (whole µs × 1000 + the rounded fraction)."""
    return (f"CAST(floor({col}) AS BIGINT) * 1000 + CAST(round(({col} - floor({col})) * 1000) AS BIGINT)")


def _blank(col: str) -> str:
    """A staged CSV field reads ``""`` as NULL and has no line breaks: the same here."""
    cut = f"replace(replace({col}, chr(10), ' '), chr(13), ' ')"   # only where one is: 0.1 s on 123k names
    return f"nullif(CASE WHEN contains({col}, chr(10)) OR contains({col}, chr(13)) THEN {cut} ELSE {col} END, '')"


class Stager:
    """Stages batches of part files, in event order, into ``folder/events-NNNN.parquet`` (one file per batch;
    ``idx`` continues across batches), then makes the loader's views over them (:meth:`finish`).

    Args:
        con: the run writer's DuckDB connection (its ``threads`` setting is restored after each batch).
        folder: the staging folder.
    """

    def __init__(self, con, folder: Path) -> None:
        self.con = con
        self.folder = folder
        self.files: List[Path] = []
        self.rows = 0
        self.bytes = 0
        self.failed = False

    def add(self, parts: List[Path]) -> bool:
        """Stage one batch (its part files are deleted). Returns False when DuckDB refuses a part (the caller
        then reads the trace with the streaming reader).

        Raises:
            duckdb.InterruptException: the user pressed Ctrl-C.
        """
        canon = "CASE cat " + " ".join(f"WHEN {sql_str(k)} THEN {sql_str(v)}" for k, v in CATEGORY.items()) + " END"
        dev = ", ".join(sql_str(c) for c in DEVICE_CATS)
        stage = self.folder / f"events-{len(self.files):04d}.parquet"
        files = "[" + ", ".join(sql_str(p) for p in parts) + "]"
        args = ", ".join(f"a.{_ident(k)}::{'VARCHAR' if t == 'JSON' else t} AS _{c}" for k, c, t in ARGS)
        con = self.con
        threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
        con.execute("SET threads = 1")   # one scan thread: rows in file order, so row_number() is the event index
        try:
            con.execute(f"""COPY (
                WITH e AS (SELECT {self.rows} + row_number() OVER () AS idx, ph, cat AS raw, {canon} AS cat, name, pid,
                                  tid, ts, dur, args AS a
                           FROM read_json({files}, format='array', columns={_columns()}, maximum_object_size=16777216)),
                     r AS (SELECT *, ph IS NOT DISTINCT FROM 'X' AS x,
                                  cat IN ('cpu_op', 'user_annotation') AND starts_with(name, 'ProfilerStep#') AS step
                           FROM e)
                SELECT idx,
                       CASE WHEN NOT x THEN NULL WHEN cat = 'python_function' THEN 'py' WHEN step THEN 'ranges'
                            WHEN cat = 'cpu_op' THEN 'ops' WHEN cat IN ('cuda_runtime', 'cuda_driver') THEN 'runtime'
                            WHEN cat IN ({dev}) THEN 'device'
                            WHEN cat IN ('user_annotation', 'gpu_user_annotation') THEN 'ranges' ELSE 'other' END AS k,
                       CASE WHEN NOT x THEN (CASE WHEN ph = 'M' THEN 'metadata'
                                                  ELSE coalesce(nullif(raw, ''), 'ph:' || coalesce(ph, 'None')) END)
                            ELSE coalesce(cat, nullif(raw, ''), 'uncategorised') END AS key,
                       x AND coalesce(step, false) AS step,
                       CASE WHEN x AND step THEN 'user_annotation' WHEN x THEN coalesce(cat, nullif(raw, '')) END AS cat,
                       CASE WHEN x THEN {_blank('name')} END AS name,
                       CASE WHEN x THEN nullif(pid, '') END AS pid, CASE WHEN x THEN nullif(tid, '') END AS tid,
                       CASE WHEN x THEN {_ns('ts')} END AS ts, CASE WHEN x THEN {_ns('coalesce(dur, 0)')} END AS dur,
                       {args}
                FROM r) TO {sql_str(stage)} (FORMAT parquet, COMPRESSION snappy, ROW_GROUP_SIZE 4096)""")
            self.rows += con.execute(f"SELECT count(*) FROM read_parquet({sql_str(stage)})").fetchone()[0]
        except duckdb.Error as exc:
            if type(exc).__name__ == "InterruptException":
                raise
            self.failed = True
            return False
        finally:
            con.execute(f"SET threads = {int(threads)}")
            for p in parts:
                self.bytes += p.stat().st_size if p.exists() else 0
                p.unlink(missing_ok=True)
        self.files.append(stage)
        return True

    def finish(self, tag: str, scan: TraceScan) -> Optional[StagedViews]:
        """The loader's temp views ``_trace_<table>_<tag>`` over the staged files.

        Fills ``scan.counts`` (events per category, as :func:`~tilake.ingest.torch.events.stream_events` keys
        them), ``scan.steps``, ``start_ns`` / ``end_ns`` (trace clock ns over every ``ph: X`` event) and
        ``cpu_start_ns``.

        Returns:
            :class:`StagedViews` for ``ops``, ``device``, ``runtime``, ``ranges``, ``py``; or None when a batch
            failed, nothing was staged, or a time is past :data:`~tilake.ingest.torch.events.MAX_TRACE_NS`
            (nothing is counted into ``scan`` then; the caller reads the trace with the streaming reader).
        """
        if self.failed or not self.files:
            return None
        con = self.con
        src = "read_parquet([" + ", ".join(sql_str(p) for p in self.files) + "])"
        lo, hi, big, cpu0 = con.execute(
            f"SELECT min(ts), max(ts::HUGEINT + dur), max(greatest(abs(ts::HUGEINT), abs(dur::HUGEINT))), "
            f"min(ts) FILTER (WHERE k = 'ops') FROM {src} WHERE k IS NOT NULL").fetchone()
        if big is not None and big > MAX_TRACE_NS:
            return None
        for key, n, steps in con.execute(
                f"SELECT key, count(*), count(*) FILTER (WHERE step) FROM {src} GROUP BY key").fetchall():
            scan.counts[key] += int(n)
            scan.steps += int(steps)
        scan.start_ns = None if lo is None else int(lo)
        scan.end_ns = None if hi is None else int(hi)
        scan.cpu_start_ns = None if cpu0 is None else int(cpu0)
        names = StagedViews(tag, bytes=self.bytes)
        for table, cols in VIEWS.items():
            name = f"_trace_{table}_{tag}"
            sel = ", ".join(c if c in ("idx", "cat", "name", "pid", "tid", "ts", "dur") else f"_{c} AS {c}"
                            for c in cols.split(", "))
            con.execute(f'CREATE TEMP VIEW "{name}" AS SELECT {sel} FROM {src} WHERE k = {sql_str(table)}')
            names.views[table] = name
        return names


def _csv_columns(table: str) -> str:
    cols = [c.split()[0] for c in _TYPES[table].split(", ")]
    types = [c.split()[1] for c in _TYPES[table].split(", ")]
    return "{" + ", ".join(f"{sql_str(c)}: {sql_str(t)}" for c, t in zip(cols, types)) + "}"


def load_csvs(con, paths: Dict[str, Path], tag: str, trace: Path, scan: TraceScan) -> Dict[str, str]:
    """The streaming reader's staging: temp tables of its CSVs (:func:`tilake.ingest.torch.events.stream_events`); ``ts``/``dur`` (µs as the trace wrote them) become integer ns, exact
    for every value a DOUBLE holds (ijson reads the trace's floats as doubles). Then one min/max check over
    every staged time against :data:`MAX_TRACE_NS`, and the session bounds into ``scan`` (``start_ns`` /
    ``end_ns`` over all ``ph: X`` events, ``cpu_start_ns`` over the ``cpu_op`` rows; the ``other`` table,
    times of events of other categories, is dropped after it).

    Raises:
        TilakeError: a time that is not a number, not finite or past 2**62 ns, naming its event in
            ``traceEvents`` (:func:`tilake.ingest.torch.events.bad_time_event`).
        duckdb.Error: the staged files cannot be read for another reason.
    """
    names = {}
    try:
        for key, path in paths.items():
            name = f"_trace_{key}_{tag}"
            cols = _csv_columns(key).replace("'ts': 'BIGINT'", "'ts': 'DOUBLE'").replace("'dur': 'BIGINT'", "'dur': 'DOUBLE'")
            # exact ns from µs doubles: whole µs (exact below 2^53, i.e. any epoch-µs int) × 1000 + the rounded
            # fraction; a plain ts * 1000 in DOUBLE is off by up to 128 ns at 1.7e18
            con.execute(f'CREATE TEMP TABLE "{name}" AS SELECT * REPLACE ('
                        "CAST(floor(ts) AS BIGINT) * 1000 + CAST(round((ts - floor(ts)) * 1000) AS BIGINT) AS ts, "
                        "CAST(floor(coalesce(dur, 0)) AS BIGINT) * 1000 "
                        "+ CAST(round((coalesce(dur, 0) - floor(coalesce(dur, 0))) * 1000) AS BIGINT) AS dur) "
                        f"FROM read_csv({sql_str(path)}, header=false, "
                        f"auto_detect=false, columns={cols}, quote='\"', escape='\"')")
            names[key] = name
    except duckdb.Error:   # text or an out-of-range number where a time belongs: name the event, else re-raise
        bad_time_event(trace)
        raise
    union = " UNION ALL ".join(f'SELECT ts, dur FROM "{n}"' for n in names.values())
    lo, hi, big, cpu0 = con.execute(
        f"SELECT min(ts), max(ts::HUGEINT + dur), max(greatest(abs(ts::HUGEINT), abs(dur::HUGEINT))), "
        f'(SELECT min(ts) FROM "{names["ops"]}") FROM ({union})').fetchone()
    if big is not None and big > MAX_TRACE_NS:
        bad_time_event(trace)
        raise TilakeError(f"a time past 2**62 ns is staged but no event holds one (max |time| {big} ns)", path=trace)
    scan.start_ns = None if lo is None else int(lo)
    scan.end_ns = None if hi is None else int(hi)
    scan.cpu_start_ns = None if cpu0 is None else int(cpu0)
    con.execute(f'DROP TABLE "{names.pop("other")}"')
    return names
