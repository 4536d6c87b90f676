"""User-facing errors.

Every problem with the user's input is raised as :class:`TilakeError` carrying a single line
that names the file and what is wrong. The CLI prints it as ``error: <line>`` and exits 2,
never with a traceback.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union


class TilakeError(Exception):
    """A one-line, user-facing error (bad input, refused operation).

    Args:
        message: what is wrong, one line.
        path: the offending file or folder; prefixed to the message when given.
        hint: an optional next step, appended after `` — ``.
    """

    def __init__(self, message: str, path: Optional[Union[str, Path]] = None,
                 hint: Optional[str] = None) -> None:
        text = " ".join(str(message).split())
        if path is not None:
            text = f"{path}: {text}"
        if hint:
            text = f"{text} — {' '.join(str(hint).split())}"
        super().__init__(text)
        self.path = str(path) if path is not None else None
        self.hint = hint


class LakeBusyError(TilakeError):
    """Raised when another writer holds the lake's lock file."""
