"""``tilake trend``: a named trend across runs (:mod:`tilake.reports.trends`), its chart file named.

Read-only: the trend is computed from the warehouse marts; nothing in the lake is written.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional, Tuple

from tilake.lake.store import Lake
from tilake.reports import trends


def list_trends() -> List[Tuple[str, str, str]]:
    """``(name, title, unit)`` of every named trend (``reports/queries/trend_<name>.sql``)."""
    return [(name, d.title, d.unit) for name, d in trends.trend_defs().items()]


def default_chart_path(metric: str, by: str) -> Path:
    """``trend_<metric>_by_<by>.png`` in the working folder (characters other than ``[A-Za-z0-9._-]``
    in ``by`` become ``_``)."""
    return Path(f"trend_{metric}_by_{re.sub(r'[^A-Za-z0-9._-]+', '_', by)}.png")


def trend_command(lake: Lake, metric: str, *, by: str = "model_family", x: str = "run",
                  output: Optional[Path] = None, chart: bool = True) -> Tuple["trends.TrendResult", Optional[Path]]:
    """Compute ``metric`` per series ``by`` along ``x``; plot it unless ``chart`` is False or no series.

    Returns:
        the :class:`tilake.reports.trends.TrendResult` and the chart path (None when none was drawn).
    Raises:
        TilakeError: unknown trend or series, no warehouse (from :func:`trends.compute_trend`).
    """
    res = trends.compute_trend(lake, metric, by, x)
    path = None
    if chart and res.series:
        path = trends.plot_trend(res, output or default_chart_path(metric, by))
    return res, path
