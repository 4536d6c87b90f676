"""Two findings about a differing boundary beyond its ULP figures.

* **Precision downgrade vs logic** (dtypes differ): compare at native dtypes (the row itself) *and*
  after casting the wider side down to the narrower dtype. When the cast-down comparison is EXACT,
  the narrower side is exactly the downcast wider tensor: a precision downgrade (e.g. an fp32 cache
  stored as bf16), not a logic fault.
* **Constant across query positions**: one side's rows (dim 0, tokens) are (nearly) identical while
  the other side's are not — the signature of a skipped softmax (every query gets the mean of V) or
  of a broadcast that lost the position dimension.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional

import torch

from tilake.diagnosis.numerics import CHUNK, FLOAT_FORMATS, compare
from tilake.vocab import BoundaryStatus

CONSTANT_REL = 1e-3   # rows within this fraction of max|x| of row 0 count as identical
CONSTANT_MIN_ROWS = 4


def downcast_check(ref: torch.Tensor, other: torch.Tensor, ref_side: str, other_side: str,
                   bound: float) -> Optional[Dict[str, Any]]:
    """Compare a DTYPE_DIFF pair again after casting the wider float side down.

    Returns:
        None when the dtypes are not two float formats of different width; else ``{"to": dtype,
        "wider_side", "narrower_side", "status", "tensor_ulp", "max_elem_ulp", "exact": bool,
        "text"}`` (``tensor_ulp`` in ULP of the narrower dtype).
    """
    fa, fb = FLOAT_FORMATS.get(ref.dtype), FLOAT_FORMATS.get(other.dtype)
    if fa is None or fb is None or fa[1] == fb[1]:
        return None
    if fa[1] > fb[1]:
        wide, narrow, to = ref.to(other.dtype), other, other.dtype
        wide_side, narrow_side = ref_side, other_side
        r = compare(wide, narrow, bound=bound)
    else:
        wide, narrow, to = other.to(ref.dtype), ref, ref.dtype
        wide_side, narrow_side = other_side, ref_side
        r = compare(narrow, wide, bound=bound)
    exact = r["status"] == BoundaryStatus.EXACT
    src_dtype = (ref.dtype if wide_side == ref_side else other.dtype)
    text = (f"precision downgrade: the {narrow_side} side is exactly the downcast {wide_side} tensor "
            f"({str(src_dtype).replace('torch.', '')} → {str(to).replace('torch.', '')})" if exact else
            f"dtypes differ and the {narrow_side} side is not the downcast {wide_side} tensor: after casting to "
            f"{str(to).replace('torch.', '')} {r['mismatch_count']} elements still differ "
            f"(max {r['tensor_ulp']:.3g} ULP at tensor scale)")
    return {"to": str(to), "wider_side": wide_side, "narrower_side": narrow_side, "status": r["status"],
            "tensor_ulp": r["tensor_ulp"], "max_elem_ulp": r["max_elem_ulp"], "exact": exact, "text": text}


def _constant(t: torch.Tensor) -> bool:
    """True when every row (dim 0) is within :data:`CONSTANT_REL` of ``max|x|`` of row 0 (float32 arithmetic).

    Streamed over blocks of rows, no whole-tensor float32 copy. Early exit, same answer as the full
    pass: every ``|x_i| <= |x_0| + |x_i - x_0|``, so ``max|x| <= m0 + D`` (``m0 = max|x_0|``, ``D`` the
    largest row deviation) and ``D <= REL * max|x|`` needs ``D <= REL * m0 / (1 - REL)``; a block whose
    deviation already exceeds that (plus a 1e-6 margin for float32 rounding) decides False; NaN/inf
    end in False, as before.
    """
    if t.dim() < 2 or t.shape[0] < CONSTANT_MIN_ROWS or not t.is_floating_point():
        return False
    x = t.reshape(t.shape[0], -1)
    x0 = x[:1].float()
    m0 = float(x0.abs().max())
    limit = CONSTANT_REL * m0 / (1 - CONSTANT_REL) * (1 + 1e-6)   # margin for float32 rounding of |x_i - x_0|
    top, dev = m0, 0.0
    step = max(1, CHUNK // max(x.shape[1], 1))
    for r in range(0, x.shape[0], step):
        c = x[r:r + step].float()
        bt = float(c.abs().max())   # NaN propagates through max, inf stays inf
        if not math.isfinite(bt):
            return False
        top = max(top, bt)
        dev = max(dev, float((c - x0).abs().max()))
        if dev > limit:
            return False
    if top == 0:
        return False
    return dev <= CONSTANT_REL * top


def constant_rows(tens: Dict[str, torch.Tensor]) -> Optional[Dict[str, Any]]:
    """``{"side", "rows", "text"}`` when exactly one side's rows are (nearly) identical, else None."""
    const = {s: _constant(t) for s, t in tens.items()}
    sides = [s for s, c in const.items() if c]
    if len(sides) != 1:
        return None
    s = sides[0]
    n = int(tens[s].shape[0])
    return {"side": s, "rows": n,
            "text": f"{s} rows are constant across query positions (all {n} rows equal within "
                    f"{CONSTANT_REL:.1%} of max|x|) while the other side's vary: e.g. softmax skipped "
                    "(every query gets the mean of V) or a lost position dimension"}
