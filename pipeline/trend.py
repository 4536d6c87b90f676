"""``tilake trend``: a named trend across runs (:mod:`tilake.reports.trends`), its chart file named,
and the CI check ``--fail-if`` (:func:`check_regression`).

Read-only: the trend is computed from the warehouse marts; nothing in the lake is written. The chart
goes to ``--output FILE``, else into ``--out DIR``; with neither, no file is written.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import List, NamedTuple, Optional, Tuple

from tilake.errors import TilakeError
from tilake.lake.store import Lake
from tilake.reports import trends
from tilake.vocab import ExitCode

FAIL_IF = ("regress", "increase", "decrease", "change")
"""``--fail-if`` choices: ``regress`` (the trend's ``worse:`` direction), ``increase``, ``decrease``, ``change``."""


def list_trends() -> List[Tuple[str, str, str]]:
    """``(name, title, unit)`` of every named trend (``reports/queries/trend_<name>.sql``)."""
    return [(name, d.title, d.unit) for name, d in trends.trend_defs().items()]


def default_chart_path(metric: str, by: str, out_dir: Path = Path(".")) -> Path:
    """``<out_dir>/trend_<metric>_by_<by>.png`` (characters other than ``[A-Za-z0-9._-]`` in ``by`` become ``_``)."""
    return Path(out_dir) / f"trend_{metric}_by_{re.sub(r'[^A-Za-z0-9._-]+', '_', by)}.png"


def trend_command(lake: Lake, metric: str, *, by: str = "model_family", x: str = "run",
                  output: Optional[Path] = None, chart: bool = True,
                  out_dir: Optional[Path] = None) -> Tuple["trends.TrendResult", Optional[Path]]:
    """Compute ``metric`` per series ``by`` along ``x``; plot it to ``output``, else to
    :func:`default_chart_path` under ``out_dir``, unless ``chart`` is False, neither is given, or no series.

    Returns:
        the :class:`tilake.reports.trends.TrendResult` and the chart path (None when none was drawn).
    Raises:
        TilakeError: unknown trend or series, no warehouse (from :func:`trends.compute_trend`).
    """
    res = trends.compute_trend(lake, metric, by, x)
    path = None
    target = output or (default_chart_path(metric, by, out_dir) if out_dir is not None else None)
    if chart and res.series and target is not None:
        path = trends.plot_trend(res, target)
    return res, path


class RegressionCheck(NamedTuple):
    """What ``--fail-if`` found: one line per series compared (last point vs the one before) and the exit status."""

    # ``regressed: …`` / ``ok: …`` per series with two points, then a summary line
    lines: List[str]
    # 0 no series regressed; 1 one did; 3 no series has two points (nothing compared: evidence_missing)
    exit_code: int


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.4g}"


def check_regression(res: "trends.TrendResult", fail_if: str) -> RegressionCheck:
    """Compare each series' last point with the previous one (x order: with ``--x run`` the previous run).

    ``regress`` fails in the direction the trend's ``worse:`` header names; ``increase`` / ``decrease``
    on a strictly larger / smaller value; ``change`` on any difference.

    Raises:
        TilakeError: unknown ``fail_if``; ``regress`` on a trend without a ``worse:`` header.
    """
    if fail_if not in FAIL_IF:
        raise TilakeError(f"unknown --fail-if {fail_if!r}: use one of {', '.join(FAIL_IF)}")
    direction = fail_if
    if fail_if == "regress":
        worse = res.trend.worse
        if worse not in ("higher", "lower"):
            raise TilakeError(f"trend {res.trend.name} does not say which way is worse (no '-- worse:' line in "
                              f"{res.trend.path.name}): use --fail-if increase, decrease or change")
        direction = "increase" if worse == "higher" else "decrease"
    lines, bad, compared = [], 0, 0
    for se in res.series:
        if len(se.points) < 2:
            continue
        compared += 1
        (_, prev, _, prev_run), (_, last, _, last_run) = se.points[-2], se.points[-1]
        hit = {"increase": last > prev, "decrease": last < prev, "change": last != prev}[direction]
        bad += hit
        lines.append(f"{'regressed' if hit else 'ok'}: {se.label}: {res.trend.name} {_fmt(prev)} → {_fmt(last)} "
                     f"({prev_run} → {last_run})")
    if not compared:
        return RegressionCheck(lines + [f"evidence_missing: no series of {res.trend.name} has two points; "
                                        "nothing to compare against (--fail-if not checked)"], ExitCode.EVIDENCE_MISSING)
    lines.append(f"--fail-if {fail_if}: {bad} of {compared} series "
                 + ("regressed" if bad else f"did not {direction} against the previous point"))
    return RegressionCheck(lines, ExitCode.CHECK_FAILED if bad else ExitCode.DONE)
