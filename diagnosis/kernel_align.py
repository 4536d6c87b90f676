"""Kernel-sequence alignment per transformer layer across the training and inference paths.

Input: each side's device kernels of one forward pass, in launch order, with the catalog columns the
dbt model ``int_kernels_categorised`` gives them (category, module, base op, fused, ``replaces``,
equiv class) and, where the capture has them, the call-stack frames of their host op. Output: the
layers of each side (method and confidence) and, per layer, an order-aware global alignment of the
training kernels with the inference kernels, each aligned group with a relation, a confidence and the
evidence behind it. The rows land in the lake (``kernel_layers``, ``kernel_alignment``) and the
marts ``fct_kernel_layers`` / ``fct_kernel_alignment`` read them.

Method (docs/alignment.md):

* **Signature** (platform-invariant): ``(category, module, base op, coarse shape class)``; the shape
  class is the last dimension of the first two inputs (model dimensions such as hidden, head or FFN
  size; token counts and layout ranks — ``[S,1,H]`` on Megatron, ``[T,H]`` on vLLM — drop out).
* **Forward passes**: a forward starts at a token-embedding kernel (:func:`is_embedding`) and ends before
  the next one or before the first backward / optimizer kernel. The first forward of each side is
  aligned; the others are compared with it (``forwards_identical``).
* **Layers**: the period ``P`` of the forward's signature sequence (a decoder repeats one pattern per
  layer): candidates are the spacings between repeated signatures, scored by the fraction of
  positions ``i`` with ``sig[i] == sig[i+P]``; the layer starts are the occurrences of an anchor
  signature seen once per period, moved back over kernels that precede the anchor alike in every
  layer (category and module). A call-stack frame (``models/layer_frames.yaml``) carried by every
  kernel inside the layers and by none outside them confirms the split (method ``period+call_stack``).
* **Alignment**: Needleman–Wunsch (global, linear gap) over the two layers' kernels, one numpy row
  at a time (the left-gap recurrence is a running maximum), with extra moves that align one fused
  kernel with a contiguous span of ``k ≤ 8`` kernels of the other side whose base ops are its catalog
  ``replaces`` sequence (``fused``), or one kernel with ``k`` launches of the same equiv class
  (``split``). Memory: one ``(n+1)·(m+1)`` byte traceback per layer (``n``, ``m`` kernels), freed
  before the next layer, so a step's memory is bounded by its largest layer, not its length.

Numbers: times are not used; positions are 0-based within the layer.
"""
from __future__ import annotations

import bisect
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import yaml

LAYER_FRAMES_FILE = Path(__file__).resolve().parents[1] / "models" / "layer_frames.yaml"
MAX_SPAN = 8
RELATIONS = ("same", "fused", "split", "different_impl", "only_train", "only_infer")

# scores (higher is better); a mismatch costs more than two gaps so unrelated kernels never pair
S_SAME, S_SAME_BASE, S_EQUIV, S_PARTIAL, S_MODULE, S_MISMATCH, GAP = 4.0, 2.5, 2.0, 1.5, 0.5, -6.0, -2.0
S_FUSED, S_FUSED_SUB, S_SPLIT = 3.0, 1.5, 2.0     # per kernel of the span; the sub-span penalty once
NEG = -1e18


@dataclass
class Kernel:
    """One device kernel of a forward pass (a row of ``int_kernels_categorised``).

    Attributes:
        pos: position in the side's forward pass (0-based, launch order).
        frames: the host op's call-stack frames (innermost first), empty when none was recorded.
    """

    pos: int
    name: str
    op_type: str = ""
    base: str = ""
    category: str = ""
    module: str = ""
    fused: bool = False
    replaces: Tuple[str, ...] = ()
    equiv: str = ""
    shapes: str = ""
    frames: Tuple[str, ...] = ()
    sclass: str = field(default="", init=False)

    def __post_init__(self) -> None:
        self.base = self.base or self.op_type or self.name
        self.sclass = shape_class(self.shapes)

    @property
    def sig(self) -> Tuple[str, str, str, str]:
        """The platform-invariant signature ``(category, module, base op, shape class)``."""
        return (self.category, self.module, self.base, self.sclass)


def parse_shapes(shapes: Optional[str]) -> List[Tuple[int, ...]]:
    """msprof shape text ``"512,1,1024;1024"`` (quotes allowed) → ``[(512, 1, 1024), (1024,)]``;
    non-numeric dims are dropped, an unparseable tensor becomes ``()``."""
    out = []
    for t in (shapes or "").replace('"', "").split(";"):
        dims = []
        for d in t.replace("[", "").replace("]", "").split(","):
            d = d.strip()
            if d.lstrip("-").isdigit():
                dims.append(int(d))
        out.append(tuple(dims))
    return [t for t in out if t] if any(out) else []


def shape_class(shapes: Optional[str]) -> str:
    """Coarse shape class: the last dimension of the first two input tensors, ``"1024|2048"``
    (``""`` without shapes). Invariant to token counts and to ``[S,1,H]`` vs ``[T,H]`` layouts."""
    ts = parse_shapes(shapes)[:2]
    return "|".join(str(t[-1]) for t in ts)


def canonical_shapes(shapes: Optional[str]) -> List[Tuple[int, ...]]:
    """Input shapes with size-1 dimensions removed (``[512,1,1024]`` and ``[512,1024]`` compare equal)."""
    return [tuple(d for d in t if d != 1) for t in parse_shapes(shapes)]


@lru_cache(maxsize=1)
def layer_frame_patterns() -> Tuple[re.Pattern, ...]:
    """The compiled ``layer_frames`` of ``models/layer_frames.yaml``."""
    data = yaml.safe_load(LAYER_FRAMES_FILE.read_text(encoding="utf-8")) or {}
    return tuple(re.compile(p) for p in data.get("layer_frames") or ())


# ----------------------------------------------------------------------------------- forward passes

VOCAB_MIN = 32000   # rows of a table that is a token embedding (smallest common LLM vocabulary)


def is_embedding(k: Kernel) -> bool:
    """A token-embedding lookup: catalog module ``embedding``, or a Gather/Embedding kernel whose first
    input is a 2-D table of at least :data:`VOCAB_MIN` rows (GatherV2 on ``[vocab, hidden]`` is
    catalogued ``cast_layout`` because the same op type also indexes other tensors)."""
    if k.module == "embedding":
        return True
    if k.base in ("Gather", "Embedding") or k.op_type in ("GatherV2", "Embedding"):
        ts = parse_shapes(k.shapes)
        return bool(ts) and len(ts[0]) == 2 and ts[0][0] >= VOCAB_MIN
    return False


def forward_windows(kernels: Sequence[Kernel], min_len: int = 8) -> List[Tuple[int, int]]:
    """``[start, end)`` index ranges of the forward passes in one side's launch-ordered kernels.

    A forward starts at a token-embedding kernel (:func:`is_embedding`) and ends before the next embedding kernel or
    the first ``backward``/``optimizer`` kernel; without any embedding kernel the whole sequence up to
    the first backward kernel is one forward. Windows shorter than ``min_len`` are dropped.
    """
    n = len(kernels)
    stops = [i for i, k in enumerate(kernels) if k.category in ("backward", "optimizer")
             or k.module in ("backward", "optimizer")]
    stop_set = set(stops)
    starts = [i for i, k in enumerate(kernels) if is_embedding(k) and i not in stop_set]
    if not starts:
        end = stops[0] if stops else n
        return [(0, end)] if end >= min_len else []
    out = []
    bounds = sorted(set(starts) | stop_set | {n})
    for s in starts:
        e = bounds[bisect.bisect_right(bounds, s)]
        if e - s >= min_len:
            out.append((s, e))
    return out


# ------------------------------------------------------------------------------------------ layers

@dataclass
class LayerSplit:
    """The layers of one forward pass.

    Attributes:
        layers: ``[start, end)`` ranges within the forward (0-based kernel positions).
        method: ``period+call_stack`` | ``period`` | ``none``.
        confidence: 0..1 — the fraction of positions in the layers' span with ``sig[i] == sig[i+P]``,
            × 0.85 when no call-stack frame confirms the split; 0 with no layers.
        period: ``P`` (kernels per typical layer), 0 when none was found.
        anchor: the signature whose occurrences start the layers (``category/module/base/class``).
        frame: the confirming call-stack frame, ``""`` when none.
        odd: layer index → reason, for layers whose kernel sequence differs from the side's most
            common one.
    """

    layers: List[Tuple[int, int]]
    method: str
    confidence: float
    period: int = 0
    anchor: str = ""
    frame: str = ""
    odd: Dict[int, str] = field(default_factory=dict)
    note: str = ""


def _ids(items: Sequence) -> np.ndarray:
    table: Dict = {}
    return np.fromiter((table.setdefault(x, len(table)) for x in items), dtype=np.int64, count=len(items))


def split_layers(kernels: Sequence[Kernel]) -> LayerSplit:
    """Split one forward pass into transformer layers (see the module docstring for the method).

    Args:
        kernels: the forward's kernels in launch order.
    Returns:
        a :class:`LayerSplit`; ``method='none'`` (no layers) when no period repeats at least twice
        over half of the sequence.
    """
    n = len(kernels)
    if n < 6:
        return LayerSplit([], "none", 0.0, note=f"{n} kernels: too few to repeat")
    sig = _ids([k.sig for k in kernels])
    coarse = _ids([(k.category, k.module) for k in kernels])
    pos = np.arange(n)
    order = np.lexsort((pos, sig))
    same = sig[order][1:] == sig[order][:-1]
    d = np.diff(pos[order])[same]
    d = d[(d >= 2) & (d <= n // 2)]
    if d.size == 0:
        return LayerSplit([], "none", 0.0, note="no signature repeats")
    vals, cnt = np.unique(d, return_counts=True)
    cands = vals[np.argsort(-cnt, kind="stable")][:16]
    scored = [(float(np.mean(sig[:-p] == sig[p:])), int(p)) for p in cands]
    best = max(f for f, _ in scored)
    if best < 0.5:
        return LayerSplit([], "none", 0.0, note=f"no period: best repeat fraction {best:.2f}")
    period = min(p for f, p in scored if f >= best - 0.05)
    match = sig[:-period] == sig[period:]
    hits = np.flatnonzero(match)
    rs, re_ = int(hits[0]), int(hits[-1]) + period + 1
    span = re_ - rs
    n_est = span / period
    counts = Counter(sig[rs:re_].tolist())
    want = {int(np.floor(n_est)), int(np.ceil(n_est)), int(round(n_est))}
    anchor, best_off, occ = -1, None, None
    for v, c in counts.items():
        if c < 2 or c not in want:
            continue
        o = rs + np.flatnonzero(sig[rs:re_] == v)
        if np.min(np.diff(o)) < max(2, period // 2):
            continue
        off = int(o[0]) - rs
        if best_off is None or off < best_off:
            anchor, best_off, occ = v, off, o
    if occ is None:
        starts = list(range(rs, re_ - period + 1, period))
        anchor_txt = ""
    else:
        starts = [int(x) - best_off for x in occ]
        anchor_txt = "/".join(kernels[int(occ[0])].sig)
        # move back over kernels that precede the anchor alike in (almost) every layer
        while starts[0] > 0 and len(starts) > 1:
            prev0 = coarse[starts[0] - 1]
            others = [coarse[s - 1] == prev0 for s in starts[1:]]
            if np.mean(others) < 0.8 or starts[1] - 1 - starts[0] < 1:
                break
            starts = [s - 1 for s in starts]
    lens = np.diff(starts)
    typical = int(np.median(lens)) if lens.size else period
    ends = starts[1:] + [min(starts[-1] + typical, n)]
    layers = list(zip(starts, ends))
    conf = float(np.mean(match[starts[0]:max(starts[0] + 1, min(ends[-1], n) - period)]))
    frame = _confirming_frame(kernels, layers)
    method = "period+call_stack" if frame else "period"
    if not frame:
        conf *= 0.85
    split = LayerSplit(layers, method, round(conf, 3), period, anchor_txt, frame)
    split.odd = odd_layers([tuple(sig[s:e].tolist()) for s, e in layers], kernels, layers)
    return split


def _confirming_frame(kernels: Sequence[Kernel], layers: List[Tuple[int, int]]) -> str:
    """A ``layer_frames`` frame present in every stacked kernel inside the layers and in none outside."""
    pats = layer_frame_patterns()
    if not layers or not pats:
        return ""
    inside: Optional[set] = None
    outside: set = set()
    lo, hi = layers[0][0], layers[-1][1]
    for i, k in enumerate(kernels):
        if not k.frames:
            continue
        if lo <= i < hi:
            inside = set(k.frames) if inside is None else inside & set(k.frames)
            if not inside:
                return ""
        else:
            outside.update(k.frames)
    good = sorted(f for f in (inside or set()) - outside if any(p.search(f) for p in pats))
    return good[0] if good else ""


def odd_layers(patterns: List[tuple], kernels: Sequence[Kernel], layers: List[Tuple[int, int]]) -> Dict[int, str]:
    """Layers whose signature sequence differs from the most common one → a one-line reason
    (kernel count and the first differing position, named by base op)."""
    if len(patterns) < 3:
        return {}
    mode, _ = Counter(patterns).most_common(1)[0]
    ref = next(i for i, p in enumerate(patterns) if p == mode)
    out = {}
    for li, p in enumerate(patterns):
        if p == mode:
            continue
        s, e = layers[li]
        rs, _re = layers[ref]
        j = next((x for x in range(min(len(p), len(mode))) if p[x] != mode[x]), min(len(p), len(mode)))
        mine = kernels[s + j].base if s + j < e else "end of layer"
        theirs = kernels[rs + j].base if j < len(mode) else "end of layer"
        out[li] = (f"{e - s} kernels vs {len(mode)} in most layers; position {j}: {mine} "
                   f"where layer {ref} runs {theirs}")
    return out


# --------------------------------------------------------------------------------------- alignment

@dataclass
class Pair:
    """One aligned group: training kernels ↔ inference kernels (positions within their layers)."""

    train: List[int]
    infer: List[int]
    relation: str
    confidence: float
    evidence: List[str]
    fused_side: str = ""


def _contiguous_subs(seq: Tuple[str, ...], k: int) -> set:
    return {seq[i:i + k] for i in range(len(seq) - k + 1)}


class _Side:
    """Vectorised columns of one layer's kernels (ids shared with the other side through ``vocab``)."""

    def __init__(self, ks: Sequence[Kernel], vocab: Dict):
        def vid(x):
            return vocab.setdefault(x, len(vocab)) if x else -1

        self.ks = ks
        self.n = len(ks)
        self.base = np.array([vid(("b", k.base)) for k in ks], dtype=np.int64)
        self.cls = np.array([vid(("c", k.base, k.sclass)) for k in ks], dtype=np.int64)
        self.equiv = np.array([vid(("e", k.equiv)) if k.equiv else -1 for k in ks], dtype=np.int64)
        self.mod = np.array([vid(("m", k.category, k.module)) for k in ks], dtype=np.int64)
        self.rep = [k.replaces if k.fused else () for k in ks]
        # span tables: for k = 2..MAX_SPAN, per end position j: tuple id of bases, common equiv, common base
        self.span_id: Dict[int, np.ndarray] = {}
        self.span_eq: Dict[int, np.ndarray] = {}
        self.span_base: Dict[int, np.ndarray] = {}
        bases = [k.base for k in ks]
        for k in range(2, MAX_SPAN + 1):
            sid = np.full(self.n, -1, dtype=np.int64)
            seq = np.full(self.n, -1, dtype=np.int64)
            sba = np.full(self.n, -1, dtype=np.int64)
            for j in range(k - 1, self.n):
                sid[j] = vocab.setdefault(("s",) + tuple(bases[j - k + 1:j + 1]), len(vocab))
                e = self.equiv[j - k + 1:j + 1]
                if e[0] >= 0 and np.all(e == e[0]):
                    seq[j] = e[0]
                b = self.base[j - k + 1:j + 1]
                if np.all(b == b[0]):
                    sba[j] = b[0]
            self.span_id[k], self.span_eq[k], self.span_base[k] = sid, seq, sba
        # fused kernels by replaces sequence: mask over positions
        self.rep_masks: Dict[Tuple[str, ...], np.ndarray] = {}
        for j, r in enumerate(self.rep):
            if r:
                self.rep_masks.setdefault(r, np.zeros(self.n, dtype=bool))[j] = True
        self.rep_has: Dict[int, np.ndarray] = {}
        for r, mask in self.rep_masks.items():
            for b in set(r):
                bid = vocab.get(("b", b))
                if bid is not None:
                    self.rep_has[bid] = self.rep_has.get(bid, np.zeros(self.n, dtype=bool)) | mask


def _row_scores(a: Kernel, ai: int, A: _Side, B: _Side, vocab: Dict) -> np.ndarray:
    s = np.full(B.n, S_MISMATCH)
    s[B.mod == A.mod[ai]] = S_MODULE
    partial = B.rep_has.get(int(A.base[ai]))
    if partial is not None:
        s[partial] = np.maximum(s[partial], S_PARTIAL)
    if A.rep[ai]:
        ids = [vocab.get(("b", b), -2) for b in A.rep[ai]]
        m = np.isin(B.base, ids)
        s[m] = np.maximum(s[m], S_PARTIAL)
    if A.equiv[ai] >= 0:
        s[B.equiv == A.equiv[ai]] = np.maximum(s[B.equiv == A.equiv[ai]], S_EQUIV)
    s[B.base == A.base[ai]] = S_SAME_BASE
    s[B.cls == A.cls[ai]] = S_SAME
    return s


def _span_fused_score(span: Tuple[str, ...], rep: Tuple[str, ...], k: int) -> float:
    if span == rep:
        return S_FUSED * k
    if span in _contiguous_subs(rep, k):
        return S_FUSED * k - S_FUSED_SUB
    return NEG


def align_layer(train: Sequence[Kernel], infer: Sequence[Kernel]) -> List[Pair]:
    """Global alignment of one layer's training kernels with the inference layer's.

    Args:
        train, infer: the layer's kernels in launch order (``n`` and ``m`` of them).
    Returns:
        aligned groups in order; positions index ``train``/``infer``. Every kernel appears in exactly
        one group.
    Notes:
        Time O(n·m·MAX_SPAN) numpy work, memory one ``(n+1)·(m+1)`` byte traceback plus
        ``MAX_SPAN + 1`` float rows.
    """
    vocab: Dict = {}
    A, B = _Side(train, vocab), _Side(infer, vocab)
    n, m = A.n, B.n
    K = MAX_SPAN
    back = np.zeros((n + 1, m + 1), dtype=np.uint8)   # 0 diag 1 up 2 left, 3+k-2: A span k, 3+K-1+k-2: B span k
    rows: List[np.ndarray] = [GAP * np.arange(m + 1, dtype=np.float64)]
    back[0, 1:] = 2
    jj = np.arange(m + 1, dtype=np.float64)
    b_span_code = 3 + (K - 1)
    for i in range(1, n + 1):
        prev = rows[-1]
        T = np.full(m + 1, NEG)
        code = np.zeros(m + 1, dtype=np.uint8)
        T[0], code[0] = GAP * i, 1
        if m:
            T[1:] = prev[:-1] + _row_scores(train[i - 1], i - 1, A, B, vocab)
            up = prev[1:] + GAP
            better = up > T[1:]
            T[1:][better], code[1:][better] = up[better], 1
        ai = i - 1
        # A span of k ending at ai ↔ one B kernel
        for k in range(2, min(K, i) + 1):
            span = tuple(kk.base for kk in train[i - k:i])
            F = np.full(m, NEG)
            for rep, mask in B.rep_masks.items():
                if len(rep) >= k:
                    sc = _span_fused_score(span, rep, k)
                    if sc > NEG:
                        F[mask] = np.maximum(F[mask], sc)
            e = A.span_eq[k][ai]
            if e >= 0:
                F[B.equiv == e] = np.maximum(F[B.equiv == e], S_SPLIT * k)
            b = A.span_base[k][ai]
            if b >= 0:
                F[B.base == b] = np.maximum(F[B.base == b], S_SPLIT * k)
            if np.any(F > NEG):
                cand = rows[-k][:-1] + F
                better = cand > T[1:]
                T[1:][better], code[1:][better] = cand[better], 3 + k - 2
        # one A kernel ↔ B span of k ending at j-1
        rep = A.rep[ai]
        for k in range(2, min(K, m) + 1):
            G = np.full(m, NEG)
            if rep and len(rep) >= k:
                full = vocab.get(("s",) + tuple(rep))
                subs = [vocab.get(("s",) + s) for s in _contiguous_subs(rep, k)]
                subs = [s for s in subs if s is not None and s != full]
                if full is not None and len(rep) == k:
                    G[B.span_id[k] == full] = S_FUSED * k
                if subs:
                    G[np.isin(B.span_id[k], subs)] = np.maximum(G[np.isin(B.span_id[k], subs)],
                                                                 S_FUSED * k - S_FUSED_SUB)
            if A.equiv[ai] >= 0:
                msk = B.span_eq[k] == A.equiv[ai]
                G[msk] = np.maximum(G[msk], S_SPLIT * k)
            msk = B.span_base[k] == A.base[ai]
            G[msk] = np.maximum(G[msk], S_SPLIT * k)
            if np.any(G > NEG):
                cand = np.full(m + 1, NEG)
                cand[k:] = prev[:m + 1 - k] + G[k - 1:]
                better = cand > T
                T[better], code[better] = cand[better], b_span_code + k - 2
        # left gaps: H[j] = max_k<=j (T[k] + GAP*(j-k))
        H = np.maximum.accumulate(T - GAP * jj) + GAP * jj
        left = H > T + 1e-9
        code[left] = 2
        back[i] = code
        rows.append(H)
        if len(rows) > K + 1:
            rows.pop(0)
    # traceback
    out: List[Pair] = []
    i, j = n, m
    while i > 0 or j > 0:
        c = int(back[i, j])
        if c == 0:
            out.append(_classify([i - 1], [j - 1], train, infer))
            i, j = i - 1, j - 1
        elif c == 1:
            out.append(_only("train", i - 1, train, infer))
            i -= 1
        elif c == 2:
            out.append(_only("infer", j - 1, infer, train))
            j -= 1
        elif c < b_span_code:
            k = c - 3 + 2
            out.append(_classify(list(range(i - k, i)), [j - 1], train, infer))
            i, j = i - k, j - 1
        else:
            k = c - b_span_code + 2
            out.append(_classify([i - 1], list(range(j - k, j)), train, infer))
            i, j = i - 1, j - k
    out.reverse()
    return out


def _shape_evidence(a: Kernel, b: Kernel) -> Tuple[bool, str]:
    ca, cb = canonical_shapes(a.shapes), canonical_shapes(b.shapes)
    if ca and ca == cb:
        return True, f"input shapes equal ({a.shapes.replace(chr(34), '')} ≅ {b.shapes.replace(chr(34), '')})"
    return False, (f"input shapes differ: train {a.shapes.replace(chr(34), '') or '?'}, "
                   f"infer {b.shapes.replace(chr(34), '') or '?'}")


def _frame_evidence(a: Kernel, b: Kernel) -> List[str]:
    if a.frames and b.frames:
        return [f"stack: {a.frames[0].rsplit('/', 1)[-1]} ↔ {b.frames[0].rsplit('/', 1)[-1]}"]
    return []


def _classify(ti: List[int], ii: List[int], train: Sequence[Kernel], infer: Sequence[Kernel]) -> Pair:
    ts, fs = [train[x] for x in ti], [infer[x] for x in ii]
    if len(ts) == 1 and len(fs) == 1:
        a, b = ts[0], fs[0]
        eq, shape_txt = _shape_evidence(a, b)
        ev = [shape_txt] + _frame_evidence(a, b)
        if a.base == b.base:
            conf = 1.0 if eq else (0.9 if a.sclass == b.sclass else 0.7)
            return Pair(ti, ii, "same", conf, [f"base op {a.base} on both"] + ev)
        for f, u, side in ((b, a, "infer"), (a, b, "train")):
            if f.fused and u.base in f.replaces:
                return Pair(ti, ii, "fused", 0.6,
                            [f"catalog: {f.op_type or f.name} replaces {'+'.join(f.replaces)}; only {u.base} of it "
                             f"is at this position"] + ev, fused_side=side)
        if a.equiv and a.equiv == b.equiv:
            return Pair(ti, ii, "different_impl", 0.8, [f"equiv class {a.equiv}: {a.base} vs {b.base}"] + ev)
        return Pair(ti, ii, "different_impl", 0.5, [f"same module {a.module} ({a.category}): {a.base} vs {b.base}"] + ev)
    one, many, side = (fs[0], ts, "infer") if len(fs) == 1 else (ts[0], fs, "train")
    span = tuple(k.base for k in many)
    if one.fused and one.replaces and span in _contiguous_subs(one.replaces, len(span)):
        full = span == one.replaces
        ev = [f"catalog: {one.op_type or one.name} replaces {'+'.join(one.replaces)}; "
              f"{'the whole sequence' if full else 'part of it'} ({' → '.join(span)}) runs unfused on the other side"]
        return Pair(ti, ii, "fused", 0.9 if full else 0.7, ev, fused_side=side)
    ev = [f"{len(many)} launches of {'/'.join(sorted(set(span)))} ↔ one {one.base}"
          + (f" (equiv class {one.equiv})" if one.equiv else "")]
    return Pair(ti, ii, "split", 0.7, ev, fused_side=side)


def _only(side: str, idx: int, mine: Sequence[Kernel], other: Sequence[Kernel]) -> Pair:
    k = mine[idx]
    peers = [o for o in other if o.module == k.module]
    conf = 0.9 if not peers else 0.7
    ev = [f"no {k.module} kernel on the other side of this layer" if not peers
          else f"the other side's {k.module} kernels ({', '.join(sorted({o.base for o in peers}))}) align elsewhere"]
    return Pair([idx] if side == "train" else [], [idx] if side == "infer" else [], f"only_{side}", conf, ev)


# ------------------------------------------------------------------------------------------ a step

@dataclass
class SideForward:
    """One side's forward pass chosen for alignment and its layer split."""

    side: str
    kernels: List[Kernel]
    window: Tuple[int, int]
    forward_count: int
    forwards_identical: int
    split: LayerSplit


@dataclass
class StepAlignment:
    """Layers of both sides and the aligned groups of every layer pair."""

    train: Optional[SideForward]
    infer: Optional[SideForward]
    pairs: Dict[int, List[Pair]]
    odd: Dict[int, str]
    status: str
    reason: str = ""


def choose_forward(side: str, kernels: Sequence[Kernel]) -> Optional[SideForward]:
    """The first forward pass of ``kernels`` (one side, launch order) and its layers; ``None`` when
    the side has no forward window."""
    wins = forward_windows(kernels)
    if not wins:
        return None
    s, e = wins[0]
    ks = [Kernel(pos=i, **{f: getattr(k, f) for f in ("name", "op_type", "base", "category", "module", "fused",
                                                    "replaces", "equiv", "shapes", "frames")})
          for i, k in enumerate(kernels[s:e])]
    first = [k.sig for k in ks]
    same = sum(1 for a, b in wins if [k.sig for k in kernels[a:b]] == first)
    return SideForward(side, ks, (s, e), len(wins), same, split_layers(ks))


def _fingerprint(pairs: List[Pair], tr: List[Kernel], inf: List[Kernel]) -> tuple:
    return tuple((p.relation, tuple(tr[x].base for x in p.train), tuple(inf[x].base for x in p.infer)) for p in pairs)


def align_step(train_kernels: Sequence[Kernel], infer_kernels: Sequence[Kernel]) -> StepAlignment:
    """Choose each side's first forward, split both into layers and align layer ``i`` with layer ``i``.

    Returns:
        a :class:`StepAlignment`; ``status`` ``ok``, ``partial`` (layer counts differ: the common
        prefix is aligned) or ``evidence_missing`` (a side without a forward or without layers) with
        the reason.
    """
    tr, inf = choose_forward("train", train_kernels), choose_forward("infer", infer_kernels)
    if tr is None or inf is None:
        miss = "train" if tr is None else "infer"
        return StepAlignment(tr, inf, {}, {}, "evidence_missing", f"no forward pass found on the {miss} side")
    if not tr.split.layers or not inf.split.layers:
        miss = "train" if not tr.split.layers else "infer"
        note = (tr if miss == "train" else inf).split.note
        return StepAlignment(tr, inf, {}, {}, "evidence_missing", f"no layers found on the {miss} side ({note})")
    nl = min(len(tr.split.layers), len(inf.split.layers))
    status, reason = "ok", ""
    if len(tr.split.layers) != len(inf.split.layers):
        status = "partial"
        reason = (f"{len(tr.split.layers)} train layers vs {len(inf.split.layers)} infer layers: "
                  f"layers 0–{nl - 1} aligned")
    pairs: Dict[int, List[Pair]] = {}
    prints: Dict[int, tuple] = {}
    for li in range(nl):
        (ts, te), (is_, ie) = tr.split.layers[li], inf.split.layers[li]
        t_ks, i_ks = tr.kernels[ts:te], inf.kernels[is_:ie]
        pairs[li] = align_layer(t_ks, i_ks)
        prints[li] = _fingerprint(pairs[li], t_ks, i_ks)
    _cross_layer_notes(pairs, tr, inf)
    odd: Dict[int, str] = {}
    if nl >= 3:
        mode, _ = Counter(prints.values()).most_common(1)[0]
        ref = next(li for li, p in prints.items() if p == mode)
        others = sum(1 for q in prints.values() if q == mode) - 1
        for li, p in prints.items():
            if p != mode:
                j = next((x for x in range(min(len(p), len(mode))) if p[x] != mode[x]), min(len(p), len(mode)))
                odd[li] = (f"alignment differs from layer {ref} (and {others} other layers) at group {j}: "
                           f"{_group_text(p[j]) if j < len(p) else 'nothing'} where layer {ref} has "
                           f"{_group_text(mode[j]) if j < len(mode) else 'nothing'}")
    return StepAlignment(tr, inf, pairs, odd, status, reason)


def _group_text(g: tuple) -> str:
    rel, a, b = g
    return f"{rel} {' + '.join(a) or '—'} ↔ {' + '.join(b) or '—'}"


def _cross_layer_notes(pairs: Dict[int, List[Pair]], tr: SideForward, inf: SideForward) -> None:
    """A fused kernel at a layer's first position whose other replaced op is the previous layer's
    last kernel on the other side (vLLM fuses layer i's residual add into layer i+1's input norm)."""
    for li in range(1, len(pairs)):
        first, prev = pairs[li][0], pairs[li - 1][-1]
        if first.relation != "fused" or not prev.relation.startswith("only_"):
            continue
        side = first.fused_side
        fl = (inf if side == "infer" else tr).split.layers[li]
        fk = (inf if side == "infer" else tr).kernels[fl[0] + (first.infer if side == "infer" else first.train)[0]]
        o_side = tr if side == "infer" else inf
        pl = o_side.split.layers[li - 1]
        idx = (prev.train if side == "infer" else prev.infer)
        if not idx or prev.relation != f"only_{'train' if side == 'infer' else 'infer'}":
            continue
        pk = o_side.kernels[pl[0] + idx[0]]
        if pk.base in fk.replaces:
            first.confidence = 0.85
            first.evidence.append(f"the {pk.base} it also replaces is the last kernel of layer {li - 1} on the "
                                  f"{o_side.side} side (fused across the layer boundary)")
            prev.evidence.append(f"fused into layer {li}'s {fk.op_type or fk.name} on the {side} side "
                                 f"(catalog {'+'.join(fk.replaces)})")
