"""msprobe L1 (API-level) dumps: the two sides' API call sequences aligned, their statistics compared.

msprobe's *default* level is L1: API calls only (no ``Module.*`` entries, ``construct.json`` ``{}``), often
``task: statistics`` (Max/Min/Mean/Norm per tensor, no tensors). A boundary map names modules, so it
resolves nothing there; the evidence is the ordered list of API calls of each side.

Notes:
    1. Sequence: each side's forward API entries in execution order (dump order); backward entries and
       entries without a tensor output are left out. Base op and equivalence classes from
       ``models/api_ops.yaml`` (``Tensor.__iadd__`` → ``add``; ``Functional.linear`` ≅ ``Torch.matmul``).
    2. Alignment: the kernel aligner's Needleman–Wunsch (:func:`tilake.diagnosis.kernel_align.align_layer`)
       with fused spans (``NPU.npu_rms_norm`` ↔ pow, mean, add, rsqrt, mul, mul) and equivalence classes, so
       names that differ across frameworks still pair. A fused group compares the fused call's output with
       the last call of the unfused span.
    3. Statistics: Max/Min are elements of the tensor: identical data gives identical values, so their
       difference is measured in ULPs of the tensor's dtype at that magnitude. Mean/Norm are float32 device
       reductions whose order differs between devices: identical data may differ by the reduction's own noise,
       tolerated up to :func:`reduction_tolerance` (``(log2 n + 1) · 2⁻²³`` relative, ~1e-7·log2 n); for a 16-bit
       tensor msprobe stores Mean/Norm rounded to its dtype (real msprobe 26.2 dumps), so one ULP of that dtype
       is tolerated too (two for figures merged from TP shards). Beyond
       that a statistic *differs*; the size of the difference (ULPs of the dtype) says rounding-like
       (≤ :data:`ROUNDING_ULP`) or logic-like.
    4. First divergence: the first aligned call whose output statistics differ while every earlier aligned
       call's are equal. Independent points: (a) an aligned call whose *input* statistics are equal on both
       sides while its output's differ; (b) a call whose own output statistics contradict its input's on one
       side only (an identity op that changed Max, ``x·c`` whose Max is not ``c·Max``, a monotone op whose Max
       is not ``f(Max)``) — found even downstream of the first divergence.
    5. What statistics cannot show (said in every result): equal statistics do not prove equal tensors
       (permuted or compensating errors keep Max/Min/Mean/Norm); a rounding difference below the reduction
       tolerance is invisible; which elements differ is unknown. Collect tensor mode for the named call.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from tilake.diagnosis.kernel_align import Kernel, align_layer
from tilake.diagnosis.numerics import FLOAT_FORMATS, ulp_of
from tilake.ingest.msprobe.reader import DumpSide

ROUNDING_ULP = 4.0   # a statistic off by at most this many ULPs of the tensor dtype is rounding-like
# ... or by at most this share of the tensor's scale (max |Max|, |Min|): 4 bf16 ULPs, so a float32 statistic of
# a model computing in bf16 is not called logic-like for its upstream rounding
ROUNDING_REL = 4 * 2.0 ** -8
STATS = ("Max", "Min", "Mean", "Norm")
LIMITS = ("equal statistics do not prove equal tensors (permuted or compensating errors keep Max/Min/Mean/Norm)",
          "a difference below the reduction tolerance (float32 reduction noise) is invisible",
          "which elements, rows or channels differ is unknown: collect tensor mode (msprobe task: tensor, list "
          "naming the call) for the calls named here")
_DTYPES = {str(d): d for d in FLOAT_FORMATS}


@lru_cache(maxsize=1)
def api_facts() -> dict:
    """``models/api_ops.yaml`` (equivalence classes, fused spans, identity and monotone ops)."""
    p = Path(__file__).resolve().parents[1] / "models" / "api_ops.yaml"
    return yaml.safe_load(p.read_text(encoding="utf-8"))


def base_op(api: str) -> str:
    """``Tensor.__iadd__`` → ``add``; ``Tensor.add_`` → ``add``; ``NPU.npu_rms_norm`` → ``npu_rms_norm``."""
    name = api.split(".", 1)[-1]
    m = re.match(r"^__(?:[ir](?=[a-z]{2,}__))?([a-z_]+?)__$", name)
    if m:
        name = m.group(1)
    if name.endswith("_") and not name.startswith("_"):
        name = name[:-1]
    return {"truediv": "div", "floordiv": "div", "matmul": "matmul"}.get(name, name)


@dataclass
class ApiCall:
    """One forward API call of one side: its statistics (dump.json) per tensor input and output."""

    pos: int
    entry: str
    api: str
    base: str
    inputs: List[Dict[str, Any]] = field(default_factory=list)
    scalars: List[Any] = field(default_factory=list)
    outputs: List[Dict[str, Any]] = field(default_factory=list)


def _tensors(v: Any) -> List[Dict[str, Any]]:
    if isinstance(v, dict) and "shape" in v and "dtype" in v:
        return [v]
    if isinstance(v, list):
        return [t for x in v for t in _tensors(x)]
    return []


def calls(dump: DumpSide) -> List[ApiCall]:
    """The side's forward API calls in execution order (backward and tensor-less entries left out)."""
    out: List[ApiCall] = []
    for e in sorted(dump.entries, key=lambda k: dump.order.get(k, 0)):
        if e.startswith("Module.") or ".backward" in e:
            continue
        api = dump.api_name(e)
        rec = dump.entries[e]
        outs = _tensors(rec.get("output"))
        if not api or not outs:
            continue
        ins = _tensors(rec.get("input_args")) + _tensors(list((rec.get("input_kwargs") or {}).values()))
        sc = [x.get("value") for x in (rec.get("input_args") or []) if isinstance(x, dict) and "value" in x]
        out.append(ApiCall(len(out), e, api, base_op(api), ins, sc, outs))
    return out


def is_api_level(dump: DumpSide) -> bool:
    """True for an msprobe dump without module entries (level L1: API calls only)."""
    return not any(e.startswith("Module.") for e in dump.entries) and any(dump.api_name(e) for e in dump.entries)


def _kernel(c: ApiCall) -> Kernel:
    facts = api_facts()
    equiv = next((k for k, v in (facts.get("equiv") or {}).items() if c.base in v), "")
    rep = tuple((facts.get("fused") or {}).get(c.base) or ())
    shapes = ";".join(str(t.get("shape")) for t in c.inputs[:2])
    return Kernel(pos=c.pos, name=c.api, op_type=c.base, base=c.base, fused=bool(rep), replaces=rep, equiv=equiv,
                  shapes=shapes)


def reduction_tolerance(numel: int) -> float:
    """Relative noise of a float32 device reduction over ``numel`` elements: ``(log2 n + 1) · 2⁻²³``."""
    return (math.log2(max(numel, 1)) + 1) * 2.0 ** -23


def _numel(t: Dict[str, Any]) -> int:
    return int(math.prod(int(x) for x in (t.get("shape") or [1])))


def compare_stats(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, Any]:
    """Statistics of two tensors compared (Notes 3): ``{"status": equal | differs | not_comparable, "ulp",
    "worst", "text"}``; ``ulp`` = the largest difference in ULPs of the tensor dtype at its magnitude."""
    if a.get("dtype") != b.get("dtype"):
        return {"status": "not_comparable", "ulp": None, "worst": None,
                "text": f"dtype {a.get('dtype')} vs {b.get('dtype')}: compare after the cast (tensor mode)"}
    if _numel(a) != _numel(b):
        return {"status": "not_comparable", "ulp": None, "worst": None,
                "text": f"shape {a.get('shape')} vs {b.get('shape')}: different sizes (shards? merge first)"}
    dt = _DTYPES.get(str(a.get("dtype")))
    vals = {k: (a.get(k), b.get(k)) for k in STATS if isinstance(a.get(k), (int, float)) and isinstance(b.get(k), (int, float))
            and not isinstance(a.get(k), bool)}
    if not vals:
        return {"status": "not_comparable", "ulp": None, "worst": None, "text": "no Max/Min/Mean/Norm in dump.json"}
    n = _numel(a)
    tol = reduction_tolerance(n)
    norm = max(abs(float(vals.get("Norm", (0, 0))[0])), abs(float(vals.get("Norm", (0, 0))[1])))
    # msprobe stores a 16-bit tensor's Mean/Norm rounded to that dtype (bf16 figures in real dumps): one ULP of the
    # dtype is the statistic's own rounding; two when a side's figure was merged from rounded shard figures
    own = 2.0 if (a.get("merge") or b.get("merge")) else 1.0
    worst, worst_ulp, over = None, 0.0, []
    absmax = max([abs(float(v)) for k in ("Max", "Min") if k in vals for v in vals[k]] or [0.0])
    worst_rel = 0.0
    for k, (x, y) in vals.items():
        x, y = float(x), float(y)
        if not (math.isfinite(x) and math.isfinite(y)):
            if (x == y) or (math.isnan(x) and math.isnan(y)):
                continue
            over.append(k)
            worst, worst_ulp = k, math.inf
            continue
        d = abs(x - y)
        scale = max(abs(x), abs(y))
        if k in ("Mean", "Norm"):
            ref = scale if k == "Norm" else max(scale, norm / math.sqrt(max(n, 1)))
            stored = own * ulp_of(scale, dt) if dt is not None and FLOAT_FORMATS[dt][0] <= 16 else 0.0
            if d <= max(tol * ref, stored):
                continue
        elif d == 0:
            continue
        u = d / ulp_of(scale, dt) if dt is not None else d / max(scale, 1e-30) / 2 ** -23
        worst_rel = max(worst_rel, d / absmax if absmax else math.inf)
        over.append(k)
        if u > worst_ulp:
            worst, worst_ulp = k, u
    if not over:
        return {"status": "equal", "ulp": 0.0, "rel": 0.0, "worst": None,
                "text": f"Max/Min equal, Mean/Norm within the reduction tolerance {tol:.2g} relative (or the "
                        "statistic's own dtype rounding)"}
    txt = ", ".join(f"{k} {float(vals[k][0]):.6g} vs {float(vals[k][1]):.6g}" for k in over)
    return {"status": "differs", "ulp": worst_ulp, "rel": worst_rel, "worst": worst,
            "text": f"{txt} ({worst_ulp:.3g} ULP of {str(a.get('dtype')).replace('torch.', '')} at most; "
                    f"{worst_rel:.2g} of the tensor scale)"}


def _io_equal(xs: List[Dict[str, Any]], ys: List[Dict[str, Any]]) -> Optional[bool]:
    if not xs or len(xs) != len(ys):
        return None
    res = [compare_stats(x, y)["status"] for x, y in zip(xs, ys)]
    return all(r == "equal" for r in res) if "not_comparable" not in res else None


def self_consistent(c: ApiCall) -> Optional[str]:
    """A contradiction between one call's input and output statistics, or None (Notes 4b)."""
    facts = api_facts()
    if not c.inputs or not c.outputs:
        return None
    x, y = c.inputs[0], c.outputs[0]
    if x.get("dtype") != y.get("dtype"):
        return None
    keys = [k for k in ("Max", "Min") if isinstance(x.get(k), (int, float)) and isinstance(y.get(k), (int, float))
            and not isinstance(x.get(k), bool)]
    if len(keys) < 2:
        return None
    dt = _DTYPES.get(str(x.get("dtype")))

    def off(p: float, q: float) -> float:
        return abs(p - q) / ulp_of(max(abs(p), abs(q)), dt) if dt is not None else abs(p - q)

    exp: Optional[Tuple[float, float]] = None
    why = ""
    if c.base in (facts.get("identity") or []):
        exp, why = (float(x["Max"]), float(x["Min"])), f"{c.base} keeps its input's values"
    elif c.base in ("mul", "div") and len(c.scalars) == 1 and isinstance(c.scalars[0], (int, float)) \
            and not isinstance(c.scalars[0], bool) and c.scalars[0] != 0:
        s = float(c.scalars[0]) if c.base == "mul" else 1.0 / float(c.scalars[0])
        m = (float(x["Max"]) * s, float(x["Min"]) * s)
        exp, why = (max(m), min(m)), f"{c.base} by the scalar {c.scalars[0]}"
    elif c.base in (facts.get("monotone_increasing") or []) or c.base in (facts.get("monotone_decreasing") or []):
        import torch

        f = getattr(torch, c.base, None) or getattr(torch.nn.functional, c.base, None)
        if f is None or (c.base in ("rsqrt", "reciprocal", "log", "sqrt") and float(x["Min"]) <= 0):
            return None
        try:
            hi = float(f(torch.tensor(float(x["Max"]), dtype=torch.float64)))
            lo = float(f(torch.tensor(float(x["Min"]), dtype=torch.float64)))
        except (RuntimeError, TypeError):
            return None
        if not (math.isfinite(hi) and math.isfinite(lo)):
            return None
        exp, why = (max(hi, lo), min(hi, lo)), f"{c.base} is monotone: Max/Min map through it"
    if exp is None:
        return None
    bad = [f"{k} {float(y[k]):.6g} where {why} gives {e:.6g}" for k, e in zip(("Max", "Min"), exp)
           if off(float(y[k]), e) > ROUNDING_ULP]
    return "; ".join(bad) if bad else None


def analyze_api_sequence(dumps: Dict[str, DumpSide]) -> Dict[str, Any]:
    """Align the two sides' API calls and compare their statistics (module docstring).

    Returns:
        ``{"status": found | none | not_api_level, "calls": {side: n}, "aligned": n, "rows": [...],
        "first_divergence": {...} | None, "points": [...], "unaligned": {side: n}, "limits": [...], "text"}``.
    """
    seq = {s: calls(dumps[s]) for s in ("train", "infer")}
    if not seq["train"] or not seq["infer"]:
        return {"status": "not_api_level", "rows": [], "points": [], "first_divergence": None, "limits": list(LIMITS),
                "calls": {s: len(v) for s, v in seq.items()}, "aligned": 0, "unaligned": {},
                "text": "no forward API call with tensor statistics on one side"}
    groups = align_layer([_kernel(c) for c in seq["train"]], [_kernel(c) for c in seq["infer"]])
    rows: List[Dict[str, Any]] = []
    unaligned = {"train": 0, "infer": 0}
    for g in groups:
        if not g.train or not g.infer:
            unaligned["train" if g.train else "infer"] += len(g.train or g.infer)
            continue
        a, b = seq["train"][g.train[-1]], seq["infer"][g.infer[-1]]
        out = compare_stats(a.outputs[0], b.outputs[0])
        inp = _io_equal(seq["train"][g.train[0]].inputs, seq["infer"][g.infer[0]].inputs) \
            if len(g.train) == len(g.infer) == 1 else None
        rows.append({"train": a.entry, "infer": b.entry, "relation": g.relation, "status": out["status"],
                     "ulp": out["ulp"], "text": out["text"], "inputs_equal": inp,
                     "class": (None if out["status"] != "differs" else
                               "rounding-like" if (out["ulp"] or 0) <= ROUNDING_ULP
                               or (out.get("rel") or 0) <= ROUNDING_REL else "logic-like"),
                     "train_pos": a.pos, "infer_pos": b.pos})
    first = None
    for r in rows:
        if r["status"] == "differs":
            first = r
            break
    points = []
    for r in rows:
        if r["status"] == "differs" and (r is first or r["inputs_equal"]):
            points.append({**r, "why": "first API whose statistics differ" if r is first else
                           "its input statistics are equal on both sides, its output's differ"})
    for s in ("train", "infer"):
        other = "infer" if s == "train" else "train"
        pos_map = {r[f"{s}_pos"]: r for r in rows}
        for c in seq[s]:
            bad = self_consistent(c)
            if not bad:
                continue
            r = pos_map.get(c.pos)
            peer = seq[other][r[f"{other}_pos"]] if r else None
            if peer is not None and self_consistent(peer):
                continue   # both sides contradict alike: the op's semantics differ from our facts, not a point
            if any(p.get(s) == c.entry for p in points):
                continue
            points.append({"train": c.entry if s == "train" else (r or {}).get("train"),
                           "infer": c.entry if s == "infer" else (r or {}).get("infer"),
                           "relation": (r or {}).get("relation"), "status": "differs", "class": "logic-like",
                           "side": s, "why": f"the {s} side's own statistics contradict its input: {bad}",
                           "text": bad, "ulp": None})
    points.sort(key=lambda p: _pos(p, seq))
    n_eq = sum(1 for r in rows if r["status"] == "equal")
    n_nc = sum(1 for r in rows if r["status"] == "not_comparable")
    if first is None:
        text = (f"statistics equal on {n_eq} of {len(rows)} aligned API calls ({n_nc} not comparable: no float "
                f"statistics or different sizes; {unaligned['train']} train / {unaligned['infer']} infer calls only "
                "on one side): no divergence visible in statistics — which does not prove the tensors equal")
    else:
        where = ("" if first["inputs_equal"] else "; its inputs already differ: the sides parted in calls one of them "
                 "does not dump (a fused or custom kernel) or below the statistics' resolution")
        text = (f"first API whose statistics differ beyond the reduction tolerance: {first['train']} ↔ "
                f"{first['infer']} ({first['text']}; {first['class']}{where}); {len(points)} independent point(s)")
    return {"status": "found" if first else "none", "calls": {s: len(v) for s, v in seq.items()},
            "aligned": len(rows), "unaligned": unaligned, "rows": rows, "first_divergence": first,
            "points": points, "limits": list(LIMITS), "text": text}


def _pos(p: dict, seq: Dict[str, List[ApiCall]]) -> int:
    ent = p.get("train")
    for c in seq["train"]:
        if c.entry == ent:
            return c.pos
    return 10 ** 9
