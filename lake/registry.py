"""The run registry across runs: list runs, remove a run, rebuild safely beside readers.

Every ingest writes one ``runs`` row (:mod:`tilake.lake.schema`: model id and family, step, parsed RL
config, tool versions, host, created_at, tags); a dump analysis writes one ``dump_runs`` row.
This module reads those raw tables (not the warehouse, so listing works before any build and
never touches the warehouse lock) and removes runs.

Readers and the writer never share ``warehouse.duckdb``. DuckDB locks a database file per
process: a read-write open fails while another process holds it read-only ("Could not set lock
on file ... Conflicting lock is held"), and a read-only open fails while a writer holds it. So
:func:`build_swapped` copies the warehouse into ``<lake>/.build/warehouse.duckdb`` (same file
name, so the catalog name that dbt writes into view definitions stays ``warehouse``), runs dbt
on the copy with a generated profile, then ``os.replace``-s it over ``warehouse.duckdb``.
A reader that already has the old file open keeps reading the old snapshot (the inode lives
until it closes); a reader opening afterwards sees the new one; neither blocks the build.
"""
from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, TypedDict, Union

from tilake.errors import TilakeError
from tilake.lake import schema
from tilake.lake.commit import MANIFESTS, check_format, read_manifest, settle
from tilake.lake.duck import connect
from tilake.lake.store import Lake, raw_source, validate_run_id
from tilake.lake.warehouse import build_swapped, drop_run_rows

UNKNOWN = "unknown"

# tools whose versions the registry shows first (names normalised: lower case, '_' -> '-')
KNOWN_TOOLS = ("torch-npu", "cann", "vllm", "vllm-ascend", "megatron-core", "msprobe", "torch")


def normalise_tool(name: str) -> str:
    """Tool name as the trend marts key it: lower case, ``_`` → ``-`` (``torch_npu`` → ``torch-npu``)."""
    return str(name).strip().lower().replace("_", "-")


def model_family_for(model_path: Optional[Union[str, Path]] = None, model_id: Optional[str] = None) -> Tuple[str, str]:
    """``(family, source)`` of a model for the ``runs.model_family`` column.

    The family is the model's ``config.json`` ``model_type`` (HuggingFace config; ``qwen3_moe`` →
    ``qwen3``, the part before the first ``_``), else the leading letters+version of the model id's
    last path part (``Qwen/Qwen3-0.6B`` → ``qwen3``), else ``unknown``. ``source`` says which.

    Args:
        model_path: a model folder (holding ``config.json``) or the ``config.json`` file itself.
        model_id: e.g. ``Qwen/Qwen3-0.6B``.
    Raises:
        nothing: an unreadable or malformed ``config.json`` falls through to the model id.
    """
    if model_path:
        p = Path(model_path).expanduser()
        cj = p if p.name == "config.json" else p / "config.json"
        try:
            mt = json.loads(cj.read_text(encoding="utf-8")).get("model_type")
            if mt:
                return str(mt).split("_")[0].lower(), f"model_type in {cj}"
        except (OSError, ValueError, AttributeError):
            pass
    if model_id and model_id != UNKNOWN:
        m = re.match(r"[a-z]+(?:\d+(?:\.\d+)?)?", str(model_id).rstrip("/").split("/")[-1].lower())
        if m:
            return m.group(0), "model id"
    return UNKNOWN, "model unknown"


# ---------------------------------------------------------------------------------- listing


class RunListing(TypedDict):
    """One run as :func:`list_runs` lists it (``tilake runs``; ``--json`` writes it key for key)."""

    run_id: str
    # raw ``runs`` holds the run (a profiler ingest) / raw ``dump_runs`` does (a dump analysis)
    has_profile: bool
    has_dumps: bool
    model_id: Optional[str]
    model_family: Optional[str]
    step: Optional[int]
    host: Optional[str]
    kind: Optional[str]
    # tool → version (:func:`tool_versions_of`)
    tool_versions: Dict[str, str]
    # the run's tags, ``tool.*`` excluded
    tags: Dict[str, str]
    # naive UTC
    created_at: Optional[datetime]
    # setting name → value (:func:`settings_of`)
    settings: Dict[str, Any]
    # None = the default phases
    phases: Optional[str]
    train_kernels: Optional[int]
    infer_kernels: Optional[int]
    captures: Optional[int]
    captures_not_usable: Optional[int]
    dump_verdict: Optional[str]
    dump_consistency: Optional[str]

_LIST_SQL = """
with r as (
    select * from {runs}
    qualify row_number() over (partition by run_id order by created_at desc nulls last) = 1
),
d as (
    select run_id, created_at, verdict, consistency
    from {dumps}
    qualify row_number() over (partition by run_id order by created_at desc nulls last) = 1
),
c as (
    select run_id,
           coalesce(sum(kernel_count) filter (where side = 'train'), 0) as train_kernels,
           coalesce(sum(kernel_count) filter (where side = 'infer'), 0) as infer_kernels,
           count(*) as captures,
           count(*) filter (where status not in ('ok', 'host_fallback')) as captures_not_usable
    from {captures}
    group by run_id
),
ids as (select run_id from r union select run_id from d)
select ids.run_id, r.run_id is not null as has_profile, d.run_id is not null as has_dumps,
       r.model_id, r.model_family, r.step, r.host, r.kind, r.tool_versions, r.tags,
       coalesce(r.created_at, d.created_at) as created_at, r.settings, r.phases,
       c.train_kernels, c.infer_kernels, c.captures, c.captures_not_usable,
       d.verdict as dump_verdict, d.consistency as dump_consistency
from ids left join r using (run_id) left join d using (run_id) left join c using (run_id)
order by created_at, run_id
"""


def _json_obj(text: Optional[str]) -> Dict[str, Any]:
    if not text:
        return {}
    try:
        v = json.loads(text)
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def tool_versions_of(tool_versions: Optional[str], tags: Optional[str]) -> Dict[str, str]:
    """Scalar tool versions of a ``runs`` row: ``tool_versions`` JSON plus ``tool.<name>`` tags (tag wins).

    Same rule as the dbt model ``int_run_tool_versions_unnested``. Names normalised by
    :func:`normalise_tool`; keys starting with ``_`` and non-scalar values are skipped.
    """
    out: Dict[str, str] = {}
    for k, v in _json_obj(tool_versions).items():
        if not str(k).startswith("_") and isinstance(v, (str, int, float)) and not isinstance(v, bool) and v != "":
            out[normalise_tool(k)] = str(v)
    for k, v in _json_obj(tags).items():
        if str(k).lower().startswith("tool.") and isinstance(v, (str, int, float)) and v != "":
            out[normalise_tool(str(k)[5:])] = str(v)
    return out


def settings_of(settings: Optional[str]) -> Dict[str, Any]:
    """``runs.settings`` JSON (``{name: {value, source}}``) → ``{name: value}`` (docs/phases.md)."""
    return {k: (v.get("value") if isinstance(v, dict) else v) for k, v in _json_obj(settings).items()}


_WAREHOUSE_SQL = """
select r.run_id, r.has_profile, r.has_dumps, r.model_id, r.model_family, r.step, r.host, r.kind,
       r.tool_versions, r.tags, r.created_at, r.settings, r.phases,
       sum(h.kernels) filter (where h.side = 'train') as train_kernels,
       sum(h.kernels) filter (where h.side = 'infer') as infer_kernels,
       sum(h.captures) as captures,
       sum(h.captures - h.captures_ok - h.captures_host_fallback) as captures_not_usable,
       r.dump_verdict, r.dump_consistency
from fct_run_registry r
left join fct_run_capture_health h on h.run_id = r.run_id
group by all
order by r.created_at, r.run_id
"""


def warehouse_is_current(lake: Lake) -> bool:
    """True when no run was ingested, re-ingested or removed since the warehouse was last written.

    Every run write or removal renames a folder inside ``raw/runs``, ``raw/dump_runs`` or
    ``raw/captures`` (:mod:`tilake.lake.store`), which updates that folder's mtime; a build
    writes ``warehouse.duckdb`` afterwards (both under the lake's writer lock).
    """
    try:
        built = lake.warehouse.stat().st_mtime
    except FileNotFoundError:
        return False
    for t in ("runs", "dump_runs", "captures"):
        d = lake.raw / t
        if d.is_dir() and d.stat().st_mtime > built:
            return False
    return True


def _from_warehouse(lake: Lake) -> Optional[List[Dict[str, Any]]]:
    import duckdb

    try:
        with lake.reading(raw=False) as con:
            cur = con.execute(_WAREHOUSE_SQL)
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, r)) for r in cur.fetchall()]
    except TilakeError:
        return None          # held by a writer that does not swap: read the raw tables instead
    except duckdb.Error:
        return None          # built before the trend marts existed


def list_runs(lake: Lake, source: str = "auto") -> List[RunListing]:
    """Every run of the lake, oldest first.

    Args:
        source: ``raw`` reads the raw ``runs``/``dump_runs``/``captures`` Parquet (always current,
            works before any build; ~6 s for 1 000 runs); ``warehouse`` reads ``fct_run_registry``
            and ``fct_run_capture_health`` (milliseconds); ``auto`` uses the warehouse when
            :func:`warehouse_is_current`, else raw.

    The model family falls back to the model id's leading name and the step to a ``step`` tag,
    as in the registry mart.

    Returns:
        :class:`RunListing` rows: ``run_id, has_profile, has_dumps, model_id, model_family, step, host, kind,
        tool_versions`` (dict, see :func:`tool_versions_of`), ``tags`` (dict, ``tool.*`` excluded),
        ``settings`` (dict name → value, :func:`settings_of`), ``phases`` (None = default),
        ``created_at`` (naive UTC datetime), ``train_kernels, infer_kernels, captures,
        captures_not_usable, dump_verdict, dump_consistency``. Empty list for an empty/missing lake.
    Raises:
        TilakeError: the raw tables cannot be read (message names the lake); the registry folders are gone
        though run records exist; the lake has a newer format.
    """
    if lake.root.is_dir():
        check_format(lake.root)   # a lake of a newer tilake: one line
    settle(lake)   # a commit a killed writer sealed is completed before the registry is read
    for t in ("runs", "dump_runs"):   # runs were committed but their registry folder is gone: say so
        if not (lake.raw / t).is_dir() and any(t in read_manifest(lake.root, f.stem)
                                                for f in (lake.root / MANIFESTS).glob("*.json")):
            raise TilakeError(f"the run registry folder raw/{t} is missing though runs were committed to it",
                              path=lake.raw / t, hint="run `tilake check`; re-ingest the runs it names")
    if not (lake.raw / "runs").is_dir() and not (lake.raw / "dump_runs").is_dir():
        return []
    rows = None
    if source == "warehouse" or (source == "auto" and warehouse_is_current(lake)):
        rows = _from_warehouse(lake)
    if rows is None:
        rows = _list_raw(lake)
    for r in rows:
        r["tool_versions"] = tool_versions_of(r.pop("tool_versions"), r.get("tags"))
        r["tags"] = {k: v for k, v in _json_obj(r.get("tags")).items() if not str(k).lower().startswith("tool.")}
        r["settings"] = settings_of(r.get("settings"))
        # same fills as the dbt model int_runs_versioned: family from the model id, step from a tag
        if r["has_profile"] and (r["model_family"] or UNKNOWN) == UNKNOWN and (r["model_id"] or UNKNOWN) != UNKNOWN:
            r["model_family"] = model_family_for(None, r["model_id"])[0]
        if r["step"] is None and str(r["tags"].get("step", "")).strip().lstrip("-").isdigit():
            r["step"] = int(str(r["tags"]["step"]).strip())
    return rows


def _list_raw(lake: Lake) -> List[Dict[str, Any]]:
    sql = _LIST_SQL.format(runs=raw_source(lake, "runs"), dumps=raw_source(lake, "dump_runs"),
                           captures=raw_source(lake, "captures"))
    last: Optional[Exception] = None
    for _ in range(3):  # a concurrent ingest may swap a partition folder between glob and read
        con = connect()
        try:
            con.execute("SET enable_progress_bar = false")
            cur = con.execute(sql)
            cols = [d[0] for d in cur.description]
            rows = [dict(zip(cols, r)) for r in cur.fetchall()]
            break
        except Exception as exc:  # duckdb.IOException / InvalidInputException mid-swap
            last = exc
            time.sleep(0.2)
        finally:
            con.close()
    else:
        raise TilakeError(f"cannot read the run registry: {str(last).splitlines()[0]}", path=lake.raw)
    return rows


def run_tables(lake: Lake, run_id: str) -> List[str]:
    """Raw tables holding a partition of ``run_id``."""
    validate_run_id(run_id)
    return [t for t in schema.TABLES if (lake.raw / t / f"run_id={run_id}").is_dir()]


def remove_run(lake: Lake, run_id: str, rebuild: bool = True):
    """Delete every raw partition of ``run_id`` and take its rows out of the warehouse
    (:func:`~tilake.lake.warehouse.drop_run_rows`; a full :func:`build_swapped` when that has no record).

    Returns:
        ``(tables_removed: list[str], build_result | None)``.
    Raises:
        TilakeError: invalid id, or no partition of that run exists (lake unchanged);
        LakeBusyError: another writer holds the lake. A failed rebuild raises nothing here:
        the caller reads ``build_result`` (:meth:`BuildResult.raise_if_failed`).
    """
    validate_run_id(run_id)
    with lake.writing():   # one lock and one ensure for the removal and the rebuild
        tables = run_tables(lake, run_id)
        if not tables:
            known = [r for r in sorted({p.name.split("=", 1)[1] for t in schema.TABLES
                                        for p in (lake.raw / t).glob("run_id=*")})][:5]
            raise TilakeError(f"no run {run_id!r} in this lake", path=lake.root,
                              hint=("runs: " + ", ".join(known) + (" …" if len(known) == 5 else "")) if known
                              else "the lake has no runs")
        lake.remove_run(run_id)
        # the run's rows leave the marts (keyed by run); a full rebuild only without a usable record
        res = (drop_run_rows(lake, run_id) or build_swapped(lake)) if rebuild else None
    return tables, res


# ---------------------------------------------------------------------------------- two runs

DIFF_QUERIES = {
    "kernels": ("select side, op_type, change, base_calls, run_calls, category, module, base_evidence, run_evidence "
                "from fct_change_kernels_any where base_run_id = ? and run_id = ? order by side, change, op_type"),
    "grades": ("select module, base_grade, run_grade, change from fct_change_grades_any "
               "where base_run_id = ? and run_id = ? order by module"),
    "divergence": ("select base_boundary, run_boundary, base_position, run_position, position_delta, movement "
                   "from fct_change_divergence_any where base_run_id = ? and run_id = ?"),
}


def diff_runs(lake: Lake, base_run_id: str, run_id: str) -> Dict[str, Tuple[List[str], List[tuple]]]:
    """What changed from ``base_run_id`` to ``run_id``: kernels added/removed per side, grades that
    changed, first divergence movement (the ``fct_change_*_any`` views, read-only).

    Returns:
        ``{"kernels"|"grades"|"divergence": (columns, rows)}``; divergence rows are empty when
        neither run has a dump analysis.
    Raises:
        TilakeError: unknown run id (not in ``fct_run_registry``), no warehouse, DuckDB errors.
    """
    import duckdb

    from tilake.lake.sql import duckdb_error_line, open_readonly

    for r in (base_run_id, run_id):
        validate_run_id(r)
    con = open_readonly(lake, "")
    try:
        try:
            known = {r[0] for r in con.execute("select run_id from fct_run_registry where run_id in (?, ?)",
                                               [base_run_id, run_id]).fetchall()}
            missing = [r for r in (base_run_id, run_id) if r not in known]
            if missing:
                raise TilakeError(f"run {missing[0]!r} is not in the warehouse",
                                  hint="`tilake runs` lists runs; `tilake build` after an ingest")
            out = {}
            for name, sql in DIFF_QUERIES.items():
                cur = con.execute(sql, [base_run_id, run_id])
                out[name] = ([d[0] for d in cur.description], cur.fetchall())
            return out
        except duckdb.Error as exc:
            raise TilakeError(duckdb_error_line(exc), path=lake.warehouse) from exc
    finally:
        con.close()
