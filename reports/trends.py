"""Named trends across runs: ``tilake trend --metric red_rows --by model_family``.

Each metric is one SQL file ``reports/queries/trend_<metric>.sql`` returning ``run_id, value``
(one value per run; runnable as is with ``tilake sql``) with a header of ``-- key: value``
comment lines (``trend``, ``title``, ``unit``, ``grain``, and ``worse``: ``higher`` or ``lower``, the
direction ``tilake trend --fail-if regress`` fails on). This module joins the values to the
run registry mart ``fct_run_registry``, groups runs into series by ``--by`` and orders them on
the x axis by ``--x``:

* ``run`` — registration order (``run_seq``, 1 = oldest run of the lake);
* ``step`` — the run's training step (runs without a step are left out, and several runs of
  one series at the same step are averaged; ``runs`` counts them);
* ``created_at`` — registration time (UTC).

``--by`` takes registry columns (``model_family``, ``model_id``, ``host``, ``train_backend``,
``infer_backend``, ``kind``), ``tool:<name>`` for a recorded tool version (``tool:vllm-ascend``,
``tool:torch-npu``, ``tool:cann``, ``tool:vllm``, ``tool:megatron-core``, ``tool:msprobe``,
``tool:torch``), ``tag:<key>`` for a user tag, ``setting:<name>`` for a recorded switch
(``setting:HCCL_DETERMINISTIC``, ``setting:enforce_eager``; docs/phases.md), ``none`` for one series, or several joined by
commas (``model_family,tool:vllm-ascend``). Nothing the user types is pasted into SQL except
through this whitelist (tag keys must match ``[A-Za-z0-9._-]+`` and are passed as parameters).

Output: the series table with a terminal sparkline (▁▂▃▄▅▆▇█) per series, and a matplotlib
line chart (PNG, Agg backend, no display needed).
"""
from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Tuple

from tilake.errors import TilakeError
from tilake.files import atomic_write_bytes, atomic_write_text
from tilake.lake.store import Lake

QUERIES = Path(__file__).resolve().parent / "queries"
SPARKS = "▁▂▃▄▅▆▇█"
BY_COLUMNS = ("model_family", "model_id", "host", "train_backend", "infer_backend", "kind")
TOOL_COLUMNS = {"torch-npu": "torch_npu", "cann": "cann", "vllm": "vllm", "vllm-ascend": "vllm_ascend",
                "megatron-core": "megatron_core", "msprobe": "msprobe", "torch": "torch"}
X_AXES = {"run": "r.run_seq", "step": "r.step", "created_at": "r.created_at"}
KEY_RE = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass
class TrendDef:
    """One named trend: ``name`` (file stem after ``trend_``), header fields and its SQL text."""

    name: str
    path: Path
    sql: str
    title: str = ""
    unit: str = ""
    grain: str = ""
    # which way is worse (header ``-- worse: higher|lower``; "" when the trend does not say): ``--fail-if regress``
    worse: str = ""


def trend_defs() -> Dict[str, TrendDef]:
    """Every ``reports/queries/trend_*.sql`` keyed by metric name."""
    out: Dict[str, TrendDef] = {}
    for p in sorted(QUERIES.glob("trend_*.sql")):
        text = p.read_text(encoding="utf-8")
        head = {}
        for line in text.splitlines():
            m = re.match(r"^--\s*(\w+):\s*(.*)$", line)
            if m:
                head[m.group(1)] = m.group(2).strip()
        name = p.stem[len("trend_"):]
        out[name] = TrendDef(name, p, text, head.get("title", name), head.get("unit", ""), head.get("grain", ""),
                             head.get("worse", ""))
    return out


def by_expression(by: str) -> Tuple[str, List[str]]:
    """SQL expression (over registry alias ``r``) and parameters for a ``--by`` spec.

    Raises:
        TilakeError: an unknown grouping (the message lists the accepted ones).
    """
    parts, params = [], []
    for item in [s.strip() for s in by.split(",") if s.strip()] or ["none"]:
        if item == "none":
            parts.append("'all runs'")
        elif item in BY_COLUMNS:
            parts.append(f"coalesce(r.{item}, 'unknown')")
        elif item.startswith("tool:"):
            tool = item[5:].strip().lower().replace("_", "-")
            if tool not in TOOL_COLUMNS:
                raise TilakeError(f"unknown tool {item[5:]!r} for --by: use one of "
                                  + ", ".join("tool:" + t for t in TOOL_COLUMNS))
            parts.append(f"'{tool} ' || coalesce(r.{TOOL_COLUMNS[tool]}, 'unknown')")
        elif item.startswith("tag:"):
            key = item[4:].strip()
            if not KEY_RE.match(key):
                raise TilakeError(f"invalid tag key {key!r} for --by (letters, digits, '.', '_', '-')")
            parts.append("? || '=' || coalesce(json_extract_string(r.tags, ?), 'unknown')")
            params += [key, f'$."{key}"']
        elif item.startswith("setting:"):
            # a switch recorded with the run (runs.settings {name: {value, source}}; docs/phases.md)
            key = item[8:].strip()
            if not KEY_RE.match(key):
                raise TilakeError(f"invalid setting name {key!r} for --by (letters, digits, '.', '_', '-')")
            parts.append("? || '=' || coalesce(json_extract_string(r.settings, ?), 'unknown')")
            params += [key, f'$."{key}".value']
        else:
            raise TilakeError(f"unknown --by {item!r}: use none, {', '.join(BY_COLUMNS)}, tool:<name>, "
                              "tag:<key> or setting:<name>")
    if len(parts) == 1:
        return parts[0], params
    return "concat_ws(' · ', " + ", ".join(parts) + ")", params


@dataclass
class Series:
    """One line of a trend: its label and points ``(x, value, runs, last run id)`` in x order."""

    label: str
    points: List[Tuple[object, float, int, str]] = field(default_factory=list)

    @property
    def values(self) -> List[float]:
        return [p[1] for p in self.points]


@dataclass
class TrendResult:
    """Result of :func:`compute_trend`: the definition, axis name, series and the SQL that ran."""

    trend: TrendDef
    by: str
    x: str
    series: List[Series]
    sql: str


def trend_sql(trend: TrendDef, by: str, x: str) -> Tuple[str, List[str]]:
    """The full query: trend values joined to ``fct_run_registry``, grouped per series and x."""
    if x not in X_AXES:
        raise TilakeError(f"unknown --x {x!r}: use one of {', '.join(X_AXES)}")
    expr, params = by_expression(by)
    body = "\n".join(l for l in trend.sql.splitlines() if not l.strip().startswith("--")).strip().rstrip(";")
    xcol = X_AXES[x]
    sql = (f"with m as (\n{body}\n)\n"
           f"select {expr} as series, {xcol} as x, avg(m.value) as value, count(*) as runs, "
           f"arg_max(r.run_id, r.run_seq) as last_run_id\n"
           f"from m join fct_run_registry r on r.run_id = m.run_id\n"
           f"where m.value is not null and {xcol} is not null\n"
           f"group by all\norder by series, x")
    return sql, params


def compute_trend(lake: Lake, metric: str, by: str = "model_family", x: str = "run") -> TrendResult:
    """Run a named trend against the warehouse (read-only connection).

    Raises:
        TilakeError: unknown metric/--by/--x, no warehouse, or a DuckDB error (one line; e.g. the
            trend marts are missing because the lake was built before they existed: rebuild).
    """
    import duckdb

    from tilake.lake.sql import check_statements, duckdb_error_line, open_readonly

    defs = trend_defs()
    if metric not in defs:
        raise TilakeError(f"unknown trend {metric!r}: use one of {', '.join(defs)}")
    sql, params = trend_sql(defs[metric], by, x)
    con = open_readonly(lake, sql)   # queries from files never get file access outside the lake
    try:
        check_statements(con, sql)   # a trend file is SQL text like any other: SELECT-type only
        rows = con.execute(sql, params).fetchall()
    except TilakeError as exc:
        raise TilakeError(f"trend {metric}: {exc}", path=defs[metric].path) from exc
    except duckdb.Error as exc:
        raise TilakeError(f"trend {metric}: {duckdb_error_line(exc)}", path=defs[metric].path,
                          hint="rebuild the warehouse with `tilake build` if a trend mart is missing") from exc
    finally:
        con.close()
    series: Dict[str, Series] = {}
    for label, xv, value, runs, last in rows:
        series.setdefault(label, Series(label)).points.append((xv, float(value), int(runs), last))
    return TrendResult(defs[metric], by, x, list(series.values()), sql)


def sparkline(values: List[float]) -> str:
    """One character per value, ``▁`` (series minimum) to ``█`` (maximum); flat series are ``▄``."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    if hi == lo:
        return SPARKS[3] * len(values)
    return "".join(SPARKS[min(7, int((v - lo) / (hi - lo) * 7 + 0.5))] for v in values)


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.4g}"


def print_trend(res: TrendResult, console=None) -> None:
    """Rich table: one row per series with points, first/last/min/max values and a sparkline."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    by = trend_title(res)[len(res.trend.title or res.trend.name):]   # " by <series>", or '' for --by none
    t = Table(title=escape(f"{res.trend.name}{by} (x = {res.x}) — {res.trend.title}"
                           + (f" [{res.trend.unit}]" if res.trend.unit else "")))
    for col, just in (("series", "left"), ("points", "right"), ("first", "right"), ("last", "right"),
                      ("min", "right"), ("max", "right"), ("trend", "left"), ("last run", "left")):
        t.add_column(col, justify=just, overflow="fold", no_wrap=col == "last run")   # a run id stays whole
    for s in res.series:
        v = s.values
        t.add_row(escape(s.label), str(len(v)), _fmt(v[0]), _fmt(v[-1]), _fmt(min(v)), _fmt(max(v)),
                  sparkline(v), escape(s.points[-1][3]))
    if not res.series:
        console.print(f"no values for trend {res.trend.name} ({res.trend.grain or 'see its SQL file'})", markup=False)
        return
    console.print(t)


def trend_title(res: TrendResult) -> str:
    """Chart title: the trend's title, ``by <series>`` only when runs are grouped (never "by none")."""
    title = res.trend.title or res.trend.name
    by = ",".join(p.strip() for p in res.by.split(",") if p.strip() and p.strip() != "none")
    return f"{title} by {by}" if by else title


def run_ticks(res: TrendResult, most: int = 16, width: int = 24) -> List[Tuple[Any, str]]:
    """``(run_seq, run id)`` x ticks of an ``--x run`` chart: every run when at most ``most``, else
    evenly spaced ones (first and last kept); ids over ``width`` characters keep their end (the
    distinguishing part of ``<name>-<hash>`` ids) behind ``…``."""
    seen: Dict[Any, str] = {}
    for s in res.series:
        for x, _v, _n, last in s.points:
            seen.setdefault(x, str(last))
    xs = sorted(seen)
    if len(xs) > most:
        step = (len(xs) - 1) / (most - 1)
        xs = sorted({xs[round(i * step)] for i in range(most)})
    return [(x, seen[x] if len(seen[x]) <= width else "…" + seen[x][-(width - 1):]) for x in xs]


def plot_trend(res: TrendResult, output: Path) -> Path:
    """Write a matplotlib line chart (one line per series) to ``output``; returns the path.

    ``*.html`` writes one self-contained page: the PNG inlined (base64) plus a table of every
    point (series, x, value, runs, last run id); any other suffix writes the PNG itself.

    Raises:
        TilakeError: nothing to plot, or the file cannot be written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not res.series:
        raise TilakeError(f"trend {res.trend.name}: no values to plot")
    output = Path(output)
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    try:
        for s in res.series:
            xs = [p[0] for p in s.points]
            # '$' starts matplotlib mathtext (a bad formula raises); a leading '_' hides the legend entry
            label = s.label.replace("$", r"\$")
            ax.plot(xs, s.values, marker="o", markersize=3, linewidth=1.4,
                    label=" " + label if label.startswith("_") else label)
        # emoji (🔴 in a trend title) are not in matplotlib's default font: drawn as boxes, so left out
        import textwrap

        title = re.sub(r"\s+", " ", re.sub("[\U00010000-\U0010FFFF]", "", trend_title(res))).strip()
        ax.set_title(textwrap.fill(title, 90), fontsize=11)   # wrapped: a long title never runs off the figure
        if all(v >= 0 for se in res.series for v in se.values):
            top = max(v for se in res.series for v in se.values)
            ax.set_ylim(0, top * 1.1 if top > 0 else 1)   # counts and times start at 0; the top point clears the frame
        ax.set_xlabel({"run": "run id (registration order)", "step": "training step",
                       "created_at": "registered at (UTC)"}[res.x])
        ax.set_ylabel(res.trend.unit or "value")
        ax.grid(True, alpha=0.3)
        if len(res.series) <= 12:
            ax.legend(fontsize=8, loc="best")
        if res.x == "created_at":
            fig.autofmt_xdate()
        elif res.x == "run":
            ticks = run_ticks(res)
            ax.set_xticks([x for x, _ in ticks])
            ax.set_xticklabels([label for _, label in ticks], rotation=30, ha="right", fontsize=8)
        else:
            from matplotlib.ticker import MaxNLocator
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        fig.tight_layout()
        try:
            if output.suffix.lower() in (".html", ".htm"):
                atomic_write_text(output, _html(res, fig))
            else:
                buf = io.BytesIO()
                fig.savefig(buf, format="png")
                atomic_write_bytes(output, buf.getvalue())
        except OSError as exc:
            raise TilakeError(f"cannot write the chart: {exc.strerror or exc}", path=output) from exc
    finally:
        plt.close(fig)
    return output


def _html(res: TrendResult, fig) -> str:
    import base64
    import html

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    img = base64.b64encode(buf.getvalue()).decode()
    rows = "".join(f"<tr><td>{html.escape(s.label)}</td><td>{html.escape(str(x))}</td><td>{_fmt(v)}</td>"
                   f"<td>{n}</td><td>{html.escape(last)}</td></tr>" for s in res.series for x, v, n, last in s.points)
    title = html.escape(f"{res.trend.name} by {res.by} — {res.trend.title}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}</style></head><body>"
            f"<h1>{title}</h1><p>unit: {html.escape(res.trend.unit or '-')}; x: {html.escape(res.x)}; "
            f"source: reports/queries/{html.escape(res.trend.path.name)}</p>"
            f"<img alt='{title}' src='data:image/png;base64,{img}'>"
            "<table><tr><th>series</th><th>x</th><th>value</th><th>runs</th><th>last run</th></tr>"
            f"{rows}</table></body></html>\n")
