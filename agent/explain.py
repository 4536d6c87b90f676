"""The ``explain`` tool of ``tilake mcp``: the evidence behind one grade (an operator diff row) or one verdict
(a dump boundary), read back from where the command wrote it, with one sentence on top.

* an operator diff row: ``fct_op_comparison`` (grade, the rule that gave it, kernels and calls per side,
  evidence per side, code paths, action), its fused-kernel joins (``fct_fused_matches``) — the report's row;
* a dump boundary: ``report_source.json`` of an analysis (``report_source``) or the lake
  (``fct_boundary_diffs``, else the raw ``boundary_results`` before a build), the independent difference
  point it is (``report_source`` ``points``) and the gate's decision for it (``fct_dump_gates`` /
  raw ``dump_gates``) when the run was gated.

Every query goes through the read-only guard of ``tilake sql`` (:func:`tilake.lake.sql.query`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from tilake.agent.tools import Json, Workspace, plain_object
from tilake.errors import TilakeError
from tilake.vocab import BoundaryStatus


def _rows(ws: Workspace, sql: str, params: Dict[str, Any]) -> List[Dict[str, Any]]:
    from tilake.lake.sql import query

    cols, rows = query(ws.lake, sql, False, {k: v for k, v in params.items()})
    return [dict(zip(cols, r)) for r in rows]


def _first(ws: Workspace, tries: List[Tuple[str, str]], params: Dict[str, Any]) -> Tuple[Optional[Dict[str, Any]], str]:
    """The first row of the first query that has one, with the name of its table; a query over a table that is
    not there yet (no build) is skipped."""
    for table, sql in tries:
        try:
            rows = _rows(ws, sql, params)
        except TilakeError:
            continue
        if rows:
            return rows[0], table
    return None, ""


def explain_row(ws: Workspace, run_id: str, row: Optional[int] = None, module: Optional[str] = None) -> Json:
    """The evidence behind one graded operator diff row of ``run_id`` (``row``: its number in the report's
    comparison table, 1 = first, i.e. the n-th row by ``display_order``; or ``module``).

    Raises:
        TilakeError: neither row nor module; no such row; no warehouse.
    """
    if row is None and not module:
        raise TilakeError("explain needs row (the report's row number) or module for an operator diff row")
    where = "n = $row" if row is not None else "module = $module"
    params: Dict[str, Any] = {"run_id": run_id, **({"row": int(row)} if row is not None else {"module": module})}
    rows = _rows(ws, "select * from (select row_number() over (order by display_order) as n, * from fct_op_comparison "
                     f"where run_id = $run_id) where {where} order by n", params)
    if not rows:
        raise TilakeError(f"run {run_id} has no operator diff row {row if row is not None else module!r} "
                          "(fct_op_comparison; rows are numbered 1, 2, … in the report's table order)")
    r = rows[0]
    fused = _rows(ws, "select * from fct_fused_matches where run_id = $run_id and module = $module",
                  {"run_id": run_id, "module": r["module"]})

    def ops(side: str) -> str:
        names, calls = r.get(f"{side}_ops") or [], r.get(f"{side}_op_calls") or []
        return ", ".join(f"{n}×{c}" for n, c in zip(names, calls)) or "none"

    sentence = (f"row {r['n']} {r.get('module_label_en') or r['module']}: {r['grade_label_en']} "
                f"({r['grade']}) by rule {r['rule_id']} — {r.get('rule_en') or ''}; training {ops('train')} vs "
                f"inference {ops('infer')}" + (f"; {r['diff_type_en']}" if r.get("diff_type_en") else "")
                + (f"; evidence train={r.get('train_evidence')} infer={r.get('infer_evidence')}"))
    return plain_object({"kind": "op_diff_row", "run_id": run_id, "sentence": sentence, "grade": r["grade"],
                  "rule_id": r["rule_id"], "row": r, "fused_matches": fused,
                  "source": "fct_op_comparison, fct_fused_matches (the report's table and fused joins)"})


def _boundary_sentence(b: Dict[str, Any]) -> str:
    st = b.get("status")
    parts = [f"{b.get('boundary')} (round {b.get('round', 0)}): {st}"]
    if b.get("mismatch_count") is not None and st != BoundaryStatus.EXACT:
        frac = b.get("mismatch_fraction")
        parts.append(f"{b['mismatch_count']} elements differ" + (f" ({frac:.1%})" if isinstance(frac, float) else ""))
    if b.get("max_elem_ulp") is not None:
        parts.append(f"max {b['max_elem_ulp']:g} ULP per element")
    if b.get("tensor_ulp") is not None and st != BoundaryStatus.EXACT:
        parts.append(f"{b['tensor_ulp']:g} ULP at tensor scale")
    cls = b.get("class") or b.get("diff_class")
    if cls:
        parts.append(f"class {cls}")
    if b.get("role"):
        parts.append(f"role {b['role']}")
    if b.get("reason"):
        parts.append(str(b["reason"]))
    return "; ".join(parts)


def explain_boundary(ws: Workspace, boundary: str, run_id: Optional[str] = None, round_no: int = 0,
                     report_source: Optional[str] = None) -> Json:
    """The evidence behind one boundary's verdict: from ``report_source`` (a dump analysis' report_source.json,
    read only) or from the lake under ``run_id``.

    Raises:
        TilakeError: neither given; unreadable report_source.json; no such boundary.
    """
    if report_source:
        p = Path(report_source)
        try:
            src = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TilakeError(f"cannot read report_source.json: {exc}", path=p) from exc
        rows = [b for b in src.get("boundaries") or [] if b.get("boundary") == boundary and b.get("round", 0) == round_no]
        rows += [dict(w, round=0) for w in src.get("weights") or [] if w.get("boundary") == boundary and round_no == 0]
        if not rows:
            raise TilakeError(f"no boundary {boundary!r} in round {round_no}", path=p)
        point = next((q for q in src.get("points") or [] if q.get("boundary") == boundary
                      and q.get("round") == round_no), None)
        fd = src.get("first_divergence") or {}
        return plain_object({"kind": "boundary", "boundary": boundary, "round": round_no,
                      "sentence": _boundary_sentence(rows[0]), "row": rows[0],
                      "is_first_divergence": fd.get("boundary") == boundary, "first_divergence": fd,
                      "difference_point": point, "verdict": src.get("results"), "source": str(p)})
    if not run_id:
        raise TilakeError("explain a boundary with run_id (from the lake) or report_source (an analysis' file)")
    params = {"run_id": run_id, "boundary": boundary, "round": int(round_no)}
    cond = "run_id = $run_id and boundary = $boundary and round = $round"
    row, table = _first(ws, [("fct_boundary_diffs", f"select * from fct_boundary_diffs where {cond}"),
                             ("raw_boundary_results", f"select * from raw_boundary_results where {cond}")], params)
    if row is None:
        raise TilakeError(f"run {run_id} has no boundary {boundary!r} in round {round_no} (analyse it with "
                          "dumps_analyze or dumps_gate and a run_id)")
    gate, gtable = _first(ws, [("fct_dump_gates", "select * from fct_dump_gates where run_id = $run_id"),
                               ("raw_dump_gates", "select * from raw_dump_gates where run_id = $run_id")],
                          {"run_id": run_id})
    decision = None
    if gate is not None:
        fails = json.loads(gate.get("failures") or "[]")
        decision = next((f for f in fails if f.get("boundary") == boundary), None) or {
            "boundary": boundary, "check": "passed the gate (equal, within budget or not mapped)",
            "gate_outcome": gate.get("outcome")}
    return plain_object({"kind": "boundary", "boundary": boundary, "round": round_no, "run_id": run_id,
                  "sentence": _boundary_sentence(row), "row": row, "gate": decision,
                  "gate_line": gate.get("line") if gate else None,
                  "source": table + (f", {gtable}" if gate is not None else "")})
