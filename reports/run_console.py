"""The one-screen summary of ``tilake run`` / ``example`` (a ``tilake.pipeline.profile.ProfileResult``),
as rich text for a person or as a dict for ``--json``. Field values are printed as plain text
(no rich markup is read from run ids, paths or warnings)."""
from __future__ import annotations


def print_run_summary(res, console=None) -> None:
    """One screen: rows per grade, evidence per side, where the outputs are."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    grades = [("red", "🔴 高差异 / high"), ("orange", "🟠 中差异 / medium"), ("yellow", "🟡 低差异 / low"),
              ("green", "🟢 无差异 / none"), ("evidence_missing", "⚪ evidence_missing")]
    console.print(f"run {res.run_id}: comparison rows per grade", soft_wrap=True)
    table = Table()
    table.add_column("grade")
    table.add_column("rows", justify="right")
    for key, label in grades:
        if key == "evidence_missing" and not res.grade_counts.get(key):
            continue
        table.add_row(label, str(res.grade_counts.get(key, 0)))
    console.print(table)
    for side in ("train", "infer"):
        console.print(f"{side}: evidence = {res.evidence.get(side)}")
    for w in res.warnings:
        console.print(f"warning: {w}", style="yellow", markup=False)
    console.print(f"report: {res.report_path}", markup=False)
    console.print(f"csv:    {res.csv_path}")
    for p in res.runtime_ops:
        console.print(f"ops:    {p}", markup=False)
    for k, p in (getattr(res, "outputs", None) or {}).items():
        console.print(f"{k}: {p}", markup=False)


def run_summary_json(res, lake_root) -> dict:
    """The summary of ``tilake run``/``example`` as a dict (what :func:`print_run_summary` shows, and every output)."""
    outputs = {"report": res.report_path, "csv": res.csv_path, "chart": res.chart_path,
               "runtime_ops": list(res.runtime_ops), **res.outputs}
    return {"run_id": res.run_id, "lake": lake_root, "status": res.status,
            "grade_counts": {g: res.grade_counts.get(g, 0) for g in ("red", "orange", "yellow", "green",
                                                                     "evidence_missing")},
            "evidence": res.evidence, "kernels": res.ingest.kernels, "warnings": res.warnings, "outputs": outputs}
