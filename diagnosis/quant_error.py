"""Linear outputs of a side with quantised weights, judged against the quantisation error scale (issue 20 item 4).

A rollout with int8 / int4 weights computes ``y = x · dequant(q)ᵀ``; against a trainer's bf16 ``x · Wᵀ`` the output
differs by the weight quantisation error, which is neither bf16 rounding nor a logic fault. For a boundary whose
source is output 0 of a module with a dequantised weight (:func:`tilake.diagnosis.canonical_quant.output_bound`),
the element-wise bound ``B = Σ_k |x| · s/2`` is taken through the same map transforms as the tensor and the
boundary is:

* **within** the quantisation error when every ``|Δ| <= B · (1 + 2⁻⁶) + r`` with ``r`` the map's rounding
  allowance (``rounding_max_tensor_ulp`` ULP of max|reference|, for the two bf16 roundings and kernel order);
* **beyond** it otherwise: a finding (logic-level when the inputs were equal).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from tilake.diagnosis.canonical_quant import output_bound
from tilake.diagnosis.transforms import apply_transform


def _fixed(tr: Any, scans: List[dict]):
    """``tr`` with ``layout: auto`` replaced by the layout the tensor's own scan chose (in scan order)."""
    if not isinstance(tr, dict):
        return tr
    (kind, arg), = tr.items()
    if isinstance(arg, dict) and arg.get("layout", "auto") == "auto" and kind in ("qkv_part", "gate_up_part",
                                                                                  "qkv_to_concat"):
        chosen = scans.pop(0)["chosen"] if scans else None
        return {kind: dict(arg, layout=chosen)} if chosen else tr
    return tr


def bound_for(pair, side: str, res, dims: Dict[str, int], ctx: dict, shape) -> Optional[tuple]:
    """``(bound tensor of ``shape``, info)`` for the side's resolved boundary, or None (not a quantised linear
    output, or the bound does not follow the map's transforms)."""
    if len(res.slots) != 1 or res.combine:
        return None
    got = output_bound(pair.dumps[side], res.slots[0])
    if got is None:
        return None
    b, info = got
    scans = list(ctx.get("_scans") or [])
    notes: List[str] = []
    try:
        for tr in res.transforms:
            b = apply_transform(b, _fixed(tr, scans), dims, pair.views[side], dict(ctx), notes, None)
    except Exception:  # noqa: BLE001 - a transform the bound cannot follow: no bound, the ULP rule applies
        return None
    if tuple(b.shape) != tuple(shape):
        if b.numel() != _numel(shape):
            return None
        b = b.reshape(*shape)
    return b, info


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def judge(row: dict, a, o, bound, info: dict, thr: float) -> dict:
    """The ``quant_error`` record of a compared row: ``{within, bound (max B), max_abs_diff, ratio, bits, scheme,
    packing, text}``; ``ratio`` = max ``|Δ| / (B + r)`` (<= 1 within)."""
    import torch

    d = (a.float() - o.float()).abs().reshape(bound.shape)
    tu, mad = row.get("tensor_ulp"), float(row.get("max_abs_diff") or 0.0)
    r = thr * (mad / tu) if tu else 0.0
    lim = bound * (1 + 2 ** -6) + r
    within = bool((d <= lim).all())
    ratio = float((d / lim.clamp_min(torch.finfo(torch.float32).tiny)).max()) if d.numel() else 0.0
    bmax = float(bound.max()) if bound.numel() else 0.0
    q = f"int{info['bits']} quantisation error ({info['scheme']}"
    q += (", per channel" if info["groups"] == 1 else f", {info['groups']} groups a row") + ")"
    if within:
        text = (f"within {q}: every |diff| inside its element's bound Σ|x|·s/2 (through the matmul with the dumped "
                f"input) + {thr:g} ULP rounding; max |diff| {mad:.3g}, max bound {bmax:.3g}, worst element at "
                f"{ratio:.2f} of its limit")
    else:
        text = (f"beyond {q}: max |diff| {mad:.3g}, worst element {ratio:.3g}× its bound Σ|x|·s/2 + {thr:g} ULP "
                f"rounding (max bound {bmax:.3g}): the quantisation does not explain it")
    return {"within": within, "bound": bmax, "max_abs_diff": mad, "ratio": ratio, "bits": info["bits"],
            "scheme": info["scheme"], "packing": info["packing"], "text": text}
