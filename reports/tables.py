"""Spreadsheet outputs a person can sum: ``operator_diff_table_numeric.csv``, ``operator_diff.xlsx`` and
the dump analysis' ``boundary_results.csv``/``.xlsx``.

The seed CSV (``operator_diff_table.csv``, :mod:`tilake.reports.op_diff`) keeps its exact header and its
``Add(6484)+RmsNorm(2712)`` text cells; these companions hold the same rows with numbers as numbers
(call counts, device time in µs) so a spreadsheet can sum and sort them. Layout follows msprobe
compare's xlsx: one sheet per table, frozen header row, an autofilter, and a fill colour per grade (or
per boundary status).

Device time per comparison row and side is the summed kernel time of the row's ops as the row holds them
(``fct_op_comparison.train_dur_ns`` / ``infer_dur_ns``, ``reports/queries/op_diff_device_time.sql``, read-only on
the marts: an op type split across rows by its context counts in each row once); the mean is that total over
the row's kernel calls, and the ratio is infer over train (what msprof-analyze ``compare`` shows as the
duration ratio). A side without ops, or whose kernels carry no duration, has no device time (empty cell),
never 0.
"""
from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tilake.errors import TilakeError
from tilake.files import atomic_write_bytes, escape_controls
from tilake.lake.dump_records import ReportSource
from tilake.lake.read import reading_file
from tilake.reports.escape import csv_cell
from tilake.reports.labels import both, grade_palette, label
from tilake.vocab import BoundaryStatus, Evidence, Grade, grade_look

QUERIES = Path(__file__).resolve().parent / "queries"

# fill colours (ARGB-less RGB hex) per grade, as in the report's key (reports/templates/labels.yaml)
GRADE_FILL = {g: p["fill"] for g, p in grade_palette().items()}
# boundary status → grade colour of the same meaning (msprobe compare colours mismatches red)
STATUS_FILL = {BoundaryStatus.EXACT: GRADE_FILL[Grade.GREEN], BoundaryStatus.NOT_EXACT: GRADE_FILL[Grade.RED],
               BoundaryStatus.NONFINITE: GRADE_FILL[Grade.RED], BoundaryStatus.SHAPE_DIFF: GRADE_FILL[Grade.ORANGE],
               BoundaryStatus.DTYPE_DIFF: GRADE_FILL[Grade.ORANGE],
               BoundaryStatus.MISSING: GRADE_FILL[Grade.EVIDENCE_MISSING],
               BoundaryStatus.EVIDENCE_MISSING: GRADE_FILL[Grade.EVIDENCE_MISSING]}


def _columns(table: str, keys: Sequence[str]) -> Tuple[Tuple[str, str, str], ...]:
    """``(key, English header, Chinese header)`` per column of ``table`` (labels ``column.<table>.<key>``)."""
    return tuple((k, *reversed(both(f"column.{table}.{k}"))) for k in keys)


# the comparison table's numeric form (``one_side``: train / infer for a row with ops on that side only,
# "training only", empty otherwise)
COMPARISON_COLUMNS: Sequence[Tuple[str, str, str]] = _columns("comparison", (
    "module", "module_label", "train_ops", "infer_ops", "train_calls", "infer_calls", "train_device_us",
    "infer_device_us", "train_mean_us", "infer_mean_us", "device_ratio", "diff_type", "grade", "rule_id",
    "train_code_path", "infer_code_path", "one_side"))
SIDE_OP_COLUMNS = _columns("side_ops", ("rank_in_side", "op_type", "calls", "call_share", "category", "module",
                                        "fused", "total_device_us", "mean_device_us", "example_kernel"))
CAPTURE_COLUMNS = _columns("captures", ("side", "rank", "source_kind", "status", "kernel_count", "schema_variant",
                                        "profiler_level", "truncated", "reason", "path"))
BOUNDARY_COLUMNS = ("round", "position", "boundary", "op", "status", "train_shape", "infer_shape", "train_dtype",
                    "mismatch_count", "mismatch_fraction", "max_abs_diff", "tensor_ulp",
                    "max_elem_ulp_significant", "signed_mean_ulp", "pattern", "class", "role", "reason")


def mart_extras(warehouse: Path, run_id: str) -> Dict[str, Any]:
    """What the HTML and spreadsheet outputs read beyond :func:`tilake.reports.op_diff.load_facts`
    (read-only on the marts): device time per comparison row and side, and the grade seed.

    Returns:
        ``{"device": {(module, side): (total_dur_ns or None, calls)}, "grades": {grade: {"emoji",
        "label_zh", "label_en", "color", "severity_rank"}}}`` (``seeds/grades.csv``, in severity
        order); a side whose kernels carry no duration has ``None`` (not 0).
    Raises:
        TilakeError: the warehouse cannot be read (run ``tilake build``).
    """
    with reading_file(warehouse) as con:
        try:
            rows = con.execute((QUERIES / "op_diff_device_time.sql").read_text(encoding="utf-8"),
                               {"run_id": run_id}).fetchall()
            cur = con.execute((QUERIES / "op_diff_grades.sql").read_text(encoding="utf-8"))
            cols = [d[0] for d in cur.description]
            grades = {r[0]: dict(zip(cols[1:], r[1:])) for r in cur.fetchall()}
        except Exception as exc:
            raise TilakeError(f"cannot read device time from the marts ({str(exc).splitlines()[0]}); "
                              "run `tilake build`", path=warehouse) from exc
    return {"device": {(m, s): (int(ns) if ns else None, int(calls or 0)) for m, s, ns, calls in rows},
            "grades": grades}


def _us(ns: Optional[float]) -> Optional[float]:
    return None if ns is None else round(ns / 1000.0, 3)


# what a one-side-only row says in place of the grade's own word ("无差异 / none" would claim a comparison)
# ("either": a rule's line in the rule key, which covers rows of both kinds)
ONE_SIDE_LABEL = {s: both(f"one_side.{s}") for s in ("train", "infer", "either")}


def one_side(r: Dict[str, Any]) -> Optional[str]:
    """``'train'``/``'infer'`` when a comparison row has ops on that side only, else None (both
    sides, neither, or an evidence_missing row: a side without evidence is not "the other side has none")."""
    if r.get("grade") == Grade.EVIDENCE_MISSING:
        return None
    t, i = bool(r.get("train_ops")), bool(r.get("infer_ops"))
    return "train" if t and not i else "infer" if i and not t else None


def row_key(r: Dict[str, Any]) -> str:
    """``<grade>`` or, for a one-side-only row, ``<grade>:train`` / ``<grade>:infer`` (summary counts)."""
    side = one_side(r)
    return f"{r['grade']}:{side}" if side else r["grade"]


def grade_label(grades: Dict[str, Dict[str, Any]], grade: str, lang: str = "zh", side: Optional[str] = None) -> str:
    """``🔴 高差异`` / ``🔴 high`` from the grade seed (an unknown grade reads as evidence missing).

    ``side`` (``train``/``infer``, see :func:`one_side`): a one-side-only row keeps its grade's emoji and
    says ``🟢 训练独有`` / ``🟢 training only`` (a green one never says 无差异 / none); another grade is
    kept beside it: ``🟡 低差异 · 推理独有``. ``grade`` may also be a :func:`row_key`.
    """
    if ":" in grade:
        grade, side = grade.split(":", 1)
    g = grades.get(grade) or grades.get(Grade.EVIDENCE_MISSING) or grade_look(Grade.EVIDENCE_MISSING)._asdict()
    word = g["label_zh"] if lang == "zh" else g["label_en"]
    if side in ONE_SIDE_LABEL:
        only = label(f"one_side.{side}", lang)
        return f"{g['emoji']} {only}" if grade == Grade.GREEN else f"{g['emoji']} {word} · {only}"
    return f"{g['emoji']} {word}"


def evidence_words(facts: Dict[str, Any], side: str, lang: str = "zh") -> Dict[str, Any]:
    """How the report names one side's evidence, from its captures' ``source_kind`` and the side's evidence.

    Ascend captures (``db``/``text``): CANN op types from ``COMPUTE_TASK_INFO ⋈ TASK ⋈ STRING_IDS``, device
    time, call stacks from ``PYTORCH_CALLCHAINS``. PyTorch-profiler captures (``source_kind='trace'``,
    backend ``torch_trace``: Chrome-trace JSON of ``torch.profiler``): CUDA kernels (events ``cat: kernel``)
    when the side's evidence is ``device``, else the innermost CPU ops (``cpu_op``, evidence ``cpu_ops``:
    a CPU-only trace has no device events), their durations, and Python stacks (``with_stack``).

    Returns:
        ``{"trace": bool, "cpu": bool, "source": str, "op": str, "time": str, "stack": str, "file": str}``
        (column headers and the data-source sentence, in ``lang``).
    """
    trace = any(c.get("source_kind") == "trace" for c in facts.get("captures") or [] if c.get("side") == side)
    cpu = facts["run"].get(f"{side}_evidence") == Evidence.CPU_OPS
    if not trace:
        return {"trace": False, "cpu": cpu, "source": "COMPUTE_TASK_INFO ⋈ TASK ⋈ STRING_IDS",
                "op": label("evidence.op.cann", lang), "time": label("evidence.time.device", lang),
                "stack": "PYTORCH_CALLCHAINS", "file": label("evidence.file.db", lang)}
    kind = "cpu" if cpu else "cuda"
    return {"trace": True, "cpu": cpu, "source": label(f"evidence.source.{kind}", lang),
            "op": label(f"evidence.op.{kind}", lang), "time": label("evidence.time." + ("cpu" if cpu else "device"), lang),
            "stack": "Python stack (with_stack)", "file": label("evidence.file.trace", lang)}


def comparison_records(facts: Dict[str, Any], extras: Dict[str, Any], text_rows: Sequence[Sequence[str]],
                       lang: str = "zh") -> List[Dict[str, Any]]:
    """One dict per comparison row with counts and device time as numbers (µs, 3 decimals).

    Args:
        facts: :func:`tilake.reports.op_diff.load_facts` of one run.
        extras: :func:`mart_extras` of the same run.
        text_rows: :func:`tilake.reports.op_diff.csv_rows` of the same facts and ``lang`` (the seed
            CSV's text cells: ``Add(6484)+RmsNorm(2712)``, code paths), one per comparison row.
    Returns:
        Dicts with the keys of :data:`COMPARISON_COLUMNS` plus ``grade_label``; ``*_ops`` is ''
        for a side without ops; ``device_ratio`` is infer total / train total, ``None`` when either
        side has no device time.
    """
    out = []
    device = extras["device"]
    for r, text in zip(facts["comparison"], text_rows):
        rec: Dict[str, Any] = {"module": r["module"], "module_label": text[0], "diff_type": text[5],
                               "grade": r["grade"], "rule_id": r["rule_id"],
                               "grade_label": grade_label(extras["grades"], r["grade"], lang, one_side(r)),
                               "one_side": one_side(r),
                               "train_code_path": text[7], "infer_code_path": text[8]}
        for side, col in (("train", 1), ("infer", 2)):
            ops = r[f"{side}_ops"] or []
            rec[f"{side}_ops"] = text[col] if ops else ""
            calls = int(sum(r[f"{side}_op_calls"] or []))
            rec[f"{side}_calls"] = calls
            ns = device.get((r["module"], side), (None, 0))[0] if ops else None
            rec[f"{side}_device_us"] = _us(ns)
            rec[f"{side}_mean_us"] = _us(ns / calls) if ns is not None and calls else None
        t, i = rec["train_device_us"], rec["infer_device_us"]
        rec["device_ratio"] = round(i / t, 4) if t and i is not None else None
        out.append(rec)
    return out


def side_op_records(facts: Dict[str, Any], side: str) -> List[Dict[str, Any]]:
    """The ranked op types of one side (report sections 3/4) with device time in µs."""
    out = []
    for o in facts["side_ops"]:
        if o["side"] != side:
            continue
        ns = o["total_dur_ns"]
        calls = int(o["calls"])
        out.append({"rank_in_side": int(o["rank_in_side"]), "op_type": o["op_type"], "calls": calls,
                    "call_share": round(float(o["call_share"]), 6), "category": o["category"],
                    "module": o["module"], "fused": bool(o["fused"]),
                    "op_type_derived": bool(o.get("op_type_derived")),
                    "category_fallback": o.get("category_source") == "fallback",
                    "total_device_us": _us(int(ns)) if ns is not None else None,
                    "mean_device_us": _us(int(ns) / calls) if ns is not None and calls else None,
                    "example_kernel": o["example_kernel"]})
    return out


def _cell(v: Any) -> Any:
    """A value as a spreadsheet cell: numbers stay numbers, lists become ``a×b`` / ``a, b`` text."""
    if isinstance(v, (list, tuple)):
        return "×".join(str(x) for x in v) if all(isinstance(x, int) for x in v) else ", ".join(map(str, v))
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items())
    return v


def write_csv_rows(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> Path:
    """UTF-8 CSV with BOM (Excel opens CJK text right); numbers unquoted, ``None`` as an empty cell.

    Text cells a spreadsheet would run as a formula get a leading ``'`` (:func:`csv_cell`).
    """
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for row in rows:
        w.writerow(["" if v is None else csv_cell(_cell(v)) for v in row])
    return atomic_write_bytes(Path(path), b"\xef\xbb\xbf" + buf.getvalue().encode("utf-8"))


def write_xlsx(path: Path, sheets: Sequence[Dict[str, Any]]) -> Path:
    """Write an xlsx with one sheet per table (openpyxl).

    Args:
        sheets: ``{"title", "header": [str], "rows": [[value]], "fills": [hex or None per row],
            "fill_col": column index coloured (default: the whole row), "percent_cols": [index]}``.
    Each sheet gets a bold frozen header row, an autofilter over its range and column widths from
    the longest cell (capped at 60 characters). Every text cell is stored as text (``t="inlineStr"``,
    with Excel's quote prefix): openpyxl would otherwise store a value starting with ``=`` (a kernel
    or op name from a profiler DB or a torch trace) as a live formula such as ``=HYPERLINK(…)``.
    """
    from openpyxl import Workbook
    from openpyxl.styles import Font, PatternFill
    from openpyxl.utils import get_column_letter

    wb = Workbook()
    wb.remove(wb.active)
    for sh in sheets:
        ws = wb.create_sheet(re.sub(r"[\x00-\x1f\x7f-\x9f\\/?*\[\]:]", "_", str(sh["title"]))[:31])   # Excel's rules
        ws.append([_xl(h) for h in sh["header"]])
        _as_text(ws[1])
        for c in ws[1]:
            c.font = Font(bold=True)
        fills = sh.get("fills") or []
        for n, row in enumerate(sh["rows"]):
            # control characters (ESC …) as \xNN: openpyxl refuses them (IllegalCharacterError), Excel cannot hold them
            ws.append(["" if v is None else _xl(_cell(v)) for v in row])
            _as_text(ws[n + 2])
            colour = fills[n] if n < len(fills) else None
            if colour:
                fill = PatternFill("solid", start_color=colour, end_color=colour)
                cells = ws[n + 2] if sh.get("fill_col") is None else [ws.cell(n + 2, sh["fill_col"] + 1)]
                for c in cells:
                    c.fill = fill
        for idx in sh.get("percent_cols", ()):
            for (c,) in ws.iter_rows(min_row=2, min_col=idx + 1, max_col=idx + 1):
                c.number_format = "0.0%"
        ws.freeze_panes = "A2"
        ws.auto_filter.ref = ws.dimensions
        for i, h in enumerate(sh["header"], start=1):
            width = max([len(str(h))] + [len(str(_cell(r[i - 1]) or "")) for r in sh["rows"]])
            ws.column_dimensions[get_column_letter(i)].width = min(60, width + 2)
    buf = io.BytesIO()
    wb.save(buf)
    return atomic_write_bytes(Path(path), buf.getvalue())


def _xl(v: Any) -> Any:
    """A cell value openpyxl can store: text with control characters written ``\\xNN``."""
    return escape_controls(v) if isinstance(v, str) else v


def _as_text(cells) -> None:
    """Store every string cell of ``cells`` as text, never as a formula (openpyxl types a string
    starting with ``=`` as ``f``); a formula-looking one also gets Excel's quote prefix, so editing
    the cell keeps it text."""
    for c in cells:
        if isinstance(c.value, str) and (c.data_type == "f" or c.value.startswith(("=", "+", "-", "@"))):
            c.data_type = "s"
            c.quotePrefix = True


def write_op_diff_tables(facts: Dict[str, Any], out_dir: Path, records: List[Dict[str, Any]],
                         lang: str = "zh") -> Dict[str, Path]:
    """Write ``operator_diff_table_numeric.csv`` (English header) and ``operator_diff.xlsx``.

    The xlsx has sheets comparison / training ops / inference ops / captures, headers in ``lang``;
    grade fills follow the report's colours (:data:`GRADE_FILL`).

    Args:
        records: :func:`comparison_records` of ``facts``.
    Returns:
        ``{"numeric_csv": Path, "xlsx": Path}``.
    """
    keys = [k for k, _en, _zh in COMPARISON_COLUMNS]
    rows = [[r[k] for k in keys] for r in records]
    out_dir = Path(out_dir)
    csv_path = write_csv_rows(out_dir / "operator_diff_table_numeric.csv", [en for _k, en, _zh in COMPARISON_COLUMNS],
                              rows)
    head = (lambda cols: [zh if lang == "zh" else en for _k, en, zh in cols])
    xrows = [[r["grade_label"] if k == "grade" else r[k] for k in keys] for r in records]
    sheets = [{"title": label("sheet.comparison", lang), "header": head(COMPARISON_COLUMNS),
               "rows": xrows, "fills": [GRADE_FILL.get(r["grade"]) for r in records]}]
    for side in ("train", "infer"):
        ops = side_op_records(facts, side)
        sheets.append({"title": label(f"sheet.{side}_ops", lang),
                       "header": head(SIDE_OP_COLUMNS),
                       "rows": [[o[k] for k, _en, _zh in SIDE_OP_COLUMNS] for o in ops], "percent_cols": [3]})
    caps = facts.get("captures") or []
    sheets.append({"title": label("sheet.captures", lang), "header": head(CAPTURE_COLUMNS),
                   "rows": [[c.get(k) for k, _en, _zh in CAPTURE_COLUMNS] for c in caps],
                   "fills": [None if c.get("status") == "ok" else GRADE_FILL[Grade.EVIDENCE_MISSING] for c in caps]})
    return {"numeric_csv": csv_path, "xlsx": write_xlsx(out_dir / "operator_diff.xlsx", sheets)}


def write_boundary_tables(src: ReportSource, out_dir: Path) -> Dict[str, Path]:
    """``boundary_results.csv`` and ``boundary_results.xlsx`` from ``report_source.json``'s boundaries.

    One row per boundary per round (:data:`BOUNDARY_COLUMNS`; shapes as ``4×1024``, ULP and diffs as
    numbers); the xlsx adds a sheet of independent difference points. Status fills: EXACT green,
    NOT_EXACT/NONFINITE red, SHAPE_DIFF/DTYPE_DIFF orange, MISSING/evidence_missing grey.

    Returns:
        ``{"boundary_results_csv": Path, "boundary_results_xlsx": Path}``, plus ``router_flips_csv`` (one row per
        flipped token row: layer, row, both sides' expert sets, experts lost / gained) for an MoE pair.
    """
    bounds = src.get("boundaries") or []
    rows = [[b.get(k) for k in BOUNDARY_COLUMNS] for b in bounds]
    out_dir = Path(out_dir)
    csv_path = write_csv_rows(out_dir / "boundary_results.csv", BOUNDARY_COLUMNS, rows)
    point_cols = ("round", "boundary", "class", "max_abs_diff", "tensor_ulp", "pattern", "evidence")
    points = src.get("points") or []
    sheets = [{"title": "boundaries", "header": BOUNDARY_COLUMNS, "rows": rows,
               "fills": [STATUS_FILL.get(b.get("status")) for b in bounds],
               "fill_col": BOUNDARY_COLUMNS.index("status")},
              {"title": "difference points", "header": point_cols,
               "rows": [[("; ".join(p.get(k) or []) if k == "evidence" else p.get(k)) for k in point_cols]
                        for p in points],
               "fills": [GRADE_FILL[Grade.RED] if p.get("class") == "logic-level" else GRADE_FILL[Grade.YELLOW]
                         for p in points]}]
    out = {"boundary_results_csv": csv_path, "boundary_results_xlsx": write_xlsx(out_dir / "boundary_results.xlsx",
                                                                                 sheets)}
    moe = src.get("moe") or {}
    if moe:   # MoE routing: one row per token row whose top-k expert set flips (header only when none flips)
        out["router_flips_csv"] = write_csv_rows(out_dir / "router_flips.csv", ROUTER_FLIP_COLUMNS,
                                                 [[r.get(k) for k in ROUTER_FLIP_COLUMNS] for r in moe.get("rows") or []])
    return out


ROUTER_FLIP_COLUMNS = ("layer", "row", "train_experts", "infer_experts", "lost", "gained", "source_train", "source_infer")
