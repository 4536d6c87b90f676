"""MoE routing (issue 20 item 6): router logits, top-k expert indices and expert outputs of both sides, and the
router decision flips per token row — a finding of its own.

The map's ``moe:`` block (``models/<family>.yaml``) names, per layer, the router logits (Qwen3-MoE ``mlp.gate``:
HF ``Linear``, vLLM ``ReplicatedLinear``), optionally the dumped top-k indices (HF's ``Torch.topk`` under the MoE
block at msprobe level mix / L1) and the experts' combined output (HF ``Qwen3MoeSparseMoeBlock`` output 0, vLLM
``FusedMoE`` output 0). A router output that is an integer tensor is the top-k indices themselves (DeepSeek-style
``MoEGate``, which returns ``topk_idx`` rather than logits). Where a side has no indices dumped, its top-k is
computed from its router logits (``torch.topk`` over the expert dim of the float32 logits; ties broken by the
lower expert index, as torch does on CPU). ``k``: the map's ``moe.top_k``, else the last dim of dumped indices.

A **flip** is a token row whose top-k expert *set* differs between the sides (order inside the set is not a
decision). Flips are reported per layer with the experts involved; they are counted on logical tensors (the
canonical sides), so TP shards or a padded batch never make one.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from tilake.diagnosis import selectors as S
from tilake.diagnosis.transforms import materialise
from tilake.errors import TilakeError
from tilake.models.boundary_maps import SIDES, expand
from tilake.vocab import EVIDENCE_MISSING, BoundaryStatus, HypothesisStatus

ROLES = ("router_logits", "topk_indices", "experts_out")


def _tensor(pair, b, side: str):
    """The transformed tensor of one moe item on one side, or (None, reason)."""
    sel = b.spec.get(side)
    if sel is None:
        return None, f"the map names no {side}-side tensor"
    try:
        res = S.resolve(pair.views[side], sel, side)
        t, _notes = materialise(pair.views[side], res, pair.dims, dict(pair.pairing))
        return t, None
    except (S.Unavailable, TilakeError) as exc:
        return None, getattr(exc, "reason", None) or str(exc)


def _sets(t, k: int) -> List[frozenset]:
    import torch

    if t.dtype in (torch.int32, torch.int64, torch.int16, torch.uint8, torch.int8):
        idx = t.reshape(-1, t.shape[-1])
    else:
        idx = torch.topk(t.float().reshape(-1, t.shape[-1]), k, dim=-1).indices
    return [frozenset(int(e) for e in r) for r in idx]


def _fmt(s: frozenset) -> str:
    return "{" + ",".join(str(e) for e in sorted(s)) + "}"


def router_flips(pair) -> Dict[str, Any]:
    """Router decisions of both sides per layer and token row.

    Returns:
        ``{}`` when the map has no ``moe`` block or neither side has a router (a dense model); else ``{"status":
        compared | evidence_missing, "top_k", "rows_total", "flipped_rows", "layers": [{"layer", "rows",
        "flipped", "flips": [{"row", "train": [experts], "infer": [experts]}], "sources": {side: text},
        "experts_out": {"status", "max_abs_diff"}}], "missing": [{"layer", "reason"}], "text"}``.
    """
    import torch

    spec = pair.bmap.get("moe") or {}
    items = expand({"boundaries": spec.get("items") or []}, pair.n_layers)
    if not items:
        return {}
    by_layer: Dict[int, Dict[str, Any]] = {}
    for b in items:
        role = role_of(b.name)
        if role:
            by_layer.setdefault(b.layer, {})[role] = b
    found, layers, missing = False, [], []
    k_map = spec.get("top_k")
    for layer in sorted(x for x in by_layer if x is not None):
        its = by_layer[layer]
        got: Dict[str, Dict[str, Any]] = {s: {} for s in SIDES}
        why: Dict[str, str] = {}
        for role in ROLES:
            if role not in its:
                continue
            for s in SIDES:
                t, reason = _tensor(pair, its[role], s)
                if t is not None:
                    got[s][role] = t
                elif reason:
                    why[f"{s} {role}"] = reason
        if any(got[s].get("router_logits") is not None for s in SIDES):
            found = True
        k = k_map or next((int(got[s]["topk_indices"].shape[-1]) for s in SIDES
                           if got[s].get("topk_indices") is not None), None)
        srcs, sets = {}, {}
        for s in SIDES:
            if got[s].get("topk_indices") is not None:
                sets[s], srcs[s] = _sets(got[s]["topk_indices"], k or 0), "dumped top-k indices"
            elif got[s].get("router_logits") is not None and not got[s]["router_logits"].is_floating_point():
                sets[s], srcs[s] = _sets(got[s]["router_logits"], 0), "router output (top-k indices)"
            elif got[s].get("router_logits") is not None and k:
                sets[s], srcs[s] = _sets(got[s]["router_logits"], k), f"top-{k} of the router logits"
        if len(sets) < 2:
            reason = ("top-k unknown: no indices dumped and the map sets no moe.top_k" if not k and got["train"]
                      and got["infer"] else "; ".join(f"{a}: {b}" for a, b in why.items() if "router" in a or "topk" in a))
            missing.append({"layer": layer, "reason": reason or "no router tensor on one side"})
            continue
        if len(sets["train"]) != len(sets["infer"]):
            missing.append({"layer": layer, "reason": f"token rows differ: train {len(sets['train'])}, infer "
                                                      f"{len(sets['infer'])} (select the same tokens on both sides)"})
            continue
        flips = [{"row": r, "train": sorted(a), "infer": sorted(b)}
                 for r, (a, b) in enumerate(zip(sets["train"], sets["infer"])) if a != b]
        ent = {"layer": layer, "rows": len(sets["train"]), "flipped": len(flips), "flips": flips, "sources": srcs}
        eo = [got[s].get("experts_out") for s in SIDES]
        if all(x is not None for x in eo) and eo[0].numel() == eo[1].numel():
            a, o = eo[0].reshape(-1).float(), eo[1].reshape(-1).float()
            ent["experts_out"] = {"status": BoundaryStatus.EXACT if torch.equal(eo[0].reshape(-1), eo[1].reshape(-1)) else BoundaryStatus.NOT_EXACT,
                                  "max_abs_diff": float((a - o).abs().max()) if a.numel() else 0.0}
        layers.append(ent)
    if not found:
        return {}
    rows = sum(x["rows"] for x in layers)
    flipped = sum(x["flipped"] for x in layers)
    out = {"status": "compared" if layers and not missing else EVIDENCE_MISSING, "top_k": k_map or
           next((len(f["train"]) for x in layers for f in x["flips"]), None), "rows_total": rows,
           "flipped_rows": flipped, "layers": layers, "missing": missing}
    out["text"] = flip_text(out)
    out["rows"] = flip_rows(out)
    return out


def flip_text(m: Dict[str, Any], limit: int = 8) -> str:
    """``router flips: 3 of 16 token rows; layer 2: row 5 {1,4}→{1,6}, …`` (train → infer)."""
    if not m:
        return ""
    parts = []
    for x in m["layers"]:
        if x["flipped"]:
            rows = ", ".join(f"row {f['row']} {_fmt(frozenset(f['train']))}→{_fmt(frozenset(f['infer']))}"
                             for f in x["flips"][:limit])
            parts.append(f"layer {x['layer']}: {rows}{' …' if x['flipped'] > limit else ''}")
    head = (f"router flips: {m['flipped_rows']} of {m['rows_total']} token rows (top-k expert set, train → infer)"
            if m["flipped_rows"] else
            f"router decisions agree: 0 of {m['rows_total']} token rows flip over {len(m['layers'])} layer(s)")
    miss = [f"layer {x['layer']}: evidence_missing — {x['reason']}" for x in m.get("missing", [])]
    return "; ".join([head] + parts + miss)


def flip_rows(m: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One row per flipped token row (for ``router_flips.csv``): layer, row, train/infer expert sets, gained, lost."""
    out = []
    for x in (m or {}).get("layers", []):
        for f in x["flips"]:
            a, b = set(f["train"]), set(f["infer"])
            out.append({"layer": x["layer"], "row": f["row"], "train_experts": " ".join(map(str, sorted(a))),
                        "infer_experts": " ".join(map(str, sorted(b))), "lost": " ".join(map(str, sorted(a - b))),
                        "gained": " ".join(map(str, sorted(b - a))), "source_train": x["sources"].get("train"),
                        "source_infer": x["sources"].get("infer")})
    return out


def role_of(name: str) -> Optional[str]:
    """The role of a moe item by its name's ending (``L{i}.router_logits`` | ``.topk_indices`` | ``.experts_out``)."""
    return next((r for r in ROLES if name.endswith(r)), None)


def moe_hypothesis(m: Dict[str, Any]) -> Dict[str, Any]:
    """The hypothesis row "MoE router decisions differ" from :func:`router_flips` (a finding of its own: a flip
    sends a token through other experts, whatever the boundaries' ULPs say)."""
    if m.get("flipped_rows"):
        st = HypothesisStatus.CONFIRMED
    elif m.get("status") == "compared":
        st = HypothesisStatus.EXCLUDED
    else:
        st = HypothesisStatus.EVIDENCE_MISSING
    return {"hypothesis": "MoE router decisions differ (top-k expert set per token row)", "status": st,
            "evidence": [m.get("text") or "no router tensors compared"]}
