"""``tilake check``: verify every run's files against its record and the run registry.

Each commit writes the run's record ``<lake>/manifest/<run_id>.json`` (every Parquet file of the run, table
by table, with its size; :mod:`tilake.lake.commit`). :func:`check_lake` compares the lake with them:

* a recorded file that is missing, of another size, or whose Parquet footer cannot be read;
* a run whose record lists the registry table (``runs``/``dump_runs``) but whose registry row is gone, and a
  registry folder that is missing altogether (a build would drop every run without a word);
* a partition folder or data file no commit recorded (written by hand, or left by a tool);
* lake internals that are links or of the wrong kind, a lake of a newer format, a warehouse DuckDB cannot open.

:func:`missing_recorded` is the cheap part (a ``stat`` per recorded file) that ``tilake build`` runs first.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List

from tilake.errors import TilakeError
from tilake.lake import commit as C
from tilake.lake import schema
from tilake.lake.duck import connect, sql_str
from tilake.lake.read import error_line

REGISTRY_TABLES = ("runs", "dump_runs")


@dataclass
class CheckReport:
    """What :func:`check_lake` found: ``problems`` (one line each; any makes ``tilake check`` exit 1),
    ``runs`` recorded and ``files`` verified."""

    problems: List[str] = field(default_factory=list)
    runs: int = 0
    files: int = 0
    format: int = C.FORMAT_VERSION


def records(root: Path) -> Dict[str, Dict[str, Dict[str, int]]]:
    """Every run record of the lake: ``{run_id: {table: {file: bytes}}}``."""
    d = root / C.MANIFESTS
    if not d.is_dir() or d.is_symlink():
        return {}
    out = {}
    for f in sorted(d.glob("*.json")):
        if not f.name.startswith("."):
            out[f.name[:-5]] = C.read_manifest(root, f.name[:-5])
    return out


def missing_recorded(root: Path, limit: int = 5) -> List[str]:
    """Recorded files (relative to the lake) that are missing, at most ``limit`` (a ``stat`` per file)."""
    out: List[str] = []
    for _run, tables in records(root).items():
        for files in tables.values():
            for rel in files:
                if not os.path.lexists(root / rel):
                    out.append(rel)
                    if len(out) >= limit:
                        return out
    return out


def refuse_missing(lake) -> None:
    """Before a build: refuse a lake that lost files its commits recorded (the build would drop their rows).

    Raises:
        TilakeError: one line naming the first missing file and how many were found (up to 5 looked for).
    """
    gone = missing_recorded(lake.root)
    if gone:
        more = f" and {len(gone) - 1} more" if len(gone) > 1 else ""
        raise TilakeError(f"the lake lost files its commits recorded: {gone[0]}{more}; a build would drop their "
                          "rows without a word", path=lake.root,
                          hint="run `tilake check` for the list; re-ingest the runs it names or `tilake runs rm` them")


def check_lake(lake) -> CheckReport:
    """Verify the lake (see the module docstring); never raises for what it finds, and writes nothing but
    the completion of a commit a killed writer sealed (:func:`tilake.lake.commit.settle`).

    Raises:
        TilakeError: there is no lake at ``lake.root``.
    """
    root, rep = lake.root, CheckReport()
    if not root.is_dir():
        raise TilakeError("no lake here", path=root)
    try:
        rep.format = C.check_format(root)
    except TilakeError as exc:
        rep.problems.append(str(exc))
        return rep
    try:
        C.check_internals(root, schema.TABLES)
        C.settle(lake)
    except TilakeError as exc:
        rep.problems.append(str(exc))
        return rep
    if rep.format < C.FORMAT_VERSION:
        rep.problems.append(f"{root}: the lake has format {rep.format} (no run records yet); any tilake write "
                            "command migrates it, then check again")
    recs = records(root)
    rep.runs = len(recs)
    con = connect()
    try:
        for run_id, tables in recs.items():
            for files in tables.values():
                for rel, size in files.items():
                    rep.files += 1
                    _check_file(con, root, run_id, rel, size, rep.problems)
        _check_registry(con, lake, recs, rep.problems)
    finally:
        con.close()
    _check_unrecorded(root, recs, rep.problems)
    _check_warehouse(lake, rep.problems)
    return rep


def _check_file(con, root: Path, run_id: str, rel: str, size: int, problems: List[str]) -> None:
    p = root / rel
    try:
        have = os.lstat(p).st_size
    except FileNotFoundError:
        problems.append(f"{p}: missing (run {run_id}; its commit recorded it)")
        return
    if have != size:
        problems.append(f"{p}: {have} bytes, its commit recorded {size} (run {run_id}; changed after the commit)")
        return
    try:
        con.execute(f"SELECT num_rows FROM parquet_file_metadata({sql_str(p)})").fetchall()
    except Exception as exc:   # duckdb.Error: not Parquet, truncated footer
        problems.append(f"{p}: not a readable Parquet file (run {run_id}): {error_line(exc)[:200]}")


def _check_registry(con, lake, recs, problems: List[str]) -> None:
    for table in REGISTRY_TABLES:
        want = sorted(r for r, t in recs.items() if table in t)
        if not want:
            continue
        if not (lake.raw / table).is_dir():
            problems.append(f"{lake.raw / table}: the run registry folder is missing ({len(want)} run(s) recorded: "
                            f"{', '.join(want[:5])}{' …' if len(want) > 5 else ''})")
            continue
        have = set()
        for rid in want:
            part = lake.raw / table / f"run_id={rid}"
            files = sorted(str(f) for f in part.rglob("*.parquet") if not f.name.startswith(".")) if part.is_dir() else []
            if not files:
                continue
            try:
                src = "[" + ", ".join(sql_str(f) for f in files) + "]"
                if con.execute(f"SELECT count(*) FROM read_parquet({src}, hive_partitioning=false)").fetchone()[0]:
                    have.add(rid)
            except Exception:   # a corrupt file: named by _check_file already
                have.add(rid)
        for rid in want:
            if rid not in have:
                problems.append(f"{lake.raw / table / f'run_id={rid}'}: run {rid} is not in the run registry "
                                f"({table}) though its commit wrote it")


def _check_unrecorded(root: Path, recs, problems: List[str]) -> None:
    raw = root / "raw"
    for table in schema.TABLES:
        d = raw / table
        if not d.is_dir():
            continue
        for part in sorted(d.glob("run_id=*")):
            rid = part.name.split("=", 1)[1]
            known = recs.get(rid, {}).get(table)
            if known is None:
                problems.append(f"{part}: no commit recorded this partition (written by hand or by another tool)")
                continue
            if part.is_symlink() or not part.is_dir():
                problems.append(f"{part}: a link or not a folder where a partition should be")
                continue
            for rel in C.list_files(part, root):
                if rel not in known:
                    problems.append(f"{root / rel}: no commit recorded this file (run {rid})")


def _check_warehouse(lake, problems: List[str]) -> None:
    if not lake.warehouse.exists():
        return
    from tilake.lake.read import reading_file

    try:
        with reading_file(lake.warehouse, "cannot open the warehouse") as con:
            con.execute("SELECT count(*) FROM information_schema.tables").fetchone()
    except TilakeError as exc:
        problems.append(str(exc) + " — `tilake build` writes a new one from raw/")
    except Exception as exc:
        problems.append(f"{lake.warehouse}: cannot read the warehouse: {error_line(exc)[:200]} — `tilake build` "
                        "writes a new one from raw/")
