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

import copy
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tilake.diagnosis.kernel_layers import (  # noqa: F401
    Kernel,
    LayerSplit,
    canonical_shapes,
    check_model_layers,
    forward_windows,
    module_layers,
    shape_class,
    split_layers,
)
from tilake.vocab import AlignStatus

MAX_SPAN = 8
MAX_WINDOWS_TRIED = 16   # forward windows tried for one with layers (choose_forward)
RELATIONS = ("same", "fused", "split", "different_impl", "only_train", "only_infer")

# scores (higher is better); a mismatch costs more than two gaps so unrelated kernels never pair
S_SAME, S_SAME_BASE, S_EQUIV, S_PARTIAL, S_MODULE, S_MISMATCH, GAP = 4.0, 2.5, 2.0, 1.5, 0.5, -6.0, -2.0
S_FUSED, S_FUSED_SUB, S_SPLIT = 3.0, 1.5, 2.0     # per kernel of the span; the sub-span penalty once
NEG = -1e18

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
        # span tables: for k = 2..MAX_SPAN, per end position j (-1 where no span fits): hash of the base
        # ids of kernels j-k+1..j, their common equiv id and their common base id (-1: not common)
        self.span_id: Dict[int, np.ndarray] = {}
        self.span_eq: Dict[int, np.ndarray] = {}
        self.span_base: Dict[int, np.ndarray] = {}
        for k in range(2, MAX_SPAN + 1):
            sid = np.full(self.n, -1, dtype=np.int64)
            seq = np.full(self.n, -1, dtype=np.int64)
            sba = np.full(self.n, -1, dtype=np.int64)
            if self.n >= k:
                wb = np.lib.stride_tricks.sliding_window_view(self.base, k)
                we = np.lib.stride_tricks.sliding_window_view(self.equiv, k)
                sid[k - 1:] = span_hash(wb)
                ok_e = np.all(we == we[:, :1], axis=1) & (we[:, 0] >= 0)
                seq[k - 1:][ok_e] = we[ok_e, 0]
                ok_b = np.all(wb == wb[:, :1], axis=1)
                sba[k - 1:][ok_b] = wb[ok_b, 0]
            self.span_id[k], self.span_eq[k], self.span_base[k] = sid, seq, sba
        self.span_id_set = {k: set(v[k - 1:].tolist()) for k, v in self.span_id.items()}
        self.span_eq_set = {k: set(v[v >= 0].tolist()) for k, v in self.span_eq.items()}
        self.span_base_set = {k: set(v[v >= 0].tolist()) for k, v in self.span_base.items()}
        self.equiv_set = set(self.equiv[self.equiv >= 0].tolist())
        self.base_set = set(self.base.tolist())
        # fused kernels by replaces sequence: mask over positions
        self.rep_masks: Dict[Tuple[str, ...], np.ndarray] = {}
        for j, r in enumerate(self.rep):
            if r:
                self.rep_masks.setdefault(r, np.zeros(self.n, dtype=bool))[j] = True
        self.sub_spans = {sub for r in self.rep_masks for k in range(2, len(r) + 1) for sub in _contiguous_subs(r, k)}
        self.rep_has: Dict[int, np.ndarray] = {}
        for r, mask in self.rep_masks.items():
            for b in set(r):
                bid = vocab.get(("b", b))
                if bid is not None:
                    self.rep_has[bid] = self.rep_has.get(bid, np.zeros(self.n, dtype=bool)) | mask


_P = np.uint64(1_000_003)


def span_hash(windows: np.ndarray) -> np.ndarray:
    """Polynomial hash (uint64, wrapping) of each row of base ids, as int64; rows of one length only."""
    h = np.zeros(windows.shape[0], dtype=np.uint64)
    for c in range(windows.shape[1]):
        h = h * _P + windows[:, c].astype(np.uint64) + np.uint64(1)
    return h.view(np.int64)


def _rep_hash(rep: Tuple[str, ...], vocab: Dict) -> Optional[int]:
    ids = [vocab.get(("b", b)) for b in rep]
    if any(i is None for i in ids):
        return None
    return int(span_hash(np.array([ids], dtype=np.int64))[0])


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
    for kk in list(train) + list(infer):   # every base op id before either side's tables refer to them
        vocab.setdefault(("b", kk.base), len(vocab))
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
            span = tuple(kk.base for kk in train[i - k:i]) if B.sub_spans else ()
            fusable = span in B.sub_spans
            e, b = A.span_eq[k][ai], A.span_base[k][ai]
            e_ok, b_ok = e >= 0 and int(e) in B.equiv_set, b >= 0 and int(b) in B.base_set
            if not (fusable or e_ok or b_ok):
                continue
            F = np.full(m, NEG)
            if fusable:
                for rep, mask in B.rep_masks.items():
                    if len(rep) >= k:
                        sc = _span_fused_score(span, rep, k)
                        if sc > NEG:
                            F[mask] = np.maximum(F[mask], sc)
            if e_ok:
                F[B.equiv == e] = np.maximum(F[B.equiv == e], S_SPLIT * k)
            if b_ok:
                F[B.base == b] = np.maximum(F[B.base == b], S_SPLIT * k)
            cand = rows[-k][:-1] + F
            better = cand > T[1:]
            T[1:][better], code[1:][better] = cand[better], 3 + k - 2
        # one A kernel ↔ B span of k ending at j-1
        rep = A.rep[ai]
        for k in range(2, min(K, m) + 1):
            full = _rep_hash(rep, vocab) if rep and len(rep) == k else None
            subs = [h for h in (_rep_hash(x, vocab) for x in _contiguous_subs(rep, k) if x != rep)
                    if h is not None] if rep and len(rep) > k else []
            full_ok = full is not None and full in B.span_id_set[k]
            subs = [h for h in subs if h in B.span_id_set[k]]
            e_ok = A.equiv[ai] >= 0 and int(A.equiv[ai]) in B.span_eq_set[k]
            b_ok = int(A.base[ai]) in B.span_base_set[k]
            if not (full_ok or subs or e_ok or b_ok):
                continue
            G = np.full(m, NEG)
            if full_ok:
                G[B.span_id[k] == full] = S_FUSED * k
            if subs:
                msk = np.isin(B.span_id[k], subs)
                G[msk] = np.maximum(G[msk], S_FUSED * k - S_FUSED_SUB)
            if e_ok:
                msk = B.span_eq[k] == A.equiv[ai]
                G[msk] = np.maximum(G[msk], S_SPLIT * k)
            if b_ok:
                msk = B.span_base[k] == A.base[ai]
                G[msk] = np.maximum(G[msk], S_SPLIT * k)
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
    if not a.shapes and not b.shapes:
        return False, "input shapes not recorded (torch.profiler without record_shapes)"
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
    index: int = 0


@dataclass
class StepAlignment:
    """Layers of both sides and the aligned groups of every layer pair."""

    train: Optional[SideForward]
    infer: Optional[SideForward]
    pairs: Dict[int, List[Pair]]
    odd: Dict[int, str]
    status: str
    reason: str = ""


def choose_forward(side: str, kernels: Sequence[Kernel], model_layers: Optional[Tuple[int, str]] = None,
                   boundary_source: str = "") -> Optional[SideForward]:
    """The first forward pass of ``kernels`` (one side, launch order) that splits into layers (of the first
    :data:`MAX_WINDOWS_TRIED`; else the first forward) and its layers; ``None`` when the side has no forward window.
    vLLM's input preparation (an index_select, the slot mapping) opens a short window before each model forward.

    Layers come from the trace's module boundaries when its kernels carry them (:func:`module_layers`), else
    from the period (:func:`split_layers`); a count that contradicts ``model_layers`` ``(n, source)`` (the
    model's decoder layers on this side) is rejected (:func:`check_model_layers`).
    """
    wins = forward_windows(kernels)
    if not wins:
        return None
    chosen = None
    for wi, (s, e) in enumerate(wins[:MAX_WINDOWS_TRIED]):
        ks = [copy.copy(k) for k in kernels[s:e]]
        for i, k in enumerate(ks):
            k.pos = i
        split = check_model_layers(module_layers(ks, boundary_source) or split_layers(ks), ks, model_layers)
        if chosen is None or (split.layers and not chosen[3].layers):
            chosen = (wi, (s, e), ks, split)
        if split.layers:
            break
    wi, (s, e), ks, split = chosen
    sig = [k.sig for k in ks]
    same = sum(1 for a, b in wins if [k.sig for k in kernels[a:b]] == sig)
    return SideForward(side, ks, (s, e), len(wins), same, split, wi)


def _fingerprint(pairs: List[Pair], tr: List[Kernel], inf: List[Kernel]) -> tuple:
    return tuple((p.relation, tuple(tr[x].base for x in p.train), tuple(inf[x].base for x in p.infer)) for p in pairs)


def align_step(train_kernels: Sequence[Kernel], infer_kernels: Sequence[Kernel],
               model_layers: Optional[Dict[str, Tuple[int, str]]] = None,
               boundary_sources: Optional[Dict[str, str]] = None) -> StepAlignment:
    """Choose each side's first forward, split both into layers and align layer ``i`` with layer ``i``.

    Args:
        model_layers: per side, the model's decoder layers on that side and where the count comes from
            (``{"train": (2, "HF config …/config.json num_hidden_layers")}``); a split that contradicts it is
            rejected (:func:`choose_forward`). boundary_sources: per side, what gave the kernels'
            ``layer_module`` (shown as the split's frame).
    Returns:
        a :class:`StepAlignment`; ``status`` ``ok``, ``partial`` (layer counts differ: the common
        prefix is aligned) or ``evidence_missing`` (a side without a forward or without layers) with
        the reason.
    """
    ml, bs = model_layers or {}, boundary_sources or {}
    tr = choose_forward("train", train_kernels, ml.get("train"), bs.get("train", ""))
    inf = choose_forward("infer", infer_kernels, ml.get("infer"), bs.get("infer", ""))
    if tr is None or inf is None:
        miss = "train" if tr is None else "infer"
        return StepAlignment(tr, inf, {}, {}, AlignStatus.EVIDENCE_MISSING,
                             f"no forward pass found on the {miss} side")
    if not tr.split.layers or not inf.split.layers:
        miss = "train" if not tr.split.layers else "infer"
        note = (tr if miss == "train" else inf).split.note
        return StepAlignment(tr, inf, {}, {}, AlignStatus.EVIDENCE_MISSING,
                             f"no layers found on the {miss} side ({note})")
    nl = min(len(tr.split.layers), len(inf.split.layers))
    status, reason = AlignStatus.OK, ""
    if len(tr.split.layers) != len(inf.split.layers):
        status = AlignStatus.PARTIAL
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
