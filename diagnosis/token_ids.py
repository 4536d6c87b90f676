"""Token ids compared before any tensor: when the two sides were fed different tokens, that is the
first finding, and no boundary difference downstream is a kernel's.

The ids are the positional input 0 of the embedding boundary's module (the map's ``token_ids``
selectors when given, else the ``layer_input.first`` boundary — or the first ``op: embedding``
boundary — with ``io: input, index: 0`` and no transforms). Both sides are flattened (HF feeds
``[1, S]``, vLLM ``[S]``); ``pairing.request_tokens: [a, b]`` slices the longer inference side.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from tilake.diagnosis import selectors as S
from tilake.errors import TilakeError
from tilake.models.boundary_maps import SIDES
from tilake.vocab import BoundaryStatus

PSEUDO = "token_ids"  # the pseudo-boundary feeding the embedding in classification


def _selector(bmap: dict, side: str) -> Optional[dict]:
    """The token-id selector of one side (see the module docstring), or None."""
    given = (bmap.get("token_ids") or {}).get(side)
    if given:
        return given
    first = (bmap.get("layer_input") or {}).get("first")
    items = [b for b in bmap.get("boundaries") or [] if not b.get("per_layer")]
    b = next((x for x in items if x.get("name") == first), None) or \
        next((x for x in items if x.get("op") == "embedding"), None)
    spec = (b.get(side) if b else None) or {}
    if "module" not in spec:
        return None
    return {"module": spec["module"], "call": spec.get("call", 0), "io": "input", "index": 0}


def read_ids(view, bmap: dict, side: str, flat: bool = True):
    """One side's token ids as an int64 tensor (flat, or as dumped when ``flat=False``: ``[B, S]`` of a
    padded batch), or None when the dump does not hold them."""
    sel = _selector(bmap, side)
    if sel is None:
        return None
    try:
        t = view.dump.load(S.resolve(view, sel, side).slots[0])
    except (S.Unavailable, TilakeError):
        return None
    if t.is_floating_point() or t.is_complex():
        return None
    return t.reshape(-1).long() if flat else t.long()


def compare_token_ids(pair) -> Dict[str, Any]:
    """Compare the two sides' token ids.

    Returns:
        ``{"status": "equal" | "differ" | "evidence_missing", "positions": int, "differing": int,
        "first_differing": [int], "shift": int | None, "text": str}``; ``shift`` is k when ``infer[i] ==
        train[i + k]`` on the overlap (|k| ≤ 2).
    """
    ids: Dict[str, Any] = {}
    for s in SIDES:
        if _selector(pair.bmap, s) is None:
            return _missing("the map names no embedding module to read token ids from")
        ids[s] = read_ids(pair.views[s], pair.bmap, s)
        if ids[s] is None:
            return _missing(f"the {s} dump holds no integer token ids at the embedding's input 0")
    tr, inf = ids["train"], ids["infer"]
    rng = pair.pairing.get("request_tokens")
    if rng and inf.numel() > tr.numel():
        inf = inf[int(rng[0]):int(rng[1])]
    if tr.numel() != inf.numel():
        return {"status": "differ", "positions": max(tr.numel(), inf.numel()), "differing": None,
                "first_differing": [], "shift": None,
                "text": f"token ids differ in length: train {tr.numel()}, infer {inf.numel()} "
                        "(one side holds more tokens: pass --request-tokens A:B)"}
    diff = (tr != inf).nonzero().reshape(-1)
    n, k = tr.numel(), int(diff.numel())
    if k == 0:
        return {"status": "equal", "positions": n, "differing": 0, "first_differing": [], "shift": None,
                "text": f"token ids equal at all {n} positions"}
    shift = next((d for d in (1, -1, 2, -2) if n > abs(d) and
                  bool((inf[:-d] == tr[d:]).all() if d > 0 else (inf[-d:] == tr[:d]).all())), None)
    how = f" (infer position i holds train token i{shift:+d}: shifted by {abs(shift)})" if shift else ""
    return {"status": "differ", "positions": n, "differing": k, "first_differing": diff[:8].tolist(), "shift": shift,
            "text": f"token ids differ at {k}/{n} positions{how}: the two sides were fed different tokens"}


def _missing(reason: str) -> Dict[str, Any]:
    return {"status": BoundaryStatus.EVIDENCE_MISSING, "positions": None, "differing": None, "first_differing": [],
            "shift": None, "text": f"token ids not compared: {reason}"}


def feed_embedding(rows: List[dict], by: Dict[str, dict], tid: Dict[str, Any]) -> None:
    """When the token ids differ, make them the (non-EXACT) input of the embedding rows (in place)."""
    if tid.get("status") != "differ":
        return
    by[PSEUDO] = {"boundary": PSEUDO, "status": BoundaryStatus.NOT_EXACT}
    for r in rows:
        if r.get("op") == "embedding" and not r.get("inputs"):
            r["inputs"] = [PSEUDO]
