"""The warehouse: the one dbt build door of the lake, in-process (``dbtRunner``).

:func:`build_swapped` owns the build lifecycle, in a fixed order (the dbt-duckdb
``Environment.initialize_db`` idea: one module, one order):

1. **lock** and 2. **ensure** — :meth:`tilake.lake.store.Lake.writing` (free when the command holds it);
3. **copy** — ``warehouse.duckdb`` (and a left-over WAL) into ``<lake>/.build/``;
4. **profile** — a generated ``profiles.yml`` pointing dbt at the copy;
5. **dbt** — :func:`dbt_build` on the copy (full refresh when the project changed; the nodes it runs:
   :func:`build_plan`), or, for a lake built by this very project, no dbt at all: :func:`replay_nodes`
   refills the tables from dbt's own compiled SELECTs (:func:`_compile_replay`; ``tilake runs rm`` too);
6. **checkpoint** — fold the copy's WAL into the file;
7. **swap** — ``os.replace`` the copy over ``warehouse.duckdb`` (readers keep their snapshot); only
   when dbt succeeded (no error, no failing test): a failed build leaves the lake as it was.

The project folder ships inside the package (``tilake/dbt_project``); dbt's ``target/`` and
logs go to ``<lake>/.dbt/`` so an installed package is never written to. ``TILAKE_LAKE`` is set
for the profile and the sources. Plain ``dbt build`` from a shell works too::

    cd dbt_project && TILAKE_LAKE=/abs/lake dbt build --profiles-dir .
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from tilake import settings
from tilake.errors import TilakeError
from tilake.files import atomic_path, atomic_write_text
from tilake.lake.build_result import BuildResult, DbtCounts, DbtNode  # noqa: F401 (re-exported)
from tilake.lake.build_support import DbtProgress, InterruptGuard, suspect_runs  # noqa: F401 (re-exported)
from tilake.lake.duck import connect
from tilake.lake.store import Lake, lake_write_error
from tilake.progress import notice

PROJECT_DIR = Path(__file__).resolve().parents[1] / "dbt_project"
_FINGERPRINTED = ("models", "macros", "seeds", "dbt_project.yml")


def project_fingerprint(project: Optional[Path] = None) -> str:
    """sha256 (hex) over the dbt project's models, macros, seeds and ``dbt_project.yml`` (paths + bytes).

    ``project`` defaults to the packaged project; a project with user rules merged into its seeds
    (:mod:`tilake.lake.rules`) has another fingerprint, so changing rules triggers a full refresh.
    The tilake version is hashed too: an upgrade rebuilds everything once (:func:`build_plan`).
    """
    project = project or PROJECT_DIR
    from importlib import metadata

    try:
        version = metadata.version("tilake")
    except metadata.PackageNotFoundError:   # run from a source tree that is not installed
        version = ""
    h = hashlib.sha256(f"tilake {version}\0".encode())   # a tilake upgrade also refreshes (fast builds trust it)
    for top in _FINGERPRINTED:
        p = project / top
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
        for f in files:
            h.update(f.relative_to(project).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _project(lake: Lake):
    """The dbt project to run for ``lake`` and its rules record (see :mod:`tilake.lake.rules`)."""
    from tilake.lake import rules

    return rules.project_with_rules(PROJECT_DIR, rules.rules_dir(lake.root), lake.root / ".dbt" / "project")


_SAFE_PATH = re.compile(r"^[\w./ @%+=,:~-]+$")


def dbt_lake_root(root: Path) -> Path:
    """The lake root as handed to dbt (``TILAKE_LAKE``, profile path, source globs).

    dbt renders the profile with Jinja, dbt-duckdb fills ``external_location`` with ``str.format``,
    and DuckDB reads the source path as a glob inside a SQL string, so ``'``, ``{}``, ``[]``, ``*``,
    ``?`` or ``\\`` in the path break the build or, worse, make a glob match another folder
    (``/data/z[12]`` reads ``/data/z1``). Such a root is handed over as a symlink
    ``~/.cache/tilake/lake-links/<sha256 of the path, 16 hex>`` (``$XDG_CACHE_HOME`` honoured;
    the system temp folder if that path is itself unsafe); the link stays, so the staging views
    in the warehouse keep resolving. A safe path is returned unchanged.

    Raises:
        TilakeError: no safe folder for the link exists.
    """
    text = str(root)
    if _SAFE_PATH.match(text):
        return root
    cache = settings.user_cache_dir() / "lake-links"
    for base in (cache, Path(tempfile.gettempdir()) / "tilake-lake-links"):
        if not _SAFE_PATH.match(str(base)):
            continue
        try:
            base.mkdir(parents=True, exist_ok=True)
            link = base / hashlib.sha256(text.encode()).hexdigest()[:16]
            if not (link.is_symlink() and os.readlink(link) == text):
                with atomic_path(link) as tmp:
                    os.symlink(text, tmp)
            return link
        except OSError:
            continue
    raise TilakeError("the lake path has characters dbt/DuckDB cannot take in a path (' { } [ ] * ? \\) "
                      "and no folder for a safe link could be made", path=root,
                      hint="use a lake folder without those characters")


def with_ancestors(select: Sequence[str]) -> List[str]:
    """dbt selectors with their ancestors (``fct_x`` → ``+fct_x``; ``+x``, ``@x``, ``2+x`` kept).

    The per-run marts are incremental tables fed by other incremental tables and by
    ``int_runs_versioned`` (which runs are due): building a mart without its ancestors after an
    ingest would recompute it from stale upstream tables (or not at all) and report success.
    """
    return [s if s[:1] in ("+", "@") or s[:1].isdigit() else "+" + s for s in select]


def views_read_lake(warehouse: Path, root: Path) -> bool:
    """True when the staging views of ``warehouse`` read ``root``'s raw files.

    The views hold the absolute path of the lake that built them (dbt renders the sources with
    ``TILAKE_LAKE``): a lake copied or moved elsewhere must rebuild them, so the fast plan
    (:func:`build_plan`) is taken only when this holds. False when the file cannot be read.
    """
    import duckdb

    from tilake.lake.read import reading_file

    want = "'" + str(dbt_lake_root(root)).replace("'", "''") + "/raw/runs/"
    try:
        with reading_file(warehouse) as con:
            row = con.execute("select sql from duckdb_views() where view_name = 'stg_profiler__runs'").fetchone()
    except (TilakeError, duckdb.Error):
        return False
    return bool(row) and want in (row[0] or "")


def warehouse_project_sha(warehouse: Path) -> Optional[str]:
    """The project fingerprint recorded in ``warehouse`` by its last whole-project build without errors.

    Returns None when the warehouse does not exist; ``""`` when it has no record (built by an older
    tilake, by a plain ``dbt build`` without the var, or a build that failed).
    """
    if not warehouse.exists():
        return None
    import duckdb

    from tilake.lake.read import reading_file

    try:
        with reading_file(warehouse) as con:
            return con.execute("select project_sha256 from main.tilake_project_state").fetchone()[0] or ""
    except (TilakeError, duckdb.Error):
        return ""


@contextlib.contextmanager
def _env(**values: str):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _held_dbt_output():
    """Hold dbt's console output (stdout) and silence logging's own tracebacks while dbt runs.

    On a full disk every dbt log record fails to write into ``<lake>/.dbt/logs`` and
    ``logging.Handler.handleError`` prints a "--- Logging error ---" traceback for each (hundreds
    per build), and dbt prints its own traceback of the failed artifact write. The caller replays
    the held text unless the failure is the machine's (see :func:`_disk_failure`), which then
    ends in one line.
    """
    import io
    import logging

    old = logging.raiseExceptions
    logging.raiseExceptions = False
    held = io.StringIO()
    try:
        with contextlib.redirect_stdout(held):
            yield held
    finally:
        logging.raiseExceptions = old


class DbtInterrupted(TilakeError):
    """Ctrl-C while dbt built the warehouse (the built copy is discarded, so the warehouse is as it was)."""


def _interrupted(lake: Lake) -> DbtInterrupted:
    return DbtInterrupted("interrupted during dbt build; the lake is unchanged", path=lake.root)


def _join_new_threads(before: set, timeout_s: float = 300.0) -> None:
    """Wait (up to ``timeout_s`` s in all) for the threads dbt started, after a Ctrl-C stopped its build.

    dbt's ``_cancel_connections`` calls ``ThreadPool.terminate()``, which does not join a worker thread
    still running its node (CPython's ``Pool._terminate_pool`` joins workers only when they have a
    ``terminate``, i.e. processes), and dbt-duckdb cannot cancel a query. Exiting under such a thread
    tears the interpreter down while it is inside DuckDB, and the process aborts in C++ ("terminate
    called without an active exception", exit -6 instead of 2; seen once at a third of the nodes in
    tests/safety/test_wrong_data_and_interrupts.py). The worker ends after its current node (its pool sends it a
    sentinel), so this waits for that node, still under the lake's lock."""
    import time

    deadline = time.monotonic() + timeout_s
    for t in threading.enumerate():
        if t not in before and t is not threading.current_thread():
            t.join(max(0.0, deadline - time.monotonic()))


def _disk_failure(lake: Lake, res) -> Optional[TilakeError]:
    """One line naming the lake when dbt failed because the disk is full or the lake read-only."""
    if res.exception is not None:
        mapped = lake_write_error(lake.root, res.exception)
        if mapped is not None:
            return mapped
    for r in getattr(res.result, "results", None) or []:
        msg = str(getattr(r, "message", None) or "")
        if any(t in msg for t in ("No space left on device", "Disk quota exceeded", "Read-only file system")):
            return lake_write_error(lake.root, RuntimeError(f"{lake.root}: {msg}"))
    return None


# the nodes a fast build runs: every table dbt fills (per-run incremental marts and the whole-lake tables);
# views, seeds, data tests and unit tests stand as the last whole-project build left them
FAST_SELECT = ("config.materialized:incremental", "config.materialized:table")
NO_TESTS = ("--exclude-resource-type", "test", "--exclude-resource-type", "unit_test")


def build_plan(command: str, select: Optional[Sequence[str]], full_refresh: bool, check: bool,
               recorded: Optional[str], sha: str, rules: Optional[dict]) -> Tuple[str, bool]:
    """What :func:`dbt_build` runs: ``(plan, tests)``.

    Plans: ``"fast"`` — a ``dbt build`` of the whole project whose warehouse was last built, without
    errors, by this very project (``recorded == sha``: same tilake, models, seeds and rules) runs
    ``dbt run --select`` :data:`FAST_SELECT` only (the tables; a new run's incremental rows are
    what changes); ``"select"`` — the caller's ``--select`` with ancestors; ``"full"`` — every node
    (first build, a changed project, ``--full-refresh``, ``--check``, or any command but ``build``).
    ``tests``: data and unit tests run under ``check`` (``tilake build --check``), or on a whole
    build with user rules in force (a rules row outside the marts' accepted values fails there);
    ``dbt build`` in ``dbt_project/`` and ``tilake dbt -- build`` always run them.
    """
    if command != "build":
        return "full", True
    tests = check or (not select and rules is not None and recorded != sha)
    if select:
        return "select", tests
    if not (full_refresh or check) and recorded is not None and recorded == sha:
        return "fast", False
    return "full", tests


REPLAY_MARKER = "('#tilake-due-runs#')"   # what the replay templates hold in place of the due runs' ids


def _replay_path(lake: Lake) -> Path:
    return lake.root / ".dbt" / "marts_replay.json"


def _compile_replay(lake: Lake, base_args: List[str], sha: str) -> None:
    """Record the SELECT of every table dbt fills, for builds and removals without dbt (:func:`replay_nodes`).

    ``dbt compile --select`` :data:`FAST_SELECT` with ``TILAKE_REPLAY_TEMPLATE=1``: the per-run
    incremental models compile with :data:`REPLAY_MARKER` where the due runs' ids go
    (``dbt_project/macros/lake_scan.sql``), so one compile serves every later new run. The nodes are
    kept in the order dbt finished them (a node finishes after its parents: a topological order) with
    each incremental model's registration column and flag (its ``meta``). Written to
    ``<lake>/.dbt/marts_replay.json`` with the project fingerprint and the lake path it holds.
    Never raises: without the record a build runs dbt.
    """
    from dbt.cli.main import dbtRunner

    try:
        with _env(TILAKE_REPLAY_TEMPLATE="1"), _held_dbt_output():
            res = dbtRunner().invoke(["compile", *base_args, "--select", *FAST_SELECT, "--indirect-selection", "empty"])
        if not res.success:
            return
        nodes = []
        for r in getattr(res.result, "results", None) or []:
            node = r.node
            if str(node.resource_type) not in ("model", "NodeType.Model"):
                continue
            mat, meta = node.config.materialized, dict(node.config.meta or {})
            if mat not in ("table", "incremental") or not node.compiled_code or not node.relation_name:
                return   # not what the project holds today: keep running dbt
            nodes.append({"name": node.name, "kind": mat, "relation": node.relation_name, "sql": node.compiled_code,
                          "registered_at": meta.get("tilake_registered_at"), "has": meta.get("tilake_has"),
                          "rows_per_run": bool(meta.get("tilake_rows_per_run"))})
        names = {n["name"] for n in nodes}
        if "int_runs_versioned" not in names or any(n["kind"] == "incremental" and not (n["registered_at"] and n["has"])
                                                    for n in nodes):
            return
        atomic_write_text(_replay_path(lake), json.dumps({"project_sha256": sha, "lake": str(dbt_lake_root(lake.root)),
                                                          "nodes": nodes}))
    except Exception:   # noqa: BLE001 — an optional speed-up: any failure means "build with dbt"
        with contextlib.suppress(OSError):
            _replay_path(lake).unlink()


def _replay_record(lake: Lake, sha: str) -> Optional[dict]:
    """The replay record when it was compiled by the project ``sha`` for this lake's path, else None."""
    try:
        rec = json.loads(_replay_path(lake).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if rec.get("project_sha256") != sha or rec.get("lake") != str(dbt_lake_root(lake.root)) or not rec.get("nodes"):
        return None
    return rec


def _due_list(ids: Sequence[str]) -> str:
    from tilake.lake.duck import sql_str

    return "(" + ", ".join(sql_str(i) for i in ids) + ")" if ids else "(NULL)"


def replay_nodes(con, rec: dict, removed: Optional[str] = None) -> List[DbtNode]:
    """Fill the warehouse's tables on ``con`` (a connection to the build copy) as ``dbt run --select``
    :data:`FAST_SELECT` would: dbt's own compiled SELECTs (:func:`_compile_replay`), in dbt's order.

    An incremental model gets the rows of its due runs (registered after its rows, the same query as
    its ``todo`` CTE) with dbt-duckdb's ``delete+insert`` on ``run_id``, then its post-hook
    (``tilake_delete_removed_runs``: rows of runs that left the lake go); a table model is emptied
    and refilled (``INSERT … BY NAME``: the column types of the last dbt build stay, HUGEINT-free).
    ``removed``: a run id whose rows leave every incremental model first (``tilake runs rm``); a table
    model whose rows each come from their own run only (``meta: tilake_rows_per_run``) loses that run's
    rows instead of being refilled.
    Raises duckdb.Error (the caller discards the copy and runs dbt).
    """
    from tilake.lake.duck import sql_str

    nodes: List[DbtNode] = []
    versioned = next(n["relation"] for n in rec["nodes"] if n["name"] == "int_runs_versioned")
    con.execute("BEGIN")
    if removed is not None:
        for n in rec["nodes"]:
            if n["kind"] == "incremental":
                con.execute(f"DELETE FROM {n['relation']} WHERE run_id = {sql_str(removed)}")
    for n in rec["nodes"]:
        rel = n["relation"]
        if n["kind"] == "table" and removed is not None and n.get("rows_per_run"):
            con.execute(f"DELETE FROM {rel} WHERE run_id = {sql_str(removed)}")
            nodes.append(DbtNode(n["name"], "model", "success", "rows of the run deleted"))
            continue
        if n["kind"] == "table":
            con.execute(f"DELETE FROM {rel}")
            con.execute(f"INSERT INTO {rel} BY NAME SELECT * FROM ({n['sql']}) t")
            nodes.append(DbtNode(n["name"], "model", "success", "table refilled"))
            continue
        reg, has = n["registered_at"], n["has"]
        due = [r[0] for r in con.execute(
            f"SELECT v.run_id FROM {versioned} v WHERE v.{has} AND NOT EXISTS (SELECT 1 FROM {rel} t "
            f"WHERE t.run_id = v.run_id AND t.registered_at = v.{reg}) ORDER BY 1").fetchall()]
        if due:
            con.execute(f"CREATE OR REPLACE TEMP TABLE tilake_replay_new AS {n['sql'].replace(REPLAY_MARKER, _due_list(due))}")
            con.execute(f"DELETE FROM {rel} WHERE run_id IN (SELECT run_id FROM tilake_replay_new)")
            con.execute(f"INSERT INTO {rel} BY NAME SELECT * FROM tilake_replay_new")
            con.execute("DROP TABLE tilake_replay_new")
        con.execute(f"DELETE FROM {rel} WHERE run_id NOT IN (SELECT run_id FROM {versioned} WHERE {has})")
        nodes.append(DbtNode(n["name"], "model", "success", f"{len(due)} run(s) built"))
    con.execute("COMMIT")
    return nodes


def dbt_build(lake: Lake, command: str = "build", select: Optional[Sequence[str]] = None,
              full_refresh: bool = False, extra: Optional[Sequence[str]] = None,
              progress: bool = True, check: bool = False) -> BuildResult:
    """Run ``dbt <command>`` (build by default) on ``lake`` in place; the dbt step of :func:`build_swapped`.

    Runs inside :meth:`Lake.writing` (the caller's door, or its own when called alone). Writes
    ``warehouse.duckdb`` in place unless ``extra`` points ``--profiles-dir`` at another profile;
    commands should use :func:`build_swapped`, which is safe beside readers. dbt's ``target/``
    (with ``partial_parse.msgpack``) stays in ``<lake>/.dbt/`` between builds, so a build parses only
    what changed.

    Args:
        lake: the lake.
        command: dbt sub-command (build, run, test, seed).
        select: optional ``--select`` arguments; each also selects its ancestors (:func:`with_ancestors`).
        full_refresh: rebuild incremental models from scratch. Also chosen automatically for a whole
            project build (no ``select``) when the warehouse was built by another version of the dbt
            project (:func:`project_fingerprint` differs from the recorded one): incremental tables
            must not keep rows computed by old models or seeds.
        extra: more dbt arguments. progress: "dbt build: N of M nodes" on stderr (:class:`DbtProgress`,
            at the level :func:`tilake.settings.dbt_progress` names); False prints nothing.
        check: run the data and unit tests too (``tilake build --check``); see :func:`build_plan` for
            which nodes run without it.
    Returns:
        :class:`BuildResult` (its ``plan`` and ``tested`` say what ran).
    Raises:
        TilakeError: dbt could not start (bad project or profile; the message names dbt's log
            file); DbtInterrupted: Ctrl-C (dbt's own traceback is not replayed); LakeBusyError.
    """
    from dbt.cli.main import dbtRunner

    from tilake.lake.rules import record_json

    dbt_dir = lake.root / ".dbt"
    meter = DbtProgress(command, settings.dbt_progress() if progress else "quiet")
    with lake.writing(), _env(**{settings.LAKE: str(dbt_lake_root(lake.root))},
                                      DBT_SEND_ANONYMOUS_USAGE_STATS="false", DO_NOT_TRACK="1"):
        project, rules = _project(lake)
        sha = project_fingerprint(project)
        recorded = warehouse_project_sha(lake.warehouse) if command in ("build", "run") else None
        plan, tests = build_plan(command, select, full_refresh, check, recorded, sha, rules)
        if plan == "fast" and not views_read_lake(lake.warehouse, lake.root):
            plan = "full"   # a copied or moved lake: its views read the old folder
        base = ["--project-dir", str(project), "--profiles-dir", str(PROJECT_DIR),
                "--target-path", str(dbt_dir / "target"), "--log-path", str(dbt_dir / "logs"),
                "--quiet", "--no-use-colors", "--no-send-anonymous-usage-stats",
                # manifest.json / run_results.json: read by nothing here (the results come back in
                # memory; partial_parse.msgpack is written all the same)
                "--no-write-json",
                "--vars", json.dumps({"tilake_project_sha": sha, "tilake_rules": record_json(rules)}),
                *(extra or [])]
        args = ["run" if plan == "fast" else command, *base]
        if select:
            args += ["--select", *with_ancestors(select)]
        elif plan == "fast":
            args += ["--select", *FAST_SELECT]
        if command == "build" and plan != "fast" and not tests:
            args += list(NO_TESTS)
        if rules:
            notice(f"rules: {rules['dir']} ({', '.join(rules['files'])})")
        auto_refresh = False
        if not full_refresh and not select and command in ("build", "run"):
            auto_refresh = recorded is not None and recorded != sha
            if auto_refresh:
                why = ("the dbt project changed since this warehouse was built (tilake upgraded, seeds or rules edited)"
                       if recorded else "this warehouse has no record of the dbt project that built it "
                       "(plain dbt, a partial build or an older tilake)")
                notice(f"{why}: full refresh", style="yellow")
        if full_refresh or auto_refresh:
            args.append("--full-refresh")
        with _held_dbt_output() as held:
            before = set(threading.enumerate())
            try:
                res = dbtRunner(callbacks=[meter]).invoke(args)
            finally:
                meter.close()
            if isinstance(res.exception, KeyboardInterrupt) or InterruptGuard.any_hit():
                _join_new_threads(before)
        if res.success and command == "build" and plan in ("fast", "full") and _replay_record(lake, sha) is None \
                and not InterruptGuard.any_hit():
            _compile_replay(lake, base, sha)
    if isinstance(res.exception, KeyboardInterrupt) or InterruptGuard.any_hit():   # dbt hands Ctrl-C back, or lost it
        raise _interrupted(lake) from None   # dbt's held output (its traceback of the interrupt) is dropped
    failed = _disk_failure(lake, res)   # full disk / read-only lake: one line naming the lake
    if failed is not None:
        # dbt's compiled SQL and artifacts (MBs) would stay on the full disk: target/ is rebuilt by every run
        shutil.rmtree(dbt_dir / "target", ignore_errors=True)
        raise failed from res.exception
    sys.stdout.write(held.getvalue())
    if res.exception is not None:
        raise TilakeError(f"dbt {command} could not run: {res.exception} (dbt log: {dbt_dir / 'logs' / 'dbt.log'})",
                          path=PROJECT_DIR) from res.exception
    nodes: List[DbtNode] = []
    compiled: Dict[str, str] = {}
    for r in getattr(res.result, "results", None) or []:
        node = getattr(r, "node", None)
        nodes.append(DbtNode.of(r))
        if nodes[-1].status in ("fail", "error") and str(nodes[-1].resource_type).endswith("test") \
                and getattr(node, "compiled_code", None):
            compiled[nodes[-1].name] = node.compiled_code
    return BuildResult(bool(res.success), nodes, full_refresh=bool(full_refresh or auto_refresh),
                       log_path=dbt_dir / "logs" / "dbt.log", rules=rules, compiled=compiled,
                       plan=plan, tested=tests and command == "build")


def dbt_passthrough(lake: Lake, args: Sequence[str]) -> int:
    """``tilake dbt -- <args>``: run dbt with the user's arguments on the packaged project against ``lake``.

    pip users have no source checkout: the project inside the package, its profile and the lake
    (``TILAKE_LAKE``, through :func:`dbt_lake_root`) and the user rules (:mod:`tilake.lake.rules`) are filled in, with ``--target-path``/``--log-path``
    under ``<lake>/.dbt/`` (so ``docs generate`` then ``docs serve`` find each other; the package is
    never written to) unless ``args`` give their own. Runs under the lake's writer lock
    (:meth:`Lake.writing`); ``build``/``run`` here write the warehouse in place (``tilake build``
    is the copy-and-swap door readers never notice). dbt prints its own output, without ANSI colours
    when stdout is not a terminal (``DBT_USE_COLORS=false`` unless the caller set it).

    Returns:
        0 when dbt succeeded, 1 when it ran and failed, 2 when it could not run.
    Raises:
        TilakeError: no lake at ``lake.root``; LakeBusyError.
    """
    from dbt.cli.main import dbtRunner

    if not lake.raw.is_dir():
        raise TilakeError("no lake here: ingest a run first (tilake run / example)", path=lake.root)
    args = list(args)
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    dbt_dir = lake.root / ".dbt"
    colors = {} if sys.stdout.isatty() or "DBT_USE_COLORS" in os.environ else {"DBT_USE_COLORS": "false"}
    with lake.writing(), _env(**{settings.LAKE: str(dbt_lake_root(lake.root))}, **colors,
                              DBT_SEND_ANONYMOUS_USAGE_STATS="false", DO_NOT_TRACK="1"):
        project, _rules = _project(lake)
        for flag, value in (("--project-dir", project), ("--profiles-dir", PROJECT_DIR),
                            ("--target-path", dbt_dir / "target"), ("--log-path", dbt_dir / "logs")):
            if flag not in given and args and not args[0].startswith("-"):
                args += [flag, str(value)]
        res = dbtRunner().invoke(args)
    if res.exception is not None:
        sys.stderr.write(f"error: dbt could not run: {res.exception} (dbt log: {dbt_dir / 'logs' / 'dbt.log'})\n")
        return 2
    return 0 if res.success else 1


# ---------------------------------------------------------------------------------- the build door

def _copy(lake: Lake, work: Path) -> Path:
    """Step 3: copy ``warehouse.duckdb`` (and a WAL a killed writer left) into ``work``; returns the copy."""
    tmp = work / lake.warehouse.name   # same file name → same DuckDB catalog name in views
    if lake.warehouse.exists():
        shutil.copy2(lake.warehouse, tmp)
        if _wal(lake.warehouse).exists():   # a writer died before checkpointing: carry its log
            shutil.copy2(_wal(lake.warehouse), _wal(tmp))
    return tmp


def _swap_profile(lake: Lake, warehouse: Path) -> Path:
    """Step 4: write ``<lake>/.dbt/swap-profile/profiles.yml``, the bundled profile with ``path`` → ``warehouse``."""
    import yaml  # here, not at import: the ingest path never builds (start-up, bench/README.md)

    prof = yaml.safe_load((PROJECT_DIR / "profiles.yml").read_text(encoding="utf-8"))
    for target in prof["tilake"]["outputs"].values():
        # dbt renders profiles with Jinja: hand it the lake through its safe root (see dbt_lake_root)
        target["path"] = str(dbt_lake_root(lake.root) / warehouse.relative_to(lake.root))
    d = lake.root / ".dbt" / "swap-profile"
    text = "# generated by tilake (tilake/lake/warehouse.py): builds into a copy, swapped in afterwards\n"
    text += yaml.safe_dump(prof, sort_keys=False)
    f = d / "profiles.yml"
    if not f.exists() or f.read_text(encoding="utf-8") != text:
        atomic_write_text(f, text)
    return d


def _checkpoint(warehouse: Path) -> None:
    """Step 6: fold a WAL into ``warehouse`` before the file becomes visible."""
    if _wal(warehouse).exists():
        con = connect(warehouse)
        con.execute("CHECKPOINT")
        con.close()


def _swap(copy: Path, warehouse: Path) -> None:
    """Step 7: ``os.replace`` the built copy over ``warehouse``; drop the old file's WAL."""
    os.replace(copy, warehouse)
    with contextlib.suppress(FileNotFoundError):
        os.remove(_wal(warehouse))   # the old file's log; the new file is checkpointed


def _wal(p: Path) -> Path:
    return p.with_name(p.name + ".wal")


def build_swapped(lake: Lake, select: Optional[Sequence[str]] = None, full_refresh: bool = False,
                  extra: Optional[Sequence[str]] = None, progress: bool = True, check: bool = False) -> BuildResult:
    """The build door: ``dbt build`` into a copy of the warehouse, then swap it in atomically.

    Steps in the module docstring's order: lock, ensure, copy, profile, dbt, checkpoint, swap.
    Safe beside readers (they keep the snapshot they opened). A plain build (no ``select``,
    ``full_refresh``, ``check`` or ``extra``) of a lake last built by this same project runs no dbt:
    :func:`replay_nodes` refills its tables (``plan="rows"``); anything it cannot take falls back to dbt.

    Args:
        lake: the lake; ``<lake>/.build/`` is the scratch folder (removed afterwards).
        select: dbt ``--select`` arguments. full_refresh: rebuild incremental marts from scratch.
        extra: more dbt arguments. progress: "N of M nodes" on stderr (see :func:`dbt_build`).
        check: run the data and unit tests too (:func:`build_plan`).
    Returns:
        :class:`BuildResult`. The warehouse is replaced only when dbt succeeded: after any error or
        failing test (a bad rules row fails ``accepted_values``) it is left exactly as it was, byte
        for byte, with its recorded project state, so the next build runs as if this one never did.
    Raises:
        TilakeError: dbt could not start; DbtInterrupted: Ctrl-C (nothing swapped in);
        LakeBusyError: another writer holds the lake.
    """
    if not (select or full_refresh or check or extra):
        fast = _replay_swapped(lake)   # the tables refilled by dbt's recorded SELECTs, no dbt start-up
        if fast is not None:
            return fast
    with lake.writing(), InterruptGuard() as guard:           # 1 lock, 2 ensure
        work = lake.root / ".build"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            tmp = _copy(lake, work)                           # 3 copy
            prof = _swap_profile(lake, tmp)                   # 4 profile
            try:
                res = dbt_build(lake, select=select, full_refresh=full_refresh, progress=progress, check=check,
                                extra=["--profiles-dir", str(prof), *(extra or [])])   # 5 dbt
            except Exception:
                if guard.hit:   # the Ctrl-C became another error inside dbt or DuckDB
                    raise _interrupted(lake) from None
                raise
            if guard.hit:       # dbt or DuckDB swallowed the Ctrl-C: the flag did not
                raise _interrupted(lake)
            if not res.success or not tmp.exists():   # any error or failing test: the lake stays as it was
                res.suspects = suspect_runs(lake, tmp, res)
                return res
            with guard.deferred():                            # a Ctrl-C from here on is only recorded
                _checkpoint(tmp)                              # 6 checkpoint
                if guard.hit:
                    raise _interrupted(lake)
                _swap(tmp, lake.warehouse)                    # 7 swap: the build is done
            return res
        except KeyboardInterrupt:                             # before the swap: the warehouse is as it was
            raise _interrupted(lake) from None
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _replay_swapped(lake: Lake, removed: Optional[str] = None) -> Optional[BuildResult]:
    """:func:`replay_nodes` through the build door (lock, copy, checkpoint, swap), or None when the lake
    cannot take it: no replay record of the project in force (:func:`_replay_record`), a warehouse not
    recorded as built by it, views reading another folder, or a statement DuckDB refused (the copy is
    dropped: the warehouse is as it was and the caller runs dbt)."""
    import duckdb

    with lake.writing(), InterruptGuard() as guard:
        project, _rules = _project(lake)
        sha = project_fingerprint(project)
        rec = _replay_record(lake, sha)
        if rec is None or not lake.warehouse.exists() or warehouse_project_sha(lake.warehouse) != sha \
                or not views_read_lake(lake.warehouse, lake.root):
            return None
        work = lake.root / ".build"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            tmp = _copy(lake, work)
            con = connect(tmp)
            try:
                nodes = replay_nodes(con, rec, removed)
                con.execute("CHECKPOINT")
            except duckdb.Error as exc:
                notice(f"building with dbt: the recorded SELECTs did not run ({str(exc).splitlines()[0]})")
                return None
            finally:
                con.close()
            if guard.hit:
                raise _interrupted(lake)
            with guard.deferred():
                _checkpoint(tmp)
                if guard.hit:
                    raise _interrupted(lake)
                _swap(tmp, lake.warehouse)
            return BuildResult(True, nodes, log_path=None, plan="rows", tested=False)
        except KeyboardInterrupt:
            raise _interrupted(lake) from None
        finally:
            shutil.rmtree(work, ignore_errors=True)


def drop_run_rows(lake: Lake, run_id: str) -> Optional[BuildResult]:
    """Take a removed run out of the warehouse without dbt: its rows leave every per-run (incremental)
    table and the whole-lake tables (registry, the change marts' run pairs, …) are refilled
    (:func:`replay_nodes` with ``removed=run_id``, through the build door; readers keep their snapshot).
    The run's raw partitions must already be gone (:meth:`Lake.remove_run`).

    Returns:
        a :class:`BuildResult` with ``plan="rows"``, or None when the lake cannot take it
        (:func:`_replay_swapped`): the caller rebuilds with :func:`build_swapped`.
    Raises:
        DbtInterrupted: Ctrl-C before the swap (nothing swapped in); LakeBusyError.
    """
    return _replay_swapped(lake, removed=run_id)
