"""Machine-readable outputs of a dump analysis and the task card.

Files (all UTF-8 JSON, written atomically into the output folder):

* ``task_card.json`` — scope: dump paths, model, backends/versions, hardware, pairing, prompt
  length, TP/PP/EP, goal. Anything not known is the string ``"unknown"``, never a default.
* ``boundary_results.json`` — one object per boundary per round (+ weight boundaries).
* ``stub_instruction.json`` — the next stub round (or ``needed: false`` with the reason).
* ``report_source.json`` — the single source of facts the reports are rendered from.

No raw tensor values, prompts or token ids are written: only shapes, dtypes, aggregate
difference figures and histograms.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from tilake.diagnosis.analyze import Analysis
from tilake.diagnosis.logprob import strict_json
from tilake.errors import TilakeError
from tilake.files import atomic_write_text
from tilake.ingest.msprobe.reader import DumpSide
from tilake.lake.dump_records import ReportSource, TaskCard
from tilake.vocab import EVIDENCE_MISSING, NOT_COMPARED, SKIPPED, BoundaryStatus, Verdict

UNKNOWN = "unknown"
CARD_FIELDS = ("model", "train_backend", "train_backend_version", "infer_backend", "infer_backend_version",
               "hardware", "request_id", "prompt_length", "goal")


def _write_json(path: Path, obj: Any) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TilakeError(f"cannot create the output folder: {exc.strerror}", path=path.parent) from exc
    text = json.dumps(strict_json(obj), ensure_ascii=False, indent=1, default=str, allow_nan=False) + "\n"
    return atomic_write_text(path, text, mkdir=False)


def task_card(train: DumpSide, infer: DumpSide, given: Optional[Mapping[str, str]] = None) -> TaskCard:
    """Build the task card from what the dumps show plus what the user supplied.

    Args:
        given: user facts (``--card key=value``): model, train_backend(_version), infer_backend(_version),
            hardware, request_id, prompt_length, goal, tp/pp/ep per side (``train_tp`` ...).
    Returns:
        dict; every unknown is ``"unknown"``. The prompt length comes from the user, never from
        token ids in the dump (those are not copied anywhere).
    """
    given = dict(given or {})
    card: TaskCard = {
        "dumps": {s: {"path": str(d.dir), "step": d.step if d.step is not None else UNKNOWN,
                      "rank": d.rank if d.rank is not None else (d.proc or UNKNOWN),
                      "msprobe_task": d.meta.get("task", UNKNOWN), "msprobe_level": d.meta.get("level", UNKNOWN),
                      "framework": d.meta.get("framework", UNKNOWN)}
                  for s, d in (("train", train), ("infer", infer))},
    }
    for k in CARD_FIELDS:
        card[k] = given.get(k, UNKNOWN)
    card["pairing"] = {"step": given.get("step_pairing", UNKNOWN), "rank": given.get("rank_pairing", UNKNOWN),
                       "request": given.get("request_pairing", UNKNOWN)}
    card["parallel"] = {s: ({k: given.get(f"{s}_{k}", UNKNOWN) for k in ("tp", "pp", "ep")}
                            if any(f"{s}_{k}" in given for k in ("tp", "pp", "ep")) else UNKNOWN)
                        for s in ("train", "infer")}
    card["known_traps"] = given.get("known_traps", UNKNOWN)
    return card


def boundary_rows_json(an: Analysis) -> List[dict]:
    """Rows for ``boundary_results.json`` (activation then weight boundaries)."""
    out = []
    for r in an.boundary_rows:
        out.append({"kind": "activation", **r})
    for r in an.weight_rows:
        out.append({**r, "kind": "weight", "round": 0})
    return out


def report_source(an: Analysis, card: TaskCard) -> ReportSource:
    """The single source of facts for ``alignment_report.{md,html}`` (schema ``tilake.report_source/1``)."""
    r0 = an.rounds[0] if an.rounds else {}
    rows0 = [r for r in an.boundary_rows if r["round"] == 0]
    diverging = [r for r in an.boundary_rows
                 if r["status"] not in (BoundaryStatus.EXACT, *SKIPPED, *NOT_COMPARED, BoundaryStatus.SHAPE_DIFF)]
    slim_keys = ("round", "boundary", "position", "op", "status", "reason", "train_shape", "infer_shape",
                 "train_dtype", "mismatch_count", "mismatch_fraction", "max_abs_diff", "tensor_ulp",
                 "max_elem_ulp_significant", "signed_mean_ulp", "pos_count", "neg_count", "ulp_hist",
                 "rows_differing", "rows_total", "pattern", "class", "role", "class_evidence", "inputs_equal",
                 "systematic_bias", "train_source", "infer_source", "train_transforms", "infer_transforms",
                 "mag_signed_mean_ulp", "share_smaller_magnitude", "signed_count", "signed_filter", "bias",
                 "cols_differing", "cols_total", "logic_rows", "logic_rows_count", "logic_cols", "logic_cols_count",
                 "row_tensor_ulp", "cosine", "risk", "downcast", "precision_downgrade", "constant_rows",
                 "quant_error", "equality_rate")
    rounding = [p for p in an.points if p.get("class") == "rounding-level"]
    logic = [p for p in an.points if p.get("class") == "logic-level"]
    missing = [{"round": r["round"], "boundary": r["boundary"], "status": r["status"], "reason": r.get("reason")}
               for r in an.boundary_rows + an.weight_rows if r["status"] in NOT_COMPARED]
    limitations = []
    if an.logprob.get("status") == Verdict.EVIDENCE_MISSING:
        limitations.append("prefill log-prob diff: evidence_missing — " + an.logprob["reason"])
    if (an.stub_instruction or {}).get("needed"):
        limitations.append("independent points were not all isolated: the next stub round is pending "
                           "(stub_instruction.json)")
    elif not any(r["round"] > 0 for r in an.rounds) and logic:
        limitations.append("no stub round was run")
    for m in missing:
        limitations.append(f"{m['boundary']} (round {m['round']}): {m['status']} — {m['reason']}")
    limitations.extend(an.notes)
    return {
        "schema": "tilake.report_source/1",
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "task_card": card,
        "map": {"name": an.map_name, "reference_side": an.reference_side, "dims": an.dims,
                "rounding_bound": an.rounding_bound},
        "sides": an.sides,
        "results": {"verdict": an.verdict, "consistency": an.consistency, "reason": an.verdict_reason,
                    "native_prefill_status": an.verdict, "prefill_logprob_diff": an.logprob,
                    "verification_axes": {"tensor_prefill": an.verdict,
                                          "weight_sync": next((h["status"] for h in an.hypotheses
                                                               if h["hypothesis"] == "weights not in sync"), UNKNOWN)}},
        "summary": {"boundaries": len(rows0), "counts_round0": r0.get("counts", {}),
                    "weights_compared": sum(1 for w in an.weight_rows if w["status"] not in NOT_COMPARED),
                    "weights_exact": sum(1 for w in an.weight_rows if w["status"] == BoundaryStatus.EXACT),
                    "weights_total": len(an.weight_rows),
                    "weights_via_op": sum(1 for w in an.weight_rows if (w.get("via_op") or {}).get("status")
                                          in ("reproduces", "does_not_reproduce")),
                    "weights_checked": sum(1 for w in an.weight_rows
                                           if w["status"] not in NOT_COMPARED + (BoundaryStatus.SHAPE_DIFF,)
                                           or (w.get("via_op") or {}).get("status") in ("reproduces", "does_not_reproduce")),
                    "rounds": len(an.rounds)},
        "token_ids": an.token_ids,
        "canonical": an.canonical,
        "moe": an.moe,
        "suggestions": an.suggestions,
        "first_divergence": r0.get("first_divergence"),
        "amplification_chain": r0.get("amplification_chain", []),
        "points": an.points,
        "logic_level_points": [p["boundary"] for p in logic],
        "rounding_level_points": [p["boundary"] for p in rounding],
        "quantisation_level_points": [p["boundary"] for p in an.points if p.get("class") == "quantisation-level"],
        "suspects": [s for r in an.rounds for s in r.get("suspects", [])],
        EVIDENCE_MISSING: missing,
        "hypotheses": an.hypotheses,
        "rounds": [{k: v for k, v in r.items() if k not in ("amplification_chain",)} for r in an.rounds],
        "stub_instruction": an.stub_instruction,
        "layout_scans": an.layout_scans,
        "boundaries": [{k: r.get(k) for k in slim_keys} for r in an.boundary_rows],
        "diverging": [r["boundary"] + f"@{r['round']}" for r in diverging],
        "weights": [{**{k: w.get(k) for k in ("boundary", "status", "reason", "mismatch_count", "pattern")},
                     "via_op": ({k: w["via_op"].get(k) for k in ("side", "part", "status", "text", "beyond", "elements",
                                                                 "max_excess_ulp")} if w.get("via_op") else None)}
                    for w in an.weight_rows],
        "not_applicable": list(an.not_applicable),
        "api_sequence": _api_summary(an.api_sequence),
        "pitfalls": list(an.pitfalls),
        "limitations": limitations,
    }


def _api_summary(seq: Optional[dict]) -> Optional[dict]:
    """The L1 API-sequence result without its full row list (first 200 differing or equal rows kept)."""
    if not seq:
        return None
    rows = seq.get("rows") or []
    keep = [r for r in rows if r["status"] != "equal"][:200]
    return {**{k: v for k, v in seq.items() if k != "rows"}, "rows_shown": keep,
            "rows_equal": sum(1 for r in rows if r["status"] == "equal"), "rows_total": len(rows)}


def write_outputs(an: Analysis, card: TaskCard, out_dir: Path,
                  src: Optional[ReportSource] = None) -> Dict[str, Path]:
    """Write the JSON outputs into ``out_dir``; returns name → path.

    ``src`` is :func:`report_source` of the same analysis when the caller already has it. The
    human-readable reports are rendered from ``report_source.json`` by :mod:`tilake.reports`
    (:func:`tilake.pipeline.dumps.write_dump_outputs` does both).
    """
    out_dir = Path(out_dir)
    paths = {
        "task_card": _write_json(out_dir / "task_card.json", card),
        "boundary_results": _write_json(out_dir / "boundary_results.json",
                                        {"map": an.map_name, "reference_side": an.reference_side,
                                         "boundaries": boundary_rows_json(an)}),
        "stub_instruction": _write_json(out_dir / "stub_instruction.json", an.stub_instruction),
    }
    src = report_source(an, card) if src is None else src
    paths["report_source"] = _write_json(out_dir / "report_source.json", src)
    return paths
