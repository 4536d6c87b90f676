"""Quantised weights (:mod:`tilake.diagnosis.canonical`): an integer weight with a ``weight_scale`` parameter beside it
is dequantised on load, so the weight test compares values, and the linear's output bound from that quantisation is
kept for the boundary classifier (:func:`output_bound`).

Layouts read (the module's input width ``in`` comes from its dumped input 0; the group size is ``in / G`` for a
``weight_scale`` of ``[out, G]``, per channel for ``[out]`` / ``[out, 1]``):

* **int8** (vLLM / vllm-ascend W8A16 and W8A8 linear layers): ``weight`` int8 ``[out, in]``, ``w = q · s``.
* **int4, two a byte**: ``weight`` / ``weight_packed`` int8 or uint8 ``[out, in/2]``; element ``2i`` in the low
  nibble and ``2i+1`` in the high nibble of byte ``i``, signed two's-complement nibbles ([-8, 7]). Source:
  vllm-ascend ``vllm_ascend/quantization/utils.py`` ``pack_to_int32`` (an int8 tensor holding "int4×2" is
  viewed as int32 for the NPU kernel) and the low-nibble-first packing of the Ascend int4 weight tools
  (``pack_4bit`` of omni-infer ``tools/quant``: ``y = (x[2i] & 0xF) | (x[2i+1] << 4)``).
* **int4, eight an int32** (vLLM compressed-tensors wNa16 ``weight_packed``, as vllm-ascend unpacks it):
  ``[out, in/8]`` int32, element ``8j+i`` = bits ``4i..4i+3`` of word ``j``, stored unsigned with offset 8
  (``q = nibble - 8``). Source: vllm-ascend ``vllm_ascend/quantization/utils.py`` ``unpack_from_int32``
  (``unpacked[:, i::pack_factor] = (weight >> (num_bits*i)) & mask``, then ``- 2**num_bits // 2``), packed_dim 1.
  GPTQ / AWQ checkpoints (``qweight`` ``[in/8, out]`` / ``[in, out/8]`` with ``qzeros`` and AWQ's
  ``[0,2,4,6,1,3,5,7]`` order) are not read: they keep their storage and read ``not comparable``.

A ``weight_packed`` is read as the module's ``weight`` (the logical name the maps use). ``w = q · s`` is computed in float32 and rounded to the scale's dtype (bf16/fp16; bf16 for a float32 scale).
The weight test then judges differences against half a quantisation step (:func:`quant_bound`). For the
linear's output, :func:`output_bound` propagates the half step through the matmul with the module's actual
input activations: ``|Δy[t, j]| <= Σ_k |x[t, k]| · s[j, g(k)] / 2``; with a static activation scale
(``input_scale``, W8A8) the activation's half step is added, ``Σ_k (|W_deq[j, k]| + s/2) · input_scale / 2``.
Dynamic per-token W8A8 (scales computed inside the kernel, not dumped) is not recognised: it reads as W8A16.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, Optional

from tilake.diagnosis.logical import LogicalSide, Record
from tilake.ingest.msprobe.reader import Slot

INT_DTYPES = ("torch.int8", "torch.uint8", "torch.int32")
WEIGHT_NAMES = ("weight", "weight_packed")


def _in_width(dump, entry: str) -> Optional[int]:
    x = dump.slot(entry, "input", "0")
    return int(x.declared_shape[-1]) if x is not None and x.declared_shape else None


def _packing(dtype: str, cols: int, width: Optional[int]) -> Optional[str]:
    """``int8`` | ``int4x2`` | ``int4x8`` from the storage dtype and the columns against the input width."""
    if dtype == "torch.int32":
        return "int4x8" if width is None or cols * 8 == width else None
    if width is not None and cols * 2 == width:
        return "int4x2"
    return "int8" if width is None or cols == width else None


PACKING_TEXT = {"int8": "int8", "int4x2": "int4 packed two a byte (low nibble first)",
                "int4x8": "int4 packed eight an int32 (compressed-tensors / vllm-ascend, offset 8)"}


def unpack_int4(q, packing: str):
    """Packed int4 → int8 values in [-8, 7], ``[out, in]`` (layouts and sources: the module docstring).

    Args:
        q: ``[out, in/2]`` int8/uint8 (``int4x2``) or ``[out, in/8]`` int32 (``int4x8``).
    """
    import torch

    if packing == "int4x2":
        b = q.to(torch.int16) & 0xFF
        lo, hi = b & 0xF, (b >> 4) & 0xF
        v = torch.stack([lo, hi], dim=-1).reshape(q.shape[0], q.shape[1] * 2)
        return torch.where(v >= 8, v - 16, v).to(torch.int8)
    w = q.to(torch.int64) & 0xFFFFFFFF
    v = torch.stack([(w >> (4 * i)) & 0xF for i in range(8)], dim=-1).reshape(q.shape[0], q.shape[1] * 8)
    return (v - 8).to(torch.int8)


def dequantise(dump, side: str):
    """``dump`` with every integer weight that has a ``weight_scale`` dequantised (a :class:`LogicalSide`), or
    ``dump`` itself when it holds none. The record names the quantisation and the packing."""
    import torch

    targets: Dict[tuple, dict] = {}
    for sl in dump.slots:
        if sl.io != "parameter" or sl.index not in WEIGHT_NAMES or sl.declared_dtype not in INT_DTYPES:
            continue
        sc = dump.slot(sl.entry, "parameter", "weight_scale")
        if sc is None or not sc.declared_shape or not sl.declared_shape or len(sl.declared_shape) != 2 \
                or sc.declared_shape[0] != sl.declared_shape[0]:
            continue
        pk = _packing(sl.declared_dtype, int(sl.declared_shape[1]), _in_width(dump, sl.entry))
        if pk is None:
            continue
        width = int(sl.declared_shape[1]) * {"int8": 1, "int4x2": 2, "int4x8": 8}[pk]
        groups = 1 if len(sc.declared_shape) == 1 else int(sc.declared_shape[-1])
        sdt = sc.declared_dtype or "torch.float32"
        targets[(sl.entry, sl.io, sl.index)] = {
            "scale": sc, "packing": pk, "width": width, "groups": groups,
            "dtype": sdt if sdt in ("torch.bfloat16", "torch.float16") else "torch.bfloat16",
            "bits": 8 if pk == "int8" else 4, "act": dump.slot(sl.entry, "parameter", "input_scale")}
    if not targets:
        return dump
    bounds: Dict[str, float] = {}
    by_entry = {k[0]: (k, t) for k, t in targets.items()}

    def half_step(entry: str):
        """``[out, in]`` float32: half a quantisation step of each weight element (s / 2)."""
        _key, t = by_entry[entry]
        s = dump.load(t["scale"]).float()
        s = s.reshape(s.shape[0], -1)
        if s.shape[1] > 1:
            s = s.repeat_interleave(t["width"] // s.shape[1], dim=1)
        else:
            s = s.expand(s.shape[0], t["width"])
        return s / 2

    logical = {(k[0], k[1], "weight"): k for k in targets}   # weight_packed is read as the module's weight

    def load(sl: Slot):
        key = logical.get((sl.entry, sl.io, sl.index))
        if key is None:
            return dump.load(sl)
        t = targets[key]
        q = dump.load(dump.slot(*key))
        if t["packing"] != "int8":
            q = unpack_int4(q, t["packing"])
        h = half_step(sl.entry)
        bounds[sl.entry] = float(h.max())
        return (q.float() * (2 * h)).to(getattr(torch, t["dtype"].replace("torch.", "")))

    slots = [replace(sl, index="weight", declared_dtype=targets[k]["dtype"],
                     declared_shape=[sl.declared_shape[0], targets[k]["width"]])
             if (k := (sl.entry, sl.io, sl.index)) in targets else sl for sl in dump.slots]
    schemes, packs = set(), set()
    for t in targets.values():
        schemes.add("per channel" if t["groups"] == 1 else f"per group of {t['width'] // t['groups']}")
        packs.add(PACKING_TEXT[t["packing"]])
    act = "W8A8 (static input_scale)" if any(t["act"] is not None for t in targets.values()) else \
        ("W4A16" if all(t["bits"] == 4 for t in targets.values()) else "W8A16" if all(t["bits"] == 8 for t in
                                                                                      targets.values()) else "W8A16/W4A16")
    bits = sorted({t["bits"] for t in targets.values()})
    rec = Record(side, "quant", f"{side}: {len(targets)} int{'/int'.join(map(str, bits))} weights dequantised with their "
                                f"weight_scale ({', '.join(sorted(schemes))}; {act}; storage: {'; '.join(sorted(packs))}): "
                                "the weight test compares values within the quantisation bound (half a step), linear "
                                "outputs against the quantisation error propagated through the matmul",
                 {"weights": len(targets), "scheme": act, "packing": sorted({t["packing"] for t in targets.values()}),
                  "bits": bits})
    out = LogicalSide(dump, dict(dump.entries), dict(dump.parents), dict(dump.order), slots, load, [rec],
                      lambda s: dump.pt_path(s))
    out.quant_bounds = bounds
    out.quant_info = {k[0]: dict(t, half_step=(lambda e=k[0]: half_step(e)), key=(k[0], k[1], "weight"))
                      for k, t in targets.items()}
    return out


def quant_bound(dump, entry: str) -> Optional[float]:
    """Half the largest quantisation step of a dequantised weight (loaded at least once), or None."""
    return (getattr(dump, "quant_bounds", None) or {}).get(entry)


def output_bound(dump, slot: Slot):
    """The quantisation error bound of a quantised linear's output slot, element by element, or None.

    Returns:
        ``(bound, info)``: ``bound`` float32 of the output's shape, ``Σ_k |x[..., k]| · s[j, g(k)] / 2`` (plus the
        static activation term, see the module docstring) with ``x`` the module's dumped input 0; ``info`` names
        the scheme (``{"bits", "packing", "groups", "scheme"}``). None when ``slot`` is not output 0 of a module
        with a dequantised weight, or its input is not dumped / does not fit.
    Raises:
        TilakeError: an unreadable ``.pt`` (as :meth:`DumpSide.load`).
    """
    info = (getattr(dump, "quant_info", None) or {}).get(slot.entry)
    if info is None or slot.io != "output" or slot.index != "0":
        return None
    xs = dump.slot(slot.entry, "input", "0")
    if xs is None:
        return None
    x = dump.load(xs)
    h = info["half_step"]()
    if not x.is_floating_point() or x.shape[-1] != h.shape[1]:
        return None
    b = x.float().abs().reshape(-1, h.shape[1]) @ h.T
    if info.get("act") is not None:
        sx = float(dump.load(info["act"]).float().abs().max()) / 2
        w = dump.load(dump.slot(*info["key"])).float().abs()
        b = b + sx * (w + h).sum(1)[None, :]
    scheme = ("W8A8" if info.get("act") is not None else f"W{info['bits']}A16")
    return b.reshape(*x.shape[:-1], h.shape[0]), {"bits": info["bits"], "packing": info["packing"],
                                                   "groups": info["groups"], "scheme": scheme}
