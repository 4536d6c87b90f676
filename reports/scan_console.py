"""The terminal and the fallback-3 report of ``tilake scan``: everything the scan shows, drawn with rich.

:mod:`tilake.pipeline.scan` sequences the stages and hands plain facts here (tables as rows, the
report as a dict from :func:`tilake.pipeline.scan_print.skipped_report_facts`); nothing is decided
here. :class:`ScanConsole` is also the :class:`tilake.progress.Display` that the RL run's live view and
the ``analyse()`` spinner of :mod:`tilake.ingest.scan` draw on.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypedDict

from tilake.files import atomic_write_text
from tilake.progress import Segments

TEMPLATES = Path(__file__).resolve().parent / "templates"


class ConfigView(TypedDict):
    """The stage-1 table as plain data (:func:`tilake.pipeline.scan_print.config_view`)."""

    title: str
    # (item, shown value, unknown?, source)
    rows: List[Tuple[str, str, bool, str]]
    # the run's warnings, then the notes (parser warnings, the profiler plan, the steps note)
    warnings: List[str]
    notes: List[str]


class Stage3View(TypedDict):
    """Stage 3 as plain data (:func:`tilake.pipeline.scan_print.stage3_view`)."""

    title: str
    # every capture operation attempted, with its result (``Stage3.operations``)
    operations: List[Dict[str, Any]]
    known_warnings: List[str]
    # (side, words for its status)
    sides: List[Tuple[str, str]]


class SkippedReportFacts(TypedDict):
    """The facts of the fallback-3 report (``scan_skipped_report.md.j2``;
    :func:`tilake.pipeline.scan_print.skipped_report_facts`)."""

    model_id: str
    reason: str
    # (metadata key, value)
    metadata: List[Tuple[str, Any]]
    run_id: str
    parallel_config_json: str
    seam: str
    real: bool
    generated_at: str
    # per capture source: side, label, status, path, db, compute_task_info_rows, fallback, note
    sources: List[Dict[str, Any]]
    operations: List[Any]
    known_warnings: List[str]
    failed_notes: List[str]
    infer_failed: bool


def escape(text: Any) -> str:
    """``text`` with rich markup characters escaped (a path or value inside a :meth:`ScanConsole.say` line)."""
    from rich.markup import escape as rich_escape

    return rich_escape(str(text))


class ScanConsole:
    """A rich console for ``tilake scan`` (stdout by default; ``stderr`` for ``--format json``).

    Args:
        console: a rich ``Console`` to draw on (tests: a recording or quiet one); default a new one.
    """

    def __init__(self, console: Any = None, stderr: bool = False) -> None:
        if console is None:
            from rich.console import Console

            console = Console(stderr=stderr)
        self.console = console

    @classmethod
    def wrap(cls, console: Any = None) -> "ScanConsole":
        """``console`` when it is a :class:`ScanConsole`, else one drawing on it (a rich ``Console`` or None)."""
        return console if isinstance(console, ScanConsole) else cls(console)

    # --------------------------------------------------------------- Display (tilake.progress)
    def note(self, text: str, style: str = "") -> None:
        from rich.text import Text

        self.console.print(Text(text, style=style))

    def status(self, text: str):
        return self.console.status(text)

    @contextlib.contextmanager
    def live(self, segments: Segments) -> Iterator[Callable[[Segments], None]]:
        from rich.live import Live

        with Live(_text(segments), console=self.console, refresh_per_second=4, transient=True) as lv:
            yield lambda segs: lv.update(_text(segs))

    # --------------------------------------------------------------- scan lines
    def say(self, markup: str) -> None:
        """One line in rich markup (``[bold]…[/]``); values inside it go through :func:`escape`."""
        self.console.print(markup)

    def panel(self, text: str, title: str, border_style: Optional[str] = None) -> None:
        """``text`` (plain) in a box titled ``title``."""
        from rich.panel import Panel
        from rich.text import Text

        kw = {"border_style": border_style} if border_style else {}
        self.console.print(Panel(Text(text), title=title, **kw))

    def config(self, view: ConfigView) -> None:
        """The stage-1 table (``view``: :func:`tilake.pipeline.scan_print.config_view`) and its notes. Cells
        fold instead of being cut, so at 80 columns every value and source is shown in full."""
        from rich.table import Table
        from rich.text import Text

        t = Table(title=view["title"], show_lines=False, expand=True)
        t.add_column("item", overflow="fold", ratio=2)
        t.add_column("value", overflow="fold", ratio=2)
        t.add_column("from", style="dim", overflow="fold", ratio=5)
        for label, shown, unknown, source in view["rows"]:
            t.add_row(label, Text(shown, style="yellow" if unknown else ""), Text(source))
        self.console.print(t)
        for w in view["warnings"]:
            self.console.print(Text("  warning: ", style="bold red") + Text(w))
        for w in view["notes"]:
            self.console.print(Text("  note: ", style="yellow") + Text(w))

    def diff(self, diff: str) -> None:
        """The planned or applied unified diff, coloured per line (long lines are not cut)."""
        from rich.text import Text

        for line in diff.splitlines():
            style = ("green" if line.startswith("+") else "red" if line.startswith("-")
                     else "cyan" if line.startswith("@@") else "")
            self.console.print(Text(line, style=style), soft_wrap=True)

    def checks(self, checks: Sequence[Any]) -> None:
        """The stage-1 environment checks (``name``, ``ok``, ``required``, ``detail``, ``fix`` each), with fixes."""
        from rich.table import Table
        from rich.text import Text

        t = Table(title="stage 1 · environment check")
        t.add_column("")
        t.add_column("check", overflow="fold")
        t.add_column("found", overflow="fold")
        t.add_column("fix", overflow="fold")
        for c in checks:
            mark = "[green]✓[/]" if c.ok else ("[red]✗[/]" if c.required else "[yellow]–[/]")
            t.add_row(mark, Text(c.name), Text(c.detail), Text(c.fix or ""))
        self.console.print(t)

    def stage3(self, view: Stage3View) -> None:
        """Stage 3 (``view``: :func:`tilake.pipeline.scan_print.stage3_view`): every capture operation with
        its result, the known warnings, and each side's evidence."""
        from rich.table import Table
        from rich.text import Text

        t = Table(title=view["title"])
        t.add_column("#")
        t.add_column("side", overflow="fold")
        t.add_column("operation", overflow="fold")
        t.add_column("result", overflow="fold")
        t.add_column("detail", overflow="fold")
        for o in view["operations"]:
            t.add_row(str(o["n"]), o["side"], Text(o["operation"]) + Text("  " + o["target"], style="dim"),
                      o["result"], Text((o["detail"] or "") + (f" (fallback {o['fallback']})" if o.get("fallback") else "")))
        self.console.print(t)
        for w in view["known_warnings"]:
            self.console.print(Text("  known warning ", style="cyan")
                               + Text(f"“{w['pattern']}” ×{w['count']}: {w['explanation']}"))
        for side, label in view["sides"]:
            self.console.print(f"  {side}: [bold]{label}[/]")


def _text(segments: Segments):
    from rich.text import Text

    t = Text()
    for text, style in segments:
        t.append(text, style=style or None)
    return t


def render_skipped_report(facts: SkippedReportFacts, lang: str = "zh") -> str:
    """The fallback-3 Markdown report (``templates/scan_skipped_report.md.j2``) from plain ``facts``."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined, keep_trailing_newline=True,
                      trim_blocks=True, autoescape=False)
    return env.get_template("scan_skipped_report.md.j2").render(zh=lang == "zh", **facts)


def write_skipped_report(facts: SkippedReportFacts, out_dir: Path, lang: str = "zh") -> Path:
    """Write :func:`render_skipped_report` as ``<out_dir>/train_infer_op_diff_report.md`` (atomic); returns its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(out_dir / "train_infer_op_diff_report.md", render_skipped_report(facts, lang))
