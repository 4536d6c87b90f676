"""The progress bars the front door draws for the lower floors (:mod:`tilake.progress`): rich
``Progress`` objects, started and stopped here, handed down as a :class:`tilake.progress.Progress`.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Iterator

from tilake.progress import NullProgress, Progress


@contextlib.contextmanager
def ingest_bar(enabled: bool = True) -> Iterator[Progress]:
    """The ingest bar (``ingest <run id> ━━━ 3/8 0:00:04``, one task per ingest; transient; on stdout, drawn
    only on a terminal); ``enabled`` False yields a :class:`~tilake.progress.NullProgress`."""
    if not enabled:
        yield NullProgress()
        return
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress

    cols = [TextColumn("[bold]ingest[/] {task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn()]
    from rich.console import Console

    console = Console()   # off the terminal nothing is drawn (rich would still end with an empty stdout line)
    with RichProgress(*cols, transient=True, console=console, disable=not console.is_terminal) as bar:
        yield bar


@contextlib.contextmanager
def steps_bar(enabled: bool = True) -> Iterator[Progress]:
    """The dump-analysis bar on stderr (one task per step, 48-character labels, ``n/m`` and elapsed time;
    transient); feed it through :func:`tilake.progress.label_callback`."""
    if not enabled:
        yield NullProgress()
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress

    prog = RichProgress(TextColumn("{task.description:<48}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True)
    prog.start()
    try:
        yield prog
    finally:
        prog.stop()


def rich_notice(text: str, style: str = "") -> None:
    """A :data:`tilake.progress.Notice` on a rich stderr console (wrapped to its width, ``style`` applied)."""
    from rich.console import Console
    from rich.text import Text

    Console(stderr=True).print(Text(text, style=style) if style else text, markup=False, highlight=False)


def _rich_broken_pipe(console) -> None:
    """rich's ``Console.on_broken_pipe`` exits with status 1; raise the error instead, so that
    :func:`quiet_broken_pipe` ends the command with 0 whichever writer met the closed pipe."""
    console.quiet = True
    raise BrokenPipeError(32, "Broken pipe")


@contextlib.contextmanager
def quiet_broken_pipe() -> Iterator[None]:
    """Around a CLI command: when stdout's reader has gone (``tilake scan … | head -2``), stop quietly with
    exit status 0 (the convention of cat/grep/git), not a traceback or rich's/click's silent status 1."""
    from rich.console import Console

    from tilake.files import discard_stdout

    Console.on_broken_pipe = _rich_broken_pipe
    try:
        yield
    except BrokenPipeError:
        discard_stdout()
        sys.exit(0)
