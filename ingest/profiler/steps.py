"""Profiler steps of a capture: read the step markers, give every kernel its ``step``, keep common steps.

Where steps live (``reference/ascend-profiler-format.md`` §2.2, §2.4; checked on the real fixture DBs
``fixtures/profiler/msinsight/test/data/pytorch/db/level*/rank*_ascend_pt``, all ``STEP_TIME = (50, …)``):

* DB: ``STEP_TIME(id, startNs, endNs)`` — ``id`` is N of ``ProfilerStep#N``, host start/end of the step
  (torch_npu ``_step_info_db_parser.py``; created only with a ``schedule``/``step()``); else the
  ``PYTORCH_API`` op rows named ``ProfilerStep#N`` (same ranges: level-1 fixture row
  ``ProfilerStep#50 1736410576386409710 1736410576538298460`` equals its STEP_TIME row); else MSTX ranges
  with that message.
* Text export: ``kernel_details.csv`` ``Step Id`` (first column; one value per kernel row) — the step's
  range is the span of its kernels; else ``step_trace_time.csv`` ``Step`` (steps without times: when it
  lists exactly one step every kernel belongs to it).

A kernel belongs to the step whose host range holds its launch: the start of its launching ``CANN_API``
record (``TASK.connectionId = CANN_API.connectionId``) when linked, else its device start — the rule of
msprof-analyze (``CANN_API.startNs BETWEEN STEP_TIME.startNs AND endNs``, ``cluster_time_summary_export.py``). Kernels outside every range get ``step`` NULL; those after
the last step ended are the capture's *open tail* (a rank that kept launching without advancing the step).
"""
from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

from tilake.lake.duck import sql_str, sqlite_ro

_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass
class StepMarks:
    """Step markers of one capture: ``source`` (where they were read; "" when none) and ``ranges``
    ``[(step, start_ns, end_ns)]`` (times None when the source gives step ids only)."""

    source: str = ""
    ranges: List[Tuple[int, Optional[int], Optional[int]]] = field(default_factory=list)

    @property
    def steps(self) -> List[int]:
        """The step ids, sorted."""
        return sorted({r[0] for r in self.ranges})


@dataclass
class StepCounts:
    """Kernels per step of one capture after :func:`assign_steps`: ``per_step`` {step: kernel rows},
    ``outside`` (rows in no step), ``tail`` (rows launched after the last step ended)."""

    per_step: Dict[int, int] = field(default_factory=dict)
    outside: int = 0
    tail: int = 0


def db_step_marks(db: Path) -> StepMarks:
    """Step ranges of a profiler DB: ``STEP_TIME``, else ``PYTORCH_API`` / ``MSTX_EVENTS`` ``ProfilerStep#N``
    rows. Read with sqlite3 in immutable mode; an unreadable or absent table gives no markers."""
    try:
        con = sqlite_ro(db)
    except sqlite3.Error:
        return StepMarks()
    try:
        rows = _try(con, "SELECT id, startNs, endNs FROM STEP_TIME WHERE id IS NOT NULL")
        # a row whose id or times are not integers, or that ends before it starts, is no step range: left out
        # (counted in the capture's invalid_rows by the DB reader)
        good = [(i, b, c) for i, b, c in ((_int(a), _int(b), _int(c)) for a, b, c in rows)
                if i is not None and i >= 0 and b is not None and c is not None and c >= b]
        if good:
            return StepMarks("STEP_TIME", good)
        for table, col, src in (("PYTORCH_API", "name", "PYTORCH_API ProfilerStep#N"),
                                ("MSTX_EVENTS", "message", "MSTX ProfilerStep#N")):
            rows = _try(con, f"SELECT s.value, t.startNs, t.endNs FROM {table} t JOIN STRING_IDS s "
                             f"ON s.id = t.{col} WHERE s.value LIKE 'ProfilerStep#%'")
            marks = [(int(m.group(1)), _int(b), _int(c)) for v, b, c in rows or []
                     if (m := _STEP_NAME.match(str(v)))]
            if marks:
                return StepMarks(src, marks)
        return StepMarks()
    finally:
        con.close()


def _try(con, sql: str) -> list:
    try:
        return con.execute(sql).fetchall()
    except sqlite3.Error:
        return []


def _int(v) -> Optional[int]:
    """An integer column value (an int, or text of digits), else None (``NaN``, ``1.5e3``, ``"abc"``, NULL)."""
    if isinstance(v, bool) or v is None or isinstance(v, float):
        return None
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return None


def text_step_marks(text_dir: Path) -> StepMarks:
    """Step markers of a text export: ``kernel_details.csv`` ``Step Id`` spans, else the ``Step`` ids of
    ``step_trace_time.csv``. Unreadable files give no markers (the kernel reader reports them)."""
    from tilake.errors import TilakeError
    from tilake.ingest.profiler.text import read_csv, us_to_ns
    from tilake.lake.schema import KERNEL_MAX_NS

    kd = Path(text_dir) / "kernel_details.csv"
    try:
        if kd.is_file():
            header, rows = read_csv(kd)
            if "Step Id" in header:
                start = "Start Time(us)" if "Start Time(us)" in header else "Task Start Time(us)"
                dur = "Duration(us)" if "Duration(us)" in header else "Task Duration(us)"
                spans: Dict[int, List[int]] = {}
                for r in rows:
                    step, s = _int((r.get("Step Id") or "").strip()), us_to_ns(r.get(start))
                    if step is None or s is None:
                        continue
                    d = us_to_ns(r.get(dur), limit=None) or 0
                    e = s + (d if d <= KERNEL_MAX_NS else 0)   # an implausible kernel (counted invalid) spans nothing
                    lo_hi = spans.setdefault(step, [s, e])
                    lo_hi[0], lo_hi[1] = min(lo_hi[0], s), max(lo_hi[1], e)
                if spans:
                    return StepMarks("kernel_details.csv Step Id",
                                     [(k, v[0], v[1]) for k, v in sorted(spans.items())])
        st = Path(text_dir) / "step_trace_time.csv"
        if st.is_file():
            header, rows = read_csv(st)
            steps = sorted({v for r in rows if (v := _int((r.get("Step") or "").strip())) is not None})
            if steps:
                return StepMarks("step_trace_time.csv Step", [(s, None, None) for s in steps])
    except (TilakeError, OSError):
        return StepMarks()
    return StepMarks()


def stage_launch_times(con, db: Path, kernel_files: Sequence[Path]) -> bool:
    """Temp table ``_launch(conn, t)``: the ``CANN_API.startNs`` of every connection id the staged kernel
    ``files`` carry (DuckDB ``sqlite_scan``; the SQLite extension is loaded by the DB path). Returns False
    (and drops the table) when the DB has no readable ``CANN_API``."""
    con.execute("DROP TABLE IF EXISTS _launch")
    if not kernel_files:
        return False
    files = "[" + ", ".join(sql_str(f) for f in kernel_files) + "]"
    try:
        con.execute(f"""CREATE TEMP TABLE _launch AS
            SELECT connectionId AS conn, min(TRY_CAST(startNs AS BIGINT)) AS t
            FROM sqlite_scan({sql_str(db)}, 'CANN_API')
            WHERE connectionId IN (SELECT connection_id FROM read_parquet({files}, hive_partitioning=false) WHERE connection_id IS NOT NULL)
            GROUP BY connectionId""")
    except Exception:  # no CANN_API table / unreadable: device start times stand in for launches
        con.execute("DROP TABLE IF EXISTS _launch")
        return False
    return True


def _step_case(timed: List[Tuple[int, int, int]], t: str) -> str:
    """``CASE WHEN t BETWEEN s AND e THEN step … END``: a projection, streamed (no sort, no join)."""
    whens = " ".join(f"WHEN {t} BETWEEN {int(a)} AND {int(b)} THEN {int(s)}" for s, a, b in sorted(timed, key=lambda r: r[1]))
    return f"CAST(CASE {whens} END AS INTEGER)"


def assign_steps(con, files: Sequence[Path], marks: StepMarks) -> StepCounts:
    """Rewrite the staged kernel Parquet ``files`` of one capture with their ``step`` filled in.

    Launch time = the kernel's ``CANN_API`` start (temp table ``_launch`` of :func:`stage_launch_times`,
    when present and linked; a torch trace's ``_launch`` holds its runtime launch event's start and marks
    kernels without any launch, ``no_launch``: they get no step) else its device start; the step is the range holding it (a CASE over the
    ranges, streamed file to file). Marks without times (one ``step_trace_time.csv`` step) put every kernel
    in that step. Returns the counts per step, outside every step and in the open tail (``call_count``
    summed).
    """
    out = StepCounts()
    files = [Path(f) for f in files]
    if not files or not marks.ranges:
        return out
    timed = [(s, a, b) for s, a, b in marks.ranges if a is not None and b is not None]
    if not timed and len(marks.steps) != 1:
        return out
    try:   # the temp table's columns, or None (a catalog scan, duckdb_columns(), costs ~50 ms a call)
        launch_cols = [d[0] for d in con.execute("SELECT * FROM temp.main._launch LIMIT 0").description]
    except Exception:   # duckdb.CatalogException: no _launch table
        launch_cols = None
    has_launch = launch_cols is not None
    last_end = max((b for _s, _a, b in timed), default=None)
    launch = "coalesce(h.t, k.start_ns)" if has_launch else "k.start_ns"
    if has_launch and "no_launch" in launch_cols:
        # torch traces: a kernel known to have no launch (orphan) has no launch time, hence no step
        launch = "CASE WHEN h.no_launch THEN NULL ELSE coalesce(h.t, k.start_ns) END"
    join = "LEFT JOIN _launch h ON h.conn = k.connection_id" if has_launch else ""
    step = _step_case(timed, launch) if timed else f"CAST({marks.steps[0]} AS INTEGER)"
    tail = f"{launch} > {int(last_end)}" if last_end is not None else "false"
    for f in files:
        tmp = f.with_name(f.name + ".steps")
        con.execute(f"COPY (SELECT k.* REPLACE ({step} AS step) FROM read_parquet({sql_str(f)}, hive_partitioning=false) k {join}) "
                    f"TO {sql_str(tmp)} (FORMAT parquet, COMPRESSION zstd)")
        os.replace(tmp, f)
        for st, n in con.execute(f"SELECT step, sum(coalesce(call_count, 1)) FROM read_parquet({sql_str(f)}, hive_partitioning=false) "
                                 "GROUP BY step").fetchall():
            if st is None:
                out.outside += int(n)
            else:
                out.per_step[int(st)] = out.per_step.get(int(st), 0) + int(n)
        if out.outside and last_end is not None:
            n = con.execute(f"SELECT sum(coalesce(k.call_count, 1)) FROM read_parquet({sql_str(f)}, hive_partitioning=false) k {join} "
                            f"WHERE k.step IS NULL AND {tail}").fetchone()[0]
            out.tail += int(n or 0)
    return out


def restrict(con, files: Sequence[Path], keep: Set[int], drop_outside: bool = False) -> Tuple[int, int]:
    """Drop the kernel rows of steps not in ``keep`` (and, with ``drop_outside``, rows in no step) from
    staged Parquet ``files``. Returns (rows kept, rows dropped) — rows, not call counts."""
    kept = dropped = 0
    cond = f"step IN ({', '.join(str(int(s)) for s in sorted(keep))})" if keep else "false"
    cond = cond if drop_outside else f"(step IS NULL OR {cond})"
    for f in [Path(x) for x in files]:
        before = con.execute(f"SELECT count(*) FROM read_parquet({sql_str(f)}, hive_partitioning=false)").fetchone()[0]
        tmp = f.with_name(f.name + ".steps")
        con.execute(f"COPY (SELECT * FROM read_parquet({sql_str(f)}, hive_partitioning=false) WHERE {cond}) TO {sql_str(tmp)} "
                    "(FORMAT parquet, COMPRESSION zstd)")
        os.replace(tmp, f)
        after = con.execute(f"SELECT count(*) FROM read_parquet({sql_str(f)}, hive_partitioning=false)").fetchone()[0]
        kept, dropped = kept + after, dropped + before - after
    if dropped:
        recount_host_ops(con, files)
    return kept, dropped


def _host_ops_files(kernel_file: Path) -> List[Path]:
    """Staged ``host_ops`` Parquet files of the partition holding a staged ``kernels`` file
    (``<staging>/kernels/run_id=…/side=…/rank=…/x.parquet`` → ``<staging>/host_ops/run_id=…/…/*.parquet``)."""
    parts = list(kernel_file.parent.parts)
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "kernels" and i + 1 < len(parts) and parts[i + 1].startswith("run_id="):
            d = Path(*parts[:i], "host_ops", *parts[i + 1:])
            return sorted(d.glob("*.parquet")) if d.is_dir() else []
    return []


def recount_host_ops(con, kernel_files: Sequence[Path]) -> int:
    """Recompute ``host_ops.kernel_count`` of the captures in staged ``kernel_files`` after a step filter
    dropped kernels, so a host op no longer counts kernels that are not in the lake (issue 12 item 3).

    Only rows of those captures with a non-NULL ``kernel_count`` change (text exports leave it NULL: no
    host link). Returns the number of host-op rows whose count changed."""
    kernel_files = [Path(f) for f in kernel_files]
    host = sorted({h for f in kernel_files for h in _host_ops_files(f)})
    if not kernel_files or not host:
        return 0
    kf = "[" + ", ".join(sql_str(f) for f in kernel_files) + "]"
    counts = (f"SELECT capture_id, host_op_id, count(*) AS n FROM read_parquet({kf}, hive_partitioning=false) "
              "WHERE host_op_id IS NOT NULL GROUP BY ALL")
    caps = f"SELECT DISTINCT capture_id FROM read_parquet({kf}, hive_partitioning=false)"
    changed = 0
    for h in host:
        src = f"read_parquet({sql_str(h)}, hive_partitioning=false)"
        new = (f"CASE WHEN o.kernel_count IS NOT NULL AND o.capture_id IN ({caps}) "
               "THEN coalesce(k.n, 0) ELSE o.kernel_count END")
        n = con.execute(f"SELECT count(*) FROM {src} o LEFT JOIN ({counts}) k USING (capture_id, host_op_id) "
                        f"WHERE o.kernel_count IS DISTINCT FROM {new}").fetchone()[0]
        if not n:
            continue
        tmp = h.with_name(h.name + ".steps")
        con.execute(f"COPY (SELECT o.* REPLACE ({new} AS kernel_count) FROM {src} o "
                    f"LEFT JOIN ({counts}) k USING (capture_id, host_op_id)) TO {sql_str(tmp)} "
                    "(FORMAT parquet, COMPRESSION zstd)")
        os.replace(tmp, h)
        changed += int(n)
    return changed


def common_steps(per_capture: Sequence[Sequence[int]]) -> List[int]:
    """Steps every capture with step markers covers (intersection), sorted; [] when none is common."""
    sets = [set(s) for s in per_capture if s]
    return sorted(set.intersection(*sets)) if sets else []
