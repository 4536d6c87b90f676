"""Hypothesis exclusion for one analysed round: weights, inputs/padding, configs, parallel layout,
fused kernels, randomness — each excluded, confirmed or evidence_missing, with its evidence."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from tilake.diagnosis.divergence import NOT_COMPARED
from tilake.diagnosis.pair import Pair
from tilake.ingest.msprobe.reader import DumpSide
from tilake.models.boundary_maps import SIDES


def _scalar_kwargs(dump: DumpSide, entry: str) -> Dict[str, Any]:
    e = dump.entries.get(entry) or {}
    out = {}
    for k, v in (e.get("input_kwargs") or {}).items():
        if isinstance(v, dict) and "value" in v:
            out[k] = v["value"]
    return out


def hypotheses(pair: Pair, rows: List[dict], weights: List[dict], fd: dict, task_card: dict,
               token_ids: Optional[dict] = None) -> List[dict]:
    """Hypothesis exclusion, each with status (excluded | confirmed | evidence_missing) and evidence.

    ``token_ids``: :func:`tilake.diagnosis.token_ids.compare_token_ids` of the pair (differing ids
    confirm "inputs not aligned" whatever the embedding shows).
    """
    out = []
    # weights
    cmp = [w for w in weights if w["status"] not in NOT_COMPARED]
    bad = [w for w in cmp if w["status"] != "EXACT"]
    miss = [w for w in weights if w["status"] in NOT_COMPARED]
    if not cmp:
        out.append({"hypothesis": "weights not in sync", "status": "evidence_missing",
                    "evidence": ["no weight boundary could be compared"] + [f"{w['boundary']}: {w.get('reason')}" for w in miss[:3]]})
    elif bad:
        out.append({"hypothesis": "weights not in sync", "status": "confirmed",
                    "evidence": [f"{w['boundary']}: {w['status']}, {w.get('mismatch_count')} elements differ "
                                 f"({w.get('rows_differing')} of {w.get('rows_total')} rows), pattern {w.get('pattern')}"
                                 for w in bad]})
    else:
        ev = [f"{len(cmp)} weight tensors bitwise equal (fused qkv/gate_up weights sliced by rows)"]
        ev += [f"not compared: {w['boundary']} — {w.get('reason')}" for w in miss]
        out.append({"hypothesis": "weights not in sync", "status": "excluded", "evidence": ev})
    # inputs / padding
    emb = next((r for r in rows if r["boundary"] == (pair.bmap.get("layer_input") or {}).get("first")), None)
    pad_notes = sorted({n for r in rows for n in r.get("notes", []) if "unpad" in n or "unified" in n})
    tid = token_ids or {}
    if tid.get("status") == "differ":
        out.append({"hypothesis": "inputs not aligned / padding not removed", "status": "confirmed",
                    "evidence": [tid["text"]]})
    elif emb and emb["status"] == "EXACT":
        ev = [f"first boundary {emb['boundary']} is bitwise EXACT (same token ids reach both models)"]
        ev += pad_notes[:3] or ["no padding removal was needed (no padded tensors)"]
        out.append({"hypothesis": "inputs not aligned / padding not removed", "status": "excluded", "evidence": ev})
    else:
        out.append({"hypothesis": "inputs not aligned / padding not removed",
                    "status": "confirmed" if emb and emb["status"] not in NOT_COMPARED else "evidence_missing",
                    "evidence": [f"first boundary: {emb['status'] if emb else 'absent'} — {(emb or {}).get('reason')}"]})
    # configs: dims from both sides' parameter shapes
    shape_bad = [w for w in weights if w["status"] == "SHAPE_DIFF"]
    if shape_bad:
        out.append({"hypothesis": "model configs not equivalent", "status": "confirmed",
                    "evidence": [f"{w['boundary']}: {w.get('reason')}" for w in shape_bad]})
    elif cmp:
        out.append({"hypothesis": "model configs not equivalent", "status": "excluded",
                    "evidence": [f"layer count {pair.layer_counts['train']} vs {pair.layer_counts['infer']}; "
                                 f"dims {pair.dims}; every compared weight has the same shape after slicing",
                                 "structural differences (fused vs separate projections, fused residual add) "
                                 "are mapped by the boundary map as mathematically equivalent"]})
    else:
        out.append({"hypothesis": "model configs not equivalent", "status": "evidence_missing",
                    "evidence": ["no weight shapes to compare"]})
    # parallel layout
    tp = {s: (task_card.get("parallel") or {}).get(s) for s in SIDES}
    if all(tp.values()) and "unknown" not in tp.values():
        st = "excluded" if tp["train"] == tp["infer"] else "confirmed"
        out.append({"hypothesis": "parallel layout differs", "status": st,
                    "evidence": [f"train {tp['train']} vs infer {tp['infer']} (task card)"]})
    else:
        out.append({"hypothesis": "parallel layout differs", "status": "evidence_missing",
                    "evidence": ["TP/PP/EP of the sides not supplied (task card says unknown); "
                                 f"dumps are single rank folders: train {pair.dumps['train'].dir.name}, "
                                 f"infer {pair.dumps['infer'].dir.name}"]})
    # kernel fingerprint of the first divergence
    if fd.get("boundary"):
        r = next(x for x in rows if x["boundary"] == fd["boundary"])
        fp = {}
        for s in SIDES:
            src = (r.get(f"{s}_source") or "").split(" ")[0]
            fp[s] = kernel_fingerprint(pair, s, src)
        ev = [f"{s}: {', '.join(fp[s]) or 'no API entries dumped'}" for s in SIDES]
        if r.get("class") == "rounding-level":
            out.append({"hypothesis": "fused kernel / accumulation order", "status": "confirmed",
                        "evidence": ev + ["first divergence is rounding-level with bitwise-equal inputs: "
                                          "different kernels, expected floating-point difference"]})
        else:
            out.append({"hypothesis": "fused kernel / accumulation order", "status": "excluded",
                        "evidence": ev + [f"first divergence is {r.get('class')}: beyond kernel rounding"]})
    else:
        out.append({"hypothesis": "fused kernel / accumulation order", "status": "evidence_missing",
                    "evidence": [fd.get("reason", "no first divergence")]})
    # randomness
    drops = []
    for s in SIDES:
        d = pair.dumps[s]
        for e in d.entries:
            if d.api_name(e) in ("Functional.dropout", "Torch.dropout", "Functional.dropout2d"):
                kw = _scalar_kwargs(d, e)
                drops.append((s, e, kw.get("p"), kw.get("training")))
    active = [x for x in drops if x[2] not in (0, 0.0) and x[3] not in (False, None)]
    if active:
        out.append({"hypothesis": "randomness (dropout, sampling)", "status": "confirmed",
                    "evidence": [f"{s}: {e} p={p} training={t}" for s, e, p, t in active[:5]]})
    else:
        ev = [f"{len(drops)} dropout calls, all p=0 or training=False"] if drops else ["no dropout API dumped"]
        if fd.get("status") in ("found", "none"):
            ev.append("single request, deterministic prefill, and every boundary before the first divergence is EXACT")
            out.append({"hypothesis": "randomness (dropout, sampling)", "status": "excluded", "evidence": ev})
        else:
            out.append({"hypothesis": "randomness (dropout, sampling)", "status": "evidence_missing", "evidence": ev})
    return out


def kernel_fingerprint(pair: Pair, side: str, entry: str) -> List[str]:
    """API names (counters removed) dumped anywhere under the module that holds ``entry``.

    The producing code of a boundary differs between sides (eager softmax attention: matmul +
    softmax; SDPA: one fused call); the API set is the evidence of which kernels ran.
    """
    d = pair.dumps[side]
    root = d.parents.get(entry) or entry
    kids: Dict[str, List[str]] = {}
    for k, p in d.parents.items():
        kids.setdefault(p, []).append(k)
    names: List[str] = []
    stack = [root]
    seen = set()
    while stack:
        n = stack.pop()
        for k in sorted(kids.get(n, []), key=lambda x: d.order.get(x, 0)):
            if k in seen:
                continue
            seen.add(k)
            a = d.api_name(k)
            if a and k in d.entries and a not in names:
                names.append(a)
            stack.append(k)
    return names
