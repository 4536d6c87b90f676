"""Per-round facts over compared boundary rows: classification, first divergence, amplification chain,
independent difference points and suspects.

Notes:
    1. A boundary row is *compared* when its status is EXACT, NOT_EXACT, DTYPE_DIFF, NONFINITE or
       SHAPE_DIFF; ``evidence_missing`` and ``MISSING`` rows are not compared (:data:`NOT_COMPARED`).
    2. First divergence = the first non-EXACT boundary (in execution order) whose predecessors are all
       compared and EXACT. When an earlier boundary was not compared, the first divergence is
       *undetermined* and the uncompared predecessors are named — never guessed.
    3. Amplification chain = from the first divergence downstream, each compared boundary's
       max|diff|, tensor-scale ULP and growth factor over the first divergence's max|diff|.
    4. Independent difference point = a compared non-EXACT boundary whose declared inputs are all
       EXACT (or isolated by a stub); everything else non-EXACT is propagated, or a *suspect* when its
       tensor-scale ULP jumps over its inputs' (a second point may hide there).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from tilake.vocab import NOT_COMPARED, BoundaryStatus


def classify(row: dict, by_name: Dict[str, dict], cfg: dict, isolated: Sequence[str] = ()) -> None:
    """Set ``inputs_equal``, ``class`` and ``class_evidence`` on a compared non-EXACT row (in place).

    Rules (thresholds from the map's ``classification`` block):
      * one-sided non-finite → logic-level;
      * an ``elementwise`` op whose inputs were bitwise equal yet whose output differs →
        logic-level (an elementwise op fed identical inputs cannot produce accumulation noise);
      * tensor-scale ULP above ``rounding_max_tensor_ulp`` → logic-level;
      * whole rows / whole columns differing while the inputs were equal → logic-level;
      * otherwise rounding-level; a one-direction lean of the signed ULPs — in value or in
        magnitude (:func:`systematic_bias`) — is recorded as a biased-rounding finding either way;
      * dtypes differ: logic-level unless the narrower side is exactly the downcast wider tensor
        (a precision downgrade, rounding-level);
      * one side constant across query positions while the other varies → logic-level;
      * a linear output of quantised weights (``quant_error``, :mod:`tilake.diagnosis.quant_error`):
        ``quantisation-level`` within the propagated quantisation error, logic-level beyond it when its
        inputs were equal (with differing inputs, beyond the bound falls back to the rules above);
      * the rows / columns whose error exceeds the rounding bound are named when they are not all
        of them (``logic_rows`` / ``logic_cols`` from :func:`tilake.diagnosis.numerics.compare`).
    """
    st = row.get("status")
    inp = []
    for n in row.get("inputs") or []:
        if n in isolated:
            inp.append((n, BoundaryStatus.ISOLATED))
        else:
            r = by_name.get(n) or {}
            st_n = r.get("status", "unknown")
            # upstream of every stub: the status the latest round that compared it gave (rounds.py)
            inp.append((n, r.get("earlier_status") or st_n if st_n == BoundaryStatus.NOT_COMPARED else st_n))
    row["input_statuses"] = {n: s for n, s in inp}
    row["inputs_equal"] = all(s in (BoundaryStatus.EXACT, BoundaryStatus.ISOLATED) for _n, s in inp)
    if st == BoundaryStatus.EXACT or st in NOT_COMPARED or st == BoundaryStatus.SHAPE_DIFF:
        row["class"] = None
        return
    if st == BoundaryStatus.NOT_EXACT and row.get("evidence_kind") == "md5":
        row["class"], row["systematic_bias"], row["bias"] = None, False, None
        row["class_evidence"] = ["md5 differs: NOT_EXACT; ULP and class unknown without the tensor"]
        return
    ev = []
    thr = float(cfg.get("rounding_max_tensor_ulp", 4))
    jf = float(cfg.get("jump_factor", 8))
    tu = row.get("tensor_ulp")
    cls = "rounding-level"
    if st == BoundaryStatus.NONFINITE:
        cls = "logic-level"
        ev.append("non-finite values on one side only")
    elif st == BoundaryStatus.DTYPE_DIFF and (row.get("downcast") or {}).get("exact"):
        row["precision_downgrade"] = True
        ev.append(row["downcast"]["text"] + ": rounding to the narrower dtype, not a logic fault")
    elif st == BoundaryStatus.DTYPE_DIFF and (row.get("downcast") or {}).get("tensor_ulp") is not None \
            and not row["inputs_equal"] and (row["downcast"]["tensor_ulp"] <= thr
                                             or row["downcast"]["tensor_ulp"] <= jf * _worst_input_ulp(row, by_name)):
        # both sides computed in different precisions (e.g. fp16 rollout, bf16 trainer): compared in the lower
        # one, a difference within the cast bound — or grown from its inputs' without a jump (the precision
        # difference amplifies with depth like any propagated one) — is what the precision change explains
        row["precision_config"] = True
        dc = row["downcast"]["tensor_ulp"]
        how = (f"within the bound {thr:g}" if dc <= thr else
               f"grown from its inputs' {_worst_input_ulp(row, by_name):.3g} without a jump (<= {jf:g}x)")
        ev.append(row["downcast"]["text"] + f"; {dc:.3g} ULP of {row['downcast']['to'].replace('torch.', '')} at "
                  f"tensor scale, {how} after differing-dtype inputs: the precision difference explains it")
    elif st == BoundaryStatus.DTYPE_DIFF:
        cls = "logic-level"
        ev.append("dtypes differ at a boundary that must agree")
        if row.get("downcast"):
            ev.append(row["downcast"]["text"])
    elif row.get("quant_error") and (row["quant_error"]["within"] or row["inputs_equal"]):
        # a linear of quantised weights: judged against the quantisation error, not bf16 rounding
        qe = row["quant_error"]
        cls = "quantisation-level" if qe["within"] else "logic-level"
        ev.append(qe["text"])
        ev.append(f"difference pattern: {row.get('pattern')} ({row.get('mismatch_fraction', 0):.1%} of elements differ)")
    else:
        if row.get("quant_error"):
            ev.append(row["quant_error"]["text"] + " — its inputs differ, so the bound does not cover the whole difference")
        if row["inputs_equal"] and row.get("op") == "elementwise":
            cls = "logic-level"
            ev.append("elementwise op fed bitwise-equal inputs produced different outputs "
                      "(cannot be accumulation-order noise)")
        if tu is not None and tu > thr:
            cls = "logic-level"
            ev.append(f"max|diff| = {tu:.3g} ULP of max|reference| > {thr:g} ULP (rounding bound)")
        elif tu is not None:
            ev.append(f"max|diff| = {tu:.3g} ULP of max|reference| <= {thr:g} ULP")
        if row.get("pattern") in ("whole_rows", "whole_columns") and row["inputs_equal"]:
            cls = "logic-level"
            ev.append(f"differences form {row['pattern'].replace('_', ' ')} with equal inputs")
        else:
            ev.append(f"difference pattern: {row.get('pattern')} "
                      f"({row.get('mismatch_fraction', 0):.1%} of elements differ)")
    ev.extend(_localisation(row))
    if row.get("constant_rows"):
        cls = "logic-level"
        ev.append(row["constant_rows"]["text"])
    if row.get("cosine") is not None:
        ev.append(f"cosine similarity {row['cosine']:.6f}")
    bias = systematic_bias(row, cfg)
    row["systematic_bias"] = bias is not None
    row["bias"] = bias
    if bias is not None:
        ev.append(bias["text"])
    row["class"] = cls
    row["class_evidence"] = ev


def _worst_input_ulp(row: dict, by_name: Dict[str, dict]) -> float:
    """The largest tensor-scale ULP among a row's inputs (after the cast to the lower dtype where they differ)."""
    vals = []
    for n in row.get("inputs") or []:
        r = by_name.get(n) or {}
        dc = (r.get("downcast") or {}).get("tensor_ulp")
        vals.append(float(dc if dc is not None else (r.get("tensor_ulp") or 0.0)))
    return max(vals or [0.0])


def systematic_bias(row: dict, cfg: dict) -> Optional[dict]:
    """A one-direction lean of a compared row's differing elements, or None.

    Two leans are tested with the map's ``bias_min_count`` (16) and ``bias_fraction`` (0.8):
      * magnitude: among the significant differing elements, ``|smaller − larger| / (smaller +
        larger)`` of the other side's magnitudes — a truncating kernel (round toward zero) gives
        ``toward_zero`` with share 1.0 and magnitude-signed mean −1 ULP even on zero-centred data,
        where the value-signed mean cancels;
      * value: ``|pos − neg| / (pos + neg)`` of ``ord(other) − ord(ref)`` over every differing element.

    Returns:
        ``{"kind": toward_zero | away_from_zero | value_up | value_down, "mag_signed_mean_ulp",
        "signed_mean_ulp", "share_smaller_magnitude", "text"}``; magnitude wins when both lean.
    """
    n_min, frac = int(cfg.get("bias_min_count", 16)), float(cfg.get("bias_fraction", 0.8))
    sm, lg = row.get("smaller_magnitude_count") or 0, row.get("larger_magnitude_count") or 0
    pos, neg = row.get("pos_count") or 0, row.get("neg_count") or 0
    other = row.get("other_side") or "other"
    figures = {"mag_signed_mean_ulp": row.get("mag_signed_mean_ulp"), "signed_mean_ulp": row.get("signed_mean_ulp"),
               "share_smaller_magnitude": row.get("share_smaller_magnitude")}
    means = (f"magnitude-signed mean {_fmt(figures['mag_signed_mean_ulp'])} ULP, value-signed mean "
             f"{_fmt(figures['signed_mean_ulp'])} ULP, share |{other}| < |reference| "
             f"{_fmt(figures['share_smaller_magnitude'])} ({row.get('signed_count', 0)} significant differing elements)")
    if sm + lg >= n_min and abs(sm - lg) / (sm + lg) >= frac:
        kind = "toward_zero" if sm > lg else "away_from_zero"
        where = "smaller" if sm > lg else "larger"
        return {"kind": kind, **figures,
                "text": f"systematic bias, biased rounding ({kind.replace('_', ' ')}): accumulates with depth — {max(sm, lg)} of "
                        f"{sm + lg} significant differing elements are {where} in magnitude on the {other} side; {means}"}
    if pos + neg >= n_min and abs(pos - neg) / (pos + neg) >= frac:
        kind = "value_up" if pos > neg else "value_down"
        return {"kind": kind, **figures,
                "text": f"systematic bias, biased rounding (values lean one way): accumulates with depth — {pos} elements up vs "
                        f"{neg} down; {means}"}
    return None


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:+.3g}" if isinstance(x, float) and x < 0 else f"{x:.3g}"


def _localisation(row: dict) -> List[str]:
    """Evidence lines naming the rows / columns above the rounding bound when they are a strict subset."""
    out = []
    for key, total in (("rows", row.get("rows_total")), ("cols", row.get("cols_total"))):
        n = row.get(f"logic_{key}_count") or 0
        if n and total and n < total:
            names = row.get(f"logic_{key}") or []
            more = "…" if n > len(names) else ""
            what = "rows (dim 0, tokens)" if key == "rows" else "columns (last dim, channels)"
            out.append(f"error above the rounding bound confined to {n} of {total} {what}: "
                       f"{names}{more}")
    return out


def first_divergence(rows: List[dict]) -> dict:
    """The first non-EXACT boundary whose predecessors (all earlier boundaries) are all EXACT.

    Returns:
        ``{"boundary": name | None, "status": "found" | "none" | "undetermined", "reason": str,
        "first_non_exact": name | None, "uncompared_predecessors": [...]}``. When an earlier
        boundary was not compared the first divergence is *undetermined* and the reason says which.
    """
    uncompared = []
    candidate = None
    for r in sorted(rows, key=lambda x: x["position"]):
        st = r["status"]
        if st == BoundaryStatus.EXACT:
            continue
        if st in NOT_COMPARED:
            if r.get("stats_differ") and candidate is None and \
                    all(rows_by == "statistics" for rows_by in _kinds(rows, uncompared)):
                candidate = r["boundary"]
            uncompared.append(r["boundary"])
            continue
        if uncompared:
            return {"boundary": None, "status": "undetermined", "first_non_exact": r["boundary"],
                    "uncompared_predecessors": uncompared,
                    "reason": f"{r['boundary']} is the first non-EXACT compared boundary, but "
                              f"{len(uncompared)} earlier boundar{'y was' if len(uncompared) == 1 else 'ies were'} "
                              f"not compared ({', '.join(uncompared[:3])}{'…' if len(uncompared) > 3 else ''}), "
                              "so it cannot be named the first divergence"}
        return {"boundary": r["boundary"], "status": "found", "first_non_exact": r["boundary"],
                "uncompared_predecessors": [], "reason": "every earlier boundary is EXACT"}
    if uncompared:
        out = {"boundary": None, "status": "undetermined", "first_non_exact": None,
               "uncompared_predecessors": uncompared,
               "reason": f"no compared boundary differs, but {len(uncompared)} were not compared"}
        if candidate:
            out["candidate"] = candidate
            out["reason"] = (f"candidate first divergence: {candidate} (the first boundary whose msprobe statistics "
                             "differ, every earlier one EXACT or with equal statistics); statistics cannot prove it — "
                             f"collect tensor mode for {candidate} (msprobe config task: tensor, list/scope naming its entry)")
        return out
    return {"boundary": None, "status": "none", "first_non_exact": None, "uncompared_predecessors": [],
            "reason": "every boundary is EXACT"}


def _kinds(rows: List[dict], names: List[str]) -> List[Optional[str]]:
    """``evidence_kind`` of the named rows (statistics rows with equal figures read ``statistics``)."""
    by = {r["boundary"]: r for r in rows}
    return [by[n].get("evidence_kind") if not by[n].get("stats_differ") else "differ" for n in names]


def amplification_chain(rows: List[dict], start: Optional[str]) -> List[dict]:
    """From ``start`` downstream: max|diff|, tensor-scale ULP and growth factor vs ``start``."""
    if not start:
        return []
    rs = sorted(rows, key=lambda x: x["position"])
    first = next(r for r in rs if r["boundary"] == start)
    base = first.get("max_abs_diff") or 0.0
    out = []
    for r in rs:
        if r["position"] < first["position"] or r["status"] in NOT_COMPARED or r["status"] == BoundaryStatus.SHAPE_DIFF:
            continue
        m = r.get("max_abs_diff")
        out.append({"boundary": r["boundary"], "position": r["position"], "status": r["status"],
                    "max_abs_diff": m, "tensor_ulp": r.get("tensor_ulp"),
                    "growth_vs_first": (m / base) if (m is not None and base) else None})
    return out


def find_points(rows: List[dict], cfg: dict, round_no: int, isolated: Sequence[str]) -> Tuple[List[dict], List[dict]]:
    """Independent difference points of one round, and downstream suspects.

    A point = a compared non-EXACT boundary whose declared inputs are all EXACT (or isolated by a
    stub). A suspect = a non-EXACT boundary with non-equal inputs whose tensor-scale ULP grew by
    more than ``jump_factor`` over its worst input and exceeds the rounding bound: a second
    independent difference may hide there, which only a stub round can confirm.
    """
    by = {r["boundary"]: r for r in rows}
    pts, sus = [], []
    thr = float(cfg.get("rounding_max_tensor_ulp", 4))
    jf = float(cfg.get("jump_factor", 8))
    for r in sorted(rows, key=lambda x: x["position"]):
        if r["status"] in (BoundaryStatus.EXACT,) + NOT_COMPARED or r["status"] == BoundaryStatus.SHAPE_DIFF:
            continue
        if r.get("inputs_equal"):
            pts.append({"round": round_no, "boundary": r["boundary"], "position": r["position"],
                        "train_source": r.get("train_source"), "infer_source": r.get("infer_source"),
                        "class": r.get("class"), "evidence": r.get("class_evidence", []),
                        "status": r["status"], "max_abs_diff": r.get("max_abs_diff"),
                        "tensor_ulp": r.get("tensor_ulp"), "pattern": r.get("pattern"),
                        "systematic_bias": r.get("systematic_bias"), "bias": r.get("bias"),
                        "logic_rows": r.get("logic_rows"), "logic_cols": r.get("logic_cols"),
                        "cosine": r.get("cosine"), "op": r.get("op"), "quant_error": r.get("quant_error"),
                        "precision_downgrade": bool(r.get("precision_downgrade")),
                        "constant_rows": r.get("constant_rows")})
            continue
        tu = r.get("tensor_ulp") or 0.0
        worst = max([(by.get(n) or {}).get("tensor_ulp") or 0.0 for n in r.get("inputs") or []] or [0.0])
        if tu > thr and (worst == 0 or tu > jf * worst):
            sus.append({"round": round_no, "boundary": r["boundary"], "tensor_ulp": tu,
                        "worst_input_tensor_ulp": worst,
                        "reason": f"tensor-scale ULP {tu:.3g} vs {worst:.3g} at its inputs (> {jf:g}×)"})
    return pts, sus
