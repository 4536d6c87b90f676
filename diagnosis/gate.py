"""The bitwise acceptance gate of a dump pair ("true on-policy": training and rollout bitwise equal).

:func:`evaluate` reads round 0 of an :class:`~tilake.diagnosis.result.Analysis` (the exact gate per
boundary the analysis already made: ``torch.equal`` on the mapped tensors, ULP of the native dtype) and
decides per mapped boundary: ``equal`` (EXACT), ``within_budget`` (NOT_EXACT with its ULPs inside the
budget entry that names it), ``fail`` (beyond the budget, no budget, ULP unknown, SHAPE/DTYPE_DIFF,
NONFINITE) or ``not_compared`` (MISSING / evidence_missing). The gate passes only when every mapped
boundary is ``equal`` or ``within_budget``: a not-compared boundary makes it fail (outcome
``evidence_missing``), never pass, and a pair whose token ids differ fails before any boundary.
Boundaries the map leaves out on one side on purpose (``infer: null`` with ``reason_missing``, e.g.
vLLM's ``lm_head.weight``) are ``not_mapped``: counted and named, never gated.

Budget file (:func:`read_budget`): YAML or JSON, a mapping of boundary name or glob (``fnmatch``) to the
largest per-element ULP distance allowed, or to ``{max_elem_ulp: N, tensor_ulp: M}``::

    L0.attn_core.out: 1          # per-element ULP (boundary_results.max_elem_ulp)
    "L*.o_proj.out": {tensor_ulp: 2}
"""
from __future__ import annotations

import fnmatch
import hashlib
import math
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from tilake.diagnosis.result import Analysis
from tilake.errors import TilakeError
from tilake.lake.gate_records import Budget, BudgetEntry, GateBoundary, GateResult
from tilake.models.boundary_maps import SIDES, BoundaryMap
from tilake.vocab import NOT_COMPARED, SKIPPED, BoundaryStatus, GateCheck, GateOutcome

LIMIT_KEYS = ("max_elem_ulp", "tensor_ulp")


def read_budget(path: Path) -> Budget:
    """Read a ULP budget file (YAML or JSON: boundary name or glob → max ULP, see the module docstring).

    Returns:
        the :class:`~tilake.lake.gate_records.Budget`, entries in file order, with the file's sha256.
    Raises:
        TilakeError: unreadable file, not YAML/JSON, not a mapping, a limit that is not a finite number
            ≥ 0, an unknown limit key (one line naming the file and the entry).
    """
    import yaml

    path = Path(path)
    try:
        raw = path.read_bytes()
        data = yaml.safe_load(raw.decode("utf-8"))
    except OSError as exc:
        raise TilakeError(f"cannot read the ULP budget: {exc.strerror or exc}", path=path) from exc
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise TilakeError(f"the ULP budget is not YAML/JSON text: {str(exc).splitlines()[0]}", path=path) from exc
    if not isinstance(data, dict) or not data:
        raise TilakeError("the ULP budget must be a non-empty mapping of boundary name or glob to max ULP "
                          "(e.g. 'L0.attn_core.out: 1')", path=path)
    entries = []
    for key, val in data.items():
        if not isinstance(key, str) or not key.strip():
            raise TilakeError(f"budget key {key!r} is not a boundary name or glob", path=path)
        limits = val if isinstance(val, dict) else {"max_elem_ulp": val}
        unknown = sorted(set(map(str, limits)) - set(LIMIT_KEYS))
        if unknown or not limits:
            raise TilakeError(f"budget entry {key!r}: unknown key(s) {', '.join(unknown) or '(none given)'} "
                              f"(use {' / '.join(LIMIT_KEYS)})", path=path)
        for k, v in limits.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise TilakeError(f"budget entry {key!r}: {k} must be a number ≥ 0 (ULP), got {v!r}", path=path)
        entries.append(BudgetEntry(key.strip(), *(None if limits.get(k) is None else float(limits[k]) for k in LIMIT_KEYS)))
    return Budget(tuple(entries), str(path), hashlib.sha256(raw).hexdigest())


def budget_for(budget: Budget, boundary: str) -> Optional[BudgetEntry]:
    """The entry that applies to ``boundary``: its exact name, else the first matching glob in file order."""
    for e in budget.entries:
        if e.pattern == boundary:
            return e
    return next((e for e in budget.entries if fnmatch.fnmatchcase(boundary, e.pattern)), None)


def unmapped_names(bmap: BoundaryMap) -> List[Tuple[re.Pattern, str]]:
    """``(name regex, reason)`` of the map's boundaries and weights that leave a side out (``side: null``);
    ``{i}``-style layer placeholders match any layer number."""
    out = []
    for key in ("boundaries", "weights"):
        for item in bmap.get(key) or []:
            gone = [s for s in SIDES if item.get(s) is None]
            if gone:
                rx = re.sub(r"\\\{\w+\\\}", r"\\d+", re.escape(str(item["name"])))
                out.append((re.compile(f"^{rx}$"), str(item.get("reason_missing")
                                                      or f"the map has no {'/'.join(gone)}-side tensor")))
    return out


def _fmt(v: Optional[float]) -> str:
    return "?" if v is None else (str(int(v)) if float(v).is_integer() else f"{v:.3g}")


def _decide(row: dict, kind: str, budget: Budget, unmapped) -> GateBoundary:
    name, st = row["boundary"], str(row["status"])
    why = next((r for rx, r in unmapped if rx.match(name)), None)
    if why is not None and st in NOT_COMPARED:
        return GateBoundary(name, kind, st, GateCheck.NOT_MAPPED, f"not mapped: {why}")
    if st == BoundaryStatus.EXACT:
        return GateBoundary(name, kind, st, GateCheck.EQUAL, "bitwise equal", 0.0, 0.0)
    if st in NOT_COMPARED or st in SKIPPED:
        return GateBoundary(name, kind, st, GateCheck.NOT_COMPARED,
                            f"not compared ({st}: {row.get('reason') or 'no reason recorded'})")
    if st == BoundaryStatus.SHAPE_DIFF:
        return GateBoundary(name, kind, st, GateCheck.FAIL, f"SHAPE_DIFF (train {row.get('train_shape')} vs infer "
                            f"{row.get('infer_shape')}): not bitwise comparable")
    if st == BoundaryStatus.DTYPE_DIFF:
        dts = [str(row.get(f"{s}_dtype")).replace("torch.", "") for s in SIDES]
        return GateBoundary(name, kind, st, GateCheck.FAIL, f"DTYPE_DIFF (train {dts[0]} vs infer {dts[1]}): "
                            "not bitwise equal", row.get("max_elem_ulp"), row.get("tensor_ulp"))
    if st != BoundaryStatus.NOT_EXACT:   # NONFINITE and any status this gate does not know: never a pass
        return GateBoundary(name, kind, st, GateCheck.FAIL, f"{st}: {row.get('reason') or 'values differ'}")
    eu, tu = row.get("max_elem_ulp"), row.get("tensor_ulp")
    eu = None if eu is None else float(eu)
    tu = None if tu is None else float(tu)
    entry = budget_for(budget, name)
    figures = f"max {_fmt(eu)} ULP per element, {_fmt(tu)} ULP at tensor scale"
    if eu is None and tu is None:
        return GateBoundary(name, kind, st, GateCheck.FAIL, f"NOT_EXACT, ULP unknown ({row.get('reason') or 'no tensor values'})",
                            budget=entry.pattern if entry else None)
    if entry is None:
        return GateBoundary(name, kind, st, GateCheck.FAIL, f"NOT_EXACT, {figures}; no ULP budget names it", eu, tu)
    over = [f"{lbl} {_fmt(v)} > {_fmt(lim)}" for lbl, v, lim in (("per element", eu, entry.max_elem_ulp),
                                                                  ("tensor scale", tu, entry.tensor_ulp))
            if lim is not None and (v is None or v > lim)]
    if over:
        return GateBoundary(name, kind, st, GateCheck.FAIL, f"NOT_EXACT, {figures}; beyond budget {entry.pattern!r} ("
                            + ", ".join(over) + ")", eu, tu, entry.pattern)
    return GateBoundary(name, kind, st, GateCheck.WITHIN_BUDGET, f"NOT_EXACT, {figures}; within budget "
                        f"{entry.text()}", eu, tu, entry.pattern)


def evaluate(an: Analysis, bmap: BoundaryMap, budget: Optional[Budget] = None) -> GateResult:
    """Gate round 0 of ``an`` (activation rows in the map's order, then weight rows).

    Returns:
        the :class:`~tilake.lake.gate_records.GateResult` with its one ``line`` (``PASS …`` /
        ``FAIL <boundary>: …``) and every boundary's decision.
    """
    budget = budget or Budget()
    unmapped = unmapped_names(bmap)
    rows = sorted((r for r in an.boundary_rows if r["round"] == 0), key=lambda r: r.get("position", 0))
    decided = [_decide(r, "activation", budget, unmapped) for r in rows]
    decided += [_decide(r, "weight", budget, unmapped) for r in an.weight_rows]
    n: Dict[str, int] = {c: sum(1 for b in decided if b.check == c) for c in GateCheck}
    mapped = len(decided) - n[GateCheck.NOT_MAPPED]
    bad = [b for b in decided if b.check in (GateCheck.FAIL, GateCheck.NOT_COMPARED)]
    first = bad[0] if bad else None
    sides = {s: (an.sides.get(s) or {}).get("path") for s in SIDES}
    tok = an.token_ids or {}
    res = GateResult(GateOutcome.PASS, "", an.map_name, sides["train"], sides["infer"], mapped=mapped,
                     exact=n[GateCheck.EQUAL], within_budget=n[GateCheck.WITHIN_BUDGET], failing=n[GateCheck.FAIL],
                     not_compared=n[GateCheck.NOT_COMPARED], not_mapped=n[GateCheck.NOT_MAPPED], first_failing=first,
                     boundaries=decided, budget=budget, token_ids=tok.get("text"),
                     notes=[f"budget entry {e.pattern!r} matches no boundary" for e in budget.entries
                            if not any(fnmatch.fnmatchcase(b.boundary, e.pattern) for b in decided)])
    counts = _counts(res)
    if tok.get("status") == "differ":
        res.outcome = GateOutcome.FAIL
        res.line = f"FAIL token ids: {tok.get('text')} — the dumps are not of the same input ({counts})"
    elif mapped == 0:
        res.outcome = GateOutcome.EVIDENCE_MISSING
        res.line = ("FAIL: no mapped boundary in the dumps (a gate never passes on missing evidence; "
                    f"map {an.map_name}: {len(decided)} boundaries, none mapped on both sides)")
    elif first is not None:
        res.outcome = GateOutcome.FAIL if res.failing else GateOutcome.EVIDENCE_MISSING
        tail = ("; a gate never passes on missing evidence" if res.outcome == GateOutcome.EVIDENCE_MISSING else "")
        res.line = f"FAIL {first.boundary}: {first.reason} — {counts}{tail}"
    else:
        res.line = f"PASS: {counts}"
    return res


def _counts(res: GateResult) -> str:
    """``26 of 50 mapped boundaries fail, 0 not compared; 1 not mapped (lm_head.weight)`` style summary."""
    parts = [f"{res.exact} of {res.mapped} mapped boundaries bitwise equal"]
    if res.within_budget:
        parts.append(f"{res.within_budget} within their ULP budget")
    if res.failing:
        parts.append(f"{res.failing} fail")
    if res.not_compared:
        parts.append(f"{res.not_compared} not compared")
    text = ", ".join(parts)
    if res.not_mapped:
        names = [b.boundary for b in res.boundaries if b.check == GateCheck.NOT_MAPPED]
        text += f"; {res.not_mapped} not mapped by {res.map_name} ({_names(names)})"
    return text


def _names(names: Sequence[str], most: int = 3) -> str:
    return ", ".join(names[:most]) + (f" … +{len(names) - most}" if len(names) > most else "")
