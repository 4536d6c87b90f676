"""The tools of ``tilake mcp`` as plain functions: JSON-ready values in and out, no MCP import.

Each tool wraps the function the matching command calls and returns what the command's ``--json`` prints
(:mod:`tilake.agent.server` registers them with the MCP SDK). A :class:`Workspace` holds the only places a
tool writes: the server's lake (``--lake``) and its output root (``--out``; a tool's ``out`` is a folder
below it). Inputs (profiler folders, dumps, launch scripts, budget files) are read where they are and
never written. SQL goes through the CLI's read-only guard (:func:`tilake.lake.sql.query`: SELECT-type
statements only, the warehouse opened read-only, no file access outside the lake, locked configuration),
and no tool runs or edits the user's launch script: the scan tool is the dry run (with ``--profiler torch``
a fixed probe checks the environment; replaying the script's ``source``/``conda activate`` lines needs
``allow_preamble=True``).

Errors are :class:`~tilake.errors.TilakeError` with the CLI's one line; the server turns them into a tool
error (``isError``) whose text is ``error: <line>``.
"""
from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from tilake.errors import TilakeError
from tilake.lake.store import Lake

Json = Dict[str, Any]
MAX_ROWS_LIMIT = 10_000
"""The most rows one ``sql`` call returns (``max_rows`` above it is refused)."""


def plain(obj: Any) -> Any:
    """``obj`` as JSON values only (paths, datetimes, Decimals and enum words as text), via the CLI's JSON writer."""
    from tilake.reports.json_out import json_text

    return json.loads(json_text(obj))


def plain_object(obj: Any) -> Json:
    """:func:`plain` of a JSON object (a mapping or a record whose JSON form is one): the tools' answers."""
    out = plain(obj)
    if not isinstance(out, dict):
        raise TypeError(f"expected a JSON object, got {type(out).__name__}")
    return out


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Anything a pipeline prints on stdout goes to stderr (stdout is the MCP wire under stdio)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


@dataclass(frozen=True)
class Workspace:
    """Where the server's tools may write: ``lake`` (the lake folder) and ``out_root`` (None: no tool
    writes files outside the lake; tools that need an ``out`` folder refuse)."""

    lake_path: Optional[Path] = None
    out_root: Optional[Path] = None

    @property
    def lake(self) -> Lake:
        """The server's :class:`~tilake.lake.store.Lake` (``--lake``, else ``$TILAKE_LAKE``, else ``./tilake-lake``)."""
        return Lake(self.lake_path)

    def out(self, name: Optional[str]) -> Path:
        """The output folder ``name`` below ``out_root`` (created when missing).

        Raises:
            TilakeError: the server has no ``--out``; ``name`` is empty, absolute outside ``out_root`` or
                climbs out of it (``..``); the folder is inside the lake or not writable.
        """
        from tilake.files import check_out_dir

        if self.out_root is None:
            raise TilakeError("this server writes no output files: start it with `tilake mcp --out DIR`")
        if not name or not str(name).strip():
            raise TilakeError("give out: a folder name below the server's --out " f"({self.out_root})")
        root = Path(self.out_root).resolve()
        target = (root / str(name).strip()).resolve()
        if target != root and root not in target.parents:
            raise TilakeError(f"out {name!r} is outside the server's --out folder {root}")
        return check_out_dir(target, self.lake.root)


# ------------------------------------------------------------------------------ the tools

def scan_dry_run(script: str, script_args: Optional[List[str]] = None, profiler: str = "npu",
                 allow_preamble: bool = False) -> Json:
    """Stages 1–2 of ``tilake scan --dry-run --format json``: the parsed config with each value's source,
    the environment checks and the planned profiler block (a diff). Nothing is written, the script is not run.

    ``profiler="torch"`` checks the environment with a fixed probe (nothing of the script runs); with
    ``allow_preamble`` it replays the script's unconditional preamble lines first.

    Raises:
        TilakeError: bad script.
    """
    from tilake.pipeline.scan import scan
    from tilake.reports.scan_console import ScanConsole

    lake = Lake(None)   # a dry run writes nothing; the lake only names the default run id's home
    with quiet():
        res = scan(Path(script), lake, script_args=list(script_args or ()), dry_run=True, progress=False,
                   profiler=profiler, console=ScanConsole(stderr=True), allow_preamble=allow_preamble)
    return plain_object(res.to_json())


def run_profile(ws: Workspace, profiler_output: str, out: str, run_id: Optional[str] = None,
                model_id: Optional[str] = None, model_family: Optional[str] = None, lang: str = "en",
                allow_missing: bool = False, phases: Optional[str] = None) -> Json:
    """``tilake run --json``: ingest a verl ``profiler_output/`` folder into the server's lake, build, write the
    operator diff report into ``out`` (below ``--out``). Returns the run summary (grade counts, evidence, outputs).

    Raises:
        TilakeError: as ``tilake run`` (no captures, lake busy, dbt failure …), or a bad ``out``.
    """
    from tilake.pipeline.profile import run_command
    from tilake.reports.run_console import run_summary_json

    if lang not in ("zh", "en"):
        raise TilakeError(f"lang must be zh or en, not {lang!r}")
    out_dir, lake = ws.out(out), ws.lake
    with quiet():
        res = run_command(Path(profiler_output), lake, run_id, out_dir=out_dir, lang=lang, allow_missing=allow_missing,
                          progress=False, model_id=model_id, model_family=model_family, phases=phases)
    return plain_object(run_summary_json(res, lake.root))


def dumps_analyze(ws: Workspace, train: str, infer: str, out: str, map_name: str = "auto",
                  run_id: Optional[str] = None, request_index: Optional[int] = None, build: bool = False) -> Json:
    """``tilake dumps analyze``: compare two msprobe dumps boundary by boundary into ``out``. Returns
    ``{"summary": <the --json summary>, "report_source": <report_source.json>}`` (the single source of facts
    of the dump reports). ``run_id``: also write the analysis into the server's lake; ``build``: then build the
    dump marts (so ``sql``/``trend``/``explain`` see it in the marts).

    Raises:
        TilakeError: bad dumps or map, a bad ``out``, lake busy.
    """
    from tilake.pipeline.dumps import run_analyze

    out_dir = ws.out(out)
    with quiet():
        res = run_analyze(Path(train), Path(infer), out_dir, map_name=map_name, request_index=request_index,
                          lake_path=ws.lake.root if run_id else None, run_id=run_id, build=build,
                          show_progress=False)
    src = json.loads(Path(res.outputs["report_source"]).read_text(encoding="utf-8"))
    return {"summary": plain(res.to_dict()), "report_source": src}


def dumps_gate(ws: Workspace, train: str, infer: str, map_name: str = "auto", budget: Optional[str] = None,
               run_id: Optional[str] = None, out: Optional[str] = None, build: bool = False) -> Json:
    """``tilake dumps gate --json``: the bitwise acceptance gate (``passed`` true only when every mapped
    boundary is bitwise equal or within the budget file's ULP; ``line`` names the first failing boundary).
    ``run_id``: record the gate in the server's lake (``build``: and build the dump marts, ``fct_dump_gates``
    among them); ``out``: also write the analysis outputs there.

    Raises:
        TilakeError: bad budget file, dumps or map; a bad ``out``; lake busy.
    """
    from tilake.pipeline.gate import run_gate

    with quiet():
        res = run_gate(Path(train), Path(infer), map_name=map_name, budget=Path(budget) if budget else None,
                       out_dir=ws.out(out) if out else None, lake_path=ws.lake.root if run_id else None,
                       run_id=run_id, build=build, show_progress=False)
    return plain_object(res.to_dict())


def sql(ws: Workspace, query: str, max_rows: int = 200, params: Optional[Dict[str, str]] = None) -> Json:
    """``tilake sql`` (read-only, the CLI's guard): ``{"columns", "rows", "row_count", "truncated"}``; at most
    ``max_rows`` rows come back (``truncated`` says whether there were more).

    Raises:
        TilakeError: a statement that is not SELECT-type, file access outside the lake, no warehouse,
            a DuckDB error (one line, as the CLI prints it); ``max_rows`` out of 1..10000.
    """
    from tilake.lake.sql import query as run_query

    if not 1 <= int(max_rows) <= MAX_ROWS_LIMIT:
        raise TilakeError(f"max_rows must be 1..{MAX_ROWS_LIMIT}, got {max_rows}")
    cols, rows = run_query(ws.lake, query, False, dict(params or {}), max_rows=int(max_rows))
    return {"columns": cols, "rows": plain([list(r) for r in rows[:max_rows]]),
            "row_count": min(len(rows), max_rows), "truncated": len(rows) > max_rows}


def runs(ws: Workspace) -> Json:
    """``tilake runs --json``: every run of the server's lake (oldest first)."""
    from tilake.lake.registry import list_runs

    lake = ws.lake
    return plain_object({"lake": lake.root, "runs": list_runs(lake)})


def trend(ws: Workspace, metric: str, by: str = "none", x: str = "run", fail_if: Optional[str] = None,
          out: Optional[str] = None) -> Json:
    """``tilake trend --json``: a named trend's series; ``fail_if`` (regress | increase | decrease | change)
    adds the CI check (``exit_code`` 1: a series regressed, 3: no series has two points); ``out``: also
    draw the chart there. ``metric="list"`` returns the named trends.

    Raises:
        TilakeError: unknown trend or series, no warehouse, ``regress`` on a trend without a direction.
    """
    from tilake.pipeline.trend import check_regression, list_trends, trend_command

    if metric == "list":
        return {"trends": [{"name": n, "title": t, "unit": u} for n, t, u in list_trends()]}
    with quiet():
        res, chart = trend_command(ws.lake, metric, by=by, x=x, chart=out is not None,
                                   out_dir=ws.out(out) if out else None)
    check = check_regression(res, fail_if) if fail_if else None
    return plain_object({"metric": metric, "title": res.trend.title, "unit": res.trend.unit, "by": by, "x": x,
                  "chart": chart, "series": [{"label": se.label, "points": [
                      {"x": p[0], "value": p[1], "runs": p[2], "last_run_id": p[3]} for p in se.points]}
                      for se in res.series],
                  **({"fail_if": {"check": fail_if, "lines": check.lines, "exit_code": int(check.exit_code)}}
                     if check else {})})
