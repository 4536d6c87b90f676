"""One-pass C kernel for the differing-element figures of :func:`tilake.diagnosis.numerics.compare`
on bf16 pairs (the common dump dtype), built on first use with the system C compiler.

Why: the torch formulation makes ~30 passes over each chunk (ordered keys, masks, histogram,
float64 copies, per-row/column maxima); this kernel reads each element pair once. Every figure is
the same as the torch path's: integer counts and sums are exact, ``max|Δ|`` and the per-row /
per-column maxima are the same float64 operations; only the cosine's float64 corrections are summed
in another order (equal to ~1e-15 relative). ``TILAKE_FUSED=0`` turns the kernel off; without a C
compiler (``$CC``, else ``cc``) the torch path runs. The shared object is cached in
``$TILAKE_CACHE`` (default ``~/.cache/tilake``) under the hash of its source.

bf16 facts: the top 16 bits of an IEEE float32 (so ``bits << 16`` is the float32 value); the
ordered key of a finite value is ``v`` for ``v >= 0`` and ``-(v & 0x7fff)`` otherwise (sign-magnitude,
as :func:`tilake.diagnosis.numerics.ordered_bits`).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Optional

_SRC = r"""
#include <stdint.h>
#include <string.h>
#include <math.h>

static inline double bf(int16_t v) { uint32_t u = ((uint32_t)(uint16_t)v) << 16; float f; memcpy(&f, &u, 4); return (double)f; }
static inline int32_t ordk(int16_t v) { return v >= 0 ? (int32_t)v : -(int32_t)(v & 0x7fff); }

/* returns 1 when a non-finite value was met (nothing is valid then), else 0.
   i64[0..8]: mism, max_ulp, max_ulp_sig, sig_n, value_sum, mag_sum, smaller, larger, pos
   f64[0..2]: max_abs, dot_corr, sq_corr */
int bf16_pair(const int16_t *a, const int16_t *b, int64_t nrows, int64_t per_row, int64_t ncols,
              int32_t sig_key, const int64_t *fold, double *row_max, double *col_max, int col_prof,
              int64_t *rows, int64_t *cols, int64_t *hist, int64_t *i64, double *f64) {
    int64_t mism = 0, max_ulp = 0, max_sig = 0, sn = 0, vs = 0, ms = 0, sm = 0, lg = 0, pos = 0;
    double max_abs = 0.0, dot = 0.0, sq = 0.0;
    int64_t groups = per_row / ncols;
    for (int64_t r = 0; r < nrows; r++) {
        double rmax = row_max[r];
        int64_t rcount = 0;
        for (int64_t g = 0; g < groups; g++) {
            const int64_t off = r * per_row + g * ncols;
            for (int64_t c = 0; c < ncols; c++) {
                int16_t va = a[off + c], vb = b[off + c];
                if (((va & 0x7f80) == 0x7f80) || ((vb & 0x7f80) == 0x7f80)) return 1;
                int32_t oa = ordk(va), ob = ordk(vb);
                int32_t u = ob - oa;
                if (u == 0) continue;
                mism++; rcount++; cols[c]++;
                int32_t au = u < 0 ? -u : u;
                if (au > max_ulp) max_ulp = au;
                int32_t aoa = oa < 0 ? -oa : oa, aob = ob < 0 ? -ob : ob;
                if (aoa >= sig_key) {
                    if (au > max_sig) max_sig = au;
                    int32_t mag = aob - aoa;
                    sn++; vs += u; ms += mag; sm += (mag < 0); lg += (mag > 0);
                }
                pos += (u > 0);
                int32_t h = u < -17 ? -17 : (u > 17 ? 17 : u);
                hist[fold[h + 17]]++;
                double xa = bf(va), xb = bf(vb);
                double d = xb - xa, ad = fabs(d);
                if (ad > max_abs) max_abs = ad;
                if (ad > rmax) rmax = ad;
                if (col_prof && ad > col_max[c]) col_max[c] = ad;
                dot += xa * d;
                sq += d * (xb + xa);
            }
        }
        row_max[r] = rmax;
        rows[r] += rcount;
    }
    i64[0] = mism; i64[1] = max_ulp; i64[2] = max_sig; i64[3] = sn; i64[4] = vs; i64[5] = ms;
    i64[6] = sm; i64[7] = lg; i64[8] = pos;
    f64[0] = max_abs; f64[1] = dot; f64[2] = sq;
    return 0;
}
"""

_LIB: Any = None  # None: not tried yet; False: unavailable


def _build() -> Any:
    """Compile (once, cached by source hash) and load the kernel; False when no compiler works."""
    if os.environ.get("TILAKE_FUSED", "1") == "0":
        return False
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return False
    key = hashlib.sha256((_SRC + cc).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("TILAKE_CACHE") or Path.home() / ".cache" / "tilake")
    so = cache / f"fused_{key}.so"
    try:
        if not so.is_file():
            cache.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=cache) as tmp:
                src = Path(tmp) / "fused.c"
                src.write_text(_SRC)
                out = Path(tmp) / so.name
                subprocess.run([cc, "-O3", "-fPIC", "-shared", "-o", str(out), str(src), "-lm"],
                               check=True, capture_output=True, timeout=120)
                os.replace(out, so)   # atomic: concurrent builders never load a half-written file
        lib = ctypes.CDLL(str(so))
    except (OSError, subprocess.SubprocessError):
        return False
    P = ctypes.c_void_p
    lib.bf16_pair.restype = ctypes.c_int
    lib.bf16_pair.argtypes = [P, P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, P, P, P,
                              ctypes.c_int, P, P, P, P, P]
    return lib


def kernel() -> Any:
    """The loaded kernel library, or None when unavailable (no compiler, ``TILAKE_FUSED=0``)."""
    global _LIB
    if _LIB is None:
        _LIB = _build()
    return _LIB or None


def sig_key(dtype: Any, thresh: float) -> int:
    """Smallest ``|ordered key|`` whose value satisfies torch's ``|x| >= thresh`` in ``dtype``
    (torch's own comparison over every non-negative finite 16-bit pattern, so the rounding of
    ``thresh`` to the tensor dtype is torch's)."""
    import torch

    keys = torch.arange(0, 0x7f80, dtype=torch.int16)
    hit = torch.nonzero(keys.view(dtype) >= thresh).reshape(-1)
    return int(hit[0]) if hit.numel() else 0x7f80


def bf16_pair(a: Any, b: Any, nrows: int, per_row: int, ncols: int, thresh: float, fold: Any,
              row_max: Any, col_max: Any, rows: Any, cols: Any, hist: Any) -> Optional[dict]:
    """Run the kernel over two flat contiguous bf16 tensors laid out as ``nrows × per_row`` with
    ``per_row`` a multiple of ``ncols``; updates row_max/col_max (float64), rows/cols/hist (int64) in
    place. Returns the figures, or None when the kernel is unavailable or met a non-finite value
    (then nothing was updated that the caller keeps: it must start over on the torch path)."""
    import torch

    lib = kernel()
    if lib is None:
        return None
    i64 = torch.zeros(9, dtype=torch.int64)
    f64 = torch.zeros(3, dtype=torch.float64)
    h = torch.zeros(hist.numel(), dtype=torch.int64)
    rm, cm, rc, cc = row_max.clone(), col_max.clone(), rows.clone(), cols.clone()
    ptr = lambda t: ctypes.c_void_p(t.data_ptr())   # noqa: E731
    bad = lib.bf16_pair(ptr(a), ptr(b), nrows, per_row, ncols, sig_key(a.dtype, thresh), ptr(fold),
                        ptr(rm), ptr(cm), int(col_max.numel() > 1), ptr(rc), ptr(cc), ptr(h), ptr(i64), ptr(f64))
    if bad:
        return None
    row_max.copy_(rm)
    col_max.copy_(cm)
    rows.copy_(rc)
    cols.copy_(cc)
    hist += h
    v = i64.tolist()
    return {"mism": v[0], "max_ulp": v[1], "max_ulp_sig": v[2], "signed": v[3:8], "pos": v[8],
            "max_abs": float(f64[0]), "dot_corr": float(f64[1]), "sq_corr": float(f64[2])}
