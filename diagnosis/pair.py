"""Two dump sides seen through one boundary map, and the comparison of one boundary on them.

Memory: each side's tensor is loaded (memory-mapped), transformed, compared in streamed chunks and
released before the next boundary, so the peak is bounded by the largest tensor pair (plus any copy a
transform needs).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from tilake.diagnosis import canonical as C
from tilake.diagnosis import selectors as S
from tilake.diagnosis.canonical_quant import dequantise, quant_bound
from tilake.diagnosis.dtype_and_shape import constant_rows, downcast_check
from tilake.diagnosis.numerics import compare
from tilake.diagnosis.order import order_boundaries
from tilake.diagnosis.quant_error import bound_for, judge
from tilake.diagnosis.steps import open_sides
from tilake.diagnosis.summary_gate import summary_gate
from tilake.diagnosis.transforms import materialise
from tilake.diagnosis.weights_via_op import check as check_via_op
from tilake.errors import TilakeError
from tilake.ingest.msprobe.reader import MODULE_RE
from tilake.lake.dump_records import Pairing
from tilake.models.boundary_maps import SIDES, Boundary, BoundaryMap, expand
from tilake.vocab import NOT_COMPARED as NOT_COMPARED_W
from tilake.vocab import BoundaryStatus


class Pair:
    """Two dump sides seen through one boundary map.

    Args:
        train, infer: dump paths (root, step or rank folder).
        bmap: a loaded boundary map (:func:`tilake.diagnosis.maps.load_map`).
        pairing: optional ``{"request_index": int, "cu_seqlens": [..]}`` for row selection/unpadding.
    Attributes:
        steps: which step folder each side uses and why (:func:`tilake.diagnosis.steps.open_sides`).
    Raises:
        TilakeError: unreadable dumps, a side with 0 entries, ambiguous proc folders.
    """

    def __init__(self, train: Path, infer: Path, bmap: BoundaryMap, pairing: Optional[Pairing] = None) -> None:
        self.dumps, self.steps = open_sides(Path(train), Path(infer), bmap, pairing)
        self.dumps, tok_notes = _canonical_tokens(self.dumps, bmap, dict(pairing or {}))
        self.dumps = {s: dequantise(self.dumps[s], s) for s in SIDES}
        # what canonicalisation did, per side (TP merge, PP join, chunk join, token selection)
        self.canonical: List[dict] = [r.as_dict() for s in SIDES for r in C.records_of(self.dumps[s])]
        self.notes: List[str] = [r["text"] for r in self.canonical] + tok_notes + [f"{s}: used {c['used']} ({c['how']}) of {', '.join(c['candidates'])}"
                                 + "".join(f"; dropped {k}: {v}" for k, v in c["dropped"].items())
                                 for s, c in self.steps.items() if len(c["candidates"]) > 1]
        self.bmap = bmap
        sides = bmap.get("sides") or {}
        self.views = {s: S.SideView(self.dumps[s], (sides.get(s) or {}).get("strip_segments") or [])
                      for s in SIDES}
        self.pairing = dict(pairing or {})
        pat = (bmap.get("layers") or {}).get("pattern")
        pats = pat if isinstance(pat, dict) else {s: pat for s in SIDES}
        counts = {s: self.views[s].layer_count(pats[s]) if pats.get(s) else 0 for s in SIDES}
        self.layer_counts = counts
        self.stage_ends = {s: _ends_at_last_layer(self.views[s], pats.get(s), counts[s]) for s in SIDES}
        if counts["train"] != counts["infer"]:
            self.notes.append(f"layer count differs: train {counts['train']}, infer {counts['infer']}; "
                              "boundaries of the missing layers are evidence_missing")
        self.n_layers = max(counts.values())
        self.dims, dim_notes = S.resolve_dims(bmap, self.views)
        self.notes.extend(dim_notes)
        self.ref = bmap.get("reference_side", "train")
        self.other = "infer" if self.ref == "train" else "train"
        kept, na = applicable(expand(bmap, self.n_layers), self.views)
        self.boundaries, order_notes = order_boundaries(kept, self.views, self.ref)
        self.notes.extend(order_notes)
        self.weights, na_w = applicable(expand(bmap, self.n_layers, "weights"), self.views)
        # boundaries of the map this model does not have (Qwen3's q_norm in a Qwen2): left out, never evidence_missing
        self.not_applicable: List[dict] = na + na_w
        if self.not_applicable:
            names = sorted({_layerless(x["boundary"]) for x in self.not_applicable})
            self.notes.append(f"not applicable to this model (neither dump has the module): {', '.join(names)} — "
                              "left out; their consumers are compared against their inputs")
        for s in SIDES:
            self.notes.extend(f"{s}: {w}" for w in self.dumps[s].warnings)


def applicable(items: List[Boundary], views: Dict[str, S.SideView]) -> Tuple[List[Boundary], List[dict]]:
    """Split a map's expanded items into those that apply to this model and the optional ones neither dump has.

    An ``optional`` item (Qwen3's q_norm/k_norm, q/k/v biases) whose selector resolves on neither side —
    while both sides do dump modules — is *not applicable*: the architecture has no such tensor. It is left
    out, and every consumer that listed it as an input reads its inputs instead (``q_after_rope`` then
    follows ``q_proj.out`` directly), so it never blocks naming the first divergence.

    Returns:
        (kept items with rewired inputs, ``[{"boundary", "layer", "reason"}]`` for the items left out).
    """
    has_modules = {s: any(e.startswith("Module.") for e in views[s].dump.entries) for s in SIDES}
    dropped: Dict[str, Boundary] = {}
    for b in items:
        if b.optional and all(has_modules.values()) and all(_unresolvable(views[s], b.spec.get(s), s) for s in SIDES):
            dropped[b.name] = b
    if not dropped:
        return list(items), []

    def through(names: List[str], seen: Tuple[str, ...] = ()) -> List[str]:
        out: List[str] = []
        for n in names:
            if n in dropped and n not in seen:
                out.extend(through(dropped[n].inputs, seen + (n,)))
            else:
                out.append(n)
        return out

    kept = []
    for b in items:
        if b.name in dropped:
            continue
        b.inputs = list(dict.fromkeys(through(b.inputs)))
        kept.append(b)
    return kept, [{"boundary": n, "layer": b.layer,
                   "reason": "not applicable: neither dump has this module (the architecture has no such tensor)"}
                  for n, b in dropped.items()]


def _unresolvable(view: S.SideView, sel: Optional[dict], side: str) -> bool:
    if sel is None:
        return True
    try:
        S.resolve(view, sel, side)
    except S.Unavailable:
        return True
    return False


def _layerless(name: str) -> str:
    """``L3.q_norm.out`` → ``L*.q_norm.out`` (one line for every layer's copy)."""
    return re.sub(r"^L\d+\.", "L*.", name)


def _canonical_tokens(dumps: dict, bmap: dict, pairing: dict):
    """Both sides cut to the same request's token rows (:func:`tilake.diagnosis.canonical.select_tokens`)."""
    from tilake.diagnosis.token_ids import read_ids

    sides = bmap.get("sides") or {}
    ids = {s: read_ids(S.SideView(dumps[s], (sides.get(s) or {}).get("strip_segments") or []), bmap, s, flat=False)
           for s in SIDES}
    return C.select_tokens(dumps, ids, C.find_positions(dumps["infer"]), pairing)


def _ends_at_last_layer(view: S.SideView, pattern: Optional[str], n_layers: int) -> bool:
    """True when no forward module runs after the first layer except inside layers: the side is a
    pipeline stage before the last (no final norm / output layer). Recomputed forwards during backward
    stay inside layers, so they do not count."""
    if not pattern or n_layers <= 0:
        return False
    rx = re.compile(re.escape("Module." + pattern).replace(r"\{i\}", r"\d+"))
    mods = []  # (call order, normalised name, module path) of first-call forwards (later micro-batches excluded)
    for e in view.dump.entries:
        m = MODULE_RE.match(view.normalise(e))
        if m and m.group("dir") == "forward" and m.group("call") == "0":
            mods.append((view.dump.order[e], m.group(0), m.group("path")))
    in_layer = [o for o, n, _p in mods if rx.search(n)]
    if not in_layer:
        return False
    first = min(in_layer)
    return not [n for o, n, p in mods if o > first and not rx.search(n) and not pattern.startswith(p + ".")]


def _unify(a, b, notes: List[str]):
    """Drop size-1 dims when that is all that separates two shapes (``[1,8,64]`` vs ``[8,64]``)."""
    if tuple(a.shape) == tuple(b.shape):
        return a, b
    sa = [d for d in a.shape if d != 1]
    sb = [d for d in b.shape if d != 1]
    if sa == sb and a.dim() > 0 and b.dim() > 0:
        notes.append(f"shapes unified by dropping size-1 dims: {list(a.shape)} vs {list(b.shape)} → {sa}")
        return a.reshape(sa), b.reshape(sb)
    return a, b


def _select_request(tens: Dict[str, Any], pairing: dict, notes: List[str]) -> None:
    """Cut the paired request out of a batched inference tensor when the pairing says where it is.

    ``request_tokens: [a, b]`` slices rows ``a:b`` of a token-major ``[T, ...]`` inference tensor that
    has more rows than the training one (continuous batching); ``request_index: i`` selects row ``i``
    of a ``[B, ...]`` inference tensor whose other dims match the training tensor.

    Raises:
        TilakeError: the rows ``a:b`` or the row ``i`` lie outside that inference tensor.
    """
    t, r = tens.get("infer"), tens.get("train")
    if t is None or r is None or t.dim() == 0:
        return
    rs = [d for d in r.shape if d != 1] if r.dim() else []
    rng, idx = pairing.get("request_tokens"), pairing.get("request_index")
    # a leading dim > 1 is the token dim of a [T(, H)] tensor, or the batch dim of a [B, S, ...] one: a row
    # outside it is the user's mistake (when both options are given, each checks its own kind of tensor)
    token_major = t.dim() >= 1 and t.shape[0] > 1 and (t.dim() <= 2 or (rs and t.shape[0] > rs[0] and idx is None))
    if rng and token_major and int(rng[1]) > t.shape[0]:
        raise TilakeError(f"--request-tokens {rng[0]}:{rng[1]} reaches past the inference tensor's {t.shape[0]} "
                          f"token rows (shape {list(t.shape)})")
    if idx is not None and t.dim() >= 2 and t.shape[0] > 1 and not (rng and token_major) and not 0 <= int(idx) < t.shape[0]:
        raise TilakeError(f"--request-index {idx} is outside the inference tensor's first dimension of "
                          f"{t.shape[0]} (shape {list(t.shape)})")
    if rng and t.dim() >= 1 and rs and t.shape[0] > rs[0]:
        a, b = int(rng[0]), int(rng[1])
        tens["infer"] = t[a:b]
        notes.append(f"infer: request tokens [{a}:{b}] of {list(t.shape)}")
        return
    if idx is not None and t.dim() >= 2 and t.shape[0] > 1 and [d for d in t.shape[1:] if d != 1] == rs:
        tens["infer"] = t[int(idx)]
        notes.append(f"infer: request row {idx} of batch {list(t.shape)}")


def _padded_vs_packed(a, b) -> bool:
    """True when one tensor looks padded ``[B>1, S, ...]`` and the other packed ``[T, ...]``/``[1, T, ...]``."""
    def packed(t):
        return t.reshape(-1, *t.shape[-1:]) if t.dim() >= 2 else None

    for x, y in ((a, b), (b, a)):
        if x.dim() >= 3 and x.shape[0] > 1:
            py = packed(y.squeeze(0) if y.dim() >= 3 and y.shape[0] == 1 else y)
            if py is not None and py.dim() == 2 and py.shape[-1] == x.shape[-1] \
                    and py.shape[0] <= x.shape[0] * x.shape[1] and py.shape[0] != x.shape[0] * x.shape[1]:
                return True
    return False


def compare_boundary(pair: Pair, b: Boundary, round_no: int = 0) -> dict:
    """Run the exact gate and ULP quantification on one boundary. Never raises for bad data.

    Returns:
        a ``boundary_results`` row (dict): name, position, layer, op, status, reason, both sides'
        sources/transforms/shapes/dtypes, and the :func:`tilake.diagnosis.numerics.compare` figures.
    """
    row: Dict[str, Any] = {"round": round_no, "boundary": b.name, "position": b.position, "layer": b.layer,
                           "op": b.op, "inputs": list(b.inputs), "notes": [], "other_side": pair.other}
    ctx = {s: dict(pair.pairing) for s in SIDES}
    res = {}
    for s in SIDES:
        try:
            res[s] = S.resolve(pair.views[s], b.spec[s], s)
        except S.Unavailable as exc:
            reason = exc.reason
            if b.reason_missing:
                reason = f"{reason} ({b.reason_missing})"
            if b.layer is None and b.position > 0 and pair.stage_ends[s]:
                reason = (f"not in this {s} dump: it ends at layer {pair.layer_counts[s] - 1} (a pipeline stage "
                          f"before the last: no final norm or output layer), not missing from the model — {reason}")
            row.update(status=BoundaryStatus.EVIDENCE_MISSING, reason=reason)
            return row
    for s in SIDES:
        row[f"{s}_source"] = res[s].description
        row[f"{s}_transforms"] = [str(t) for t in res[s].transforms]
        row[f"{s}_exec_order"] = min(x.exec_order for x in res[s].slots)
        row[f"{s}_files"] = [x.data_name for x in res[s].slots]
    # a tensor-mode dump with a lost .pt stays MISSING; a statistics dump may name files it never wrote
    summary = summary_gate(res, lambda s, sl: pair.dumps[s].meta.get("task") != "statistics"
                           or pair.dumps[s].pt_path(sl).is_file())
    if summary is not None:
        row.update(summary)
        return row
    # materialise the side without an "auto" layout first (the other may need it for its scan)
    order = sorted(SIDES, key=lambda s: any(("qkv_part" in t or "qkv_to_concat" in t or "gate_up_part" in t) if isinstance(t, dict) else False
                                              for t in res[s].transforms))
    tens: Dict[str, Any] = {}
    try:
        for s in order:
            other = tens.get("infer" if s == "train" else "train")
            t, notes = materialise(pair.views[s], res[s], pair.dims, ctx[s], other)
            tens[s] = t
            row["notes"].extend(f"{s}: {n}" for n in notes)
            if ctx[s].get("_scans"):
                row["layout_scan"] = ctx[s]["_scans"]
    except TilakeError as exc:
        row.update(status=BoundaryStatus.MISSING, reason=str(exc))
        return row
    except S.Unavailable as exc:
        row.update(status=exc.status, reason=exc.reason)
        return row
    except Exception as exc:  # noqa: BLE001 - a tensor kind no transform expects: never a traceback
        row.update(status=BoundaryStatus.EVIDENCE_MISSING, reason=f"not comparable: {type(exc).__name__}: {str(exc)[:200]}")
        return row
    _select_request(tens, pair.pairing, row["notes"])
    a, o = tens[pair.ref], tens[pair.other]
    for s in SIDES:
        row[f"{s}_shape"] = list(tens[s].shape)
        row[f"{s}_dtype"] = str(tens[s].dtype)
    a, o = _unify(a, o, row["notes"])
    if tuple(a.shape) != tuple(o.shape):
        if _padded_vs_packed(a, o):
            row.update(status=BoundaryStatus.EVIDENCE_MISSING,
                       reason=f"padded vs packed tensors ({list(tens['train'].shape)} vs "
                              f"{list(tens['infer'].shape)}) and no attention mask or cu_seqlens to "
                              "remove the padding: refusing to compare padded tensors")
        else:
            ti, tt = tens["infer"], tens["train"]
            hint = ""
            if ti.dim() >= 1 and tt.dim() >= 1 and ti.shape[1:] == tt.shape[1:] and ti.shape[0] > tt.shape[0]:
                hint = (f"; the infer side holds {ti.shape[0]} token rows, the train side {tt.shape[0]}: pass "
                        f"--request-tokens 0:{tt.shape[0]} (the request's rows in the inference batch)")
            row.update(status=BoundaryStatus.SHAPE_DIFF,
                       reason=f"not comparable: shape {list(tt.shape)} (train) vs {list(ti.shape)} (infer) "
                              "after canonicalisation and the map's transforms" + hint + " — "
                              + C.shape_transform(list(tt.shape), list(ti.shape)))
        return row
    bound = float((pair.bmap.get("classification") or {}).get("rounding_max_tensor_ulp", 4))
    try:
        r = compare(a, o, bound=bound)
        if r["status"] == BoundaryStatus.DTYPE_DIFF:
            row["downcast"] = downcast_check(a, o, pair.ref, pair.other, bound)
        if r["status"] != BoundaryStatus.EXACT:
            row["constant_rows"] = constant_rows({pair.ref: a, pair.other: o})
    except Exception as exc:  # a tensor kind we cannot compare: never crash the whole analysis
        row.update(status=BoundaryStatus.EVIDENCE_MISSING, reason=f"comparison failed: {type(exc).__name__}: {exc}")
        return row
    row.update(r)
    # share of elements bitwise equal, beside max ULP: a small aggregate can hide a 100 % element mismatch
    row["equality_rate"] = (1.0 - float(r["mismatch_fraction"])) if r.get("mismatch_fraction") is not None else None
    if r["status"] == BoundaryStatus.NOT_EXACT:   # a quantised linear's output: judged against its quantisation error
        for s in SIDES:
            got = bound_for(pair, s, res[s], pair.dims, ctx[s], tuple(a.shape))
            if got is not None:
                row["quant_error"] = judge(row, a, o, got[0], got[1], bound)
                break
    if r["status"] == BoundaryStatus.DTYPE_DIFF:
        row["reason"] = f"dtype {tens['train'].dtype} (train) vs {tens['infer'].dtype} (infer)"
        if row.get("downcast"):
            row["reason"] += "; " + row["downcast"]["text"]
    elif r["status"] == BoundaryStatus.NONFINITE:
        row["reason"] = f"{r['nonfinite_one_sided']} non-finite values on one side only"
    else:
        row["reason"] = None
    del tens, a, o
    return row


def compare_weights(pair: Pair) -> List[dict]:
    """Exact gate on the map's weight boundaries (hypothesis "weights not in sync")."""
    rows = []
    for w in pair.weights:
        r = compare_boundary(pair, w)
        r["kind"] = "weight"
        for s in SIDES:   # a dequantised side: the difference is judged against the quantisation step
            entry = (r.get(f"{s}_source") or "").split(" ")[0]
            qb = quant_bound(pair.dumps[s], entry) if entry else None
            if qb is not None and r["status"] in (BoundaryStatus.NOT_EXACT, BoundaryStatus.EXACT):
                mad = float(r.get("max_abs_diff") or 0.0)
                # half a step plus the bf16/fp16 rounding of the dequantised value
                lim = qb * (1 + 2 ** -7) + float(r.get("ref_absmax") or 0) * 2 ** -8
                r["quantisation"] = {"side": s, "bound": lim, "max_abs_diff": mad, "within": mad <= lim}
        if r["status"] == BoundaryStatus.DTYPE_DIFF:
            lc = loading_cast(pair, w)
            if lc is not None:
                r["downcast"] = lc
        if r["status"] in NOT_COMPARED_W or r["status"] == BoundaryStatus.SHAPE_DIFF:
            via = check_via_op(pair, w)
            if via is not None:
                r["via_op"] = via
        for k in ("row_indices_differing",):
            r.pop(k, None)
        rows.append(r)
    return rows


def loading_cast(pair: Pair, w: Boundary) -> Optional[dict]:
    """A weight stored in two dtypes, compared as loading made it: the reference cast into the other side's
    dtype (an fp16 rollout loads the bf16 trainer's weights with ``.to(float16)``).

    Values the other dtype cannot hold (bf16 values below fp16's normal range, or beyond its maximum) are
    counted as part of the dtype finding, never as a sync finding. When the cast that way does not give
    the other side's tensor, the opposite cast is tried (both loaded from a wider checkpoint: double rounding
    leaves at most 1 ULP of the narrower mantissa).

    Returns:
        a ``downcast``-shaped dict (``exact``, ``to``, ``text``, ``unrepresentable``) or None (not two floats).
    """
    import torch

    from tilake.diagnosis.numerics import FLOAT_FORMATS

    t: Dict[str, Any] = {}
    for s in SIDES:
        try:
            res = S.resolve(pair.views[s], w.spec[s], s)
            t[s], _n = materialise(pair.views[s], res, pair.dims, {}, None)
        except (S.Unavailable, TilakeError):
            return None
    a, o = t[pair.ref], t[pair.other]
    if a.dtype not in FLOAT_FORMATS or o.dtype not in FLOAT_FORMATS or a.shape != o.shape:
        return None
    name = {d: str(d).replace("torch.", "") for d in (a.dtype, o.dtype)}
    cast = a.to(o.dtype)
    lossy = int((cast.to(a.dtype) != a).sum())
    if torch.equal(cast, o):
        note = (f"; {lossy} {name[a.dtype]} values are not representable in {name[o.dtype]} (part of the dtype "
                "finding)" if lossy else "")
        return {"to": str(o.dtype), "exact": True, "unrepresentable": lossy, "direction": "reference_to_other",
                "text": f"equal after the cast loading does ({pair.ref} {name[a.dtype]} → {name[o.dtype]}){note}"}
    back = o.to(a.dtype)
    off = int((back != a).sum())
    if off and bool(((back.double() - a.double()).abs() <= _ulp_t(a)).all()):
        return {"to": str(a.dtype), "exact": True, "unrepresentable": off, "direction": "other_to_reference",
                "text": f"equal within double rounding after casting {pair.other} {name[o.dtype]} → {name[a.dtype]} "
                        f"({off} elements 1 ULP apart: both loaded from a wider checkpoint)"}
    return {"to": str(o.dtype), "exact": off == 0, "unrepresentable": lossy, "direction": "reference_to_other",
            "text": f"not the {pair.ref} weight in {name[o.dtype]}: {int((cast != o).sum())} elements differ after "
                    f"the cast loading does ({name[a.dtype]} → {name[o.dtype]})"}


def _ulp_t(t):
    """Per-element ULP of a float tensor in its own dtype (float64)."""
    from tilake.diagnosis.weights_via_op import _ulp

    return _ulp(t.double(), t.dtype)
