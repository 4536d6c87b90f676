"""One atomic commit per write command: a sealed journal, its renames, the journal removed.

A write (``tilake ingest``'s run, ``runs rm``, ``runs compact``, ``dumps analyze --run-id``) first
stages everything new under ``<lake>/.staging/<uuid>/``, then commits in four steps, under the writer
lock and with SIGINT/SIGTERM deferred (:func:`deferred_signals`):

1. the plan — every rename the commit makes, ``aside`` (an old partition folder or run record into
   ``.trash/<uuid>/``) and ``in`` (a staged folder or record to its place), paths relative to the lake —
   is written to ``<lake>/.commit.json.tmp``, fsync'd, and renamed to ``<lake>/.commit.json``: the
   journal is **sealed**, the commit is decided (the one step that makes it visible);
2. the renames are made, in plan order;
3. the journal is unlinked (the lake folder fsync'd);
4. the trash is deleted.

A process killed at any moment leaves either no sealed journal (the staged files are swept by the next
writer: the old state) or a sealed one, which the next open of the lake *rolls forward* before anything
else reads or writes (:func:`recover`): each rename is redone unless it is done (an ``aside`` whose
trash path exists, an ``in`` whose staged path is gone), so replaying twice is harmless. The run
registry (the ``runs``/``dump_runs`` partitions) and the run's record ``<lake>/manifest/<run_id>.json``
(every file of the run with its size: what ``tilake check`` verifies) are renames of the same journal.
Readers that meet a sealed journal complete it first (taking the lock without waiting) or, while a
live writer holds the lock, wait the few milliseconds its renames take (:func:`settle`).

Lake internals are never followed out of the lake (:func:`check_internals`): a symlink or an entry of
the wrong kind at ``.lock``, ``.staging``, ``.trash``, ``.dbt``, ``.build``, ``raw`` (and each
``raw/<table>``), ``manifest``, ``warehouse.duckdb`` or the journal is one ``error:`` line.
The lake's format version lives in ``<lake>/lake.json`` (:func:`check_format`).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import threading
import time
import uuid
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from tilake import settings
from tilake.errors import LakeBusyError, TilakeError
from tilake.files import atomic_write_text

JOURNAL = ".commit.json"
"""The sealed commit journal, relative to the lake root."""
MANIFESTS = "manifest"
"""Folder of the run records ``<run_id>.json`` (tables → files → bytes), relative to the lake root."""
FORMAT_FILE = "lake.json"
"""The lake's format record (``{"format": N, "written_by": "tilake X"}``)."""
FORMAT_VERSION = 2
"""1: lakes before the commit journal (no ``lake.json``); 2: journal + run records."""

STEPS = ("staged", "sealed", "op", "applied", "done")
"""Named steps of a commit for the fault hook (:data:`tilake.settings.FAULT_AT`): ``staged`` (before the
journal is written), ``sealed`` (journal in place, no rename made), ``op<i>`` (after rename i, from 0),
``applied`` (every rename made, journal still there), ``done`` (journal removed, trash not yet deleted)."""

INTERNAL_DIRS = (".staging", ".trash", ".dbt", ".build", "raw", MANIFESTS)
INTERNAL_FILES = (".lock", JOURNAL, "warehouse.duckdb", FORMAT_FILE)
_ALLOWED_ROOTS = (".staging", ".trash", "raw", MANIFESTS)


# ------------------------------------------------------------------ never follow a link out

def guard(path: Path, folder: bool, root: Path) -> None:
    """Refuse a lake internal ``path`` that is a symlink or not of the kind it should be (missing: fine).

    Args:
        folder: True when ``path`` must be a folder, False when a regular file.
    Raises:
        TilakeError: one line naming ``path`` (relative to ``root``).
    """
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):   # missing (or under a file: the mkdir says so)
        return
    except OSError as exc:
        raise TilakeError(f"cannot inspect the lake's {os.path.relpath(path, root)} ({exc.strerror or exc})",
                          path=path) from exc
    rel = os.path.relpath(path, root)
    if stat.S_ISLNK(mode):
        raise TilakeError(f"the lake's {rel} is a symbolic link; tilake never follows links out of the lake",
                          path=path, hint=f"remove the link ({rel}) and retry")
    want = stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode)
    if not want:
        raise TilakeError(f"the lake's {rel} should be a {'folder' if folder else 'regular file'} and is not",
                          path=path, hint=f"move {rel} out of the lake and retry")


def check_internals(root: Path, tables=()) -> None:
    """:func:`guard` every lake internal (and ``raw/<table>`` for each of ``tables``).

    Raises:
        TilakeError: the first that is a symlink or of the wrong kind.
    """
    for name in INTERNAL_DIRS:
        guard(root / name, True, root)
    for name in INTERNAL_FILES:
        guard(root / name, False, root)
    for t in tables:
        guard(root / "raw" / t, True, root)


# ------------------------------------------------------------------ signals and the fault hook

@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Within the block SIGINT and SIGTERM are recorded, not acted on; after it the first one recorded is
    raised again under the handler that was in place (a Ctrl-C then interrupts after the commit, never
    inside it). Off the main thread Python runs no handler there, so the block only runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: List[int] = []
    old: Dict[int, object] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        cur = signal.getsignal(sig)
        if cur is signal.SIG_IGN or cur is None:
            continue
        old[sig] = cur
        signal.signal(sig, lambda signum, _frame: got.append(signum))
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        if got:
            signal.raise_signal(got[0])


_SIGNALS = {"KILL": signal.SIGKILL, "INT": signal.SIGINT, "TERM": signal.SIGTERM}


def fault(step: str) -> None:
    """The test hook: send this process the signal :data:`tilake.settings.FAULT_AT` names at ``step``."""
    want = settings.fault_at()
    if not want:
        return
    name, _, sig = want.partition(":")
    if name == step:
        os.kill(os.getpid(), _SIGNALS.get(sig.upper() or "KILL", signal.SIGKILL))
        if sig.upper() in ("", "KILL"):
            time.sleep(5)   # SIGKILL is delivered at once; never go on


# ------------------------------------------------------------------ the journal

def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Commit:
    """The renames of one commit, planned, then made by :meth:`apply` (see the module docstring).

    Args:
        root: the lake root (the writer holds its lock).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.trash = root / ".trash" / uuid.uuid4().hex
        self.ops: List[Tuple[str, str, str]] = []

    def _rel(self, p: Path) -> str:
        return os.path.relpath(p, self.root)

    def replace(self, target: Path, staged: Optional[Path]) -> None:
        """Plan: ``target`` (folder or file) becomes ``staged``'s content; ``staged`` None or missing: removed."""
        if os.path.lexists(target):
            self.ops.append(("aside", self._rel(target), self._rel(self.trash / str(len(self.ops)))))
        if staged is not None and os.path.lexists(staged):
            self.ops.append(("in", self._rel(staged), self._rel(target)))

    def apply(self) -> bool:
        """Seal the journal, make the renames, remove the journal, delete the trash; False when there was
        nothing to do. SIGINT/SIGTERM wait until the journal is removed.

        Raises:
            OSError: the journal cannot be written (nothing changed) or a rename failed (the journal stays
            sealed: the next open of the lake completes it).
        """
        if not self.ops:
            return False
        with deferred_signals():
            fault("staged")
            self.trash.mkdir(parents=True, exist_ok=True)
            tmp = self.root / (JOURNAL + ".tmp")
            data = json.dumps({"format": FORMAT_VERSION, "ops": self.ops}).encode()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, self.root / JOURNAL)      # sealed: from here the commit happens
            _fsync_dir(self.root)
            fault("sealed")
            roll_forward(self.root, self.ops, hook=True)
            fault("applied")
            os.unlink(self.root / JOURNAL)
            _fsync_dir(self.root)
            fault("done")
        shutil.rmtree(self.trash, ignore_errors=True)
        with contextlib.suppress(OSError):
            (self.root / ".trash").rmdir()
        return True


def _inside(root: Path, rel: str) -> Path:
    parts = Path(rel).parts
    if (not parts or Path(rel).is_absolute() or ".." in parts or parts[0] not in _ALLOWED_ROOTS):
        raise TilakeError(f"the commit journal names a path outside the lake's folders ({rel!r}); it was "
                          "not written by tilake", path=root / JOURNAL, hint="move it out of the lake and retry")
    return root / rel


def roll_forward(root: Path, ops, hook: bool = False) -> None:
    """Make every rename of ``ops`` that is not made yet (idempotent; see the module docstring).

    Raises:
        TilakeError: ``ops`` names a path outside the lake's folders; OSError from a rename.
    """
    for i, (kind, a, b) in enumerate(ops):
        src, dst = _inside(root, a), _inside(root, b)
        if kind == "aside":
            if not os.path.lexists(dst) and os.path.lexists(src):
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.rename(src, dst)
        elif kind == "in":
            if os.path.lexists(src):
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.rename(src, dst)
        else:
            raise TilakeError(f"the commit journal holds an unknown step {kind!r}", path=root / JOURNAL)
        if hook:
            fault(f"op{i}")


def pending(root: Path) -> bool:
    """Whether a sealed journal is waiting at ``root`` (a writer is committing, or was killed doing so)."""
    return os.path.lexists(root / JOURNAL)


def recover(root: Path) -> bool:
    """Complete the commit a killed writer sealed (the caller holds the writer lock); True when there was one.

    Raises:
        TilakeError: the journal is unreadable or not tilake's.
    """
    path = root / JOURNAL
    guard(path, False, root)
    with contextlib.suppress(FileNotFoundError):
        (root / (JOURNAL + ".tmp")).unlink()   # never sealed: the old state stands
    if not path.exists():
        return False
    try:
        ops = json.loads(path.read_bytes())["ops"]
        ops = [(str(k), str(a), str(b)) for k, a, b in ops]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TilakeError("the commit journal cannot be read (not written by tilake, or damaged)", path=path,
                          hint="run `tilake check`; move the file out of the lake only if no commit was under way") from exc
    with deferred_signals():
        roll_forward(root, ops)
        os.unlink(path)
        _fsync_dir(root)
    return True


def settle(lake, wait_s: float = 10.0) -> None:
    """For readers: when a sealed journal is there, complete it (taking the writer lock without waiting) or,
    while a live writer holds the lock, wait up to ``wait_s`` for its renames to end. Never raises for a
    busy lake; a lake this user cannot write keeps its journal (the reader then reads as it is).

    Raises:
        TilakeError: the journal is damaged (:func:`recover`).
    """
    root = lake.root
    deadline = time.monotonic() + wait_s
    while pending(root):
        entered = False
        try:
            with lake.locked(wait=0, quiet=True):
                entered = True
                recover(root)
            return
        except LakeBusyError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        except TilakeError:
            if entered:
                raise
            return      # the lock cannot be taken (a read-only lake): read as it is


# ------------------------------------------------------------------ run records

def manifest_path(root: Path, run_id: str) -> Path:
    """``<lake>/manifest/<run_id>.json``."""
    return root / MANIFESTS / f"{run_id}.json"


def read_manifest(root: Path, run_id: str) -> Dict[str, Dict[str, int]]:
    """``{table: {file path relative to the lake: bytes}}`` of ``run_id`` ({} when it has no record)."""
    try:
        doc = json.loads(manifest_path(root, run_id).read_text(encoding="utf-8"))
        return {str(t): {str(f): int(n) for f, n in files.items()} for t, files in doc["tables"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def list_files(folder: Path, rel_to: Path) -> Dict[str, int]:
    """Every ``*.parquet`` file under ``folder`` (not hidden) → its size, keyed by path relative to ``rel_to``."""
    out: Dict[str, int] = {}
    for dirpath, dirs, files in os.walk(folder):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".parquet") and not f.startswith("."):
                p = os.path.join(dirpath, f)
                out[os.path.relpath(p, rel_to)] = os.lstat(p).st_size
    return out


def write_record(path: Path, run_id: str, tables: Dict[str, Dict[str, int]]) -> None:
    """Write a run record to ``path`` and fsync it (``path`` is a staging or temp name: the caller renames it
    into ``manifest/``, by a commit or by ``os.replace``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps({"run_id": run_id, "tables": tables}, indent=1, sort_keys=True).encode()
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


# ------------------------------------------------------------------ format version

def read_format(root: Path) -> int:
    """The lake's format version: ``lake.json``'s ``format``, 1 when there is none (an older lake).

    Raises:
        TilakeError: ``lake.json`` is unreadable or holds no integer format.
    """
    path = root / FORMAT_FILE
    guard(path, False, root)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):   # no lake yet, or the lake path is a file (said elsewhere)
        return 1
    except (OSError, ValueError) as exc:
        raise TilakeError(f"the lake's format record cannot be read ({exc.__class__.__name__})", path=path,
                          hint="restore it, or delete it to let tilake treat the lake as format 1") from exc
    v = doc.get("format") if isinstance(doc, dict) else None
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise TilakeError(f"the lake's format record holds no format version ({v!r})", path=path)
    return v


def check_format(root: Path) -> int:
    """:func:`read_format`, refusing a lake of a newer tilake.

    Raises:
        TilakeError: format newer than :data:`FORMAT_VERSION`, or unreadable.
    """
    v = read_format(root)
    if v > FORMAT_VERSION:
        raise TilakeError(f"this lake has format {v}, written by a newer tilake (this one reads format "
                          f"{FORMAT_VERSION} and older)", path=root, hint="upgrade tilake; the lake was not touched")
    return v


def write_format(root: Path) -> None:
    """Write ``lake.json`` (format :data:`FORMAT_VERSION`) atomically."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("tilake")
    except PackageNotFoundError:
        ver = "unknown"
    atomic_write_text(root / FORMAT_FILE, json.dumps({"format": FORMAT_VERSION, "written_by": f"tilake {ver}"}) + "\n",
                      mkdir=False)
