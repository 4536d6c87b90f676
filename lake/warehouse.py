"""The warehouse: the one dbt build door of the lake, in-process (``dbtRunner``).

:func:`build_swapped` owns the build lifecycle, in a fixed order (the dbt-duckdb
``Environment.initialize_db`` idea: one module, one order):

1. **lock** and 2. **ensure** — :meth:`tilake.lake.store.Lake.writing` (free when the command holds it);
3. **copy** — ``warehouse.duckdb`` (and a left-over WAL) into ``<lake>/.build/``;
4. **profile** — a generated ``profiles.yml`` pointing dbt at the copy;
5. **dbt** — :func:`dbt_build` on the copy (full refresh when the project changed);
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
from typing import Dict, List, Optional, Sequence

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
    """
    project = project or PROJECT_DIR
    h = hashlib.sha256()
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
    tests/safety/test_round3_more.py). The worker ends after its current node (its pool sends it a
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


def dbt_build(lake: Lake, command: str = "build", select: Optional[Sequence[str]] = None,
              full_refresh: bool = False, extra: Optional[Sequence[str]] = None,
              progress: bool = True) -> BuildResult:
    """Run ``dbt <command>`` (build by default) on ``lake`` in place; the dbt step of :func:`build_swapped`.

    Runs inside :meth:`Lake.writing` (the caller's door, or its own when called alone). Writes
    ``warehouse.duckdb`` in place unless ``extra`` points ``--profiles-dir`` at another profile;
    commands should use :func:`build_swapped`, which is safe beside readers.

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
    Returns:
        :class:`BuildResult`.
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
        args = [command, "--project-dir", str(project), "--profiles-dir", str(PROJECT_DIR),
                "--target-path", str(dbt_dir / "target"), "--log-path", str(dbt_dir / "logs"),
                "--quiet", "--no-use-colors", "--no-send-anonymous-usage-stats"]
        if select:
            args += ["--select", *with_ancestors(select)]
        sha = project_fingerprint(project)
        args += ["--vars", json.dumps({"tilake_project_sha": sha, "tilake_rules": record_json(rules)})]
        args += list(extra or [])
        if rules:
            notice(f"rules: {rules['dir']} ({', '.join(rules['files'])})")
        auto_refresh = False
        if not full_refresh and not select and command in ("build", "run"):
            recorded = warehouse_project_sha(lake.warehouse)
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
                       log_path=dbt_dir / "logs" / "dbt.log", rules=rules, compiled=compiled)


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
                  extra: Optional[Sequence[str]] = None, progress: bool = True) -> BuildResult:
    """The build door: ``dbt build`` into a copy of the warehouse, then swap it in atomically.

    Steps in the module docstring's order: lock, ensure, copy, profile, dbt, checkpoint, swap.
    Safe beside readers (they keep the snapshot they opened).

    Args:
        lake: the lake; ``<lake>/.build/`` is the scratch folder (removed afterwards).
        select: dbt ``--select`` arguments. full_refresh: rebuild incremental marts from scratch.
        extra: more dbt arguments. progress: "N of M nodes" on stderr (see :func:`dbt_build`).
    Returns:
        :class:`BuildResult`. The warehouse is replaced only when dbt succeeded: after any error or
        failing test (a bad rules row fails ``accepted_values``) it is left exactly as it was, byte
        for byte, with its recorded project state, so the next build runs as if this one never did.
    Raises:
        TilakeError: dbt could not start; DbtInterrupted: Ctrl-C (nothing swapped in);
        LakeBusyError: another writer holds the lake.
    """
    with lake.writing(), InterruptGuard() as guard:           # 1 lock, 2 ensure
        work = lake.root / ".build"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            tmp = _copy(lake, work)                           # 3 copy
            prof = _swap_profile(lake, tmp)                   # 4 profile
            try:
                res = dbt_build(lake, select=select, full_refresh=full_refresh, progress=progress,
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
