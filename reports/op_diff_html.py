"""``train_infer_op_diff_report.html``: the operator diff as a page a person reads in a browser.

Rendered from the same facts as the Markdown report (:func:`tilake.reports.op_diff.load_facts`, marts
only) with ``reports/templates/op_diff_report.html.j2`` and jinja2 autoescape ON, so a kernel name,
path or call stack holding ``<``/``&`` shows as text. The page is self-contained (no CDN): inline CSS,
a small inline script that sorts the comparison table by any column and filters it by text and grade,
and the ``op_diff_overview.png`` chart embedded as base64. Layout follows the dump report
(``alignment_report.html``): the comparison table fits 1,400 px, long op sequences (more than two ops
or over 48 characters) fold into a ``<details>`` cell, grade and rule stay visible, each module has
its own section with collapsible runtime call stacks, and device time (total and mean µs per side,
infer/train ratio; :mod:`tilake.reports.tables`) sits next to the counts.
"""
from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from tilake.files import atomic_write_bytes
from tilake.reports.captures import (
    catalog_hint,
    invalid_text,
    status_text,
    steps_counted,
    steps_note,
    uncatalogued_kinds,
)
from tilake.reports.labels import label
from tilake.reports.layer_picture import layer_svg
from tilake.reports.op_diff_verdict import op_diff_verdict
from tilake.reports.run_facts import metrics_text, run_settings, run_tools
from tilake.reports.tables import evidence_words, grade_label, row_key, side_op_records

REPORT_NAME = "train_infer_op_diff_report.html"
TEMPLATES = Path(__file__).resolve().parent / "templates"


def render_html(facts: Dict[str, Any], records: List[Dict[str, Any]], grades: Dict[str, Dict[str, Any]],
                lang: str = "zh", chart_png: Optional[bytes] = None, generated_at: Optional[str] = None) -> str:
    """The HTML page as a string.

    Args:
        facts: :func:`tilake.reports.op_diff.load_facts` of one run.
        records: :func:`tilake.reports.tables.comparison_records` of the same facts (one per
            comparison row, same order): numeric counts and device time in µs.
        grades: ``mart_extras(...)["grades"]`` (the grade seed: emoji and labels of the key).
        chart_png: bytes of ``op_diff_overview.png`` to embed, or None.
    """
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined, autoescape=True,
                      trim_blocks=True, lstrip_blocks=True)
    env.globals["grade_text"] = lambda g, side=None: grade_label(grades, g, lang, side)
    # the grade's English words in capitals beside a zh label (HIGH, INFERENCE ONLY): readable without CJK fonts
    env.globals["grade_word"] = lambda g, side=None: grade_label(grades, g, "en", side).split(" ", 1)[-1].upper()
    env.globals.update(steps_counted=lambda caps, s: steps_counted(caps, s, lang), invalid_text=invalid_text, status_text=status_text,
                       steps_note=lambda: steps_note(lang), words=lambda key: label(key, lang))
    side_ops = {}
    by_side: Dict[str, List[Dict[str, Any]]] = {}
    for side in ("train", "infer"):
        by_side[side] = side_op_records(facts, side)
        side_ops.update({(side, o["op_type"]): o for o in by_side[side]})
    counts: Dict[str, int] = {}
    key_counts: Dict[str, int] = {}   # one-side-only rows apart (``green:train``): the key never calls them "none"
    for r in facts["comparison"]:
        counts[r["grade"]] = counts.get(r["grade"], 0) + 1
        key_counts[row_key(r)] = key_counts.get(row_key(r), 0) + 1
    try:
        parallel = json.loads(facts["run"].get("parallel_config") or "null")
    except ValueError:
        parallel = None
    env.globals["metrics_text"] = lambda rows: metrics_text(rows, lang)
    env.globals["layer_svg"] = lambda groups, li: Markup(layer_svg(groups, li, lang))   # escaped inside
    return env.get_template("op_diff_report.html.j2").render(
        verdict=op_diff_verdict(facts, lang),
        catalog_hint=catalog_hint(uncatalogued_kinds(facts["uncategorized"], facts["captures"]), lang),
        settings=run_settings(facts["run"]), tools=run_tools(facts["run"]), lang=lang, f=facts, run=facts["run"], rec=records, counts=counts, key_counts=key_counts,
        ev={side: evidence_words(facts, side, lang) for side in ("train", "infer")}, grade_keys=list(grades), by_side=by_side, side_ops=side_ops,
        stacks={(s["side"], s["op_type"]): s for s in facts["call_stacks"]},
        parallel=parallel if isinstance(parallel, dict) else None,
        chart_png=base64.b64encode(chart_png).decode("ascii") if chart_png else None,
        generated_at=generated_at or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))


def write_html(facts: Dict[str, Any], out_dir: Path, records: List[Dict[str, Any]],
               grades: Dict[str, Dict[str, Any]], lang: str = "zh", chart: Optional[Path] = None) -> Path:
    """Write ``<out_dir>/train_infer_op_diff_report.html`` (atomic: temp file + rename).

    Args: as :func:`render_html`; ``chart`` is the ``op_diff_overview.png`` to embed (skipped when absent).
    """
    png = Path(chart).read_bytes() if chart and Path(chart).is_file() else None
    return atomic_write_bytes(Path(out_dir) / REPORT_NAME, render_html(facts, records, grades, lang, png).encode("utf-8"))
