"""From resolved slots to the comparable tensor: combine, slice fused q/k/v and gate/up, layouts,
batch dims (squeeze, request row, unpadding).

Fused weights are sliced by the map's dims (``q_size``, ``kv_size``, ``head_dim``, ``inter``; read from
parameter shapes by :func:`tilake.diagnosis.selectors.resolve_dims`). Where a fused tensor's layout is
not known (``layout: auto``) one correlation scan (:func:`_layout_scan`) picks the candidate slice that
matches the other side best and records the scores.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from tilake.diagnosis.localise import pearson
from tilake.diagnosis.selectors import Resolved, SideView, Unavailable, eval_expr, resolve


def materialise(view: SideView, res: Resolved, dims: Dict[str, int], context: Optional[dict] = None,
                other=None) -> Tuple[Any, List[str]]:
    """Load and transform a resolved selector's tensor(s).

    Args:
        context: side-level data for transforms (``request_index``).
        other: the other side's transformed tensor (used by the ``layout: auto`` correlation scans),
            or None.
    Returns:
        (tensor, notes) — notes record every transform applied and scan evidence.
    Raises:
        TilakeError: a ``.pt`` is missing, truncated or refused (the caller records MISSING).
        Unavailable: a transform cannot apply (e.g. padded without mask/cu_seqlens).
    """
    import torch

    notes: List[str] = []
    ts = [view.dump.load(s) for s in res.slots]
    for sl, t in zip(res.slots, ts):
        if sl.declared_dtype and sl.declared_dtype != str(t.dtype):
            notes.append(f"warning: dump.json says {sl.declared_dtype} for {sl.data_name}, the file holds {t.dtype} "
                         "(the file is used)")
    if res.combine == "sum":
        acc = getattr(torch, res.accumulate or "float32")
        t = ts[0].to(acc)
        for x in ts[1:]:
            t = t + x.to(acc)
        t = t.to(ts[0].dtype)
        notes.append(f"sum of {len(ts)} tensors in {res.accumulate or 'float32'}, rounded to {ts[0].dtype}")
    elif res.combine == "concat_last":
        t = torch.cat(ts, dim=-1)
        notes.append(f"concatenated {len(ts)} tensors on the last dim")
    else:
        t = ts[0]
    for tr in res.transforms:
        t = apply_transform(t, tr, dims, view, context if context is not None else {}, notes, other)
    return t, notes


def tensor_or_none(view: SideView, sel: Any, side: str, dims: Dict[str, int], context: Optional[dict] = None):
    """The tensor a selector names on one side after its transforms, or None when it does not resolve, a file
    is unreadable, or it is empty. ``sel`` may be a list of alternatives: the first that resolves wins."""
    from tilake.errors import TilakeError

    if isinstance(sel, list):
        return next((t for t in (tensor_or_none(view, x, side, dims, context) for x in sel) if t is not None), None)
    if not sel:
        return None
    try:
        t, _notes = materialise(view, resolve(view, sel, side), dims, dict(context or {}), None)
    except (Unavailable, TilakeError):
        return None
    return t if getattr(t, "numel", lambda: 0)() else None


def _qkv_split(t, layout: str, part: str, dims: Dict[str, int]):
    """One of q / k / v out of a fused ``[..., q_size + 2*kv_size]`` tensor.

    ``concat``: ``[q; k; v]`` (vLLM ``QKVParallelLinear``); ``per_group``: per query group
    ``[q_g…, k_g, v_g]`` (Megatron ``linear_qkv``).
    Raises:
        Unavailable: the last dim is not ``q_size + 2*kv_size``.
    """
    q, kv, hd = dims["q_size"], dims["kv_size"], dims["head_dim"]
    if t.shape[-1] != q + 2 * kv:
        raise Unavailable(f"fused qkv last dim {t.shape[-1]} != q_size+2*kv_size = {q + 2 * kv}")
    if layout == "concat":
        a, b = {"q": (0, q), "k": (q, q + kv), "v": (q + kv, q + 2 * kv)}[part]
        return t[..., a:b]
    groups = kv // hd
    qg = q // groups
    g = t.reshape(*t.shape[:-1], groups, qg + 2 * hd)
    a, b = {"q": (0, qg), "k": (qg, qg + hd), "v": (qg + hd, qg + 2 * hd)}[part]
    return g[..., a:b].reshape(*t.shape[:-1], (b - a) * groups)


def _layout_scan(cands: Dict[str, Any], other, fused: str, part: str, label: str, context: dict,
                 notes: List[str]) -> str:
    """Pick the layout whose candidate correlates best (Pearson r) with the other side's tensor.

    Args:
        cands: layout name → candidate tensor. fused: ``"qkv"`` | ``"gate_up"`` (for messages).
        part: the part recorded in ``context["_scans"]``; label: the part as the note spells it.
    Returns:
        the chosen layout; appends a note and a ``{part, scores, chosen, layouts_coincide}`` scan
        record to ``context["_scans"]``.
    Raises:
        Unavailable: no other tensor, or no candidate has the other side's shape.
    """
    import torch

    if other is None:
        raise Unavailable(f"{fused} layout 'auto' needs the other side's tensor for a correlation scan")
    rng = context.get("request_tokens")
    scan = {lay: pearson(*_scan_pair(c, other, rng)) for lay, c in cands.items()}
    best = max(scan, key=lambda k: -2 if scan[k] is None else scan[k])
    if scan[best] is None:
        c = next(iter(cands.values()))
        hint = ""
        if c.dim() >= 1 and other.dim() >= 1 and c.shape[1:] == other.shape[1:] and c.shape[0] != other.shape[0]:
            hint = (f" (one side holds {max(c.shape[0], other.shape[0])} token rows, the other "
                    f"{min(c.shape[0], other.shape[0])}: pass --request-tokens 0:{min(c.shape[0], other.shape[0])} "
                    "with the request's rows)")
        raise Unavailable(f"{fused} layout scan: no candidate slice has the other side's shape {list(other.shape)}{hint}")
    first, second = list(cands.values())[:2]
    same = tuple(first.shape) == tuple(second.shape) and torch.equal(first, second)
    ev = ", ".join(f"{k} r={v:.4f}" if v is not None else f"{k} r=n/a" for k, v in scan.items())
    notes.append(f"{fused} layout scan ({label}): {ev} → {best}" + (" (layouts coincide)" if same else ""))
    context.setdefault("_scans", []).append({"part": part, "scores": scan, "chosen": best, "layouts_coincide": same})
    return best


def _scan_pair(c, other, rng):
    """The candidate (cut to the request's token rows ``rng`` when that is what separates it from the
    other side) and the other side's tensor; ``(None, None)`` when the shapes still differ."""
    if rng and c.dim() >= 1 and c.shape[1:] == other.shape[1:] and c.shape[0] > other.shape[0] \
            and int(rng[1]) - int(rng[0]) == other.shape[0] and int(rng[1]) <= c.shape[0]:
        c = c[int(rng[0]):int(rng[1])]
    return (c, other) if tuple(c.shape) == tuple(other.shape) else (None, None)


def _need_dims(dims: Dict[str, int], names: Tuple[str, ...], what: str) -> None:
    for need in names:
        if need not in dims:
            raise Unavailable(f"{what} needs dim {need!r}, not derivable from this dump")


def apply_transform(t, tr: Any, dims: Dict[str, int], view: Optional[SideView], context: dict,
                    notes: List[str], other=None):
    """Apply one transform (see the map format); appends a note describing it.

    Raises:
        Unavailable: the transform does not fit the tensor (wrong size-1 dim, missing dims,
            padded batch without a mask or cu_seqlens); a transform that does not fit the tensor's
            layout (torch raises) reads ``not comparable: transform ... does not fit tensor ...``.
    """
    if isinstance(tr, str):
        tr = {tr: None}
    (kind, arg), = tr.items()
    try:
        return _apply(t, kind, arg, dims, view, context, notes, other)
    except (RuntimeError, IndexError, ValueError, TypeError) as exc:
        # a tensor the transform does not fit (a 4-D RoPE tensor of a batch of 2 under a 3-D permute):
        # the boundary is evidence_missing, never a traceback
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise Unavailable(f"not comparable: transform {kind} {arg if arg is not None else ''} does not fit tensor "
                          f"{list(t.shape)} ({type(exc).__name__}: {msg[:160]}) — the tensor has a layout the map does "
                          "not expect (a batch dim > 1, extra heads dim): select the request's row or extend the map") from exc


def _apply(t, kind: str, arg: Any, dims: Dict[str, int], view: Optional[SideView], context: dict,
           notes: List[str], other=None):
    """One transform (see :func:`apply_transform`)."""
    import torch

    shape0 = list(t.shape)
    if kind == "squeeze":
        d = int(arg or 0)
        if t.dim() > d and t.shape[d] == 1:
            t = t.squeeze(d)
            notes.append(f"squeeze dim {d}: {shape0}→{list(t.shape)}")
        else:
            notes.append(f"squeeze dim {d} skipped: {shape0} has no size-1 dim {d}")
    elif kind == "unsqueeze":
        t = t.unsqueeze(int(arg or 0))
    elif kind == "slice_last":
        a, b = eval_expr(arg[0], dims), eval_expr(arg[1], dims)
        if b > t.shape[-1]:
            raise Unavailable(f"slice [{a}:{b}] beyond last dim {t.shape[-1]}")
        t = t[..., a:b]
        notes.append(f"slice last dim [{a}:{b}]")
    elif kind == "slice_first":
        a, b = eval_expr(arg[0], dims), eval_expr(arg[1], dims)
        if b > t.shape[0]:
            raise Unavailable(f"slice rows [{a}:{b}] beyond dim 0 size {t.shape[0]}")
        t = t[a:b]
        notes.append(f"slice dim 0 [{a}:{b}]")
    elif kind == "permute":
        t = t.permute(*[int(x) for x in arg])
        notes.append(f"permute {list(arg)}: {shape0}→{list(t.shape)}")
    elif kind == "flatten_from":
        d = int(arg)
        t = t.reshape(*t.shape[:d], -1)
        notes.append(f"flatten from dim {d}: {shape0}→{list(t.shape)}")
    elif kind == "reshape":
        t = t.reshape(*[eval_expr(x, dims) for x in arg])
        notes.append(f"reshape {shape0}→{list(t.shape)}")
    elif kind == "qkv_part":
        part, layout = arg["part"], arg.get("layout", "auto")
        _need_dims(dims, ("q_size", "kv_size", "head_dim"), "qkv slicing")
        if layout == "auto":
            cands = {lay: _qkv_split(t, lay, part, dims) for lay in ("concat", "per_group")}
            t = cands[_layout_scan(cands, other, "qkv", part, part, context, notes)]
        else:
            t = _qkv_split(t, layout, part, dims)
            notes.append(f"qkv part {part} ({layout} layout)")
    elif kind == "qkv_to_concat":
        # Megatron linear_qkv (per query group [q_g.., k_g, v_g]) → vLLM order [q; k; v]
        layout = (arg or {}).get("layout", "auto")
        _need_dims(dims, ("q_size", "kv_size", "head_dim"), "qkv regrouping")
        cands = {lay: torch.cat([_qkv_split(t, lay, p, dims) for p in ("q", "k", "v")], dim=-1)
                 for lay in ("concat", "per_group")}
        if layout == "auto":
            layout = _layout_scan(cands, other, "qkv", "qkv", "whole qkv", context, notes)
        t = cands[layout]
        notes.append(f"qkv regrouped from {layout} layout to [q; k; v]")
    elif kind == "gate_up_part":
        # fused gate/up: vLLM / Megatron concatenate [gate; up]; some fused kernels interleave rows
        part, layout = arg["part"], arg.get("layout", "auto")
        _need_dims(dims, ("inter",), "gate/up slicing")
        i = dims["inter"]
        if t.shape[-1] != 2 * i:
            raise Unavailable(f"fused gate_up last dim {t.shape[-1]} != 2*inter = {2 * i}")
        k = 0 if part == "gate" else 1
        cands = {"concat": t[..., k * i:(k + 1) * i], "interleaved": t[..., k::2]}
        if layout == "auto":
            layout = _layout_scan(cands, other, "gate_up", part, part, context, notes)
        t = cands[layout]
        notes.append(f"gate_up part {part} ({layout} layout)")
    elif kind == "last_rows":
        # vLLM's logits processor computes the sampled position(s) only: the last n token rows
        n = int(arg or 1)
        t = t[-n:]
        notes.append(f"last {n} token row(s) (the sampled position): {shape0}→{list(t.shape)}")
    elif kind == "select_row":
        idx = context.get("request_index", arg if isinstance(arg, int) else None)
        if idx is None:
            raise Unavailable("select_row needs the request's row index (pairing.request_index)")
        t = t[int(idx)]
        notes.append(f"select request row {idx}: {shape0}→{list(t.shape)}")
    elif kind == "unpad":
        t = unpad(t, arg, view, dims, context, notes)
    else:
        raise Unavailable(f"unknown transform {kind!r} in boundary map")
    return t


def unpad(t, arg: dict, view: Optional[SideView], dims, context: dict, notes: List[str]):
    """Padded ``[B, S, ...]`` → packed ``[sum(len_b), ...]`` with an attention mask or cu_seqlens.

    The mask (``[B, S]``, nonzero = real token) gives exact positions; ``cu_seqlens`` gives
    lengths and assumes right padding (noted). Raises :class:`Unavailable` without either.
    """
    import torch

    lengths = None
    mask = None
    src = None
    if arg and "mask" in arg and view is not None:
        r = resolve(view, arg["mask"], view.dump.side)
        mask = view.dump.load(r.slots[0])
        src = "attention mask"
    elif arg and "cu_seqlens" in arg:
        cs = arg["cu_seqlens"]
        if isinstance(cs, dict) and view is not None:
            cs = view.dump.load(resolve(view, cs, view.dump.side).slots[0]).tolist()
        lengths = [int(b) - int(a) for a, b in zip(cs, cs[1:])]
        src = "cu_seqlens (right padding assumed)"
    elif context.get("cu_seqlens"):
        cs = context["cu_seqlens"]
        lengths = [int(b) - int(a) for a, b in zip(cs, cs[1:])]
        src = "cu_seqlens from the pairing (right padding assumed)"
    if mask is None and lengths is None:
        raise Unavailable("padded batch: no attention mask or cu_seqlens to remove padding; "
                          "refusing to compare padded tensors")
    if mask is not None:
        m = mask.reshape(mask.shape[0], -1).bool()
        if m.shape[0] != t.shape[0] or m.shape[1] != t.shape[1]:
            raise Unavailable(f"attention mask {list(mask.shape)} does not fit tensor {list(t.shape)}")
        out = t[m]
    else:
        if len(lengths) != t.shape[0] or max(lengths) > t.shape[1]:
            raise Unavailable(f"cu_seqlens lengths {lengths} do not fit padded tensor {list(t.shape)}")
        out = torch.cat([t[b, :n] for b, n in enumerate(lengths)], dim=0)
    notes.append(f"unpad with {src}: {list(t.shape)}→{list(out.shape)}")
    return out
