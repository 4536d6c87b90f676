"""Every environment switch tilake reads, in one place (HolisticTraceAnalysis ``env_options`` style).

Each switch is a constant naming the variable, with a comment, and exactly one reader function
below it; no other module reads ``os.environ`` for a ``TILAKE_*`` switch. A bottom-floor module
(beside :mod:`tilake.files`): it imports only :mod:`tilake.errors`.

The NPU seam's child script prints three markers on stdout that look like switches but are not
read from the environment: ``TILAKE_PROBE <json>`` (the probe's result line),
``TILAKE_NO_EXPORT_TYPE`` (this torch_npu's ``analyse()`` has no ``export_type`` parameter) and
``TILAKE_ANALYSE_RETURNED`` (``analyse()`` returned). They are named here so that the seam and
its tests share one spelling (:data:`PROBE_MARKER`, :data:`NO_EXPORT_TYPE_MARKER`,
:data:`ANALYSE_RETURNED_MARKER`).
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Dict, Iterable, Iterator, Mapping, Optional

from tilake.errors import TilakeError

# the lake folder when no --lake is given (the CLI's --lake option also names it as its envvar)
LAKE = "TILAKE_LAKE"
# the lake folder when neither --lake nor $TILAKE_LAKE is given (relative to the working folder)
DEFAULT_LAKE = "./tilake-lake"
# torch intra-op threads for the dump tensor comparison (a positive integer; default 1: on a
# shared host one thread measured 4x faster than two, OpenMP spin contention)
THREADS = "TILAKE_THREADS"
DEFAULT_THREADS = 1

# DuckDB memory limit of every tilake connection (DuckDB size text: 700MB, 2GB, 1.5GiB); the ingest CLI's
# --memory-limit option sets it for the process. Default: a quarter of this machine's RAM and at most
# 256 MiB per CPU core (one ingest worker per core), clamped to 256 MiB .. 8 GiB (DuckDB spills
# joins/sorts above it to a private temp folder, see lake/duck.py)
MEMORY_LIMIT = "TILAKE_MEMORY_LIMIT"
MEMORY_LIMIT_MIN_MIB, MEMORY_LIMIT_MAX_MIB, MEMORY_PER_CORE_MIB = 256, 8192, 256
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)\s*$", re.IGNORECASE)
_UNIT_BYTES = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}

# how much of a dbt build tilake prints on stderr: quiet (nothing but failures and the summary),
# normal ("dbt build: N of M nodes"; one updating line on a terminal, a line per tenth elsewhere),
# verbose (a line per node with its status and seconds); `--quiet`/`--verbose` on build/run set it
DBT_PROGRESS = "TILAKE_DBT_PROGRESS"
DBT_PROGRESS_LEVELS = ("quiet", "normal", "verbose")

# a folder of seed CSVs (op_catalog, grading_rules, recommendations, ...) that extend or override the
# shipped ones (tilake.lake.rules); --rules DIR sets it; default <lake>/rules/ when that exists
RULES = "TILAKE_RULES"

# the bf16 comparison kernel of dump analysis (diagnosis/fused.py, built on first use with the C compiler
# $CC / cc): "0" turns it off (the torch path gives the same figures, slower); built objects are cached in
# $TILAKE_CACHE, default $XDG_CACHE_HOME/tilake or ~/.cache/tilake
FUSED = "TILAKE_FUSED"
CACHE = "TILAKE_CACHE"

# ingest on Ray (docs/fleet.md): auto (this machine's Ray cluster, else a local Ray), local, or HOST:PORT /
# ray://HOST:PORT; the --ray option of ingest/run/scan sets it; unset or empty: threads on this machine
RAY = "TILAKE_RAY"

# seconds a write command waits for another writer's lake lock (a number >= 0; 0: refuse at once); the
# --wait option of the write commands sets it; default 60
LOCK_WAIT = "TILAKE_LOCK_WAIT"
DEFAULT_LOCK_WAIT = 60.0

# test hook of the commit (tests/safety/test_commit_faults.py): ``<step>`` or ``<step>:<signal>`` (KILL, INT,
# TERM) makes the writer send itself that signal (default KILL) when its commit reaches the named step
# (tilake.lake.commit.STEPS); unset in normal use
FAULT_AT = "TILAKE_FAULT_AT"

# stdout markers of the NPU seam's child script (not environment variables, see the module docstring)
PROBE_MARKER = "TILAKE_PROBE"
NO_EXPORT_TYPE_MARKER = "TILAKE_NO_EXPORT_TYPE"
ANALYSE_RETURNED_MARKER = "TILAKE_ANALYSE_RETURNED"


_GIVEN: Dict[str, str] = {}
"""Switch values the command line gave for the command running now (:func:`given`), read before ``os.environ``."""


def _env(env: Optional[Mapping[str, str]]) -> Mapping[str, str]:
    """``env`` when given; else the command line's values (:func:`given`) over ``os.environ``."""
    if env is not None:
        return env
    return {**os.environ, **_GIVEN} if _GIVEN else os.environ


@contextlib.contextmanager
def given(**values: Optional[str]) -> Iterator[None]:
    """Within the block, the readers below see these switch values (keyword: the constant's name, e.g.
    ``RULES="/x"``; None leaves a switch as it is) before the environment; ``os.environ`` is never written.
    The CLI's options (``--rules``, ``--quiet``/``--verbose``) reach the lower floors this way, for the one
    command they were given to (``tilake.cli_context.CliContext``).

    Raises:
        KeyError: a name that is not a switch of this module.
    """
    new = {globals()[k]: v for k, v in values.items() if v is not None}
    old = dict(_GIVEN)
    _GIVEN.update(new)
    try:
        yield
    finally:
        _GIVEN.clear()
        _GIVEN.update(old)


def lake_path(env: Optional[Mapping[str, str]] = None) -> str:
    """``$TILAKE_LAKE`` if set and not empty, else :data:`DEFAULT_LAKE` (a path string, not resolved)."""
    env = os.environ if env is None else env
    return env.get(LAKE) or DEFAULT_LAKE


def threads(env: Optional[Mapping[str, str]] = None) -> int:
    """``$TILAKE_THREADS`` as a positive int; :data:`DEFAULT_THREADS` when unset or not an integer."""
    env = os.environ if env is None else env
    try:
        return max(1, int(env.get(THREADS, DEFAULT_THREADS)))
    except ValueError:
        return DEFAULT_THREADS


def default_memory_limit() -> str:
    """A quarter of physical RAM (``os.sysconf``) and at most :data:`MEMORY_PER_CORE_MIB` per usable CPU
    core, clamped to 256 MiB .. 8 GiB, as ``'<n>MiB'``.

    The per-core bound keeps a small machine's peak RSS low where more memory buys no speed (2 cores,
    24 GB RAM: 512 MiB; BR-22, 4 M kernels + 2 M strings: 7.7 s and 423 MB RSS at 512 MiB, 7.6 s and
    880 MB at 2 GiB; bench/README.md) and gives each parallel ingest worker a share of 256 MiB.
    """
    try:
        total_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows): the upper bound
        total_mib = 4 * MEMORY_LIMIT_MAX_MIB
    mib = min(total_mib // 4, MEMORY_PER_CORE_MIB * cores())
    return f"{max(MEMORY_LIMIT_MIN_MIB, min(MEMORY_LIMIT_MAX_MIB, mib))}MiB"


DUCKDB_ALLOCATOR = "DUCKDB_JE_MALLOC_CONF"
"""DuckDB's own name for its jemalloc configuration (DuckDB docs, "Internals › jemalloc": read once, when
DuckDB is loaded)."""
DUCKDB_ALLOCATOR_DEFAULT = "dirty_decay_ms:0,muzzy_decay_ms:0"
"""Pages DuckDB frees go back to the system at once instead of after jemalloc's 10 s decay. A trace ingest runs
one statement after another on one thread, and without it each statement's working memory stacked on the last
one's (V100 trace: peak RSS 124–128 → 109 MiB, +0.2 s). An Ascend DB ingest allocates in bulk on every core,
where purging at once costs 22 % wall (2 M kernels: 3.81 s vs 3.29 s) and buys nothing it needs; so it is set only
when no input holds a ``*.db`` (bench/README.md)."""
_DB_WALK_LIMIT = 20_000


def _holds_db(path: Path) -> bool:
    """Whether ``path`` is or holds a ``*.db`` file (a walk of at most :data:`_DB_WALK_LIMIT` entries; a larger
    tree counts as holding one)."""
    if path.is_file():
        return path.suffix == ".db"
    seen = 0
    for _root, _dirs, files in os.walk(path):
        seen += len(files) + len(_dirs)
        if any(f.endswith(".db") for f in files) or seen > _DB_WALK_LIMIT:
            return True
    return False


def prime_duckdb_allocator(inputs: Iterable[Path] = ()) -> bool:
    """Set :data:`DUCKDB_ALLOCATOR` to :data:`DUCKDB_ALLOCATOR_DEFAULT` for an ingest whose ``inputs`` hold no
    Ascend profiler DB (traces, text exports), unless the user set it or DuckDB is loaded already (a later
    setting has no effect). Called by ``tilake ingest`` before it loads DuckDB. Returns whether it was set."""
    if "duckdb" in sys.modules or DUCKDB_ALLOCATOR in os.environ:
        return False
    if any(_holds_db(Path(p)) for p in inputs if p is not None):
        return False
    os.environ[DUCKDB_ALLOCATOR] = DUCKDB_ALLOCATOR_DEFAULT
    return True


def cores() -> int:
    """CPU cores this process may run on (``sched_getaffinity``; ``os.cpu_count()`` off Linux)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def size_bytes(value: str) -> Optional[int]:
    """Bytes of a DuckDB size text (``700MB``, ``2GiB``, ``232.6 MiB`` as ``current_setting`` prints it);
    None when it is not one (decimal units are powers of 1000, binary ones of 1024, as in DuckDB)."""
    m = _SIZE.match(str(value))
    return int(float(m.group(1)) * _UNIT_BYTES[m.group(2).upper()]) if m else None


def check_memory_limit(value: str, where: str = MEMORY_LIMIT) -> str:
    """``value`` stripped if it is a DuckDB size (``700MB``, ``2GB``, ``1.5GiB``).

    Raises:
        TilakeError: any other text, naming ``where`` (the variable or option).
    """
    if not _SIZE.match(str(value)):
        raise TilakeError(f"{where}={value!r} is not a memory size (e.g. 700MB, 2GB, 1.5GiB)")
    return str(value).strip()


def set_memory_limit(value: str, from_env: bool = False) -> None:
    """Validate ``value`` and export it as ``$TILAKE_MEMORY_LIMIT`` for this process and its children
    (the ``--memory-limit`` option; worker processes inherit it).

    Args:
        from_env: the value came from ``$TILAKE_MEMORY_LIMIT`` (the option's envvar), not the option.
    Raises:
        TilakeError: not a size, naming the variable or ``--memory-limit``, whichever gave it.
    """
    os.environ[MEMORY_LIMIT] = check_memory_limit(value, MEMORY_LIMIT if from_env else "--memory-limit")


def memory_limit(env: Optional[Mapping[str, str]] = None) -> str:
    """``$TILAKE_MEMORY_LIMIT`` (validated) if set and not empty, else :func:`default_memory_limit`.

    Raises:
        TilakeError: the variable is set to something that is not a size.
    """
    env = os.environ if env is None else env
    value = env.get(MEMORY_LIMIT)
    return check_memory_limit(value) if value else default_memory_limit()

def memory_limit_given(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``$TILAKE_MEMORY_LIMIT`` (validated) when set and not empty, else None (the default of each machine
    applies: a Ray ingest hands the driver's given limit to every node, never its default).

    Raises:
        TilakeError: the variable is set to something that is not a size.
    """
    env = os.environ if env is None else env
    value = env.get(MEMORY_LIMIT)
    return check_memory_limit(value) if value else None


def ray_address(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``$TILAKE_RAY`` stripped when set and not empty (checked by ``tilake.ingest.profiler.fleet.check_address``
    where it is used), else None."""
    env = _env(env)
    return (env.get(RAY) or "").strip() or None


def dbt_progress(env: Optional[Mapping[str, str]] = None) -> str:
    """``$TILAKE_DBT_PROGRESS`` if one of :data:`DBT_PROGRESS_LEVELS`, else ``normal``."""
    env = _env(env)
    v = (env.get(DBT_PROGRESS) or "").strip().lower()
    return v if v in DBT_PROGRESS_LEVELS else "normal"


def rules_path(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``$TILAKE_RULES`` if set and not empty, else None (a path string, not resolved)."""
    env = _env(env)
    return env.get(RULES) or None


def fused_enabled(env: Optional[Mapping[str, str]] = None) -> bool:
    """False when ``$TILAKE_FUSED`` is ``0`` (the dump comparison then runs on the torch path only)."""
    env = os.environ if env is None else env
    return (env.get(FUSED) or "1").strip() != "0"


def cache_dir(env: Optional[Mapping[str, str]] = None) -> Path:
    """``$TILAKE_CACHE``, else ``$XDG_CACHE_HOME/tilake``, else ``~/.cache/tilake`` (not created here)."""
    env = os.environ if env is None else env
    return Path(env[CACHE]) if env.get(CACHE) else user_cache_dir(env)


def user_cache_dir(env: Optional[Mapping[str, str]] = None) -> Path:
    """``$XDG_CACHE_HOME/tilake``, else ``~/.cache/tilake`` (not created here)."""
    env = os.environ if env is None else env
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tilake"


def c_compiler(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``$CC``, else ``cc`` or ``gcc`` on PATH; None when there is none."""
    import shutil

    env = os.environ if env is None else env
    return env.get("CC") or shutil.which("cc") or shutil.which("gcc")


def lock_wait(env: Optional[Mapping[str, str]] = None) -> float:
    """``$TILAKE_LOCK_WAIT`` (or ``--wait``) in seconds, else :data:`DEFAULT_LOCK_WAIT`.

    Raises:
        TilakeError: the value is not a number >= 0.
    """
    env = _env(env)
    value = (env.get(LOCK_WAIT) or "").strip()
    if not value:
        return DEFAULT_LOCK_WAIT
    try:
        secs = float(value)
    except ValueError:
        secs = -1.0
    if not secs >= 0:   # also NaN
        raise TilakeError(f"{LOCK_WAIT}={value!r} is not a number of seconds >= 0 (--wait SECONDS)")
    return secs


def fault_at(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``$TILAKE_FAULT_AT`` stripped, else None (a test hook: see :data:`FAULT_AT`)."""
    env = os.environ if env is None else env
    return (env.get(FAULT_AT) or "").strip() or None
