"""The one ``error:`` line the CLI prints for a failure it knows, or None for a real bug.

Every command fails with one line and exit status 2 (README "Exit status"); :func:`error_line` is the
single place that turns an exception into that line, so ``cli.py`` stays a thin door.
"""
from __future__ import annotations

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
    if type(exc).__name__ == "OutOfMemoryException":
        first = str(exc).splitlines()[0] if str(exc) else "out of memory"
        return (f"DuckDB ran out of memory under the limit {settings.memory_limit()} ({first}); "
                f"raise it with --memory-limit or {settings.MEMORY_LIMIT} (e.g. 2GB); the lake is unchanged")
    return None


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
