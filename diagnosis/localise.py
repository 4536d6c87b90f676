"""Where in a tensor two sides differ, and the shape of the difference: per-row / per-column error
profiles (the rows and columns above the rounding bound), value- and magnitude-signed ULP means,
cosine similarity, the difference pattern and Pearson correlation.

Signed means (why both): a kernel that truncates (rounds toward zero) leaves every differing element
one ULP *smaller in magnitude*; on zero-centred data the value-signed mean of ``ord(other) − ord(ref)``
cancels to ≈ 0 while the magnitude-signed mean of ``|ord(other)| − |ord(ref)|`` is −1. Both are taken
over the *significant* differing elements (``|ref| >= absmax(ref)/64``, the filter of the elementwise
max-ULP column), because near-zero elements and sign flips sit ~30 000 ULP apart and would swamp them.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional

import torch

from tilake.diagnosis import fused

SIGNED_FILTER = "significant differing elements only: |reference| >= absmax(reference)/64"
MAX_LISTED = 64  # rows / columns named at most (the counts say how many there are)
MAX_PROFILE_ROWS = 4096  # the per-row curve is kept up to this many rows


class _Signed:
    """Accumulates value- and magnitude-signed ULP sums over the significant differing elements."""

    def __init__(self) -> None:
        self.n = self.value = self.mag = self.smaller = self.larger = 0

    def add(self, u: torch.Tensor, ord_ref: torch.Tensor, sig: torch.Tensor) -> None:
        """``u``: ``ord(other) − ord(ref)`` at differing elements; ``ord_ref``: ``ord(ref)`` there; ``sig``: mask."""
        w = sig.to(u.dtype)  # weights instead of a boolean-mask gather (much cheaper on CPU)
        n = int(w.sum())
        if n == 0:
            return
        mag = (ord_ref + u).abs_().sub_(ord_ref.abs())
        self.n += n
        self.value += int((u * w).sum())
        self.mag += int((mag * w).sum())
        self.smaller += int(((mag < 0) & sig).sum())
        self.larger += int(((mag > 0) & sig).sum())

    def result(self) -> Dict[str, Any]:
        """The signed-mean fields of :func:`tilake.diagnosis.numerics.compare` (means None without elements)."""
        n = self.n
        return {"signed_mean_ulp": self.value / n if n else None, "mag_signed_mean_ulp": self.mag / n if n else None,
                "signed_count": n, "smaller_magnitude_count": self.smaller, "larger_magnitude_count": self.larger,
                "share_smaller_magnitude": self.smaller / n if n else None, "signed_filter": SIGNED_FILTER}

    @staticmethod
    def empty(zero: Optional[float]) -> Dict[str, Any]:
        """The same fields for a comparison without differing elements (``zero``: 0.0, or None for non-floats)."""
        return {"signed_mean_ulp": zero, "mag_signed_mean_ulp": zero, "signed_count": 0,
                "smaller_magnitude_count": 0, "larger_magnitude_count": 0, "share_smaller_magnitude": None,
                "signed_filter": SIGNED_FILTER}


def _profile(row_max: torch.Tensor, col_max: torch.Tensor, idx: torch.Tensor, vals: torch.Tensor,
             per_row: int, ncols: int) -> None:
    """Fold |Δ| of the differing elements at flat positions ``idx`` into per-row / per-column maxima."""
    if idx.numel() == 0:
        return
    row_max.scatter_reduce_(0, idx // per_row, vals, "amax")
    if col_max.numel() > 1:
        col_max.scatter_reduce_(0, idx % ncols, vals, "amax")


def localise(row_max: torch.Tensor, col_max: torch.Tensor, unit: Optional[float], bound: float) -> Dict[str, Any]:
    """Per-row curve and the rows / columns whose max|Δ| exceeds ``bound`` ULP of absmax(ref).

    Args:
        row_max, col_max: float64 per-row (dim 0) / per-column (last dim) max|Δ|.
        unit: ULP(absmax(ref)) in the reference dtype (None for non-float tensors: nothing named).
        bound: the rounding bound in tensor-scale ULP (the map's ``rounding_max_tensor_ulp``).
    Returns:
        ``row_tensor_ulp`` (list, None above :data:`MAX_PROFILE_ROWS` rows or for non-floats),
        ``logic_rows`` / ``logic_cols`` (indices, at most :data:`MAX_LISTED`) and their counts.
    """
    out: Dict[str, Any] = {"row_tensor_ulp": None, "logic_rows": [], "logic_rows_count": 0,
                           "logic_cols": [], "logic_cols_count": 0}
    if not unit:
        return out
    r = row_max / unit
    if row_max.numel() <= MAX_PROFILE_ROWS:
        out["row_tensor_ulp"] = [float(f"{x:.4g}") for x in r.tolist()]
    for key, prof in (("rows", r), ("cols", col_max / unit)):
        if prof.numel() <= 1:
            continue
        hit = torch.nonzero(prof > bound).reshape(-1)
        out[f"logic_{key}"] = hit[:MAX_LISTED].tolist()
        out[f"logic_{key}_count"] = int(hit.numel())
    return out


def cosine(sq_ref: float, dot_corr: float, sq_corr: float) -> Optional[float]:
    """Cosine similarity from ``Σ ref²`` (every element) and the differing elements' corrections.

    ``Σ ref·other = Σ ref² + Σ_diff ref·(other − ref)``; ``Σ other² = Σ ref² + Σ_diff (other² − ref²)``,
    so only the differing elements need float64 arithmetic. None when either side has zero norm.
    """
    b = sq_ref + sq_corr
    if sq_ref <= 0 or b <= 0:
        return None
    return (sq_ref + dot_corr) / math.sqrt(sq_ref * b)


def _flat(t: torch.Tensor) -> torch.Tensor:
    """Flat, unit-stride view (or copy) of ``t``."""
    t = t.detach().reshape(-1)
    if t.numel() and t.stride(0) != 1:
        # a 1-element view can keep an odd stride through clone()/contiguous(): copy explicitly
        t = torch.empty(t.shape, dtype=t.dtype).copy_(t)
    return t


def diff_pattern(mism: int, n: int, rows: torch.Tensor, cols: torch.Tensor, per_row: int, nrows: int) -> str:
    """Shape of the differing elements.

    Returns one of ``none``, ``whole_rows`` (every element of some — not all — rows differs: a
    position-specific fault), ``whole_columns`` (every row differs at some — not all — columns: a
    channel-specific fault such as one corrupted weight row), ``dense`` (≥ 50 % of elements),
    ``sparse`` (< 1‰), ``scattered`` otherwise.
    """
    if mism == 0:
        return "none"
    frac = mism / n if n else 0.0
    full_rows = int((rows >= per_row).sum())
    rows_hit = int((rows > 0).sum())
    if nrows > 1 and full_rows == rows_hit and 0 < rows_hit < nrows:
        return "whole_rows"
    if nrows > 1 and cols.numel() > 1:
        cols_hit = int((cols > 0).sum())
        full_cols = int((cols >= nrows).sum())
        if full_cols == cols_hit and 0 < cols_hit < cols.numel():
            return "whole_columns"
    if frac >= 0.5:
        return "dense"
    if frac < 1e-3:
        return "sparse"
    return "scattered"


def pearson(x: torch.Tensor, y: torch.Tensor, chunk: int = 1 << 20) -> Optional[float]:
    """Pearson correlation of two equal-size tensors, accumulated in float64 over finite pairs.

    Streamed in ``chunk``-element pieces (one float64 copy of a chunk at a time, not of the whole
    tensor), each shifted by the first chunk's means so the one-pass sums do not cancel.
    Returns None when undefined (fewer than 2 finite pairs, zero variance) or either input is None.
    """
    if x is None or y is None or x.numel() != y.numel() or x.numel() < 2:
        return None
    a, b = _flat(x), _flat(y)
    n = 0
    sa = sb = saa = sbb = sab = 0.0
    shift = None
    mom = fused.bf16_moments(a, b, chunk) if a.dtype == b.dtype == torch.bfloat16 else None
    if mom is not None:   # the same sums in one C pass (equal to ~1e-15 relative: summation order)
        n, sa, sb, saa, sbb, sab = int(mom[0]), *mom[1:]
    for s in (range(0, a.numel(), chunk) if mom is None else ()):
        ca, cb = _as_f64(a[s:s + chunk]), _as_f64(b[s:s + chunk])
        ra, rb = float(ca.sum()), float(cb.sum())   # non-finite sums ⇔ a non-finite element (float64 sums)
        if not (math.isfinite(ra) and math.isfinite(rb)):
            m = torch.isfinite(ca) & torch.isfinite(cb)
            ca, cb = ca[m], cb[m]
            ra, rb = float(ca.sum()), float(cb.sum())
            if not (math.isfinite(ra) and math.isfinite(rb)):
                return None      # float64 overflow of finite values: no meaningful correlation
        k = ca.numel()
        if k == 0:
            continue
        if shift is None:
            shift = (ra / k, rb / k)
        ca -= shift[0]
        cb -= shift[1]
        n += k
        sa += ra - k * shift[0]
        sb += rb - k * shift[1]
        saa += float(torch.dot(ca, ca))
        sbb += float(torch.dot(cb, cb))
        sab += float(torch.dot(ca, cb))
    if n < 2:
        return None
    va, vb = saa - sa * sa / n, sbb - sb * sb / n
    den = math.sqrt(va * vb) if va > 0 and vb > 0 else 0.0
    return (sab - sa * sb / n) / den if den > 0 else None


def _as_f64(c: torch.Tensor) -> torch.Tensor:
    """float64 copy of a chunk (bf16 through float32, as :func:`tilake.diagnosis.numerics._f64`)."""
    return c.float().double() if c.dtype == torch.bfloat16 else c.to(torch.float64)
