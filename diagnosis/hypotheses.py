"""Hypothesis exclusion for one analysed round: weights, inputs/padding, configs, parallel layout,
fused kernels, randomness — each excluded, confirmed or evidence_missing, with its evidence."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from tilake.diagnosis.canonical import shape_transform
from tilake.diagnosis.config_values import check_configs
from tilake.diagnosis.divergence import NOT_COMPARED
from tilake.diagnosis.pair import Pair
from tilake.ingest.msprobe.reader import DumpSide
from tilake.models.boundary_maps import SIDES
from tilake.vocab import BoundaryStatus, HypothesisStatus


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
    out.append(weights_hypothesis(weights))
    # inputs / padding: never against the token-id check
    emb = next((r for r in rows if r["boundary"] == (pair.bmap.get("layer_input") or {}).get("first")), None)
    pad_notes = sorted({n for r in rows for n in r.get("notes", []) if "unpad" in n or "unified" in n})
    pad_notes = [c["text"] for c in getattr(pair, "canonical", []) if c.get("kind") in ("tokens", "chunks")] + pad_notes
    tid = token_ids or {}
    if tid.get("status") == "differ":
        out.append({"hypothesis": "inputs not aligned / padding not removed", "status": HypothesisStatus.CONFIRMED,
                    "evidence": [tid["text"]]})
    elif emb and (emb["status"] == BoundaryStatus.EXACT
                  or (emb["status"] == BoundaryStatus.DTYPE_DIFF and _equal_after_cast(emb))):
        how = ("bitwise EXACT" if emb["status"] == BoundaryStatus.EXACT
               else "equal after the cast to the lower precision")
        ev = [f"first boundary {emb['boundary']} is {how} "
              "(same token ids reach both models)"]
        if tid.get("status") == "equal":
            ev.append(tid["text"])
        ev += pad_notes[:3] or ["no padding removal was needed (no padded tensors)"]
        out.append({"hypothesis": "inputs not aligned / padding not removed", "status": HypothesisStatus.EXCLUDED, "evidence": ev})
    elif tid.get("status") == "equal":
        out.append({"hypothesis": "inputs not aligned / padding not removed", "status": HypothesisStatus.EXCLUDED,
                    "evidence": [tid["text"] + " (after canonicalisation)"] + pad_notes[:3] +
                                ([f"first boundary {emb['boundary']}: {emb['status']} — {emb.get('reason')} (the inputs are "
                                  "aligned: look at the embedding weight or kernel)"] if emb else [])})
    elif emb and emb["status"] in (BoundaryStatus.NOT_EXACT, BoundaryStatus.NONFINITE):
        out.append({"hypothesis": "inputs not aligned / padding not removed", "status": HypothesisStatus.CONFIRMED,
                    "evidence": [f"first boundary: {emb['status']} — {emb.get('reason')}", tid.get("text", "")]})
    else:
        out.append({"hypothesis": "inputs not aligned / padding not removed", "status": HypothesisStatus.EVIDENCE_MISSING,
                    "evidence": [f"first boundary: {_not_comparable(emb) if emb else 'absent'}", tid.get("text", "")]})
    # configs: a config value that differs, never a shard shape
    via_checked = [w for w in weights if (w.get("via_op") or {}).get("status") in ("reproduces", "does_not_reproduce")]
    shape_bad = [w for w in weights if w["status"] == BoundaryStatus.SHAPE_DIFF and w not in via_checked]
    cmp = [w for w in weights if w["status"] not in NOT_COMPARED + (BoundaryStatus.SHAPE_DIFF,)] + via_checked
    complete = not any(pair.stage_ends.values())
    cv = check_configs(pair)
    diff = [c for c in cv if c["status"] == "differs"]
    unchecked = [c for c in cv if c["status"] == "not_checked"]
    hyp = "model configs not equivalent"
    if pair.layer_counts["train"] != pair.layer_counts["infer"] and complete and min(pair.layer_counts.values()) > 0:
        out.append({"hypothesis": hyp, "status": HypothesisStatus.CONFIRMED, "values": cv,
                    "evidence": [f"number of layers differs: train {pair.layer_counts['train']}, infer "
                                 f"{pair.layer_counts['infer']} (both sides run up to their final norm)"]})
    elif diff:
        out.append({"hypothesis": hyp, "status": HypothesisStatus.CONFIRMED, "values": cv,
                    "evidence": [c["text"] for c in diff] + _rope_rows(rows, diff)})
    elif cmp and not shape_bad and cv and unchecked:
        out.append({"hypothesis": hyp, "status": HypothesisStatus.EVIDENCE_MISSING, "values": cv,
                    "evidence": [f"evidence_missing: {len(cv) - len(unchecked)} of {len(cv)} configuration values "
                                 "checked by value"] + [c["text"] for c in cv]})
    elif cmp and not shape_bad:
        ev = [f"layer count {pair.layer_counts['train']} vs {pair.layer_counts['infer']}; "
              f"dims {pair.dims}; every compared weight has the same shape after slicing"
              + (f" ({len(via_checked)} pre-packed ones through their op: its input and output shapes fit the "
                 "other side's weight)" if via_checked else ""),
              "structural differences (fused vs separate projections, fused residual add) "
              "are mapped by the boundary map as mathematically equivalent"]
        ev += [c["text"] for c in cv] or ["RoPE base, norm eps and activation not checked by value (the map names "
                                          "no config_checks)"]
        out.append({"hypothesis": hyp, "status": HypothesisStatus.EXCLUDED, "values": cv, "evidence": ev})
    elif shape_bad:
        out.append({"hypothesis": hyp, "status": HypothesisStatus.EVIDENCE_MISSING, "values": cv,
                    "evidence": [_not_comparable(w) for w in shape_bad[:4]] +
                                ["a shape difference is a representation (shards, fusion, padding), not a config value"]})
    else:
        out.append({"hypothesis": hyp, "status": HypothesisStatus.EVIDENCE_MISSING, "values": cv,
                    "evidence": ["no weight shapes to compare"]})
    # precision: the dtype a side computes in is a configuration value (fp16 rollout vs bf16 trainer)
    dt_rows = [r for r in rows if r.get("train_dtype") and r.get("infer_dtype") and r["train_dtype"] != r["infer_dtype"]]
    if dt_rows:
        pairs = sorted({(r["train_dtype"].replace("torch.", ""), r["infer_dtype"].replace("torch.", "")) for r in dt_rows})
        low = next((r["downcast"]["to"].replace("torch.", "") for r in dt_rows if r.get("downcast")), None)
        out.append({"hypothesis": "precision configuration differs (compute dtype)", "status": HypothesisStatus.CONFIRMED,
                    "evidence": [f"{len(dt_rows)} boundaries computed in different dtypes: "
                                 + ", ".join(f"train {a} vs infer {b}" for a, b in pairs)
                                 + " — a configuration difference (e.g. an fp16 rollout against a bf16 trainer)",
                                 f"values compared in {low or 'the lower precision'} (the lower precision); differences "
                                 "within the cast bound are rounding-level"]})
    elif [r for r in rows if r.get("train_dtype")]:
        out.append({"hypothesis": "precision configuration differs (compute dtype)", "status": HypothesisStatus.EXCLUDED,
                    "evidence": ["every compared boundary has the same dtype on both sides"]})
    # parallel layout
    tp = {s: (task_card.get("parallel") or {}).get(s) for s in SIDES}
    canon = {s: [c["text"] for c in getattr(pair, "canonical", []) if c["side"] == s and c["kind"] in ("tp", "pp")]
             for s in SIDES}
    detected = [f"{s}: {'; '.join(canon[s]) if canon[s] else 'one rank folder ' + pair.dumps[s].dir.name}" for s in SIDES]
    if all(tp.values()) and "unknown" not in tp.values():
        st = HypothesisStatus.EXCLUDED if tp["train"] == tp["infer"] else HypothesisStatus.CONFIRMED
        out.append({"hypothesis": "parallel layout differs", "status": st,
                    "evidence": [f"train {tp['train']} vs infer {tp['infer']} (task card)"] + detected})
    elif any(canon.values()) and fd.get("status") == "none":
        out.append({"hypothesis": "parallel layout differs", "status": HypothesisStatus.EXCLUDED,
                    "evidence": detected + ["the merged / joined tensors are bitwise equal at every boundary: the "
                                            "layout changes no value"]})
    else:
        out.append({"hypothesis": "parallel layout differs", "status": HypothesisStatus.EVIDENCE_MISSING,
                    "evidence": ["TP/PP/EP of the sides not supplied (task card says unknown)"] + detected})
    # kernel fingerprint of the first divergence
    if fd.get("boundary"):
        r = next(x for x in rows if x["boundary"] == fd["boundary"])
        fp = {}
        for s in SIDES:
            src = (r.get(f"{s}_source") or "").split(" ")[0]
            fp[s] = kernel_fingerprint(pair, s, src)
        ev = [f"{s}: {', '.join(fp[s]) or 'no API entries dumped'}" for s in SIDES]
        quant = [c for c in getattr(pair, "canonical", []) if c.get("kind") == "quant"]
        if quant and r.get("op") == "matmul":
            qe = r.get("quant_error") or {}
            why = (qe.get("text") or "no quantisation bound for this boundary (its input or transforms do not fit)")
            out.append({"hypothesis": "fused kernel / accumulation order", "status": HypothesisStatus.EVIDENCE_MISSING,
                        "evidence": ev + [f"the first divergence is a linear output of a side with quantised weights "
                                          f"({quant[0]['text'].split(':')[0]}): the quantisation error, not a kernel, "
                                          f"is what the values show there — {why}"]})
        elif r.get("status") == BoundaryStatus.DTYPE_DIFF:
            out.append({"hypothesis": "fused kernel / accumulation order", "status": HypothesisStatus.EVIDENCE_MISSING,
                        "evidence": ev + ["the first divergence is a dtype difference: the precision change, not a "
                                          "kernel, is what the values show there"]})
        elif r.get("class") == "rounding-level":
            out.append({"hypothesis": "fused kernel / accumulation order", "status": HypothesisStatus.CONFIRMED,
                        "evidence": ev + ["first divergence is rounding-level with bitwise-equal inputs: "
                                          "different kernels, expected floating-point difference"]})
        else:
            out.append({"hypothesis": "fused kernel / accumulation order", "status": HypothesisStatus.EXCLUDED,
                        "evidence": ev + [f"first divergence is {r.get('class')}: beyond kernel rounding"]})
    else:
        out.append({"hypothesis": "fused kernel / accumulation order", "status": HypothesisStatus.EVIDENCE_MISSING,
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
        out.append({"hypothesis": "randomness (dropout, sampling)", "status": HypothesisStatus.CONFIRMED,
                    "evidence": [f"{s}: {e} p={p} training={t}" for s, e, p, t in active[:5]]})
    else:
        ev = [f"{len(drops)} dropout calls, all p=0 or training=False"] if drops else ["no dropout API dumped"]
        if fd.get("status") in ("found", "none"):
            ev.append("single request, deterministic prefill, and every boundary before the first divergence is EXACT")
            out.append({"hypothesis": "randomness (dropout, sampling)", "status": HypothesisStatus.EXCLUDED, "evidence": ev})
        else:
            out.append({"hypothesis": "randomness (dropout, sampling)", "status": HypothesisStatus.EVIDENCE_MISSING, "evidence": ev})
    return out


def _rope_rows(rows: List[dict], diff: List[dict]) -> List[str]:
    """What the boundaries show of a RoPE difference: q equal before, different after, exact at position 0,
    growing with position (per-row error in ULP of the tensor scale)."""
    if not any(c["key"] == "rope_theta" for c in diff):
        return []
    by = {r["boundary"]: r for r in rows}
    after = next((r for r in rows if r["boundary"].endswith(".q_after_rope") and r.get("status") != BoundaryStatus.EXACT
                  and r.get("row_tensor_ulp")), None)
    if after is None:
        return []
    before = [by[n] for n in after.get("inputs") or [] if n in by]
    per_row = [round(float(x), 2) for x in after["row_tensor_ulp"]]
    eq = all(b.get("status") == BoundaryStatus.EXACT for b in before)
    return [f"{', '.join(b['boundary'] for b in before) or 'its input'} {'bitwise EXACT' if eq else 'not equal'} before "
            f"RoPE; {after['boundary']} differs after it, error by position (ULP of the tensor scale): {per_row[:12]}"
            + ("…" if len(per_row) > 12 else "") + (" — exact at position 0, growing with position"
                                                     if per_row and per_row[0] == 0 and per_row[-1] > 0 else "")]


def weights_hypothesis(weights: List[dict]) -> dict:
    """"weights not in sync", decided on complete evidence only.

    Each weight boundary is *checked* by value (same dtype: bitwise; across dtypes: after the cast loading
    does, :func:`tilake.diagnosis.pair.loading_cast`; quantised: within the dequantisation bound) or, where a
    side dumps no weight, through its op (:mod:`tilake.diagnosis.weights_via_op`). Confirmed by any checked
    weight that differs or does not reproduce its op; excluded only when every weight boundary was checked;
    otherwise ``evidence_missing: k of n weights checked``.
    """
    cmp = [w for w in weights
           if w["status"] not in NOT_COMPARED + (BoundaryStatus.SHAPE_DIFF,) and not _storage_only(w)]
    bad = [w for w in cmp if w["status"] != BoundaryStatus.EXACT and not _equal_after_cast(w)
           and not (w.get("quantisation") or {}).get("within")]
    quant_eq = [w for w in cmp
                if w["status"] == BoundaryStatus.NOT_EXACT and (w.get("quantisation") or {}).get("within")]
    cast_eq = [w for w in cmp if w["status"] == BoundaryStatus.DTYPE_DIFF and _equal_after_cast(w)]
    rest = [w for w in weights if w not in cmp]
    via_ok = [w for w in rest if (w.get("via_op") or {}).get("status") == "reproduces"]
    via_bad = [w for w in rest if (w.get("via_op") or {}).get("status") == "does_not_reproduce"]
    miss = [w for w in rest if w not in via_ok and w not in via_bad]
    n, checked = len(weights), len(cmp) + len(via_ok) + len(via_bad)
    hyp = "weights not in sync"
    if bad or via_bad:
        ev = [f"{w['boundary']}: {w['status']}, {w.get('mismatch_count')} elements differ "
              f"({w.get('rows_differing')} of {w.get('rows_total')} rows), pattern {w.get('pattern')}"
              + (f"; {w['downcast']['text']}" if w.get("downcast") else "")
              + (f"; beyond the quantisation bound {w['quantisation']['bound']:.3g} (max |diff| "
                 f"{w['quantisation']['max_abs_diff']:.3g})" if w.get("quantisation") else "")
              for w in bad]
        ev += [f"{w['boundary']} ({w['via_op']['part']}): {w['via_op']['text']}" for w in via_bad]
        ev.append(f"{checked} of {n} weight boundaries checked ({len(cmp)} by value, {len(via_ok) + len(via_bad)} "
                  "through the op)")
        return {"hypothesis": hyp, "status": HypothesisStatus.CONFIRMED, "evidence": ev,
                "stale": [{"boundary": w["boundary"], "part": (w.get("via_op") or {}).get("part") or w["boundary"],
                           "how": "op" if w in via_bad else "value"} for w in bad + via_bad]}
    if not checked:
        return {"hypothesis": hyp, "status": HypothesisStatus.EVIDENCE_MISSING,
                "evidence": [f"evidence_missing: 0 of {n} weights checked — no weight boundary could be compared by "
                             "value or through its op"] + [_not_comparable(w) for w in miss[:3]]}
    ev = [f"{len(cmp)} weight tensors equal by value (fused qkv/gate_up weights sliced by rows)"]
    if cast_eq:
        ev.append(f"{len(cast_eq)} of them stored in another dtype and equal after the cast loading does "
                  f"({cast_eq[0]['downcast']['text']})")
    if quant_eq:
        ev.append(f"{len(quant_eq)} of them quantised (int8 with weight_scale, dequantised): every difference within "
                  f"the quantisation bound (half a step; e.g. {quant_eq[0]['boundary']}: max |diff| "
                  f"{quant_eq[0]['quantisation']['max_abs_diff']:.3g} <= {quant_eq[0]['quantisation']['bound']:.3g})")
    if via_ok:
        ev.append(f"{len(via_ok)} proven through the op (a side dumps no weight, e.g. pre-packed): each linear "
                  f"recomputed from that side's input reproduces its output (e.g. {via_ok[0]['boundary']}: "
                  f"{via_ok[0]['via_op']['text']})")
    if miss:
        return {"hypothesis": hyp, "status": HypothesisStatus.EVIDENCE_MISSING,
                "evidence": [f"evidence_missing: {checked} of {n} weights checked — not excluded on partial evidence"]
                + ev + [_not_comparable(w) for w in miss[:6]]}
    return {"hypothesis": hyp, "status": HypothesisStatus.EXCLUDED,
            "evidence": [f"every weight boundary checked: {checked} of {n}"] + ev}


def _storage_only(w: dict) -> bool:
    """A weight whose sides differ in storage only (an integer / quantised side against a float one)."""
    a, b = str(w.get("train_dtype") or ""), str(w.get("infer_dtype") or "")
    return w["status"] == BoundaryStatus.DTYPE_DIFF and (("int" in a) != ("int" in b)) and not w.get("downcast")


def _equal_after_cast(w: dict) -> bool:
    return w.get("status") == BoundaryStatus.DTYPE_DIFF and bool((w.get("downcast") or {}).get("exact"))


def _not_comparable(w: dict) -> str:
    """``not comparable: <reason> — <transform>`` for a row that no value comparison decided."""
    reason = str(w.get("reason") or w.get("status"))
    if reason.startswith("not comparable"):
        return f"{w['boundary']}: {reason}"
    if w.get("status") == BoundaryStatus.SHAPE_DIFF:
        return f"{w['boundary']}: not comparable: {reason} — {shape_transform(w.get('train_shape'), w.get('infer_shape'))}"
    if _storage_only(w):
        return (f"{w['boundary']}: not comparable: {w.get('train_dtype')} vs {w.get('infer_dtype')} storage — dequantise "
                "the integer side with its weight_scale")
    return f"{w['boundary']}: {w.get('status')} — {reason}"


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
