"""Render ``alignment_report.md`` and ``alignment_report.html`` from ``report_source.json``.

Templates (jinja2): ``reports/templates/alignment_report.md.j2`` / ``.html.j2``. They only
format the facts in the report source; no thresholds or joins live here. The HTML holds one
inline-SVG signed-ULP histogram per diverging boundary and the amplification chain (max|diff| and
tensor-scale ULP per boundary from the first divergence on) as a base64 PNG (matplotlib, Agg).
"""
from __future__ import annotations

import base64
import io
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional

from tilake.errors import TilakeError
from tilake.files import atomic_write_text
from tilake.lake.dump_records import DumpJoin, ReportSource
from tilake.vocab import BoundaryStatus

TEMPLATES = Path(__file__).resolve().parent / "templates"


def _env(markdown: bool = False):
    import jinja2

    from tilake.reports.escape import markdown_env

    if not (TEMPLATES / "alignment_report.md.j2").is_file():
        raise TilakeError("report template missing (broken install)", path=TEMPLATES)
    # Markdown: every value escaped for Markdown (names, --card values; "|" as in "max|diff|"
    # would split a cell); HTML: autoescape on, our own SVG passed as Markup
    kw = dict(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env = (markdown_env(TEMPLATES, **kw) if markdown else
           jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True, **kw))
    env.filters["fmt"] = _fmt
    env.filters["tojson_compact"] = lambda v: json.dumps(v, ensure_ascii=False)
    return env


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 1e4 or abs(v) < 1e-3:
            return f"{v:.{digits - 1}e}"
        return f"{v:.{digits}g}"
    return str(v)


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def hist_svg(row: Dict[str, Any]) -> str:
    """Inline SVG bar chart of one boundary's signed-ULP histogram (log-scaled bar heights).

    Plain SVG (no matplotlib) so every diverging boundary gets its chart at negligible cost.
    """
    from xml.sax.saxutils import escape

    hist = row.get("ulp_hist") or {}
    labels = list(hist)
    vals = [int(hist[k]) for k in labels]
    top = math.log10(1 + max(vals or [1]))
    w, h, pad, bw = 300, 110, 18, 28
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img">',
           f'<title>{escape(row["boundary"])} round {row["round"]}: signed ULP histogram</title>',
           f'<text x="4" y="11" font-size="10">{escape(row["boundary"])} (round {row["round"]}): signed ULP</text>']
    base = h - pad
    for i, (lab, v) in enumerate(zip(labels, vals)):
        bh = 0 if v == 0 or top == 0 else max(1.0, (base - 18) * math.log10(1 + v) / top)
        x = 6 + i * (bw + 4)
        color = "#7f8c8d" if lab == "0" else "#c0392b"
        out.append(f'<rect x="{x}" y="{base - bh:.1f}" width="{bw}" height="{bh:.1f}" fill="{color}">'
                   f'<title>{escape(lab)}: {v}</title></rect>')
        out.append(f'<text x="{x + bw / 2}" y="{base - bh - 2:.1f}" font-size="7" text-anchor="middle">{v}</text>')
        out.append(f'<text x="{x + bw / 2}" y="{h - 5}" font-size="7" text-anchor="middle">{escape(lab)}</text>')
    out.append("</svg>")
    return "".join(out)


def row_curve_svg(row: Dict[str, Any], bound: float = 4.0) -> str:
    """Inline SVG line of one boundary's per-row error (``row_tensor_ulp``: max|Δ| per row in ULP of
    max|reference|) against the row (token position), with the rounding bound as a dashed line.

    Rows above the bound stand out (a wrong mask or position in a few rows); a curve rising with the
    position exposes position-growing errors (RoPE).
    """
    from xml.sax.saxutils import escape

    ys = [float(v or 0.0) for v in row.get("row_tensor_ulp") or []]
    w, h, pad = 320, 120, 20
    top = max(ys + [bound * 1.5])
    sx = (w - 2 * pad) / max(len(ys) - 1, 1)

    def y(v: float) -> float:
        return h - pad - (h - 2 * pad) * (v / top if top else 0)

    pts = " ".join(f"{pad + i * sx:.1f},{y(v):.1f}" for i, v in enumerate(ys))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img">',
           f'<title>{escape(row["boundary"])} round {row["round"]}: error per row</title>',
           f'<text x="4" y="11" font-size="10">{escape(row["boundary"])} (round {row["round"]}): '
           f'ULP at tensor scale per row (max {max(ys or [0]):.3g})</text>',
           f'<line x1="{pad}" x2="{w - pad}" y1="{y(bound):.1f}" y2="{y(bound):.1f}" stroke="#b9770e" '
           f'stroke-dasharray="4 3"><title>rounding bound {bound:g} ULP</title></line>',
           f'<polyline points="{pts}" fill="none" stroke="#c0392b" stroke-width="1.5"/>',
           f'<text x="{pad}" y="{h - 5}" font-size="8">row 0</text>',
           f'<text x="{w - pad}" y="{h - 5}" font-size="8" text-anchor="end">row {max(len(ys) - 1, 0)}</text>',
           "</svg>"]
    return "".join(out)


def chain_chart(chain: List[Dict[str, Any]], title: str) -> str:
    """Amplification chain: max|diff| (log) and tensor-scale ULP per boundary (base64 PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [c for c in chain if c.get("max_abs_diff") is not None]
    fig, ax = plt.subplots(figsize=(9, 2.8))
    xs = list(range(len(pts)))
    ax.plot(xs, [max(c["max_abs_diff"], 1e-12) for c in pts], marker="o", ms=3, color="#c0392b", label="max|diff|")
    ax.set_yscale("log")
    ax.set_ylabel("max|diff|", fontsize=8)
    ax2 = ax.twinx()
    ax2.plot(xs, [c.get("tensor_ulp") or 0 for c in pts], marker="s", ms=2, color="#2980b9", label="tensor ULP")
    ax2.set_ylabel("ULP at tensor scale", fontsize=8)
    ax.set_xticks(xs)
    ax.set_xticklabels([c["boundary"] for c in pts], rotation=75, fontsize=6)
    fig.legend(loc="upper left", fontsize=7, bbox_to_anchor=(0.07, 0.88))
    ax.set_title(title, fontsize=9)
    return _png(fig)



def render_reports(src: ReportSource, out_dir: Path, charts: bool = True,
                   join: Optional[DumpJoin] = None) -> Dict[str, Path]:
    """Render both reports into ``out_dir``; returns ``{"report_md": path, "report_html": path}``.

    ``join``: the profile ⋈ dump facts (:func:`tilake.reports.alignment.dump_join_facts`, read from the
    marts); None = the analysis is not in a lake (the section says how to get the join)."""
    from markupsafe import Markup

    from tilake.reports.alignment import dump_join_facts

    env = _env()
    out_dir = Path(out_dir)
    join = join or dump_join_facts(None, None)
    md = _env(markdown=True).get_template("alignment_report.md.j2").render(s=src, j=join)
    hists, chain_png, row_curves = [], None, []
    if charts:
        div = [b for b in src["boundaries"] if b.get("ulp_hist") and b["status"] not in (BoundaryStatus.EXACT,)
               and b.get("mismatch_count")]
        for b in div:
            hists.append({"boundary": b["boundary"], "round": b["round"], "svg": Markup(hist_svg(b))})
        pts = {(p["boundary"], p["round"]) for p in src.get("points") or []}
        bound = float(src.get("map", {}).get("rounding_bound") or 4.0)
        row_curves = [{"boundary": b["boundary"], "svg": Markup(row_curve_svg(b, bound))} for b in div
                      if (b["boundary"], b["round"]) in pts and len(b.get("row_tensor_ulp") or []) > 1]
        if src.get("amplification_chain"):
            chain_png = chain_chart(src["amplification_chain"], "amplification chain from the first divergence (round 0)")
    html = env.get_template("alignment_report.html.j2").render(s=src, hists=hists, chain_png=chain_png,
                                                               row_curves=row_curves, j=join)
    return {"report_md": atomic_write_text(out_dir / "alignment_report.md", md, mkdir=False),
            "report_html": atomic_write_text(out_dir / "alignment_report.html", html, mkdir=False)}
