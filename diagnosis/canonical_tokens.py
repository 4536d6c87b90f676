"""Which tokens (:mod:`tilake.diagnosis.canonical`): padded batch row, prefix-cache hit, batched rollout, chunked
prefill; selection by token ids, rows cut on load."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

from tilake.diagnosis.logical import LogicalSide, Record, _cls
from tilake.ingest.msprobe.reader import Slot


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
            how = f"the inference positions start at {pos0}" if pos0 == o else "by token ids"
            if o > 0:
                why, what = "prefix-cache hit", f"the inference prefill holds only the {e - o} uncached tokens"
            else:   # the training forward runs over prompt + response (verl's log-prob pass), the prefill the prompt
                why, what = "prompt rows", (f"the training forward holds {trf.numel()} tokens, the inference prefill "
                                            f"the {e - o} prompt tokens (the rest is the response)")
            out["train"] = select_rows(dumps["train"], "train", trf.numel(), o, e,
                                       f"{why}: training rows {o}–{e - 1} compared ({how}; {what})",
                                       detail={"reason": why})
        else:
            notes.append(f"the inference prefill holds {inf_flat.numel()} tokens, training {trf.numel()}; their ids "
                         f"occur {len(hits)} times in the training ids: pass --request-tokens")
        return out, notes
    hits = _windows(inf_flat, trf)   # batched rollout: the request inside a concatenated batch
    how = "by token ids"
    if len(hits) > 1:   # the ids occur more than once (a shared prefix, a longer request): whole requests only
        whole, how = _whole_requests(hits, trf.numel(), inf_flat.numel(), positions, pairing.get("cu_seqlens"))
        hits = whole if whole else hits
    if len(hits) == 1:
        o, e = hits[0], hits[0] + trf.numel()
        out["infer"] = select_rows(dumps["infer"], "infer", inf_flat.numel(), o, e,
                                   f"batched rollout of {inf_flat.numel()} tokens: inference rows {o}–{e - 1} hold "
                                   f"this request ({how})", detail={"reason": "batched rollout"})
    else:
        notes.append(f"the inference batch holds {inf_flat.numel()} tokens, training {trf.numel()}; the training ids "
                     f"occur {len(hits)} times in it: pass --request-tokens A:B")
    return out, notes


def _whole_requests(hits: List[int], n: int, total: int, positions, cu_seqlens) -> Tuple[List[int], str]:
    """The windows among ``hits`` that are one whole request of a concatenated batch: their start and end are
    request boundaries of ``cu_seqlens`` (vLLM's ``[0, n_0, n_0 + n_1, …]``) when given, else their positions
    run ``0 … n-1`` and restart (or end) right after (vLLM numbers each request's positions from 0)."""
    if cu_seqlens:
        cut = {int(c) for c in cu_seqlens}
        return [o for o in hits if o in cut and o + n in cut], f"by token ids and cu_seqlens {list(cu_seqlens)}"
    p = positions.reshape(-1) if positions is not None else None
    if p is None or p.numel() != total:
        return [], "by token ids"
    ok = [o for o in hits if int(p[o]) == 0 and int(p[o + n - 1]) == n - 1 and (o + n == total or int(p[o + n]) == 0)]
    return ok, f"by token ids and positions: the whole request at positions 0–{n - 1}"


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
    return LogicalSide(s0, dict(s0.entries), dict(s0.parents), dict(s0.order), slots, load, [rec], sources=steps)


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
