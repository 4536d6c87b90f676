"""One-pass C kernel for the differing-element figures of :func:`tilake.diagnosis.numerics.compare`
on bf16 pairs (the common dump dtype), built on first use with the system C compiler.

Why: the torch formulation makes ~30 passes over each chunk (ordered keys, masks, histogram,
float64 copies, per-row/column maxima); this kernel reads each element pair once. Every figure is
the same as the torch path's: integer counts and sums are exact, ``max|Δ|`` and the per-row /
per-column maxima are the same float64 operations; only the cosine's float64 corrections are summed
in another order (equal to ~1e-15 relative). ``TILAKE_FUSED=0`` turns the kernel off; without a C
compiler (``$CC``, else ``cc``) the torch path runs. The shared object is cached in
``$TILAKE_CACHE`` (default ``$XDG_CACHE_HOME/tilake`` or ``~/.cache/tilake``, :func:`tilake.settings.cache_dir`) under the hash of its source.

bf16 facts: the top 16 bits of an IEEE float32 (so ``bits << 16`` is the float32 value); the
ordered key of a finite value is ``v`` for ``v >= 0`` and ``-(v & 0x7fff)`` otherwise (sign-magnitude,
as :func:`tilake.diagnosis.numerics.ordered_bits`).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Optional

from tilake import settings

_SRC = r"""
#include <stdint.h>
#include <string.h>
#include <math.h>

/* returns 1 when a non-finite value was met (nothing is valid then), else 0.
   le[0..7]: counts of u <= -17, -5, -2, -1, 0, 1, 4, 16 over every element (equal ones included)
   i64[0..8]: mism, max_ulp, max_ulp_sig, sig_n, value_sum, mag_sum, smaller, larger, pos
   f64[0..2]: max_abs, dot_corr, sq_corr. Branch-free so the compiler vectorises the column loop. */
int bf16_pair(const int16_t *restrict a, const int16_t *restrict b, int64_t nrows, int64_t per_row, int64_t ncols,
              int32_t sig_key, int64_t *restrict le, double *restrict row_max, double *restrict col_max,
              int64_t *restrict rows, int64_t *restrict cols, int64_t *restrict i64, double *restrict f64) {
    int64_t mism = 0, sn = 0, vs = 0, ms = 0, sm = 0, lg = 0, pos = 0;
    int64_t l0 = 0, l1 = 0, l2 = 0, l3 = 0, l4 = 0, l5 = 0, l6 = 0, l7 = 0;
    int32_t max_ulp = 0, max_sig = 0;
    double max_abs = 0.0, dot = 0.0, sq = 0.0;
    int64_t groups = per_row / ncols;
    int bad = 0;
    for (int64_t r = 0; r < nrows; r++) {
        double rmax = 0.0;
        int64_t rcount = 0;
        for (int64_t g = 0; g < groups; g++) {
            const int16_t *restrict pa = a + r * per_row + g * ncols, *restrict pb = b + r * per_row + g * ncols;
            for (int64_t c = 0; c < ncols; c++) {
                int32_t va = pa[c], vb = pb[c];
                bad |= ((va & 0x7f80) == 0x7f80) | ((vb & 0x7f80) == 0x7f80);
                int32_t sa = va >> 15, sb = vb >> 15;
                int32_t oa = (va ^ (sa & 0x7fff)) - sa, ob = (vb ^ (sb & 0x7fff)) - sb;
                int32_t u = ob - oa;
                int32_t neq = u != 0;
                int32_t au = u < 0 ? -u : u;
                max_ulp = au > max_ulp ? au : max_ulp;
                int32_t aoa = va & 0x7fff, aob = vb & 0x7fff;   /* |ordered key| = magnitude bits */
                int32_t sig = (aoa >= sig_key) & neq;
                int32_t m = -sig;                 /* all ones where significant and differing */
                int32_t ausig = au & m;
                max_sig = ausig > max_sig ? ausig : max_sig;
                int32_t mag = aob - aoa;
                sn += sig; vs += u & m; ms += mag & m;
                sm += sig & (mag < 0); lg += sig & (mag > 0);
                pos += u > 0;
                l0 += u <= -17; l1 += u <= -5; l2 += u <= -2; l3 += u <= -1;
                l4 += u <= 0; l5 += u <= 1; l6 += u <= 4; l7 += u <= 16;
                rcount += neq;
                cols[c] += neq;
                uint32_t ba = ((uint32_t)(uint16_t)va) << 16, bb = ((uint32_t)(uint16_t)vb) << 16;
                float fa, fb; memcpy(&fa, &ba, 4); memcpy(&fb, &bb, 4);
                double xa = fa, xb = fb;
                double d = xb - xa, ad = fabs(d);
                rmax = fmax(rmax, ad);
                col_max[c] = fmax(col_max[c], ad);
                dot += xa * d;
                sq += d * (xb + xa);
            }
        }
        if (bad) return 1;
        mism += rcount;
        max_abs = rmax > max_abs ? rmax : max_abs;
        row_max[r] = rmax > row_max[r] ? rmax : row_max[r];
        rows[r] += rcount;
    }
    le[0] = l0; le[1] = l1; le[2] = l2; le[3] = l3; le[4] = l4; le[5] = l5; le[6] = l6; le[7] = l7;
    i64[0] = mism; i64[1] = max_ulp; i64[2] = max_sig; i64[3] = sn; i64[4] = vs; i64[5] = ms;
    i64[6] = sm; i64[7] = lg; i64[8] = pos;
    f64[0] = max_abs; f64[1] = dot; f64[2] = sq;
    return 0;
}

/* max |x| of a bf16 array as its magnitude bits; -1 when a non-finite value is met */
int32_t bf16_absmax(const int16_t *restrict a, int64_t n) {
    int32_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t v = a[i] & 0x7fff;
        m = v > m ? v : m;
    }
    return m >= 0x7f80 ? -1 : m;
}

/* bitwise equality of two bf16 arrays fused with the magnitude maximum of the first: -2 when they differ
   (stops at the first differing block of 4096), -1 when equal but a non-finite value is met, else the
   largest magnitude bits. One read of each array instead of an equality pass plus an absmax pass. */
int32_t bf16_equal_absmax(const int16_t *restrict a, const int16_t *restrict b, int64_t n) {
    int32_t m = 0;
    for (int64_t s = 0; s < n; s += 4096) {
        int64_t e = s + 4096 < n ? s + 4096 : n;
        int32_t diff = 0;
        for (int64_t i = s; i < e; i++) {
            int32_t va = a[i];
            diff |= va ^ b[i];
            int32_t v = va & 0x7fff;
            m = v > m ? v : m;
        }
        if (diff) return -2;
    }
    return m >= 0x7f80 ? -1 : m;
}

/* Pearson moments of two bf16 arrays shifted by the means of their first `first` elements (so the one-pass
   sums do not cancel). out[0..5]: n, sum a, sum b, sum a^2, sum b^2, sum ab (shifted). 1 = non-finite met. */
int bf16_moments(const int16_t *restrict a, const int16_t *restrict b, int64_t n, int64_t first,
                 double *restrict out) {
    int bad = 0;
    double ra = 0.0, rb = 0.0;
    for (int64_t i = 0; i < first; i++) {
        int32_t va = a[i], vb = b[i];
        bad |= ((va & 0x7f80) == 0x7f80) | ((vb & 0x7f80) == 0x7f80);
        uint32_t ba = ((uint32_t)(uint16_t)va) << 16, bb = ((uint32_t)(uint16_t)vb) << 16;
        float fa, fb; memcpy(&fa, &ba, 4); memcpy(&fb, &bb, 4);
        ra += fa; rb += fb;
    }
    if (bad) return 1;
    double ma = first ? ra / first : 0.0, mb = first ? rb / first : 0.0;
    double sa = 0.0, sb = 0.0, saa = 0.0, sbb = 0.0, sab = 0.0;
    for (int64_t i = 0; i < n; i++) {
        int32_t va = a[i], vb = b[i];
        bad |= ((va & 0x7f80) == 0x7f80) | ((vb & 0x7f80) == 0x7f80);
        uint32_t ba = ((uint32_t)(uint16_t)va) << 16, bb = ((uint32_t)(uint16_t)vb) << 16;
        float fa, fb; memcpy(&fa, &ba, 4); memcpy(&fb, &bb, 4);
        double xa = (double)fa - ma, xb = (double)fb - mb;
        sa += xa; sb += xb; saa += xa * xa; sbb += xb * xb; sab += xa * xb;
    }
    if (bad) return 1;
    out[0] = (double)n; out[1] = sa; out[2] = sb; out[3] = saa; out[4] = sbb; out[5] = sab;
    return 0;
}
"""

_LIB: Any = None  # None: not tried yet; False: unavailable


def _build() -> Any:
    """Compile (once, cached by source hash) and load the kernel; False when no compiler works."""
    if not settings.fused_enabled():
        return False
    cc = settings.c_compiler()
    if not cc:
        return False
    # -march=native: the cached object is only reused on a CPU with the same feature flags
    flags = ["-O3", "-march=native", "-fno-math-errno", "-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math",
             "-ffinite-math-only"]
    cpu = next((ln for ln in _cpuinfo() if ln.startswith(("flags", "Features"))), platform.machine())
    key = hashlib.sha256((_SRC + cc + " ".join(flags) + cpu).encode()).hexdigest()[:16]
    cache = settings.cache_dir()
    so = cache / f"fused_{key}.so"
    try:
        if not so.is_file():
            _compile(cc, flags, so)
        try:
            lib = ctypes.CDLL(str(so))
        except OSError:   # a cached object that does not load (cut short, copied from another host): rebuild once
            so.unlink(missing_ok=True)
            _compile(cc, flags, so)
            lib = ctypes.CDLL(str(so))
    except (OSError, subprocess.SubprocessError):
        return False
    P = ctypes.c_void_p
    lib.bf16_moments.restype = ctypes.c_int
    lib.bf16_absmax.restype = ctypes.c_int32
    lib.bf16_absmax.argtypes = [P, ctypes.c_int64]
    lib.bf16_moments.argtypes = [P, P, ctypes.c_int64, ctypes.c_int64, P]
    lib.bf16_equal_absmax.restype = ctypes.c_int32
    lib.bf16_equal_absmax.argtypes = [P, P, ctypes.c_int64]
    lib.bf16_pair.restype = ctypes.c_int
    lib.bf16_pair.argtypes = [P, P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, P, P, P,
                              P, P, P, P]
    return lib


def _compile(cc: str, flags: list, so: Path) -> None:
    """Build (``cc`` may carry arguments, as ``$CC`` often does: ``gcc -O2``) ``so`` from :data:`_SRC` in a temp folder beside it, then move it in place atomically."""
    so.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=so.parent) as tmp:
        src = Path(tmp) / "fused.c"
        src.write_text(_SRC)
        out = Path(tmp) / so.name
        try:
            subprocess.run([*shlex.split(cc), *flags, "-fPIC", "-shared", "-o", str(out), str(src), "-lm"],
                           check=True, capture_output=True, timeout=120)
        except subprocess.CalledProcessError:   # a compiler without -march=native (some aarch64 gcc)
            subprocess.run([*shlex.split(cc), *flags[:1], *flags[2:], "-fPIC", "-shared", "-o", str(out), str(src), "-lm"],
                           check=True, capture_output=True, timeout=120)
        os.replace(out, so)   # atomic: concurrent builders never load a half-written file


def _cpuinfo() -> list:
    try:
        return Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:
        return []


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


def bf16_pair(a: Any, b: Any, nrows: int, per_row: int, ncols: int, thresh: float,
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
    le = torch.zeros(8, dtype=torch.int64)
    rm, rc, cc = row_max.clone(), rows.clone(), cols.clone()
    col_prof = col_max.numel() > 1   # else a scratch profile (the kernel always writes ncols maxima)
    cm = col_max.clone() if col_prof else torch.zeros(ncols, dtype=torch.float64)
    ptr = lambda t: ctypes.c_void_p(t.data_ptr())   # noqa: E731
    bad = lib.bf16_pair(ptr(a), ptr(b), nrows, per_row, ncols, sig_key(a.dtype, thresh), ptr(le),
                        ptr(rm), ptr(cm), ptr(rc), ptr(cc), ptr(i64), ptr(f64))
    if bad:
        return None
    row_max.copy_(rm)
    if col_prof:
        col_max.copy_(cm)
    rows.copy_(rc)
    cols.copy_(cc)
    v = i64.tolist()
    n = nrows * per_row
    # ULP_BINS from the counts of u <= -17, -5, -2, -1, 0, 1, 4, 16; bin "0" holds no differing element
    l0, l1, l2, l3, _l4, l5, l6, l7 = le.tolist()
    hist += torch.tensor([l0, l1 - l0, l2 - l1, l3 - l2, 0, l5 - _l4, l6 - l5, l7 - l6, n - l7], dtype=torch.int64)
    return {"mism": v[0], "max_ulp": v[1], "max_ulp_sig": v[2], "signed": v[3:8], "pos": v[8],
            "max_abs": float(f64[0]), "dot_corr": float(f64[1]), "sq_corr": float(f64[2])}


def bf16_moments(a: Any, b: Any, first: int) -> Optional[list]:
    """``[n, Σa, Σb, Σa², Σb², Σab]`` of two flat contiguous bf16 tensors, each shifted by the mean of its
    first ``first`` elements (float64 sums); None when the kernel is unavailable or a value is non-finite."""
    import torch

    lib = kernel()
    if lib is None:
        return None
    out = torch.zeros(6, dtype=torch.float64)
    if lib.bf16_moments(ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(b.data_ptr()), a.numel(),
                        min(first, a.numel()), ctypes.c_void_p(out.data_ptr())):
        return None
    return out.tolist()


def bf16_absmax(a: Any) -> Optional[float]:
    """``max|a|`` of a flat contiguous bf16 tensor (exact: the largest magnitude bits); None when the
    kernel is unavailable, the tensor is empty or holds a non-finite value."""
    import struct

    lib = kernel()
    if lib is None or a.numel() == 0:
        return None
    m = lib.bf16_absmax(ctypes.c_void_p(a.data_ptr()), a.numel())
    return None if m < 0 else struct.unpack("<f", struct.pack("<I", m << 16))[0]


def bf16_equal_absmax(a: Any, b: Any) -> Optional[tuple]:
    """``(equal, max|a|)`` of two flat contiguous bf16 tensors in one read of each: ``(False, None)`` when
    their bits differ anywhere, ``(True, absmax)`` when equal (absmax exact: the largest magnitude bits).
    None when the kernel is unavailable, a tensor is empty, or they are equal but hold a non-finite value
    (the caller's torch path then counts the non-finite values)."""
    import struct

    lib = kernel()
    if lib is None or a.numel() == 0:
        return None
    m = lib.bf16_equal_absmax(ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(b.data_ptr()), a.numel())
    if m == -2:
        return False, None
    return None if m < 0 else (True, struct.unpack("<f", struct.pack("<I", m << 16))[0])
