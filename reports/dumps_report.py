"""Render ``alignment_report.md`` and ``alignment_report.html`` from ``report_source.json``.

Templates (jinja2): ``reports/templates/alignment_report.md.j2`` / ``.html.j2``. They only
format the facts in the report source; no thresholds or joins live here. The HTML embeds charts
as base64 PNG (matplotlib, Agg backend): one signed-ULP histogram per diverging boundary and the
amplification chain (max|diff| and tensor-scale ULP per boundary from the first divergence on).
"""
from __future__ import annotations

import base64
import io
import json
import os
import uuid
from pathlib import Path
from typing import Any, Dict, List

from ..ingest.errors import TilakeError

TEMPLATES = Path(__file__).resolve().parent / "templates"
MAX_HIST_CHARTS = 64


def _env():
    import jinja2

    if not (TEMPLATES / "alignment_report.md.j2").is_file():
        raise TilakeError("report template missing (broken install)", path=TEMPLATES)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=False,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters["fmt"] = _fmt
    env.filters["tojson_compact"] = lambda v: json.dumps(v, ensure_ascii=False)
    # markdown table cells: a literal "|" (as in "max|diff|") would split the cell
    env.filters["cell"] = lambda v: str(v).replace("|", "\\|").replace("\n", " ")
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


def hist_chart(row: Dict[str, Any]) -> str:
    """Bar chart of the signed-ULP histogram of one boundary (base64 PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist = row.get("ulp_hist") or {}
    labels = [k for k in hist]
    vals = [hist[k] for k in labels]
    fig, ax = plt.subplots(figsize=(4.6, 2.0))
    colors = ["#c0392b" if k not in ("0",) else "#7f8c8d" for k in labels]
    ax.bar(range(len(labels)), vals, color=colors)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=6, rotation=30)
    ax.set_yscale("symlog")
    ax.set_title(f"{row['boundary']} (round {row['round']}): signed ULP", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    return _png(fig)


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


def _write(path: Path, text: str) -> Path:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def render_reports(src: Dict[str, Any], out_dir: Path, charts: bool = True) -> Dict[str, Path]:
    """Render both reports into ``out_dir``; returns ``{"report_md": path, "report_html": path}``."""
    env = _env()
    out_dir = Path(out_dir)
    md = env.get_template("alignment_report.md.j2").render(s=src)
    hists, chain_png = [], None
    if charts:
        div = [b for b in src["boundaries"] if b.get("ulp_hist") and b["status"] not in ("EXACT",)
               and b.get("mismatch_count")]
        for b in div[:MAX_HIST_CHARTS]:
            hists.append({"boundary": b["boundary"], "round": b["round"], "png": hist_chart(b)})
        if src.get("amplification_chain"):
            chain_png = chain_chart(src["amplification_chain"], "amplification chain from the first divergence (round 0)")
    html = env.get_template("alignment_report.html.j2").render(
        s=src, hists=hists, chain_png=chain_png, hist_left_out=max(0, len([b for b in src["boundaries"]
                                                                           if b.get("mismatch_count")]) - len(hists)))
    return {"report_md": _write(out_dir / "alignment_report.md", md),
            "report_html": _write(out_dir / "alignment_report.html", html)}
