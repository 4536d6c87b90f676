"""Output files: prove an output folder is writable, and write a file atomically.

The lowest floor with :mod:`tilake.errors` and :mod:`tilake.settings`: every layer may import it,
it imports nothing of tilake but the error type.

Atomic write = the data goes to a hidden temp file in the target's own folder, then
``os.replace`` puts it in place (POSIX ``rename(2)``: a reader sees the old file or the new one,
never half of it; same folder, so same file system). A failure deletes the temp file and leaves
the target as it was.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import uuid
from pathlib import Path
from typing import Any, Iterator, List, Optional, Union

from tilake.errors import TilakeError

PathLike = Union[str, Path]


def check_out_dir(out_dir: Path, lake_root: Optional[PathLike] = None, create: bool = True) -> Path:
    """Create ``out_dir`` and prove it is writable before any work starts.

    Args:
        lake_root: the lake; an ``out_dir`` at or below it is refused (reports written into
            ``raw/<table>/`` break every reader of that table).
        create: False only checks where it is (nothing is created: the caller creates it once
            its input is known to exist).
    Raises:
        TilakeError: it is inside the lake, or cannot be created or written.
    """
    out_dir = Path(out_dir)
    if lake_root is not None:
        root, where = Path(lake_root).resolve(), out_dir.resolve()
        if where == root or root in where.parents:
            raise TilakeError("the output folder is inside the lake; choose a folder outside it "
                              f"(lake: {lake_root})", path=out_dir)
    if not create:
        return out_dir
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".tilake-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise TilakeError(f"output folder is not writable ({exc.strerror or exc})", path=out_dir) from exc
    return out_dir


_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def check_regular_target(path: PathLike) -> Path:
    """Refuse an output path that exists and is not a regular file; returns ``path``.

    Every output is written by a temp file and a rename, and ``rename(2)`` would swap a FIFO or a
    device node (``/dev/full``, ``/dev/null``) for a regular file. A missing path, a regular file or
    a symlink to one passes (``os.stat`` follows links; the rename replaces the link).

    Raises:
        TilakeError: ``path`` is a FIFO, device, socket or folder (named in the message).
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return path   # missing (or unreadable: the write itself says why)
    for test, kind in _KINDS:
        if test(mode):
            raise TilakeError(f"output is {kind}, not a regular file; give a file path (tilake writes "
                              "outputs by a temp file and a rename and never replaces special files)", path=path)
    return path


@contextlib.contextmanager
def atomic_path(target: PathLike, prefix: str = ".", suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temp path beside ``target``; on a clean exit it replaces ``target`` (``os.replace``).

    For writers that need a path rather than bytes (DuckDB ``COPY … TO``, SQLite, ``shutil.copy2``).
    The temp name is ``<prefix><target name>.<8 hex><suffix>`` (hidden by default, so no
    ``*.parquet``/``*.json`` glob matches it while it is written). When the block raises, or
    leaves no file at the temp path, the temp file is deleted and ``target`` is untouched.

    Raises:
        TilakeError: ``target`` exists and is not a regular file (:func:`check_regular_target`).
        whatever the block raises; OSError from the rename.
    """
    target = check_regular_target(target)
    tmp = target.with_name(f"{prefix}{target.name}.{uuid.uuid4().hex[:8]}{suffix}")
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def atomic_write_bytes(path: PathLike, data: bytes, mkdir: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically (temp file + ``os.replace``); returns ``path``.

    Args:
        mkdir: create the parent folder first.
    Raises:
        TilakeError: ``path`` is a FIFO/device (:func:`check_regular_target`); the folder cannot be
        created or written, the disk is full (``cannot write the file: No space left on device``,
        naming ``path``; the OSError is its ``__cause__``, so a lake write still maps to the lake's
        own line). The target is left as it was and no temp file remains.
    """
    path = Path(path)
    try:
        if mkdir:
            path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)
    except OSError as exc:
        raise TilakeError(f"cannot write the file: {exc.strerror or exc}", path=path) from exc
    return path


def atomic_write_text(path: PathLike, text: str, mkdir: bool = True) -> Path:
    """Write ``text`` as UTF-8 to ``path`` atomically; returns ``path`` (see :func:`atomic_write_bytes`)."""
    return atomic_write_bytes(path, text.encode("utf-8"), mkdir)


def atomic_write_json(path: PathLike, obj: Any, indent: int = 1, mkdir: bool = True) -> Path:
    """Write ``obj`` as UTF-8 JSON (non-ASCII kept, ``indent``, trailing newline) atomically; returns ``path``.

    Values JSON cannot hold (paths, datetimes) are written with ``str``.
    """
    text = json.dumps(obj, indent=indent, ensure_ascii=False, default=str) + "\n"
    return atomic_write_text(path, text, mkdir)


def discard_stdout() -> None:
    """Point file descriptor 1 at ``os.devnull`` (after a ``BrokenPipeError``: the reader of a pipe,
    e.g. ``head``, has gone), so the interpreter's final flush of ``sys.stdout`` cannot fail again."""
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.close(fd)


# ------------------------------------------------------------------ text cells of outputs others open
#: a text cell starting with one of these is run as a formula by spreadsheets (OWASP "CSV Injection"), full-width
#: forms included
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
#: control characters a terminal, viewer or spreadsheet would act on (ESC starts terminal sequences; xlsx cannot
#: store C0 controls at all): C0 but tab/newline/CR, DEL, C1
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x80-\x9f]")
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def escape_controls(text: str) -> str:
    """``text`` with every control character of :data:`_CONTROL` written as ``\\xNN`` (ESC → ``\\x1b``), so it
    is shown, never acted on."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def csv_text(value: Any, numbers_as_text: bool = False) -> Any:
    """A CSV cell no spreadsheet evaluates and no terminal acts on: control characters escaped
    (:func:`escape_controls`), and text starting with :data:`FORMULA_START` prefixed with ``'``. Non-text
    values are returned unchanged; with ``numbers_as_text`` (every cell of a CSV read back is text) a plain
    number such as ``-1.5`` keeps its sign unprefixed."""
    if not isinstance(value, str):
        return value
    value = escape_controls(value)
    if value.startswith(FORMULA_START) and not (numbers_as_text and _NUMBER.fullmatch(value)):
        return "'" + value
    return value


_CSV_FIELD = re.compile(r'"((?:[^"]|"")*)"|([^,"\n]*)')


def _csv_record(record: str) -> str:
    out: List[str] = []
    i, n = 0, len(record)
    while True:
        m = _CSV_FIELD.match(record, i)
        assert m is not None      # the pattern's second branch matches the empty string
        quoted = m.group(1) is not None
        text = m.group(1).replace('""', '"') if quoted else m.group(2)
        i = m.end()
        new = csv_text(text, numbers_as_text=True)
        if quoted or new != text and re.search(r'[,"\n\r]', new):
            out.append('"' + new.replace('"', '""') + '"')
        else:
            out.append(new)
        if i >= n or record[i] != ",":
            return ",".join(out)
        i += 1


def neutralise_csv(src: PathLike, dst: PathLike, chunk: int = 4 << 20) -> None:
    """Copy an RFC 4180 CSV (DuckDB's ``COPY … (FORMAT csv)``: ``,`` separated, ``"`` quoted, ``""`` inside) from
    ``src`` to ``dst`` with every cell through :func:`csv_text` (header included); a quoted cell stays quoted, so
    an empty string (``""``) and NULL (nothing) stay apart. Streams records (linear, one chunk held)."""
    with open(src, encoding="utf-8", newline="") as f, open(dst, "w", encoding="utf-8", newline="") as g:
        pending: List[str] = []       # lines of the record being read (a quoted cell may hold newlines)
        carry, parity = "", 0
        while True:
            block = f.read(chunk)
            if not block:
                break
            lines = (carry + block).split("\n")
            carry = lines.pop()       # the block's last line goes on in the next block
            for line in lines:
                pending.append(line)
                parity ^= line.count('"') & 1
                if not parity:
                    g.write(_csv_record("\n".join(pending)) + "\n")
                    pending = []
        if carry or pending:
            g.write(_csv_record("\n".join(pending + [carry])))
