"""Tensor numerics: float64 statistics, raw-byte content hash, exact gate and ULP from bit patterns.

Everything streams over flat chunks of :data:`CHUNK` elements so the extra memory stays a few
tens of MiB whatever the tensor size (the two input tensors themselves are the only large
allocations; they are memory-mapped by :func:`tilake.ingest.msprobe.reader.load_pt`).

ULP facts (IEEE 754 / OCP FP8 spec): a finite float's bits, read as sign-magnitude integers, are
ordered like the values, so the ULP distance of two finite values of the same dtype is the
difference of their ordered integer keys (±0 both map to 0). ``ULP(x) = 2^(max(floor(log2|x|),
emin) - mantissa_bits)``: bf16 (7, -126), fp16 (10, -14), fp32 (23, -126), fp64 (52, -1022),
float8_e4m3fn (3, -6), float8_e5m2 (2, -14). No numpy dtype is involved, so bf16 and float8
never hit numpy's missing dtypes.
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import os
from typing import Any, Dict, List, Optional, Tuple

import torch

from tilake.diagnosis import fused
from tilake.diagnosis.localise import _flat, _profile, _Signed, cosine, diff_pattern, localise, pearson  # noqa: F401
from tilake.vocab import BoundaryStatus

CHUNK = 1 << 17  # elements per streamed chunk (128 Ki: 1 MiB as float64; cache-resident, measured faster than 1 Mi)
DENSE_FRACTION = 0.5  # a chunk with at least this share of differing elements is measured whole (_dense_chunk)

# dtype -> (storage bits, mantissa bits, min normal exponent)
FLOAT_FORMATS: Dict[torch.dtype, Tuple[int, int, int]] = {
    torch.bfloat16: (16, 7, -126),
    torch.float16: (16, 10, -14),
    torch.float32: (32, 23, -126),
    torch.float64: (64, 52, -1022),
}
for _name, _fmt in (("float8_e4m3fn", (8, 3, -6)), ("float8_e5m2", (8, 2, -14)),
                    ("float8_e4m3fnuz", (8, 3, -7)), ("float8_e5m2fnuz", (8, 2, -15))):
    if hasattr(torch, _name):
        FLOAT_FORMATS[getattr(torch, _name)] = _fmt

_INT_VIEW = {8: torch.uint8, 16: torch.int16, 32: torch.int32, 64: torch.int64}
_SIGNED_VIEW = {8: torch.int8, 16: torch.int16, 32: torch.int32, 64: torch.int64}
# fold of clamp(u, -17, 17) + 17 (35 values) into the ULP_BINS (clamp + bincount is far cheaper than bucketize)
_FOLD = torch.tensor([0] + [1] * 12 + [2] * 3 + [3, 4, 5] + [6] * 3 + [7] * 12 + [8], dtype=torch.int64)


def _hist(un: torch.Tensor) -> torch.Tensor:
    """Counts of signed ULP distances ``un`` per :data:`ULP_BINS` bin."""
    c = torch.bincount((un.clamp(-17, 17) + 17).to(torch.int64), minlength=35)
    return torch.zeros(len(ULP_BINS), dtype=torch.int64).index_add_(0, _FOLD, c)

# signed-ULP histogram bins: (label, low, high) inclusive
ULP_BINS: List[Tuple[str, float, float]] = [
    ("<=-17", -math.inf, -17), ("-16..-5", -16, -5), ("-4..-2", -4, -2), ("-1", -1, -1), ("0", 0, 0),
    ("1", 1, 1), ("2..4", 2, 4), ("5..16", 5, 16), (">=17", 17, math.inf),
]


@contextlib.contextmanager
def torch_threads(n: Optional[int] = None):
    """Run a block with ``n`` torch intra-op threads (default ``$TILAKE_THREADS`` or 1), then restore.

    The streamed chunk operations are memory-bound; on a shared or oversubscribed host one thread
    measured 4x faster than two (OpenMP spin contention), so 1 is the default.
    """
    if n is None:
        try:
            n = int(os.environ.get("TILAKE_THREADS", "1"))
        except ValueError:
            n = 1
    old = torch.get_num_threads()
    torch.set_num_threads(max(1, n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` → ``"torch.bfloat16"`` (the spelling msprobe writes in dump.json)."""
    return str(dtype)


def is_float(dtype: torch.dtype) -> bool:
    """True for the floating dtypes we can ULP-compare (bf16, fp16, fp32, fp64, float8)."""
    return dtype in FLOAT_FORMATS


def ulp_of(x: float, dtype: torch.dtype) -> float:
    """The ULP (unit in the last place) of ``|x|`` in ``dtype``, as a float64. Ints: 1.0."""
    if dtype not in FLOAT_FORMATS:
        return 1.0
    _bits, mant, emin = FLOAT_FORMATS[dtype]
    ax = abs(float(x))
    e = emin if ax == 0 or not math.isfinite(ax) else max(math.floor(math.log2(ax)), emin)
    return 2.0 ** (e - mant)


def _f64(c: torch.Tensor) -> torch.Tensor:
    """float64 copy; bf16 goes through float32 (measured 1.4x faster than a direct cast on CPU)."""
    if c.dtype == torch.bfloat16:
        return c.float().double()
    return c.to(torch.float64)


def _arith(c: torch.Tensor) -> torch.Tensor:
    """The chunk itself, or an exact float32 copy for float8 (few native kernels exist for it)."""
    return c.float() if c.dtype.itemsize == 1 and c.is_floating_point() else c


def ordered_bits(x: torch.Tensor) -> torch.Tensor:
    """Map float values to integer keys ordered like the values (sign-magnitude → two's complement).

    Args:
        x: flat tensor of a dtype in :data:`FLOAT_FORMATS`.
    Returns:
        int32 (8/16-bit formats) or int64 (32/64-bit) tensor, same length; the ULP distance of two
        finite values is the key difference (±0 both map to 0).
    """
    bits, _m, _e = FLOAT_FORMATS[x.dtype]
    # sign-extended raw bits v: v >= 0 is the magnitude itself; a negative v holds -2^(bits-1) + mag, and
    # (v XOR (2^(bits-1) - 1)) - (-1) = -mag. s = v >> top is 0 or -1: branch-free, in place, no where()
    v = x.view(_SIGNED_VIEW[bits]).to(torch.int32 if bits <= 16 else torch.int64, copy=True)
    s = v >> (31 if bits <= 16 else 63)
    return v.bitwise_xor_(s & ((1 << (bits - 1)) - 1)).sub_(s)


def tensor_stats(t: torch.Tensor) -> Dict[str, Any]:
    """Statistics of one tensor, computed in float64 over its finite elements.

    Args:
        t: any CPU tensor (float, float8, int, bool; complex uses ``|x|``).
    Returns:
        dict with dtype, shape (list), numel, nbytes, min/max/mean/norm (float64, None when no
        finite element), nan_count, posinf_count, neginf_count, content_hash (``sha256:`` of the
        raw bytes in memory order, so a bitwise-equal tensor has the same hash).
    """
    flat = _flat(t)
    h = hashlib.sha256()
    n = flat.numel()
    mn, mx, s, sq, cnt = math.inf, -math.inf, 0.0, 0.0, 0
    nan = pinf = ninf = 0
    for start in range(0, max(n, 1), CHUNK):
        c = flat[start:start + CHUNK]
        if c.numel() == 0:
            break
        h.update((c.view(torch.uint8) if c.dtype != torch.bool else c.to(torch.uint8)).numpy())
        if c.is_complex():
            c = c.abs()
        elif c.dtype == torch.bool:
            c = c.to(torch.uint8)
        native = c.dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16) or not c.is_floating_point()
        d = None
        if native:
            lo, hi = float(c.min()), float(c.max())  # exact in the native dtype; NaN propagates
        else:  # float8: few kernels exist in the native dtype
            d = c.to(torch.float64)
            lo, hi = float(d.min()), float(d.max())
        if c.is_floating_point() and not (math.isfinite(lo) and math.isfinite(hi)):
            d = c.to(torch.float64) if d is None else d
            fin = torch.isfinite(d)
            nan += int(torch.isnan(d).sum())
            pinf += int((d == math.inf).sum())
            ninf += int((d == -math.inf).sum())
            d = d[fin]
            if d.numel() == 0:
                continue
            lo, hi = float(d.min()), float(d.max())
        d = _f64(c) if d is None else d
        mn, mx = min(mn, lo), max(mx, hi)
        s += float(d.sum())
        sq += float(torch.dot(d, d))
        cnt += d.numel()
    return {
        "dtype": dtype_name(t.dtype), "shape": list(t.shape), "numel": n,
        "nbytes": n * t.element_size(),
        "min": mn if cnt else None, "max": mx if cnt else None,
        "mean": s / cnt if cnt else None, "norm": math.sqrt(sq) if cnt else None,
        "nan_count": nan, "posinf_count": pinf, "neginf_count": ninf,
        "content_hash": "sha256:" + h.hexdigest(),
    }


def compare(ref: torch.Tensor, other: torch.Tensor, significant_fraction: float = 1.0 / 64,
            bound: float = 4.0) -> Dict[str, Any]:
    """Exact gate + ULP quantification of two same-shape tensors (``ref`` = reference side).

    The gate: same shape, same dtype, finite, bitwise-equal values (``torch.equal`` semantics:
    ``-0 == +0``; a non-finite value equal at the same place on both sides counts as equal).

    Args:
        ref, other: tensors after the boundary transforms (shapes must already match).
        significant_fraction: elements with ``|ref| >= absmax(ref) * fraction`` are "significant"
            for the elementwise max-ULP figure and the signed means (tiny values have tiny ULPs, and a
            sign flip near zero is ~30 000 ULP apart).
        bound: the rounding bound in tensor-scale ULP; rows / columns above it are named.
    Returns:
        dict: status (EXACT | NOT_EXACT | DTYPE_DIFF | NONFINITE), equal (bool), numel,
        mismatch_count, mismatch_fraction, max_abs_diff, ref_absmax, tensor_ulp (max|Δ| /
        ULP(absmax ref), in the native dtype), max_elem_ulp, max_elem_ulp_significant,
        signed_mean_ulp (mean of ``ord(other) − ord(ref)``) and mag_signed_mean_ulp (mean of
        ``|ord(other)| − |ord(ref)|``: negative = other smaller in magnitude), both over the
        ``signed_count`` significant differing elements (``signed_filter`` says so),
        smaller/larger_magnitude_count and share_smaller_magnitude over the same elements,
        pos_count / neg_count (value sign, every differing element), ulp_hist {bin label: count},
        rows/cols differing (counts), row_indices_differing (positions, dim 0), row_tensor_ulp
        (per-row max|Δ| in ULP of absmax(ref); rows ≤ 4096, else None), logic_rows / logic_cols
        (rows of dim 0 / columns of the last dim whose max|Δ| exceeds ``bound`` tensor-scale ULP;
        at most 64 listed, counts in logic_rows_count / logic_cols_count), cosine (float64, over
        finite elements), pattern, nonfinite (both-side equal count, one-sided count).
        Non-finite values never enter the float statistics.
    Raises:
        ValueError: shapes differ (callers record SHAPE_DIFF before calling).
    """
    if tuple(ref.shape) != tuple(other.shape):
        raise ValueError("shape mismatch")
    a, b = _flat(ref), _flat(other)
    n = a.numel()
    same_dtype = ref.dtype == other.dtype
    floaty = is_float(ref.dtype) and same_dtype
    if same_dtype and a.dtype == torch.bfloat16:
        fast = fused.bf16_equal_absmax(a, b)   # one read of each side (None: no kernel / empty / non-finite)
        if fast is not None and fast[0]:
            return _exact_result(a, ref, floaty, absmax=fast[1])
        if fast is not None:   # the bits differ somewhere: straight to the ULP figures
            return _compare_differing(a, b, ref, n, floaty, significant_fraction, bound)
    if same_dtype and not a.is_complex() and _bitwise_equal(a, b):
        return _exact_result(a, ref, floaty)
    return _compare_differing(a, b, ref, n, floaty, significant_fraction, bound)


def _compare_differing(a: torch.Tensor, b: torch.Tensor, ref: torch.Tensor, n: int, floaty: bool,
                       significant_fraction: float, bound: float) -> Dict[str, Any]:
    """:func:`compare` of two flat tensors whose bits differ (or whose dtypes do)."""
    same_dtype = ref.dtype == b.dtype
    if ref.dim() >= 2:
        nrows, ncols = ref.shape[0], ref.shape[-1]
    else:
        nrows, ncols = 1, max(n, 1)
    per_row = max(n // max(nrows, 1), 1)
    # chunks aligned to whole rows so per-row / per-column counts need no index arithmetic
    aligned = per_row <= CHUNK and nrows * per_row == n and per_row % max(ncols, 1) == 0
    step = (CHUNK // per_row) * per_row if aligned else CHUNK
    # pass 1: absmax of the reference over finite values (native dtype; NaN propagates → masked path)
    absmax = 0.0
    sq_ref = 0.0
    bf_max = fused.bf16_absmax(a) if a.dtype == torch.bfloat16 else None   # None: non-finite or no kernel
    for s in range(0, n, step):
        c = a[s:s + step]
        if c.is_complex():
            c = c.abs()
        if c.dtype == torch.bool:
            c = c.to(torch.uint8)
        m = bf_max if bf_max is not None else float(_arith(c).abs().max()) if c.numel() else 0.0
        if not math.isfinite(m):
            d = _f64(c)
            d = d[torch.isfinite(d)].abs()
            m = float(d.max()) if d.numel() else 0.0
            sq_ref += float(torch.dot(d, d))
        elif c.is_floating_point() and c.numel():
            f = c.float()
            sq_ref += float(torch.dot(f, f))
        absmax = max(absmax, m)
    thresh = absmax * significant_fraction
    mism = 0
    max_abs = 0.0
    one_sided_nf = both_nf = 0
    max_ulp = max_ulp_sig = 0
    acc = _Signed()
    pos = neg = 0
    # per-row / per-column max|Δ| (float64), and the cosine's corrections over differing elements
    row_max = torch.zeros(max(nrows, 1), dtype=torch.float64)
    col_max = torch.zeros(max(ncols, 1) if ref.dim() >= 2 else 1, dtype=torch.float64)
    dot_corr = sq_corr = 0.0
    hist = torch.zeros(len(ULP_BINS), dtype=torch.int64)
    rows = torch.zeros(max(nrows, 1), dtype=torch.int64)
    cols = torch.zeros(max(ncols, 1), dtype=torch.int64)
    fz = None   # bf16: every differing-element figure in one pass of the C kernel (fused.py), same numbers
    if floaty and ref.dtype == torch.bfloat16 and n and nrows * per_row == n and per_row % max(ncols, 1) == 0:
        fz = fused.bf16_pair(a, b, nrows, per_row, ncols, thresh, row_max, col_max, rows, cols, hist)
    if fz is not None:
        mism, max_ulp, max_ulp_sig, pos = fz["mism"], fz["max_ulp"], fz["max_ulp_sig"], fz["pos"]
        neg = mism - pos
        max_abs, dot_corr, sq_corr = fz["max_abs"], fz["dot_corr"], fz["sq_corr"]
        acc.n, acc.value, acc.mag, acc.smaller, acc.larger = fz["signed"]
    for s in (range(0, n, step) if fz is None else ()):
        ca, cb = a[s:s + step], b[s:s + step]
        fa_, fb_ = (_arith(ca), _arith(cb)) if floaty else (None, None)
        finite = floaty and all(math.isfinite(float(v)) for x in (fa_, fb_) for v in torch.aminmax(x))
        if finite:
            # fast path: everything from the integer keys; float64 only for the differing elements
            oa = ordered_bits(ca)
            u = ordered_bits(cb) - oa
            neq = u != 0
            k = int(neq.sum())
            if k == 0:
                continue
            mism += k
            au = u.abs()
            max_ulp = max(max_ulp, int(au.max()))
            sig = fa_.abs() >= thresh
            if bool(sig.any()):
                max_ulp_sig = max(max_ulp_sig, int(au.mul(sig).max()))   # one pass, no zeros tensor
            del au
            if aligned and k >= DENSE_FRACTION * u.numel():
                # most elements differ: whole-chunk arithmetic (equal elements add 0), no positions
                max_abs, dot_corr, sq_corr, pos, neg = _dense_chunk(
                    ca, cb, u, oa, sig & neq, k, s, per_row, ncols, row_max, col_max, acc, hist,
                    (max_abs, dot_corr, sq_corr, pos, neg))
            else:
                # integer positions once: index_select is far cheaper than boolean-mask indexing on CPU
                at = torch.nonzero(neq).reshape(-1)
                un = u.index_select(0, at)
                acc.add(un, oa.index_select(0, at), sig.index_select(0, at))
                p_ = int((un > 0).sum())
                pos += p_
                neg += k - p_
                hist += _hist(un)
                del un, u, sig, oa
                xa, xb = _f64(ca.index_select(0, at)), _f64(cb.index_select(0, at))
                dabs = (xb - xa).abs()
                max_abs = max(max_abs, float(dabs.max()))
                dot_corr += float(torch.dot(xa, xb - xa))
                sq_corr += float(torch.dot(xb, xb) - torch.dot(xa, xa))
                _profile(row_max, col_max, at + s, dabs, per_row, ncols)
                del xa, xb, dabs
        else:
            if ca.is_complex() or cb.is_complex():
                da, db = torch.view_as_real(ca).to(torch.float64), torch.view_as_real(cb).to(torch.float64)
                da, db = da.abs().sum(-1), db.abs().sum(-1)
            else:
                da, db = _f64(ca), _f64(cb)
            fa, fb = torch.isfinite(da), torch.isfinite(db)
            both_fin = fa & fb
            nf_eq = (~fa) & (~fb) & ((da == db) | (torch.isnan(da) & torch.isnan(db)))
            one = (fa ^ fb) | ((~fa) & (~fb) & ~nf_eq)
            one_sided_nf += int(one.sum())
            both_nf += int(nf_eq.sum())
            neq = one | (both_fin & (da != db))
            k = int(neq.sum())
            if k == 0:
                continue
            mism += k
            diff = torch.where(both_fin, (db - da).abs(), torch.zeros_like(da))
            max_abs = max(max_abs, float(diff.max()))
            fin_neq = neq & both_fin
            _profile(row_max, col_max, torch.nonzero(fin_neq).reshape(-1) + s, diff[fin_neq], per_row, ncols)
            xa, xb = da[fin_neq], db[fin_neq]
            dot_corr += float(torch.dot(xa, xb - xa))
            sq_corr += float(torch.dot(xb, xb) - torch.dot(xa, xa))
            if floaty:
                oa = ordered_bits(ca)
                u = ordered_bits(cb) - oa
                u = torch.where(both_fin, u, torch.zeros_like(u))
                au = u.abs()
                max_ulp = max(max_ulp, int(au.max()))
                sig = both_fin & (da.abs() >= thresh)
                if bool(sig.any()):
                    max_ulp_sig = max(max_ulp_sig, int(au[sig].max()))
                un = u[fin_neq]
                acc.add(un, oa[fin_neq], sig[fin_neq])
                pos += int((un > 0).sum())
                neg += int((un < 0).sum())
                hist += _hist(un)
        if aligned:
            r0 = s // per_row
            rc = neq.reshape(-1, per_row).sum(1)
            rows[r0:r0 + rc.numel()] += rc
            cols += neq.reshape(-1, max(ncols, 1)).sum(0)
        else:
            idx = torch.nonzero(neq, as_tuple=False).reshape(-1) + s
            rows += torch.bincount(idx // per_row, minlength=rows.numel())[: rows.numel()]
            cols += torch.bincount(idx % max(ncols, 1), minlength=cols.numel())[: cols.numel()]
    hist[4] += n - mism  # equal elements sit in the "0" bin
    if not same_dtype:
        status = BoundaryStatus.DTYPE_DIFF
    elif one_sided_nf:
        status = BoundaryStatus.NONFINITE
    elif mism == 0:
        status = BoundaryStatus.EXACT
    else:
        status = BoundaryStatus.NOT_EXACT
    rows_diff = int((rows > 0).sum())
    cols_diff = int((cols > 0).sum())
    unit = ulp_of(absmax, ref.dtype) if floaty else None
    tensor_ulp = (max_abs / unit) if (floaty and mism) else (0.0 if mism == 0 else None)
    loc = localise(row_max, col_max, unit, bound)
    return {
        "status": status, "equal": mism == 0 and same_dtype, "numel": n,
        "mismatch_count": mism, "mismatch_fraction": (mism / n) if n else 0.0,
        "max_abs_diff": max_abs, "ref_absmax": absmax,
        "tensor_ulp": tensor_ulp,
        "max_elem_ulp": max_ulp if floaty else None,
        "max_elem_ulp_significant": max_ulp_sig if floaty else None,
        **(acc.result() if floaty else _Signed.empty(None)),
        "pos_count": pos, "neg_count": neg,
        "ulp_hist": {lab: int(c) for (lab, _l, _h), c in zip(ULP_BINS, hist.tolist())} if floaty else {},
        "rows_total": nrows, "cols_total": ncols,
        "rows_differing": rows_diff, "cols_differing": cols_diff,
        "row_indices_differing": torch.nonzero(rows > 0).reshape(-1).tolist() if nrows <= 4096 else None,
        **loc, "cosine": None if a.is_complex() else cosine(sq_ref, dot_corr, sq_corr),
        "pattern": diff_pattern(mism, n, rows, cols, per_row, nrows),
        "nonfinite_both": both_nf, "nonfinite_one_sided": one_sided_nf,
    }


def _dense_chunk(ca, cb, u, oa, sig_neq, k, s, per_row, ncols, row_max, col_max, acc, hist, figs):
    """The differing-element figures of :func:`compare` for a row-aligned chunk where at least
    :data:`DENSE_FRACTION` of the elements differ, over the whole chunk instead of gathered positions:
    equal elements have ``u = 0`` and ``|Δ| = 0``, so they add nothing to the sums and maxima.
    ``figs`` = (max_abs, dot_corr, sq_corr, pos, neg) so far; returns them updated."""
    max_abs, dot_corr, sq_corr, pos, neg = figs
    acc.add(u, oa, sig_neq)
    p_ = int((u > 0).sum())
    h = _hist(u)
    h[4] -= u.numel() - k            # the equal elements are counted once, at the end of compare
    hist += h
    xa, xb = _f64(ca), _f64(cb)
    d = xb - xa
    dabs = d.abs()
    max_abs = max(max_abs, float(dabs.max()))
    dot_corr += float(torch.dot(xa, d))
    sq_corr += float(torch.dot(d, xb + xa))     # Σ(xb² − xa²) without cancellation
    r0 = s // per_row
    rm = dabs.reshape(-1, per_row).amax(1)
    row_max[r0:r0 + rm.numel()] = torch.maximum(row_max[r0:r0 + rm.numel()], rm)
    if col_max.numel() > 1:
        col_max.copy_(torch.maximum(col_max, dabs.reshape(-1, ncols).amax(0)))
    return max_abs, dot_corr, sq_corr, pos + p_, neg + k - p_


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Fast path: same raw bytes chunk by chunk (so NaN payloads at the same place compare equal)."""
    for s in range(0, a.numel(), CHUNK):
        ca, cb = a[s:s + CHUNK], b[s:s + CHUNK]
        if ca.dtype == torch.bool:
            if not torch.equal(ca, cb):
                return False
        elif not torch.equal(ca.view(_INT_VIEW[ca.element_size() * 8]), cb.view(_INT_VIEW[cb.element_size() * 8])):
            return False
    return True


def _exact_result(a: torch.Tensor, ref: torch.Tensor, floaty: bool, absmax: Optional[float] = None) -> Dict[str, Any]:
    n = a.numel()
    nf = 0
    if absmax is None and a.dtype == torch.bfloat16:
        absmax = fused.bf16_absmax(a)   # None: non-finite or no kernel
    n_ = 0 if absmax is not None else n   # the chunk loop only without an exact kernel maximum
    absmax = absmax or 0.0
    for s in range(0, n_, CHUNK):
        c = a[s:s + CHUNK]
        if c.numel() and c.dtype != torch.bool:
            m = float(c.abs().max().to(torch.float64))   # NaN propagates: finite ⇔ every element finite
            if c.is_floating_point() and not math.isfinite(m):
                fin = torch.isfinite(c)
                nf += int((~fin).sum())
                c = c[fin]
                m = float(c.abs().max().to(torch.float64)) if c.numel() else 0.0
            absmax = max(absmax, m)
    nrows = ref.shape[0] if ref.dim() >= 2 else 1
    ncols = ref.shape[-1] if ref.dim() >= 2 else max(n, 1)
    return {
        "status": BoundaryStatus.EXACT, "equal": True, "numel": n, "mismatch_count": 0, "mismatch_fraction": 0.0,
        "max_abs_diff": 0.0, "ref_absmax": absmax, "tensor_ulp": 0.0,
        "max_elem_ulp": 0 if floaty else None, "max_elem_ulp_significant": 0 if floaty else None,
        **_Signed.empty(0.0 if floaty else None), "pos_count": 0, "neg_count": 0,
        "ulp_hist": ({lab: (n if lab == "0" else 0) for lab, _l, _h in ULP_BINS} if floaty else {}),
        "rows_total": nrows, "cols_total": ncols, "rows_differing": 0, "cols_differing": 0,
        "row_indices_differing": [] if nrows <= 4096 else None, "pattern": "none",
        "row_tensor_ulp": [0.0] * nrows if nrows <= 4096 else None, "logic_rows": [], "logic_rows_count": 0,
        "logic_cols": [], "logic_cols_count": 0, "cosine": 1.0 if n and absmax > 0 else None,
        "nonfinite_both": nf, "nonfinite_one_sided": 0,
    }
