"""The round driver: round 0 on the original pair, then one round per stub, until no stub is needed
or none can be applied; then the verdict (:mod:`tilake.diagnosis.verdict`)."""
from __future__ import annotations

import contextlib
import gc
from pathlib import Path
from typing import Any, Dict, List, Optional

from tilake.diagnosis.api_sequence import analyze_api_sequence, is_api_level
from tilake.diagnosis.divergence import NOT_COMPARED, amplification_chain, classify, find_points, first_divergence
from tilake.diagnosis.hypotheses import hypotheses
from tilake.diagnosis.moe import moe_hypothesis, router_flips
from tilake.diagnosis.pair import Pair, compare_boundary, compare_weights
from tilake.diagnosis.pitfalls import check_all, lm_head_by_shape
from tilake.diagnosis.result import Analysis
from tilake.diagnosis.risk import rate
from tilake.diagnosis.stubs import stub_instruction, verify_stub
from tilake.diagnosis.suggest import suggest_fixes
from tilake.diagnosis.token_ids import compare_token_ids, feed_embedding
from tilake.diagnosis.verdict import api_verdict, verdict
from tilake.models.boundary_maps import SIDES
from tilake.vocab import EVIDENCE_MISSING, SKIPPED, BoundaryStatus, RoundOutcome, Verdict

_FROZEN = [0]


@contextlib.contextmanager
def frozen_heap():
    """Freeze the objects that exist now (imported modules, dump.json trees: most of the heap) so the
    garbage collector's passes skip them (a full pass over torch's import heap costs ~0.1-0.3 s);
    re-entrant: only the outermost block unfreezes."""
    gc.freeze()
    _FROZEN[0] += 1
    try:
        yield
    finally:
        _FROZEN[0] -= 1
        if _FROZEN[0] == 0:
            gc.unfreeze()


def run_rounds(rounds, bmap: dict, pairing: Optional[dict], task_card: Optional[dict],
               progress, logprob: Optional[dict]) -> Analysis:
    """Analyse round 0 and every stub round given (arguments: :func:`tilake.diagnosis.analyze.analyze_pair`).

    Notes:
        1. Each round compares every boundary downstream of the points isolated so far (upstream
           ones are recorded ``ISOLATED`` / ``not_compared``; a ``not_compared`` one keeps the status
           the latest round that compared it gave, ``earlier_status``: it runs before every stubbed
           module, so the stubs cannot change it, and an input EXACT there is EXACT here).
        2. Rows are classified, then the first divergence, amplification chain, independent points
           and suspects of the round are derived (:mod:`tilake.diagnosis.divergence`).
        3. Round 0 also compares the map's weights and runs the hypothesis exclusion.
        4. A stub is needed when the first divergence exists and a logic-level point, a suspect or a
           propagated (not yet explained) difference remains — rounding-level points included; the rounds
           stop only when every remaining difference is an isolated rounding point (or all is EXACT). The
           next round's dumps must show the stub took effect, else the rounds stop.
        5. Token ids are compared first (:mod:`tilake.diagnosis.token_ids`): when they differ the
           embedding is fed them as a differing input, and no stub round is offered.
    """
    cfg = bmap.get("classification") or {}
    an = Analysis(map_name=Path(bmap.get("_path", "map")).stem, reference_side=bmap.get("reference_side", "train"),
                  rounding_bound=float(cfg.get("rounding_max_tensor_ulp", 4)))
    isolated: List[str] = []
    instr: Optional[dict] = None
    stop_reason = None
    all_pts: List[dict] = []
    earlier: Dict[str, str] = {}   # boundary → its status in the latest round that compared it
    pair0 = None
    early: List[dict] = []
    for k, rin in enumerate(rounds):
        pair = Pair(rin.train, rin.infer, bmap, pairing)
        if k == 0:
            pair0 = pair
            an.notes.extend(pair.notes)
            an.canonical = list(pair.canonical)
            an.not_applicable = list(pair.not_applicable)
            an.dims = pair.dims
            an.sides = {s: {"path": str(pair.dumps[s].dir), "step": pair.dumps[s].step,
                            "rank": pair.dumps[s].rank, "proc": pair.dumps[s].proc,
                            "task": pair.dumps[s].meta.get("task"), "level": pair.dumps[s].meta.get("level"),
                            "framework": pair.dumps[s].meta.get("framework", "unknown"),
                            "entries": len(pair.dumps[s].entries), "tensor_slots": len(pair.dumps[s].slots),
                            "construct_variant": pair.dumps[s].construct_variant,
                            "stack_variant": pair.dumps[s].stack_variant,
                            "layers": pair.layer_counts[s], "step_choice": pair.steps[s]} for s in SIDES}
        rinfo: Dict[str, Any] = {"round": k, "train": str(pair.dumps["train"].dir),
                                 "infer": str(pair.dumps["infer"].dir)}
        start_pos = -1
        if k > 0:
            ver = verify_stub(pair, instr)
            rinfo["stub_verification"] = ver
            rinfo["isolated"] = list(isolated)
            if not ver["effective"]:
                rinfo["outcome"] = RoundOutcome.STUB_NOT_EFFECTIVE
                stop_reason = (f"round {k}: the stub did not take effect (isolated input not bitwise equal); "
                               "downstream boundaries were not compared")
                an.rounds.append(rinfo)
                break
            start_pos = max(b.position for b in pair.boundaries if b.name in isolated)
        todo = [b for b in pair.boundaries if b.position > start_pos]
        rows = []
        with frozen_heap():
            for i, b in enumerate(todo):
                if progress:
                    progress(f"round {k}: {b.name}", i, len(todo))
                rows.append(compare_boundary(pair, b, k))
                gc.collect() if (i % 64 == 63) else None   # memory-mapped tensors caught in reference cycles
        for b in pair.boundaries:
            if b.position <= start_pos:
                rows.append({"round": k, "boundary": b.name, "position": b.position, "layer": b.layer,
                             "op": b.op, "inputs": b.inputs, "notes": [],
                             "status": BoundaryStatus.ISOLATED if b.name in isolated else BoundaryStatus.NOT_COMPARED,
                             "earlier_status": earlier.get(b.name),
                             "reason": "isolated by a stub in an earlier round" if b.name in isolated
                             else "compared in an earlier round (upstream of the stub)"})
        rows.sort(key=lambda r: r["position"])
        by = {r["boundary"]: r for r in rows}
        if k == 0:
            an.token_ids = compare_token_ids(pair)
        feed_embedding(rows, by, an.token_ids)
        for r in rows:
            if r["status"] in SKIPPED:
                continue
            classify(r, by, cfg, isolated)
            for sc in r.get("layout_scan") or []:
                an.layout_scans.append({"round": k, "boundary": r["boundary"], **sc})
        cmp_rows = [r for r in rows if r["status"] not in SKIPPED]
        earlier.update((r["boundary"], r["status"]) for r in cmp_rows)
        fd = first_divergence(cmp_rows)
        chain = amplification_chain(cmp_rows, fd.get("boundary"))
        pts, sus = find_points(cmp_rows, cfg, k, isolated)
        fed_apart = an.token_ids.get("status") == "differ"
        if fed_apart:  # differing inputs explain every jump: no suspects
            sus = []
        pt_names, sus_names = {p["boundary"] for p in pts}, {x["boundary"] for x in sus}
        for r in cmp_rows:
            if r["status"] in (BoundaryStatus.EXACT,) + NOT_COMPARED or r["status"] == BoundaryStatus.SHAPE_DIFF:
                r["role"] = None
            else:
                r["role"] = ("independent_point" if r["boundary"] in pt_names else
                             "suspect" if r["boundary"] in sus_names else "propagated")
        for p in pts:
            p["chain"] = amplification_chain(cmp_rows, p["boundary"])[:12]
            p.update(rate(p))
            by[p["boundary"]]["risk"] = p["risk"]
        rinfo.update(first_divergence=fd, amplification_chain=chain, points=pts, suspects=sus,
                     counts=_counts(cmp_rows))
        if k == 0:
            an.weight_rows = compare_weights(pair)
            lm = lm_head_by_shape(pair, an.weight_rows)   # a fused logits op: the lm_head found by its shape
            early = [lm] if lm else []
            an.hypotheses = hypotheses(pair, cmp_rows, an.weight_rows, fd, task_card or {}, an.token_ids)
            an.moe = router_flips(pair)   # MoE routing: router decision flips per token row (a finding of its own)
            if an.moe:
                an.hypotheses.append(moe_hypothesis(an.moe))
        an.boundary_rows.extend(rows)
        all_pts.extend(pts)
        # decide the next round
        logic = [p for p in pts if p.get("class") == "logic-level"]
        missing = [r for r in cmp_rows if r["status"] in NOT_COMPARED]
        # differences downstream that no isolated point explains yet (item: rounding points get stubs too)
        unexplained = [r for r in cmp_rows if r.get("role") == "propagated"]
        need = bool(fd.get("boundary")) and (bool(logic) or bool(sus) or bool(unexplained)) and not fed_apart
        # every difference is the precision change (compute dtypes differ, each within the cast bound):
        # a stub cannot isolate it (the stubbed tensor has the other dtype), the configuration is the finding
        diff_rows = [r for r in cmp_rows if r["status"] not in (BoundaryStatus.EXACT,) + NOT_COMPARED]
        precision = bool(diff_rows) and all(r.get("precision_config") or r.get("precision_downgrade")
                                            for r in diff_rows) and not fed_apart
        if precision:
            need = False
        if fed_apart:
            rinfo["outcome"] = RoundOutcome.TOKEN_IDS_DIFFER
        elif precision:
            rinfo["outcome"] = RoundOutcome.PRECISION_CONFIG
        elif fd["status"] == "none":
            rinfo["outcome"] = RoundOutcome.DOWNSTREAM_ALL_EXACT if k else RoundOutcome.ALL_EXACT
        elif fd["status"] == "undetermined":
            rinfo["outcome"] = RoundOutcome.EVIDENCE_MISSING
        elif need:
            rinfo["outcome"] = RoundOutcome.STUB_NEEDED
        else:
            rinfo["outcome"] = RoundOutcome.ONLY_ROUNDING_LEVEL
        if missing:
            rinfo[EVIDENCE_MISSING] = [r["boundary"] for r in missing]
        an.rounds.append(rinfo)
        if need:
            instr = stub_instruction(pair, cmp_rows, pts[0] if pts else {"boundary": fd["boundary"]}, k, instr)
            if instr.get("available"):
                isolated.append(fd["boundary"])
            else:
                stop_reason = instr.get("reason")
        else:
            instr = None
        if instr is None or not instr.get("available"):
            break
    an.points = all_pts
    an.stub_instruction = instr if instr is not None else {
        "needed": False, "round": len(an.rounds),
        "reason": an.rounds[-1].get("outcome") if an.rounds else Verdict.NOT_RUN}
    if stop_reason:
        an.notes.append(stop_reason)
    if pair0 is not None:
        an.pitfalls = check_all(pair0, [r for r in an.boundary_rows if r["round"] == 0], an.rounds, early)
    if pair0 is not None:   # .pt files whose dtype is not dump.json's: said, never silent
        an.notes.extend(n for n in (pair0.dumps[s].dtype_note() for s in SIDES) if n)
    verdict(an, logprob)
    if pair0 is not None and all(is_api_level(pair0.dumps[s]) for s in SIDES):
        an.api_sequence = analyze_api_sequence(pair0.dumps)
        api_verdict(an)
    if pair0 is not None and not any(r["status"] not in NOT_COMPARED + SKIPPED
                                     for r in an.boundary_rows) and not (an.api_sequence or {}).get("aligned"):
        an.suggestions = suggest_fixes(bmap, pair0.dumps)
        if an.suggestions:
            an.verdict_reason += "; try: " + "; ".join(x["text"] for x in an.suggestions[:2])
    return an


def _counts(rows: List[dict]) -> Dict[str, int]:
    c: Dict[str, int] = {}
    for r in rows:
        c[r["status"]] = c.get(r["status"], 0) + 1
    return c
