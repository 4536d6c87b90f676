"""Console output of the ``tilake dumps`` commands (rich tables; no tensor values)."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tilake.lake.dump_records import DumpSummary, ProbeReport

# names and reasons come from the dumps: printed with markup=False (or escaped where a line has our
# own style tags), so a class named "[/bold]" prints as text instead of raising rich's MarkupError


def print_probe(res: ProbeReport) -> None:
    """Print a probe result (see :func:`tilake.ingest.msprobe.probe.probe`)."""
    con = Console()
    for side in ("train", "infer"):
        p = res.get(side)
        if not p:
            continue
        con.print(f"[bold]{side}[/]: " + escape(f"{p['path']}  task={p['task']} level={p['level']} "
                  f"construct={p['construct_variant']} stack={p['stack_variant']} layers={p['layers']}"))
        con.print(f"  entries {p['entries']} (modules {p['module_entries']}, APIs {p['api_entries']}), "
                  f"tensor slots {p['tensor_slots']} by io {p['slots_by_io']}")
        con.print(f"  prefixes: {p['prefixes']}", markup=False)
        if p["wrapper_segments"]:
            con.print(f"  wrapper segments: {p['wrapper_segments']}", markup=False)
        con.print(f"  module classes: {p['module_classes']}", markup=False)
        for f in p["fused_modules"]:
            con.print(f"  fused: {f['module']} output0 {f['output0_shape']}", markup=False)
        t = Table("API", "calls", "counter range", title=f"{side} APIs", show_edge=False)
        for k, v in list(p["apis"].items())[:15]:
            t.add_row(escape(k), str(v["calls"]), f"{v['counter_min']}..{v['counter_max']}")
        con.print(t)
        con.print(f"  summary mode: {p.get('summary_mode')}; parameters_grad: {p.get('parameters_grad')}")
        for n in p.get("notes") or []:
            con.print(f"  [yellow]note[/]: {n}")
        for w in p["warnings"]:
            con.print("  [yellow]warning[/]: " + escape(str(w)))
    if "api_counter_drift" in res:
        con.print(f"API call counters drift between sides for: {', '.join(res['api_counter_drift']) or 'none'} "
                  "(never match API entries by name)", markup=False)
        con.print(f"classes only in train: {', '.join(res['classes_only_train'])}", markup=False)
        con.print(f"classes only in infer: {', '.join(res['classes_only_infer'])}", markup=False)


def print_summary(res: DumpSummary) -> None:
    """Print the outcome of ``tilake dumps analyze``."""
    con = Console()
    con.print(f"verdict: [bold]{escape(str(res.verdict))}[/] " + escape(f"({res.consistency}) — {res.reason}"))
    con.print(f"first divergence: {res.first_divergence}", markup=False)
    for r, b, c in res.points:
        con.print(f"  point: round {r} {b} — {c or 'class unknown (no tensor: md5/statistics only)'}", markup=False)
    for x in res.suggestions or []:
        con.print(f"  try: {x}", markup=False)
    for w in res.warnings or []:
        con.print("[yellow]warning[/]: " + escape(str(w)))
    if res.stub_needed:
        con.print("next: apply stub_instruction.json, collect the next round, re-run with --round TRAIN INFER")
    for k, v in res.outputs.items():
        con.print(f"  {k}: {v}", markup=False)
    if res.lake_rows:
        rows = res.lake_rows   # {table: rows} as text, not a Python dict
        text = ", ".join(f"{k} {v:,}" for k, v in rows.items()) if isinstance(rows, dict) else str(rows)
        con.print(f"  lake rows: {text}", markup=False)
