"""Tensor-parallel merge and pipeline-stage join of :mod:`tilake.diagnosis.canonical` (rules: its docstring)."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from tilake.diagnosis.logical import LogicalSide, Record, _cls, records_of
from tilake.errors import TilakeError
from tilake.ingest.msprobe.reader import API_RE, MODULE_RE, DumpSide, Slot

LAYER_RE = re.compile(r"\.layers\.(\d+)\.")

# ------------------------------------------------------------------------------ TP
_COLUMN = ("ColumnParallelLinear", "TEColumnParallelLinear", "TELayerNormColumnParallelLinear")
_ROW = ("RowParallelLinear", "TERowParallelLinear")
_VOCAB = ("VocabParallelEmbedding", "ParallelLMHead")


def _plan(d: DumpSide, shards: List[DumpSide], sl: Slot, tp: int) -> Tuple[str, Any]:
    """How one slot merges: ``("replicated", None)`` | ``("cat", dim)`` | ``("segments", (dim, [sizes]))``
    | ``("refuse", reason)`` (sizes per rank)."""
    path, cls = _cls(sl.entry)
    shape = sl.declared_shape or []
    nd = len(shape)
    last = nd - 1
    is_w = sl.io == "parameter"
    if cls == "QKVParallelLinear" and (is_w or sl.io == "output") and nd:
        dim = 0 if is_w else last
        q = _q_width(d, path)
        tot = shape[dim]
        if q is None or (tot - q) % 2 or q >= tot:
            return "refuse", (f"fused QKV shard of {tot} rows: q width per rank unknown (no o_proj input in the "
                              "dump) — dump the attention's o_proj to split [q_r|k_r|v_r]")
        return "segments", (dim, [q, (tot - q) // 2, (tot - q) // 2])
    if (cls == "MergedColumnParallelLinear" or path.endswith("linear_fc1")) and (is_w or sl.io == "output") and nd:
        dim = 0 if is_w else last
        if shape[dim] % 2:
            return "refuse", f"fused gate_up shard of odd width {shape[dim]}"
        return "segments", (dim, [shape[dim] // 2] * 2)
    if cls == "SiluAndMul" and sl.io == "input" and nd:
        return "segments", (last, [shape[last] // 2] * 2)
    if (cls in _COLUMN or cls.endswith("ColumnParallelLinear")) and (is_w or sl.io == "output") and nd:
        if is_w and sl.index == "bias":
            return "cat", 0
        return "cat", (0 if is_w else last)
    if cls in _ROW or cls.endswith("RowParallelLinear"):
        if is_w and sl.index == "weight" and nd == 2:
            return "cat", 1
        if sl.io in ("input", "kwarg") and nd:
            return "cat", last
        return "replicated", None   # output after the all-reduce, bias
    if cls in _VOCAB:
        if is_w and nd:
            return "cat", 0
        return "replicated", None   # ids in, all-reduced embedding out
    if cls == "LogitsProcessor" or is_w:
        if not is_w and not _same_stats(shards, sl):
            return "cat", last   # vocab-parallel logits not gathered
        return "replicated", None
    if _same_stats(shards, sl):
        return "replicated", None
    if nd == 0:
        return "refuse", "scalar slot that differs between ranks"
    w = d.slot(sl.entry, "parameter", "weight")
    if nd >= 3 and w is not None and w.declared_shape and len(w.declared_shape) == 1 and w.declared_shape[0] == shape[last]:
        return "cat", last - 1   # per-head norm: heads are sharded, the normalised dim is whole
    return "cat", last


def _q_width(d: DumpSide, qkv_path: str) -> Optional[int]:
    """Per-rank q width of a fused QKV: the last dim of the sibling ``o_proj`` input (heads_r × head_dim)."""
    parent = qkv_path.rsplit(".", 1)[0]
    for e in d.entries:
        p, c = _cls(e)
        if p == parent + ".o_proj" and e.endswith(".forward.0"):
            s = d.slot(e, "input", "0")
            if s is not None and s.declared_shape:
                return int(s.declared_shape[-1])
    return None


def _same_stats(shards: List[DumpSide], sl: Slot) -> bool:
    ref = (sl.declared_shape, sl.declared_stats)
    for r in shards[1:]:
        o = r.slot(sl.entry, sl.io, sl.index)
        if o is None or (o.declared_shape, o.declared_stats) != ref:
            return False
    return True


def merged_stats(kind: str, shards: List[DumpSide], sl: Slot) -> Dict[str, Any]:
    """msprobe statistics of a merged slot, from its shards' statistics — only as statistics allow.

    Non-overlapping shards (``cat`` / ``segments``): Max = max of the shards' Max, Min = min of their Min, Mean =
    the element-weighted mean of their Means, Norm = the root of their summed squared Norms (float64); md5 cannot
    be merged. Replicated slots keep rank 0's statistics (the ranks must agree). A slot whose shards lack a
    statistic, or that cannot be merged (``refuse``), gets ``{"merge": <why not>}`` and no figures, so the
    summary gate reads it ``evidence_missing`` instead of comparing one shard's figures with a whole tensor.
    """
    import math

    if kind == "replicated":
        return dict(sl.declared_stats)
    if kind == "refuse":
        return {"merge": "statistics of these shards cannot be merged (the slot itself cannot)"}
    per = [r.slot(sl.entry, sl.io, sl.index) for r in shards]
    if not sl.declared_stats:
        return {}
    need = ("Max", "Min", "Mean", "Norm")
    if any(p is None or any(not isinstance((p.declared_stats or {}).get(k), (int, float)) or
                            isinstance((p.declared_stats or {}).get(k), bool) for k in need) for p in per):
        return {"merge": "a shard lacks Max/Min/Mean/Norm: the merged statistics are unknown"}
    sizes = [math.prod(int(x) for x in (p.declared_shape or [1])) for p in per]
    st = [p.declared_stats for p in per]
    n = sum(sizes)
    return {"Max": max(float(x["Max"]) for x in st), "Min": min(float(x["Min"]) for x in st),
            "Mean": sum(float(x["Mean"]) * k for x, k in zip(st, sizes)) / n if n else 0.0,
            "Norm": math.sqrt(sum(float(x["Norm"]) ** 2 for x in st)),
            "merge": f"merged from {len(per)} non-overlapping shards (max/min of extremes, element-weighted mean, "
                     "root of summed squared norms)"}


def merge_tp(shards: List[DumpSide], side: str) -> LogicalSide:
    """TP ranks of one stage (same modules) as one logical side; see the module docstring for the rules.

    Memory: a merged slot is built by one ``torch.cat`` of memory-mapped shards (segments are views),
    so a boundary costs one logical copy plus the mapped files; replicated slots are compared rank by
    rank against rank 0 and not copied.
    """
    import torch

    shards = sorted(shards, key=lambda r: r.rank if r.rank is not None else 0)
    d0, tp = shards[0], len(shards)
    plans: Dict[Tuple[str, str, str], Tuple[str, Any]] = {}
    slots = []
    counts: Dict[str, int] = {}
    for sl in d0.slots:
        kind, arg = _plan(d0, shards, sl, tp)
        plans[(sl.entry, sl.io, sl.index)] = (kind, arg)
        counts[kind] = counts.get(kind, 0) + 1
        shape = list(sl.declared_shape) if sl.declared_shape else sl.declared_shape
        if shape and kind == "cat":
            shape[arg] *= tp
        elif shape and kind == "segments":
            shape[arg[0]] = sum(arg[1]) * tp
        slots.append(replace(sl, declared_shape=shape, declared_stats=merged_stats(kind, shards, sl)))

    def load(sl: Slot):
        from tilake.diagnosis.selectors import Unavailable

        kind, arg = plans[(sl.entry, sl.io, sl.index)]
        rslots = [r.slot(sl.entry, sl.io, sl.index) for r in shards]
        for r, rs in zip(shards, rslots):
            if rs is None:
                raise Unavailable(f"not comparable: {r.dir.name} has no {sl.entry} {sl.io}.{sl.index} — "
                                  "every TP rank must dump the same slots")
        if kind == "refuse":
            raise Unavailable(f"not comparable: TP={tp} shards of {sl.entry} {sl.io}.{sl.index} — {arg}")
        if kind == "replicated":
            # rank by rank against rank 0: at most two copies of the tensor mapped at a time
            first = shards[0].load(rslots[0])
            for r, rs in zip(shards[1:], rslots[1:]):
                t = r.load(rs)
                if t.shape != first.shape or t.dtype != first.dtype or not torch.equal(t, first):
                    n = "shape" if t.shape != first.shape else int((t != first).sum())
                    raise Unavailable(f"TP ranks disagree on a tensor every rank must hold whole (all-reduced or "
                                      f"replicated): {r.dir.name} differs from {shards[0].dir.name} "
                                      f"({n} elements) on {sl.entry} {sl.io}.{sl.index}")
                del t
            return first
        # one output allocated, each rank's shard copied into place and released: one logical copy plus one
        # shard (1/tp) mapped at a time
        out = None
        dim = arg if kind == "cat" else arg[0]
        sizes = None if kind == "cat" else arg[1]
        for k, (r, rs) in enumerate(zip(shards, rslots)):
            t = r.load(rs)
            if out is None:
                shape = list(t.shape)
                shape[dim] *= tp
                out = torch.empty(shape, dtype=t.dtype)
                width = t.shape[dim]
            if t.shape[dim] != width or t.dim() != out.dim():
                raise Unavailable(f"not comparable: TP shards of {sl.entry} {sl.io}.{sl.index} differ in shape "
                                  f"({r.dir.name}: {list(t.shape)}) — every rank must hold an equal shard")
            if sizes is None:
                out.narrow(dim, k * width, width).copy_(t)
            else:   # fused: segment j of rank k goes to offset tp*sum(sizes[:j]) + k*sizes[j]
                for j, n in enumerate(sizes):
                    a = sum(sizes[:j])
                    out.narrow(dim, tp * a + k * n, n).copy_(t.narrow(dim, a, n))
            del t
        return out

    names = ", ".join(r.dir.name for r in shards)
    rec = Record(side, "tp", f"{side} TP={tp} merged from {names} (per slot: {counts.get('cat', 0)} concatenated, "
                             f"{counts.get('segments', 0)} per fused segment, {counts.get('replicated', 0)} replicated "
                             f"checked bitwise{', ' + str(counts['refuse']) + ' not mergeable' if counts.get('refuse') else ''})",
                 {"tp": tp, "ranks": [r.dir.name for r in shards], "plans": counts})
    return LogicalSide(d0, dict(d0.entries), dict(d0.parents), dict(d0.order), slots, load, [rec], sources=shards)


# ------------------------------------------------------------------------------ PP
def join_pp(stages: List[Any], side: str, layer_pattern: Optional[str] = None) -> LogicalSide:
    """Pipeline stages (each a DumpSide or a TP-merged LogicalSide) joined into one model.

    Raises:
        TilakeError: no stage or several stages hold the embedding / the final norm (the order is
            then unknown).
    """
    def has(st, words):
        return any(any(w in _cls(e)[0].split(".")[-1].lower() for w in words) and not LAYER_RE.search(e + ".")
                   for e in st.entries if e.startswith("Module."))

    firsts = [s for s in stages if has(s, ("embed",))]
    lasts = [s for s in stages if has(s, ("norm", "lm_head", "output_layer", "logits"))]
    if len(firsts) != 1 or len(lasts) != 1 or firsts[0] is lasts[0]:
        raise TilakeError(f"{side}: {len(stages)} stages (rank folders holding different modules) and "
                          f"{len(firsts)} hold the embedding, {len(lasts)} the final norm / output layer: "
                          "the stage order is unknown", path=stages[0].dir.parent)
    mid = sorted((s for s in stages if s is not firsts[0] and s is not lasts[0]), key=lambda s: s.rank or 0)
    ordered = [firsts[0]] + mid + [lasts[0]]
    lrx = re.compile(re.escape(layer_pattern).replace(r"\{i\}", r"(\d+)")) if layer_pattern else LAYER_RE
    entries: Dict[str, dict] = {}
    parents: Dict[str, Optional[str]] = {}
    order: Dict[str, int] = {}
    slots: List[Slot] = []
    src: Dict[Tuple[str, str, str], Tuple[Any, Slot]] = {}
    offset = 0
    base = 0
    mod_calls: Dict[str, int] = {}
    api_calls: Dict[str, int] = {}
    offsets = []
    comm = []
    for st in ordered:
        n_layers = 1 + max((int(m.group(1)) for e in st.entries for m in [lrx.search(e)] if m), default=-1)
        rename: Dict[str, str] = {}
        local_mod: Dict[str, int] = {}
        local_api: Dict[str, int] = {}
        # construct.json call order first (the joined parents replay it: tilake.diagnosis.order.event_times),
        # then entries it lacks in dump.json order
        for e in list(st.parents) + [k for k in sorted(st.order, key=st.order.get) if k not in st.parents]:
            new = lrx.sub(lambda m, off=offset: m.group(0).replace(m.group(1), str(int(m.group(1)) + off)), e) if offset else e
            m = MODULE_RE.match(new)
            if m:
                key = new[: -len(m.group("call"))]
                c = int(m.group("call")) + mod_calls.get(key, 0)
                local_mod[key] = max(local_mod.get(key, 0), int(m.group("call")) + 1)
                new = key + str(c)
            else:
                a = API_RE.match(new)
                if a:
                    c = int(a.group("counter")) + api_calls.get(a.group("api"), 0)
                    local_api[a.group("api")] = max(local_api.get(a.group("api"), 0), int(a.group("counter")) + 1)
                    new = f"{a.group('api')}.{c}.{a.group('dir')}"
                    if a.group("api").startswith("Distributed."):
                        comm.append(a.group("api"))
            rename[e] = new
        for k, v in local_mod.items():
            mod_calls[k] = mod_calls.get(k, 0) + v
        for k, v in local_api.items():
            api_calls[k] = api_calls.get(k, 0) + v
        for e, new in rename.items():
            if e in st.entries:
                entries[new] = st.entries[e]
            parents[new] = rename.get(st.parents.get(e), st.parents.get(e)) if st.parents.get(e) else None
            if e in st.order:
                order[new] = base + st.order[e]
        for sl in st.slots:
            ns = replace(sl, entry=rename.get(sl.entry, sl.entry), exec_order=base + sl.exec_order)
            slots.append(ns)
            src[(ns.entry, ns.io, ns.index)] = (st, sl)
        offsets.append(offset)
        offset += n_layers
        base += max(st.order.values(), default=0) + 1

    def load(sl: Slot):
        st, orig = src[(sl.entry, sl.io, sl.index)]
        return st.load(orig)

    def pt_of(sl: Slot) -> Path:
        st, orig = src[(sl.entry, sl.io, sl.index)]
        return st.pt_path(orig)

    label = lambda st: getattr(st, "records", None) and st.records[-1].detail.get("ranks") and \
        "+".join(st.records[-1].detail["ranks"]) or st.dir.name  # noqa: E731
    text = (f"{side} PP={len(ordered)}: stages {', '.join(label(s) for s in ordered)} joined, layers offset by "
            f"{', '.join(str(o) for o in offsets[1:])}" + (f" ({len(comm)} send/recv calls dumped)" if comm else ""))
    rec = Record(side, "pp", text, {"pp": len(ordered), "stages": [label(s) for s in ordered], "layer_offsets": offsets})
    inner = [r for s in ordered for r in records_of(s)]
    out = LogicalSide(ordered[0], entries, parents, order, sorted(slots, key=lambda s: s.exec_order), load, [rec], pt_of,
                      sources=ordered)
    out.records = inner + [rec]
    return out
