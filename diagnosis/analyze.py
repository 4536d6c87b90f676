"""Per-boundary comparison of two msprobe dumps: exact gate, ULP, classification, first divergence,
amplification chain, hypothesis exclusion and stub rounds.

Entry point: :func:`analyze_pair` (round 0 plus any stub rounds) → :class:`Analysis`.

Vocabulary (shared/ARCHITECTURE.md): status EXACT / NOT_EXACT / SHAPE_DIFF / DTYPE_DIFF /
NONFINITE / MISSING / evidence_missing; class rounding-level / logic-level; first divergence;
amplification chain; independent difference point; round (stub iteration).

Memory: boundaries are processed one at a time; each side's tensor is loaded (memory-mapped),
transformed, compared in streamed chunks and released before the next boundary, so the peak is
bounded by the largest tensor pair (plus any copy a transform needs).
"""
from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from tilake.errors import TilakeError
from tilake.diagnosis import maps as M
from tilake.diagnosis.numerics import compare, torch_threads
from tilake.ingest.msprobe.reader import DumpSide

NOT_COMPARED = ("evidence_missing", "MISSING")


@dataclass
class RoundInput:
    """The dumps of one round (round 0 = the original pair; round k = after stub k)."""

    train: Path
    infer: Path


@dataclass
class Analysis:
    """Everything one analysis found (serialised by :mod:`tilake.diagnosis.outputs`)."""

    map_name: str
    reference_side: str
    rounds: List[dict] = field(default_factory=list)
    boundary_rows: List[dict] = field(default_factory=list)
    weight_rows: List[dict] = field(default_factory=list)
    points: List[dict] = field(default_factory=list)
    hypotheses: List[dict] = field(default_factory=list)
    stub_instruction: Optional[dict] = None
    verdict: str = "not_run"
    consistency: str = "unknown"
    verdict_reason: str = ""
    notes: List[str] = field(default_factory=list)
    sides: Dict[str, dict] = field(default_factory=dict)
    dims: Dict[str, int] = field(default_factory=dict)
    layout_scans: List[dict] = field(default_factory=list)
    logprob: Dict[str, Any] = field(default_factory=dict)


class Pair:
    """Two dump sides seen through one boundary map.

    Args:
        train, infer: dump paths (root, step or rank folder).
        bmap: a loaded boundary map (:func:`tilake.diagnosis.maps.load_map`).
        pairing: optional ``{"request_index": int, "cu_seqlens": [..]}`` for row selection/unpadding.
    Raises:
        TilakeError: unreadable dumps, a side with 0 entries, ambiguous proc folders.
    """

    def __init__(self, train: Path, infer: Path, bmap: dict, pairing: Optional[dict] = None) -> None:
        self.dumps = {"train": DumpSide(Path(train), "train"), "infer": DumpSide(Path(infer), "infer")}
        self.bmap = bmap
        sides = bmap.get("sides") or {}
        self.views = {s: M.SideView(self.dumps[s], (sides.get(s) or {}).get("strip_segments") or [])
                      for s in M.SIDES}
        self.pairing = dict(pairing or {})
        self.notes: List[str] = []
        pat = (bmap.get("layers") or {}).get("pattern")
        pats = pat if isinstance(pat, dict) else {s: pat for s in M.SIDES}
        counts = {s: self.views[s].layer_count(pats[s]) if pats.get(s) else 0 for s in M.SIDES}
        self.layer_counts = counts
        if counts["train"] != counts["infer"]:
            self.notes.append(f"layer count differs: train {counts['train']}, infer {counts['infer']}; "
                              "boundaries of the missing layers are evidence_missing")
        self.n_layers = max(counts.values())
        self.dims, dim_notes = M.resolve_dims(bmap, self.views)
        self.notes.extend(dim_notes)
        self.boundaries = M.expand(bmap, self.n_layers)
        self.weights = M.expand(bmap, self.n_layers, "weights")
        self.ref = bmap.get("reference_side", "train")
        self.other = "infer" if self.ref == "train" else "train"
        for s in M.SIDES:
            self.notes.extend(f"{s}: {w}" for w in self.dumps[s].warnings)


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
    """
    t, r = tens.get("infer"), tens.get("train")
    if t is None or r is None or t.dim() == 0:
        return
    rs = [d for d in r.shape if d != 1] if r.dim() else []
    rng = pairing.get("request_tokens")
    if rng and t.dim() >= 1 and rs and t.shape[0] > rs[0]:
        a, b = int(rng[0]), int(rng[1])
        if b <= t.shape[0]:
            tens["infer"] = t[a:b]
            notes.append(f"infer: request tokens [{a}:{b}] of {list(t.shape)}")
            return
    idx = pairing.get("request_index")
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


def compare_boundary(pair: Pair, b: M.Boundary, round_no: int = 0) -> dict:
    """Run the exact gate and ULP quantification on one boundary. Never raises for bad data.

    Returns:
        a ``boundary_results`` row (dict): name, position, layer, op, status, reason, both sides'
        sources/transforms/shapes/dtypes, and the :func:`tilake.diagnosis.numerics.compare` figures.
    """
    row: Dict[str, Any] = {"round": round_no, "boundary": b.name, "position": b.position, "layer": b.layer,
                           "op": b.op, "inputs": list(b.inputs), "notes": []}
    ctx = {s: dict(pair.pairing) for s in M.SIDES}
    try:
        res = {s: M.resolve(pair.views[s], b.spec[s], s) for s in M.SIDES}
    except M.Unavailable as exc:
        reason = exc.reason
        if b.reason_missing:
            reason = f"{reason} ({b.reason_missing})"
        row.update(status="evidence_missing", reason=reason)
        return row
    for s in M.SIDES:
        row[f"{s}_source"] = res[s].description
        row[f"{s}_transforms"] = [str(t) for t in res[s].transforms]
        row[f"{s}_exec_order"] = min(x.exec_order for x in res[s].slots)
        row[f"{s}_files"] = [x.data_name for x in res[s].slots]
    # materialise the side without an "auto" layout first (the other may need it for its scan)
    order = sorted(M.SIDES, key=lambda s: any(("qkv_part" in t or "qkv_to_concat" in t or "gate_up_part" in t) if isinstance(t, dict) else False
                                              for t in res[s].transforms))
    tens: Dict[str, Any] = {}
    try:
        for s in order:
            other = tens.get("infer" if s == "train" else "train")
            t, notes = M.materialise(pair.views[s], res[s], pair.dims, ctx[s], other)
            tens[s] = t
            row["notes"].extend(f"{s}: {n}" for n in notes)
            if ctx[s].get("_scans"):
                row["layout_scan"] = ctx[s]["_scans"]
    except TilakeError as exc:
        row.update(status="MISSING", reason=str(exc))
        return row
    except M.Unavailable as exc:
        row.update(status=exc.status, reason=exc.reason)
        return row
    _select_request(tens, pair.pairing, row["notes"])
    a, o = tens[pair.ref], tens[pair.other]
    for s in M.SIDES:
        row[f"{s}_shape"] = list(tens[s].shape)
        row[f"{s}_dtype"] = str(tens[s].dtype)
    a, o = _unify(a, o, row["notes"])
    if tuple(a.shape) != tuple(o.shape):
        if _padded_vs_packed(a, o):
            row.update(status="evidence_missing",
                       reason=f"padded vs packed tensors ({list(tens['train'].shape)} vs "
                              f"{list(tens['infer'].shape)}) and no attention mask or cu_seqlens to "
                              "remove the padding: refusing to compare padded tensors")
        else:
            row.update(status="SHAPE_DIFF",
                       reason=f"shape {list(tens['train'].shape)} (train) vs {list(tens['infer'].shape)} (infer) "
                              "after the map's transforms")
        return row
    try:
        r = compare(a, o)
    except Exception as exc:  # a tensor kind we cannot compare: never crash the whole analysis
        row.update(status="evidence_missing", reason=f"comparison failed: {type(exc).__name__}: {exc}")
        return row
    row.update(r)
    if r["status"] == "DTYPE_DIFF":
        row["reason"] = f"dtype {tens['train'].dtype} (train) vs {tens['infer'].dtype} (infer)"
    elif r["status"] == "NONFINITE":
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
        for k in ("row_indices_differing",):
            r.pop(k, None)
        rows.append(r)
    return rows


# ------------------------------------------------------------------------------ classification
def classify(row: dict, by_name: Dict[str, dict], cfg: dict, isolated: Sequence[str] = ()) -> None:
    """Set ``inputs_equal``, ``class`` and ``class_evidence`` on a compared non-EXACT row (in place).

    Rules (thresholds from the map's ``classification`` block):
      * one-sided non-finite → logic-level;
      * an ``elementwise`` op whose inputs were bitwise equal yet whose output differs →
        logic-level (an elementwise op fed identical inputs cannot produce accumulation noise);
      * tensor-scale ULP above ``rounding_max_tensor_ulp`` → logic-level;
      * whole rows / whole columns differing while the inputs were equal → logic-level;
      * otherwise rounding-level; a one-direction lean of the signed ULPs is recorded as a
        systematic-bias finding either way.
    """
    st = row.get("status")
    inp = []
    for n in row.get("inputs") or []:
        if n in isolated:
            inp.append((n, "ISOLATED"))
        else:
            inp.append((n, (by_name.get(n) or {}).get("status", "unknown")))
    row["input_statuses"] = {n: s for n, s in inp}
    row["inputs_equal"] = all(s in ("EXACT", "ISOLATED") for _n, s in inp)
    if st == "EXACT" or st in NOT_COMPARED or st == "SHAPE_DIFF":
        row["class"] = None
        return
    ev = []
    thr = float(cfg.get("rounding_max_tensor_ulp", 4))
    tu = row.get("tensor_ulp")
    cls = "rounding-level"
    if st == "NONFINITE":
        cls = "logic-level"
        ev.append("non-finite values on one side only")
    elif st == "DTYPE_DIFF":
        cls = "logic-level"
        ev.append("dtypes differ at a boundary that must agree")
    else:
        if row["inputs_equal"] and row.get("op") == "elementwise":
            cls = "logic-level"
            ev.append("elementwise op fed bitwise-equal inputs produced different outputs "
                      "(cannot be accumulation-order noise)")
        if tu is not None and tu > thr:
            cls = "logic-level"
            ev.append(f"max|diff| = {tu:.3g} ULP of max|reference| > {thr:g} ULP (rounding bound)")
        elif tu is not None:
            ev.append(f"max|diff| = {tu:.3g} ULP of max|reference| <= {thr:g} ULP")
        if row.get("pattern") in ("whole_rows", "whole_columns") and row["inputs_equal"]:
            cls = "logic-level"
            ev.append(f"differences form {row['pattern'].replace('_', ' ')} with equal inputs")
        else:
            ev.append(f"difference pattern: {row.get('pattern')} "
                      f"({row.get('mismatch_fraction', 0):.1%} of elements differ)")
    pos, neg = row.get("pos_count") or 0, row.get("neg_count") or 0
    if pos + neg >= int(cfg.get("bias_min_count", 16)) and \
            abs(pos - neg) / (pos + neg) >= float(cfg.get("bias_fraction", 0.8)):
        row["systematic_bias"] = True
        ev.append(f"systematic bias: {pos} elements up vs {neg} down (signed mean "
                  f"{row.get('signed_mean_ulp', 0):+.3g} ULP)")
    else:
        row["systematic_bias"] = False
    row["class"] = cls
    row["class_evidence"] = ev


def first_divergence(rows: List[dict]) -> dict:
    """The first non-EXACT boundary whose predecessors (all earlier boundaries) are all EXACT.

    Returns:
        ``{"boundary": name | None, "status": "found" | "none" | "undetermined", "reason": str,
        "first_non_exact": name | None, "uncompared_predecessors": [...]}``. When an earlier
        boundary was not compared the first divergence is *undetermined* and the reason says which.
    """
    uncompared = []
    for r in sorted(rows, key=lambda x: x["position"]):
        st = r["status"]
        if st == "EXACT":
            continue
        if st in NOT_COMPARED:
            uncompared.append(r["boundary"])
            continue
        if uncompared:
            return {"boundary": None, "status": "undetermined", "first_non_exact": r["boundary"],
                    "uncompared_predecessors": uncompared,
                    "reason": f"{r['boundary']} is the first non-EXACT compared boundary, but "
                              f"{len(uncompared)} earlier boundar{'y was' if len(uncompared) == 1 else 'ies were'} "
                              f"not compared ({', '.join(uncompared[:3])}{'…' if len(uncompared) > 3 else ''}), "
                              "so it cannot be named the first divergence"}
        return {"boundary": r["boundary"], "status": "found", "first_non_exact": r["boundary"],
                "uncompared_predecessors": [], "reason": "every earlier boundary is EXACT"}
    if uncompared:
        return {"boundary": None, "status": "undetermined", "first_non_exact": None,
                "uncompared_predecessors": uncompared,
                "reason": f"no compared boundary differs, but {len(uncompared)} were not compared"}
    return {"boundary": None, "status": "none", "first_non_exact": None, "uncompared_predecessors": [],
            "reason": "every boundary is EXACT"}


def amplification_chain(rows: List[dict], start: Optional[str]) -> List[dict]:
    """From ``start`` downstream: max|diff|, tensor-scale ULP and growth factor vs ``start``."""
    if not start:
        return []
    rs = sorted(rows, key=lambda x: x["position"])
    first = next(r for r in rs if r["boundary"] == start)
    base = first.get("max_abs_diff") or 0.0
    out = []
    for r in rs:
        if r["position"] < first["position"] or r["status"] in NOT_COMPARED or r["status"] == "SHAPE_DIFF":
            continue
        m = r.get("max_abs_diff")
        out.append({"boundary": r["boundary"], "position": r["position"], "status": r["status"],
                    "max_abs_diff": m, "tensor_ulp": r.get("tensor_ulp"),
                    "growth_vs_first": (m / base) if (m is not None and base) else None})
    return out


def find_points(rows: List[dict], cfg: dict, round_no: int, isolated: Sequence[str]) -> Tuple[List[dict], List[dict]]:
    """Independent difference points of one round, and downstream suspects.

    A point = a compared non-EXACT boundary whose declared inputs are all EXACT (or isolated by a
    stub). A suspect = a non-EXACT boundary with non-equal inputs whose tensor-scale ULP grew by
    more than ``jump_factor`` over its worst input and exceeds the rounding bound: a second
    independent difference may hide there, which only a stub round can confirm.
    """
    by = {r["boundary"]: r for r in rows}
    pts, sus = [], []
    thr = float(cfg.get("rounding_max_tensor_ulp", 4))
    jf = float(cfg.get("jump_factor", 8))
    for r in sorted(rows, key=lambda x: x["position"]):
        if r["status"] in ("EXACT",) + NOT_COMPARED or r["status"] == "SHAPE_DIFF":
            continue
        if r.get("inputs_equal"):
            pts.append({"round": round_no, "boundary": r["boundary"], "position": r["position"],
                        "train_source": r.get("train_source"), "infer_source": r.get("infer_source"),
                        "class": r.get("class"), "evidence": r.get("class_evidence", []),
                        "status": r["status"], "max_abs_diff": r.get("max_abs_diff"),
                        "tensor_ulp": r.get("tensor_ulp"), "pattern": r.get("pattern")})
            continue
        tu = r.get("tensor_ulp") or 0.0
        worst = max([(by.get(n) or {}).get("tensor_ulp") or 0.0 for n in r.get("inputs") or []] or [0.0])
        if tu > thr and (worst == 0 or tu > jf * worst):
            sus.append({"round": round_no, "boundary": r["boundary"], "tensor_ulp": tu,
                        "worst_input_tensor_ulp": worst,
                        "reason": f"tensor-scale ULP {tu:.3g} vs {worst:.3g} at its inputs (> {jf:g}×)"})
    return pts, sus


# ------------------------------------------------------------------------------ hypotheses
def _scalar_kwargs(dump: DumpSide, entry: str) -> Dict[str, Any]:
    e = dump.entries.get(entry) or {}
    out = {}
    for k, v in (e.get("input_kwargs") or {}).items():
        if isinstance(v, dict) and "value" in v:
            out[k] = v["value"]
    return out


def hypotheses(pair: Pair, rows: List[dict], weights: List[dict], fd: dict, task_card: dict) -> List[dict]:
    """Hypothesis exclusion, each with status (excluded | confirmed | evidence_missing) and evidence."""
    out = []
    # weights
    cmp = [w for w in weights if w["status"] not in NOT_COMPARED]
    bad = [w for w in cmp if w["status"] != "EXACT"]
    miss = [w for w in weights if w["status"] in NOT_COMPARED]
    if not cmp:
        out.append({"hypothesis": "weights not in sync", "status": "evidence_missing",
                    "evidence": ["no weight boundary could be compared"] + [f"{w['boundary']}: {w.get('reason')}" for w in miss[:3]]})
    elif bad:
        out.append({"hypothesis": "weights not in sync", "status": "confirmed",
                    "evidence": [f"{w['boundary']}: {w['status']}, {w.get('mismatch_count')} elements differ "
                                 f"({w.get('rows_differing')} of {w.get('rows_total')} rows), pattern {w.get('pattern')}"
                                 for w in bad]})
    else:
        ev = [f"{len(cmp)} weight tensors bitwise equal (fused qkv/gate_up weights sliced by rows)"]
        ev += [f"not compared: {w['boundary']} — {w.get('reason')}" for w in miss]
        out.append({"hypothesis": "weights not in sync", "status": "excluded", "evidence": ev})
    # inputs / padding
    emb = next((r for r in rows if r["boundary"] == (pair.bmap.get("layer_input") or {}).get("first")), None)
    pad_notes = sorted({n for r in rows for n in r.get("notes", []) if "unpad" in n or "unified" in n})
    if emb and emb["status"] == "EXACT":
        ev = [f"first boundary {emb['boundary']} is bitwise EXACT (same token ids reach both models)"]
        ev += pad_notes[:3] or ["no padding removal was needed (no padded tensors)"]
        out.append({"hypothesis": "inputs not aligned / padding not removed", "status": "excluded", "evidence": ev})
    else:
        out.append({"hypothesis": "inputs not aligned / padding not removed",
                    "status": "confirmed" if emb and emb["status"] not in NOT_COMPARED else "evidence_missing",
                    "evidence": [f"first boundary: {emb['status'] if emb else 'absent'} — {(emb or {}).get('reason')}"]})
    # configs: dims from both sides' parameter shapes
    shape_bad = [w for w in weights if w["status"] == "SHAPE_DIFF"]
    if shape_bad:
        out.append({"hypothesis": "model configs not equivalent", "status": "confirmed",
                    "evidence": [f"{w['boundary']}: {w.get('reason')}" for w in shape_bad]})
    elif cmp:
        out.append({"hypothesis": "model configs not equivalent", "status": "excluded",
                    "evidence": [f"layer count {pair.layer_counts['train']} vs {pair.layer_counts['infer']}; "
                                 f"dims {pair.dims}; every compared weight has the same shape after slicing",
                                 "structural differences (fused vs separate projections, fused residual add) "
                                 "are mapped by the boundary map as mathematically equivalent"]})
    else:
        out.append({"hypothesis": "model configs not equivalent", "status": "evidence_missing",
                    "evidence": ["no weight shapes to compare"]})
    # parallel layout
    tp = {s: (task_card.get("parallel") or {}).get(s) for s in M.SIDES}
    if all(tp.values()) and "unknown" not in tp.values():
        st = "excluded" if tp["train"] == tp["infer"] else "confirmed"
        out.append({"hypothesis": "parallel layout differs", "status": st,
                    "evidence": [f"train {tp['train']} vs infer {tp['infer']} (task card)"]})
    else:
        out.append({"hypothesis": "parallel layout differs", "status": "evidence_missing",
                    "evidence": ["TP/PP/EP of the sides not supplied (task card says unknown); "
                                 f"dumps are single rank folders: train {pair.dumps['train'].dir.name}, "
                                 f"infer {pair.dumps['infer'].dir.name}"]})
    # kernel fingerprint of the first divergence
    if fd.get("boundary"):
        r = next(x for x in rows if x["boundary"] == fd["boundary"])
        fp = {}
        for s in M.SIDES:
            src = (r.get(f"{s}_source") or "").split(" ")[0]
            fp[s] = kernel_fingerprint(pair, s, src)
        ev = [f"{s}: {', '.join(fp[s]) or 'no API entries dumped'}" for s in M.SIDES]
        if r.get("class") == "rounding-level":
            out.append({"hypothesis": "fused kernel / accumulation order", "status": "confirmed",
                        "evidence": ev + ["first divergence is rounding-level with bitwise-equal inputs: "
                                          "different kernels, expected floating-point difference"]})
        else:
            out.append({"hypothesis": "fused kernel / accumulation order", "status": "excluded",
                        "evidence": ev + [f"first divergence is {r.get('class')}: beyond kernel rounding"]})
    else:
        out.append({"hypothesis": "fused kernel / accumulation order", "status": "evidence_missing",
                    "evidence": [fd.get("reason", "no first divergence")]})
    # randomness
    drops = []
    for s in M.SIDES:
        d = pair.dumps[s]
        for e in d.entries:
            if d.api_name(e) in ("Functional.dropout", "Torch.dropout", "Functional.dropout2d"):
                kw = _scalar_kwargs(d, e)
                drops.append((s, e, kw.get("p"), kw.get("training")))
    active = [x for x in drops if x[2] not in (0, 0.0) and x[3] not in (False, None)]
    if active:
        out.append({"hypothesis": "randomness (dropout, sampling)", "status": "confirmed",
                    "evidence": [f"{s}: {e} p={p} training={t}" for s, e, p, t in active[:5]]})
    else:
        ev = [f"{len(drops)} dropout calls, all p=0 or training=False"] if drops else ["no dropout API dumped"]
        if fd.get("status") in ("found", "none"):
            ev.append("single request, deterministic prefill, and every boundary before the first divergence is EXACT")
            out.append({"hypothesis": "randomness (dropout, sampling)", "status": "excluded", "evidence": ev})
        else:
            out.append({"hypothesis": "randomness (dropout, sampling)", "status": "evidence_missing", "evidence": ev})
    return out


def kernel_fingerprint(pair: Pair, side: str, entry: str) -> List[str]:
    """API names (counters removed) dumped anywhere under the module that holds ``entry``.

    The producing code of a boundary differs between sides (eager softmax attention: matmul +
    softmax; SDPA: one fused call); the API set is the evidence of which kernels ran.
    """
    d = pair.dumps[side]
    root = d.parents.get(entry) or entry
    kids: Dict[str, List[str]] = {}
    for k, p in d.parents.items():
        kids.setdefault(p, []).append(k)
    names: List[str] = []
    stack = [root]
    seen = set()
    while stack:
        n = stack.pop()
        for k in sorted(kids.get(n, []), key=lambda x: d.order.get(x, 0)):
            if k in seen:
                continue
            seen.add(k)
            a = d.api_name(k)
            if a and k in d.entries and a not in names:
                names.append(a)
            stack.append(k)
    return names


# ------------------------------------------------------------------------------ stubs
def stub_instruction(pair: Pair, rows: List[dict], point: dict, round_no: int,
                     previous: Optional[dict]) -> dict:
    """Build ``stub_instruction.json`` for isolating ``point`` (the next round = ``round_no + 1``).

    Target side = the non-reference side when the map has a stub for it, else the reference side.
    Each module item names the target entry, the target input slot and file name msprobe's
    ``load`` expects (``<entry>.input.<i>.pt``, source: msprobe-format.md §8), the source ``.pt``
    files, and the transform to apply. Previous rounds' modules stay in (``cumulative``).
    """
    b = next(x for x in pair.boundaries if x.name == point["boundary"])
    target = next((s for s in (pair.other, pair.ref) if s in (b.stub or {})), None)
    base = {"round": round_no + 1, "isolate_boundary": {"name": b.name,
            "train": next((r.get("train_source") for r in rows if r["boundary"] == b.name), None),
            "infer": next((r.get("infer_source") for r in rows if r["boundary"] == b.name), None)},
            "class": point.get("class")}
    if target is None:
        base.update(needed=True, available=False, modules=[],
                    reason=f"no module consumes {b.name} in the map's stub section (msprobe load overrides "
                           "module inputs only): this point cannot be isolated; downstream stays evidence_missing")
        return base
    source = "train" if target == "infer" else "infer"
    spec = b.stub[target]
    tview, sview = pair.views[target], pair.views[source]
    entry = tview.module_entry(spec["module"]) or f"Module.{spec['module']}.forward.0"
    items = []
    for idx, sel in (spec.get("inputs") or {}).items():
        try:
            res = M.resolve(sview, sel, source)
            files = [str(pair.dumps[source].pt_path(s)) for s in res.slots]
        except (M.Unavailable, TilakeError) as exc:
            files, res = [], None
            base.setdefault("warnings", []).append(f"input {idx}: {exc}")
        items.append({"target_entry": entry, "target_input": int(idx),
                      "target_file": f"{entry}.input.{idx}.pt",
                      "source_pt": files, "source_selector": sel,
                      "combine": res.combine if res else None,
                      "transform": [str(t) for t in (sel.get("transforms") or [])],
                      "dump_after_load": True})
    prev_mods = (previous or {}).get("modules_all", [])
    all_mods = prev_mods + [m for m in items if m["target_entry"] not in {p["target_entry"] for p in prev_mods}]
    d = pair.dumps[target]
    base.update(
        needed=True, available=True, source_side=source, target_side=target, modules=items,
        modules_all=all_mods,
        dump_after_load=True,
        msprobe_config={"task": "tensor", "level": "mix", "step": [d.step or 0],
                        "load": {"path": "<stub source dir written by `tilake dumps stub-prepare`>",
                                 "modules": sorted({m["target_entry"] for m in all_mods}),
                                 "step": [], "rank": [], "dump_after_load": True}},
        expected=(f"in round {round_no + 1} the {target} side's {entry} input(s) equal the {source} side's "
                  f"{b.name} bitwise (stub took effect); boundaries after {b.name} are then compared: "
                  "all EXACT → this was the only independent difference; remaining logic-level → the next "
                  "independent point; only rounding-level → stop"))
    return base


def prepare_stub_source(pair: Pair, instruction: dict, out_dir: Path) -> List[Path]:
    """Write the transformed source tensors where msprobe ``load`` looks for them.

    Layout: ``<out>/step{S}/rank{R}/dump_tensor_data/<target_entry>.input.<i>.pt`` (the target
    side's step and rank folder name; a ``proc*`` name for non-distributed runs, where msprobe takes
    the first ``proc*`` folder it finds).

    Raises:
        TilakeError: the instruction is not available or a source file cannot be read.
    """
    import torch

    if not instruction.get("available"):
        raise TilakeError("this stub instruction cannot be applied: " + str(instruction.get("reason")))
    target, source = instruction["target_side"], instruction["source_side"]
    td = pair.dumps[target]
    # msprobe load reads step{S}/rank{R}/ for distributed runs and the first proc*/ folder otherwise
    d = Path(out_dir) / f"step{td.step or 0}" / (td.proc or f"rank{td.rank or 0}") / "dump_tensor_data"
    d.mkdir(parents=True, exist_ok=True)
    written = []
    for m in instruction.get("modules_all") or instruction["modules"]:
        res = M.resolve(pair.views[source], m["source_selector"], source)
        t, _notes = M.materialise(pair.views[source], res, pair.dims, dict(pair.pairing))
        p = d / m["target_file"]
        torch.save(t.contiguous().clone(), str(p))
        written.append(p)
    return written


def verify_stub(pair_k: Pair, instruction: dict) -> dict:
    """Round k check: each stubbed module input on the target side equals the source tensor bitwise."""
    import torch

    target, source = instruction["target_side"], instruction["source_side"]
    checks = []
    ok = True
    for m in instruction.get("modules_all") or instruction["modules"]:
        tv = pair_k.views[target]
        entry = tv.module_entry(m["target_entry"].split("Module.", 1)[1].rsplit(".forward.", 1)[0])
        slot = pair_k.dumps[target].slot(entry, "input", str(m["target_input"])) if entry else None
        if slot is None:
            checks.append({"module": m["target_entry"], "input": m["target_input"], "equal": False,
                           "reason": "stubbed module input not in the round's dump"})
            ok = False
            continue
        try:
            got = pair_k.dumps[target].load(slot)
            res = M.resolve(pair_k.views[source], m["source_selector"], source)
            want, _ = M.materialise(pair_k.views[source], res, pair_k.dims, dict(pair_k.pairing))
            eq = tuple(got.shape) == tuple(want.shape) and got.dtype == want.dtype and torch.equal(got, want)
            checks.append({"module": m["target_entry"], "input": m["target_input"], "equal": bool(eq),
                           "reason": None if eq else "loaded input differs from the source tensor"})
            ok = ok and eq
        except (TilakeError, M.Unavailable) as exc:
            checks.append({"module": m["target_entry"], "input": m["target_input"], "equal": False,
                           "reason": str(exc)})
            ok = False
    return {"effective": ok, "checks": checks}


# ------------------------------------------------------------------------------ driver
def analyze_pair(rounds: Sequence[RoundInput], bmap: dict, pairing: Optional[dict] = None,
                 task_card: Optional[dict] = None, progress: Optional[Callable[[str, int, int], None]] = None,
                 logprob: Optional[dict] = None) -> Analysis:
    """Analyse round 0 and every stub round given.

    Args:
        rounds: round 0 dumps, then the dumps collected after each stub instruction.
        bmap: boundary map. pairing: request row / cu_seqlens. task_card: for parallel layout.
        progress: ``callback(label, done, total)``.
        logprob: measured prefill log-prob diff ``{"mean":..,"max":..,"std":..,"source":..}`` or None.
    Returns:
        :class:`Analysis`.
    Raises:
        TilakeError: unreadable dumps (see :class:`Pair`).
    """
    with torch_threads():
        return _analyze_pair(rounds, bmap, pairing, task_card, progress, logprob)


def _analyze_pair(rounds, bmap, pairing, task_card, progress, logprob) -> Analysis:
    cfg = bmap.get("classification") or {}
    an = Analysis(map_name=Path(bmap.get("_path", "map")).stem, reference_side=bmap.get("reference_side", "train"))
    isolated: List[str] = []
    instr: Optional[dict] = None
    stop_reason = None
    all_pts: List[dict] = []
    for k, rin in enumerate(rounds):
        pair = Pair(rin.train, rin.infer, bmap, pairing)
        if k == 0:
            an.notes.extend(pair.notes)
            an.dims = pair.dims
            an.sides = {s: {"path": str(pair.dumps[s].dir), "step": pair.dumps[s].step,
                            "rank": pair.dumps[s].rank, "proc": pair.dumps[s].proc,
                            "task": pair.dumps[s].meta.get("task"), "level": pair.dumps[s].meta.get("level"),
                            "framework": pair.dumps[s].meta.get("framework", "unknown"),
                            "entries": len(pair.dumps[s].entries), "tensor_slots": len(pair.dumps[s].slots),
                            "construct_variant": pair.dumps[s].construct_variant,
                            "stack_variant": pair.dumps[s].stack_variant,
                            "layers": pair.layer_counts[s]} for s in M.SIDES}
        rinfo: Dict[str, Any] = {"round": k, "train": str(pair.dumps["train"].dir),
                                 "infer": str(pair.dumps["infer"].dir)}
        start_pos = -1
        if k > 0:
            ver = verify_stub(pair, instr)
            rinfo["stub_verification"] = ver
            rinfo["isolated"] = list(isolated)
            if not ver["effective"]:
                rinfo["outcome"] = "stub_not_effective"
                stop_reason = (f"round {k}: the stub did not take effect (isolated input not bitwise equal); "
                               "downstream boundaries were not compared")
                an.rounds.append(rinfo)
                break
            start_pos = max(b.position for b in pair.boundaries if b.name in isolated)
        todo = [b for b in pair.boundaries if b.position > start_pos]
        rows = []
        for i, b in enumerate(todo):
            if progress:
                progress(f"round {k}: {b.name}", i, len(todo))
            rows.append(compare_boundary(pair, b, k))
            gc.collect() if (i % 64 == 63) else None
        for b in pair.boundaries:
            if b.position <= start_pos:
                rows.append({"round": k, "boundary": b.name, "position": b.position, "layer": b.layer,
                             "op": b.op, "inputs": b.inputs, "notes": [],
                             "status": "ISOLATED" if b.name in isolated else "not_compared",
                             "reason": "isolated by a stub in an earlier round" if b.name in isolated
                             else "compared in an earlier round (upstream of the stub)"})
        rows.sort(key=lambda r: r["position"])
        by = {r["boundary"]: r for r in rows}
        for r in rows:
            if r["status"] in ("ISOLATED", "not_compared"):
                continue
            classify(r, by, cfg, isolated)
            for sc in r.get("layout_scan") or []:
                an.layout_scans.append({"round": k, "boundary": r["boundary"], **sc})
        cmp_rows = [r for r in rows if r["status"] not in ("ISOLATED", "not_compared")]
        fd = first_divergence(cmp_rows)
        chain = amplification_chain(cmp_rows, fd.get("boundary"))
        pts, sus = find_points(cmp_rows, cfg, k, isolated)
        pt_names, sus_names = {p["boundary"] for p in pts}, {x["boundary"] for x in sus}
        for r in cmp_rows:
            if r["status"] in ("EXACT",) + NOT_COMPARED or r["status"] == "SHAPE_DIFF":
                r["role"] = None
            else:
                r["role"] = ("independent_point" if r["boundary"] in pt_names else
                             "suspect" if r["boundary"] in sus_names else "propagated")
        for p in pts:
            p["chain"] = amplification_chain(cmp_rows, p["boundary"])[:12]
        rinfo.update(first_divergence=fd, amplification_chain=chain, points=pts, suspects=sus,
                     counts=_counts(cmp_rows))
        if k == 0:
            an.weight_rows = compare_weights(pair)
            an.hypotheses = hypotheses(pair, cmp_rows, an.weight_rows, fd, task_card or {})
        an.boundary_rows.extend(rows)
        all_pts.extend(pts)
        # decide the next round
        logic = [p for p in pts if p.get("class") == "logic-level"]
        missing = [r for r in cmp_rows if r["status"] in NOT_COMPARED]
        need = bool(fd.get("boundary")) and (bool(logic) or bool(sus))
        if fd["status"] == "none":
            rinfo["outcome"] = "downstream_all_exact" if k else "all_exact"
        elif fd["status"] == "undetermined":
            rinfo["outcome"] = "evidence_missing"
        elif need:
            rinfo["outcome"] = "stub_needed"
        else:
            rinfo["outcome"] = "only_rounding_level"
        if missing:
            rinfo["evidence_missing"] = [r["boundary"] for r in missing]
        an.rounds.append(rinfo)
        if need:
            instr = stub_instruction(pair, cmp_rows, pts[0] if pts else {"boundary": fd["boundary"]}, k, instr)
            if instr.get("available"):
                isolated.append(fd["boundary"])
            else:
                stop_reason = instr.get("reason")
        else:
            instr = None
        if instr is None or not instr.get("available"):
            break
    an.points = all_pts
    an.stub_instruction = instr if instr is not None else {
        "needed": False, "round": len(an.rounds),
        "reason": an.rounds[-1].get("outcome") if an.rounds else "not_run"}
    if stop_reason:
        an.notes.append(stop_reason)
    _verdict(an, logprob)
    return an


def _counts(rows: List[dict]) -> Dict[str, int]:
    c: Dict[str, int] = {}
    for r in rows:
        c[r["status"]] = c.get(r["status"], 0) + 1
    return c


def _verdict(an: Analysis, logprob: Optional[dict]) -> None:
    compared = [r for r in an.boundary_rows if r["status"] not in NOT_COMPARED + ("ISOLATED", "not_compared")]
    last = an.rounds[-1] if an.rounds else {}
    logic = [p for p in an.points if p.get("class") == "logic-level"]
    non_exact = [r for r in compared if r["status"] != "EXACT"]
    missing = [r for r in an.boundary_rows if r["status"] in NOT_COMPARED]
    if not compared and missing:
        an.verdict, an.consistency = "evidence_missing", "unknown"
        an.verdict_reason = (f"no boundary could be compared ({len(missing)} evidence_missing/MISSING); "
                             f"first: {missing[0]['boundary']} — {missing[0].get('reason')}")
    elif not compared:
        an.verdict, an.consistency = "not_run", "unknown"
        an.verdict_reason = "no boundary was analysed"
    elif any(r.get("first_divergence", {}).get("status") == "undetermined" for r in an.rounds) and not logic:
        an.verdict, an.consistency = "evidence_missing", "unknown"
        an.verdict_reason = next(r["first_divergence"]["reason"] for r in an.rounds
                                 if r.get("first_divergence", {}).get("status") == "undetermined")
    elif logic:
        an.verdict, an.consistency = "nonzero", "logic_level"
        an.verdict_reason = f"{len(logic)} logic-level independent difference point(s): " + \
            ", ".join(f"{p['boundary']} (round {p['round']})" for p in logic)
        if last.get("outcome") == "stub_needed" or (an.stub_instruction or {}).get("needed"):
            an.verdict_reason += "; enumeration not finished: apply stub_instruction.json and analyse the next round"
    elif [r for r in non_exact if r["status"] == "SHAPE_DIFF"]:
        sd = [r["boundary"] for r in non_exact if r["status"] == "SHAPE_DIFF"]
        an.verdict, an.consistency = "evidence_missing", "unknown"
        an.verdict_reason = (f"{len(sd)} boundar{'y has' if len(sd) == 1 else 'ies have'} different shapes after "
                             f"mapping (SHAPE_DIFF: {', '.join(sd[:3])}): values there were not compared")
    elif non_exact:
        sus = [s for r in an.rounds for s in r.get("suspects", [])]
        if sus and (an.stub_instruction or {}).get("needed"):
            an.verdict, an.consistency = "nonzero", "unknown"
            an.verdict_reason = ("rounding-level first divergence but downstream suspects remain "
                                 f"({', '.join(s['boundary'] for s in sus[:3])}); apply the stub instruction")
        else:
            an.verdict, an.consistency = "nonzero", "rounding_only"
            an.verdict_reason = ("only rounding-level differences: train and inference agree up to "
                                 "floating-point rounding (each rounding-level point is listed)")
    elif missing:
        an.verdict, an.consistency = "evidence_missing", "unknown"
        an.verdict_reason = f"every compared boundary is EXACT but {len(missing)} could not be compared"
    else:
        an.verdict, an.consistency = "exact", "bitwise"
        an.verdict_reason = "every boundary is bitwise EXACT"
    if logprob and all(logprob.get(k) is not None for k in ("mean", "max")):
        an.logprob = {"status": "exact" if logprob.get("max") == 0 else "nonzero", **logprob}
    else:
        an.logprob = {"status": "evidence_missing", "mean": None, "max": None, "std": None,
                      "reason": "no measured prefill log-prob diff supplied (e.g. from a training log); "
                                "not computed from dumps"}
