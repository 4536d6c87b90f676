"""How the lower floors report progress without drawing the terminal (a bottom-floor module beside
:mod:`tilake.settings`; it imports nothing of tilake).

The floors below the front door (``ingest``, ``lake``, ``diagnosis``, ``pipeline``) never import
``rich`` or ``click`` (an import-linter contract in ``pyproject.toml``). Where a long step shows
progress they take a :class:`Progress` (a bar with tasks) or a :data:`ProgressFn` callback and
report to it; ``cli.py`` and :mod:`tilake.reports` make the rich objects that draw it
(:mod:`tilake.reports.progress_console`). A rich ``Progress`` satisfies :class:`Progress` as it is.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Dict, Optional, Protocol, Sequence, Tuple

ProgressFn = Callable[[str, int, int], None]
"""``(label, done, total)``: item ``done`` (0-based) of ``total`` of the step ``label`` started; the
label's text before its first ``:`` names the step (one bar per step)."""


class Progress(Protocol):
    """A progress display with tasks (rich's ``Progress`` API, the part tilake uses)."""

    def add_task(self, description: str, total: Optional[float] = None, **fields: Any) -> Any:
        """Start a task of ``total`` items; returns its id."""

    def update(self, task_id: Any, *, description: Optional[str] = None, completed: Optional[float] = None,
               total: Optional[float] = None, **fields: Any) -> None:
        """Change a task's text, count or total."""

    def advance(self, task_id: Any, advance: float = 1) -> None:
        """Count ``advance`` more items of a task done."""


class NullProgress:
    """A :class:`Progress` that shows nothing (tests, ``--json``, library callers)."""

    def add_task(self, description: str, total: Optional[float] = None, **fields: Any) -> int:
        return 0

    def update(self, task_id: Any, **fields: Any) -> None:
        return None

    def advance(self, task_id: Any, advance: float = 1) -> None:
        return None


def progress_or_null(progress: Any) -> Progress:
    """``progress`` when it is a :class:`Progress`; a :class:`NullProgress` for None, True or False
    (a bool asks for the default display, which only the front door can draw)."""
    return NullProgress() if progress is None or isinstance(progress, bool) else progress


def label_callback(progress: Progress) -> ProgressFn:
    """A :data:`ProgressFn` over ``progress``: one task per step (the label before ``:``), its text the
    label (48 characters), its count ``done + 1`` of ``total``."""
    tasks: Dict[str, Any] = {}

    def cb(label: str, done: int, total: int) -> None:
        key = label.split(":")[0]
        if key not in tasks:
            tasks[key] = progress.add_task(label[:48], total=total)
        progress.update(tasks[key], completed=done + 1, total=total, description=label[:48])

    return cb


Notice = Callable[[str, str], None]
"""``(text, style)``: one line for the user on stderr; ``style`` a rich style name (``"yellow"``) or ``""``."""


def _plain_notice(text: str, style: str = "") -> None:
    import re
    import sys

    # a notice may quote a file name or a value from a capture: its control characters (ESC) are shown, not run
    text = re.sub("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", text)
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


_NOTICE: Dict[str, Notice] = {"fn": _plain_notice}


def notice(text: str, style: str = "") -> None:
    """Tell the user one line (on stderr) from a lower floor: plain text unless the front door installed
    its console (:func:`set_notice`; ``cli.py`` installs :func:`tilake.reports.progress_console.rich_notice`)."""
    _NOTICE["fn"](text, style)


def set_notice(fn: Optional[Notice]) -> None:
    """Install where :func:`notice` lines go (None: back to plain stderr lines)."""
    _NOTICE["fn"] = fn or _plain_notice


Segments = Sequence[Tuple[str, str]]
"""Styled text as ``(text, style)`` pieces (``style`` a rich style name or ``""``), for :meth:`Display.live`."""


class Display(Protocol):
    """Where a long step with its own screen (``tilake scan``: the RL run, ``analyse()``) shows itself;
    :class:`tilake.reports.scan_console.ScanConsole` draws it with rich."""

    def note(self, text: str, style: str = "") -> None:
        """One line of plain text in ``style``."""

    def status(self, text: str) -> ContextManager[Any]:
        """A spinner with ``text`` while the block runs."""

    def live(self, segments: Segments) -> ContextManager[Callable[[Segments], None]]:
        """A transient view redrawn in place while the block runs; the block gets its update function."""


class NullDisplay:
    """A :class:`Display` that shows nothing."""

    def note(self, text: str, style: str = "") -> None:
        return None

    def status(self, text: str) -> ContextManager[Any]:
        return contextlib.nullcontext()

    def live(self, segments: Segments) -> ContextManager[Callable[[Segments], None]]:
        return contextlib.nullcontext(lambda _segments: None)
