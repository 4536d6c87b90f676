"""The one ``error:`` line the CLI prints for a failure it knows, or None for a real bug.

Every command fails with one line and exit status 2 (README "Exit status"); :func:`error_line` is the
single place that turns an exception into that line, so ``cli.py`` stays a thin door.
"""
from __future__ import annotations

import errno
import re
import signal
from typing import Optional

from tilake import settings
from tilake.errors import TilakeError


def error_line(exc: BaseException, command: Optional[str] = None) -> Optional[str]:
    """The text after ``error:`` for ``exc`` raised by ``tilake <command>``; None to let it propagate.

    Known: :class:`~tilake.errors.TilakeError` (its message); a parameter's plain message (``message``
    attribute of the CLI's ParamType error); Ctrl-C; ``torch`` missing (the extra to install); DuckDB
    running out of memory under tilake's limit (names the limit and how to raise it: DuckDB 1.5
    raises ``duckdb.OutOfMemoryException`` when an allocation it cannot spill does not fit).
    """
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by the user"
    if isinstance(exc, TilakeError):
        return str(exc) or "interrupted by the user"
    if getattr(exc, "door_message", False):
        return exc.message
    if isinstance(exc, ModuleNotFoundError):
        if exc.name != "torch":
            return None
        return (f"this command needs PyTorch: pip install '.[{'torch' if command == 'example' else 'dumps'}]' "
                "(in the tilake source folder)")
    after = _lake_state(command)
    if type(exc).__name__ == "OutOfMemoryException":
        first = str(exc).splitlines()[0] if str(exc) else "out of memory"
        return (f"DuckDB ran out of memory under the limit {settings.memory_limit()} ({first}); "
                f"raise it with --memory-limit or {settings.MEMORY_LIMIT} (e.g. 2GB); {after}")
    if isinstance(exc, MemoryError):
        return (f"out of memory in `{' '.join(filter(None, ['tilake', command]))}` (Python MemoryError: the process "
                "could not get more memory; an address-space limit such as `ulimit -v` does this too): give it more "
                f"memory or a smaller input; {after}")
    if isinstance(exc, RecursionError):
        return (f"an input nests too deeply for `{' '.join(filter(None, ['tilake', command]))}` to follow "
                f"(RecursionError); {after}")
    if isinstance(exc, UnicodeEncodeError) and "surrogate" in str(exc):
        # a file or folder name with bytes that are not UTF-8 (decoded by the OS layer as surrogates)
        name = exc.object if isinstance(exc.object, str) else ""
        shown = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") if name else "a name"
        return (f"{shown}: a file or folder name that is not UTF-8 (tilake stores paths as UTF-8 text); "
                f"rename it; {after}")
    if type(exc).__name__ == "IOException" and "File name too long" in str(exc):
        # DuckDB writing a staged file: the lake's own path is what is long, not the input
        m = re.search(r'"([^"]+)"', str(exc))
        where = m.group(1) if m else "a file inside the lake"
        return (f"{where}: the path is too long for the file system (ENAMETOOLONG) — a file tilake writes inside "
                f"the lake, not an input; choose a lake folder with a shorter path; {after}")
    if isinstance(exc, OSError) and exc.errno in (errno.ELOOP, errno.ENAMETOOLONG):
        where = exc.filename if exc.filename is not None else "a path"
        why = ("a symlink loop (too many levels of symbolic links)" if exc.errno == errno.ELOOP
               else "the path is too long for the file system (ENAMETOOLONG)")
        return f"{where}: {why}; {after}"
    return None


#: commands that never write the lake (``tilake <command>``; dumps sub-commands as their own name)
_READ_ONLY = {"sql", "report", "trend", "diff", "gate", "check", "shell", "mcp"}


def _lake_state(command: Optional[str]) -> str:
    """What may be said about the lake after a failure in ``command``: a command that never writes it says so,
    ``ingest`` (rows staged apart, committed after the last capture) says it is unchanged, any other points to
    ``tilake runs`` rather than claim what it cannot know."""
    if command in _READ_ONLY:
        return "this command does not write the lake"
    if command == "ingest":     # every row is staged apart and committed after the last capture is read
        return "the lake is unchanged"
    return "see what the lake holds with `tilake runs`"


def sigterm_as_interrupt() -> None:
    """Treat SIGTERM (``timeout``, ``kill``, job schedulers) like Ctrl-C: the command stops through the same
    path, so staging files and spill folders are removed and one line says the lake is unchanged.
    Only from the main thread (where the CLI runs); elsewhere nothing changes."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:   # not the main thread
        pass
