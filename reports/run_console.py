"""The one-screen summary of ``tilake run`` / ``example`` (a ``tilake.pipeline.profile.ProfileResult``),
as rich text for a person or as a dict for ``--json``; the ``tilake runs`` listing; the exit status of
``run``/``example``. Field values are printed as plain text (no rich markup is read from run ids, paths
or warnings), and nothing a person reads is a raw Python ``repr``.
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, TypedDict

from tilake.lake.registry import KNOWN_TOOLS, RunListing
from tilake.reports.captures import ingest_capture_rows, steps_counted
from tilake.reports.labels import grade_palette
from tilake.reports.tables import ONE_SIDE_LABEL
from tilake.vocab import CaptureStatus, Evidence, ExitCode, Grade, grade_looks

if TYPE_CHECKING:
    from tilake.reports.op_diff import OpDiffOutputs

GRADES = [(g, f"{look.emoji} {g}" if g == Grade.EVIDENCE_MISSING
           else f"{look.emoji} {look.label_zh} / {look.label_en}") for g, look in grade_looks().items()]
"""``(grade, console label)`` in severity order, from seeds/grades.csv: ``🔴 高差异 / high``, …, ``⚪ evidence_missing``."""
EXIT_NOTHING_COMPARABLE = ExitCode.EVIDENCE_MISSING
"""Exit status of ``run``/``example`` when a side is evidence_missing or host_fallback: the outputs are
written but no comparison can be concluded (the same 3 as ``tilake dumps analyze``)."""
WIDE = 120
"""Terminal columns from which ``tilake runs`` prints one table row per run (below: one block per run)."""


def exit_status(res) -> int:
    """0 when both sides have evidence (findings are in the report, not the status), else
    :data:`EXIT_NOTHING_COMPARABLE` (``res.status`` ``evidence_missing`` or ``host_fallback``)."""
    return EXIT_NOTHING_COMPARABLE if res.status in (CaptureStatus.EVIDENCE_MISSING, CaptureStatus.HOST_FALLBACK) \
        else ExitCode.DONE


def grade_rows(grade_counts: Dict[str, int], one_side: Dict[str, int]) -> List[tuple]:
    """``(label, rows)`` per grade for the summary table; one-side-only rows (``one_side`` keys
    ``<grade>:train`` / ``<grade>:infer``) get their own line, "🟢 训练独有 / training only", and are
    not counted under "无差异 / none"."""
    out = []
    for key, label in GRADES:
        sides = {s: one_side.get(f"{key}:{s}", 0) for s in ("train", "infer")}
        n = grade_counts.get(key, 0) - sum(sides.values())
        if key != Grade.EVIDENCE_MISSING or n:
            out.append((label, n))
        for s, k in sides.items():
            if k:
                zh, en = ONE_SIDE_LABEL[s]
                out.append((f"{label.split()[0]} {zh} / {en}", k))
    return out


def evidence_note(res, side: str) -> str:
    """`` (PyTorch profiler trace: …)`` when the side's captures are PyTorch-profiler traces (Capture
    kind ``trace``, backend ``torch_trace``): CUDA kernels when its evidence is ``device``, CPU ops when
    ``cpu_ops``; '' for Ascend captures (the evidence word says it all)."""
    caps = [c.capture for c in getattr(getattr(res, "ingest", None), "captures", None) or []]
    if not any(c.side == side and c.kind == "trace" for c in caps):
        return ""
    ev = res.evidence.get(side)
    what = {Evidence.DEVICE: "CUDA kernels", Evidence.CPU_OPS: "CPU ops (cpu_op), no device kernels"}.get(
        ev, "no usable events")
    return f" (PyTorch profiler trace: {what})"


TAG_STYLES = {look.label_en.upper(): grade_palette()[g]["chart"] for g, look in grade_looks().items()}
"""Console colour of each grade word of the verdict (``[HIGH]`` …): the grade's chart colour (labels.yaml)."""


def print_verdict(lines: List[str], console) -> None:
    """The report's verdict first (:func:`tilake.reports.op_diff_verdict.verdict_lines`): the headline in bold,
    then one line per listed row whose ``[HIGH]``-style grade word is coloured (the word reads without colour)."""
    from rich.text import Text

    if not lines:
        return
    console.print(Text("verdict: " + lines[0], style="bold"), soft_wrap=True)
    for line in lines[1:]:
        tag = line[1:line.index("]")] if line.startswith("[") and "]" in line else None
        text = Text("  ")
        if tag in TAG_STYLES:
            text.append(f"[{tag}]", style=f"bold {TAG_STYLES[tag]}")
            text.append(line[len(tag) + 2:])
        else:
            text.append(line)
        console.print(text, soft_wrap=True)


def print_run_summary(res, console=None, lake: Optional[Path] = None) -> None:
    """One screen: the verdict (:func:`print_verdict`), rows per grade, evidence per side, the lake and where the
    outputs (chart included) are."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    print_verdict(getattr(res, "verdict", None) or [], console)
    console.print(f"run {res.run_id}: comparison rows per grade", soft_wrap=True, markup=False)
    table = Table()
    table.add_column("grade")
    table.add_column("rows", justify="right")
    for label, n in grade_rows(res.grade_counts, getattr(res, "one_side", None) or {}):
        table.add_row(label, str(n))
    console.print(table)
    caps = ingest_capture_rows(getattr(getattr(res, "ingest", None), "captures", None) or [])
    for side in ("train", "infer"):
        console.print(f"{side}: evidence = {res.evidence.get(side)}{evidence_note(res, side)}; profiler steps counted: "
                      f"{steps_counted(caps, side, 'en')}", markup=False, soft_wrap=True)
    for w in res.warnings:
        console.print(f"warning: {w}", style="yellow", markup=False)
    if lake is not None:
        console.print(f"lake:   {lake}", markup=False, soft_wrap=True)
    console.print(f"report: {res.report_path}", markup=False, soft_wrap=True)
    if res.chart_path:
        console.print(f"chart:  {res.chart_path}", markup=False, soft_wrap=True)
    console.print(f"csv:    {res.csv_path}", markup=False, soft_wrap=True)
    for p in res.runtime_ops:
        console.print(f"ops:    {p}", markup=False, soft_wrap=True)
    for k, p in (getattr(res, "outputs", None) or {}).items():
        console.print(f"{k}: {p}", markup=False, soft_wrap=True)


def next_commands(run_id: str, lake: Path) -> List[str]:
    """The ``export TILAKE_LAKE=…`` line for ``lake`` and three commands to run next (shell-quoted; a
    run id is ``[A-Za-z0-9._-]+``, so it sits in a double-quoted query as is)."""
    query = ("select module, train_calls, infer_calls, grade, rule_id from fct_op_comparison "
             f"where run_id = '{run_id}' order by display_order")
    return [f"export TILAKE_LAKE={shlex.quote(str(lake))}", "tilake runs",
            f'tilake sql "{query}"', "tilake trend --metric red_rows --by none"]


def print_example_next(res, lake: Path, console=None) -> None:
    """After ``tilake example``: name the lake and print :func:`next_commands` (lines never wrapped,
    so they can be pasted)."""
    from rich.console import Console

    console = console or Console()
    console.print(f"lake:   {lake}  (the example's own lake; make it the default of the next commands:)",
                  markup=False, soft_wrap=True)
    for line in next_commands(res.run_id, lake):
        console.print(f"  {line}", markup=False, soft_wrap=True, highlight=False)


def finish(res, lake: Path, as_json: bool = False, example: bool = False) -> int:
    """The end of ``tilake run``/``example``: the JSON summary on stdout (``as_json``: nothing else
    there) or :func:`print_run_summary` (plus :func:`print_example_next` for the example); returns
    the exit status (:func:`exit_status`)."""
    if as_json:
        from tilake.reports.json_out import emit_json

        emit_json(run_summary_json(res, lake))
    else:
        print_run_summary(res, lake=None if example else lake)
        if example:
            print_example_next(res, lake)
    return exit_status(res)


class RunSummary(TypedDict):
    """The ``--json`` document of ``tilake run``/``example`` (and the ``run_profile`` tool of ``tilake mcp``)."""

    run_id: str
    lake: Any            # the lake folder (a path; text in JSON)
    status: str          # ok | host_fallback | evidence_missing
    exit_status: int
    grade_counts: Dict[str, int]
    one_side_only: Dict[str, int]
    evidence: Dict[str, str]
    kernels: int
    warnings: List[str]
    outputs: Dict[str, Any]   # name → path, runtime_ops → list of paths
    verdict: List[str]        # the report's verdict, plain English lines
    profiler_steps: Dict[str, str]


def run_summary_json(res, lake_root) -> RunSummary:
    """The summary of ``tilake run``/``example`` (what :func:`print_run_summary` shows, and every output)."""
    outputs = {"report": res.report_path, "csv": res.csv_path, "chart": res.chart_path,
               "runtime_ops": list(res.runtime_ops), **res.outputs}
    return {"run_id": res.run_id, "lake": lake_root, "status": res.status, "exit_status": exit_status(res),
            "grade_counts": {g: res.grade_counts.get(g, 0) for g in Grade},
            "one_side_only": {s: sum(n for k, n in (getattr(res, "one_side", None) or {}).items()
                                     if k.endswith(f":{s}")) for s in ("train", "infer")},
            "evidence": res.evidence, "kernels": res.ingest.kernels, "warnings": res.warnings, "outputs": outputs,
            "verdict": list(getattr(res, "verdict", None) or []),
            "profiler_steps": {s: steps_counted(ingest_capture_rows(res.ingest.captures), s, "en")
                               for s in ("train", "infer")}}


# --- tilake runs ------------------------------------------------------------------------------

def _text(v: Any) -> str:
    """A value as a person reads it: dicts as ``k=v, …``, lists joined by ``, ``, None as ''."""
    if v is None:
        return ""
    if isinstance(v, dict):
        return ", ".join(f"{k}={_text(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return ", ".join(_text(x) for x in v)
    return str(v)


def run_fields(r: RunListing) -> Dict[str, str]:
    """One :func:`tilake.lake.registry.list_runs` row as display strings; tools recorded as
    ``unknown`` are left out (they say nothing)."""
    tools = r.get("tool_versions") or {}
    known = {k: v for k, v in tools.items() if v not in (None, "", "unknown")}
    shown = [f"{k} {_text(known[k])}" for k in KNOWN_TOOLS if k in known]
    shown += [f"{k} {_text(v)}" for k, v in sorted(known.items()) if k not in KNOWN_TOOLS]
    caps = "" if not (r.get("has_profile") and r.get("captures")) else (
        f"{r['captures']}" + (f" ({r['captures_not_usable']} not usable)" if r.get("captures_not_usable") else ""))
    return {"run": str(r["run_id"]), "model": _text(r.get("model_id")), "family": _text(r.get("model_family")),
            "step": _text(r.get("step")), "tools": ", ".join(shown), "host": _text(r.get("host")),
            "created (UTC)": r["created_at"].strftime("%Y-%m-%d %H:%M:%S") if r.get("created_at") else "",
            "tags": _text(r.get("tags") or {}),
            "settings": _text(r.get("settings") or {}),
            "kernels train/infer": f"{r['train_kernels']}/{r['infer_kernels']}" if caps else "",
            "captures": caps, "dumps": _text(r.get("dump_verdict")) if r.get("has_dumps") else ""}


def print_runs(runs: List[RunListing], console=None, lake_root: Optional[Path] = None) -> None:
    """``tilake runs``: a table (one row per run) from :data:`WIDE` columns, else one block per run
    (the run id alone on its line, never wrapped; under it model · step · host · created, then kernels ·
    captures · dumps, tools and tags, indented and wrapped at spaces).
    An empty lake names its folder."""
    import textwrap

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    if not runs:
        where = f" ({lake_root})" if lake_root else ""
        console.print(f"no runs in this lake{where} yet (tilake ingest / tilake run / tilake dumps analyze --run-id "
                      "add them; another lake: --lake DIR or TILAKE_LAKE)", soft_wrap=True, markup=False)
        return
    rows = [run_fields(r) for r in runs]
    optional = {"step", "tools", "tags", "dumps", "model", "host", "settings"}
    cols = [c for c in rows[0] if c not in optional or any(row[c] for row in rows)]
    if console.width >= WIDE:
        t = Table(title=f"{len(runs)} run(s)")
        for c in cols:
            t.add_column(c, justify="right" if c in ("step", "kernels train/infer", "captures") else "left",
                         overflow="fold", no_wrap=c == "run")
        for row in rows:   # run fields are the user's text: shown literally, never as rich markup
            t.add_row(*[Text(row[c]) for c in cols])
        console.print(t)
        return
    console.print(f"{len(runs)} run(s)" + (f" in {lake_root}" if lake_root else ""), markup=False, soft_wrap=True)
    width = max(40, console.width)
    for row in rows:
        console.print(Text(row["run"], style="bold"), soft_wrap=True)
        model = row["model"] + (f" ({row['family']})" if row["family"] and row["family"] != row["model"] else "")
        lines = [" · ".join(v for v in (model or row["family"], row["step"] and f"step {row['step']}", row["host"],
                                        row["created (UTC)"] and f"{row['created (UTC)']} UTC") if v),
                 " · ".join(v for v in (row["kernels train/infer"] and f"kernels train/infer {row['kernels train/infer']}",
                                        row["captures"] and f"captures {row['captures']}",
                                        row["dumps"] and f"dumps {row['dumps']}") if v),
                 row["tools"] and f"tools: {row['tools']}", row["settings"] and f"settings: {row['settings']}",
                 row["tags"] and f"tags: {row['tags']}"]
        for line in filter(None, lines):
            console.print(textwrap.fill(line, width, initial_indent="  ", subsequent_indent="    ",
                                        break_long_words=False, break_on_hyphens=False),
                          markup=False, soft_wrap=True, highlight=False)


def print_ingest(res) -> None:
    """``tilake ingest``'s lines: one per capture (side, rank, status, kernel and host-op counts, path,
    reason), the run's kernel total and evidence per side, then the ingest notes (steps, workers)."""
    from tilake.files import escape_controls

    for c in res.captures:   # paths and reasons quote the capture: its control characters shown, not acted on
        print(escape_controls(f"{c.capture.side} rank {c.capture.rank}: {getattr(c, 'status_shown', c.status)} "
                              f"kernels={c.kernels} host_ops={c.host_ops} {c.capture.path}"
                              + (f" — {c.reason}" if c.reason else "")))
    print(f"run {res.run_id}: {res.kernels} kernels; evidence train={res.side_evidence.get('train')} "
               f"infer={res.side_evidence.get('infer')}")
    for line in res.notes:
        print(line)


def print_build(res, warnings) -> None:
    """``tilake build``'s lines: warnings, one ``FAIL:`` line per failed node on stderr, the node count."""
    for w in warnings:
        print(f"warning: {w}")
    for n in res.failures:
        print(f"FAIL: {n[0]}: {n[3]}", file=sys.stderr)
    print(f"dbt build: {len(res.nodes)} nodes, {len(res.failures)} failed, {len(res.warnings)} warnings")


def print_report_paths(out: "OpDiffOutputs") -> None:
    """``tilake report``'s lines: every file written (Markdown report, chart, CSV, runtime-ops JSON, then the
    HTML page, numeric CSV and xlsx when they were written), one ``<kind>: <path>`` line each on stdout."""
    lines = [("report", out["report"]), ("chart", out.get("chart")), ("csv", out["csv"])]
    lines += [("ops", p) for p in out.get("runtime_ops", [])]
    lines += [(k, out[k]) for k in ("html", "numeric_csv", "xlsx") if out.get(k)]
    for kind, p in lines:
        if p:
            print(f"{kind}: {p}")
    for side, text in (out.get("steps") or {}).items():
        print(f"{side}: profiler steps counted: {text}")
