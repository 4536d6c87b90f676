"""The exact gate on dumps without tensors: msprobe ``task: statistics`` (Max/Min/Mean/Norm per tensor)
and its ``md5`` summary mode — the common case for long sequences.

* md5 on both sides: equal ⇒ EXACT, different ⇒ NOT_EXACT with the ULP unknown (no tensor to measure);
* statistics only: they can never prove EXACT, and two devices may reduce the same tensor to
  different float32 statistics, so a boundary is ``evidence_missing`` either way; one whose statistics
  differ is marked ``stats_differ`` — a *candidate* for the first divergence, to collect in tensor
  mode next (msprobe config ``task: tensor`` with ``list`` / ``scope`` naming its entry).

Only selectors that read one slot per side, with transforms that keep the bytes in order (squeeze,
unsqueeze, flatten, reshape), can be judged from a summary: slicing or summing needs the tensor.
Source of the fields: msprobe dump.json ``Max``/``Min``/``Mean``/``Norm``/``md5`` (msprobe 8.x/26.x).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional

from tilake.models.boundary_maps import SIDES
from tilake.vocab import BoundaryStatus

BYTE_ORDER_KEEPING = {"squeeze", "unsqueeze", "flatten_from", "reshape"}
STATS = ("Max", "Min", "Mean", "Norm")


def _numel(shape) -> Optional[int]:
    return math.prod(int(x) for x in shape) if isinstance(shape, list) else None


def summary_gate(res: Dict[str, Any], has_pt: Callable[[str, Any], bool]) -> Optional[Dict[str, Any]]:
    """Row fields for a boundary whose tensors are not in the dump, or None when both ``.pt`` exist.

    Args:
        res: side → :class:`tilake.diagnosis.selectors.Resolved`.
        has_pt: ``(side, slot) → bool``, whether the slot's ``.pt`` is on disk (a statistics dump may
            name files it never wrote).
    Returns:
        ``{"status", "reason", "evidence_kind": "md5" | "statistics" | None, "stats_differ": bool, ...}``.
    """
    if all(sl.data_name and has_pt(s, sl) for s in SIDES for sl in res[s].slots):
        return None
    one = all(len(res[s].slots) == 1 and res[s].combine is None for s in SIDES)
    kinds = {next(iter(t)) if isinstance(t, dict) else str(t) for s in SIDES for t in res[s].transforms}
    if not one or not kinds <= BYTE_ORDER_KEEPING:
        return {"status": BoundaryStatus.EVIDENCE_MISSING, "evidence_kind": None, "stats_differ": False,
                "reason": "no tensor in the dump (statistics/md5 mode) and the map's selector needs one "
                          f"({', '.join(sorted(kinds - BYTE_ORDER_KEEPING)) or 'several slots'}): collect tensor mode"}
    sl = {s: res[s].slots[0] for s in SIDES}
    out: Dict[str, Any] = {"stats_differ": False}
    for s in SIDES:
        out[f"{s}_dtype"] = sl[s].declared_dtype
        out[f"{s}_shape"] = sl[s].declared_shape
    if sl["train"].declared_dtype != sl["infer"].declared_dtype:
        return {**out, "status": BoundaryStatus.DTYPE_DIFF, "evidence_kind": "summary",
                "reason": f"dtype {sl['train'].declared_dtype} (train) vs {sl['infer'].declared_dtype} (infer), from dump.json"}
    if _numel(sl["train"].declared_shape) != _numel(sl["infer"].declared_shape):
        return {**out, "status": BoundaryStatus.SHAPE_DIFF, "evidence_kind": "summary",
                "reason": f"shape {sl['train'].declared_shape} (train) vs {sl['infer'].declared_shape} (infer), from dump.json"}
    st = {s: sl[s].declared_stats or {} for s in SIDES}
    md5 = {s: st[s].get("md5") for s in SIDES}
    if all(md5.values()):
        same = md5["train"] == md5["infer"]
        return {**out, "evidence_kind": "md5", "status": BoundaryStatus.EXACT if same else BoundaryStatus.NOT_EXACT,
                "equal": same, "mismatch_count": 0 if same else None, "max_abs_diff": 0.0 if same else None,
                "tensor_ulp": 0.0 if same else None,
                "reason": None if same else f"md5 {md5['train']} (train) vs {md5['infer']} (infer): NOT_EXACT, "
                                            "ULP unknown (no tensor in the dump; collect tensor mode to measure it)"}
    vals = {s: [st[s].get(k) for k in STATS] for s in SIDES}
    merge = "; ".join(f"{s}: {st[s]['merge']}" for s in SIDES if st[s].get("merge"))
    if any(v is None for s in SIDES for v in vals[s]):
        return {**out, "status": BoundaryStatus.EVIDENCE_MISSING, "evidence_kind": None,
                "reason": "no tensor and no statistics/md5 for this boundary in dump.json" + (f" ({merge})" if merge else "")}
    from tilake.diagnosis.api_sequence import compare_stats

    cmp = compare_stats({"dtype": sl["train"].declared_dtype, "shape": sl["train"].declared_shape, **st["train"]},
                        {"dtype": sl["infer"].declared_dtype, "shape": sl["infer"].declared_shape, **st["infer"]})
    note = f" ({merge})" if merge else ""
    if cmp["status"] == "differs":
        return {**out, "status": BoundaryStatus.EVIDENCE_MISSING, "evidence_kind": "statistics", "stats_differ": True,
                "reason": "candidate: statistics differ beyond the float32 reduction tolerance (" + cmp["text"] + ")"
                          + note + "; statistics cannot prove EXACT or NOT_EXACT — collect tensor mode for this "
                          "boundary (msprobe list/scope)"}
    return {**out, "status": BoundaryStatus.EVIDENCE_MISSING, "evidence_kind": "statistics",
            "reason": "statistics equal (Max/Min equal, Mean/Norm within the float32 reduction tolerance)" + note
                      + " — statistics cannot prove EXACT; collect tensor or md5 mode"}
