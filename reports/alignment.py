"""Facts of the kernel-alignment sections of the operator diff report (marts only).

Reads ``fct_kernel_layers``, ``fct_kernel_alignment`` and ``fct_boundary_kernels`` through the named
queries ``reports/queries/alignment_*.sql`` and shapes them for the templates
``_alignment_section.{md,html}.j2``: the layers of each side (method, confidence, odd layers), the
first layer and every odd layer side by side, the aligned instances of each 🔴/🟠 comparison row and,
when the run also holds a dump analysis, the profile ⋈ dump join (first divergence → kernels, each
🔴/🟠 row → the boundary that would confirm it).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from tilake.lake.dump_records import DumpJoin
from tilake.vocab import Grade, grade_looks

QUERIES = Path(__file__).resolve().parent / "queries"
ODD_SHOWN = 4
"""Odd layers the report names one by one (a table, the layers whose alignment differs first); the rest are counted
in one line (fct_kernel_layers and fct_kernel_alignment hold them all): at most 5 lines however many layers differ."""


def _rows(con, name: str, run_id: str) -> List[Dict[str, Any]]:
    cur = con.execute((QUERIES / f"{name}.sql").read_text(encoding="utf-8"), {"run_id": run_id})
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def groups_all_layers(con, run_id: str) -> List[int]:
    """Every aligned layer of the run (fct_kernel_alignment), for the odd-layer count."""
    return [r[0] for r in con.execute("select distinct layer from main.fct_kernel_alignment where run_id = $run_id "
                                      "and layer is not null order by layer", {"run_id": run_id}).fetchall()]


def positions(first: Optional[int], last: Optional[int]) -> str:
    """``12–13``, ``9`` or ``—`` (positions within a layer, 0-based)."""
    if first is None:
        return "—"
    return str(first) if last in (None, first) else f"{first}–{last}"


def instance_text(r: Dict[str, Any]) -> str:
    """One aligned instance as the report writes it: ``layer 0: Add → RmsNorm (positions 8–9) ↔
    AddRmsNormBias (8); input shapes 513,1,1024 ↔ 512,1024``."""
    tr = f"{r['train_kernels']} (positions {positions(r['train_first'], r['train_last'])})" if r["train_kernels"] else "—"
    inf = f"{r['infer_kernels']} ({positions(r['infer_first'], r['infer_last'])})" if r["infer_kernels"] else "—"
    shapes = f"; input shapes {r['train_shapes'] or '?'} ↔ {r['infer_shapes'] or '?'}" \
        if r.get("train_shapes") or r.get("infer_shapes") else ""
    return f"layer {r['layer']}: {tr} ↔ {inf}{shapes}"


SEVERITY = {g: look.severity_rank - 1 for g, look in grade_looks().items() if look.severity_rank > 0}
"""Sort order of comparison grades, most severe first (seeds/grades.csv ``severity_rank``; no evidence_missing)."""


def _by_boundary(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Join rows of the same boundary into one: ``{"boundary", "status", "tensor_ulp", "role", "groups":
    [rows, most severe comparison grade first]}``, in boundary order."""
    out: Dict[str, Dict[str, Any]] = {}
    for r in rows:
        b = out.setdefault(r["boundary"], {k: r[k] for k in ("boundary", "status", "tensor_ulp", "role")} | {"groups": []})
        b["groups"].append(r)
    for b in out.values():
        b["groups"].sort(key=lambda r: (SEVERITY.get(r["comparison_grade"], 9), r["alignment_position"] or 0))
    return list(out.values())


def alignment_facts(con, run_id: str) -> Dict[str, Any]:
    """Everything the alignment sections show for ``run_id``.

    Returns:
        ``{"layers": {side: [rows]}, "summary": {side: row}, "status", "reason", "groups": {layer: [rows]} (the
        first layer and the odd layers named), "odd": {layer: reason} (the first :data:`ODD_SHOWN` layers whose
        alignment differs), "odd_summary": {"sides": {side: (odd, layers)}, "alignment": (odd, layers), "total",
        "rows": the first :data:`ODD_SHOWN` odd layers of either kind}, "links": {module: [rows]}, "link_rows": [rows], "boundaries": [rows],
        "join": {"status", "reason"} | None, "first_divergence": [rows]}``; empty lists when the run
        has no alignment (a warehouse built before the alignment step: ``status`` ``missing``).
    """
    layers = _rows(con, "alignment_layers", run_id)
    by_side: Dict[str, List[Dict[str, Any]]] = {"train": [], "infer": []}
    for r in layers:
        by_side.setdefault(r["side"], []).append(r)
    summary = {s: rows[0] for s, rows in by_side.items() if rows}
    status = next((r["status"] for r in layers), "missing")
    reason = next((r["reason"] for r in layers if r["reason"]), None) if status != "ok" else None
    groups: Dict[int, List[Dict[str, Any]]] = {}
    for g in _rows(con, "alignment_groups", run_id):
        g["evidence_list"] = json.loads(g["evidence"] or "[]")
        g["train_pos"] = positions(g["train_first"], g["train_last"])
        g["infer_pos"] = positions(g["infer_first"], g["infer_last"])
        groups.setdefault(g["layer"], []).append(g)
    odd_all = {li: rows[0]["odd_reason"] for li, rows in groups.items() if rows and rows[0]["odd_layer"]}
    odd = dict(list(odd_all.items())[:ODD_SHOWN])
    first_layer = min(groups) if groups else None
    groups = {li: g for li, g in groups.items() if li == first_layer or li in odd}
    odd_rows = [{"side": "both", "layer": li, "why": why, "kind": "alignment"} for li, why in odd_all.items()]
    odd_rows += [{"side": r["side"], "layer": r["layer"], "why": r["odd_reason"], "kind": "side"}
                 for s in ("train", "infer") for r in by_side.get(s, []) if r["odd"]]
    odd_counts = {s: (sum(1 for r in by_side.get(s, []) if r["odd"]),
                      sum(1 for r in by_side.get(s, []) if r["layer"] is not None)) for s in ("train", "infer")}
    odd_summary = {"sides": odd_counts, "alignment": (len(odd_all), len(groups_all_layers(con, run_id))),
                   "total": len(odd_rows), "rows": odd_rows[:ODD_SHOWN]}
    link_rows = _rows(con, "alignment_links", run_id)
    links: Dict[str, List[Dict[str, Any]]] = {}
    for r in link_rows:
        r["text"] = instance_text(r) if r["layer"] is not None else None
        links.setdefault(r["module"], []).append(r)
    bks = _rows(con, "alignment_boundary_kernels", run_id)
    join = {"status": bks[0]["join_status"], "reason": bks[0]["join_reason"]} if bks else None
    for b in bks:
        b["text"] = instance_text(b) if b["relation"] else None
    first = _by_boundary([b for b in bks if b["is_first_divergence"]])
    points = _by_boundary([b for b in bks if b["role"] == "independent_point" and not b["is_first_divergence"]])
    confirm: Dict[str, List[Dict[str, Any]]] = {}
    for b in bks:
        if b["comparison_grade"] in (Grade.RED, Grade.ORANGE) and b["relation"] not in (None, "same"):
            confirm.setdefault(b["module"], [])
            if b["boundary"] not in [x["boundary"] for x in confirm[b["module"]]]:
                confirm[b["module"]].append(b)
    return {"layers": by_side, "summary": summary, "status": status, "reason": reason, "groups": groups,
            "odd": odd, "odd_summary": odd_summary, "links": links, "link_rows": link_rows, "boundaries": bks, "join": join,
            "first_divergence": first, "points": points, "confirm": confirm}


def kernels_text(r: Dict[str, Any]) -> str:
    """One aligned group as the dump report writes it: ``FlashAttentionScore (train) vs
    FusedInferAttentionScore (infer), different_impl, layer 0 positions 6 ↔ 6``."""
    return (f"{r['train_kernels'] or '—'} (train) vs {r['infer_kernels'] or '—'} (infer), {r['relation']}, "
            f"layer {r['layer']} positions {positions(r['train_first'], r['train_last'])} ↔ "
            f"{positions(r['infer_first'], r['infer_last'])}")


def dump_join_facts(con, run_id: Optional[str]) -> DumpJoin:
    """The profile ⋈ dump facts of the dump report (``alignment_report.{md,html}``), from ``fct_boundary_kernels``.

    Args:
        con: a read-only connection to the warehouse, or None when the analysis was not written into
            a lake (or the lake has no warehouse yet). run_id: the dump analysis' run id (None: no lake).
    Returns:
        ``{"status", "reason", "run_id", "points": [{"round", "boundary", "status", "tensor_ulp",
        "first" (the round-0 first divergence), "groups": [rows with "text"; most severe comparison grade
        first]}]}``; ``status`` is the mart's ``join_status`` (``joined`` | ``refused`` | ``no_profile``),
        ``no_profile`` when the warehouse has no ``fct_boundary_kernels`` (no profile was ever built into
        it) or no row of the run, ``no_lake`` when ``con`` is None.
    """
    out: DumpJoin = {"status": "no_lake", "reason": None, "run_id": run_id, "points": []}
    if con is None or run_id is None:
        return out
    has = con.execute("select count(*) from information_schema.tables where table_schema = 'main' "
                      "and table_name = 'fct_boundary_kernels'").fetchone()[0]
    st = _rows(con, "dumps_profile_join", run_id) if has else []
    if not st:
        out.update(status="no_profile", reason="the lake's warehouse holds no profile of this run")
        return out
    out.update(status=st[0]["join_status"], reason=st[0]["join_reason"])
    points: Dict[tuple, Dict[str, Any]] = {}
    for r in _rows(con, "dumps_boundary_kernels", run_id):
        p = points.setdefault((r["round"], r["boundary"]), {
            "round": r["round"], "boundary": r["boundary"], "status": r["status"], "tensor_ulp": r["tensor_ulp"],
            "first": r["round"] == 0 and bool(r["is_first_divergence"]), "groups": []})
        if r["module"] is not None:
            r["text"] = kernels_text(r) if r["relation"] else None
            p["groups"].append(r)
    for p in points.values():
        p["groups"].sort(key=lambda r: SEVERITY.get(r["comparison_grade"], 9))
    out["points"] = sorted(points.values(), key=lambda p: (not p["first"], p["round"]))
    return out
