"""Forward passes and transformer layers of one side's kernel sequence (the first half of the kernel
alignment, :mod:`tilake.diagnosis.kernel_align`; method in docs/alignment.md).

* :class:`Kernel` — one device kernel with its platform-invariant signature ``(category, module, base op,
  coarse shape class)``; the shape class is the last dimension of the first two inputs.
* :func:`forward_windows` — forward passes: from a token-embedding kernel to the next one or to the
  first backward / optimizer kernel.
* :func:`module_layers` — the layers the trace's own module boundaries give (each kernel's decoder-layer
  index from an ``nn.Module: <Family>DecoderLayer_<n>`` frame or FSDP's ``FSDP::pre_forward (model.layers.<n>)``
  / ``post_forward`` ranges, :func:`layer_index_of` / :func:`range_layer_intervals`), used before any period;
* :func:`split_layers` — the period ``P`` of the forward's signature sequence, the layer starts at an
  anchor signature seen once per period (moved back over kernels that precede it alike in every layer),
  confirmed by a ``models/layer_frames.yaml`` call-stack frame carried by every kernel inside the layers
  and none outside; with the model's layer count known, the period whose repeat spans exactly that many
  layers (:func:`split_known_count`); :func:`odd_layers` names the layers whose kernel sequence differs
  from the most common;
* :func:`check_model_layers` — a split whose layer count contradicts the model's is rejected, not reported.
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

@dataclass
class Kernel:
    """One device kernel of a forward pass (a row of ``int_kernels_categorised``).

    Attributes:
        pos: position in the side's forward pass (0-based, launch order).
        frames: the host op's call-stack frames (innermost first), empty when none was recorded.
        layer_module: the decoder layer whose module ran the kernel, from the trace's own module boundaries
            (a layer-module frame or FSDP's per-layer ranges); None when the trace does not say.
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
    layer_module: Optional[int] = None
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
def _layer_yaml() -> Dict:
    return yaml.safe_load(LAYER_FRAMES_FILE.read_text(encoding="utf-8")) or {}


@lru_cache(maxsize=1)
def layer_frame_patterns() -> Tuple[re.Pattern, ...]:
    """The compiled ``layer_frames`` of ``models/layer_frames.yaml``."""
    return tuple(re.compile(p) for p in _layer_yaml().get("layer_frames") or ())


@lru_cache(maxsize=1)
def layer_module_patterns() -> Tuple[re.Pattern, ...]:
    """The compiled ``layer_modules`` of ``models/layer_frames.yaml`` (group ``index``: the layer)."""
    return tuple(re.compile(p) for p in _layer_yaml().get("layer_modules") or ())


@lru_cache(maxsize=1)
def layer_range_patterns() -> Tuple[re.Pattern, re.Pattern]:
    """The compiled ``layer_ranges.pre`` / ``.post`` of ``models/layer_frames.yaml`` (group ``index``)."""
    r = _layer_yaml().get("layer_ranges") or {}
    return re.compile(r.get("pre") or "$^"), re.compile(r.get("post") or "$^")


def layer_index_of(frames: Sequence[str]) -> Optional[int]:
    """The decoder layer a kernel ran in by its innermost layer-module frame (``nn.Module:
    Qwen2DecoderLayer_3`` → 3), else None."""
    pats = layer_module_patterns()
    for f in frames:
        for p in pats:
            m = p.search(f)
            if m:
                return int(m.group("index"))
    return None


def range_layer_intervals(ranges: Sequence[Tuple[str, int, int]]) -> List[Tuple[int, int, int]]:
    """``[(start_ns, end_ns, layer)]``: each layer forward between the end of a ``pre`` range and the start of
    the next ``post`` range of the same layer (FSDP2 records ``FSDP::pre_forward (model.layers.0)`` before and
    ``FSDP::post_forward (model.layers.0)`` after the wrapped module's forward; torch
    ``distributed/fsdp/_fully_shard/_fsdp_state.py``, seen in the real verl 0.9.1 FSDP2 trace).

    Args:
        ranges: ``(message, start_ns, end_ns)`` of one capture, any order.
    """
    pre_p, post_p = layer_range_patterns()
    pres: Dict[int, List[int]] = {}
    posts: Dict[int, List[int]] = {}
    for msg, a, b in ranges:
        if a is None or b is None:
            continue
        m = pre_p.search(msg)
        if m:
            pres.setdefault(int(m.group("index")), []).append(int(b))
            continue
        m = post_p.search(msg)
        if m:
            posts.setdefault(int(m.group("index")), []).append(int(a))
    out = []
    for li, ends in pres.items():
        starts = sorted(posts.get(li, []))
        for e in sorted(ends):
            j = bisect.bisect_left(starts, e)
            if j < len(starts):
                out.append((e, starts[j], li))
    return sorted(out)


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


def _anchor(sig: np.ndarray, period: int):
    """``(start, end, occurrences, offset)`` of the periodic span for ``period`` and its anchor: the
    signature seen once per period (count ≈ span / period, spacing ≥ period / 2) nearest the span's
    start; occurrences/offset ``None`` when no signature qualifies."""
    match = sig[:-period] == sig[period:]
    hits = np.flatnonzero(match)
    rs, re_ = int(hits[0]), int(hits[-1]) + period + 1
    n_est = (re_ - rs) / period
    want = {int(np.floor(n_est)), int(np.ceil(n_est)), int(round(n_est))}
    vals, counts = np.unique(sig[rs:re_], return_counts=True)
    best_off, occ = None, None
    for v in vals[np.isin(counts, list(want)) & (counts >= 2)]:
        o = rs + np.flatnonzero(sig[rs:re_] == v)
        if np.min(np.diff(o)) < max(2, period // 2):
            continue
        off = int(o[0]) - rs
        if best_off is None or off < best_off:
            best_off, occ = off, o
    return rs, re_, occ, best_off


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
    # the smallest strongly repeating period that has an anchor (a signature seen once per period); a
    # sub-period inside the layers (MoE experts repeating the same few kernels) has none
    chosen = None
    for _f, p in sorted((x for x in scored if x[0] >= best - 0.1), key=lambda x: x[1]):
        found = _anchor(sig, p)
        if found[2] is not None:
            chosen = (p, found)
            break
    if chosen is None:
        p = min(p for f, p in scored if f >= best - 0.05)
        chosen = (p, _anchor(sig, p))
    period, (rs, re_, occ, best_off) = chosen
    match = sig[:-period] == sig[period:]
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


# ------------------------------------------------------------- module boundaries and the model's count

def module_layers(kernels: Sequence[Kernel], source: str = "") -> Optional[LayerSplit]:
    """The layers the trace's module boundaries give (:attr:`Kernel.layer_module`), or None when fewer than
    two kernels of the forward carry one.

    Layer ``i`` spans its first to its last kernel; layers are ordered by position. Kernels between two layers
    (FSDP's all-gather copies) are outside every layer. Method ``module_boundary``, confidence 1.0 (the trace
    says where each layer runs); ``None`` also when two layers overlap (then the boundaries are not usable).

    Args:
        source: what gave the boundaries, shown as the split's frame (``FSDP::pre_forward/post_forward
            (model.layers.N)``, ``nn.Module: Qwen2DecoderLayer_N``).
    """
    spans: Dict[int, List[int]] = {}
    for i, k in enumerate(kernels):
        if k.layer_module is not None:
            sp = spans.setdefault(k.layer_module, [i, i])
            sp[1] = i
    if sum(1 for k in kernels if k.layer_module is not None) < 2 or not spans:
        return None
    layers = sorted((a, b + 1) for a, b in spans.values())
    if any(layers[j][0] < layers[j - 1][1] for j in range(1, len(layers))):
        return None
    sig = [k.sig for k in kernels]
    lens = [e - s for s, e in layers]
    split = LayerSplit(layers, "module_boundary", 1.0, int(np.median(lens)), "", source)
    split.odd = odd_layers([tuple(sig[s:e]) for s, e in layers], kernels, layers)
    return split


MIN_GUIDED_PERIOD = 6        # kernels in the smallest decoder layer a guided split accepts (norm, matmul, attention…)
MIN_LAYER_SIGNATURES = 4     # distinct kernel signatures a guided layer holds


def split_known_count(kernels: Sequence[Kernel], n_layers: int) -> Optional[LayerSplit]:
    """Split a forward into exactly ``n_layers`` layers (the model's count) by its period: the smallest period
    ``P`` (≥ :data:`MIN_GUIDED_PERIOD`) whose run of repeats (``sig[i] == sig[i+P]`` for consecutive ``i``) covers
    ``n_layers - 1`` periods, each layer holding at least :data:`MIN_LAYER_SIGNATURES` distinct signatures (a run
    of FSDP's all-gather copies repeats too, but is no layer); the layers start at that run's start. None when no
    period does.

    Method ``period+model_layers``, confidence × 0.85 like an unconfirmed period split (the layer count is the
    model's, the boundaries are the repeat's).
    """
    n = len(kernels)
    if n_layers < 2 or n < 2 * n_layers:
        return None
    sig = _ids([k.sig for k in kernels])
    for p in range(MIN_GUIDED_PERIOD, n // n_layers + 1):
        match = sig[:-p] == sig[p:]
        need = (n_layers - 1) * p
        run = 0
        for i, ok in enumerate(match):
            run = run + 1 if ok else 0
            if run >= need:
                s = i - need + 1
                layers = [(s + j * p, s + (j + 1) * p) for j in range(n_layers)]
                if layers[-1][1] > n or len(set(sig[s:s + p].tolist())) < MIN_LAYER_SIGNATURES:
                    break
                split = LayerSplit(layers, "period+model_layers", round(0.85 * 1.0, 3), p,
                                   "/".join(kernels[s].sig), "")
                split.odd = odd_layers([tuple(sig[a:b].tolist()) for a, b in layers], kernels, layers)
                return split
    return None


def check_model_layers(split: LayerSplit, kernels: Sequence[Kernel], model_layers: Optional[Tuple[int, str]]) -> LayerSplit:
    """The split to report given the model's layer count ``(n, source)``: a split of ``n`` layers (or any
    split when ``n`` is unknown) as it is; one that contradicts the model is rejected — a period split is replaced
    by :func:`split_known_count` when the forward repeats ``n`` times, else (and always for module boundaries,
    which no period overrides) by no layers with the reason
    (``228 layers by method period contradict the model's 2 (HF config …): rejected``).
    """
    if not model_layers or not model_layers[0]:
        return split
    want, src = model_layers
    if split.layers and len(split.layers) == want:
        return split
    found = (f"{len(split.layers)} layers by method {split.method}" if split.layers
             else f"no layers ({split.note or 'no period'})")
    if split.method == "module_boundary":   # the trace's own boundaries say otherwise: no period overrides them
        return LayerSplit([], "none", 0.0, note=f"{found} contradict the model's {want} ({src}): rejected")
    guided = split_known_count(kernels, want)
    if guided is not None:
        guided.note = f"{found}; split into the model's {want} layers ({src}) by the period that repeats {want} times"
        return guided
    if not split.layers:
        return split
    return LayerSplit([], "none", 0.0, note=f"{found} contradict the model's {want} ({src}): rejected")
