"""The analysis verdict (exact / nonzero / evidence_missing / not_run) and the measured log-prob figure."""
from __future__ import annotations

from typing import Optional

from tilake.diagnosis.divergence import NOT_COMPARED
from tilake.diagnosis.logprob import check_logprob, logprob_findings
from tilake.diagnosis.result import Analysis
from tilake.vocab import SKIPPED, BoundaryStatus, Consistency, RoundOutcome, Verdict


def verdict(an: Analysis, logprob: Optional[dict]) -> None:
    """Set ``verdict``, ``consistency``, ``verdict_reason`` and ``logprob`` on ``an`` (in place).

    Never "exact" or "rounding only" while a boundary is uncompared or undetermined: those read
    ``evidence_missing`` with the reason. Rounding-level differences with an open systematic bias
    read ``rounding_biased``, never "agree up to floating-point rounding".
    """
    compared = [r for r in an.boundary_rows if r["status"] not in NOT_COMPARED + SKIPPED]
    last = an.rounds[-1] if an.rounds else {}
    logic = [p for p in an.points if p.get("class") == "logic-level"]
    non_exact = [r for r in compared if r["status"] != BoundaryStatus.EXACT]
    missing = [r for r in an.boundary_rows if r["status"] in NOT_COMPARED]
    biased = [r for r in non_exact if r.get("systematic_bias")]
    quant = [p for p in an.points if p.get("class") == "quantisation-level"]
    if not compared and missing:
        an.verdict, an.consistency = Verdict.EVIDENCE_MISSING, Consistency.UNKNOWN
        an.verdict_reason = (f"no boundary could be compared ({len(missing)} evidence_missing/MISSING); "
                             f"first: {missing[0]['boundary']} — {missing[0].get('reason')}")
        fd0 = (an.rounds[0] if an.rounds else {}).get("first_divergence") or {}
        if fd0.get("candidate"):
            an.verdict_reason = fd0["reason"]
    elif not compared:
        an.verdict, an.consistency = Verdict.NOT_RUN, Consistency.UNKNOWN
        an.verdict_reason = "no boundary was analysed"
    elif an.token_ids.get("status") == "differ":
        an.verdict, an.consistency = Verdict.NONZERO, Consistency.INPUTS_DIFFER
        an.verdict_reason = (an.token_ids["text"] + "; every difference downstream follows from the inputs "
                             "(no stub round: align the inputs and dump again)")
    elif last.get("outcome") == RoundOutcome.PRECISION_CONFIG:
        dts = sorted({(str(r.get("train_dtype")).replace("torch.", ""), str(r.get("infer_dtype")).replace("torch.", ""))
                      for r in non_exact if r["status"] == BoundaryStatus.DTYPE_DIFF})
        an.verdict, an.consistency = Verdict.NONZERO, Consistency.PRECISION_CONFIG
        an.verdict_reason = (f"the sides compute in different dtypes ({', '.join(f'train {a} vs infer {b}' for a, b in dts)}): "
                             f"a configuration finding; compared in the lower precision, all {len(non_exact)} differing "
                             "boundaries are within the cast bound (no logic-level point)")
    elif any(r.get("first_divergence", {}).get("status") == "undetermined" for r in an.rounds) and not logic:
        an.verdict, an.consistency = Verdict.EVIDENCE_MISSING, Consistency.UNKNOWN
        an.verdict_reason = next(r["first_divergence"]["reason"] for r in an.rounds
                                 if r.get("first_divergence", {}).get("status") == "undetermined")
    elif logic:
        an.verdict, an.consistency = Verdict.NONZERO, Consistency.LOGIC_LEVEL
        an.verdict_reason = f"{len(logic)} logic-level independent difference point(s): " + \
            ", ".join(f"{p['boundary']} (round {p['round']})" for p in logic)
        if last.get("outcome") == RoundOutcome.STUB_NEEDED or (an.stub_instruction or {}).get("needed"):
            an.verdict_reason += "; enumeration not finished: apply stub_instruction.json and analyse the next round"
    elif quant:
        an.verdict, an.consistency = "nonzero", "quantisation"
        qe = quant[0].get("quant_error") or {}
        an.verdict_reason = (f"{len(quant)} independent difference point(s) at linear outputs of the quantised "
                             f"inference weights, each within the int{qe.get('bits', 8)} quantisation error "
                             f"({', '.join(p['boundary'] for p in quant[:3])}{'…' if len(quant) > 3 else ''}; first: "
                             f"max |diff| {qe.get('max_abs_diff', 0):.3g}, bound {qe.get('bound', 0):.3g}): the rollout's "
                             "weight quantisation, not a logic divergence (no logic-level point)")
        if (an.stub_instruction or {}).get("needed"):
            an.verdict_reason += "; downstream not isolated yet: apply stub_instruction.json and analyse the next round"
    elif [r for r in non_exact if r.get("evidence_kind") == "md5"]:
        md = [r for r in non_exact if r.get("evidence_kind") == "md5"]
        an.verdict, an.consistency = Verdict.NONZERO, Consistency.UNKNOWN
        an.verdict_reason = (f"{len(md)} boundar{'y differs' if len(md) == 1 else 'ies differ'} by md5 (first: "
                             f"{md[0]['boundary']}); ULP and class are unknown without tensors — collect tensor mode "
                             f"for {md[0]['boundary']} (msprobe config task: tensor, list/scope naming its entry)")
    elif [r for r in non_exact if r["status"] == BoundaryStatus.SHAPE_DIFF]:
        sd = [r["boundary"] for r in non_exact if r["status"] == BoundaryStatus.SHAPE_DIFF]
        an.verdict, an.consistency = Verdict.EVIDENCE_MISSING, Consistency.UNKNOWN
        an.verdict_reason = (f"{len(sd)} boundar{'y has' if len(sd) == 1 else 'ies have'} different shapes after "
                             f"mapping (SHAPE_DIFF: {', '.join(sd[:3])}): values there were not compared")
    elif non_exact:
        sus = [s for r in an.rounds for s in r.get("suspects", [])]
        if sus and (an.stub_instruction or {}).get("needed"):
            an.verdict, an.consistency = Verdict.NONZERO, Consistency.UNKNOWN
            an.verdict_reason = ("rounding-level first divergence but downstream suspects remain "
                                 f"({', '.join(s['boundary'] for s in sus[:3])}); apply the stub instruction")
        elif biased:
            an.verdict, an.consistency = Verdict.NONZERO, Consistency.ROUNDING_BIASED
            an.verdict_reason = (f"rounding-level differences with a systematic bias at {len(biased)} boundar"
                                 f"{'y' if len(biased) == 1 else 'ies'} (first: {biased[0]['boundary']}, "
                                 f"{(biased[0].get('bias') or {}).get('kind', 'bias')}): biased rounding accumulates "
                                 "with depth, so the sides do not merely differ by rounding noise")
        elif (an.stub_instruction or {}).get("needed"):
            si = an.stub_instruction
            an.verdict, an.consistency = Verdict.NONZERO, Consistency.UNKNOWN
            an.verdict_reason = (f"rounding-level point(s) so far ({', '.join(p['boundary'] for p in an.points[:3])}), "
                                 "but the differences downstream are not explained yet: "
                                 + ("apply stub_instruction.json and analyse the next round" if si.get("available")
                                    else f"the point cannot be isolated ({si.get('reason')})"))
        else:
            an.verdict, an.consistency = Verdict.NONZERO, Consistency.ROUNDING_ONLY
            an.verdict_reason = ("only rounding-level differences, each an isolated point: train and inference "
                                 "agree up to floating-point rounding (each rounding-level point is listed)")
    elif missing:
        an.verdict, an.consistency = Verdict.EVIDENCE_MISSING, Consistency.UNKNOWN
        an.verdict_reason = f"every compared boundary is EXACT but {len(missing)} could not be compared"
    else:
        an.verdict, an.consistency = Verdict.EXACT, Consistency.BITWISE
        an.verdict_reason = "every boundary is bitwise EXACT"
    causes = [h for h in an.hypotheses if h.get("status") == "confirmed"
              and h["hypothesis"] in ("weights not in sync", "model configs not equivalent")]
    if causes and an.verdict == Verdict.NONZERO:   # the cause the values name, beside the points it explains
        an.verdict_reason += "; confirmed by value: " + "; ".join(
            f"{h['hypothesis']} — {h['evidence'][0]}" for h in causes)
    if logprob is not None:
        lp = check_logprob(logprob)
        issues = logprob_findings(lp, compared)
        an.logprob = {"status": Verdict.EXACT if lp["max"] == 0 else Verdict.NONZERO, **lp}
        if issues:  # flagged, never silently dropped
            an.logprob.update(consistent_with_dumps=False, findings=issues)
            an.notes.extend(issues)
    else:
        an.logprob = {"status": Verdict.EVIDENCE_MISSING, "mean": None, "max": None, "std": None,
                      "reason": "no measured prefill log-prob diff supplied (e.g. from a training log); "
                                "not computed from dumps"}


def api_verdict(an: Analysis) -> None:
    """The verdict of an API-level (msprobe L1) pair from its aligned statistics (in place; after
    :func:`verdict`, which found no module boundary to compare).

    A difference beyond the reduction tolerance is ``nonzero`` (logic_level when a point is logic-like);
    equal statistics everywhere stay ``evidence_missing``: statistics cannot prove equal tensors.
    """
    seq = an.api_sequence or {}
    if not seq.get("aligned"):
        return
    pts = seq.get("points") or []
    lim = "; statistics cannot show: " + "; ".join(seq.get("limits") or [])
    if seq.get("status") == "found":
        an.verdict = Verdict.NONZERO
        an.consistency = (Consistency.LOGIC_LEVEL if any(p.get("class") == "logic-like" for p in pts)
                          else Consistency.UNKNOWN)
        an.verdict_reason = (f"msprobe L1 statistics, {seq['aligned']} API calls aligned: {seq['text']}"
                             + "".join(f"; point: {p.get('train') or p.get('infer')} — {p['why']}" for p in pts[1:4])
                             + lim)
    else:
        an.verdict, an.consistency = Verdict.EVIDENCE_MISSING, Consistency.UNKNOWN
        an.verdict_reason = f"msprobe L1 statistics, {seq['aligned']} API calls aligned: {seq['text']}" + lim
