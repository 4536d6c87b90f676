"""Canonicalisation: each dump side as *logical tensors* — one tensor of the whole request per slot —
whatever layout it was written in, with a record of what was done.

Runs between reading a dump (:mod:`tilake.ingest.msprobe.reader`) and the boundary gates: every later
stage (selectors, transforms, comparisons, ULPs, stubs, hypotheses) sees a :class:`LogicalSide`, which
answers the same questions as a :class:`~tilake.ingest.msprobe.reader.DumpSide` (entries, construct.json
parents, slots, ``load``) but loads merged / joined / selected tensors.

What it undoes (each step appends a :class:`Record`; the task card and the reports print them):

* **tensor parallel** — several ``rank*`` folders of one step holding the same modules are one model
  (:func:`merge_tp`). Merge per slot by the module's parallel kind (vLLM / Megatron class names):
  ``QKVParallelLinear`` output and weight per fused segment (``[q_r | k_r | v_r]`` per rank → ``[q; k; v]``;
  q_r from the attention's ``o_proj`` input width), ``MergedColumnParallelLinear`` / ``SiluAndMul`` input /
  Megatron ``linear_fc1`` per ``[gate_r | up_r]`` segment, other column-parallel outputs/weights along the
  output dim, ``VocabParallelEmbedding`` / ``ParallelLMHead`` weights along the vocab, ``RowParallelLinear``
  weights and inputs along the input dim and their outputs after the all-reduce (identical on every rank:
  checked bitwise, one used); any other tensor is replicated when every rank's msprobe statistics agree
  (checked bitwise on load) and else sharded along its last dim (along dim -2 for a per-head norm whose
  weight spans the last dim). A rank that disagrees on a replicated tensor makes that boundary
  ``evidence_missing`` naming the rank.
* **pipeline stages** — rank folders holding different modules are stages (:func:`join_pp`): ordered by the
  embedding (first) and the final norm / output layer (last), their layer indices offset by the layers of the
  stages before, repeated non-layer modules and API counters renumbered.
* **which tokens** (:func:`select_tokens`) — by token ids: a padded training batch ``[B, S_pad]`` (the row and
  the window holding the other side's ids: left or right padding stripped), a prefix-cache hit (the training
  rows at the inference prefill's positions), a batched rollout (the request's rows of the concatenated
  batch) and (in :mod:`tilake.diagnosis.steps`) a chunked prefill over consecutive msprobe steps
  (:func:`join_chunks`).

No parallel metadata is in msprobe's dump.json (26.2: ``task``, ``level``, ``framework``, ``dump_data_dir``
only; source: shared/reference/msprobe-format.md §3, checked on real TP=2 dumps written by
``mindstudio-probe`` 26.2 with gloo), so TP/PP come from the folders, the module classes and the shapes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from tilake.errors import TilakeError
from tilake.ingest.msprobe.reader import API_RE, MODULE_RE, DumpSide, Slot

RANK_RE = re.compile(r"^rank(\d+)$")
LAYER_RE = re.compile(r"\.layers\.(\d+)\.")


@dataclass
class Record:
    """One canonicalisation step of one side (``kind``: tp | pp | tokens | chunks | replicas)."""

    side: str
    kind: str
    text: str
    detail: Dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> Dict[str, Any]:
        return {"side": self.side, "kind": self.kind, "text": self.text, **self.detail}


class NotMergeable(Exception):
    """A slot whose shards cannot be brought to one logical tensor (reason says which transform is missing)."""


# ------------------------------------------------------------------------------ the logical side
class LogicalSide:
    """A dump side seen as logical tensors; duck-types :class:`DumpSide` for every consumer.

    Args:
        proto: the side whose metadata (folder, meta, variants, warnings) describes the whole.
        entries / parents / order / slots: the logical names (after renaming for stages).
        loader: ``Slot → tensor`` for the logical slots (merging / joining / selecting on load).
        records: what was done (:class:`Record`), the proto's own records first.
    Raises:
        nothing; ``load`` raises :class:`TilakeError` (unreadable shard) or
        :class:`tilake.diagnosis.selectors.Unavailable` (shards that cannot be merged).
    """

    def __init__(self, proto, entries: Dict[str, dict], parents: Dict[str, Optional[str]], order: Dict[str, int],
                 slots: List[Slot], loader: Callable[[Slot], Any], records: List[Record],
                 pt_of: Optional[Callable[[Slot], Path]] = None) -> None:
        self.dir = proto.dir
        self.side = proto.side
        self.step, self.rank, self.proc = proto.step, proto.rank, proto.proc
        self.meta = proto.meta
        self.warnings = list(proto.warnings)
        self.construct_variant = proto.construct_variant
        self.stack_variant = proto.stack_variant
        self.data_dir = proto.data_dir
        self.entries, self.parents, self.order = entries, parents, order
        self.slots = slots
        self._by_key = {(s.entry, s.io, s.index): s for s in slots}
        self._by_data_name = {s.data_name: s for s in slots if s.data_name}
        self._loader = loader
        self._pt_of = pt_of or (lambda s: proto.pt_path(s))
        self.records: List[Record] = list(getattr(proto, "records", [])) + list(records)
        self._proto = proto

    slot = DumpSide.slot
    api_name = DumpSide.api_name
    children = DumpSide.children

    def load(self, slot: Slot):
        """The logical tensor of ``slot`` (see the class)."""
        return self._loader(slot)

    def pt_path(self, slot: Slot) -> Path:
        """The ``.pt`` of the first shard/stage holding the slot (for statistics checks and stub sources)."""
        return self._pt_of(slot)

    def stack_frames(self) -> Dict[str, List[str]]:
        return self._proto.stack_frames()


def records_of(dump) -> List[Record]:
    """The canonicalisation records of a side (empty for a plain :class:`DumpSide`)."""
    return list(getattr(dump, "records", []))


# ------------------------------------------------------------------------------ folders
def step_groups(path: Path) -> List[Tuple[str, List[Path]]]:
    """``[(step label, [rank folders])]`` of a dump path (root, step folder or rank folder), by step number.

    Several ``proc*`` folders of one step (a re-run without torch.distributed) stay ambiguous; several
    ``rank*`` folders are one model (TP ranks and/or PP stages, merged by :func:`open_step`).

    Raises:
        TilakeError: as :func:`tilake.ingest.msprobe.reader.locate_rank_dirs` for a missing path or no
            dump.json; ``proc*`` re-runs; rank folders that are not numbered 0..N-1; steps with differing
            rank sets (one line naming the step).
    """
    from tilake.ingest.msprobe.reader import locate_rank_dirs

    path = Path(path)
    if not path.is_dir() or (path / "dump.json").is_file():
        return [(path.name, locate_rank_dirs(path))]
    steps = [path] if re.match(r"^step\d+$", path.name) else sorted(
        (d for d in path.iterdir() if d.is_dir() and re.match(r"^step\d+$", d.name)), key=lambda d: int(d.name[4:]))
    out = []
    rank_sets = {}
    for s in steps:
        rd = sorted((d for d in s.iterdir() if d.is_dir() and re.match(r"^(rank\d*|proc\d+)$", d.name)
                     and (d / "dump.json").is_file()), key=lambda d: (len(d.name), d.name))
        if len(rd) > 1 and any(not RANK_RE.match(d.name) for d in rd):
            names = ", ".join(d.name for d in rd)
            raise TilakeError(f"{len(rd)} rank/proc folders in one step ({names}): ambiguous (proc* folders are "
                              "separate runs, not ranks of one model)", path=s,
                              hint="pass the one folder to analyse, e.g. " + str(rd[0]))
        if len(rd) > 1:
            nums = [int(RANK_RE.match(d.name).group(1)) for d in rd]
            gaps = sorted(set(range(max(nums) + 1)) - set(nums))
            if gaps:
                raise TilakeError(f"rank folder(s) {', '.join(f'rank{g}' for g in gaps)} missing: this step holds "
                                  f"{', '.join(d.name for d in rd)} (a model split over ranks needs every rank)", path=s)
        if rd:
            rank_sets[s.name] = tuple(d.name for d in rd)
            out.append((s.name, rd))
    multi = {k: v for k, v in rank_sets.items() if len(v) > 1}
    if multi and len(set(rank_sets.values())) > 1:
        ref = max(rank_sets.values(), key=len)
        bad = next(k for k, v in rank_sets.items() if v != ref)
        raise TilakeError(f"steps hold different ranks: {bad} has {', '.join(rank_sets[bad])}, others "
                          f"{', '.join(ref)} (mismatched steps: one model per step needs the same ranks)", path=path / bad)
    if not out:
        return [(path.name, locate_rank_dirs(path))]
    return out


def open_step(dirs: Sequence[Path], side: str, layer_pattern: Optional[str] = None):
    """One step's folders as one side: a :class:`DumpSide` for one folder, else TP-merged / PP-joined.

    Raises:
        TilakeError: unreadable dump.json of any rank; ranks whose module sets do not form equal TP
            groups per stage.
    """
    if len(dirs) == 1:
        return DumpSide(dirs[0], side)
    ranks = [DumpSide(d, side) for d in dirs]
    groups: Dict[frozenset, List[DumpSide]] = {}
    for r in ranks:
        groups.setdefault(_signature(r), []).append(r)
    stages = list(groups.values())
    sizes = {len(g) for g in stages}
    if len(sizes) != 1:
        raise TilakeError(f"{side}: {len(ranks)} ranks form stages of different sizes "
                          f"({', '.join(str(len(g)) for g in stages)} ranks): not a TP×PP layout", path=dirs[0].parent)
    merged = [merge_tp(g, side) if len(g) > 1 else g[0] for g in stages]
    if len(merged) == 1:
        return merged[0]
    return join_pp(merged, side, layer_pattern)


def _signature(d: DumpSide) -> frozenset:
    return frozenset(e for e in d.entries if e.startswith("Module."))


# ------------------------------------------------------------------------------ TP
_COLUMN = ("ColumnParallelLinear", "TEColumnParallelLinear", "TELayerNormColumnParallelLinear")
_ROW = ("RowParallelLinear", "TERowParallelLinear")
_VOCAB = ("VocabParallelEmbedding", "ParallelLMHead")


def _cls(entry: str) -> Tuple[str, str]:
    m = MODULE_RE.match(entry)
    return (m.group("path"), m.group("cls")) if m else ("", "")


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
        slots.append(replace(sl, declared_shape=shape))

    def load(sl: Slot):
        from tilake.diagnosis.selectors import Unavailable

        kind, arg = plans[(sl.entry, sl.io, sl.index)]
        parts = []
        for r in shards:
            rs = r.slot(sl.entry, sl.io, sl.index)
            if rs is None:
                raise Unavailable(f"not comparable: {r.dir.name} has no {sl.entry} {sl.io}.{sl.index} — "
                                  "every TP rank must dump the same slots")
            parts.append(r.load(rs))
        if kind == "refuse":
            raise Unavailable(f"not comparable: TP={tp} shards of {sl.entry} {sl.io}.{sl.index} — {arg}")
        if kind == "replicated":
            for r, t in zip(shards[1:], parts[1:]):
                if t.shape != parts[0].shape or t.dtype != parts[0].dtype or not torch.equal(t, parts[0]):
                    n = "shape" if t.shape != parts[0].shape else int((t != parts[0]).sum())
                    raise Unavailable(f"TP ranks disagree on a tensor every rank must hold whole (all-reduced or "
                                      f"replicated): {r.dir.name} differs from {shards[0].dir.name} "
                                      f"({n} elements) on {sl.entry} {sl.io}.{sl.index}")
            return parts[0]
        if kind == "cat":
            dim = arg
            return torch.cat(parts, dim=dim)
        dim, sizes = arg
        pieces = [p.narrow(dim, a, n) for k in range(len(sizes)) for p in parts
                  for a, n in [(sum(sizes[:k]), sizes[k])]]
        return torch.cat(pieces, dim=dim)

    names = ", ".join(r.dir.name for r in shards)
    rec = Record(side, "tp", f"{side} TP={tp} merged from {names} (per slot: {counts.get('cat', 0)} concatenated, "
                             f"{counts.get('segments', 0)} per fused segment, {counts.get('replicated', 0)} replicated "
                             f"checked bitwise{', ' + str(counts['refuse']) + ' not mergeable' if counts.get('refuse') else ''})",
                 {"tp": tp, "ranks": [r.dir.name for r in shards], "plans": counts})
    return LogicalSide(d0, dict(d0.entries), dict(d0.parents), dict(d0.order), slots, load, [rec])


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
        for e in list(st.order) + [k for k in st.parents if k not in st.order]:
            new = lrx.sub(lambda m: m.group(0).replace(m.group(1), str(int(m.group(1)) + offset)), e) if offset else e
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
    out = LogicalSide(ordered[0], entries, parents, order, sorted(slots, key=lambda s: s.exec_order), load, [rec], pt_of)
    out.records = inner + [rec]
    return out


# ------------------------------------------------------------------------------ tokens
def _token_dim(shape, n: int, skip_batch: bool) -> Optional[int]:
    for i, s in enumerate(shape):
        if skip_batch and i == 0:
            continue
        if s == n:
            return i
    return None


def select_rows(dump, side: str, n_total: int, start: int, end: int, text: str, batch: Optional[Tuple[int, int]] = None,
                kind: str = "tokens", detail: Optional[dict] = None) -> LogicalSide:
    """``dump`` with every non-parameter tensor cut to token rows ``start:end`` of its token dim (the first
    dim of size ``n_total``; after dim 0 when ``batch = (B, row)`` selects row ``row`` of a ``[B, ...]`` batch
    first, kept as a size-1 dim). Tensors without such a dim pass unchanged."""
    def cut_shape(shape):
        if not shape:
            return shape
        shape = list(shape)
        if batch and shape[0] == batch[0] and len(shape) >= 2:
            shape[0] = 1
            d = _token_dim(shape, n_total, True)
        elif batch:
            return shape
        else:
            d = _token_dim(shape, n_total, False)
        if d is not None:
            shape[d] = end - start
        return shape

    def load(sl: Slot):
        t = dump.load(sl)
        if sl.io == "parameter" or t.dim() == 0:
            return t
        if batch:
            if t.dim() < 2 or t.shape[0] != batch[0]:
                return t
            t = t[batch[1]:batch[1] + 1]
            d = _token_dim(t.shape, n_total, True)
        else:
            d = _token_dim(t.shape, n_total, False)
        return t if d is None else t.narrow(d, start, end - start)

    slots = [sl if sl.io == "parameter" else replace(sl, declared_shape=cut_shape(sl.declared_shape)) for sl in dump.slots]
    rec = Record(side, kind, text, dict(detail or {}, rows=[start, end], **({"batch_row": batch[1], "batch": batch[0]}
                                                                          if batch else {})))
    return LogicalSide(dump, dict(dump.entries), dict(dump.parents), dict(dump.order), slots, load, [rec],
                       lambda s: dump.pt_path(s))


def _windows(hay, needle) -> List[int]:
    n, m = hay.numel(), needle.numel()
    if m == 0 or m > n:
        return []
    return [o for o in range(n - m + 1) if bool((hay[o:o + m] == needle).all())]


def select_tokens(dumps: Dict[str, Any], ids: Dict[str, Any], positions: Optional[Any], pairing: dict
                  ) -> Tuple[Dict[str, Any], List[str]]:
    """Bring both sides to the same request's tokens, by token ids (see the module docstring).

    Args:
        dumps: side → dump. ids: side → token ids as dumped (``[B, S]`` / ``[1, S]`` / ``[S]``) or None.
        positions: the inference side's positions (1-D ints) or None. pairing: the user's options; a given
            ``request_tokens`` / ``request_index`` leaves the choice to them (no automatic selection).
    Returns:
        (dumps, notes) — the sides, wrapped where rows were selected; notes say why nothing was selected
        when the ids do not single the request out.
    """
    notes: List[str] = []
    tr, inf = ids.get("train"), ids.get("infer")
    if tr is None or inf is None or pairing.get("request_tokens") or pairing.get("request_index") is not None:
        return dumps, notes
    out = dict(dumps)
    inf_flat = inf.reshape(-1)
    if tr.dim() == 2 and tr.shape[0] > 1:   # padded training batch
        hits = [(b, o) for b in range(tr.shape[0]) for o in _windows(tr[b], inf_flat)]
        if len(hits) == 1:
            b, o = hits[0]
            s = tr.shape[1]
            e = o + inf_flat.numel()
            pad = ("left" if o > 0 and e == s else "right" if o == 0 and e < s else
                   "none" if o == 0 and e == s else "both sides")
            out["train"] = select_rows(dumps["train"], "train", s, o, e,
                                       f"padded training batch {list(tr.shape)}: row {b} selected by its token ids, "
                                       f"tokens {o}–{e - 1} ({pad} padding stripped)", batch=(tr.shape[0], b),
                                       detail={"padding": pad})
        else:
            notes.append(f"padded training batch {list(tr.shape)}: the inference ids occur in {len(hits)} rows/windows; "
                         "pass --request-index to pick the row")
        return out, notes
    trf = tr.reshape(-1)
    if trf.numel() == inf_flat.numel():
        return dumps, notes
    if trf.numel() > inf_flat.numel():   # prefix-cache hit (or a shorter inference prefill)
        hits = _windows(trf, inf_flat)
        pos0 = int(positions.reshape(-1)[0]) if positions is not None and positions.numel() else None
        if pos0 is not None and pos0 in hits:
            hits = [pos0]
        if len(hits) == 1:
            o, e = hits[0], hits[0] + inf_flat.numel()
            why = "prefix-cache hit" if o > 0 else "partial prefill"
            how = f"the inference positions start at {pos0}" if pos0 == o else "by token ids"
            out["train"] = select_rows(dumps["train"], "train", trf.numel(), o, e,
                                       f"{why}: training rows {o}–{e - 1} compared ({how}; the inference prefill "
                                       f"holds only the {e - o} uncached tokens)", detail={"reason": why})
        else:
            notes.append(f"the inference prefill holds {inf_flat.numel()} tokens, training {trf.numel()}; their ids "
                         f"occur {len(hits)} times in the training ids: pass --request-tokens")
        return out, notes
    hits = _windows(inf_flat, trf)   # batched rollout: the request inside a concatenated batch
    if len(hits) == 1:
        o, e = hits[0], hits[0] + trf.numel()
        out["infer"] = select_rows(dumps["infer"], "infer", inf_flat.numel(), o, e,
                                   f"batched rollout of {inf_flat.numel()} tokens: inference rows {o}–{e - 1} hold "
                                   "this request (by token ids)", detail={"reason": "batched rollout"})
    else:
        notes.append(f"the inference batch holds {inf_flat.numel()} tokens, training {trf.numel()}; the training ids "
                     f"occur {len(hits)} times in it: pass --request-tokens A:B")
    return out, notes


# ------------------------------------------------------------------------------ chunked prefill
def join_chunks(steps: List[Any], side: str, counts: List[int], labels: List[str]) -> LogicalSide:
    """Consecutive msprobe steps of one request's chunked prefill joined along the token dim.

    Args:
        steps: the step sides, in step order. counts: token rows of each step.
    Every slot present in all steps is joined (token-major tensors: along the first dim of the step's
    token count; parameters and tensors without a token dim: identical in every step, checked, one used).
    """
    import torch

    s0 = steps[0]
    n = sum(counts)

    def load(sl: Slot):
        from tilake.diagnosis.selectors import Unavailable

        parts = []
        for st in steps:
            o = st.slot(sl.entry, sl.io, sl.index)
            if o is None:
                raise Unavailable(f"not comparable: chunk {st.dir.parent.name} has no {sl.entry} {sl.io}.{sl.index}")
            parts.append(st.load(o))
        dims = [_token_dim(p.shape, c, False) if sl.io != "parameter" else None for p, c in zip(parts, counts)]
        if all(d is not None for d in dims) and len(set(dims)) == 1:
            return torch.cat(parts, dim=dims[0])
        if all(p.shape == parts[0].shape and torch.equal(p, parts[0]) for p in parts[1:]):
            return parts[0]
        raise Unavailable(f"not comparable: the chunks' {sl.entry} {sl.io}.{sl.index} have no common token dim "
                          f"({[list(p.shape) for p in parts]}) — join the chunk rows by hand")

    def cut(shape):
        if not shape:
            return shape
        d = _token_dim(shape, counts[0], False)
        if d is None:
            return shape
        shape = list(shape)
        shape[d] = n
        return shape

    slots = [sl if sl.io == "parameter" else replace(sl, declared_shape=cut(sl.declared_shape)) for sl in s0.slots]
    spans, a = [], 0
    for c in counts:
        spans.append(f"{a}–{a + c - 1}")
        a += c
    rec = Record(side, "chunks", f"{side} chunked prefill: steps {', '.join(labels)} joined (token rows "
                                 f"{', '.join(spans)}; positions continue)", {"steps": labels, "rows": counts})
    return LogicalSide(s0, dict(s0.entries), dict(s0.parents), dict(s0.order), slots, load, [rec])


def find_positions(dump):
    """The inference side's ``positions`` (1-D integer tensor): input 0 of a rotary-embedding module or a
    ``positions`` kwarg/input of any module; None when the dump holds none."""
    for sl in dump.slots:
        _p, c = _cls(sl.entry)
        named = (sl.io in ("input", "kwarg") and sl.index in ("positions", "position_ids"))
        rotary = "Rotary" in c and sl.io == "input" and sl.index == "0"
        if (named or rotary) and sl.declared_dtype and "int" in sl.declared_dtype and len(sl.declared_shape or []) == 1:
            try:
                return dump.load(sl)
            except Exception:  # noqa: BLE001 - positions are optional evidence
                return None
    return None


def shape_transform(a, b) -> str:
    """The transform that would make shapes ``a`` and ``b`` comparable (text)."""
    if not a or not b:
        return "the boundary map's transforms for this layout"
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        if len(diff) == 1:
            i = diff[0]
            hi, lo = max(a[i], b[i]), min(a[i], b[i])
            if lo and hi % lo == 0:
                return (f"dim {i} differs by a factor {hi // lo}: a TP shard (pass the step folder holding every rank*) "
                        "or a fused / padded tensor (slice, unpad or select the request's rows)")
            return f"dim {i} differs ({a[i]} vs {b[i]}): select the same tokens / rows on both sides"
    import math
    if math.prod(a) == math.prod(b):
        return "same number of elements: a reshape / permute in the boundary map"
    return "the boundary map's transforms for this layout (fused slices, unpad, row selection)"
