"""Quantised weights (:mod:`tilake.diagnosis.canonical`): an integer ``weight`` with a ``weight_scale`` parameter
beside it (vLLM / vllm-ascend W8A16 and W8A8 linear layers: int8 ``weight``, per-channel ``weight_scale``
``[out]`` / ``[out, 1]`` or per-group ``[out, in/g]``) is dequantised on load, ``w = q · s`` in float32 rounded
to the scale's dtype (bf16/fp16; bf16 when the scale is float32), so the weight test compares values. The
quantisation error bound of each dequantised weight (``max(s) / 2``, half a quantisation step) is kept for the
weight-sync verdict (:func:`quant_bound`). Packed int4 (two values a byte) is not unpacked: such a weight keeps
its integer storage and reads ``not comparable``."""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, Optional

from tilake.diagnosis.logical import LogicalSide, Record
from tilake.ingest.msprobe.reader import Slot

INT_DTYPES = ("torch.int8", "torch.uint8")


def dequantise(dump, side: str):
    """``dump`` with every int8 weight that has a ``weight_scale`` dequantised (a :class:`LogicalSide`), or
    ``dump`` itself when it holds none."""
    import torch

    targets: Dict[tuple, Slot] = {}
    for sl in dump.slots:
        if sl.io == "parameter" and sl.index == "weight" and sl.declared_dtype in INT_DTYPES:
            sc = dump.slot(sl.entry, "parameter", "weight_scale")
            if sc is not None and sc.declared_shape and sl.declared_shape and len(sl.declared_shape) == 2 \
                    and sc.declared_shape[0] == sl.declared_shape[0]:
                targets[(sl.entry, sl.io, sl.index)] = sc
    if not targets:
        return dump
    out_dtype = {}
    schemes = set()
    for key, sc in targets.items():
        sdt = sc.declared_dtype or "torch.float32"
        out_dtype[key] = sdt if sdt in ("torch.bfloat16", "torch.float16") else "torch.bfloat16"
        per = 1 if len(sc.declared_shape) == 1 or sc.declared_shape[-1] == 1 else sc.declared_shape[-1]
        schemes.add("per channel" if per == 1 else f"per group ({per} groups a row)")
    bounds: Dict[str, float] = {}

    def load(sl: Slot):
        key = (sl.entry, sl.io, sl.index)
        if key not in targets:
            return dump.load(sl)
        q = dump.load(dump.slot(*key))
        s = dump.load(targets[key]).float()
        s = s.reshape(s.shape[0], -1)
        if s.shape[1] > 1:
            s = s.repeat_interleave(q.shape[1] // s.shape[1], dim=1)
        bounds[sl.entry] = float(s.abs().max()) / 2
        return (q.float() * s).to(getattr(torch, out_dtype[key].replace("torch.", "")))

    slots = [replace(sl, declared_dtype=out_dtype[(sl.entry, sl.io, sl.index)]) if (sl.entry, sl.io, sl.index) in targets
             else sl for sl in dump.slots]
    rec = Record(side, "quant", f"{side}: {len(targets)} int8 weights dequantised with their weight_scale "
                                f"({', '.join(sorted(schemes))}; W8A16/W8A8 storage): the weight test compares values "
                                "within the quantisation bound (half a step)", {"weights": len(targets)})
    out = LogicalSide(dump, dict(dump.entries), dict(dump.parents), dict(dump.order), slots, load, [rec],
                      lambda s: dump.pt_path(s))
    out.quant_bounds = bounds
    return out


def quant_bound(dump, entry: str) -> Optional[float]:
    """Half the largest quantisation step of a dequantised weight (loaded at least once), or None."""
    return (getattr(dump, "quant_bounds", None) or {}).get(entry)
