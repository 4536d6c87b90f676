"""Operator diff report: run the named queries (``reports/queries/op_diff_*.sql``) on the marts and
render ``train_infer_op_diff_report.md``, ``operator_diff_table.csv`` (UTF-8 with BOM),
``<backend>_runtime_ops.json`` per side and ``op_diff_overview.png``.

Reports only read marts (read-only DuckDB connection); thresholds and joins live in dbt.
Section layout, CSV header and grade markup follow the seed (``spec/operator-diff-scanner.txt``
stage 5).
"""
from __future__ import annotations

import csv
import io
import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional, TypedDict

from jinja2 import StrictUndefined
from markupsafe import Markup

from tilake.errors import TilakeError
from tilake.files import atomic_write_bytes
from tilake.lake.read import reading_file
from tilake.reports.alignment import alignment_facts
from tilake.reports.captures import (
    catalog_hint,
    invalid_text,
    status_text,
    steps_counted,
    steps_note,
    uncatalogued_kinds,
)
from tilake.reports.escape import csv_cell, markdown_env
from tilake.reports.labels import grade_palette, label
from tilake.reports.layer_picture import layer_pngs
from tilake.reports.op_diff_verdict import op_diff_verdict, verdict_lines
from tilake.reports.run_facts import metrics_text, run_settings, run_tools
from tilake.reports.tables import ONE_SIDE_LABEL, evidence_words, one_side, row_key
from tilake.vocab import Evidence, Grade, grade_look, grade_looks

HERE = Path(__file__).resolve().parent
QUERIES = HERE / "queries"
TEMPLATES = HERE / "templates"

COLLAPSE_AT = 20
"""A Markdown list or table longer than this many rows is folded into a ``<details>`` block whose summary counts it."""

CSV_HEADER = ["操作", "训练算子", "推理算子", "训练调用次数", "推理调用次数", "差异类型", "差异等级",
              "训练代码路径", "推理代码路径"]


def run_query(con, name: str, run_id: str) -> List[Dict[str, Any]]:
    """Run ``reports/queries/<name>.sql`` with ``$run_id`` bound; rows as dicts."""
    sql = (QUERIES / f"{name}.sql").read_text(encoding="utf-8")
    cur = con.execute(sql, {"run_id": run_id})
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def load_facts(warehouse: Path, run_id: str) -> Dict[str, Any]:
    """Every fact the report shows, read from the marts of ``warehouse`` (read-only).

    Raises:
        TilakeError: no warehouse (run ``tilake build``) or the run is not in it.
    """
    if not Path(warehouse).exists():
        raise TilakeError("no warehouse.duckdb: run `tilake build` first", path=warehouse)
    with reading_file(warehouse) as con:
        try:
            facts = {name: run_query(con, f"op_diff_{name}", run_id)
                     for name in ("run", "captures", "side_ops", "comparison", "call_stacks", "kernel_names",
                                  "uncategorized", "fused_matches", "categorisation", "phase_scope", "phases",
                                  "metrics")}
            facts["alignment"] = alignment_facts(con, run_id)   # layer-by-layer kernel alignment, profile ⋈ dump
        except Exception as exc:
            raise TilakeError(f"cannot read the marts ({str(exc).splitlines()[0]}); run `tilake build`",
                              path=warehouse) from exc
    if not facts["run"]:
        raise TilakeError(f"run {run_id!r} is not in the warehouse (ingest it, then `tilake build`)",
                          path=warehouse)
    facts["run"] = facts["run"][0]
    for side in ("train", "infer"):   # source notes (Megatron, vLLM paths) only for a backend that is known
        if not backend_known(facts["run"], side):
            for r in facts["comparison"]:
                r[f"{side}_code_path"] = r[f"{side}_code_function"] = None
    return facts


def backend_known(run: Dict[str, Any], side: str) -> bool:
    """True when the run names (``runs.<side>_backend``) or the captures show
    (``<side>_backend_detected``) the framework of ``side``; the source-path notes of models/ are
    written for those frameworks, so a plain job with an unknown backend gets none."""
    return any(str(run.get(k) or "").strip().lower() not in ("", "unknown", "none")
               for k in (f"{side}_backend", f"{side}_backend_detected"))


def grade_span(grade: str, lang: str = "zh", side: Optional[str] = None) -> str:
    """``<span style="color:red">🔴 高差异</span>`` (the seed's grade markup) for a grade.

    ``side`` (``train``/``infer``: a one-side-only row, :func:`tilake.reports.tables.one_side`):
    ``🟢 训练独有`` / ``🟢 training only`` in the grade's colour, never 无差异 / none; a grade other
    than green stays beside it (``🟡 低差异 · 推理独有``). ``grade`` may be a ``row_key`` (``green:train``).
    """
    if ":" in grade:
        grade, side = grade.split(":", 1)
    look = grade_look(grade)   # seeds/grades.csv
    word = look.label(lang)
    if side in ONE_SIDE_LABEL:
        only = label(f"one_side.{side}", lang)
        word = only if grade == Grade.GREEN else f"{word} · {only}"
    return Markup(f'<span style="color:{look.color}">{look.emoji} {word}</span>')   # our own HTML: not escaped


def ops_text(ops: Optional[List[str]], calls: Optional[List[int]], with_counts: bool) -> str:
    """``Add(6484)+RmsNorm(2712)`` for several ops, ``FlashAttentionScore`` for one, '' for none."""
    if not ops:
        return ""
    if len(ops) == 1 and not with_counts:
        return ops[0]
    return "+".join(f"{o}({c})" for o, c in zip(ops, calls or []))


def calls_text(calls: Optional[List[int]]) -> str:
    """The side's call count as one number (``9196`` for ops of 6484 and 2712 calls; the per-op split is
    in the ops cell, ``Add(6484)+RmsNorm(2712)``); '0' when the side has none."""
    return str(sum(int(c or 0) for c in calls)) if calls else "0"


def code_path(r: Dict[str, Any], side: str, lang: str = "zh") -> str:
    """Code path of one side of a comparison row: the runtime call stack's innermost frame when the
    DB had one, else the models/ source-path note marked as such; '' when the side has no ops."""
    if not r[f"{side}_ops"]:
        return ""
    if r.get(f"{side}_stack_path"):
        return r[f"{side}_stack_path"]
    note = r.get(f"{side}_code_path")
    if not note:
        return ""
    return label("cell.source_note", lang, note=note)


def csv_rows(facts: Dict[str, Any], lang: str = "zh") -> List[List[str]]:
    """The comparison table as CSV rows (header excluded), one per comparison row."""
    rows = []
    none = label("cell.none", lang)
    for r in facts["comparison"]:
        multi_t = len(r["train_ops"] or []) > 1
        multi_i = len(r["infer_ops"] or []) > 1
        rows.append([
            (r["module_label_zh"] if lang == "zh" else r["module_label_en"]) or r["module"],
            ops_text(r["train_ops"], r["train_op_calls"], multi_t) or none,
            ops_text(r["infer_ops"], r["infer_op_calls"], multi_i) or none,
            calls_text(r["train_op_calls"]), calls_text(r["infer_op_calls"]),
            r["diff_type_zh"] if lang == "zh" else r["diff_type_en"],
            grade_look(r["grade"]).emoji,
            code_path(r, "train", lang), code_path(r, "infer", lang)])
    return rows


def write_csv(facts: Dict[str, Any], path: Path, lang: str = "zh") -> Path:
    """``operator_diff_table.csv``: UTF-8 with BOM, the seed's exact (Chinese) header.

    Every cell goes through :func:`tilake.reports.escape.csv_cell`: a kernel or op name starting
    with ``= + - @`` is written with a leading ``'`` so a spreadsheet never runs it as a formula.
    """
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_HEADER)
    w.writerows([[csv_cell(c) for c in row] for row in csv_rows(facts, lang)])
    atomic_write_bytes(path, b"\xef\xbb\xbf" + buf.getvalue().encode("utf-8"))
    return path


def runtime_ops(facts: Dict[str, Any], side: str) -> Dict[str, Any]:
    """Every kernel name and op type of one side with its count (``COMPUTE_TASK_INFO ⋈ STRING_IDS``, or
    the trace events named by :func:`evidence_words` for a PyTorch-profiler capture)."""
    run = facts["run"]
    names = [k for k in facts["kernel_names"] if k["side"] == side]
    ops = [o for o in facts["side_ops"] if o["side"] == side]
    ev = evidence_words(facts, side, "en")
    return {
        "run_id": run["run_id"], "side": side,
        "backend": run[f"{side}_backend_detected"],
        "evidence": run[f"{side}_evidence"],
        "source": ev["source"] if ev["trace"] else
        "COMPUTE_TASK_INFO ⋈ TASK ⋈ STRING_IDS (+ COMMUNICATION_OP); text rows where the capture had none",
        "total_kernel_calls": int(sum(k["calls"] for k in names)),
        "kernels": [{"kernel_name": k["kernel_name"], "op_type": k["op_type"], "count": int(k["calls"]),
                     "category": k["category"]} for k in names],
        "op_types": [{"op_type": o["op_type"], "count": int(o["calls"]), "category": o["category"],
                      "module": o["module"], "total_dur_us": round(o["total_dur_ns"] / 1000.0, 3)} for o in ops],
    }


KEY_TABLES = ("TASK", "COMPUTE_TASK_INFO", "COMMUNICATION_OP", "STRING_IDS", "PYTORCH_API", "CANN_API",
              "CONNECTION_IDS", "PYTORCH_CALLCHAINS", "MSTX_EVENTS")


def key_rows(table_rows_json: Optional[str]) -> str:
    """``TASK=552, COMPUTE_TASK_INFO=187, …`` for the tables the diff reads (absent ones say 0)."""
    try:
        rows = json.loads(table_rows_json or "{}")
    except ValueError:
        return ""
    if not rows:
        return ""
    if not any(t in rows for t in KEY_TABLES):  # text export: rows per CSV file
        return ", ".join(f"{k}={v}" for k, v in rows.items())
    return ", ".join(f"{t}={rows.get(t, 0)}" for t in KEY_TABLES)



GRADE_COLOURS = {g: p["chart"] for g, p in grade_palette().items()}
"""Bar colour per grade in op_diff_overview.png (reports/templates/labels.yaml), severity order."""


def side_unit(run: Dict[str, Any], side: str) -> str:
    """What one side's counts are: ``kernel calls`` (device evidence), ``CPU op calls`` (a CPU-only
    PyTorch-profiler trace, evidence ``cpu_ops``)."""
    return "CPU op calls" if run.get(f"{side}_evidence") == Evidence.CPU_OPS else "kernel calls"


def overview_png(facts: Dict[str, Any], path: Path, lang: str = "zh") -> Optional[Path]:
    """Write :func:`overview_figure` to ``path`` (PNG, 110 dpi); None (nothing written) without rows."""
    fig = overview_figure(facts)
    if fig is None:
        return None
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path


def overview_figure(facts: Dict[str, Any]):
    """Bar chart of calls per comparison row, train (solid) vs infer (hatched), bars coloured by grade.

    The x axis (symlog) reaches past the longest bar with room for its count, so no bar touches the
    frame; each bar carries its count, a side without ops in a row says ``none`` there, and a side
    without evidence (``evidence_missing``/``host_fallback``) is named in a label over the bars. The
    legend keys the grade colours present (one-side-only rows as "training/inference only") and the
    solid/hatched sides. Labels are Latin (no CJK font needed).
    Returns the matplotlib Figure (Agg), or None when the run has no comparison rows.
    """
    rows = facts["comparison"]
    if not rows:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    run = facts["run"]
    labels = [r["module_label_en"] or r["module"] for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(rows) + 2.2))
    y = list(range(len(rows)))
    vals = {"train": [max(r["train_calls"] or 0, 0) for r in rows], "infer": [max(r["infer_calls"] or 0, 0) for r in rows]}
    c = [GRADE_COLOURS.get(r["grade"], GRADE_COLOURS[Grade.EVIDENCE_MISSING]) for r in rows]
    ax.barh([v - 0.2 for v in y], vals["train"], height=0.38, color=c, alpha=0.95)
    ax.barh([v + 0.2 for v in y], vals["infer"], height=0.38, color=c, alpha=0.45, hatch="//", edgecolor="#444444",
            linewidth=0)
    top = max(vals["train"] + vals["infer"] + [1])
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlim(0, top * 12)   # a decade of room past the longest bar: its count label stays inside the frame
    missing = {s: run.get(f"{s}_evidence") in (Evidence.MISSING, Evidence.HOST_FALLBACK) for s in ("train", "infer")}
    for side, dy in (("train", -0.2), ("infer", 0.2)):
        for yi, v in zip(y, vals[side]):
            if missing[side] and not v:
                text = "no evidence"
            else:
                text = f"{v:,}" if v else "none"
            ax.text(max(v, 0) * 1.15 + (0.05 if not v else 0), yi + dy, text, va="center", fontsize=7,
                    color="#555555" if not v else "#222222")
    ax.set_yticks(y)
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    units = sorted({side_unit(run, s) for s in ("train", "infer")})
    ax.set_xlabel(" / ".join(units) + " (symlog; solid: train, hatched: infer)")
    gone = [f"{'training' if s == 'train' else 'inference'}: {run.get(s + '_evidence')} — no bars for this side"
            for s in ("train", "infer") if missing[s]]
    ax.set_title(f"Train vs infer {units[0] if len(units) == 1 else 'calls'} per module — run {run['run_id']}",
                 fontsize=11, pad=26 if gone else 6)
    if gone:   # under the title, over the bars
        ax.text(0.5, 1.01, "; ".join(gone), transform=ax.transAxes, ha="center", va="bottom", fontsize=9,
                color="#b00000", bbox={"facecolor": "#fff3f3", "edgecolor": "#b00000"})
    names = {g: look.label_en for g, look in grade_looks().items()}
    handles = []
    for g in GRADE_COLOURS:   # severity order; one colour per grade, one-side-only rows named beside it
        kinds = [one_side(r) for r in rows if r["grade"] == g]
        if not kinds:
            continue
        words = ([names[g]] if None in kinds else []) + [ONE_SIDE_LABEL[k][1] for k in ("train", "infer") if k in kinds]
        handles.append(Patch(color=GRADE_COLOURS[g], label="grade: " + " / ".join(words)))
    handles += [Patch(facecolor="#777777", label="train (solid)"),
                Patch(facecolor="#dddddd", hatch="//", edgecolor="#444444", label="infer (hatched)")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def render_markdown(facts: Dict[str, Any], lang: str = "zh", chart: Optional[str] = None,
                    generated_at: Optional[str] = None, layer_png: Optional[Dict[int, str]] = None) -> str:
    """Render the report (Chinese by default, ``lang='en'`` for English): the verdict on top
    (:func:`tilake.reports.op_diff_verdict.op_diff_verdict`), then the seven sections of evidence.

    ``layer_png``: layer → the file name of its side-by-side picture beside the report
    (:func:`tilake.reports.layer_picture.layer_pngs`); a layer without one keeps only its table.
    Every value is escaped for Markdown (:func:`tilake.reports.escape.markdown_env`): names from
    the captures, model ids and paths cannot inject HTML or break a table row.
    """
    env = markdown_env(TEMPLATES, undefined=StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                       lstrip_blocks=True)
    env.globals.update(grade_span=lambda g, side=None: grade_span(g, lang, side), one_side=one_side,
                       ops_text=ops_text, calls_text=calls_text,
                       code_path=lambda r, s: code_path(r, s, lang),
                       steps_counted=lambda caps, s: steps_counted(caps, s, lang), invalid_text=invalid_text, status_text=status_text,
                       steps_note=lambda: steps_note(lang), words=lambda key: label(key, lang),
                       # the "‡ differs from the seed's example table" footnote belongs to the bundled example only
                       seed_example=str(facts["run"].get("collection_method") or "").startswith("bundled synthetic"))
    env.filters["key_rows"] = key_rows
    by_side = {"train": [o for o in facts["side_ops"] if o["side"] == "train"],
               "infer": [o for o in facts["side_ops"] if o["side"] == "infer"]}
    stacks = {(s["side"], s["op_type"]): s for s in facts["call_stacks"]}
    counts: Dict[str, int] = {}
    for r in facts["comparison"]:
        counts[row_key(r)] = counts.get(row_key(r), 0) + 1
    rl = facts["run"]
    cfg = {}
    try:
        cfg = json.loads(rl.get("rl_config") or "{}")
    except ValueError:
        cfg = {}
    try:
        parallel = json.loads(rl.get("parallel_config") or "null")
    except ValueError:
        parallel = None
    env.globals["metrics_text"] = lambda rows: metrics_text(rows, lang)
    return env.get_template("op_diff_report.md.j2").render(
        verdict=op_diff_verdict(facts, lang), layer_png=layer_png or {}, collapse_at=COLLAPSE_AT,
        catalog_hint=catalog_hint(uncatalogued_kinds(facts["uncategorized"], facts["captures"]), lang),
        settings=run_settings(rl), tools=run_tools(rl),
        lang=lang, f=facts, run=rl, by_side=by_side, stacks=stacks, counts=counts, chart=chart,
        ev={side: evidence_words(facts, side, lang) for side in ("train", "infer")},
        parallel=parallel, cfg={k: v for k, v in cfg.items() if not k.startswith("_") and k != "stage3"},
        stage3=cfg.get("stage3"),
        generated_at=generated_at or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))


class OpDiffOutputs(TypedDict):
    """What :func:`write_report` wrote and counted (one-side-only rows are also in ``grade_counts``)."""

    # train_infer_op_diff_report.md / operator_diff_table.csv
    report: Path
    csv: Path
    # <backend>_runtime_ops.json, train then infer
    runtime_ops: List[Path]
    # op_diff_overview.png, None when there was nothing to draw
    chart: Optional[Path]
    # grade → comparison rows
    grade_counts: Dict[str, int]
    # "<grade>:train" | "<grade>:infer" → rows only one side has
    one_side: Dict[str, int]
    # the mart rows the report was rendered from (:func:`load_facts`)
    facts: Dict[str, Any]
    # train_infer_op_diff_report.html, its table records, operator_diff_numeric.csv, operator_diff.xlsx
    html: Path
    records: List[Dict[str, Any]]
    numeric_csv: Path
    xlsx: Path
    # side → "steps 50 (STEP_TIME; ranks 0, 1)" (profiler steps counted, chosen at ingest)
    steps: Dict[str, str]
    # side → device | cpu_ops | host_fallback | evidence_missing
    evidence: Dict[str, str]
    # the verdict on top of the report, as plain English lines (headline, one line per listed row)
    verdict: List[str]
    # layer_<n>_side_by_side.png written for the Markdown report
    layer_pictures: List[Path]


def write_report(warehouse: Path, run_id: str, out_dir: Path, lang: str = "zh") -> OpDiffOutputs:
    """Write every operator-diff output of ``run_id`` into ``out_dir``.

    Returns:
        :class:`OpDiffOutputs`.
    Raises:
        TilakeError: see :func:`load_facts`; ``lang`` not zh/en.
    """
    if lang not in ("zh", "en"):
        raise TilakeError(f"--lang must be zh or en, not {lang!r}")
    from tilake.files import check_out_dir

    facts = load_facts(warehouse, run_id)   # first: an unknown run creates no --out folder
    out_dir = check_out_dir(Path(out_dir))
    chart = overview_png(facts, out_dir / "op_diff_overview.png", lang)
    pictures = layer_pngs(facts.get("alignment"), out_dir)   # layer_<n>_side_by_side.png
    md = render_markdown(facts, lang, chart.name if chart else None, layer_png=pictures)
    report = out_dir / "train_infer_op_diff_report.md"
    atomic_write_bytes(report, md.encode("utf-8"))
    csv_path = write_csv(facts, out_dir / "operator_diff_table.csv", lang)
    from tilake.reports import op_diff_html, tables  # HTML page, numeric CSV and xlsx of the same rows
    ex = tables.mart_extras(warehouse, run_id)
    rec = tables.comparison_records(facts, ex, csv_rows(facts, lang), lang)
    extra = dict(html=op_diff_html.write_html(facts, out_dir, rec, ex["grades"], lang, chart), records=rec,
                 **tables.write_op_diff_tables(facts, out_dir, rec, lang))
    jsons = []
    for side in ("train", "infer"):
        data = runtime_ops(facts, side)
        # the backend may come from a parsed launch script: keep it a plain file name
        backend = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(data["backend"])).lstrip(".") or "unknown"
        p = out_dir / f"{backend}_runtime_ops.json"
        if backend == "unknown" or p in jsons:
            p = out_dir / f"{side}_{backend}_runtime_ops.json"
        atomic_write_bytes(p, (json.dumps(data, ensure_ascii=False, indent=2) + "\n").encode("utf-8"))
        jsons.append(p)
    counts: Dict[str, int] = {}
    for r in facts["comparison"]:
        counts[r["grade"]] = counts.get(r["grade"], 0) + 1
    sides: Dict[str, int] = {}
    for r in facts["comparison"]:
        if one_side(r):
            sides[row_key(r)] = sides.get(row_key(r), 0) + 1
    return {"report": report, "csv": csv_path, "runtime_ops": jsons, "chart": chart,
            "grade_counts": counts, "one_side": sides, "facts": facts, **extra,
            "steps": {s: steps_counted(facts["captures"], s, "en") for s in ("train", "infer")},
            "verdict": verdict_lines(op_diff_verdict(facts, "en")),
            "layer_pictures": [out_dir / n for n in pictures.values()],
            "evidence": {"train": facts["run"]["train_evidence"], "infer": facts["run"]["infer_evidence"]}}
